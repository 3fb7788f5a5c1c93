//! Gatekeeper's ConstraintTemplates and constraints as the cluster holds them
//! (`serve --gatekeeper-from-cluster`): read-only watches of `templates.gatekeeper.sh/v1`
//! ConstraintTemplates and, for each template's kind, of its constraints
//! (`constraints.gatekeeper.sh/v1beta1`, resource the kind in lower case, as Gatekeeper names
//! the CRDs it makes). They are kept as documents that load beside `--gatekeeper-dir`'s files
//! ([`crate::sources::Sources`]); every change reloads the rules.
//!
//! They load as [`poolguard_core::gatekeeper::Files::tolerated`]: a template that does not load here (it needs
//! `data.inventory`, it does not compile) is left out with its constraints, and so is a
//! constraint that does not read: each is logged at every reload, and the rest still serves. (A
//! directory is the operator's own choice of files, so there one error refuses the whole set; a
//! cluster holds whatever Gatekeeper was given.)

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use futures::StreamExt;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, ListParams, TypeMeta};
use kube::runtime::reflector::{store::Writer, Store};
use kube::runtime::{watcher, WatchStreamExt};
use kube::{Client, ResourceExt};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

/// Changes closer together than this are loaded once.
const SETTLE: Duration = Duration::from_millis(200);
/// How long the first listing may take before poolguard refuses to start.
const FIRST_SYNC: Duration = Duration::from_secs(30);
/// A watch that keeps failing is logged again after this long.
const LOG_AGAIN: Duration = Duration::from_secs(300);

const TEMPLATES: (&str, &str, &str, &str) = (
    "templates.gatekeeper.sh",
    "v1",
    "ConstraintTemplate",
    "constrainttemplates",
);
const CONSTRAINTS: (&str, &str) = ("constraints.gatekeeper.sh", "v1beta1");

/// The documents read from the cluster, as (origin, JSON text) for the Gatekeeper loader.
#[derive(Debug, Clone, Default)]
pub struct ClusterDocuments(Arc<RwLock<Vec<(PathBuf, String)>>>);

impl ClusterDocuments {
    pub fn files(&self) -> Vec<(PathBuf, String)> {
        self.0.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Whether `files` differ from what was held (then they are held).
    fn replace(&self, files: Vec<(PathBuf, String)>) -> bool {
        let mut held = self.0.write().unwrap_or_else(|e| e.into_inner());
        if *held == files {
            return false;
        }
        *held = files;
        true
    }
}

fn templates_resource() -> ApiResource {
    let (group, version, kind, plural) = TEMPLATES;
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural)
}

fn constraints_resource(kind: &str) -> ApiResource {
    let (group, version) = CONSTRAINTS;
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(group, version, kind),
        &kind.to_lowercase(),
    )
}

/// One watched resource: its store, and the task feeding it (stopped when dropped).
struct Watched {
    store: Store<DynamicObject>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Watched {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn watch(client: &Client, resource: ApiResource, changed: Arc<Notify>) -> Watched {
    let what = resource.plural.clone();
    let api: Api<DynamicObject> = Api::all_with(client.clone(), &resource);
    let writer = Writer::new(resource);
    let store = writer.as_reader();
    let stream = watcher::watcher(api, watcher::Config::default())
        .default_backoff()
        .reflect(writer);
    let task = tokio::spawn(async move {
        let mut stream = std::pin::pin!(stream);
        let mut logged: Option<tokio::time::Instant> = None;
        while let Some(event) = stream.next().await {
            match event {
                Ok(_) => {
                    logged = None;
                    changed.notify_one();
                }
                // Retried with backoff; said again at most every few minutes.
                Err(e) if logged.is_none_or(|at| at.elapsed() >= LOG_AGAIN) => {
                    logged = Some(tokio::time::Instant::now());
                    tracing::warn!(resource = %what, error = %e, "Gatekeeper watch failed; the last objects read keep serving, retrying");
                }
                Err(_) => {}
            }
        }
    });
    Watched { store, task }
}

/// The watches, synced once.
pub struct GatekeeperWatch {
    client: Client,
    changed: Arc<Notify>,
    templates: Watched,
    kinds: BTreeMap<String, Watched>,
    documents: ClusterDocuments,
}

/// Lists the templates and their constraints into `documents`, then keeps watching them (call
/// [`GatekeeperWatch::run`]). A cluster that does not serve ConstraintTemplates holds none, and
/// is watched for them from then on; one that serves them but cannot be read within 30 s is an
/// error.
pub async fn first_sync(client: Client, documents: ClusterDocuments) -> Result<GatekeeperWatch> {
    let templates_served = served(&client, &templates_resource()).await?;
    let changed = Arc::new(Notify::new());
    let templates = watch(&client, templates_resource(), changed.clone());
    let mut this = GatekeeperWatch {
        client,
        changed,
        templates,
        kinds: BTreeMap::new(),
        documents,
    };
    if !templates_served {
        tracing::warn!("--gatekeeper-from-cluster: the cluster serves no templates.gatekeeper.sh/v1 ConstraintTemplates (Gatekeeper's CRDs are not installed); none are loaded until they are");
        return Ok(this);
    }
    let synced = async {
        this.templates.store.wait_until_ready().await?;
        this.follow_kinds();
        // A kind without its CRD (Gatekeeper makes it only for a template it compiled) has no
        // constraints yet: watched, not waited for.
        for (kind, watched) in &this.kinds {
            if served(&this.client, &constraints_resource(kind)).await? {
                watched.store.wait_until_ready().await?;
            }
        }
        Ok::<_, anyhow::Error>(())
    };
    match tokio::time::timeout(FIRST_SYNC, synced).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => return Err(e.context("--gatekeeper-from-cluster")),
        Err(_) => bail!(
            "--gatekeeper-from-cluster: the ConstraintTemplates and their constraints were not read within {} s (RBAC: get, list, watch on templates.gatekeeper.sh and constraints.gatekeeper.sh)",
            FIRST_SYNC.as_secs()
        ),
    }
    this.documents.replace(this.collect());
    tracing::info!(
        templates = this.templates.store.state().len(),
        constraint_kinds = this.kinds.len(),
        "Gatekeeper objects read from the cluster"
    );
    Ok(this)
}

/// Whether the cluster serves `resource` (a 404: its CRD is not installed).
async fn served(client: &Client, resource: &ApiResource) -> Result<bool> {
    match Api::<DynamicObject>::all_with(client.clone(), resource)
        .list(&ListParams::default().limit(1))
        .await
    {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(false),
        Err(e) => Err(e).with_context(|| format!("listing {}.{}", resource.plural, resource.group)),
    }
}

impl GatekeeperWatch {
    /// Watches the constraints of every kind a template declares, and no other.
    fn follow_kinds(&mut self) {
        let wanted: BTreeSet<String> = self
            .templates
            .store
            .state()
            .iter()
            .filter_map(|t| kind_of(t).map(str::to_string))
            .collect();
        self.kinds.retain(|kind, _| wanted.contains(kind));
        for kind in wanted {
            if !self.kinds.contains_key(&kind) {
                let watched = watch(
                    &self.client,
                    constraints_resource(&kind),
                    self.changed.clone(),
                );
                self.kinds.insert(kind, watched);
            }
        }
    }

