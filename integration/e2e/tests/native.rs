//! The native fast path, proved against the webhook's decision code through a real
//! kube-apiserver: the objects `poolguard native` generates are applied (with poolguard's
//! webhooks absent), then a generated corpus of pods (image references built from the fuzz
//! dictionary and hand-picked ones, selectors, annotations, image volumes, init containers) is
//! created with `dryRun=All` in a namespace of each kind (a named pool, a pool with its own
//! policy settings, no pool) and each outcome (allowed or not, the nodeSelector, the
//! `poolguard.io/pool` annotation, warnings) is compared with what poolguard's webhooks decide
//! for the same pod in-process (mutate, patch, validate), the reference.
//!
//! Needs a control plane without poolguard's webhooks (a webhook would decide too):
//! `integration/e2e/native.sh` starts one. `POOLGUARD_E2E_NATIVE_PODS` sets the corpus size
//! (default 10000).

use std::sync::Arc;

use anyhow::{bail, Context, Result};
use futures::stream::{self, StreamExt};
use kube::api::{Api, ApiResource, DynamicObject, Patch, PatchParams};
use poolguard_core::config::Config;
use poolguard_core::native::{self, Options};
use poolguard_core::placement::Labels;
use poolguard_core::policy::{template, PolicySet};
use poolguard_core::ruleset::RuleSet;
use poolguard_core::webhook::{self, Scope, Webhook};
use poolguard_e2e::{run, Env};
use serde_json::{json, Value};

const CONFIG: &str = "
policies:
  allowedrepositories:
    parameters: {repositories: [registry.example.com/, registry.k8s.io, docker.io/library/]}
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

fn rules() -> Result<RuleSet> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../policies");
    let mut templates = Vec::new();
    for name in ["allowedrepositories", "latesttag"] {
        let path = dir.join(format!("{name}.yaml"));
        let text = std::fs::read_to_string(&path).with_context(|| path.display().to_string())?;
        templates.push(template::from_yaml(&text, path)?);
    }
    RuleSet::new(
        Config::parse(CONFIG, "native test config")?,
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
    warned: bool,
}

/// The webhooks' decision, in-process: mutate, apply the patch, validate.
fn reference(rules: &RuleSet, ns: &str, labels: &Labels, pod: &Value) -> Result<Outcome> {
    let review = |object: &Value| {
        json!({"uid": "u", "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "namespace": ns, "operation": "CREATE", "object": object,
            "userInfo": {"username": "e2e"}})
    };
    let scope = Scope {
        labels: Some(labels),
        pools: None,
    };
    let decide = |which, object: &Value| {
        let raw = review(object);
        let req = poolguard_core::admission::Request::from_value(&raw)
            .map_err(|e| anyhow::anyhow!("{e:?}"))?;
        Ok::<_, anyhow::Error>(webhook::decide(
            which,
            &req,
            scope,
            &rules.config,
            &rules.policies,
            &rules.placement,
        ))
    };
    let denied = Outcome {
        allowed: false,
        node_selector: None,
        annotation: None,
        warned: false,
    };
    let mutated = decide(Webhook::Mutate, pod)?;
    if !mutated.allowed {
        return Ok(denied);
    }
    let mut pod = pod.clone();
    if let Some(patch) = &mutated.patch {
        json_patch::patch(&mut pod, patch)?;
    }
    let validated = decide(Webhook::Validate, &pod)?;
    if !validated.allowed {
        return Ok(denied);
    }
    Ok(outcome_of(&pod, !validated.warnings.is_empty()))
}

fn outcome_of(pod: &Value, warned: bool) -> Outcome {
    Outcome {
        allowed: true,
        // The API server stores an empty map as none.
        node_selector: pod["spec"]
            .get("nodeSelector")
            .filter(|s| s.as_object().is_some_and(|m| !m.is_empty()))
            .cloned(),
        annotation: pod["metadata"]["annotations"]
            .get("poolguard.io/pool")
            .cloned(),
        warned,
    }
}

