//! Pod CREATE latency through kube-apiserver, with and without poolguard's webhooks in the path.
//! `bench/e2e-latency.sh` runs it against a throwaway control plane; it works against any cluster
//! (KUBECONFIG) where poolguard's webhook configurations select namespaces by an extra label.
//!
//! Design:
//!
//! - Two namespaces, both labelled `<label>=<pool>`; only the "with" one also carries
//!   `<bench-label>=on`, which the webhook configurations' namespaceSelector requires. Pods
//!   created in it go through both webhooks, pods in the other one skip poolguard entirely.
//! - One request in flight. Pods are created in pairs, one in each namespace, and the order
//!   within a pair alternates (with/without, then without/with), so drift (other load on the
//!   machine, etcd growth, caches) lands on both sides alike. Each `Api::create` is timed on the
//!   client. Pods are force-deleted in batches between pairs, never during a timed call.
//! - Every created pod is checked: "with" pods must carry poolguard's nodeSelector and its
//!   `poolguard.io/pool` annotation, "without" pods neither; anything else is an error.
//! - Sanity phase: blocks of pairs with the webhook configurations registered and truly deleted
//!   (R D D R R D D R ...), to check that "namespace not selected" costs what "no webhook
//!   registered" costs, and that the added time matches the main phase's.
//! - kube-apiserver's own `apiserver_admission_webhook_admission_duration_seconds` is read
//!   before and after the main phase: calls per webhook (must equal the "with" pods) and their
//!   mean duration as the API server saw it; with `--poolguard-metrics`, likewise poolguard's
//!   `poolguard_admission_request_duration_seconds` (its own handling time).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Namespace, Pod, ServiceAccount};
use kube::api::{Api, DeleteParams, ListParams, ObjectMeta, PostParams};
use kube::{Client, Config};
use poolguard_e2e::{node_selector, random_suffix};
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const USAGE: &str = "\
usage: create_latency [options]   (needs KUBECONFIG)

  --n N                   measured pods per side (default 500)
  --warmup N              unmeasured pairs first (default 50)
  --sanity-blocks N       blocks with the webhook configurations registered / deleted
                          (order R D D R R D D R ...)
                          (default 10; 0: no sanity phase)
  --sanity-pairs N        pairs per sanity block (default 50)
  --delete-every N        force-delete the pods after every N pairs (default 100)
  --pause-ms N            idle time before each timed create, so that work a request leaves
                          behind (GC, connection upkeep) does not land on the next (default 0)
  --pool NAME             pool label value of both namespaces (default pool1)
  --label KEY             poolguard's namespaceLabel (default agentpool)
  --selector-key KEY      poolguard's nodeSelectorKey (default: the label)
  --bench-label KEY       namespace label the webhook configurations require to be \"on\"
                          (default poolguard-bench)
  --webhook-configs M,V   names of the mutating and the validating webhook configuration
                          (default poolguard-mutating,poolguard-validating: the chart's, for
                          release poolguard)
  --image IMAGE           container image the config allows (default registry.k8s.io/pause:3.10)
  --activation-timeout S  seconds for webhook configuration changes to take effect (default 30)
  --poolguard-metrics A   poolguard's operations port HOST:PORT (plain HTTP), to report its own
                          handling time
  --json PATH             write the results there";

const UNREGISTERED: &str =
    "register poolguard's webhooks first (bench/e2e-latency.sh renders them from charts/poolguard)";
/// Annotation the mutating webhook sets to the pool it gave the pod.
const POOL_ANNOTATION: &str = "poolguard.io/pool";
/// Label of every pod this tool creates (value: the run id), for batch deletion.
const POD_LABEL: &str = "poolguard-bench-pod";
/// Histogram kube-apiserver keeps per webhook call, by label `name`.
const APISERVER_METRIC: &str = "apiserver_admission_webhook_admission_duration_seconds";
/// Histogram poolguard keeps per request it handles, by label `webhook`.
const POOLGUARD_METRIC: &str = "poolguard_admission_request_duration_seconds";
/// Unmeasured pairs after each change of the webhook configurations in the sanity phase.
const SANITY_BLOCK_WARMUP: usize = 5;
const PROBE_INTERVAL: Duration = Duration::from_millis(50);

struct Args {
    n: usize,
    warmup: usize,
    sanity_blocks: usize,
    sanity_pairs: usize,
    delete_every: usize,
    pool: String,
    label: String,
    selector_key: Option<String>,
    bench_label: String,
    /// Mutating, validating.
    webhook_configs: (String, String),
    image: String,
    activation_timeout: Duration,
    pause: Duration,
    poolguard_metrics: Option<String>,
    json: Option<PathBuf>,
}

