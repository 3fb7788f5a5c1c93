//! The floor of an admission webhook on this machine: an AdmissionReview server that decides
//! nothing. It serves HTTPS with poolguard's own connection loop (`server::connections::serve_tls`:
//! the same rustls configuration, HTTP/1.1 and HTTP/2, connection limits and timeouts, on the
//! same tokio runtime settings), reads each `POST /validate` body, parses it as JSON, and answers
//! `allowed: true` with the request's uid. `GET /readyz` answers 200 once it listens.
//!
//! bench/cores.sh drives it with the load generator beside poolguard and OPA, so that each of
//! their throughputs can be put over the cost of answering at all.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use arc_swap::ArcSwap;
use axum::body::Bytes;
use axum::http::StatusCode;
use axum::routing::{get, post};
use axum::{Json, Router};
use clap::Parser;
use poolguard::server::connections::serve_tls;
use poolguard::server::tls::{self, Pem};
use poolguard::server::Limits;
use serde_json::{json, Value};
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

#[derive(Parser)]
#[command(about = "An AdmissionReview server that allows everything (the benchmark's floor)")]
struct Args {
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:18543")]
    addr: SocketAddr,
    /// The server's certificate chain (PEM).
    #[arg(long)]
    tls_cert_file: PathBuf,
    /// Its private key (PEM).
    #[arg(long)]
    tls_key_file: PathBuf,
}

fn main() -> Result<()> {
    let args = Args::parse();
    let read = |path: &PathBuf| -> Result<Pem> {
        let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
        Ok(Pem {
            bytes,
            origin: path.display().to_string(),
        })
    };
    let (cert, key) = (read(&args.tls_cert_file)?, read(&args.tls_key_file)?);
    let config = tls::server_config(&cert, &key, None)?;
    // As poolguard's: one worker per usable CPU.
    let runtime = tokio::runtime::Runtime::new().context("starting the async runtime")?;
    runtime.block_on(serve(args.addr, config))
}

async fn serve(addr: SocketAddr, config: Arc<rustls::ServerConfig>) -> Result<()> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("listening on {addr}"))?;
    let limits = Limits::default();
    let router = Router::new()
        .route("/validate", post(allow))
        .route("/readyz", get(|| async { StatusCode::OK }));
    let connections = Arc::new(Semaphore::new(limits.max_connections));
    eprintln!("nullserver: listening on https://{addr}");
    serve_tls(
        listener,
        Arc::new(ArcSwap::new(config)),
        router,
        CancellationToken::new(),
        Duration::from_secs(1),
        &limits,
        connections,
        Default::default(),
    )
    .await
}

/// Parses the body and allows the request: a 400 for a body that is not JSON, as any webhook
/// must read the review to answer it.
async fn allow(body: Bytes) -> Result<Json<Value>, (StatusCode, String)> {
    let review: Value = serde_json::from_slice(&body)
        .map_err(|e| (StatusCode::BAD_REQUEST, format!("not JSON: {e}")))?;
    let uid = review["request"]["uid"].clone();
    Ok(Json(json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "response": {"uid": uid, "allowed": true},
    })))
}
