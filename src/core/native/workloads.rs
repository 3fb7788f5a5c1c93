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
    image_sources(spec, |kind, item, text| {
        format!("{{'type': '{kind}', 'name': string({item}.name), 'image': {text}}}")
    })
}

/// CEL: the text of each image [`images`] lists, in the same order: what the cheap checks read
/// (the grammar, the fast paths) without building a map per image.
pub fn image_texts(spec: &str) -> String {
    image_sources(spec, |_, _, text| text.to_owned())
}

/// CEL: one list item per image the pod spec in `spec` pulls (init containers, containers,
/// ephemeral containers, image volumes, in the webhook's order), each `item(type, element,
/// image text)`: the one place that says which fields pull an image.
fn image_sources(spec: &str, item: impl Fn(&str, &str, &str) -> String) -> String {
    let containers = |field: &str, kind: &str| {
        format!(
            "{spec}.?{field}.orValue([]).map(c, {})",
            item(kind, "c", "string(c.?image.orValue(''))")
        )
    };
    format!(
        "{} + {} + {} + {spec}.?volumes.orValue([]).filter(v, has(v.image)).map(v, {})",
        containers("initContainers", "initContainer"),
        containers("containers", "container"),
        containers("ephemeralContainers", "ephemeralContainer"),
        item(
            "image volume",
            "v",
            "string(v.image.?reference.orValue(''))"
        ),
    )
}
