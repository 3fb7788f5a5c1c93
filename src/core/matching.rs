//! A constraint's `spec.match`: which objects it applies to, as Gatekeeper decides it (kinds,
//! scope, namespaces and excludedNamespaces with `*` globs, labelSelector, namespaceSelector,
//! name).

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::config::selector::LabelSelector;
use crate::globs::glob_matches;
use crate::labels::Labels;

/// `spec.match` of a constraint. Every criterion given must hold; an empty match selects every
/// object.
#[derive(Debug, Clone, PartialEq, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Match {
    #[serde(default)]
    pub kinds: Vec<KindSelector>,
    /// `*`, `Cluster` or `Namespaced`; anything else selects every object, as in Gatekeeper.
    #[serde(default)]
    pub scope: Option<String>,
    #[serde(default)]
    pub namespaces: Vec<String>,
    #[serde(default)]
    pub excluded_namespaces: Vec<String>,
    #[serde(default)]
    pub label_selector: Option<LabelSelector>,
    #[serde(default)]
    pub namespace_selector: Option<LabelSelector>,
    #[serde(default)]
    pub name: Option<String>,
    /// `All`, `Original` or `Generated`: poolguard sees original objects only, so `Generated`
    /// selects nothing.
    #[serde(default)]
    pub source: Option<String>,
}

/// One `kinds` entry: the object's API group and kind must each be listed (`*`: any; an empty
/// list: any).
#[derive(Debug, Clone, PartialEq, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct KindSelector {
    #[serde(default)]
    pub api_groups: Vec<String>,
    #[serde(default)]
    pub kinds: Vec<String>,
}

/// What of a review the match reads.
struct Target<'a> {
    group: &'a str,
    kind: &'a str,
    object: &'a Value,
    /// The namespace object under `namespaceObject`, when known.
    namespace: Option<&'a Value>,
}

impl Target<'_> {
    fn is_namespace(&self) -> bool {
        crate::admission::is_namespace_kind(self.group, self.kind)
    }

    /// The namespace declared by the object (empty: cluster-scoped).
    fn declared_namespace(&self) -> &str {
        self.object["metadata"]["namespace"]
            .as_str()
            .unwrap_or_default()
    }

    /// The namespace name the namespace criteria compare: the object's own name for a
    /// Namespace; else its namespace object's, else the one it declares; none when
    /// cluster-scoped.
    fn namespace_name(&self) -> Option<&str> {
        if self.is_namespace() {
            return Some(self.object["metadata"]["name"].as_str().unwrap_or_default());
        }
        if let Some(ns) = self.namespace {
            return Some(ns["metadata"]["name"].as_str().unwrap_or_default());
        }
        Some(self.declared_namespace()).filter(|n| !n.is_empty())
    }
}

fn labels_of(object: &Value) -> Labels {
    object["metadata"]["labels"]
        .as_object()
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
                .collect()
        })
        .unwrap_or_default()
}

impl Match {
    /// Checks what the match can get wrong before any object arrives: a selector operator
    /// without values, or values it forbids, as Kubernetes refuses it.
    pub fn validate(&self) -> Result<(), String> {
        for (at, selector) in [
            ("labelSelector", &self.label_selector),
            ("namespaceSelector", &self.namespace_selector),
        ] {
            if let Some(selector) = selector {
                for (i, r) in selector.match_expressions.iter().enumerate() {
                    use crate::config::selector::Operator::*;
                    let needs_values = matches!(r.operator, In | NotIn);
                    if needs_values == r.values.is_empty() {
                        return Err(format!(
                            "at `spec.match.{at}.matchExpressions[{i}]`: operator {:?} {} values",
                            r.operator,
                            if needs_values { "needs" } else { "takes no" }
                        ));
                    }
                }
            }
        }
        if let Some(source) = &self.source {
            if !matches!(source.as_str(), "All" | "Original" | "Generated") {
                return Err(format!(
                    "at `spec.match.source`: expected All, Original or Generated, got `{source}`"
                ));
            }
        }
        Ok(())
    }

