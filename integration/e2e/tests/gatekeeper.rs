//! Gatekeeper ConstraintTemplates and constraints through a real kube-apiserver: a poolguard
//! replica runs with testdata/gatekeeper/allowedrepos in its `--gatekeeper-dir` (K8sAllowedRepos, its
//! constraint `images-from-allowed-repos` allowing registry.k8s.io only) and a config that rolls
//! the constraint out over two groups of namespaces; its own validating webhook covers the
//! test's namespaces. A pod from a foreign registry already runs in the second group, so the
//! rollout holds there: a new such pod (and an allowed pod's image changed to it) is refused in
//! the first group with the constraint's
//! message, admitted with it as a Warning in the second, and the audit's PolicyReport of the
//! second namespace has a failing result of the constraint for each violation of the running
//! pod (two foreign images: two results). A Service (a kind without a pod spec) without an
//! owner label is refused by a RequiredOwner constraint that matches Services (the replica's
//! `--gatekeeper-dir` holds both templates and their constraints), and one created before the
//! webhook has a failing result of that constraint in the PolicyReport (the audit lists the
//! kinds the constraints name); the test's namespace, without an owner label, has a failing
//! result of the constraint on Namespaces in the ClusterPolicyReport.
//!
//! Needs KUBECONFIG, POOLGUARD_BIN and the PolicyReport CRD (integration/e2e.sh provides all).

use std::path::Path;
use std::time::Duration;

use anyhow::{ensure, Context, Result};
use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use k8s_openapi::api::core::v1::{ConfigMap, Service};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::ByteString;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams,
};
use kube::ResourceExt;
use poolguard_e2e::replicas::{self, Replica, Scratch};
use poolguard_e2e::{expect_refused, random_suffix, rollout_statuses, run, Env};
use serde_json::json;

const CONSTRAINT: &str = "images-from-allowed-repos";
const NAMESPACE: &str = "default";
const LIMIT: Duration = Duration::from_secs(30);

fn config_text(id: &str) -> String {
    format!(
        r#"namespaceLabel: agentpool
nodeSelectorKey: agentpool
policies:
  {CONSTRAINT}:
    rollout:
      groups:
        - name: canary
          namespaceSelector: {{matchLabels: {{gatekeeper-risk-{id}: low}}}}
        - name: standard
          namespaceSelector: {{matchLabels: {{gatekeeper-risk-{id}: medium}}}}
      minSuccessTime: 2s
      progressDeadline: 120s
      maxFailures: 0
"#
    )
}

/// "canary=Succeeded standard=Progressing", from the constraint's stored rollout state.
async fn statuses(env: &Env, configmap: &str) -> Result<String> {
    let state = env.rollout_state(NAMESPACE, configmap, CONSTRAINT).await?;
    Ok(state.as_ref().map(rollout_statuses).unwrap_or_default())
}

/// The audit's results of `policy` for the object `name` in the PolicyReport of `ns` (empty: the
/// ClusterPolicyReport), each as "result violation: message", sorted.
async fn report_results(env: &Env, ns: &str, name: &str, policy: &str) -> Result<Vec<String>> {
    let Some(report) = env.policy_report(ns).await? else {
        return Ok(Vec::new());
    };
    let mut found: Vec<String> = report["results"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|r| r["resources"][0]["name"] == name && r["policy"] == policy)
        .map(|r| {
            format!(
                "{} {}: {}",
                r["result"].as_str().unwrap_or_default(),
                r["properties"]["violation"].as_str().unwrap_or("-"),
                r["message"].as_str().unwrap_or_default()
            )
        })
        .collect();
    found.sort();
    Ok(found)
}

/// Waits until the PolicyReport of `ns` has exactly `want` as the results of `policy` for the
/// object `name` ([`report_results`]).
async fn wait_for_report(
    env: &Env,
    ns: &str,
    name: &str,
    policy: &str,
    want: &[String],
) -> Result<()> {
    let found = env
        .wait_until(
            &format!("the PolicyReport's results of {policy} for {name}"),
            LIMIT,
            || async {
                let found = report_results(env, ns, name, policy).await?;
                Ok(if found == want {
                    Ok(found)
                } else {
                    Err(format!("{found:?}"))
                })
            },
        )
        .await?;
    let report = match ns {
        "" => "ClusterPolicyReport".to_string(),
        ns => format!("PolicyReport of {ns}"),
    };
    env.say(format!("{report}, {policy}: {found:?}"));
    Ok(())
}

