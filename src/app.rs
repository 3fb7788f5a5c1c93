//! The composition root: `poolguard serve` and `poolguard controller` are wired here. Loads
//! everything, starts the HTTPS admission server ([`crate::server`]) and the operations server,
//! the namespace and pool sources, the file and cluster watches, the audit, the rollout follower
//! and the controller's writers, and shuts down gracefully on SIGTERM. Nothing imports this
//! module but the command line.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use arc_swap::ArcSwap;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::certs::authority as certs;
use crate::certs::pacing::Pacing;
use crate::certs::rotation::{Settings, Stored};
use crate::cluster::gatekeeper_objects::{self, ClusterDocuments};
use crate::cluster::managed_certs::SelfCert;
use crate::cluster::namespace_cache::ClusterNamespaces;
use crate::cluster::webhook_registration::{Fallback, Registrar};
use crate::cluster::{exception_cache, node_cache, nodepool_cache};
use crate::namespaces::Namespaces;
use crate::pools::Pools;
use crate::server::state::ServerState;
use crate::server::tls::{self, TlsFiles};
pub use crate::server::Limits;
use crate::server::{connections, endpoints, listen, ops, reload};
use crate::sources::{self, Sources};
use crate::telemetry::metrics::Metrics;
use poolguard_core::namespaces::parse_file_text;

/// The namespaces used by `--dev` when no cluster is configured: the ones in testdata/.
const EMBEDDED_NAMESPACES: &str = include_str!("../testdata/namespaces.yaml");
/// Where `--dev` writes its certificates when none are given.
const DEV_CERT_DIR: &str = "certs";

#[derive(Debug, Clone)]
pub struct Options {
    pub addr: SocketAddr,
    pub metrics_addr: SocketAddr,
    /// Required unless `dev`.
    pub tls: Option<TlsFiles>,
    pub sources: Sources,
    pub namespaces_file: Option<PathBuf>,
    /// Node objects to take the pools from instead of the cluster.
    pub nodes_file: Option<PathBuf>,
    /// Watch the cluster's Karpenter NodePools as pools too.
    pub nodepools: bool,
    /// The instance types NodePools launch.
    pub instance_types_file: Option<PathBuf>,
    /// Watch the cluster's PolicyExceptions.
    pub policy_exceptions: bool,
    pub deadline: Duration,
    /// How long in-flight requests get after SIGTERM.
    pub drain: Duration,
    /// Generate certificates when none are given, and use the embedded namespaces unless a
    /// namespaces file or `kubeconfig` is given.
    pub dev: bool,
    /// The cluster to use (namespaces, managed certificates); `None`: in-cluster config, else
    /// KUBECONFIG or ~/.kube/config (never consulted by `dev`).
    pub kubeconfig: Option<PathBuf>,
    /// Keep the serving certificate in a Secret instead of reading `tls` files.
    pub manage_certs: Option<ManagedCerts>,
    /// Webhook configurations to fill with their webhooks once this server can answer them
    /// (`--register-webhooks`).
    pub register_webhooks: Option<PathBuf>,
    /// What clients can make the server hold.
    pub limits: Limits,
    /// The background audit; `None`: off. It needs the cluster, so `dev` without `kubeconfig`
    /// never audits.
    pub audit: Option<crate::audit::schedule::Settings>,
    /// Load the cluster's Gatekeeper templates and constraints too, and follow them.
    pub gatekeeper_from_cluster: bool,
    /// With the audit off: the rollout state to decide with and add admission counts to.
    pub rollout_follow: Option<crate::rollout::sync::Follow>,
    /// Answer admission requests (`serve`); `false` is `poolguard controller`: no HTTPS listener,
    /// only the writers (certificates, registration, audit, rollouts, native objects) and the
    /// operations port.
    pub admission: bool,
}

