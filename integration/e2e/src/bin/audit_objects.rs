//! The objects of the audit scale benchmark (`bench/audit-scale.sh`): namespaces labelled with
//! pools (some without one), a `default` ServiceAccount in each (pod admission needs it and the
//! benchmark's control plane runs no controllers), and pods over them, created with a bounded
//! number of requests in flight. No webhook is registered while they are created, so pods that
//! poolguard would have mutated or refused are stored as they are: that is what the audit is
//! for. Prints on stdout, as JSON, what was created and the `placement` results the audit must
//! report for it.
//!
//! Per namespace `i`: pool `--pools[0]` when `i % 10` is 0-4, `--pools[1]` when 5-7, none when
//! 8-9. Per pod `j` (by `j % 10`):
//!
//! | j | pod | placement in a pool's namespace |
//! |---|---|---|
//! | 0-5 | the pool's nodeSelector, allowed images; every third with a sidecar, the first also with an init container | pass |
//! | 6 | no nodeSelector | fail |
//! | 7 | the pool's nodeSelector, main image `--denied-image` (outside the allowed repositories) | pass (`allowedrepositories` fails) |
//! | 8 | bound (`spec.nodeName`) to a node of its pool | pass |
//! | 9 | bound to a node of the other pool; in every 100th namespace to a node that does not exist | fail; error |
//!
//! In a namespace without a pool every placement result is `skip` (no selector; a bound pod is
//! bound to a node of the first pool).

use std::collections::BTreeMap;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use k8s_openapi::api::core::v1::{Namespace, Node, Pod, ServiceAccount};
use kube::api::{Api, ListParams, PostParams};
use kube::{Client, Config};
use serde_json::{json, Value};
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

const USAGE: &str = "\
usage: audit_objects [options]   (needs KUBECONFIG; run by bench/audit-scale.sh)

  --namespaces N      namespaces to create (default 1000)
  --pods N            pods per namespace (default 10)
  --prefix P          namespace name prefix (default audit-scale)
  --bench-label K=V   label of every namespace created (default poolguard-audit-scale=on)
  --label KEY         the namespace label naming the pool, also the nodeSelector key and the
                      nodes' pool label (default agentpool)
  --pools A,B         two pools, each with at least one node (default pool1,gpu)
  --allowed-image I   an image the config allows (default registry.k8s.io/pause:3.10)
  --sidecar-image I   another allowed image (default registry.example.com/platform/log-shipper:2.3)
  --denied-image I    an image outside the allowed repositories (default nginx:1.27)
  --concurrency N     create requests in flight (default 32)";

/// A node name no node has: a pod bound to it gets an `error` placement result.
const MISSING_NODE: &str = "retired-node-1";
const ATTEMPTS: u32 = 5;

struct Args {
    namespaces: usize,
    pods: usize,
    prefix: String,
    bench_label: (String, String),
    label: String,
    pools: [String; 2],
    allowed_image: String,
    sidecar_image: String,
    denied_image: String,
    concurrency: usize,
}

impl Args {
    fn parse(mut args: impl Iterator<Item = String>) -> Result<Option<Args>> {
        let mut a = Args {
            namespaces: 1000,
            pods: 10,
            prefix: "audit-scale".into(),
            bench_label: ("poolguard-audit-scale".into(), "on".into()),
            label: "agentpool".into(),
            pools: ["pool1".into(), "gpu".into()],
            allowed_image: "registry.k8s.io/pause:3.10".into(),
            sidecar_image: "registry.example.com/platform/log-shipper:2.3".into(),
            denied_image: "nginx:1.27".into(),
            concurrency: 32,
        };
        while let Some(flag) = args.next() {
            if flag == "-h" || flag == "--help" {
                return Ok(None);
            }
            let value = args
                .next()
                .with_context(|| format!("{flag} needs a value\n{USAGE}"))?;
            let number = |v: &str| -> Result<usize> {
                v.parse::<usize>()
                    .ok()
                    .filter(|n| *n > 0)
                    .with_context(|| format!("{flag}: expected a positive number, got {v:?}"))
            };
            match flag.as_str() {
                "--namespaces" => a.namespaces = number(&value)?,
                "--pods" => a.pods = number(&value)?,
                "--concurrency" => a.concurrency = number(&value)?,
                "--prefix" => a.prefix = value,
                "--bench-label" => {
                    let (k, v) = value.split_once('=').with_context(|| {
                        format!("--bench-label: expected KEY=VALUE, got {value:?}")
                    })?;
                    a.bench_label = (k.into(), v.into());
                }
                "--label" => a.label = value,
                "--pools" => {
                    let pools: Vec<&str> = value.split(',').map(str::trim).collect();
                    let [first, second] = pools.as_slice() else {
                        bail!("--pools: expected two pools, got {value:?}");
                    };
                    a.pools = [first.to_string(), second.to_string()];
                }
                "--allowed-image" => a.allowed_image = value,
                "--sidecar-image" => a.sidecar_image = value,
                "--denied-image" => a.denied_image = value,
                other => bail!("unknown option {other}\n{USAGE}"),
            }
        }
        Ok(Some(a))
    }
}

