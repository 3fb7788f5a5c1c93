//! Operations on poolguard's Deployment while pods are being created: a steady stream
//! of pod CREATEs in a namespace of a pool goes through both webhooks while an operator restarts
//! the rollout, deletes one replica's pod, or drains the node of a replica. Counts what was
//! attempted, refused or failed, and whether any admitted pod was lost or left without its pool;
//! prints a table. Exit status 1 when poolguard did not keep its promise (docs/operations.md,
//! "Replicas under operations"):
//! * orderly operations (rollout restart, deleting a pod, a drain): every CREATE admitted with its
//!   pool, none failed, none lost;
//! * a replica that dies abruptly (SIGKILL of its process, its whole worker stopped): no admitted
//!   pod lost, none admitted without its pool; a CREATE may fail, but only visibly (the API server's
//!   `failed calling webhook`, failurePolicy Fail), only while the dead replica is still routed
//!   (from the death until the replica is back, or its endpoint was removed, plus
//!   [`ROUTING_SLACK`]), and the client's retry of every such CREATE is admitted with its pool.
//!
//! Needs KUBECONFIG (the cluster admin: the harness creates a namespace and runs kubectl drain)
//! and poolguard installed by the chart. `integration/node/test.sh` runs it against the real
//! node; `integration/kind/run.sh` against kind.
//!
//! The load (`poolguard_e2e::load`) is shared with the `faults` harness. Its pods name a scheduler
//! that does not exist, so they stay Pending: admission is what is measured, and the scheduler
//! and the (fake) nodes carry no extra work. They are deleted after each operation.

use std::collections::BTreeMap;
use std::fmt::Display;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, DeleteParams, ListParams};
use kube::Client;
use poolguard_e2e::load::{self, Outcome, LOAD_LABEL};

const USAGE: &str = "\
usage: under_load [options]   (needs KUBECONFIG; poolguard installed by the chart)

  --rate N            pod CREATEs per second (default 20)
  --seconds N         least load time per operation (default 30); the load goes on until the
                      operation has finished and --tail seconds more have passed
  --tail N            load seconds after the operation has finished (default 5)
  --lead N            load seconds before the operation starts (default 3)
  --operations LIST   comma-separated, in order: baseline, rollout-restart, delete-pod,
                      kill-replica, drain, stop-worker (default rollout-restart,delete-pod,drain);
                      kill-replica sends SIGKILL to a replica's poolguard process, so the
                      harness must run as root on that replica's node; stop-worker stops the
                      node of a replica with --stop-node-cmd, waits until that replica's
                      endpoint is removed, then force-deletes the replica's pod (the node stays
                      down) so that the Deployment replaces it
  --namespace NS      poolguard's namespace (default poolguard-system)
  --release NAME      its Deployment and Service (default poolguard)
  --pool NAME         pool of the load's namespace (default pool1)
  --label KEY         poolguard's namespaceLabel (default agentpool)
  --selector-key KEY  poolguard's nodeSelectorKey (default: the label)
  --image IMAGE       an image the config allows (default registry.k8s.io/pause:3.10)
  --drain-timeout N   kubectl drain --timeout seconds (default 30)
  --stop-node-cmd CMD shell command that stops node {node} at once, its kubelet and containers
                      (default: podman kill --signal KILL {node}, a kind node under podman)
  --kubectl PATH      kubectl to run (default $KUBECTL, else kubectl)";

const READY_TIMEOUT: Duration = Duration::from_secs(180);
/// After a replica died, how long the API server may still route a CREATE to it once the harness
/// saw it back or its endpoint removed: kube-proxy's sync on the control plane's node, and the
/// API server's pooled connection to the dead replica ended by its HTTP/2 health check.
const ROUTING_SLACK: Duration = Duration::from_secs(15);
/// How the API server says that it could not get an answer from a webhook (failurePolicy Fail).
const WEBHOOK_CALL_FAILED: &str = "failed calling webhook";
const POLL: Duration = Duration::from_millis(200);

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Operation {
    Baseline,
    RolloutRestart,
    DeletePod,
    KillReplica,
    Drain,
    StopWorker,
}

