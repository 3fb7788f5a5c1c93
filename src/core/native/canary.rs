//! The proof that the API server enforces the native objects, asked of it before and while the
//! pod and workload webhooks are left out (`serve --native-fallback`).
//!
//! Objects stored as generated prove only that they are stored: an API server that does not run
//! the MutatingAdmissionPolicy and ValidatingAdmissionPolicy admission plugins (turned off, or
//! one of an HA control plane in version skew) serves and stores them and enforces nothing. So
//! the writer creates canary pods with a server-side dry run (nothing is stored) in a namespace
//! the native bindings select and the pod webhooks leave out, and compares what the API server
//! answers with what poolguard's own decision code ([`RuleSet::decide`], mutating then
//! validating, as admission runs them) decides for the same pods:
//!
//! - a plain pod, which must come back with its pool's nodeSelector and annotation;
//! - the same pod with a foreign image, refused where the image policies refuse it;
//! - the same pod asking for another pool, refused by placement.
//!
//! Enforcement counts as proven only when the canaries exercise both halves: at least one pod
//! poolguard admits and places, and at least one it refuses. Pure: [`canaries`] makes the pods
//! and their expected outcomes; [`judge`] compares one answer.

use serde_json::{json, Value};

use super::object::{Native, MANAGED_LABEL, MANAGED_VALUE};
use crate::labels::Labels;
use crate::node_selector::POOL_ANNOTATION;
use crate::ruleset::{Budget, RuleSet};
use crate::scope::Scope;

/// The image of the foreign-image canary: a registry that cannot exist (`.invalid`), so no
/// allow-list names it.
pub const FOREIGN_IMAGE: &str = "canary.poolguard.invalid/foreign:1";
/// The user the expected decisions are made for.
const USER: &str = "poolguard-native-canary";

/// One canary: the pod to create with a dry run, and what poolguard decides for it.
#[derive(Debug, Clone, PartialEq)]
pub struct Canary {
    /// What it checks, for messages ("a plain pod").
    pub purpose: &'static str,
    pub pod: Value,
    pub expected: Expected,
}

/// What poolguard's own decision code does with a canary pod.
#[derive(Debug, Clone, PartialEq)]
pub enum Expected {
    /// Admitted, stored with this nodeSelector and pool annotation.
    Admitted {
        node_selector: Value,
        pool: Option<String>,
    },
    /// Refused (with this message).
    Refused(String),
}