fn log(msg: impl std::fmt::Display) {
    eprintln!("[audit_objects] {msg}");
}

/// The pool of namespace `i`: 50 % the first pool, 30 % the second, 20 % none.
fn pool_of(i: usize, pools: &[String; 2]) -> Option<&str> {
    match i % 10 {
        0..=4 => Some(&pools[0]),
        5..=7 => Some(&pools[1]),
        _ => None,
    }
}

fn namespace_name(args: &Args, i: usize) -> String {
    format!("{}-{i:04}", args.prefix)
}

/// Pod `j` of namespace `i` and the placement result the audit must give it.
fn pod(
    args: &Args,
    i: usize,
    j: usize,
    nodes: &BTreeMap<String, Vec<String>>,
) -> (Value, &'static str) {
    let pool = pool_of(i, &args.pools);
    let variant = j % 10;
    let app = format!("svc-{}", i % 37);
    let container = |name: &str, image: &str| {
        json!({
            "name": name,
            "image": image,
            "ports": [{"name": "http", "containerPort": 8080, "protocol": "TCP"}],
            "env": [
                {"name": "LOG_LEVEL", "value": "info"},
                {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
            ],
            "resources": {
                "requests": {"cpu": "10m", "memory": "16Mi"},
                "limits": {"memory": "64Mi"},
            },
            "readinessProbe": {"httpGet": {"path": "/healthz", "port": "http"}, "periodSeconds": 10},
        })
    };
    let main_image = if variant == 7 {
        &args.denied_image
    } else {
        &args.allowed_image
    };
    let mut containers = vec![container("app", main_image)];
    if j.is_multiple_of(3) {
        containers.push(container("log-shipper", &args.sidecar_image));
    }
    let mut spec = json!({
        "containers": containers,
        "terminationGracePeriodSeconds": 30,
        "securityContext": {"runAsNonRoot": true, "runAsUser": 65532},
    });
    if j == 0 {
        spec["initContainers"] = json!([{
            "name": "init",
            "image": args.allowed_image,
            "command": ["/pause"],
        }]);
    }
    if let (Some(pool), true) = (pool, variant != 6) {
        spec["nodeSelector"] = json!({args.label.clone(): pool});
    }
    let own = pool.unwrap_or(&args.pools[0]);
    let other = if own == args.pools[0] {
        &args.pools[1]
    } else {
        &args.pools[0]
    };
    let first_node = |p: &str| nodes[p][j % nodes[p].len()].clone();
    let expected = match (pool, variant) {
        (None, _) => "skip",
        (Some(_), 6) => "fail",
        (Some(_), 9) if i % 100 == 3 => "error",
        (Some(_), 9) => "fail",
        (Some(_), _) => "pass",
    };
    match variant {
        8 => spec["nodeName"] = json!(first_node(own)),
        9 if pool.is_some() && i % 100 == 3 => spec["nodeName"] = json!(MISSING_NODE),
        9 => spec["nodeName"] = json!(first_node(if pool.is_some() { other } else { own })),
        _ => {}
    }
    let object = json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": format!("{app}-{j:03}"),
            "labels": {"app": app, "component": format!("c{variant}"), "bench": "audit-scale"},
            "annotations": {"example.com/owner": format!("team-{}", i % 23)},
        },
        "spec": spec,
    });
    (object, expected)
}

/// Creates `object` with `create`, retrying what a busy API server answers (429, 5xx, transport
/// errors); an object that already exists counts as created (a rerun against the same cluster).
async fn create<K, F, Fut>(what: &str, create: F) -> Result<()>
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = kube::Result<K>>,
{
    let mut delay = Duration::from_millis(200);
    for attempt in 1..=ATTEMPTS {
        match create().await {
            Ok(_) => return Ok(()),
            Err(kube::Error::Api(s)) if s.code == 409 && s.reason == "AlreadyExists" => {
                return Ok(())
            }
            Err(kube::Error::Api(s)) if s.code < 500 && s.code != 429 => {
                bail!("creating {what}: {} {}", s.code, s.message)
            }
            Err(e) if attempt == ATTEMPTS => {
                return Err(e).with_context(|| format!("creating {what}"))
            }
            Err(e) => {
                log(format!(
                    "creating {what} (attempt {attempt}): {e}; retrying"
                ));
                tokio::time::sleep(delay).await;
                delay *= 2;
            }
        }
    }
    unreachable!("the last attempt returns")
}

/// Runs `jobs` with at most `limit` in flight; the first error ends the phase.
async fn bounded<F, Fut>(limit: usize, jobs: impl IntoIterator<Item = F>) -> Result<()>
where
    F: FnOnce() -> Fut,
    Fut: std::future::Future<Output = Result<()>> + Send + 'static,
{
    let permits = Arc::new(Semaphore::new(limit));
    let mut set = JoinSet::new();
    for job in jobs {
        let permit = permits.clone().acquire_owned().await?;
        let work = job();
        set.spawn(async move {
            let outcome = work.await;
            drop(permit);
            outcome
        });
        // Surface a failure early rather than after every job has been started.
        while let Some(done) = set.try_join_next() {
            done??;
        }
    }
    while let Some(done) = set.join_next().await {
        done??;
    }
    Ok(())
}

