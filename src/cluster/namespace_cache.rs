//! The cluster's namespaces: a metadata-only watch cache (kube reflector) and direct GETs.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use futures::future::BoxFuture;
use futures::StreamExt;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, PartialObjectMeta};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{watcher, WatchStreamExt};
use kube::Client;

use crate::namespaces::Source;
use poolguard_core::labels::Labels;

pub struct ClusterNamespaces {
    api: Api<PartialObjectMeta<Namespace>>,
    store: Store<PartialObjectMeta<Namespace>>,
    synced: Arc<AtomicBool>,
}

impl ClusterNamespaces {
    /// Starts the watch in the background. The cache keeps serving what it has while the API
    /// server is unreachable; the watch retries with backoff.
    pub fn start(client: Client) -> ClusterNamespaces {
        // Metadata-only list, watch and get.
        let api: Api<PartialObjectMeta<Namespace>> = Api::all(client);
        let (store, writer) = reflector::store();
        let synced = Arc::new(AtomicBool::new(false));
        let stream = watcher::watcher(api.clone(), watcher::Config::default())
            .default_backoff()
            .modify(keep_name_and_labels)
            .reflect(writer);
        tokio::spawn(async move {
            let mut stream = std::pin::pin!(stream);
            while let Some(event) = stream.next().await {
                if let Err(e) = event {
                    tracing::warn!(error = %e, "namespace watch failed; serving from the cache and retrying");
                }
            }
        });
        let ready_store = store.clone();
        let ready = synced.clone();
        tokio::spawn(async move {
            if ready_store.wait_until_ready().await.is_ok() {
                tracing::info!(
                    namespaces = ready_store.state().len(),
                    "namespace cache synced"
                );
                ready.store(true, Ordering::SeqCst);
            }
        });
        ClusterNamespaces { api, store, synced }
    }
}

/// What the cache keeps of a namespace. Annotations (a `kubectl apply` leaves the whole last
/// applied object there) and managed fields would otherwise dominate the cache's memory.
fn keep_name_and_labels(ns: &mut PartialObjectMeta<Namespace>) {
    let meta = &mut ns.metadata;
    meta.annotations = None;
    meta.managed_fields = None;
    meta.owner_references = None;
    meta.finalizers = None;
}

fn labels_of(meta: &PartialObjectMeta<Namespace>) -> Labels {
    meta.metadata.labels.clone().unwrap_or_default()
}

impl Source for ClusterNamespaces {
    fn cached(&self, name: &str) -> Option<Labels> {
        self.store.get(&ObjectRef::new(name)).map(|m| labels_of(&m))
    }

    fn fetch<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<Option<Labels>, String>> {
        Box::pin(async move {
            self.api
                .get_opt(name)
                .await
                .map(|found| found.as_ref().map(labels_of))
                .map_err(|e| format!("reading namespace {name:?} from the API server: {e}"))
        })
    }

    fn synced(&self) -> bool {
        self.synced.load(Ordering::SeqCst)
    }

    fn len(&self) -> usize {
        self.store.state().len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cache_keeps_name_and_labels_only() {
        let mut ns: PartialObjectMeta<Namespace> = serde_json::from_value(serde_json::json!({
            "apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadata",
            "metadata": {
                "name": "team-a", "resourceVersion": "42", "uid": "u",
                "labels": {"agentpool": "gpu"},
                "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{\"big\": true}"},
                "managedFields": [{"manager": "kubectl", "operation": "Apply"}],
                "finalizers": ["example.com/keep"]
            }
        }))
        .unwrap();
        keep_name_and_labels(&mut ns);
        assert_eq!(ns.metadata.name.as_deref(), Some("team-a"));
        assert_eq!(ns.metadata.resource_version.as_deref(), Some("42"));
        assert_eq!(labels_of(&ns)["agentpool"], "gpu");
        assert!(ns.metadata.annotations.is_none());
        assert!(ns.metadata.managed_fields.is_none());
        assert!(ns.metadata.finalizers.is_none());
    }
}
