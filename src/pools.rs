//! Where the pools' facts come from: a watch cache of the cluster's nodes, or a nodes file.
//! What a pool can do is computed by the core ([`PoolFacts::gather`]) from the nodes' facts, and
//! only the pools the config lists are kept ([`PoolSet::listed`]).

use std::sync::Arc;

use arc_swap::ArcSwapOption;

use poolguard_core::config::Config;
use poolguard_core::placement_policy::{NodeFacts, PoolFacts, PoolSet};

/// The nodes' facts as last read, and the pools last gathered from them.
struct Snapshot {
    nodes: Vec<NodeFacts>,
    pools: ArcSwapOption<Gathered>,
}

/// Pools gathered by one node label, keeping those one list names (`None`: all).
struct Gathered {
    key: String,
    listed: Option<Vec<String>>,
    pools: Arc<PoolSet>,
}

fn listed(config: &Config) -> Option<Vec<String>> {
    config.placement.as_ref().map(|p| p.pools.clone())
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
    pub fn fixed(nodes: Vec<NodeFacts>, config: &Config) -> Pools {
        let pools = Pools::default();
        pools.publish(nodes, config);
        pools
    }

    /// Replaces the nodes' facts, and gathers the pools as `config` asks.
    pub fn publish(&self, nodes: Vec<NodeFacts>, config: &Config) {
        let snapshot = Arc::new(Snapshot {
            nodes,
            pools: ArcSwapOption::empty(),
        });
        gathered(&snapshot, config);
        self.current.store(Some(snapshot));
    }

    /// The pools `config` may choose among: nodes grouped by its `nodeSelectorKey`, only the
    /// pools its `placement.pools` lists; `None` while no node has been read. Gathered again
    /// (once) when the config changes either.
    pub fn facts(&self, config: &Config) -> Option<Arc<PoolSet>> {
        let snapshot = self.current.load_full()?;
        Some(gathered(&snapshot, config))
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

/// The pools of `snapshot` for `config`: the ones last gathered when they were gathered alike.
fn gathered(snapshot: &Snapshot, config: &Config) -> Arc<PoolSet> {
    let key = &config.node_selector_key;
    let listed = listed(config);
    if let Some(last) = snapshot.pools.load_full() {
        if &last.key == key && last.listed == listed {
            return last.pools.clone();
        }
    }
    let pools = Arc::new(PoolSet::listed(
        PoolFacts::gather(&snapshot.nodes, key),
        config,
    ));
    snapshot.pools.store(Some(Arc::new(Gathered {
        key: key.clone(),
        listed,
        pools: pools.clone(),
    })));
    pools
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
        let config = |text: &str| Config::parse(text, "t").unwrap();
        let pools = Pools::unknown();
        assert!(!pools.ready());
        assert!(pools.facts(&config("{}")).is_none());
        pools.publish(
            vec![
                node("a", json!({"agentpool": "blue", "tier": "x"})),
                node("b", json!({"agentpool": "green", "tier": "x"})),
            ],
            &config("{}"),
        );
        assert!(pools.ready());
        assert_eq!(pools.nodes(), 2);
        let names = |config: &Config| -> Vec<String> {
            pools
                .facts(config)
                .unwrap()
                .facts()
                .iter()
                .map(|p| p.name.clone())
                .collect()
        };
        assert_eq!(names(&config("{}")), ["blue", "green"]);
        // Another key (the config changed): gathered from the same nodes.
        assert_eq!(names(&config("nodeSelectorKey: tier")), ["x"]);
        // With placement, only the pools it lists: a node naming another pool is left out.
        let listed = config("placement: {chooseValue: auto, pools: [green]}");
        assert_eq!(names(&listed), ["green"]);
        assert_eq!(names(&listed), ["green"]);
        assert_eq!(names(&config("{}")), ["blue", "green"]);
    }
}
