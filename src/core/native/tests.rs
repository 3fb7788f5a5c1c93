use super::object::validation;
use super::*;
use crate::config::{Config, Enforcement};
use crate::policy::{template, PolicySet};
use crate::rollout::machine::GroupStatus;

/// The rules of `config` with the shipped policies (also the other native tests' rules).
pub(super) fn rules(config: &str) -> RuleSet {
    let templates: Vec<_> = crate::policy::shipped::SOURCES
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

/// CEL text without its whitespace: the long form ([`cel::Expr::long`]) and the one-line form
/// of an expression are the same text then.
fn squash(cel: &str) -> String {
    cel.split_whitespace().collect()
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
    // Same namespaces, same enforcement: one policy holding both, each a validation.
    let both = native
        .objects
        .iter()
        .find(|o| {
            o["kind"] == "ValidatingAdmissionPolicy"
                && o["metadata"]["name"] == "poolguard-allowedrepositories-and-latesttag"
        })
        .unwrap();
    assert_eq!(both["spec"]["validations"].as_array().unwrap().len(), 2);
    let find = |name: &str| {
        both["spec"]["variables"]
            .as_array()
            .unwrap()
            .iter()
            .find(|v| v["name"] == name)
            .map(|v| v["expression"].as_str().unwrap())
    };
    let variable = |name: &str| find(name).unwrap_or_else(|| panic!("no variable {name}"));
    // A policy without a dependency has no condition to meet: no variable for it, and its
    // infringements are not filtered by one.
    assert_eq!(find("dependencyMet_allowedrepositories"), None);
    assert!(!variable("infringing_allowedrepositories").contains("dependencyMet"));
    let met = variable("dependencyMet_latesttag");
    // Met unless an image is not under the raw fast path and its normalised repository infringes.
    assert!(
        squash(met).starts_with(&squash(
            "!(!variables.passes_allowedrepositories && variables.refs.exists(i, "
        )),
        "{met}"
    );
    // The fast path is worked out once per policy: the dependency's condition and the policy's
    // own `infringing` read the same variable.
    assert_eq!(
        variable("passes_allowedrepositories"),
        "variables.texts.all(t, t.startsWith('registry.example.com/'))"
    );
    assert!(squash(variable("infringing_allowedrepositories"))
        .starts_with(&squash("variables.passes_allowedrepositories ? [] : ")));
    assert!(met.contains("'registry.example.com'"), "{met}");
    // Both checks and the dependency read one `refs`: each image's reference carries each part
    // once.
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

const ROLLOUT: &str = "policies:\n  allowedrepositories:\n    parameters: {repositories: [registry.example.com/]}\n    rollout:\n      groups:\n        - {name: canary, namespaceSelector: {matchLabels: {risk: low}}}\n        - {name: standard, namespaceSelector: {matchExpressions: [{key: risk, operator: In, values: [medium]}]}}\n        - {name: critical, namespaceSelector: {matchLabels: {tier: critical}}}\n      minSuccessTime: 10s\n      progressDeadline: 1m\npools:\n  gpu:\n    policies:\n      allowedrepositories: {parameters: {repositories: [gpu.example.com/]}}\n";

/// `rules` with a rollout of allowedrepositories whose groups stand at `statuses`, from a
/// previous version at warn that allowed `old.example.com`.
fn rolled_out(config: &str, statuses: [GroupStatus; 3]) -> RuleSet {
    use crate::rollout::machine::{GroupState, RolloutState};
    use crate::rollout::view::{PolicyRollout, RolloutView, StoredSettings, StoredVersion};
    let mut rules = rules(config);
    let policy = rules.policies.get("allowedrepositories").unwrap();
    let previous = StoredVersion {
        version: "old".into(),
        rego: policy.rego().to_string(),
        inputs: policy.inputs.clone(),
        settings: StoredSettings {
            enforcement: Some(Enforcement::Warn),
            parameters: serde_json::json!({"repositories": ["old.example.com"]})
                .as_object()
                .cloned(),
        },
        pools: Default::default(),
        constraint: None,
    };
    let state = RolloutState {
        version: rules.policies.version("allowedrepositories").to_string(),
        previous_version: Some("old".into()),
        previous_enforcement: Some(Enforcement::Warn),
        final_enforcement: Enforcement::Deny,
        paused_since: None,
        groups: ["canary", "standard", "critical"]
            .into_iter()
            .zip(statuses)
            .map(|(name, status)| GroupState::new(name, status, 0, ""))
            .collect(),
    };
    let view = RolloutView {
        policies: [(
            "allowedrepositories".to_string(),
            PolicyRollout {
                state,
                current: None,
                previous: Some(previous.compile("allowedrepositories").unwrap()),
            },
        )]
        .into(),
    };
    rules.rollouts = std::sync::Arc::new(view);
    rules
}

fn object<'n>(native: &'n Native, kind: &str, name: &str) -> &'n serde_json::Value {
    native
        .objects
        .iter()
        .find(|o| o["kind"] == kind && o["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("{kind}/{name} in {:?}", names(native)))
}

#[test]
fn a_rollout_is_a_binding_per_group_at_the_enforcement_and_version_the_webhook_gives_it() {
    use GroupStatus::*;
    let native = generate(
        &rolled_out(ROLLOUT, [Succeeded, Progressing, ToApply]),
        &Options::default(),
    );
    let base = "poolguard-allowedrepositories";
    for pool in ["", ".pool-gpu"] {
        for (group, actions, allowed) in [
            // Succeeded: the current version at the final enforcement.
            (".group-canary", "Deny", "registry.example.com"),
            // Progressing: the current version at warn.
            (".group-standard", "Warn", "registry.example.com"),
            // ToApply, and the namespaces no group selects: the previous version at its own.
            (".group-critical", "Warn", "old.example.com"),
            (".ungrouped", "Warn", "old.example.com"),
        ] {
            let name = format!("{base}{pool}{group}");
            let binding = object(&native, "ValidatingAdmissionPolicyBinding", &name);
            assert_eq!(
                binding["spec"]["validationActions"],
                serde_json::json!([actions]),
                "{name}"
            );
            let policy = object(&native, "ValidatingAdmissionPolicy", &name).to_string();
            // gpu's own parameters are the current version's; the previous had none for it.
            let allowed = match (pool, allowed) {
                (".pool-gpu", "registry.example.com") => "gpu.example.com",
                (_, allowed) => allowed,
            };
            assert!(policy.contains(allowed), "{name}: {policy}");
        }
    }
    assert!(!names(&native).contains(&format!("ValidatingAdmissionPolicy/{base}")));
    let selector = |name: &str| {
        object(&native, "ValidatingAdmissionPolicyBinding", name)["spec"]["matchResources"]
            ["namespaceSelector"]["matchExpressions"]
            .clone()
    };
    assert_eq!(
        selector(&format!("{base}.group-canary")),
        serde_json::json!([
            {"key": "agentpool", "operator": "NotIn", "values": ["gpu"]},
            {"key": "risk", "operator": "In", "values": ["low"]},
        ])
    );
    assert_eq!(
        selector(&format!("{base}.pool-gpu.ungrouped")),
        serde_json::json!([{"key": "agentpool", "operator": "In", "values": ["gpu"]}])
    );
    // A group takes only namespaces no group before it selects: said in CEL.
    let in_group = |name: &str| {
        let policy = object(&native, "ValidatingAdmissionPolicy", name);
        let variables = policy["spec"]["variables"].as_array().unwrap();
        let found = variables.iter().find(|v| v["name"] == "inGroup");
        found.map(|v| v["expression"].as_str().unwrap().to_string())
    };
    assert_eq!(in_group(&format!("{base}.group-canary")), None);
    let standard = in_group(&format!("{base}.group-standard")).unwrap();
    assert_eq!(standard.matches("!(").count(), 1, "{standard}");
    assert!(standard.contains("['risk'] in ['low']"), "{standard}");
    let ungrouped = in_group(&format!("{base}.ungrouped")).unwrap();
    assert_eq!(ungrouped.matches("!(").count(), 3, "{ungrouped}");
    // A Progressing group's would-be denials are counted by the webhook: it stays on.
    assert!(native
        .skipped
        .iter()
        .any(|s| s.requests == Requests::Pods && s.what.contains("group standard is Progressing")));
}

#[test]
fn a_finished_rollout_needs_no_webhook_unless_denials_are_watched_and_one_without_state_stays_on_it(
) {
    use GroupStatus::*;
    let pods = |native: &Native| {
        native
            .skipped
            .iter()
            .filter(|s| s.requests == Requests::Pods)
            .map(|s| format!("{}: {}", s.what, s.why))
            .collect::<Vec<_>>()
    };
    let done = generate(
        &rolled_out(ROLLOUT, [Succeeded, Succeeded, Succeeded]),
        &Options::default(),
    );
    assert_eq!(pods(&done), Vec::<String>::new());
    let watched = ROLLOUT.replace(
        "      progressDeadline: 1m\n",
        "      progressDeadline: 1m\n      maxDenialsPerMinute: 5\n",
    );
    let native = generate(
        &rolled_out(&watched, [Succeeded, Succeeded, Succeeded]),
        &Options::default(),
    );
    assert!(
        pods(&native)[0].contains("group canary is Succeeded"),
        "{:?}",
        pods(&native)
    );
    let no_state = generate(&rules(ROLLOUT), &Options::default());
    assert!(!names(&no_state)
        .iter()
        .any(|n| n.contains("allowedrepositories")));
    assert!(
        pods(&no_state)[0].contains("has no state here yet"),
        "{:?}",
        pods(&no_state)
    );
}

/// kube-apiserver evaluates every messageExpression on every request: each generated message
/// is guarded by its validation, so an admitted request does not build it.
#[test]
fn every_message_is_built_only_when_its_validation_refuses() {
    let native = generate(
        &rules(
            "policies:\n  allowedrepositories: {parameters: {repositories: [registry.example.com/]}}\n  latesttag: {parameters: {}}\n",
        ),
        &Options::default(),
    );
    let mut messages = 0;
    for object in native
        .objects
        .iter()
        .filter(|o| o["kind"] == "ValidatingAdmissionPolicy")
    {
        for validation in object["spec"]["validations"].as_array().unwrap() {
            let expression = squash(validation["expression"].as_str().unwrap());
            let message = validation["messageExpression"].as_str().unwrap();
            // `expression ? '' : message`, the condition in parentheses where precedence needs.
            let guarded = squash(message);
            assert!(
                guarded.starts_with(&format!("{expression}?'':"))
                    || guarded.starts_with(&format!("({expression})?'':")),
                "{}: {message}",
                object["metadata"]["name"]
            );
            messages += 1;
        }
    }
    // placement's three, the images policy's three, one per shipped policy
    assert_eq!(messages, 8);
}

/// A validation that always holds checks nothing and is left out; any other refuses with its
/// message, which is built only when the validation fails.
#[test]
fn a_validation_that_always_holds_is_left_out() {
    use cel::{bool, ident, str};
    assert_eq!(validation(bool(true), "m", str("why"), "Invalid"), None);
    let refused = validation(ident("ok"), "m", str("why"), "Invalid").unwrap();
    assert_eq!(
        refused,
        serde_json::json!({"expression": "ok", "message": "m",
            "messageExpression": "ok ? '' : 'why'", "reason": "Invalid"})
    );
    // `false` is kept: it refuses every request.
    let always = validation(bool(false), "m", str("why"), "Invalid").unwrap();
    assert_eq!(always["messageExpression"], "'why'");
}

/// A policy (or placement) that PolicyExceptions name is not compiled: the webhook decides it,
/// reading the exceptions and their expiry live; `poolguard native` says so, and a policy that
/// depends on it stays on the webhook too. Without exceptions both are compiled.
#[test]
fn what_exceptions_name_stays_on_the_webhook() {
    use crate::exceptions::{ExceptionSet, PolicyException};
    let config = "policies:\n  allowedrepositories: {parameters: {repositories: [registry.example.com/]}}\n  latesttag:\n    parameters: {}\n    dependencies: [{policy: allowedrepositories}]\nexceptions: {namespaces: [poolguard]}\n";
    let plain = generate(&rules(config), &Options::default());
    assert!(
        plain
            .skipped
            .iter()
            .all(|s| !s.what.contains("allowedrepositories") && s.what != "placement"),
        "{:?}",
        plain.skipped
    );
    let exception = |policies: serde_json::Value| {
        PolicyException::from_object(&serde_json::json!({
            "apiVersion": "poolguard.io/v1alpha1", "kind": "PolicyException",
            "metadata": {"name": "legacy", "namespace": "poolguard"},
            "spec": {"policies": policies, "ticket": "OPS-1", "expires": "2027-01-02T00:00:00Z"}}))
        .unwrap()
    };
    let base = rules(config);
    let (set, _) = ExceptionSet::new(
        vec![exception(serde_json::json!([
            "allowedrepositories",
            "placement"
        ]))],
        base.config(),
        &|_| true,
        1_798_761_600,
    );
    let excepted = generate(
        &base.with_exceptions(std::sync::Arc::new(set)),
        &Options::default(),
    );
    let why = |what: &str| {
        excepted
            .skipped
            .iter()
            .find(|s| s.what == what)
            .map(|s| s.why.clone())
            .unwrap_or_else(|| panic!("{what} not skipped: {:?}", excepted.skipped))
    };
    assert!(why("policy allowedrepositories")
        .starts_with("PolicyExceptions name it (poolguard/legacy)"));
    assert!(why("placement").contains("reading them and their expiry live"));
    assert!(why("policy latesttag")
        .contains("depends on a policy (or placement) that stays on the webhook"));
    let generated = names(&excepted);
    assert!(
        generated.iter().all(|n| !n.contains("allowedrepositories")
            && !n.contains("poolguard-pool")
            && !n.contains("poolguard-placement")),
        "{generated:?}"
    );
}
