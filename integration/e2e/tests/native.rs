//! The native fast path, proved against the webhook's decision code through a real
//! kube-apiserver: the objects `poolguard native` generates are applied (with poolguard's
//! webhooks absent), then a generated corpus of pods (image references built from the fuzz
//! dictionary and hand-picked ones, selectors, annotations, image volumes, init containers; Pods
//! and every workload kind the webhooks check) is
//! created with `dryRun=All` in a namespace of each kind (a named pool, a pool with its own
//! policy settings, no pool) and each outcome (allowed or not, the nodeSelector, the
//! `poolguard.io/pool` annotation, warnings) is compared with what poolguard's webhooks decide
//! for the same pod in-process (mutate, patch, validate), the reference. Every reference of the
//! image reference table (`src/core/tests/data/image_reference_table.rs`, shared with the
//! parser's unit tests) goes through once more as the only image of a Pod.
//!
//! Needs a control plane without poolguard's webhooks (a webhook would decide too):
//! `integration/e2e.sh` runs it as suite `native` before it registers them. `POOLGUARD_E2E_NATIVE_PODS` sets the corpus size
//! (default 10000).

use std::collections::BTreeSet;
use std::sync::Arc;

use anyhow::{bail, ensure, Context, Result};
use futures::stream::{self, StreamExt};
use kube::api::{Api, ApiResource, DynamicObject, Patch, PatchParams};
use poolguard_core::config::Config;
use poolguard_core::config::Enforcement;
use poolguard_core::labels::Labels;
use poolguard_core::native::{self, Options};
use poolguard_core::policy::{template, PolicySet};
use poolguard_core::rollout::machine::{GroupState, GroupStatus, RolloutState};
use poolguard_core::rollout::view::{PolicyRollout, RolloutView, StoredSettings, StoredVersion};
use poolguard_core::ruleset::{Budget, RuleSet};
use poolguard_core::scope::Scope;
use poolguard_core::webhook::Webhook;
use poolguard_e2e::{run_for, Env, RawResponse};
use serde_json::{json, Value};

#[path = "../../../src/core/tests/data/image_reference_table.rs"]
mod image_reference_table;

/// The end of a generated validation's static `message`, which kube-apiserver gives when its
/// messageExpression fails.
const FALLBACK: &str = "the pod spec infringes the policy";

const CONFIG: &str = "
policies:
  allowedrepositories:
    parameters: {repositories: [registry.example.com/, registry.k8s.io, docker.io/library/, localhost:5000/team]}
  latesttag:
    enforcement: warn
    parameters: {exemptRepositories: [registry.example.com/dev/]}
pools:
  gpu:
    policies:
      allowedrepositories:
        enforcement: warn
        parameters: {repositories: [gpu.example.com/]}
";

fn rules(config: &str) -> Result<RuleSet> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../policies");
    let mut templates = Vec::new();
    for name in ["allowedrepositories", "latesttag"] {
        let path = dir.join(format!("{name}.yaml"));
        let text = std::fs::read_to_string(&path).with_context(|| path.display().to_string())?;
        templates.push(template::from_yaml(&text, path)?);
    }
    RuleSet::new(
        Config::parse(config, "native test config")?,
        PolicySet::compile(&templates)?,
        Default::default(),
        "native test config",
    )
}

/// What one pod CREATE came to.
#[derive(Debug, Clone, PartialEq)]
struct Outcome {
    allowed: bool,
    node_selector: Option<Value>,
    annotation: Option<Value>,
    /// The policies that warned.
    warned: BTreeSet<String>,
}

/// Where an object of `kind` is created: (group, resource, API path prefix).
fn resource_of(kind: &str) -> (&'static str, &'static str, &'static str) {
    match kind {
        "Deployment" => ("apps", "deployments", "/apis/apps/v1"),
        "ReplicaSet" => ("apps", "replicasets", "/apis/apps/v1"),
        "StatefulSet" => ("apps", "statefulsets", "/apis/apps/v1"),
        "DaemonSet" => ("apps", "daemonsets", "/apis/apps/v1"),
        "Job" => ("batch", "jobs", "/apis/batch/v1"),
        "CronJob" => ("batch", "cronjobs", "/apis/batch/v1"),
        "ReplicationController" => ("", "replicationcontrollers", "/api/v1"),
        _ => ("", "pods", "/api/v1"),
    }
}

/// The webhooks' decision, in-process: mutate, apply the patch, validate. `old` makes it an
/// UPDATE (of `subresource` when not empty).
fn reference(
    rules: &RuleSet,
    ns: &str,
    labels: &Labels,
    object: &Value,
    old: Option<&Value>,
    subresource: &str,
) -> Result<Outcome> {
    let kind = object["kind"].as_str().unwrap_or("Pod");
    let (group, resource, _) = resource_of(kind);
    let review = |object: &Value| {
        let mut review = json!({"uid": "u", "kind": {"group": group, "version": "v1", "kind": kind},
            "resource": {"group": group, "version": "v1", "resource": resource},
            "namespace": ns, "operation": if old.is_some() { "UPDATE" } else { "CREATE" },
            "object": object, "userInfo": {"username": "e2e"}});
        if let Some(old) = old {
            review["oldObject"] = old.clone();
        }
        if !subresource.is_empty() {
            review["subResource"] = json!(subresource);
        }
        review
    };
    let scope = Scope {
        labels: Some(labels),
        pools: None,
        now: None,
    };
    let decide = |which, object: &Value| {
        let raw = review(object);
        let req = poolguard_core::admission::Request::from_value(&raw)
            .map_err(|e| anyhow::anyhow!("{e:?}"))?;
        Ok::<_, anyhow::Error>(rules.decide(which, &req, scope, Budget::FULL))
    };
    let mutated = decide(Webhook::Mutate, object)?;
    if !mutated.allowed() {
        return Ok(Outcome::DENIED);
    }
    let mut object = object.clone();
    if let Some(patch) = mutated.patch() {
        json_patch::patch(&mut object, patch)?;
    }
    let validated = decide(Webhook::Validate, &object)?;
    if !validated.allowed() {
        return Ok(Outcome::DENIED);
    }
    // Each warning is "<policy>: <message>".
    let warned = validated
        .warnings
        .iter()
        .map(|w| w.split(':').next().unwrap_or_default().to_string())
        .collect();
    Ok(outcome_of(&object, warned))
}

