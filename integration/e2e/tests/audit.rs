//! The background audit against a real kube-apiserver: two poolguard replicas with a short
//! interval share one Lease; the test's namespaces get PolicyReports whose results follow what
//! happens to the objects in them (a namespace labelled after its pod was created, a pod bound
//! to another pool's node, an image a warn-only policy flags, fixes), and when the leading
//! replica is killed the other one writes the next reports (the takeover time is printed).
//!
//! Needs KUBECONFIG, POOLGUARD_BIN and the PolicyReport CRD (integration/e2e.sh provides all).

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{bail, ensure, Context, Result};
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use poolguard_e2e::replicas::{self, Replica};
use poolguard_e2e::{random_suffix, run, Env};
use serde_json::{json, Value};

const INTERVAL: Duration = Duration::from_secs(3);
const LEASE: Duration = Duration::from_secs(6);
const LEASE_NAMESPACE: &str = "default";

/// The result of `policy` for the object named `name` in a report: (result, message, timestamp).
fn result_for(report: &Value, name: &str, policy: &str) -> Option<(String, String, i64)> {
    report["results"].as_array()?.iter().find_map(|r| {
        let names_it = r["resources"][0]["name"] == name && r["policy"] == policy;
        names_it.then(|| {
            (
                r["result"].as_str().unwrap_or_default().to_string(),
                r["message"].as_str().unwrap_or_default().to_string(),
                r["timestamp"]["seconds"].as_i64().unwrap_or_default(),
            )
        })
    })
}

/// Waits for `policy`'s result for `name` in `ns` to be `want` with a message holding every
/// needle; returns the message.
async fn await_result(
    env: &Env,
    ns: &str,
    name: &str,
    policy: &str,
    want: &str,
    needles: &[&str],
    limit: Duration,
) -> Result<String> {
    env.wait_until(&format!("{ns}/{name}: {policy} {want}"), limit, || async {
        let Some(report) = env.policy_report(ns).await? else {
            return Ok(Err("no report yet".to_string()));
        };
        Ok(match result_for(&report, name, policy) {
            Some((result, message, _))
                if result == want && needles.iter().all(|n| message.contains(n)) =>
            {
                Ok(message)
            }
            Some((result, message, _)) => Err(format!("{result}: {message}")),
            None => Err("no result for it yet".to_string()),
        })
    })
    .await
}

fn unix_now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

/// The two replicas still running.
struct Replicas(Vec<Replica>);

