//! PolicyExceptions through the decision code that admission and the audit share: a foreign
//! image admitted under an exception with a warning and an audit annotation naming it, refused
//! again once it expires; a placement conflict allowed the same way by both webhooks; the audit
//! reporting `skip` with the exception's properties, then `fail`; a policy that depends on an
//! excepted one seeing it Compliant; and what the validating webhook refuses when an exception
//! is written.

use std::sync::Arc;

use poolguard_core::admission::{self, Request, Ruling};
use poolguard_core::audit::{self, Verdict};
use poolguard_core::config::Config;
use poolguard_core::exceptions::{ExceptionSet, PolicyException};
use poolguard_core::labels::Labels;
use poolguard_core::policy::{template, PolicySet};
use poolguard_core::ruleset::{Budget, RuleSet};
use poolguard_core::scope::Scope;
use poolguard_core::webhook::Webhook;
use serde_json::{json, Value};

const ALLOWED_REPOSITORIES: &str = include_str!("../../../policies/allowedrepositories.yaml");
const LATEST_TAG: &str = include_str!("../../../policies/latesttag.yaml");

/// 2027-01-01T00:00:00Z.
const NOW: i64 = 1_798_761_600;

const CONFIG: &str = "
policies:
  allowedrepositories:
    enforcement: deny
    parameters: {repositories: [registry.example.com/]}
  latesttag:
    enforcement: deny
    parameters: {}
    dependencies: [{policy: allowedrepositories}]
exceptions: {namespaces: [poolguard], maxDuration: 720h}
";

fn rules(exceptions: &[Value]) -> RuleSet {
    let templates = [
        template::from_yaml(ALLOWED_REPOSITORIES, "allowedrepositories.yaml".into()).unwrap(),
        template::from_yaml(LATEST_TAG, "latesttag.yaml".into()).unwrap(),
    ];
    let policies = PolicySet::compile(&templates).unwrap();
    let rules = RuleSet::new(
        Config::parse(CONFIG, "t").unwrap(),
        policies,
        Default::default(),
        "t",
    )
    .unwrap();
    let read: Vec<PolicyException> = exceptions
        .iter()
        .map(|e| PolicyException::from_object(e).unwrap())
        .collect();
    let (set, left_out) = ExceptionSet::new(read, rules.config(), &|p| rules.knows(p), NOW);
    assert!(left_out.is_empty(), "{left_out:?}");
    rules.with_exceptions(Arc::new(set))
}

fn exception(name: &str, spec: Value) -> Value {
    json!({"apiVersion": "poolguard.io/v1alpha1", "kind": "PolicyException",
           "metadata": {"name": name, "namespace": "poolguard"}, "spec": spec})
}

/// The legacy billing exception: allowedrepositories for pods named billing-* in namespace
/// shop pulling quay.io/legacy images, for one day.
fn legacy() -> Value {
    exception(
        "legacy-billing",
        json!({"policies": ["allowedrepositories"], "ticket": "OPS-42", "expires": "2027-01-02T00:00:00Z",
               "reason": "the billing image moves registries next sprint",
               "match": {"namespaces": ["shop"], "kinds": ["Pod"], "names": ["billing-*"],
                         "images": ["quay.io/legacy/*"]}}),
    )
}

fn pod(name: &str, image: &str, selector: Option<&str>) -> Value {
    let mut pod = json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "shop"},
        "spec": {"containers": [{"name": "c", "image": image}]}});
    if let Some(pool) = selector {
        pod["spec"]["nodeSelector"] = json!({"agentpool": pool});
    }
    pod
}

fn request(object: &Value) -> Value {
    json!({"uid": "u", "kind": {"group": object["apiVersion"].as_str().unwrap().split_once('/').map_or("", |(g, _)| g),
                                "version": "v1", "kind": object["kind"]},
           "namespace": object["metadata"]["namespace"], "name": object["metadata"]["name"],
           "operation": "CREATE", "userInfo": {"username": "alice"}, "object": object})
}

