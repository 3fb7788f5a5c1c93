//! What the generator makes and is given, and the pieces every part of it builds objects from:
//! a leaf of `native` (it imports nothing of the generator), so the parts import it and not
//! their parent.

use serde_json::Value;

use super::cel::{self, Expr};

/// The label every generated object carries, so the objects poolguard no longer generates can
/// be found and removed.
pub const MANAGED_LABEL: &str = "app.kubernetes.io/managed-by";
/// Its value.
pub const MANAGED_VALUE: &str = "poolguard";
/// The API group and version of every generated object.
pub const API_VERSION: &str = "admissionregistration.k8s.io/v1";

/// What the generator needs besides the rules: where the chart's webhooks look.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Options {
    /// Namespaces never checked (the chart's `excludedNamespaces`: kube-system, poolguard's own).
    pub excluded_namespaces: Vec<String>,
    /// Validate only namespaces that carry the pool label (the chart's
    /// `validating.requireNamespaceLabel`).
    pub require_namespace_label: bool,
    /// Only namespaces carrying each of these labels with that value (the chart's
    /// `webhook.namespaceMatchLabels`, which both webhooks require).
    pub namespace_match_labels: std::collections::BTreeMap<String, String>,
}

/// Something the native objects do not decide, left to the webhook.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skipped {
    /// What: a policy, a kind of namespace, a check.
    pub what: String,
    /// Why it cannot be compiled (yet).
    pub why: String,
    /// Which of the webhooks' requests it concerns.
    pub requests: Requests,
}

/// The requests a thing left to the webhook is decided on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Requests {
    /// Pods and workloads: the mutating webhook and the validating webhook's pod rules.
    Pods,
    /// Namespaces: the pool-authority webhooks, which the native objects never replace.
    Namespaces,
}

/// The generated objects, in apply order (each policy before its bindings).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Native {
    pub objects: Vec<Value>,
    pub skipped: Vec<Skipped>,
}

impl Native {
    /// `kind/name` of every object, for logs and for finding what to delete.
    pub fn names(&self) -> Vec<(String, String)> {
        self.objects
            .iter()
            .map(|o| {
                (
                    o["kind"].as_str().unwrap_or_default().to_string(),
                    o["metadata"]["name"]
                        .as_str()
                        .unwrap_or_default()
                        .to_string(),
                )
            })
            .collect()
    }
}

/// A variable of a policy: its name and its expression, printed for a person ([`Expr::long`]).
pub(super) fn variable(name: &str, expression: &Expr) -> Value {
    serde_json::json!({"name": name, "expression": expression.long()})
}

/// A validation of a ValidatingAdmissionPolicy: `expression` must hold; when it does not,
/// `message_expression` says why (`message` when that fails), with `reason`. `None` when the
/// expression is `true`: such a validation checks nothing.
///
/// kube-apiserver evaluates every messageExpression on every request, the admitted ones too,
/// and each in a fresh context (the variables worked out again). So the message is guarded by
/// its validation: on an admitted request it costs what the validation costs, not what building
/// the message costs; on a refused one the message is the same.
pub(super) fn validation(
    expression: Expr,
    message: &str,
    message_expression: Expr,
    reason: &str,
) -> Option<Value> {
    if expression.as_bool() == Some(true) {
        return None;
    }
    let guarded = cel::cond(expression.clone(), cel::str(""), message_expression);
    Some(serde_json::json!({
        "expression": expression.long(),
        "message": message,
        "messageExpression": guarded.long(),
        "reason": reason,
    }))
}

/// The metadata of a generated object.
pub(super) fn metadata(name: &str) -> Value {
    serde_json::json!({
        "name": name,
        "labels": {MANAGED_LABEL: MANAGED_VALUE},
    })
}

/// Why `policy` stays on the webhook when PolicyExceptions name it: the webhook reads them live
/// and stops honouring one when it expires, which objects compiled ahead of time cannot do
/// (CEL has no clock); compiled, the objects would refuse what an exception allows.
pub(crate) fn excepted(rules: &crate::ruleset::RuleSet, policy: &str) -> Option<String> {
    let names: Vec<String> = rules
        .exceptions
        .iter()
        .filter(|e| e.policies.iter().any(|p| p == policy))
        .map(|e| format!("{}/{}", e.namespace, e.name))
        .collect();
    (!names.is_empty()).then(|| {
        format!(
            "PolicyExceptions name it ({}): the webhook decides it, reading them and their expiry live",
            names.join(", ")
        )
    })
}