impl Operation {
    fn parse(s: &str) -> Result<Operation> {
        Ok(match s.trim() {
            "baseline" => Operation::Baseline,
            "rollout-restart" => Operation::RolloutRestart,
            "delete-pod" => Operation::DeletePod,
            "kill-replica" => Operation::KillReplica,
            "drain" => Operation::Drain,
            "stop-worker" => Operation::StopWorker,
            other => bail!(
                "unknown operation {other:?} (known: baseline, rollout-restart, delete-pod, \
                 kill-replica, drain, stop-worker)"
            ),
        })
    }

    fn id(self) -> &'static str {
        match self {
            Operation::Baseline => "baseline",
            Operation::RolloutRestart => "restart",
            Operation::DeletePod => "delete",
            Operation::KillReplica => "kill",
            Operation::Drain => "drain",
            Operation::StopWorker => "stop",
        }
    }

    fn title(self) -> &'static str {
        match self {
            Operation::Baseline => "none (baseline)",
            Operation::RolloutRestart => "rollout restart",
            Operation::DeletePod => "delete one replica's pod",
            Operation::KillReplica => "SIGKILL one replica's poolguard",
            Operation::Drain => "drain a replica's node",
            Operation::StopWorker => "stop a replica's worker",
        }
    }

    /// The replica dies without its pod being stopped in order (no preStop, no drain).
    fn abrupt(self) -> bool {
        matches!(self, Operation::KillReplica | Operation::StopWorker)
    }
}

struct Args {
    rate: u32,
    seconds: u64,
    tail: u64,
    lead: u64,
    operations: Vec<Operation>,
    namespace: String,
    release: String,
    pool: String,
    label: String,
    selector_key: Option<String>,
    image: String,
    drain_timeout: u64,
    stop_node_cmd: String,
    kubectl: String,
}

impl Args {
    fn parse(mut args: impl Iterator<Item = String>) -> Result<Option<Args>> {
        let mut a = Args {
            rate: 20,
            seconds: 30,
            tail: 5,
            lead: 3,
            operations: vec![
                Operation::RolloutRestart,
                Operation::DeletePod,
                Operation::Drain,
            ],
            namespace: "poolguard-system".into(),
            release: "poolguard".into(),
            pool: "pool1".into(),
            label: "agentpool".into(),
            selector_key: None,
            image: "registry.k8s.io/pause:3.10".into(),
            drain_timeout: 30,
            stop_node_cmd: "podman kill --signal KILL {node}".into(),
            kubectl: std::env::var("KUBECTL")
                .ok()
                .filter(|k| !k.is_empty())
                .unwrap_or_else(|| "kubectl".into()),
        };
        while let Some(flag) = args.next() {
            if flag == "-h" || flag == "--help" {
                return Ok(None);
            }
            let value = args
                .next()
                .with_context(|| format!("{flag} needs a value\n{USAGE}"))?;
            let number = |v: &str| -> Result<u64> {
                v.parse::<u64>()
                    .ok()
                    .filter(|n| *n > 0)
                    .with_context(|| format!("{flag}: expected a positive number, got {v:?}"))
            };
            match flag.as_str() {
                "--rate" => a.rate = u32::try_from(number(&value)?)?,
                "--seconds" => a.seconds = number(&value)?,
                "--tail" => a.tail = number(&value)?,
                "--lead" => a.lead = number(&value)?,
                "--drain-timeout" => a.drain_timeout = number(&value)?,
                "--operations" => {
                    a.operations = value
                        .split(',')
                        .filter(|s| !s.trim().is_empty())
                        .map(Operation::parse)
                        .collect::<Result<_>>()?;
                    if a.operations.is_empty() {
                        bail!("--operations names no operation");
                    }
                }
                "--namespace" => a.namespace = value,
                "--release" => a.release = value,
                "--pool" => a.pool = value,
                "--label" => a.label = value,
                "--selector-key" => a.selector_key = Some(value),
                "--image" => a.image = value,
                "--kubectl" => a.kubectl = value,
                "--stop-node-cmd" => {
                    if !value.contains("{node}") {
                        bail!("--stop-node-cmd must name the node as {{node}}, got {value:?}");
                    }
                    a.stop_node_cmd = value
                }
                other => bail!("unknown option {other}\n{USAGE}"),
            }
        }
        Ok(Some(a))
    }

    fn selector_key(&self) -> &str {
        self.selector_key.as_deref().unwrap_or(&self.label)
    }
}

