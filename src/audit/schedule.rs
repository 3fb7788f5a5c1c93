//! `serve`'s audit loop: while this replica holds the lease, a pass at once and then every
//! interval; each pass lists the cluster, builds the reports and writes them. A pass that fails
//! leaves the reports of the last good one in place and is retried at the next interval.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::Result;
use futures::StreamExt;
use kube::Client;
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::leader::{self, LeaseSettings};
use super::report_writer::{self, Written};
use super::scan::{self, Scan, ScanOptions};
use crate::cluster::native_objects;
use crate::rollout::controller::{Controller, STEP_EVERY};
use crate::sources::Rules;
use crate::telemetry::metrics::Metrics;
use crate::wall_clock::unix_now;
use poolguard_core::audit::Verdict;
use poolguard_core::report::{self, ReportApi, Timestamp};
use poolguard_core::ruleset::RuleSet;

/// How the audit runs.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Time between passes (from the end of one to the start of the next).
    pub interval: Duration,
    pub scan: ScanOptions,
    pub report_api: ReportApi,
    /// Results listed per report (the rest counted in an annotation).
    pub max_results: usize,
    pub lease: LeaseSettings,
    /// The rollout ConfigMap: the leader steps progressive enforcement after each pass.
    pub rollouts: crate::rollout::store::Location,
    /// `Some`: the leader also writes the native admission objects these options generate
    /// (`serve --native-apply`).
    pub native: Option<poolguard_core::native::Options>,
    /// `--native-owner`: the ValidatingWebhookConfiguration that owns the native objects.
    pub native_owner: Option<String>,
    /// `--native-fallback`: the leader registers the webhooks and leaves the pod and workload
    /// webhooks out while the native objects decide alone, as its canary pods show.
    pub native_fallback: Option<crate::cluster::webhook_registration::CanarySettings>,
}

/// What one pass did.
#[derive(Debug)]
pub struct Pass {
    pub scan: Scan,
    pub written: Written,
    pub seconds: f64,
}

/// One pass: list, audit and write the reports a namespace at a time, then the cluster report
/// of the cluster-scoped kinds the constraints name, then delete the stale ones. `now` stamps the results. Each namespace's results are dropped once its report is
/// written; the pass keeps their counts.
pub async fn pass(
    client: &Client,
    settings: &Settings,
    rules: Arc<RuleSet>,
    now: SystemTime,
) -> Result<Pass> {
    let started = Instant::now();
    let facts = Arc::new(scan::facts(client, &settings.scan, &rules).await?);
    let mut scan = Scan::over(&facts);
    let mut written = Written::default();
    let source = scan::ApiSource(client);
    let audited = scan::namespaces(
        &source,
        facts.clone(),
        rules.clone(),
        settings.scan.page_size,
    );
    let mut audited = std::pin::pin!(audited);
    while let Some(namespace) = audited.next().await {
        write(client, settings, now, namespace?, &mut scan, &mut written).await?;
    }
    // The cluster-scoped kinds the constraints name: one cluster report.
    if !facts.cluster_kinds.is_empty() {
        let cluster = scan::cluster(&source, facts, rules, settings.scan.page_size).await?;
        write(client, settings, now, cluster, &mut scan, &mut written).await?;
    }
    report_writer::delete_stale(client, settings.report_api, &mut written).await?;
    Ok(Pass {
        scan,
        written,
        seconds: started.elapsed().as_secs_f64(),
    })
}

/// Counts one namespace's results (or the cluster-scoped objects') and writes their report,
/// dropping the results first.
async fn write(
    client: &Client,
    settings: &Settings,
    now: SystemTime,
    audited: scan::Audited,
    scan: &mut Scan,
    written: &mut Written,
) -> Result<()> {
    scan.add(&audited);
    let (api, at, max) = (settings.report_api, timestamp(now), settings.max_results);
    let reports = match audited.namespace.as_str() {
        "" => report::cluster_report(&audited.results, api, at, max)
            .into_iter()
            .collect(),
        _ => report::reports(&audited.results, api, at, max),
    };
    drop(audited);
    for report in &reports {
        report_writer::apply(client, api, report, written).await?;
    }
    Ok(())
}

/// A point in time as reports spell it.
pub fn timestamp(at: SystemTime) -> Timestamp {
    let since = at.duration_since(UNIX_EPOCH).unwrap_or_default();
    Timestamp {
        seconds: i64::try_from(since.as_secs()).unwrap_or(i64::MAX),
        nanos: i32::try_from(since.subsec_nanos()).unwrap_or(0),
    }
}

