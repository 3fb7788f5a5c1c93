//! Writes the native admission objects ([`poolguard_core::native`]) to the cluster: server-side
//! apply with field manager `poolguard`, then deletes the objects poolguard labelled as its own
//! that it no longer generates. A cluster that does not serve the v1 MutatingAdmissionPolicy and
//! ValidatingAdmissionPolicy APIs (before Kubernetes 1.36) is refused with one line, before
//! anything is written. With an owner (`serve --native-owner`, the chart's validating webhook
//! configuration), every object is written with an ownerReference to it, so the garbage
//! collector deletes them with it: `helm uninstall` leaves nothing poolguard wrote.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, ListParams, Patch, PatchParams};
use kube::Client;
use poolguard_core::native::sync_plan::{self, Due, Existing};
use poolguard_core::native::{self, Native, Options, API_VERSION, MANAGED_LABEL, MANAGED_VALUE};
use poolguard_core::ruleset::RuleSet;

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

/// Applies `native` and removes the managed objects it no longer holds
/// ([`sync_plan::deletions`]: only objects with poolguard's label).
pub async fn sync(client: &Client, native: &Native) -> Result<Synced> {
    check_served(client).await?;
    write(client, native, None).await
}

/// An ownerReference to the ValidatingWebhookConfiguration `name`, read now for its uid. A
/// missing owner is an error: the garbage collector deletes an object whose owners are all gone,
/// so objects written with one would be deleted at once.
async fn owner_reference(client: &Client, name: &str) -> Result<serde_json::Value> {
    let api: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
    let owner = api
        .get_opt(name)
        .await
        .with_context(|| format!("reading ValidatingWebhookConfiguration {name} (--native-owner)"))?
        .with_context(|| {
            format!(
                "ValidatingWebhookConfiguration {name} (--native-owner) does not exist: nothing written, since the garbage collector deletes objects whose owner is gone"
            )
        })?;
    let uid = owner
        .metadata
        .uid
        .with_context(|| format!("ValidatingWebhookConfiguration {name} has no uid"))?;
    Ok(serde_json::json!({
        "apiVersion": API_VERSION,
        "kind": "ValidatingWebhookConfiguration",
        "name": name,
        "uid": uid,
    }))
}

