//! One pass over the cluster: the namespaces the audit covers (by label selector), the nodes'
//! pools, and every Pod and workload in those namespaces, listed a page at a time and turned
//! into results by the core audit ([`audit::audit`], the checks `/validate` runs). Objects are
//! dropped as soon as their page is audited; only results are kept.

use std::collections::BTreeSet;
use std::sync::Arc;

use anyhow::{Context, Result};
use k8s_openapi::api::core::v1::{Namespace, Node};
use kube::api::{Api, ListParams, PartialObjectMeta};
use kube::Client;
use serde_json::Value;

use poolguard_core::audit::{self, AuditResult, Listed, Resource, LISTED};
use poolguard_core::namespaces::{NamespaceLabels, NodeLabels};
use poolguard_core::ruleset::RuleSet;

/// What one pass covers and how it lists.
#[derive(Debug, Clone)]
pub struct ScanOptions {
    /// Label selector of the namespaces audited (`kubectl -l` syntax); empty: all.
    pub namespace_selector: String,
    /// Objects per list call.
    pub page_size: u32,
}

/// What one pass found.
#[derive(Debug, Default)]
pub struct Scan {
    pub results: Vec<AuditResult>,
    /// The namespaces covered (each gets a report when it has results).
    pub namespaces: BTreeSet<String>,
    /// Objects audited, by kind, in [`LISTED`] order.
    pub objects: Vec<(&'static str, usize)>,
}

/// Audits everything the options cover with `rules`. A list call that fails ends the pass with
/// an error (a partial pass would make results vanish from reports); an object that cannot be
/// read is an `error` result and the pass goes on.
pub async fn scan(client: &Client, options: &ScanOptions, rules: Arc<RuleSet>) -> Result<Scan> {
    let namespaces = Arc::new(namespace_labels(client, options).await?);
    let nodes = Arc::new(node_labels(client, options.page_size).await?);
    let mut scan = Scan {
        namespaces: namespaces.keys().cloned().collect(),
        ..Scan::default()
    };
    for listed in LISTED {
        let mut count = 0;
        let mut token: Option<String> = None;
        loop {
            let page = list_page(client, &listed, options.page_size, token.as_deref())
                .await
                .with_context(|| format!("listing {}", listed.plural))?;
            token = page.next;
            let (namespaces, nodes, rules) = (namespaces.clone(), nodes.clone(), rules.clone());
            let items = page.items;
            count += items.len();
            // Policy evaluation is CPU work: off the async threads.
            let results = tokio::task::spawn_blocking(move || {
                audit_page(items, &listed, &namespaces, &nodes, &rules)
            })
            .await
            .context("auditing a page")?;
            scan.results.extend(results);
            if token.is_none() {
                break;
            }
        }
        scan.objects.push((listed.kind, count));
    }
    Ok(scan)
}

/// The results of one page of `listed` objects: those in audited namespaces.
fn audit_page(
    items: Vec<Value>,
    listed: &Listed,
    namespaces: &NamespaceLabels,
    nodes: &NodeLabels,
    rules: &RuleSet,
) -> Vec<AuditResult> {
    let api_version = listed.api_version();
    let mut results = Vec::new();
    for mut object in items {
        let Some(fields) = object.as_object_mut() else {
            results.push(AuditResult::unreadable(
                Resource {
                    api_version: api_version.clone(),
                    kind: listed.kind.to_string(),
                    ..Resource::default()
                },
                "the API returned an item that is not an object",
            ));
            continue;
        };
        // Items of a list carry no apiVersion and kind of their own.
        fields.insert("apiVersion".into(), Value::from(api_version.as_str()));
        fields.insert("kind".into(), Value::from(listed.kind));
        let namespace = object["metadata"]["namespace"].as_str().unwrap_or_default();
        let Some(labels) = namespaces.get(namespace) else {
            continue;
        };
        results.extend(audit::audit(
            &object,
            Some(labels),
            Some(nodes),
            &rules.config,
            &rules.policies,
        ));
    }
    results
}

/// One page of a list call.
struct Page {
    items: Vec<Value>,
    next: Option<String>,
}

/// Lists `listed` in every namespace, one page, as plain JSON (each item is read on its own, so
/// one odd object cannot fail the page).
async fn list_page(
    client: &Client,
    listed: &Listed,
    limit: u32,
    token: Option<&str>,
) -> Result<Page> {
    let mut params = ListParams::default().limit(limit);
    if let Some(token) = token {
        params = params.continue_token(token);
    }
    let request = kube::core::Request::new(listed.list_path())
        .list(&params)
        .context("building the list request")?;
    let mut body: Value = client.request(request).await?;
    let next = body["metadata"]["continue"]
        .as_str()
        .filter(|t| !t.is_empty())
        .map(str::to_string);
    let items = match body.get_mut("items").map(Value::take) {
        Some(Value::Array(items)) => items,
        Some(Value::Null) | None => Vec::new(),
        Some(_) => anyhow::bail!("the list's items are not an array"),
    };
    Ok(Page { items, next })
}

/// The audited namespaces and their labels.
async fn namespace_labels(client: &Client, options: &ScanOptions) -> Result<NamespaceLabels> {
    let api: Api<PartialObjectMeta<Namespace>> = Api::all(client.clone());
    let mut params = ListParams::default().limit(options.page_size);
    if !options.namespace_selector.is_empty() {
        params = params.labels(&options.namespace_selector);
    }
    names_and_labels(&api, params)
        .await
        .context("listing namespaces")
}

/// Every node's labels (for the pool of the node a pod is bound to).
async fn node_labels(client: &Client, page_size: u32) -> Result<NodeLabels> {
    let api: Api<PartialObjectMeta<Node>> = Api::all(client.clone());
    names_and_labels(&api, ListParams::default().limit(page_size))
        .await
        .context("listing nodes")
}

/// Names and labels of a cluster-scoped resource, listed in pages (metadata only).
async fn names_and_labels<K>(
    api: &Api<PartialObjectMeta<K>>,
    mut params: ListParams,
) -> Result<NamespaceLabels>
where
    K: kube::Resource + Clone + std::fmt::Debug + k8s_openapi::serde::de::DeserializeOwned,
{
    let mut out = NamespaceLabels::new();
    loop {
        let page = api.list_metadata(&params).await?;
        for object in page.items {
            if let Some(name) = object.metadata.name {
                out.insert(name, object.metadata.labels.unwrap_or_default());
            }
        }
        match page.metadata.continue_.filter(|t| !t.is_empty()) {
            Some(token) => params = params.continue_token(&token),
            None => return Ok(out),
        }
    }
}
