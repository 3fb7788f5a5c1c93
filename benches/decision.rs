//! Microseconds per decision on the pure path (parse the AdmissionReview, decide, build the
//! response), for pods with 1 and 10 containers: mutating, and validating under three configs —
//! allowedrepositories alone (no dependencies), allowedrepositories and latesttag side by side,
//! latesttag depending on allowedrepositories (testdata/config/example.yaml), and a Gatekeeper
//! template (K8sAllowedRepos) in place of the shipped policies. Every image is
//! allowed and tagged, so every policy runs. Then a pool chosen by the shipped placement
//! policies (fitsresources, gpuonly) among 3 and 50 pools: mutating (choose and patch) and
//! validating (choose again, then the SIT policies). Prints numbers; asserts nothing about time.
//!
//! Each row is measured on three workloads, so remembered results (`evaluation.resultCacheMiB`)
//! cannot hide the cost of a first evaluation:
//! - distinct: every request a different pod (an image tag and a memory request of its own), so
//!   every policy evaluation misses the memo (and fills it, evicting as it goes);
//! - replicas: the pods of one ReplicaSet (one generateName and spec, each its own name), so
//!   after the first, every evaluation is remembered;
//! - memo off: the distinct pods with `resultCacheMiB: 0`, the cost before the memo.
//!
//! cargo bench --bench decision [-- ITERATIONS] [ROWS]: ROWS keeps only the validating rows whose
//! policies name contains it (`gatekeeper`), and leaves out the placement rows.

use std::hint::black_box;
use std::time::Instant;

use poolguard::sources::{load_namespaces, load_placement_policies, load_policies};
use poolguard_core::admission::{self, Request};
use poolguard_core::config::Config;
use poolguard_core::labels::Labels;
use poolguard_core::placement_policy::{NodeFacts, PoolFacts, PoolSet};
use poolguard_core::ruleset::Budget;
use poolguard_core::ruleset::RuleSet;
use poolguard_core::scope::Scope;
use poolguard_core::webhook::Webhook;
use serde_json::json;

/// The time decisions are made at (PolicyExceptions are live against it; none is loaded here).
const NOW: i64 = 1_800_000_000;

/// As the poolguard binary's (src/main.rs).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// allowedrepositories as the example config sets it.
const ONE_POLICY: &str = r#"
policies:
  allowedrepositories:
    parameters:
      repositories: ["registry.example.com/", "registry.k8s.io/"]
pools:
  gpu:
    policies:
      allowedrepositories:
        parameters:
          repositories: ["registry.example.com/", "gpu.example.com/"]
"#;

/// Pod `k` of a workload: [`Workload::Distinct`] pods differ in their first image's tag.
fn review(containers: usize, workload: Workload, k: usize) -> Vec<u8> {
    let containers: Vec<_> = (0..containers)
        .map(|i| json!({"name": format!("c{i}"), "image": format!("registry.example.com/team/app{i}:1.{i}{}", workload.variant(i, k))}))
        .collect();
    serde_json::to_vec(&json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {"uid": "bench", "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "namespace": "mapped", "operation": "CREATE",
            "userInfo": {"username": "system:serviceaccount:kube-system:replicaset-controller"},
            "object": {"apiVersion": "v1", "kind": "Pod",
                "metadata": {"generateName": "web-5d9c7b-", "name": format!("web-5d9c7b-{k:05}"), "labels": {"app": "web", "pod-template-hash": "5d9c7b"}},
                "spec": {"containers": containers, "nodeSelector": {"agentpool": "pool1"}}}}
    }))
    .unwrap()
}

/// What the requests of one measurement are.
#[derive(Clone, Copy, PartialEq)]
enum Workload {
    Distinct,
    Replicas,
}

impl Workload {
    /// What makes pod `k` differ in its container `i` (only the first differs).
    fn variant(self, i: usize, k: usize) -> String {
        match self {
            Workload::Distinct if i == 0 => format!("-b{k}"),
            _ => String::new(),
        }
    }
}

/// The three columns of every row: (workload, memo on).
const COLUMNS: [(Workload, bool); 3] = [
    (Workload::Distinct, true),
    (Workload::Replicas, true),
    (Workload::Distinct, false),
];

/// `rules` with the memo on or off.
fn with_memo(rules: &RuleSet, on: bool) -> RuleSet {
    let mut config = rules.config().clone();
    if !on {
        config.evaluation.result_cache_mib = 0;
    }
    // Loaded again: fresh memos either way, nothing carried over from the last measurement.
    let (policies, placement) = (rules.policies().clone(), rules.placement().clone());
    RuleSet::new(config, policies, placement, "bench").expect("the rules loaded before")
}

/// Microseconds per request over the bodies `make(k)` makes for each column.
fn columns(
    iterations: u32,
    make: impl Fn(Workload, usize) -> Vec<u8>,
    rules: &RuleSet,
    decide_one: impl Fn(&RuleSet, &[u8]) -> Vec<u8>,
) -> [f64; 3] {
    COLUMNS.map(|(workload, memo)| {
        let rules = with_memo(rules, memo);
        let bodies: Vec<Vec<u8>> = (0..(iterations + iterations / 10) as usize)
            .map(|k| make(workload, k))
            .collect();
        microseconds_each(iterations, |k| decide_one(&rules, &bodies[k]))
    })
}

