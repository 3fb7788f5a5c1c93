//! A steady stream of pod CREATEs in a namespace of a pool, and what became of each: the load of
//! the `under_load` harness (operations on poolguard's Deployment) and of `faults` (faults of the
//! control plane and of poolguard).
//!
//! The load's pods name a scheduler that does not exist, so they stay Pending: admission is what
//! is measured, and the scheduler and the (fake) nodes carry no extra work. Every pod has its own
//! name and the run's label [`LOAD_LABEL`]; listing the run's pods afterwards ([`stored`]) tells
//! whether a CREATE whose answer was lost (a timeout, a reset connection) was stored anyway, and
//! whether an admitted pod is still there.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use k8s_openapi::api::core::v1::{Namespace, Pod, ServiceAccount};
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use kube::{Client, Config};
use serde_json::json;
use tokio::task::JoinSet;

use crate::{node_selector, random_suffix};

/// Label of every pod of the load (value: the run's id).
pub const LOAD_LABEL: &str = "poolguard-load";
/// A scheduler nobody runs: the load's pods stay Pending.
pub const NO_SCHEDULER: &str = "poolguard-load-unscheduled";
/// Longest a pod CREATE of the load may take (the webhooks' timeouts are 5 s each).
pub const CREATE_TIMEOUT: Duration = Duration::from_secs(60);

/// A client for KUBECONFIG, made for the load.
pub async fn connect() -> Result<Client> {
    match std::env::var_os("KUBECONFIG") {
        Some(v) if !v.is_empty() => {}
        _ => bail!("KUBECONFIG is not set: point it at a cluster where poolguard is installed"),
    }
    // kube's default read timeout (295 s) rather than a short one: the load opens many pooled
    // connections to the API server, and the read timeout also ends a pooled connection that has
    // been idle that long, which races with the next request sent on it (a failure of the
    // harness, not of an admission). Each CREATE is bounded by CREATE_TIMEOUT instead.
    let mut config = Config::infer().await.context("loading KUBECONFIG")?;
    config.connect_timeout = Some(Duration::from_secs(10));
    Client::try_from(config).context("building the Kubernetes client")
}

/// Creates namespace `<prefix>-<random>` labelled `label=pool` (and `poolguard-e2e=true`) with
/// its `default` ServiceAccount (so pod admission never waits for the ServiceAccount
/// controller); returns its name.
pub async fn namespace(client: &Client, prefix: &str, label: &str, pool: &str) -> Result<String> {
    let ns = format!("{prefix}-{}", random_suffix());
    let namespace: Namespace = serde_json::from_value(json!({"metadata": {
        "name": ns,
        "labels": {label: pool, "poolguard-e2e": "true"},
    }}))?;
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &namespace)
        .await
        .with_context(|| format!("creating namespace {ns}"))?;
    let sa: ServiceAccount = serde_json::from_value(json!({"metadata": {"name": "default"}}))?;
    match Api::<ServiceAccount>::namespaced(client.clone(), &ns)
        .create(&PostParams::default(), &sa)
        .await
    {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 409 => {}
        Err(e) => return Err(e).context("creating the default ServiceAccount"),
    }
    Ok(ns)
}

/// What one run of the load creates.
#[derive(Clone, Debug)]
pub struct Spec {
    /// The namespace (labelled with `pool`).
    pub namespace: String,
    /// Value of [`LOAD_LABEL`] and part of every pod's name.
    pub run_id: String,
    /// Pod CREATEs per second.
    pub rate: u32,
    /// An image the policies allow.
    pub image: String,
    /// `(image, n)`: every n-th pod (n, 2n, ...) uses this image instead, which the policies
    /// must refuse.
    pub refused: Option<(String, usize)>,
    /// poolguard's nodeSelectorKey.
    pub selector_key: String,
    /// The namespace's pool: the nodeSelector value every admitted pod must carry.
    pub pool: String,
}

