//! Constraints decided by the same code as SIT policies: enforcement, rollouts, dependencies,
//! the namespace object made from the namespace's labels, and the load errors of a set.

use std::path::PathBuf;
use std::time::Duration;

use serde_json::{json, Value};

use super::review;
use crate::config::{Config, Enforcement};
use crate::labels::Labels;
use crate::policy::dependencies::State;
use crate::policy::{Evaluation, Outcome, PolicySet};
use crate::ruleset::RuleSet;

fn files(names: &[&str]) -> Vec<(PathBuf, String)> {
    names
        .iter()
        .map(|n| {
            let text = match *n {
                "requiredowner/template.yaml" => {
                    include_str!("../../../testdata/gatekeeper/requiredowner/template.yaml")
                }
                "requiredowner/pods.yaml" => {
                    include_str!("../../../testdata/gatekeeper/requiredowner/pods.yaml")
                }
                "requiredowner/other-kinds.yaml" => {
                    include_str!("../../../testdata/gatekeeper/requiredowner/other-kinds.yaml")
                }
                "namespaceteam/template.yaml" => {
                    include_str!("../../../testdata/gatekeeper/namespaceteam/template.yaml")
                }
                "namespaceteam/prod.yaml" => {
                    include_str!("../../../testdata/gatekeeper/namespaceteam/prod.yaml")
                }
                "maxreplicas/template.yaml" => {
                    include_str!("../../../testdata/gatekeeper/maxreplicas/template.yaml")
                }
                "maxreplicas/constraint.yaml" => {
                    include_str!("../../../testdata/gatekeeper/maxreplicas/constraint.yaml")
                }
                "broken/does-not-compile.yaml" => {
                    include_str!("../../../testdata/gatekeeper/broken/does-not-compile.yaml")
                }
                other => panic!("no test file {other}"),
            };
            (PathBuf::from(n), text.to_string())
        })
        .collect()
}

fn rules(config: &str, names: &[&str]) -> anyhow::Result<RuleSet> {
    let config = Config::parse(if config.is_empty() { "{}" } else { config }, "cfg.yaml")?;
    crate::ruleset::RuleSet::with_gatekeeper(
        config,
        PolicySet::default(),
        Default::default(),
        crate::gatekeeper::Files::of(&files(names)),
        "cfg.yaml",
    )
    .map(|(rules, _)| rules)
}

fn pod(namespace: &str, labels: Value) -> Value {
    review::of_object(
        &json!({"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": "p", "namespace": namespace, "labels": labels},
                "spec": {"containers": [{"name": "c", "image": "nginx"}]}}),
        None,
    )
}

fn decide(rules: &RuleSet, review: &Value, ns_labels: Option<&Labels>) -> Vec<Outcome> {
    let object = &review["object"];
    rules.evaluate(
        crate::ruleset::Subject {
            document: Some(&crate::policy::input::document(object, &[], None)),
            review: Some(review),
            pool: None,
            labels: ns_labels,
            placement: State::NotApplied,
            target: None,
            now: None,
        },
        Duration::from_secs(1),
    )
}

fn summary(outcomes: &[Outcome]) -> Vec<(String, Enforcement, String)> {
    outcomes
        .iter()
        .map(|o| {
            let what = match &o.result {
                Evaluation::Ran(Ok(m)) if m.is_empty() => "pass".to_string(),
                Evaluation::Ran(Ok(m)) => m.join("; "),
                Evaluation::Ran(Err(e)) => format!("error: {e}"),
                Evaluation::Pending(p) => format!("pending: {}", p.unmet),
            };
            (o.policy.clone(), o.enforcement, what)
        })
        .collect()
}

#[test]
fn enforcement_actions_reach_the_outcomes_and_unmatched_constraints_do_not_run() {
    let rules = rules(
        "",
        &[
            "requiredowner/template.yaml",
            "requiredowner/pods.yaml",
            "maxreplicas/template.yaml",
            "maxreplicas/constraint.yaml",
        ],
    )
    .unwrap();
    // The maxreplicas constraint matches Deployments and StatefulSets only.
    assert_eq!(
        summary(&decide(&rules, &pod("shop", json!({})), None)),
        [(
            "pods-need-owner".to_string(),
            Enforcement::Deny,
            "Pod p has no owner label".to_string()
        )]
    );
    let big = review::of_object(
        &json!({"apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": {"name": "d", "namespace": "shop"}, "spec": {"replicas": 9}}),
        None,
    );
    assert_eq!(
        summary(&decide(&rules, &big, None)),
        [(
            "at-most-three-replicas".to_string(),
            Enforcement::Warn,
            "Deployment d asks for 9 replicas, at most 3".to_string()
        )]
    );
}

