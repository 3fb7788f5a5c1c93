//! The shipped policies' Rust copy ([`poolguard_core::policy::shipped`]) against their Rego, the
//! reference: on every reference of the image reference table and on generated ones, in pods of
//! several images of every kind, under allow-lists and exemptions with the edges of
//! whole-component matching, the copy gives exactly the Rego's messages wherever it answers.
//! It must answer for every ordinary input (valid images, string lists, names of printable
//! ASCII), so it cannot pass by leaving everything to the Rego; odd inputs (other parameter
//! shapes, other characters, invalid images, documents of another shape) may go to the Rego.

#[path = "data/image_reference_table.rs"]
mod image_reference_table;

use std::time::Duration;

use poolguard_core::pod_images::{ImageSource, PodImage};
use poolguard_core::policy::input;
use poolguard_core::policy::shipped::Shipped;
use poolguard_core::policy::{template, Policy};
use serde_json::{json, Map, Value};

const LIMIT: Duration = Duration::from_secs(10);
const ALLOWED_REPOSITORIES: &str = include_str!("../../../policies/allowedrepositories.yaml");
const LATEST_TAG: &str = include_str!("../../../policies/latesttag.yaml");

fn policy(text: &str, path: &str) -> Policy {
    Policy::compile(&template::from_yaml(text, path.into()).unwrap()).unwrap()
}

/// The table's references, then generated ones around the allow-lists' edges.
fn references() -> Vec<String> {
    let mut out: Vec<String> = image_reference_table::table()
        .into_iter()
        .map(|c| c.input)
        .collect();
    let digest = format!("sha256:{}", image_reference_table::D1);
    let registries = [
        "",
        "docker.io/",
        "index.docker.io/",
        "localhost:5000/",
        "registry.example.com/",
        "registry.example.com.evil.io/",
        "Registry.Example.com/",
        "gcr.io/",
    ];
    let paths = [
        "nginx",
        "library/nginx",
        "team",
        "team/app",
        "teamx/app",
        "a/b/c",
    ];
    let suffixes = [
        String::new(),
        ":1".into(),
        ":latest".into(),
        ":LATEST".into(),
        format!("@{digest}"),
        format!(":1@{digest}"),
        format!(":latest@{digest}"),
    ];
    for registry in registries {
        for path in paths {
            for suffix in &suffixes {
                out.push(format!("{registry}{path}{suffix}"));
            }
        }
    }
    out
}

/// Parameter sets: ordinary ones (string lists), then shapes the copy may leave to the Rego.
fn parameters(list: &str) -> (Vec<Value>, Vec<Value>) {
    let lists = [
        json!([]),
        json!([""]),
        json!(["/"]),
        json!(["docker.io"]),
        json!(["docker.io/library"]),
        json!(["docker.io/library/"]),
        json!(["docker.io/library/nginx"]),
        json!(["nginx"]),
        json!(["registry.example.com"]),
        json!(["registry.example.com//", "gcr.io"]),
        json!(["localhost:5000/team", "localhost"]),
        json!(["Registry.Example.com"]),
        json!(["é.example.com", "quo\"te", "back\\slash"]),
    ];
    let ordinary = lists.iter().map(|l| json!({ list: l })).collect();
    let mut odd = vec![
        json!({ list: "docker.io" }),
        json!({ list: [1] }),
        json!({ list: ["docker.io", null] }),
        json!({ list: {"a": "docker.io"} }),
        json!({ list: null }),
    ];
    if list == "repositories" {
        odd.push(json!({}));
    }
    (ordinary, odd)
}

/// Names of what pulls an image: ordinary ones, then ones Go's `%q` escapes.
const NAMES: [&str; 4] = ["app", "init-1", "we\"ird", "back\\slash"];
const ODD_NAMES: [&str; 4] = ["ünï", "tab\there", "bell\u{7}", "line\nbreak"];
const SOURCES: [ImageSource; 4] = [
    ImageSource::Container,
    ImageSource::InitContainer,
    ImageSource::EphemeralContainer,
    ImageSource::ImageVolume,
];

/// Pods of four images each, every image of the list once, kinds and names rotating.
fn pods<'r>(references: &'r [String], names: &[&str]) -> Vec<Value> {
    let pod = json!({"metadata": {"name": "p", "generateName": "web-"}});
    references
        .chunks(4)
        .enumerate()
        .map(|(n, chunk)| {
            let images: Vec<PodImage<'r>> = chunk
                .iter()
                .enumerate()
                .map(|(i, reference)| PodImage {
                    source: SOURCES[(n + i) % SOURCES.len()],
                    name: format!("{}{i}", names[(n + i) % names.len()]),
                    reference,
                })
                .collect();
            input::document(&pod, &images, Some("blue"))
        })
        .collect()
}

/// What the Rego says of `document` with `parameters`.
fn reference(policy: &Policy, document: &Value, parameters: &Value) -> Result<Vec<String>, String> {
    let mut input = document.clone();
    input["parameters"] = parameters.clone();
    policy.infringements(regorus::Value::from(input), LIMIT)
}

