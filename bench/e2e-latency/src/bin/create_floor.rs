//! Pod CREATE latency through kube-apiserver for several "arms", interleaved so that every
//! comparison is paired (`bench/e2e-floor.sh` runs it; bench/README.md).
//!
//! Each arm has its own namespace `<prefix>-<arm>`, labelled `<label>=<pool>` and
//! `<arm-label>=<arm>`; each arm's webhook configurations select namespaces by that label, so an
//! arm's pods reach only its own server. The arm `none` is selected by no configuration. A
//! native arm (`--native-arms`) has no webhook: admission policies in the API server
//! (MutatingAdmissionPolicy, ValidatingAdmissionPolicy), bound by the same label, decide its pods. A round
//! creates one pod in every arm's namespace, back to back, the arm order rotating from round to
//! round (and worker to worker); a round is the unit of pairing (arm minus the same round's
//! `none`, computed by bench/e2e/floor_report.py).
//!
//! At concurrency C, C workers run their rounds at once (each with at most one request in
//! flight), so every arm meets the same load. Every created pod is checked (arms `poolguard`,
//! `opa` and `native` must have set the pool's nodeSelector and the `poolguard.io/pool`
//! annotation, the others must not have), and kube-apiserver's per-webhook call counts must equal
//! the pods created in each arm's namespace. Before and after the measured rounds, a native arm's
//! policies must be in force: a dry-run pod gets the pool, one with `--foreign-image` is refused
//! by a ValidatingAdmissionPolicy, and neither reaches any webhook.

use std::collections::BTreeMap;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use k8s_openapi::api::core::v1::{Namespace, Pod, ServiceAccount};
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use kube::{Client, Config};
use serde_json::json;

const USAGE: &str = "\
usage: create_floor [options]   (needs KUBECONFIG)

  --arms A,B,...         arms, the first is the baseline (default none,null,opa,poolguard,native)
  --mutating-arms A,...  arms that set the pool (default opa,poolguard,native)
  --native-arms A,...    arms decided by admission policies in the API server, no webhook
                         (default native)
  --foreign-image IMAGE  an image a native arm's policies refuse
                         (default docker.io/library/nginx:1.27)
  --rounds N             measured rounds at concurrency 1 (default 500)
  --warmup N             unmeasured rounds first (default 50)
  --concurrency C,...    further levels: C concurrent creators (default: none)
  --rounds-per-worker N  measured rounds per creator at those levels (default 5)
  --prefix P             namespace prefix (default pg-floor)
  --arm-label KEY        namespace label naming the arm (default poolguard-floor)
  --label KEY            pool label (default agentpool)   --pool NAME (default pool1)
  --image IMAGE          container image (default registry.k8s.io/pause:3.10)
  --json PATH            write the raw results there";

const POOL_ANNOTATION: &str = "poolguard.io/pool";
const POD_LABEL: &str = "poolguard-floor-pod";
const APISERVER_METRIC: &str = "apiserver_admission_webhook_admission_duration_seconds";
/// Force-delete the pods every this many rounds at concurrency 1.
const DELETE_EVERY: usize = 100;
/// Unmeasured rounds per creator at each concurrency level above 1 (connections open there).
const LEVEL_WARMUP: usize = 2;

#[derive(Clone)]
struct Args {
    arms: Vec<String>,
    mutating_arms: Vec<String>,
    native_arms: Vec<String>,
    foreign_image: String,
    rounds: usize,
    warmup: usize,
    concurrency: Vec<usize>,
    rounds_per_worker: usize,
    prefix: String,
    arm_label: String,
    label: String,
    pool: String,
    image: String,
    json: Option<String>,
}

fn list(v: &str) -> Vec<String> {
    v.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(String::from)
        .collect()
}

