//! One pass over the cluster, a namespace at a time: the namespaces the audit covers (by label
//! selector), the nodes' pools, then, for each namespace, every Pod and workload in it, listed a
//! page at a time and turned into results by the core audit ([`audit::audit`], the checks
//! `/validate` runs). A namespace's results are handed on (to be written as its report, or
//! printed) and dropped before the pass moves on, so a pass holds a page of objects and one
//! namespace's results at a time, however many objects the cluster has.

use std::collections::BTreeSet;
use std::future::Future;
use std::sync::Arc;

use anyhow::{Context, Result};
use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1::{Namespace, Node};
use kube::api::{Api, DynamicObject, ListParams, PartialObjectMeta};
use kube::discovery::{ApiGroup, Scope as ResourceScope};
use kube::error::DiscoveryError;
use kube::Client;
use serde_json::Value;

use poolguard_core::audit::{self, AuditResult, Listed, Resource, LISTED};
use poolguard_core::audit_tally::Tally;
use poolguard_core::namespaces::{NamespaceLabels, NodeLabels};
use poolguard_core::placement_policy::{Catalog, NodeFacts, NodePool, PoolSet};
use poolguard_core::ruleset::RuleSet;

use crate::cluster::nodepool_cache;
use crate::pools::Inventory;
use poolguard_core::scope::Scope;

/// Objects per list call of a kind without a pod spec (the kinds constraints name), at most:
/// a ConfigMap or Secret may hold up to 1 MiB where a Pod holds a few KiB, so a page of them is
/// kept small whatever the page size.
pub const OTHER_KINDS_PAGE: u32 = 50;

/// Namespaces listed and audited at once (each holds at most one page of objects and its own
/// results). One: a pass then holds one page and one namespace's results, as the chart's
/// memory limit is sized for; the time a pass takes is the API server's anyway.
pub const NAMESPACES_AT_ONCE: usize = 1;

/// What one pass covers and how it lists.
#[derive(Debug, Clone)]
pub struct ScanOptions {
    /// Label selector of the namespaces audited (`kubectl -l` syntax); empty: all.
    pub namespace_selector: String,
    /// Objects per list call.
    pub page_size: u32,
    /// Whether the cluster's Karpenter NodePools are pools too (`--nodepools`).
    pub nodepools: bool,
    /// The instance types NodePools launch (`--instance-types-file`).
    pub catalog: Option<Arc<Catalog>>,
}

/// What the audit reads of the cluster besides the objects: the audited namespaces' labels,
/// every node's labels, the pools (when placement policies may choose pools) and the kinds
/// listed in each namespace.
#[derive(Debug)]
pub struct Facts {
    pub namespaces: NamespaceLabels,
    pub nodes: NodeLabels,
    pub pools: Option<PoolSet>,
    /// The pod kinds ([`LISTED`]), then the namespaced kinds the loaded Gatekeeper constraints
    /// name ([`kinds`]).
    pub kinds: Vec<Listed>,
    /// The cluster-scoped kinds the constraints name ([`kinds`]), listed once a pass
    /// ([`cluster`]).
    pub cluster_kinds: Vec<Listed>,
}

impl Default for Facts {
    /// No namespaces, nodes or pools; the pod kinds.
    fn default() -> Facts {
        Facts {
            namespaces: NamespaceLabels::default(),
            nodes: NodeLabels::default(),
            pools: None,
            kinds: LISTED.to_vec(),
            cluster_kinds: Vec::new(),
        }
    }
}

