//! The `poolguard` command line: argument parsing and one function per command.

pub mod audit;
pub mod eval;
pub mod native;
pub mod rollout;
pub mod verify;

use std::io::{IsTerminal, Write};
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};
use clap::{Args, Parser, Subcommand};

use poolguard_core::placement_policy::PoolSet;
use poolguard_core::policy::rego_tests;
use poolguard_core::report::ReportApi;
use poolguard_core::webhook::Webhook;

use crate::app as serve;
use crate::certs::authority as certs;
use crate::server::tls::TlsFiles;
use crate::sources::{self, Sources, DEFAULT_POLICIES_DIR};

/// Kubernetes admission webhook: puts pods on their namespace's node pool and enforces Rego
/// (StackL SIT) policies such as allowed image repositories.
#[derive(Parser)]
#[command(name = "poolguard", version, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the webhook server: POST /mutate and /validate over HTTPS, and an operations port
    /// with /healthz, /readyz and /metrics.
    ///
    /// Namespace labels come from --namespaces-file, else (with --dev: only when --kubeconfig is
    /// given; else the embedded testdata namespaces) from the cluster (--kubeconfig, in-cluster
    /// config, KUBECONFIG or ~/.kube/config) through a watch cache. Certificate, config and policy files are reloaded when
    /// they change; a change that does not load keeps the last good version. SIGTERM stops
    /// accepting connections, finishes in-flight requests and exits 0.
    Serve(Box<ServeArgs>),
    /// Run what writes to the cluster, apart from the serving replicas: the managed certificate
    /// and its CA bundle (--manage-certs), the webhooks' registration (--register-webhooks), the
    /// background audit and its reports, progressive enforcement's state and the native
    /// admission objects (--native-apply). It answers no admission request: the serving
    /// replicas (`serve --audit-interval 0`) then need only read access, and their
    /// ServiceAccount writes no admission configuration. An operations port serves /healthz,
    /// /readyz and /metrics; the audit's Lease elects the one that writes.
    Controller(Box<ControllerArgs>),
    /// Decide one AdmissionReview or manifest from files, without a cluster.
    ///
    /// An AdmissionReview v1 (JSON or YAML) prints the AdmissionReview response. A plain Pod or
    /// workload manifest (one or more documents) prints a readable verdict as comments and, when
    /// mutating, the patched object. Exit status: 0 allowed, 1 denied, 2 bad input.
    Eval(EvalArgs),
    /// Audit once what the cluster runs (or, with --manifests, objects dumped from a cluster,
    /// without a cluster): the results the background audit reports.
    ///
    /// Against the cluster (--kubeconfig, in-cluster config, KUBECONFIG or ~/.kube/config): the
    /// namespaces --namespace-selector selects, the nodes, and every Pod and workload in those
    /// namespaces, listed in pages; nothing is written. With --manifests: every *.yaml, *.yml and
    /// *.json file in the directory (`kubectl get -o yaml|json` output: Lists or several
    /// documents) with --namespaces-file (and --nodes-file). Every Pod and workload (Deployment, ReplicaSet,
    /// StatefulSet, DaemonSet, Job, CronJob, ReplicationController) gets one result for its
    /// placement and one per policy applied in its namespace's pool, from the checks the
    /// validating webhook runs: pass, fail (any infringement, whatever the policy's enforcement;
    /// a missing or conflicting pool selector; a pod bound to a node of another pool), error (a
    /// policy that cannot be evaluated, a pod spec or document that cannot be read, a pod's
    /// node not in --nodes-file) or skip (placement, in a namespace without a pool). An object
    /// of any other kind gets one result per Gatekeeper constraint (--gatekeeper-dir) that
    /// matches it; against the cluster, the namespaced kinds those constraints name are listed
    /// too. Exit status: 0 no fail or error, 1 some, 2 bad input.
    Audit(AuditArgs),
    /// Progressive enforcement: show the rollouts, or approve a group, pause or resume a
    /// policy's rollout (queued in the rollout ConfigMap; the audit's leader applies it within
    /// seconds).
    Rollout(RolloutArgs),
    /// Rego policy tools.
    #[command(subcommand)]
    Policy(PolicyCommand),
    /// Write a new CA and a serving certificate as PEM: ca.crt, tls.crt, tls.key.
    Certs(CertsArgs),
    /// Config file tools.
    #[command(subcommand)]
    Config(ConfigCommand),
    /// Print the native admission objects (MutatingAdmissionPolicy, ValidatingAdmissionPolicy
    /// and their bindings, admissionregistration.k8s.io/v1, Kubernetes 1.36+) that decide in the
    /// API server what the config and the shipped policies decide, as YAML; then, as comments,
    /// what stays on the webhook and why. Nothing is written to a cluster unless --apply.
    Native(NativeArgs),
    /// Run gator-style suites of Gatekeeper ConstraintTemplates and constraints (`kind: Suite`:
    /// tests naming a template and a constraint, cases naming an object and assertions
    /// `violations: yes|no|N` with an optional `message` regular expression), decided by the
    /// same code as admission. A directory is searched for `suite.yaml` files. Prints each
    /// disagreeing case, each template that does not load and each lint warning (where regorus
    /// and OPA may read the Rego differently), then a summary. Exit status: 0 every case
    /// agrees, 1 some do not or a template does not load, 2 bad input.
    Verify {
        /// Suite files or directories.
        #[arg(required = true, value_name = "SUITE")]
        suites: Vec<PathBuf>,
        /// Print every case, not only those that disagree.
        #[arg(long, short)]
        verbose: bool,
        /// PolicyExceptions (poolguard.io/v1alpha1; *.yaml, *.yml, *.json) the cases are decided
        /// under: a case one matches has its violations allowed, as admission allows them.
        #[arg(long, value_name = "DIR")]
        exceptions_dir: Option<PathBuf>,
    },
}

#[derive(Args)]
struct NativeArgs {
    #[command(flatten)]
    rules: RuleArgs,
    /// Namespace the bindings never select (repeatable; the chart's excluded namespaces).
    #[arg(long = "exclude-namespace", value_name = "NAME")]
    excluded_namespaces: Vec<String>,
    /// Check only namespaces that carry the pool label (the chart's
    /// validating.requireNamespaceLabel).
    #[arg(long)]
    require_namespace_label: bool,
    /// Select only namespaces with this label and value (repeatable; the chart's
    /// webhook.namespaceMatchLabels).
    #[arg(long = "namespace-match-label", value_name = "KEY=VALUE", value_parser = key_value)]
    namespace_match_labels: Vec<(String, String)>,
    /// Write them to the cluster instead of printing them: server-side apply (field manager
    /// `poolguard`), then delete the objects labelled app.kubernetes.io/managed-by=poolguard
    /// that are no longer generated. A cluster without the admissionregistration.k8s.io/v1
    /// MutatingAdmissionPolicy API (before 1.36) is refused with one line, nothing written.
    #[arg(long)]
    apply: bool,
    /// With --apply: the cluster's kubeconfig. Default: in-cluster config, else KUBECONFIG or
    /// ~/.kube/config.
    #[arg(long, value_name = "FILE", requires = "apply")]
    kubeconfig: Option<PathBuf>,
}

#[derive(Subcommand)]
enum ConfigCommand {
    /// Load the config, policies and placement policies exactly as `serve` does and report
    /// every error (an unknown policy, a repository without a registry, a Rego error, ...)
    /// without serving. Exit status: 0 loads, 2 does not. The chart's `helm test` runs it on the
    /// installed ConfigMaps.
    Check(RuleArgs),
}

