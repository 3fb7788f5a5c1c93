//! End-to-end tests against a cluster running poolguard (KUBECONFIG; see src/lib.rs for the
//! environment). Each test works in its own namespaces (random suffix) and deletes them.
//!
//! Run: `integration/e2e.sh` (local control plane), or with KUBECONFIG set:
//! `cargo test -p poolguard-e2e --test e2e -- --nocapture`.

use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context};
use kube::api::ListParams;
use poolguard_e2e::{expect_refused, node_selector, random_suffix, run};

/// How long the scheduler gets to bind a Deployment's pods.
const SCHEDULE_TIMEOUT: Duration = Duration::from_secs(60);

#[tokio::test]
async fn pod_placement() {
    run("pod_placement", |env| async move {
        let (pool1, pool2, key) = (env.pool1(), env.pool2(), env.selector_key.as_str());
        let ns = env.namespace("place", Some(pool1)).await?;

        env.say(format!(
            "check: a pod in {ns} gets nodeSelector {key}={pool1}"
        ));
        let pod = env
            .create_pod(&ns, &env.pod("plain", &env.allowed_image, None)?)
            .await
            .context("creating a pod in a mapped namespace")?;
        let sel = node_selector(&pod);
        ensure!(
            sel.len() == 1 && sel.get(key).map(String::as_str) == Some(pool1),
            "expected nodeSelector {{{key}: {pool1}}}, got {sel:?}"
        );
        env.say(format!("  ok: nodeSelector {sel:?}"));

        env.say("check: a pod with nodeSelector kubernetes.io/os=linux gets the pool key added");
        let pod = env
            .create_pod(
                &ns,
                &env.pod(
                    "os",
                    &env.allowed_image,
                    Some(&[("kubernetes.io/os", "linux")]),
                )?,
            )
            .await
            .context("creating a pod with an unrelated selector")?;
        let sel = node_selector(&pod);
        ensure!(
            sel.get(key).map(String::as_str) == Some(pool1)
                && sel.get("kubernetes.io/os").map(String::as_str) == Some("linux")
                && sel.len() == 2,
            "expected nodeSelector {{kubernetes.io/os: linux, {key}: {pool1}}}, got {sel:?}"
        );
        env.say(format!("  ok: nodeSelector {sel:?}"));

        env.say(format!(
            "check: a pod asking for {key}={pool2} in {ns} is refused with 403"
        ));
        let wanted = format!("{key}=\"{pool2}\"");
        let result = env
            .create_pod(
                &ns,
                &env.pod("conflict", &env.allowed_image, Some(&[(key, pool2)]))?,
            )
            .await;
        let msg = expect_refused("conflicting nodeSelector", result, 403, &[&ns, &wanted])?;
        env.say(format!("  ok: 403 {msg}"));

        env.say("check: a pod in kube-system is untouched");
        let name = format!("pg-e2e-untouched-{}", random_suffix());
        env.track_pod("kube-system", &name);
        let pod = env
            .create_pod("kube-system", &env.pod(&name, &env.allowed_image, None)?)
            .await
            .context("creating a pod in kube-system")?;
        ensure!(
            node_selector(&pod).is_empty(),
            "kube-system pod was mutated: nodeSelector {:?}",
            node_selector(&pod)
        );
        env.say("  ok: no nodeSelector");

        let unmapped = env.namespace("unmapped", None).await?;
        env.say(format!(
            "check: a pod in unmapped namespace {unmapped} is untouched"
        ));
        let pod = env
            .create_pod(&unmapped, &env.pod("plain", &env.allowed_image, None)?)
            .await
            .context("creating a pod in an unmapped namespace")?;
        ensure!(
            node_selector(&pod).is_empty(),
            "pod in an unmapped namespace was mutated: nodeSelector {:?}",
            node_selector(&pod)
        );
        env.say("  ok: no nodeSelector");
        Ok(())
    })
    .await;
}