impl Args {
    /// `Ok(None)` when help was asked for.
    fn parse(mut args: impl Iterator<Item = String>) -> Result<Option<Args>> {
        let mut a = Args {
            n: 500,
            warmup: 50,
            sanity_blocks: 10,
            sanity_pairs: 50,
            delete_every: 100,
            pool: "pool1".into(),
            label: "agentpool".into(),
            selector_key: None,
            bench_label: "poolguard-bench".into(),
            webhook_configs: ("poolguard-mutating".into(), "poolguard-validating".into()),
            image: "registry.k8s.io/pause:3.10".into(),
            activation_timeout: Duration::from_secs(30),
            pause: Duration::ZERO,
            poolguard_metrics: None,
            json: None,
        };
        while let Some(arg) = args.next() {
            if arg == "-h" || arg == "--help" {
                return Ok(None);
            }
            let (flag, inline) = match arg.split_once('=') {
                Some((f, v)) if f.starts_with("--") => (f.to_string(), Some(v.to_string())),
                _ => (arg.clone(), None),
            };
            let value = match inline {
                Some(v) => v,
                None if flag.starts_with("--") => args
                    .next()
                    .with_context(|| format!("{flag} needs a value\n\n{USAGE}"))?,
                None => bail!("unexpected argument {arg:?}\n\n{USAGE}"),
            };
            match flag.as_str() {
                "--n" => a.n = positive(&flag, &value)?,
                "--warmup" => a.warmup = count(&flag, &value)?,
                "--sanity-blocks" => a.sanity_blocks = count(&flag, &value)?,
                "--sanity-pairs" => a.sanity_pairs = count(&flag, &value)?,
                "--delete-every" => a.delete_every = positive(&flag, &value)?,
                "--pool" => a.pool = non_empty(&flag, value)?,
                "--label" => a.label = non_empty(&flag, value)?,
                "--selector-key" => a.selector_key = Some(non_empty(&flag, value)?),
                "--bench-label" => a.bench_label = non_empty(&flag, value)?,
                "--webhook-configs" => {
                    let (m, v) = value.split_once(',').with_context(|| {
                        format!("{flag} wants MUTATING,VALIDATING, got {value:?}")
                    })?;
                    a.webhook_configs = (
                        non_empty(&flag, m.to_string())?,
                        non_empty(&flag, v.to_string())?,
                    );
                }
                "--image" => a.image = non_empty(&flag, value)?,
                "--activation-timeout" => {
                    a.activation_timeout = Duration::from_secs(positive(&flag, &value)? as u64)
                }
                "--pause-ms" => a.pause = Duration::from_millis(count(&flag, &value)? as u64),
                "--poolguard-metrics" => a.poolguard_metrics = Some(non_empty(&flag, value)?),
                "--json" => a.json = Some(PathBuf::from(non_empty(&flag, value)?)),
                _ => bail!("unknown option {flag}\n\n{USAGE}"),
            }
        }
        ensure!(
            a.sanity_blocks != 1,
            "--sanity-blocks must be 0 (no sanity phase) or at least 2 (both states)"
        );
        Ok(Some(a))
    }

    fn selector_key(&self) -> &str {
        self.selector_key.as_deref().unwrap_or(&self.label)
    }
}

fn count(flag: &str, value: &str) -> Result<usize> {
    value
        .trim()
        .parse()
        .with_context(|| format!("{flag} wants a whole number, got {value:?}"))
}

fn positive(flag: &str, value: &str) -> Result<usize> {
    let n = count(flag, value)?;
    ensure!(n > 0, "{flag} must be at least 1");
    Ok(n)
}

fn non_empty(flag: &str, value: String) -> Result<String> {
    ensure!(!value.trim().is_empty(), "{flag} must not be empty");
    Ok(value.trim().to_string())
}

fn log(msg: impl std::fmt::Display) {
    eprintln!("[create_latency] {msg}");
}

/// Which namespace a pod goes to.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Side {
    /// Selected by the webhook configurations.
    With,
    /// Same pool label, not selected.
    Without,
}

/// One pair of timed creates, one per namespace.
#[derive(Clone, Copy)]
struct Pair {
    with: Duration,
    without: Duration,
}

/// The two webhook configurations as found in the cluster, to delete and create again.
struct Registrations {
    mutating: MutatingWebhookConfiguration,
    validating: ValidatingWebhookConfiguration,
}