/// Lists the audited namespaces, the nodes and (for placement policies) the pools, and finds
/// the kinds to list.
pub async fn facts(client: &Client, options: &ScanOptions, rules: &RuleSet) -> Result<Facts> {
    let namespaces = namespace_labels(client, options).await?;
    let nodes = node_labels(client, options.page_size).await?;
    let pools = match &rules.config().placement {
        Some(_) => {
            let inventory = Inventory {
                nodes: node_facts(client, options.page_size).await?,
                nodepools: match options.nodepools {
                    true => nodepools(client, options.page_size).await?,
                    false => Vec::new(),
                },
                catalog: options.catalog.clone(),
            };
            let (pools, problems) = inventory.pools(rules.config());
            for problem in problems {
                tracing::warn!(problem = %problem, "a NodePool's facts are incomplete");
            }
            Some(pools)
        }
        None => None,
    };
    let (kinds, cluster_kinds) = kinds(client, rules).await?;
    Ok(Facts {
        namespaces,
        nodes,
        pools,
        kinds,
        cluster_kinds,
    })
}

/// The kinds each namespace's pass lists: [`LISTED`], then each namespaced kind the loaded
/// Gatekeeper constraints name (in the API groups they name, `*`: every group serving it) that
/// the API server serves and poolguard may list (a cluster-wide list of one object, as RBAC
/// decides it); and, apart, the cluster-scoped kinds they name that pass the same tests (listed
/// once a pass, into the cluster report). What is left out is logged, once a pass: a kind not
/// served, or whose API group's discovery fails (an aggregated API that is down), a kind
/// poolguard may not list (the chart grants `list` on `validating.extraRules`), and constraints
/// that match every kind.
pub async fn kinds(client: &Client, rules: &RuleSet) -> Result<(Vec<Listed>, Vec<Listed>)> {
    let mut kinds = LISTED.to_vec();
    let mut cluster_kinds: Vec<Listed> = Vec::new();
    let wanted = audit::constraint_kinds(rules);
    for constraint in &wanted.every_kind {
        tracing::warn!(
            %constraint,
            "the constraint matches every kind; the audit lists the pod kinds and the kinds constraints name, not every resource"
        );
    }
    if wanted.named.is_empty() {
        return Ok((kinds, cluster_kinds));
    }
    let named: BTreeSet<&str> = wanted.named.iter().map(|(g, _)| g.as_str()).collect();
    let discovered = discovered_groups(client, &named).await?;
    for (group, kind) in &wanted.named {
        let served: Vec<_> = discovered
            .iter()
            .filter(|g| group == "*" || g.name() == group)
            .filter_map(|g| g.recommended_kind(kind))
            .collect();
        if served.is_empty() {
            tracing::warn!(%group, %kind, "a constraint names a kind the API server does not serve; not audited");
        }
        for (resource, capabilities) in served {
            let listed = Listed {
                group: resource.group.into(),
                version: resource.version.into(),
                kind: resource.kind.into(),
                plural: resource.plural.into(),
            };
            let into = if capabilities.scope == ResourceScope::Cluster {
                &mut cluster_kinds
            } else {
                &mut kinds
            };
            if into
                .iter()
                .any(|k| k.group == listed.group && k.kind == listed.kind)
            {
                continue;
            }
            match list_page(client, listed.list_path(), 1, None).await {
                Ok(_) => into.push(listed),
                Err(e) if is_forbidden(&e) => tracing::warn!(
                    kind = %listed.kind,
                    resource = %listed.plural,
                    "a constraint names a kind poolguard may not list (RBAC); not audited"
                ),
                Err(e) => {
                    return Err(e.context(format!("listing {}", listed.list_path())));
                }
            }
        }
    }
    Ok((kinds, cluster_kinds))
}

/// The API groups `named` (every group for `*`), each discovered on its own: one that fails (an
/// aggregated API that is down) is left out with a warning, so it costs only its own kinds.
async fn discovered_groups(client: &Client, named: &BTreeSet<&str>) -> Result<Vec<ApiGroup>> {
    let names: Vec<String> = if named.contains("*") {
        let listed = client
            .list_api_groups()
            .await
            .context("listing the API groups")?;
        std::iter::once(String::new())
            .chain(listed.groups.into_iter().map(|g| g.name))
            .collect()
    } else {
        named.iter().map(|g| g.to_string()).collect()
    };
    let mut out = Vec::new();
    for name in names {
        match kube::discovery::group(client, &name).await {
            Ok(group) => out.push(group),
            // Not served: said per kind by the caller.
            Err(kube::Error::Discovery(DiscoveryError::MissingApiGroup(_))) => {}
            Err(e) => tracing::warn!(
                group = %name,
                error = %e,
                "discovering an API group the constraints name failed; its kinds are not audited this pass"
            ),
        }
    }
    Ok(out)
}

