//! The node selector check: a namespace's pool and a pod spec's nodeSelector -> patch, pass or
//! conflict. Pure: no I/O, every rule is a row in the table tests below.

use json_patch::jsonptr::PointerBuf;
use json_patch::{AddOperation, Patch, PatchOperation};
use serde_json::{Map, Value};

use crate::config::{Config, SelectorPolicy};
use crate::labels::Labels;

/// Pod annotation naming the pool the mutating webhook placed the pod on. The validating
/// webhook accepts a selector for that pool even if the namespace was relabelled in the
/// milliseconds between the two calls.
pub const POOL_ANNOTATION: &str = "poolguard.io/pool";

/// The pool a namespace is assigned to: the value of its pool label, if set and not empty.
pub fn pool_of<'a>(labels: Option<&'a Labels>, namespace_label: &str) -> Option<&'a str> {
    labels?
        .get(namespace_label)
        .map(String::as_str)
        .filter(|p| !p.is_empty())
}

/// The placement settings from the config.
#[derive(Debug, Clone, Copy)]
pub struct Rules<'a> {
    /// Namespace label naming the pool (used in messages).
    pub namespace_label: &'a str,
    /// Node label key written into the pod's nodeSelector.
    pub node_selector_key: &'a str,
    pub selector_policy: SelectorPolicy,
}

impl Config {
    pub(crate) fn placement_rules(&self) -> Rules<'_> {
        Rules {
            namespace_label: &self.namespace_label,
            node_selector_key: &self.node_selector_key,
            selector_policy: self.selector_policy,
        }
    }
}

/// Outcome of checking one pod spec against its namespace's pool.
#[derive(Debug, Clone, PartialEq)]
pub enum Placement {
    /// The selector already places the pod on the pool.
    Satisfied,
    /// The selector lacks the pool key: these operations add it.
    Patch(Patch),
    /// The selector asks for something the pool does not allow.
    Conflict(String),
    /// The pod spec's nodeSelector is not an object of strings.
    Invalid(String),
}

/// Checks the `nodeSelector` of the pod spec found at `spec_path` (JSON Pointer tokens inside the
/// object, used for patch paths) for a namespace assigned to `pool`.
pub fn place(
    spec: Option<&Value>,
    spec_path: &[&str],
    namespace: &str,
    pool: &str,
    rules: &Rules,
) -> Placement {
    let key = rules.node_selector_key;
    let selector = match spec.and_then(|s| s.get("nodeSelector")) {
        None | Some(Value::Null) => None,
        Some(Value::Object(map)) => Some(map),
        Some(other) => {
            return Placement::Invalid(format!(
                "{}: nodeSelector must be an object of strings, got {other}",
                dotted(spec_path)
            ))
        }
    };
    if let Some(map) = selector {
        if let Some((k, v)) = map.iter().find(|(_, v)| !v.is_string()) {
            return Placement::Invalid(format!(
                "{}.nodeSelector[{k:?}] must be a string, got {v}",
                dotted(spec_path)
            ));
        }
    }
    let empty = Map::new();
    let selector = selector.unwrap_or(&empty);
    let current = selector.get(key).and_then(Value::as_str);
    let assigned = || {
        format!(
            "namespace {namespace:?} is assigned to pool {pool:?} (namespace label {}={pool})",
            rules.namespace_label
        )
    };

    if let Some(value) = current {
        if value != pool {
            return Placement::Conflict(format!(
                "{}: nodeSelector {key}={value:?} is not allowed here",
                assigned()
            ));
        }
    }
    if rules.selector_policy == SelectorPolicy::Strict && selector.keys().any(|k| k != key) {
        return Placement::Conflict(format!(
            "{}: selectorPolicy is strict, so the nodeSelector must be empty or exactly {{{key}: {pool}}}, got {}",
            assigned(),
            Value::Object(selector.clone())
        ));
    }
    match (current, selector.is_empty()) {
        (Some(_), _) => Placement::Satisfied,
        (None, true) => {
            let value = Value::Object(Map::from_iter([(key.to_string(), Value::from(pool))]));
            Placement::Patch(Patch(vec![add(
                spec_path.iter().copied().chain(["nodeSelector"]),
                value,
            )]))
        }
        (None, false) => Placement::Patch(Patch(vec![add(
            spec_path.iter().copied().chain(["nodeSelector", key]),
            Value::from(pool),
        )])),
    }
}