/// What the API server answered to a dry-run create.
#[derive(Debug, Clone, Copy)]
pub enum Answer<'a> {
    /// Admitted: the object as it would be stored.
    Admitted(&'a Value),
    /// Refused: the status message.
    Refused(&'a str),
}

/// The canary pods for `namespace` (with `labels`, as read from the cluster) and what
/// poolguard decides for each. `image` is the plain pod's image: one the rules admit. An error
/// says why the canaries cannot prove enforcement whatever the API server answers.
pub fn canaries(
    rules: &RuleSet,
    namespace: &str,
    labels: &Labels,
    image: &str,
) -> Result<Vec<Canary>, String> {
    let key = &rules.config.namespace_label;
    let Some(pool) = labels.get(key).filter(|p| !p.is_empty()) else {
        return Err(format!(
            "the canary namespace {namespace} has no pool label {key}: the native objects place no pod there"
        ));
    };
    let selector_key = &rules.config.node_selector_key;
    let other = format!("{pool}-other");
    let made = [
        ("a plain pod", pod("placed", namespace, image, None)),
        (
            "a pod with a foreign image",
            pod("foreign-image", namespace, FOREIGN_IMAGE, None),
        ),
        (
            "a pod asking for another pool",
            pod("other-pool", namespace, image, Some((selector_key, &other))),
        ),
    ];
    let out: Vec<Canary> = made
        .into_iter()
        .map(|(purpose, pod)| {
            let expected = expect(rules, namespace, labels, &pod);
            Canary {
                purpose,
                pod,
                expected,
            }
        })
        .collect();
    let placed = out.iter().any(|c| {
        matches!(&c.expected, Expected::Admitted { node_selector, .. }
            if node_selector.get(selector_key).and_then(Value::as_str) == Some(pool.as_str()))
    });
    if !placed {
        let why = match &out[0].expected {
            Expected::Refused(message) => format!("poolguard's rules refuse it: {message}"),
            Expected::Admitted { .. } => "poolguard's rules give it no pool".to_string(),
        };
        return Err(format!(
            "the canary pod with image {image} in namespace {namespace} cannot show the pool being set ({why}); give the canary an image the rules admit"
        ));
    }
    if !out
        .iter()
        .any(|c| matches!(c.expected, Expected::Refused(_)))
    {
        return Err(format!(
            "poolguard's rules refuse none of the canary pods in namespace {namespace}, so refusals cannot be shown"
        ));
    }
    Ok(out)
}

/// Compares the API server's answer to `canary` with poolguard's decision. `native` is what the
/// writer generated: a refusal counts only when one of its ValidatingAdmissionPolicies made it.
pub fn judge(canary: &Canary, answer: Answer, native: &Native) -> Result<(), String> {
    let what = canary.purpose;
    match (&canary.expected, answer) {
        (Expected::Admitted { node_selector, pool }, Answer::Admitted(stored)) => {
            let got_selector = stored
                .pointer("/spec/nodeSelector")
                .cloned()
                .unwrap_or_else(|| json!({}));
            let got_pool = stored
                .pointer("/metadata/annotations")
                .and_then(|a| a.get(POOL_ANNOTATION))
                .and_then(Value::as_str);
            if &got_selector != node_selector || got_pool != pool.as_deref() {
                return Err(format!(
                    "the API server admitted {what} with nodeSelector {got_selector} and {POOL_ANNOTATION} {}, where poolguard gives it {node_selector} and {}: the native MutatingAdmissionPolicy did not run (an API server without the MutatingAdmissionPolicy admission plugin?)",
                    shown(got_pool),
                    shown(pool.as_deref()),
                ));
            }
            Ok(())
        }
        (Expected::Admitted { .. }, Answer::Refused(message)) => Err(format!(
            "the API server refused {what}, which poolguard admits: {message}"
        )),
        (Expected::Refused(expected), Answer::Admitted(_)) => Err(format!(
            "the API server admitted {what}, which poolguard refuses ({expected}): the native ValidatingAdmissionPolicies did not run (an API server without the ValidatingAdmissionPolicy admission plugin?)"
        )),
        (Expected::Refused(_), Answer::Refused(message)) => {
            let ours = native.objects.iter().any(|o| {
                o["kind"] == "ValidatingAdmissionPolicy"
                    && o["metadata"]["name"].as_str().is_some_and(|name| {
                        message.contains(&format!("ValidatingAdmissionPolicy '{name}'"))
                    })
            });
            if ours {
                Ok(())
            } else {
                Err(format!(
                    "the API server refused {what}, but not by one of poolguard's ValidatingAdmissionPolicies: {message}"
                ))
            }
        }
    }
}

fn shown(value: Option<&str>) -> String {
    value.map_or_else(|| "unset".to_string(), |v| format!("{v:?}"))
}

/// A canary pod: one container, requests and limits, and a securityContext that the
/// `restricted` Pod Security Standard admits, so that only poolguard's rules decide it.
fn pod(suffix: &str, namespace: &str, image: &str, pool: Option<(&String, &String)>) -> Value {
    let mut pod = json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": format!("poolguard-canary-{suffix}"),
            "namespace": namespace,
            "labels": {MANAGED_LABEL: MANAGED_VALUE, "app.kubernetes.io/component": "native-canary"},
        },
        "spec": {
            "automountServiceAccountToken": false,
            "terminationGracePeriodSeconds": 0,
            "securityContext": {
                "runAsNonRoot": true,
                "runAsUser": 65534,
                "seccompProfile": {"type": "RuntimeDefault"},
            },
            "containers": [{
                "name": "canary",
                "image": image,
                "resources": {
                    "requests": {"cpu": "10m", "memory": "16Mi"},
                    "limits": {"cpu": "10m", "memory": "16Mi"},
                },
                "securityContext": {
                    "allowPrivilegeEscalation": false,
                    "readOnlyRootFilesystem": true,
                    "capabilities": {"drop": ["ALL"]},
                },
            }],
        },
    });
    if let Some((key, value)) = pool {
        pod["spec"]["nodeSelector"] = json!({ key.as_str(): value });
    }
    pod
}

