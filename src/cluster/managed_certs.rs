//! Self-managed certificates (`serve --manage-certs`): a CA and serving certificate kept in a
//! Secret, renewed before expiry, with the CA bundle injected into poolguard's own webhook
//! configurations. Safe with several replicas: every write carries the resourceVersion it was
//! planned from, and a replica that loses a race reads again.

use std::collections::BTreeMap;

use anyhow::{bail, Context, Result};
use base64::Engine as _;
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::ByteString;
use kube::api::{Api, ApiResource, DynamicObject, ObjectMeta, Patch, PatchParams, PostParams};
use kube::{Client, Resource};
use serde_json::{json, Value};

use crate::certs::pacing::{Outcome, Pace, Pacing};
use crate::certs::rotation::{self as plan, Settings, Step, Stored};

/// Where the Secret records when its bundle was seen in every webhook configuration.
pub const PUBLISHED_ANNOTATION: &str = "poolguard.io/ca-bundle-published-at";
/// The field manager of poolguard's writes.
pub const FIELD_MANAGER: &str = "poolguard";

pub struct SelfCert {
    secrets: Api<Secret>,
    secret_name: String,
    /// Mutating, then validating.
    kinds: [WebhookKind; 2],
    webhook_configs: Vec<String>,
    settings: Settings,
}

/// One kind of webhook configuration. Configurations are read untyped: a field that this
/// build's k8s-openapi does not know (the cluster may be newer) is never parsed, so it can never
/// be lost on a write.
struct WebhookKind {
    kind: String,
    api: Api<DynamicObject>,
}

impl WebhookKind {
    fn of<K: Resource<DynamicType = ()>>(client: &Client) -> WebhookKind {
        let resource = ApiResource::erase::<K>(&());
        WebhookKind {
            kind: resource.kind.clone(),
            api: Api::all_with(client.clone(), &resource),
        }
    }
}

impl SelfCert {
    pub fn new(
        client: Client,
        namespace: &str,
        secret_name: &str,
        webhook_configs: Vec<String>,
        settings: Settings,
    ) -> SelfCert {
        SelfCert {
            secrets: Api::namespaced(client.clone(), namespace),
            secret_name: secret_name.to_string(),
            kinds: [
                WebhookKind::of::<MutatingWebhookConfiguration>(&client),
                WebhookKind::of::<ValidatingWebhookConfiguration>(&client),
            ],
            webhook_configs,
            settings,
        }
    }

    /// One step towards a valid, published certificate. Returns what is stored afterwards and
    /// whether another step is due at once. A named webhook configuration that does not exist is
    /// an error (before anything is written).
    pub async fn step(&self) -> Result<(Option<Stored>, bool)> {
        let secret = self
            .secrets
            .get_opt(&self.secret_name)
            .await
            .context("reading the certificate Secret")?;
        let stored = secret.as_ref().map(stored_of);
        let published = match &stored {
            Some(s) => self.published(&s.bundle).await?,
            None => false,
        };
        let now = now();
        match plan::plan(stored.as_ref(), published, now, &self.settings)? {
            Step::Idle => Ok((stored, false)),
            Step::Publish => {
                let mut s = stored.context("nothing stored to publish")?;
                if !self.publish(&s.bundle).await? {
                    tracing::info!(
                        "a webhook configuration changed while the CA bundle was injected; reading again"
                    );
                    return Ok((None, true));
                }
                s.published_at = Some(now);
                tracing::info!(secret = %self.secret_name, "CA bundle published into the webhook configurations");
                self.write(&s, secret).await
            }
            Step::Store(s) => {
                tracing::info!(secret = %self.secret_name, "storing a new certificate or CA bundle");
                self.write(&s, secret).await
            }
        }
    }