#[derive(Args)]
struct RuleArgs {
    /// Config file (YAML). Default: built-in defaults.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Directory of policy templates (*.yaml StackL templates, *.rego). Default: ./policies if it exists.
    #[arg(long, value_name = "DIR")]
    policies_dir: Option<PathBuf>,
    /// Directory of placement policy templates (StackL SAT templates: a `solutions` rule),
    /// which choose pools when the config's `placement` section asks for it. Default: the
    /// policies directory's `placement/` if it exists.
    #[arg(long, value_name = "DIR")]
    placement_policies_dir: Option<PathBuf>,
    /// Directory of Gatekeeper ConstraintTemplates and constraints (*.yaml, *.yml, *.json), run
    /// as policies named by their constraints (docs/gatekeeper.md). Default: none.
    #[arg(long, value_name = "DIR")]
    gatekeeper_dir: Option<PathBuf>,
}

impl RuleArgs {
    fn sources(self) -> Sources {
        Sources {
            config: self.config,
            policies_dir: self.policies_dir,
            placement_dir: self.placement_policies_dir,
            gatekeeper_dir: self.gatekeeper_dir,
            gatekeeper_cluster: None,
        }
    }
}

#[derive(Args)]
struct EvalArgs {
    /// Namespace objects (YAML or JSON, a v1 List or several documents). A namespace not in the
    /// file has no labels.
    #[arg(long, value_name = "FILE")]
    namespaces_file: PathBuf,
    /// Node objects and Karpenter NodePools (`kubectl get nodes,nodepools -o yaml|json`): the
    /// pools placement policies choose among, with what their nodes can do and what the
    /// NodePools can launch (see --instance-types-file). Without it no pool can be chosen.
    #[arg(long, value_name = "FILE")]
    nodes_file: Option<PathBuf>,
    /// The instance types NodePools launch, in the format of Karpenter's kwok provider (a JSON
    /// array of `name`, `architecture`, `operatingSystems`, `resources`, `offerings`). Without
    /// it a NodePool counts only its existing nodes.
    #[arg(long, value_name = "FILE", requires = "nodes_file")]
    instance_types_file: Option<PathBuf>,
    /// PolicyExceptions (poolguard.io/v1alpha1; *.yaml, *.yml, *.json) that count, as in the
    /// cluster: one the validating webhook would refuse is an error.
    #[arg(long, value_name = "DIR")]
    exceptions_dir: Option<PathBuf>,
    #[command(flatten)]
    rules: RuleArgs,
    /// Which webhook decides, or `admission` for both in turn, as the API server calls them.
    #[arg(long, value_enum)]
    webhook: WebhookArg,
    /// For manifests: the namespace to create them in (default: metadata.namespace, else "default").
    #[arg(long, short = 'n')]
    namespace: Option<String>,
    /// AdmissionReview or manifest file; `-` reads standard input. Default: standard input,
    /// unless it is a terminal.
    #[arg(value_name = "FILE|-")]
    input: Option<String>,
}

#[derive(Args)]
struct AuditArgs {
    /// Directory of manifests to audit (its *.yaml, *.yml and *.json files; not recursive)
    /// instead of the cluster.
    #[arg(long, value_name = "DIR", requires = "namespaces_file")]
    manifests: Option<PathBuf>,
    /// With --manifests: Namespace objects (YAML or JSON, a v1 List or several documents). A
    /// namespace not in the file has no labels, so no pool.
    #[arg(long, value_name = "FILE", requires = "manifests")]
    namespaces_file: Option<PathBuf>,
    /// With --manifests: Node objects (and Karpenter NodePools), read like --namespaces-file: a
    /// pod bound to a node (spec.nodeName) must run on a node whose nodeSelectorKey label is
    /// its namespace's pool; the placement policies choose among their pools. Without it, a
    /// pod's node is not checked.
    #[arg(long, value_name = "FILE", requires = "manifests")]
    nodes_file: Option<PathBuf>,
    /// With --nodes-file: the instance types its NodePools launch (as `eval
    /// --instance-types-file`).
    #[arg(long, value_name = "FILE", requires = "nodes_file")]
    instance_types_file: Option<PathBuf>,
    /// With --manifests: PolicyExceptions (as `eval --exceptions-dir`); the results they allow
    /// are `skip`, with the exception, its ticket and expiry.
    #[arg(long, value_name = "DIR", requires = "manifests")]
    exceptions_dir: Option<PathBuf>,
    /// The cluster's kubeconfig. Default: in-cluster config, else KUBECONFIG or ~/.kube/config.
    #[arg(long, value_name = "FILE", conflicts_with = "manifests")]
    kubeconfig: Option<PathBuf>,
    /// Against the cluster: label selector of the namespaces to audit (`kubectl -l` syntax).
    /// Default: every namespace.
    #[arg(
        long,
        value_name = "SELECTOR",
        default_value = "",
        hide_default_value = true,
        conflicts_with = "manifests"
    )]
    namespace_selector: String,
    #[command(flatten)]
    rules: RuleArgs,
    /// What to print.
    #[arg(long, value_enum, default_value = "table")]
    output: audit::Output,
    /// With --output reports: the report API to write (as `serve --report-api`).
    #[arg(
        long,
        alias = "audit-report-api",
        value_enum,
        default_value = "policyreport"
    )]
    report_api: ReportApiArg,
    /// With --output reports: results listed in one report (failures and errors first); the
    /// number left out is in the annotation poolguard.io/results-omitted.
    #[arg(
        long,
        alias = "audit-max-results-per-report",
        default_value_t = 1000,
        value_name = "N"
    )]
    max_results_per_report: usize,
}

#[derive(Args)]
struct RolloutArgs {
    #[command(subcommand)]
    action: RolloutAction,
    /// The cluster's kubeconfig. Default: in-cluster config, else KUBECONFIG or ~/.kube/config.
    #[arg(long, global = true, value_name = "FILE")]
    kubeconfig: Option<PathBuf>,
    /// Namespace of the rollout ConfigMap (poolguard's namespace). Default: the kubeconfig
    /// context's namespace.
    #[arg(long, short = 'n', global = true, value_name = "NAMESPACE")]
    namespace: Option<String>,
    /// The rollout ConfigMap (serve's --rollout-configmap; --configmap is the same).
    #[arg(
        long = "rollout-configmap",
        alias = "configmap",
        global = true,
        default_value = "poolguard-rollouts",
        value_name = "NAME"
    )]
    configmap: String,
}

#[derive(Subcommand)]
enum RolloutAction {
    /// Every policy's rollout: groups, statuses, since when, objects, failures, why.
    Status {
        /// Print the stored states as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Let a group that needs approval start when its turn comes.
    Approve {
        /// The policy under a rollout (its name in the config).
        policy: String,
        /// The group of the policy's rollout that needs approval.
        group: String,
    },
    /// Freeze a policy's rollout (no group moves; deadlines stop counting).
    Pause {
        /// The policy under a rollout (its name in the config).
        policy: String,
    },
    /// Unfreeze it; groups the safety valve dropped back to warn try again.
    Resume {
        /// The policy under a rollout (its name in the config).
        policy: String,
    },
}

/// The report API, as the command line names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum ReportApiArg {
    /// wgpolicyk8s.io/v1alpha2 PolicyReport (and ClusterPolicyReport)
    Policyreport,
    /// openreports.io/v1alpha1 Report (and ClusterReport)
    Openreports,
}

