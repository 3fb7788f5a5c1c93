//! Table tests of both webhooks over the AdmissionReviews in testdata/, through the same pure
//! path the server and `poolguard eval` use.

use std::path::Path;

use base64::Engine as _;
use poolguard::sources::load_namespaces;
use poolguard::sources::Sources;
use poolguard_core::admission::{self, Decision, Request};
use poolguard_core::namespaces::NamespaceLabels;
use poolguard_core::ruleset::Budget;
use poolguard_core::ruleset::RuleSet;
use poolguard_core::scope::Scope;
use poolguard_core::webhook::Webhook;
use serde_json::{json, Value};

fn rules(config: Option<&str>) -> RuleSet {
    Sources {
        config: config.map(|c| format!("testdata/config/{c}").into()),
        policies_dir: Some("policies".into()),
        placement_dir: None,
        gatekeeper_dir: None,
        gatekeeper_cluster: None,
    }
    .load()
    .unwrap()
}

fn namespaces() -> NamespaceLabels {
    load_namespaces(Path::new("testdata/namespaces.yaml")).unwrap()
}

fn run(file: &str, webhook: Webhook, rules: &RuleSet) -> Decision {
    let body = std::fs::read(format!("testdata/reviews/{file}")).unwrap();
    let review = admission::parse_review(&body).unwrap();
    let req = Request::from_value(&review["request"]).unwrap();
    rules.decide(
        webhook,
        &req,
        Scope {
            labels: namespaces().get(req.namespace),
            pools: None,
            now: None,
        },
        Budget::FULL,
    )
}

#[derive(Debug)]
enum Want {
    Allow,
    Patch(Value),
    Deny(u16, &'static [&'static str]),
    Warn(&'static str),
}

fn check(file: &str, webhook: Webhook, config: Option<&str>, want: Want) {
    let rules = rules(config);
    let d = run(file, webhook, &rules);
    let ctx = format!("{file} {webhook:?} {config:?}: {d:?}");
    match want {
        Want::Allow => {
            assert!(
                d.allowed() && d.patch().is_none() && d.warnings.is_empty(),
                "{ctx}"
            );
        }
        Want::Patch(ops) => {
            assert!(d.allowed(), "{ctx}");
            assert_eq!(
                serde_json::to_value(d.patch().unwrap()).unwrap(),
                ops,
                "{ctx}"
            );
        }
        Want::Deny(code, parts) => {
            assert!(!d.allowed(), "{ctx}");
            assert_eq!(d.code(), Some(code), "{ctx}");
            for part in parts {
                assert!(d.message().contains(part), "{ctx}: lacks {part:?}");
            }
        }
        Want::Warn(part) => {
            assert!(d.allowed(), "{ctx}");
            assert!(d.warnings.iter().any(|w| w.contains(part)), "{ctx}");
        }
    }
}

#[test]
fn opa_sample_behaviours_hold() {
    let set = json!([
        {"op": "add", "path": "/spec/nodeSelector", "value": {"agentpool": "pool1"}},
        {"op": "add", "path": "/metadata/annotations", "value": {"poolguard.io/pool": "pool1"}},
    ]);
    // A mapped namespace gets the selector; kube-system and unmapped namespaces are untouched.
    check(
        "pod-create-mapped.json",
        Webhook::Mutate,
        None,
        Want::Patch(set),
    );
    check(
        "pod-create-kube-system.json",
        Webhook::Mutate,
        None,
        Want::Allow,
    );
    check(
        "pod-create-unmapped.json",
        Webhook::Mutate,
        None,
        Want::Allow,
    );
    // A conflicting selector is a 403 naming the namespace, its pool and the requested value.
    check(
        "pod-create-conflict.json",
        Webhook::Mutate,
        None,
        Want::Deny(403, &["\"mapped\"", "\"pool1\"", "agentpool=\"gpu\""]),
    );
    check(
        "pod-create-conflict.json",
        Webhook::Validate,
        None,
        Want::Deny(403, &["agentpool=\"gpu\""]),
    );
}

#[test]
fn mutate_table() {
    let annotate = json!({"op": "add", "path": "/metadata/annotations", "value": {"poolguard.io/pool": "pool1"}});
    let add_key =
        json!([{"op": "add", "path": "/spec/nodeSelector/agentpool", "value": "pool1"}, annotate]);
    let aks_add_key = json!([{"op": "add", "path": "/spec/nodeSelector/kubernetes.azure.com~1agentpool", "value": "pool1"}, annotate]);
    let annotate_only = json!([annotate]);
    let cases = [
        ("pod-create-os-selector.json", None, Want::Patch(add_key)),
        (
            "pod-create-os-selector.json",
            Some("aks.yaml"),
            Want::Patch(aks_add_key),
        ),
        (
            "pod-create-os-selector.json",
            Some("strict.yaml"),
            Want::Deny(403, &["strict", "kubernetes.io/os"]),
        ),
        // Already placed: only the pool annotation is added.
        (
            "pod-create-placed.json",
            None,
            Want::Patch(annotate_only.clone()),
        ),
        (
            "pod-create-placed.json",
            Some("strict.yaml"),
            Want::Patch(annotate_only.clone()),
        ),
        // Updates and subresources are never patched, nor denied: the selector is immutable.
        ("pod-update-mapped.json", None, Want::Allow),
        ("pod-ephemeral-update.json", None, Want::Allow),
        // Workloads are not mutated; their pods are.
        ("deployment-create.json", None, Want::Allow),
        ("deployment-create-conflict.json", None, Want::Allow),
        // Policies do not run in the mutating webhook.
        (
            "pod-create-bad-image.json",
            Some("example.yaml"),
            Want::Patch(annotate_only),
        ),
    ];
    for (file, config, want) in cases {
        check(file, Webhook::Mutate, config, want);
    }
}

