//! Progressive enforcement against a real kube-apiserver, with durations of seconds: two
//! poolguard replicas (short audit interval) roll `allowedrepositories` out over three groups of
//! namespaces by the label `risk`. A violating pod in the second group holds the rollout there
//! (the first group denies, the second warns, the third only logs); deleting it lets the
//! rollout finish and the third group deny (after its approval, given with the CLI); a burst of
//! denials trips the safety valve; both replicas are restarted mid-rollout and resume
//! from the stored state; a new version whose first group keeps a violation past its deadline
//! times out, and the groups behind it stay on the previous version. Every decision is asked of
//! both replicas, which must agree.
//!
//! Needs KUBECONFIG and POOLGUARD_BIN (integration/e2e.sh sets both).

use std::path::Path;
use std::time::Duration;

use anyhow::{bail, ensure, Context, Result};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use poolguard_e2e::replicas::{self, Replica};
use poolguard_e2e::{random_suffix, rollout_statuses, run, Env};
use poolguard_testclient::{client_config, post, send1, TlsClient};
use serde_json::{json, Value};

const NAMESPACE: &str = "default";
const POLICY: &str = "allowedrepositories";

fn config_text(id: &str, repositories: &[&str], deadline: &str) -> String {
    format!(
        r#"namespaceLabel: agentpool
nodeSelectorKey: agentpool
policies:
  {POLICY}:
    enforcement: deny
    parameters:
      repositories: {repositories:?}
    rollout:
      groups:
        - name: canary
          namespaceSelector: {{matchLabels: {{risk-{id}: low}}}}
        - name: standard
          namespaceSelector: {{matchLabels: {{risk-{id}: medium}}}}
        - name: critical
          namespaceSelector: {{matchExpressions: [{{key: risk-{id}, operator: In, values: [high]}}]}}
          approval: required
      minSuccessTime: 3s
      progressDeadline: {deadline}
      maxFailures: 0
      maxDenialsPerMinute: 20
"#
    )
}

struct Setup {
    id: String,
    certs: std::path::PathBuf,
    config: std::path::PathBuf,
    configmap: String,
}

impl Setup {
    fn args(&self) -> Vec<String> {
        [
            "--audit-interval",
            "2s",
            "--audit-namespace-selector",
            &format!("poolguard-rollout-e2e={}", self.id),
            "--lease-name",
            &format!("poolguard-rollout-e2e-{}", self.id),
            "--lease-namespace",
            NAMESPACE,
            "--lease-duration",
            "4s",
            "--rollout-configmap",
            &self.configmap,
        ]
        .iter()
        .map(|s| s.to_string())
        .collect()
    }

    fn start(&self, env: &Env) -> Result<Vec<Replica>> {
        let replicas = (1..=2)
            .map(|n| {
                Replica::start(
                    &self.certs,
                    &self.config,
                    &format!("rollout-e2e-{}-{n}", self.id),
                    &self.args(),
                )
            })
            .collect::<Result<Vec<_>>>()?;
        env.say("two replicas started");
        Ok(replicas)
    }
}

/// The stored state of the policy's rollout.
async fn state(env: &Env, configmap: &str) -> Result<Option<Value>> {
    env.rollout_state(NAMESPACE, configmap, POLICY).await
}

async fn await_statuses(env: &Env, configmap: &str, want: &str, limit: Duration) -> Result<Value> {
    env.wait_until(&format!("rollout {want}"), limit, || async {
        Ok(match state(env, configmap).await? {
            Some(s) if rollout_statuses(&s) == want => Ok(s),
            Some(s) => Err(rollout_statuses(&s)),
            None => Err("no state yet".to_string()),
        })
    })
    .await
}

/// What a replica answers for a pod with `image` in `ns`: "deny", "warn" or "allow".
async fn decision(replica: &Replica, ca: &[u8], ns: &str, image: &str) -> Result<String> {
    let review = json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "rollout-e2e",
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "namespace": ns,
            "name": "probe",
            "operation": "CREATE",
            "userInfo": {"username": "rollout-e2e"},
            "object": {
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": "probe", "namespace": ns},
                "spec": {"containers": [{"name": "main", "image": image}]},
            },
        },
    });
    let client = TlsClient::new(client_config(ca, None, &[])?, "127.0.0.1")?;
    let (mut sender, _) = client
        .http1(replica.addr)
        .await
        .context("connecting to a replica")?;
    let (status, body) = send1(
        &mut sender,
        post("127.0.0.1", "/validate", serde_json::to_vec(&review)?),
    )
    .await?;
    ensure!(
        status == 200,
        "HTTP {status}: {}",
        String::from_utf8_lossy(&body)
    );
    let answer: Value = serde_json::from_slice(&body)?;
    let response = &answer["response"];
    Ok(if response["allowed"] == false {
        "deny".to_string()
    } else if response["warnings"]
        .as_array()
        .is_some_and(|w| !w.is_empty())
    {
        "warn".to_string()
    } else {
        "allow".to_string()
    })
}

