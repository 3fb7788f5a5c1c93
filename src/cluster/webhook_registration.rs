//! `serve --register-webhooks FILE`: poolguard puts its webhooks into its own webhook
//! configurations itself, and only once it can answer them.
//!
//! The chart creates the two configurations with no webhooks (so a first install whose pods never
//! start, say because the image cannot be pulled, refuses nothing) and mounts the webhooks it
//! would have rendered as FILE. Every replica, once it serves, waits until the Service its
//! webhooks call has a ready endpoint, then server-side applies FILE's webhooks into the
//! configurations, and again every [`RECHECK`] (a `helm upgrade` changes FILE). The write names
//! nothing but the webhooks, so labels, annotations and the fields other managers own inside
//! poolguard's webhooks (a caBundle injected by cert-manager, a matchCondition added by someone
//! else) stay. The list of webhooks is poolguard's alone: an entry it did not write (a webhook on
//! Secrets with a foreign `url`, added by whoever holds a token that may patch the
//! configuration) is removed before each apply, logged with where it sent requests, and counted
//! (`poolguard_foreign_webhooks_removed_total`, alert `PoolguardForeignWebhookRemoved`);
//! server-side apply alone would keep it, as another manager's list entry. `helm uninstall`
//! deletes the configurations with the release.
//!
//! With `--native-fallback` ([`Fallback`]) only the audit's leader registers, and it leaves the
//! pod and workload webhooks (every webhook but those on namespaces) out of what it applies while
//! the native admission objects decide those requests alone
//! ([`poolguard_core::native::in_force`]): read back from the cluster as the leader's own rules
//! generate them, and enforced by the API server on canary pods created with a server-side dry
//! run ([`poolguard_core::native::canary`]), for [`SETTLE`] in a row. Left out of the apply, the
//! webhooks are removed; the next pass (every [`FALLBACK_RECHECK`]) that finds the native objects
//! short or not enforced puts them back. The state is a metric
//! (`poolguard_native_fallback_webhooks`), a failed canary pass is counted
//! (`poolguard_native_canary_failures_total`, alert `PoolguardNativeEnforcementUnproven`).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use arc_swap::ArcSwap;
use base64::Engine as _;
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use k8s_openapi::api::core::v1::{Namespace, Pod};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, ApiResource, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::Client;
use poolguard_core::native;
use poolguard_core::ruleset::RuleSet;
use serde_json::{json, Value};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::cluster::native_objects;
use crate::telemetry::metrics::FallbackMetrics;

/// The field manager of the registration's writes.
pub const FIELD_MANAGER: &str = "poolguard-registration";
/// How often the configurations are applied again (a no-op write when nothing changed).
pub const RECHECK: Duration = Duration::from_secs(30);
/// How often a replica looks again while nothing is registered yet.
const WAITING: Duration = Duration::from_secs(2);
/// With `--native-fallback`: how often the leader looks at the native objects and applies.
pub const FALLBACK_RECHECK: Duration = Duration::from_secs(5);
/// With `--native-fallback`: how long the native objects must read back as generated before the
/// pod and workload webhooks are left out (the API server's policy caches follow new objects
/// with a lag of a few seconds).
pub const SETTLE: Duration = Duration::from_secs(15);

/// `--native-fallback`: the pod and workload webhooks are registered only while the native
/// objects do not decide their requests alone, and only the audit's leader registers.
pub struct Fallback {
    /// Whether this replica leads the audit (the leader writes the native objects).
    pub leading: watch::Receiver<bool>,
    /// The rules of the moment (the server's current rule set, as the sources keep it).
    pub rules: Arc<dyn Fn() -> Arc<RuleSet> + Send + Sync>,
    /// Where the native objects' bindings look, as the leader's writer generates them.
    pub options: native::Options,
    /// Where and with what the canary pods show that the API server enforces the objects.
    pub canary: CanarySettings,
    pub metrics: FallbackMetrics,
}

/// `--native-canary-namespace` and `--native-canary-image`.
#[derive(Debug, Clone, PartialEq)]
pub struct CanarySettings {
    pub namespace: String,
    /// The plain canary pod's image.
    pub image: String,
}