#[test]
fn validate_pods_table() {
    let cases = [
        ("pod-create-placed.json", Some("example.yaml"), Want::Allow),
        (
            "pod-create-unmapped.json",
            Some("example.yaml"),
            Want::Allow,
        ),
        // A pod that reaches validation without its pool's selector slipped past the mutating webhook.
        (
            "pod-create-mapped.json",
            None,
            Want::Deny(403, &["no nodeSelector agentpool=pool1"]),
        ),
        (
            "pod-create-os-selector.json",
            None,
            Want::Deny(403, &["no nodeSelector"]),
        ),
        (
            "pod-create-bad-image.json",
            Some("example.yaml"),
            Want::Deny(
                403,
                &[
                    "allowedrepositories: ",
                    "registry.example.com.evil.io/miner",
                    "\"c1\"",
                ],
            ),
        ),
        (
            "pod-create-bad-image.json",
            Some("warn.yaml"),
            Want::Warn("registry.example.com.evil.io/miner"),
        ),
        ("pod-create-bad-image.json", None, Want::Allow),
        ("pod-update-mapped.json", Some("example.yaml"), Want::Allow),
        (
            "pod-ephemeral-update.json",
            Some("example.yaml"),
            Want::Deny(403, &["\"debugger\"", "evil.io/tools"]),
        ),
    ];
    for (file, config, want) in cases {
        check(file, Webhook::Validate, config, want);
    }
}

#[test]
fn validate_every_workload_kind() {
    let kinds = [
        "deployment",
        "replicaset",
        "statefulset",
        "daemonset",
        "job",
        "cronjob",
        "replicationcontroller",
    ];
    for kind in kinds {
        check(
            &format!("{kind}-create.json"),
            Webhook::Validate,
            Some("example.yaml"),
            Want::Allow,
        );
        check(
            &format!("{kind}-create-conflict.json"),
            Webhook::Validate,
            Some("example.yaml"),
            Want::Deny(403, &["\"gpu-team\"", "\"gpu\"", "agentpool=\"pool1\""]),
        );
        check(
            &format!("{kind}-create-bad-image.json"),
            Webhook::Validate,
            Some("example.yaml"),
            Want::Deny(403, &["docker.io/library/nginx", "gpu.example.com/"]),
        );
    }
}

/// Builds a review around `object` with `config` text and a policies directory of the shipped policy.
fn decide_inline(
    op: &str,
    sub: Option<&str>,
    object: Value,
    old: Option<Value>,
    config: &str,
) -> Decision {
    let dir = tempfile::tempdir().unwrap();
    let config_path = dir.path().join("config.yaml");
    std::fs::write(&config_path, config).unwrap();
    let rules = Sources {
        config: Some(config_path),
        policies_dir: Some("policies".into()),
        placement_dir: None,
        gatekeeper_dir: None,
        gatekeeper_cluster: None,
    }
    .load()
    .unwrap();
    let mut request = json!({"uid": "u", "kind": {"group": "", "version": "v1", "kind": "Pod"}, "namespace": "mapped",
                             "operation": op, "object": object, "oldObject": old});
    if let Some(sub) = sub {
        request["subResource"] = json!(sub);
    }
    let req = Request::from_value(&request).unwrap();
    rules.decide(
        Webhook::Validate,
        &req,
        Scope {
            labels: namespaces().get("mapped"),
            pools: None,
            now: None,
        },
        Budget::FULL,
    )
}

fn pod(images: &[&str], pool: &str) -> Value {
    let containers: Vec<Value> = images
        .iter()
        .enumerate()
        .map(|(i, im)| json!({"name": format!("c{i}"), "image": im}))
        .collect();
    json!({"metadata": {"name": "p"}, "spec": {"containers": containers, "nodeSelector": {"agentpool": pool}}})
}

const DENY_EXAMPLE: &str = "policies:\n  allowedrepositories:\n    parameters:\n      repositories: [registry.example.com]\n";