#[test]
fn the_namespace_object_is_made_from_the_namespaces_labels() {
    let rules = rules(
        "",
        &["namespaceteam/template.yaml", "namespaceteam/prod.yaml"],
    )
    .unwrap();
    let review = pod("prod-a", json!({}));
    // Unknown namespace: a namespaceSelector does not select the pod.
    assert!(decide(&rules, &review, None).is_empty());
    let prod: Labels = [("env".to_string(), "prod".to_string())].into();
    assert_eq!(
        summary(&decide(&rules, &review, Some(&prod))),
        [(
            "prod-needs-team".to_string(),
            Enforcement::Deny,
            "namespace prod-a of Pod p has no team label".to_string()
        )]
    );
    let dev: Labels = [("env".to_string(), "dev".to_string())].into();
    assert!(decide(&rules, &review, Some(&dev)).is_empty());
}

#[test]
fn constraints_take_dependencies_and_rollouts_from_the_config() {
    let config = "policies:
  prod-needs-team:
    dependencies: [{policy: pods-need-owner}]
  pods-need-owner:
    rollout:
      groups: [{name: all}]
      minSuccessTime: 10m
      progressDeadline: 1h
";
    let rules = rules(
        config,
        &[
            "requiredowner/template.yaml",
            "requiredowner/pods.yaml",
            "namespaceteam/template.yaml",
            "namespaceteam/prod.yaml",
        ],
    )
    .unwrap();
    let prod: Labels = [("env".to_string(), "prod".to_string())].into();
    let outcomes = decide(&rules, &pod("prod-a", json!({})), Some(&prod));
    assert_eq!(
        summary(&outcomes),
        [
            (
                "pods-need-owner".to_string(),
                // A rollout whose state is not known yet runs at dryrun.
                Enforcement::Dryrun,
                "Pod p has no owner label".to_string()
            ),
            (
                "prod-needs-team".to_string(),
                Enforcement::Deny,
                "pending: dependency pods-need-owner is NonCompliant, Compliant required"
                    .to_string()
            ),
        ]
    );
    assert_eq!(
        outcomes[0].rollout.as_ref().map(|r| r.group.as_str()),
        Some("all")
    );
    let outcomes = decide(&rules, &pod("prod-a", json!({"owner": "a"})), Some(&prod));
    assert_eq!(
        summary(&outcomes)[1].2,
        "namespace prod-a of Pod p has no team label"
    );
}

#[test]
fn load_errors_name_the_file_and_the_constraint() {
    let err = |config: &str, names: &[&str]| rules(config, names).err().unwrap().to_string();
    assert_eq!(
        err("", &["broken/does-not-compile.yaml"]),
        "broken/does-not-compile.yaml: template `broken` does not compile: broken:3:25: expecting }"
    );
    assert_eq!(
        err("", &["requiredowner/pods.yaml"]),
        "requiredowner/pods.yaml: constraint RequiredOwner `pods-need-owner`: no template declares kind RequiredOwner (loaded: )"
    );
    assert_eq!(
        err(
            "policies: {pods-need-owner: {enforcement: warn}}",
            &["requiredowner/template.yaml", "requiredowner/pods.yaml"]
        ),
        "cfg.yaml: at `policies.pods-need-owner`: `pods-need-owner` is a constraint (requiredowner/pods.yaml): its parameters and enforcement are its `spec.parameters` and `spec.enforcementAction`, not the config's"
    );
    assert!(err(
        "",
        &[
            "requiredowner/template.yaml",
            "requiredowner/pods.yaml",
            "requiredowner/pods.yaml"
        ]
    )
    .contains("has the name of a constraint of requiredowner/pods.yaml"));
    assert!(err(
        "",
        &["requiredowner/template.yaml", "requiredowner/template.yaml"]
    )
    .contains("declares kind RequiredOwner, as template `requiredowner`"));
}

/// A Pod UPDATE decided by the validating webhook's code, `old` → `new` (labels).
fn update(rules: &RuleSet, old: Value, new: Value) -> crate::admission::Decision {
    let pod = |labels: Value| {
        json!({"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": "p", "namespace": "shop", "labels": labels},
               "spec": {"containers": [{"name": "c", "image": "nginx:1.27"}]}})
    };
    let raw = json!({"uid": "u", "kind": {"group": "", "version": "v1", "kind": "Pod"},
        "resource": {"group": "", "version": "v1", "resource": "pods"},
        "namespace": "shop", "operation": "UPDATE", "userInfo": {"username": "editor"},
        "object": pod(new), "oldObject": pod(old)});
    validate(rules, &raw)
}

