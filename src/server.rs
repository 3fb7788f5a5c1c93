//! The HTTPS webhook endpoints: AdmissionReview in, decision out, with limits, deadline,
//! metrics and logs. TLS through tokio-rustls; HTTP/1.1 and HTTP/2.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Result;
use arc_swap::ArcSwap;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use rustls::ServerConfig;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::admission::{self, Decision, Request};
use crate::config::OnError;
use crate::metrics::{InfringementLabels, Metrics, PolicyLabels, RequestLabels, WebhookLabels};
use crate::namespaces::Namespaces;
use crate::ruleset::RuleSet;
use crate::webhook::{decide, Webhook};

/// Largest AdmissionReview accepted; larger bodies get 413.
pub const MAX_BODY_BYTES: usize = 3 * 1024 * 1024;
/// Time a client gets to finish the TLS handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// What the handlers share.
pub struct App {
    /// Replaced whole on a config or policy reload.
    pub rules: ArcSwap<RuleSet>,
    pub namespaces: Namespaces,
    pub metrics: Arc<Metrics>,
    /// Per-request deadline; past it, `evaluation.onError` decides.
    pub deadline: Duration,
}

pub fn router(app: Arc<App>) -> Router {
    Router::new()
        .route(
            "/mutate",
            post(|s: State<Arc<App>>, b: Bytes| handle(s, Webhook::Mutate, b)),
        )
        .route(
            "/validate",
            post(|s: State<Arc<App>>, b: Bytes| handle(s, Webhook::Validate, b)),
        )
        .fallback(|| async {
            (
                StatusCode::NOT_FOUND,
                "not found: poolguard serves POST /mutate and POST /validate\n",
            )
        })
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .with_state(app)
}

/// Who and what a request is about, for logs and metrics.
struct Subject {
    uid: String,
    namespace: String,
    name: String,
    kind: String,
    operation: &'static str,
}

async fn handle(State(app): State<Arc<App>>, webhook: Webhook, body: Bytes) -> Response {
    let started = Instant::now();
    let review = match admission::parse_review(&body) {
        Ok(review) => review,
        Err(e) => return refuse_malformed(&app, webhook, &e),
    };
    let req = match Request::from_value(&review["request"]) {
        Ok(req) => req,
        Err(e) => return refuse_malformed(&app, webhook, &e),
    };
    let subject = Subject {
        uid: req.uid.to_string(),
        namespace: req.namespace.to_string(),
        name: req.object_name(),
        kind: req.kind.to_string(),
        operation: req.operation.as_str(),
    };
    let rules = app.rules.load_full();
    let decision = match lookup(&app, &subject.namespace).await {
        Err(e) => Decision::deny(
            500,
            format!(
                "cannot read the labels of namespace {:?}, so the request is refused: {e}",
                subject.namespace
            ),
        ),
        // Placement alone is decided right here; a thread hand-off would cost more than it.
        Ok(labels) if !webhook.runs_policies() => decide(
            webhook,
            &req,
            labels.as_ref(),
            &rules.config,
            &rules.policies,
        ),
        // Policies run on the blocking pool, so that a slow one holds up no other request and
        // the deadline can answer for it.
        Ok(labels) => {
            let task_rules = rules.clone();
            let task = tokio::task::spawn_blocking(move || {
                decide_review(webhook, &review, labels, &task_rules)
            });
            match tokio::time::timeout(app.deadline, task).await {
                Ok(Ok(decision)) => decision,
                Ok(Err(e)) => Decision::deny(500, format!("internal error while deciding: {e}")),
                Err(_) => past_deadline(&rules, app.deadline),
            }
        }
    };
    record(&app, webhook, &subject, &decision, started);
    Json(admission::respond(&subject.uid, &decision)).into_response()
}

/// 400 for a body that is not an AdmissionReview poolguard can read, counted and logged.
fn refuse_malformed(app: &App, webhook: Webhook, reason: &dyn std::fmt::Display) -> Response {
    count(&app.metrics, webhook, "", "", "invalid");
    tracing::warn!(webhook = webhook.as_str(), reason = %reason, "refused a malformed AdmissionReview");
    (
        StatusCode::BAD_REQUEST,
        format!("bad AdmissionReview: {reason}\n"),
    )
        .into_response()
}

/// Decides on the blocking pool, which needs the review owned: the request view is taken again
/// there (it was checked before, so the error arm is not expected).
fn decide_review(
    webhook: Webhook,
    review: &serde_json::Value,
    labels: Option<crate::placement::Labels>,
    rules: &RuleSet,
) -> Decision {
    match Request::from_value(&review["request"]) {
        Ok(req) => decide(
            webhook,
            &req,
            labels.as_ref(),
            &rules.config,
            &rules.policies,
        ),
        Err(e) => Decision::deny(400, e.0),
    }
}

async fn lookup(app: &App, namespace: &str) -> Result<Option<crate::placement::Labels>, String> {
    if namespace.is_empty() {
        return Ok(None);
    }
    app.namespaces.labels(namespace).await
}

