//! PolicyExceptions through a real kube-apiserver: a poolguard replica reads the cluster's
//! PolicyExceptions (`--policy-exceptions`), audits the test's namespace, and its validating
//! webhook covers the test's namespaces and every PolicyException written. A foreign image is
//! refused; with an exception (a ticket, a short expiry) the same pod is admitted with a warning
//! naming the exception and its ticket, and the audit reports it `skip` with the exception's
//! properties; once the exception expires a new such pod is refused again and the audit reports
//! the running pod `fail`. An exception without a ticket, longer than
//! `exceptions.maxDuration`, or written outside `exceptions.namespaces` is refused.
//!
//! Needs KUBECONFIG, POOLGUARD_BIN, the PolicyReport and PolicyException CRDs (integration/e2e.sh
//! provides all).

use std::path::Path;
use std::time::{Duration, SystemTime};

use anyhow::{ensure, Context, Result};
use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use k8s_openapi::ByteString;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, PostParams};
use poolguard_e2e::replicas::{Replica, Scratch};
use poolguard_e2e::{expect_refused, run, Env};
use serde_json::{json, Value};

const LEASE_NAMESPACE: &str = "default";
const LIMIT: Duration = Duration::from_secs(40);
/// How long the test's exception lasts: long enough to see it work, short enough to see it end.
const LIFETIME: Duration = Duration::from_secs(25);

fn exceptions_api(env: &Env, ns: &str) -> Api<DynamicObject> {
    let resource = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("poolguard.io", "v1alpha1", "PolicyException"),
        "policyexceptions",
    );
    Api::namespaced_with(env.client.clone(), ns, &resource)
}

/// RFC 3339, `from_now` ahead.
fn at(from_now: Duration) -> String {
    humantime::format_rfc3339_seconds(SystemTime::now() + from_now).to_string()
}

fn exception(name: &str, spec: Value) -> Result<DynamicObject> {
    Ok(serde_json::from_value(json!({
        "apiVersion": "poolguard.io/v1alpha1", "kind": "PolicyException",
        "metadata": {"name": name}, "spec": spec,
    }))?)
}

