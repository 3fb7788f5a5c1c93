//! `poolguard eval`: one decision from files, no cluster. An AdmissionReview gets the response
//! document; a plain manifest gets a readable verdict (and, when mutating, the patched object).

use std::io::Write;

use anyhow::{bail, Context, Result};
use serde_json::{json, Value};

use poolguard_core::admission::{self, Decision, PodSpecAt, Request, Ruling};
use poolguard_core::documents;
use poolguard_core::namespaces::NamespaceLabels;
use poolguard_core::node_selector;
use poolguard_core::placement_policy::{self, PoolSet};
use poolguard_core::ruleset::Budget;
use poolguard_core::ruleset::RuleSet;
use poolguard_core::scope::Scope;
use poolguard_core::validate;
use poolguard_core::webhook::Webhook;

/// The namespaces' labels, and the pools when a nodes file was given.
pub type Cluster<'a> = (&'a NamespaceLabels, Option<&'a PoolSet>);

/// Evaluates the documents in `text`; writes the result to `out`. True when all were allowed.
pub fn run(
    webhook: Webhook,
    text: &str,
    origin: &str,
    namespace: Option<&str>,
    namespaces: Cluster,
    rules: &RuleSet,
    out: &mut impl Write,
) -> Result<bool> {
    let docs = documents::parse(text, origin)?;
    if docs.iter().any(is_review) {
        let [review] = docs.as_slice() else {
            bail!("{origin}: an AdmissionReview must be the only document");
        };
        return review_mode(webhook, review, origin, namespaces, rules, out);
    }
    manifests(webhook, docs, origin, namespace, namespaces, rules, out)
}

fn is_review(doc: &Value) -> bool {
    doc["kind"] == admission::KIND
}

/// Decides the manifests `docs` (no AdmissionReview among them), each of a List's items in turn.
fn manifests(
    webhook: Webhook,
    docs: Vec<Value>,
    origin: &str,
    namespace: Option<&str>,
    namespaces: Cluster,
    rules: &RuleSet,
    out: &mut impl Write,
) -> Result<bool> {
    if docs.is_empty() {
        bail!("{origin}: no document to evaluate");
    }
    // A List's items are decided one by one, as audit reads them.
    let objects: Vec<(Value, String)> = docs
        .into_iter()
        .enumerate()
        .flat_map(|(i, doc)| documents::objects(doc, &format!("{origin}: document {}", i + 1)))
        .collect();
    for (object, at) in &objects {
        check_decided(webhook, object, rules).map_err(|e| anyhow::anyhow!("{at}: {e}"))?;
    }
    let mut all_allowed = true;
    for (i, (object, _)) in objects.iter().enumerate() {
        if i > 0 {
            writeln!(out, "---")?;
        }
        all_allowed &= manifest_mode(webhook, object, i, namespace, namespaces, rules, out)?;
    }
    Ok(all_allowed)
}

/// What admission decides for the manifests in `text`: the mutating webhook's verdicts, then
/// the validating webhook's on the objects as mutated (patched or not), as the API server calls
/// them. True when all were allowed by both. An AdmissionReview names its one webhook, so it is
/// refused here.
pub fn admission(
    text: &str,
    origin: &str,
    namespace: Option<&str>,
    namespaces: Cluster,
    rules: &RuleSet,
    out: &mut impl Write,
) -> Result<bool> {
    let docs = documents::parse(text, origin)?;
    if docs.iter().any(is_review) {
        bail!("{origin}: --webhook admission reads manifests; an AdmissionReview is for one webhook (--webhook mutate or validate)");
    }
    let mut mutated = Vec::new();
    let allowed = manifests(
        Webhook::Mutate,
        docs,
        origin,
        namespace,
        namespaces,
        rules,
        &mut mutated,
    )?;
    out.write_all(&mutated)?;
    if !allowed {
        return Ok(false);
    }
    writeln!(out, "# --- validating the objects as mutated")?;
    let mutated = String::from_utf8(mutated).context("the mutated objects are not UTF-8")?;
    run(
        Webhook::Validate,
        &mutated,
        origin,
        namespace,
        namespaces,
        rules,
        out,
    )
}

/// The kinds a manifest may have, as an error lists them.
const DECIDED_KINDS: &str = "v1 Pod and ReplicationController; apps/v1 Deployment, ReplicaSet, StatefulSet and DaemonSet; batch/v1 Job and CronJob; and, with --webhook validate, v1 Namespace";

/// A manifest of a kind the webhook does not decide is an error: the cluster would not even
/// send it to poolguard, so "allowed" would say nothing. With Gatekeeper constraints loaded, the
/// validating webhook decides any kind (those no constraint matches are allowed), as admission
/// and audit do.
fn check_decided(webhook: Webhook, object: &Value, rules: &RuleSet) -> Result<()> {
    if !object.is_object() {
        bail!("expected a manifest (an object with apiVersion and kind)");
    }
    let (kind, api_version) = kind_and_api_version(object)?;
    let group = api_version.rsplit_once('/').map_or("", |(g, _)| g);
    let namespace = webhook == Webhook::Validate && admission::is_namespace_kind(group, kind);
    let constrained = webhook == Webhook::Validate && rules.policies().has_constraints();
    if admission::pod_spec_path(group, kind).is_none() && !namespace && !constrained {
        bail!(
            "poolguard does not decide kind {kind} (apiVersion {api_version}); it decides {DECIDED_KINDS}"
        );
    }
    Ok(())
}