impl Args {
    fn parse() -> Result<Option<Args>> {
        let mut a = Args {
            arms: list("none,null,opa,poolguard,native"),
            mutating_arms: list("opa,poolguard,native"),
            native_arms: list("native"),
            foreign_image: "docker.io/library/nginx:1.27".into(),
            rounds: 500,
            warmup: 50,
            concurrency: Vec::new(),
            rounds_per_worker: 5,
            prefix: "pg-floor".into(),
            arm_label: "poolguard-floor".into(),
            label: "agentpool".into(),
            pool: "pool1".into(),
            image: "registry.k8s.io/pause:3.10".into(),
            json: None,
        };
        let mut native_given = false;
        let mut args = std::env::args().skip(1);
        while let Some(flag) = args.next() {
            if flag == "-h" || flag == "--help" {
                return Ok(None);
            }
            let value = args
                .next()
                .with_context(|| format!("{flag} needs a value\n\n{USAGE}"))?;
            let number = |v: &str| -> Result<usize> {
                v.trim()
                    .parse()
                    .with_context(|| format!("{flag} wants a whole number, got {v:?}"))
            };
            match flag.as_str() {
                "--arms" => a.arms = list(&value),
                "--mutating-arms" => a.mutating_arms = list(&value),
                "--native-arms" => {
                    a.native_arms = list(&value);
                    native_given = true;
                }
                "--foreign-image" => a.foreign_image = value,
                "--rounds" => a.rounds = number(&value)?,
                "--warmup" => a.warmup = number(&value)?,
                "--concurrency" => {
                    a.concurrency = list(&value)
                        .iter()
                        .map(|v| number(v))
                        .collect::<Result<_>>()?
                }
                "--rounds-per-worker" => a.rounds_per_worker = number(&value)?,
                "--prefix" => a.prefix = value,
                "--arm-label" => a.arm_label = value,
                "--label" => a.label = value,
                "--pool" => a.pool = value,
                "--image" => a.image = value,
                "--json" => a.json = Some(value),
                _ => bail!("unknown option {flag}\n\n{USAGE}"),
            }
        }
        ensure!(
            a.arms.len() >= 2,
            "--arms needs a baseline and at least one arm"
        );
        ensure!(a.rounds > 0, "--rounds must be at least 1");
        if native_given {
            let stray: Vec<&String> = (a.native_arms.iter())
                .filter(|n| !a.arms[1..].contains(n))
                .collect();
            ensure!(
                stray.is_empty(),
                "--native-arms {stray:?}: not among the measured arms after the baseline {:?}",
                &a.arms[1..]
            );
        } else {
            // The default names an arm that --arms may leave out.
            a.native_arms.retain(|n| a.arms[1..].contains(n));
        }
        ensure!(
            a.concurrency.iter().all(|&c| c > 0) && a.rounds_per_worker > 0,
            "concurrency levels and --rounds-per-worker must be at least 1"
        );
        Ok(Some(a))
    }
}

fn log(msg: impl std::fmt::Display) {
    eprintln!("[create_floor] {msg}");
}

struct Bench {
    client: Client,
    args: Args,
}

impl Bench {
    fn ns(&self, arm: &str) -> String {
        format!("{}-{arm}", self.args.prefix)
    }

    fn pods(&self, arm: &str) -> Api<Pod> {
        Api::namespaced(self.client.clone(), &self.ns(arm))
    }

    /// The arm's namespace (already there is fine: the script may have made it) and its
    /// `default` ServiceAccount (no controllers run in the bench's control plane).
    async fn namespace(&self, arm: &str) -> Result<()> {
        let name = self.ns(arm);
        let ns: Namespace = serde_json::from_value(json!({"metadata": {
            "name": name,
            "labels": {self.args.label.clone(): self.args.pool, self.args.arm_label.clone(): arm},
        }}))?;
        match Api::<Namespace>::all(self.client.clone())
            .create(&PostParams::default(), &ns)
            .await
        {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 409 => {}
            Err(e) => return Err(e).context(format!("creating namespace {name}")),
        }
        let sa: ServiceAccount = serde_json::from_value(json!({"metadata": {"name": "default"}}))?;
        match Api::<ServiceAccount>::namespaced(self.client.clone(), &name)
            .create(&PostParams::default(), &sa)
            .await
        {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 409 => {}
            Err(e) => return Err(e).context(format!("creating ServiceAccount {name}/default")),
        }
        Ok(())
    }

    fn pod(&self, name: &str) -> Result<Pod> {
        self.pod_with_image(name, &self.args.image)
    }

    fn pod_with_image(&self, name: &str, image: &str) -> Result<Pod> {
        Ok(serde_json::from_value(json!({
            "metadata": {"name": name, "labels": {POD_LABEL: "1"}},
            "spec": {
                "containers": [{"name": "main", "image": image}],
                "terminationGracePeriodSeconds": 0,
            }
        }))?)
    }