/// [`sync`] on a cluster known to serve the v1 APIs; with `owner`, each object is owned by that
/// ValidatingWebhookConfiguration ([`owner_reference`]).
async fn write(client: &Client, native: &Native, owner: Option<&str>) -> Result<Synced> {
    let mut synced = Synced::default();
    let reference = match owner {
        Some(name) => Some(owner_reference(client, name).await?),
        None => None,
    };
    for object in &native.objects {
        let mut owned;
        let object = match &reference {
            Some(reference) => {
                owned = object.clone();
                owned["metadata"]["ownerReferences"] = serde_json::json!([reference]);
                &owned
            }
            None => object,
        };
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
    let existing: Vec<Existing> = read_managed(client)
        .await?
        .into_iter()
        .filter_map(|object| {
            Some(Existing {
                kind: object["kind"].as_str()?.to_string(),
                name: object["metadata"]["name"].as_str()?.to_string(),
                labels: serde_json::from_value(object["metadata"]["labels"].clone())
                    .unwrap_or_default(),
            })
        })
        .collect();
    for (kind, name) in sync_plan::deletions(native, &existing) {
        let Some((_, plural)) = KINDS.iter().find(|(k, _)| *k == kind) else {
            continue;
        };
        match api(client, &kind, plural)
            .delete(&name, &DeleteParams::default())
            .await
        {
            Ok(_) => synced.deleted.push(format!("{kind}/{name}")),
            Err(kube::Error::Api(status)) if status.code == 404 => {}
            Err(e) => return Err(e).with_context(|| format!("deleting {kind}/{name}")),
        }
    }
    Ok(synced)
}

/// The objects of the four kinds labelled as poolguard's, as the API server returns them, each
/// with its `kind`.
pub async fn read_managed(client: &Client) -> Result<Vec<serde_json::Value>> {
    let mut objects = Vec::new();
    for (kind, plural) in KINDS {
        let list = api(client, kind, plural)
            .list(&ListParams::default().labels(&format!("{MANAGED_LABEL}={MANAGED_VALUE}")))
            .await
            .with_context(|| format!("listing {plural}"))?;
        for object in list {
            let mut value = serde_json::to_value(&object)
                .with_context(|| format!("reading a listed {kind}"))?;
            value["kind"] = kind.into();
            objects.push(value);
        }
    }
    Ok(objects)
}

/// How often the leader applies the objects again although they did not change (repairs an
/// object someone edited or deleted), and asks again whether a cluster that did not serve the
/// v1 APIs serves them now.
pub const RESYNC_EVERY: Duration = Duration::from_secs(600);

/// The leader's writer: called every few seconds with the rules of the moment, it writes the
/// objects when they change ([`sync_plan::due`]). A cluster without the v1 APIs is logged once,
/// in one line, and asked again every [`RESYNC_EVERY`]; the webhook path is unchanged there.
pub struct Writer {
    options: Options,
    /// The ValidatingWebhookConfiguration that owns the objects (`--native-owner`).
    owner: Option<String>,
    last: Option<(Native, Instant)>,
    refused_at: Option<Instant>,
}

impl Writer {
    pub fn new(options: Options, owner: Option<String>) -> Writer {
        Writer {
            options,
            owner,
            last: None,
            refused_at: None,
        }
    }

    /// A new leader writes everything again.
    pub fn reset(&mut self) {
        self.last = None;
    }

    /// Writes the objects `rules` generate when a sync is due.
    pub async fn tick(&mut self, client: &Client, rules: &RuleSet) {
        if self
            .refused_at
            .is_some_and(|at| at.elapsed() < RESYNC_EVERY)
        {
            return;
        }
        let wanted = native::generate(rules, &self.options);
        let due = match &self.last {
            Some((last, at)) => sync_plan::due(Some(last), &wanted, at.elapsed(), RESYNC_EVERY),
            None => sync_plan::due(None, &wanted, Duration::ZERO, RESYNC_EVERY),
        };
        if due == Due::No {
            return;
        }
        if let Err(e) = check_served(client).await {
            if self.refused_at.is_none() {
                tracing::warn!(error = %format!("{e:#}"), "native admission objects not written");
            }
            self.refused_at = Some(Instant::now());
            return;
        }
        self.refused_at = None;
        match write(client, &wanted, self.owner.as_deref()).await {
            Ok(synced) => {
                if due == Due::Changed || !synced.deleted.is_empty() {
                    tracing::info!(
                        applied = synced.applied,
                        deleted = ?synced.deleted,
                        on_webhook = wanted.skipped.len(),
                        field_manager = FIELD_MANAGER,
                        "native admission objects written"
                    );
                }
                self.last = Some((wanted, Instant::now()));
            }
            Err(e) => {
                tracing::warn!(error = %format!("{e:#}"), "writing the native admission objects failed; retrying");
                self.last = None;
            }
        }
    }
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

    fn served(api: &FakeApi) {
        api.state().objects.insert(
            format!("/apis/{API_VERSION}"),
            discovery(&KINDS.map(|(_, plural)| plural)),
        );
    }

    /// The default config, with the shipped latesttag policy loaded or not.
    fn rules(latesttag: bool) -> RuleSet {
        let templates: Vec<_> = latesttag
            .then(|| {
                poolguard_core::policy::template::from_yaml(
                    include_str!("../../policies/latesttag.yaml"),
                    "policies/latesttag.yaml".into(),
                )
                .unwrap()
            })
            .into_iter()
            .collect();
        RuleSet::new(
            poolguard_core::config::Config::parse(
                if latesttag {
                    "policies:\n  latesttag: {parameters: {}}\n"
                } else {
                    "{}"
                },
                "t",
            )
            .unwrap(),
            poolguard_core::policy::PolicySet::compile(&templates).unwrap(),
            Default::default(),
            "t",
        )
        .unwrap()
    }

    fn stored(api: &FakeApi) -> Vec<String> {
        api.state()
            .objects
            .keys()
            .filter_map(|k| k.strip_prefix(&format!("/apis/{API_VERSION}/")))
            .map(str::to_string)
            .collect()
    }

    #[tokio::test]
    async fn the_leader_writes_on_change_and_deletes_only_its_own_labelled_objects() {
        let api = FakeApi::default();
        served(&api);
        let vap = format!("/apis/{API_VERSION}/validatingadmissionpolicies");
        let vapb = format!("/apis/{API_VERSION}/validatingadmissionpolicybindings");
        {
            let mut state = api.state();
            // A user's policy (no label) and a stale one of poolguard's (labelled).
            state.put(&vap, json!({"metadata": {"name": "team-rules"}}));
            state.put(
                &vapb,
                json!({"metadata": {"name": "poolguard-old",
                "labels": {MANAGED_LABEL: MANAGED_VALUE}}}),
            );
        }
        let client = api.client();
        let mut writer = Writer::new(Options::default(), None);
        let mut current = rules(false);
        writer.tick(&client, &current).await;
        let first = stored(&api);
        assert!(
            first.contains(&"validatingadmissionpolicies/team-rules".to_string()),
            "{first:?}"
        );
        assert!(
            !first.iter().any(|k| k.ends_with("/poolguard-old")),
            "{first:?}"
        );
        assert!(
            first.contains(&"mutatingadmissionpolicies/poolguard-pool".to_string()),
            "{first:?}"
        );
        let applies = |api: &FakeApi| {
            api.state()
                .requests
                .iter()
                .filter(|r| r.content_type.as_deref() == Some("application/apply-patch+yaml"))
                .count()
        };
        let written = applies(&api);
        assert_eq!(
            written,
            native::generate(&current, &Options::default())
                .objects
                .len()
        );
        assert!(api
            .state()
            .requests
            .iter()
            .any(|r| r.query.contains("fieldManager=poolguard")));

        // Nothing changed: no write.
        writer.tick(&client, &current).await;
        assert_eq!(applies(&api), written);

        // A policy added: everything applied again, and it is there.
        current = rules(true);
        writer.tick(&client, &current).await;
        assert!(applies(&api) > written);
        assert!(
            stored(&api).iter().any(|k| k.contains("latesttag")),
            "{:?}",
            stored(&api)
        );

        // Removed again: its objects go, the user's policy stays.
        writer.tick(&client, &rules(false)).await;
        let last = stored(&api);
        assert!(!last.iter().any(|k| k.contains("latesttag")), "{last:?}");
        assert!(
            last.contains(&"validatingadmissionpolicies/team-rules".to_string()),
            "{last:?}"
        );
        assert!(api
            .state()
            .requests
            .iter()
            .filter(|r| r.method == Method::DELETE)
            .all(|r| !r.path.ends_with("/team-rules")));
    }

    /// With an owner, every object is written with an ownerReference to the release's validating
    /// webhook configuration (by its uid), so the garbage collector deletes them with it; with
    /// the owner missing nothing is written (the collector would delete it at once).
    #[tokio::test]
    async fn objects_are_owned_by_the_release_s_validating_configuration() {
        let api = FakeApi::default();
        served(&api);
        let client = api.client();
        let mut writer = Writer::new(Options::default(), Some("pg-validating".into()));
        writer.tick(&client, &rules(false)).await;
        assert!(
            !stored(&api).iter().any(|k| k.contains("poolguard-")),
            "written without its owner: {:?}",
            stored(&api)
        );
        api.state().put(
            crate::cluster::fake_api::VALIDATING,
            json!({"metadata": {"name": "pg-validating", "uid": "0f3c-owner"}}),
        );
        writer.tick(&client, &rules(false)).await;
        let state = api.state();
        let written: Vec<&serde_json::Value> = state
            .objects
            .iter()
            .filter(|(path, _)| !path.starts_with(crate::cluster::fake_api::VALIDATING))
            .filter(|(_, o)| o["metadata"]["labels"][MANAGED_LABEL] == json!(MANAGED_VALUE))
            .map(|(_, o)| o)
            .collect();
        assert_eq!(
            written.len(),
            native::generate(&rules(false), &Options::default())
                .objects
                .len()
        );
        for object in written {
            assert_eq!(
                object["metadata"]["ownerReferences"],
                json!([{"apiVersion": API_VERSION, "kind": "ValidatingWebhookConfiguration",
                        "name": "pg-validating", "uid": "0f3c-owner"}]),
                "{object}"
            );
        }
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
