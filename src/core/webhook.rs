//! The two webhooks as one entry point: which decision a request gets.

use crate::admission::{Decision, Request};
use crate::config::Config;
use crate::placement::Labels;
use crate::placement_policy::{PlacementSet, PoolSet};
use crate::policy::PolicySet;
use crate::ruleset::RuleSet;
use crate::{mutate, pool_authority, validate};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Webhook {
    Mutate,
    Validate,
}

impl Webhook {
    pub fn as_str(self) -> &'static str {
        match self {
            Webhook::Mutate => "mutate",
            Webhook::Validate => "validate",
        }
    }

    /// Whether deciding may run Rego, whose time only the policy time limit bounds: always when
    /// validating; when mutating, only if placement policies may choose pools (otherwise the
    /// mutating webhook does placement only: microseconds, linear in the size-limited request).
    pub fn runs_policies(self, rules: &RuleSet) -> bool {
        match self {
            Webhook::Validate => true,
            Webhook::Mutate => rules.config.placement.is_some() && !rules.placement.is_empty(),
        }
    }

    /// How many policies one decision may evaluate per object.
    pub fn policy_count(self, rules: &RuleSet) -> usize {
        match self {
            Webhook::Validate => rules.policies.len() + rules.placement.len(),
            Webhook::Mutate => rules.placement.len(),
        }
    }
}

/// What the shell knows of the cluster around one request.
#[derive(Debug, Clone, Copy, Default)]
pub struct Scope<'a> {
    /// The labels of the request's namespace (`None`: no namespace, or not found).
    pub labels: Option<&'a Labels>,
    /// The pools and what their nodes can do; `None` while the nodes are unknown.
    pub pools: Option<&'a PoolSet>,
}

/// Decides `req` for `webhook` in `scope`. `config` is the rules' config, or a copy whose
/// policy time limit is cut to the request's deadline.
pub fn decide(
    webhook: Webhook,
    req: &Request,
    scope: Scope,
    config: &Config,
    policies: &PolicySet,
    placement: &PlacementSet,
) -> Decision {
    match webhook {
        Webhook::Mutate => mutate::mutate(req, scope, config, placement),
        Webhook::Validate if req.group.is_empty() && req.kind == "Namespace" => {
            pool_authority::check(req, config)
        }
        Webhook::Validate => validate::validate(req, scope, config, policies, placement),
    }
}
