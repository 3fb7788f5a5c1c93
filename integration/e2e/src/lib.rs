//! Helpers for poolguard's end-to-end tests (`tests/e2e.rs`, `tests/fail_closed.rs`, ...) and
//! the harnesses `under_load` (`src/bin/under_load.rs`) and `faults` (`src/bin/faults.rs`), whose
//! pod load is [`load`].
//!
//! The tests talk to a cluster that already runs poolguard behind its two webhook
//! configurations; how it got there (local control plane, kind, ...) does not matter.
//!
//! Environment:
//!
//! | variable | default | meaning |
//! |---|---|---|
//! | `KUBECONFIG` | **required** | cluster to test; the tests fail when it is unset |
//! | `POOLGUARD_E2E_POOLS` | `pool1,gpu` | two pools that have nodes; the first enforces `allowedrepositories` (deny), the second only warns |
//! | `POOLGUARD_E2E_NAMESPACE_LABEL` | `agentpool` | poolguard's `namespaceLabel` |
//! | `POOLGUARD_E2E_NODE_SELECTOR_KEY` | the namespace label | poolguard's `nodeSelectorKey` (also the node label) |
//! | `POOLGUARD_E2E_ALLOWED_IMAGE` | `registry.k8s.io/pause:3.10` | an image the config allows |
//! | `POOLGUARD_E2E_DENIED_IMAGE` | `nginx:1.27` | an image the config does not allow |
//! | `POOLGUARD_E2E_STOP_CMD` | required by `fail_closed` | shell command that stops poolguard (returns once it is down) |
//! | `POOLGUARD_E2E_START_CMD` | optional | shell command that starts it again (returns once it is ready) |
//! | `POOLGUARD_E2E_VALIDATES_UNLABELLED` | unset | `1`: the validating webhook also covers namespaces without the pool label (the chart's default); `fail_closed` then expects refusals there too |

pub mod load;
pub mod replicas;

use std::collections::BTreeMap;
use std::fmt::Display;
use std::future::Future;
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{anyhow, bail, Context, Result};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Event, Namespace, Node, Pod, ServiceAccount};
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::core::{ApiResource, GroupVersionKind};
use kube::{Client, Config};
use serde_json::{json, Value};

/// Upper bound of one whole test, cleanup excluded.
pub const TEST_TIMEOUT: Duration = Duration::from_secs(240);
/// How long cleanup waits for a test's namespaces to disappear.
const CLEANUP_TIMEOUT: Duration = Duration::from_secs(45);
const POLL: Duration = Duration::from_millis(250);
/// How long poolguard may take to place pods by a namespace's new label once a watch of ours
/// has delivered the change (its own watch gets the same event at about the same moment).
pub const SETTLE_TIMEOUT: Duration = Duration::from_secs(10);
/// Server-side dry-run pods that must get the new pool in a row before a relabel counts as seen
/// by poolguard (with several replicas, each answers some of them).
const SETTLED_IN_A_ROW: usize = 3;

/// One test's connection, settings and the objects it must clean up.
pub struct Env {
    pub client: Client,
    /// `POOLGUARD_E2E_POOLS`: at least two pools.
    pub pools: Vec<String>,
    /// Namespace label naming the pool.
    pub label: String,
    /// Node label / nodeSelector key poolguard writes.
    pub selector_key: String,
    pub allowed_image: String,
    pub denied_image: String,
    test: String,
    started: Instant,
    namespaces: Mutex<Vec<String>>,
    pods: Mutex<Vec<(String, String)>>,
}

/// Runs one test: connects, runs `body` (bounded by [`TEST_TIMEOUT`]), always cleans up, and
/// panics with the error chain on failure.
pub async fn run<F, Fut>(test: &str, body: F)
where
    F: FnOnce(Arc<Env>) -> Fut,
    Fut: Future<Output = Result<()>>,
{
    run_for(test, TEST_TIMEOUT, body).await
}