#[tokio::test]
async fn deployment_pods_scheduled_in_pool() {
    run("deployment_pods_scheduled_in_pool", |env| async move {
        let (pool1, pool2, key) = (env.pool1(), env.pool2(), env.selector_key.as_str());
        let in_pool = env.pool_nodes(pool1).await?;
        let other = env.pool_nodes(pool2).await?;
        ensure!(
            !in_pool.is_empty() && !other.is_empty(),
            "need nodes labelled {key}={pool1} and {key}={pool2}; found {in_pool:?} and {other:?}"
        );
        env.say(format!("nodes: {pool1} {in_pool:?}, {pool2} {other:?}"));
        let ns = env.namespace("deploy", Some(pool1)).await?;

        env.say(format!(
            "check: a 3-replica Deployment in {ns} is admitted and all its pods are bound to {pool1} nodes"
        ));
        env.deployments(&ns)
            .create(
                &Default::default(),
                &env.deployment("web", &env.allowed_image, 3, None)?,
            )
            .await
            .context("creating the Deployment")?;
        let pods_api = env.pods(&ns);
        let pods = env
            .wait_until("3 pods bound to nodes", SCHEDULE_TIMEOUT, || {
                let pods_api = pods_api.clone();
                async move {
                    let list = pods_api
                        .list(&ListParams::default().labels("app=web"))
                        .await?;
                    let bound = list
                        .items
                        .iter()
                        .filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some())
                        .count();
                    if list.items.len() >= 3 && bound == list.items.len() {
                        Ok(Ok(list.items))
                    } else {
                        Ok(Err(format!("{} pods, {bound} bound", list.items.len())))
                    }
                }
            })
            .await?;
        ensure!(pods.len() == 3, "expected 3 pods, found {}", pods.len());
        for pod in &pods {
            let name = pod.metadata.name.as_deref().unwrap_or("?");
            let sel = node_selector(pod);
            let node = pod
                .spec
                .as_ref()
                .and_then(|s| s.node_name.clone())
                .unwrap_or_default();
            ensure!(
                sel.get(key).map(String::as_str) == Some(pool1),
                "pod {name} has nodeSelector {sel:?}, expected {key}={pool1}"
            );
            ensure!(
                in_pool.contains(&node),
                "pod {name} was bound to {node}, which is not a {pool1} node ({in_pool:?})"
            );
            env.say(format!("  ok: {name} nodeSelector {sel:?} -> node {node}"));
        }
        Ok(())
    })
    .await;
}

#[tokio::test]
async fn workloads_refused_at_create() {
    run("workloads_refused_at_create", |env| async move {
        let (pool1, pool2, key) = (env.pool1(), env.pool2(), env.selector_key.as_str());
        let ns = env.namespace("workloads", Some(pool1)).await?;
        let deployments = env.deployments(&ns);

        env.say(format!(
            "check: a Deployment whose template asks for {key}={pool2} in {ns} is refused"
        ));
        let wanted = format!("{key}=\"{pool2}\"");
        let result = deployments
            .create(
                &Default::default(),
                &env.deployment("conflict", &env.allowed_image, 1, Some(&[(key, pool2)]))?,
            )
            .await;
        let msg = expect_refused("conflicting Deployment", result, 403, &[&ns, &wanted])?;
        env.say(format!("  ok: 403 {msg}"));

        env.say(format!(
            "check: a Deployment using {} in {ns} is refused by allowedrepositories",
            env.denied_image
        ));
        let result = deployments
            .create(
                &Default::default(),
                &env.deployment("badimage", &env.denied_image, 1, None)?,
            )
            .await;
        let msg = expect_refused(
            "Deployment with a disallowed image",
            result,
            403,
            &["allowedrepositories"],
        )?;
        env.say(format!("  ok: 403 {msg}"));

        for name in ["conflict", "badimage"] {
            ensure!(
                deployments.get_opt(name).await?.is_none(),
                "Deployment {name} exists although its create was refused"
            );
        }
        env.say("  ok: neither Deployment exists");
        Ok(())
    })
    .await;
}

