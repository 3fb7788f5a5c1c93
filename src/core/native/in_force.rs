//! Whether the native objects decide every pod and workload request on their own, so that the
//! webhooks for those requests may be left out of the registration (`serve --native-fallback`).
//!
//! Two things must hold. What the rules leave to the webhook concerns namespaces only (pool
//! authority, which keeps its own webhook). And the cluster holds every generated object as
//! generated: read back, each object's labels and spec hold every generated field with its
//! generated value, and every other field is one the API server fills in with a default that
//! narrows nothing. An object someone edited (a `matchConditions` added, a binding's actions
//! changed), one being deleted, or one missing means the webhooks stay.

use serde_json::Value;

use super::object::{Native, Requests, MANAGED_LABEL, MANAGED_VALUE};

/// Fields the API server adds with its defaults, each with the one value that is accepted
/// without poolguard having written it. Any other field poolguard did not generate makes the
/// object differ.
const SERVER_DEFAULTS: [(&str, &str); 4] = [
    ("matchPolicy", "Equivalent"),
    ("scope", "*"),
    ("failurePolicy", "Fail"),
    ("reinvocationPolicy", "Never"),
];

/// Why the pod and workload webhooks are still needed, or `None` when the native objects in
/// `cluster` (the four kinds as read back, any order, other objects ignored) decide every
/// request those webhooks would be sent.
pub fn webhook_needed(generated: &Native, cluster: &[Value]) -> Option<String> {
    if let Some(left) = generated
        .skipped
        .iter()
        .find(|s| s.requests == Requests::Pods)
    {
        return Some(format!("{} stays on the webhook: {}", left.what, left.why));
    }
    if generated.objects.is_empty() {
        return Some("the rules generate no native objects".into());
    }
    for object in &generated.objects {
        let kind = object["kind"].as_str().unwrap_or_default();
        let name = object["metadata"]["name"].as_str().unwrap_or_default();
        let Some(found) = cluster.iter().find(|c| {
            c["kind"] == object["kind"] && c["metadata"]["name"] == object["metadata"]["name"]
        }) else {
            return Some(format!("{kind}/{name} is not in the cluster"));
        };
        if !found["metadata"]["deletionTimestamp"].is_null() {
            return Some(format!("{kind}/{name} is being deleted"));
        }
        if found["metadata"]["labels"][MANAGED_LABEL] != MANAGED_VALUE {
            return Some(format!(
                "{kind}/{name} lacks the label {MANAGED_LABEL}={MANAGED_VALUE}"
            ));
        }
        if let Err(at) = holds(&object["spec"], &found["spec"], "spec") {
            return Some(format!(
                "{kind}/{name} in the cluster differs from what poolguard generates at {at}"
            ));
        }
    }
    None
}

/// Whether `found` holds `wanted`: objects hold every wanted field with a value that holds it,
/// and no other field but a server default; lists have the same length and hold item by item;
/// anything else is equal. `Err`: the path of the first difference.
fn holds(wanted: &Value, found: &Value, at: &str) -> Result<(), String> {
    match (wanted, found) {
        (Value::Object(w), Value::Object(f)) => {
            for (key, value) in w {
                holds(
                    value,
                    f.get(key).unwrap_or(&Value::Null),
                    &format!("{at}.{key}"),
                )?;
            }
            for (key, value) in f {
                if !w.contains_key(key) && !is_default(key, value) {
                    return Err(format!("{at}.{key}"));
                }
            }
            Ok(())
        }
        (Value::Array(w), Value::Array(f)) if w.len() == f.len() => w
            .iter()
            .zip(f)
            .enumerate()
            .try_for_each(|(i, (w, f))| holds(w, f, &format!("{at}[{i}]"))),
        _ if wanted == found => Ok(()),
        _ => Err(at.to_string()),
    }
}