#[test]
fn update_denies_only_what_is_new() {
    // Admitted before the policy existed: still updatable.
    let old = pod(&["evil.io/a"], "pool1");
    let mut new = old.clone();
    new["metadata"]["labels"] = json!({"x": "y"});
    assert!(decide_inline("UPDATE", None, new, Some(old.clone()), DENY_EXAMPLE).allowed());
    // A second bad image is new: denied, and only it is named.
    let new = pod(&["evil.io/a", "evil.io/b"], "pool1");
    let d = decide_inline("UPDATE", None, new, Some(old), DENY_EXAMPLE);
    assert!(!d.allowed());
    assert!(
        d.message().contains("evil.io/b") && !d.message().contains("evil.io/a"),
        "{d:?}"
    );
    // A namespace relabelled after the pod was created: the old selector is not a new conflict.
    let stale = pod(&["registry.example.com/a"], "pool2");
    assert!(decide_inline("UPDATE", None, stale.clone(), Some(stale), "{}").allowed());
}

/// Policy dependencies at admission, with the shipped policies: a Pending policy is neither
/// enforced nor counted as an infringement, whatever its enforcement.
#[test]
fn dependent_policies_run_only_when_their_dependencies_hold() {
    let config = |enforcement: &str, dependency: &str, compliance: &str| {
        format!(
            "policies:\n  allowedrepositories:\n    enforcement: {enforcement}\n    parameters:\n      repositories: [registry.example.com/]\n  latesttag:\n    parameters: {{}}\n    dependencies: [{{policy: {dependency}, compliance: {compliance}}}]\n"
        )
    };
    let repos = config("deny", "allowedrepositories", "Compliant");
    let repos_warn = config("warn", "allowedrepositories", "Compliant");
    let repos_non = config("deny", "allowedrepositories", "NonCompliant");
    let placed = config("deny", "placement", "Compliant");
    let foreign = "allowedrepositories: container \"c0\": image \"quay.io/x\"";
    let untagged = "latesttag: container \"c0\": image \"registry.example.com/x\" has no tag";
    let pending_on = |what: &str| Some(format!("dependency {what}, Compliant required"));
    // (case, config, images, pool the pod selects, denial lines, warnings, latesttag's pending)
    type Case<'a> = (
        &'a str,
        &'a str,
        &'a [&'a str],
        &'a str,
        Vec<&'a str>,
        Vec<&'a str>,
        Option<String>,
    );
    let cases: Vec<Case> = vec![
        (
            "foreign and untagged: one denial, latesttag pending",
            &repos,
            &["quay.io/x"],
            "pool1",
            vec![foreign],
            vec![],
            pending_on("allowedrepositories is NonCompliant"),
        ),
        (
            "moved to the allowed registry: latesttag's own denial",
            &repos,
            &["registry.example.com/x"],
            "pool1",
            vec![untagged],
            vec![],
            None,
        ),
        (
            "tagged",
            &repos,
            &["registry.example.com/x:1"],
            "pool1",
            vec![],
            vec![],
            None,
        ),
        (
            "compliance is per object: one foreign image keeps latesttag pending for all",
            &repos,
            &["quay.io/x:1", "registry.example.com/x"],
            "pool1",
            vec!["allowedrepositories: container \"c0\": image \"quay.io/x:1\""],
            vec![],
            pending_on("allowedrepositories is NonCompliant"),
        ),
        (
            "compliance, not enforcement: a warned dependency is still NonCompliant",
            &repos_warn,
            &["quay.io/x"],
            "pool1",
            vec![],
            vec![foreign],
            pending_on("allowedrepositories is NonCompliant"),
        ),
        (
            "NonCompliant required, and met",
            &repos_non,
            &["quay.io/x"],
            "pool1",
            vec![
                foreign,
                "latesttag: container \"c0\": image \"quay.io/x\" has no tag",
            ],
            vec![],
            None,
        ),
        (
            "NonCompliant required, unmet",
            &repos_non,
            &["registry.example.com/x"],
            "pool1",
            vec![],
            vec![],
            Some("dependency allowedrepositories is Compliant, NonCompliant required".into()),
        ),
        (
            "placement satisfied",
            &placed,
            &["registry.example.com/x"],
            "pool1",
            vec![untagged],
            vec![],
            None,
        ),
        (
            "placement conflicts: only the conflict is denied",
            &placed,
            &["registry.example.com/x"],
            "gpu",
            vec!["namespace \"mapped\" is assigned to pool \"pool1\""],
            vec![],
            pending_on("placement is NonCompliant"),
        ),
    ];
    for (name, config, images, pool, denials, warnings, pending) in cases {
        let d = decide_inline("CREATE", None, pod(images, pool), None, config);
        let lines: Vec<&str> = d.message().lines().filter(|l| !l.is_empty()).collect();
        assert_eq!(lines.len(), denials.len(), "{name}: {d:?}");
        for (line, want) in lines.iter().zip(&denials) {
            assert!(line.starts_with(want), "{name}: {line:?} is not {want:?}");
        }
        assert_eq!(d.allowed(), denials.is_empty(), "{name}: {d:?}");
        assert_eq!(d.warnings.len(), warnings.len(), "{name}: {d:?}");
        for (line, want) in d.warnings.iter().zip(&warnings) {
            assert!(line.starts_with(want), "{name}: {line:?} is not {want:?}");
        }
        let latest = d
            .policy_results
            .iter()
            .find(|r| r.policy == "latesttag")
            .unwrap();
        assert_eq!(latest.pending, pending, "{name}");
        if latest.pending.is_some() {
            assert_eq!((latest.infringements, latest.error), (0, false), "{name}");
        }
    }
}

