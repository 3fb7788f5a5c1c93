//! Table tests: pools, a pod and placement policies in, the chosen pool or the reasons out;
//! the shipped placement policies' Rego tests; StackL's `hasparams` template as StackL
//! publishes it.

use serde_json::{json, Value as Json};

use super::*;
use crate::policy::engine::TemplateKind;
use crate::policy::template::{from_rego, from_yaml, TestFile};
use crate::policy::{kind_of, Policy};

const FITSRESOURCES: &str = include_str!("../../../policies/placement/fitsresources.yaml");
const GPUONLY: &str = include_str!("../../../policies/placement/gpuonly.yaml");
const FITSRESOURCES_TEST: &str =
    include_str!("../../../policies/placement/fitsresources_test.rego");
const GPUONLY_TEST: &str = include_str!("../../../policies/placement/gpuonly_test.rego");
/// StackL's SAT policy template example, byte for byte.
const HASPARAMS: &str = include_str!("../../../testdata/stackl/hasparams.yaml");

fn shipped_templates() -> Vec<Template> {
    vec![
        from_yaml(
            FITSRESOURCES,
            "policies/placement/fitsresources.yaml".into(),
        )
        .unwrap(),
        from_yaml(GPUONLY, "policies/placement/gpuonly.yaml".into()).unwrap(),
    ]
}

fn shipped() -> PlacementSet {
    PlacementSet::compile(&shipped_templates()).unwrap()
}

fn config(text: &str) -> Config {
    Config::parse(text, "t").unwrap()
}

const AUTO: &str = "placement:\n  chooseValue: auto\n  pools: [general, large, gpu, gone]\n";

/// `count` nodes of `pool`, each with `allocatable`, Ready.
fn nodes(pool: &str, count: usize, allocatable: Json, extra_labels: Json) -> Vec<NodeFacts> {
    (0..count)
        .map(|i| {
            let mut labels = json!({"agentpool": pool, "kubernetes.io/os": "linux"});
            for (k, v) in extra_labels.as_object().unwrap() {
                labels[k] = v.clone();
            }
            NodeFacts::from_node(&json!({
                "metadata": {"name": format!("{pool}-{i}"), "labels": labels},
                "status": {
                    "allocatable": allocatable,
                    "conditions": [{"type": "Ready", "status": "True"}],
                },
            }))
            .unwrap()
        })
        .collect()
}

/// general (4 cpu, 16Gi), gpu (8 cpu, 56Gi, one nvidia.com/gpu; labelled accelerator=nvidia),
/// large (32 cpu, 128Gi).
fn cluster() -> Vec<PoolFacts> {
    let mut all = nodes(
        "general",
        3,
        json!({"cpu": "3860m", "memory": "16Gi", "pods": "110"}),
        json!({}),
    );
    all.extend(nodes(
        "large",
        2,
        json!({"cpu": "31750m", "memory": "128Gi", "pods": "110"}),
        json!({}),
    ));
    all.extend(nodes(
        "gpu",
        2,
        json!({"cpu": "7820m", "memory": "56Gi", "nvidia.com/gpu": "1", "pods": "110"}),
        json!({"accelerator": "nvidia"}),
    ));
    PoolFacts::gather(&all, "agentpool")
}

fn only(pools: &[PoolFacts], names: &[&str]) -> Vec<PoolFacts> {
    pools
        .iter()
        .filter(|p| names.contains(&p.name.as_str()))
        .cloned()
        .collect()
}

/// A pod whose one container requests `requests`.
fn pod(requests: Json) -> Json {
    json!({
        "metadata": {"name": "web", "namespace": "team-a"},
        "spec": {"containers": [{"name": "app", "image": "registry.example.com/app:1",
                                 "resources": {"requests": requests}}]},
    })
}

fn strings(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| s.to_string()).collect()
}