    /// Creates or replaces the Secret; a lost race (409) is not an error, just a reason to read again.
    ///
    /// The Secret is written typed, as the object just read with our keys set: Secret and
    /// ObjectMeta have been stable for many Kubernetes versions, and reusing the read object keeps
    /// the labels, annotations, owner references and other data keys that someone else set.
    async fn write(
        &self,
        stored: &Stored,
        current: Option<Secret>,
    ) -> Result<(Option<Stored>, bool)> {
        let mut secret = current.unwrap_or_else(|| Secret {
            metadata: ObjectMeta {
                name: Some(self.secret_name.clone()),
                ..ObjectMeta::default()
            },
            type_: Some("kubernetes.io/tls".to_string()),
            ..Secret::default()
        });
        let data = secret.data.get_or_insert_with(BTreeMap::new);
        for (key, value) in [
            ("ca.crt", &stored.bundle),
            ("ca.key", &stored.ca_key),
            ("tls.crt", &stored.tls_crt),
            ("tls.key", &stored.tls_key),
        ] {
            data.insert(key.to_string(), ByteString(value.clone().into_bytes()));
        }
        let annotations = secret
            .metadata
            .annotations
            .get_or_insert_with(BTreeMap::new);
        match stored.published_at {
            Some(at) => annotations.insert(PUBLISHED_ANNOTATION.to_string(), at.to_string()),
            None => annotations.remove(PUBLISHED_ANNOTATION),
        };
        let result = if secret.metadata.resource_version.is_some() {
            self.secrets
                .replace(&self.secret_name, &PostParams::default(), &secret)
                .await
        } else {
            self.secrets.create(&PostParams::default(), &secret).await
        };
        match result {
            Ok(_) => Ok((Some(stored.clone()), true)),
            Err(kube::Error::Api(e)) if e.code == 409 => {
                tracing::info!(
                    "another replica changed the certificate Secret first; reading it again"
                );
                Ok((None, true))
            }
            Err(e) => Err(e).context("writing the certificate Secret"),
        }
    }

    /// The webhook configurations called `name`: a mutating one, a validating one, or both;
    /// neither is an error.
    async fn configs(&self, name: &str) -> Result<Vec<(&WebhookKind, DynamicObject)>> {
        let mut found = Vec::new();
        for kind in &self.kinds {
            let config = kind
                .api
                .get_opt(name)
                .await
                .with_context(|| format!("reading {} {name:?}", kind.kind))?;
            found.extend(config.map(|c| (kind, c)));
        }
        if found.is_empty() {
            bail!(
                "webhook configuration {name:?} not found: there is neither a \
                 MutatingWebhookConfiguration nor a ValidatingWebhookConfiguration of that name \
                 (check --webhook-configs); the CA bundle cannot be published"
            );
        }
        Ok(found)
    }

    /// All webhooks of every named configuration carry exactly `bundle`. Every name is looked
    /// up, so that a missing configuration is an error before anything is published.
    async fn published(&self, bundle: &str) -> Result<bool> {
        let mut published = true;
        for name in &self.webhook_configs {
            for (_, config) in self.configs(name).await? {
                published &= lacking(&config, bundle).is_empty();
            }
        }
        Ok(published)
    }

    /// Puts `bundle` into every webhook of every named configuration. `Ok(false)`: a
    /// configuration changed between reading and patching it (another replica, a chart upgrade);
    /// read again.
    ///
    /// Why a JSON patch: it names exactly what it changes, `/webhooks/N/clientConfig/caBundle`,
    /// so nothing else in the configuration is ever written back (no field this build does not
    /// know, nothing another tool set), and its `test` of the resourceVersion applies it only to
    /// the version that was read, so replicas publishing different bundles cannot interleave: the
    /// loser's patch fails and it reads again. Server-side apply would also send only caBundle,
    /// but would make poolguard the field's owner: a chart or another injector that sets caBundle
    /// would then conflict with every apply unless forced, and forcing would hide exactly the
    /// fight that the loop's backoff is there to notice.
    async fn publish(&self, bundle: &str) -> Result<bool> {
        for name in &self.webhook_configs {
            for (kind, config) in self.configs(name).await? {
                let Some(patch) = ca_bundle_patch(&config, bundle)? else {
                    continue;
                };
                let lost = match self.patch_json(kind, name, &patch).await {
                    Ok(()) => false,
                    Err(kube::Error::Api(status)) if status.code == 409 => true,
                    // A failed `test` is answered 422 (Invalid); tell it from a real rejection
                    // by whether the configuration has moved on since it was read.
                    Err(kube::Error::Api(status))
                        if status.code == 422 && self.moved_on(kind, name, &config).await =>
                    {
                        true
                    }
                    Err(e) => {
                        return Err(e).with_context(|| {
                            format!("injecting the CA bundle into {} {name:?}", kind.kind)
                        })
                    }
                };
                if lost {
                    return Ok(false);
                }
            }
        }
        Ok(true)
    }

