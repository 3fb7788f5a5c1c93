//! Self-managed certificates (`serve --manage-certs`): a CA and serving certificate kept in a
//! Secret, renewed before expiry, with the CA bundle injected into poolguard's own webhook
//! configurations. Safe with several replicas: every write carries the resourceVersion it was
//! planned from, and a replica that loses a race reads again.

pub mod pace;
pub mod plan;

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{Context, Result};
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration, WebhookClientConfig,
};
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::ByteString;
use kube::api::{Api, ObjectMeta, PostParams};
use kube::Client;

use plan::{Settings, Step, Stored};

/// Where the Secret records when its bundle was seen in every webhook configuration.
pub const PUBLISHED_ANNOTATION: &str = "poolguard.io/ca-bundle-published-at";

pub struct SelfCert {
    secrets: Api<Secret>,
    secret_name: String,
    mutating: Api<MutatingWebhookConfiguration>,
    validating: Api<ValidatingWebhookConfiguration>,
    webhook_configs: Vec<String>,
    settings: Settings,
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
            mutating: Api::all(client.clone()),
            validating: Api::all(client),
            webhook_configs,
            settings,
        }
    }

    /// One step towards a valid, published certificate. Returns what is stored afterwards and
    /// whether another step is due at once.
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
        let now = time::OffsetDateTime::now_utc().unix_timestamp();
        match plan::plan(stored.as_ref(), published, now, &self.settings)? {
            Step::Idle => Ok((stored, false)),
            Step::Publish => {
                let mut s = stored.context("nothing stored to publish")?;
                if let Err(e) = self.publish(&s.bundle).await {
                    if is_conflict(&e) {
                        tracing::info!(
                            "another replica changed a webhook configuration first; reading again"
                        );
                        return Ok((None, true));
                    }
                    return Err(e);
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
        let data = BTreeMap::from([
            (
                "ca.crt".to_string(),
                ByteString(stored.bundle.clone().into_bytes()),
            ),
            (
                "ca.key".to_string(),
                ByteString(stored.ca_key.clone().into_bytes()),
            ),
            (
                "tls.crt".to_string(),
                ByteString(stored.tls_crt.clone().into_bytes()),
            ),
            (
                "tls.key".to_string(),
                ByteString(stored.tls_key.clone().into_bytes()),
            ),
        ]);
        secret.data = Some(data);
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

    /// Every named webhook configuration exists and all its webhooks carry exactly `bundle`.
    async fn published(&self, bundle: &str) -> Result<bool> {
        for name in &self.webhook_configs {
            let mutating = self
                .mutating
                .get_opt(name)
                .await
                .context("reading webhook configurations")?;
            let validating = self
                .validating
                .get_opt(name)
                .await
                .context("reading webhook configurations")?;
            if mutating.is_none() && validating.is_none() {
                tracing::warn!(
                    name,
                    "webhook configuration not found; the CA bundle cannot be published yet"
                );
                return Ok(false);
            }
            let mut configs: Vec<&WebhookClientConfig> = Vec::new();
            for w in mutating.iter().flat_map(|m| m.webhooks.iter().flatten()) {
                configs.push(&w.client_config);
            }
            for w in validating.iter().flat_map(|v| v.webhooks.iter().flatten()) {
                configs.push(&w.client_config);
            }
            if !configs.iter().all(|c| {
                c.ca_bundle
                    .as_ref()
                    .is_some_and(|b| b.0 == bundle.as_bytes())
            }) {
                return Ok(false);
            }
        }
        Ok(true)
    }

    async fn publish(&self, bundle: &str) -> Result<()> {
        let set = |c: &mut WebhookClientConfig| {
            c.ca_bundle = Some(ByteString(bundle.as_bytes().to_vec()))
        };
        for name in &self.webhook_configs {
            if let Some(mut m) = self.mutating.get_opt(name).await? {
                m.webhooks
                    .iter_mut()
                    .flatten()
                    .for_each(|w| set(&mut w.client_config));
                self.mutating
                    .replace(name, &PostParams::default(), &m)
                    .await
                    .context("updating the mutating webhook configuration")?;
            }
            if let Some(mut v) = self.validating.get_opt(name).await? {
                v.webhooks
                    .iter_mut()
                    .flatten()
                    .for_each(|w| set(&mut w.client_config));
                self.validating
                    .replace(name, &PostParams::default(), &v)
                    .await
                    .context("updating the validating webhook configuration")?;
            }
        }
        Ok(())
    }

    /// Steps until a serving certificate is stored (start-up), retrying on errors.
    pub async fn first_certificate(&self) -> Stored {
        loop {
            match self.step().await {
                Ok((Some(s), _)) if !s.tls_crt.is_empty() => return s,
                Ok(_) => {}
                Err(e) => {
                    tracing::warn!(error = %format!("{e:#}"), "no serving certificate yet; retrying");
                    tokio::time::sleep(Duration::from_secs(2)).await;
                }
            }
        }
    }
}

/// A write lost to a concurrent one (HTTP 409): read again and re-plan.
fn is_conflict(e: &anyhow::Error) -> bool {
    matches!(e.downcast_ref::<kube::Error>(), Some(kube::Error::Api(status)) if status.code == 409)
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