/// The API server's decision: a dry-run CREATE.
async fn native_outcome(env: &Env, ns: &str, pod: &Value) -> Result<Outcome> {
    let req = http::Request::post(format!("/api/v1/namespaces/{ns}/pods?dryRun=All"))
        .header("content-type", "application/json")
        .body(serde_json::to_vec(pod)?)?;
    let res = env
        .client
        .send(req.map(kube::client::Body::from))
        .await
        .context("POST pod")?;
    let status = res.status().as_u16();
    let warned = res.headers().get_all("warning").iter().next().is_some();
    let bytes = res.into_body().collect_bytes().await?;
    let body: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    match status {
        201 | 200 => Ok(outcome_of(&body, warned)),
        400 | 403 | 422 => Ok(Outcome {
            allowed: false,
            node_selector: None,
            annotation: None,
            warned: false,
        }),
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
    refs.push(format!("{}", "b".repeat(248)));
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

fn pod(rng: &mut Rng, i: usize, refs: &[String], dict: &[String], pools: &[&str]) -> Value {
    let image = |rng: &mut Rng| {
        if rng.below(3) == 0 {
            dictionary_reference(rng, dict)
        } else {
            rng.pick(refs).clone()
        }
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
    let other = *rng.pick(pools);
    match rng.below(7) {
        0 => {}
        1 => spec["nodeSelector"] = json!({}),
        2 => spec["nodeSelector"] = json!({"kubernetes.io/os": "linux"}),
        3 => spec["nodeSelector"] = json!({"agentpool": other}),
        4 => spec["nodeSelector"] = json!({"agentpool": other, "disk": "ssd"}),
        5 => spec["nodeSelector"] = json!({"agentpool": "pool1"}),
        _ => spec["nodeSelector"] = json!({"agentpool": "gpu"}),
    }
    let mut metadata = json!({"name": format!("p{i}")});
    match rng.below(4) {
        0 => {}
        1 => metadata["annotations"] = json!({"poolguard.io/pool": other}),
        2 => metadata["annotations"] = json!({"team": "a"}),
        _ => metadata["annotations"] = json!({"poolguard.io/pool": "pool1", "team": "a"}),
    }
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec})
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

#[tokio::test]
#[ignore = "needs a control plane without poolguard's webhooks: integration/e2e/native.sh runs it"]
async fn native_objects_decide_as_the_webhooks_do() {
    run("native", |env: Arc<Env>| async move {
        let rules = rules()?;
        let generated = native::generate(&rules, &Options::default());
        apply(&env, &generated).await?;
        let result = compare(&env, &rules).await;
        remove(&env, &generated).await?;
        result
    })
    .await;
}

async fn compare(env: &Arc<Env>, rules: &RuleSet) -> Result<()> {
    {
        let namespaces = [
            (
                env.namespace("native-pool1", Some("pool1")).await?,
                Some("pool1"),
            ),
            (env.namespace("native-gpu", Some("gpu")).await?, Some("gpu")),
            (env.namespace("native-free", None).await?, None),
        ];
        // The API server picks policies up from a watch: wait until a pool is given.
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
                    let got = native_outcome(&env, &first, &probe).await?;
                    Ok(if got.node_selector.is_some() {
                        Ok(())
                    } else {
                        Err(format!("{got:?}"))
                    })
                }
            },
        )
        .await?;
        // VAPs reach the API server's policy cache separately: give them the same moment.
        tokio::time::sleep(std::time::Duration::from_secs(2)).await;

        let count: usize = std::env::var("POOLGUARD_E2E_NATIVE_PODS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(10_000);
        let refs = fixed_references();
        let dict = dictionary()?;
        let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
        let mut cases = Vec::with_capacity(count);
        for i in 0..count {
            let (ns, pool) = &namespaces[i % namespaces.len()];
            let pod = pod(&mut rng, i, &refs, &dict, &["pool1", "gpu", "other"]);
            let mut labels = Labels::new();
            if let Some(pool) = pool {
                labels.insert("agentpool".into(), pool.to_string());
            }
            let want = reference(rules, ns, &labels, &pod)?;
            cases.push((ns.clone(), pod, want));
        }
        let results: Vec<Result<(Value, Outcome, Outcome)>> = stream::iter(cases)
            .map(|(ns, pod, want)| {
                let env = env.clone();
                async move {
                    let got = native_outcome(&env, &ns, &pod).await?;
                    Ok((pod, want, got))
                }
            })
            .buffer_unordered(16)
            .collect()
            .await;
        let (mut allowed, mut denied, mut warned) = (0, 0, 0);
        let mut disagreements = Vec::new();
        for result in results {
            let (pod, want, got) = result?;
            if want != got {
                disagreements.push(format!("{pod}\n  webhook {want:?}\n  native  {got:?}"));
            }
            match (want.allowed, want.warned) {
                (false, _) => denied += 1,
                (true, true) => {
                    allowed += 1;
                    warned += 1
                }
                (true, false) => allowed += 1,
            }
        }
        env.say(format!(
            "{count} pods: {allowed} allowed ({warned} with warnings), {denied} denied; {} disagreements",
            disagreements.len()
        ));
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
    }
}