#[test]
fn relabel_between_mutation_and_validation_is_not_a_conflict() {
    // The mutating webhook saw pool1 and recorded it; by validation the namespace says gpu.
    let review = |annotation: Option<&str>| {
        let mut pod = pod(&["registry.example.com/a"], "pool1");
        if let Some(a) = annotation {
            pod["metadata"]["annotations"] = json!({"poolguard.io/pool": a});
        }
        json!({"uid": "u", "kind": {"group": "", "version": "v1", "kind": "Pod"}, "namespace": "gpu-team",
               "operation": "CREATE", "object": pod})
    };
    let rules = rules(None);
    let ns = namespaces();
    for (annotation, allowed) in [(Some("pool1"), true), (None, false), (Some("gpu"), false)] {
        let request = review(annotation);
        let req = Request::from_value(&request).unwrap();
        let d = rules.decide(
            Webhook::Validate,
            &req,
            Scope {
                labels: ns.get("gpu-team"),
                pools: None,
                now: None,
            },
            Budget::FULL,
        );
        assert_eq!(d.allowed(), allowed, "annotation {annotation:?}: {d:?}");
    }
}

#[test]
fn enforcement_modes_and_evaluation_failures() {
    let bad = pod(&["evil.io/a"], "pool1");
    let dryrun = DENY_EXAMPLE.replace(
        "allowedrepositories:\n",
        "allowedrepositories:\n    enforcement: dryrun\n",
    );
    let d = decide_inline("CREATE", None, bad.clone(), None, &dryrun);
    assert!(
        d.allowed() && d.warnings.is_empty() && d.dryrun.len() == 1,
        "{d:?}"
    );

    // More than one message: every one is listed, one per line, each naming the policy.
    let d = decide_inline(
        "CREATE",
        None,
        pod(&["evil.io/a", "evil.io/b"], "pool1"),
        None,
        DENY_EXAMPLE,
    );
    assert_eq!(d.message().lines().count(), 2, "{d:?}");
    assert!(
        d.message()
            .lines()
            .all(|l| l.starts_with("allowedrepositories: ")),
        "{d:?}"
    );

    // A policy that errors: denied (default) or allowed with a warning, never a silent allow.
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("boom.rego"),
        "package boom\ninfringement[{\"msg\": m}] { m := sprintf(\"%v\", [1 / input.parameters.zero]) }\n",
    )
    .unwrap();
    let config_dir = tempfile::tempdir().unwrap();
    for (on_error, allowed) in [("deny", false), ("allow", true)] {
        let config = config_dir.path().join("c.yaml");
        std::fs::write(&config, format!("evaluation: {{onError: {on_error}}}\npolicies:\n  boom:\n    parameters: {{zero: 0}}\n")).unwrap();
        let rules = Sources {
            config: Some(config),
            policies_dir: Some(dir.path().into()),
            placement_dir: None,
            gatekeeper_dir: None,
            gatekeeper_cluster: None,
        }
        .load()
        .unwrap();
        let request = json!({"uid": "u", "kind": {"group": "", "version": "v1", "kind": "Pod"}, "namespace": "unmapped",
                             "operation": "CREATE", "object": pod(&["x"], "pool1")});
        let req = Request::from_value(&request).unwrap();
        let d = rules.decide(
            Webhook::Validate,
            &req,
            Scope {
                labels: None,
                pools: None,
                now: None,
            },
            Budget::FULL,
        );
        assert_eq!(d.allowed(), allowed, "{on_error}: {d:?}");
        let text = if allowed {
            d.warnings.join("\n")
        } else {
            d.message().to_string()
        };
        assert!(
            text.contains("policy boom could not be evaluated"),
            "{on_error}: {d:?}"
        );
        if !allowed {
            assert_eq!(d.code(), Some(500));
        }
    }
}

#[test]
fn response_document_for_a_patch() {
    let rules = rules(None);
    let d = run("pod-create-mapped.json", Webhook::Mutate, &rules);
    let response = admission::respond("pod-create-mapped", &d)["response"].clone();
    assert_eq!(response["uid"], "pod-create-mapped");
    assert_eq!(response["patchType"], "JSONPatch");
    let patch = base64::engine::general_purpose::STANDARD
        .decode(response["patch"].as_str().unwrap())
        .unwrap();
    let mut pod = serde_json::from_slice::<Value>(
        &std::fs::read("testdata/reviews/pod-create-mapped.json").unwrap(),
    )
    .unwrap()["request"]["object"]
        .clone();
    json_patch::patch(
        &mut pod,
        &serde_json::from_slice::<json_patch::Patch>(&patch).unwrap(),
    )
    .unwrap();
    assert_eq!(pod["spec"]["nodeSelector"], json!({"agentpool": "pool1"}));
}