#[test]
fn choose_table() {
    let all = cluster();
    let no_gpu = only(&all, &["general", "large"]);
    let small_pools = only(&all, &["general", "gpu"]);
    let two_accelerators = "placement:\n  chooseValue: auto\n  pools: [general, large, gpu, gone]\n  policies:\n    gpuonly:\n      parameters: {resources: [nvidia.com/gpu, amd.com/gpu]}\n";
    // (case, pools, pod, config, chosen pool or reasons)
    type Case<'a> = (
        &'a str,
        &'a [PoolFacts],
        Json,
        &'a str,
        Result<&'a str, Vec<String>>,
    );
    let cases: Vec<Case> = vec![
        (
            "small pod: the first pool in order",
            &all[..],
            pod(json!({"cpu": "500m", "memory": "1Gi"})),
            AUTO,
            Ok("general"),
        ),
        (
            "small pod: preference reorders",
            &all[..],
            pod(json!({"cpu": "500m", "memory": "1Gi"})),
            "placement:\n  chooseValue: auto\n  pools: [general, large, gpu, gone]\n  preference: [large, general]\n",
            Ok("large"),
        ),
        (
            "small pod: a preferred pool without nodes is skipped",
            &all[..],
            pod(json!({"cpu": "500m"})),
            "placement:\n  chooseValue: auto\n  pools: [general, large, gpu, gone]\n  preference: [gone, large]\n",
            Ok("large"),
        ),
        (
            "small pod: a preferred GPU pool is still refused to it",
            &all[..],
            pod(json!({"cpu": "500m"})),
            "placement:\n  chooseValue: auto\n  pools: [general, large, gpu, gone]\n  preference: [gpu]\n",
            Ok("general"),
        ),
        (
            "large pod: the pool that fits",
            &all[..],
            pod(json!({"cpu": "16", "memory": "64Gi"})),
            AUTO,
            Ok("large"),
        ),
        (
            "GPU pod: the GPU pool",
            &all[..],
            pod(json!({"cpu": "2", "memory": "8Gi", "nvidia.com/gpu": "1"})),
            "placement:\n  chooseValue: auto\n  pools: [general, large, gpu, gone]\n  preference: [large, general]\n",
            Ok("gpu"),
        ),
        (
            "GPU pod asking for a limit only: the limit is its request",
            &all[..],
            json!({"metadata": {"name": "train"}, "spec": {"containers": [
                {"name": "t", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}),
            AUTO,
            Ok("gpu"),
        ),
        (
            "impossible pod: both policies' messages",
            &all[..],
            pod(json!({"cpu": "100", "amd.com/gpu": "1"})),
            two_accelerators,
            Err(strings(&[
                "fitsresources: no pool has or can launch a node with room for the pod's requests (amd.com/gpu 1, cpu 100000m)",
                "gpuonly: the pod requests amd.com/gpu, which no pool has allocatable",
            ])),
        ),
        (
            "GPU pod in a cluster without GPUs: both policies' messages",
            &no_gpu[..],
            pod(json!({"cpu": "1", "nvidia.com/gpu": "1"})),
            AUTO,
            Err(strings(&[
                "fitsresources: no pool has or can launch a node with room for the pod's requests (cpu 1000m, nvidia.com/gpu 1)",
                "gpuonly: the pod requests nvidia.com/gpu, which no pool has allocatable",
            ])),
        ),
        (
            "too large for a node: one policy's message",
            &all[..],
            pod(json!({"cpu": "2", "memory": "200Gi"})),
            AUTO,
            Err(strings(&[
                "fitsresources: no pool has or can launch a node with room for the pod's requests (cpu 2000m, memory 200Gi)",
            ])),
        ),
        (
            "each policy accepts a pool, but not the same one",
            &small_pools[..],
            pod(json!({"cpu": "6"})),
            AUTO,
            Err(strings(&[
                "no pool is accepted by every placement policy",
                "fitsresources: accepts only gpu",
                "gpuonly: accepts only general",
            ])),
        ),
        (
            "no pools",
            &[],
            pod(json!({})),
            AUTO,
            Err(strings(&["no pool to choose from: no node carries the label agentpool with a value in placement.pools (general, large, gpu, gone)"])),
        ),
        (
            "an unreadable request names the field",
            &all[..],
            pod(json!({"cpu": "two"})),
            AUTO,
            Err(strings(&[
                r#"spec.containers[0].resources.requests["cpu"]: "two" is not a valid quantity: expected a number"#,
            ])),
        ),
    ];
    let policies = shipped();
    for (name, pools, pod, text, want) in cases {
        let got = choose(pools, &pod, &policies, &config(text), None);
        let want = want.map(str::to_string);
        assert_eq!(got, want, "{name}");
    }
}

#[test]
fn without_policies_the_first_pool_in_order_wins() {
    let pools = cluster();
    let none = PlacementSet::default();
    let big = pod(json!({"cpu": "1000"}));
    assert_eq!(
        choose(&pools, &big, &none, &config(AUTO), None),
        Ok("general".into())
    );
    let preferred = config("placement:\n  chooseValue: auto\n  pools: [general, large, gpu, gone]\n  preference: [gpu]\n");
    assert_eq!(
        choose(&pools, &big, &none, &preferred, None),
        Ok("gpu".into())
    );
}

#[test]
fn pool_order_table() {
    let pools = cluster();
    let cases: [(&[&str], &[&str]); 4] = [
        (&[], &["general", "gpu", "large"]),
        (&["large"], &["large", "general", "gpu"]),
        (&["gpu", "nowhere", "general"], &["gpu", "general", "large"]),
        (&["large", "gpu", "general"], &["large", "gpu", "general"]),
    ];
    for (preference, want) in cases {
        assert_eq!(
            pool_order(&pools, &strings(preference)),
            want,
            "{preference:?}"
        );
    }
}

fn inline(name: &str, rego: &str) -> Template {
    from_rego(name, rego.to_string(), format!("{name}.rego").into())
}

#[test]
fn policy_answers_that_refuse() {
    let pools = cluster();
    let policy = |rego: &str| {
        PlacementSet::compile(&[inline("p", &format!("package p\n{rego}\n"))]).unwrap()
    };
    let cases = [
        (
            "undefined",
            "solutions = x { false; x := 1 }",
            "p: no solution (`solutions` is undefined for this pod)",
        ),
        (
            "a target that is not a pool",
            "solutions = {\"fulfilled\": true, \"targets\": [\"general\", \"elsewhere\"]} { true }",
            "p: could not be evaluated: it accepts \"elsewhere\", which is not a pool",
        ),
        (
            "fulfilled with no targets",
            "solutions = {\"fulfilled\": true, \"targets\": []} { true }",
            "p: fulfilled, but accepts no pool",
        ),
        (
            "not an object",
            "solutions = [\"general\"] { true }",
            "p: could not be evaluated: `solutions` must be {\"fulfilled\": true, \"targets\": [...]} or {\"fulfilled\": false, \"msg\": \"...\"}, got [\"general\"]",
        ),
        (
            "targets not names",
            "solutions = {\"fulfilled\": true, \"targets\": [1]} { true }",
            "p: could not be evaluated: `solutions.targets` must hold pool names, got 1",
        ),
        (
            "no msg",
            "solutions = {\"fulfilled\": false} { true }",
            "p: unfulfilled (no `msg`)",
        ),
        (
            "a msg that is not a string",
            "solutions = {\"fulfilled\": false, \"msg\": [1]} { true }",
            "p: [1]",
        ),
    ];
    for (name, rego, want) in cases {
        let got = choose(&pools, &pod(json!({})), &policy(rego), &config(AUTO), None);
        assert_eq!(got, Err(strings(&[want])), "{name}");
    }
    // An evaluation error.
    let erring = policy("solutions = {\"fulfilled\": true, \"targets\": [x]} { input.infrastructure_targets; x := 1 / 0 }");
    let got = choose(&pools, &pod(json!({})), &erring, &config(AUTO), None).unwrap_err();
    assert!(got[0].starts_with("p: could not be evaluated: "), "{got:?}");
    // A set of targets is as good as a list.
    let set =
        policy("solutions = {\"fulfilled\": true, \"targets\": {\"large\", \"gpu\"}} { true }");
    assert_eq!(
        choose(&pools, &pod(json!({})), &set, &config(AUTO), None),
        Ok("gpu".into())
    );
}

#[test]
fn a_policy_past_its_time_limit_refuses() {
    let spin = PlacementSet::compile(&[inline(
        "spin",
        "package spin\nimport rego.v1\nsolutions := {\"fulfilled\": true, \"targets\": [\"general\"]} if {\n  input.infrastructure_targets\n  some x in numbers.range(1, 3000)\n  some y in numbers.range(1, 3000)\n  x * y < 0\n}\n",
    )])
    .unwrap();
    let config = config("evaluation: {timeoutMillis: 20}\nplacement: {chooseValue: auto, pools: [general, large, gpu, gone]}\n");
    let got = choose(&cluster(), &pod(json!({})), &spin, &config, None).unwrap_err();
    assert_eq!(got.len(), 1);
    assert!(
        got[0].starts_with("spin: could not be evaluated: "),
        "{got:?}"
    );
}

#[test]
fn parameters_and_review_reach_the_policies() {
    let pools = cluster();
    let policies = PlacementSet::compile(&[
        inline(
            "named",
            "package named\nsolutions = {\"fulfilled\": true, \"targets\": [input.parameters.pool]} { true }\n",
        ),
        inline(
            "byreview",
            "package byreview\nsolutions = {\"fulfilled\": true, \"targets\": t} {\n  t := [p | input.infrastructure_targets[p]; p != input.review.object.metadata.labels.avoid]\n}\n",
        ),
        inline(
            "blind",
            "package blind\nsolutions = {\"fulfilled\": true, \"targets\": [p | input.infrastructure_targets[p]; not input.parameters.never]} { true }\n",
        ),
    ])
    .unwrap();
    assert!(policies.get("byreview").unwrap().reads_review);
    assert!(!policies.get("blind").unwrap().reads_review);
    let config = config(
        "placement:\n  chooseValue: auto\n  pools: [general, large, gpu, gone]\n  policies:\n    named: {parameters: {pool: large}}\n",
    );
    let review = json!({"object": {"metadata": {"labels": {"avoid": "general"}}}});
    assert_eq!(
        choose(&pools, &pod(json!({})), &policies, &config, Some(&review)),
        Ok("large".into())
    );
    // Without the review, `byreview` compares with an undefined value and accepts nothing.
    assert_eq!(
        choose(&pools, &pod(json!({})), &policies, &config, None),
        Err(strings(&["byreview: fulfilled, but accepts no pool"]))
    );
}

#[test]
fn the_input_document() {
    let pools = only(&cluster(), &["gpu"]);
    let doc = input_document(&pools, &pod(json!({"cpu": "250m", "nvidia.com/gpu": 1}))).unwrap();
    assert_eq!(
        doc,
        json!({
            "infrastructure_targets": {
                "gpu": {
                    "name": "gpu",
                    "labels": {"accelerator": "nvidia", "agentpool": "gpu", "kubernetes.io/os": "linux"},
                    "params": {"accelerator": "nvidia", "agentpool": "gpu", "kubernetes.io/os": "linux"},
                    "nodes": 2,
                    "ready_nodes": 2,
                    "resources": {"cpu": 7820, "memory": 60129542144i64, "nvidia.com/gpu": 1, "pods": 110},
                    "node_shapes": [{"nodes": 2, "allocatable": {"cpu": 7820, "memory": 60129542144i64, "nvidia.com/gpu": 1, "pods": 110}}],
                    "taints": [],
                },
            },
            "services": {
                "web": {
                    "resource_requirements": {"cpu": 250, "nvidia.com/gpu": 1},
                    "containers": {"app": {"type": "container", "requests": {"cpu": 250, "nvidia.com/gpu": 1}, "limits": {}}},
                },
            },
        })
    );
    // A controller-made pod has only a generateName; a template none.
    let doc = input_document(&pools, &json!({"metadata": {"generateName": "web-7d9f-"}})).unwrap();
    assert!(doc["services"]["web-7d9f-"].is_object(), "{doc}");
    let doc = input_document(&pools, &json!({"spec": {}})).unwrap();
    assert!(doc["services"]["unnamed"].is_object(), "{doc}");
}

#[test]
fn which_namespaces_get_a_pool_chosen() {
    let labels = |pairs: &[(&str, &str)]| -> Labels {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    };
    let auto = labels(&[("agentpool", "auto")]);
    let pool1 = labels(&[("agentpool", "pool1")]);
    let empty = labels(&[("agentpool", "")]);
    let other = labels(&[("team", "a")]);
    // (config, labels, chooses)
    let cases: [(&str, Option<&Labels>, bool); 13] = [
        ("{}", Some(&auto), false),
        ("{}", None, false),
        (AUTO, Some(&auto), true),
        (AUTO, Some(&pool1), false),
        (AUTO, Some(&other), false),
        (AUTO, None, false),
        (
            "placement: {unlabelledNamespaces: choose, pools: [general]}\n",
            Some(&auto),
            false,
        ),
        (
            "placement: {unlabelledNamespaces: choose, pools: [general]}\n",
            Some(&other),
            true,
        ),
        (
            "placement: {unlabelledNamespaces: choose, pools: [general]}\n",
            Some(&empty),
            true,
        ),
        ("placement: {unlabelledNamespaces: choose, pools: [general]}\n", None, true),
        (
            "placement: {chooseValue: auto, pools: [general, large, gpu, gone], unlabelledNamespaces: choose}\n",
            Some(&auto),
            true,
        ),
        (
            "placement: {chooseValue: auto, pools: [general, large, gpu, gone], unlabelledNamespaces: choose}\n",
            Some(&pool1),
            false,
        ),
        (
            "namespaceLabel: pool\nplacement: {chooseValue: auto, pools: [general, large, gpu, gone]}\n",
            Some(&auto),
            false,
        ),
    ];
    for (text, labels, want) in cases {
        assert_eq!(chooses(labels, &config(text)), want, "{text:?} {labels:?}");
    }
}

#[test]
fn check_config_names_the_path() {
    let mut templates = shipped_templates();
    templates.push(from_yaml(HASPARAMS, "hasparams.yaml".into()).unwrap());
    let policies = PlacementSet::compile(&templates).unwrap();
    let names: Vec<&str> = policies.names().collect();
    assert_eq!(names, ["fitsresources", "gpuonly", "hasparams"]);
    assert_eq!(policies.len(), 3);
    // Without a placement section nothing is chosen, so nothing is checked.
    policies.check_config(&config("{}")).unwrap();
    let cases = [
        (
            AUTO.to_string(),
            "at `placement.policies`: placement policy `hasparams` declares the input `params`; give it at `placement.policies.hasparams.parameters.params`",
        ),
        (
            format!("{AUTO}  policies:\n    hasparams: {{parameters: {{param: [a]}}}}\n"),
            "at `placement.policies.hasparams.parameters`: missing `params`, an input the policy declares",
        ),
        (
            format!("{AUTO}  policies:\n    hasparams: {{parameters: {{params: [a]}}}}\n    fitsresource: {{}}\n"),
            "at `placement.policies.fitsresource`: no placement policy named `fitsresource` is loaded (loaded: fitsresources, gpuonly, hasparams)",
        ),
    ];
    for (text, want) in cases {
        let err = policies
            .check_config(&config(&text))
            .unwrap_err()
            .to_string();
        assert_eq!(err, want);
    }
    policies
        .check_config(&config(&format!(
            "{AUTO}  policies:\n    hasparams: {{parameters: {{params: [a]}}}}\n"
        )))
        .unwrap();
}

#[test]
fn sit_and_sat_templates_stay_apart() {
    for template in shipped_templates() {
        assert_eq!(
            kind_of(&template).unwrap(),
            TemplateKind::Sat,
            "{}",
            template.name
        );
        let err = Policy::compile(&template).err().unwrap().to_string();
        assert!(err.contains("placement (SAT) policy"), "{err}");
    }
    let sit = inline("s", "package s\ninfringement[{\"msg\": \"x\"}] { false }\n");
    let err = PlacementSet::compile(&[sit]).err().unwrap().to_string();
    assert_eq!(
        err,
        "s.rego: placement policy `s` declares no `solutions` rule: it defines `infringement`, so it is a SIT policy, loaded with the policies"
    );
    let err = PlacementSet::compile(&[inline("n", "package n\nx := 1\n")])
        .err()
        .unwrap()
        .to_string();
    assert_eq!(
        err,
        "n.rego: placement policy `n` declares no `solutions` rule"
    );
    let err = PlacementSet::compile(&[inline("n", "package m\nsolutions := 1\n")])
        .err()
        .unwrap()
        .to_string();
    assert!(err.contains("expected `package n`"), "{err}");
    let twice = [
        inline("d", "package d\nsolutions := 1\n"),
        from_rego(
            "d",
            "package d\nsolutions := 2\n".into(),
            "other/d.rego".into(),
        ),
    ];
    let err = PlacementSet::compile(&twice).err().unwrap().to_string();
    assert_eq!(
        err,
        "other/d.rego: placement policy `d` is already defined by d.rego"
    );
}

#[test]
fn shipped_placement_policies_pass_their_rego_tests() {
    let tests = [
        TestFile {
            rego: FITSRESOURCES_TEST.to_string(),
            path: "policies/placement/fitsresources_test.rego".into(),
        },
        TestFile {
            rego: GPUONLY_TEST.to_string(),
            path: "policies/placement/gpuonly_test.rego".into(),
        },
    ];
    let results = crate::policy::rego_tests::run(&shipped_templates(), &tests).unwrap();
    assert!(results.len() >= 10, "{results:?}");
    let failed: Vec<_> = results.iter().filter(|r| r.failure.is_some()).collect();
    assert!(failed.is_empty(), "{failed:#?}");
}

#[test]
fn stackl_hasparams_loads_and_runs_unchanged() {
    let template = from_yaml(HASPARAMS, "testdata/stackl/hasparams.yaml".into()).unwrap();
    assert_eq!(template.name, "hasparams");
    assert_eq!(template.inputs, ["params"]);
    assert_eq!(kind_of(&template).unwrap(), TemplateKind::Sat);
    let policies = PlacementSet::compile(std::slice::from_ref(&template)).unwrap();
    let policy = policies.get("hasparams").unwrap();
    let limit = Duration::from_millis(500);

    // StackL's own example input, and the answer StackL documents for it.
    let stackl_input = json!({
        "parameters": {"params": ["foo"]},
        "services": {"postgres": {
            "functional_requirements": {"postgres": {"image": "repo.example.com/postgres:latest", "tool": "terraform"}},
            "resource_requirements": {},
            "params": {"foo": "bar"},
        }},
        "infrastructure_targets": {"vsphere.brussels.vmw-vcenter-01": {
            "resources": {},
            "packages": ["postgres"],
            "tags": {"environment": "dev"},
            "params": {"foo": "bar"},
        }},
    });
    assert_eq!(
        policy.solve(Value::from(stackl_input.clone()), limit),
        Ok(Solution::Fulfilled(strings(&[
            "vsphere.brussels.vmw-vcenter-01"
        ])))
    );
    let mut missing = stackl_input;
    missing["parameters"]["params"] = json!(["foo", "dns_servers"]);
    assert_eq!(
        policy.solve(Value::from(missing), limit),
        Ok(Solution::Unfulfilled(
            "No target has all the required params".into()
        ))
    );

    // On pools: a target's params are the labels its nodes share.
    let pools = cluster();
    let with = |params: &str| {
        config(&format!(
            "placement:\n  chooseValue: auto\n  pools: [general, large, gpu, gone]\n  policies:\n    hasparams: {{parameters: {{params: {params}}}}}\n"
        ))
    };
    let pod = pod(json!({"cpu": "100m"}));
    assert_eq!(
        choose(&pools, &pod, &policies, &with("[accelerator]"), None),
        Ok("gpu".into())
    );
    assert_eq!(
        choose(&pools, &pod, &policies, &with("[kubernetes.io/os]"), None),
        Ok("general".into())
    );
    assert_eq!(
        choose(&pools, &pod, &policies, &with("[accelerator, zone]"), None),
        Err(strings(&[
            "hasparams: No target has all the required params"
        ]))
    );
    // Beside the shipped policies, the GPU label alone does not bring a CPU pod to the GPU
    // pool: no pool is accepted by all three.
    let mut templates = shipped_templates();
    templates.push(template);
    let all = PlacementSet::compile(&templates).unwrap();
    assert_eq!(
        choose(&pools, &pod, &all, &with("[accelerator]"), None),
        Err(strings(&[
            "no pool is accepted by every placement policy",
            "fitsresources: accepts only general, gpu, large",
            "gpuonly: accepts only general, large",
            "hasparams: accepts only gpu",
        ]))
    );
}

/// The webhooks and the audit in namespaces whose pods get their pool chosen: the same
/// [`select`] behind the mutating patch, the validating check and the audit result.
#[test]
fn the_webhooks_and_the_audit_in_a_choosing_namespace() {
    use crate::admission::Request;
    use crate::ruleset::Budget;
    use crate::scope::Scope;
    use crate::webhook::Webhook;

    let pools = PoolSet::new(cluster());
    let rules = crate::ruleset::RuleSet::new(
        config("placement:\n  chooseValue: auto\n  pools: [general, large, gpu, gone]\n  unlabelledNamespaces: choose\n"),
        Default::default(),
        shipped(),
        "t",
    )
    .unwrap();
    let auto: Labels = [("agentpool".to_string(), "auto".to_string())].into();
    let named: Labels = [("agentpool".to_string(), "large".to_string())].into();
    let pod_with = |requests: Json, selector: Option<&str>| {
        let mut pod = pod(requests);
        if let Some(pool) = selector {
            pod["spec"]["nodeSelector"] = json!({"agentpool": pool, "disk": "ssd"});
        }
        pod
    };
    let run = |webhook, object: &Json, kind: &str, labels: Option<&Labels>, known: bool| {
        let (group, version) = if kind == "Pod" {
            ("", "v1")
        } else {
            ("apps", "v1")
        };
        let request = json!({"uid": "u", "kind": {"group": group, "version": version, "kind": kind},
            "namespace": "team-a", "operation": "CREATE", "object": object});
        let req = Request::from_value(&request).unwrap();
        let scope = Scope {
            labels,
            pools: known.then_some(&pools),
            now: None,
        };
        rules.decide(webhook, &req, scope, Budget::FULL)
    };
    // The pool a mutating decision's patch selects, if any.
    let patched = |d: &crate::admission::Decision| -> Option<String> {
        let patch = serde_json::to_value(d.patch()?).unwrap();
        patch
            .as_array()
            .unwrap()
            .iter()
            .find_map(|op| match op["path"].as_str() {
                Some("/spec/nodeSelector") => op["value"]["agentpool"].as_str().map(str::to_string),
                Some("/spec/nodeSelector/agentpool") => op["value"].as_str().map(str::to_string),
                _ => None,
            })
    };
    let small = json!({"cpu": "500m", "memory": "1Gi"});
    let gpu = json!({"cpu": "1", "nvidia.com/gpu": "1"});
    let huge = json!({"cpu": "100"});

    // Mutating: (case, pod, namespace labels, node facts known, code, chosen pool or message part)
    type Case<'a> = (&'a str, Json, Option<&'a Labels>, bool, u16, &'a str);
    let cases: Vec<Case> = vec![
        ("a small pod: the first pool", pod_with(small.clone(), None), Some(&auto), true, 0, "general"),
        ("a GPU pod: the GPU pool", pod_with(gpu.clone(), None), Some(&auto), true, 0, "gpu"),
        ("unlabelled namespace, unlabelledNamespaces: choose", pod_with(gpu.clone(), None), None, true, 0, "gpu"),
        ("a named pool keeps today's behaviour", pod_with(small.clone(), None), Some(&named), true, 0, "large"),
        ("a pod that selects an accepted pool keeps it", pod_with(small.clone(), Some("large")), Some(&auto), true, 0, ""),
        ("a pod that selects a refused pool", pod_with(small.clone(), Some("gpu")), Some(&auto), true, 403,
            "the pod selects pool \"gpu\" (nodeSelector agentpool=gpu), which the placement policies do not accept for it; they accept general, large"),
        ("an impossible pod: the policy's message", pod_with(huge.clone(), None), Some(&auto), true, 403,
            "fitsresources: no pool has or can launch a node with room for the pod's requests (cpu 100000m)"),
        ("an unreadable request", pod_with(json!({"cpu": "lots"}), None), Some(&auto), true, 400, "is not a valid quantity"),
        ("nodes not read yet", pod_with(small.clone(), None), Some(&auto), false, 503, "the node cache has not synced"),
    ];
    for (name, pod, labels, known, code, want) in &cases {
        let d = run(Webhook::Mutate, pod, "Pod", *labels, *known);
        assert_eq!(d.code().unwrap_or(0), *code, "{name}: {d:?}");
        if *code == 0 {
            assert!(d.allowed(), "{name}: {d:?}");
            let chosen = patched(&d);
            assert_eq!(
                chosen.as_deref(),
                Some(*want).filter(|w| !w.is_empty()),
                "{name}: {d:?}"
            );
            // The annotation records the pool the pod ends up on.
            let annotated = serde_json::to_string(&d.patch()).unwrap();
            let pool = chosen.unwrap_or_else(|| "large".to_string());
            assert!(
                annotated.contains(&format!("\"poolguard.io/pool\":\"{pool}\"")),
                "{name}: {annotated}"
            );
        } else {
            assert!(!d.allowed() && d.message().contains(want), "{name}: {d:?}");
        }
    }

    // Validating: the pod as the mutating webhook left it passes; anything else is checked
    // again, never trusted.
    let cases: Vec<(&str, Json, &str, u16, &str)> = vec![
        ("as mutated", pod_with(small.clone(), Some("general")), "Pod", 0, ""),
        ("another accepted pool", pod_with(small.clone(), Some("large")), "Pod", 0, ""),
        ("the GPU pod on the GPU pool", pod_with(gpu.clone(), Some("gpu")), "Pod", 0, ""),
        ("no selector: the mutating webhook did not run", pod_with(small.clone(), None), "Pod", 403,
            "the placement policies choose the pools of namespace \"team-a\" (pool \"general\" for this pod) but the pod has no nodeSelector agentpool"),
        ("a refused pool written by the client", pod_with(small.clone(), Some("gpu")), "Pod", 403,
            "which the placement policies do not accept for it"),
        ("a GPU pod on a pool without GPUs", pod_with(gpu.clone(), Some("general")), "Pod", 403,
            "they accept gpu"),
        ("a template some pool can take", json!({"metadata": {"name": "d"}, "spec": {"template": pod_with(small.clone(), None)}}), "Deployment", 0, ""),
        ("a template no pool can take", json!({"metadata": {"name": "d"}, "spec": {"template": pod_with(huge.clone(), None)}}), "Deployment", 403,
            "no pool can take its pods (the placement policies choose the pools of namespace \"team-a\"): fitsresources: no pool has or can launch a node with room"),
    ];
    for (name, object, kind, code, want) in &cases {
        let d = run(Webhook::Validate, object, kind, Some(&auto), true);
        assert_eq!(
            (d.allowed(), d.code().unwrap_or(0)),
            (*code == 0, *code),
            "{name}: {d:?}"
        );
        assert!(d.message().contains(want), "{name}: {d:?}");
    }

    // The audit runs the same check on stored objects.
    let audited = |object: Json| {
        let scope = Scope {
            labels: Some(&auto),
            pools: Some(&pools),
            now: None,
        };
        let results = crate::audit::audit(&object, scope, None, &rules);
        (results[0].result, results[0].message.clone())
    };
    let stored = |selector| {
        let mut pod = pod_with(small.clone(), selector);
        pod["apiVersion"] = json!("v1");
        pod["kind"] = json!("Pod");
        pod
    };
    let (verdict, message) = audited(stored(Some("large")));
    assert_eq!(verdict, crate::audit::Verdict::Pass, "{message}");
    let (verdict, message) = audited(stored(Some("gpu")));
    assert_eq!(verdict, crate::audit::Verdict::Fail, "{message}");
    assert!(message.contains("do not accept"), "{message}");
}

#[test]
fn a_cordoned_node_is_not_ready() {
    let node = |unschedulable: bool| {
        NodeFacts::from_node(&json!({
            "metadata": {"name": "n"},
            "spec": {"unschedulable": unschedulable},
            "status": {"conditions": [{"type": "Ready", "status": "True"}]},
        }))
        .unwrap()
        .ready
    };
    assert!(node(false));
    assert!(!node(true));
}

#[test]
fn solutions_are_remembered_per_pod_shape_and_pool_facts() {
    let config = config(AUTO);
    let mut policies = shipped();
    policies.set_memo(&config);
    let all = PoolSet::new(cluster());
    let replica = |suffix: &str, cpu: &str| {
        json!({
            "metadata": {"generateName": "web-5d9c7b-", "name": format!("web-5d9c7b-{suffix}")},
            "spec": {"containers": [{"name": "app", "image": "registry.example.com/app:1",
                                     "resources": {"requests": {"cpu": cpu}}}]},
        })
    };
    let ask = |policies: &PlacementSet, pools: &PoolSet, pod: &Json| {
        candidates(pools, pod, policies, &config, None, configured(&config))
    };
    let hits = |policies: &PlacementSet| policies.memo_stats().0 .0;
    let first = ask(&policies, &all, &replica("aaaaa", "2")).unwrap();
    assert_eq!(first, strings(&["general", "large"]));
    assert_eq!(hits(&policies), 0);
    // Another replica of the same ReplicaSet: both policies' answers come from the memo.
    assert_eq!(ask(&policies, &all, &replica("bbbbb", "2")).unwrap(), first);
    assert_eq!(hits(&policies), 2);
    // A pod asking for more, or the same pod after the nodes changed: evaluated again.
    assert_eq!(
        ask(&policies, &all, &replica("ccccc", "8")).unwrap(),
        strings(&["large"])
    );
    let no_large = PoolSet::new(only(&cluster(), &["general", "gpu"]));
    assert_eq!(
        ask(&policies, &no_large, &replica("ddddd", "2")).unwrap(),
        strings(&["general"])
    );
    assert!(ask(&policies, &no_large, &replica("eeeee", "8")).is_err());
    assert_eq!(hits(&policies), 2);
    // The same answers with nothing remembered.
    let cold = shipped();
    assert_eq!(ask(&cold, &all, &replica("fffff", "2")).unwrap(), first);
    assert_eq!(cold.memo_stats(), ((0, 0), 0));
}

/// A kubelet may label its own Node with any unprefixed label and report any allocatable, so a
/// node can name a pool no one configured. Such a pool is never chosen nor shown to the
/// policies, however attractive (first by name, room for anything, preferred by the pod's own
/// selector), whether the shell left it out ([`PoolSet::listed`]) or not.
#[test]
fn a_node_naming_an_unlisted_pool_is_never_chosen() {
    let mut nodes_of_cluster = nodes(
        "general",
        1,
        json!({"cpu": "3860m", "memory": "16Gi", "pods": "110"}),
        json!({}),
    );
    // "aaa" sorts first and holds anything; it even carries an accelerator.
    nodes_of_cluster.extend(nodes(
        "aaa",
        1,
        json!({"cpu": "1000", "memory": "4Ti", "nvidia.com/gpu": "8", "pods": "110"}),
        json!({"accelerator": "nvidia"}),
    ));
    let facts = PoolFacts::gather(&nodes_of_cluster, "agentpool");
    assert_eq!(facts.len(), 2);
    let listed_config = config("placement:\n  chooseValue: auto\n  pools: [general, gpu]\n");
    let unfiltered = PoolSet::new(facts.clone());
    let filtered = PoolSet::listed(facts, &listed_config);
    assert_eq!(filtered.facts().len(), 1);
    assert_eq!(filtered.facts()[0].name, "general");
    let small = pod(json!({"cpu": "500m", "memory": "1Gi"}));
    let huge = pod(json!({"cpu": "64", "memory": "1Ti"}));
    let mut gpu = pod(json!({"cpu": "1", "nvidia.com/gpu": "1"}));
    gpu["spec"]["containers"][0]["resources"]["limits"] = json!({"nvidia.com/gpu": "1"});
    let mut selects_it = small.clone();
    selects_it["spec"]["nodeSelector"] = json!({"agentpool": "aaa"});
    for (what, set) in [("unfiltered", &unfiltered), ("listed", &filtered)] {
        for (policies, name) in [(shipped(), "shipped"), (PlacementSet::default(), "none")] {
            let ctx = format!("{what} pools, {name} policies");
            // The listed pool is chosen for a pod it can hold.
            assert_eq!(
                candidates(
                    set,
                    &small,
                    &policies,
                    &listed_config,
                    None,
                    configured(&listed_config)
                ),
                Ok(strings(&["general"])),
                "{ctx}"
            );
            let chosen = select(
                Some(set),
                PodSpecAt {
                    object: &small,
                    path: &["spec"],
                    namespace: "team-a",
                },
                &policies,
                &listed_config,
                None,
                configured(&listed_config),
            );
            assert!(
                matches!(&chosen, Chosen::Pool(pool, _) if pool == "general"),
                "{ctx}: {chosen:?}"
            );
            // A pod selecting the unlisted pool itself is refused.
            let chosen = select(
                Some(set),
                PodSpecAt {
                    object: &selects_it,
                    path: &["spec"],
                    namespace: "team-a",
                },
                &policies,
                &listed_config,
                None,
                configured(&listed_config),
            );
            assert!(matches!(chosen, Chosen::Refused(_)), "{ctx}: {chosen:?}");
        }
        // Only the unlisted pool could hold these: refused, never sent there.
        for pod in [&huge, &gpu] {
            let result = candidates(
                set,
                pod,
                &shipped(),
                &listed_config,
                None,
                configured(&listed_config),
            );
            let reasons = result.expect_err(what);
            assert!(
                reasons.iter().all(|r| !r.contains("aaa")),
                "{what}: {reasons:?}"
            );
        }
    }
    // No listed pool has nodes: nothing to choose, and the reason names the list.
    let only_rogue = PoolSet::new(only(
        &PoolFacts::gather(&nodes_of_cluster, "agentpool"),
        &["aaa"],
    ));
    let reasons = candidates(
        &only_rogue,
        &small,
        &shipped(),
        &listed_config,
        None,
        configured(&listed_config),
    )
    .unwrap_err();
    assert!(
        reasons[0].contains("placement.pools (general, gpu)"),
        "{reasons:?}"
    );
}

/// A pool whose nodes are all NotReady or cordoned is never chosen for a pod (it would stay
/// Pending); the next accepted pool is, and with none left the pod is refused. A pod that names
/// such a pool itself keeps its choice.
#[test]
fn a_pool_without_a_node_taking_pods_is_never_chosen() {
    let config = config(AUTO);
    let node = |pool: &str, i: usize, ready: &str, cordoned: bool| {
        NodeFacts::from_node(&json!({
            "metadata": {"name": format!("{pool}-{i}"), "labels": {"agentpool": pool}},
            "spec": {"unschedulable": cordoned},
            "status": {
                "allocatable": {"cpu": "8", "memory": "32Gi", "pods": "110"},
                "conditions": [{"type": "Ready", "status": ready}],
            },
        }))
        .unwrap()
    };
    // `general` sorts first but takes no pods: one node down, one cordoned.
    let down = vec![
        node("general", 0, "False", false),
        node("general", 1, "True", true),
    ];
    let mut both = down.clone();
    both.push(node("large", 0, "True", false));
    let small = pod(json!({"cpu": "1"}));
    let choose = |nodes: &[NodeFacts], pod: &Json| {
        let set = PoolSet::new(PoolFacts::gather(nodes, "agentpool"));
        select(
            Some(&set),
            PodSpecAt {
                object: pod,
                path: &["spec"],
                namespace: "team-a",
            },
            &shipped(),
            &config,
            None,
            configured(&config),
        )
    };
    for (policies, name) in [(shipped(), "shipped"), (PlacementSet::default(), "none")] {
        let set = PoolSet::new(PoolFacts::gather(&both, "agentpool"));
        let chosen = select(
            Some(&set),
            PodSpecAt {
                object: &small,
                path: &["spec"],
                namespace: "team-a",
            },
            &policies,
            &config,
            None,
            configured(&config),
        );
        assert!(
            matches!(&chosen, Chosen::Pool(pool, _) if pool == "large"),
            "{name} policies: {chosen:?}"
        );
    }
    match choose(&down, &small) {
        Chosen::Refused(reasons) => assert!(
            reasons
                .iter()
                .any(|r| r.contains("general: 2 nodes, 0 ready")),
            "{reasons:?}"
        ),
        other => panic!("{other:?}"),
    }
    let mut names_it = small.clone();
    names_it["spec"]["nodeSelector"] = json!({"agentpool": "general"});
    assert!(
        matches!(choose(&both, &names_it), Chosen::Pool(pool, _) if pool == "general"),
        "a pod's own choice of an accepted pool stands"
    );
    // A pool with no node that takes pods but that can launch one (a NodePool) is chosen; the
    // same pool launching nothing is not.
    let policies = PlacementSet::default();
    let mut launching = PoolFacts::gather(&down, "agentpool");
    launching[0].launchable = vec![[("cpu".to_string(), 2000)].into()];
    for (launchable, want) in [(true, Some("general")), (false, None)] {
        let mut facts = launching.clone();
        if !launchable {
            facts[0].launchable.clear();
        }
        let set = PoolSet::new(facts);
        let at = PodSpecAt {
            object: &small,
            path: &["spec"],
            namespace: "team-a",
        };
        let chosen = select(
            Some(&set),
            at,
            &policies,
            &config,
            None,
            configured(&config),
        );
        match (want, &chosen) {
            (Some(want), Chosen::Pool(pool, _)) => assert_eq!(pool, want),
            (None, Chosen::Refused(reasons)) => {
                assert!(reasons[0].contains("or can launch one"), "{reasons:?}")
            }
            _ => panic!("launchable {launchable}: {chosen:?}"),
        }
    }
}

/// The configured per-policy time limit, uncut.
fn configured(config: &Config) -> std::time::Duration {
    std::time::Duration::from_millis(config.evaluation.timeout_millis)
}