#[derive(Args)]
struct ServeArgs {
    /// HTTPS address [default: 0.0.0.0:8443, or 127.0.0.1:8443 with --dev]
    #[arg(long)]
    addr: Option<SocketAddr>,
    /// Serving certificate (PEM), reloaded when it changes.
    #[arg(long, value_name = "FILE", requires = "tls_key_file")]
    tls_cert_file: Option<PathBuf>,
    /// Private key of the serving certificate (PEM).
    #[arg(long, value_name = "FILE", requires = "tls_cert_file")]
    tls_key_file: Option<PathBuf>,
    /// Require client certificates signed by this CA (mTLS) that name one of --client-name.
    #[arg(long, value_name = "FILE")]
    client_ca_file: Option<PathBuf>,
    /// With --client-ca-file: a name the API server's client certificate carries, as its
    /// subject's common name or a DNS subject alternative name (repeat for several). Required
    /// with --client-ca-file: a cluster's CA may sign other clients (on kubeadm, every
    /// kubelet's client certificate)
    #[arg(long = "client-name", value_name = "NAME", requires = "client_ca_file")]
    client_names: Vec<String>,
    #[command(flatten)]
    rules: RuleArgs,
    /// Namespace objects to take labels from instead of the cluster.
    #[arg(long, value_name = "FILE")]
    namespaces_file: Option<PathBuf>,
    /// Node objects (and Karpenter NodePools) to take the pools from instead of the cluster
    /// (the pools placement policies choose among).
    #[arg(long, value_name = "FILE")]
    nodes_file: Option<PathBuf>,
    #[command(flatten)]
    sources: ClusterSourceArgs,
    /// Operations address (plain HTTP) [default: 0.0.0.0:9090, or 127.0.0.1:9090 with --dev]
    #[arg(long)]
    metrics_addr: Option<SocketAddr>,
    /// Deadline of a validating decision in milliseconds; past it `evaluation.onError` decides.
    /// Keep it below the webhook configuration's timeoutSeconds.
    #[arg(long, default_value_t = 4000, value_name = "MS")]
    deadline_ms: u64,
    /// Seconds in-flight requests get to finish after SIGTERM.
    #[arg(long, default_value_t = 25, value_name = "SECONDS")]
    drain_seconds: u64,
    #[command(flatten)]
    limits: LimitArgs,
    #[command(flatten)]
    audit: ServeAuditArgs,
    /// Log format.
    #[arg(long, value_enum, default_value = "text")]
    log_format: LogFormat,
    #[command(flatten)]
    certs: CertArgs,
    /// Fill these webhook configurations (a YAML file of MutatingWebhookConfiguration and
    /// ValidatingWebhookConfiguration objects, as the chart renders them) with their webhooks
    /// once poolguard serves and the Service they call has a ready endpoint, and apply them again
    /// every 30 s. The configurations must exist (the chart creates them empty); only their
    /// webhooks are written. With --manage-certs the managed CA bundle goes into every webhook
    /// that has none.
    #[arg(long, value_name = "FILE")]
    register_webhooks: Option<PathBuf>,
    /// Kubeconfig file of the cluster to read namespaces from (and keep --manage-certs
    /// certificates in). Default: in-cluster config, else KUBECONFIG or ~/.kube/config — except
    /// with --dev, which never reads a cluster unless this is given.
    #[arg(long, value_name = "FILE")]
    kubeconfig: Option<PathBuf>,
    /// Also load the cluster's Gatekeeper ConstraintTemplates and constraints (read-only
    /// watches of templates.gatekeeper.sh and constraints.gatekeeper.sh), beside
    /// --gatekeeper-dir's; the rules reload on every change. A template that does not load here
    /// is left out with its constraints, and logged (docs/gatekeeper.md).
    #[arg(long)]
    gatekeeper_from_cluster: bool,
    /// Local run: listen on loopback, write certificates into ./certs when no TLS files are
    /// given, and take namespace labels from the embedded testdata namespaces unless
    /// --namespaces-file or --kubeconfig is given.
    #[arg(long)]
    dev: bool,
}

#[derive(Args)]
struct ControllerArgs {
    #[command(flatten)]
    rules: RuleArgs,
    /// Operations address (plain HTTP): /healthz, /readyz, /metrics
    #[arg(long, default_value = "0.0.0.0:9090")]
    metrics_addr: SocketAddr,
    #[command(flatten)]
    audit: ServeAuditArgs,
    /// Log format.
    #[arg(long, value_enum, default_value = "text")]
    log_format: LogFormat,
    #[command(flatten)]
    certs: CertArgs,
    /// Fill these webhook configurations with their webhooks once the Service they call has a
    /// ready endpoint (the serving replicas), as `serve --register-webhooks`.
    #[arg(long, value_name = "FILE")]
    register_webhooks: Option<PathBuf>,
    /// Kubeconfig file of the cluster. Default: in-cluster config, else KUBECONFIG or
    /// ~/.kube/config.
    #[arg(long, value_name = "FILE")]
    kubeconfig: Option<PathBuf>,
    /// Also load the cluster's Gatekeeper ConstraintTemplates and constraints, as `serve
    /// --gatekeeper-from-cluster` (the audit and the native objects use them).
    #[arg(long)]
    gatekeeper_from_cluster: bool,
    #[command(flatten)]
    sources: ClusterSourceArgs,
}

/// What `serve` and `controller` read from the cluster besides nodes and namespaces: Karpenter
/// NodePools as pools (admission and the audit), and PolicyExceptions.
#[derive(Args)]
struct ClusterSourceArgs {
    /// Read the cluster's PolicyExceptions (poolguard.io/v1alpha1, a watch of every namespace;
    /// get, list and watch on policyexceptions.poolguard.io): those in the namespaces the
    /// config's `exceptions.namespaces` names count, in admission and the audit.
    #[arg(long)]
    policy_exceptions: bool,
    /// Read the cluster's Karpenter NodePools (`karpenter.sh/v1`: a watch when serving, a list
    /// each audit pass) as pools too: a NodePool with no node yet is a pool with what it can
    /// launch (--instance-types-file). Needs get, list and watch on nodepools.karpenter.sh.
    #[arg(long)]
    nodepools: bool,
    /// The instance types NodePools launch, in the format of Karpenter's kwok provider (a JSON
    /// array of `name`, `architecture`, `operatingSystems`, `resources`, `offerings`). Without
    /// it a NodePool counts only its existing nodes.
    #[arg(long, value_name = "FILE")]
    instance_types_file: Option<PathBuf>,
}

/// Certificates kept in a Secret (`--manage-certs`), for `serve` and `controller`.
#[derive(Args)]
struct CertArgs {
    /// Keep the serving certificate in a Secret: create a CA and certificate when missing,
    /// renew them before expiry and inject the CA bundle into --webhook-configs. `serve` then
    /// serves it (instead of --tls-cert-file/--tls-key-file); `controller` keeps it for the
    /// serving replicas, which mount the Secret.
    #[arg(long, requires_all = ["cert_secret", "webhook_configs"])]
    manage_certs: bool,
    /// With --manage-certs: the Secret, as NAMESPACE/NAME.
    #[arg(long, value_name = "NAMESPACE/NAME")]
    cert_secret: Option<String>,
    /// With --manage-certs: webhook configurations (mutating or validating) to inject the CA
    /// bundle into, comma-separated.
    #[arg(long, value_name = "NAME,...", value_delimiter = ',')]
    webhook_configs: Vec<String>,
    /// With --manage-certs: DNS name of the serving certificate (repeatable), e.g.
    /// poolguard.poolguard.svc.
    #[arg(long = "cert-dns-name", value_name = "NAME")]
    cert_dns_names: Vec<String>,
    /// With --manage-certs: IP address of the serving certificate (repeatable).
    #[arg(long = "cert-ip", value_name = "ADDR")]
    cert_ips: Vec<IpAddr>,
    /// With --manage-certs: CA lifetime (renewed with a third left, which must cover
    /// --ca-publish-grace plus twice --cert-check-interval; at most 100 years).
    #[arg(long, default_value = "5y", value_name = "DURATION", value_parser = humantime::parse_duration)]
    ca_validity: std::time::Duration,
    /// With --manage-certs: serving certificate lifetime (renewed with a third left, as for
    /// --ca-validity; at most the CA's).
    #[arg(long, default_value = "90days", value_name = "DURATION", value_parser = humantime::parse_duration)]
    cert_validity: std::time::Duration,
    /// With --manage-certs: how often the Secret and webhook configurations are checked.
    #[arg(long, default_value = "1m", value_name = "DURATION", value_parser = humantime::parse_duration)]
    cert_check_interval: std::time::Duration,
    /// With --manage-certs: how long a new CA bundle is published before certificates from the
    /// new CA are served (time for every API server to see it).
    #[arg(long, default_value = "30s", value_name = "DURATION", value_parser = humantime::parse_duration)]
    ca_publish_grace: std::time::Duration,
}