fn log(msg: impl Display) {
    eprintln!("[under-load] {msg}");
}

/// One row of the table.
struct Row {
    operation: Operation,
    load_secs: f64,
    attempted: usize,
    admitted: usize,
    failed: usize,
    lost: usize,
    unplaced: usize,
    p50_ms: f64,
    p99_ms: f64,
    max_ms: f64,
    min_ready: usize,
    outcome: String,
    failures: BTreeMap<String, usize>,
    /// Abrupt operations: failed CREATEs outside the window in which the dead replica was still
    /// routed, or not told as a failed webhook call.
    failed_otherwise: usize,
    /// Abrupt operations: the client's retries of the failed CREATEs, and those not admitted
    /// with their pool.
    retried: usize,
    retries_failed: usize,
}

impl Row {
    /// Whether the row keeps poolguard's promise for its operation (see the module's doc).
    fn kept(&self) -> bool {
        let failures_allowed = if self.operation.abrupt() {
            self.failed_otherwise == 0 && self.retried == self.failed && self.retries_failed == 0
        } else {
            self.failed == 0
        };
        failures_allowed
            && self.lost == 0
            && self.unplaced == 0
            && !self.outcome.starts_with("operation failed")
    }
}

struct Harness {
    client: Client,
    args: Args,
    /// The load's namespace.
    ns: String,
    /// matchLabels of poolguard's Deployment, as a label selector.
    pod_selector: String,
    replicas: i32,
    /// Set by an abrupt operation: (the replica's death, when it was seen back or its endpoint
    /// removed).
    dead_window: Mutex<Option<(Instant, Instant)>>,
}

/// Ready endpoints in the EndpointSlices of Service `namespace/service`.
async fn ready_endpoints(client: &Client, namespace: &str, service: &str) -> Result<usize> {
    let slices: Api<EndpointSlice> = Api::namespaced(client.clone(), namespace);
    let list = slices
        .list(&ListParams::default().labels(&format!("kubernetes.io/service-name={service}")))
        .await?;
    Ok(list
        .items
        .iter()
        .flat_map(|s| s.endpoints.iter().flatten())
        .filter(|e| e.conditions.as_ref().and_then(|c| c.ready) == Some(true))
        .count())
}

impl Harness {
    async fn setup(client: Client, args: Args) -> Result<Harness> {
        let deployments: Api<Deployment> = Api::namespaced(client.clone(), &args.namespace);
        let d = deployments
            .get(&args.release)
            .await
            .with_context(|| format!("reading deployment {}/{}", args.namespace, args.release))?;
        let spec = d.spec;
        let replicas = spec.replicas.unwrap_or(1);
        let pod_selector = spec
            .selector
            .match_labels
            .unwrap_or_default()
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(",");
        if pod_selector.is_empty() {
            bail!("the Deployment's selector has no matchLabels");
        }
        let ns = load::namespace(&client, "pg-load", &args.label, &args.pool).await?;
        log(format!(
            "namespace {ns} ({}={}); poolguard: deployment {}/{} ({replicas} replicas, pods {pod_selector})",
            args.label, args.pool, args.namespace, args.release
        ));
        Ok(Harness {
            client,
            args,
            ns,
            pod_selector,
            replicas,
            dead_window: Mutex::new(None),
        })
    }

    async fn cleanup(&self) {
        let _ = Api::<Namespace>::all(self.client.clone())
            .delete(&self.ns, &DeleteParams::default())
            .await;
    }

    async fn ready_endpoints(&self) -> Result<usize> {
        ready_endpoints(&self.client, &self.args.namespace, &self.args.release).await
    }