#[tokio::test]
async fn allowed_repositories_deny_and_warn() {
    run("allowed_repositories_deny_and_warn", |env| async move {
        let (pool1, pool2, key) = (env.pool1(), env.pool2(), env.selector_key.as_str());
        let image = env.denied_image.clone();
        let denying = env.namespace("deny", Some(pool1)).await?;
        let warning = env.namespace("warn", Some(pool2)).await?;

        env.say(format!(
            "check: a pod using {image} in {denying} (pool {pool1}, deny) is refused"
        ));
        let result = env
            .create_pod(&denying, &env.pod("badimage", &image, None)?)
            .await;
        let msg = expect_refused(
            "pod with a disallowed image",
            result,
            403,
            &["allowedrepositories"],
        )?;
        env.say(format!("  ok: 403 {msg}"));

        env.say(format!(
            "check: a pod using {image} in {warning} (pool {pool2}, warn) is created with a Warning header"
        ));
        let res = env
            .create_pod_raw(&warning, &env.pod("badimage", &image, None)?)
            .await?;
        ensure!(
            res.status == 201,
            "expected 201 Created, got {}: {}",
            res.status,
            res.body
        );
        env.say(format!("  Warning headers: {:?}", res.warnings));
        ensure!(
            res.warnings
                .iter()
                .any(|w| w.contains("allowedrepositories")),
            "no Warning header names allowedrepositories: {:?}",
            res.warnings
        );
        let selected = res.body["spec"]["nodeSelector"][key].as_str();
        ensure!(
            selected == Some(pool2),
            "the created pod has nodeSelector {}, expected {key}={pool2}",
            res.body["spec"]["nodeSelector"]
        );
        env.say(format!("  ok: created, warned, nodeSelector {key}={pool2}"));
        Ok(())
    })
    .await;
}

#[tokio::test]
async fn first_pod_in_new_namespace() {
    run("first_pod_in_new_namespace", |env| async move {
        let (pool1, key) = (env.pool1(), env.selector_key.as_str());
        // The pod follows the namespace at once, so poolguard may not have seen the namespace
        // through its watch yet (its cache-miss path reads it directly).
        let ns = env.namespace("fresh", Some(pool1)).await?;
        let t = Instant::now();
        env.say(format!(
            "check: a pod created right after {ns} gets nodeSelector {key}={pool1}"
        ));
        let pod = env
            .create_pod(&ns, &env.pod("first", &env.allowed_image, None)?)
            .await
            .context("creating the first pod of a new namespace")?;
        let sel = node_selector(&pod);
        ensure!(
            sel.get(key).map(String::as_str) == Some(pool1),
            "expected nodeSelector {key}={pool1}, got {sel:?}"
        );
        env.say(format!(
            "  ok: nodeSelector {sel:?} (pod admitted {:.0} ms after the namespace existed)",
            t.elapsed().as_secs_f64() * 1000.0
        ));
        Ok(())
    })
    .await;
}

#[tokio::test]
async fn relabelled_namespace() {
    run("relabelled_namespace", |env| async move {
        let (pool1, pool2, key) = (env.pool1(), env.pool2(), env.selector_key.as_str());
        let ns = env.namespace("relabel", Some(pool1)).await?;
        let pod = env
            .create_pod(&ns, &env.pod("before", &env.allowed_image, None)?)
            .await
            .context("creating a pod before the relabel")?;
        ensure!(
            node_selector(&pod).get(key).map(String::as_str) == Some(pool1),
            "before the relabel: expected {key}={pool1}, got {:?}",
            node_selector(&pod)
        );
        env.say(format!("before: pod got {key}={pool1}"));

        // One create per relabel, no retries. poolguard reads labels from a watch cache (a
        // direct GET only on a cache miss), so the pod is created once a watch of ours has
        // delivered the relabel and dry-run pods get the new pool; `relabel_race_never_refuses`
        // covers pods created at the same moment as the relabel.
        for (step, pool) in [("after", pool2), ("back", pool1)] {
            env.say(format!(
                "check: relabel {ns} to {}={pool}, the next pod gets {key}={pool}",
                env.label
            ));
            let (label, lag, settle) = env.relabel_and_await_watch(&ns, pool).await?;
            if label.as_deref() != Some(pool) {
                bail!("the namespace's label reads {label:?} after the relabel");
            }
            env.say(format!(
                "  relabelled; our namespace watch delivered it after {:.0} ms, dry-run pods got the new pool {:.0} ms later",
                lag.as_secs_f64() * 1000.0,
                settle.as_secs_f64() * 1000.0
            ));
            let pod = env
                .create_pod(&ns, &env.pod(step, &env.allowed_image, None)?)
                .await
                .with_context(|| format!("creating a pod after relabelling to {pool}"))?;
            let sel = node_selector(&pod);
            ensure!(
                sel.get(key).map(String::as_str) == Some(pool),
                "pod created after relabelling {ns} to {pool} got nodeSelector {sel:?}"
            );
            env.say(format!("  ok: nodeSelector {sel:?}"));
        }
        Ok(())
    })
    .await;
}

