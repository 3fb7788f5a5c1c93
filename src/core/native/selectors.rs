//! The namespace selectors of the generated bindings, as the chart's webhooks select.

use serde_json::{json, Value};

use super::cel::{all_of, and, has, ident, list, not, str, Expr};
use super::object::Options;
use crate::config::selector::{LabelSelector, Operator};
use crate::config::{Config, UnlabelledNamespaces};

/// `matchExpressions` entries for the namespaces the validating webhook checks, minus those whose
/// pods get their pool chosen by placement policies (the webhook keeps those).
pub fn validated(config: &Config, options: &Options) -> Vec<Value> {
    let label = &config.namespace_label;
    let mut out: Vec<Value> = options
        .namespace_match_labels
        .iter()
        .map(|(key, value)| json!({"key": key, "operator": "In", "values": [value]}))
        .collect();
    if options.require_namespace_label {
        out.push(json!({"key": label, "operator": "Exists"}));
    }
    if !options.excluded_namespaces.is_empty() {
        out.push(
            json!({"key": "kubernetes.io/metadata.name", "operator": "NotIn",
            "values": options.excluded_namespaces}),
        );
    }
    out.extend(not_chosen(config));
    out
}

/// Requirements leaving out the namespaces whose pools placement policies choose.
fn not_chosen(config: &Config) -> Vec<Value> {
    let label = &config.namespace_label;
    let Some(placement) = &config.placement else {
        return Vec::new();
    };
    let mut out = Vec::new();
    if let Some(value) = &placement.choose_value {
        out.push(json!({"key": label, "operator": "NotIn", "values": [value]}));
    }
    if placement.unlabelled_namespaces == UnlabelledNamespaces::Choose {
        out.push(json!({"key": label, "operator": "Exists"}));
        out.push(json!({"key": label, "operator": "NotIn", "values": [""]}));
    }
    out
}

/// Namespaces that name a pool (the label set and not empty), among the validated ones.
pub fn named_pool(config: &Config, options: &Options) -> Vec<Value> {
    let label = &config.namespace_label;
    let mut out = validated(config, options);
    out.push(json!({"key": label, "operator": "Exists"}));
    out.push(json!({"key": label, "operator": "NotIn", "values": [""]}));
    dedup(out)
}

/// Removes repeated requirements, keeping the first of each.
pub fn dedup(requirements: Vec<Value>) -> Vec<Value> {
    let mut out: Vec<Value> = Vec::new();
    for r in requirements {
        if !out.contains(&r) {
            out.push(r);
        }
    }
    out
}

/// A binding's `matchResources` for namespaces meeting `requirements`.
pub fn match_resources(requirements: Vec<Value>) -> Value {
    json!({"namespaceSelector": {"matchExpressions": dedup(requirements)}})
}

/// A config label selector as `matchExpressions` entries (each `matchLabels` pair an `In` of one
/// value), to add to a binding's namespace selector.
pub fn requirements_of(selector: &LabelSelector) -> Vec<Value> {
    let mut out: Vec<Value> = selector
        .match_labels
        .iter()
        .map(|(key, value)| json!({"key": key, "operator": "In", "values": [value]}))
        .collect();
    out.extend(selector.match_expressions.iter().map(|r| match r.operator {
        Operator::In | Operator::NotIn => {
            json!({"key": r.key, "operator": r.operator, "values": r.values})
        }
        Operator::Exists | Operator::DoesNotExist => json!({"key": r.key, "operator": r.operator}),
    }));
    out
}

/// Over the request's `namespaceObject`: whether `selector` selects the namespace, with
/// Kubernetes' semantics (`NotIn` and `DoesNotExist` hold for a missing label).
pub fn selects_cel(selector: &LabelSelector) -> Expr {
    let labels = ident("namespaceObject").field("metadata").field("labels");
    let has_label = |key: &str| and(has(labels.clone()), str(key).within(labels.clone()));
    let value_in = |key: &str, values: &[String]| {
        and(
            has_label(key),
            labels
                .clone()
                .index(str(key))
                .within(list(values.iter().map(|v| str(v.as_str())))),
        )
    };
    let mut terms: Vec<Expr> = selector
        .match_labels
        .iter()
        .map(|(key, value)| value_in(key, std::slice::from_ref(value)))
        .collect();
    terms.extend(selector.match_expressions.iter().map(|r| match r.operator {
        Operator::In => value_in(&r.key, &r.values),
        Operator::NotIn => not(value_in(&r.key, &r.values)),
        Operator::Exists => has_label(&r.key),
        Operator::DoesNotExist => not(has_label(&r.key)),
    }));
    all_of(terms)
}
