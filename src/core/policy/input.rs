//! The input document a SIT policy sees, in StackL's shape so StackL templates run unchanged:
//! `parameters`, `services.<name>.functional_requirements.<container>.{image,type,name}`,
//! `target`, plus the
//! whole AdmissionRequest under `review` for the policies that read it (see
//! [`super::Policy::reads_review`]).

use serde_json::{json, Map, Value};

use crate::pod_images::{ImageSource, PodImage};

/// The input without `parameters` and `review` (both added per policy). `object` is the object
/// under review and `images` what its pod spec pulls ([`crate::pod_images::images`]).
pub fn document(object: &Value, images: &[PodImage], pool: Option<&str>) -> Value {
    json!({
        "services": { service_name(object): { "functional_requirements": functional_requirements(images) } },
        "target": pool,
    })
}

/// The service a pod belongs to: its `generateName` when it has one, else its name.
///
/// The pods a controller makes are replicas of one service: they share the `generateName`
/// (`web-5d9c7b-`) and differ only in the suffix kube-apiserver adds, which the validating
/// webhook sees and the mutating one does not. Naming the service by `generateName` gives both
/// webhooks, and audit, the same input for the same pod, and all replicas the same input (so
/// their results can be remembered, [`super::memo`]). A policy that needs the pod's own name
/// reads `input.review.object.metadata.name`.
pub(crate) fn service_name(object: &Value) -> String {
    let meta = &object["metadata"];
    meta["generateName"]
        .as_str()
        .filter(|n| !n.is_empty())
        .or_else(|| meta["name"].as_str().filter(|n| !n.is_empty()))
        .unwrap_or("unnamed")
        .to_string()
}

/// Each image by the name of what pulls it, with its `type` and that `name`: containers (of
/// every kind) by container name, image volumes as `volume:<name>` (container names cannot
/// hold `:`, so the two never collide).
pub fn functional_requirements(images: &[PodImage]) -> Value {
    let mut out = Map::new();
    for image in images {
        let key = match image.source {
            ImageSource::ImageVolume => format!("volume:{}", image.name),
            _ => image.name.clone(),
        };
        out.insert(
            key,
            json!({ "image": image.reference, "type": image.source.as_str(), "name": image.name }),
        );
    }
    Value::Object(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pod_images::images;

    #[test]
    fn every_image_is_listed_with_its_type_and_name() {
        let spec = json!({
            "initContainers": [{"name": "init", "image": "busybox"}],
            "containers": [{"name": "app", "image": "registry.example.com/app:1"}, {"image": "nameless"}],
            "ephemeralContainers": [{"name": "debug", "image": "debug.example.com/tools"}],
            "volumes": [{"name": "app", "image": {"reference": "models.example.com/m:1"}}],
        });
        let found = images(Some(&spec), &["spec"], 10).unwrap();
        assert_eq!(
            functional_requirements(&found),
            json!({
                "init": {"image": "busybox", "type": "initContainer", "name": "init"},
                "app": {"image": "registry.example.com/app:1", "type": "container", "name": "app"},
                "containers[1]": {"image": "nameless", "type": "container", "name": "containers[1]"},
                "debug": {"image": "debug.example.com/tools", "type": "ephemeralContainer", "name": "debug"},
                "volume:app": {"image": "models.example.com/m:1", "type": "imageVolume", "name": "app"},
            })
        );
    }

    #[test]
    fn document_shape() {
        let object = json!({"metadata": {"generateName": "web-"}, "spec": {"containers": [{"name": "c", "image": "i"}]}});
        let found = images(object.get("spec"), &["spec"], 10).unwrap();
        let doc = document(&object, &found, Some("gpu"));
        assert_eq!(
            doc["services"]["web-"]["functional_requirements"]["c"]["image"],
            "i"
        );
        assert_eq!(doc["target"], "gpu");
        assert!(doc.get("review").is_none());
        // A replica: kube-apiserver has added the suffix (as the validating webhook sees it).
        let replica = json!({"metadata": {"generateName": "web-", "name": "web-x7k2p"}});
        let doc = document(&replica, &found, Some("gpu"));
        assert!(doc["services"]["web-"].is_object(), "{doc}");
        let named = json!({"metadata": {"name": "db-0"}});
        assert!(document(&named, &found, None)["services"]["db-0"].is_object());
        let no_pool = document(&json!({}), &[], None);
        assert_eq!(no_pool["target"], Value::Null);
        assert_eq!(
            no_pool["services"]["unnamed"]["functional_requirements"],
            json!({})
        );
    }
}