#[tokio::test]
async fn relabel_race_never_refuses() {
    run("relabel_race_never_refuses", |env| async move {
        let (pool1, pool2, key) = (env.pool1(), env.pool2(), env.selector_key.as_str());
        let ns = env.namespace("race", Some(pool1)).await?;
        env.say(format!(
            "check: pods created right after each of 10 relabels of {ns} are all admitted, each with the pool poolguard recorded"
        ));
        let (mut old, mut new) = (0, 0);
        for i in 0..10 {
            let pool = if i % 2 == 0 { pool2 } else { pool1 };
            let previous = if i % 2 == 0 { pool1 } else { pool2 };
            env.set_pool(&ns, Some(pool)).await?;
            let pod = env
                .create_pod(&ns, &env.pod(&format!("race-{i}"), &env.allowed_image, None)?)
                .await
                .with_context(|| format!("pod {i}, created right after relabelling {ns} to {pool}"))?;
            let sel = node_selector(&pod);
            let got = sel.get(key).map(String::as_str);
            let recorded = pod
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get("poolguard.io/pool"))
                .map(String::as_str);
            ensure!(got == recorded, "pod {i}: nodeSelector {sel:?} but poolguard.io/pool {recorded:?}");
            match got {
                Some(p) if p == pool => new += 1,
                Some(p) if p == previous => old += 1,
                other => bail!("pod {i}: expected {key}={pool} (or {previous} within the relabel), got {other:?}"),
            }
        }
        env.say(format!("  ok: 10 admitted; {new} with the new pool, {old} with the pool of a moment before"));
        Ok(())
    })
    .await;
}

#[tokio::test]
async fn a_dependent_policy_waits_for_its_dependency() {
    run(
        "a_dependent_policy_waits_for_its_dependency",
        |env| async move {
            let ns = env.namespace("deps", Some(env.pool1())).await?;
            // latesttag depends on allowedrepositories being Compliant: an untagged image from a
            // foreign registry gets one denial, allowedrepositories', and latesttag is Pending.
            env.say("check: an untagged foreign image is refused by allowedrepositories alone");
            let result = env
                .create_pod(&ns, &env.pod("foreign", "nginx", None)?)
                .await;
            let msg = expect_refused(
                "untagged foreign image",
                result,
                403,
                &["allowedrepositories", "docker.io/library/nginx"],
            )?;
            ensure!(
                !msg.contains("latesttag"),
                "latesttag ran although allowedrepositories was not met: {msg}"
            );
            env.say(format!("  ok: 403 {msg}"));
            // Moved to an allowed registry, still untagged: now latesttag's own denial.
            env.say("check: the same image from an allowed registry is refused by latesttag");
            let result = env
                .create_pod(&ns, &env.pod("untagged", "registry.k8s.io/pause", None)?)
                .await;
            let msg = expect_refused(
                "untagged allowed image",
                result,
                403,
                &["latesttag", "no tag"],
            )?;
            ensure!(
                !msg.contains("allowedrepositories"),
                "allowedrepositories refused an allowed image: {msg}"
            );
            env.say(format!("  ok: 403 {msg}"));
            let pod = env
                .create_pod(&ns, &env.pod("tagged", &env.allowed_image, None)?)
                .await?;
            env.track_pod(&ns, "tagged");
            ensure!(pod.metadata.name.as_deref() == Some("tagged"));
            env.say("  ok: a tagged image from an allowed registry is admitted");
            Ok(())
        },
    )
    .await;
}