/// [`run`] with another bound than [`TEST_TIMEOUT`], for tests whose size is set from outside.
pub async fn run_for<F, Fut>(test: &str, limit: Duration, body: F)
where
    F: FnOnce(Arc<Env>) -> Fut,
    Fut: Future<Output = Result<()>>,
{
    let env = match Env::connect(test).await {
        Ok(env) => Arc::new(env),
        Err(e) => panic!("[{test}] cannot start: {e:#}"),
    };
    env.say(format!(
        "start (pools {:?}, label {}, nodeSelector key {})",
        env.pools, env.label, env.selector_key
    ));
    let result = match tokio::time::timeout(limit, body(env.clone())).await {
        Ok(r) => r,
        Err(_) => Err(anyhow!("test timed out after {}s", limit.as_secs())),
    };
    if result.is_err() {
        env.dump_events().await;
    }
    env.cleanup().await;
    let secs = env.started.elapsed().as_secs_f64();
    match result {
        Ok(()) => env.say(format!("PASS ({secs:.1}s)")),
        Err(e) => panic!("[{test}] FAIL after {secs:.1}s: {e:#}"),
    }
}

fn var(name: &str, default: &str) -> String {
    match std::env::var(name) {
        Ok(v) if !v.trim().is_empty() => v.trim().to_string(),
        _ => default.to_string(),
    }
}

/// A short random suffix for object names (std only: a randomly keyed hash of time and a counter).
pub fn random_suffix() -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default();
    h.write_u128(nanos);
    h.write_u32(std::process::id());
    h.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
    format!("{:06x}", h.finish() & 0xff_ffff)
}

impl Env {
    async fn connect(test: &str) -> Result<Env> {
        match std::env::var_os("KUBECONFIG") {
            Some(v) if !v.is_empty() => {}
            _ => bail!(
                "KUBECONFIG is not set. These end-to-end tests need a cluster running poolguard: \
                 run integration/e2e.sh (local control plane) or integration/kind/run.sh, or point \
                 KUBECONFIG at a cluster where poolguard is installed"
            ),
        }
        let kubeconfig = Kubeconfig::from_env()
            .context("reading KUBECONFIG")?
            .context("KUBECONFIG names no readable file")?;
        let mut config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
            .await
            .context("loading KUBECONFIG")?;
        config.connect_timeout = Some(Duration::from_secs(10));
        config.read_timeout = Some(Duration::from_secs(30));
        config.write_timeout = Some(Duration::from_secs(30));
        let client = Client::try_from(config).context("building the Kubernetes client")?;

        let pools: Vec<String> = var("POOLGUARD_E2E_POOLS", "pool1,gpu")
            .split(',')
            .map(|p| p.trim().to_string())
            .filter(|p| !p.is_empty())
            .collect();
        if pools.len() < 2 || pools[0] == pools[1] {
            bail!("POOLGUARD_E2E_POOLS must name two different pools, e.g. \"pool1,gpu\"; got {pools:?}");
        }
        let label = var("POOLGUARD_E2E_NAMESPACE_LABEL", "agentpool");
        let selector_key = var("POOLGUARD_E2E_NODE_SELECTOR_KEY", &label);
        Ok(Env {
            client,
            pools,
            label,
            selector_key,
            allowed_image: var("POOLGUARD_E2E_ALLOWED_IMAGE", "registry.k8s.io/pause:3.10"),
            denied_image: var("POOLGUARD_E2E_DENIED_IMAGE", "nginx:1.27"),
            test: test.to_string(),
            started: Instant::now(),
            namespaces: Mutex::new(Vec::new()),
            pods: Mutex::new(Vec::new()),
        })
    }

    /// Prints a progress line, prefixed with the test name and its elapsed time.
    pub fn say(&self, msg: impl Display) {
        println!(
            "[{} +{:5.1}s] {msg}",
            self.test,
            self.started.elapsed().as_secs_f64()
        );
    }

    /// The first pool of `POOLGUARD_E2E_POOLS` (allowedrepositories enforced).
    pub fn pool1(&self) -> &str {
        &self.pools[0]
    }

    /// The second pool of `POOLGUARD_E2E_POOLS` (allowedrepositories only warns).
    pub fn pool2(&self) -> &str {
        &self.pools[1]
    }

