//! The decision context: the config, the policies and what is known of their rollouts, checked
//! against each other once per load. [`RuleSet::decide`] (in [`crate::webhook`]) answers a
//! request with it.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Result;

use crate::admission::Operation;
use crate::config::Config;
use crate::exceptions::ExceptionSet;
use crate::gatekeeper;
use crate::placement_policy::PlacementSet;
use crate::policy::PolicySet;
use crate::rollout::view::{RolloutView, SharedView};

pub mod plan;

pub use plan::{Plan, Subject};

/// Everything a decision needs besides the request, its scope and its time budget.
#[derive(Clone, Default)]
pub struct RuleSet {
    pub(crate) config: Config,
    pub(crate) policies: PolicySet,
    /// The placement (SAT) policies, which choose pools ([`crate::placement_policy`]).
    pub(crate) placement: PlacementSet,
    /// What the replicas know of the policies' rollouts: which version, at which enforcement,
    /// each namespace group gets ([`crate::rollout::view`]).
    pub(crate) rollouts: SharedView,
    /// The PolicyExceptions that count ([`crate::exceptions`]).
    pub(crate) exceptions: Arc<ExceptionSet>,
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

    /// The budget that lowers `evaluation.timeoutMillis` to what each of `policies` evaluations
    /// may take for all of them to end within `left` (on UPDATE each policy runs on the object
    /// and on the old object); `None` when the configured limit is already within that.
    pub fn within(
        config: &Config,
        policies: usize,
        operation: Operation,
        left: Duration,
    ) -> Option<Budget> {
        let per_object = if operation == Operation::Update { 2 } else { 1 };
        let runs = u32::try_from(policies.max(1) * per_object).unwrap_or(u32::MAX);
        let share = left / runs;
        // Rounded up: a policy stopped by its share ends at the deadline, not just before it.
        let share_ms = u64::try_from(share.as_micros().div_ceil(1000))
            .unwrap_or(u64::MAX)
            .max(1);
        (share_ms < config.evaluation.timeout_millis)
            .then(|| Budget::per_policy(Duration::from_millis(share_ms)))
    }

    /// Each of `policies` evaluations (two per policy on UPDATE) an equal share of `left`,
    /// exactly (no rounding up), so that all of them together end within it.
    pub fn split(policies: usize, operation: Operation, left: Duration) -> Budget {
        let per_object = if operation == Operation::Update { 2 } else { 1 };
        let runs = u32::try_from(policies.max(1) * per_object).unwrap_or(u32::MAX);
        Budget::per_policy((left / runs).max(Duration::from_micros(1)))
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
            exceptions: Arc::default(),
        })
    }
}

impl RuleSet {
    /// The config the rules were checked against.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The SIT policies and Gatekeeper constraints.
    pub fn policies(&self) -> &PolicySet {
        &self.policies
    }

    /// The placement policies.
    pub fn placement(&self) -> &PlacementSet {
        &self.placement
    }

    /// What is known of the policies' rollouts.
    pub fn rollouts(&self) -> &Arc<RolloutView> {
        &self.rollouts
    }

    /// The PolicyExceptions that count.
    pub fn exceptions(&self) -> &Arc<ExceptionSet> {
        &self.exceptions
    }

    /// The same rules with `exceptions` (as read from the cluster or files, checked against
    /// these rules' config and policies: [`ExceptionSet::new`]).
    pub fn with_exceptions(mut self, exceptions: Arc<ExceptionSet>) -> RuleSet {
        self.exceptions = exceptions;
        self
    }

    /// Whether `policy` is a loaded SIT policy or Gatekeeper constraint (an exception may name
    /// it).
    pub fn knows(&self, policy: &str) -> bool {
        self.policies.get(policy).is_some()
    }

    /// The same rules with what the replicas now know of the rollouts.
    pub fn with_rollouts(mut self, rollouts: Arc<RolloutView>) -> RuleSet {
        self.rollouts = rollouts;
        self
    }

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
        let (policies, config) = (&self.policies, &self.config);
        Plan::of(policies, config, &self.rollouts, &self.exceptions, subject)
    }

    /// Each policy that applies to `subject` and what it says of it, in policy name order;
    /// each evaluation takes at most `limit`.
    pub fn evaluate(&self, subject: Subject, limit: Duration) -> Vec<crate::policy::Outcome> {
        self.plan(&subject).run(&self.policies, &subject, limit)
    }
}