/// Every field that makes a pod pull an image reaches the policy, with the kind of thing that
/// pulls it named in the denial.
#[test]
fn images_from_every_field_are_checked() {
    let allowed = "registry.example.com/app:1";
    let volume = |reference: &str| json!([{"name": "data", "image": {"reference": reference}}]);
    let mut volume_pod = pod(&[allowed], "pool1");
    volume_pod["spec"]["volumes"] = volume("evil.io/models:1");
    let d = decide_inline("CREATE", None, volume_pod, None, DENY_EXAMPLE);
    assert!(!d.allowed(), "{d:?}");
    assert!(
        d.message().contains("image volume \"data\"") && d.message().contains("evil.io/models"),
        "{d:?}"
    );
    // Hub images under an uppercase "registry" are pulled from that host, not from Docker Hub.
    let hub =
        "policies:\n  allowedrepositories:\n    parameters:\n      repositories: [docker.io/]\n";
    for image in ["Evilhost/app:1", "LOCALHOST/app"] {
        let d = decide_inline("CREATE", None, pod(&[image], "pool1"), None, hub);
        assert!(!d.allowed(), "{image}: {d:?}");
        assert!(d.message().contains("container \"c0\""), "{d:?}");
    }
    assert!(decide_inline("CREATE", None, pod(&["nginx:1"], "pool1"), None, hub).allowed());
    // An init container hidden behind a same-named container.
    let mut hidden = pod(&[allowed], "pool1");
    hidden["spec"]["initContainers"] = json!([{"name": "c0", "image": "evil.io/x"}]);
    let d = decide_inline("CREATE", None, hidden, None, DENY_EXAMPLE);
    assert_eq!((d.allowed(), d.code()), (false, Some(400)), "{d:?}");
    assert!(d.message().contains("used twice"), "{d:?}");
}

/// Workload templates are read the same way: an image volume in a Deployment's template is
/// refused at apply time.
#[test]
fn image_volumes_in_workload_templates_are_checked() {
    let request = json!({"uid": "u", "kind": {"group": "apps", "version": "v1", "kind": "Deployment"},
        "resource": {"group": "apps", "version": "v1", "resource": "deployments"},
        "namespace": "mapped", "operation": "CREATE",
        "object": {"metadata": {"name": "d"}, "spec": {"template": {"spec": {
            "containers": [{"name": "app", "image": "registry.example.com/app:1"}],
            "volumes": [{"name": "m", "image": {"reference": "evil.io/m:1"}}]}}}}});
    let rules = rules(Some("example.yaml"));
    let req = Request::from_value(&request).unwrap();
    let d = rules.decide(
        Webhook::Validate,
        &req,
        Scope {
            labels: namespaces().get("mapped"),
            pools: None,
            now: None,
        },
        Budget::FULL,
    );
    assert!(
        !d.allowed() && d.message().contains("image volume \"m\""),
        "{d:?}"
    );
}

/// Malformed pod specs are 400s with a one-line reason, never an allow with nothing checked.
#[test]
fn malformed_pods_are_refused_with_one_line() {
    let cases: Vec<(&str, Value)> = vec![
        (
            "containers as an object",
            json!({"name": "a", "image": "evil.io/x"}),
        ),
        ("containers as a string", json!("evil.io/x")),
        (
            "a non-string image",
            json!([{"name": "a", "image": {"evil": "io"}}]),
        ),
        (
            "an image that is a number",
            json!([{"name": "a", "image": 7}]),
        ),
        (
            "an invalid reference",
            json!([{"name": "a", "image": "registry.example.com/app:1.0:evil"}]),
        ),
        (
            "a `..` component",
            json!([{"name": "a", "image": "registry.example.com/../x"}]),
        ),
        (
            "a bad digest",
            json!([{"name": "a", "image": "registry.example.com/x@sha256:12"}]),
        ),
    ];
    for (what, containers) in cases {
        let object = json!({"metadata": {"name": "p"}, "spec": {"containers": containers, "nodeSelector": {"agentpool": "pool1"}}});
        let d = decide_inline("CREATE", None, object, None, DENY_EXAMPLE);
        assert_eq!((d.allowed(), d.code()), (false, Some(400)), "{what}: {d:?}");
        assert_eq!(d.message().lines().count(), 1, "{what}: {d:?}");
        // Not even an allow-everything config lets them through.
        let d = decide_inline(
            "CREATE",
            None,
            json!({"spec": {"containers": containers}}),
            None,
            "{}",
        );
        assert!(!d.allowed(), "{what} without policies: {d:?}");
    }
}

