//! Bytes as a StackL policy template file (YAML: name, inputs, policy): read as the policies
//! directory is read, compiled as the server compiles it, and, when it compiles, evaluated on the
//! input of a test pod within a time limit. Seeded with policies/.
#![no_main]

use std::sync::OnceLock;
use std::time::Duration;

use libfuzzer_sys::fuzz_target;
use poolguard_core::pod_images;
use poolguard_core::policy::{input, template, Policy};
use poolguard_fuzz::shipped;
use serde_json::{json, Value};

/// The input document of a test pod, with parameters the shipped policies read.
fn pod_input() -> &'static Value {
    static INPUT: OnceLock<Value> = OnceLock::new();
    INPUT.get_or_init(|| {
        let review = shipped().review("pod-create-bad-image.json");
        let object = &review["request"]["object"];
        let images =
            pod_images::images(object.get("spec"), &["spec"], 100).expect("the test pod's images");
        let mut doc = input::document(object, &images, Some("pool1"));
        doc["parameters"] = json!({
            "repositories": ["registry.example.com/"],
            "exemptRepositories": ["registry.example.com/dev/"],
        });
        doc["review"] = review["request"].clone();
        doc
    })
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(template) = template::from_yaml(text, "fuzz/policy.yaml".into()) else {
        return;
    };
    let Ok(policy) = Policy::compile(&template) else {
        return;
    };
    assert_eq!(policy.name, template.name);
    assert_eq!(policy.inputs, template.inputs);
    assert_eq!(policy.rego(), template.rego);
    let input = regorus::Value::from(pod_input().clone());
    if let Ok(messages) = policy.infringements(input, Duration::from_millis(50)) {
        assert!(
            messages.windows(2).all(|w| w[0] < w[1]),
            "messages are sorted and distinct: {messages:?}"
        );
    }
});
