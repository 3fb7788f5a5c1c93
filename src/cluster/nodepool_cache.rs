//! The cluster's Karpenter NodePools (`karpenter.sh/v1`): a watch cache whose contents are read
//! as [`NodePool`]s and published into [`Pools`] after every change, so that a NodePool with no
//! node yet is a pool with what it can launch.

use std::time::Duration;

use kube::api::{ApiResource, DynamicObject, GroupVersionKind};
use kube::runtime::reflector::Store;
use kube::Client;

use super::mirrored::{mirror, watch_dynamic, Timing};
use super::node_cache::PoolKey;
use crate::pools::Pools;
use poolguard_core::placement_policy::NodePool;
use poolguard_core::ruleset::RuleSet;

/// Changes closer together than this are published once (a NodePool's status changes as its
/// nodes come and go).
const SETTLE: Duration = Duration::from_millis(100);

/// The NodePool resource: `karpenter.sh/v1`, cluster-scoped.
pub fn resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("karpenter.sh", "v1", "NodePool"),
        "nodepools",
    )
}

/// Starts watching NodePools in the background, publishing into `pools` (whose pools stay
/// unknown until the first listing: no pool is chosen from nodes alone while the NodePools are
/// not read). The watch retries with backoff (a cluster without the NodePool CRD logs and keeps
/// retrying) and the last NodePools keep serving meanwhile.
pub fn start(client: Client, key: PoolKey, pools: Pools) {
    let (store, stream) = watch_dynamic(client, resource(), |nodepool| {
        nodepool.metadata.managed_fields = None;
        nodepool.metadata.annotations = None;
    });
    let timing = Timing {
        settle: SETTLE,
        refresh: None,
    };
    let failed = "NodePool watch failed (is Karpenter's NodePool CRD installed?); choosing from the last NodePools read and retrying";
    mirror(stream, store, timing, failed, move |store, first| {
        publish(store, &pools, &key());
        if first {
            tracing::info!(nodepools = pools.nodepools(), "NodePool cache synced");
        }
    });
}

fn publish(store: &Store<DynamicObject>, pools: &Pools, rules: &RuleSet) {
    let nodepools = store
        .state()
        .iter()
        .filter_map(|object| read(object))
        .collect();
    pools.publish_nodepools(nodepools, rules.config());
}

/// A NodePool as the API server gives it (watched or listed); one that cannot be read is logged
/// and left out.
pub fn read(object: &DynamicObject) -> Option<NodePool> {
    let read = serde_json::to_value(object)
        .map_err(|e| e.to_string())
        .and_then(|value| NodePool::from_object(&value));
    read.inspect_err(|e| tracing::warn!(error = %e, "a NodePool cannot be read; it is no pool"))
        .ok()
}