    /// Whether the match selects the object of `review` (an AdmissionRequest: `kind`, `object`
    /// or, for a DELETE, `oldObject`, and `namespaceObject` when the namespace is known).
    pub fn matches(&self, review: &Value) -> bool {
        let object = match &review["object"] {
            Value::Object(_) => &review["object"],
            _ => &review["oldObject"],
        };
        let api_version = object["apiVersion"].as_str().unwrap_or_default();
        let group = review["kind"]["group"]
            .as_str()
            .unwrap_or_else(|| api_version.rsplit_once('/').map_or("", |(g, _)| g));
        let kind = review["kind"]["kind"]
            .as_str()
            .or_else(|| object["kind"].as_str())
            .unwrap_or_default();
        let target = Target {
            group,
            kind,
            object,
            namespace: review.get("namespaceObject").filter(|n| n.is_object()),
        };
        self.source.as_deref() != Some("Generated")
            && self.kinds_match(&target)
            && self.scope_matches(&target)
            && self.namespaces_match(&target)
            && self.label_selector_matches(&target)
            && self.namespace_selector_matches(&target)
            && self.name_matches(&target)
    }

    fn kinds_match(&self, t: &Target) -> bool {
        let listed = |list: &[String], value: &str| {
            list.is_empty() || list.iter().any(|v| v == "*" || v == value)
        };
        self.kinds.is_empty()
            || self
                .kinds
                .iter()
                .any(|k| listed(&k.kinds, t.kind) && listed(&k.api_groups, t.group))
    }

    fn scope_matches(&self, t: &Target) -> bool {
        let namespaced = !t.declared_namespace().is_empty() || t.namespace.is_some();
        match self.scope.as_deref() {
            Some("Cluster") => t.is_namespace() || !namespaced,
            Some("Namespaced") => !t.is_namespace() && namespaced,
            _ => true,
        }
    }

    fn namespaces_match(&self, t: &Target) -> bool {
        let Some(namespace) = t.namespace_name() else {
            // Cluster-scoped and not a Namespace: the namespace criteria do not apply.
            return true;
        };
        (self.namespaces.is_empty() || self.namespaces.iter().any(|p| glob_matches(p, namespace)))
            && !self
                .excluded_namespaces
                .iter()
                .any(|p| glob_matches(p, namespace))
    }

    fn label_selector_matches(&self, t: &Target) -> bool {
        self.label_selector
            .as_ref()
            .is_none_or(|s| s.matches(&labels_of(t.object)))
    }

    fn namespace_selector_matches(&self, t: &Target) -> bool {
        let Some(selector) = &self.namespace_selector else {
            return true;
        };
        if t.is_namespace() {
            return selector.matches(&labels_of(t.object));
        }
        match t.namespace {
            Some(ns) => selector.matches(&labels_of(ns)),
            // Cluster-scoped objects are selected; a namespaced one whose namespace is not
            // known is not (Gatekeeper errors).
            None => t.declared_namespace().is_empty(),
        }
    }

    fn name_matches(&self, t: &Target) -> bool {
        let Some(pattern) = self.name.as_deref().filter(|n| !n.is_empty()) else {
            return true;
        };
        let meta = &t.object["metadata"];
        let name = meta["name"].as_str().unwrap_or_default();
        let generate = meta["generateName"].as_str().unwrap_or_default();
        glob_matches(pattern, name)
            || (!generate.is_empty()
                && pattern
                    .strip_suffix('*')
                    .is_some_and(|prefix| generate.starts_with(prefix)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn m(spec: Value) -> Match {
        serde_json::from_value(spec).unwrap()
    }

    fn pod(ns: &str, name: &str, labels: Value) -> Value {
        json!({"kind": {"group": "", "version": "v1", "kind": "Pod"}, "namespace": ns,
               "object": {"apiVersion": "v1", "kind": "Pod",
                          "metadata": {"name": name, "namespace": ns, "labels": labels}}})
    }

    fn with_ns(mut review: Value, labels: Value) -> Value {
        let ns = review["namespace"].clone();
        review["namespaceObject"] = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns, "labels": labels}});
        review
    }

    fn namespace(name: &str, labels: Value) -> Value {
        json!({"kind": {"group": "", "version": "v1", "kind": "Namespace"},
               "object": {"apiVersion": "v1", "kind": "Namespace",
                          "metadata": {"name": name, "labels": labels}}})
    }

    fn deployment(ns: &str) -> Value {
        json!({"kind": {"group": "apps", "version": "v1", "kind": "Deployment"}, "namespace": ns,
               "object": {"apiVersion": "apps/v1", "kind": "Deployment",
                          "metadata": {"name": "web", "namespace": ns}}})
    }

