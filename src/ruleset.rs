//! The config and the policies, loaded together and checked against each other.

use std::path::{Path, PathBuf};

use anyhow::Result;

use crate::config::Config;
use crate::policy::PolicySet;

/// The policies directory used when none is given.
pub const DEFAULT_POLICIES_DIR: &str = "policies";

/// Everything a decision needs besides the request and the namespace labels.
#[derive(Clone, Default)]
pub struct RuleSet {
    pub config: Config,
    pub policies: PolicySet,
}

/// Where the rules come from.
#[derive(Debug, Clone, Default)]
pub struct Sources {
    /// No file: the defaults.
    pub config: Option<PathBuf>,
    /// No directory: `policies/` when it exists, else no policies.
    pub policies_dir: Option<PathBuf>,
}

impl Sources {
    /// The policies directory to read, if any.
    pub fn policies_dir(&self) -> Option<PathBuf> {
        match &self.policies_dir {
            Some(dir) => Some(dir.clone()),
            None => Some(PathBuf::from(DEFAULT_POLICIES_DIR)).filter(|d| d.is_dir()),
        }
    }

    /// Loads both; a config naming a policy that is not loaded, or leaving out a declared input, is an error.
    pub fn load(&self) -> Result<RuleSet> {
        let config = match &self.config {
            Some(path) => Config::load(path)?,
            None => Config::default(),
        };
        let policies = match self.policies_dir() {
            Some(dir) => PolicySet::load_dir(&dir)?,
            None => PolicySet::default(),
        };
        check(&config, &policies, self.config.as_deref())?;
        Ok(RuleSet { config, policies })
    }
}

fn check(config: &Config, policies: &PolicySet, origin: Option<&Path>) -> Result<()> {
    config
        .check_against_policies(&policies.declared_inputs())
        .map_err(|e| {
            let origin = origin.map_or_else(|| "config".to_string(), |p| p.display().to_string());
            anyhow::anyhow!("{origin}: {e}")
        })
}
