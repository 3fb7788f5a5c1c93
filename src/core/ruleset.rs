//! The config and the policies together, checked against each other.

use anyhow::Result;

use crate::config::Config;
use crate::policy::PolicySet;

/// Everything a decision needs besides the request and the namespace labels.
#[derive(Clone, Default)]
pub struct RuleSet {
    pub config: Config,
    pub policies: PolicySet,
}

impl RuleSet {
    /// Pairs a config with the policies; a config naming a policy that is not loaded, or leaving
    /// out an input a policy declares, is an error prefixed with `origin` (the config's file).
    pub fn new(config: Config, mut policies: PolicySet, origin: &str) -> Result<RuleSet> {
        config
            .check_against_policies(&policies.declared_inputs())
            .map_err(|e| anyhow::anyhow!("{origin}: {e}"))?;
        policies.set_versions(&config);
        Ok(RuleSet { config, policies })
    }
}