    fn check(&self, pod: &Pod, arm: &str) -> Result<()> {
        let selector = pod
            .spec
            .as_ref()
            .and_then(|s| s.node_selector.as_ref())
            .and_then(|s| s.get(&self.args.label))
            .cloned();
        let annotation = pod
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(POOL_ANNOTATION))
            .cloned();
        let pool = Some(self.args.pool.clone());
        let mutated = self.args.mutating_arms.iter().any(|a| a == arm);
        let ok = if mutated {
            selector == pool && annotation == pool
        } else {
            selector.is_none() && annotation.is_none()
        };
        ensure!(
            ok,
            "pod {}/{} has nodeSelector {selector:?} and annotation {annotation:?}; arm {arm} \
             should {}have set the pool",
            self.ns(arm),
            pod.metadata.name.as_deref().unwrap_or("?"),
            if mutated { "" } else { "not " }
        );
        Ok(())
    }

    async fn create_timed(&self, arm: &str, name: &str) -> Result<Duration> {
        let (api, pod) = (self.pods(arm), self.pod(name)?);
        let start = Instant::now();
        let result = api.create(&PostParams::default(), &pod).await;
        let took = start.elapsed();
        let pod = result.with_context(|| format!("creating pod {}/{name}", self.ns(arm)))?;
        self.check(&pod, arm)?;
        Ok(took)
    }

    /// One round: a pod per arm, in the order rotated by `shift`. Latencies in arm order.
    async fn round(&self, name: &str, shift: usize) -> Result<Vec<Duration>> {
        let k = self.args.arms.len();
        let mut out = vec![Duration::ZERO; k];
        for j in 0..k {
            let i = (j + shift) % k;
            out[i] = self.create_timed(&self.args.arms[i], name).await?;
        }
        Ok(out)
    }

    async fn delete_pods(&self) -> Result<()> {
        let force = DeleteParams {
            grace_period_seconds: Some(0),
            ..DeleteParams::default()
        };
        let selector = ListParams::default().labels(&format!("{POD_LABEL}=1"));
        for arm in &self.args.arms {
            self.pods(arm)
                .delete_collection(&force, &selector)
                .await
                .with_context(|| format!("deleting the pods in {}", self.ns(arm)))?;
        }
        Ok(())
    }

    /// Calls per webhook name, from kube-apiserver's metrics.
    async fn webhook_calls(&self) -> Result<BTreeMap<String, f64>> {
        let req = kube::core::Request::new("/metrics")
            .list(&ListParams::default())
            .context("building GET /metrics")?;
        let text = self
            .client
            .request_text(req)
            .await
            .context("GET /metrics from kube-apiserver")?;
        let mut out = BTreeMap::new();
        let prefix = format!("{APISERVER_METRIC}_count{{");
        for line in text.lines() {
            let Some(rest) = line.strip_prefix(&prefix) else {
                continue;
            };
            let Some((labels, value)) = rest.rsplit_once("} ") else {
                continue;
            };
            let name = labels
                .split(',')
                .find_map(|kv| kv.strip_prefix("name=\""))
                .map(|v| v.trim_end_matches('"').to_string());
            if let (Some(name), Ok(v)) = (name, value.trim().parse::<f64>()) {
                *out.entry(name).or_default() += v;
            }
        }
        Ok(out)
    }

    /// Whether a native arm's policies are in force: a server-side dry run of a pod with
    /// `--foreign-image` in its namespace must be refused by a ValidatingAdmissionPolicy.
    /// `Ok(Err(why))` when it is admitted or refused by something else; `Err` when the request
    /// itself fails.
    async fn refuses_foreign_image(&self, arm: &str) -> Result<Result<(), String>> {
        let pod = self.pod_with_image("probe-foreign", &self.args.foreign_image)?;
        match self.pods(arm).create(&dry_run(), &pod).await {
            Ok(_) => Ok(Err(format!(
                "a pod with image {} was admitted",
                self.args.foreign_image
            ))),
            Err(kube::Error::Api(s)) if s.message.contains("ValidatingAdmissionPolicy") => {
                Ok(Ok(()))
            }
            Err(kube::Error::Api(s)) => Ok(Err(format!(
                "a pod with image {} was refused, but not by a ValidatingAdmissionPolicy: {}",
                self.args.foreign_image, s.message
            ))),
            Err(e) => Err(e).context(format!("dry-run pod in {}", self.ns(arm))),
        }
    }

    /// Waits until a server-side dry run in each arm's namespace reaches that arm's webhooks
    /// (their call counts grow) and only theirs; for a native arm (no webhooks), until its
    /// policies set the pool and refuse a foreign image. At most 30 s in all.
    async fn await_webhooks(&self, webhooks: &BTreeMap<String, Vec<String>>) -> Result<()> {
        let start = Instant::now();
        let dry = dry_run();
        for arm in &self.args.arms {
            let mine = webhooks.get(arm).cloned().unwrap_or_default();
            let native = self.args.native_arms.contains(arm);
            loop {
                let before = self.webhook_calls().await?;
                let created = self.pods(arm).create(&dry, &self.pod("probe")?).await;
                let after = self.webhook_calls().await?;
                let grew = |n: &String| {
                    after.get(n).copied().unwrap_or(0.0) > before.get(n).copied().unwrap_or(0.0)
                };
                let others: Vec<&String> = after
                    .keys()
                    .filter(|n| grew(n) && !mine.contains(n))
                    .collect();
                ensure!(
                    others.is_empty(),
                    "a pod in {} reached webhooks of other arms: {others:?}",
                    self.ns(arm)
                );
                let not_yet = if !native {
                    let pod =
                        created.with_context(|| format!("dry-run pod in {}", self.ns(arm)))?;
                    if mine.iter().all(grew) {
                        self.check(&pod, arm)?;
                        break;
                    }
                    format!("the webhooks of arm {arm} ({mine:?}) are not called")
                } else {
                    // The API server loads policies and bindings from its informers: not all in
                    // force at once after they are written (the validating ones may refuse the
                    // pod before the mutating one sets the pool).
                    match created.map(|pod| self.check(&pod, arm)) {
                        Err(kube::Error::Api(s)) => {
                            format!("the policies of native arm {arm}: refused {}", s.message)
                        }
                        Err(e) => {
                            return Err(e).context(format!("dry-run pod in {}", self.ns(arm)))
                        }
                        Ok(Err(e)) => format!("the policies of native arm {arm}: {e:#}"),
                        Ok(Ok(())) => match self.refuses_foreign_image(arm).await? {
                            Ok(()) => break,
                            Err(why) => format!("the policies of native arm {arm}: {why}"),
                        },
                    }
                };
                ensure!(
                    start.elapsed() < Duration::from_secs(30),
                    "{not_yet} after 30 s"
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
        Ok(())
    }
}

/// Rows of one level: (worker, round, latencies in arm order).
type Rows = Vec<(usize, usize, Vec<Duration>)>;

async fn level(bench: &Arc<Bench>, c: usize, rounds: usize, warmup: usize) -> Result<(Rows, f64)> {
    let started = Instant::now();
    let mut tasks = Vec::new();
    for w in 0..c {
        let bench = bench.clone();
        tasks.push(tokio::spawn(async move {
            let mut rows = Vec::with_capacity(rounds);
            for r in 0..warmup + rounds {
                let name = format!("c{c}-w{w}-r{r}");
                let lat = bench.round(&name, r + w).await?;
                if r >= warmup {
                    rows.push((w, r - warmup, lat));
                }
                if c == 1 && (r + 1) % DELETE_EVERY == 0 {
                    bench.delete_pods().await?;
                }
            }
            Ok::<_, anyhow::Error>(rows)
        }));
    }
    let mut rows = Vec::new();
    for t in tasks {
        rows.extend(t.await.context("a creator panicked")??);
    }
    let wall = started.elapsed().as_secs_f64();
    bench.delete_pods().await?;
    Ok((rows, wall))
}

fn micros(d: Duration) -> f64 {
    (d.as_nanos() as f64 / 100.0).round() / 10.0
}

fn dry_run() -> PostParams {
    PostParams {
        dry_run: true,
        field_manager: None,
    }
}

/// The webhooks of each arm after the baseline, native arms having none.
fn webhook_names(arms: &[String], native_arms: &[String]) -> BTreeMap<String, Vec<String>> {
    arms.iter()
        .skip(1)
        .filter(|a| !native_arms.contains(a))
        .map(|a| {
            let names = if a == "poolguard" {
                vec!["mutate.poolguard.io".into(), "validate.poolguard.io".into()]
            } else {
                vec![
                    format!("mutate.{a}.floor.bench"),
                    format!("validate.{a}.floor.bench"),
                ]
            };
            (a.clone(), names)
        })
        .collect()
}

async fn run() -> Result<()> {
    let Some(args) = Args::parse()? else {
        println!("{USAGE}");
        return Ok(());
    };
    let mut config = Config::infer().await.context("loading KUBECONFIG")?;
    config.read_timeout = Some(Duration::from_secs(60));
    let client = Client::try_from(config).context("building the Kubernetes client")?;
    let bench = Arc::new(Bench { client, args });
    let args = bench.args.clone();
    for arm in &args.arms {
        bench.namespace(arm).await?;
    }
    let webhooks = webhook_names(&args.arms, &args.native_arms);
    bench.await_webhooks(&webhooks).await?;
    log(format!(
        "every arm reaches its own webhooks only: {webhooks:?}; native arms {:?} (no webhook) \
         set the pool and refuse {}",
        args.native_arms, args.foreign_image
    ));

    let calls_before = bench.webhook_calls().await?;
    let mut levels = Vec::new();
    let mut created = 0usize; // pods per arm
    let plan: Vec<(usize, usize, usize)> = std::iter::once((1, args.rounds, args.warmup))
        .chain(
            args.concurrency
                .iter()
                .filter(|&&c| c > 1)
                .map(|&c| (c, args.rounds_per_worker, LEVEL_WARMUP)),
        )
        .collect();
    for (c, rounds, warmup) in plan {
        log(format!(
            "concurrency {c}: {warmup} + {rounds} rounds per creator over {:?}",
            args.arms
        ));
        let (rows, wall) = level(&bench, c, rounds, warmup).await?;
        created += c * (rounds + warmup);
        log(format!(
            "concurrency {c}: {} rounds in {wall:.1} s",
            rows.len()
        ));
        levels.push(json!({
            "concurrency": c,
            "rounds_per_creator": rounds,
            "warmup_rounds_per_creator": warmup,
            "wall_seconds": (wall * 10.0).round() / 10.0,
            "rows": rows.iter().map(|(w, r, lat)| json!({
                "worker": w, "round": r,
                "us": lat.iter().map(|d| micros(*d)).collect::<Vec<_>>(),
            })).collect::<Vec<_>>(),
        }));
    }
    let calls_after = bench.webhook_calls().await?;
    let mut calls = serde_json::Map::new();
    for names in webhooks.values() {
        for n in names {
            let got = calls_after.get(n).copied().unwrap_or(0.0)
                - calls_before.get(n).copied().unwrap_or(0.0);
            ensure!(
                got.round() as usize == created,
                "kube-apiserver counted {got} calls of webhook {n} for {created} pods"
            );
            calls.insert(n.clone(), json!(got.round() as u64));
        }
    }
    log(format!(
        "webhook calls as kube-apiserver counted them: {calls:?}"
    ));
    // The native arms' policies were in force throughout: still now.
    for arm in &args.native_arms {
        if let Err(why) = bench.refuses_foreign_image(arm).await? {
            bail!("after the measured rounds, the policies of native arm {arm}: {why}");
        }
    }
    let report = json!({
        "arms": args.arms,
        "baseline": args.arms[0],
        "native_arms": args.native_arms,
        "namespaces": args.arms.iter().map(|a| bench.ns(a)).collect::<Vec<_>>(),
        "arm_label": args.arm_label,
        "image": args.image,
        "order": "rounds of one pod per arm, back to back, arm order rotated each round",
        "webhook_calls": calls,
        "levels": levels,
    });
    if let Some(path) = &args.json {
        std::fs::write(path, serde_json::to_string(&report)? + "\n")
            .with_context(|| format!("writing {path}"))?;
        log(format!("wrote {path}"));
    }
    Ok(())
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    match run().await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("create_floor: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
