use super::*;
use crate::config::Config;
use crate::policy::{template, PolicySet};

fn rules(config: &str) -> RuleSet {
    let templates: Vec<_> = policies::SHIPPED
        .iter()
        .map(|(name, text)| template::from_yaml(text, format!("{name}.yaml").into()).unwrap())
        .collect();
    RuleSet::new(
        Config::parse(config, "t").unwrap(),
        PolicySet::compile(&templates).unwrap(),
        Default::default(),
        "t",
    )
    .unwrap()
}

fn names(native: &Native) -> Vec<String> {
    native
        .names()
        .into_iter()
        .map(|(kind, name)| format!("{kind}/{name}"))
        .collect()
}

#[test]
fn a_pool_override_and_a_warn_policy_are_a_handful_of_bindings() {
    let native = generate(
        &rules(
            "policies:\n  allowedrepositories: {parameters: {repositories: [registry.example.com/]}}\n  latesttag: {enforcement: warn, parameters: {}}\npools:\n  gpu:\n    policies:\n      allowedrepositories: {parameters: {repositories: [gpu.example.com]}}\n",
        ),
        &Options {
            excluded_namespaces: vec!["kube-system".into()],
            require_namespace_label: false,
            namespace_match_labels: Default::default(),
        },
    );
    assert_eq!(
        names(&native),
        [
            "MutatingAdmissionPolicy/poolguard-pool",
            "MutatingAdmissionPolicyBinding/poolguard-pool",
            "ValidatingAdmissionPolicy/poolguard-placement",
            "ValidatingAdmissionPolicyBinding/poolguard-placement",
            "ValidatingAdmissionPolicy/poolguard-images",
            "ValidatingAdmissionPolicyBinding/poolguard-images",
            "ValidatingAdmissionPolicy/poolguard-allowedrepositories",
            "ValidatingAdmissionPolicyBinding/poolguard-allowedrepositories",
            "ValidatingAdmissionPolicy/poolguard-allowedrepositories.pool-gpu",
            "ValidatingAdmissionPolicyBinding/poolguard-allowedrepositories.pool-gpu",
            "ValidatingAdmissionPolicy/poolguard-latesttag",
            "ValidatingAdmissionPolicyBinding/poolguard-latesttag",
        ]
    );
    let binding = |name: &str| {
        native
            .objects
            .iter()
            .find(|o| {
                o["kind"] == "ValidatingAdmissionPolicyBinding" && o["metadata"]["name"] == name
            })
            .unwrap()["spec"]
            .clone()
    };
    assert_eq!(
        binding("poolguard-latesttag")["validationActions"],
        serde_json::json!(["Warn"])
    );
    assert_eq!(
        binding("poolguard-allowedrepositories")["matchResources"]["namespaceSelector"]
            ["matchExpressions"],
        serde_json::json!([
            {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["kube-system"]},
            {"key": "agentpool", "operator": "NotIn", "values": ["gpu"]},
        ])
    );
    assert_eq!(
        binding("poolguard-allowedrepositories.pool-gpu")["matchResources"]["namespaceSelector"]
            ["matchExpressions"][1],
        serde_json::json!({"key": "agentpool", "operator": "In", "values": ["gpu"]})
    );
}

#[test]
fn a_dependency_on_a_compiled_policy_is_compiled_one_on_placement_is_not() {
    let native = generate(
        &rules(
            "policies:\n  allowedrepositories: {parameters: {repositories: [registry.example.com/]}}\n  latesttag:\n    parameters: {}\n    dependencies: [{policy: allowedrepositories}]\n",
        ),
        &Options::default(),
    );
    let latesttag = native
        .objects
        .iter()
        .find(|o| {
            o["kind"] == "ValidatingAdmissionPolicy"
                && o["metadata"]["name"] == "poolguard-latesttag"
        })
        .unwrap();
    let variable = |name: &str| {
        latesttag["spec"]["variables"]
            .as_array()
            .unwrap()
            .iter()
            .find(|v| v["name"] == name)
            .unwrap()["expression"]
            .as_str()
            .unwrap()
    };
    let met = variable("dependencyMet");
    assert!(met.starts_with("!variables.refs.exists(i, "), "{met}");
    assert!(met.contains("'registry.example.com'"), "{met}");
    // The dependency reads the repository, which latesttag alone (no exemptions) does not:
    // each image's reference carries it once.
    let refs = variable("refs");
    for field in ["'tag': ", "'digest': ", "'repository': "] {
        assert_eq!(refs.matches(field).count(), 1, "{field} in {refs}");
    }

    let native = generate(
        &rules(
            "policies:\n  latesttag:\n    parameters: {}\n    dependencies: [{policy: placement}]\n",
        ),
        &Options::default(),
    );
    assert!(!names(&native).iter().any(|n| n.contains("latesttag")));
    assert!(native
        .skipped
        .iter()
        .any(|s| s.what == "policy latesttag" && s.why.contains("stays on the webhook")));
}

#[test]
fn a_policy_without_parameters_is_not_generated() {
    let native = generate(&rules("namespaceLabel: team\n"), &Options::default());
    assert_eq!(native.objects.len(), 6, "{:?}", names(&native));
    let map = &native.objects[0];
    assert_eq!(
        map["spec"]["variables"][0]["expression"],
        "namespaceObject.metadata.labels['team']"
    );
}

#[test]
fn every_binding_selects_only_namespaces_with_the_webhooks_match_labels() {
    let native = generate(
        &rules(
            "policies:\n  allowedrepositories: {parameters: {repositories: [registry.example.com/]}}\npools:\n  gpu:\n    policies:\n      allowedrepositories: {parameters: {repositories: [gpu.example.com]}}\n",
        ),
        &Options {
            excluded_namespaces: vec!["kube-system".into()],
            require_namespace_label: false,
            namespace_match_labels: [("poolguard".to_string(), "on".to_string())].into(),
        },
    );
    let bindings: Vec<_> = native
        .objects
        .iter()
        .filter(|o| o["kind"].as_str().unwrap().ends_with("Binding"))
        .collect();
    assert_eq!(bindings.len(), 5, "{bindings:?}");
    let wanted = serde_json::json!({"key": "poolguard", "operator": "In", "values": ["on"]});
    for binding in bindings {
        let requirements = binding["spec"]["matchResources"]["namespaceSelector"]
            ["matchExpressions"]
            .as_array()
            .unwrap();
        assert!(requirements.contains(&wanted), "{binding}");
    }
}