    async fn patch_json(
        &self,
        kind: &WebhookKind,
        name: &str,
        patch: &Value,
    ) -> std::result::Result<(), kube::Error> {
        let patch: json_patch::Patch =
            serde_json::from_value(patch.clone()).map_err(kube::Error::SerdeError)?;
        let params = PatchParams {
            field_manager: Some(FIELD_MANAGER.to_string()),
            ..PatchParams::default()
        };
        kind.api
            .patch(name, &params, &Patch::Json::<()>(patch))
            .await
            .map(drop)
    }

    /// The configuration is gone or has a newer resourceVersion than `read`.
    async fn moved_on(&self, kind: &WebhookKind, name: &str, read: &DynamicObject) -> bool {
        match kind.api.get_opt(name).await {
            Ok(Some(current)) => {
                current.metadata.resource_version != read.metadata.resource_version
            }
            Ok(None) => true,
            Err(_) => false,
        }
    }

    /// Steps until a serving certificate is stored (start-up), paced like [`SelfCert::run`];
    /// returns it and the pace for `run` to continue at.
    ///
    /// When a step fails but the Secret already holds a serving certificate that is valid now,
    /// that certificate is returned: serving it does not depend on publishing its CA bundle, and
    /// a missing or unwritable webhook configuration must not keep every replica from starting.
    /// `run` keeps retrying the publication.
    pub async fn first_certificate(&self, pacing: &Pacing) -> (Stored, Pace) {
        let mut pace = Pace::default();
        loop {
            if !pace.wait.is_zero() {
                tokio::time::sleep(pace.wait).await;
            }
            let outcome = match self.step().await {
                Ok((Some(s), again)) if !s.tls_crt.is_empty() => {
                    return (s, pacing.next(outcome_of(again), pace))
                }
                Ok((_, again)) => outcome_of(again),
                Err(e) => {
                    let error = format!("{e:#}");
                    pace = pacing.next(Outcome::Failed, pace);
                    if let Some(s) = self.valid_stored().await {
                        tracing::warn!(%error, retry_in = %humantime::format_duration(pace.wait), "serving the stored certificate; the certificate check failed");
                        return (s, pace);
                    }
                    tracing::warn!(%error, retry_in = %humantime::format_duration(pace.wait), "no serving certificate yet");
                    continue;
                }
            };
            pace = pacing.next(outcome, pace);
        }
    }

    /// Keeps the certificate renewed and its bundle published, forever: one step at a time,
    /// paced by `pacing` (starting with `pace`, as `first_certificate` returned it). Every stored
    /// certificate a step sees goes to `on_stored`.
    pub async fn run(&self, pacing: &Pacing, mut pace: Pace, mut on_stored: impl FnMut(Stored)) {
        loop {
            tokio::time::sleep(pace.wait).await;
            let (outcome, error) = match self.step().await {
                Ok((stored, again)) => {
                    if let Some(stored) = stored {
                        on_stored(stored);
                    }
                    (outcome_of(again), None)
                }
                Err(e) => (Outcome::Failed, Some(format!("{e:#}"))),
            };
            pace = pacing.next(outcome, pace);
            let retry_in = humantime::format_duration(pace.wait);
            if let Some(error) = error {
                tracing::warn!(%error, %retry_in, "certificate check failed");
            } else if outcome == Outcome::Again && pace.backing_off() {
                tracing::warn!(%retry_in, "the certificate steps do not settle (is something else writing the Secret or the webhook configurations?); slowing down");
            }
        }
    }