    pub fn pods(&self, ns: &str) -> Api<Pod> {
        Api::namespaced(self.client.clone(), ns)
    }

    pub fn deployments(&self, ns: &str) -> Api<Deployment> {
        Api::namespaced(self.client.clone(), ns)
    }

    /// poolguard's PolicyReport (`poolguard-audit`) of `ns` (empty: its ClusterPolicyReport), if
    /// the audit wrote one.
    pub async fn policy_report(&self, ns: &str) -> Result<Option<Value>> {
        let kind = if ns.is_empty() {
            "ClusterPolicyReport"
        } else {
            "PolicyReport"
        };
        let resource =
            ApiResource::from_gvk(&GroupVersionKind::gvk("wgpolicyk8s.io", "v1alpha2", kind));
        let reports: Api<DynamicObject> = if ns.is_empty() {
            Api::all_with(self.client.clone(), &resource)
        } else {
            Api::namespaced_with(self.client.clone(), ns, &resource)
        };
        match reports.get_opt("poolguard-audit").await? {
            Some(object) => Ok(Some(serde_json::to_value(object)?)),
            None => Ok(None),
        }
    }

    /// The stored state of `policy`'s rollout, in the rollout ConfigMap `configmap` of `ns`.
    pub async fn rollout_state(
        &self,
        ns: &str,
        configmap: &str,
        policy: &str,
    ) -> Result<Option<Value>> {
        let api: Api<ConfigMap> = Api::namespaced(self.client.clone(), ns);
        let text = api
            .get_opt(configmap)
            .await?
            .and_then(|cm| cm.data)
            .and_then(|d| d.get(&format!("state.{policy}")).cloned());
        Ok(text.map(|t| serde_json::from_str(&t)).transpose()?)
    }

    pub fn namespaces_api(&self) -> Api<Namespace> {
        Api::all(self.client.clone())
    }

    /// Creates `pg-e2e-<purpose>-<random>` labelled with `pool` (if any) and its `default`
    /// ServiceAccount (so pod admission never waits for the ServiceAccount controller); deleted
    /// at cleanup.
    pub async fn namespace(&self, purpose: &str, pool: Option<&str>) -> Result<String> {
        self.namespace_labelled(purpose, pool, &[]).await
    }

    /// [`Env::namespace`] with `extra` labels besides.
    pub async fn namespace_labelled(
        &self,
        purpose: &str,
        pool: Option<&str>,
        extra: &[(&str, &str)],
    ) -> Result<String> {
        let name = format!("pg-e2e-{purpose}-{}", random_suffix());
        let mut labels = BTreeMap::new();
        labels.insert("poolguard-e2e".to_string(), "true".to_string());
        if let Some(pool) = pool {
            labels.insert(self.label.clone(), pool.to_string());
        }
        labels.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        let ns: Namespace = serde_json::from_value(json!({
            "metadata": {"name": name, "labels": labels}
        }))?;
        self.namespaces_api()
            .create(&PostParams::default(), &ns)
            .await
            .with_context(|| format!("creating namespace {name}"))?;
        self.namespaces.lock().unwrap().push(name.clone());
        let sa: ServiceAccount = serde_json::from_value(json!({"metadata": {"name": "default"}}))?;
        match Api::<ServiceAccount>::namespaced(self.client.clone(), &name)
            .create(&PostParams::default(), &sa)
            .await
        {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 409 => {}
            Err(e) => return Err(e).context(format!("creating {name}/default ServiceAccount")),
        }
        match pool {
            Some(pool) => self.say(format!("namespace {name} ({}={pool})", self.label)),
            None => self.say(format!("namespace {name} (no {} label)", self.label)),
        }
        Ok(name)
    }