/// What one pod CREATE of the load came to.
#[derive(Clone, Debug)]
pub enum Outcome {
    /// Admitted with the pool's nodeSelector.
    Placed,
    /// Admitted without it (admitted without poolguard's mutation).
    Unplaced(BTreeMap<String, String>),
    /// The API server answered with an error status (a refusal or a failure).
    Refused { code: u16, message: String },
    /// No answer: the client's error, or none within [`CREATE_TIMEOUT`].
    Failed(String),
}

impl Outcome {
    pub fn admitted(&self) -> bool {
        matches!(self, Outcome::Placed | Outcome::Unplaced(_))
    }

    /// How a failed CREATE is told: `<code> <message>` or the client's error.
    pub fn failure(&self) -> Option<String> {
        match self {
            Outcome::Placed | Outcome::Unplaced(_) => None,
            Outcome::Refused { code, message } => Some(format!("{code} {message}")),
            Outcome::Failed(msg) => Some(msg.clone()),
        }
    }
}

#[derive(Clone, Debug)]
pub struct Attempt {
    pub name: String,
    /// When the CREATE was sent.
    pub started: Instant,
    pub latency: Duration,
    /// Its image is the one the policies must refuse.
    pub refusal_expected: bool,
    pub outcome: Outcome,
}

impl Attempt {
    /// When the answer (or the timeout) came.
    pub fn ended(&self) -> Instant {
        self.started + self.latency
    }
}

/// Creates pods as `spec` says until `stop`; returns every attempt once all have answered.
pub async fn generate(client: Client, spec: Spec, stop: Arc<AtomicBool>) -> Vec<Attempt> {
    let pods: Api<Pod> = Api::namespaced(client, &spec.namespace);
    let mut tick = tokio::time::interval(Duration::from_secs_f64(1.0 / f64::from(spec.rate)));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut tasks = JoinSet::new();
    let mut n = 0usize;
    loop {
        tick.tick().await;
        if stop.load(Ordering::SeqCst) {
            break;
        }
        n += 1;
        let name = format!("l-{}-{n:05}", spec.run_id);
        let (image, refusal_expected) = match &spec.refused {
            Some((image, every)) if n.is_multiple_of(*every) => (image.as_str(), true),
            _ => (spec.image.as_str(), false),
        };
        let pod = match pod(&spec, &name, image) {
            Ok(p) => p,
            Err(e) => {
                eprintln!("[load] building pod {name}: {e}");
                continue;
            }
        };
        let (pods, key, pool) = (pods.clone(), spec.selector_key.clone(), spec.pool.clone());
        tasks.spawn(async move {
            let started = Instant::now();
            let outcome = create(&pods, &pod, &key, &pool).await;
            Attempt {
                name,
                started,
                latency: started.elapsed(),
                refusal_expected,
                outcome,
            }
        });
    }
    let mut attempts = Vec::with_capacity(n);
    while let Some(done) = tasks.join_next().await {
        if let Ok(a) = done {
            attempts.push(a);
        }
    }
    attempts.sort_by_key(|a| a.started);
    attempts
}

/// The load's pod `name` of run `spec` with `image`.
pub fn pod(spec: &Spec, name: &str, image: &str) -> Result<Pod> {
    Ok(serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {LOAD_LABEL: spec.run_id}},
        "spec": {
            "schedulerName": NO_SCHEDULER,
            "containers": [{"name": "main", "image": image}],
            "terminationGracePeriodSeconds": 0,
        }
    }))?)
}

/// Sends one CREATE of `pod` (bounded by [`CREATE_TIMEOUT`]); what it came to, judged by the
/// nodeSelector `selector_key: pool` an admitted pod must carry.
pub async fn create(pods: &Api<Pod>, pod: &Pod, selector_key: &str, pool: &str) -> Outcome {
    match tokio::time::timeout(CREATE_TIMEOUT, pods.create(&PostParams::default(), pod)).await {
        Err(_) => Outcome::Failed(format!("no answer within {}s", CREATE_TIMEOUT.as_secs())),
        Ok(Ok(p)) => placement(&p, selector_key, pool),
        Ok(Err(kube::Error::Api(s))) => Outcome::Refused {
            code: s.code,
            message: truncate(&s.message, 300),
        },
        Ok(Err(e)) => Outcome::Failed(truncate(&format!("{:#}", anyhow::Error::from(e)), 300)),
    }
}