/// `--manage-certs`: where the certificate lives and who must trust it.
#[derive(Debug, Clone)]
pub struct ManagedCerts {
    pub secret_namespace: String,
    pub secret_name: String,
    pub webhook_configs: Vec<String>,
    pub settings: Settings,
    pub check_interval: Duration,
    /// Client CA (mTLS), read once.
    pub client_ca: Option<PathBuf>,
    /// The names one of which the client certificate must carry ([`TlsFiles::client_names`]).
    pub client_names: Vec<String>,
}

/// A started server.
pub struct Running {
    pub addr: SocketAddr,
    pub metrics_addr: SocketAddr,
    pub shutdown: CancellationToken,
    pub app: Arc<ServerState>,
    task: JoinHandle<Result<()>>,
    /// The audit loop, which releases its lease when `shutdown` is cancelled.
    audit: Option<JoinHandle<()>>,
    _watcher: notify::RecommendedWatcher,
}

impl Running {
    /// Waits until the server has stopped (after `shutdown` is cancelled and connections drained).
    pub async fn wait(self) -> Result<()> {
        let _watcher = self._watcher;
        if let Some(audit) = self.audit {
            if let Err(e) = audit.await {
                tracing::warn!(error = %e, "the audit task failed");
            }
        }
        self.task.await.context("the server task failed")?
    }
}

