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
use poolguard_core::placement_policy::{NodeFacts, PoolFacts, PoolSet};
use poolguard_core::ruleset::RuleSet;
use poolguard_core::scope::Scope;

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
    // The pools' facts only when placement policies may choose pools.
    let pools = match &rules.config.placement {
        Some(_) => Some(Arc::new(PoolSet::listed(
            PoolFacts::gather(
                &node_facts(client, options.page_size).await?,
                &rules.config.node_selector_key,
            ),
            &rules.config,
        ))),
        None => None,
    };
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
            let pools = pools.clone();
            let items = page.items;
            count += items.len();
            // Policy evaluation is CPU work: off the async threads.
            let results = tokio::task::spawn_blocking(move || {
                let cluster = (namespaces.as_ref(), nodes.as_ref(), pools.as_deref());
                audit_page(items, &listed, cluster, &rules)
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
    (namespaces, nodes, pools): (&NamespaceLabels, &NodeLabels, Option<&PoolSet>),
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
        let scope = Scope {
            labels: Some(labels),
            pools,
        };
        results.extend(audit::audit(&object, scope, Some(nodes), rules));
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

/// Every node's facts (what placement policies read), listed in pages. A node that cannot be
/// read is left out of its pool and logged.
async fn node_facts(client: &Client, page_size: u32) -> Result<Vec<NodeFacts>> {
    let api: Api<Node> = Api::all(client.clone());
    let mut params = ListParams::default().limit(page_size);
    let mut out = Vec::new();
    loop {
        let page = api.list(&params).await.context("listing nodes")?;
        for node in page.items {
            let facts = serde_json::to_value(&node)
                .map_err(|e| e.to_string())
                .and_then(|value| NodeFacts::from_node(&value));
            match facts {
                Ok(facts) => out.push(facts),
                Err(e) => {
                    tracing::warn!(error = %e, "a node cannot be read; it is left out of its pool")
                }
            }
        }
        match page.metadata.continue_.filter(|t| !t.is_empty()) {
            Some(token) => params = params.continue_token(&token),
            None => return Ok(out),
        }
    }
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