    /// The documents to load: [`documents_of`] the stores' objects.
    fn collect(&self) -> Vec<(PathBuf, String)> {
        let constraints: BTreeMap<String, Vec<Arc<DynamicObject>>> = self
            .kinds
            .iter()
            .map(|(kind, watched)| (kind.clone(), watched.store.state()))
            .collect();
        documents_of(self.templates.store.state(), &constraints)
    }

    /// Follows every change until `shutdown`: new kinds are watched, and each change that
    /// alters the documents calls `reload` (on the blocking pool: it compiles Rego).
    pub fn run(
        mut self,
        reload: Arc<dyn Fn() + Send + Sync>,
        shutdown: CancellationToken,
    ) -> tokio::task::JoinHandle<()> {
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    () = shutdown.cancelled() => return,
                    () = self.changed.notified() => {}
                }
                tokio::time::sleep(SETTLE).await;
                self.follow_kinds();
                if self.documents.replace(self.collect()) {
                    let reload = reload.clone();
                    if let Err(e) = tokio::task::spawn_blocking(move || reload()).await {
                        tracing::error!(error = %e, "reloading the rules after a Gatekeeper change stopped");
                    }
                }
            }
        })
    }
}

/// The kind of a template's constraints (`spec.crd.spec.names.kind`).
fn kind_of(template: &DynamicObject) -> Option<&str> {
    template.data["spec"]["crd"]["spec"]["names"]["kind"].as_str()
}

/// The documents to load: each template, then its constraints (in `constraints`, by kind), in
/// name order. Whether each loads is the loader's to say ([`poolguard_core::gatekeeper::Files::tolerated`]:
/// what does not is left out and logged).
fn documents_of(
    mut templates: Vec<Arc<DynamicObject>>,
    constraints: &BTreeMap<String, Vec<Arc<DynamicObject>>>,
) -> Vec<(PathBuf, String)> {
    let mut out = Vec::new();
    templates.sort_by_key(|t| t.name_any());
    for template in templates {
        out.push(document(&template, TEMPLATES.0, TEMPLATES.1, TEMPLATES.2));
        let kind = kind_of(&template).unwrap_or_default();
        let mut of_kind = constraints.get(kind).cloned().unwrap_or_default();
        of_kind.sort_by_key(|c| c.name_any());
        for constraint in of_kind {
            out.push(document(&constraint, CONSTRAINTS.0, CONSTRAINTS.1, kind));
        }
    }
    out
}

/// An object as a document the loader reads: `origin` names it, the text is its JSON with
/// `apiVersion` and `kind` set.
fn document(object: &DynamicObject, group: &str, version: &str, kind: &str) -> (PathBuf, String) {
    let mut object = object.clone();
    object.types = Some(TypeMeta {
        api_version: format!("{group}/{version}"),
        kind: kind.to_string(),
    });
    object.metadata.managed_fields = None;
    let origin = PathBuf::from(format!("cluster {kind} {}", object.name_any()));
    let text = serde_json::to_string(&object).unwrap_or_default();
    (origin, text)
}