    /// poolguard's pods that are Ready and not being deleted: (name, node).
    async fn ready_pods(&self) -> Result<Vec<(String, String)>> {
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), &self.args.namespace);
        let list = pods
            .list(&ListParams::default().labels(&self.pod_selector))
            .await?;
        let mut ready = Vec::new();
        for p in list.items {
            if p.metadata.deletion_timestamp.is_some() {
                continue;
            }
            let is_ready = p
                .status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
            if is_ready {
                let node = p
                    .spec
                    .as_ref()
                    .and_then(|s| s.node_name.clone())
                    .unwrap_or_default();
                ready.push((p.metadata.name.unwrap_or_default(), node));
            }
        }
        ready.sort();
        Ok(ready)
    }

    /// Container restarts of poolguard's pod `name`.
    async fn restarts(&self, name: &str) -> Result<i32> {
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), &self.args.namespace);
        let pod = pods.get(name).await?;
        Ok(pod
            .status
            .and_then(|s| s.container_statuses)
            .unwrap_or_default()
            .iter()
            .map(|c| c.restart_count)
            .sum())
    }

    /// The IP of poolguard's pod `name`.
    async fn pod_ip(&self, name: &str) -> Result<String> {
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), &self.args.namespace);
        pods.get(name)
            .await?
            .status
            .and_then(|s| s.pod_ip)
            .with_context(|| format!("pod {name} has no IP"))
    }

    /// Whether the Service lists `ip` as a ready endpoint.
    async fn endpoint_ready(&self, ip: &str) -> Result<bool> {
        let slices: Api<EndpointSlice> = Api::namespaced(self.client.clone(), &self.args.namespace);
        let list = slices
            .list(
                &ListParams::default()
                    .labels(&format!("kubernetes.io/service-name={}", self.args.release)),
            )
            .await?;
        Ok(list
            .items
            .iter()
            .flat_map(|s| s.endpoints.iter().flatten())
            .any(|e| {
                e.addresses.iter().any(|a| a == ip)
                    && e.conditions.as_ref().and_then(|c| c.ready) == Some(true)
            }))
    }

    /// Waits until the Deployment is fully rolled out: all replicas updated, ready and
    /// available, no old pod left, and as many ready endpoints. Returns the time it took.
    async fn wait_rolled_out(&self) -> Result<Duration> {
        let deployments: Api<Deployment> =
            Api::namespaced(self.client.clone(), &self.args.namespace);
        let start = Instant::now();
        let mut last = String::new();
        while start.elapsed() < READY_TIMEOUT {
            let d = deployments.get(&self.args.release).await?;
            let generation = d.metadata.generation.unwrap_or(0);
            let want = d.spec.replicas.unwrap_or(1);
            let st = d.status.unwrap_or_default();
            let pods = self.ready_pods().await?.len();
            let endpoints = self.ready_endpoints().await?;
            last = format!(
                "generation {generation} observed {:?}, replicas {:?}, updated {:?}, ready {:?}, \
                 available {:?}; ready pods {pods}, ready endpoints {endpoints}",
                st.observed_generation,
                st.replicas,
                st.updated_replicas,
                st.ready_replicas,
                st.available_replicas
            );
            let all = Some(want);
            if st.observed_generation.unwrap_or(0) >= generation
                && st.replicas == all
                && st.updated_replicas == all
                && st.ready_replicas == all
                && st.available_replicas == all
                && pods == want as usize
                && endpoints == want as usize
            {
                return Ok(start.elapsed());
            }
            tokio::time::sleep(POLL).await;
        }
        bail!(
            "deployment {}/{} not rolled out within {}s: {last}",
            self.args.namespace,
            self.args.release,
            READY_TIMEOUT.as_secs()
        )
    }

    /// Runs kubectl; returns (success, combined output). Output lines are logged.
    async fn kubectl(&self, args: &[&str], limit: Duration) -> Result<(bool, String)> {
        log(format!("$ kubectl {}", args.join(" ")));
        load::command(&self.args.kubectl, args, limit, log).await
    }

    /// Carries out the operation; returns a one-line account of it.
    async fn operate(&self, op: Operation) -> Result<String> {
        let ns = self.args.namespace.as_str();
        let deploy = format!("deployment/{}", self.args.release);
        let long = READY_TIMEOUT + Duration::from_secs(10);
        match op {
            Operation::Baseline => Ok("no operation".into()),
            Operation::RolloutRestart => {
                let start = Instant::now();
                let (ok, text) = self
                    .kubectl(&["-n", ns, "rollout", "restart", &deploy], long)
                    .await?;
                if !ok {
                    bail!("kubectl rollout restart failed: {}", text.trim());
                }
                let timeout = format!("--timeout={}s", READY_TIMEOUT.as_secs());
                let (ok, text) = self
                    .kubectl(&["-n", ns, "rollout", "status", &deploy, &timeout], long)
                    .await?;
                if !ok {
                    bail!("kubectl rollout status failed: {}", text.trim());
                }
                self.wait_rolled_out().await?;
                Ok(format!(
                    "restarted; rollout complete after {:.1}s",
                    start.elapsed().as_secs_f64()
                ))
            }
            Operation::DeletePod => {
                let pods = self.ready_pods().await?;
                let (pod, node) = pods.first().context("no ready poolguard pod to delete")?;
                let start = Instant::now();
                let (ok, text) = self
                    .kubectl(
                        &[
                            "-n",
                            ns,
                            "delete",
                            "pod",
                            pod,
                            "--wait=true",
                            "--timeout=120s",
                        ],
                        long,
                    )
                    .await?;
                if !ok {
                    bail!("kubectl delete pod failed: {}", text.trim());
                }
                let gone = start.elapsed();
                self.wait_rolled_out().await?;
                Ok(format!(
                    "deleted {pod} (on {node}): gone after {:.1}s, {} ready again after {:.1}s",
                    gone.as_secs_f64(),
                    self.replicas,
                    start.elapsed().as_secs_f64()
                ))
            }
            Operation::KillReplica => {
                let pods = self.ready_pods().await?;
                let (pod, node) = pods.first().context("no ready poolguard pod")?;
                let restarts = self.restarts(pod).await?;
                let pid = process_of_pod(pod)?;
                let start = Instant::now();
                log(format!("kill -KILL {pid} (poolguard in {pod})"));
                let killed = tokio::process::Command::new("kill")
                    .args(["-KILL", &pid.to_string()])
                    .status()
                    .await
                    .context("running kill")?;
                if !killed.success() {
                    bail!("kill -KILL {pid} failed");
                }
                // The kubelet restarts the container in place (same pod, same IP).
                while self.restarts(pod).await? == restarts {
                    if start.elapsed() > READY_TIMEOUT {
                        bail!(
                            "{pod}: no container restart {}s after SIGKILL",
                            READY_TIMEOUT.as_secs()
                        );
                    }
                    tokio::time::sleep(POLL).await;
                }
                let restarted = start.elapsed();
                self.wait_rolled_out().await?;
                *self.dead_window.lock().expect("window lock") = Some((start, Instant::now()));
                Ok(format!(
                    "SIGKILLed poolguard in {pod} (on {node}, pid {pid}): restarted after {:.1}s, \
                     {} ready again after {:.1}s",
                    restarted.as_secs_f64(),
                    self.replicas,
                    start.elapsed().as_secs_f64()
                ))
            }
            Operation::StopWorker => {
                let pods = self.ready_pods().await?;
                let (pod, node) = pods.first().context("no ready poolguard pod")?;
                let ip = self.pod_ip(pod).await?;
                let cmd = self.args.stop_node_cmd.replace("{node}", node);
                let start = Instant::now();
                log(format!("$ {cmd}"));
                let (ok, text) =
                    load::command("sh", &["-c", &cmd], Duration::from_secs(60), log).await?;
                if !ok {
                    bail!("{cmd} failed: {}", text.trim());
                }
                // The node controller marks the node's pods not ready once the node's status is
                // older than its grace period; the endpoint goes with it.
                while self.endpoint_ready(&ip).await? {
                    if start.elapsed() > READY_TIMEOUT {
                        bail!(
                            "{pod}'s endpoint {ip} still ready {}s after {node} stopped",
                            READY_TIMEOUT.as_secs()
                        );
                    }
                    tokio::time::sleep(POLL).await;
                }
                let removed = Instant::now();
                *self.dead_window.lock().expect("window lock") = Some((start, removed));
                // The node stays down: the replica's pod is force-deleted, as an operator does for
                // a node that is gone, so that the Deployment replaces it on another worker.
                let (ok, text) = self
                    .kubectl(
                        &[
                            "-n",
                            ns,
                            "delete",
                            "pod",
                            pod,
                            "--force",
                            "--grace-period=0",
                        ],
                        long,
                    )
                    .await?;
                if !ok {
                    bail!("kubectl delete pod --force failed: {}", text.trim());
                }
                self.wait_rolled_out().await?;
                Ok(format!(
                    "stopped {node} (with {pod}, {ip}): its endpoint removed after {:.1}s; pod \
                     force-deleted, {} ready again after {:.1}s",
                    (removed - start).as_secs_f64(),
                    self.replicas,
                    start.elapsed().as_secs_f64()
                ))
            }
            Operation::Drain => {
                let pods = self.ready_pods().await?;
                let (_, node) = pods.first().context("no ready poolguard pod")?;
                let node = node.clone();
                let on_node = pods.iter().filter(|(_, n)| *n == node).count();
                let start = Instant::now();
                let timeout = format!("--timeout={}s", self.args.drain_timeout);
                let drained = self
                    .kubectl(
                        &[
                            "drain",
                            &node,
                            "--ignore-daemonsets",
                            "--delete-emptydir-data",
                            &timeout,
                        ],
                        Duration::from_secs(self.args.drain_timeout + 30),
                    )
                    .await;
                let took = start.elapsed();
                // Whatever happened, the node is put back into service.
                let (uncordoned, text) = self
                    .kubectl(&["uncordon", &node], Duration::from_secs(30))
                    .await?;
                if !uncordoned {
                    bail!("kubectl uncordon {node} failed: {}", text.trim());
                }
                let (ok, text) = drained?;
                let evicted = text.lines().filter(|l| l.ends_with(" evicted")).count();
                let refused = text
                    .lines()
                    .filter(|l| l.contains("disruption budget"))
                    .count();
                self.wait_rolled_out().await?;
                let back = start.elapsed();
                let what = if ok {
                    format!("drained {node} in {:.1}s", took.as_secs_f64())
                } else {
                    format!(
                        "drain of {node} did not finish in {}s",
                        self.args.drain_timeout
                    )
                };
                Ok(format!(
                    "{what} ({on_node} of {} replicas there; {evicted} evicted, {refused} eviction(s) \
                     refused by the PodDisruptionBudget); uncordoned, {} ready again {:.1}s after the start",
                    self.replicas,
                    self.replicas,
                    back.as_secs_f64()
                ))
            }
        }
    }

    /// An abrupt operation's failed CREATEs: each must be a failed webhook call sent while the
    /// dead replica was still routed (its window, plus ROUTING_SLACK), and the client's retry of
    /// each must be admitted with its pool.
    async fn judge_abrupt(&self, row: &mut Row, attempts: &[load::Attempt], spec: &load::Spec) {
        let window = *self.dead_window.lock().expect("window lock");
        let Some((died, gone)) = window else {
            // The operation failed before the replica died: no failure is explained.
            row.failed_otherwise = row.failed;
            return;
        };
        for a in attempts {
            let Some(msg) = a.outcome.failure() else {
                continue;
            };
            let in_window = a.ended() >= died && a.started <= gone + ROUTING_SLACK;
            if !in_window || !msg.contains(WEBHOOK_CALL_FAILED) {
                row.failed_otherwise += 1;
                log(format!(
                    "pod {}: failed {:+.1}s after the death ({}s window + {}s): {msg}",
                    a.name,
                    signed_secs(a.started, died),
                    (gone - died).as_secs(),
                    ROUTING_SLACK.as_secs()
                ));
            }
            row.retried += 1;
            let retry = load::retry(&self.client, spec, &a.name).await;
            if !matches!(retry, load::Outcome::Placed) {
                row.retries_failed += 1;
                log(format!(
                    "pod {}: the retry was not admitted with its pool: {retry:?}",
                    a.name
                ));
            }
        }
        log(format!(
            "{}: the dead replica was routed for {:.1}s; {} CREATE(s) failed, {} of them outside \
             that window (+{}s) or not as a failed webhook call; {} retried, {} retries not admitted",
            row.operation.title(),
            (gone - died).as_secs_f64(),
            row.failed,
            row.failed_otherwise,
            ROUTING_SLACK.as_secs(),
            row.retried,
            row.retries_failed
        ));
    }

    /// One operation under load.
    async fn run(&self, op: Operation, index: usize) -> Result<Row> {
        let settled = self.wait_rolled_out().await?;
        let run_id = format!("{}-{index}", op.id());
        log(format!(
            "=== {} (deployment settled in {:.1}s; load {}/s in {}, pods labelled {LOAD_LABEL}={run_id})",
            op.title(),
            settled.as_secs_f64(),
            self.args.rate,
            self.ns
        ));

        // Ready endpoints of the Service, sampled while the operation runs.
        let stop_sampler = Arc::new(AtomicBool::new(false));
        let min_ready = Arc::new(AtomicUsize::new(usize::MAX));
        let sampler = {
            let (stop, min) = (stop_sampler.clone(), min_ready.clone());
            let (client, namespace, service) = (
                self.client.clone(),
                self.args.namespace.clone(),
                self.args.release.clone(),
            );
            tokio::spawn(async move {
                while !stop.load(Ordering::SeqCst) {
                    if let Ok(n) = ready_endpoints(&client, &namespace, &service).await {
                        min.fetch_min(n, Ordering::SeqCst);
                    }
                    tokio::time::sleep(POLL).await;
                }
            })
        };

        let stop_load = Arc::new(AtomicBool::new(false));
        let spec = load::Spec {
            namespace: self.ns.clone(),
            run_id: run_id.clone(),
            rate: self.args.rate,
            image: self.args.image.clone(),
            refused: None,
            selector_key: self.args.selector_key().to_string(),
            pool: self.args.pool.clone(),
        };
        *self.dead_window.lock().expect("window lock") = None;
        let load = tokio::spawn(load::generate(
            self.client.clone(),
            spec.clone(),
            stop_load.clone(),
        ));
        let started = Instant::now();
        tokio::time::sleep(Duration::from_secs(self.args.lead)).await;
        let op_result = self.operate(op).await;
        let op_done = Instant::now();
        let least = Duration::from_secs(self.args.seconds);
        let tail = Duration::from_secs(self.args.tail);
        while started.elapsed() < least || op_done.elapsed() < tail {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        stop_load.store(true, Ordering::SeqCst);
        let load_secs = started.elapsed().as_secs_f64();
        let attempts = load.await.context("load task")?;
        stop_sampler.store(true, Ordering::SeqCst);
        let _ = sampler.await;
        let outcome = match op_result {
            Ok(s) => s,
            Err(e) => format!("operation failed: {e:#}"),
        };
        log(format!("{}: {outcome}", op.title()));

        // Every admitted pod must still exist.
        let listed = load::stored(&self.client, &self.ns, &run_id).await?;
        let mut row = Row {
            operation: op,
            load_secs,
            attempted: attempts.len(),
            admitted: 0,
            failed: 0,
            lost: 0,
            unplaced: 0,
            p50_ms: 0.0,
            p99_ms: 0.0,
            max_ms: 0.0,
            min_ready: match min_ready.load(Ordering::SeqCst) {
                usize::MAX => 0,
                n => n,
            },
            outcome,
            failures: BTreeMap::new(),
            failed_otherwise: 0,
            retried: 0,
            retries_failed: 0,
        };
        for a in &attempts {
            match a.outcome.failure() {
                Some(msg) => {
                    row.failed += 1;
                    *row.failures.entry(msg).or_default() += 1;
                }
                None => {
                    row.admitted += 1;
                    if let Outcome::Unplaced(sel) = &a.outcome {
                        row.unplaced += 1;
                        log(format!(
                            "pod {} admitted without its pool: nodeSelector {sel:?}",
                            a.name
                        ));
                    }
                    if !listed.contains_key(&a.name) {
                        row.lost += 1;
                        log(format!("pod {} was admitted but is gone", a.name));
                    }
                }
            }
        }
        (row.p50_ms, row.p99_ms, row.max_ms) = load::latency_ms(&attempts);
        if op.abrupt() {
            self.judge_abrupt(&mut row, &attempts, &spec).await;
        }
        for (msg, n) in &row.failures {
            log(format!("{n} x {msg}"));
        }
        log(format!(
            "row: op={} attempted={} admitted={} failed={} lost={} unplaced={} min_ready={} \
             failed_otherwise={} retried={} retries_failed={} kept={}",
            op.id(),
            row.attempted,
            row.admitted,
            row.failed,
            row.lost,
            row.unplaced,
            row.min_ready,
            row.failed_otherwise,
            row.retried,
            row.retries_failed,
            row.kept()
        ));
        log(format!(
            "{}: {} attempted in {load_secs:.1}s, {} admitted, {} failed, {} lost, {} unplaced; \
             ready endpoints never below {}",
            op.title(),
            row.attempted,
            row.admitted,
            row.failed,
            row.lost,
            row.unplaced,
            row.min_ready
        ));

        // The load's pods go before the next operation.
        load::delete_run(&self.client, &self.ns, &run_id).await?;
        Ok(row)
    }
}