fn past_deadline(rules: &RuleSet, deadline: Duration) -> Decision {
    let ms = deadline.as_millis();
    match rules.config.evaluation.on_error {
        OnError::Deny => Decision::deny(500, format!("not decided within the {ms} ms deadline, so the request is refused (evaluation.onError: deny)")),
        OnError::Allow => Decision {
            warnings: vec![format!("poolguard did not decide within {ms} ms; allowed because evaluation.onError is allow")],
            ..Decision::allow()
        },
    }
}

fn count(metrics: &Metrics, webhook: Webhook, operation: &str, kind: &str, decision: &str) {
    metrics
        .requests
        .get_or_create(&RequestLabels {
            webhook: webhook.as_str().to_string(),
            operation: operation.to_string(),
            kind: kind.to_string(),
            decision: decision.to_string(),
        })
        .inc();
}

/// Metrics and one log line per denial, warning or dry-run finding.
fn record(app: &App, webhook: Webhook, s: &Subject, d: &Decision, started: Instant) {
    let outcome = match (d.allowed, &d.patch, d.warnings.is_empty()) {
        (false, _, _) => "denied",
        (true, Some(_), _) => "patched",
        (true, None, false) => "warned",
        (true, None, true) => "allowed",
    };
    count(&app.metrics, webhook, s.operation, &s.kind, outcome);
    app.metrics
        .latency
        .get_or_create(&WebhookLabels {
            webhook: webhook.as_str().to_string(),
        })
        .observe(started.elapsed().as_secs_f64());
    for r in &d.policy_results {
        let result = match (r.error, r.infringements) {
            (true, _) => "error",
            (false, 0) => "pass",
            (false, _) => "infringement",
        };
        let enforcement = r.enforcement.as_str().to_string();
        app.metrics
            .policy_evaluations
            .get_or_create(&PolicyLabels {
                policy: r.policy.clone(),
                enforcement: enforcement.clone(),
                result: result.to_string(),
            })
            .inc();
        if r.infringements > 0 {
            app.metrics
                .infringements
                .get_or_create(&InfringementLabels {
                    policy: r.policy.clone(),
                    enforcement,
                })
                .inc_by(r.infringements as u64);
        }
    }
    let hook = webhook.as_str();
    if !d.allowed {
        tracing::info!(uid = %s.uid, namespace = %s.namespace, name = %s.name, kind = %s.kind, webhook = hook, code = d.code, reason = %d.message, "denied");
    }
    for w in &d.warnings {
        tracing::info!(uid = %s.uid, namespace = %s.namespace, name = %s.name, kind = %s.kind, webhook = hook, reason = %w, "warning");
    }
    for n in &d.dryrun {
        tracing::info!(uid = %s.uid, namespace = %s.namespace, name = %s.name, kind = %s.kind, webhook = hook, reason = %n, "dryrun infringement");
    }
}

/// Accepts TLS connections on `listener` until `shutdown`, each with the TLS configuration current
/// at its handshake; then waits up to `drain` for in-flight requests to finish.
pub async fn serve_tls(
    listener: TcpListener,
    tls: Arc<ArcSwap<ServerConfig>>,
    router: Router,
    shutdown: CancellationToken,
    drain: Duration,
) -> Result<()> {
    let graceful = GracefulShutdown::new();
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(conn) => conn,
                Err(e) => {
                    tracing::warn!(error = %e, "accepting a connection failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = shutdown.cancelled() => break,
        };
        // Answers are small and written as a few TLS records (HTTP/2: headers, then data);
        // with Nagle's algorithm on, the later ones wait for the client's delayed ACK.
        if let Err(e) = stream.set_nodelay(true) {
            tracing::debug!(%peer, error = %e, "setting TCP_NODELAY failed");
        }
        let acceptor = tokio_rustls::TlsAcceptor::from(tls.load_full());
        let service = TowerToHyperService::new(router.clone());
        let watcher = graceful.watcher();
        tokio::spawn(async move {
            let tls_stream =
                match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
                    Ok(Ok(s)) => s,
                    Ok(Err(e)) => {
                        tracing::debug!(%peer, error = %e, "TLS handshake failed");
                        return;
                    }
                    Err(_) => {
                        tracing::debug!(%peer, "TLS handshake timed out");
                        return;
                    }
                };
            let mut builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
            builder
                .http1()
                .timer(TokioTimer::new())
                .header_read_timeout(Duration::from_secs(30));
            let conn = builder.serve_connection(TokioIo::new(tls_stream), service);
            if let Err(e) = watcher.watch(conn.into_owned()).await {
                tracing::debug!(%peer, error = %e, "connection ended with an error");
            }
        });
    }
    drop(listener);
    tokio::select! {
        () = graceful.shutdown() => tracing::info!("all connections closed"),
        () = tokio::time::sleep(drain) => tracing::warn!(seconds = drain.as_secs(), "connections still open after the drain time; exiting"),
    }
    Ok(())
}