/// Loads everything and starts listening; errors here are configuration errors.
pub async fn start(mut opts: Options) -> Result<Running> {
    let limits = opts.limits.clone();
    let metrics = Arc::new(Metrics::new());
    if let Some(file) = &opts.register_webhooks {
        Registrar::check(file)?;
    }
    let mut bundle = None;
    let (tls, tls_files) = match (&opts.manage_certs, &opts.tls, opts.dev) {
        (Some(managed), _, _) => {
            let (tls, managed_bundle) =
                managed_tls(managed, opts.kubeconfig.as_deref(), metrics.clone()).await?;
            bundle = Some(managed_bundle);
            (Some(tls), None)
        }
        // A controller serves no admission: no certificate of its own to serve.
        (None, _, _) if !opts.admission => (None, None),
        (None, Some(files), _) => (
            Some(Arc::new(ArcSwap::new(load_tls(files, &metrics)?))),
            Some(files.clone()),
        ),
        (None, None, true) => {
            let files = dev_certificates(Path::new(DEV_CERT_DIR))?;
            (Some(Arc::new(ArcSwap::new(load_tls(&files, &metrics)?))), Some(files))
        }
        (None, None, false) => bail!("--tls-cert-file and --tls-key-file are required (or --manage-certs, or --dev for generated local certificates)"),
    };
    let gatekeeper = if opts.gatekeeper_from_cluster {
        let client = kube_client(opts.kubeconfig.as_deref(), SERVE_CLUSTER_HINT)
            .await
            .context("--gatekeeper-from-cluster needs the Kubernetes API")?;
        let documents = ClusterDocuments::default();
        opts.sources.gatekeeper_cluster = Some(documents.clone());
        Some(gatekeeper_objects::first_sync(client, documents).await?)
    } else {
        None
    };
    let rules = opts.sources.load()?;
    for warning in opts.sources.missing_defaults(&rules) {
        tracing::warn!("{warning}");
    }
    tracing::info!(policies = ?rules.policies().names().collect::<Vec<_>>(), "config and policies loaded");
    let (namespaces, client) = namespace_source(&opts).await?;
    tracing::info!(?limits, "limits");
    let pools = pools(&opts, &rules)?;
    let mut state = ServerState::new(
        rules,
        namespaces,
        metrics.clone(),
        opts.deadline,
        limits.clone(),
    );
    state.pools = pools;
    let app = Arc::new(state);
    if opts.policy_exceptions {
        let client = match &client {
            Some(client) => client.clone(),
            None => kube_client(opts.kubeconfig.as_deref(), SERVE_CLUSTER_HINT)
                .await
                .context("--policy-exceptions needs the Kubernetes API")?,
        };
        exception_cache::start(client, app.rules.clone(), metrics.clone());
    }
    pool_source(&opts, client, &app)?;
    let watcher = reload::watch(
        reload_targets(&opts, tls_files.as_ref().zip(tls.as_ref()), &app),
        metrics.clone(),
    )?;

    let listener = match opts.admission {
        true => Some(listen(opts.addr).with_context(|| format!("listening on {}", opts.addr))?),
        false => None,
    };
    let ops_listener = TcpListener::bind(opts.metrics_addr)
        .await
        .with_context(|| format!("listening on {}", opts.metrics_addr))?;
    let metrics_addr = ops_listener.local_addr()?;
    let addr = match &listener {
        Some(listener) => listener.local_addr()?,
        None => metrics_addr,
    };
    tracing::info!(allocator = %crate::allocator::in_force(), "memory allocator");
    match &listener {
        Some(_) => {
            tracing::info!(%addr, %metrics_addr, "serving: POST /mutate, POST /validate (HTTPS); /healthz, /readyz, /metrics (HTTP)")
        }
        None => {
            tracing::info!(%metrics_addr, "controller: no admission listener; /healthz, /readyz, /metrics (HTTP)")
        }
    }

    let shutdown = CancellationToken::new();
    if let Some(gatekeeper) = gatekeeper {
        let (reload, metrics) = (rules_reload(&opts.sources, &app), metrics.clone());
        gatekeeper.run(
            Arc::new(move || reload::record("rules", reload(), &metrics)),
            shutdown.clone(),
        );
    }
    let (leads, leading) = tokio::sync::watch::channel(false);
    let audit = start_audit(&opts, &app, &metrics, leads, &shutdown).await?;
    if let Some(file) = &opts.register_webhooks {
        let client = kube_client(opts.kubeconfig.as_deref(), SERVE_CLUSTER_HINT)
            .await
            .context("--register-webhooks needs the Kubernetes API")?;
        let fallback = match opts
            .audit
            .as_ref()
            .and_then(|a| Some((a, a.native_fallback.clone()?)))
        {
            None => None,
            Some(_) if audit.is_none() => {
                bail!("--native-fallback needs the audit's leader election, which is off here (no cluster to audit)")
            }
            Some((settings, canary)) => {
                let state = app.clone();
                Some(Fallback {
                    leading,
                    rules: Arc::new(move || state.rules.load_full()),
                    options: settings.native.clone().unwrap_or_default(),
                    canary,
                    metrics: metrics.fallback.clone(),
                })
            }
        };
        let removed = metrics.foreign_webhooks_removed.clone();
        let registrar = Registrar::new(client, file.clone(), bundle, fallback, removed);
        tokio::spawn(registrar.run(shutdown.clone()));
    }
    let ops_router = ops::router(app.clone());
    let router = endpoints::router(app.clone());
    let stop = shutdown.clone();
    let drain = opts.drain;
    let connection_cap = app.gates.connections();
    let evicted = metrics.connections_evicted.clone();
    let task = tokio::spawn(async move {
        let ops_stop = CancellationToken::new();
        let ops_done = ops_stop.clone();
        let ops = tokio::spawn(async move {
            axum::serve(ops_listener, ops_router)
                .with_graceful_shutdown(async move { ops_done.cancelled().await })
                .await
        });
        let served = match listener.zip(tls) {
            Some((listener, tls)) => {
                connections::serve_tls(
                    listener,
                    tls,
                    router,
                    stop,
                    drain,
                    &limits,
                    connection_cap,
                    evicted,
                )
                .await
            }
            None => {
                stop.cancelled().await;
                Ok(())
            }
        };
        ops_stop.cancel();
        ops.await
            .context("the operations server task failed")?
            .context("operations server")?;
        served
    });
    Ok(Running {
        addr,
        metrics_addr,
        shutdown,
        app,
        task,
        audit,
        _watcher: watcher,
    })
}