impl CertArgs {
    /// The managed certificates' settings; `None` without --manage-certs.
    fn managed(
        self,
        client_ca: Option<PathBuf>,
        client_names: Vec<String>,
    ) -> Result<Option<serve::ManagedCerts>> {
        if !self.manage_certs {
            return Ok(None);
        }
        let secret = self.cert_secret.unwrap_or_default();
        let Some((namespace, name)) = secret
            .split_once('/')
            .filter(|(n, s)| !n.is_empty() && !s.is_empty())
        else {
            anyhow::bail!("--cert-secret must be NAMESPACE/NAME, got {secret:?}");
        };
        if self.cert_dns_names.is_empty() && self.cert_ips.is_empty() {
            anyhow::bail!("--manage-certs needs at least one --cert-dns-name or --cert-ip");
        }
        let settings = crate::certs::rotation::Settings {
            ca_validity: self.ca_validity,
            serving_validity: self.cert_validity,
            publish_grace: self.ca_publish_grace,
            dns_names: self.cert_dns_names,
            ips: self.cert_ips,
        };
        settings.check(self.cert_check_interval)?;
        Ok(Some(serve::ManagedCerts {
            secret_namespace: namespace.to_string(),
            secret_name: name.to_string(),
            webhook_configs: self.webhook_configs,
            settings,
            check_interval: self.cert_check_interval,
            client_ca,
            client_names,
        }))
    }
}

/// The background audit of `serve`.
#[derive(Args)]
struct ServeAuditArgs {
    /// Time between background audit passes: every Pod and workload in the audited namespaces
    /// (and objects of the namespaced kinds the Gatekeeper constraints name) checked as
    /// /validate checks them, one policy report per namespace. Only the replica
    /// holding the lease (--lease-name) audits. 0 turns the audit off; --dev without
    /// --kubeconfig never audits.
    #[arg(long, default_value = "10m", value_name = "DURATION", value_parser = humantime::parse_duration)]
    audit_interval: std::time::Duration,
    /// Label selector of the namespaces audited (`kubectl -l` syntax); the chart sets the
    /// validating webhook's namespace scope. Default: every namespace.
    #[arg(long, default_value = "", value_name = "SELECTOR")]
    audit_namespace_selector: String,
    /// The report API the audit writes (its CRDs must be installed): a report per namespace, and
    /// one cluster report of the cluster-scoped objects Gatekeeper constraints match; as `audit
    /// --report-api`.
    #[arg(
        long = "report-api",
        alias = "audit-report-api",
        value_enum,
        default_value = "policyreport"
    )]
    audit_report_api: ReportApiArg,
    /// Results listed in one report (failures and errors first); the number left out is in the
    /// annotation poolguard.io/results-omitted. As `audit --max-results-per-report`.
    #[arg(
        long = "max-results-per-report",
        alias = "audit-max-results-per-report",
        default_value_t = 1000,
        value_name = "N"
    )]
    audit_max_results_per_report: usize,
    /// Objects per list call of the audit (of the kinds Gatekeeper constraints name besides Pods
    /// and workloads: at most 50).
    #[arg(long, default_value_t = 500, value_name = "N")]
    audit_page_size: u32,
    /// The coordination.k8s.io Lease that elects the auditing replica.
    #[arg(long, default_value = "poolguard-audit", value_name = "NAME")]
    lease_name: String,
    /// Namespace of the Lease.
    #[arg(
        long,
        env = "POD_NAMESPACE",
        default_value = "default",
        value_name = "NAMESPACE"
    )]
    lease_namespace: String,
    /// This replica's name in the Lease [default: POD_NAME, else host name and process id]
    #[arg(long, value_name = "ID")]
    lease_identity: Option<String>,
    /// How long the lease outlives its holder's last renewal: the longest time without an
    /// auditing replica after one dies (a replica that stops releases it at once).
    #[arg(long, default_value = "15s", value_name = "DURATION", value_parser = humantime::parse_duration)]
    lease_duration: std::time::Duration,
    /// The ConfigMap (in the Lease's namespace) holding the state of progressive enforcement
    /// (policies with `rollout`): the audit's leader writes it, every replica decides with it
    /// and adds its admission counts to it. With --audit-interval 0, `serve` follows the one
    /// named here (the audit runs in `poolguard controller`); named by no one there, rolled-out
    /// policies only observe [default with the audit: poolguard-rollouts]
    #[arg(long, value_name = "NAME")]
    rollout_configmap: Option<String>,
    /// The audit's leader also writes the native admission objects (`poolguard native`:
    /// MutatingAdmissionPolicy/ValidatingAdmissionPolicy and bindings,
    /// admissionregistration.k8s.io/v1, Kubernetes 1.36+) by server-side apply (field manager
    /// `poolguard`) whenever the config, policies or rollout state change them (and every 10
    /// minutes, repairing edits), and deletes the
    /// objects labelled app.kubernetes.io/managed-by=poolguard it no longer generates. Where the
    /// v1 APIs are not served it logs one line and the webhook stays the only path. Needs the
    /// audit (its leader election): refused with --audit-interval 0.
    #[arg(long)]
    native_apply: bool,
    /// With --native-apply: a namespace the bindings never select (repeatable; the chart's
    /// excluded namespaces), as `poolguard native --exclude-namespace`.
    #[arg(
        long = "native-exclude-namespace",
        value_name = "NAME",
        requires = "native_apply"
    )]
    native_excluded_namespaces: Vec<String>,
    /// With --native-apply: validate only namespaces that carry the pool label, as
    /// `poolguard native --require-namespace-label`.
    #[arg(long, requires = "native_apply")]
    native_require_namespace_label: bool,
    /// With --native-apply: select only namespaces with this label and value (repeatable; the
    /// chart's webhook.namespaceMatchLabels), as `poolguard native --namespace-match-label`.
    #[arg(
        long = "native-namespace-match-label",
        value_name = "KEY=VALUE",
        value_parser = key_value,
        requires = "native_apply"
    )]
    native_namespace_match_labels: Vec<(String, String)>,
    /// With --native-apply and --register-webhooks: the webhook becomes the fallback. Only the
    /// audit's leader registers the webhooks, and it leaves the pod and workload webhooks out
    /// while the native objects decide those requests alone: nothing but pool authority left to
    /// the webhook, the objects read back from the cluster as this replica generates them, and
    /// the API server enforcing them on canary pods (--native-canary-namespace), for 15 s in a
    /// row. It checks every 5 s and puts them back at once when that no longer holds. The
    /// namespace (pool-authority) webhooks always stay.
    #[arg(long, requires_all = ["native_apply", "register_webhooks", "native_canary_namespace"])]
    native_fallback: bool,
    /// With --native-fallback: the namespace of the canary pods, created with a server-side dry
    /// run (nothing is stored) every 5 s to show that the API server enforces the native
    /// objects: a plain pod must come back with its pool, and the pods poolguard refuses (a
    /// foreign image, another pool) must be refused by its ValidatingAdmissionPolicies. It must
    /// carry a pool label and be selected by the native bindings but not by the pod webhooks
    /// (the chart makes one); this replica needs `create pods` there and `get` on it.
    #[arg(long, value_name = "NAMESPACE", requires = "native_fallback")]
    native_canary_namespace: Option<String>,
    /// With --native-fallback: the plain canary pod's image, one the config's policies admit in
    /// the canary namespace (it never runs: the pods are dry runs)
    #[arg(
        long,
        value_name = "IMAGE",
        default_value = "registry.k8s.io/pause:3.10",
        requires = "native_fallback"
    )]
    native_canary_image: String,
    /// With --native-apply: the ValidatingWebhookConfiguration that owns the native objects
    /// (ownerReferences): the garbage collector deletes them with it, so uninstalling the
    /// release (the chart passes its own) leaves none. It must exist: nothing is written while
    /// it does not
    #[arg(long, value_name = "NAME", requires = "native_apply")]
    native_owner: Option<String>,
}