/// Seconds from `origin` to `t`, negative when `t` came first.
fn signed_secs(t: Instant, origin: Instant) -> f64 {
    if t >= origin {
        (t - origin).as_secs_f64()
    } else {
        -(origin - t).as_secs_f64()
    }
}

/// The pid of the poolguard process in pod `name`, found on this machine: a process named
/// poolguard whose environment has `HOSTNAME=<name>` (the container runtime sets it).
fn process_of_pod(name: &str) -> Result<i32> {
    let hostname = format!("HOSTNAME={name}");
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc")?.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|p| p.parse::<i32>().ok())
        else {
            continue;
        };
        let dir = entry.path();
        let is_poolguard =
            std::fs::read_to_string(dir.join("comm")).is_ok_and(|comm| comm.trim() == "poolguard");
        let in_pod = is_poolguard
            && std::fs::read(dir.join("environ"))
                .is_ok_and(|env| env.split(|&b| b == 0).any(|v| v == hostname.as_bytes()));
        if in_pod {
            found.push(pid);
        }
    }
    match found[..] {
        [pid] => Ok(pid),
        [] => bail!(
            "no poolguard process of pod {name} on this machine (kill-replica runs as root on the \
             replica's node)"
        ),
        _ => bail!("more than one poolguard process of pod {name}: {found:?}"),
    }
}

