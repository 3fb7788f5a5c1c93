//! The images a pod spec makes a node pull — containers, initContainers, ephemeralContainers and
//! image volumes (`volumes[].image.reference`) — read strictly: a field of the wrong type, a
//! container without an image, a name used twice, an invalid image reference or more images than
//! the limit is an error (a 400 denial), never a pod whose images go unchecked.

use std::collections::HashMap;

use serde_json::Value;

use crate::image;

/// Where an image comes from in the pod spec.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ImageSource {
    InitContainer,
    Container,
    EphemeralContainer,
    ImageVolume,
}

impl ImageSource {
    /// The `type` policies see in their input.
    pub fn as_str(self) -> &'static str {
        match self {
            ImageSource::InitContainer => "initContainer",
            ImageSource::Container => "container",
            ImageSource::EphemeralContainer => "ephemeralContainer",
            ImageSource::ImageVolume => "imageVolume",
        }
    }
}

/// The container lists of a pod spec and what their entries are.
const CONTAINER_LISTS: [(&str, ImageSource); 3] = [
    ("initContainers", ImageSource::InitContainer),
    ("containers", ImageSource::Container),
    ("ephemeralContainers", ImageSource::EphemeralContainer),
];

/// Where an entry sits in the pod spec (`spec.containers[1]`), for messages: written out only
/// when one is made.
#[derive(Debug, Clone, Copy)]
struct Place<'p> {
    at: &'p str,
    field: &'static str,
    index: usize,
}

impl std::fmt::Display for Place<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}[{}]", self.at, self.field, self.index)
    }
}

/// One image a pod pulls.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodImage<'a> {
    pub source: ImageSource,
    /// The container's or volume's name (`containers[1]` when a container has none).
    pub name: String,
    pub reference: &'a str,
}

