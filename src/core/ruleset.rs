//! The config and the policies together, checked against each other.

use anyhow::Result;

use crate::config::Config;
use crate::placement_policy::PlacementSet;
use crate::policy::PolicySet;

/// Everything a decision needs besides the request and the namespace labels.
#[derive(Clone, Default)]
pub struct RuleSet {
    pub config: Config,
    pub policies: PolicySet,
    /// The placement (SAT) policies, which choose pools ([`crate::placement_policy`]).
    pub placement: PlacementSet,
}

impl RuleSet {
    /// Pairs a config with the policies; a config naming a policy that is not loaded, leaving
    /// out an input a policy declares, or whose dependencies name an unknown policy or form a
    /// cycle, or whose `placement` section does not fit the placement policies, is an error
    /// prefixed with `origin` (the config's file). The policies' evaluation order is fixed
    /// here, once per load.
    pub fn new(
        config: Config,
        mut policies: PolicySet,
        mut placement: PlacementSet,
        origin: &str,
    ) -> Result<RuleSet> {
        let named = |e: anyhow::Error| anyhow::anyhow!("{origin}: {e}");
        config
            .check_against_policies(&policies.declared_inputs())
            .map_err(named)?;
        policies.set_plan(&config).map_err(named)?;
        policies.set_versions(&config);
        policies.set_memo(&config);
        placement.check_config(&config).map_err(named)?;
        placement.set_memo(&config);
        Ok(RuleSet {
            config,
            policies,
            placement,
        })
    }
}
