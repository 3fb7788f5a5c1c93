//! The validating webhook: runs on the final object (after every mutating webhook) and checks
//! pool placement and the SIT policies, for Pods and for workload templates at apply time.

use serde_json::Value;

use crate::admission::{pod_spec_path, value_at, Decision, Operation, PolicyResult, Request};
use crate::config::{Config, Enforcement, OnError};
use crate::placement::{self, Labels, Placement};
use crate::policy::{input, PolicySet};

/// Everything found wrong with one object.
#[derive(Debug, Default, PartialEq)]
struct Findings {
    /// (status code, reason)
    denials: Vec<(u16, String)>,
    warnings: Vec<String>,
    dryrun: Vec<String>,
    evaluations: Vec<PolicyResult>,
}

/// Decides one validating request.
///
/// On UPDATE only what the old object did not already have is denied: pods' selectors are
/// immutable, and an object admitted under older rules must stay updatable.
pub fn validate(
    req: &Request,
    labels: Option<&Labels>,
    config: &Config,
    policies: &PolicySet,
) -> Decision {
    if !matches!(req.operation, Operation::Create | Operation::Update) {
        return Decision::allow();
    }
    let Some(path) = pod_spec_path(req.group, req.kind) else {
        return Decision::allow();
    };
    let is_pod = path.len() == 1;
    let checked_subresource =
        req.sub_resource.is_empty() || (is_pod && req.sub_resource == "ephemeralcontainers");
    let Some(object) = req.object.filter(|_| checked_subresource) else {
        return Decision::allow();
    };
    let pool = placement::pool_of(labels, &config.namespace_label);
    let mut found = findings(req, object, path, is_pod, pool, config, policies);
    if req.operation == Operation::Update {
        if let Some(old) = req.old_object {
            let before = findings(req, old, path, is_pod, pool, config, policies);
            found
                .denials
                .retain(|d| !before.denials.iter().any(|b| b.1 == d.1));
        }
    }
    let code = if found.denials.iter().any(|d| d.0 == 403) {
        403
    } else {
        found.denials.first().map_or(0, |d| d.0)
    };
    let message = found
        .denials
        .iter()
        .map(|d| d.1.as_str())
        .collect::<Vec<_>>()
        .join("\n");
    Decision {
        allowed: found.denials.is_empty(),
        code,
        message,
        patch: None,
        warnings: found.warnings,
        dryrun: found.dryrun,
        policy_results: found.evaluations,
    }
}

fn findings(
    req: &Request,
    object: &Value,
    path: &[&str],
    is_pod: bool,
    pool: Option<&str>,
    config: &Config,
    policies: &PolicySet,
) -> Findings {
    let mut found = Findings::default();
    let spec = value_at(object, path);
    if let Some(pool) = pool {
        match placement::place(spec, path, req.namespace, pool, &config.placement_rules()) {
            Placement::Satisfied => {}
            // A template's pods get the selector from the mutating webhook when they are created.
            Placement::Patch(_) if !is_pod => {}
            Placement::Patch(_) => found.denials.push((
                403,
                format!(
                    "namespace {:?} is assigned to pool {pool:?} but the pod has no nodeSelector {}={pool}: the mutating webhook did not run or its change was undone",
                    req.namespace, config.node_selector_key
                ),
            )),
            // The namespace was relabelled between the mutating call and this one: the pod
            // carries the pool the mutating webhook gave it, as it would had it come a moment earlier.
            Placement::Conflict(_)
                if is_pod
                    && placement::placed_by_mutation(object, spec, &config.node_selector_key).is_some() => {}
            Placement::Conflict(message) => found.denials.push((403, message)),
            Placement::Invalid(message) => found.denials.push((400, message)),
        }
    }
    if policies.is_empty() {
        return found;
    }
    let document = input::document(object, spec, pool);
    for outcome in policies.evaluate(&document, Some(req.raw), pool, config) {
        let name = &outcome.policy;
        found.evaluations.push(PolicyResult {
            policy: name.clone(),
            enforcement: outcome.enforcement,
            infringements: outcome.result.as_ref().map_or(0, Vec::len),
            error: outcome.result.is_err(),
        });
        match (outcome.result, outcome.enforcement) {
            (Ok(messages), Enforcement::Deny) => found
                .denials
                .extend(messages.into_iter().map(|m| (403, format!("{name}: {m}")))),
            (Ok(messages), Enforcement::Warn) => found
                .warnings
                .extend(messages.into_iter().map(|m| format!("{name}: {m}"))),
            (Ok(messages), Enforcement::Dryrun) => found
                .dryrun
                .extend(messages.into_iter().map(|m| format!("{name}: {m}"))),
            (Err(error), Enforcement::Deny) => match config.evaluation.on_error {
                OnError::Deny => found.denials.push((
                    500,
                    format!("policy {name} could not be evaluated, so the request is denied (evaluation.onError: deny): {error}"),
                )),
                OnError::Allow => found.warnings.push(format!(
                    "policy {name} could not be evaluated; allowed because evaluation.onError is allow: {error}"
                )),
            },
            (Err(error), Enforcement::Warn) => {
                found.warnings.push(format!("policy {name} could not be evaluated: {error}"))
            }
            (Err(error), Enforcement::Dryrun) => {
                found.dryrun.push(format!("policy {name} could not be evaluated: {error}"))
            }
        }
    }
    found
}