/// What admission decides for `pod`: the mutating webhook's decision, then the validating
/// webhook's on the object as mutated.
fn expect(rules: &RuleSet, namespace: &str, labels: &Labels, pod: &Value) -> Expected {
    let scope = Scope {
        labels: Some(labels),
        pools: None,
        now: None,
    };
    let review = |object: &Value| {
        json!({
            "uid": "poolguard-native-canary",
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "name": object["metadata"]["name"],
            "namespace": namespace,
            "operation": "CREATE",
            "userInfo": {"username": USER},
            "object": object,
        })
    };
    let stored = match rules.admit(pod, true, review, scope, Budget::FULL) {
        Ok(stored) => stored,
        Err(message) => return Expected::Refused(message),
    };
    Expected::Admitted {
        node_selector: stored
            .pointer("/spec/nodeSelector")
            .cloned()
            .unwrap_or_else(|| json!({})),
        pool: stored
            .pointer("/metadata/annotations")
            .and_then(|a| a.get(POOL_ANNOTATION))
            .and_then(Value::as_str)
            .map(str::to_string),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::native::tests::rules;

    const EXAMPLE: &str = "namespaceLabel: agentpool\nnodeSelectorKey: agentpool\npolicies:\n  allowedrepositories: {parameters: {repositories: [registry.k8s.io/]}}\n  latesttag: {parameters: {}}\n";
    const IMAGE: &str = "registry.k8s.io/pause:3.10";

    fn labels(pool: &str) -> Labels {
        [
            ("agentpool".to_string(), pool.to_string()),
            (
                "kubernetes.io/metadata.name".to_string(),
                "poolguard-canary".to_string(),
            ),
        ]
        .into()
    }

    fn native(rules: &RuleSet) -> Native {
        super::super::generate(rules, &Default::default())
    }

    #[test]
    fn the_canaries_expect_the_pool_set_a_foreign_image_and_another_pool_refused() {
        let rules = rules(EXAMPLE);
        let made = canaries(&rules, "poolguard-canary", &labels("canary"), IMAGE).unwrap();
        assert_eq!(made.len(), 3);
        assert_eq!(
            made[0].expected,
            Expected::Admitted {
                node_selector: json!({"agentpool": "canary"}),
                pool: Some("canary".into())
            }
        );
        assert!(matches!(&made[1].expected, Expected::Refused(m) if m.contains("foreign")));
        assert!(matches!(&made[2].expected, Expected::Refused(_)));
        assert_eq!(made[1].pod["spec"]["containers"][0]["image"], FOREIGN_IMAGE);
        assert_eq!(
            made[2].pod["spec"]["nodeSelector"],
            json!({"agentpool": "canary-other"})
        );
    }

    #[test]
    fn an_api_server_that_enforces_passes_and_one_that_does_not_fails() {
        let rules = rules(EXAMPLE);
        let native = native(&rules);
        let made = canaries(&rules, "poolguard-canary", &labels("canary"), IMAGE).unwrap();
        // Enforced: the plain pod comes back placed, the others are refused by poolguard's
        // ValidatingAdmissionPolicies.
        let mut placed = made[0].pod.clone();
        placed["spec"]["nodeSelector"] = json!({"agentpool": "canary"});
        placed["metadata"]["annotations"] = json!({POOL_ANNOTATION: "canary"});
        judge(&made[0], Answer::Admitted(&placed), &native).unwrap();
        let images = "pods \"poolguard-canary-foreign-image\" is forbidden: ValidatingAdmissionPolicy 'poolguard-images' with binding 'poolguard-images' denied request: …";
        judge(&made[1], Answer::Refused(images), &native).unwrap();
        let placement = "pods \"poolguard-canary-other-pool\" is forbidden: ValidatingAdmissionPolicy 'poolguard-placement' with binding 'poolguard-placement' denied request: …";
        judge(&made[2], Answer::Refused(placement), &native).unwrap();

        // Not enforced (the admission plugins off): every pod comes back as sent.
        let plain = judge(&made[0], Answer::Admitted(&made[0].pod), &native).unwrap_err();
        assert!(
            plain.contains("MutatingAdmissionPolicy did not run"),
            "{plain}"
        );
        let foreign = judge(&made[1], Answer::Admitted(&made[1].pod), &native).unwrap_err();
        assert!(
            foreign.contains("ValidatingAdmissionPolicies did not run"),
            "{foreign}"
        );
        // Refused by something else (another product's policy, RBAC): not a proof.
        let other = judge(
            &made[2],
            Answer::Refused(
                "ValidatingAdmissionPolicy 'team-rules' with binding 'x' denied request",
            ),
            &native,
        )
        .unwrap_err();
        assert!(other.contains("not by one of poolguard's"), "{other}");
        let rbac = judge(
            &made[0],
            Answer::Refused("pods is forbidden: User \"x\" cannot create resource \"pods\""),
            &native,
        )
        .unwrap_err();
        assert!(rbac.contains("which poolguard admits"), "{rbac}");
    }

    #[test]
    fn canaries_that_cannot_prove_enforcement_are_an_error() {
        let rules = rules(EXAMPLE);
        // No pool label: the native objects place nothing there.
        let mut unlabelled = labels("canary");
        unlabelled.remove("agentpool");
        let e = canaries(&rules, "poolguard-canary", &unlabelled, IMAGE).unwrap_err();
        assert!(e.contains("has no pool label agentpool"), "{e}");
        // An image the rules refuse: the pool being set cannot be shown.
        let e = canaries(
            &rules,
            "poolguard-canary",
            &labels("canary"),
            "docker.io/x:1",
        )
        .unwrap_err();
        assert!(
            e.contains("cannot show the pool being set") && e.contains("refuse"),
            "{e}"
        );
    }
}
