//! The objects that carry a pod spec (as [`crate::admission::pod_spec_path`] lists them), as
//! resource rules and as CEL reaching their pod spec and the images it pulls.

use serde_json::{json, Value};

use super::cel::{concat, cond, has, ident, list, map, or, str, string, Expr};

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
    let object = ident("object");
    let has_pod_spec = or(
        object
            .clone()
            .field("kind")
            .ne(str("ReplicationController")),
        has(object.field("spec").field("template")),
    );
    json!([{"name": "has-pod-spec", "expression": has_pod_spec.long()}])
}

/// The pod spec of `object` (`object` or `oldObject`).
pub fn spec(object: &str) -> Expr {
    let object = ident(object);
    let kind = || object.clone().field("kind");
    let spec = object.clone().field("spec");
    cond(
        kind().eq(str("Pod")),
        spec.clone(),
        cond(
            kind().eq(str("CronJob")),
            spec.clone()
                .field("jobTemplate")
                .field("spec")
                .field("template")
                .field("spec"),
            spec.field("template").field("spec"),
        ),
    )
}

/// The images the pod spec `spec` pulls, each `{'type', 'name', 'image'}` (`type` as messages
/// name it), in the order the webhook lists them.
pub fn images(spec: &Expr) -> Expr {
    image_sources(spec, |kind, item, text| {
        map([
            (str("type"), str(kind)),
            (str("name"), string(item.field("name"))),
            (str("image"), text),
        ])
    })
}

/// The text of each image [`images`] lists, in the same order: what the cheap checks read (the
/// grammar, the fast paths) without building a map per image.
pub fn image_texts(spec: &Expr) -> Expr {
    image_sources(spec, |_, _, text| text)
}

/// One list item per image the pod spec `spec` pulls (init containers, containers, ephemeral
/// containers, image volumes, in the webhook's order), each `item(type, element, image text)`:
/// the one place that says which fields pull an image.
fn image_sources(spec: &Expr, item: impl Fn(&str, Expr, Expr) -> Expr) -> Expr {
    let or_empty = |field: &str| spec.clone().opt_field(field).method("orValue", [list([])]);
    let containers = |field: &str, kind: &str| {
        let c = ident("c");
        let text = string(c.clone().opt_field("image").method("orValue", [str("")]));
        or_empty(field).map("c", item(kind, c, text))
    };
    let v = ident("v");
    let volume_text = string(
        v.clone()
            .field("image")
            .opt_field("reference")
            .method("orValue", [str("")]),
    );
    concat([
        containers("initContainers", "initContainer"),
        containers("containers", "container"),
        containers("ephemeralContainers", "ephemeralContainer"),
        or_empty("volumes")
            .filter("v", has(v.clone().field("image")))
            .map("v", item("image volume", v, volume_text)),
    ])
}
