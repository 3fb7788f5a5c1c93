//! The native fast path: what the config and the shipped policies decide, compiled into
//! Kubernetes' in-process admission (`admissionregistration.k8s.io/v1`
//! MutatingAdmissionPolicy and ValidatingAdmissionPolicy, with their bindings), so that the
//! API server decides those requests without calling poolguard. The webhook's decision code
//! stays the reference; these objects are a compiled cache of it, and what cannot be expressed
//! stays on the webhook ([`Native::skipped`] says what and why).
//!
//! Pure: the same rules give the same objects, in the same order.

pub mod canary;
pub(crate) mod cel;
pub(crate) mod image_cel;
pub mod in_force;
mod object;
mod placement;
mod policies;
mod selectors;
pub mod sync_plan;
mod workloads;

use crate::ruleset::RuleSet;

pub use object::{Native, Options, Requests, Skipped, API_VERSION, MANAGED_LABEL, MANAGED_VALUE};

/// Compiles `rules` into native admission objects.
pub fn generate(rules: &RuleSet, options: &Options) -> Native {
    let mut native = Native::default();
    let config = &rules.config;
    match object::excepted(rules, crate::exceptions::PLACEMENT) {
        Some(why) => native.skipped.push(Skipped {
            what: "placement".into(),
            why,
            requests: Requests::Pods,
        }),
        None => placement::generate(config, options, &mut native),
    }
    policies::generate(rules, options, &mut native);
    if config.placement.is_some() {
        native.skipped.push(Skipped {
            what: "namespaces whose pods get their pool chosen by the placement policies".into(),
            why: "the choice reads the nodes' facts and runs SAT Rego policies".into(),
            requests: Requests::Pods,
        });
    }
    native.skipped.push(Skipped {
        what: "pool authority (who may set a namespace's pool label)".into(),
        why: "not compiled yet: it stays on the webhook's namespace rules".into(),
        requests: Requests::Namespaces,
    });
    native
}

#[cfg(test)]
mod cel_differential;
#[cfg(test)]
mod tests;
