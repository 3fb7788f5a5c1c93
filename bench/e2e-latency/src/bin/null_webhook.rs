//! The null admission webhook of `bench/e2e-latency.sh`'s floor arms: an HTTPS server on the
//! same stack as poolguard (rustls with ring via tokio-rustls, hyper-util's auto HTTP/1.1 + HTTP/2
//! connection builder, an axum router) that answers every AdmissionReview, on any path, with
//! `allowed: true` and the request's uid, and nothing else: no patch, no policy, no lookups. What
//! kube-apiserver adds for it is the cost of calling a webhook at all.
//!
//! On the path `/patch` it answers a pod as poolguard's mutating webhook answers one in a
//! namespace of pool `--pool` (the nodeSelector key `--pool-key`, the `poolguard.io/pool`
//! annotation: each added as a whole map when the pod has none, as a key otherwise), without
//! reading any namespace: the `nullpatch` arm of `bench/e2e-floor.sh`, which tells what the API
//! server spends applying poolguard's patch from what poolguard spends deciding it.
//!
//! usage: null_webhook --addr HOST:PORT --tls-cert-file PEM --tls-key-file PEM
//!                     [--pool-key KEY (default agentpool)] [--pool NAME (default pool1)]

use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::{bail, Context, Result};
use axum::extract::State;
use axum::http::Uri;
use axum::{Json, Router};
use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto::Builder;
use hyper_util::service::TowerToHyperService;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::ServerConfig;
use serde_json::{json, Value};

const USAGE: &str = "usage: null_webhook --addr HOST:PORT --tls-cert-file PEM --tls-key-file PEM \
                     [--pool-key KEY] [--pool NAME]";

/// The pool `/patch` sets: the nodeSelector key and the pool's name.
#[derive(Clone)]
struct Pool {
    key: String,
    name: String,
}

/// `allowed: true` for the review's uid, in the version it came in; on `/patch`, with the
/// pool's patch ([`pool_patch`]).
async fn admit(State(pool): State<Arc<Pool>>, uri: Uri, Json(review): Json<Value>) -> Json<Value> {
    let uid = review["request"]["uid"].clone();
    let api_version = review
        .get("apiVersion")
        .cloned()
        .unwrap_or_else(|| json!("admission.k8s.io/v1"));
    let mut response = json!({"uid": uid, "allowed": true});
    if uri.path() == "/patch" {
        let patch = pool_patch(&review["request"]["object"], &pool);
        response["patchType"] = json!("JSONPatch");
        response["patch"] = json!(STANDARD.encode(patch.to_string()));
    }
    Json(json!({
        "apiVersion": api_version,
        "kind": "AdmissionReview",
        "response": response,
    }))
}

/// The JSON patch poolguard writes for a pod in a namespace of `pool`, when the pod names no
/// pool yet: the nodeSelector key and the `poolguard.io/pool` annotation, each added to its map,
/// or as a new map when there is none.
fn pool_patch(pod: &Value, pool: &Pool) -> Value {
    let add = |map: &[&str], key: &str| {
        let parent = format!("/{}", map.join("/"));
        if pod.pointer(&parent).is_some_and(Value::is_object) {
            let escaped = key.replace('~', "~0").replace('/', "~1");
            json!({"op": "add", "path": format!("{parent}/{escaped}"), "value": pool.name})
        } else {
            json!({"op": "add", "path": parent, "value": {key: pool.name}})
        }
    };
    json!([
        add(&["spec", "nodeSelector"], &pool.key),
        add(&["metadata", "annotations"], "poolguard.io/pool"),
    ])
}

/// As poolguard's: TLS 1.3 preferred, 1.2 accepted, h2 and http/1.1 offered through ALPN.
fn tls_config(cert: &str, key: &str) -> Result<Arc<ServerConfig>> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let certs = CertificateDer::pem_file_iter(cert)
        .with_context(|| format!("reading {cert}"))?
        .collect::<std::result::Result<Vec<_>, _>>()
        .with_context(|| format!("{cert}: not PEM certificates"))?;
    let key = PrivateKeyDer::from_pem_file(key).with_context(|| format!("reading {key}"))?;
    let mut config = ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
        .context("choosing TLS versions")?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .context("certificate and key do not match")?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

async fn serve(addr: SocketAddr, tls: Arc<ServerConfig>, pool: Pool) -> Result<()> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("binding {addr}"))?;
    let acceptor = tokio_rustls::TlsAcceptor::from(tls);
    let service =
        TowerToHyperService::new(Router::new().fallback(admit).with_state(Arc::new(pool)));
    eprintln!("[null_webhook] listening on https://{addr}");
    loop {
        let (stream, _) = match listener.accept().await {
            Ok(s) => s,
            Err(e) => {
                eprintln!("[null_webhook] accept: {e}");
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let (acceptor, service) = (acceptor.clone(), service.clone());
        tokio::spawn(async move {
            let Ok(tls) = acceptor.accept(stream).await else {
                return;
            };
            let _ = Builder::new(TokioExecutor::new())
                .serve_connection(TokioIo::new(tls), service)
                .await;
        });
    }
}

fn parse() -> Result<(SocketAddr, String, String, Pool)> {
    let (mut addr, mut cert, mut key) = (None, None, None);
    let mut pool = Pool {
        key: "agentpool".into(),
        name: "pool1".into(),
    };
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let mut value = || args.next().with_context(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--addr" => addr = Some(value()?.parse().context("--addr wants HOST:PORT")?),
            "--tls-cert-file" => cert = Some(value()?),
            "--tls-key-file" => key = Some(value()?),
            "--pool-key" => pool.key = value()?,
            "--pool" => pool.name = value()?,
            _ => bail!("unknown argument {flag:?}\n{USAGE}"),
        }
    }
    match (addr, cert, key) {
        (Some(a), Some(c), Some(k)) => Ok((a, c, k, pool)),
        _ => bail!("{USAGE}"),
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    let result = async {
        let (addr, cert, key, pool) = parse()?;
        serve(addr, tls_config(&cert, &key)?, pool).await
    }
    .await;
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("null_webhook: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