fn decide(rules: &RuleSet, webhook: Webhook, object: &Value, now: i64, labels: &Labels) -> Value {
    let raw = request(object);
    let req = Request::from_value(&raw).unwrap();
    let scope = Scope {
        labels: Some(labels),
        pools: None,
        now: Some(now),
    };
    admission::respond("u", &rules.decide(webhook, &req, scope, Budget::FULL))["response"].clone()
}

fn labels(pool: &str) -> Labels {
    [("agentpool".to_string(), pool.to_string())].into()
}

#[test]
fn a_foreign_image_is_admitted_under_its_exception_until_it_expires() {
    let rules = rules(&[legacy()]);
    let shop = labels("pool1");
    let billing = pod("billing-1", "quay.io/legacy/billing:3.1", Some("pool1"));
    let allowed = decide(&rules, Webhook::Validate, &billing, NOW, &shop);
    assert_eq!(allowed["allowed"], true, "{allowed}");
    let warnings = allowed["warnings"].to_string();
    assert!(
        warnings.contains("allowedrepositories:")
            && warnings.contains("(allowed by PolicyException poolguard/legacy-billing (ticket OPS-42, expires 2027-01-02T00:00:00Z))"),
        "{warnings}"
    );
    assert_eq!(
        allowed["auditAnnotations"]["policyexceptions"],
        "allowedrepositories: PolicyException poolguard/legacy-billing (ticket OPS-42, expires 2027-01-02T00:00:00Z)"
    );
    // latesttag depends on allowedrepositories: the excepted result is Compliant to it, so it
    // runs; an untagged image is refused by it (without the exception it would be Pending).
    let untagged = pod("billing-2", "quay.io/legacy/billing", Some("pool1"));
    let refused = decide(&rules, Webhook::Validate, &untagged, NOW, &shop);
    assert_eq!(refused["allowed"], false, "{refused}");
    let message = refused["status"]["message"].as_str().unwrap();
    assert!(
        message.contains("latesttag:") && !message.contains("allowedrepositories:"),
        "{message}"
    );

    // Expired: refused again, as without the exception.
    let expired = decide(&rules, Webhook::Validate, &billing, NOW + 86_400, &shop);
    assert_eq!(expired["allowed"], false, "{expired}");
    assert_eq!(expired["status"]["code"], 403);
    assert!(expired.get("auditAnnotations").is_none());

    // What the exception does not match is refused: another name, another image beside the
    // excepted one, another namespace.
    let mut sidecar = billing.clone();
    sidecar["spec"]["containers"]
        .as_array_mut()
        .unwrap()
        .push(json!({"name": "side", "image": "evil.example.org/miner:1"}));
    let mut elsewhere = billing.clone();
    elsewhere["metadata"]["namespace"] = json!("other");
    for object in [
        pod("web-1", "quay.io/legacy/billing:3.1", Some("pool1")),
        sidecar,
        elsewhere,
    ] {
        let answer = decide(&rules, Webhook::Validate, &object, NOW, &shop);
        assert_eq!(answer["allowed"], false, "{object}: {answer}");
    }
}

#[test]
fn a_placement_exception_allows_the_conflict_in_both_webhooks() {
    let rules = rules(&[exception(
        "gpu-trial",
        json!({"policies": ["placement"], "ticket": "OPS-9", "expires": "2027-01-01T12:00:00Z",
               "match": {"namespaces": ["shop"], "names": ["trial-*"]}}),
    )]);
    let shop = labels("pool1");
    let trial = pod("trial-1", "registry.example.com/app:1", Some("gpu"));
    for webhook in [Webhook::Mutate, Webhook::Validate] {
        let answer = decide(&rules, webhook, &trial, NOW, &shop);
        assert_eq!(answer["allowed"], true, "{webhook:?}: {answer}");
        assert!(
            answer.get("patch").is_none(),
            "{webhook:?}: the pod keeps its own selector"
        );
        assert!(
            answer["warnings"]
                .to_string()
                .contains("(allowed by PolicyException poolguard/gpu-trial (ticket OPS-9"),
            "{webhook:?}: {answer}"
        );
        let later = decide(&rules, webhook, &trial, NOW + 43_200, &shop);
        assert_eq!(later["allowed"], false, "{webhook:?} after expiry: {later}");
    }
    // A pod the exception does not name is refused.
    let other = pod("web-1", "registry.example.com/app:1", Some("gpu"));
    assert_eq!(
        decide(&rules, Webhook::Validate, &other, NOW, &shop)["allowed"],
        false
    );
}