/// Every image the pod spec `spec` (found at `path` inside its object, for messages) pulls, at
/// most `max_images` of them; or the one-line reason it cannot be read.
pub fn images<'a>(
    spec: Option<&'a Value>,
    path: &[&str],
    max_images: usize,
) -> Result<Vec<PodImage<'a>>, String> {
    let at = path.join(".");
    let spec = match spec {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Object(spec)) => spec,
        Some(other) => return Err(format!("{at} must be an object, got {}", kind(other))),
    };
    let list = |field: &str| -> Result<&'a [Value], String> {
        match spec.get(field) {
            None | Some(Value::Null) => Ok(&[]),
            Some(Value::Array(items)) => Ok(items.as_slice()),
            Some(other) => Err(format!("{at}.{field} must be a list, got {}", kind(other))),
        }
    };
    // Counted before anything is collected, so a huge object costs no more than its parse.
    let mut total = 0;
    for (field, _) in CONTAINER_LISTS {
        total += list(field)?.len();
    }
    let volumes = list("volumes")?;
    total += volumes
        .iter()
        .filter(|v| v.get("image").is_some_and(|i| !i.is_null()))
        .count();
    if total > max_images {
        return Err(format!(
            "{at} pulls {total} images (containers, initContainers, ephemeralContainers and image volumes); at most {max_images} are accepted (limits.maxImagesPerPod)"
        ));
    }

    let mut out = Vec::with_capacity(total);
    // Container names are unique across the three lists (the API server requires it); a name
    // used twice would hide one image behind another in the policies' input.
    let mut seen: HashMap<String, Place> = HashMap::new();
    for (field, source) in CONTAINER_LISTS {
        for (i, item) in list(field)?.iter().enumerate() {
            let here = Place {
                at: &at,
                field,
                index: i,
            };
            let Value::Object(container) = item else {
                return Err(format!("{here} must be an object, got {}", kind(item)));
            };
            let name = match container.get("name") {
                None | Some(Value::Null) => format!("{field}[{i}]"),
                Some(Value::String(name)) => name.clone(),
                Some(other) => {
                    return Err(format!("{here}.name must be a string, got {}", kind(other)))
                }
            };
            if let Some(first) = seen.insert(name.clone(), here) {
                return Err(format!(
                    "container name {name:?} is used twice ({first} and {here})"
                ));
            }
            let reference = match container.get("image") {
                Some(Value::String(r)) if !r.is_empty() => r.as_str(),
                None | Some(Value::Null) => return Err(format!("{here} ({name:?}) has no image")),
                Some(Value::String(_)) => {
                    return Err(format!("{here} ({name:?}) has an empty image"))
                }
                Some(other) => {
                    return Err(format!(
                        "{here}.image must be a string, got {}",
                        kind(other)
                    ))
                }
            };
            out.push(checked(source, name, reference, here)?);
        }
    }
    let mut volume_names: HashMap<String, Place> = HashMap::new();
    for (i, item) in volumes.iter().enumerate() {
        let here = Place {
            at: &at,
            field: "volumes",
            index: i,
        };
        let Value::Object(volume) = item else {
            return Err(format!("{here} must be an object, got {}", kind(item)));
        };
        let name = match volume.get("name") {
            Some(Value::String(name)) => name.clone(),
            None | Some(Value::Null) => format!("volumes[{i}]"),
            Some(other) => {
                return Err(format!("{here}.name must be a string, got {}", kind(other)))
            }
        };
        if let Some(first) = volume_names.insert(name.clone(), here) {
            return Err(format!(
                "volume name {name:?} is used twice ({first} and {here})"
            ));
        }
        let reference = match volume.get("image") {
            None | Some(Value::Null) => continue,
            Some(Value::Object(source)) => match source.get("reference") {
                Some(Value::String(r)) if !r.is_empty() => r.as_str(),
                None | Some(Value::Null) => {
                    return Err(format!("{here}.image ({name:?}) has no reference"))
                }
                Some(Value::String(_)) => {
                    return Err(format!("{here}.image ({name:?}) has an empty reference"))
                }
                Some(other) => {
                    return Err(format!(
                        "{here}.image.reference must be a string, got {}",
                        kind(other)
                    ))
                }
            },
            Some(other) => {
                return Err(format!(
                    "{here}.image must be an object, got {}",
                    kind(other)
                ))
            }
        };
        out.push(checked(ImageSource::ImageVolume, name, reference, here)?);
    }
    Ok(out)
}

fn checked<'a>(
    source: ImageSource,
    name: String,
    reference: &'a str,
    here: Place,
) -> Result<PodImage<'a>, String> {
    image::parse(reference).map_err(|e| format!("{here} ({name:?}): {e}"))?;
    if image::is_local_image_id(reference) {
        return Err(format!(
            "{here} ({name:?}): image {reference:?} is an image ID, which the runtime resolves from the images already on the node without asking any registry; give a registry reference"
        ));
    }
    Ok(PodImage {
        source,
        name,
        reference,
    })
}