/// Starts the audit loop when it is on and there is a cluster to audit (with a namespaces file
/// and no cluster configured, the audit is off with a warning).
async fn start_audit(
    opts: &Options,
    app: &Arc<ServerState>,
    metrics: &Arc<Metrics>,
    leads: tokio::sync::watch::Sender<bool>,
    shutdown: &CancellationToken,
) -> Result<Option<JoinHandle<()>>> {
    let rolled_out = {
        let rules = app.rules.load();
        let config = &rules.config();
        config
            .policies
            .keys()
            .filter(|p| config.rollout(p).is_some())
            .cloned()
            .collect::<Vec<_>>()
    };
    let Some(mut settings) = opts.audit.clone() else {
        if let Some(follow) = &opts.rollout_follow {
            let client = kube_client(opts.kubeconfig.as_deref(), SERVE_CLUSTER_HINT)
                .await
                .context("--rollout-configmap needs the Kubernetes API")?;
            follow_rollouts(&client, &follow.at, Some(&follow.identity), app, shutdown);
            return Ok(None);
        }
        if !rolled_out.is_empty() {
            tracing::warn!(policies = ?rolled_out, "progressive enforcement needs the audit (--audit-interval 0 turns both off): these policies only observe (dryrun)");
        }
        return Ok(None);
    };
    settings.scan.nodepools = opts.nodepools;
    settings.scan.catalog = app.pools.catalog();
    if opts.dev && opts.kubeconfig.is_none() {
        tracing::info!("audit off: --dev without --kubeconfig reads no cluster");
        return Ok(None);
    }
    let client = match kube_client(opts.kubeconfig.as_deref(), SERVE_CLUSTER_HINT).await {
        Ok(client) => client,
        // Namespace labels from a file and no cluster at all: nothing to audit.
        Err(e) if opts.namespaces_file.is_some() => {
            tracing::warn!(error = %format!("{e:#}"), "audit off: no cluster to audit (--audit-interval 0 silences this)");
            return Ok(None);
        }
        Err(e) => {
            return Err(
                e.context("the audit needs the Kubernetes API (--audit-interval 0 turns it off)")
            )
        }
    };
    // Every replica decides with the rollout state and reports its admission counts; a
    // controller admits nothing: it has no counts to add.
    let identity = opts.admission.then_some(&settings.lease.identity);
    follow_rollouts(&client, &settings.rollouts, identity, app, shutdown);
    let state = app.clone();
    let rules: crate::sources::Rules = Arc::new(move || state.rules.load_full());
    Ok(Some(tokio::spawn(crate::audit::schedule::run(
        client,
        settings,
        rules,
        metrics.clone(),
        leads,
        shutdown.clone(),
    ))))
}

/// Decides with the rollout state at `at` as it changes and, given this replica's `identity`,
/// publishes its admission counts beside it.
fn follow_rollouts(
    client: &kube::Client,
    at: &crate::rollout::store::Location,
    identity: Option<&String>,
    app: &Arc<ServerState>,
    shutdown: &CancellationToken,
) {
    let state = app.clone();
    tokio::spawn(crate::rollout::sync::watch(
        client.clone(),
        at.clone(),
        move |view| crate::rollout::sync::install(&state.rules, view),
        shutdown.clone(),
    ));
    if let Some(identity) = identity {
        tokio::spawn(crate::rollout::sync::publish(
            client.clone(),
            at.clone(),
            identity.clone(),
            app.rollout_counts.clone(),
            shutdown.clone(),
        ));
    }
}

/// Starts, then runs until SIGTERM or Ctrl-C, then drains and returns.
pub async fn run(opts: Options) -> Result<()> {
    let running = start(opts).await?;
    let shutdown = running.shutdown.clone();
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .context("installing the SIGTERM handler")?;
    tokio::select! {
        _ = term.recv() => tracing::info!("SIGTERM: no new connections; finishing in-flight requests"),
        _ = tokio::signal::ctrl_c() => tracing::info!("interrupted: no new connections; finishing in-flight requests"),
    }
    shutdown.cancel();
    running.wait().await
}