/// What the audit arguments ask for: the audit (with the rollout state it writes), or, with the
/// audit off, the rollout state to follow.
struct AuditPlan {
    audit: Option<crate::audit::schedule::Settings>,
    follow: Option<crate::rollout::sync::Follow>,
}

impl ServeAuditArgs {
    fn settings(self) -> Result<AuditPlan> {
        if self.audit_interval.is_zero() {
            if self.native_apply {
                anyhow::bail!("--native-apply needs the audit's leader election, which --audit-interval 0 turns off");
            }
            let follow = self
                .rollout_configmap
                .map(|name| crate::rollout::sync::Follow {
                    at: crate::rollout::store::Location {
                        namespace: self.lease_namespace,
                        name,
                    },
                    identity: self
                        .lease_identity
                        .unwrap_or_else(crate::audit::leader::default_identity),
                });
            return Ok(AuditPlan {
                audit: None,
                follow,
            });
        }
        if self.audit_max_results_per_report == 0 || self.audit_page_size == 0 {
            anyhow::bail!("--max-results-per-report and --audit-page-size must be at least 1");
        }
        if self.lease_duration < std::time::Duration::from_secs(2) {
            anyhow::bail!("--lease-duration must be at least 2s");
        }
        let audit = Some(crate::audit::schedule::Settings {
            interval: self.audit_interval,
            scan: crate::audit::scan::ScanOptions {
                namespace_selector: self.audit_namespace_selector,
                page_size: self.audit_page_size,
                // Set from --nodepools and --instance-types-file where the audit starts.
                nodepools: false,
                catalog: None,
            },
            report_api: self.audit_report_api.into(),
            max_results: self.audit_max_results_per_report,
            rollouts: crate::rollout::store::Location {
                namespace: self.lease_namespace.clone(),
                name: self
                    .rollout_configmap
                    .unwrap_or_else(|| "poolguard-rollouts".to_string()),
            },
            native_fallback: self
                .native_canary_namespace
                .filter(|_| self.native_fallback)
                .map(
                    |namespace| crate::cluster::webhook_registration::CanarySettings {
                        namespace,
                        image: self.native_canary_image,
                    },
                ),
            native_owner: self.native_owner,
            native: self
                .native_apply
                .then_some(poolguard_core::native::Options {
                    excluded_namespaces: self.native_excluded_namespaces,
                    require_namespace_label: self.native_require_namespace_label,
                    namespace_match_labels: self
                        .native_namespace_match_labels
                        .into_iter()
                        .collect(),
                }),
            lease: crate::audit::leader::LeaseSettings {
                name: self.lease_name,
                namespace: self.lease_namespace,
                identity: self
                    .lease_identity
                    .unwrap_or_else(crate::audit::leader::default_identity),
                duration: self.lease_duration,
            },
        });
        Ok(AuditPlan {
            audit,
            follow: None,
        })
    }
}

impl From<ReportApiArg> for ReportApi {
    fn from(arg: ReportApiArg) -> ReportApi {
        match arg {
            ReportApiArg::Policyreport => ReportApi::PolicyReport,
            ReportApiArg::Openreports => ReportApi::OpenReports,
        }
    }
}

/// What clients can make `serve` hold (defaults in brackets).
#[derive(Args)]
struct LimitArgs {
    /// Largest AdmissionReview accepted, in bytes; larger ones get 413 (counted and logged)
    /// [default: 24 MiB: the UPDATE review of any object the API server can store fits]
    #[arg(long, value_name = "BYTES", value_parser = size)]
    max_body_bytes: Option<usize>,
    /// Bytes of request bodies all requests may hold at once; past it 503 with Retry-After
    /// [default: 32 MiB]
    #[arg(long, value_name = "BYTES", value_parser = size)]
    body_budget_bytes: Option<usize>,
    /// Bytes all requests' parsed reviews may take at once (estimated before parsing, up to
    /// about 30 times a body's size); a request waits for its share until its deadline, then
    /// gets 503 with Retry-After; at least 48 MiB (the most one review may take) [default: 64 MiB]
    #[arg(long, value_name = "BYTES", value_parser = size)]
    parse_budget_bytes: Option<usize>,
    /// Share of the body and parse budgets the requests of one client address may hold at
    /// once, in percent, never less than one largest request; past it 429 with Retry-After
    /// [default: 50]
    #[arg(long, value_name = "PERCENT", value_parser = clap::value_parser!(u8).range(1..=100))]
    peer_share_percent: Option<u8>,
    /// Slowest a request body may arrive, in bytes per second: after two seconds, every second
    /// must bring this many bytes or the body's end, else 408; 0 sets no minimum [default: 65536]
    #[arg(long, value_name = "BYTES", value_parser = size)]
    body_min_bytes_per_second: Option<usize>,
    /// Seconds a request body gets to arrive in full; after it 408 [default: 10]
    #[arg(long, value_name = "SECONDS")]
    body_timeout_seconds: Option<u64>,
    /// Policy evaluations running at once [default: the CPUs poolguard may use, a cgroup CPU
    /// limit counted]
    #[arg(long, value_name = "N")]
    max_evaluations: Option<usize>,
    /// Validating requests waiting for an evaluation; beyond it evaluation.onError decides
    /// [default: 16 per evaluation slot, at least 64]
    #[arg(long, value_name = "N")]
    max_queued_evaluations: Option<usize>,
    /// Open HTTPS connections; at the cap a new one closes an idle connection of the client
    /// address holding more than every other address (one that never completed a request
    /// first, else the idlest), or waits while there is none or all of its connections have a
    /// request in flight [default: 64]
    #[arg(long, value_name = "N")]
    max_connections: Option<usize>,
    /// Seconds a connection with no request in flight stays open; keep it above the API
    /// server's 90 s idle-connection time, so the API server closes idle connections [default: 120]
    #[arg(long, value_name = "SECONDS")]
    idle_timeout_seconds: Option<u64>,
    /// HTTP/2 streams one connection may have open [default: 100]
    #[arg(long, value_name = "N")]
    http2_max_concurrent_streams: Option<u32>,
}