impl Registrations {
    async fn fetch(
        client: &Client,
        (mutating, validating): &(String, String),
    ) -> Result<Registrations> {
        let mutating = Api::<MutatingWebhookConfiguration>::all(client.clone())
            .get_opt(mutating)
            .await
            .with_context(|| format!("reading MutatingWebhookConfiguration {mutating}"))?
            .with_context(|| {
                format!("there is no MutatingWebhookConfiguration {mutating}: {UNREGISTERED}")
            })?;
        let validating = Api::<ValidatingWebhookConfiguration>::all(client.clone())
            .get_opt(validating)
            .await
            .with_context(|| format!("reading ValidatingWebhookConfiguration {validating}"))?
            .with_context(|| {
                format!("there is no ValidatingWebhookConfiguration {validating}: {UNREGISTERED}")
            })?;
        Ok(Registrations {
            mutating: MutatingWebhookConfiguration {
                metadata: fresh_meta(&mutating.metadata),
                webhooks: mutating.webhooks,
            },
            validating: ValidatingWebhookConfiguration {
                metadata: fresh_meta(&validating.metadata),
                webhooks: validating.webhooks,
            },
        })
    }

    fn webhook_names(&self) -> Vec<String> {
        let m = self.mutating.webhooks.iter().flatten().map(|w| &w.name);
        let v = self.validating.webhooks.iter().flatten().map(|w| &w.name);
        m.chain(v).cloned().collect()
    }

    /// Names of the mutating and the validating configuration.
    fn names(&self) -> (String, String) {
        let name = |m: &ObjectMeta| m.name.clone().unwrap_or_default();
        (
            name(&self.mutating.metadata),
            name(&self.validating.metadata),
        )
    }

    async fn delete(&self, client: &Client) -> Result<()> {
        let (mutating, validating) = self.names();
        Api::<MutatingWebhookConfiguration>::all(client.clone())
            .delete(&mutating, &DeleteParams::default())
            .await
            .with_context(|| format!("deleting MutatingWebhookConfiguration {mutating}"))?;
        Api::<ValidatingWebhookConfiguration>::all(client.clone())
            .delete(&validating, &DeleteParams::default())
            .await
            .with_context(|| format!("deleting ValidatingWebhookConfiguration {validating}"))?;
        Ok(())
    }

    async fn create(&self, client: &Client) -> Result<()> {
        let (mutating, validating) = self.names();
        Api::<MutatingWebhookConfiguration>::all(client.clone())
            .create(&PostParams::default(), &self.mutating)
            .await
            .with_context(|| format!("creating MutatingWebhookConfiguration {mutating}"))?;
        Api::<ValidatingWebhookConfiguration>::all(client.clone())
            .create(&PostParams::default(), &self.validating)
            .await
            .with_context(|| format!("creating ValidatingWebhookConfiguration {validating}"))?;
        Ok(())
    }
}

/// Name, labels and annotations only: what it takes to create the object again.
fn fresh_meta(meta: &ObjectMeta) -> ObjectMeta {
    ObjectMeta {
        name: meta.name.clone(),
        labels: meta.labels.clone(),
        annotations: meta.annotations.clone(),
        ..ObjectMeta::default()
    }
}

/// What server-side dry runs in the "with" namespace show.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
struct Active {
    mutating: bool,
    validating: bool,
}

struct Bench {
    client: Client,
    args: Args,
    run: String,
    with_ns: String,
    without_ns: String,
}

impl Bench {
    async fn setup(client: Client, args: Args) -> Result<Bench> {
        let run = random_suffix();
        let bench = Bench {
            with_ns: format!("pg-bench-with-{run}"),
            without_ns: format!("pg-bench-without-{run}"),
            client,
            args,
            run,
        };
        bench.namespace(Side::With).await?;
        bench.namespace(Side::Without).await?;
        Ok(bench)
    }

    fn ns(&self, side: Side) -> &str {
        match side {
            Side::With => &self.with_ns,
            Side::Without => &self.without_ns,
        }
    }

    fn pods(&self, side: Side) -> Api<Pod> {
        Api::namespaced(self.client.clone(), self.ns(side))
    }

    /// Creates the namespace of `side` and its `default` ServiceAccount (pod admission needs it,
    /// and the control plane of bench/e2e-latency.sh runs no controllers).
    async fn namespace(&self, side: Side) -> Result<()> {
        let name = self.ns(side);
        let on = if side == Side::With { "on" } else { "off" };
        let ns: Namespace = serde_json::from_value(json!({"metadata": {
            "name": name,
            "labels": {self.args.label.clone(): self.args.pool, self.args.bench_label.clone(): on},
        }}))?;
        Api::<Namespace>::all(self.client.clone())
            .create(&PostParams::default(), &ns)
            .await
            .with_context(|| format!("creating namespace {name}"))?;
        let sa: ServiceAccount = serde_json::from_value(json!({"metadata": {"name": "default"}}))?;
        match Api::<ServiceAccount>::namespaced(self.client.clone(), name)
            .create(&PostParams::default(), &sa)
            .await
        {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 409 => {}
            Err(e) => return Err(e).context(format!("creating ServiceAccount {name}/default")),
        }
        log(format!(
            "namespace {name}: {}={}, {}={on}",
            self.args.label, self.args.pool, self.args.bench_label
        ));
        Ok(())
    }

