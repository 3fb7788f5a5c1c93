//! The rollout groups' namespace selectors (`config::selector::LabelSelector`) select what
//! kube-core's `Selector` (the Rust port of apimachinery's `LabelSelectorAsSelector`) selects,
//! on one table of selectors and label sets. What differs is validation: Kubernetes refuses
//! `In`/`NotIn` without values and `Exists`/`DoesNotExist` with values; kube-core accepts the
//! latter two (ignoring the values, or selecting nothing), which the config refuses at load.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector as KubeLabelSelector;
use kube::core::{Selector, SelectorExt};
use poolguard_core::config::selector::LabelSelector;
use serde_json::{json, Value};

fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[test]
fn poolguard_and_kube_core_select_the_same_namespaces() {
    let sets = [
        labels(&[]),
        labels(&[("risk", "low")]),
        labels(&[("risk", "medium")]),
        labels(&[("risk", "low"), ("team", "a")]),
        labels(&[("risk", ""), ("team", "b")]),
        labels(&[("team", "a")]),
        labels(&[("tier", "x"), ("risk", "high"), ("team", "a")]),
    ];
    let selectors: Vec<Value> = vec![
        json!({}),
        json!({"matchLabels": {"risk": "low"}}),
        json!({"matchLabels": {"risk": "low", "team": "a"}}),
        json!({"matchLabels": {"risk": ""}}),
        json!({"matchExpressions": [{"key": "risk", "operator": "In", "values": ["low", "medium"]}]}),
        json!({"matchExpressions": [{"key": "risk", "operator": "In", "values": [""]}]}),
        json!({"matchExpressions": [{"key": "risk", "operator": "NotIn", "values": ["low"]}]}),
        json!({"matchExpressions": [{"key": "risk", "operator": "NotIn", "values": ["low", "medium", "high"]}]}),
        json!({"matchExpressions": [{"key": "team", "operator": "Exists"}]}),
        json!({"matchExpressions": [{"key": "team", "operator": "DoesNotExist"}]}),
        json!({"matchExpressions": [
            {"key": "risk", "operator": "Exists"},
            {"key": "risk", "operator": "NotIn", "values": ["high"]}
        ]}),
        json!({"matchLabels": {"risk": "low"}, "matchExpressions": [{"key": "risk", "operator": "In", "values": ["medium"]}]}),
        json!({"matchLabels": {"team": "a"}, "matchExpressions": [{"key": "tier", "operator": "DoesNotExist"}]}),
        json!({"matchExpressions": [
            {"key": "team", "operator": "In", "values": ["a", "b"]},
            {"key": "risk", "operator": "NotIn", "values": ["low"]}
        ]}),
    ];
    let mut checked = 0;
    for selector in &selectors {
        let ours: LabelSelector = serde_json::from_value(selector.clone()).unwrap();
        // The config refuses the empty selector (it means "omit the selector"); it still
        // matches as Kubernetes' does.
        if !ours.is_empty() {
            ours.validate("s").unwrap();
        }
        let kube: KubeLabelSelector = serde_json::from_value(selector.clone()).unwrap();
        let kube = Selector::try_from(kube).unwrap();
        for set in &sets {
            assert_eq!(
                ours.matches(set),
                kube.matches(set),
                "{selector} on {set:?}"
            );
            checked += 1;
        }
    }
    assert_eq!(checked, selectors.len() * sets.len());
}

#[test]
fn kube_core_accepts_selectors_that_kubernetes_and_the_config_refuse() {
    let refused_by_kubernetes = [
        json!({"matchExpressions": [{"key": "risk", "operator": "Exists", "values": ["low"]}]}),
        json!({"matchExpressions": [{"key": "risk", "operator": "In", "values": []}]}),
    ];
    for selector in refused_by_kubernetes {
        let ours: LabelSelector = serde_json::from_value(selector.clone()).unwrap();
        assert!(ours.validate("s").is_err(), "{selector}");
        let kube: KubeLabelSelector = serde_json::from_value(selector.clone()).unwrap();
        assert!(Selector::try_from(kube).is_ok(), "{selector}");
    }
}