/// The state of the fallback between passes.
#[derive(Default)]
struct Settling {
    /// Since when the native objects have read back as generated, without a break.
    since: Option<std::time::Instant>,
    /// What was last logged: why the webhooks were registered, or None once left out.
    logged: Option<Option<String>>,
}

/// One configuration to apply: its kind and name, and the apply body.
#[derive(Debug, Clone, PartialEq)]
pub struct Desired {
    pub kind: Kind,
    pub name: String,
    pub body: Value,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Mutating,
    Validating,
}

impl Kind {
    fn of(kind: &str) -> Option<Kind> {
        match kind {
            "MutatingWebhookConfiguration" => Some(Kind::Mutating),
            "ValidatingWebhookConfiguration" => Some(Kind::Validating),
            _ => None,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Kind::Mutating => "MutatingWebhookConfiguration",
            Kind::Validating => "ValidatingWebhookConfiguration",
        }
    }

    fn resource(self) -> ApiResource {
        match self {
            Kind::Mutating => ApiResource::erase::<MutatingWebhookConfiguration>(&()),
            Kind::Validating => ApiResource::erase::<ValidatingWebhookConfiguration>(&()),
        }
    }
}

/// The configurations of `docs` (the registration file's documents) as apply bodies: apiVersion,
/// kind, name and webhooks, nothing else. A webhook without a caBundle gets `bundle` (PEM), the
/// CA poolguard manages itself, when there is one; one that has a caBundle (the chart's
/// `certificates.mode: provided`) keeps it. Anything that is not a webhook configuration with a
/// name and a list of webhooks is an error.
pub fn desired(docs: &[Value], bundle: Option<&str>) -> Result<Vec<Desired>> {
    let encoded = bundle.map(|pem| base64::engine::general_purpose::STANDARD.encode(pem));
    let mut out: Vec<Desired> = Vec::new();
    for (i, doc) in docs.iter().enumerate() {
        let kind_text = doc.get("kind").and_then(Value::as_str).unwrap_or("");
        let Some(kind) = Kind::of(kind_text) else {
            bail!("document {}: kind {kind_text:?} is not a MutatingWebhookConfiguration or ValidatingWebhookConfiguration", i + 1);
        };
        let Some(name) = doc.pointer("/metadata/name").and_then(Value::as_str) else {
            bail!(
                "document {}: a {} without metadata.name",
                i + 1,
                kind.name()
            );
        };
        if out.iter().any(|d| d.kind == kind && d.name == name) {
            bail!(
                "document {}: {} {name:?} is given twice",
                i + 1,
                kind.name()
            );
        }
        let Some(webhooks) = doc.get("webhooks").and_then(Value::as_array) else {
            bail!("{} {name:?}: webhooks must be a list", kind.name());
        };
        let mut webhooks = webhooks.clone();
        for webhook in &mut webhooks {
            let Some(client) = webhook
                .get_mut("clientConfig")
                .and_then(Value::as_object_mut)
            else {
                bail!("{} {name:?}: a webhook without clientConfig", kind.name());
            };
            if let (None, Some(encoded)) = (client.get("caBundle"), &encoded) {
                client.insert("caBundle".to_string(), json!(encoded));
            }
        }
        out.push(Desired {
            kind,
            name: name.to_string(),
            body: json!({
                "apiVersion": "admissionregistration.k8s.io/v1",
                "kind": kind.name(),
                "metadata": {"name": name},
                "webhooks": webhooks,
            }),
        });
    }
    Ok(out)
}

/// The Services (namespace, name) the webhooks of `desired` call, each once.
pub fn services(desired: &[Desired]) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = Vec::new();
    for d in desired {
        for webhook in d.body["webhooks"].as_array().into_iter().flatten() {
            let service = &webhook["clientConfig"]["service"];
            if let (Some(ns), Some(name)) =
                (service["namespace"].as_str(), service["name"].as_str())
            {
                let key = (ns.to_string(), name.to_string());
                if !out.contains(&key) {
                    out.push(key);
                }
            }
        }
    }
    out
}