impl Replicas {
    async fn start(env: &Env, id: &str, certs: &std::path::Path) -> Result<Replicas> {
        let root = replicas::repository();
        let config = std::env::var("POOLGUARD_E2E_CONFIG_FILE").map_or_else(
            |_| root.join("integration/e2e/manifests/poolguard-config.yaml"),
            std::path::PathBuf::from,
        );
        let args: Vec<String> = [
            "--audit-interval",
            &format!("{}s", INTERVAL.as_secs()),
            "--audit-namespace-selector",
            &format!("poolguard-audit-e2e={id}"),
            "--lease-name",
            &format!("poolguard-audit-e2e-{id}"),
            "--lease-namespace",
            LEASE_NAMESPACE,
            "--lease-duration",
            &format!("{}s", LEASE.as_secs()),
            "--rollout-configmap",
            &format!("poolguard-audit-e2e-{id}"),
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let mut running = Vec::new();
        for n in 1..=2 {
            running.push(Replica::start(
                certs,
                &config,
                &format!("audit-e2e-{id}-{n}"),
                &args,
            )?);
        }
        env.say("two replicas started");
        Ok(Replicas(running))
    }

    /// Kills the replica holding the lease (SIGKILL: no release) and returns its identity.
    async fn kill_leader(&mut self, env: &Env, lease: &str) -> Result<String> {
        let leases: Api<Lease> = Api::namespaced(env.client.clone(), LEASE_NAMESPACE);
        let holder = leases
            .get(lease)
            .await?
            .spec
            .and_then(|s| s.holder_identity)
            .context("the lease has no holder")?;
        let Some(i) = self.0.iter().position(|r| r.identity == holder) else {
            bail!("the lease holder {holder:?} is none of the replicas");
        };
        self.0.remove(i).kill().await?;
        Ok(holder)
    }
}

#[tokio::test]
async fn audit_reports_follow_the_cluster_and_survive_the_leader() {
    run("audit", |env| async move {
        let id = random_suffix();
        let (pool1, pool2) = (env.pool1().to_string(), env.pool2().to_string());
        let ns_a = env.namespace("audit-a", Some(&pool1)).await?;
        let ns_b = env.namespace("audit-b", None).await?;
        let ns_c = env.namespace("audit-c", Some(&pool2)).await?;
        for ns in [&ns_a, &ns_b, &ns_c] {
            let patch = json!({"metadata": {"labels": {"poolguard-audit-e2e": id}}});
            env.namespaces_api()
                .patch(ns, &PatchParams::default(), &Patch::Merge(&patch))
                .await?;
        }
        let other_node = env
            .pool_nodes(&pool2)
            .await?
            .into_iter()
            .next()
            .context("no node in the second pool")?;

        // Admitted by the webhooks as they are now.
        let image = env.allowed_image.clone();
        env.create_pod(&ns_a, &env.pod("bound-right", &image, None)?).await?;
        let mut misplaced = serde_json::to_value(env.pod(
            "other-pool-node",
            &image,
            Some(&[(env.selector_key.as_str(), pool1.as_str())]),
        )?)?;
        misplaced["spec"]["nodeName"] = json!(other_node);
        env.create_pod(&ns_a, &serde_json::from_value(misplaced)?).await?;
        env.create_pod(&ns_b, &env.pod("before-label", &image, None)?).await?;
        let denied = env.denied_image.clone();
        env.create_pod(&ns_c, &env.pod("warned-image", &denied, None)?).await?;
        // The scheduler binds bound-right to a node of its pool.
        env.wait_until("bound-right scheduled", Duration::from_secs(60), || async {
            let pod = env.pods(&ns_a).get("bound-right").await?;
            Ok(match pod.spec.and_then(|s| s.node_name) {
                Some(node) => Ok(node),
                None => Err("not bound yet".to_string()),
            })
        })
        .await?;

        let certs = replicas::certificates(&id).await?;
        let mut running = Replicas::start(&env, &id, &certs).await?;
        let first = Duration::from_secs(60);

        let msg = await_result(&env, &ns_a, "bound-right", "placement", "pass", &[&pool1], first).await?;
        env.say(format!("bound by the scheduler: pass ({msg})"));
        let msg = await_result(&env, &ns_a, "other-pool-node", "placement", "fail",
            &[&pool1, &pool2, &other_node], first).await?;
        env.say(format!("nodeName on another pool's node: fail ({msg})"));
        await_result(&env, &ns_b, "before-label", "placement", "skip", &[], first).await?;
        let msg = await_result(&env, &ns_c, "warned-image", "allowedrepositories", "fail", &[], first).await?;
        env.say(format!("warn-only policy still reports fail ({msg})"));
        let report_c = env.policy_report(&ns_c).await?.context("report of ns c")?;
        ensure!(report_c["summary"]["fail"].as_i64() >= Some(1), "summary: {}", report_c["summary"]);
        ensure!(report_c["results"].as_array().is_some_and(|r| r.iter().all(|r| r["source"] == "poolguard")));

        // The namespace gets its pool after the pod was created: fail within one interval.
        let relabelled = Instant::now();
        env.set_pool(&ns_b, Some(&pool1)).await?;
        await_result(&env, &ns_b, "before-label", "placement", "fail", &[&pool1], INTERVAL * 4).await?;
        env.say(format!("relabelled namespace: fail after {:.1}s (interval {}s)",
            relabelled.elapsed().as_secs_f64(), INTERVAL.as_secs()));

        // Fixes: the pod made again (the mutating webhook adds the selector), the misplaced
        // pod deleted (its results leave the report).
        let now = DeleteParams { grace_period_seconds: Some(0), ..DeleteParams::default() };
        env.pods(&ns_b).delete("before-label", &now).await?;
        env.wait_until("before-label gone", Duration::from_secs(30), || async {
            Ok(match env.pods(&ns_b).get_opt("before-label").await? {
                None => Ok(()),
                Some(_) => Err("still there".to_string()),
            })
        }).await?;
        env.create_pod(&ns_b, &env.pod("before-label", &image, None)?).await?;
        env.pods(&ns_a).delete("other-pool-node", &now).await?;
        await_result(&env, &ns_b, "before-label", "placement", "pass", &[&pool1], INTERVAL * 4).await?;
        env.wait_until("other-pool-node's results gone", INTERVAL * 4, || async {
            let report = env.policy_report(&ns_a).await?.context("report of ns a")?;
            Ok(match result_for(&report, "other-pool-node", "placement") {
                None => Ok(()),
                Some(r) => Err(format!("still {r:?}")),
            })
        }).await?;

        // Failover: the leader dies without releasing the lease.
        let lease = format!("poolguard-audit-e2e-{id}");
        let killed = running.kill_leader(&env, &lease).await?;
        let killed_at = (Instant::now(), unix_now());
        env.say(format!("killed the leader {killed}"));
        env.wait_until("a report written after the leader died", LEASE + INTERVAL * 3, || async {
            let report = env.policy_report(&ns_a).await?.context("report of ns a")?;
            Ok(match result_for(&report, "bound-right", "placement") {
                Some((_, _, at)) if at > killed_at.1 => Ok(()),
                Some((_, _, at)) => Err(format!("last written at {at}, leader killed at {}", killed_at.1)),
                None => Err("no result".to_string()),
            })
        }).await?;
        env.say(format!("failover: the other replica wrote the next report {:.1}s after the leader was killed (lease duration {}s, interval {}s)",
            killed_at.0.elapsed().as_secs_f64(), LEASE.as_secs(), INTERVAL.as_secs()));
        let leases: Api<Lease> = Api::namespaced(env.client.clone(), LEASE_NAMESPACE);
        let holder = leases.get(&lease).await?.spec.and_then(|s| s.holder_identity);
        ensure!(holder.as_deref() != Some(killed.as_str()), "the dead replica still holds the lease");

        drop(running);
        let _ = leases.delete(&lease, &DeleteParams::default()).await;
        let _ = std::fs::remove_dir_all(&certs);
        Ok(())
    })
    .await;
}
