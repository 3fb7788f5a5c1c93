//! Writes the native admission objects ([`poolguard_core::native`]) to the cluster: server-side
//! apply with field manager `poolguard`, then deletes the objects poolguard labelled as its own
//! that it no longer generates. A cluster that does not serve the v1 MutatingAdmissionPolicy and
//! ValidatingAdmissionPolicy APIs (before Kubernetes 1.36) is refused with one line, before
//! anything is written.

use std::collections::BTreeSet;

use anyhow::{bail, Context, Result};
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, ListParams, Patch, PatchParams};
use kube::Client;
use poolguard_core::native::{Native, API_VERSION, MANAGED_LABEL, MANAGED_VALUE};

/// The field manager of every write.
pub const FIELD_MANAGER: &str = "poolguard";

/// The four kinds, with their plural resource names.
const KINDS: [(&str, &str); 4] = [
    ("MutatingAdmissionPolicy", "mutatingadmissionpolicies"),
    (
        "MutatingAdmissionPolicyBinding",
        "mutatingadmissionpolicybindings",
    ),
    ("ValidatingAdmissionPolicy", "validatingadmissionpolicies"),
    (
        "ValidatingAdmissionPolicyBinding",
        "validatingadmissionpolicybindings",
    ),
];

fn api(client: &Client, kind: &str, plural: &str) -> Api<DynamicObject> {
    let resource = ApiResource {
        group: "admissionregistration.k8s.io".into(),
        version: "v1".into(),
        api_version: API_VERSION.into(),
        kind: kind.into(),
        plural: plural.into(),
    };
    Api::all_with(client.clone(), &resource)
}

/// What one sync did.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Synced {
    pub applied: usize,
    pub deleted: Vec<String>,
}

/// Fails with one line when the cluster does not serve all four kinds in
/// `admissionregistration.k8s.io/v1`.
pub async fn check_served(client: &Client) -> Result<()> {
    let served: BTreeSet<String> = match client.list_api_group_resources(API_VERSION).await {
        Ok(list) => list.resources.into_iter().map(|r| r.name).collect(),
        Err(kube::Error::Api(status)) if status.code == 404 => BTreeSet::new(),
        Err(e) => return Err(e).context("asking the cluster which admission APIs it serves"),
    };
    let missing: Vec<&str> = KINDS
        .iter()
        .filter(|(_, plural)| !served.contains(*plural))
        .map(|(kind, _)| *kind)
        .collect();
    if !missing.is_empty() {
        bail!(
            "the cluster does not serve {API_VERSION} {} (Kubernetes 1.36+); nothing was written and the webhook stays the only path",
            missing.join(", ")
        );
    }
    Ok(())
}

/// Applies `native` and removes the managed objects it no longer holds.
pub async fn sync(client: &Client, native: &Native) -> Result<Synced> {
    check_served(client).await?;
    let mut synced = Synced::default();
    for object in &native.objects {
        let kind = object["kind"].as_str().unwrap_or_default();
        let name = object["metadata"]["name"].as_str().unwrap_or_default();
        let Some((_, plural)) = KINDS.iter().find(|(k, _)| *k == kind) else {
            bail!("generated object {kind}/{name} is not an admission policy kind");
        };
        api(client, kind, plural)
            .patch(
                name,
                &PatchParams::apply(FIELD_MANAGER).force(),
                &Patch::Apply(object),
            )
            .await
            .with_context(|| format!("applying {kind}/{name}"))?;
        synced.applied += 1;
    }
    let wanted: BTreeSet<(String, String)> = native.names().into_iter().collect();
    // Bindings first, so no binding is left pointing at a deleted policy.
    for (kind, plural) in KINDS.iter().rev() {
        let api = api(client, kind, plural);
        let list = api
            .list(&ListParams::default().labels(&format!("{MANAGED_LABEL}={MANAGED_VALUE}")))
            .await
            .with_context(|| format!("listing {plural}"))?;
        for object in list {
            let Some(name) = object.metadata.name else {
                continue;
            };
            if wanted.contains(&(kind.to_string(), name.clone())) {
                continue;
            }
            match api.delete(&name, &DeleteParams::default()).await {
                Ok(_) => synced.deleted.push(format!("{kind}/{name}")),
                Err(kube::Error::Api(status)) if status.code == 404 => {}
                Err(e) => return Err(e).with_context(|| format!("deleting {kind}/{name}")),
            }
        }
    }
    Ok(synced)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::fake_api::FakeApi;
    use hyper::http::Method;
    use serde_json::json;

    fn generated() -> Native {
        Native {
            objects: vec![
                json!({"apiVersion": API_VERSION, "kind": "ValidatingAdmissionPolicy",
                "metadata": {"name": "poolguard-images"}}),
            ],
            skipped: Vec::new(),
        }
    }

    fn discovery(resources: &[&str]) -> serde_json::Value {
        json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": API_VERSION,
            "resources": resources.iter().map(|r| json!({"name": r, "singularName": "",
                "namespaced": false, "kind": "X", "verbs": ["get"]})).collect::<Vec<_>>()})
    }

    #[tokio::test]
    async fn a_cluster_without_the_v1_policy_apis_is_refused_in_one_line_and_nothing_is_written() {
        for served in [
            None,
            Some(discovery(&[
                "mutatingwebhookconfigurations",
                "validatingwebhookconfigurations",
                "validatingadmissionpolicies",
                "validatingadmissionpolicybindings",
            ])),
        ] {
            let api = FakeApi::default();
            if let Some(list) = served {
                api.state()
                    .objects
                    .insert(format!("/apis/{API_VERSION}"), list);
            }
            let error = sync(&api.client(), &generated()).await.unwrap_err();
            let text = format!("{error:#}");
            assert_eq!(text.lines().count(), 1, "{text}");
            assert!(
                text.contains("does not serve admissionregistration.k8s.io/v1 MutatingAdmissionPolicy, MutatingAdmissionPolicyBinding"),
                "{text}"
            );
            let state = api.state();
            assert!(
                state.requests.iter().all(|r| r.method == Method::GET),
                "{:?}",
                state.requests
            );
        }
    }
}
