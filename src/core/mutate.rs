//! The mutating webhook: give a new Pod its namespace's pool as a nodeSelector, and record the
//! pool in the pod's `poolguard.io/pool` annotation.

use crate::admission::{value_at, Decision, Operation, Request};
use crate::config::Config;
use crate::placement::{self, Placement};
use crate::placement_policy::{self, Chosen, PlacementSet};
use crate::webhook::Scope;

/// Decides one mutating request. Only Pod CREATE (no subresource) in a namespace with a pool is
/// touched: a pod's nodeSelector is immutable after creation, so nothing else needs a patch. In
/// a namespace whose pods get their pool chosen, the placement policies choose it
/// ([`placement_policy::select`]) and the patch is the one a named pool gets.
pub fn mutate(req: &Request, scope: Scope, config: &Config, placement: &PlacementSet) -> Decision {
    let is_pod_create = req.group.is_empty()
        && req.kind == "Pod"
        && req.operation == Operation::Create
        && req.sub_resource.is_empty();
    if !is_pod_create {
        return Decision::allow();
    }
    let pod = req.object.unwrap_or(&serde_json::Value::Null);
    if placement_policy::chooses(scope.labels, config) {
        let chosen = placement_policy::select(
            scope.pools,
            pod,
            &["spec"],
            req.namespace,
            placement,
            config,
            Some(req.raw),
        );
        return match chosen {
            Chosen::Pool(pool, placed) => with_annotation(pod, &pool, placed),
            Chosen::Refused(reasons) => Decision::deny(
                403,
                format!(
                    "no pool can take this pod (the placement policies choose the pools of namespace {:?}):\n{}",
                    req.namespace,
                    crate::validate::summary_of(&reasons, config.limits.max_denial_reasons)
                ),
            ),
            Chosen::Invalid(message) => Decision::deny(400, message),
            Chosen::Unknown(message) => Decision::deny(503, message),
        };
    }
    let Some(pool) = placement::pool_of(scope.labels, &config.namespace_label) else {
        return Decision::allow();
    };
    let spec = value_at(pod, &["spec"]);
    let placed = placement::place(
        spec,
        &["spec"],
        req.namespace,
        pool,
        &config.placement_rules(),
    );
    with_annotation(pod, pool, placed)
}

/// The decision for a pod placed on `pool`: the placement's patch, if any, and the pool
/// annotation.
fn with_annotation(pod: &serde_json::Value, pool: &str, placed: Placement) -> Decision {
    let mut patch = match placed {
        Placement::Satisfied => json_patch::Patch(Vec::new()),
        Placement::Patch(patch) => patch,
        Placement::Conflict(message) => return Decision::deny(403, message),
        Placement::Invalid(message) => return Decision::deny(400, message),
    };
    patch.0.extend(placement::annotate(pod, pool));
    Decision {
        patch: Some(patch).filter(|p| !p.0.is_empty()),
        ..Decision::allow()
    }
}