    /// The stored certificate, when its serving certificate is valid now.
    async fn valid_stored(&self) -> Option<Stored> {
        let secret = self.secrets.get_opt(&self.secret_name).await.ok()??;
        let stored = stored_of(&secret);
        let serving = plan::facts(&stored.tls_crt).ok()?.into_iter().next()?;
        let now = now();
        (serving.not_before <= now && now < serving.not_after && !stored.tls_key.is_empty())
            .then_some(stored)
    }
}

fn outcome_of(again: bool) -> Outcome {
    if again {
        Outcome::Again
    } else {
        Outcome::Settled
    }
}

fn now() -> i64 {
    time::OffsetDateTime::now_utc().unix_timestamp()
}

/// The webhooks of `config` (with their index) whose caBundle is not exactly `bundle`.
fn lacking<'a>(config: &'a DynamicObject, bundle: &str) -> Vec<(usize, &'a Value)> {
    let carries = |webhook: &Value| {
        webhook
            .pointer("/clientConfig/caBundle")
            .and_then(Value::as_str)
            .and_then(|b| base64::engine::general_purpose::STANDARD.decode(b).ok())
            .is_some_and(|b| b == bundle.as_bytes())
    };
    config
        .data
        .get("webhooks")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .enumerate()
        .filter(|(_, w)| !carries(w))
        .collect()
}

/// The JSON patch that puts `bundle` into the webhooks of `config` lacking it, only if the
/// configuration is still the version read (and each webhook still at its index); `None` when
/// every webhook carries it already. It writes nothing but `webhooks[*].clientConfig.caBundle`.
fn ca_bundle_patch(config: &DynamicObject, bundle: &str) -> Result<Option<Value>> {
    let lacking = lacking(config, bundle);
    if lacking.is_empty() {
        return Ok(None);
    }
    let version = config
        .metadata
        .resource_version
        .as_deref()
        .context("the webhook configuration has no resourceVersion")?;
    let encoded = base64::engine::general_purpose::STANDARD.encode(bundle);
    let mut ops =
        vec![json!({"op": "test", "path": "/metadata/resourceVersion", "value": version})];
    for (i, webhook) in lacking {
        ops.push(json!({"op": "test", "path": format!("/webhooks/{i}/name"), "value": webhook.get("name")}));
        ops.push(json!({"op": "add", "path": format!("/webhooks/{i}/clientConfig/caBundle"), "value": encoded}));
    }
    Ok(Some(Value::Array(ops)))
}