impl LimitArgs {
    fn limits(&self) -> Result<serve::Limits> {
        let d = serve::Limits::default();
        let secs = std::time::Duration::from_secs;
        let limits = serve::Limits {
            max_body_bytes: self.max_body_bytes.unwrap_or(d.max_body_bytes),
            body_budget_bytes: self.body_budget_bytes.unwrap_or(d.body_budget_bytes),
            peer_share_percent: self
                .peer_share_percent
                .map_or(d.peer_share_percent, usize::from),
            body_min_bytes_per_second: self
                .body_min_bytes_per_second
                .unwrap_or(d.body_min_bytes_per_second),
            parse_budget_bytes: self.parse_budget_bytes.unwrap_or(d.parse_budget_bytes),
            body_timeout: self.body_timeout_seconds.map_or(d.body_timeout, secs),
            max_evaluations: self.max_evaluations.unwrap_or(d.max_evaluations),
            in_place_evaluations: d.in_place_evaluations,
            max_queued_evaluations: self
                .max_queued_evaluations
                .unwrap_or(d.max_queued_evaluations),
            max_connections: self.max_connections.unwrap_or(d.max_connections),
            idle_timeout: self.idle_timeout_seconds.map_or(d.idle_timeout, secs),
            header_timeout: d.header_timeout,
            http2_max_concurrent_streams: self
                .http2_max_concurrent_streams
                .unwrap_or(d.http2_max_concurrent_streams),
        };
        for (flag, value) in [
            ("--max-body-bytes", limits.max_body_bytes),
            ("--max-evaluations", limits.max_evaluations),
            ("--max-connections", limits.max_connections),
            (
                "--http2-max-concurrent-streams",
                limits.http2_max_concurrent_streams as usize,
            ),
            (
                "--body-timeout-seconds",
                limits.body_timeout.as_secs() as usize,
            ),
            (
                "--idle-timeout-seconds",
                limits.idle_timeout.as_secs() as usize,
            ),
        ] {
            if value == 0 {
                anyhow::bail!("{flag} must be at least 1");
            }
        }
        if limits.body_budget_bytes < limits.max_body_bytes {
            anyhow::bail!(
                "--body-budget-bytes ({}) must be at least --max-body-bytes ({})",
                limits.body_budget_bytes,
                limits.max_body_bytes
            );
        }
        if limits.parse_budget_bytes < poolguard_core::admission::MAX_PARSED_BYTES {
            anyhow::bail!(
                "--parse-budget-bytes ({}) must be at least {} (the most one review's parse may take)",
                limits.parse_budget_bytes,
                poolguard_core::admission::MAX_PARSED_BYTES
            );
        }
        Ok(limits)
    }
}

/// The webhook to decide with, as the command line names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum WebhookArg {
    /// The mutating webhook: the pool's nodeSelector.
    Mutate,
    /// The validating webhook: placement and policies.
    Validate,
    /// What admission does: mutate, then validate the object as mutated (manifests only).
    Admission,
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

#[derive(Subcommand)]
enum PolicyCommand {
    /// Run every `test_*` rule in the `*_test.rego` files; exits non-zero on any failure.
    Test {
        /// Directory of policies and their tests. Default: ./policies.
        #[arg(long, value_name = "DIR", default_value = DEFAULT_POLICIES_DIR, hide_default_value = true)]
        policies_dir: PathBuf,
    },
}

#[derive(Args)]
struct CertsArgs {
    /// Directory to write ca.crt, tls.crt and tls.key into (created if missing).
    #[arg(long, value_name = "DIR")]
    out_dir: PathBuf,
    /// DNS subject alternative name of the serving certificate (repeatable).
    #[arg(long = "dns-name", value_name = "NAME")]
    dns_names: Vec<String>,
    /// IP subject alternative name of the serving certificate (repeatable).
    #[arg(long = "ip", value_name = "ADDR")]
    ips: Vec<IpAddr>,
    /// Validity of the serving certificate in days (a new CA gets ten times as long).
    #[arg(long, default_value_t = 365)]
    days: u32,
    /// Sign with this existing CA certificate (PEM) instead of making a new CA; ca.crt in
    /// --out-dir is a copy of it, so a caBundle made from it stays valid (needs --ca-key).
    #[arg(long, value_name = "FILE", requires = "ca_key")]
    ca_cert: Option<PathBuf>,
    /// The private key (PEM) of --ca-cert.
    #[arg(long, value_name = "FILE", requires = "ca_cert")]
    ca_key: Option<PathBuf>,
}

/// Parses the command line and runs the command; errors are one line on stderr and exit 2.
/// Output cut off by its reader (`poolguard ... | head`) ends quietly, with the status a shell
/// gives a command SIGPIPE stopped.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli.command) {
        Ok(code) => code,
        Err(e) if is_broken_pipe(&e) => ExitCode::from(BROKEN_PIPE_STATUS),
        Err(e) => {
            eprintln!("poolguard: error: {e:#}");
            ExitCode::from(2)
        }
    }
}

/// 128 + SIGPIPE (13).
const BROKEN_PIPE_STATUS: u8 = 141;

/// Whether `e` comes from writing to a pipe whose reader has gone.
fn is_broken_pipe(e: &anyhow::Error) -> bool {
    use std::io::ErrorKind::BrokenPipe;
    e.chain().any(|cause| {
        cause
            .downcast_ref::<std::io::Error>()
            .is_some_and(|e| e.kind() == BrokenPipe)
            || cause
                .downcast_ref::<serde_json::Error>()
                .and_then(serde_json::Error::io_error_kind)
                == Some(BrokenPipe)
    })
}

/// Warns on stderr about the default directories that are not there.
fn warn_missing_defaults(sources: &Sources, rules: &poolguard_core::ruleset::RuleSet) {
    for warning in sources.missing_defaults(rules) {
        eprintln!("poolguard: warning: {warning}");
    }
}

fn init_logging(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    // Colour only for a person at a terminal: a file or a pipe gets plain text.
    let colour = std::io::IsTerminal::is_terminal(&std::io::stderr())
        && std::env::var_os("NO_COLOR").is_none();
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(colour)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
}

fn serve(args: ServeArgs) -> Result<ExitCode> {
    init_logging(args.log_format);
    let _ = rustls::crypto::ring::default_provider().install_default();
    let loopback = |port: u16| SocketAddr::from(([127, 0, 0, 1], port));
    let any = |port: u16| SocketAddr::from(([0, 0, 0, 0], port));
    let default = |port| if args.dev { loopback(port) } else { any(port) };
    let tls = match (args.tls_cert_file, args.tls_key_file) {
        (Some(cert), Some(key)) => Some(TlsFiles {
            cert,
            key,
            client_ca: args.client_ca_file.clone(),
            client_names: args.client_names.clone(),
        }),
        _ => None,
    };
    if args.client_ca_file.is_some() && args.client_names.is_empty() {
        anyhow::bail!(
            "--client-ca-file needs --client-name: the name (subject common name or DNS name) of the API server's client certificate; the CA may sign other clients too (on kubeadm, every kubelet's)"
        );
    }
    if args.certs.manage_certs && tls.is_some() {
        anyhow::bail!("--manage-certs and --tls-cert-file are two sources of the serving certificate: give one");
    }
    let manage_certs = args
        .certs
        .managed(args.client_ca_file.clone(), args.client_names.clone())?;
    let plan = args.audit.settings()?;
    let options = serve::Options {
        addr: args.addr.unwrap_or_else(|| default(8443)),
        metrics_addr: args.metrics_addr.unwrap_or_else(|| default(9090)),
        tls,
        sources: args.rules.sources(),
        namespaces_file: args.namespaces_file,
        nodes_file: args.nodes_file,
        nodepools: args.sources.nodepools,
        instance_types_file: args.sources.instance_types_file,
        policy_exceptions: args.sources.policy_exceptions,
        deadline: std::time::Duration::from_millis(args.deadline_ms.max(1)),
        drain: std::time::Duration::from_secs(args.drain_seconds),
        dev: args.dev,
        kubeconfig: args.kubeconfig,
        limits: args.limits.limits()?,
        manage_certs,
        register_webhooks: args.register_webhooks,
        audit: plan.audit,
        rollout_follow: plan.follow,
        gatekeeper_from_cluster: args.gatekeeper_from_cluster,
        admission: true,
    };
    let runtime = tokio::runtime::Runtime::new().context("starting the async runtime")?;
    runtime.block_on(serve::run(options))?;
    Ok(ExitCode::SUCCESS)
}

