//! The two webhooks as one entry point: which decision a request gets.

use crate::admission::{Decision, Request};
use crate::config::Config;
use crate::placement::Labels;
use crate::policy::PolicySet;
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

    /// Whether deciding may run Rego, whose time only the policy time limit bounds. The mutating
    /// webhook does placement only: microseconds, linear in the (size-limited) request.
    pub fn runs_policies(self) -> bool {
        self == Webhook::Validate
    }
}

/// Decides `req` for `webhook`, given the labels of the request's namespace.
pub fn decide(
    webhook: Webhook,
    req: &Request,
    labels: Option<&Labels>,
    config: &Config,
    policies: &PolicySet,
) -> Decision {
    match webhook {
        Webhook::Mutate => mutate::mutate(req, labels, config),
        Webhook::Validate if req.group.is_empty() && req.kind == "Namespace" => {
            pool_authority::check(req, config)
        }
        Webhook::Validate => validate::validate(req, labels, config, policies),
    }
}