    fn pod(&self, name: &str) -> Result<Pod> {
        Ok(serde_json::from_value(json!({
            "metadata": {"name": name, "labels": {POD_LABEL: self.run}},
            "spec": {
                "containers": [{"name": "main", "image": self.args.image}],
                "terminationGracePeriodSeconds": 0,
            }
        }))?)
    }

    /// Creates one pod, timing only the API call, and checks whether poolguard mutated it.
    async fn create_timed(
        &self,
        side: Side,
        name: &str,
        expect_poolguard: bool,
    ) -> Result<Duration> {
        let (api, pod) = (self.pods(side), self.pod(name)?);
        let params = PostParams::default();
        if !self.args.pause.is_zero() {
            tokio::time::sleep(self.args.pause).await;
        }
        let start = Instant::now();
        let result = api.create(&params, &pod).await;
        let took = start.elapsed();
        let pod = result.with_context(|| format!("creating pod {}/{name}", self.ns(side)))?;
        self.check(&pod, side, expect_poolguard)?;
        Ok(took)
    }

    fn check(&self, pod: &Pod, side: Side, expect_poolguard: bool) -> Result<()> {
        let (key, pool) = (self.args.selector_key(), self.args.pool.as_str());
        let selector = node_selector(pod).get(key).cloned();
        let annotation = pod
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(POOL_ANNOTATION))
            .cloned();
        let name = pod.metadata.name.as_deref().unwrap_or("?");
        let what = format!(
            "pod {}/{name} has nodeSelector {key}={selector:?} and annotation \
             {POOL_ANNOTATION}={annotation:?}",
            self.ns(side)
        );
        if expect_poolguard {
            ensure!(
                selector.as_deref() == Some(pool) && annotation.as_deref() == Some(pool),
                "{what}: it should have gone through poolguard (both {pool:?})"
            );
        } else {
            ensure!(
                selector.is_none() && annotation.is_none(),
                "{what}: it should not have gone through poolguard (neither set)"
            );
        }
        Ok(())
    }

    /// `count` timed pairs named `<phase>-<i>`; `registered`: whether the webhook configurations
    /// exist (then "with" pods must be mutated). Pods are deleted every `--delete-every` pairs
    /// and at the end.
    async fn pairs(&self, phase: &str, count: usize, registered: bool) -> Result<Vec<Pair>> {
        let mut out = Vec::with_capacity(count);
        for i in 0..count {
            let name = format!("{phase}-{i:05}");
            let order = if i % 2 == 0 {
                [Side::With, Side::Without]
            } else {
                [Side::Without, Side::With]
            };
            let mut pair = Pair {
                with: Duration::ZERO,
                without: Duration::ZERO,
            };
            for side in order {
                match side {
                    Side::With => pair.with = self.create_timed(side, &name, registered).await?,
                    Side::Without => pair.without = self.create_timed(side, &name, false).await?,
                }
            }
            out.push(pair);
            if (i + 1).is_multiple_of(self.args.delete_every) {
                self.delete_pods().await?;
            }
        }
        if !count.is_multiple_of(self.args.delete_every) {
            self.delete_pods().await?;
        }
        Ok(out)
    }

    /// Force-deletes every pod of this run (unbound pods go at once).
    async fn delete_pods(&self) -> Result<()> {
        let force = DeleteParams {
            grace_period_seconds: Some(0),
            ..DeleteParams::default()
        };
        let selector = ListParams::default().labels(&format!("{POD_LABEL}={}", self.run));
        for side in [Side::With, Side::Without] {
            self.pods(side)
                .delete_collection(&force, &selector)
                .await
                .with_context(|| format!("deleting the pods in {}", self.ns(side)))?;
        }
        Ok(())
    }

    /// Which webhooks server-side dry runs in the namespace of `side` meet: a pod without a
    /// selector (mutated: gets the pool; refused with 403: only the validating webhook is there)
    /// and a Deployment whose template asks for another pool (refused: validating webhook).
    async fn probe(&self, side: Side) -> Result<Active> {
        let dry = PostParams {
            dry_run: true,
            field_manager: None,
        };
        let pool = &self.args.pool;
        let mutating = match self.pods(side).create(&dry, &self.pod("probe")?).await {
            Ok(pod) => node_selector(&pod).get(self.args.selector_key()) == Some(pool),
            Err(kube::Error::Api(s)) if s.code == 403 => false,
            Err(e) => {
                return Err(e).context(format!("dry-run pod in {}", self.ns(side)));
            }
        };
        let other = format!("{pool}-elsewhere");
        let deployment: Deployment = serde_json::from_value(json!({
            "metadata": {"name": "probe"},
            "spec": {
                "selector": {"matchLabels": {"app": "probe"}},
                "template": {
                    "metadata": {"labels": {"app": "probe"}},
                    "spec": {
                        "nodeSelector": {self.args.selector_key(): other},
                        "containers": [{"name": "main", "image": self.args.image}],
                    },
                },
            },
        }))?;
        let validating = match Api::<Deployment>::namespaced(self.client.clone(), self.ns(side))
            .create(&dry, &deployment)
            .await
        {
            Ok(_) => false,
            Err(kube::Error::Api(s)) if s.code == 403 && s.message.contains(&other) => true,
            Err(e) => {
                return Err(e).context(format!("dry-run Deployment in {}", self.ns(side)));
            }
        };
        Ok(Active {
            mutating,
            validating,
        })
    }

    /// Waits until both webhooks are in effect (`registered`) or both gone for the "with"
    /// namespace; with them in effect, also checks that the "without" namespace is not selected.
    /// Returns how long it took.
    async fn await_webhooks(&self, registered: bool) -> Result<Duration> {
        let want = Active {
            mutating: registered,
            validating: registered,
        };
        let start = Instant::now();
        loop {
            let got = self.probe(Side::With).await?;
            if got == want {
                break;
            }
            if start.elapsed() > self.args.activation_timeout {
                bail!(
                    "the webhook configurations did not {} within {}s \
                     (dry runs in {} show {got:?})",
                    if registered { "take effect" } else { "go away" },
                    self.args.activation_timeout.as_secs(),
                    self.with_ns
                );
            }
            tokio::time::sleep(PROBE_INTERVAL).await;
        }
        let took = start.elapsed();
        if registered {
            let got = self.probe(Side::Without).await?;
            ensure!(
                !got.mutating && !got.validating,
                "namespace {} (with {}=off) is sent to poolguard ({got:?}): the webhook \
                 configurations' namespaceSelector must require {}=on",
                self.without_ns,
                self.args.bench_label,
                self.args.bench_label
            );
        }
        Ok(took)
    }

    /// kube-apiserver's call count and total seconds per webhook.
    async fn apiserver_metrics(&self) -> Result<Histograms> {
        let req = kube::core::Request::new("/metrics")
            .list(&ListParams::default())
            .context("building GET /metrics")?;
        let text = self
            .client
            .request_text(req)
            .await
            .context("GET /metrics from kube-apiserver")?;
        Ok(Histograms::parse(&text, APISERVER_METRIC, "name"))
    }

    /// Best effort: pods and namespaces of this run.
    async fn cleanup(&self) {
        if let Err(e) = self.delete_pods().await {
            log(format!("cleanup: {e:#}"));
        }
        for ns in [&self.with_ns, &self.without_ns] {
            if let Err(e) = Api::<Namespace>::all(self.client.clone())
                .delete(ns, &DeleteParams::default())
                .await
            {
                log(format!("cleanup: deleting namespace {ns}: {e}"));
            }
        }
    }
}

