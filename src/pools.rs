//! Where the pools' facts come from: a watch cache of the cluster's nodes, or a nodes file.
//! What a pool can do is computed by the core ([`PoolFacts::gather`]) from the nodes' facts.

use std::sync::Arc;

use arc_swap::ArcSwapOption;

use poolguard_core::placement_policy::{NodeFacts, PoolFacts, PoolSet};

/// The nodes' facts as last read, and the pools gathered from them by one node label.
struct Snapshot {
    nodes: Vec<NodeFacts>,
    key: String,
    pools: Arc<PoolSet>,
}

/// The pools the server chooses among. Unknown until the nodes have been read once (a node
/// cache that has not synced): no pool can be chosen then.
#[derive(Clone, Default)]
pub struct Pools {
    current: Arc<ArcSwapOption<Snapshot>>,
}

impl Pools {
    /// No nodes read yet.
    pub fn unknown() -> Pools {
        Pools::default()
    }

    /// From a fixed list of nodes (a nodes file): always known.
    pub fn fixed(nodes: Vec<NodeFacts>, key: &str) -> Pools {
        let pools = Pools::default();
        pools.publish(nodes, key);
        pools
    }

    /// Replaces the nodes' facts; the pools are gathered by the node label `key` (the config's
    /// `nodeSelectorKey`).
    pub fn publish(&self, nodes: Vec<NodeFacts>, key: &str) {
        let pools = Arc::new(PoolSet::new(PoolFacts::gather(&nodes, key)));
        self.current.store(Some(Arc::new(Snapshot {
            nodes,
            key: key.to_string(),
            pools,
        })));
    }

    /// The pools by the node label `key`; `None` while no node has been read. A key other than
    /// the one last published (the config changed its `nodeSelectorKey`) is gathered anew.
    pub fn facts(&self, key: &str) -> Option<Arc<PoolSet>> {
        let snapshot = self.current.load_full()?;
        if snapshot.key == key {
            Some(snapshot.pools.clone())
        } else {
            Some(Arc::new(PoolSet::new(PoolFacts::gather(
                &snapshot.nodes,
                key,
            ))))
        }
    }

    /// The nodes have been read.
    pub fn ready(&self) -> bool {
        self.current.load().is_some()
    }

    /// Nodes known.
    pub fn nodes(&self) -> usize {
        self.current.load().as_ref().map_or(0, |s| s.nodes.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn node(name: &str, labels: serde_json::Value) -> NodeFacts {
        NodeFacts::from_node(&json!({
            "metadata": {"name": name, "labels": labels},
            "status": {"allocatable": {"cpu": "2"}, "conditions": [{"type": "Ready", "status": "True"}]},
        }))
        .unwrap()
    }

    #[test]
    fn unknown_until_published_then_gathered_by_key() {
        let pools = Pools::unknown();
        assert!(!pools.ready());
        assert!(pools.facts("agentpool").is_none());
        pools.publish(
            vec![
                node("a", json!({"agentpool": "blue", "tier": "x"})),
                node("b", json!({"agentpool": "green", "tier": "x"})),
            ],
            "agentpool",
        );
        assert!(pools.ready());
        assert_eq!(pools.nodes(), 2);
        let names = |key: &str| -> Vec<String> {
            pools
                .facts(key)
                .unwrap()
                .facts()
                .iter()
                .map(|p| p.name.clone())
                .collect()
        };
        assert_eq!(names("agentpool"), ["blue", "green"]);
        // Another key (the config changed): gathered from the same nodes.
        assert_eq!(names("tier"), ["x"]);
    }
}