fn stored_of(secret: &Secret) -> Stored {
    let field = |key: &str| {
        secret
            .data
            .as_ref()
            .and_then(|d| d.get(key))
            .map(|b| String::from_utf8_lossy(&b.0).into_owned())
            .unwrap_or_default()
    };
    Stored {
        bundle: field("ca.crt"),
        ca_key: field("ca.key"),
        tls_crt: field("tls.crt"),
        tls_key: field("tls.key"),
        published_at: secret
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(PUBLISHED_ANNOTATION))
            .and_then(|v| v.parse().ok()),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use hyper::http::Method;

    use super::*;
    use crate::cluster::fake_api::{FakeApi, MUTATING, NAMESPACE, SECRETS, VALIDATING};

    const SECRET: &str = "poolguard-tls";

    fn settings() -> Settings {
        Settings {
            ca_validity: Duration::from_secs(30 * 24 * 3600),
            serving_validity: Duration::from_secs(7 * 24 * 3600),
            publish_grace: Duration::from_secs(30),
            dns_names: vec!["poolguard.poolguard.svc".into()],
            ips: vec![],
        }
    }

    fn selfcert(api: &FakeApi, configs: &[&str]) -> SelfCert {
        let configs = configs.iter().map(ToString::to_string).collect();
        SelfCert::new(api.client(), NAMESPACE, SECRET, configs, settings())
    }

    fn webhook(name: &str, path: &str) -> Value {
        json!({
            "name": name,
            "clientConfig": {"service": {"namespace": "poolguard", "name": "poolguard", "path": path}},
            "sideEffects": "None",
            "admissionReviewVersions": ["v1"],
        })
    }

    /// A mutating and a validating configuration called `name`, with fields that k8s-openapi
    /// does not know, and one webhook carrying an old bundle.
    fn add_configs(api: &FakeApi, name: &str) {
        let mut first = webhook("mutate.poolguard.io", "/mutate");
        first["futureField"] = json!({"kept": true});
        first["clientConfig"]["futureClientField"] = json!(7);
        let mut second = webhook("second.poolguard.io", "/mutate");
        second["clientConfig"]["caBundle"] = json!("b2xkCg==");
        let mut state = api.state();
        state.put(
            MUTATING,
            json!({
                "apiVersion": "admissionregistration.k8s.io/v1",
                "kind": "MutatingWebhookConfiguration",
                "metadata": {"name": name, "labels": {"app": "poolguard"}},
                "futureTopLevel": ["kept"],
                "webhooks": [first, second],
            }),
        );
        state.put(
            VALIDATING,
            json!({
                "apiVersion": "admissionregistration.k8s.io/v1",
                "kind": "ValidatingWebhookConfiguration",
                "metadata": {"name": name},
                "webhooks": [webhook("validate.poolguard.io", "/validate")],
            }),
        );
    }

    fn object(api: &FakeApi, path: &str) -> Value {
        api.state().objects[path].clone()
    }

    fn b64(text: &str) -> Value {
        json!(base64::engine::general_purpose::STANDARD.encode(text))
    }

    #[tokio::test]
    async fn a_fresh_start_stores_then_patches_only_the_ca_bundles() {
        let api = FakeApi::default();
        add_configs(&api, "poolguard");
        let mutating = format!("{MUTATING}/poolguard");
        let validating = format!("{VALIDATING}/poolguard");
        let (mutating_before, validating_before) =
            (object(&api, &mutating), object(&api, &validating));
        let selfcert = selfcert(&api, &["poolguard"]);

        let (first, again) = selfcert.step().await.unwrap();
        let first = first.unwrap();
        assert!(again && !first.tls_crt.is_empty());
        assert_eq!(api.state().count(&Method::POST, SECRETS), 1);
        assert_eq!(api.state().count(&Method::PATCH, "/"), 0);

        let (published, again) = selfcert.step().await.unwrap();
        let published = published.unwrap();
        assert!(again && published.published_at.is_some());
        assert_eq!(published.bundle, first.bundle);
        let (settled, again) = selfcert.step().await.unwrap();
        assert!(!again);
        assert_eq!(settled.as_ref(), Some(&published));

        // Two JSON patches, one per configuration, that test before they touch anything and
        // write nothing but caBundle; no other write to a webhook configuration.
        let state = api.state();
        let patches: Vec<_> = state
            .requests
            .iter()
            .filter(|r| r.method == Method::PATCH)
            .collect();
        assert_eq!(patches.len(), 2, "{patches:#?}");
        assert_eq!(state.count(&Method::PUT, "/apis"), 0);
        assert_eq!(state.count(&Method::POST, "/apis"), 0);
        let bundle = b64(&first.bundle);
        let ops = |version: &Value, hooks: &[&str]| {
            let mut ops =
                vec![json!({"op": "test", "path": "/metadata/resourceVersion", "value": version})];
            for (i, name) in hooks.iter().enumerate() {
                ops.push(
                    json!({"op": "test", "path": format!("/webhooks/{i}/name"), "value": name}),
                );
                ops.push(json!({"op": "add", "path": format!("/webhooks/{i}/clientConfig/caBundle"), "value": bundle}));
            }
            Value::Array(ops)
        };
        let (m, v) = (&mutating_before["metadata"], &validating_before["metadata"]);
        for (patch, path, body) in [
            (
                patches[0],
                &mutating,
                ops(
                    &m["resourceVersion"],
                    &["mutate.poolguard.io", "second.poolguard.io"],
                ),
            ),
            (
                patches[1],
                &validating,
                ops(&v["resourceVersion"], &["validate.poolguard.io"]),
            ),
        ] {
            assert_eq!(&patch.path, path);
            assert_eq!(
                patch.content_type.as_deref(),
                Some("application/json-patch+json")
            );
            assert!(
                patch
                    .query
                    .split('&')
                    .any(|p| p == "fieldManager=poolguard"),
                "{}",
                patch.query
            );
            assert_eq!(patch.body.as_ref(), Some(&body));
        }

        // Each configuration is what it was, fields unknown to k8s-openapi included, but for
        // its caBundles (and the resourceVersion the server gave it).
        for (path, mut expected) in [
            (&mutating, mutating_before),
            (&validating, validating_before),
        ] {
            let after = &state.objects[path];
            for hook in expected["webhooks"].as_array_mut().unwrap() {
                hook["clientConfig"]["caBundle"] = bundle.clone();
            }
            expected["metadata"]["resourceVersion"] = after["metadata"]["resourceVersion"].clone();
            assert_eq!(after, &expected);
        }
        assert_eq!(
            state.objects[&mutating]["webhooks"][0]["futureField"]["kept"],
            true
        );

        // The Secret: a TLS Secret with the four keys and the publication time.
        let secret = &state.objects[&format!("{SECRETS}/{SECRET}")];
        assert_eq!(secret["type"], "kubernetes.io/tls");
        assert_eq!(secret["data"]["ca.crt"], b64(&first.bundle));
        assert_eq!(secret["data"]["tls.crt"], b64(&first.tls_crt));
        assert_eq!(
            secret["metadata"]["annotations"][PUBLISHED_ANNOTATION],
            json!(published.published_at.unwrap().to_string())
        );
    }

    #[tokio::test]
    async fn the_secret_keeps_what_others_set() {
        let api = FakeApi::default();
        add_configs(&api, "poolguard");
        let selfcert = selfcert(&api, &["poolguard"]);
        selfcert.step().await.unwrap();
        let path = format!("{SECRETS}/{SECRET}");
        {
            let mut state = api.state();
            let mut secret = state.objects[&path].clone();
            secret["metadata"]["labels"] = json!({"team": "platform"});
            secret["metadata"]["annotations"] = json!({"backup": "daily"});
            secret["data"]["extra"] = b64("theirs");
            state.put(SECRETS, secret);
        }
        selfcert.step().await.unwrap(); // publishes, then records it in the Secret
        let secret = object(&api, &path);
        assert_eq!(secret["metadata"]["labels"]["team"], "platform");
        assert_eq!(secret["metadata"]["annotations"]["backup"], "daily");
        assert!(secret["metadata"]["annotations"][PUBLISHED_ANNOTATION].is_string());
        assert_eq!(secret["data"]["extra"], b64("theirs"));
    }

    #[tokio::test(start_paused = true)]
    async fn a_missing_configuration_is_an_error_and_the_loop_backs_off() {
        let api = FakeApi::default();
        add_configs(&api, "poolguard");
        let selfcert = selfcert(&api, &["poolguard", "poolgaurd"]);
        let pacing = Pacing::new(Duration::from_secs(60));

        // Nothing stored yet: the first step stores a certificate without looking at the
        // configurations, and serving can start.
        let (first, pace) = selfcert.first_certificate(&pacing).await;
        assert!(!first.tls_crt.is_empty());
        assert_eq!(pace.wait, pacing.min_interval);
        assert_eq!(api.state().secret_writes(), 1);

        let error = format!("{:#}", selfcert.step().await.unwrap_err());
        assert!(
            error.contains("\"poolgaurd\" not found")
                && error.contains(
                    "neither a MutatingWebhookConfiguration nor a ValidatingWebhookConfiguration"
                ),
            "{error}"
        );
        // Nothing was written, and nothing claims the bundle is published.
        let steps_before = {
            let state = api.state();
            assert_eq!(state.secret_writes(), 1);
            assert_eq!(state.count(&Method::PATCH, "/"), 0);
            let secret = &state.objects[&format!("{SECRETS}/{SECRET}")];
            assert!(secret["metadata"]["annotations"][PUBLISHED_ANNOTATION].is_null());
            state.count(&Method::GET, SECRETS)
        };

        // Ten minutes of the loop (paused time): steps at 1 s, then 2, 4, 8, 16, 32 and 60 s
        // apart: t = 1, 3, 7, 15, 31, 63, 123, ..., 543. No write at all.
        let stored = std::sync::Mutex::new(Vec::new());
        let ten_minutes = tokio::time::timeout(
            Duration::from_secs(600),
            selfcert.run(&pacing, pace, |s| stored.lock().unwrap().push(s)),
        );
        assert!(ten_minutes.await.is_err(), "run returned");
        let state = api.state();
        let steps = state.count(&Method::GET, SECRETS) - steps_before;
        assert_eq!(steps, 14);
        assert_eq!(state.secret_writes(), 1);
        assert_eq!(state.count(&Method::PATCH, "/"), 0);
        assert!(stored.lock().unwrap().is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn a_stored_certificate_is_served_while_publication_fails() {
        let api = FakeApi::default();
        add_configs(&api, "poolguard");
        let (stored, _) = selfcert(&api, &["poolguard"]).step().await.unwrap();
        let writes = api.state().secret_writes();

        let pacing = Pacing::new(Duration::from_secs(60));
        let (first, pace) = selfcert(&api, &["poolguard", "gone"])
            .first_certificate(&pacing)
            .await;
        assert_eq!(Some(first), stored);
        assert!(pace.backing_off());
        assert_eq!(pace.wait, pacing.first_backoff);
        assert_eq!(api.state().secret_writes(), writes);
    }

    #[tokio::test]
    async fn a_conflict_on_the_secret_write_means_read_again() {
        let api = FakeApi::default();
        add_configs(&api, "poolguard");
        let selfcert = selfcert(&api, &["poolguard"]);

        // Creating: another replica was first.
        api.state().secret_conflicts = 1;
        assert_eq!(selfcert.step().await.unwrap(), (None, true));
        let (created, again) = selfcert.step().await.unwrap();
        assert!(again && created.is_some());

        // Recording the publication: the patches went through, the Secret write lost.
        api.state().secret_conflicts = 1;
        assert_eq!(selfcert.step().await.unwrap(), (None, true));
        assert_eq!(api.state().count(&Method::PATCH, "/"), 2);
        // Read again: the bundle is in place, only the record is missing; no second patch.
        let (recorded, again) = selfcert.step().await.unwrap();
        assert!(again && recorded.unwrap().published_at.is_some());
        assert_eq!(api.state().count(&Method::PATCH, "/"), 2);
        assert!(!selfcert.step().await.unwrap().1);
        assert_eq!(api.state().secret_writes(), 4);
    }

    #[tokio::test]
    async fn a_configuration_changed_under_the_patch_is_read_again() {
        let api = FakeApi::default();
        add_configs(&api, "poolguard");
        let selfcert = selfcert(&api, &["poolguard"]);
        selfcert.step().await.unwrap();
        let writes = api.state().secret_writes();

        // Another writer changes the mutating configuration between our read and our patch:
        // the resourceVersion test fails (422) and the step asks to read again.
        api.state().touch_before_patch = true;
        assert_eq!(selfcert.step().await.unwrap(), (None, true));
        let mutating = object(&api, &format!("{MUTATING}/poolguard"));
        assert!(mutating["webhooks"][0]["clientConfig"]["caBundle"].is_null());
        assert_eq!(api.state().secret_writes(), writes);

        let (published, again) = selfcert.step().await.unwrap();
        assert!(again && published.unwrap().published_at.is_some());
        let mutating = object(&api, &format!("{MUTATING}/poolguard"));
        assert_eq!(mutating["metadata"]["labels"]["touched"], "yes");
        assert!(mutating["webhooks"][0]["clientConfig"]["caBundle"].is_string());
    }

    #[tokio::test]
    async fn a_rejected_patch_is_an_error() {
        let api = FakeApi::default();
        // A webhook without a clientConfig: the patch cannot apply, and nothing has changed.
        api.state().put(
            VALIDATING,
            json!({"metadata": {"name": "broken"}, "webhooks": [{"name": "w"}]}),
        );
        let selfcert = selfcert(&api, &["broken"]);
        selfcert.step().await.unwrap();
        let error = format!("{:#}", selfcert.step().await.unwrap_err());
        assert!(
            error
                .contains("injecting the CA bundle into ValidatingWebhookConfiguration \"broken\""),
            "{error}"
        );
        assert_eq!(api.state().secret_writes(), 1);
    }
}