/// Compares the copy with the Rego on every document and parameter set; returns how many
/// cases the copy answered and how many it left.
fn compare(policy: &Policy, documents: &[Value], parameters: &[Value]) -> (usize, usize) {
    let shipped = policy.shipped().expect("the shipped Rego is recognised");
    let (mut answered, mut left) = (0, 0);
    for parameters in parameters {
        let map: &Map<String, Value> = parameters.as_object().unwrap();
        for document in documents {
            match shipped.infringements(document, map) {
                Some(messages) => {
                    answered += 1;
                    assert_eq!(
                        Ok(messages),
                        reference(policy, document, parameters),
                        "{}: parameters {parameters}, document {document}",
                        policy.name
                    );
                }
                None => left += 1,
            }
        }
    }
    (answered, left)
}

fn check(policy: &Policy, list: &str) {
    let all = references();
    let valid: Vec<String> = all
        .iter()
        .filter(|r| poolguard_core::image::parse(r).is_ok())
        .cloned()
        .collect();
    let (ordinary, odd) = parameters(list);

    // Ordinary inputs: the copy answers every one, as the Rego does.
    let documents = pods(&valid, &NAMES);
    let (answered, left) = compare(policy, &documents, &ordinary);
    assert_eq!(left, 0, "{}: the copy left ordinary inputs", policy.name);
    assert_eq!(answered, documents.len() * ordinary.len());
    let infringing = documents
        .iter()
        .filter(|d| {
            let map = ordinary[1].as_object().unwrap();
            !policy
                .shipped()
                .unwrap()
                .infringements(d, map)
                .unwrap()
                .is_empty()
        })
        .count();
    assert!(infringing > 0, "{}: no document infringes", policy.name);

    // Odd inputs: wherever the copy answers, it says what the Rego says.
    compare(policy, &documents, &odd);
    compare(policy, &pods(&valid, &ODD_NAMES), &ordinary);
    let invalid: Vec<String> = all
        .iter()
        .filter(|r| poolguard_core::image::parse(r).is_err())
        .cloned()
        .collect();
    assert!(!invalid.is_empty());
    let (answered, _) = compare(policy, &pods(&invalid, &NAMES), &ordinary);
    assert_eq!(
        answered, 0,
        "{}: the copy answered on invalid images",
        policy.name
    );
    let shapes = [
        json!({}),
        json!({"services": {}}),
        json!({"services": {"s": {}}}),
        json!({"services": {"s": {"functional_requirements": {}}}}),
        json!({"services": {"s": {"functional_requirements": {"c": {"image": "nginx"}}}}}),
        json!({"services": {"s": {"functional_requirements": {"c": {"image": "nginx", "type": 7}}}}}),
        json!({"services": {"s": {"functional_requirements": {"c": {"image": "nginx", "type": "sidecar"}}}}}),
        json!({"services": {"s": {"functional_requirements": {"c": {"image": "nginx", "name": 7}}}}}),
        json!({"services": {"s": {"functional_requirements": {"c": {"image": 7}}}}}),
        json!({"services": {"s": {"functional_requirements": {"c": {}}}}}),
        json!({"services": {"s": {"functional_requirements": {"c": "nginx"}}}}),
        json!({"services": {"s": {"functional_requirements": ["nginx"]}}}),
        json!({"services": [{"functional_requirements": {"c": {"image": "nginx"}}}]}),
        json!({"services": {"a": {"functional_requirements": {"c": {"image": "nginx"}}},
                            "b": {"functional_requirements": {"c": {"image": "nginx"}}}}}),
    ];
    let (answered, _) = compare(policy, &shapes, &ordinary);
    assert!(answered > 0);
}

#[test]
fn allowedrepositories_in_rust_says_what_its_rego_says() {
    check(
        &policy(ALLOWED_REPOSITORIES, "allowedrepositories.yaml"),
        "repositories",
    );
}

#[test]
fn latesttag_in_rust_says_what_its_rego_says() {
    check(&policy(LATEST_TAG, "latesttag.yaml"), "exemptRepositories");
}

#[test]
fn only_the_shipped_rego_under_its_own_name_is_recognised() {
    let shipped = policy(ALLOWED_REPOSITORIES, "allowedrepositories.yaml");
    assert_eq!(shipped.shipped(), Some(Shipped::AllowedRepositories));
    assert_eq!(
        policy(LATEST_TAG, "latesttag.yaml").shipped(),
        Some(Shipped::LatestTag)
    );
    // The same Rego with one character changed is custom.
    let changed = ALLOWED_REPOSITORIES.replace("is not from an allowed", "is not from any allowed");
    assert_eq!(policy(&changed, "allowedrepositories.yaml").shipped(), None);
    // A shipped name with the other policy's Rego does not load (its package is named for the
    // other); a custom policy is never recognised.
    let custom = "name: custom\ninputs: []\npolicy: |\n  package custom\n  infringement[{\"msg\": \"x\"}] { false }\n";
    assert_eq!(policy(custom, "custom.yaml").shipped(), None);
}
