//! StackL's allowedrepositories SIT template, exactly as its documentation prints it (it calls
//! OPA's deprecated `any()`), runs unchanged and behaves as documented.
//!
//! The template is read from the StackL reference text shipped beside the project
//! (`../shared/reference/stackl-policy-types.txt`, or `POOLGUARD_STACKL_REFERENCE`), not copied
//! into this repository; without it the tests fail.

use std::path::PathBuf;

use poolguard_core::admission::Request;
use poolguard_core::config::Config;
use poolguard_core::policy::dependencies::State;
use poolguard_core::policy::{template, Evaluation, PolicySet};
use poolguard_core::webhook::{decide, Scope, Webhook};
use serde_json::json;

/// The reference text; its absence fails the test (the file is always beside the project for
/// everyone who develops or tests it).
fn reference() -> String {
    let path = std::env::var_os("POOLGUARD_STACKL_REFERENCE")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                .join("../shared/reference/stackl-policy-types.txt")
        });
    std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "the StackL reference {} is not readable ({e}); it must sit beside the project (or set POOLGUARD_STACKL_REFERENCE)",
            path.display()
        )
    })
}

/// The YAML block of the SIT example: from its `category:` line to the next blank line.
fn sit_example(text: &str) -> String {
    let lines: Vec<&str> = text.lines().collect();
    let start = lines
        .iter()
        .position(|l| l.trim() == "description: allowedrepositories policy")
        .expect("the reference has the allowedrepositories SIT example")
        - 1;
    assert!(
        lines[start].starts_with("category:"),
        "unexpected layout: {}",
        lines[start]
    );
    let len = lines[start..]
        .iter()
        .position(|l| l.trim().is_empty())
        .unwrap();
    lines[start..start + len].join("\n") + "\n"
}

#[test]
fn stackl_template_runs_unchanged() {
    let text = reference();
    let yaml = sit_example(&text);
    assert!(yaml.contains("not any(satisfied)"), "{yaml}");
    let t = template::from_yaml(&yaml, "allowedrepositories.yaml".into()).unwrap();
    assert_eq!(t.name, "allowedrepositories");
    assert_eq!(t.inputs, ["repositories"]);
    let policies = PolicySet::compile(&[t]).unwrap();

    // The documented input shape and output message.
    let config = Config::parse(
        "policies:\n  allowedrepositories:\n    parameters:\n      repositories: [\"repo.example.com\"]\n",
        "t",
    )
    .unwrap();
    let input = |image: &str| json!({"services": {"postgres": {"functional_requirements": {"postgres": {"image": image, "tool": "terraform"}}}}});
    let evaluate = |image: &str| {
        policies.evaluate(&input(image), None, None, None, State::NotApplied, &config)
    };
    let ok = evaluate("repo.example.com/postgres:latest");
    assert_eq!(ok[0].result, Evaluation::Ran(Ok(vec![])));
    let bad = evaluate("repository.example.com");
    assert_eq!(
        bad[0].result,
        Evaluation::Ran(Ok(vec![
            "functional_requirement {postgres} has an invalid image repository {repository.example.com}, must be one of {[\"repo.example.com\"]}".to_string()
        ]))
    );

    // And through the validating webhook, on a real Pod.
    let request = json!({"uid": "u", "kind": {"group": "", "version": "v1", "kind": "Pod"}, "namespace": "ns",
        "operation": "CREATE", "object": {"metadata": {"name": "db"}, "spec": {"containers": [
            {"name": "postgres", "image": "repository.example.com/postgres"},
            {"name": "ok", "image": "repo.example.com/ok"}]}}});
    let req = Request::from_value(&request).unwrap();
    let none = Default::default();
    let d = decide(
        Webhook::Validate,
        &req,
        Scope::default(),
        &config,
        &policies,
        &none,
    );
    assert!(!d.allowed);
    assert_eq!(d.code, 403);
    assert!(
        d.message
            .contains("functional_requirement {postgres} has an invalid image repository"),
        "{d:?}"
    );
    assert!(!d.message.contains("{ok}"), "{d:?}");
}