async fn main_inner() -> Result<()> {
    let Some(args) = Args::parse(std::env::args().skip(1))? else {
        println!("{USAGE}");
        return Ok(());
    };
    match std::env::var("KUBECONFIG") {
        Ok(v) if !v.is_empty() => {}
        _ => bail!("KUBECONFIG is not set"),
    }
    let config = Config::infer().await.context("loading KUBECONFIG")?;
    let client = Client::try_from(config).context("building the Kubernetes client")?;

    // The pools' nodes.
    let mut nodes: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for node in Api::<Node>::all(client.clone())
        .list(&ListParams::default())
        .await
        .context("listing nodes")?
    {
        let labels = node.metadata.labels.unwrap_or_default();
        if let (Some(pool), Some(name)) = (labels.get(&args.label), node.metadata.name) {
            nodes.entry(pool.clone()).or_default().push(name);
        }
    }
    for pool in &args.pools {
        if nodes.get(pool).is_none_or(Vec::is_empty) {
            bail!("no node is labelled {}={pool}", args.label);
        }
    }
    if nodes.values().flatten().any(|n| n == MISSING_NODE) {
        bail!(
            "a node named {MISSING_NODE} exists; the benchmark binds pods to it as a missing node"
        );
    }
    let args = Arc::new(args);
    let started = Instant::now();

    // Namespaces, each with its default ServiceAccount.
    let jobs = (0..args.namespaces).map(|i| {
        let (client, args) = (client.clone(), args.clone());
        move || async move {
            let post = PostParams::default();
            let name = namespace_name(&args, i);
            let mut labels = BTreeMap::from([
                (args.bench_label.0.clone(), args.bench_label.1.clone()),
                ("team".to_string(), format!("team-{}", i % 23)),
            ]);
            if let Some(pool) = pool_of(i, &args.pools) {
                labels.insert(args.label.clone(), pool.to_string());
            }
            let ns: Namespace =
                serde_json::from_value(json!({"metadata": {"name": name, "labels": labels}}))?;
            let namespaces: Api<Namespace> = Api::all(client.clone());
            create(&format!("namespace {name}"), || {
                namespaces.create(&post, &ns)
            })
            .await?;
            let sa: ServiceAccount =
                serde_json::from_value(json!({"metadata": {"name": "default"}}))?;
            let accounts: Api<ServiceAccount> = Api::namespaced(client, &name);
            create(&format!("serviceaccount {name}/default"), || {
                accounts.create(&post, &sa)
            })
            .await
        }
    });
    bounded(args.concurrency, jobs).await?;
    let namespaces_seconds = started.elapsed().as_secs_f64();
    log(format!(
        "{} namespaces and their ServiceAccounts in {namespaces_seconds:.1}s",
        args.namespaces
    ));

    // Pods.
    let mut expected: BTreeMap<&str, usize> = BTreeMap::new();
    let mut foreign_image_pods = 0;
    let mut bound_pods = 0;
    let mut containers = 0;
    let mut pods = Vec::with_capacity(args.namespaces * args.pods);
    for i in 0..args.namespaces {
        for j in 0..args.pods {
            let (object, placement) = pod(&args, i, j, &nodes);
            *expected.entry(placement).or_default() += 1;
            foreign_image_pods += usize::from(j % 10 == 7);
            bound_pods += usize::from(object["spec"]["nodeName"].is_string());
            containers += object["spec"]["containers"].as_array().map_or(0, Vec::len);
            pods.push((i, serde_json::from_value::<Pod>(object)?));
        }
    }
    let pods_started = Instant::now();
    let count = pods.len();
    let jobs = pods.into_iter().map(|(i, pod)| {
        let (client, args) = (client.clone(), args.clone());
        move || async move {
            let post = PostParams::default();
            let ns = namespace_name(&args, i);
            let name = pod.metadata.name.clone().unwrap_or_default();
            let api: Api<Pod> = Api::namespaced(client, &ns);
            create(&format!("pod {ns}/{name}"), || api.create(&post, &pod)).await
        }
    });
    bounded(args.concurrency, jobs).await?;
    let pods_seconds = pods_started.elapsed().as_secs_f64();
    log(format!(
        "{count} pods in {pods_seconds:.1}s ({:.0}/s)",
        count as f64 / pods_seconds
    ));

    let with_pool = (0..args.namespaces)
        .filter(|i| pool_of(*i, &args.pools).is_some())
        .count();
    println!(
        "{}",
        json!({
            "namespaces": args.namespaces,
            "namespaces_with_pool": with_pool,
            "pods": count,
            "containers": containers,
            "bound_pods": bound_pods,
            "foreign_image_pods": foreign_image_pods,
            "expected_placement": expected,
            "namespaces_seconds": namespaces_seconds,
            "pods_seconds": pods_seconds,
            "concurrency": args.concurrency,
        })
    );
    Ok(())
}

#[tokio::main]
async fn main() -> ExitCode {
    match main_inner().await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            log(format!("error: {e:#}"));
            ExitCode::FAILURE
        }
    }
}