/// Gets the first certificate from the Secret (making it if needed), then keeps it renewed and
/// serves each new one to new connections. Also returns the CA bundle, kept current.
async fn managed_tls(
    managed: &ManagedCerts,
    kubeconfig: Option<&Path>,
    metrics: Arc<Metrics>,
) -> Result<(Arc<ArcSwap<rustls::ServerConfig>>, Arc<ArcSwap<String>>)> {
    let client = kube_client(kubeconfig, "give --kubeconfig")
        .await
        .context("--manage-certs needs the Kubernetes API")?;
    let selfcert = SelfCert::new(
        client,
        &managed.secret_namespace,
        &managed.secret_name,
        managed.webhook_configs.clone(),
        managed.settings.clone(),
    );
    let client_ca = match &managed.client_ca {
        Some(path) => Some(tls::ClientCa {
            pem: tls::Pem {
                bytes: std::fs::read(path)
                    .with_context(|| format!("reading {}", path.display()))?,
                origin: path.display().to_string(),
            },
            names: managed.client_names.clone(),
        }),
        None => None,
    };
    let expiry = metrics.clone();
    let build = move |stored: &Stored| {
        let pem = |text: &str, origin: &str| tls::Pem {
            bytes: text.as_bytes().to_vec(),
            origin: origin.to_string(),
        };
        let cert = pem(&stored.tls_crt, "tls.crt");
        let config =
            tls::server_config(&cert, &pem(&stored.tls_key, "tls.key"), client_ca.as_ref())?;
        expiry.certificate_expiry.set(tls::not_after(&cert)?);
        Ok::<_, anyhow::Error>(config)
    };
    // Steps are paced (a minimum interval, backoff on errors) from the first one on.
    let pacing = Pacing::new(managed.check_interval);
    let (first, pace) = selfcert.first_certificate(&pacing).await;
    let swap = Arc::new(ArcSwap::new(build(&first)?));
    let bundle = Arc::new(ArcSwap::from_pointee(first.bundle.clone()));
    tracing::info!(secret = %managed.secret_name, "serving the certificate from the Secret");
    let tls = swap.clone();
    let current_bundle = bundle.clone();
    tokio::spawn(async move {
        let mut serving = first.tls_crt;
        selfcert
            .run(&pacing, pace, move |stored| {
                if !stored.bundle.is_empty() && **current_bundle.load() != stored.bundle {
                    current_bundle.store(Arc::new(stored.bundle.clone()));
                }
                if stored.tls_crt.is_empty() || stored.tls_crt == serving {
                    return;
                }
                match build(&stored) {
                    Ok(config) => {
                        tls.store(config);
                        serving = stored.tls_crt;
                        metrics.reload("tls", true);
                        tracing::info!("serving a renewed certificate");
                    }
                    Err(e) => {
                        metrics.reload("tls", false);
                        tracing::error!(error = %format!("{e:#}"), "the stored certificate is unusable");
                    }
                }
            })
            .await;
    });
    Ok((swap, bundle))
}

/// Certificates for local runs in `dir` (made once, reused while present).
fn dev_certificates(dir: &Path) -> Result<TlsFiles> {
    let files = TlsFiles {
        cert: dir.join("tls.crt"),
        key: dir.join("tls.key"),
        client_ca: None,
        client_names: Vec::new(),
    };
    if !(files.cert.exists() && files.key.exists()) {
        certs::serving_bundle(
            &["localhost".to_string()],
            &["127.0.0.1".parse()?, "::1".parse()?],
            30,
        )?
        .write(dir)?;
        tracing::info!(dir = %dir.display(), "generated development certificates (ca.crt, tls.crt, tls.key)");
    }
    Ok(files)
}