/// A wide object is refused before any policy sees it, and a denial lists a bounded number of
/// reasons.
#[test]
fn wide_objects_are_bounded() {
    let images: Vec<String> = (0..9000).map(|i| format!("evil.io/app{i}")).collect();
    let refs: Vec<&str> = images.iter().map(String::as_str).collect();
    let d = decide_inline("CREATE", None, pod(&refs, "pool1"), None, DENY_EXAMPLE);
    assert_eq!(
        (d.allowed(), d.code()),
        (false, Some(400)),
        "{}",
        d.message()
    );
    assert!(d.message().contains("pulls 9000 images") && d.message().contains("at most 250"));
    assert!(d.policy_results.is_empty(), "no policy ran");
    // Within the limit, every bad image is found but the message lists the first 20.
    let d = decide_inline(
        "CREATE",
        None,
        pod(&refs[..200], "pool1"),
        None,
        DENY_EXAMPLE,
    );
    assert!(!d.allowed());
    assert_eq!(d.policy_results[0].infringements, 200);
    assert_eq!(d.message().lines().count(), 21, "{}", d.message());
    assert!(d.message().ends_with("... and 180 more"), "{}", d.message());
}

/// While a pod has no node, its scheduling directives may still change (scheduling gates): any
/// change must keep it on its namespace's pool, and a forged pool annotation does not help.
#[test]
fn unscheduled_pods_cannot_move_to_another_pool() {
    let gated = |selector: Value, annotation: Option<&str>, gates: bool| {
        let mut p = json!({"metadata": {"name": "p"}, "spec": {
            "containers": [{"name": "c", "image": "registry.example.com/a"}]}});
        if !selector.is_null() {
            p["spec"]["nodeSelector"] = selector;
        }
        if gates {
            p["spec"]["schedulingGates"] = json!([{"name": "example.com/wait"}]);
        }
        if let Some(a) = annotation {
            p["metadata"]["annotations"] = json!({"poolguard.io/pool": a});
        }
        p
    };
    // Created before the namespace had a pool: no selector, gated.
    let old = gated(Value::Null, None, true);
    let cases = [
        (
            "add another pool's selector",
            gated(json!({"agentpool": "gpu"}), None, true),
            false,
        ),
        (
            "... with a forged pool annotation",
            gated(json!({"agentpool": "gpu"}), Some("gpu"), true),
            false,
        ),
        (
            "pin to a node without the pool",
            gated(json!({"kubernetes.io/hostname": "gpu-node-1"}), None, true),
            false,
        ),
        (
            "ungate without the pool",
            gated(Value::Null, None, false),
            false,
        ),
        (
            "add the pool's selector",
            gated(json!({"agentpool": "pool1"}), None, true),
            true,
        ),
        (
            "add the pool and ungate",
            gated(json!({"agentpool": "pool1"}), None, false),
            true,
        ),
        (
            "change nothing that schedules",
            {
                let mut p = old.clone();
                p["metadata"]["labels"] = json!({"a": "b"});
                p
            },
            true,
        ),
    ];
    for (what, new, allowed) in cases {
        let d = decide_inline("UPDATE", None, new, Some(old.clone()), "{}");
        assert_eq!(d.allowed(), allowed, "{what}: {d:?}");
        if !allowed {
            assert_eq!(d.code(), Some(403), "{what}: {d:?}");
        }
    }
    // A pod already bound to a node is not rescheduled by an update: nothing to check there.
    let mut bound = gated(Value::Null, None, false);
    bound["spec"]["nodeName"] = json!("pool1-node-1");
    let mut relabelled = bound.clone();
    relabelled["metadata"]["labels"] = json!({"a": "b"});
    assert!(decide_inline("UPDATE", None, relabelled, Some(bound), "{}").allowed());
    // The pool annotation is trusted only at creation (the relabel race), never on update.
    let placed = gated(json!({"agentpool": "pool1"}), Some("pool1"), true);
    let moved = gated(json!({"agentpool": "gpu"}), Some("gpu"), true);
    let d = decide_inline("UPDATE", None, moved, Some(placed), "{}");
    assert!(!d.allowed(), "{d:?}");
}