fn review_mode(
    webhook: Webhook,
    review: &Value,
    origin: &str,
    namespaces: Cluster,
    rules: &RuleSet,
    out: &mut impl Write,
) -> Result<bool> {
    admission::check_review(review).map_err(|e| anyhow::anyhow!("{origin}: {e}"))?;
    let req =
        Request::from_value(&review["request"]).map_err(|e| anyhow::anyhow!("{origin}: {e}"))?;
    let decision = decide(webhook, &req, namespaces, rules);
    serde_json::to_writer_pretty(&mut *out, &admission::respond(req.uid, &decision))?;
    writeln!(out)?;
    Ok(decision.allowed())
}

fn manifest_mode(
    webhook: Webhook,
    object: &Value,
    index: usize,
    namespace: Option<&str>,
    namespaces: Cluster,
    rules: &RuleSet,
    out: &mut impl Write,
) -> Result<bool> {
    let (kind, api_version) = kind_and_api_version(object)?;
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
    let namespace = namespace
        .or_else(|| object["metadata"]["namespace"].as_str())
        .unwrap_or("default");
    let request = json!({
        "uid": format!("poolguard-eval-{}", index + 1),
        "kind": {"group": group, "version": version, "kind": kind},
        "namespace": namespace,
        "operation": "CREATE",
        "object": object,
    });
    let req = Request::from_value(&request).map_err(|e| anyhow::anyhow!("{e}"))?;
    let decision = decide(webhook, &req, namespaces, rules);
    let labels = namespaces.0.get(namespace);
    let pool = if placement_policy::chooses(labels, rules.config()) {
        let scope = Scope {
            labels,
            pools: namespaces.1,
            now: Some(crate::wall_clock::unix_now()),
        };
        let path = admission::pod_spec_path(group, kind).unwrap_or(&["spec"]);
        let config = &rules.config();
        let limit = Budget::FULL.limit(config);
        match validate::pool_for(
            PodSpecAt {
                object,
                path,
                namespace,
            },
            scope,
            None,
            rules,
            limit,
        ) {
            Ok(Some(pool)) => format!("pool {pool}, chosen by the placement policies"),
            _ => "no pool can be chosen by the placement policies".to_string(),
        }
    } else {
        let pool = node_selector::pool_of(labels, &rules.config().namespace_label);
        pool.map_or_else(|| "no pool".to_string(), |p| format!("pool {p}"))
    };
    let verdict = match &decision.ruling {
        Ruling::Allow { patch: Some(_) } => "ALLOWED, patched".to_string(),
        Ruling::Allow { patch: None } => "ALLOWED".to_string(),
        Ruling::Deny { code, .. } => format!("DENIED ({})", code.as_u16()),
    };
    writeln!(
        out,
        "# {kind} {} in namespace {namespace} ({pool}): {verdict}",
        req.object_name()
    )?;
    for line in decision.message().lines() {
        writeln!(out, "#   {line}")?;
    }
    for warning in &decision.warnings {
        writeln!(out, "# warning: {warning}")?;
    }
    for note in &decision.dryrun {
        writeln!(out, "# dryrun: {note}")?;
    }
    for result in &decision.policy_results {
        if let Some(why) = &result.pending {
            writeln!(out, "# pending: {} (not evaluated): {why}", result.policy)?;
        }
    }
    // Mutating, the object comes out as admission would store it (patched or not), so that
    // `eval --webhook mutate … | eval --webhook validate -` decides what the API server would.
    if let Some(patch) = decision.patch() {
        writeln!(out, "# patch: {}", serde_json::to_string(patch)?)?;
        let mut patched = object.clone();
        json_patch::patch(&mut patched, patch).context("applying the patch")?;
        write!(out, "{}", documents::to_yaml(&patched)?)?;
    } else if webhook == Webhook::Mutate && decision.allowed() {
        write!(out, "{}", documents::to_yaml(object)?)?;
    }
    Ok(decision.allowed())
}

fn decide(
    webhook: Webhook,
    req: &Request,
    (namespaces, pools): Cluster,
    rules: &RuleSet,
) -> Decision {
    let scope = Scope {
        labels: namespaces.get(req.namespace),
        pools,
        now: Some(crate::wall_clock::unix_now()),
    };
    rules.decide(webhook, req, scope, Budget::FULL)
}

/// A manifest's `kind` and `apiVersion`.
fn kind_and_api_version(object: &Value) -> Result<(&str, &str)> {
    let kind = object["kind"]
        .as_str()
        .context("the manifest has no `kind`")?;
    let api_version = object["apiVersion"]
        .as_str()
        .context("the manifest has no `apiVersion`")?;
    Ok((kind, api_version))
}
