//! The mutating webhook: give a new Pod its namespace's pool as a nodeSelector, and record the
//! pool in the pod's `poolguard.io/pool` annotation.

use std::time::Duration;

use crate::admission::{value_at, Decision, DenyCode, Operation, PodSpecAt, Request};
use crate::node_selector::{self, Placement};
use crate::placement_policy::{self, Chosen};
use crate::ruleset::RuleSet;
use crate::scope::Scope;

/// Decides one mutating request. Only Pod CREATE (no subresource) in a namespace with a pool is
/// touched: a pod's nodeSelector is immutable after creation, so nothing else needs a patch. In
/// a namespace whose pods get their pool chosen, the placement policies choose it
/// ([`placement_policy::select`], each policy within `limit`) and the patch is the one a named
/// pool gets.
pub fn mutate(req: &Request, scope: Scope, rules: &RuleSet, limit: Duration) -> Decision {
    let (config, placement) = (&rules.config, &rules.placement);
    let is_pod_create = req.group.is_empty()
        && req.kind == "Pod"
        && req.operation == Operation::Create
        && req.sub_resource.is_empty();
    if !is_pod_create {
        return Decision::allow();
    }
    let pod = req.object.unwrap_or(&serde_json::Value::Null);
    let placed_somewhere = placement_policy::chooses(scope.labels, config)
        || node_selector::pool_of(scope.labels, &config.namespace_label).is_some();
    // The patch adds to the spec, so there must be one (the API server always sends it).
    if placed_somewhere && !value_at(pod, &["spec"]).is_some_and(serde_json::Value::is_object) {
        return Decision::deny(DenyCode::BadRequest, "spec must be an object");
    }
    if placement_policy::chooses(scope.labels, config) {
        let chosen = placement_policy::select(
            scope.pools,
            PodSpecAt {
                object: pod,
                path: &["spec"],
                namespace: req.namespace,
            },
            placement,
            config,
            Some(req.raw),
            limit,
        );
        return match chosen {
            Chosen::Pool(pool, placed) => with_annotation(pod, &pool, placed),
            Chosen::Refused(reasons) => Decision::deny(
                DenyCode::Forbidden,
                format!(
                    "no pool can take this pod (the placement policies choose the pools of namespace {:?}):\n{}",
                    req.namespace,
                    crate::admission::summary_of(&reasons, config.limits.max_denial_reasons)
                ),
            ),
            Chosen::Invalid(message) => Decision::deny(DenyCode::BadRequest, message),
            Chosen::Unknown(message) => Decision::deny(DenyCode::Unavailable, message),
        };
    }
    let Some(pool) = node_selector::pool_of(scope.labels, &config.namespace_label) else {
        return Decision::allow();
    };
    let spec = value_at(pod, &["spec"]);
    let placed = node_selector::place(
        spec,
        &["spec"],
        req.namespace,
        pool,
        &config.placement_rules(),
    );
    if let Placement::Conflict(message) = &placed {
        // A PolicyException for `placement` allows the pod as it is, without the pool's
        // selector, saying so.
        let at = PodSpecAt {
            object: pod,
            path: &["spec"],
            namespace: req.namespace,
        };
        if let Some(mark) = crate::validate::placement_exception(at, scope, rules) {
            return Decision {
                warnings: vec![format!("{message} (allowed by {mark})")],
                exceptions: vec![format!("{}: {mark}", crate::exceptions::PLACEMENT)],
                ..Decision::allow()
            };
        }
    }
    with_annotation(pod, pool, placed)
}

/// The decision for a pod placed on `pool`: the placement's patch, if any, and the pool
/// annotation.
fn with_annotation(pod: &serde_json::Value, pool: &str, placed: Placement) -> Decision {
    let mut patch = match placed {
        Placement::Satisfied => json_patch::Patch(Vec::new()),
        Placement::Patch(patch) => patch,
        Placement::Conflict(message) => return Decision::deny(DenyCode::Forbidden, message),
        Placement::Invalid(message) => return Decision::deny(DenyCode::BadRequest, message),
    };
    patch.0.extend(node_selector::annotate(pod, pool));
    if patch.0.is_empty() {
        Decision::allow()
    } else {
        Decision::patched(patch)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use crate::ruleset::Budget;
    use serde_json::json;

    #[test]
    fn a_pod_without_a_spec_object_is_refused_not_given_a_patch_that_cannot_apply() {
        // Found by fuzzing (admission_review): the nodeSelector patch went to /spec/nodeSelector
        // of a pod with no spec, and no JSON Patch can add there.
        for pool in ["pool1", "auto"] {
            let labels = crate::labels::Labels::from([("agentpool".into(), pool.into())]);
            let config =
                Config::parse("placement: {chooseValue: auto, pools: [pool1, gpu]}\n", "t")
                    .unwrap();
            for spec in [None, Some(json!(null)), Some(json!("x")), Some(json!([]))] {
                let mut pod =
                    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web"}});
                if let Some(spec) = spec.clone() {
                    pod["spec"] = spec;
                }
                let raw = json!({"uid": "u", "kind": {"group": "", "version": "v1", "kind": "Pod"},
                    "namespace": "mapped", "operation": "CREATE", "object": pod});
                let req = Request::from_value(&raw).unwrap();
                let scope = Scope {
                    labels: Some(&labels),
                    pools: None,
                    now: None,
                };
                let rules = RuleSet {
                    config: config.clone(),
                    ..RuleSet::default()
                };
                let d = mutate(&req, scope, &rules, Budget::FULL.limit(&config));
                assert_eq!(
                    (d.allowed(), d.code(), d.patch()),
                    (false, Some(400), None),
                    "{pool}: spec {spec:?}"
                );
                assert_eq!(d.message(), "spec must be an object");
            }
        }
    }
}