    /// Sets (or with `None` removes) the pool label of a namespace.
    pub async fn set_pool(&self, ns: &str, pool: Option<&str>) -> Result<Namespace> {
        let patch = json!({"metadata": {"labels": {self.label.clone(): pool}}});
        self.namespaces_api()
            .patch(ns, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .with_context(|| format!("relabelling namespace {ns}"))
    }

    /// Relabels `ns` to `pool` and returns once a watch on the namespace (opened before the
    /// change, so it sees the MODIFIED event like poolguard's namespace cache does) has delivered
    /// the new label and poolguard places pods by it ([`Env::await_placement`]). Returns the
    /// label as read back, the time the watch took and the time poolguard took after it.
    pub async fn relabel_and_await_watch(
        &self,
        ns: &str,
        pool: &str,
    ) -> Result<(Option<String>, Duration, Duration)> {
        let opened = Arc::new(AtomicBool::new(false));
        let condition = {
            let (opened, label, want) = (opened.clone(), self.label.clone(), pool.to_string());
            move |obj: Option<&Namespace>| {
                opened.store(true, Ordering::SeqCst);
                obj.and_then(|n| n.metadata.labels.as_ref())
                    .and_then(|l| l.get(&label))
                    == Some(&want)
            }
        };
        let (api, name) = (self.namespaces_api(), ns.to_string());
        let watch = tokio::spawn(async move {
            kube::runtime::wait::await_condition(api, &name, condition).await
        });
        let start = Instant::now();
        while !opened.load(Ordering::SeqCst) {
            if start.elapsed() > Duration::from_secs(10) {
                watch.abort();
                bail!("the namespace watch did not list {ns} within 10s");
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let updated = self.set_pool(ns, Some(pool)).await?;
        let t = Instant::now();
        let label = updated
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(&self.label))
            .cloned();
        let abort = watch.abort_handle();
        match tokio::time::timeout(Duration::from_secs(10), watch).await {
            Ok(Ok(Ok(_))) => {}
            Ok(Ok(Err(e))) => return Err(e).context("watching the namespace"),
            Ok(Err(e)) => return Err(e).context("namespace watch task"),
            Err(_) => {
                abort.abort();
                bail!("the namespace watch did not deliver the relabel of {ns} within 10s");
            }
        }
        let lag = t.elapsed();
        let settle = self.await_placement(ns, pool).await?;
        Ok((label, lag, settle))
    }

    /// Waits until poolguard places pods of `ns` in `pool`: server-side dry-run creates of a pod
    /// without a selector (they go through the admission webhooks, and nothing is stored) until
    /// [`SETTLED_IN_A_ROW`] in a row come back with `pool`, for at most [`SETTLE_TIMEOUT`].
    /// Returns how long it took.
    pub async fn await_placement(&self, ns: &str, pool: &str) -> Result<Duration> {
        let start = Instant::now();
        let dry_run = PostParams {
            dry_run: true,
            ..PostParams::default()
        };
        let probe = self.pod("settle-probe", &self.allowed_image, None)?;
        let (mut in_a_row, mut last) = (0, None);
        while in_a_row < SETTLED_IN_A_ROW {
            if start.elapsed() > SETTLE_TIMEOUT {
                bail!(
                    "poolguard did not place pods of {ns} in {pool} within {SETTLE_TIMEOUT:?} \
                     of the relabel (last dry-run pod: {last:?})"
                );
            }
            let placed = match self.pods(ns).create(&dry_run, &probe).await {
                Ok(pod) => node_selector(&pod).get(&self.selector_key).cloned(),
                Err(e) => {
                    last = Some(format!("refused: {e}"));
                    None
                }
            };
            if placed.as_deref() == Some(pool) {
                in_a_row += 1;
            } else {
                in_a_row = 0;
                if placed.is_some() {
                    last = placed.map(|p| format!("placed in {p}"));
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
        Ok(start.elapsed())
    }

    /// Records a pod outside the test's own namespaces (e.g. in kube-system) for cleanup.
    pub fn track_pod(&self, ns: &str, name: &str) {
        self.pods
            .lock()
            .unwrap()
            .push((ns.to_string(), name.to_string()));
    }

    /// A Pod manifest with one container; `selector` becomes `spec.nodeSelector` when given.
    pub fn pod(&self, name: &str, image: &str, selector: Option<&[(&str, &str)]>) -> Result<Pod> {
        Ok(serde_json::from_value(pod_json(name, image, selector))?)
    }

    /// A Deployment manifest (label `app=<name>`).
    pub fn deployment(
        &self,
        name: &str,
        image: &str,
        replicas: i32,
        selector: Option<&[(&str, &str)]>,
    ) -> Result<Deployment> {
        let mut template = pod_json(name, image, selector);
        template["metadata"] = json!({"labels": {"app": name}});
        Ok(serde_json::from_value(json!({
            "metadata": {"name": name, "labels": {"app": name}},
            "spec": {
                "replicas": replicas,
                "selector": {"matchLabels": {"app": name}},
                "template": template,
            }
        }))?)
    }

    /// Creates a pod; the API error is kept so that callers can check refusals.
    pub async fn create_pod(&self, ns: &str, pod: &Pod) -> kube::Result<Pod> {
        self.pods(ns).create(&PostParams::default(), pod).await
    }

    /// Creates a pod with a raw request so that the response's `Warning` headers are visible
    /// (kube's typed API drops them).
    pub async fn create_pod_raw(&self, ns: &str, pod: &Pod) -> Result<RawResponse> {
        let req = kube::core::Request::new(format!("/api/v1/namespaces/{ns}/pods"))
            .create(&PostParams::default(), serde_json::to_vec(pod)?)?;
        self.send_raw(req).await.context("POST pod")
    }

    /// Sends `req` as it is: the status, the `Warning` headers and the body (JSON, or its text
    /// when it is not JSON), whatever the status.
    pub async fn send_raw(&self, req: http::Request<Vec<u8>>) -> Result<RawResponse> {
        let res = self
            .client
            .send(req.map(kube::client::Body::from))
            .await
            .context("sending the request")?;
        let status = res.status().as_u16();
        let warnings = res
            .headers()
            .get_all("warning")
            .iter()
            .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
            .collect();
        let bytes = res.into_body().collect_bytes().await?;
        let body = serde_json::from_slice(&bytes)
            .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into_owned()));
        Ok(RawResponse {
            status,
            warnings,
            body,
        })
    }

    /// Polls `probe` every 250 ms until it returns `Ok(Ok(value))`; `Ok(Err(state))` means "not
    /// yet" and the last state is reported on timeout.
    pub async fn wait_until<T, F, Fut>(
        &self,
        what: &str,
        limit: Duration,
        mut probe: F,
    ) -> Result<T>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<std::result::Result<T, String>>>,
    {
        let start = Instant::now();
        let mut last = String::from("(never probed)");
        while start.elapsed() < limit {
            match probe().await? {
                Ok(v) => {
                    self.say(format!(
                        "{what}: done after {:.1}s",
                        start.elapsed().as_secs_f64()
                    ));
                    return Ok(v);
                }
                Err(state) => last = state,
            }
            tokio::time::sleep(POLL).await;
        }
        bail!(
            "timed out after {}s waiting for {what}; last state: {last}",
            limit.as_secs()
        )
    }

    /// Nodes whose `selector_key` label names `pool`.
    pub async fn pool_nodes(&self, pool: &str) -> Result<Vec<String>> {
        let nodes: Api<Node> = Api::all(self.client.clone());
        let list = nodes
            .list(&ListParams::default().labels(&format!("{}={pool}", self.selector_key)))
            .await
            .context("listing nodes")?;
        Ok(list
            .items
            .into_iter()
            .filter_map(|n| n.metadata.name)
            .collect())
    }

    /// Runs a shell command from the environment variable `var` (bounded to 180 s).
    pub async fn run_command(&self, var_name: &str, required: bool) -> Result<bool> {
        let cmd = match std::env::var(var_name) {
            Ok(c) if !c.trim().is_empty() => c,
            _ if required => bail!(
                "{var_name} is not set: this test needs a shell command that {}",
                if var_name.contains("STOP") {
                    "stops poolguard and returns once it is down"
                } else {
                    "starts poolguard and returns once it is ready"
                }
            ),
            _ => return Ok(false),
        };
        self.say(format!("running {var_name}: {cmd}"));
        let mut child = tokio::process::Command::new("sh");
        child.arg("-c").arg(&cmd).kill_on_drop(true);
        let status = tokio::time::timeout(Duration::from_secs(180), child.status())
            .await
            .with_context(|| format!("{var_name} did not finish within 180s"))?
            .with_context(|| format!("running {var_name}"))?;
        if !status.success() {
            bail!("{var_name} failed ({status})");
        }
        Ok(true)
    }

    /// Prints the events of the test's namespaces (diagnostics after a failure).
    async fn dump_events(&self) {
        let namespaces = self.namespaces.lock().unwrap().clone();
        for ns in namespaces {
            let events: Api<Event> = Api::namespaced(self.client.clone(), &ns);
            match events.list(&ListParams::default()).await {
                Ok(list) => {
                    for e in list.items {
                        self.say(format!(
                            "event {ns}: {} {}/{}: {} {}",
                            e.type_.unwrap_or_default(),
                            e.involved_object.kind.unwrap_or_default(),
                            e.involved_object.name.unwrap_or_default(),
                            e.reason.unwrap_or_default(),
                            e.message.unwrap_or_default()
                        ));
                    }
                }
                Err(err) => self.say(format!("cannot list events of {ns}: {err}")),
            }
        }
    }

    /// Deletes what the test created. Pods are force-deleted (grace period 0): with no kubelet
    /// a bound pod would otherwise stay Terminating and keep its namespace alive.
    async fn cleanup(&self) {
        let force = DeleteParams {
            grace_period_seconds: Some(0),
            ..DeleteParams::default()
        };
        let pods = std::mem::take(&mut *self.pods.lock().unwrap());
        for (ns, name) in pods {
            if let Err(e) = self.pods(&ns).delete(&name, &force).await {
                self.say(format!("cleanup: deleting pod {ns}/{name}: {e}"));
            }
        }
        let namespaces = std::mem::take(&mut *self.namespaces.lock().unwrap());
        for ns in &namespaces {
            match self
                .namespaces_api()
                .delete(ns, &DeleteParams::default())
                .await
            {
                Ok(_) => {}
                Err(kube::Error::Api(s)) if s.code == 404 => {}
                Err(e) => self.say(format!("cleanup: deleting namespace {ns}: {e}")),
            }
        }
        let start = Instant::now();
        let mut left = namespaces;
        while !left.is_empty() && start.elapsed() < CLEANUP_TIMEOUT {
            let mut still = Vec::new();
            for ns in left {
                let _ = self
                    .pods(&ns)
                    .delete_collection(&force, &ListParams::default())
                    .await;
                match self.namespaces_api().get_opt(&ns).await {
                    Ok(None) => {}
                    _ => still.push(ns),
                }
            }
            left = still;
            if !left.is_empty() {
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        }
        if left.is_empty() {
            self.say(format!(
                "cleanup done ({:.1}s)",
                start.elapsed().as_secs_f64()
            ));
        } else {
            self.say(format!(
                "cleanup: namespaces still terminating after {}s: {left:?}",
                CLEANUP_TIMEOUT.as_secs()
            ));
        }
    }
}

/// Result of [`Env::create_pod_raw`].
#[derive(Debug)]
pub struct RawResponse {
    pub status: u16,
    /// `Warning` response headers (admission warnings arrive as `299 - "<text>"`).
    pub warnings: Vec<String>,
    pub body: Value,
}

fn pod_json(name: &str, image: &str, selector: Option<&[(&str, &str)]>) -> Value {
    let mut pod = json!({
        "metadata": {"name": name, "labels": {"app": name}},
        "spec": {
            "containers": [{"name": "main", "image": image}],
            "terminationGracePeriodSeconds": 0,
        }
    });
    if let Some(sel) = selector {
        let map: BTreeMap<&str, &str> = sel.iter().copied().collect();
        pod["spec"]["nodeSelector"] = json!(map);
    }
    pod
}

/// The pod's `spec.nodeSelector` (empty when unset).
/// A stored rollout state's groups as "canary=Succeeded standard=Progressing critical=ToApply".
pub fn rollout_statuses(state: &Value) -> String {
    state["groups"]
        .as_array()
        .map(|groups| {
            groups
                .iter()
                .map(|g| {
                    format!(
                        "{}={}",
                        g["name"].as_str().unwrap_or("?"),
                        g["status"].as_str().unwrap_or("?")
                    )
                })
                .collect::<Vec<_>>()
                .join(" ")
        })
        .unwrap_or_default()
}

pub fn node_selector(pod: &Pod) -> BTreeMap<String, String> {
    pod.spec
        .as_ref()
        .and_then(|s| s.node_selector.clone())
        .unwrap_or_default()
}

/// Checks that `result` is an API refusal with HTTP `code` whose message contains every needle;
/// returns the message.
pub fn expect_refused<T>(
    what: &str,
    result: kube::Result<T>,
    code: u16,
    needles: &[&str],
) -> Result<String> {
    match result {
        Ok(_) => bail!("{what}: expected HTTP {code}, but the request was allowed"),
        Err(kube::Error::Api(status)) => {
            if status.code != code {
                bail!(
                    "{what}: expected HTTP {code}, got {} ({}): {}",
                    status.code,
                    status.reason,
                    status.message
                );
            }
            for needle in needles {
                if !status.message.contains(needle) {
                    bail!(
                        "{what}: the message does not contain {needle:?}: {}",
                        status.message
                    );
                }
            }
            Ok(status.message.clone())
        }
        Err(e) => Err(anyhow!(e)).context(format!("{what}: expected an API refusal")),
    }
}

/// The admission requests poolguard has answered so far, from its metrics endpoint at `addr`
/// (host:port, plain HTTP): `poolguard_admission_requests_total` summed over its `decision`
/// label, by (webhook, operation, kind).
pub async fn admission_requests(addr: &str) -> Result<BTreeMap<(String, String, String), u64>> {
    let text = metrics_text(addr).await?;
    let mut counts = BTreeMap::new();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix("poolguard_admission_requests_total{") else {
            continue;
        };
        let (labels, value) = rest
            .split_once("} ")
            .with_context(|| format!("unexpected metrics line {line:?}"))?;
        let label = |name: &str| {
            labels
                .split(',')
                .find_map(|kv| kv.strip_prefix(&format!("{name}=\"")))
                .and_then(|v| v.strip_suffix('"'))
                .unwrap_or_default()
                .to_string()
        };
        let value: f64 = value
            .trim()
            .parse()
            .with_context(|| format!("unexpected metrics line {line:?}"))?;
        *counts
            .entry((label("webhook"), label("operation"), label("kind")))
            .or_default() += value as u64;
    }
    Ok(counts)
}

/// The body of `GET /metrics` from poolguard's metrics endpoint at `addr` (HTTP/1.0, loopback).
pub async fn metrics_text(addr: &str) -> Result<String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let io = async {
        let mut s = tokio::net::TcpStream::connect(addr).await?;
        s.write_all(format!("GET /metrics HTTP/1.0\r\nHost: {addr}\r\n\r\n").as_bytes())
            .await?;
        let mut buf = Vec::new();
        s.read_to_end(&mut buf).await?;
        Ok::<_, std::io::Error>(buf)
    };
    let buf = tokio::time::timeout(Duration::from_secs(5), io)
        .await
        .with_context(|| format!("GET http://{addr}/metrics: no answer within 5s"))?
        .with_context(|| format!("GET http://{addr}/metrics"))?;
    let text = String::from_utf8_lossy(&buf);
    let (head, body) = text
        .split_once("\r\n\r\n")
        .with_context(|| format!("GET http://{addr}/metrics: not an HTTP answer"))?;
    if !head.starts_with("HTTP/1.1 200") && !head.starts_with("HTTP/1.0 200") {
        bail!(
            "GET http://{addr}/metrics: {}",
            head.lines().next().unwrap_or_default()
        );
    }
    Ok(body.to_string())
}