/// Competes for the lease and audits while leading, until `shutdown`; then releases the lease.
pub async fn run(
    client: Client,
    settings: Settings,
    rules: Rules,
    metrics: Arc<Metrics>,
    leads: watch::Sender<bool>,
    shutdown: CancellationToken,
) {
    metrics
        .audit_interval_seconds
        .set(i64::try_from(settings.interval.as_secs()).unwrap_or(i64::MAX));
    let mut retry = Duration::from_secs(1);
    let leadership = loop {
        match leader::compete(client.clone(), &settings.lease).await {
            Ok(leadership) => break leadership,
            Err(e) => {
                tracing::error!(error = %format!("{e:#}"), retry_seconds = retry.as_secs(), "the audit cannot use its lease; retrying");
                tokio::select! {
                    () = shutdown.cancelled() => return,
                    () = tokio::time::sleep(retry) => {}
                }
                retry = (retry * 2).min(Duration::from_secs(60));
            }
        }
    };
    let mut leading = leadership.leading;
    tracing::info!(lease = %format!("{}/{}", settings.lease.namespace, settings.lease.name), identity = %settings.lease.identity, interval_seconds = settings.interval.as_secs(), "audit: competing for the lease");
    lead_while_held(
        &client,
        &settings,
        &rules,
        &metrics,
        &leads,
        &shutdown,
        &mut leading,
    )
    .await;
    say_leading(metrics.as_ref(), &leads, false);
    // Closing the channel makes the lease task release the lease, so another replica takes
    // over now rather than after the lease duration.
    drop(leading);
    match tokio::time::timeout(Duration::from_secs(5), leadership.task).await {
        Ok(Ok(Ok(_))) => tracing::info!("audit: lease released"),
        Ok(Ok(Err(e))) => {
            tracing::warn!(error = %e, "audit: releasing the lease failed; it expires on its own")
        }
        Ok(Err(e)) => tracing::warn!(error = %e, "audit: the lease task failed"),
        Err(_) => tracing::warn!("audit: releasing the lease timed out; it expires on its own"),
    }
}

async fn lead_while_held(
    client: &Client,
    settings: &Settings,
    rules: &Rules,
    metrics: &Arc<Metrics>,
    leads: &watch::Sender<bool>,
    shutdown: &CancellationToken,
    leading: &mut watch::Receiver<bool>,
) {
    let mut native = settings
        .native
        .clone()
        .map(|options| native_objects::Writer::new(options, settings.native_owner.clone()));
    loop {
        tokio::select! {
            () = shutdown.cancelled() => return,
            held = leading.wait_for(|l| *l) => if held.is_err() {
                tracing::error!("audit: the lease task ended; no more audits from this replica");
                return;
            },
        }
        say_leading(metrics, leads, true);
        tracing::info!("audit: this replica leads");
        let mut controller = Controller::new(
            client.clone(),
            settings.rollouts.clone(),
            &settings.lease.identity,
            metrics.clone(),
        );
        if let Some(native) = &mut native {
            native.reset();
        }
        loop {
            let current = rules();
            if let Some(native) = &mut native {
                native.tick(client, &current).await;
            }
            let work = pass(client, settings, current.clone(), SystemTime::now());
            let outcome = tokio::select! {
                () = shutdown.cancelled() => return,
                lost = leading.wait_for(|l| !*l) => {
                    // Lost the lease (or the lease task ended) mid-pass: stop writing.
                    let _ = lost;
                    None
                }
                outcome = work => Some(outcome),
            };
            match outcome {
                None => break,
                Some(Ok(pass)) => {
                    record(metrics, &pass);
                    controller.observe(&pass.scan.tally);
                }
                Some(Err(e)) => {
                    metrics.audit_run(false);
                    tracing::error!(error = %format!("{e:#}"), "audit pass failed; the last reports stay until the next pass");
                }
            }
            // Rollouts are stepped after the pass and every few seconds until the next one.
            let next_pass = Instant::now() + settings.interval;
            loop {
                let rules = rules();
                if let Err(e) = controller.step(&rules, unix_now()).await {
                    tracing::warn!(error = %format!("{e:#}"), "rollout step failed; retrying");
                }
                // The native objects follow config, policy and rollout changes within a step.
                if let Some(native) = &mut native {
                    native.tick(client, &rules).await;
                }
                let wake = (Instant::now() + STEP_EVERY).min(next_pass);
                tokio::select! {
                    () = shutdown.cancelled() => return,
                    _ = leading.wait_for(|l| !*l) => break,
                    () = tokio::time::sleep_until(wake) => {}
                }
                if Instant::now() >= next_pass || !*leading.borrow() {
                    break;
                }
            }
            if !*leading.borrow() {
                break;
            }
        }
        say_leading(metrics, leads, false);
        tracing::info!("audit: this replica no longer leads");
    }
}

/// Whether this replica leads, for the `audit_leader` gauge and for the webhook registration
/// (`--native-fallback`).
fn say_leading(metrics: &Metrics, leads: &watch::Sender<bool>, leading: bool) {
    metrics.audit_leader.set(i64::from(leading));
    leads.send_replace(leading);
}

fn record(metrics: &Metrics, pass: &Pass) {
    let finished = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs();
    metrics.audit_pass(
        &pass.scan.tally,
        &pass.scan.objects,
        pass.seconds,
        i64::try_from(finished).unwrap_or(i64::MAX),
    );
    let count = |v: Verdict| pass.scan.tally.count(v);
    let objects: usize = pass.scan.objects.iter().map(|(_, n)| n).sum();
    tracing::info!(
        objects,
        namespaces = pass.scan.namespaces,
        pass = count(Verdict::Pass),
        fail = count(Verdict::Fail),
        error = count(Verdict::Error),
        skip = count(Verdict::Skip),
        reports_written = pass.written.applied,
        reports_failed = pass.written.failed,
        reports_deleted = pass.written.deleted,
        seconds = pass.seconds,
        "audit pass done"
    );
}
