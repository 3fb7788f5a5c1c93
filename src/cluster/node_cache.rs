//! The cluster's nodes: a watch cache (kube reflector) whose contents are turned into the
//! nodes' facts ([`NodeFacts`]) and published as [`Pools`] after every change.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use kube::api::Api;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{watcher, WatchStreamExt};
use kube::Client;

use super::mirrored::{mirror, Timing};
use crate::pools::Pools;
use poolguard_core::placement_policy::NodeFacts;
use poolguard_core::ruleset::RuleSet;

/// Changes closer together than this are published once (a node's status changes often).
const SETTLE: Duration = Duration::from_millis(100);

/// The config (its `nodeSelectorKey` and `placement.pools`), read when the pools are gathered.
pub type PoolKey = Arc<dyn Fn() -> Arc<RuleSet> + Send + Sync>;

/// Starts watching nodes in the background, publishing into `pools` (unknown until the first
/// listing). The watch retries with backoff and the last pools keep serving meanwhile.
pub fn start(client: Client, key: PoolKey, pools: Pools) {
    let api: Api<Node> = Api::all(client);
    let (store, writer) = reflector::store();
    let stream = watcher::watcher(api, watcher::Config::default())
        .default_backoff()
        .modify(keep_what_placement_reads)
        .reflect(writer);
    let timing = Timing {
        settle: SETTLE,
        refresh: None,
    };
    let failed = "node watch failed; choosing from the last nodes read and retrying";
    mirror(stream, store, timing, failed, move |store, first| {
        publish(store, &pools, &key());
        if first {
            tracing::info!(nodes = pools.nodes(), "node cache synced");
        }
    });
}

fn publish(store: &Store<Node>, pools: &Pools, rules: &RuleSet) {
    let nodes = store
        .state()
        .iter()
        .filter_map(|node| {
            let value = serde_json::to_value(node.as_ref()).ok()?;
            NodeFacts::from_node(&value)
                .inspect_err(|e| tracing::warn!(error = %e, "a node cannot be read; it is left out of its pool"))
                .ok()
        })
        .collect();
    pools.publish(nodes, rules.config());
}

/// What the cache keeps of a node: metadata name and labels, spec taints and unschedulable,
/// status allocatable and conditions. Images (a node lists every image it holds),
/// annotations, managed fields and the rest would otherwise dominate the cache's memory.
fn keep_what_placement_reads(node: &mut Node) {
    let meta = &mut node.metadata;
    meta.annotations = None;
    meta.managed_fields = None;
    meta.owner_references = None;
    meta.finalizers = None;
    if let Some(spec) = node.spec.as_mut() {
        spec.config_source = None;
        spec.pod_cidr = None;
        spec.pod_cidrs = None;
        spec.provider_id = None;
    }
    if let Some(status) = node.status.as_mut() {
        status.images = None;
        status.volumes_attached = None;
        status.volumes_in_use = None;
        status.addresses = None;
        status.node_info = None;
        status.daemon_endpoints = None;
        status.config = None;
        status.capacity = None;
        status.features = None;
        status.runtime_handlers = None;
        status.declared_features = None;
        for condition in status.conditions.iter_mut().flatten() {
            condition.message = None;
            condition.last_heartbeat_time = None;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cache_keeps_what_placement_reads() {
        let mut node: Node = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "n1", "labels": {"agentpool": "gpu"},
                "annotations": {"a": "b"}, "managedFields": [{"manager": "kubelet"}]},
            "spec": {"taints": [{"key": "k", "effect": "NoSchedule"}], "providerID": "x"},
            "status": {
                "allocatable": {"cpu": "4", "nvidia.com/gpu": "1"},
                "capacity": {"cpu": "4"},
                "conditions": [{"type": "Ready", "status": "True", "message": "long text"}],
                "images": [{"names": ["img"], "sizeBytes": 1}],
                "nodeInfo": {"architecture": "amd64", "bootID": "", "containerRuntimeVersion": "",
                    "kernelVersion": "", "kubeProxyVersion": "", "kubeletVersion": "",
                    "machineID": "", "operatingSystem": "linux", "osImage": "", "systemUUID": ""}
            }
        }))
        .unwrap();
        let before = NodeFacts::from_node(&serde_json::to_value(&node).unwrap()).unwrap();
        keep_what_placement_reads(&mut node);
        let after = NodeFacts::from_node(&serde_json::to_value(&node).unwrap()).unwrap();
        assert_eq!(before, after, "the facts do not change");
        let status = node.status.unwrap();
        assert!(status.images.is_none() && status.node_info.is_none());
        assert!(node.metadata.annotations.is_none() && node.metadata.managed_fields.is_none());
    }
}