#[test]
fn the_audit_reports_an_excepted_result_as_skip_then_fail() {
    let rules = rules(&[legacy()]);
    let shop = labels("pool1");
    let billing = pod("billing-1", "quay.io/legacy/billing:3.1", Some("pool1"));
    let row = |now: i64| {
        let scope = Scope {
            labels: Some(&shop),
            pools: None,
            now: Some(now),
        };
        audit::audit(&billing, scope, None, &rules)
            .into_iter()
            .find(|r| r.policy == "allowedrepositories")
            .unwrap()
    };
    let skipped = row(NOW);
    assert_eq!(skipped.result, Verdict::Skip, "{skipped:?}");
    assert!(
        skipped
            .message
            .starts_with("allowed by PolicyException poolguard/legacy-billing"),
        "{skipped:?}"
    );
    assert_eq!(skipped.properties["exception"], "poolguard/legacy-billing");
    assert_eq!(skipped.properties["ticket"], "OPS-42");
    assert_eq!(skipped.properties["expires"], "2027-01-02T00:00:00Z");
    let failed = row(NOW + 86_400);
    assert_eq!(failed.result, Verdict::Fail, "{failed:?}");
    assert!(!failed.properties.contains_key("exception"));
}

#[test]
fn writing_an_exception_is_refused_unless_the_config_lets_it_count() {
    let rules = rules(&[]);
    let ns = labels("pool1");
    let ok = legacy();
    assert_eq!(
        decide(&rules, Webhook::Validate, &ok, NOW, &ns)["allowed"],
        true
    );
    let cases = [
        (
            {
                let mut e = ok.clone();
                e["spec"].as_object_mut().unwrap().remove("ticket");
                e
            },
            "spec.ticket is required",
        ),
        (
            {
                let mut e = ok.clone();
                e["spec"].as_object_mut().unwrap().remove("expires");
                e
            },
            "spec.expires is required",
        ),
        (
            {
                let mut e = ok.clone();
                e["spec"]["expires"] = json!("2027-06-01T00:00:00Z");
                e
            },
            "more than exceptions.maxDuration",
        ),
        (
            {
                let mut e = ok.clone();
                e["spec"]["policies"] = json!(["allowedrepos"]);
                e
            },
            "names allowedrepos that poolguard has not loaded",
        ),
        (
            {
                let mut e = ok.clone();
                e["metadata"]["namespace"] = json!("shop");
                e
            },
            "exceptions count only in the namespaces the config names",
        ),
        (
            {
                let mut e = ok.clone();
                e["spec"]["expires"] = json!("2026-12-31T00:00:00Z");
                e
            },
            "has passed",
        ),
    ];
    for (object, want) in cases {
        let answer = decide(&rules, Webhook::Validate, &object, NOW, &ns);
        assert_eq!(answer["allowed"], false, "{want}: {answer}");
        assert_eq!(answer["status"]["code"], 403, "{answer}");
        assert!(
            answer["status"]["message"].as_str().unwrap().contains(want),
            "{want}: {answer}"
        );
    }
    // Without a clock nothing can be judged: refused, never let through.
    let raw = request(&ok);
    let req = Request::from_value(&raw).unwrap();
    let d = rules.decide(Webhook::Validate, &req, Scope::default(), Budget::FULL);
    assert!(matches!(d.ruling, Ruling::Deny { .. }), "{d:?}");
}
