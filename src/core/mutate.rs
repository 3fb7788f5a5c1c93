//! The mutating webhook: give a new Pod its namespace's pool as a nodeSelector, and record the
//! pool in the pod's `poolguard.io/pool` annotation.

use serde_json::Value;

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
    let pod = req.object.unwrap_or(&Value::Null);
    // The patch adds to the spec, so there must be one (the API server always sends it).
    let Some(spec @ Value::Object(_)) = value_at(pod, &["spec"]) else {
        return Decision::deny(400, "spec must be an object");
    };
    let mut patch = match placement::place(
        Some(spec),
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_pod_without_a_spec_object_is_refused_not_given_a_patch_that_cannot_apply() {
        // Found by fuzzing (admission_review): the nodeSelector patch went to /spec/nodeSelector
        // of a pod with no spec, and no JSON Patch can add there.
        let labels = crate::placement::Labels::from([("agentpool".into(), "pool1".into())]);
        for spec in [None, Some(json!(null)), Some(json!("x")), Some(json!([]))] {
            let mut pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web"}});
            if let Some(spec) = spec.clone() {
                pod["spec"] = spec;
            }
            let raw = json!({"uid": "u", "kind": {"group": "", "version": "v1", "kind": "Pod"},
                "namespace": "mapped", "operation": "CREATE", "object": pod});
            let req = Request::from_value(&raw).unwrap();
            let d = mutate(&req, Some(&labels), &Config::default());
            assert_eq!(
                (d.allowed, d.code, d.patch),
                (false, 400, None),
                "spec {spec:?}"
            );
            assert_eq!(d.message, "spec must be an object");
        }
    }
}