fn rules(name: &str, config: &str) -> RuleSet {
    let config = Config::parse(config, name).unwrap();
    let policies = load_policies("policies".as_ref()).unwrap();
    RuleSet::new(config, policies, Default::default(), name).unwrap()
}

/// testdata/gatekeeper/allowedrepos's K8sAllowedRepos template and a constraint of it allowing
/// the repositories [`ONE_POLICY`] allows, and no SIT policy: user-written Rego that reads the
/// whole AdmissionRequest (never remembered).
fn gatekeeper_rules() -> RuleSet {
    let dir = std::path::Path::new("testdata/gatekeeper/allowedrepos");
    let template = std::fs::read_to_string(dir.join("template.yaml")).unwrap();
    let constraint = std::fs::read_to_string(dir.join("constraint.yaml"))
        .unwrap()
        .replace(
            "- \"registry.k8s.io/\"",
            "- \"registry.example.com/\"\n      - \"registry.k8s.io/\"",
        );
    assert!(constraint.contains("registry.example.com/"));
    let files = [
        (dir.join("template.yaml"), template),
        (dir.join("constraint.yaml"), constraint),
    ];
    let config = Config::parse(
        "namespaceLabel: agentpool\nnodeSelectorKey: agentpool\n",
        "gatekeeper",
    )
    .unwrap();
    let (rules, warnings) = RuleSet::with_gatekeeper(
        config,
        Default::default(),
        Default::default(),
        poolguard_core::gatekeeper::Files::of(&files),
        "gatekeeper",
    )
    .unwrap();
    assert!(warnings.is_empty(), "{warnings:?}");
    rules
}

fn main() {
    let iterations: u32 = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(20_000);
    // Any other argument (not a cargo flag) keeps only the rows whose policies name contain it.
    let only: Option<String> = std::env::args()
        .skip(1)
        .find(|a| !a.starts_with('-') && a.parse::<u32>().is_err());
    let example = std::fs::read_to_string("testdata/config/example.yaml").unwrap();
    // The example's two policies, without the dependency.
    let side_by_side = ONE_POLICY.replace(
        "\npools:",
        "\n  latesttag:\n    parameters:\n      exemptRepositories: [\"registry.example.com/dev/\"]\npools:",
    );
    let configs = [
        ("one policy", rules("one policy", ONE_POLICY)),
        ("two, no deps", rules("two, no deps", &side_by_side)),
        ("two, chained", rules("two, chained", &example)),
        ("gatekeeper", gatekeeper_rules()),
    ];
    assert!(!configs[1].1.policies().plan().has_dependencies());
    assert!(configs[2].1.policies().plan().has_dependencies());
    let namespaces = load_namespaces("testdata/namespaces.yaml".as_ref()).unwrap();
    println!("poolguard decision benchmark: {iterations} iterations each");
    println!("us/decision (distinct: every pod new; replicas: one ReplicaSet's pods; memo off: distinct pods, resultCacheMiB 0)");
    println!(
        "{:<10} {:<14} {:>10} {:>10} {:>10} {:>10}",
        "webhook", "policies", "containers", "distinct", "replicas", "memo off"
    );
    let cases = [
        (Webhook::Mutate, &configs[0]),
        (Webhook::Validate, &configs[0]),
        (Webhook::Validate, &configs[1]),
        (Webhook::Validate, &configs[2]),
        (Webhook::Validate, &configs[3]),
    ];
    for (webhook, (name, rules)) in cases {
        let name = if webhook == Webhook::Mutate {
            "-"
        } else {
            name
        };
        if only.as_deref().is_some_and(|only| !name.contains(only)) {
            continue;
        }
        for containers in [1, 10] {
            let once = |rules: &RuleSet, body: &[u8]| {
                let doc = admission::parse_review(black_box(body)).unwrap();
                let req = Request::from_value(&doc["request"]).unwrap();
                let scope = Scope {
                    labels: namespaces.get(req.namespace),
                    pools: None,
                    now: Some(NOW),
                };
                let d = rules.decide(webhook, &req, scope, Budget::FULL);
                assert!(d.allowed(), "{d:?}");
                serde_json::to_vec(&admission::respond(req.uid, &d)).unwrap()
            };
            let [distinct, replicas, off] = columns(
                iterations,
                |workload, k| review(containers, workload, k),
                rules,
                once,
            );
            println!(
                "{:<10} {:<14} {:>10} {distinct:>10.2} {replicas:>10.2} {off:>10.2}",
                webhook.as_str(),
                name,
                containers,
            );
        }
    }

    if only.is_none() {
        placement(iterations);
    }
}