/// The validating webhook's decision on the AdmissionRequest `raw`.
fn validate(rules: &RuleSet, raw: &Value) -> crate::admission::Decision {
    let req = crate::admission::Request::from_value(raw).unwrap();
    rules.decide(
        crate::webhook::Webhook::Validate,
        &req,
        crate::scope::Scope::default(),
        crate::ruleset::Budget::FULL,
    )
}

#[test]
fn an_update_that_brings_a_violation_is_denied_and_one_the_old_object_had_is_not() {
    let rules = rules(
        "",
        &["requiredowner/template.yaml", "requiredowner/pods.yaml"],
    )
    .unwrap();
    // The old object is judged as itself: its review's `object` is the old object, so the
    // label taken away is a new violation (it was allowed before: every violation of the new
    // object looked known).
    let removed = update(&rules, json!({"owner": "team-a"}), json!({}));
    assert!(!removed.allowed(), "{removed:?}");
    assert!(
        format!("{removed:?}").contains("Pod p has no owner label"),
        "{removed:?}"
    );
    // A violation the old object already had does not block an UPDATE (as for SIT policies).
    let kept = update(&rules, json!({}), json!({"app": "web"}));
    assert!(kept.allowed(), "{kept:?}");
    let fine = update(
        &rules,
        json!({"owner": "team-a"}),
        json!({"owner": "team-b"}),
    );
    assert!(fine.allowed(), "{fine:?}");
}

/// A validating request for an object of `kind` (core group) named `name` with `labels`, `old`
/// its previous labels for an UPDATE.
fn other_kind(
    rules: &RuleSet,
    kind: &str,
    labels: Value,
    old: Option<Value>,
) -> crate::admission::Decision {
    let object = |labels: Value| {
        let mut object = json!({"apiVersion": "v1", "kind": kind,
            "metadata": {"name": "s", "labels": labels}, "spec": {}});
        if kind != "Namespace" {
            object["metadata"]["namespace"] = json!("shop");
        }
        object
    };
    let resource = format!("{}s", kind.to_lowercase());
    let namespace = if kind == "Namespace" { "s" } else { "shop" };
    let mut raw = json!({"uid": "u", "kind": {"group": "", "version": "v1", "kind": kind},
        "resource": {"group": "", "version": "v1", "resource": resource},
        "name": "s", "namespace": namespace, "operation": "CREATE",
        "userInfo": {"username": "editor"}, "object": object(labels)});
    if let Some(old) = old {
        raw["operation"] = json!("UPDATE");
        raw["oldObject"] = object(old);
    }
    validate(rules, &raw)
}

#[test]
fn objects_without_a_pod_spec_are_judged_by_the_constraints_that_match_them_only() {
    // A SIT policy that infringes on everything it runs on: it must not run on a Service.
    let everything = crate::policy::template::from_rego(
        "everything",
        "package everything\ninfringement[{\"msg\": \"judged\"}] { true }\n".into(),
        "everything.rego".into(),
    );
    let (rules, _) = crate::ruleset::RuleSet::with_gatekeeper(
        Config::parse("policies:\n  everything: {parameters: {}}\n", "cfg.yaml").unwrap(),
        PolicySet::compile(&[everything]).unwrap(),
        Default::default(),
        crate::gatekeeper::Files::of(&files(&[
            "requiredowner/template.yaml",
            "requiredowner/other-kinds.yaml",
        ])),
        "cfg.yaml",
    )
    .unwrap();
    let denied = other_kind(&rules, "Service", json!({}), None);
    assert!(!denied.allowed(), "{denied:?}");
    assert_eq!(
        denied.message(),
        "services-need-owner: Service s has no owner label"
    );
    let owned = other_kind(&rules, "Service", json!({"owner": "a"}), None);
    assert!(owned.allowed(), "{owned:?}");
    // On UPDATE, as for pods: the label taken away is refused, one the old object lacked is not.
    let removed = other_kind(&rules, "Service", json!({}), Some(json!({"owner": "a"})));
    assert!(!removed.allowed(), "{removed:?}");
    let kept = other_kind(&rules, "Service", json!({"app": "b"}), Some(json!({})));
    assert!(kept.allowed(), "{kept:?}");
    // A kind no constraint matches is allowed; so is every kind without constraints loaded.
    let config_map = other_kind(&rules, "ConfigMap", json!({}), None);
    assert!(config_map.allowed(), "{config_map:?}");
    // Namespaces: the pool authority first, then the constraints.
    let namespace = other_kind(&rules, "Namespace", json!({}), None);
    assert_eq!(
        namespace.message(),
        "namespaces-need-owner: Namespace s has no owner label"
    );
    let named = other_kind(&rules, "Namespace", json!({"owner": "a"}), None);
    assert!(named.allowed(), "{named:?}");
    let without = rules_without_constraints();
    assert!(other_kind(&without, "Service", json!({}), None).allowed());
}

