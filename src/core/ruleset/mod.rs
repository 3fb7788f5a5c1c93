//! The decision context: the config, the policies and what is known of their rollouts, checked
//! against each other once per load. [`RuleSet::decide`] (in [`crate::webhook`]) answers a
//! request with it.

use std::time::Duration;

use anyhow::Result;

use crate::config::Config;
use crate::gatekeeper;
use crate::placement_policy::PlacementSet;
use crate::policy::PolicySet;
use crate::rollout::view::SharedView;

pub mod plan;

pub use plan::{Plan, Subject};

/// Everything a decision needs besides the request, its scope and its time budget.
#[derive(Clone, Default)]
pub struct RuleSet {
    pub config: Config,
    pub policies: PolicySet,
    /// The placement (SAT) policies, which choose pools ([`crate::placement_policy`]).
    pub placement: PlacementSet,
    /// What the replicas know of the policies' rollouts: which version, at which enforcement,
    /// each namespace group gets ([`crate::rollout::view`]).
    pub rollouts: SharedView,
}

/// How long each policy evaluation of one decision may take: the config's
/// `evaluation.timeoutMillis`, or less when the request's deadline leaves less.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Budget {
    per_policy: Option<Duration>,
}

impl Budget {
    /// The configured limit, uncut.
    pub const FULL: Budget = Budget { per_policy: None };

    /// At most `limit` per policy evaluation.
    pub fn per_policy(limit: Duration) -> Budget {
        Budget {
            per_policy: Some(limit),
        }
    }

    /// The time limit of one policy evaluation under `config`.
    pub fn limit(self, config: &Config) -> Duration {
        let configured = Duration::from_millis(config.evaluation.timeout_millis);
        self.per_policy
            .map_or(configured, |cut| cut.min(configured))
    }
}

impl RuleSet {
    /// Pairs a config with the policies; a config naming a policy that is not loaded, leaving
    /// out an input a policy declares, or whose dependencies name an unknown policy or form a
    /// cycle, or whose `placement` section does not fit the placement policies, is an error
    /// prefixed with `origin` (the config's file). The policies' evaluation order, versions and
    /// parameters are fixed here, once per load. No rollout is known yet.
    pub fn new(
        config: Config,
        mut policies: PolicySet,
        mut placement: PlacementSet,
        origin: &str,
    ) -> Result<RuleSet> {
        // Each mistake on a line of its own, each naming the file.
        let named = |e: anyhow::Error| {
            let lines: Vec<String> = e
                .to_string()
                .lines()
                .map(|line| format!("{origin}: {line}"))
                .collect();
            anyhow::anyhow!("{}", lines.join("\n"))
        };
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
            rollouts: SharedView::default(),
        })
    }
}

impl RuleSet {
    /// The rule set of `config` with the SIT policies `sit`, the placement policies `placement`
    /// and the Gatekeeper documents of `files` ([`crate::gatekeeper`] reads and compiles them).
    /// Also the warnings: the templates' lint and what of `files.tolerated` was left out.
    pub fn with_gatekeeper(
        mut config: Config,
        sit: PolicySet,
        placement: PlacementSet,
        files: gatekeeper::Files,
        origin: &str,
    ) -> Result<(RuleSet, Vec<String>)> {
        let strict = gatekeeper::read(files.strict)?;
        let mut left_out = Vec::new();
        let tolerated = gatekeeper::read_tolerant(files.tolerated, &mut left_out);
        let (compiled, constraints) = gatekeeper::compile_with(&strict, tolerated)?;
        gatekeeper::configure(&mut config, &constraints)
            .map_err(|e| anyhow::anyhow!("{origin}: {e}"))?;
        let policies = PolicySet::with_constraints(sit, compiled.policies)?;
        let rules = RuleSet::new(config, policies, placement, origin)?;
        let mut warnings = left_out;
        warnings.extend(compiled.warnings);
        Ok((rules, warnings))
    }

    /// The policies that apply to `subject`, resolved for it ([`Plan::of`]).
    pub fn plan(&self, subject: &Subject) -> Plan<'_> {
        Plan::of(&self.policies, &self.config, &self.rollouts, subject)
    }

    /// Each policy that applies to `subject` and what it says of it, in policy name order;
    /// each evaluation takes at most `limit`.
    pub fn evaluate(&self, subject: Subject, limit: Duration) -> Vec<crate::policy::Outcome> {
        self.plan(&subject).run(&self.policies, &subject, limit)
    }
}