/// A validating webhook sending the test namespaces' pods, and every PolicyException, to
/// `replica`.
async fn register(env: &Env, name: &str, id: &str, replica: &Replica, ca: Vec<u8>) -> Result<()> {
    let common = json!({
        "clientConfig": {"url": format!("https://{}/validate", replica.addr)},
        "failurePolicy": "Fail", "sideEffects": "None", "admissionReviewVersions": ["v1"],
        "timeoutSeconds": 10
    });
    let mut pods = common.clone();
    pods["name"] = json!("exceptions-e2e-pods.poolguard.test");
    pods["rules"] = json!([{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"], "resources": ["pods"]}]);
    pods["namespaceSelector"] = json!({"matchLabels": {"poolguard-exceptions-e2e": id}});
    let mut written = common;
    written["name"] = json!("exceptions-e2e-exceptions.poolguard.test");
    written["rules"] = json!([{"apiGroups": ["poolguard.io"], "apiVersions": ["v1alpha1"], "operations": ["CREATE", "UPDATE"], "resources": ["policyexceptions"]}]);
    let mut hook: ValidatingWebhookConfiguration = serde_json::from_value(json!({
        "metadata": {"name": name}, "webhooks": [pods, written]
    }))?;
    for webhook in hook.webhooks.iter_mut().flatten() {
        webhook.client_config.ca_bundle = Some(ByteString(ca.clone()));
    }
    Api::<ValidatingWebhookConfiguration>::all(env.client.clone())
        .create(&PostParams::default(), &hook)
        .await
        .context("registering the test's validating webhook")?;
    Ok(())
}

/// The audit's result of allowedrepositories for pod `name` in the PolicyReport of `ns`:
/// (result, properties).
async fn audited(env: &Env, ns: &str, name: &str) -> Result<Option<(String, Value)>> {
    let Some(report) = env.policy_report(ns).await? else {
        return Ok(None);
    };
    Ok(report["results"].as_array().and_then(|results| {
        results.iter().find_map(|r| {
            (r["resources"][0]["name"] == name && r["policy"] == "allowedrepositories").then(|| {
                (
                    r["result"].as_str().unwrap_or_default().to_string(),
                    r["properties"].clone(),
                )
            })
        })
    }))
}

#[tokio::test]
async fn an_exception_admits_warns_is_reported_and_expires() {
    run("exceptions", |env| async move {
        let own = Scratch::new("exceptions").await?;
        let result = scenario(&env, &own.id, &own.dir, &own.certs, &own.name).await;
        own.remove(&env.client, LEASE_NAMESPACE).await;
        result
    })
    .await;
}

async fn scenario(env: &Env, id: &str, dir: &Path, certs: &Path, hook: &str) -> Result<()> {
    // Where exceptions count, and the workload's namespace (no pool: the cluster's own
    // poolguard leaves it alone; the test's webhook covers it).
    let home = env.namespace("exceptions-home", None).await?;
    let other = env.namespace("exceptions-other", None).await?;
    let shop = env
        .namespace_labelled("exceptions-shop", None, &[("poolguard-exceptions-e2e", id)])
        .await?;
    let config = dir.join("config.yaml");
    std::fs::write(
        &config,
        format!(
            "policies:\n  allowedrepositories:\n    enforcement: deny\n    parameters: {{repositories: [\"registry.example.com/\", \"registry.k8s.io/\"]}}\nexceptions: {{namespaces: [{home}], maxDuration: 1h}}\n"
        ),
    )?;
    let args: Vec<String> = [
        "--policy-exceptions",
        "--audit-interval",
        "2s",
        "--audit-namespace-selector",
        &format!("poolguard-exceptions-e2e={id}"),
        "--lease-name",
        hook,
        "--lease-namespace",
        LEASE_NAMESPACE,
        "--lease-duration",
        "4s",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let replica = Replica::start(certs, &config, &format!("exceptions-e2e-{id}"), &args)?;
    register(
        env,
        hook,
        id,
        &replica,
        std::fs::read(certs.join("ca.crt"))?,
    )
    .await?;
    env.say(format!(
        "replica on {} with --policy-exceptions, webhook {hook}",
        replica.addr
    ));

    // Refused without an exception (probed with dry runs until the API server calls the new
    // webhook).
    let denied = env.denied_image.clone();
    let pod = env.pod("billing-1", &denied, None)?;
    let dry_run = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    env.wait_until("the API server calls the test's webhook", LIMIT, || async {
        Ok(match env.pods(&shop).create(&dry_run, &pod).await {
            Err(kube::Error::Api(s)) if s.message.contains("allowedrepositories") => Ok(()),
            other => Err(format!("{:?}", other.map(|_| "admitted"))),
        })
    })
    .await?;

    // What the webhook refuses to write: no ticket, too long, in a namespace that does not count.
    let good = |expires: &str| {
        json!({"policies": ["allowedrepositories"], "ticket": "OPS-42", "expires": expires,
               "reason": "the billing image moves registries next sprint",
               "match": {"namespaces": [shop.clone()], "names": ["billing-*"]}})
    };
    // Without a ticket the CRD's schema refuses it (422); a blank one reaches poolguard (403).
    let mut no_ticket = good(&at(LIFETIME));
    no_ticket.as_object_mut().context("spec")?.remove("ticket");
    let mut blank_ticket = good(&at(LIFETIME));
    blank_ticket["ticket"] = json!(" ");
    let too_long = good(&at(Duration::from_secs(7200)));
    for (ns, spec, code, want) in [
        (&home, no_ticket, 422, "spec.ticket: Required value"),
        (&home, blank_ticket, 403, "spec.ticket is required"),
        (
            &home,
            too_long,
            403,
            "more than exceptions.maxDuration (1h) away",
        ),
        (
            &other,
            good(&at(LIFETIME)),
            403,
            "exceptions count only in the namespaces the config names",
        ),
    ] {
        let refused = expect_refused(
            want,
            exceptions_api(env, ns)
                .create(&PostParams::default(), &exception("legacy-billing", spec)?)
                .await,
            code,
            &[want],
        )?;
        env.say(format!("PolicyException refused: {code} {refused}"));
    }

    // With the exception: admitted, with a warning naming it and its ticket.
    let started = std::time::Instant::now();
    exceptions_api(env, &home)
        .create(
            &PostParams::default(),
            &exception("legacy-billing", good(&at(LIFETIME)))?,
        )
        .await
        .context("writing the PolicyException")?;
    let warning = env
        .wait_until("the pod is admitted under the exception", LIMIT, || async {
            let answer = env.create_pod_raw(&shop, &pod).await?;
            Ok(if answer.status == 201 {
                Ok(answer.warnings.join(" | "))
            } else {
                Err(format!("{} {}", answer.status, answer.body["message"]))
            })
        })
        .await?;
    ensure!(
        warning.contains(&format!(
            "PolicyException {home}/legacy-billing (ticket OPS-42"
        )) && warning.contains("allowedrepositories"),
        "the warning does not name the exception: {warning}"
    );
    env.say(format!("admitted under the exception, warning: {warning}"));
    let properties = env
        .wait_until("the audit reports it skip", LIMIT, || async {
            Ok(match audited(env, &shop, "billing-1").await? {
                Some((result, properties)) if result == "skip" => Ok(properties),
                other => Err(format!("{other:?}")),
            })
        })
        .await?;
    ensure!(
        properties["exception"] == format!("{home}/legacy-billing").as_str()
            && properties["ticket"] == "OPS-42"
            && properties["expires"].is_string(),
        "the skip result's properties: {properties}"
    );
    env.say(format!("PolicyReport: skip, {properties}"));

    // Expired: a new such pod is refused, and the audit reports the running one as failing.
    let second = env.pod("billing-2", &denied, None)?;
    env.wait_until("the exception expires", LIFETIME + LIMIT, || async {
        Ok(match env.pods(&shop).create(&dry_run, &second).await {
            Err(kube::Error::Api(s)) if s.code == 403 => Ok(()),
            other => Err(format!("{:?}", other.map(|_| "admitted"))),
        })
    })
    .await?;
    env.say(format!(
        "refused again {:.0} s after the exception was written (it lasted {} s)",
        started.elapsed().as_secs_f64(),
        LIFETIME.as_secs()
    ));
    env.wait_until("the audit reports it fail", LIMIT, || async {
        Ok(match audited(env, &shop, "billing-1").await? {
            Some((result, _)) if result == "fail" => Ok(()),
            other => Err(format!("{other:?}")),
        })
    })
    .await?;
    env.say("PolicyReport: fail once the exception expired");
    replica.kill().await?;
    Ok(())
}