/// Whether a request failed with 403 Forbidden.
fn is_forbidden(e: &anyhow::Error) -> bool {
    matches!(
        e.downcast_ref::<kube::Error>(),
        Some(kube::Error::Api(status)) if status.code == 403
    )
}

/// One page of a list call.
#[derive(Debug, Default)]
pub struct Page {
    pub items: Vec<Value>,
    /// The continue token of the next page; none on the last.
    pub next: Option<String>,
}

/// Where a pass's objects come from: the API server ([`ApiSource`]), or a test's generator.
pub trait Source: Sync {
    /// One page of `listed` objects in `namespace` (empty: a cluster-scoped kind's, all of
    /// them), at most `limit`, from `token` on.
    fn page(
        &self,
        namespace: &str,
        listed: &Listed,
        limit: u32,
        token: Option<&str>,
    ) -> impl Future<Output = Result<Page>> + Send;
}

/// The API server's objects.
pub struct ApiSource<'a>(pub &'a Client);

impl Source for ApiSource<'_> {
    fn page(
        &self,
        namespace: &str,
        listed: &Listed,
        limit: u32,
        token: Option<&str>,
    ) -> impl Future<Output = Result<Page>> + Send {
        let path = match namespace {
            "" => listed.list_path(),
            namespace => listed.namespaced_path(namespace),
        };
        list_page(self.0, path, limit, token)
    }
}

/// One namespace's results (empty `namespace`: the cluster-scoped objects'), and the objects
/// audited by kind ([`Facts::kinds`], then [`Facts::cluster_kinds`] order).
#[derive(Debug)]
pub struct Audited {
    pub namespace: String,
    pub results: Vec<AuditResult>,
    pub objects: Vec<usize>,
}

/// What a pass keeps once every namespace's results are handed on.
#[derive(Debug, Default)]
pub struct Scan {
    /// The counts of the results.
    pub tally: Tally,
    /// The namespaces covered.
    pub namespaces: usize,
    /// Objects audited, by kind, in [`Facts::kinds`] then [`Facts::cluster_kinds`] order.
    pub objects: Vec<(String, usize)>,
}

impl Scan {
    /// An empty pass over the namespaces and kinds of `facts`.
    pub fn over(facts: &Facts) -> Scan {
        Scan {
            namespaces: facts.namespaces.len(),
            objects: facts
                .kinds
                .iter()
                .chain(&facts.cluster_kinds)
                .map(|l| (l.kind.to_string(), 0))
                .collect(),
            ..Scan::default()
        }
    }

    /// Counts one namespace's objects and results.
    pub fn add(&mut self, audited: &Audited) {
        self.tally.add_all(&audited.results);
        for ((_, count), n) in self.objects.iter_mut().zip(&audited.objects) {
            *count += n;
        }
    }
}

/// Every audited namespace's results, in name order, [`NAMESPACES_AT_ONCE`] namespaces listed
/// at a time. A list call that fails ends the stream with an error (a partial pass would make
/// results vanish from reports); an object that cannot be read is an `error` result and the
/// pass goes on.
pub fn namespaces<'a, S: Source>(
    source: &'a S,
    facts: Arc<Facts>,
    rules: Arc<RuleSet>,
    page_size: u32,
) -> impl Stream<Item = Result<Audited>> + 'a {
    let names: Vec<String> = facts.namespaces.keys().cloned().collect();
    futures::stream::iter(names)
        .map(move |namespace| {
            audit_namespace(source, namespace, facts.clone(), rules.clone(), page_size)
        })
        .buffered(NAMESPACES_AT_ONCE)
}

