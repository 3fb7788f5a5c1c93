//! `input.review` as Gatekeeper builds it, for objects read from files (`poolguard verify`) and
//! for the evaluation of constraints on one review.

use std::time::Duration;

use serde_json::{json, Value};

use crate::exceptions::Target;
use crate::policy::dependencies::State;
use crate::policy::{input, Outcome};
use crate::ruleset::{RuleSet, Subject};

/// The review of `object` outside admission, as Gatekeeper's audit and gator build it: `kind`
/// (group, version, kind), `name`, `namespace`, `object`, and `namespaceObject` when the
/// namespace is known; no `operation`. An AdmissionReview's `request` is taken as it is,
/// `namespaceObject` added.
pub fn of_object(object: &Value, namespace: Option<&Value>) -> Value {
    let mut review = if object["kind"] == "AdmissionReview" {
        object["request"].clone()
    } else {
        let api_version = object["apiVersion"].as_str().unwrap_or_default();
        let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
        let meta = &object["metadata"];
        let mut review = json!({
            "kind": {"group": group, "version": version, "kind": object["kind"]},
            "name": meta["name"].as_str().unwrap_or_default(),
            "object": object,
        });
        if let Some(ns) = meta["namespace"].as_str() {
            review["namespace"] = json!(ns);
        }
        review
    };
    if let (Some(ns), Some(map)) = (namespace, review.as_object_mut()) {
        map.insert("namespaceObject".to_string(), ns.clone());
    }
    review
}

/// The namespace an object (or an AdmissionReview's object) is in, if any.
pub fn namespace_of(object: &Value) -> Option<&str> {
    let inner = if object["kind"] == "AdmissionReview" {
        object["request"]["namespace"].as_str()
    } else {
        object["metadata"]["namespace"].as_str()
    };
    inner.filter(|n| !n.is_empty())
}

/// Every policy and constraint of `rules` that applies to `review`, decided by
/// [`crate::ruleset::RuleSet::evaluate`] (rollouts, dependencies and the PolicyExceptions of
/// `rules` live at `now` included) with no pool and the namespace's labels from
/// `namespaceObject`. Each evaluation takes at most `limit`.
pub fn evaluate(
    rules: &RuleSet,
    review: &Value,
    limit: Duration,
    now: Option<i64>,
) -> Vec<Outcome> {
    let object = if review["object"].is_object() {
        &review["object"]
    } else {
        &review["oldObject"]
    };
    let labels: Option<crate::labels::Labels> = review["namespaceObject"]["metadata"]["labels"]
        .as_object()
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
                .collect()
        });
    // SIT policies judge pod specs: only Pods and workloads get a document.
    let document = input::document(object, &[], None);
    let path = crate::admission::pod_spec_path(
        review["kind"]["group"].as_str().unwrap_or_default(),
        review["kind"]["kind"].as_str().unwrap_or_default(),
    );
    let pod_spec = path.is_some();
    // The images PolicyExceptions match (none readable: no exception with images matches).
    let images = path
        .and_then(|path| {
            let spec = crate::admission::value_at(object, path);
            crate::pod_images::images(spec, path, rules.config().limits.max_images_per_pod).ok()
        })
        .unwrap_or_default();
    let references: Vec<&str> = images.iter().map(|i| i.reference).collect();
    rules.evaluate(
        Subject {
            document: pod_spec.then_some(&document),
            review: Some(review),
            pool: None,
            labels: labels.as_ref(),
            placement: State::NotApplied,
            target: Some(Target {
                namespace: review["namespace"].as_str().unwrap_or_default(),
                labels: labels.as_ref(),
                kind: review["kind"]["kind"].as_str().unwrap_or_default(),
                name: review["name"].as_str().unwrap_or_default(),
                images: &references,
            }),
            now,
        },
        limit,
    )
}