fn rules_without_constraints() -> RuleSet {
    rules("", &[]).unwrap()
}

/// The cluster's objects load as `tolerated`: a template that does not load is left out with
/// its constraints, a constraint that does not read or clashes is left out, each with a
/// warning, and the rest serves; the same documents as `strict` (a directory) are refused.
#[test]
fn tolerated_documents_that_do_not_load_are_left_out_with_a_warning() {
    let doc = |name: &str, text: &str| (PathBuf::from(name), text.to_string());
    let broken = include_str!("../../../testdata/gatekeeper/broken/does-not-compile.yaml");
    let inventory = include_str!("../../../testdata/gatekeeper/broken/needs-inventory.yaml");
    let constraint_of = |kind: &str, name: &str| {
        format!("apiVersion: constraints.gatekeeper.sh/v1beta1\nkind: {kind}\nmetadata:\n  name: {name}\nspec:\n  parameters: {{label: owner}}\n")
    };
    let strict = files(&["requiredowner/template.yaml", "requiredowner/pods.yaml"]);
    let tolerated = vec![
        doc("cluster ConstraintTemplate broken", broken),
        doc("cluster Broken b", &constraint_of("Broken", "b")),
        doc("cluster ConstraintTemplate uniquename", inventory),
        doc(
            "cluster ConstraintTemplate requiredowner",
            &files(&["requiredowner/template.yaml"])[0].1,
        ),
        doc(
            "cluster RequiredOwner services-need-owner",
            files(&["requiredowner/other-kinds.yaml"])[0]
                .1
                .split("---")
                .next()
                .unwrap(),
        ),
        doc(
            "cluster RequiredOwner pods-need-owner",
            &constraint_of("RequiredOwner", "pods-need-owner"),
        ),
        doc("cluster RequiredOwner unread", "kind: RequiredOwner\n"),
    ];
    let (rules, warnings) = crate::ruleset::RuleSet::with_gatekeeper(
        Config::parse("{}", "cfg.yaml").unwrap(),
        PolicySet::default(),
        Default::default(),
        crate::gatekeeper::Files {
            strict: &strict,
            tolerated: &tolerated,
        },
        "cfg.yaml",
    )
    .unwrap();
    // The directory's template and constraint, and the cluster's Services constraint (its
    // template's kind is the directory's).
    assert_eq!(
        rules.policies.names().collect::<Vec<_>>(),
        ["pods-need-owner", "services-need-owner"]
    );
    let left_out: Vec<&String> = warnings.iter().filter(|w| w.contains("left out")).collect();
    let expect = [
        ("cluster RequiredOwner unread", "; left out"),
        (
            "template `broken` does not compile",
            "; left out with its constraints",
        ),
        (
            "template `uniquename` needs data.inventory",
            "; left out with its constraints",
        ),
        (
            "template `requiredowner` declares kind RequiredOwner",
            "; left out with its constraints",
        ),
        (
            "constraint RequiredOwner `pods-need-owner` has the name of a constraint",
            "; left out",
        ),
    ];
    assert_eq!(left_out.len(), expect.len(), "{left_out:#?}");
    for (w, (what, end)) in left_out.iter().zip(expect) {
        assert!(
            w.contains(what) && w.ends_with(end),
            "{w:?}: wanted {what:?} … {end:?}"
        );
    }
    // The same documents from a directory: the first fault refuses them all.
    let all: Vec<(PathBuf, String)> = strict.iter().chain(&tolerated).cloned().collect();
    let refused = crate::ruleset::RuleSet::with_gatekeeper(
        Config::parse("{}", "cfg.yaml").unwrap(),
        PolicySet::default(),
        Default::default(),
        crate::gatekeeper::Files::of(&all),
        "cfg.yaml",
    );
    assert!(refused.is_err());
}