fn controller(args: ControllerArgs) -> Result<ExitCode> {
    init_logging(args.log_format);
    let _ = rustls::crypto::ring::default_provider().install_default();
    let plan = args.audit.settings()?;
    if plan.follow.is_some() {
        anyhow::bail!("--rollout-configmap with --audit-interval 0: a controller without the audit has no rollout state to write, and admits nothing to count");
    }
    if plan.audit.is_none() && !args.certs.manage_certs && args.register_webhooks.is_none() {
        anyhow::bail!("the controller has nothing to do: give --manage-certs, --register-webhooks, or an --audit-interval other than 0");
    }
    let manage_certs = args.certs.managed(None, Vec::new())?;
    let options = serve::Options {
        // Never bound: a controller has no admission listener.
        addr: args.metrics_addr,
        metrics_addr: args.metrics_addr,
        tls: None,
        sources: args.rules.sources(),
        namespaces_file: None,
        nodes_file: None,
        nodepools: args.sources.nodepools,
        instance_types_file: args.sources.instance_types_file,
        policy_exceptions: args.sources.policy_exceptions,
        deadline: std::time::Duration::from_millis(4000),
        drain: std::time::Duration::ZERO,
        dev: false,
        kubeconfig: args.kubeconfig,
        limits: serve::Limits::default(),
        manage_certs,
        register_webhooks: args.register_webhooks,
        audit: plan.audit,
        rollout_follow: None,
        gatekeeper_from_cluster: args.gatekeeper_from_cluster,
        admission: false,
    };
    let runtime = tokio::runtime::Runtime::new().context("starting the async runtime")?;
    runtime.block_on(serve::run(options))?;
    Ok(ExitCode::SUCCESS)
}

/// One listing pass of the background audit against the cluster, without writing reports: each
/// namespace's results are printed as soon as they are in, then dropped.
fn cluster_audit<O: std::io::Write, E: std::io::Write>(
    kubeconfig: Option<&std::path::Path>,
    namespace_selector: String,
    rules: poolguard_core::ruleset::RuleSet,
    printer: &mut audit::Printer<'_, O, E>,
) -> Result<()> {
    use futures::StreamExt;
    let _ = rustls::crypto::ring::default_provider().install_default();
    let runtime = tokio::runtime::Runtime::new().context("starting the async runtime")?;
    runtime.block_on(async {
        let client = serve::kube_client(
            kubeconfig,
            "give --kubeconfig, or --manifests DIR with --namespaces-file to audit files instead",
        )
        .await?;
        let options = crate::audit::scan::ScanOptions {
            namespace_selector,
            page_size: 500,
            nodepools: false,
            catalog: None,
        };
        let facts =
            std::sync::Arc::new(crate::audit::scan::facts(&client, &options, &rules).await?);
        let rules = std::sync::Arc::new(rules);
        let source = crate::audit::scan::ApiSource(&client);
        let namespaces = crate::audit::scan::namespaces(
            &source,
            facts.clone(),
            rules.clone(),
            options.page_size,
        );
        let mut namespaces = std::pin::pin!(namespaces);
        while let Some(namespace) = namespaces.next().await {
            printer.results(&namespace?.results)?;
        }
        // The cluster-scoped kinds the constraints name (a Namespace).
        if !facts.cluster_kinds.is_empty() {
            let cluster =
                crate::audit::scan::cluster(&source, facts, rules, options.page_size).await?;
            printer.cluster_results(&cluster.results)?;
        }
        Ok(())
    })
}

/// `rules` with the PolicyExceptions of `dir`, when given (a warning on stderr for each that
/// matches nothing).
fn with_exceptions(
    rules: poolguard_core::ruleset::RuleSet,
    dir: Option<&std::path::Path>,
) -> Result<poolguard_core::ruleset::RuleSet> {
    let Some(dir) = dir else {
        return Ok(rules);
    };
    let now = crate::wall_clock::unix_now();
    let (exceptions, warnings) = sources::load_exceptions(dir, &rules, now)?;
    for warning in warnings {
        eprintln!("poolguard: warning: {warning}");
    }
    Ok(rules.with_exceptions(std::sync::Arc::new(exceptions)))
}