/// A validating webhook sending the test namespaces' pod and Service CREATEs and UPDATEs to
/// `replica`.
async fn register(env: &Env, name: &str, id: &str, replica: &Replica, ca: Vec<u8>) -> Result<()> {
    let mut hook: ValidatingWebhookConfiguration = serde_json::from_value(json!({
        "metadata": {"name": name},
        "webhooks": [{
            "name": "gatekeeper-e2e.poolguard.test",
            "clientConfig": {"url": format!("https://{}/validate", replica.addr)},
            "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"], "resources": ["pods", "services"]}],
            "namespaceSelector": {"matchLabels": {"poolguard-gatekeeper-e2e": id}},
            "failurePolicy": "Fail", "sideEffects": "None", "admissionReviewVersions": ["v1"], "timeoutSeconds": 10
        }]
    }))?;
    if let Some(webhooks) = hook.webhooks.as_mut() {
        webhooks[0].client_config.ca_bundle = Some(ByteString(ca));
    }
    Api::<ValidatingWebhookConfiguration>::all(env.client.clone())
        .create(&PostParams::default(), &hook)
        .await
        .context("registering the test's validating webhook")?;
    Ok(())
}

/// A replica with `args` (`what`, for the log) behind its own webhook `hook` for the namespaces
/// labelled with `id`.
async fn serve_for(
    env: &Env,
    id: &str,
    certs: &Path,
    config: &Path,
    args: &[String],
    hook: &str,
    what: &str,
) -> Result<Replica> {
    let replica = Replica::start(certs, config, &format!("gatekeeper-e2e-{id}"), args)?;
    register(
        env,
        hook,
        id,
        &replica,
        std::fs::read(certs.join("ca.crt"))?,
    )
    .await?;
    env.say(format!(
        "replica on {} with {what}, webhook {hook}",
        replica.addr
    ));
    Ok(replica)
}

#[tokio::test]
async fn a_gatekeeper_constraint_denies_warns_and_is_reported() {
    run("gatekeeper", |env| async move {
        let own = Scratch::new("gatekeeper").await?;
        // The constraints' ConfigMap is named as the webhook and the Lease are.
        let result = scenario(&env, &own.id, &own.dir, &own.certs, &own.name, &own.name).await;
        // Removed whether the scenario passed or not (the replica is gone by now; the webhook
        // only covers the test's namespaces, which run() deletes next).
        let _ = Api::<ConfigMap>::namespaced(env.client.clone(), NAMESPACE)
            .delete(&own.name, &DeleteParams::default())
            .await;
        own.remove(&env.client, NAMESPACE).await;
        result
    })
    .await;
}

