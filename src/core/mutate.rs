//! The mutating webhook: give a new Pod its namespace's pool as a nodeSelector, and record the
//! pool in the pod's `poolguard.io/pool` annotation.

use crate::admission::{value_at, Decision, Operation, Request};
use crate::config::Config;
use crate::placement::{self, Labels, Placement};

/// Decides one mutating request. Only Pod CREATE (no subresource) in a namespace with a pool is
/// touched: a pod's nodeSelector is immutable after creation, so nothing else needs a patch.
pub fn mutate(req: &Request, labels: Option<&Labels>, config: &Config) -> Decision {
    let is_pod_create = req.group.is_empty()
        && req.kind == "Pod"
        && req.operation == Operation::Create
        && req.sub_resource.is_empty();
    if !is_pod_create {
        return Decision::allow();
    }
    let Some(pool) = placement::pool_of(labels, &config.namespace_label) else {
        return Decision::allow();
    };
    let pod = req.object.unwrap_or(&serde_json::Value::Null);
    let spec = value_at(pod, &["spec"]);
    let mut patch = match placement::place(
        spec,
        &["spec"],
        req.namespace,
        pool,
        &config.placement_rules(),
    ) {
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