/// The chart's `webhook.skipUnchangedUpdates` has the API server leave out UPDATEs that keep a
/// Pod's spec, a workload's pod template and the poolguard.io/* annotations (no subresource),
/// on the grounds that poolguard allows every one of them. This keeps that true: objects that
/// break every rule (a foreign image, another pool's selector, no selector at all), updated in
/// everything else, are allowed, while the same objects are refused at creation. The one
/// exception is a policy that judges labels (through `input.review`): it judges the old object
/// as itself, so taking its label away is a new infringement and refused, which is why the chart
/// leaves the condition out when Gatekeeper constraints are loaded.
#[test]
fn updates_that_keep_what_poolguard_reads_are_allowed() {
    let policies = tempfile::tempdir().unwrap();
    for file in ["allowedrepositories.yaml", "latesttag.yaml"] {
        std::fs::copy(Path::new("policies").join(file), policies.path().join(file)).unwrap();
    }
    // A policy judging metadata, through the review of each object.
    std::fs::write(
        policies.path().join("teamlabel.rego"),
        "package teamlabel\ninfringement[{\"msg\": \"no team label\"}] { not input.review.object.metadata.labels.team }\n",
    )
    .unwrap();
    let config_dir = tempfile::tempdir().unwrap();
    let config = config_dir.path().join("config.yaml");
    std::fs::write(
        &config,
        "policies:\n  allowedrepositories:\n    parameters: {repositories: [registry.example.com]}\n  latesttag:\n    parameters: {}\n  teamlabel:\n    parameters: {}\n",
    )
    .unwrap();
    let rules = Sources {
        config: Some(config),
        policies_dir: Some(policies.path().into()),
        placement_dir: None,
        gatekeeper_dir: None,
        gatekeeper_cluster: None,
    }
    .load()
    .unwrap();
    let decide_kind = |group: &str, kind: &str, op: &str, object: &Value, old: Option<&Value>| {
        let request = json!({"uid": "u", "kind": {"group": group, "version": "v1", "kind": kind},
                             "namespace": "mapped", "operation": op, "object": object, "oldObject": old});
        let req = Request::from_value(&request).unwrap();
        rules.decide(
            Webhook::Validate,
            &req,
            Scope {
                labels: namespaces().get("mapped"),
                pools: None,
                now: None,
            },
            Budget::FULL,
        )
    };
    // Pod specs that break the rules of namespace "mapped" (pool pool1).
    let specs = [
        (
            "a foreign image",
            json!({"containers": [{"name": "c", "image": "evil.io/a:1"}], "nodeSelector": {"agentpool": "pool1"}}),
        ),
        (
            "an untagged image",
            json!({"containers": [{"name": "c", "image": "registry.example.com/a"}], "nodeSelector": {"agentpool": "pool1"}}),
        ),
        (
            "another pool's selector",
            json!({"containers": [{"name": "c", "image": "registry.example.com/a:1"}], "nodeSelector": {"agentpool": "gpu"}}),
        ),
        (
            "no selector, gated",
            json!({"containers": [{"name": "c", "image": "registry.example.com/a:1"}], "schedulingGates": [{"name": "x"}]}),
        ),
        (
            "a foreign ephemeral container",
            json!({"containers": [{"name": "c", "image": "registry.example.com/a:1"}], "nodeSelector": {"agentpool": "pool1"},
                                                 "ephemeralContainers": [{"name": "d", "image": "evil.io/debug:1"}]}),
        ),
    ];
    // What controllers change around them.
    type Change = fn(&mut Value);
    let metadata_changes: [(&str, Change); 4] = [
        ("labels replaced", |m| m["labels"] = json!({"app": "other"})),
        ("annotation added", |m| {
            m["annotations"]["example.com/restarted-at"] = json!("now")
        }),
        ("finalizer added", |m| {
            m["finalizers"] = json!(["batch.kubernetes.io/job-tracking"])
        }),
        ("owner and everything else", |m| {
            m["ownerReferences"] =
                json!([{"apiVersion": "v1", "kind": "X", "name": "o", "uid": "1"}]);
            m["labels"] = Value::Null;
            m["annotations"] = json!({"poolguard.io/pool": "pool1"});
        }),
    ];
    type Make = fn(Value, Value) -> Value;
    let kinds: [(&str, &str, Make); 4] = [
        (
            "",
            "Pod",
            |meta, spec| json!({"metadata": meta, "spec": spec}),
        ),
        (
            "apps",
            "Deployment",
            |meta, spec| json!({"metadata": meta, "spec": {"replicas": 1, "template": {"metadata": {"labels": {"app": "a"}}, "spec": spec}}}),
        ),
        (
            "apps",
            "ReplicaSet",
            |meta, spec| json!({"metadata": meta, "spec": {"replicas": 1, "template": {"spec": spec}}}),
        ),
        (
            "batch",
            "CronJob",
            |meta, spec| json!({"metadata": meta, "spec": {"schedule": "* * * * *", "jobTemplate": {"spec": {"template": {"spec": spec}}}}}),
        ),
    ];
    for (group, kind, make) in kinds {
        for (what, spec) in &specs {
            let old_meta = json!({"name": "o", "labels": {"team": "a"}, "annotations": {"poolguard.io/pool": "pool1"}});
            let old = make(old_meta.clone(), spec.clone());
            for (change, apply) in metadata_changes {
                let mut meta = old_meta.clone();
                apply(&mut meta);
                let mut new = make(meta, spec.clone());
                if kind != "Pod" {
                    new["spec"]["replicas"] = json!(7); // scaled as well
                }
                let ctx = format!("{kind} with {what}, {change}");
                let created = decide_kind(group, kind, "CREATE", &new, None);
                // A workload's template without the selector is patched at pod creation, so
                // only the pod forms of the mutating webhook's absence are refused for workloads.
                if kind == "Pod" || !what.starts_with("no selector") {
                    assert!(!created.allowed(), "{ctx}: created: {created:?}");
                }
                let updated = decide_kind(group, kind, "UPDATE", &new, Some(&old));
                if change == "labels replaced" || change == "owner and everything else" {
                    // The team label is gone: teamlabel's infringement is new, and the only one.
                    assert!(!updated.allowed(), "{ctx}: updated: {updated:?}");
                    assert_eq!(
                        updated.message(),
                        "teamlabel: no team label",
                        "{ctx}: updated: {updated:?}"
                    );
                } else {
                    assert!(updated.allowed(), "{ctx}: updated: {updated:?}");
                }
            }
        }
    }
}

