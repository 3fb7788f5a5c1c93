//! The rollout ConfigMap: one object every replica watches and `kubectl get -o yaml` shows.
//! A ConfigMap rather than a CRD: nothing to install or version beside the chart, RBAC can name
//! the one object, and its keys let each writer own its own part. Keys:
//! - `state.<policy>`: the policy's [`RolloutState`] (JSON), written by the leader;
//! - `current.<policy>` / `previous.<policy>`: the versions the state names, as
//!   [`StoredVersion`]s (Rego and settings), so every replica can run them;
//! - `commands.<policy>`: commands from `poolguard rollout` waiting for the leader;
//! - `counts.<replica>`: what each replica counted at admission ([`CountsDoc`]).
//!
//! The leader and the CLI change it with JSON patches that first test the resourceVersion they
//! read, so nothing one writer does is lost to another; replicas merge-patch their own key.

use std::collections::BTreeMap;

use anyhow::{Context, Result};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::Client;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use poolguard_core::evidence::ReplicaCounts;
use poolguard_core::rollout::view::StoredVersion;
use poolguard_core::rollout::{Command, RolloutState};

pub const STATE: &str = "state.";
pub const CURRENT: &str = "current.";
pub const PREVIOUS: &str = "previous.";
pub const COMMANDS: &str = "commands.";
pub const COUNTS: &str = "counts.";

/// Where the rollout state lives.
#[derive(Debug, Clone)]
pub struct Location {
    pub namespace: String,
    pub name: String,
}

impl Location {
    /// The ConfigMap the serving replicas add their admission counts to (`<name>-counts`): apart
    /// from the state and the stored policy versions, so that what a serving replica may write
    /// (its counts) decides nothing by itself.
    pub fn counts(&self) -> Location {
        Location {
            namespace: self.namespace.clone(),
            name: format!("{}-counts", self.name),
        }
    }
}

/// One replica's report.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CountsDoc {
    /// When it was written (Unix seconds): a dead replica's last-minute counts go stale.
    pub at: i64,
    pub policies: ReplicaCounts,
}

/// A command waiting for the leader.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Queued {
    pub command: Command,
    pub at: i64,
}

/// The ConfigMap's data, read.
#[derive(Debug, Clone, Default)]
pub struct Contents {
    pub resource_version: Option<String>,
    pub data: BTreeMap<String, String>,
}

impl Contents {
    pub fn from_configmap(cm: &ConfigMap) -> Contents {
        Contents {
            resource_version: cm.metadata.resource_version.clone(),
            data: cm.data.clone().unwrap_or_default(),
        }
    }

    /// The state of `policy`, if stored and readable (unreadable: logged, treated as none).
    pub fn state(&self, policy: &str) -> Option<RolloutState> {
        self.parse(&format!("{STATE}{policy}"))
    }

    pub fn stored(&self, prefix: &str, policy: &str) -> Option<StoredVersion> {
        self.parse(&format!("{prefix}{policy}"))
    }

    pub fn commands(&self, policy: &str) -> Vec<Queued> {
        self.parse(&format!("{COMMANDS}{policy}"))
            .unwrap_or_default()
    }

    /// These contents with the admission counts of `counts` (the counts ConfigMap's contents)
    /// instead of any of their own.
    pub fn with_counts(&self, counts: &Contents) -> Contents {
        let mut data = self.data.clone();
        data.retain(|k, _| !k.starts_with(COUNTS));
        data.extend(
            counts
                .data
                .iter()
                .filter(|(k, _)| k.starts_with(COUNTS))
                .map(|(k, v)| (k.clone(), v.clone())),
        );
        Contents {
            resource_version: self.resource_version.clone(),
            data,
        }
    }

    /// Every replica's counts, newest first.
    pub fn counts(&self) -> Vec<CountsDoc> {
        self.data
            .keys()
            .filter(|k| k.starts_with(COUNTS))
            .filter_map(|k| self.parse::<CountsDoc>(k))
            .collect()
    }

    /// Names of the policies with a stored state.
    pub fn policies(&self) -> Vec<String> {
        self.data
            .keys()
            .filter_map(|k| k.strip_prefix(STATE))
            .map(str::to_string)
            .collect()
    }

    fn parse<T: serde::de::DeserializeOwned>(&self, key: &str) -> Option<T> {
        let text = self.data.get(key)?;
        match serde_json::from_str(text) {
            Ok(v) => Some(v),
            Err(e) => {
                tracing::warn!(key, error = %e, "unreadable rollout ConfigMap key; ignored");
                None
            }
        }
    }
}