    fn node() -> Value {
        json!({"kind": {"group": "", "version": "v1", "kind": "Node"},
               "object": {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}}})
    }

    #[test]
    fn match_table() {
        let pods = json!({"kinds": [{"apiGroups": [""], "kinds": ["Pod"]}]});
        let cases: Vec<(&str, Value, Value, bool)> = vec![
            ("empty match selects all", json!({}), node(), true),
            ("kinds: pod", pods.clone(), pod("a", "p", json!({})), true),
            (
                "kinds: not a deployment",
                pods.clone(),
                deployment("a"),
                false,
            ),
            (
                "kinds: wildcard group",
                json!({"kinds": [{"apiGroups": ["*"], "kinds": ["Deployment"]}]}),
                deployment("a"),
                true,
            ),
            (
                "kinds: empty groups mean any",
                json!({"kinds": [{"kinds": ["Deployment"]}]}),
                deployment("a"),
                true,
            ),
            (
                "kinds: wrong group",
                json!({"kinds": [{"apiGroups": ["batch"], "kinds": ["Deployment"]}]}),
                deployment("a"),
                false,
            ),
            (
                "kinds: second entry",
                json!({"kinds": [{"apiGroups": [""], "kinds": ["Pod"]}, {"apiGroups": ["apps"], "kinds": ["*"]}]}),
                deployment("a"),
                true,
            ),
            (
                "namespaces: listed",
                json!({"namespaces": ["a"]}),
                pod("a", "p", json!({})),
                true,
            ),
            (
                "namespaces: not listed",
                json!({"namespaces": ["b"]}),
                pod("a", "p", json!({})),
                false,
            ),
            (
                "namespaces: prefix glob",
                json!({"namespaces": ["kube-*"]}),
                pod("kube-system", "p", json!({})),
                true,
            ),
            (
                "namespaces: suffix glob",
                json!({"namespaces": ["*-system"]}),
                pod("kube-system", "p", json!({})),
                true,
            ),
            (
                "namespaces: glob misses",
                json!({"namespaces": ["kube-*"]}),
                pod("default", "p", json!({})),
                false,
            ),
            (
                "namespaces: a Namespace by its own name",
                json!({"namespaces": ["team-*"]}),
                namespace("team-a", json!({})),
                true,
            ),
            (
                "namespaces: cluster-scoped objects pass",
                json!({"namespaces": ["a"]}),
                node(),
                true,
            ),
            (
                "excludedNamespaces: excluded",
                json!({"excludedNamespaces": ["kube-*"]}),
                pod("kube-system", "p", json!({})),
                false,
            ),
            (
                "excludedNamespaces: other",
                json!({"excludedNamespaces": ["kube-*"]}),
                pod("default", "p", json!({})),
                true,
            ),
            (
                "excludedNamespaces: a Namespace itself",
                json!({"excludedNamespaces": ["kube-system"]}),
                namespace("kube-system", json!({})),
                false,
            ),
            (
                "excludedNamespaces: cluster-scoped pass",
                json!({"excludedNamespaces": ["*"]}),
                node(),
                true,
            ),
            (
                "labelSelector: matchLabels",
                json!({"labelSelector": {"matchLabels": {"app": "web"}}}),
                pod("a", "p", json!({"app": "web"})),
                true,
            ),
            (
                "labelSelector: missing label",
                json!({"labelSelector": {"matchLabels": {"app": "web"}}}),
                pod("a", "p", json!({})),
                false,
            ),
            (
                "labelSelector: NotIn holds for absent",
                json!({"labelSelector": {"matchExpressions": [{"key": "tier", "operator": "NotIn", "values": ["x"]}]}}),
                pod("a", "p", json!({})),
                true,
            ),
            (
                "labelSelector: Exists",
                json!({"labelSelector": {"matchExpressions": [{"key": "tier", "operator": "Exists"}]}}),
                pod("a", "p", json!({"tier": "x"})),
                true,
            ),
            (
                "namespaceSelector: from namespaceObject",
                json!({"namespaceSelector": {"matchLabels": {"env": "prod"}}}),
                with_ns(pod("a", "p", json!({})), json!({"env": "prod"})),
                true,
            ),
            (
                "namespaceSelector: other labels",
                json!({"namespaceSelector": {"matchLabels": {"env": "prod"}}}),
                with_ns(pod("a", "p", json!({})), json!({"env": "dev"})),
                false,
            ),
            (
                "namespaceSelector: namespace unknown",
                json!({"namespaceSelector": {"matchLabels": {"env": "prod"}}}),
                pod("a", "p", json!({})),
                false,
            ),
            (
                "namespaceSelector: a Namespace by its own labels",
                json!({"namespaceSelector": {"matchLabels": {"env": "prod"}}}),
                namespace("a", json!({"env": "prod"})),
                true,
            ),
            (
                "namespaceSelector: cluster-scoped pass",
                json!({"namespaceSelector": {"matchLabels": {"env": "prod"}}}),
                node(),
                true,
            ),
            (
                "name: exact",
                json!({"name": "p"}),
                pod("a", "p", json!({})),
                true,
            ),
            (
                "name: other",
                json!({"name": "q"}),
                pod("a", "p", json!({})),
                false,
            ),
            (
                "name: prefix glob",
                json!({"name": "web-*"}),
                pod("a", "web-1", json!({})),
                true,
            ),
            (
                "scope: Namespaced pod",
                json!({"scope": "Namespaced"}),
                pod("a", "p", json!({})),
                true,
            ),
            (
                "scope: Namespaced node",
                json!({"scope": "Namespaced"}),
                node(),
                false,
            ),
            (
                "scope: Namespaced Namespace",
                json!({"scope": "Namespaced"}),
                namespace("a", json!({})),
                false,
            ),
            (
                "scope: Cluster node",
                json!({"scope": "Cluster"}),
                node(),
                true,
            ),
            (
                "scope: Cluster Namespace",
                json!({"scope": "Cluster"}),
                namespace("a", json!({})),
                true,
            ),
            (
                "scope: Cluster pod",
                json!({"scope": "Cluster"}),
                pod("a", "p", json!({})),
                false,
            ),
            (
                "scope: *",
                json!({"scope": "*"}),
                pod("a", "p", json!({})),
                true,
            ),
            (
                "source: Generated selects nothing",
                json!({"source": "Generated"}),
                pod("a", "p", json!({})),
                false,
            ),
            (
                "all together",
                json!({"kinds": [{"apiGroups": [""], "kinds": ["Pod"]}], "namespaces": ["a*"], "excludedNamespaces": ["ab"], "labelSelector": {"matchLabels": {"app": "web"}}}),
                pod("ac", "p", json!({"app": "web"})),
                true,
            ),
            (
                "all together, excluded",
                json!({"kinds": [{"apiGroups": [""], "kinds": ["Pod"]}], "namespaces": ["a*"], "excludedNamespaces": ["ab"], "labelSelector": {"matchLabels": {"app": "web"}}}),
                pod("ab", "p", json!({"app": "web"})),
                false,
            ),
        ];
        for (name, spec, review, want) in cases {
            assert_eq!(m(spec).matches(&review), want, "{name}");
        }
    }

    #[test]
    fn a_delete_is_matched_on_the_old_object() {
        let review = json!({"kind": {"group": "", "kind": "Pod"}, "operation": "DELETE", "object": null,
            "oldObject": {"metadata": {"name": "p", "namespace": "a", "labels": {"app": "web"}}}});
        assert!(m(json!({"labelSelector": {"matchLabels": {"app": "web"}}})).matches(&review));
    }

    #[test]
    fn globs() {
        for (pattern, name, want) in [
            ("*", "x", true),
            ("kube-*", "kube-system", true),
            ("kube-*", "kube", false),
            ("*-system", "gatekeeper-system", true),
            ("*-system", "system", false),
            ("*ube*", "kube-system", true),
            ("exact", "exact", true),
            ("exact", "exactly", false),
        ] {
            assert_eq!(glob_matches(pattern, name), want, "{pattern} {name}");
        }
    }

    #[test]
    fn invalid_selectors_and_sources_are_named() {
        let bad =
            m(json!({"labelSelector": {"matchExpressions": [{"key": "a", "operator": "In"}]}}));
        assert_eq!(
            bad.validate().unwrap_err(),
            "at `spec.match.labelSelector.matchExpressions[0]`: operator In needs values"
        );
        let bad = m(json!({"source": "Mutated"}));
        assert!(bad.validate().unwrap_err().contains("spec.match.source"));
    }
}