fn print_table(args: &Args, rows: &[Row]) {
    println!(
        "operations under load: {} pod CREATEs/s in a namespace of pool {} (each through both webhooks)",
        args.rate, args.pool
    );
    println!(
        "{:<32} {:>6} {:>9} {:>8} {:>6} {:>5} {:>8} {:>7} {:>7} {:>7} {:>9} {:>9} {:>5}",
        "operation",
        "load s",
        "attempted",
        "admitted",
        "failed",
        "lost",
        "unplaced",
        "p50 ms",
        "p99 ms",
        "max ms",
        "min ready",
        "retry ok",
        "kept"
    );
    for r in rows {
        println!(
            "{:<32} {:>6.1} {:>9} {:>8} {:>6} {:>5} {:>8} {:>7.0} {:>7.0} {:>7.0} {:>9} {:>9} {:>5}",
            r.operation.title(),
            r.load_secs,
            r.attempted,
            r.admitted,
            r.failed,
            r.lost,
            r.unplaced,
            r.p50_ms,
            r.p99_ms,
            r.max_ms,
            r.min_ready,
            if r.operation.abrupt() {
                format!("{}/{}", r.retried - r.retries_failed, r.failed)
            } else {
                "-".to_string()
            },
            if r.kept() { "yes" } else { "NO" }
        );
    }
    for r in rows {
        println!("{}: {}", r.operation.title(), r.outcome);
        for (msg, n) in &r.failures {
            println!("  {n} failed: {msg}");
        }
    }
}

async fn main_inner() -> Result<bool> {
    let Some(args) = Args::parse(std::env::args().skip(1))? else {
        println!("{USAGE}");
        return Ok(true);
    };
    let client = load::connect().await?;
    let operations = args.operations.clone();
    let harness = Harness::setup(client, args).await?;
    let mut rows = Vec::new();
    let mut error = None;
    for (i, op) in operations.iter().enumerate() {
        match harness.run(*op, i + 1).await {
            Ok(row) => rows.push(row),
            Err(e) => {
                error = Some(e);
                break;
            }
        }
    }
    harness.cleanup().await;
    print_table(&harness.args, &rows);
    if let Some(e) = error {
        return Err(e);
    }
    Ok(rows.iter().all(Row::kept))
}

#[tokio::main]
async fn main() -> ExitCode {
    match main_inner().await {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => {
            log(
                "FAILED: a row did not keep poolguard's promise (failed CREATEs where none may \
                 fail or outside a dead replica's window, failed retries, pods lost or admitted \
                 without their pool)",
            );
            ExitCode::FAILURE
        }
        Err(e) => {
            log(format!("error: {e:#}"));
            ExitCode::from(2)
        }
    }
}