/// The resources of the pod and workload webhooks, which the native objects decide.
const POD_AND_WORKLOAD_RESOURCES: [&str; 9] = [
    "pods",
    "replicationcontrollers",
    "deployments",
    "replicasets",
    "statefulsets",
    "daemonsets",
    "jobs",
    "cronjobs",
    "*",
];

/// Whether a webhook is decided on pods or workloads: one of its rules names such a resource
/// (or a subresource of one, or every resource). The others — pool authority on namespaces,
/// PolicyExceptions being written — stay registered whatever the native objects decide.
fn on_pods_or_workloads(webhook: &Value) -> bool {
    webhook["rules"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|rule| {
            rule["resources"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .any(|r| {
                    let resource = r.split('/').next().unwrap_or(r);
                    POD_AND_WORKLOAD_RESOURCES.contains(&resource)
                })
        })
}

/// `desired` without its pod and workload webhooks.
pub fn without_pod_and_workload_webhooks(desired: &[Desired]) -> Vec<Desired> {
    desired
        .iter()
        .cloned()
        .map(|mut d| {
            if let Some(webhooks) = d.body["webhooks"].as_array_mut() {
                webhooks.retain(|w| !on_pods_or_workloads(w));
            }
            d
        })
        .collect()
}

/// Whether an EndpointSlice lists an endpoint that is ready. An unset `ready` is unknown, which
/// the API asks consumers to take as ready.
pub fn has_ready_endpoint(slices: &[EndpointSlice]) -> bool {
    slices.iter().any(|slice| {
        slice
            .endpoints
            .iter()
            .flatten()
            .any(|e| e.conditions.as_ref().and_then(|c| c.ready).unwrap_or(true))
    })
}

/// The registration loop of one replica.
pub struct Registrar {
    client: Client,
    file: PathBuf,
    /// The CA bundle poolguard manages (`--manage-certs`), kept current by its renewals.
    bundle: Option<Arc<ArcSwap<String>>>,
    fallback: Option<Fallback>,
    settling: Settling,
    /// Counts the webhooks removed because poolguard did not write them.
    removed: prometheus_client::metrics::counter::Counter,
}

impl Registrar {
    pub fn new(
        client: Client,
        file: PathBuf,
        bundle: Option<Arc<ArcSwap<String>>>,
        fallback: Option<Fallback>,
        removed: prometheus_client::metrics::counter::Counter,
    ) -> Registrar {
        Registrar {
            client,
            file,
            bundle,
            fallback,
            settling: Settling::default(),
            removed,
        }
    }

    /// Reads the file now: a file that does not load is a start-up error.
    pub fn check(file: &Path) -> Result<()> {
        desired(&read(file)?, None).map(drop)
    }

    /// Applies until `stop`: every [`WAITING`] until the first registration, then every
    /// [`RECHECK`]; with [`Fallback`], every [`FALLBACK_RECHECK`] (and only while leading). A
    /// failed step is logged and tried again.
    pub async fn run(mut self, stop: CancellationToken) {
        let mut registered = false;
        let mut last_error = String::new();
        loop {
            match self.step().await {
                Ok(Step::NotLeader) => {
                    registered = false;
                    last_error.clear();
                }
                Ok(Step::Registered) => {
                    if !registered {
                        tracing::info!(file = %self.file.display(), "webhooks registered: poolguard's webhook configurations are in effect");
                    }
                    registered = true;
                    last_error.clear();
                }
                Ok(Step::NoEndpoint(service)) => {
                    if last_error != service {
                        tracing::info!(%service, "waiting for a ready endpoint of the webhooks' Service before registering them");
                        last_error = service;
                    }
                }
                Err(e) => {
                    let error = format!("{e:#}");
                    if error != last_error {
                        tracing::warn!(%error, "registering the webhooks failed; trying again");
                        last_error = error;
                    }
                }
            }
            let wait = match (&self.fallback, registered) {
                (Some(_), _) => FALLBACK_RECHECK,
                (None, true) => RECHECK,
                (None, false) => WAITING,
            };
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tokio::time::sleep(wait) => {}
            }
        }
    }

    async fn step(&mut self) -> Result<Step> {
        if let Some(fallback) = &self.fallback {
            if !*fallback.leading.borrow() {
                self.settling = Settling::default();
                fallback.metrics.set_state(None);
                return Ok(Step::NotLeader);
            }
        }
        let bundle = self.bundle.as_ref().map(|b| b.load_full());
        let mut desired = desired(&read(&self.file)?, bundle.as_deref().map(String::as_str))?;
        for (namespace, name) in services(&desired) {
            let slices: Api<EndpointSlice> = Api::namespaced(self.client.clone(), &namespace);
            let listed = slices
                .list(&ListParams::default().labels(&format!("kubernetes.io/service-name={name}")))
                .await
                .with_context(|| {
                    format!("listing the EndpointSlices of Service {namespace}/{name}")
                })?;
            if !has_ready_endpoint(&listed.items) {
                return Ok(Step::NoEndpoint(format!("{namespace}/{name}")));
            }
        }
        // What poolguard writes, the webhooks the fallback leaves out included: an entry of its
        // configurations that is none of these was written by someone else.
        let written = desired.clone();
        let left_out = self.fallback.is_some() && self.native_decides_alone().await;
        if left_out {
            desired = without_pod_and_workload_webhooks(&desired);
        }
        for d in &desired {
            let api: Api<DynamicObject> = Api::all_with(self.client.clone(), &d.kind.resource());
            // The chart creates the configuration; poolguard only fills it (it may not create
            // webhook configurations).
            let Some(current) = api
                .get_opt(&d.name)
                .await
                .with_context(|| format!("reading {} {}", d.kind.name(), d.name))?
            else {
                bail!(
                    "{} {} does not exist: the chart creates it (with no webhooks) and poolguard fills it in",
                    d.kind.name(),
                    d.name
                );
            };
            let whole = written
                .iter()
                .find(|w| w.kind == d.kind && w.name == d.name);
            let foreign = foreign_webhooks(&current.data, whole.unwrap_or(d));
            if !foreign.is_empty() {
                api.patch(
                    &d.name,
                    &PatchParams::default(),
                    &Patch::Json::<()>(removal(&foreign)),
                )
                .await
                .with_context(|| {
                    format!(
                        "removing webhooks poolguard did not write from {} {}",
                        d.kind.name(),
                        d.name
                    )
                })?;
                for webhook in &foreign {
                    tracing::warn!(
                        configuration = %format!("{} {}", d.kind.name(), d.name),
                        webhook = %webhook.name,
                        sends_to = %webhook.destination,
                        "removed a webhook poolguard did not write from its webhook configuration: someone who may patch it added it"
                    );
                    self.removed.inc();
                }
            }
            api.patch(
                &d.name,
                &PatchParams::apply(FIELD_MANAGER).force(),
                &Patch::Apply(&d.body),
            )
            .await
            .with_context(|| format!("applying the webhooks of {} {}", d.kind.name(), d.name))?;
        }
        if let Some(fallback) = &self.fallback {
            fallback.metrics.set_state(Some(!left_out));
        }
        Ok(Step::Registered)
    }

    /// With `--native-fallback`: whether the native objects have decided every pod and workload
    /// request alone for [`SETTLE`]; logs each change of the answer once.
    async fn native_decides_alone(&mut self) -> bool {
        let Some(fallback) = &self.fallback else {
            return false;
        };
        let rules = (fallback.rules)();
        let generated = native::generate(&rules, &fallback.options);
        let mut needed = match native_objects::read_managed(&self.client).await {
            Ok(cluster) => native::in_force::webhook_needed(&generated, &cluster),
            Err(e) => Some(format!("reading the native objects failed: {e:#}")),
        };
        if needed.is_none() {
            needed = canary(&self.client, &fallback.canary, &rules, &generated)
                .await
                .err();
            if let Some(why) = &needed {
                fallback.metrics.canary_failures.inc();
                tracing::debug!(%why, "native fallback: a canary pass failed");
            }
        }
        let needed = match (needed, self.settling.since) {
            (Some(why), _) => {
                self.settling.since = None;
                Some(why)
            }
            (None, Some(since)) if since.elapsed() >= SETTLE => None,
            (None, since) => {
                self.settling.since = since.or_else(|| Some(std::time::Instant::now()));
                Some(format!(
                    "the native objects read back as generated; waiting {} s for the API server to use them",
                    SETTLE.as_secs()
                ))
            }
        };
        if self.settling.logged.as_ref() != Some(&needed) {
            match &needed {
                None => tracing::info!("native fallback: the pod and workload webhooks are left out of the registration; the native admission objects decide those requests"),
                Some(why) => tracing::info!(%why, "native fallback: the pod and workload webhooks are registered"),
            }
            self.settling.logged = Some(needed.clone());
        }
        needed.is_none()
    }
}