/// The operation recording `pool` in the pod's [`POOL_ANNOTATION`], if it is not there yet.
pub fn annotate(pod: &Value, pool: &str) -> Option<PatchOperation> {
    let meta = pod.get("metadata");
    let annotations = meta
        .and_then(|m| m.get("annotations"))
        .and_then(Value::as_object);
    let value = Value::from(pool);
    match (meta, annotations) {
        (_, Some(a)) if a.get(POOL_ANNOTATION) == Some(&value) => None,
        (_, Some(_)) => Some(add(["metadata", "annotations", POOL_ANNOTATION], value)),
        (Some(Value::Object(_)), None) => Some(add(
            ["metadata", "annotations"],
            Value::Object(Map::from_iter([(POOL_ANNOTATION.to_string(), value)])),
        )),
        _ => None,
    }
}

/// The pool a pod's selector asks for under `key`, when the mutating webhook recorded that same
/// pool in [`POOL_ANNOTATION`]: the namespace named that pool when the pod was mutated.
pub(crate) fn placed_by_mutation<'a>(
    pod: &'a Value,
    spec: Option<&'a Value>,
    key: &str,
) -> Option<&'a str> {
    let requested = spec?.get("nodeSelector")?.get(key)?.as_str()?;
    let recorded = pod
        .get("metadata")?
        .get("annotations")?
        .get(POOL_ANNOTATION)?
        .as_str()?;
    (requested == recorded).then_some(requested)
}

/// One JSON Patch `add` at the pointer made of `tokens` (escaped as RFC 6901 requires).
fn add<'t>(tokens: impl IntoIterator<Item = &'t str>, value: Value) -> PatchOperation {
    PatchOperation::Add(AddOperation {
        path: PointerBuf::from_tokens(tokens),
        value,
    })
}

