//! The `namespaceObject` of a review, made from what poolguard knows of a namespace: its name
//! and labels. A leaf: the decision context uses it for the Gatekeeper constraints, so it imports nothing
//! of the policies.

use serde_json::{json, Value};

/// `review` with a `namespaceObject` made of its namespace's name and `labels`, when it has a
/// namespace and no `namespaceObject` yet; `None` otherwise (use `review` as it is).
pub fn with_namespace_object(
    review: &Value,
    labels: Option<&crate::labels::Labels>,
) -> Option<Value> {
    let namespace = review["namespace"].as_str().filter(|n| !n.is_empty())?;
    let labels = labels?;
    if review.get("namespaceObject").is_some_and(Value::is_object) {
        return None;
    }
    let mut review = review.clone();
    review.as_object_mut()?.insert(
        "namespaceObject".to_string(),
        json!({"apiVersion": "v1", "kind": "Namespace",
               "metadata": {"name": namespace, "labels": labels}}),
    );
    Some(review)
}