/// A JSON value's type in words, for messages (the value itself may be huge).
pub fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn read(spec: Value) -> Result<Vec<(ImageSource, String, String)>, String> {
        images(Some(&spec), &["spec"], 10).map(|found| {
            found
                .into_iter()
                .map(|i| (i.source, i.name, i.reference.to_string()))
                .collect()
        })
    }

    #[test]
    fn every_source_of_images_is_found() {
        let got = read(json!({
            "initContainers": [{"name": "init", "image": "busybox"}],
            "containers": [{"name": "app", "image": "registry.example.com/app:1"}, {"image": "nameless"}],
            "ephemeralContainers": [{"name": "debug", "image": "debug.example.com/tools"}],
            "volumes": [
                {"name": "cfg", "configMap": {"name": "x"}},
                {"name": "models", "image": {"reference": "models.example.com/llm:v1", "pullPolicy": "IfNotPresent"}},
                {"name": "nothing", "image": null}
            ],
        }))
        .unwrap();
        let want = [
            (ImageSource::InitContainer, "init", "busybox"),
            (ImageSource::Container, "app", "registry.example.com/app:1"),
            (ImageSource::Container, "containers[1]", "nameless"),
            (
                ImageSource::EphemeralContainer,
                "debug",
                "debug.example.com/tools",
            ),
            (
                ImageSource::ImageVolume,
                "models",
                "models.example.com/llm:v1",
            ),
        ]
        .map(|(s, n, r)| (s, n.to_string(), r.to_string()));
        assert_eq!(got, want);
        assert_eq!(read(json!({})).unwrap(), vec![]);
        assert_eq!(images(None, &["spec"], 0).unwrap(), vec![]);
    }

    #[test]
    fn malformed_specs_are_errors_naming_the_field() {
        let cases = [
            (json!("pod"), "spec must be an object, got a string"),
            (json!({"containers": {"name": "a", "image": "x"}}), "spec.containers must be a list, got an object"),
            (json!({"containers": "nginx"}), "spec.containers must be a list, got a string"),
            (json!({"initContainers": [5]}), "spec.initContainers[0] must be an object, got a number"),
            (json!({"containers": [{"name": "a", "image": 5}]}), "spec.containers[0].image must be a string, got a number"),
            (json!({"containers": [{"name": "a", "image": ["x"]}]}), "must be a string, got a list"),
            (json!({"containers": [{"name": "a"}]}), "has no image"),
            (json!({"containers": [{"name": "a", "image": ""}]}), "has an empty image"),
            (json!({"containers": [{"name": 1, "image": "x"}]}), "spec.containers[0].name must be a string"),
            (
                json!({"initContainers": [{"name": "a", "image": "evil.io/x"}], "containers": [{"name": "a", "image": "ok"}]}),
                "container name \"a\" is used twice (spec.initContainers[0] and spec.containers[0])",
            ),
            (json!({"volumes": "x"}), "spec.volumes must be a list"),
            (json!({"volumes": [{"name": "v", "image": "evil.io/x"}]}), "spec.volumes[0].image must be an object, got a string"),
            (json!({"volumes": [{"name": "v", "image": {}}]}), "has no reference"),
            (json!({"volumes": [{"name": "v", "image": {"reference": 1}}]}), "reference must be a string"),
            (
                json!({"volumes": [{"name": "v", "image": {"reference": "a"}}, {"name": "v", "emptyDir": {}}]}),
                "volume name \"v\" is used twice",
            ),
            (json!({"containers": [{"name": "a", "image": "registry.example.com/app:1.0:evil"}]}), "invalid image reference"),
            (json!({"containers": [{"name": "a", "image": "registry.example.com/../app"}]}), "invalid image reference"),
            (json!({"containers": [{"name": "a", "image": "app@sha256:abc"}]}), "invalid image reference"),
            (json!({"volumes": [{"name": "v", "image": {"reference": "Evil..host/x"}}]}), "invalid image reference"),
            (json!({"containers": [{"name": "a", "image": format!("sha256:{}", "a".repeat(64))}]}), "is an image ID"),
        ];
        for (spec, want) in cases {
            let err = read(spec.clone()).unwrap_err();
            assert!(err.contains(want), "{spec}: {err}");
            assert!(!err.contains('\n'), "{spec}: one line: {err}");
        }
    }

    #[test]
    fn more_images_than_the_limit_is_refused_before_reading_them() {
        let containers: Vec<Value> = (0..11)
            .map(|i| json!({"name": format!("c{i}"), "image": "x"}))
            .collect();
        let err = read(json!({"containers": containers})).unwrap_err();
        assert!(
            err.contains("pulls 11 images") && err.contains("at most 10"),
            "{err}"
        );
        // Image volumes count too.
        let mut spec = json!({"containers": containers[..10]});
        spec["volumes"] = json!([{"name": "v", "image": {"reference": "x"}}]);
        assert!(read(spec).unwrap_err().contains("pulls 11 images"));
    }
}