impl Outcome {
    const DENIED: Outcome = Outcome {
        allowed: false,
        node_selector: None,
        annotation: None,
        warned: BTreeSet::new(),
    };
}

fn outcome_of(object: &Value, warned: BTreeSet<String>) -> Outcome {
    let spec = match object["kind"].as_str() {
        Some("Pod") | None => &object["spec"],
        Some("CronJob") => &object["spec"]["jobTemplate"]["spec"]["template"]["spec"],
        Some(_) => &object["spec"]["template"]["spec"],
    };
    Outcome {
        allowed: true,
        // The API server stores an empty map as none.
        node_selector: spec
            .get("nodeSelector")
            .filter(|s| s.as_object().is_some_and(|m| !m.is_empty()))
            .cloned(),
        annotation: object["metadata"]["annotations"]
            .get("poolguard.io/pool")
            .cloned(),
        warned,
    }
}

/// The API server's decision: a dry-run CREATE, or with `update` a dry-run PUT of the object
/// (`Some("")`) or of its subresource (`Some("ephemeralcontainers")`).
async fn native_outcome(
    env: &Env,
    ns: &str,
    object: &Value,
    update: Option<&str>,
) -> Result<Outcome> {
    let kind = object["kind"].as_str().unwrap_or("Pod");
    let (_, resource, prefix) = resource_of(kind);
    let collection = format!("{prefix}/namespaces/{ns}/{resource}");
    let req = match update {
        Some(subresource) => {
            let name = object["metadata"]["name"].as_str().unwrap_or_default();
            let path = match subresource {
                "" => format!("{collection}/{name}?dryRun=All"),
                sub => format!("{collection}/{name}/{sub}?dryRun=All"),
            };
            http::Request::put(path)
        }
        None => http::Request::post(format!("{collection}?dryRun=All")),
    }
    .header("content-type", "application/json")
    .body(serde_json::to_vec(object)?)?;
    let RawResponse {
        status,
        warnings,
        body,
    } = env.send_raw(req).await.context("sending the object")?;
    // `Validation failed for ValidatingAdmissionPolicy 'poolguard-…' with binding '…':
    // <policy>: <type> "<name>": …`: one ValidatingAdmissionPolicy may hold several shipped
    // policies, so the policy is the message's first word.
    // A message kube-apiserver did not take from the messageExpression (it refuses one with a
    // line break) is marked, so that it disagrees with the webhook's.
    let warned = warnings
        .iter()
        .map(|text| {
            let message = text.split_once("': ").map_or(text.as_str(), |(_, m)| m);
            let policy = message.split(':').next().unwrap_or(message);
            if message.starts_with("failed expression") || message.ends_with(FALLBACK) {
                format!("{policy} (not its messageExpression)")
            } else {
                policy.to_string()
            }
        })
        .collect();
    match status {
        201 | 200 => Ok(outcome_of(&body, warned)),
        400 | 403 | 422 => Ok(Outcome::DENIED),
        _ => bail!("HTTP {status}: {body}"),
    }
}

/// A small deterministic generator (xorshift64*), so a failure names a reproducible case.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }
}

const H64: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

