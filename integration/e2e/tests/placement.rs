//! Placement policies through the real control plane: in a namespace labelled `agentpool=auto`
//! the mutating webhook chooses each pod's pool with the shipped placement policies
//! (fitsresources, gpuonly) from what the fake nodes of integration/e2e.sh offer — psmall
//! (4 cpu, 8Gi), plarge (64 cpu, 256Gi), pgpu (16 cpu, 64Gi, 4 nvidia.com/gpu), preferred in
//! that order, and the 8-cpu pools of the other tests — and the scheduler binds each pod to a
//! node of the chosen pool.
//!
//! Run: `integration/e2e.sh` (suite `placement`), or with KUBECONFIG set:
//! `cargo test -p poolguard-e2e --test placement -- --nocapture`.

use std::time::Duration;

use anyhow::{ensure, Context, Result};
use k8s_openapi::api::core::v1::Pod;
use kube::api::PostParams;
use poolguard_e2e::{expect_refused, node_selector, run, Env};
use serde_json::json;

/// How long the scheduler gets to bind a pod.
const SCHEDULE_TIMEOUT: Duration = Duration::from_secs(60);

/// A pod of one container requesting `requests` (GPUs as limits too: extended resources must
/// have equal requests and limits).
fn pod(env: &Env, name: &str, requests: serde_json::Value) -> Result<Pod> {
    let mut resources = json!({"requests": requests});
    if let Some(gpus) = requests.get("nvidia.com/gpu") {
        resources["limits"] = json!({"nvidia.com/gpu": gpus});
    }
    Ok(serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {"containers": [{"name": "main", "image": env.allowed_image, "resources": resources}]},
    }))?)
}

/// Creates `pod` in `ns`, checks that it was given `pool`'s selector and annotation, and waits
/// until the scheduler binds it to a node of `pool`.
async fn lands_on(env: &Env, ns: &str, pod: &Pod, pool: &str) -> Result<()> {
    let name = pod.metadata.name.clone().unwrap_or_default();
    let key = env.selector_key.as_str();
    let created = env
        .create_pod(ns, pod)
        .await
        .with_context(|| format!("creating pod {name}"))?;
    env.track_pod(ns, &name);
    let selector = node_selector(&created);
    ensure!(
        selector.get(key).map(String::as_str) == Some(pool),
        "pod {name}: expected nodeSelector {key}={pool}, got {selector:?}"
    );
    let annotation = created
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get("poolguard.io/pool"))
        .cloned();
    ensure!(
        annotation.as_deref() == Some(pool),
        "pod {name}: expected annotation poolguard.io/pool={pool}, got {annotation:?}"
    );
    let nodes = env.pool_nodes(pool).await?;
    let pods = env.pods(ns);
    let node = env
        .wait_until(&format!("pod {name} bound"), SCHEDULE_TIMEOUT, || async {
            let pod = pods.get(&name).await?;
            Ok(match pod.spec.and_then(|s| s.node_name) {
                Some(node) => Ok(node),
                None => Err("not bound yet".to_string()),
            })
        })
        .await?;
    ensure!(
        nodes.contains(&node),
        "pod {name} was bound to {node}, not to a node of pool {pool} ({nodes:?})"
    );
    env.say(format!("  ok: {name} -> pool {pool}, node {node}"));
    Ok(())
}

#[tokio::test]
async fn placement_policies_choose_the_pool() {
    run("placement_policies_choose_the_pool", |env| async move {
        let ns = env.namespace("choose", Some("auto")).await?;

        env.say("check: a small pod goes to the first preferred pool (psmall)");
        let small = pod(&env, "small", json!({"cpu": "500m", "memory": "1Gi"}))?;
        lands_on(&env, &ns, &small, "psmall").await?;

        env.say("check: a pod too large for psmall and the 8-cpu pools goes to plarge");
        let large = pod(&env, "large", json!({"cpu": "32", "memory": "128Gi"}))?;
        lands_on(&env, &ns, &large, "plarge").await?;

        env.say("check: a GPU pod goes to the only pool with nvidia.com/gpu (pgpu)");
        let gpu = pod(
            &env,
            "gpu",
            json!({"cpu": "2", "memory": "8Gi", "nvidia.com/gpu": "1"}),
        )?;
        lands_on(&env, &ns, &gpu, "pgpu").await?;

        env.say("check: a pod no pool can hold is refused with the policy's message");
        let impossible = pod(&env, "impossible", json!({"cpu": "1000"}))?;
        let message = expect_refused(
            "a pod no node can hold",
            env.create_pod(&ns, &impossible).await,
            403,
            &[
                "no pool can take this pod",
                "fitsresources: no pool has or can launch a node with room for the pod's requests (cpu 1000000m)",
            ],
        )?;
        env.say(format!("  ok: {message}"));

        env.say("check: a GPU pod no pool can hold is refused with both policies' messages");
        let many_gpus = pod(
            &env,
            "many-gpus",
            json!({"cpu": "1", "nvidia.com/gpu": "8"}),
        )?;
        let message = expect_refused(
            "a pod asking for more GPUs than a node has",
            env.create_pod(&ns, &many_gpus).await,
            403,
            &[
                "fitsresources: no pool has or can launch a node with room",
                "nvidia.com/gpu 8",
            ],
        )?;
        env.say(format!("  ok: {message}"));

        env.say("check: a pod that asks for the GPU pool itself without using a GPU is refused");
        let mut squatter = pod(&env, "squatter", json!({"cpu": "500m"}))?;
        squatter.spec.as_mut().unwrap().node_selector =
            Some([(env.selector_key.clone(), "pgpu".to_string())].into());
        let message = expect_refused(
            "a pod selecting the GPU pool without GPUs",
            env.create_pod(&ns, &squatter).await,
            403,
            &[
                "the pod selects pool \"pgpu\"",
                "which the placement policies do not accept",
            ],
        )?;
        env.say(format!("  ok: {message}"));

        env.say("check: a pod that asks for an accepted pool itself keeps it");
        let mut chooser = pod(&env, "chooser", json!({"cpu": "500m"}))?;
        chooser.spec.as_mut().unwrap().node_selector =
            Some([(env.selector_key.clone(), "plarge".to_string())].into());
        lands_on(&env, &ns, &chooser, "plarge").await?;

        env.say("check: a Deployment whose pods no pool can hold is refused when applied");
        let mut deployment =
            serde_json::to_value(env.deployment("too-big", &env.allowed_image, 1, None)?)?;
        deployment["spec"]["template"]["spec"]["containers"][0]["resources"] =
            json!({"requests": {"cpu": "1000"}});
        let deployment: k8s_openapi::api::apps::v1::Deployment =
            serde_json::from_value(deployment)?;
        let message = expect_refused(
            "a Deployment no pool can take",
            env.deployments(&ns)
                .create(&PostParams::default(), &deployment)
                .await,
            403,
            &["no pool can take its pods", "fitsresources"],
        )?;
        env.say(format!("  ok: {message}"));
        Ok(())
    })
    .await;
}