async fn scenario(
    env: &Env,
    id: &str,
    dir: &Path,
    certs: &Path,
    hook: &str,
    configmap: &str,
) -> Result<()> {
    let config = dir.join("config.yaml");
    std::fs::write(&config, config_text(id))?;
    // Two namespaces without a pool (the cluster's own poolguard leaves them alone), one per
    // group; a pod from a foreign registry already runs in the second.
    let mut namespaces = Vec::new();
    for risk in ["low", "medium"] {
        let ns = env.namespace(&format!("gatekeeper-{risk}"), None).await?;
        let labels = json!({"metadata": {"labels": {format!("gatekeeper-risk-{id}"): risk, "poolguard-gatekeeper-e2e": id}}});
        env.namespaces_api()
            .patch(&ns, &PatchParams::default(), &Patch::Merge(&labels))
            .await?;
        namespaces.push(ns);
    }
    let (canary, standard) = (&namespaces[0], &namespaces[1]);
    let denied = env.denied_image.clone();
    // Two foreign images: two violations, two results in the PolicyReport.
    let mut running = serde_json::to_value(env.pod("running", &denied, None)?)?;
    running["spec"]["containers"]
        .as_array_mut()
        .context("the pod's containers")?
        .push(json!({"name": "side", "image": "quay.io/example/side:1"}));
    env.create_pod(standard, &serde_json::from_value(running)?)
        .await?;
    // And a Service without an owner label (a kind without a pod spec), for the audit.
    let services: Api<Service> = Api::namespaced(env.client.clone(), standard);
    services
        .create(
            &PostParams::default(),
            &serde_json::from_value(
                json!({"metadata": {"name": "unowned"}, "spec": {"ports": [{"port": 80}]}}),
            )?,
        )
        .await
        .context("a Service without an owner label, before the webhook")?;

    // K8sAllowedRepos and its constraint, and RequiredOwner with its constraints on Services
    // and Namespaces (kinds without a pod spec; the test's webhook sends Services only).
    let gatekeeper_dir = dir.join("gatekeeper");
    std::fs::create_dir_all(&gatekeeper_dir)?;
    let testdata = replicas::repository().join("testdata/gatekeeper");
    for (from, to) in [
        ("allowedrepos/template.yaml", "allowedrepos-template.yaml"),
        (
            "allowedrepos/constraint.yaml",
            "allowedrepos-constraint.yaml",
        ),
        ("requiredowner/template.yaml", "requiredowner-template.yaml"),
        (
            "requiredowner/other-kinds.yaml",
            "requiredowner-other-kinds.yaml",
        ),
    ] {
        std::fs::copy(testdata.join(from), gatekeeper_dir.join(to))
            .with_context(|| format!("copying {from}"))?;
    }
    let args: Vec<String> = [
        "--gatekeeper-dir",
        &gatekeeper_dir.display().to_string(),
        "--audit-interval",
        "2s",
        "--audit-namespace-selector",
        &format!("poolguard-gatekeeper-e2e={id}"),
        "--lease-name",
        configmap,
        "--lease-namespace",
        NAMESPACE,
        "--lease-duration",
        "4s",
        "--rollout-configmap",
        configmap,
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let what = format!("--gatekeeper-dir {}", gatekeeper_dir.display());
    let replica = serve_for(env, id, certs, &config, &args, hook, &what).await?;

    // The running pod holds the rollout at the second group.
    let want = "canary=Succeeded standard=Progressing";
    env.wait_until(&format!("rollout {want}"), LIMIT, || async {
        let got = statuses(env, configmap).await?;
        Ok(if got == want { Ok(()) } else { Err(got) })
    })
    .await?;

    // The first group denies: probed with server-side dry runs until the API server calls the
    // new webhook, then a real create.
    let message = "images-from-allowed-repos: containers main: image nginx:1.27 starts with none of the allowed repos";
    let probe = env.pod("foreign", &denied, None)?;
    let dry_run = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    env.wait_until("the API server calls the test's webhook", LIMIT, || async {
        Ok(match env.pods(canary).create(&dry_run, &probe).await {
            Err(kube::Error::Api(s)) if s.message.contains(CONSTRAINT) => Ok(()),
            other => Err(format!("{:?}", other.map(|_| "admitted"))),
        })
    })
    .await?;
    let refused = expect_refused(
        "a foreign image in the first group",
        env.create_pod(canary, &probe).await,
        403,
        &[message],
    )?;
    env.say(format!("first group (Succeeded): 403 {refused}"));
    env.create_pod(canary, &env.pod("allowed", &env.allowed_image, None)?)
        .await
        .context("an allowed image in the first group")?;
    // Its image changed to the foreign one (a Pod's container image may change): refused, as a
    // violation the old object did not have.
    let swap = json!({"spec": {"containers": [{"name": "main", "image": denied}]}});
    let refused = expect_refused(
        "the allowed pod's image changed to a foreign one in the first group",
        env.pods(canary)
            .patch("allowed", &PatchParams::default(), &Patch::Strategic(&swap))
            .await,
        403,
        &[message],
    )?;
    env.say(format!(
        "first group, image changed on UPDATE: 403 {refused}"
    ));

    // A kind without a pod spec, judged by the constraint that matches it (RequiredOwner on
    // Services): refused without the label, created with it.
    let services: Api<Service> = Api::namespaced(env.client.clone(), canary);
    let service = |labels: serde_json::Value| -> Result<Service> {
        Ok(serde_json::from_value(
            json!({"metadata": {"name": "web", "labels": labels},
            "spec": {"ports": [{"port": 80}]}}),
        )?)
    };
    let refused = expect_refused(
        "a Service without an owner label",
        services
            .create(&PostParams::default(), &service(json!({}))?)
            .await,
        403,
        &["services-need-owner: Service web has no owner label"],
    )?;
    env.say(format!("a Service without an owner label: 403 {refused}"));
    services
        .create(&PostParams::default(), &service(json!({"owner": "e2e"}))?)
        .await
        .context("a Service with an owner label")?;

    // The second group warns.
    let res = env
        .create_pod_raw(standard, &env.pod("warned", &denied, None)?)
        .await?;
    ensure!(
        res.status == 201,
        "a foreign image in the second group: HTTP {}: {}",
        res.status,
        res.body
    );
    ensure!(
        res.warnings.iter().any(|w| w.contains(message)),
        "no Warning header with the constraint's message: {:?}",
        res.warnings
    );
    env.say(format!(
        "second group (Progressing): 201 with {:?}",
        res.warnings
    ));

    // The audit reports the running pod under the constraint's name, one result per violation.
    let allowed = r#"starts with none of the allowed repos ["registry.k8s.io/"]"#;
    let want = [
        format!("fail 1: containers main: image nginx:1.27 {allowed}"),
        format!("fail 2: containers side: image quay.io/example/side:1 {allowed}"),
    ];
    wait_for_report(env, standard, "running", CONSTRAINT, &want).await?;
    // The audit lists the kinds the constraints name (Services) and judges them as admission
    // does.
    let want = ["fail 1: Service unowned has no owner label".to_string()];
    wait_for_report(env, standard, "unowned", "services-need-owner", &want).await?;
    // And the cluster-scoped kinds they name (Namespaces), into the ClusterPolicyReport.
    let want = [format!("fail 1: Namespace {standard} has no owner label")];
    wait_for_report(env, "", standard, "namespaces-need-owner", &want).await?;
    drop(replica);
    Ok(())
}

/// The CustomResourceDefinition of one Gatekeeper resource, schemaless (Gatekeeper's own CRDs
/// carry schemas; poolguard reads the objects only).
fn crd(group: &str, version: &str, kind: &str, plural: &str) -> Result<CustomResourceDefinition> {
    Ok(serde_json::from_value(json!({
        "metadata": {"name": format!("{plural}.{group}")},
        "spec": {"group": group, "scope": "Cluster",
            "names": {"kind": kind, "plural": plural, "singular": kind.to_lowercase()},
            "versions": [{"name": version, "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}]}
    }))?)
}

/// Creates the document of testdata/gatekeeper/`file` as a cluster object of `resource`.
async fn create_from(env: &Env, resource: &ApiResource, file: &str) -> Result<()> {
    let path = replicas::repository()
        .join("testdata/gatekeeper")
        .join(file);
    let text = std::fs::read_to_string(&path).with_context(|| path.display().to_string())?;
    let doc = poolguard_core::documents::parse(&text, file)?.remove(0);
    let object: DynamicObject = serde_json::from_value(doc)?;
    Api::<DynamicObject>::all_with(env.client.clone(), resource)
        .create(&PostParams::default(), &object)
        .await
        .with_context(|| format!("creating {file} in the cluster"))?;
    Ok(())
}

#[tokio::test]
async fn constraints_in_the_cluster_are_loaded_and_followed() {
    run("gatekeeper-cluster", |env| async move {
        let id = random_suffix();
        let certs = replicas::certificates(&id).await?;
        let hook = format!("poolguard-gatekeeper-cluster-e2e-{id}");
        let crds = [
            crd(
                "templates.gatekeeper.sh",
                "v1",
                "ConstraintTemplate",
                "constrainttemplates",
            )?,
            crd(
                "constraints.gatekeeper.sh",
                "v1beta1",
                "K8sAllowedRepos",
                "k8sallowedrepos",
            )?,
        ];
        let result = cluster_scenario(&env, &id, &certs, &hook, &crds).await;
        let _ = Api::<ValidatingWebhookConfiguration>::all(env.client.clone())
            .delete(&hook, &DeleteParams::default())
            .await;
        // Deleting the CRDs deletes the templates and constraints with them.
        let api = Api::<CustomResourceDefinition>::all(env.client.clone());
        for crd in &crds {
            let _ = api.delete(&crd.name_any(), &DeleteParams::default()).await;
        }
        let _ = std::fs::remove_dir_all(&certs);
        result
    })
    .await;
}

/// A replica with `--gatekeeper-from-cluster` and no `--gatekeeper-dir`: the cluster's
/// K8sAllowedRepos template and constraint refuse a foreign image, a template that does not load
/// here (it needs data.inventory) is left out without taking the others with it, and a change
/// of the constraint is followed.
async fn cluster_scenario(
    env: &Env,
    id: &str,
    certs: &Path,
    hook: &str,
    crds: &[CustomResourceDefinition],
) -> Result<()> {
    let api = Api::<CustomResourceDefinition>::all(env.client.clone());
    for crd in crds {
        api.create(&PostParams::default(), crd)
            .await
            .with_context(|| format!("creating CRD {}", crd.name_any()))?;
    }
    // Served once the CRDs are established.
    let templates = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("templates.gatekeeper.sh", "v1", "ConstraintTemplate"),
        "constrainttemplates",
    );
    let constraints = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("constraints.gatekeeper.sh", "v1beta1", "K8sAllowedRepos"),
        "k8sallowedrepos",
    );
    env.wait_until("the Gatekeeper CRDs to be served", LIMIT, || async {
        let listed = Api::<DynamicObject>::all_with(env.client.clone(), &constraints)
            .list(&Default::default())
            .await;
        Ok(match listed {
            Ok(_) => Ok(()),
            Err(e) => Err(e.to_string()),
        })
    })
    .await?;
    create_from(env, &templates, "allowedrepos/template.yaml").await?;
    create_from(env, &templates, "broken/needs-inventory.yaml").await?;
    create_from(env, &constraints, "allowedrepos/constraint.yaml").await?;

    let ns = env.namespace("gatekeeper-cluster", None).await?;
    let labels = json!({"metadata": {"labels": {"poolguard-gatekeeper-e2e": id}}});
    env.namespaces_api()
        .patch(&ns, &PatchParams::default(), &Patch::Merge(&labels))
        .await?;
    let config = certs.join("config.yaml");
    std::fs::write(
        &config,
        "namespaceLabel: agentpool\nnodeSelectorKey: agentpool\n",
    )?;
    let args: Vec<String> = ["--gatekeeper-from-cluster", "--audit-interval", "0"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    let replica = serve_for(
        env,
        id,
        certs,
        &config,
        &args,
        hook,
        "--gatekeeper-from-cluster",
    )
    .await?;

    let probe = env.pod("foreign", &env.denied_image, None)?;
    let dry_run = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    let message = "images-from-allowed-repos: containers main: image nginx:1.27 starts with none of the allowed repos";
    let refused = env
        .wait_until(
            "the cluster's constraint refuses a foreign image",
            LIMIT,
            || async {
                Ok(match env.pods(&ns).create(&dry_run, &probe).await {
                    Err(kube::Error::Api(s)) if s.message.contains(message) => Ok(s.message),
                    other => Err(format!("{:?}", other.map(|_| "admitted"))),
                })
            },
        )
        .await?;
    env.say(format!("the cluster's constraint: 403 {refused}"));

    // The constraint changed in the cluster (the image's repository allowed): followed.
    let allow = json!({"spec": {"parameters": {"repos": ["registry.k8s.io/", "nginx"]}}});
    Api::<DynamicObject>::all_with(env.client.clone(), &constraints)
        .patch(CONSTRAINT, &PatchParams::default(), &Patch::Merge(&allow))
        .await
        .context("changing the constraint's repos")?;
    env.wait_until("the changed constraint admits the image", LIMIT, || async {
        Ok(match env.pods(&ns).create(&dry_run, &probe).await {
            Ok(_) => Ok(()),
            Err(e) => Err(e.to_string()),
        })
    })
    .await?;
    env.say("the changed constraint admits the image");
    drop(replica);
    Ok(())
}