/// A namespaces file; else, with `--dev` and no `--kubeconfig`, the embedded testdata namespaces
/// (a development run never attaches to whatever cluster the current kubeconfig context names);
/// else the cluster: `--kubeconfig`, or in-cluster config, or KUBECONFIG / ~/.kube/config.
/// The cluster's client is returned when the labels come from a cluster.
async fn namespace_source(opts: &Options) -> Result<(Namespaces, Option<kube::Client>)> {
    if let Some(path) = &opts.namespaces_file {
        let labels = sources::load_namespaces(path)?;
        tracing::info!(source = %path.display(), namespaces = labels.len(), "namespace labels from a file");
        return Ok((Namespaces::fixed(labels), None));
    }
    if opts.dev && opts.kubeconfig.is_none() {
        let origin = "embedded testdata/namespaces.yaml";
        let labels = parse_file_text(EMBEDDED_NAMESPACES, origin)?;
        tracing::info!(source = origin, namespaces = labels.len(), "namespace labels from the embedded testdata (--dev; give --kubeconfig to read a cluster)");
        return Ok((Namespaces::fixed(labels), None));
    }
    let client = kube_client(opts.kubeconfig.as_deref(), SERVE_CLUSTER_HINT).await?;
    tracing::info!(source = %cluster_name(opts.kubeconfig.as_deref()), "namespace labels from the cluster (watch cache, GET on a miss)");
    let namespaces = Namespaces::new(Arc::new(ClusterNamespaces::start(client.clone())));
    Ok((namespaces, Some(client)))
}

/// The pools placement policies choose among, as read from a nodes file (with its NodePools),
/// or to be read from the cluster (with its NodePools under `--nodepools`); the instance-type
/// catalog says what NodePools launch.
fn pools(opts: &Options, rules: &poolguard_core::ruleset::RuleSet) -> Result<Pools> {
    let catalog = opts.instance_types_file.as_deref();
    if opts.nodepools && opts.nodes_file.is_some() {
        bail!("--nodepools reads the cluster's NodePools, --nodes-file reads nodes (and NodePools) from a file: give one of them");
    }
    Ok(match &opts.nodes_file {
        Some(path) => {
            let inventory = sources::load_inventory(path, catalog)?;
            tracing::info!(
                source = %path.display(),
                nodes = inventory.nodes.len(),
                nodepools = inventory.nodepools.len(),
                "pools from a nodes file"
            );
            Pools::fixed(inventory, rules.config())
        }
        None => {
            let catalog = catalog.map(sources::load_catalog).transpose()?;
            if let (Some(catalog), Some(path)) = (&catalog, &opts.instance_types_file) {
                tracing::info!(
                    source = %path.display(),
                    instance_types = catalog.instance_types.len(),
                    "instance types NodePools launch"
                );
            }
            Pools::new(opts.nodepools, catalog.map(Arc::new))
        }
    })
}

/// Starts reading the cluster's nodes (a watch cache) and, under `--nodepools`, its NodePools
/// when the namespaces come from a cluster and no nodes file is given; with neither, no pool
/// can be chosen.
fn pool_source(opts: &Options, client: Option<kube::Client>, app: &Arc<ServerState>) -> Result<()> {
    let rules = || app.rules.load_full();
    match (&opts.nodes_file, client) {
        (Some(_), _) => {}
        (None, Some(client)) => {
            let weak = Arc::downgrade(app);
            let key: node_cache::PoolKey = Arc::new(move || {
                weak.upgrade()
                    .map(|app| app.rules.load_full())
                    .unwrap_or_default()
            });
            if opts.nodepools {
                nodepool_cache::start(client.clone(), key.clone(), app.pools.clone());
            }
            node_cache::start(client, key, app.pools.clone());
        }
        (None, None) => {
            app.pools.publish(Vec::new(), rules().config());
            app.pools.publish_nodepools(Vec::new(), rules().config());
        }
    }
    Ok(())
}

/// What `serve` can be given instead of a cluster it cannot find.
const SERVE_CLUSTER_HINT: &str =
    "give --kubeconfig, or --namespaces-file, or --dev for the embedded testdata namespaces";

