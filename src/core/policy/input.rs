//! The input document a SIT policy sees, in StackL's shape so StackL templates run unchanged:
//! `parameters`, `services.<name>.functional_requirements.<container>.image`, `target`, plus the
//! whole AdmissionRequest under `review` for the policies that read it (see
//! [`super::Policy::reads_review`]).

use serde_json::{json, Map, Value};

/// The container lists of a pod spec, with the `type` each gets in the input.
const CONTAINER_LISTS: [(&str, &str); 3] = [
    ("initContainers", "initContainer"),
    ("containers", "container"),
    ("ephemeralContainers", "ephemeralContainer"),
];

/// The input without `parameters` and `review` (both added per policy). `object` is the object
/// under review and `spec` its pod spec.
pub fn document(object: &Value, spec: Option<&Value>, pool: Option<&str>) -> Value {
    json!({
        "services": { service_name(object): { "functional_requirements": functional_requirements(spec) } },
        "target": pool,
    })
}

/// The object's name; controller-made pods may only have `generateName`.
fn service_name(object: &Value) -> String {
    let meta = &object["metadata"];
    meta["name"]
        .as_str()
        .filter(|n| !n.is_empty())
        .or_else(|| meta["generateName"].as_str().filter(|n| !n.is_empty()))
        .unwrap_or("unnamed")
        .to_string()
}

/// Each container (of every kind) by name, with its image and type.
pub fn functional_requirements(spec: Option<&Value>) -> Value {
    let mut out = Map::new();
    for (list, kind) in CONTAINER_LISTS {
        let Some(items) = spec.and_then(|s| s.get(list)).and_then(Value::as_array) else {
            continue;
        };
        for (i, container) in items.iter().enumerate() {
            let name = container["name"]
                .as_str()
                .map_or_else(|| format!("{list}[{i}]"), str::to_string);
            let image = container["image"].clone();
            out.insert(name, json!({ "image": image, "type": kind }));
        }
    }
    Value::Object(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_container_kind_is_listed() {
        let spec = json!({
            "initContainers": [{"name": "init", "image": "busybox"}],
            "containers": [{"name": "app", "image": "registry.example.com/app:1"}, {"image": "nameless"}],
            "ephemeralContainers": [{"name": "debug", "image": "debug.example.com/tools"}],
        });
        let fr = functional_requirements(Some(&spec));
        assert_eq!(
            fr,
            json!({
                "init": {"image": "busybox", "type": "initContainer"},
                "app": {"image": "registry.example.com/app:1", "type": "container"},
                "containers[1]": {"image": "nameless", "type": "container"},
                "debug": {"image": "debug.example.com/tools", "type": "ephemeralContainer"},
            })
        );
    }

    #[test]
    fn document_shape() {
        let object = json!({"metadata": {"generateName": "web-"}, "spec": {"containers": [{"name": "c", "image": "i"}]}});
        let doc = document(&object, object.get("spec"), Some("gpu"));
        assert_eq!(
            doc["services"]["web-"]["functional_requirements"]["c"]["image"],
            "i"
        );
        assert_eq!(doc["target"], "gpu");
        assert!(doc.get("review").is_none());
        let no_pool = document(&json!({}), None, None);
        assert_eq!(no_pool["target"], Value::Null);
        assert_eq!(
            no_pool["services"]["unnamed"]["functional_requirements"],
            json!({})
        );
    }
}