fn dotted(path: &[&str]) -> String {
    path.join(".")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const MERGE: Rules = Rules {
        namespace_label: "agentpool",
        node_selector_key: "agentpool",
        selector_policy: SelectorPolicy::Merge,
    };
    const STRICT: Rules = Rules {
        selector_policy: SelectorPolicy::Strict,
        ..MERGE
    };
    const AKS: Rules = Rules {
        node_selector_key: "kubernetes.azure.com/agentpool",
        ..MERGE
    };
    const TILDE: Rules = Rules {
        node_selector_key: "example.com/pool~a",
        ..MERGE
    };

    enum Want {
        Satisfied,
        Patch(Value),
        Conflict(&'static [&'static str]),
        Invalid(&'static str),
    }

    fn check(name: &str, got: Placement, want: Want) {
        match (got, want) {
            (Placement::Satisfied, Want::Satisfied) => {}
            (Placement::Patch(p), Want::Patch(ops)) => {
                assert_eq!(serde_json::to_value(&p).unwrap(), ops, "{name}")
            }
            (Placement::Conflict(msg), Want::Conflict(parts)) => {
                for part in parts {
                    assert!(msg.contains(part), "{name}: {msg:?} lacks {part:?}");
                }
            }
            (Placement::Invalid(msg), Want::Invalid(part)) => {
                assert!(msg.contains(part), "{name}: {msg:?} lacks {part:?}")
            }
            (got, _) => panic!("{name}: unexpected {got:?}"),
        }
    }

    #[test]
    fn pod_spec_table() {
        let pod = ["spec"];
        let cases: Vec<(&str, Value, Rules, Want)> = vec![
            (
                "no selector: set it",
                json!({"containers": []}),
                MERGE,
                Want::Patch(
                    json!([{"op": "add", "path": "/spec/nodeSelector", "value": {"agentpool": "pool1"}}]),
                ),
            ),
            (
                "null selector: set it",
                json!({"nodeSelector": null}),
                MERGE,
                Want::Patch(
                    json!([{"op": "add", "path": "/spec/nodeSelector", "value": {"agentpool": "pool1"}}]),
                ),
            ),
            (
                "empty selector: set it",
                json!({"nodeSelector": {}}),
                MERGE,
                Want::Patch(
                    json!([{"op": "add", "path": "/spec/nodeSelector", "value": {"agentpool": "pool1"}}]),
                ),
            ),
            (
                "other keys kept, pool key added",
                json!({"nodeSelector": {"kubernetes.io/os": "linux"}}),
                MERGE,
                Want::Patch(
                    json!([{"op": "add", "path": "/spec/nodeSelector/agentpool", "value": "pool1"}]),
                ),
            ),
            (
                "key with slash is escaped ~1",
                json!({"nodeSelector": {"kubernetes.io/os": "linux"}}),
                AKS,
                Want::Patch(
                    json!([{"op": "add", "path": "/spec/nodeSelector/kubernetes.azure.com~1agentpool", "value": "pool1"}]),
                ),
            ),
            (
                "key with slash and tilde is escaped ~1 and ~0",
                json!({"nodeSelector": {"disk": "ssd"}}),
                TILDE,
                Want::Patch(
                    json!([{"op": "add", "path": "/spec/nodeSelector/example.com~1pool~0a", "value": "pool1"}]),
                ),
            ),
            (
                "empty selector with slashed key sets the whole map",
                json!({}),
                AKS,
                Want::Patch(
                    json!([{"op": "add", "path": "/spec/nodeSelector", "value": {"kubernetes.azure.com/agentpool": "pool1"}}]),
                ),
            ),
            (
                "same pool: nothing to do",
                json!({"nodeSelector": {"agentpool": "pool1"}}),
                MERGE,
                Want::Satisfied,
            ),
            (
                "same pool plus other keys: nothing to do in merge",
                json!({"nodeSelector": {"agentpool": "pool1", "kubernetes.io/os": "linux"}}),
                MERGE,
                Want::Satisfied,
            ),
            (
                "other pool: conflict naming namespace, pool and requested value",
                json!({"nodeSelector": {"agentpool": "pool2"}}),
                MERGE,
                Want::Conflict(&["\"mapped\"", "\"pool1\"", "agentpool=\"pool2\""]),
            ),
            (
                "other pool under the AKS key",
                json!({"nodeSelector": {"kubernetes.azure.com/agentpool": "gpu"}}),
                AKS,
                Want::Conflict(&["kubernetes.azure.com/agentpool=\"gpu\"", "\"pool1\""]),
            ),
            (
                "the namespace label key alone is not the node key",
                json!({"nodeSelector": {"agentpool": "gpu"}}),
                AKS,
                Want::Patch(
                    json!([{"op": "add", "path": "/spec/nodeSelector/kubernetes.azure.com~1agentpool", "value": "pool1"}]),
                ),
            ),
            (
                "strict: exact selector passes",
                json!({"nodeSelector": {"agentpool": "pool1"}}),
                STRICT,
                Want::Satisfied,
            ),
            (
                "strict: no selector is patched",
                json!({}),
                STRICT,
                Want::Patch(
                    json!([{"op": "add", "path": "/spec/nodeSelector", "value": {"agentpool": "pool1"}}]),
                ),
            ),
            (
                "strict: empty selector is patched",
                json!({"nodeSelector": {}}),
                STRICT,
                Want::Patch(
                    json!([{"op": "add", "path": "/spec/nodeSelector", "value": {"agentpool": "pool1"}}]),
                ),
            ),
            (
                "strict: another key is a conflict",
                json!({"nodeSelector": {"kubernetes.io/os": "linux"}}),
                STRICT,
                Want::Conflict(&["strict", "kubernetes.io/os"]),
            ),
            (
                "strict: right pool plus another key is a conflict",
                json!({"nodeSelector": {"agentpool": "pool1", "disk": "ssd"}}),
                STRICT,
                Want::Conflict(&["strict", "disk"]),
            ),
            (
                "strict: other pool is a conflict naming the value",
                json!({"nodeSelector": {"agentpool": "pool2"}}),
                STRICT,
                Want::Conflict(&["agentpool=\"pool2\""]),
            ),
            (
                "selector not an object",
                json!({"nodeSelector": "pool1"}),
                MERGE,
                Want::Invalid("must be an object"),
            ),
            (
                "selector value not a string",
                json!({"nodeSelector": {"agentpool": 1}}),
                MERGE,
                Want::Invalid("must be a string"),
            ),
        ];
        for (name, spec, rules, want) in cases {
            check(
                name,
                place(Some(&spec), &pod, "mapped", "pool1", &rules),
                want,
            );
        }
    }

    #[test]
    fn annotate_table() {
        let cases = [
            (
                json!({"metadata": {}}),
                Some(
                    json!({"op": "add", "path": "/metadata/annotations", "value": {"poolguard.io/pool": "p"}}),
                ),
            ),
            (
                json!({"metadata": {"annotations": {"a": "b"}}}),
                Some(
                    json!({"op": "add", "path": "/metadata/annotations/poolguard.io~1pool", "value": "p"}),
                ),
            ),
            (
                json!({"metadata": {"annotations": {"poolguard.io/pool": "old"}}}),
                Some(
                    json!({"op": "add", "path": "/metadata/annotations/poolguard.io~1pool", "value": "p"}),
                ),
            ),
            (
                json!({"metadata": {"annotations": {"poolguard.io/pool": "p"}}}),
                None,
            ),
        ];
        for (pod, want) in cases {
            assert_eq!(
                annotate(&pod, "p").map(|op| serde_json::to_value(op).unwrap()),
                want,
                "{pod}"
            );
        }
    }

    #[test]
    fn placed_by_mutation_table() {
        let pod = |sel: &str, ann: &str| json!({"metadata": {"annotations": {"poolguard.io/pool": ann}}, "spec": {"nodeSelector": {"agentpool": sel}}});
        let p = pod("old", "old");
        assert_eq!(
            placed_by_mutation(&p, p.get("spec"), "agentpool"),
            Some("old")
        );
        let p = pod("other", "old");
        assert_eq!(placed_by_mutation(&p, p.get("spec"), "agentpool"), None);
        let p = json!({"spec": {"nodeSelector": {"agentpool": "old"}}});
        assert_eq!(placed_by_mutation(&p, p.get("spec"), "agentpool"), None);
    }

    #[test]
    fn pool_of_table() {
        let labels: Labels = [
            ("agentpool".to_string(), "gpu".to_string()),
            ("empty".to_string(), String::new()),
        ]
        .into();
        assert_eq!(pool_of(Some(&labels), "agentpool"), Some("gpu"));
        assert_eq!(pool_of(Some(&labels), "empty"), None);
        assert_eq!(pool_of(Some(&labels), "other"), None);
        assert_eq!(pool_of(None, "agentpool"), None);
    }

    #[test]
    fn missing_spec_is_patched_at_the_template_path() {
        let path = ["spec", "jobTemplate", "spec", "template", "spec"];
        check(
            "cronjob",
            place(None, &path, "ns", "gpu", &MERGE),
            Want::Patch(
                json!([{"op": "add", "path": "/spec/jobTemplate/spec/template/spec/nodeSelector", "value": {"agentpool": "gpu"}}]),
            ),
        );
    }

    #[test]
    fn patch_applies_and_keeps_other_keys() {
        let mut pod = json!({"spec": {"nodeSelector": {"kubernetes.io/os": "linux"}}});
        let Placement::Patch(p) = place(pod.get("spec"), &["spec"], "ns", "pool1", &AKS) else {
            panic!("expected a patch")
        };
        json_patch::patch(&mut pod, &p).unwrap();
        assert_eq!(
            pod["spec"]["nodeSelector"],
            json!({"kubernetes.io/os": "linux", "kubernetes.azure.com/agentpool": "pool1"})
        );
    }
}