/// A field the API server defaults, with a value that selects or refuses no less than leaving
/// it out: an empty selector (everything), or the default of [`SERVER_DEFAULTS`].
fn is_default(key: &str, value: &Value) -> bool {
    let empty_selector =
        key.ends_with("Selector") && value.as_object().is_some_and(|o| o.is_empty());
    empty_selector
        || SERVER_DEFAULTS
            .iter()
            .any(|(k, v)| *k == key && value.as_str() == Some(v))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::native::Skipped;
    use serde_json::json;

    fn generated() -> Native {
        Native {
            objects: vec![
                json!({"kind": "ValidatingAdmissionPolicy",
                    "metadata": {"name": "poolguard-images", "labels": {MANAGED_LABEL: MANAGED_VALUE}},
                    "spec": {"failurePolicy": "Fail",
                        "matchConstraints": {"resourceRules": [{"operations": ["CREATE"], "resources": ["pods"]}]},
                        "validations": [{"expression": "true"}]}}),
                json!({"kind": "ValidatingAdmissionPolicyBinding",
                    "metadata": {"name": "poolguard-images", "labels": {MANAGED_LABEL: MANAGED_VALUE}},
                    "spec": {"policyName": "poolguard-images", "validationActions": ["Deny"],
                        "matchResources": {"namespaceSelector": {"matchExpressions": [
                            {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["kube-system"]}]}}}}),
            ],
            skipped: vec![Skipped {
                what: "pool authority".into(),
                why: "namespaces".into(),
                requests: Requests::Namespaces,
            }],
        }
    }

    /// The generated objects as the API server returns them: defaults filled in, metadata added.
    fn read_back() -> Vec<Value> {
        let mut objects = generated().objects;
        for o in &mut objects {
            o["metadata"]["uid"] = json!("u");
            o["metadata"]["resourceVersion"] = json!("7");
            o["metadata"]["labels"]["team"] = json!("x");
        }
        objects[0]["spec"]["matchConstraints"]["matchPolicy"] = json!("Equivalent");
        objects[0]["spec"]["matchConstraints"]["namespaceSelector"] = json!({});
        objects[0]["spec"]["matchConstraints"]["objectSelector"] = json!({});
        objects[0]["spec"]["matchConstraints"]["resourceRules"][0]["scope"] = json!("*");
        objects[1]["spec"]["matchResources"]["matchPolicy"] = json!("Equivalent");
        objects[1]["spec"]["matchResources"]["objectSelector"] = json!({});
        objects.push(
            json!({"kind": "ValidatingAdmissionPolicy", "metadata": {"name": "someone-elses"}}),
        );
        objects
    }

    #[test]
    fn the_objects_as_generated_with_server_defaults_decide_alone() {
        assert_eq!(webhook_needed(&generated(), &read_back()), None);
    }

    #[test]
    fn anything_left_to_the_webhook_for_pods_keeps_it() {
        let mut native = generated();
        native.skipped.push(Skipped {
            what: "policy custom".into(),
            why: "custom Rego".into(),
            requests: Requests::Pods,
        });
        let why = webhook_needed(&native, &read_back()).unwrap();
        assert!(
            why.starts_with("policy custom stays on the webhook"),
            "{why}"
        );
        assert!(webhook_needed(&Native::default(), &[]).is_some());
    }

    #[test]
    fn a_missing_edited_or_deleted_object_keeps_the_webhook() {
        type Edit = fn(&mut Vec<Value>);
        let edits: [(Edit, &str); 8] = [
            (
                |c| drop(c.remove(1)),
                "ValidatingAdmissionPolicyBinding/poolguard-images is not in the cluster",
            ),
            (
                |c| c[0]["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z"),
                "is being deleted",
            ),
            (
                |c| c[0]["metadata"]["labels"] = json!({}),
                "lacks the label",
            ),
            (
                |c| {
                    c[0]["spec"]["matchConditions"] =
                        json!([{"name": "skip", "expression": "false"}])
                },
                "at spec.matchConditions",
            ),
            (
                |c| c[0]["spec"]["validations"][0]["expression"] = json!("false || true"),
                "at spec.validations[0].expression",
            ),
            (
                |c| {
                    c[0]["spec"]["validations"]
                        .as_array_mut()
                        .unwrap()
                        .push(json!({"expression": "true"}))
                },
                "at spec.validations",
            ),
            (
                |c| c[1]["spec"]["validationActions"] = json!(["Audit"]),
                "at spec.validationActions[0]",
            ),
            (
                |c| {
                    c[1]["spec"]["matchResources"]["objectSelector"] =
                        json!({"matchLabels": {"a": "b"}})
                },
                "at spec.matchResources.objectSelector",
            ),
        ];
        for (edit, says) in edits {
            let mut cluster = read_back();
            edit(&mut cluster);
            let why = webhook_needed(&generated(), &cluster).expect(says);
            assert!(why.contains(says), "{why} lacks {says}");
        }
        // A default field with another value than the default differs too.
        let mut cluster = read_back();
        cluster[0]["spec"]["matchConstraints"]["matchPolicy"] = json!("Exact");
        assert!(webhook_needed(&generated(), &cluster).is_some());
    }
}
