//! The objects that carry a pod spec (as [`crate::admission::pod_spec_path`] lists them), as
//! resource rules and as CEL reaching their pod spec and the images it pulls.

use serde_json::{json, Value};

/// `matchConstraints` for Pod CREATE/UPDATE (and `pods/ephemeralcontainers`) and the workloads'
/// CREATE/UPDATE.
pub fn match_constraints() -> Value {
    let rule = |group: &str, resources: &[&str]| {
        json!({"apiGroups": [group], "apiVersions": ["*"], "operations": ["CREATE", "UPDATE"],
            "resources": resources})
    };
    json!({
        "matchPolicy": "Equivalent",
        "resourceRules": [
            rule("", &["pods", "pods/ephemeralcontainers", "replicationcontrollers"]),
            rule("apps", &["deployments", "replicasets", "statefulsets", "daemonsets"]),
            rule("batch", &["jobs", "cronjobs"]),
        ],
    })
}

/// `matchConditions` every pod-spec policy shares: a ReplicationController without a template
/// has no pod spec (the webhook finds nothing in it).
pub fn match_conditions() -> Value {
    json!([{"name": "has-pod-spec",
        "expression": "object.kind != 'ReplicationController' || has(object.spec.template)"}])
}

/// CEL: the pod spec of `object` (`object` or `oldObject`).
pub fn spec(object: &str) -> String {
    format!(
        "({object}.kind == 'Pod' ? {object}.spec : {object}.kind == 'CronJob' ? {object}.spec.jobTemplate.spec.template.spec : {object}.spec.template.spec)"
    )
}

/// CEL: the images the pod spec held in variable `spec` pulls, each `{'type', 'name',
/// 'image'}` (`type` as messages name it), in the order the webhook lists them.
pub fn images(spec: &str) -> String {
    let containers = |field: &str, kind: &str| {
        format!(
            "{spec}.?{field}.orValue([]).map(c, {{'type': '{kind}', 'name': string(c.name), 'image': string(c.?image.orValue(''))}})"
        )
    };
    format!(
        "{} + {} + {} + {spec}.?volumes.orValue([]).filter(v, has(v.image)).map(v, {{'type': 'image volume', 'name': string(v.name), 'image': string(v.image.?reference.orValue(''))}})",
        containers("initContainers", "initContainer"),
        containers("containers", "container"),
        containers("ephemeralContainers", "ephemeralContainer"),
    )
}

/// CEL: the text of each image [`images`] lists, in the same order: what the cheap checks read
/// (the grammar, the fast paths) without building a map per image.
pub fn image_texts(spec: &str) -> String {
    let containers =
        |field: &str| format!("{spec}.?{field}.orValue([]).map(c, string(c.?image.orValue('')))");
    format!(
        "{} + {} + {} + {spec}.?volumes.orValue([]).filter(v, has(v.image)).map(v, string(v.image.?reference.orValue('')))",
        containers("initContainers"),
        containers("containers"),
        containers("ephemeralContainers"),
    )
}