/// Both replicas' answers for a pod from a foreign registry in each group's namespace, which
/// must agree: e.g. "deny warn allow".
async fn answers(replicas: &[Replica], ca: &[u8], namespaces: &[String; 3]) -> Result<String> {
    let mut seen = Vec::new();
    for replica in replicas {
        let mut row = Vec::new();
        for ns in namespaces {
            row.push(decision(replica, ca, ns, "nginx:1.27").await?);
        }
        seen.push(row.join(" "));
    }
    if seen.windows(2).any(|w| w[0] != w[1]) {
        bail!("the replicas disagree: {seen:?}");
    }
    Ok(seen.remove(0))
}

async fn await_answers(
    env: &Env,
    replicas: &[Replica],
    ca: &[u8],
    namespaces: &[String; 3],
    want: &str,
) -> Result<()> {
    env.wait_until(
        &format!("both replicas answer {want}"),
        Duration::from_secs(15),
        || async {
            Ok(match answers(replicas, ca, namespaces).await {
                Ok(got) if got == want => Ok(()),
                Ok(got) => Err(got),
                Err(e) => Err(format!("{e:#}")),
            })
        },
    )
    .await
}

/// Runs the poolguard CLI against the test cluster; its standard output.
async fn cli(args: &[&str]) -> Result<String> {
    let out = tokio::process::Command::new(replicas::binary()?)
        .args(args)
        .output()
        .await?;
    ensure!(
        out.status.success(),
        "poolguard {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

async fn write_config(path: &Path, text: &str) -> Result<()> {
    // Written beside and renamed, as a ConfigMap volume update lands.
    let tmp = path.with_extension("tmp");
    tokio::fs::write(&tmp, text).await?;
    tokio::fs::rename(&tmp, path).await?;
    Ok(())
}

#[tokio::test]
async fn a_policy_reaches_deny_group_by_group_on_evidence() {
    run("rollout", |env| async move {
        let id = random_suffix();
        let dir = std::env::temp_dir().join(format!("poolguard-rollout-e2e-{id}"));
        std::fs::create_dir_all(&dir)?;
        let setup = Setup {
            certs: replicas::certificates(&id).await?,
            config: dir.join("config.yaml"),
            configmap: format!("poolguard-rollout-e2e-{id}"),
            id: id.clone(),
        };
        let ca = std::fs::read(setup.certs.join("ca.crt"))?;
        write_config(&setup.config, &config_text(&id, &["registry.k8s.io/"], "60s")).await?;

        // Three namespaces, no pool (so the cluster's own poolguard leaves them alone).
        let mut namespaces = Vec::new();
        for risk in ["low", "medium", "high"] {
            let ns = env.namespace(&format!("rollout-{risk}"), None).await?;
            let patch = json!({"metadata": {"labels": {format!("risk-{id}"): risk, "poolguard-rollout-e2e": id}}});
            env.namespaces_api().patch(&ns, &PatchParams::default(), &Patch::Merge(&patch)).await?;
            namespaces.push(ns);
        }
        let namespaces: [String; 3] = namespaces.try_into().map_err(|_| anyhow::anyhow!("three namespaces"))?;
        // A pod from a foreign registry already runs in the second group.
        env.create_pod(&namespaces[1], &env.pod("foreign", &env.denied_image, None)?).await?;

        let mut running = setup.start(&env)?;
        let long = Duration::from_secs(45);
        await_statuses(&env, &setup.configmap, "canary=Succeeded standard=Progressing critical=ToApply", long).await?;
        await_answers(&env, &running, &ca, &namespaces, "deny warn allow").await?;
        // Held there by the foreign pod: still so after several minSuccessTimes.
        tokio::time::sleep(Duration::from_secs(8)).await;
        let held = await_statuses(&env, &setup.configmap, "canary=Succeeded standard=Progressing critical=ToApply", Duration::from_secs(1)).await?;
        let standard = &held["groups"][1];
        ensure!(standard["failures"].as_u64() >= Some(1), "standard's failures: {standard}");
        env.say(format!("held: {}", standard["reason"]));

        // Both replicas restarted: the rollout resumes from the stored state.
        let since = held["groups"][0]["since"].clone();
        for r in running.drain(..) {
            r.kill().await?;
        }
        running = setup.start(&env)?;
        let resumed = await_statuses(&env, &setup.configmap, "canary=Succeeded standard=Progressing critical=ToApply", long).await?;
        ensure!(resumed["groups"][0]["since"] == since, "canary restarted: {} then {}", since, resumed["groups"][0]["since"]);
        await_answers(&env, &running, &ca, &namespaces, "deny warn allow").await?;
        env.say("after a restart of both replicas: the same state, the same answers");

        // The violation fixed: the rollout finishes.
        let now = DeleteParams { grace_period_seconds: Some(0), ..DeleteParams::default() };
        env.pods(&namespaces[1]).delete("foreign", &now).await?;
        await_statuses(&env, &setup.configmap, "canary=Succeeded standard=Succeeded critical=ToApply", long).await?;
        // The last group waits for its approval, given with the CLI.
        let status = cli(&["rollout", "status", "-n", NAMESPACE, "--rollout-configmap", &setup.configmap]).await?;
        env.say(format!("poolguard rollout status:\n{status}"));
        ensure!(status.contains("awaiting approval"), "status does not show the approval wait:\n{status}");
        cli(&["rollout", "approve", POLICY, "critical", "-n", NAMESPACE, "--rollout-configmap", &setup.configmap]).await?;
        await_statuses(&env, &setup.configmap, "canary=Succeeded standard=Succeeded critical=Succeeded", long).await?;
        await_answers(&env, &running, &ca, &namespaces, "deny deny deny").await?;
        // Every transition is an Event on the ConfigMap.
        let events: Api<k8s_openapi::api::core::v1::Event> = Api::namespaced(env.client.clone(), NAMESPACE);
        let listed = events
            .list(&kube::api::ListParams::default().fields(&format!("involvedObject.name={}", setup.configmap)))
            .await?;
        let reasons: Vec<String> = listed.items.iter().filter_map(|e| e.reason.clone()).collect();
        ensure!(reasons.iter().any(|r| r == "RolloutSucceeded") && reasons.iter().any(|r| r == "RolloutApproved"),
            "events on the rollout ConfigMap: {reasons:?}");


        // A new version (another parameter) whose first group has a violation it keeps past a
        // short deadline: TimeOut, and the groups behind stay on the previous version (deny).
        env.create_pod(&namespaces[0], &env.pod("foreign", &env.denied_image, None)?).await?;
        write_config(&setup.config, &config_text(&id, &["registry.k8s.io/", "registry.example.com/"], "6s")).await?;
        await_statuses(&env, &setup.configmap, "canary=TimeOut standard=ToApply critical=ToApply", long).await?;
        await_answers(&env, &running, &ca, &namespaces, "warn deny deny").await?;
        let timed_out = state(&env, &setup.configmap).await?.context("state")?;
        ensure!(timed_out["previousEnforcement"] == "deny", "previous: {timed_out}");

        // A third version, its first groups clean, the last awaiting approval; a burst of
        // denials in an enforcing group (more than 20 a minute) trips the safety valve: the
        // group drops back to warn by itself.
        env.pods(&namespaces[0]).delete("foreign", &now).await?;
        write_config(&setup.config, &config_text(&id, &["registry.k8s.io/", "registry.example.com/", "quay.io/"], "60s")).await?;
        await_statuses(&env, &setup.configmap, "canary=Succeeded standard=Succeeded critical=ToApply", long).await?;
        for _ in 0..25 {
            ensure!(decision(&running[0], &ca, &namespaces[0], "nginx:1.27").await? == "deny");
        }
        let failed = await_statuses(&env, &setup.configmap, "canary=Failed standard=Succeeded critical=ToApply", long).await?;
        env.say(format!("safety valve: {}", failed["groups"][0]["reason"]));
        await_answers(&env, &running, &ca, &namespaces, "warn deny deny").await?;

        for r in running {
            r.kill().await?;
        }
        let cms: Api<ConfigMap> = Api::namespaced(env.client.clone(), NAMESPACE);
        let _ = cms.delete(&setup.configmap, &DeleteParams::default()).await;
        let leases: Api<k8s_openapi::api::coordination::v1::Lease> = Api::namespaced(env.client.clone(), NAMESPACE);
        let _ = leases.delete(&format!("poolguard-rollout-e2e-{id}"), &DeleteParams::default()).await;
        let _ = std::fs::remove_dir_all(&dir);
        let _ = std::fs::remove_dir_all(&setup.certs);
        Ok(())
    })
    .await;
}