/// Creates the canary pods with a server-side dry run and judges each answer: `Err` says why
/// the API server is not shown to enforce the native objects.
async fn canary(
    client: &Client,
    settings: &CanarySettings,
    rules: &poolguard_core::ruleset::RuleSet,
    generated: &native::Native,
) -> std::result::Result<(), String> {
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let found = namespaces
        .get_opt(&settings.namespace)
        .await
        .map_err(|e| format!("reading the canary namespace {}: {e}", settings.namespace))?
        .ok_or_else(|| {
            format!(
                "the canary namespace {} does not exist (the chart creates it)",
                settings.namespace
            )
        })?;
    let labels = found.metadata.labels.unwrap_or_default();
    let canaries = native::canary::canaries(rules, &settings.namespace, &labels, &settings.image)?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &settings.namespace);
    let dry_run = PostParams {
        dry_run: true,
        field_manager: Some(FIELD_MANAGER.to_string()),
    };
    for c in &canaries {
        let pod: Pod = serde_json::from_value(c.pod.clone())
            .map_err(|e| format!("the canary pod does not read as a Pod: {e}"))?;
        match pods.create(&dry_run, &pod).await {
            Ok(stored) => {
                let stored = serde_json::to_value(&stored)
                    .map_err(|e| format!("the canary pod's answer: {e}"))?;
                native::canary::judge(c, native::canary::Answer::Admitted(&stored), generated)?;
            }
            Err(kube::Error::Api(status)) => {
                let answer = native::canary::Answer::Refused(&status.message);
                native::canary::judge(c, answer, generated)?;
            }
            Err(e) => return Err(format!("the canary dry run of {} failed: {e}", c.purpose)),
        }
    }
    Ok(())
}