/// A client for `kubeconfig` when given, else the inferred configuration (in-cluster, then
/// KUBECONFIG or ~/.kube/config). `hint` ends the error when none is found: what to give
/// instead, in the calling command's flags.
pub async fn kube_client(kubeconfig: Option<&Path>, hint: &str) -> Result<kube::Client> {
    let config = match kubeconfig {
        Some(path) => {
            let file = kube::config::Kubeconfig::read_from(path)
                .with_context(|| format!("reading kubeconfig {}", path.display()))?;
            kube::Config::from_custom_kubeconfig(file, &kube::config::KubeConfigOptions::default())
                .await
                .with_context(|| format!("kubeconfig {}", path.display()))?
        }
        // The inference error's text already holds its causes (in-cluster, then kubeconfig):
        // once, not again as a chain.
        None => kube::Config::infer().await.map_err(|e| {
            anyhow::anyhow!("no cluster configured (no in-cluster config, KUBECONFIG or ~/.kube/config: {e}); {hint}")
        })?,
    };
    kube::Client::try_from(config).context("creating the Kubernetes client")
}

fn cluster_name(kubeconfig: Option<&Path>) -> String {
    kubeconfig.map_or_else(
        || "inferred kubeconfig or in-cluster config".to_string(),
        |p| format!("kubeconfig {}", p.display()),
    )
}

/// The TLS configuration from files; the certificate's expiry goes to the metrics.
fn load_tls(files: &TlsFiles, metrics: &Metrics) -> Result<Arc<rustls::ServerConfig>> {
    let (config, not_after) = files.load()?;
    metrics.certificate_expiry.set(not_after);
    Ok(config)
}

fn reload_targets(
    opts: &Options,
    tls: Option<(&TlsFiles, &Arc<ArcSwap<rustls::ServerConfig>>)>,
    app: &Arc<ServerState>,
) -> Vec<reload::Target> {
    let mut targets = Vec::new();
    if let Some((files, tls)) = tls {
        let (files, swap, metrics) = (files.clone(), tls.clone(), app.metrics.clone());
        targets.push(reload::Target {
            what: "tls",
            dirs: dedup(files.paths().into_iter().map(reload::dir_of)),
            reload: Box::new(move || {
                swap.store(load_tls(&files, &metrics)?);
                Ok(())
            }),
        });
    }
    let rule_dirs = dedup(
        opts.sources
            .config
            .iter()
            .map(|c| reload::dir_of(c))
            .chain(opts.sources.policies_dir().map(|d| reload::dir_of(&d)))
            .chain(opts.sources.placement_dir().map(|d| reload::dir_of(&d)))
            .chain(
                opts.sources
                    .gatekeeper_dir
                    .iter()
                    .map(|d| reload::dir_of(d)),
            ),
    );
    if !rule_dirs.is_empty() {
        targets.push(reload::Target {
            what: "rules",
            dirs: rule_dirs,
            reload: Box::new(rules_reload(&opts.sources, app)),
        });
    }
    targets
}

/// Loads the rules from `sources` again and serves them.
fn rules_reload(
    sources: &Sources,
    app: &Arc<ServerState>,
) -> impl Fn() -> Result<()> + Send + Sync + 'static {
    let (sources, app) = (sources.clone(), app.clone());
    move || {
        let loaded = sources.load()?;
        // The rollout state comes from the cluster, not the files: carried over (by
        // compare-and-swap, so a state arriving meanwhile is not lost).
        app.rules.rcu(|old| {
            // The rollouts and PolicyExceptions come from the cluster, not the files:
            // carried over (the exceptions are checked against the new config within
            // exception_cache::REFRESH).
            loaded
                .clone()
                .with_rollouts(old.rollouts().clone())
                .with_exceptions(old.exceptions().clone())
        });
        Ok(())
    }
}

fn dedup(paths: impl Iterator<Item = PathBuf>) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = Vec::new();
    for p in paths {
        if !out.contains(&p) {
            out.push(p);
        }
    }
    out
}
