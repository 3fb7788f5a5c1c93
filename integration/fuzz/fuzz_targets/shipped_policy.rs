//! Bytes as text, one line each: an image reference, the name of what pulls it, and allow-list
//! entries (the rest of the lines). The shipped `allowedrepositories` and `latesttag` decide a
//! pod of that one image twice: by their Rust copy (`policy::shipped`) and by their Rego, the
//! reference. Wherever the copy answers, it gives the Rego's messages exactly. Seeded with the
//! images of testdata/reviews.
#![no_main]

use std::time::Duration;

use libfuzzer_sys::fuzz_target;
use poolguard_core::pod_images::{ImageSource, PodImage};
use poolguard_core::policy::input;
use poolguard_fuzz::shipped;
use serde_json::json;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let mut lines = text.split('\n');
    let reference = lines.next().unwrap_or_default();
    let name = lines.next().unwrap_or("app").to_string();
    let entries: Vec<&str> = lines.collect();
    let images = [PodImage {
        source: ImageSource::Container,
        name,
        reference,
    }];
    let pod = json!({"metadata": {"name": "p"}});
    let document = input::document(&pod, &images, None);
    for (policy, list) in [
        ("allowedrepositories", "repositories"),
        ("latesttag", "exemptRepositories"),
    ] {
        let policy = shipped().policies.get(policy).expect("a shipped policy");
        let copy = policy.shipped().expect("the shipped Rego is recognised");
        let parameters = json!({ list: entries });
        let Some(messages) = copy.infringements(&document, parameters.as_object().unwrap())
        else {
            continue;
        };
        let mut rego_input = document.clone();
        rego_input["parameters"] = parameters;
        let rego = policy.infringements(regorus::Value::from(rego_input), Duration::from_secs(20));
        assert_eq!(Ok(messages), rego, "{}: {text:?}", policy.name);
    }
});