/// A webhook in one of poolguard's configurations that the registration does not apply.
#[derive(Debug, Clone, PartialEq)]
pub struct Foreign {
    /// Its place in the configuration's list, and its name.
    pub index: usize,
    pub name: String,
    /// Where it sends requests: its `clientConfig.url`, or its Service.
    pub destination: String,
}

/// The webhooks of a configuration as read from the cluster (`data`: everything but
/// `metadata`) that `desired` does not name, in their order.
pub fn foreign_webhooks(data: &Value, desired: &Desired) -> Vec<Foreign> {
    let name = |w: &Value| {
        w.get("name")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string()
    };
    let ours: Vec<String> = desired.body["webhooks"]
        .as_array()
        .map(|list| list.iter().map(name).collect())
        .unwrap_or_default();
    let Some(current) = data.get("webhooks").and_then(Value::as_array) else {
        return Vec::new();
    };
    current
        .iter()
        .enumerate()
        .filter(|(_, w)| !ours.contains(&name(w)))
        .map(|(index, w)| {
            let client = &w["clientConfig"];
            let destination = match (client["url"].as_str(), client.get("service")) {
                (Some(url), _) => url.to_string(),
                (None, Some(service)) => format!(
                    "service {}/{}",
                    service["namespace"].as_str().unwrap_or(""),
                    service["name"].as_str().unwrap_or("")
                ),
                (None, None) => "nowhere".to_string(),
            };
            Foreign {
                index,
                name: name(w),
                destination,
            }
        })
        .collect()
}

/// A JSON patch that removes `foreign`, each only if it is still at its place (a `test` of its
/// name first: a list changed meanwhile makes the patch fail, and the next pass reads it again).
pub fn removal(foreign: &[Foreign]) -> json_patch::Patch {
    let mut ops = Vec::new();
    for webhook in foreign.iter().rev() {
        let at = format!("/webhooks/{}", webhook.index);
        ops.push(json!({"op": "test", "path": format!("{at}/name"), "value": webhook.name}));
        ops.push(json!({"op": "remove", "path": at}));
    }
    serde_json::from_value(Value::Array(ops)).expect("test and remove operations")
}