/// Hand-picked references: normalisation corners, the allow-lists' edges, invalid ones.
fn fixed_references() -> Vec<String> {
    let mut refs: Vec<String> = [
        "nginx",
        "nginx:1.27",
        "nginx:latest",
        "library/nginx:1",
        "docker.io/nginx:1",
        "index.docker.io/nginx:1",
        "docker.io/library/nginx:latest",
        "bitnami/redis:7",
        "registry.example.com/app:1",
        "registry.example.com/app",
        "registry.example.com/dev/app",
        "registry.example.com/dev/app:latest",
        "registry.example.com.evil.io/app:1",
        "registry.example.comx/app:1",
        "registry.example.com:5000/app:1",
        "registry.k8s.io/pause:3.10",
        "registry.k8s.io/pause",
        "gpu.example.com/cuda:12",
        "gpu.example.com/cuda",
        "Evilhost/app:1",
        "LOCALHOST/app",
        "localhost/app:1",
        "localhost:5000",
        "localhost:5000/app:1",
        "a_b.example.com/app:1",
        "[::1]:5000/app:1",
        "[::1]/app",
        "app:1.0:evil",
        "UPPER:1",
        "app:",
        "app@",
        ":1",
        "/app",
        "app/",
        "a//b",
        "a..b",
        "a.-b",
        "a__b:1",
        "a___b:1",
        "registry-1.docker.io/library/nginx:1",
        "Docker.io/library/nginx:1",
        "INDEX.DOCKER.IO/nginx:1",
        // Around the allow-list entry with a path (the CEL fast path's `p`, `p:tag`, `p@digest`).
        "localhost:5000/team",
        "localhost:5000/team:1",
        "localhost:5000/team:latest",
        "localhost:5000/teamx:1",
        "localhost:5000/team/app",
        "localhost:5000/team/app:latest",
        "localhost:5000/team/:1",
        "localhost:5000/team:1/app",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    for alg in ["sha256", "sha384", "sha512", "md5"] {
        let hex = H64.repeat(2);
        for len in [64, 96, 128] {
            refs.push(format!("nginx@{alg}:{}", &hex[..len]));
            refs.push(format!(
                "registry.example.com/app:latest@{alg}:{}",
                &hex[..len]
            ));
            refs.push(format!("{alg}:{}", &hex[..len]));
        }
    }
    refs.push(H64.to_string());
    refs.push(format!("a/{}", "b".repeat(250)));
    refs.push("b".repeat(248));
    // The longest reference whose size alone says its path fits (247 + `library/`), and one more.
    refs.push("b".repeat(247));
    refs.push(format!("localhost:5000/team@sha256:{H64}"));
    refs.push(format!("localhost:5000/team:latest@sha256:{H64}"));
    refs.push(format!("a_b.example.com/{}", "b".repeat(238)));
    refs.push("nginx@sha256:".to_string() + &H64.to_uppercase());
    refs
}

/// A reference built from the fuzz dictionary's pieces and a few words.
fn dictionary_reference(rng: &mut Rng, dict: &[String]) -> String {
    let words = [
        "nginx",
        "app",
        "registry.example.com",
        "gpu.example.com",
        "registry.k8s.io",
        "dev",
        "1.27",
        "v1",
        "Team",
        "team",
        "localhost:5000",
    ];
    let pieces = 1 + rng.below(5);
    let mut out = String::new();
    for _ in 0..pieces {
        if rng.below(2) == 0 {
            out.push_str(rng.pick(dict).as_str());
        } else {
            let word = *rng.pick(&words);
            out.push_str(word);
        }
    }
    if out.trim().is_empty() || out != out.trim() {
        return "nginx".into();
    }
    out
}

fn dictionary() -> Result<Vec<String>> {
    let path =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/dict/image_reference.dict");
    let text = std::fs::read_to_string(&path).with_context(|| path.display().to_string())?;
    Ok(text
        .lines()
        .filter(|l| l.starts_with('"'))
        .map(|l| l.trim_matches('"').to_string())
        .collect())
}

/// Images every config of the test allows (or exempts), so that placement and warnings are
/// reached as often as refusals.
const ALLOWED: [&str; 6] = [
    "registry.example.com/app:1",
    "registry.k8s.io/pause:3.10",
    "nginx:1.27",
    "docker.io/library/busybox:1.36",
    "registry.example.com/dev/app",
    "gpu.example.com/cuda:12",
];

/// One generated object: a Pod (half the time with allowed images only) or a workload of any
/// kind ([`WORKLOADS`]), with a nodeSelector under `key` among the cases of the decision table.
fn object(rng: &mut Rng, i: usize, refs: &[String], dict: &[String], key: &str) -> Value {
    let clean = rng.below(2) == 0;
    let image = |rng: &mut Rng| match (clean, rng.below(5)) {
        (true, _) | (false, 0 | 1) => rng.pick(&ALLOWED[..]).to_string(),
        (false, 2) => dictionary_reference(rng, dict),
        _ => rng.pick(refs).clone(),
    };
    let containers: Vec<Value> = (0..1 + rng.below(3))
        .map(|c| json!({"name": format!("c{c}"), "image": image(rng)}))
        .collect();
    let mut spec = json!({"containers": containers});
    if rng.below(4) == 0 {
        spec["initContainers"] = json!([{"name": "init", "image": image(rng)}]);
    }
    if rng.below(6) == 0 {
        spec["volumes"] = json!([{"name": "model", "image": {"reference": image(rng)}}]);
    }
    let other = *rng.pick(&["pool1", "gpu", "other"][..]);
    match rng.below(8) {
        0 => {}
        1 => spec["nodeSelector"] = json!({}),
        2 => spec["nodeSelector"] = json!({"kubernetes.io/os": "linux"}),
        3 => spec["nodeSelector"] = json!({key: other}),
        4 => spec["nodeSelector"] = json!({key: other, "disk": "ssd"}),
        5 => spec["nodeSelector"] = json!({key: "pool1"}),
        6 => spec["nodeSelector"] = json!({"agentpool": "gpu"}),
        _ => spec["nodeSelector"] = json!({key: "gpu"}),
    }
    let mut metadata = json!({"name": format!("p{i}")});
    match rng.below(4) {
        0 => {}
        1 => metadata["annotations"] = json!({"poolguard.io/pool": other}),
        2 => metadata["annotations"] = json!({"team": "a"}),
        _ => metadata["annotations"] = json!({"poolguard.io/pool": "pool1", "team": "a"}),
    }
    // Every workload kind the webhooks check; more than half are Pods.
    let kind = match rng.below(14) {
        k @ 0..=6 => WORKLOADS[k],
        _ => "Pod",
    };
    workload_of(kind, metadata, spec)
}

/// The workload kinds with a pod template.
const WORKLOADS: [&str; 7] = [
    "Deployment",
    "ReplicaSet",
    "DaemonSet",
    "StatefulSet",
    "ReplicationController",
    "Job",
    "CronJob",
];

/// An object of `kind` (a Pod, or a workload of [`WORKLOADS`] whose pod template has `spec`),
/// with `metadata`; a workload's template is at [`template_of`].
fn workload_of(kind: &str, metadata: Value, mut spec: Value) -> Value {
    let template = |spec: Value| json!({"metadata": {"labels": {"app": "w"}}, "spec": spec});
    let selector = json!({"matchLabels": {"app": "w"}});
    let apps = |kind: &str, spec: Value| {
        json!({"apiVersion": "apps/v1", "kind": kind, "metadata": metadata,
            "spec": {"selector": selector, "template": template(spec)}})
    };
    match kind {
        "Deployment" | "ReplicaSet" | "DaemonSet" => apps(kind, spec),
        "StatefulSet" => {
            let mut set = apps(kind, spec);
            set["spec"]["serviceName"] = json!("w");
            set
        }
        "ReplicationController" => {
            json!({"apiVersion": "v1", "kind": kind, "metadata": metadata,
                "spec": {"selector": {"app": "w"}, "template": template(spec)}})
        }
        "Job" => {
            // A Job's pods must not restart Always.
            spec["restartPolicy"] = json!("Never");
            json!({"apiVersion": "batch/v1", "kind": kind, "metadata": metadata,
                "spec": {"template": template(spec)}})
        }
        "CronJob" => {
            spec["restartPolicy"] = json!("Never");
            json!({"apiVersion": "batch/v1", "kind": kind, "metadata": metadata,
                "spec": {"schedule": "0 3 * * *", "jobTemplate": {"spec": {"template": {"spec": spec}}}}})
        }
        _ => json!({"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}),
    }
}

/// The pod template of a workload.
fn template_of(object: &mut Value) -> &mut Value {
    if object["kind"] == "CronJob" {
        &mut object["spec"]["jobTemplate"]["spec"]["template"]
    } else {
        &mut object["spec"]["template"]
    }
}

/// Changes to a stored, unscheduled (gated) pod: the scheduling directives Kubernetes still lets
/// change, its images, a label and the pool annotation.
/// One change to a stored pod, and what it is in words.
type Edit = (&'static str, Box<dyn Fn(&mut Value)>);

fn edits(key: &str) -> Vec<Edit> {
    let key = key.to_string();
    vec![
        (
            "add a selector key",
            Box::new(|p: &mut Value| {
                p["spec"]["nodeSelector"]["disk"] = json!("ssd");
            }),
        ),
        (
            "remove the gates",
            Box::new(|p: &mut Value| {
                p["spec"]["schedulingGates"] = json!([]);
            }),
        ),
        (
            "add an affinity",
            Box::new(|p: &mut Value| {
                p["spec"]["affinity"] = json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution":
                {"nodeSelectorTerms": [{"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}]}}});
            }),
        ),
        (
            "change the pool key",
            Box::new(move |p: &mut Value| {
                p["spec"]["nodeSelector"][&key] = json!("other");
            }),
        ),
        (
            "a foreign image",
            Box::new(|p: &mut Value| {
                p["spec"]["containers"][0]["image"] = json!("foreign.example.org/app:1");
            }),
        ),
        (
            "an invalid image",
            Box::new(|p: &mut Value| {
                p["spec"]["containers"][0]["image"] = json!("app:1.0:evil");
            }),
        ),
        (
            "a floating image",
            Box::new(|p: &mut Value| {
                p["spec"]["containers"][0]["image"] = json!("registry.example.com/app:latest");
            }),
        ),
        (
            "a label",
            Box::new(|p: &mut Value| {
                p["metadata"]["labels"]["edited"] = json!("yes");
            }),
        ),
        (
            "the annotation",
            Box::new(|p: &mut Value| {
                p["metadata"]["annotations"]["poolguard.io/pool"] = json!("other");
            }),
        ),
    ]
}

/// Images of an ephemeral container added to a stored pod.
const EPHEMERAL_IMAGES: [&str; 5] = [
    "registry.example.com/debug:1",
    "foreign.example.org/debug:1",
    "debug:1.0:evil",
    "registry.example.com/debug:latest",
    "busybox",
];

/// Creates an unscheduled pod (held by a scheduling gate) named `name`, and returns it as stored.
async fn gated_pod(env: &Env, ns: &str, name: &str) -> Result<Value> {
    let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
        "spec": {"schedulingGates": [{"name": "e2e.poolguard.io/hold"}],
            "containers": [{"name": "c", "image": "registry.example.com/app:1"}]}});
    let pod: k8s_openapi::api::core::v1::Pod = serde_json::from_value(pod)?;
    let stored = env
        .create_pod(ns, &pod)
        .await
        .with_context(|| format!("creating gated pod {ns}/{name}"))?;
    env.track_pod(ns, name);
    Ok(serde_json::to_value(&stored)?)
}

/// A stored workload of `kind` named `stored-<kind>` whose pod template pulls an allowed image
/// (no replicas where the kind has them), as the API server returns it.
async fn stored_workload(env: &Env, ns: &str, kind: &str) -> Result<Value> {
    let name = format!("stored-{}", kind.to_lowercase());
    let spec = json!({"containers": [{"name": "c", "image": "registry.example.com/app:1"}]});
    store(env, ns, kind, &name, spec).await
}

/// Objects as a cluster that had no admission for them holds them (stored before any native
/// object or webhook is in force): `(name, pod spec as stored, the edit an UPDATE makes)`. An
/// old object excuses a finding only where the webhook judged it the same: the old object
/// readable, and the check run on it (its dependency met there too).
fn legacy_objects() -> Vec<(&'static str, Value, Edit)> {
    let image_id = format!("sha256:{}", "0123abcd".repeat(8));
    vec![
        (
            // latesttag was Pending on `b` (allowedrepositories NonCompliant on `a`): fixing `a`
            // makes latesttag run, and `b`'s :latest is a new finding.
            "legacy-pending",
            json!({"containers": [
                {"name": "a", "image": "evil.example.com/x:1"},
                {"name": "b", "image": "registry.example.com/app:latest"}]}),
            (
                "fix a, keep b",
                Box::new(|t: &mut Value| {
                    t["spec"]["containers"][0]["image"] = json!("registry.example.com/x:1")
                }),
            ),
        ),
        (
            // An old object with an image ID is not readable: it excuses nothing.
            "legacy-unreadable",
            json!({"initContainers": [{"name": "init", "image": image_id}],
                   "containers": [{"name": "c", "image": "evil.example.com/x:1"}]}),
            (
                "replace the image ID, keep c",
                Box::new(|t: &mut Value| {
                    t["spec"]["initContainers"][0]["image"] = json!("registry.example.com/init:1")
                }),
            ),
        ),
    ]
}

/// Stores a workload of `kind` named `name` with pod spec `spec` (no replicas where the kind
/// has them), and returns it as the API server does.
async fn store(env: &Env, ns: &str, kind: &str, name: &str, spec: Value) -> Result<Value> {
    let mut object = workload_of(kind, json!({"name": name}), spec);
    if !matches!(kind, "DaemonSet" | "CronJob") {
        object["spec"]["replicas"] = json!(0);
    }
    let (_, resource, prefix) = resource_of(kind);
    let req = http::Request::post(format!("{prefix}/namespaces/{ns}/{resource}"))
        .header("content-type", "application/json")
        .body(serde_json::to_vec(&object)?)?;
    let res = env
        .send_raw(req)
        .await
        .with_context(|| format!("creating {kind} {ns}/{name}"))?;
    ensure!(
        res.status == 201,
        "creating {kind} {ns}/{name}: HTTP {}: {}",
        res.status,
        res.body
    );
    Ok(res.body)
}

/// A stored workload with `edit` applied to its pod template, as an unconditional update
/// (controllers write the status meanwhile, so no resourceVersion).
fn template_edited(stored: &Value, edit: &dyn Fn(&mut Value)) -> Value {
    let mut new = stored.clone();
    new["metadata"]
        .as_object_mut()
        .map(|m| m.remove("resourceVersion"));
    edit(template_of(&mut new));
    new
}

/// The API of one generated object's kind.
fn api_of(env: &Env, kind: &str) -> Api<DynamicObject> {
    let resource = ApiResource {
        group: "admissionregistration.k8s.io".into(),
        version: "v1".into(),
        api_version: native::API_VERSION.into(),
        kind: kind.into(),
        plural: match kind.to_lowercase().strip_suffix('y') {
            Some(stem) => format!("{stem}ies"),
            None => format!("{}s", kind.to_lowercase()),
        },
    };
    Api::all_with(env.client.clone(), &resource)
}

/// Applies the objects as the leader does: server-side apply, field manager `poolguard`.
async fn apply(env: &Env, generated: &native::Native) -> Result<()> {
    for object in &generated.objects {
        let kind = object["kind"].as_str().unwrap_or_default();
        let name = object["metadata"]["name"].as_str().unwrap_or_default();
        api_of(env, kind)
            .patch(
                name,
                &PatchParams::apply("poolguard").force(),
                &Patch::Apply(object),
            )
            .await
            .with_context(|| format!("applying {kind}/{name}"))?;
    }
    Ok(())
}

/// Deletes the objects again (the suites after this one test the webhooks alone).
async fn remove(env: &Env, generated: &native::Native) -> Result<()> {
    for (kind, name) in generated.names().into_iter().rev() {
        match api_of(env, &kind).delete(&name, &Default::default()).await {
            Ok(_) => {}
            Err(kube::Error::Api(status)) if status.code == 404 => {}
            Err(e) => return Err(e).with_context(|| format!("deleting {kind}/{name}")),
        }
    }
    Ok(())
}

/// A namespace of a round: what it is for, its pool, its other labels.
type Namespace = (
    &'static str,
    Option<&'static str>,
    &'static [(&'static str, &'static str)],
);

/// The namespaces of the rounds without a rollout: a named pool, a pool with its own policy
/// settings, no pool.
const NAMESPACES: [Namespace; 3] = [
    ("native-pool1", Some("pool1"), &[]),
    ("native-gpu", Some("gpu"), &[]),
    ("native-free", None, &[]),
];

/// A config and the nodeSelector key its pods get, the namespaces its pods are created in, and
/// whether allowedrepositories is under a rollout ([`ROLLOUT`]).
struct Round {
    name: &'static str,
    config: String,
    key: &'static str,
    namespaces: &'static [Namespace],
    rollout: bool,
}

/// allowedrepositories under a rollout whose groups select on `risk`, `legacy` and `tier` with
/// every operator, one namespace in each group, one in none, and two that an earlier group's
/// selector takes only in part: the first group that selects a namespace takes it, and each
/// neighbour decides differently, so a group selector compiled wrong shows.
const ROLLOUT: &str = "    rollout:
      groups:
        - {name: canary, namespaceSelector: {matchLabels: {risk: low}, matchExpressions: [{key: legacy, operator: DoesNotExist}]}}
        - {name: standard, namespaceSelector: {matchExpressions: [{key: risk, operator: In, values: [medium, high]}]}}
        - {name: critical, namespaceSelector: {matchExpressions: [{key: tier, operator: Exists}, {key: risk, operator: NotIn, values: [none]}]}}
      minSuccessTime: 10s
      progressDeadline: 1m
";
const ROLLOUT_NAMESPACES: [Namespace; 5] = [
    // canary (critical's selector takes it too).
    (
        "native-canary",
        Some("pool1"),
        &[("risk", "low"), ("tier", "critical")],
    ),
    ("native-standard", Some("gpu"), &[("risk", "medium")]),
    // critical: `legacy` keeps it out of canary.
    (
        "native-legacy",
        Some("pool1"),
        &[("risk", "low"), ("legacy", "yes"), ("tier", "critical")],
    ),
    // critical: no `risk` label, so NotIn holds.
    ("native-critical", None, &[("tier", "critical")]),
    // no group: NotIn fails.
    (
        "native-ungrouped",
        Some("pool1"),
        &[("risk", "none"), ("tier", "critical")],
    ),
];

/// The rollout's state in the rollout round: canary and standard Succeeded (the current version
/// at deny; warn in pool gpu, whose own settings say warn), critical Progressing (the current
/// version at warn), and the namespaces in no group on the previous version at deny, which did
/// not allow registry.k8s.io.
fn rollout_view(rules: &RuleSet) -> Result<RolloutView> {
    let name = "allowedrepositories";
    let policy = rules
        .policies()
        .get(name)
        .context("allowedrepositories is loaded")?;
    let previous = StoredVersion {
        version: "previous".into(),
        rego: policy.rego().to_string(),
        inputs: policy.inputs.clone(),
        settings: StoredSettings {
            enforcement: Some(Enforcement::Deny),
            parameters: json!({"repositories": ["registry.example.com/", "docker.io/library/"]})
                .as_object()
                .cloned(),
        },
        pools: Default::default(),
        constraint: None,
    };
    let group = |name: &str, status| GroupState::new(name, status, 0, "");
    let state = RolloutState {
        version: rules.policies().version(name).to_string(),
        previous_version: Some("previous".into()),
        previous_enforcement: Some(Enforcement::Deny),
        final_enforcement: Enforcement::Deny,
        paused_since: None,
        groups: vec![
            group("canary", GroupStatus::Succeeded),
            group("standard", GroupStatus::Succeeded),
            group("critical", GroupStatus::Progressing),
        ],
    };
    Ok(RolloutView {
        policies: [(
            name.to_string(),
            PolicyRollout {
                state,
                current: None,
                previous: Some(previous.compile(name)?),
            },
        )]
        .into(),
    })
}

fn rounds() -> [Round; 4] {
    let rounds = [
        Round {
            name: "merge",
            config: CONFIG.to_string(),
            key: "agentpool",
            namespaces: &NAMESPACES,
            rollout: false,
        },
        Round {
            name: "strict, AKS key, latesttag depending on allowedrepositories, dry run in gpu",
            // latesttag runs only where allowedrepositories finds nothing (its dependency).
            config: format!(
                "selectorPolicy: strict\nnodeSelectorKey: kubernetes.azure.com/agentpool\n{}",
                CONFIG
                    .replace(
                        "    enforcement: warn\n    parameters: {exemptRepositories",
                        "    enforcement: warn\n    dependencies: [{policy: allowedrepositories}]\n    parameters: {exemptRepositories"
                    )
                    .replace(
                        "        enforcement: warn\n        parameters: {repositories: [gpu",
                        "        enforcement: dryrun\n        parameters: {repositories: [gpu"
                    )
            ),
            key: "kubernetes.azure.com/agentpool",
            namespaces: &NAMESPACES,
            rollout: false,
        },
        Round {
            name: "allowedrepositories under a rollout",
            config: CONFIG.replacen(
                "    parameters: {repositories: [registry.example.com/, registry.k8s.io, docker.io/library/, localhost:5000/team]}\n",
                &format!("    parameters: {{repositories: [registry.example.com/, registry.k8s.io, docker.io/library/, localhost:5000/team]}}\n{ROLLOUT}"),
                1,
            ),
            key: "agentpool",
            namespaces: &ROLLOUT_NAMESPACES,
            rollout: true,
        },
        Round {
            name: "both shipped policies at deny, both at warn in gpu: one policy object each",
            // The same namespaces and enforcement: each pair is one ValidatingAdmissionPolicy
            // with a validation per shipped policy; latesttag runs only where
            // allowedrepositories finds nothing (its dependency reads the shared images).
            config: CONFIG
                .replace(
                    "    enforcement: warn\n    parameters: {exemptRepositories",
                    "    dependencies: [{policy: allowedrepositories}]\n    parameters: {exemptRepositories",
                )
                .replace(
                    "        parameters: {repositories: [gpu.example.com/]}\n",
                    "        parameters: {repositories: [gpu.example.com/]}\n      latesttag:\n        enforcement: warn\n",
                ),
            key: "agentpool",
            namespaces: &NAMESPACES,
            rollout: false,
        },
    ];
    assert!(
        rounds[1].config.contains("dependencies") && rounds[1].config.contains("dryrun"),
        "the second round's config must give latesttag its dependency and gpu a dry run"
    );
    assert!(
        rounds[2].config.contains("rollout:"),
        "the third round's config must put allowedrepositories under a rollout"
    );
    assert!(
        rounds[3].config.contains("dependencies")
            && rounds[3].config.matches("enforcement: warn").count() == 2,
        "the fourth round's config must give both policies deny, and warn in gpu"
    );
    let shared = native::generate(
        &rules(&rounds[3].config).expect("the fourth round's rules"),
        &Default::default(),
    );
    assert!(
        shared
            .names()
            .iter()
            .filter(|(_, n)| n.contains("-and-"))
            .count()
            == 4,
        "the fourth round must compile both policies into one object per binding: {:?}",
        shared.names()
    );
    rounds
}

#[tokio::test]
#[ignore = "needs a control plane without poolguard's webhooks: integration/e2e.sh runs it before registering them"]
async fn native_objects_decide_as_the_webhooks_do() {
    let count: usize = std::env::var("POOLGUARD_E2E_NATIVE_PODS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000);
    // About 15 ms a case on a loaded 2-core machine (debug build), with room to spare.
    let limit = std::time::Duration::from_secs(120 + count as u64 / 20);
    run_for("native", limit, |env: Arc<Env>| async move {
        let rounds = rounds();
        let mut disagreements = Vec::new();
        // Stored while nothing decides Deployments: as a legacy cluster holds them.
        let legacy_ns = env
            .namespace_labelled("native-legacy", Some("pool1"), &[])
            .await?;
        let mut legacy = Vec::new();
        for (name, spec, _) in legacy_objects() {
            legacy.push(store(&env, &legacy_ns, "Deployment", name, spec).await?);
        }
        let legacy_labels: Labels = [("agentpool".to_string(), "pool1".to_string())].into();
        let legacy = (legacy_ns.as_str(), &legacy_labels, legacy.as_slice());
        for (i, round) in rounds.iter().enumerate() {
            let mut rules = rules(&round.config)?;
            if round.rollout {
                let view = Arc::new(rollout_view(&rules)?);
                rules = rules.with_rollouts(view);
            }
            let generated = native::generate(&rules, &Options::default());
            apply(&env, &generated).await?;
            let result = compare(
                &env,
                &rules,
                round,
                (i, count.div_ceil(rounds.len())),
                legacy,
            )
            .await;
            remove(&env, &generated).await?;
            disagreements.extend(result?);
        }
        if !disagreements.is_empty() {
            bail!(
                "{} disagreements, the first ones:\n{}",
                disagreements.len(),
                disagreements
                    .iter()
                    .take(10)
                    .cloned()
                    .collect::<Vec<_>>()
                    .join("\n")
            );
        }
        Ok(())
    })
    .await;
}

/// Counts of what one round decided.
#[derive(Default)]
struct Tally {
    cases: usize,
    allowed: usize,
    warned: usize,
    denied: usize,
    /// Cases per kind of object.
    kinds: std::collections::BTreeMap<String, usize>,
}

impl Tally {
    fn add(&mut self, object: &Value, outcome: &Outcome) {
        self.cases += 1;
        let kind = object["kind"].as_str().unwrap_or("Pod").to_string();
        *self.kinds.entry(kind).or_default() += 1;
        match (outcome.allowed, outcome.warned.is_empty()) {
            (false, _) => self.denied += 1,
            (true, quiet) => {
                self.allowed += 1;
                self.warned += usize::from(!quiet);
            }
        }
    }
}

impl std::fmt::Display for Tally {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kinds: Vec<String> = self.kinds.iter().map(|(k, n)| format!("{k} {n}")).collect();
        write!(
            f,
            "{} cases ({}): {} allowed ({} with warnings), {} denied",
            self.cases,
            kinds.join(", "),
            self.allowed,
            self.warned,
            self.denied
        )
    }
}

/// Runs one round's corpus; returns the disagreements.
/// A round's UPDATE comparisons: each sends one UPDATE both ways (the webhooks' decision
/// in-process, the native objects through kube-apiserver) and records what differs.
struct Updates<'a> {
    env: &'a Env,
    rules: &'a RuleSet,
    round: &'a str,
    disagreements: &'a mut Vec<String>,
}

impl Updates<'_> {
    /// `(stored, new, subresource)`: `new` sent as an UPDATE of `stored` (of `subresource` when
    /// not empty); `what` names it in a disagreement; `tally` counts it.
    async fn compare(
        &mut self,
        ns: &str,
        labels: &Labels,
        (stored, new, subresource): (&Value, &Value, &str),
        what: &str,
        tally: &mut Tally,
    ) -> Result<()> {
        let want = reference(self.rules, ns, labels, new, Some(stored), subresource)?;
        let got = native_outcome(self.env, ns, new, Some(subresource)).await?;
        if want != got {
            self.disagreements.push(format!(
                "{}: {what} {new}\n  webhook {want:?}\n  native  {got:?}",
                self.round
            ));
        }
        tally.add(new, &want);
        Ok(())
    }
}

async fn compare(
    env: &Arc<Env>,
    rules: &RuleSet,
    round: &Round,
    (seed, count): (usize, usize),
    (legacy_ns, legacy_labels, legacy): (&str, &Labels, &[Value]),
) -> Result<Vec<String>> {
    let mut namespaces = Vec::new();
    for (purpose, pool, extra) in round.namespaces {
        let mut labels = Labels::new();
        if let Some(pool) = pool {
            labels.insert("agentpool".into(), pool.to_string());
        }
        labels.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        let ns = env.namespace_labelled(purpose, *pool, extra).await?;
        namespaces.push((ns, labels));
    }
    // The API server picks the objects up from a watch: wait until the round's key is given.
    let (first, _) = &namespaces[0];
    let probe = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "probe"},
        "spec": {"containers": [{"name": "c", "image": "registry.example.com/app:1"}]}});
    env.wait_until(
        "the native objects to take effect",
        std::time::Duration::from_secs(60),
        || {
            let env = env.clone();
            let probe = probe.clone();
            let first = first.clone();
            async move {
                let got = native_outcome(&env, &first, &probe, None).await?;
                Ok(match &got.node_selector {
                    Some(s) if s.get(round.key).is_some() => Ok(()),
                    _ => Err(format!("{got:?}")),
                })
            }
        },
    )
    .await?;
    // The validating policies reach the API server's cache separately: the same moment again.
    tokio::time::sleep(std::time::Duration::from_secs(2)).await;

    let refs = fixed_references();
    let dict = dictionary()?;
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15 ^ seed as u64);
    let mut cases = Vec::with_capacity(count);
    for i in 0..count {
        let (ns, labels) = &namespaces[i % namespaces.len()];
        let object = object(&mut rng, i, &refs, &dict, round.key);
        let want = reference(rules, ns, labels, &object, None, "")?;
        cases.push((ns.clone(), object, want));
    }
    // Every reference of the image reference table once, as the only image of a Pod (the
    // namespaces in turn).
    for (j, case) in image_reference_table::table().into_iter().enumerate() {
        let (ns, labels) = &namespaces[j % namespaces.len()];
        let object = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": format!("table-{j}")},
            "spec": {"containers": [{"name": "c", "image": case.input}]}});
        let want = reference(rules, ns, labels, &object, None, "")?;
        cases.push((ns.clone(), object, want));
    }
    let results: Vec<Result<(Value, Outcome, Outcome)>> = stream::iter(cases)
        .map(|(ns, object, want)| {
            let env = env.clone();
            async move {
                let got = native_outcome(&env, &ns, &object, None).await?;
                Ok((object, want, got))
            }
        })
        .buffer_unordered(16)
        .collect()
        .await;
    let mut disagreements = Vec::new();
    let mut created = Tally::default();
    for result in results {
        let (object, want, got) = result?;
        if want != got {
            disagreements.push(format!(
                "{}: CREATE {object}\n  webhook {want:?}\n  native  {got:?}",
                round.name
            ));
        }
        created.add(&object, &want);
    }

    let mut updates = Updates {
        env,
        rules,
        round: round.name,
        disagreements: &mut disagreements,
    };
    // UPDATEs of stored pods held by a scheduling gate.
    let mut updated = Tally::default();
    for (ns, labels) in &namespaces {
        for (n, (what, edit)) in edits(round.key).into_iter().enumerate() {
            let stored = gated_pod(env, ns, &format!("gated-{n}")).await?;
            let mut new = stored.clone();
            edit(&mut new);
            let what = format!("UPDATE ({what})");
            updates
                .compare(ns, labels, (&stored, &new, ""), &what, &mut updated)
                .await?;
        }
    }
    // Ephemeral containers added to a stored pod (the pods/ephemeralcontainers subresource), and
    // UPDATEs of the pod templates of stored workloads.
    let mut changed = Tally::default();
    for (ns, labels) in &namespaces {
        let stored = gated_pod(env, ns, "ephemeral").await?;
        for image in EPHEMERAL_IMAGES {
            let mut new = stored.clone();
            new["spec"]["ephemeralContainers"] = json!([{"name": "debug", "image": image}]);
            let update = (&stored, &new, "ephemeralcontainers");
            updates
                .compare(
                    ns,
                    labels,
                    update,
                    "UPDATE pods/ephemeralcontainers",
                    &mut changed,
                )
                .await?;
        }
        // A stored workload of each kind whose pod template may change (a Job's may not: the
        // API server refuses that before admission).
        for kind in WORKLOADS.iter().filter(|k| **k != "Job") {
            let stored = stored_workload(env, ns, kind).await?;
            // A pod template is a pod's metadata and spec: the gated pods' edits, and none at all.
            let unchanged: Edit = ("nothing (template as stored)", Box::new(|_: &mut Value| {}));
            for (what, edit) in std::iter::once(unchanged).chain(edits(round.key)) {
                let new = template_edited(&stored, &edit);
                let what = format!("{kind} UPDATE ({what})");
                updates
                    .compare(ns, labels, (&stored, &new, ""), &what, &mut changed)
                    .await?;
            }
        }
    }
    // UPDATEs of objects stored before any admission decided them.
    for (stored, (name, _, (what, edit))) in legacy.iter().zip(legacy_objects()) {
        let new = template_edited(stored, &edit);
        let what = format!("legacy {name} UPDATE ({what})");
        updates
            .compare(
                legacy_ns,
                legacy_labels,
                (stored, &new, ""),
                &what,
                &mut changed,
            )
            .await?;
    }
    env.say(format!(
        "{}: CREATE {created}; gated-pod UPDATE {updated}; ephemeral containers and workload template UPDATE {changed}; {} disagreements",
        round.name,
        disagreements.len()
    ));
    Ok(disagreements)
}