/// Placed or Unplaced, by the pod's nodeSelector.
fn placement(pod: &Pod, selector_key: &str, pool: &str) -> Outcome {
    let sel = node_selector(pod);
    if sel.get(selector_key).map(String::as_str) == Some(pool) {
        Outcome::Placed
    } else {
        Outcome::Unplaced(sel)
    }
}

/// A client's retry of the failed CREATE of pod `name` (the run's allowed image): the same pod
/// sent again. Where the first CREATE was stored after all (409), the stored pod is judged.
pub async fn retry(client: &Client, spec: &Spec, name: &str) -> Outcome {
    let pods: Api<Pod> = Api::namespaced(client.clone(), &spec.namespace);
    let pod = match pod(spec, name, &spec.image) {
        Ok(p) => p,
        Err(e) => return Outcome::Failed(format!("building pod {name}: {e}")),
    };
    match create(&pods, &pod, &spec.selector_key, &spec.pool).await {
        Outcome::Refused { code: 409, .. } => match pods.get(name).await {
            Ok(p) => placement(&p, &spec.selector_key, &spec.pool),
            Err(e) => Outcome::Failed(format!("reading the stored pod {name}: {e}")),
        },
        other => other,
    }
}

/// The run's pods as stored: name -> pod.
pub async fn stored(client: &Client, ns: &str, run_id: &str) -> Result<BTreeMap<String, Pod>> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    Ok(pods
        .list(&ListParams::default().labels(&format!("{LOAD_LABEL}={run_id}")))
        .await
        .context("listing the load's pods")?
        .items
        .into_iter()
        .filter_map(|p| Some((p.metadata.name.clone()?, p)))
        .collect())
}

/// Deletes the run's pods (grace period 0).
pub async fn delete_run(client: &Client, ns: &str, run_id: &str) -> Result<()> {
    let force = DeleteParams {
        grace_period_seconds: Some(0),
        ..DeleteParams::default()
    };
    Api::<Pod>::namespaced(client.clone(), ns)
        .delete_collection(
            &force,
            &ListParams::default().labels(&format!("{LOAD_LABEL}={run_id}")),
        )
        .await
        .context("deleting the load's pods")?;
    Ok(())
}

/// Latency percentiles in ms: (p50, p99, max).
pub fn latency_ms(attempts: &[Attempt]) -> (f64, f64, f64) {
    let mut latencies: Vec<f64> = attempts
        .iter()
        .map(|a| a.latency.as_secs_f64() * 1000.0)
        .collect();
    latencies.sort_by(|a, b| a.total_cmp(b));
    let pct = |p: f64| -> f64 {
        if latencies.is_empty() {
            return 0.0;
        }
        let i = ((latencies.len() as f64 - 1.0) * p).round() as usize;
        latencies[i]
    };
    (
        pct(0.5),
        pct(0.99),
        latencies.last().copied().unwrap_or(0.0),
    )
}

pub fn truncate(s: &str, max: usize) -> String {
    match s.char_indices().nth(max) {
        Some((i, _)) => format!("{}...", &s[..i]),
        None => s.to_string(),
    }
}

/// Runs `cmd` with `args` (bounded by `limit`); returns (success, stdout + stderr). Each output
/// line is passed to `say`.
pub async fn command(
    cmd: &str,
    args: &[&str],
    limit: Duration,
    say: impl Fn(String),
) -> Result<(bool, String)> {
    let mut child = tokio::process::Command::new(cmd);
    child.args(args).kill_on_drop(true);
    let out = tokio::time::timeout(limit, child.output())
        .await
        .with_context(|| {
            format!(
                "{cmd} {} did not return within {}s",
                args.join(" "),
                limit.as_secs()
            )
        })?
        .with_context(|| format!("running {cmd}"))?;
    let mut text = String::from_utf8_lossy(&out.stdout).into_owned();
    text.push_str(&String::from_utf8_lossy(&out.stderr));
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        say(format!("  {line}"));
    }
    Ok((out.status.success(), text))
}