/// The results of the cluster-scoped objects of [`Facts::cluster_kinds`] (a Namespace a
/// constraint matches), for the cluster report; nothing is listed when there are none.
pub async fn cluster<S: Source>(
    source: &S,
    facts: Arc<Facts>,
    rules: Arc<RuleSet>,
    page_size: u32,
) -> Result<Audited> {
    audit_namespace(source, String::new(), facts, rules, page_size).await
}

/// Lists and audits every object of one namespace (empty: of the cluster-scoped kinds).
async fn audit_namespace<S: Source>(
    source: &S,
    namespace: String,
    facts: Arc<Facts>,
    rules: Arc<RuleSet>,
    page_size: u32,
) -> Result<Audited> {
    let (kinds, offset) = match namespace.as_str() {
        "" => (&facts.cluster_kinds, facts.kinds.len()),
        _ => (&facts.kinds, 0),
    };
    let mut audited = Audited {
        namespace,
        results: Vec::new(),
        objects: vec![0; facts.kinds.len() + facts.cluster_kinds.len()],
    };
    for (i, listed) in kinds.iter().enumerate().map(|(i, l)| (i + offset, l)) {
        let limit = if LISTED.contains(listed) {
            page_size
        } else {
            page_size.min(OTHER_KINDS_PAGE)
        };
        let mut token: Option<String> = None;
        loop {
            let page = source
                .page(&audited.namespace, listed, limit, token.as_deref())
                .await
                .with_context(|| match audited.namespace.as_str() {
                    "" => format!("listing {}", listed.plural),
                    namespace => format!("listing {} in namespace {namespace}", listed.plural),
                })?;
            token = page.next;
            audited.objects[i] += page.items.len();
            let (facts, rules, listed) = (facts.clone(), rules.clone(), listed.clone());
            let namespace = audited.namespace.clone();
            // Policy evaluation is CPU work: off the async threads.
            let results = tokio::task::spawn_blocking(move || {
                audit_page(page.items, &listed, &namespace, &facts, &rules)
            })
            .await
            .context("auditing a page")?;
            audited.results.extend(results);
            if token.is_none() {
                break;
            }
        }
    }
    Ok(audited)
}

/// The results of one page of `listed` objects of `namespace` (an audited one).
fn audit_page(
    items: Vec<Value>,
    listed: &Listed,
    namespace: &str,
    facts: &Facts,
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
                    namespace: namespace.to_string(),
                    ..Resource::default()
                },
                "the API returned an item that is not an object",
            ));
            continue;
        };
        // Items of a list carry no apiVersion and kind of their own.
        fields.insert("apiVersion".into(), Value::from(api_version.as_str()));
        fields.insert("kind".into(), Value::from(listed.kind.as_ref()));
        let scope = Scope {
            labels: facts.namespaces.get(namespace),
            pools: facts.pools.as_ref(),
            now: Some(crate::wall_clock::unix_now()),
        };
        results.extend(audit::audit(&object, scope, Some(&facts.nodes), rules));
    }
    results
}

