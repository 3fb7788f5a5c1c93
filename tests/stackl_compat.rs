//! A SIT template in StackL's layout and idiom (testdata/stackl/allowedrepositories.yaml: Rego v0
//! rules, OPA's deprecated `any()`, StackL's input shape and message) runs unchanged and behaves
//! as StackL documents its allowedrepositories example.

use poolguard_core::admission::Request;
use poolguard_core::config::Config;
use poolguard_core::policy::dependencies::State;
use poolguard_core::policy::{template, Evaluation, PolicySet};
use poolguard_core::ruleset::{Budget, RuleSet, Subject};
use poolguard_core::scope::Scope;
use poolguard_core::webhook::Webhook;
use serde_json::json;

const TEMPLATE: &str = include_str!("../testdata/stackl/allowedrepositories.yaml");

#[test]
fn stackl_template_runs_unchanged() {
    assert!(TEMPLATE.contains("not any(hits)"), "{TEMPLATE}");
    let t = template::from_yaml(TEMPLATE, "allowedrepositories.yaml".into()).unwrap();
    assert_eq!(t.name, "allowedrepositories");
    assert_eq!(t.inputs, ["repositories"]);
    let policies = PolicySet::compile(&[t]).unwrap();

    // StackL's input shape and output message.
    let config = Config::parse(
        "policies:\n  allowedrepositories:\n    parameters:\n      repositories: [\"repo.example.com\"]\n",
        "t",
    )
    .unwrap();
    let input = |image: &str| json!({"services": {"postgres": {"functional_requirements": {"postgres": {"image": image, "tool": "terraform"}}}}});
    let rules = RuleSet::new(config.clone(), policies, Default::default(), "t").unwrap();
    let evaluate = |image: &str| {
        let document = input(image);
        let subject = Subject {
            document: Some(&document),
            review: None,
            pool: None,
            labels: None,
            placement: State::NotApplied,
            target: None,
            now: None,
        };
        rules.evaluate(subject, Budget::FULL.limit(&config))
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
    let d = rules.decide(Webhook::Validate, &req, Scope::default(), Budget::FULL);
    assert!(!d.allowed());
    assert_eq!(d.code(), Some(403));
    assert!(
        d.message()
            .contains("functional_requirement {postgres} has an invalid image repository"),
        "{d:?}"
    );
    assert!(!d.message().contains("{ok}"), "{d:?}");
}
