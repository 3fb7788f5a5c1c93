//! poolguard down: the webhooks fail closed for namespaces with the pool label; elsewhere they do
//! not apply (or, with `POOLGUARD_E2E_VALIDATES_UNLABELLED=1`, the validating one fails closed
//! there too); kube-system is never affected. This test STOPS poolguard (POOLGUARD_E2E_STOP_CMD) and, when
//! POOLGUARD_E2E_START_CMD is set, starts it again at the end. It is `#[ignore]`d so that a plain
//! `cargo test` never runs it next to the other tests; run it alone:
//!
//! `cargo test -p poolguard-e2e --test fail_closed -- --ignored --nocapture`

use std::time::Duration;

use anyhow::{ensure, Context};
use poolguard_e2e::{expect_refused, node_selector, random_suffix, run};

/// `POOLGUARD_E2E_VALIDATES_UNLABELLED=1`: the validating webhook is called for namespaces
/// without the pool label too (the chart's default, `validating.requireNamespaceLabel=false`),
/// so with poolguard down a pod there is refused as well. Unset: only labelled namespaces are
/// validated (`integration/e2e.sh`'s webhook configurations).
fn validates_unlabelled() -> bool {
    matches!(
        std::env::var("POOLGUARD_E2E_VALIDATES_UNLABELLED").as_deref(),
        Ok("1" | "true")
    )
}

#[tokio::test]
#[ignore = "stops poolguard; run alone: --test fail_closed -- --ignored"]
async fn fail_closed_when_poolguard_is_down() {
    run("fail_closed_when_poolguard_is_down", |env| async move {
        let (pool1, key) = (env.pool1(), env.selector_key.as_str());
        let mapped = env.namespace("down-mapped", Some(pool1)).await?;
        let plain = env.namespace("down-plain", None).await?;

        env.say("precondition: poolguard is up (a pod in a mapped namespace gets the selector)");
        let pod = env
            .create_pod(&mapped, &env.pod("before", &env.allowed_image, None)?)
            .await
            .context("poolguard should be up before it is stopped")?;
        ensure!(
            node_selector(&pod).get(key).map(String::as_str) == Some(pool1),
            "precondition failed: nodeSelector {:?}",
            node_selector(&pod)
        );

        env.run_command("POOLGUARD_E2E_STOP_CMD", true).await?;

        env.say(format!(
            "check: a pod in mapped namespace {mapped} is refused (failurePolicy Fail)"
        ));
        let result = env
            .create_pod(&mapped, &env.pod("during", &env.allowed_image, None)?)
            .await;
        let msg = expect_refused(
            "pod in a mapped namespace",
            result,
            500,
            &["failed calling webhook"],
        )?;
        env.say(format!("  ok: 500 {msg}"));

        env.say(format!(
            "check: a Deployment in mapped namespace {mapped} is refused"
        ));
        let result = env
            .deployments(&mapped)
            .create(
                &Default::default(),
                &env.deployment("during", &env.allowed_image, 1, None)?,
            )
            .await;
        let msg = expect_refused(
            "Deployment in a mapped namespace",
            result,
            500,
            &["failed calling webhook"],
        )?;
        env.say(format!("  ok: 500 {msg}"));

        if validates_unlabelled() {
            env.say(format!(
                "check: a pod in unlabelled namespace {plain} is refused too (the validating \
                 webhook covers every namespace: validating.requireNamespaceLabel=false)"
            ));
            let result = env
                .create_pod(&plain, &env.pod("during", &env.allowed_image, None)?)
                .await;
            let msg = expect_refused(
                "pod in an unlabelled namespace",
                result,
                500,
                &["failed calling webhook"],
            )?;
            env.say(format!("  ok: 500 {msg}"));
        } else {
            env.say(format!(
                "check: a pod in unlabelled namespace {plain} is created normally"
            ));
            let pod = env
                .create_pod(&plain, &env.pod("during", &env.allowed_image, None)?)
                .await
                .context("a pod in an unlabelled namespace must not need poolguard")?;
            ensure!(
                node_selector(&pod).is_empty(),
                "unexpected nodeSelector {:?}",
                node_selector(&pod)
            );
            env.say("  ok: created, no nodeSelector");
        }

        env.say("check: a pod in kube-system is created normally");
        let name = format!("pg-e2e-down-{}", random_suffix());
        env.track_pod("kube-system", &name);
        env.create_pod("kube-system", &env.pod(&name, &env.allowed_image, None)?)
            .await
            .context("a pod in kube-system must not need poolguard")?;
        env.say("  ok: created");

        if env.run_command("POOLGUARD_E2E_START_CMD", false).await? {
            env.say("check: after the restart, pods in mapped namespaces are admitted again");
            let pods = env.pods(&mapped);
            let image = env.allowed_image.clone();
            let mut attempt = 0;
            let pod = env
                .wait_until("poolguard admits again", Duration::from_secs(60), || {
                    attempt += 1;
                    let (pods, pod) = (
                        pods.clone(),
                        env.pod(&format!("after-{attempt}"), &image, None),
                    );
                    async move {
                        match pods.create(&Default::default(), &pod?).await {
                            Ok(p) => Ok(Ok(p)),
                            Err(e) => Ok(Err(e.to_string())),
                        }
                    }
                })
                .await?;
            ensure!(
                node_selector(&pod).get(key).map(String::as_str) == Some(pool1),
                "after the restart: nodeSelector {:?}",
                node_selector(&pod)
            );
            env.say(format!("  ok: nodeSelector {:?}", node_selector(&pod)));
        } else {
            env.say("POOLGUARD_E2E_START_CMD not set: poolguard stays stopped");
        }
        Ok(())
    })
    .await;
}