/// poolguard's request count and total seconds per webhook (`mutate`, `validate`), from its
/// operations port.
async fn poolguard_metrics(addr: &str) -> Result<Histograms> {
    let mut stream = tokio::net::TcpStream::connect(addr)
        .await
        .with_context(|| format!("connecting to poolguard's operations port {addr}"))?;
    stream
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: poolguard\r\nConnection: close\r\n\r\n")
        .await
        .with_context(|| format!("GET http://{addr}/metrics"))?;
    let mut raw = Vec::new();
    stream
        .read_to_end(&mut raw)
        .await
        .with_context(|| format!("reading http://{addr}/metrics"))?;
    let raw = String::from_utf8_lossy(&raw);
    let (head, body) = raw
        .split_once("\r\n\r\n")
        .with_context(|| format!("http://{addr}/metrics: not an HTTP response"))?;
    let status = head.lines().next().unwrap_or_default();
    ensure!(
        status.split_whitespace().nth(1) == Some("200"),
        "http://{addr}/metrics answered {status:?}"
    );
    ensure!(
        !head
            .to_ascii_lowercase()
            .contains("transfer-encoding: chunked"),
        "http://{addr}/metrics: chunked responses are not supported here"
    );
    Ok(Histograms::parse(body, POOLGUARD_METRIC, "webhook"))
}

