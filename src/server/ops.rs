//! The operations port (plain HTTP): liveness, readiness and Prometheus metrics.

use std::sync::Arc;

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;

use super::state::ServerState;
use crate::telemetry::metrics::MemoLabels;

pub fn router(app: Arc<ServerState>) -> Router {
    Router::new()
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .with_state(app)
}

/// Ready once the namespace cache has synced and, when placement policies may choose pools,
/// the node cache too (TLS, config and policies are loaded before the server starts listening,
/// and reloads never leave them unloaded).
async fn readyz(State(app): State<Arc<ServerState>>) -> impl IntoResponse {
    match not_ready(&app) {
        Some(why) => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("not ready: {why}\n"),
        ),
        None => (StatusCode::OK, "ok\n".to_string()),
    }
}

/// Why this replica is not ready, if it is not.
fn not_ready(app: &ServerState) -> Option<&'static str> {
    let chooses = app.rules.load().config().placement.is_some();
    if !app.namespaces.ready() {
        Some("the namespace cache has not synced yet")
    } else if chooses && !app.pools.ready() {
        Some("the node cache has not synced yet (placement policies choose pools from it)")
    } else {
        None
    }
}

async fn metrics(State(app): State<Arc<ServerState>>) -> impl IntoResponse {
    let (m, gates) = (&app.metrics, &app.gates);
    m.ready.set(i64::from(not_ready(&app).is_none()));
    m.namespace_cache_size.set(app.namespaces.len() as i64);
    m.evaluations_running
        .set(gates.evaluations_running() as i64);
    m.evaluations_waiting
        .set(gates.evaluations_waiting() as i64);
    m.body_bytes_reserved
        .set(gates.body_bytes_reserved() as i64);
    m.connections.set(gates.connections_open() as i64);
    let rules = app.rules.load();
    for (policies, ((hits, misses), bytes)) in [
        ("sit", rules.policies().memo_stats()),
        ("placement", rules.placement().memo_stats()),
    ] {
        let labels = MemoLabels { policies };
        let clamp = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
        m.memo_hits.get_or_create(&labels).set(clamp(hits));
        m.memo_misses.get_or_create(&labels).set(clamp(misses));
        m.memo_bytes.get_or_create(&labels).set(clamp(bytes));
        let capacity = rules
            .config()
            .evaluation
            .result_cache_mib
            .saturating_mul(1024 * 1024);
        m.memo_capacity_bytes
            .get_or_create(&labels)
            .set(clamp(capacity));
    }
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        app.metrics.encode(),
    )
}