/// Microseconds per call of `once(k)`, over `iterations` calls after a tenth as many to warm
/// up; `k` counts on through both, so every call can have its own input.
fn microseconds_each<T>(iterations: u32, once: impl Fn(usize) -> T) -> f64 {
    let warmup = (iterations / 10) as usize;
    for k in 0..warmup {
        black_box(once(k));
    }
    let start = Instant::now();
    for k in warmup..warmup + iterations as usize {
        black_box(once(k));
    }
    start.elapsed().as_secs_f64() * 1e6 / f64::from(iterations)
}

/// `count` pools of three nodes each, of growing size; the last has GPUs.
fn pools(count: usize) -> PoolSet {
    let mut nodes = Vec::new();
    for p in 0..count {
        for n in 0..3 {
            let mut allocatable = json!({"cpu": format!("{}", 4 * (p + 1)), "memory": format!("{}Gi", 16 * (p + 1)), "pods": "110"});
            if p + 1 == count {
                allocatable["nvidia.com/gpu"] = json!("4");
            }
            nodes.push(
                NodeFacts::from_node(&json!({
                    "metadata": {"name": format!("pool{p}-node{n}"), "labels": {"agentpool": format!("pool{p}")}},
                    "status": {"allocatable": allocatable, "conditions": [{"type": "Ready", "status": "True"}]},
                }))
                .unwrap(),
            );
        }
    }
    PoolSet::new(PoolFacts::gather(&nodes, "agentpool"))
}

/// A pod of `containers` containers in a namespace whose pool is chosen; `selected` is the
/// nodeSelector the mutating webhook would have added (for the validating call).
fn choosing_review(
    containers: usize,
    selected: Option<&str>,
    workload: Workload,
    k: usize,
) -> Vec<u8> {
    // Distinct pods differ in their first image's tag and in its memory request.
    let containers: Vec<_> = (0..containers)
        .map(|i| {
            let variant = workload.variant(i, k);
            let memory = if variant.is_empty() { "512Mi".to_string() } else { format!("{}Ki", 512 * 1024 + k) };
            json!({"name": format!("c{i}"), "image": format!("registry.example.com/team/app{i}:1.{i}{variant}"),
                "resources": {"requests": {"cpu": "250m", "memory": memory}}})
        })
        .collect();
    let mut spec = json!({"containers": containers});
    if let Some(pool) = selected {
        spec["nodeSelector"] = json!({"agentpool": pool});
    }
    serde_json::to_vec(&json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {"uid": "bench", "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "namespace": "auto", "operation": "CREATE",
            "userInfo": {"username": "system:serviceaccount:kube-system:replicaset-controller"},
            "object": {"apiVersion": "v1", "kind": "Pod",
                "metadata": {"generateName": "web-5d9c7b-", "name": format!("web-5d9c7b-{k:05}"), "labels": {"app": "web"}},
                "spec": spec}}
    }))
    .unwrap()
}

fn placement(iterations: u32) {
    let config = Config::parse(
        &format!(
            "{ONE_POLICY}placement:\n  chooseValue: auto\n  pools: [{}]\n",
            (0..50)
                .map(|p| format!("pool{p}"))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        "placement",
    )
    .unwrap();
    let rules = RuleSet::new(
        config,
        load_policies("policies".as_ref()).unwrap(),
        load_placement_policies("policies/placement".as_ref()).unwrap(),
        "placement",
    )
    .unwrap();
    let labels: Labels = [("agentpool".to_string(), "auto".to_string())].into();
    let iterations = iterations / 4;
    println!();
    println!("pool chosen by the placement policies (fitsresources, gpuonly): {iterations} iterations each");
    println!(
        "{:<10} {:>6} {:>10} {:>10} {:>10} {:>10}",
        "webhook", "pools", "containers", "distinct", "replicas", "memo off"
    );
    for count in [3, 50] {
        let pools = pools(count);
        for webhook in [Webhook::Mutate, Webhook::Validate] {
            for containers in [1, 10] {
                let selected = (webhook == Webhook::Validate).then_some("pool0");
                let once = |rules: &RuleSet, body: &[u8]| {
                    let doc = admission::parse_review(black_box(body)).unwrap();
                    let req = Request::from_value(&doc["request"]).unwrap();
                    let scope = Scope {
                        labels: Some(&labels),
                        pools: Some(&pools),
                        now: Some(NOW),
                    };
                    let d = rules.decide(webhook, &req, scope, Budget::FULL);
                    assert!(d.allowed(), "{d:?}");
                    if webhook == Webhook::Mutate {
                        assert!(d.patch().is_some(), "a pool is chosen");
                    }
                    serde_json::to_vec(&admission::respond(req.uid, &d)).unwrap()
                };
                let [distinct, replicas, off] = columns(
                    iterations,
                    |workload, k| choosing_review(containers, selected, workload, k),
                    &rules,
                    once,
                );
                println!(
                    "{:<10} {:>6} {:>10} {distinct:>10.2} {replicas:>10.2} {off:>10.2}",
                    webhook.as_str(),
                    count,
                    containers,
                );
            }
        }
    }
}
