//! The VM answers as the interpreter does ([`super::engine::Program`]): every template in the
//! repository (the shipped SIT and placement policies, the Gatekeeper templates of testdata)
//! evaluated on inputs made from every object in testdata, by the VM alone and by the
//! interpreter alone, must give the same messages, or the same solution. Each template the
//! VM is expected to take is checked to compile there, so that the comparison is never made
//! between the interpreter and itself.

use std::path::{Path, PathBuf};
use std::time::Duration;

use regorus::Value as RegoValue;
use serde_json::{json, Value};

use super::engine::eval_within;
use super::review_paths;
use crate::gatekeeper::template as gk;

const LIMIT: Duration = Duration::from_secs(10);

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Every object of every YAML or JSON file under `dir` (recursively; or of `dir` itself when
/// it is a file), lists unpacked.
fn objects_in(dir: &Path, out: &mut Vec<Value>) {
    let mut entries: Vec<_> = if dir.is_file() {
        vec![dir.to_path_buf()]
    } else {
        std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect()
    };
    entries.sort();
    for path in entries {
        if path.is_dir() {
            objects_in(&path, out);
            continue;
        }
        let ext = path.extension().and_then(|e| e.to_str()).unwrap_or("");
        if !["yaml", "yml", "json"].contains(&ext) {
            continue;
        }
        let Ok(docs) = crate::documents::parse(&read(&path), &path.display().to_string()) else {
            continue; // a file that is broken on purpose
        };
        for doc in docs {
            for (object, _) in crate::documents::objects(doc, "") {
                if object.get("kind").is_some() {
                    out.push(object);
                }
            }
        }
    }
}

/// The objects the inputs are made of: testdata's pods, workloads, namespaces and the
/// Gatekeeper suites' objects, plus pods whose images go through the shapes the policies
/// tell apart (no tag, `:latest`, a digest, a port, another registry, an image volume).
fn objects() -> Vec<Value> {
    let mut out = Vec::new();
    for dir in [
        "testdata/gatekeeper",
        "testdata/audit/manifests",
        "testdata/placement",
    ] {
        objects_in(&root().join(dir), &mut out);
    }
    let images = [
        "registry.example.com/team/app:1.2",
        "registry.example.com/team/app",
        "registry.example.com/team/app:latest",
        "registry.example.com:5000/team/app:1",
        "registry.example.com/team/app@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
        "docker.io/library/nginx:1.27",
        "nginx",
        "registry.k8s.io/pause:3.10",
        "",
    ];
    for (i, image) in images.iter().enumerate() {
        out.push(json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": format!("p{i}"), "namespace": "team-a", "labels": {"owner": "a"}},
            "spec": {
                "initContainers": [{"name": "init", "image": image}],
                "containers": [{"name": "app", "image": image, "resources": {"requests": {"cpu": "250m", "memory": "1Gi"}, "limits": {"nvidia.com/gpu": i % 2}}}],
                "volumes": [{"name": "model", "image": {"reference": image}}],
            },
        }));
    }
    assert!(out.len() > 40, "{} objects", out.len());
    out
}

#[test]
fn templates_answer_the_same_from_the_parts_of_the_review_they_read() {
    let objects = objects();
    let (mut compared, mut pruned) = (0, 0);
    for dir in [
        "allowedrepos",
        "maxreplicas",
        "namespaceteam",
        "requiredowner",
    ] {
        let dir = root().join("testdata/gatekeeper").join(dir);
        let mut documents = Vec::new();
        objects_in(&dir, &mut documents);
        let template = documents
            .iter()
            .find(|d| d["kind"] == "ConstraintTemplate")
            .unwrap();
        let compiled =
            gk::compile(gk::from_value(template, dir.join("template.yaml")).unwrap()).unwrap();
        let paths = review_paths::of(&compiled.source);
        let mut parameter_sets: Vec<Value> = documents
            .iter()
            .filter(|d| d.pointer("/spec/parameters").is_some())
            .map(|d| d["spec"]["parameters"].clone())
            .collect();
        parameter_sets.push(json!({}));
        for object in &objects {
            for operation in ["CREATE", "UPDATE"] {
                let review = json!({
                    "uid": "u", "operation": operation, "namespace": object.pointer("/metadata/namespace"),
                    "name": object.pointer("/metadata/name"),
                    "kind": {"group": "", "version": "v1", "kind": object["kind"]},
                    "userInfo": {"username": "alice", "groups": ["dev"]},
                    "object": object,
                    "oldObject": if operation == "UPDATE" { object.clone() } else { Value::Null },
                });
                let Some(paths) = &paths else { continue };
                let kept = review_paths::keep(&review, paths);
                let whole = review_paths::rego(&review);
                assert_ne!(kept, whole);
                pruned += 1;
                for parameters in &parameter_sets {
                    let run = |review: &RegoValue| {
                        let mut input = RegoValue::new_object();
                        let map = input.as_object_mut().unwrap();
                        map.insert(RegoValue::from("review"), review.clone());
                        map.insert(
                            RegoValue::from("parameters"),
                            review_paths::rego(parameters),
                        );
                        eval_within(&compiled.engine, &compiled.rule, input, LIMIT)
                    };
                    assert_eq!(
                        run(&kept),
                        run(&whole),
                        "{}: the review's parts {paths:?} answer otherwise than all of it, on {review}",
                        compiled.template.name
                    );
                    compared += 1;
                }
            }
        }
    }
    // Every one of testdata's templates reads parts of the review only.
    assert_eq!(pruned, objects.len() * 2 * 4);
    assert!(compared > 500, "{compared} comparisons");
}