fn run(command: Command) -> Result<ExitCode> {
    match command {
        Command::Serve(args) => serve(*args),
        Command::Controller(args) => controller(*args),
        Command::Eval(args) => {
            let input = match args.input {
                Some(input) => input,
                None if std::io::stdin().is_terminal() => anyhow::bail!(
                    "no input: give the manifest or AdmissionReview FILE, or `-` to read standard input (usage: poolguard eval --namespaces-file FILE --webhook mutate|validate|admission FILE|-)"
                ),
                None => "-".to_string(),
            };
            let sources = args.rules.sources();
            let rules = with_exceptions(sources.load()?, args.exceptions_dir.as_deref())?;
            warn_missing_defaults(&sources, &rules);
            let namespaces = sources::load_namespaces(&args.namespaces_file)?;
            // Without a nodes file there are no pools to choose from.
            let pools = match &args.nodes_file {
                Some(path) => {
                    let catalog = args.instance_types_file.as_deref();
                    let (pools, problems) =
                        sources::load_inventory(path, catalog)?.pools(rules.config());
                    for problem in problems {
                        eprintln!("poolguard: warning: {problem}");
                    }
                    pools
                }
                None => PoolSet::default(),
            };
            let text = sources::read_input(&input)?;
            let origin = if input == "-" { "<stdin>" } else { &input };
            let mut stdout = std::io::stdout().lock();
            let cluster = (&namespaces, Some(&pools));
            let namespace = args.namespace.as_deref();
            let webhook = match args.webhook {
                WebhookArg::Mutate => Some(Webhook::Mutate),
                WebhookArg::Validate => Some(Webhook::Validate),
                WebhookArg::Admission => None,
            };
            let allowed = match webhook {
                Some(webhook) => eval::run(
                    webhook,
                    &text,
                    origin,
                    namespace,
                    cluster,
                    &rules,
                    &mut stdout,
                )?,
                None => eval::admission(&text, origin, namespace, cluster, &rules, &mut stdout)?,
            };
            Ok(if allowed {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            })
        }
        Command::Audit(args) => {
            let sources = args.rules.sources();
            let rules = with_exceptions(sources.load()?, args.exceptions_dir.as_deref())?;
            warn_missing_defaults(&sources, &rules);
            let reports = audit::ReportOptions {
                api: args.report_api.into(),
                max_results: args.max_results_per_report,
                timestamp: crate::audit::schedule::timestamp(std::time::SystemTime::now()),
            };
            // Buffered: stdout is line-buffered, and pretty JSON of 40,000 results is 700,000 lines.
            let mut out = std::io::BufWriter::new(std::io::stdout().lock());
            let mut err = std::io::stderr().lock();
            let mut printer = audit::Printer::new(args.output, &reports, &mut out, &mut err);
            match (&args.manifests, &args.namespaces_file) {
                (Some(manifests), Some(namespaces_file)) => {
                    let namespaces = sources::load_namespaces(namespaces_file)?;
                    let catalog = args.instance_types_file.as_deref();
                    let inventory = match &args.nodes_file {
                        Some(path) => Some(sources::load_inventory(path, catalog)?),
                        None => None,
                    };
                    let nodes: Option<poolguard_core::namespaces::NodeLabels> =
                        inventory.as_ref().map(|inventory| {
                            inventory
                                .nodes
                                .iter()
                                .map(|n| (n.name.clone(), n.labels.clone()))
                                .collect()
                        });
                    let pools = inventory.map(|inventory| {
                        let (pools, problems) = inventory.pools(rules.config());
                        for problem in problems {
                            eprintln!("poolguard: warning: {problem}");
                        }
                        pools
                    });
                    let inputs = audit::Inputs {
                        manifests,
                        namespaces: &namespaces,
                        nodes: nodes.as_ref(),
                        pools: pools.as_ref(),
                    };
                    printer.results(&audit::manifests(&inputs, &rules)?)?;
                }
                _ => cluster_audit(
                    args.kubeconfig.as_deref(),
                    args.namespace_selector,
                    rules,
                    &mut printer,
                )?,
            };
            let clean = printer.finish()?;
            std::io::Write::flush(&mut out).context("writing the results")?;
            Ok(if clean {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            })
        }
        Command::Rollout(args) => {
            let _ = rustls::crypto::ring::default_provider().install_default();
            let runtime = tokio::runtime::Runtime::new().context("starting the async runtime")?;
            runtime.block_on(async {
                let client =
                    serve::kube_client(args.kubeconfig.as_deref(), "give --kubeconfig").await?;
                let at = crate::rollout::store::Location {
                    namespace: args
                        .namespace
                        .clone()
                        .unwrap_or_else(|| client.default_namespace().to_string()),
                    name: args.configmap.clone(),
                };
                use poolguard_core::rollout::Command as C;
                let (policy, command) = match args.action {
                    RolloutAction::Status { json } => {
                        rollout::status(&client, &at, json, &mut std::io::stdout().lock()).await?;
                        return Ok(ExitCode::SUCCESS);
                    }
                    RolloutAction::Approve { policy, group } => (policy, C::Approve(group)),
                    RolloutAction::Pause { policy } => (policy, C::Pause),
                    RolloutAction::Resume { policy } => (policy, C::Resume),
                };
                rollout::queue(&client, &at, &policy, command.clone()).await?;
                eprintln!("queued {command:?} for policy {policy}; the audit's leader applies it at its next step");
                Ok(ExitCode::SUCCESS)
            })
        }
        Command::Policy(PolicyCommand::Test { policies_dir }) => {
            let (templates, tests) = sources::load_templates(&policies_dir)?;
            if tests.is_empty() {
                anyhow::bail!("{}: no *_test.rego files", policies_dir.display());
            }
            let results = rego_tests::run(&templates, &tests)?;
            let failed = results.iter().filter(|r| r.failure.is_some()).count();
            // Not println!, which panics when the reader has gone.
            let mut out = std::io::stdout().lock();
            for r in &results {
                match &r.failure {
                    None => writeln!(out, "PASS {}", r.name)?,
                    Some(why) => writeln!(out, "FAIL {}: {why}", r.name)?,
                }
            }
            writeln!(out, "{} passed, {failed} failed", results.len() - failed)?;
            Ok(if failed == 0 && !results.is_empty() {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            })
        }
        Command::Verify {
            suites,
            verbose,
            exceptions_dir,
        } => {
            let now = crate::wall_clock::unix_now();
            let mut excepting = poolguard_core::gator::suite::Excepting {
                exceptions: Vec::new(),
                now: Some(now),
            };
            if let Some(dir) = &exceptions_dir {
                for (at, exception) in sources::read_exceptions(dir)? {
                    if let Some(warning) = sources::expired(&at, &exception, now) {
                        eprintln!("poolguard: warning: {warning}");
                    }
                    excepting.exceptions.push(exception);
                }
            }
            verify::run(&suites, verbose, &excepting, &mut std::io::stdout().lock())
        }
        Command::Native(args) => {
            let options = poolguard_core::native::Options {
                excluded_namespaces: args.excluded_namespaces,
                require_namespace_label: args.require_namespace_label,
                namespace_match_labels: args.namespace_match_labels.into_iter().collect(),
            };
            if !args.apply {
                return native::print(
                    args.rules.sources(),
                    &options,
                    &mut std::io::stdout().lock(),
                );
            }
            let runtime = tokio::runtime::Runtime::new().context("starting the async runtime")?;
            runtime.block_on(native::apply(
                args.rules.sources(),
                &options,
                args.kubeconfig.as_deref(),
            ))
        }
        Command::Config(ConfigCommand::Check(rules)) => {
            let sources = rules.sources();
            let (loaded, lints) = sources.load_with_lints()?;
            for lint in lints.iter().chain(&sources.missing_defaults(&loaded)) {
                eprintln!("poolguard: warning: {lint}");
            }
            println!(
                "config ok: {} policies ({}), {} placement policies",
                loaded.policies().len(),
                loaded.policies().names().collect::<Vec<_>>().join(", "),
                loaded.placement().names().count(),
            );
            Ok(ExitCode::SUCCESS)
        }
        Command::Certs(args) => {
            let (bundle, ca) = match (&args.ca_cert, &args.ca_key) {
                (Some(cert), Some(key)) => (
                    certs::serving_bundle_from(
                        &certs::Authority::from_files(cert, key)?,
                        &args.dns_names,
                        &args.ips,
                        args.days,
                    )?,
                    format!("signed by {}", cert.display()),
                ),
                _ => (
                    certs::serving_bundle(&args.dns_names, &args.ips, args.days)?,
                    "signed by a new CA".to_string(),
                ),
            };
            bundle
                .write(&args.out_dir)
                .with_context(|| "writing certificates")?;
            eprintln!(
                "wrote {}/ca.crt, tls.crt, tls.key (serving certificate valid {} days, {ca})",
                args.out_dir.display(),
                args.days
            );
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// A `KEY=VALUE` label requirement of the command line.
/// A size in bytes as the help writes them: `25165824`, `24MiB` or `24 MiB` (B, KiB, MiB,
/// GiB; KB, MB and GB are powers of 1000).
fn size(text: &str) -> std::result::Result<usize, String> {
    let text = text.trim();
    let digits = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(digits);
    let number: usize = number
        .parse()
        .map_err(|_| format!("expected a size such as 24MiB or 25165824, got {text:?}"))?;
    let factor: usize = match unit.trim() {
        "" | "B" => 1,
        "KiB" => 1 << 10,
        "MiB" => 1 << 20,
        "GiB" => 1 << 30,
        "KB" | "kB" => 1_000,
        "MB" => 1_000_000,
        "GB" => 1_000_000_000,
        other => {
            return Err(format!(
                "unknown unit {other:?} in {text:?}: write B, KiB, MiB or GiB (or KB, MB, GB)"
            ))
        }
    };
    number
        .checked_mul(factor)
        .ok_or_else(|| format!("{text:?} is too large"))
}

fn key_value(text: &str) -> std::result::Result<(String, String), String> {
    match text.split_once('=') {
        Some((key, value)) if !key.is_empty() => Ok((key.to_string(), value.to_string())),
        _ => Err(format!("expected KEY=VALUE, got {text:?}")),
    }
}
