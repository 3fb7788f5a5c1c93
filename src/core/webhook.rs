//! The two webhooks as one entry point: which decision a request gets.

use crate::admission::{Decision, Request};
use crate::ruleset::{Budget, RuleSet};
use crate::scope::Scope;
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

impl RuleSet {
    /// Who may set, change or remove the labels poolguard trusts on a Namespace (`req` is a
    /// Namespace request): the part of a Namespace's validation that runs no policy.
    pub fn pool_authority(&self, req: &Request) -> Decision {
        pool_authority::check(req, &self.config)
    }

    /// Decides `req` for `webhook` in `scope`, each policy evaluation within `budget`.
    pub fn decide(
        &self,
        webhook: Webhook,
        req: &Request,
        scope: Scope,
        budget: Budget,
    ) -> Decision {
        let limit = budget.limit(&self.config);
        match webhook {
            Webhook::Mutate => mutate::mutate(req, scope, self, limit),
            Webhook::Validate if req.group.is_empty() && req.kind == "Namespace" => {
                // Who may set the labels poolguard trusts first; then the constraints that
                // match Namespaces (Gatekeeper's most common: required labels).
                let authority = self.pool_authority(req);
                if !authority.allowed() || !self.policies.has_constraints() {
                    return authority;
                }
                validate::validate(req, scope, self, limit)
            }
            Webhook::Validate => validate::validate(req, scope, self, limit),
        }
    }
}