/// Call count and total seconds of one Prometheus histogram, per value of one label.
struct Histograms(BTreeMap<String, (f64, f64)>);

impl Histograms {
    /// Sums `<metric>_count` and `<metric>_sum` over all series, per value of `label`.
    fn parse(text: &str, metric: &str, label: &str) -> Histograms {
        let key = format!("{label}=\"");
        let mut out: BTreeMap<String, (f64, f64)> = BTreeMap::new();
        for line in text.lines() {
            let Some(rest) = line.strip_prefix(metric) else {
                continue;
            };
            let (is_count, rest) = if let Some(r) = rest.strip_prefix("_count{") {
                (true, r)
            } else if let Some(r) = rest.strip_prefix("_sum{") {
                (false, r)
            } else {
                continue;
            };
            let Some((labels, value)) = rest.rsplit_once("} ") else {
                continue;
            };
            let Some(name) = labels
                .split(',')
                .find_map(|kv| kv.strip_prefix(key.as_str()))
                .map(|v| v.trim_end_matches('"'))
            else {
                continue;
            };
            let Ok(value) = value.trim().parse::<f64>() else {
                continue;
            };
            let entry = out.entry(name.to_string()).or_default();
            if is_count {
                entry.0 += value;
            } else {
                entry.1 += value;
            }
        }
        Histograms(out)
    }

    /// Calls and mean µs per label value between `before` and `self`; with `expect`, every
    /// listed value must have been called exactly that often.
    fn since(&self, before: &Histograms, expect: Option<(&[String], usize)>) -> Result<Value> {
        let mut out = serde_json::Map::new();
        for (name, &(count1, sum1)) in &self.0 {
            let (count0, sum0) = before.0.get(name).copied().unwrap_or_default();
            let calls = (count1 - count0).round();
            if calls < 1.0 {
                continue;
            }
            out.insert(
                name.clone(),
                json!({"calls": calls as u64, "mean_us": round1((sum1 - sum0) / calls * 1e6)}),
            );
        }
        if let Some((names, n)) = expect {
            for name in names {
                let calls = out.get(name).and_then(|v| v["calls"].as_u64()).unwrap_or(0);
                ensure!(
                    calls as usize == n,
                    "kube-apiserver counted {calls} calls of webhook {name} during the {n} \
                     measured \"with\" pods"
                );
            }
        }
        Ok(Value::Object(out))
    }
}

fn micros(d: Duration) -> f64 {
    (d.as_nanos() as f64 / 100.0).round() / 10.0
}