/// A Namespace's labels can be written through its `status` and `finalize` subresources as
/// well as the main resource: each is decided exactly as a main-resource UPDATE of the same
/// objects, for the pool label and every other guarded label, whoever asks.
#[test]
fn namespace_subresources_are_decided_as_the_namespace() {
    let dir = tempfile::tempdir().unwrap();
    let config_path = dir.path().join("config.yaml");
    std::fs::write(
        &config_path,
        "poolAuthority:\n  groups: [platform-admins]\n  guardedLabels: [poolguard.example.com/enabled]\n",
    )
    .unwrap();
    let rules = Sources {
        config: Some(config_path),
        policies_dir: Some("policies".into()),
        placement_dir: None,
        gatekeeper_dir: None,
        gatekeeper_cluster: None,
    }
    .load()
    .unwrap();
    let review = |sub: &str, old: &Value, new: &Value, user: &Value| -> Value {
        let ns = |labels: &Value| {
            json!({"apiVersion": "v1", "kind": "Namespace",
                   "metadata": {"name": "team-a", "labels": labels}, "spec": {"finalizers": ["kubernetes"]}})
        };
        let mut request = json!({
            "uid": "u", "kind": {"group": "", "version": "v1", "kind": "Namespace"},
            "resource": {"group": "", "version": "v1", "resource": "namespaces"},
            "requestKind": {"group": "", "version": "v1", "kind": "Namespace"},
            "requestResource": {"group": "", "version": "v1", "resource": "namespaces"},
            "name": "team-a", "namespace": "team-a", "operation": "UPDATE",
            "userInfo": user, "object": ns(new), "oldObject": ns(old), "options": {"kind": "UpdateOptions", "apiVersion": "meta.k8s.io/v1"}});
        if !sub.is_empty() {
            request["subResource"] = json!(sub);
            request["requestSubResource"] = json!(sub);
        }
        json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request})
    };
    let decide_review = |review: &Value| {
        let body = serde_json::to_vec(review).unwrap();
        let review = admission::parse_review(&body).unwrap();
        let req = Request::from_value(&review["request"]).unwrap();
        rules.decide(
            Webhook::Validate,
            &req,
            Scope {
                labels: namespaces().get(req.namespace),
                pools: None,
                now: None,
            },
            Budget::FULL,
        )
    };
    let editor = json!({"username": "alice", "groups": ["system:authenticated"]});
    let admin = json!({"username": "bob", "groups": ["platform-admins", "system:authenticated"]});
    let labels =
        json!({"agentpool": "pool1", "poolguard.example.com/enabled": "true", "team": "a"});
    let with = |key: &str, value: Option<&str>| {
        let mut l = labels.clone();
        match value {
            Some(v) => l[key] = json!(v),
            None => {
                l.as_object_mut().unwrap().remove(key);
            }
        }
        l
    };
    // (what, old labels, new labels, editor allowed)
    let cases = [
        (
            "relabel the pool",
            labels.clone(),
            with("agentpool", Some("gpu")),
            false,
        ),
        (
            "remove the pool",
            labels.clone(),
            with("agentpool", None),
            false,
        ),
        (
            "set the pool",
            with("agentpool", None),
            labels.clone(),
            false,
        ),
        (
            "remove the opt-in label",
            labels.clone(),
            with("poolguard.example.com/enabled", None),
            false,
        ),
        (
            "change the opt-in label",
            labels.clone(),
            with("poolguard.example.com/enabled", Some("false")),
            false,
        ),
        (
            "change another label",
            labels.clone(),
            with("team", Some("b")),
            true,
        ),
        ("change nothing", labels.clone(), labels.clone(), true),
    ];
    for (what, old, new, editor_allowed) in cases {
        let main = decide_review(&review("", &old, &new, &editor));
        assert_eq!(main.allowed(), editor_allowed, "{what}: {main:?}");
        for sub in ["status", "finalize"] {
            let d = decide_review(&review(sub, &old, &new, &editor));
            assert_eq!(
                (d.allowed(), d.code()),
                (main.allowed(), main.code()),
                "{what} via {sub}: {d:?}"
            );
            if !editor_allowed {
                assert!(
                    d.message().contains("poolAuthority") && d.message().contains(sub),
                    "{what} via {sub}: {}",
                    d.message()
                );
            }
            let d = decide_review(&review(sub, &old, &new, &admin));
            assert!(d.allowed(), "{what} via {sub} by the authority: {d:?}");
        }
    }
}
