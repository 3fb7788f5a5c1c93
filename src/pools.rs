//! Where the pools' facts come from: a watch cache of the cluster's nodes, a watch of its
//! Karpenter NodePools, or a nodes file (which may hold both), with an instance-type catalog
//! for what NodePools can launch. What a pool can do is computed by the core
//! ([`placement_policy::pools`]) from these, and only the pools the config lists are kept
//! ([`PoolSet::listed`]).

use std::sync::Arc;

use arc_swap::ArcSwapOption;

use poolguard_core::config::Config;
use poolguard_core::placement_policy::{self, Catalog, NodeFacts, NodePool, PoolSet};

/// What pools are made of.
#[derive(Clone, Default)]
pub struct Inventory {
    pub nodes: Vec<NodeFacts>,
    pub nodepools: Vec<NodePool>,
    /// The instance types NodePools launch (`--instance-types-file`).
    pub catalog: Option<Arc<Catalog>>,
}

impl Inventory {
    /// The pools `config` chooses among (its `nodeSelectorKey`, the ones its `placement.pools`
    /// lists), and what was found wrong with the NodePools, one line each.
    pub fn pools(&self, config: &Config) -> (PoolSet, Vec<String>) {
        let (facts, problems) = placement_policy::pools(
            &self.nodes,
            &self.nodepools,
            self.catalog.as_deref(),
            &config.node_selector_key,
        );
        (PoolSet::listed(facts, config), problems)
    }
}

/// The nodes' and NodePools' facts as last read, and the pools last gathered from them.
struct Snapshot {
    /// `None` until the nodes have been read.
    nodes: Option<Vec<NodeFacts>>,
    /// `None` until the NodePools have been read (when they are watched).
    nodepools: Option<Vec<NodePool>>,
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

/// The pools the server chooses among. Unknown until the nodes (and, when they are watched,
/// the NodePools) have been read once (a cache that has not synced): no pool can be chosen
/// then.
#[derive(Clone)]
pub struct Pools {
    current: Arc<ArcSwapOption<Snapshot>>,
    /// Whether NodePools are read too (`--nodepools`): the pools are unknown until they are.
    nodepools: bool,
    catalog: Option<Arc<Catalog>>,
}

impl Pools {
    /// Nothing read yet; NodePools read too when `nodepools`, with `catalog` for what they
    /// launch.
    pub fn new(nodepools: bool, catalog: Option<Arc<Catalog>>) -> Pools {
        Pools {
            current: Arc::default(),
            nodepools,
            catalog,
        }
    }

    /// No nodes read yet, no NodePools.
    pub fn unknown() -> Pools {
        Pools::new(false, None)
    }

    /// From a fixed inventory (a nodes file): always known.
    pub fn fixed(inventory: Inventory, config: &Config) -> Pools {
        let pools = Pools::new(!inventory.nodepools.is_empty(), inventory.catalog.clone());
        pools.publish_nodepools(inventory.nodepools, config);
        pools.publish(inventory.nodes, config);
        pools
    }

    /// Replaces the nodes' facts, and gathers the pools as `config` asks.
    pub fn publish(&self, nodes: Vec<NodeFacts>, config: &Config) {
        self.replace(Some(nodes), None, config);
    }

    /// Replaces the NodePools, and gathers the pools as `config` asks.
    pub fn publish_nodepools(&self, nodepools: Vec<NodePool>, config: &Config) {
        self.replace(None, Some(nodepools), config);
    }

    fn replace(
        &self,
        nodes: Option<Vec<NodeFacts>>,
        nodepools: Option<Vec<NodePool>>,
        config: &Config,
    ) {
        let last = self.current.load_full();
        let snapshot = Arc::new(Snapshot {
            nodes: nodes.or_else(|| last.as_ref().and_then(|s| s.nodes.clone())),
            nodepools: nodepools.or_else(|| last.as_ref().and_then(|s| s.nodepools.clone())),
            pools: ArcSwapOption::empty(),
        });
        self.current.store(Some(snapshot.clone()));
        if self.known(&snapshot) {
            self.gathered(&snapshot, config);
        }
    }

    fn known(&self, snapshot: &Snapshot) -> bool {
        snapshot.nodes.is_some() && (!self.nodepools || snapshot.nodepools.is_some())
    }

    /// The pools `config` may choose among: nodes grouped by its `nodeSelectorKey` and the
    /// NodePools, only the pools its `placement.pools` lists; `None` while they have not been
    /// read. Gathered again (once) when the config changes either.
    pub fn facts(&self, config: &Config) -> Option<Arc<PoolSet>> {
        let snapshot = self.current.load_full()?;
        self.known(&snapshot)
            .then(|| self.gathered(&snapshot, config))
    }

    /// The nodes (and NodePools, when read) have been read.
    pub fn ready(&self) -> bool {
        self.current.load().as_ref().is_some_and(|s| self.known(s))
    }

    /// The instance types NodePools launch, when given.
    pub fn catalog(&self) -> Option<Arc<Catalog>> {
        self.catalog.clone()
    }

    /// Nodes known.
    pub fn nodes(&self) -> usize {
        self.current
            .load()
            .as_ref()
            .and_then(|s| s.nodes.as_ref())
            .map_or(0, Vec::len)
    }

    /// NodePools known.
    pub fn nodepools(&self) -> usize {
        self.current
            .load()
            .as_ref()
            .and_then(|s| s.nodepools.as_ref())
            .map_or(0, Vec::len)
    }

    /// The pools of `snapshot` for `config`: the ones last gathered when they were gathered
    /// alike. What is wrong with the NodePools is logged when they are gathered.
    fn gathered(&self, snapshot: &Snapshot, config: &Config) -> Arc<PoolSet> {
        let key = &config.node_selector_key;
        let listed = listed(config);
        if let Some(last) = snapshot.pools.load_full() {
            if &last.key == key && last.listed == listed {
                return last.pools.clone();
            }
        }
        let inventory = Inventory {
            nodes: snapshot.nodes.clone().unwrap_or_default(),
            nodepools: snapshot.nodepools.clone().unwrap_or_default(),
            catalog: self.catalog.clone(),
        };
        let (pools, problems) = inventory.pools(config);
        for problem in problems {
            tracing::warn!(problem = %problem, "a NodePool's facts are incomplete");
        }
        let pools = Arc::new(pools);
        snapshot.pools.store(Some(Arc::new(Gathered {
            key: key.clone(),
            listed,
            pools: pools.clone(),
        })));
        pools
    }
}

impl Default for Pools {
    fn default() -> Pools {
        Pools::unknown()
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