/// Nearest-rank percentile of sorted nanoseconds.
fn percentile(sorted: &[u128], q: f64) -> u128 {
    let rank = (q * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

struct Summary {
    n: usize,
    min: Duration,
    p50: Duration,
    p90: Duration,
    p99: Duration,
    max: Duration,
    mean: Duration,
}

impl Summary {
    fn of(samples: &[Duration]) -> Result<Summary> {
        ensure!(!samples.is_empty(), "no samples");
        let mut ns: Vec<u128> = samples.iter().map(Duration::as_nanos).collect();
        ns.sort_unstable();
        let at = |q| Duration::from_nanos(percentile(&ns, q) as u64);
        let total: u128 = ns.iter().sum();
        Ok(Summary {
            n: ns.len(),
            min: Duration::from_nanos(ns[0] as u64),
            p50: at(0.50),
            p90: at(0.90),
            p99: at(0.99),
            max: Duration::from_nanos(ns[ns.len() - 1] as u64),
            mean: Duration::from_nanos((total / ns.len() as u128) as u64),
        })
    }

    fn json(&self) -> Value {
        json!({
            "n": self.n,
            "min_us": micros(self.min),
            "p50_us": micros(self.p50),
            "p90_us": micros(self.p90),
            "p99_us": micros(self.p99),
            "max_us": micros(self.max),
            "mean_us": micros(self.mean),
        })
    }
}

/// Difference of two summaries' percentiles (`a - b`), in µs.
fn added(a: &Summary, b: &Summary) -> Value {
    let d = |x: Duration, y: Duration| micros(x) - micros(y);
    json!({
        "p50_us": round1(d(a.p50, b.p50)),
        "p90_us": round1(d(a.p90, b.p90)),
        "p99_us": round1(d(a.p99, b.p99)),
        "mean_us": round1(d(a.mean, b.mean)),
    })
}

fn round1(x: f64) -> f64 {
    (x * 10.0).round() / 10.0
}

/// Median of the per-pair differences (with - without) and an approximate distribution-free 95%
/// confidence interval for it (order statistics n/2 ± 0.98·√n).
fn paired_difference(pairs: &[Pair]) -> Result<Value> {
    ensure!(!pairs.is_empty(), "no pairs");
    let mut d: Vec<i128> = pairs
        .iter()
        .map(|p| p.with.as_nanos() as i128 - p.without.as_nanos() as i128)
        .collect();
    d.sort_unstable();
    let n = d.len();
    let us = |x: i128| (x as f64 / 100.0).round() / 10.0;
    let k = ((n as f64 - 1.96 * (n as f64).sqrt()) / 2.0)
        .floor()
        .max(0.0) as usize;
    Ok(json!({
        "median_us": us(d[(n - 1) / 2]),
        "ci95_low_us": us(d[k.min(n - 1)]),
        "ci95_high_us": us(d[(n - 1).saturating_sub(k)]),
    }))
}

fn split(pairs: &[Pair]) -> (Vec<Duration>, Vec<Duration>) {
    (
        pairs.iter().map(|p| p.with).collect(),
        pairs.iter().map(|p| p.without).collect(),
    )
}

/// Main phase: warm-up, then `n` pairs with the webhook configurations registered.
async fn main_phase(bench: &Bench, regs: &Registrations) -> Result<Value> {
    let args = &bench.args;
    let activation = bench.await_webhooks(true).await?;
    log(format!(
        "webhooks in effect for {} and not for {} (checked in {:.0} ms)",
        bench.with_ns,
        bench.without_ns,
        activation.as_secs_f64() * 1e3
    ));
    log(format!("warm-up: {} pairs", args.warmup));
    bench.pairs("warm", args.warmup, true).await?;

    let pg_metrics = || async {
        match &args.poolguard_metrics {
            Some(addr) => poolguard_metrics(addr).await.map(Some),
            None => Ok(None),
        }
    };
    let (api_before, pg_before) = (bench.apiserver_metrics().await?, pg_metrics().await?);
    log(format!(
        "measuring: {} pairs, one request in flight",
        args.n
    ));
    let started = Instant::now();
    let pairs = bench.pairs("main", args.n, true).await?;
    let wall = started.elapsed();
    let (api_after, pg_after) = (bench.apiserver_metrics().await?, pg_metrics().await?);

    let (with, without) = split(&pairs);
    let (s_with, s_without) = (Summary::of(&with)?, Summary::of(&without)?);
    let names = regs.webhook_names();
    let apiserver = if api_after.0.is_empty() {
        log(format!(
            "note: kube-apiserver reports no {APISERVER_METRIC}"
        ));
        Value::Null
    } else {
        api_after.since(&api_before, Some((&names, args.n)))?
    };
    let poolguard = match (pg_before, pg_after) {
        (Some(before), Some(after)) => after.since(&before, None)?,
        _ => Value::Null,
    };
    Ok(json!({
        "pairs": args.n,
        "wall_seconds": (wall.as_secs_f64() * 10.0).round() / 10.0,
        "without": s_without.json(),
        "with": s_with.json(),
        "added": added(&s_with, &s_without),
        "paired_difference": paired_difference(&pairs)?,
        "apiserver_webhook_calls": apiserver,
        "poolguard_handling": poolguard,
        "samples_us": {
            "with": with.iter().map(|d| micros(*d)).collect::<Vec<_>>(),
            "without": without.iter().map(|d| micros(*d)).collect::<Vec<_>>(),
        },
    }))
}

/// Sanity phase: blocks with the webhook configurations registered (R) or deleted (D) in the
/// order R D D R R D D R ..., so that a steady drift affects both states alike. Leaves them
/// registered.
async fn sanity_phase(bench: &Bench, regs: &Registrations) -> Result<Value> {
    let args = &bench.args;
    let mut registered = true;
    let mut toggles_ms = Vec::new();
    let mut cells: BTreeMap<(bool, Side), Vec<Duration>> = BTreeMap::new();
    let mut per_block = Vec::new();
    let result: Result<()> = async {
        for block in 0..args.sanity_blocks {
            let want = matches!(block % 4, 0 | 3);
            if want != registered {
                if want {
                    regs.create(&bench.client).await?;
                } else {
                    regs.delete(&bench.client).await?;
                }
                registered = want;
                let took = bench.await_webhooks(want).await?;
                toggles_ms.push((took.as_secs_f64() * 1e4).round() / 10.0);
            }
            log(format!(
                "sanity block {}/{}: webhook configurations {}, {} pairs",
                block + 1,
                args.sanity_blocks,
                if registered { "registered" } else { "deleted" },
                args.sanity_pairs
            ));
            bench
                .pairs(&format!("s{block}-warm"), SANITY_BLOCK_WARMUP, registered)
                .await?;
            let pairs = bench
                .pairs(&format!("s{block}"), args.sanity_pairs, registered)
                .await?;
            let (with, without) = split(&pairs);
            per_block.push(json!({
                "registered": registered,
                "with_ns_p50_us": micros(Summary::of(&with)?.p50),
                "without_ns_p50_us": micros(Summary::of(&without)?.p50),
            }));
            for p in pairs {
                cells
                    .entry((registered, Side::With))
                    .or_default()
                    .push(p.with);
                cells
                    .entry((registered, Side::Without))
                    .or_default()
                    .push(p.without);
            }
        }
        Ok(())
    }
    .await;
    if !registered {
        regs.create(&bench.client)
            .await
            .context("registering the webhook configurations again")?;
    }
    result?;

    let cell = |registered: bool, side: Side| -> Result<Summary> {
        Summary::of(
            cells
                .get(&(registered, side))
                .map(Vec::as_slice)
                .unwrap_or(&[]),
        )
        .context("the sanity phase needs at least 2 blocks to have both states")
    };
    let present_with = cell(true, Side::With)?;
    let present_without = cell(true, Side::Without)?;
    let absent_with = cell(false, Side::With)?;
    let absent_without = cell(false, Side::Without)?;
    Ok(json!({
        "blocks": args.sanity_blocks,
        "pairs_per_block": args.sanity_pairs,
        "toggle_effective_ms": toggles_ms,
        "per_block": per_block,
        "registered_with_ns": present_with.json(),
        "registered_without_ns": present_without.json(),
        "deleted_with_ns": absent_with.json(),
        "deleted_without_ns": absent_without.json(),
        "added_vs_deleted": added(&present_with, &absent_with),
        "not_selected_vs_deleted": added(&present_without, &absent_without),
    }))
}

async fn connect() -> Result<Client> {
    match std::env::var_os("KUBECONFIG") {
        Some(v) if !v.is_empty() => {}
        _ => bail!("KUBECONFIG is not set: point it at the cluster to measure"),
    }
    let mut config = Config::infer().await.context("loading KUBECONFIG")?;
    config.connect_timeout = Some(Duration::from_secs(10));
    config.read_timeout = Some(Duration::from_secs(30));
    config.write_timeout = Some(Duration::from_secs(30));
    Client::try_from(config).context("building the Kubernetes client")
}

async fn measure(bench: &Bench, regs: &Registrations) -> Result<Value> {
    let main = main_phase(bench, regs).await?;
    let sanity = if bench.args.sanity_blocks > 0 && bench.args.sanity_pairs > 0 {
        sanity_phase(bench, regs).await?
    } else {
        Value::Null
    };
    let args = &bench.args;
    Ok(json!({
        "pool": args.pool,
        "namespaces": {"with": bench.with_ns, "without": bench.without_ns},
        "selected_by": format!("{}=on", args.bench_label),
        "webhooks": regs.webhook_names(),
        "image": args.image,
        "warmup_pairs": args.warmup,
        "delete_every_pairs": args.delete_every,
        "order": "pairs of one pod per namespace, which one first alternating; one in flight",
        "main": main,
        "sanity": sanity,
    }))
}

/// Errors are printed as their chain on one line (no backtrace, whatever RUST_BACKTRACE says).
#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    match run().await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("create_latency: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

async fn run() -> Result<()> {
    let Some(args) = Args::parse(std::env::args().skip(1))? else {
        println!("{USAGE}");
        return Ok(());
    };
    let json_path = args.json.clone();
    let client = connect().await?;
    let regs = Registrations::fetch(&client, &args.webhook_configs).await?;
    let bench = Bench::setup(client, args).await?;
    let result = measure(&bench, &regs).await;
    bench.cleanup().await;
    let report = result?;

    let main = &report["main"];
    println!(
        "pod CREATE, {} per side: without poolguard p50 {} µs p99 {} µs; with p50 {} µs p99 {} µs; \
         added p50 {} µs p99 {} µs (median paired difference {} µs)",
        main["pairs"],
        main["without"]["p50_us"],
        main["without"]["p99_us"],
        main["with"]["p50_us"],
        main["with"]["p99_us"],
        main["added"]["p50_us"],
        main["added"]["p99_us"],
        main["paired_difference"]["median_us"],
    );
    if let Some(path) = json_path {
        let text = serde_json::to_string_pretty(&report)?;
        std::fs::write(&path, text + "\n")
            .with_context(|| format!("writing {}", path.display()))?;
        log(format!("wrote {}", path.display()));
    }
    Ok(())
}