enum Step {
    /// `--native-fallback` and not the leader: the leader registers.
    NotLeader,
    Registered,
    /// This Service has no ready endpoint yet.
    NoEndpoint(String),
}

fn read(file: &Path) -> Result<Vec<Value>> {
    let text = std::fs::read_to_string(file)
        .with_context(|| format!("reading the webhooks to register, {}", file.display()))?;
    poolguard_core::documents::parse(&text, &file.display().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::discovery::v1::{Endpoint, EndpointConditions};

    fn config(kind: &str, name: &str, webhooks: Value) -> Value {
        json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": kind,
               "metadata": {"name": name, "labels": {"app": "poolguard"}}, "webhooks": webhooks})
    }

    fn webhook(name: &str, client: Value) -> Value {
        json!({"name": name, "clientConfig": client, "rules": [], "sideEffects": "None"})
    }

    #[test]
    fn the_apply_body_is_the_webhooks_with_the_managed_bundle_where_none_is_given() {
        let svc = json!({"service": {"namespace": "pg", "name": "poolguard", "path": "/mutate"}});
        let provided = json!({"url": "https://x/validate", "caBundle": "cHJvdmlkZWQ="});
        let docs = vec![
            config(
                "MutatingWebhookConfiguration",
                "m",
                json!([webhook("mutate.poolguard.io", svc.clone())]),
            ),
            config(
                "ValidatingWebhookConfiguration",
                "v",
                json!([webhook("validate.poolguard.io", provided.clone())]),
            ),
        ];
        let got = desired(&docs, Some("PEM")).unwrap();
        assert_eq!(got.len(), 2);
        assert_eq!((got[0].kind, got[0].name.as_str()), (Kind::Mutating, "m"));
        // Labels and annotations are the chart's: the body names only the webhooks.
        assert_eq!(got[0].body["metadata"], json!({"name": "m"}));
        assert_eq!(
            got[0].body["webhooks"][0]["clientConfig"]["caBundle"],
            json!("UEVN")
        );
        assert_eq!(
            got[0].body["webhooks"][0]["clientConfig"]["service"],
            svc["service"]
        );
        assert_eq!(got[1].body["webhooks"][0]["clientConfig"], provided);
        // Without a managed bundle nothing is added (cert-manager's injector owns it).
        let got = desired(&docs, None).unwrap();
        assert!(got[0].body["webhooks"][0]["clientConfig"]
            .get("caBundle")
            .is_none());
        assert_eq!(
            services(&got),
            vec![("pg".to_string(), "poolguard".to_string())]
        );
    }

    #[test]
    fn webhooks_poolguard_did_not_write_are_found_and_removed_by_a_guarded_patch() {
        let service = json!({"service": {"namespace": "poolguard", "name": "poolguard"}});
        let ours = desired(
            &[config(
                "ValidatingWebhookConfiguration",
                "poolguard-validating",
                json!([webhook("validate.poolguard.io", service.clone())]),
            )],
            None,
        )
        .unwrap();
        let mut cluster = json!({"webhooks": [
            webhook("steal.example.com", json!({"url": "https://steal.example/x"})),
            webhook("validate.poolguard.io", service.clone()),
            webhook("other.example.com", json!({"service": {"namespace": "x", "name": "y"}})),
        ]});
        let foreign = foreign_webhooks(&cluster, &ours[0]);
        assert_eq!(
            foreign,
            vec![
                Foreign {
                    index: 0,
                    name: "steal.example.com".into(),
                    destination: "https://steal.example/x".into()
                },
                Foreign {
                    index: 2,
                    name: "other.example.com".into(),
                    destination: "service x/y".into()
                },
            ]
        );
        json_patch::patch(&mut cluster, &removal(&foreign)).unwrap();
        assert_eq!(
            cluster,
            json!({"webhooks": [webhook("validate.poolguard.io", service.clone())]})
        );
        assert!(foreign_webhooks(&cluster, &ours[0]).is_empty());
        assert!(foreign_webhooks(&json!({}), &ours[0]).is_empty());
        // A list that changed since it was read is left alone: the patch fails as a whole.
        let mut moved = json!({"webhooks": [
            webhook("validate.poolguard.io", service.clone()),
            webhook("steal.example.com", json!({"url": "https://steal.example/x"})),
        ]});
        let before = moved.clone();
        assert!(json_patch::patch(&mut moved, &removal(&foreign)).is_err());
        assert_eq!(moved, before);
    }

    #[test]
    fn a_file_that_is_not_webhook_configurations_is_an_error() {
        let ok = config("MutatingWebhookConfiguration", "m", json!([]));
        for (docs, says) in [
            (
                vec![json!({"kind": "ConfigMap", "metadata": {"name": "x"}})],
                "kind \"ConfigMap\"",
            ),
            (
                vec![json!({"kind": "MutatingWebhookConfiguration", "webhooks": []})],
                "without metadata.name",
            ),
            (vec![ok.clone(), ok.clone()], "given twice"),
            (
                vec![
                    json!({"kind": "MutatingWebhookConfiguration", "metadata": {"name": "m"}, "webhooks": {}}),
                ],
                "must be a list",
            ),
            (
                vec![config(
                    "MutatingWebhookConfiguration",
                    "m",
                    json!([{"name": "a"}]),
                )],
                "without clientConfig",
            ),
        ] {
            let error = format!("{:#}", desired(&docs, None).unwrap_err());
            assert!(error.contains(says), "{error} lacks {says}");
        }
    }

    #[test]
    fn the_fallback_leaves_out_only_the_pod_and_workload_webhooks() {
        let rules = |resources: Value| json!([{"apiGroups": [""], "resources": resources}]);
        let svc = json!({"url": "https://x/validate"});
        let mut mutate = webhook("mutate.poolguard.io", svc.clone());
        mutate["rules"] = rules(json!(["pods"]));
        let mut validate = webhook("validate.poolguard.io", svc.clone());
        validate["rules"] = rules(json!(["pods", "pods/ephemeralcontainers"]));
        let mut authority = webhook("pool-authority.poolguard.io", svc.clone());
        authority["rules"] = rules(json!(["namespaces", "namespaces/*"]));
        let mut exceptions = webhook("exceptions.poolguard.io", svc.clone());
        exceptions["rules"] =
            json!([{"apiGroups": ["poolguard.io"], "resources": ["policyexceptions"]}]);
        let mut workloads = webhook("workloads.example", svc.clone());
        workloads["rules"] = json!([{"apiGroups": ["apps"], "resources": ["deployments/scale"]}]);
        let docs = vec![
            config("MutatingWebhookConfiguration", "m", json!([mutate])),
            config(
                "ValidatingWebhookConfiguration",
                "v",
                json!([validate, authority.clone(), exceptions.clone(), workloads]),
            ),
        ];
        let kept = without_pod_and_workload_webhooks(&desired(&docs, None).unwrap());
        // Both configurations are still applied: the mutating one empty, which removes its webhook.
        assert_eq!(kept.len(), 2);
        assert_eq!(kept[0].body["webhooks"], json!([]));
        assert_eq!(kept[1].body["webhooks"], json!([authority, exceptions]));
    }

    #[test]
    fn only_a_ready_or_unknown_endpoint_counts() {
        let slice = |ready: Vec<Option<bool>>| EndpointSlice {
            address_type: "IPv4".to_string(),
            endpoints: Some(
                ready
                    .into_iter()
                    .map(|r| Endpoint {
                        addresses: vec!["192.0.2.1".to_string()],
                        conditions: Some(EndpointConditions {
                            ready: r,
                            ..Default::default()
                        }),
                        ..Default::default()
                    })
                    .collect(),
            ),
            ..Default::default()
        };
        assert!(!has_ready_endpoint(&[]));
        assert!(!has_ready_endpoint(&[slice(vec![])]));
        assert!(!has_ready_endpoint(&[slice(vec![
            Some(false),
            Some(false)
        ])]));
        assert!(has_ready_endpoint(&[
            slice(vec![Some(false)]),
            slice(vec![Some(true)])
        ]));
        assert!(has_ready_endpoint(&[slice(vec![None])]));
    }
}