pub fn api(client: &Client, at: &Location) -> Api<ConfigMap> {
    Api::namespaced(client.clone(), &at.namespace)
}

/// Reads the ConfigMap; `None` when it does not exist.
pub async fn read(client: &Client, at: &Location) -> Result<Option<Contents>> {
    let cm = api(client, at)
        .get_opt(&at.name)
        .await
        .with_context(|| describe(at))?;
    Ok(cm.as_ref().map(Contents::from_configmap))
}

/// Reads the ConfigMap, creating it empty when missing (only a writer with something to write
/// does: a cluster without rollouts gets no ConfigMap).
pub async fn read_or_create(client: &Client, at: &Location) -> Result<Contents> {
    let api = api(client, at);
    if let Some(contents) = read(client, at).await? {
        return Ok(contents);
    }
    let cm: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": at.name, "labels": {"app.kubernetes.io/managed-by": "poolguard"}},
        "data": {},
    }))?;
    match api.create(&PostParams::default(), &cm).await {
        Ok(cm) => Ok(Contents::from_configmap(&cm)),
        // Created by another writer meanwhile.
        Err(kube::Error::Api(e)) if e.code == 409 => Ok(Contents::from_configmap(
            &api.get(&at.name).await.with_context(|| describe(at))?,
        )),
        Err(e) => Err(e).with_context(|| format!("creating {}", describe(at))),
    }
}

/// One change to a key: set it to the text, or remove it.
pub enum Change {
    Set(String, String),
    Remove(String),
}

/// Applies `changes` if the ConfigMap is still at `read.resource_version`; `Ok(false)` when
/// another writer came first (read again and retry).
pub async fn apply(
    client: &Client,
    at: &Location,
    read: &Contents,
    changes: &[Change],
) -> Result<bool> {
    if changes.is_empty() {
        return Ok(true);
    }
    let mut ops = vec![
        json!({"op": "test", "path": "/metadata/resourceVersion", "value": read.resource_version}),
    ];
    if read.data.is_empty() {
        ops.push(json!({"op": "add", "path": "/data", "value": {}}));
    }
    for change in changes {
        match change {
            Change::Set(key, value) => {
                ops.push(
                    json!({"op": "add", "path": format!("/data/{}", pointer(key)), "value": value}),
                );
            }
            Change::Remove(key) if read.data.contains_key(key) => {
                ops.push(json!({"op": "remove", "path": format!("/data/{}", pointer(key))}));
            }
            Change::Remove(_) => {}
        }
    }
    let patch: json_patch::Patch = serde_json::from_value(Value::Array(ops))?;
    match api(client, at)
        .patch(&at.name, &PatchParams::default(), &Patch::<()>::Json(patch))
        .await
    {
        Ok(_) => Ok(true),
        // The test failed (422 from a failed test op, or 409).
        Err(kube::Error::Api(e)) if e.code == 422 || e.code == 409 => Ok(false),
        Err(e) => Err(e).with_context(|| format!("writing {}", describe(at))),
    }
}

/// Sets one key by merge patch (a replica's own counts: no other writer touches it).
pub async fn merge_key(client: &Client, at: &Location, key: &str, value: &str) -> Result<()> {
    let patch = json!({"data": {key: value}});
    api(client, at)
        .patch(&at.name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .with_context(|| format!("writing {key} into {}", describe(at)))?;
    Ok(())
}

/// A key as a JSON pointer segment.
fn pointer(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}

pub fn describe(at: &Location) -> String {
    format!("ConfigMap {}/{}", at.namespace, at.name)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn contents(pairs: &[(&str, &str)]) -> Contents {
        Contents {
            resource_version: Some("7".into()),
            data: pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        }
    }

    #[test]
    fn the_counts_come_from_the_counts_configmap_only() {
        let state = contents(&[
            ("state.repos", "{}"),
            ("counts.forged", r#"{"at": 1, "policies": {}}"#),
        ]);
        let counts = contents(&[
            ("counts.pod-a", r#"{"at": 5, "policies": {}}"#),
            ("state.repos", "written where it decides nothing"),
        ]);
        let view = state.with_counts(&counts);
        assert_eq!(view.resource_version.as_deref(), Some("7"));
        assert_eq!(
            view.data.keys().collect::<Vec<_>>(),
            ["counts.pod-a", "state.repos"]
        );
        assert_eq!(view.data["state.repos"], "{}");
        assert_eq!(view.counts().len(), 1);
        let at = Location {
            namespace: "pg".into(),
            name: "poolguard-rollouts".into(),
        };
        assert_eq!(at.counts().name, "poolguard-rollouts-counts");
        assert_eq!(at.counts().namespace, "pg");
    }
}