/// One page of the list at `path`, as plain JSON (each item is read on its own, so one odd
/// object cannot fail the page).
async fn list_page(client: &Client, path: String, limit: u32, token: Option<&str>) -> Result<Page> {
    let mut params = ListParams::default().limit(limit);
    if let Some(token) = token {
        params = params.continue_token(token);
    }
    let request = kube::core::Request::new(path)
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

/// The cluster's Karpenter NodePools, listed in pages; one that cannot be read is left out
/// (and logged).
async fn nodepools(client: &Client, page_size: u32) -> Result<Vec<NodePool>> {
    let resource = nodepool_cache::resource();
    let api: Api<DynamicObject> = Api::all_with(client.clone(), &resource);
    let mut params = ListParams::default().limit(page_size);
    let mut out = Vec::new();
    loop {
        let page = api.list(&params).await.context("listing NodePools")?;
        out.extend(page.items.iter().filter_map(nodepool_cache::read));
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    /// Records each list call's kind and limit (and namespace); every namespace holds one
    /// object of each kind.
    #[derive(Default)]
    struct Recorded(Mutex<Vec<(String, u32)>>, Mutex<Vec<String>>);

    impl Source for Recorded {
        async fn page(
            &self,
            namespace: &str,
            listed: &Listed,
            limit: u32,
            _token: Option<&str>,
        ) -> Result<Page> {
            self.0
                .lock()
                .unwrap()
                .push((listed.kind.to_string(), limit));
            self.1.lock().unwrap().push(namespace.to_string());
            let object = serde_json::json!({"metadata": {"name": "x", "namespace": namespace}});
            Ok(Page {
                items: vec![object],
                next: None,
            })
        }
    }

    /// A kind of the core API group, v1.
    fn core_kind(kind: &'static str, plural: &'static str) -> Listed {
        Listed {
            group: "".into(),
            version: "v1".into(),
            kind: kind.into(),
            plural: plural.into(),
        }
    }

    /// The pod kinds are listed at the page size; another kind a constraint names, at most
    /// [`OTHER_KINDS_PAGE`] at a time.
    #[tokio::test]
    async fn other_kinds_are_listed_in_small_pages() {
        let mut facts = Facts::default();
        facts.namespaces.insert("team".into(), Default::default());
        facts.kinds.push(core_kind("ConfigMap", "configmaps"));
        let source = Recorded::default();
        let audited: Vec<Audited> =
            namespaces(&source, Arc::new(facts), Arc::new(RuleSet::default()), 500)
                .map(|a| a.unwrap())
                .collect()
                .await;
        assert_eq!(audited[0].objects, vec![1; LISTED.len() + 1]);
        let calls = source.0.into_inner().unwrap();
        assert_eq!(calls.len(), LISTED.len() + 1);
        for (kind, limit) in &calls {
            let want = if kind == "ConfigMap" {
                OTHER_KINDS_PAGE
            } else {
                500
            };
            assert_eq!(*limit, want, "{kind}");
        }
    }

    /// The cluster-scoped kinds are listed apart, once, cluster-wide (no namespace), in small
    /// pages; their objects are counted after the namespaced kinds.
    #[tokio::test]
    async fn cluster_kinds_are_listed_once_without_a_namespace() {
        let mut facts = Facts::default();
        facts.namespaces.insert("team".into(), Default::default());
        facts
            .cluster_kinds
            .push(core_kind("Namespace", "namespaces"));
        let facts = Arc::new(facts);
        let mut scan = Scan::over(&facts);
        let source = Recorded::default();
        let rules = Arc::new(RuleSet::default());
        let audited: Vec<Audited> = namespaces(&source, facts.clone(), rules.clone(), 500)
            .map(|a| a.unwrap())
            .collect()
            .await;
        scan.add(&audited[0]);
        assert!(source.1.lock().unwrap().iter().all(|n| n == "team"));
        let cluster = cluster(&source, facts, rules, 500).await.unwrap();
        scan.add(&cluster);
        assert_eq!(cluster.namespace, "");
        let calls = source.0.into_inner().unwrap();
        assert_eq!(calls.len(), LISTED.len() + 1);
        assert_eq!(
            calls.last().unwrap(),
            &("Namespace".to_string(), OTHER_KINDS_PAGE)
        );
        assert_eq!(source.1.into_inner().unwrap().last().unwrap(), "");
        let mut want: Vec<(String, usize)> =
            LISTED.iter().map(|l| (l.kind.to_string(), 1)).collect();
        want.push(("Namespace".into(), 1));
        assert_eq!(scan.objects, want);
    }
}
