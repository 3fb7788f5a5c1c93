//! The HTTPS server on loopback, with certificates made by poolguard's own `certs` code:
//! round trips over HTTP/1.1 and HTTP/2, bad input, certificate rotation by symlink swap, broken
//! policy pushes, mTLS, the deadline, and SIGTERM with a request in flight.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::{http1, http2};
use hyper_util::rt::{TokioExecutor, TokioIo};
use poolguard::certs::authority::{self as certs, Authority, Usage};
use poolguard::server::tls::TlsFiles;
use poolguard::server::{self as serve, Options, Running};
use poolguard::sources::Sources;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use serde_json::Value;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

const LOCAL: &str = "127.0.0.1:0";

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn pem_certs(pem: &str) -> Vec<CertificateDer<'static>> {
    CertificateDer::pem_slice_iter(pem.as_bytes())
        .map(Result::unwrap)
        .collect()
}

/// Writes a CA-signed serving bundle for 127.0.0.1 into `dir`.
fn write_bundle(dir: &Path) -> String {
    let bundle =
        certs::serving_bundle(&["localhost".into()], &["127.0.0.1".parse().unwrap()], 1).unwrap();
    bundle.write(dir).unwrap();
    bundle.ca_pem
}

struct Client {
    config: Arc<rustls::ClientConfig>,
}

impl Client {
    fn new(ca_pem: &str, alpn: &[u8], identity: Option<(String, String)>) -> Client {
        let mut roots = rustls::RootCertStore::empty();
        for c in pem_certs(ca_pem) {
            roots.add(c).unwrap();
        }
        let builder = rustls::ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots);
        let mut config = match identity {
            None => builder.with_no_client_auth(),
            Some((cert, key)) => {
                let key: PrivateKeyDer = PrivateKeyDer::from_pem_slice(key.as_bytes()).unwrap();
                builder
                    .with_client_auth_cert(pem_certs(&cert), key)
                    .unwrap()
            }
        };
        config.alpn_protocols = vec![alpn.to_vec()];
        Client {
            config: Arc::new(config),
        }
    }

    async fn tls(
        &self,
        addr: SocketAddr,
    ) -> std::io::Result<tokio_rustls::client::TlsStream<TcpStream>> {
        let tcp = TcpStream::connect(addr).await?;
        let connector = tokio_rustls::TlsConnector::from(self.config.clone());
        connector
            .connect(ServerName::try_from("127.0.0.1").unwrap(), tcp)
            .await
    }

    /// An HTTP/1.1 connection, and the certificate the server presented.
    async fn http1(
        &self,
        addr: SocketAddr,
    ) -> (http1::SendRequest<Full<Bytes>>, CertificateDer<'static>) {
        let tls = self.tls(addr).await.unwrap();
        let cert = tls.get_ref().1.peer_certificates().unwrap()[0]
            .clone()
            .into_owned();
        let (sender, conn) = http1::handshake(TokioIo::new(tls)).await.unwrap();
        tokio::spawn(conn);
        (sender, cert)
    }

    async fn http2(&self, addr: SocketAddr) -> http2::SendRequest<Full<Bytes>> {
        let tls = self.tls(addr).await.unwrap();
        assert_eq!(tls.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));
        let (sender, conn) = http2::handshake(TokioExecutor::new(), TokioIo::new(tls))
            .await
            .unwrap();
        tokio::spawn(conn);
        sender
    }
}

fn post(path: &str, body: impl Into<Bytes>) -> hyper::Request<Full<Bytes>> {
    hyper::Request::post(path)
        .header("host", "127.0.0.1")
        .header("content-type", "application/json")
        .body(Full::new(body.into()))
        .unwrap()
}

async fn read(response: hyper::Response<hyper::body::Incoming>) -> (u16, String) {
    let status = response.status().as_u16();
    let body = response.into_body().collect().await.unwrap().to_bytes();
    (status, String::from_utf8_lossy(&body).into_owned())
}

async fn send1(
    sender: &mut http1::SendRequest<Full<Bytes>>,
    path: &str,
    body: impl Into<Bytes>,
) -> (u16, String) {
    sender.ready().await.unwrap();
    read(sender.send_request(post(path, body)).await.unwrap()).await
}

fn review(file: &str) -> Vec<u8> {
    std::fs::read(format!("testdata/reviews/{file}")).unwrap()
}

fn options(tls: TlsFiles, sources: Sources) -> Options {
    Options {
        addr: LOCAL.parse().unwrap(),
        metrics_addr: LOCAL.parse().unwrap(),
        tls: Some(tls),
        sources,
        namespaces_file: Some("testdata/namespaces.yaml".into()),
        deadline: Duration::from_secs(4),
        drain: Duration::from_secs(5),
        dev: false,
        kubeconfig: None,
        manage_certs: None,
    }
}

fn files_in(dir: &Path) -> TlsFiles {
    TlsFiles {
        cert: dir.join("tls.crt"),
        key: dir.join("tls.key"),
        client_ca: None,
    }
}

fn example_rules() -> Sources {
    Sources {
        config: Some("testdata/config/example.yaml".into()),
        policies_dir: Some("policies".into()),
    }
}

async fn metrics(running: &Running) -> String {
    let tcp = TcpStream::connect(running.metrics_addr).await.unwrap();
    let (mut sender, conn) = http1::handshake(TokioIo::new(tcp)).await.unwrap();
    tokio::spawn(conn);
    let request = hyper::Request::get("/metrics")
        .header("host", "x")
        .body(Full::new(Bytes::new()))
        .unwrap();
    read(sender.send_request(request).await.unwrap()).await.1
}

#[tokio::test]
async fn round_trips_over_http1_and_http2() {
    let dir = tempfile::tempdir().unwrap();
    let ca = write_bundle(dir.path());
    let running = serve::start(options(files_in(dir.path()), example_rules()))
        .await
        .unwrap();

    let (mut h1, _) = Client::new(&ca, b"http/1.1", None)
        .http1(running.addr)
        .await;
    let (status, body) = send1(&mut h1, "/mutate", review("pod-create-mapped.json")).await;
    assert_eq!(status, 200);
    let doc: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(doc["response"]["uid"], "pod-create-mapped");
    assert_eq!(doc["response"]["patchType"], "JSONPatch");

    let mut h2 = Client::new(&ca, b"h2", None).http2(running.addr).await;
    let (status, body) = read(
        h2.send_request(post(
            "/validate",
            review("deployment-create-bad-image.json"),
        ))
        .await
        .unwrap(),
    )
    .await;
    assert_eq!(status, 200);
    let doc: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(doc["response"]["allowed"], false);
    assert_eq!(doc["response"]["status"]["code"], 403);

    let text = metrics(&running).await;
    assert!(text.contains(r#"poolguard_admission_requests_total{webhook="mutate",operation="CREATE",kind="Pod",decision="patched"} 1"#), "{text}");
    assert!(text.contains(r#"poolguard_policy_evaluations_total{policy="allowedrepositories",enforcement="deny",result="infringement"} 1"#), "{text}");
    assert!(text.contains("poolguard_namespace_cache_size 5"), "{text}");
    running.shutdown.cancel();
    running.wait().await.unwrap();
}

#[tokio::test]
async fn bad_input_gets_its_status_and_the_server_keeps_answering() {
    let dir = tempfile::tempdir().unwrap();
    let ca = write_bundle(dir.path());
    let running = serve::start(options(files_in(dir.path()), example_rules()))
        .await
        .unwrap();
    let client = Client::new(&ca, b"http/1.1", None);
    let big = format!("{{\"pad\": \"{}\"}}", "x".repeat(3 * 1024 * 1024 + 1));
    let cases: Vec<(&str, Vec<u8>, u16, &str)> = vec![
        ("/validate", b"{not json".to_vec(), 400, "not valid JSON"),
        (
            "/validate",
            br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}"#.to_vec(),
            400,
            "no `request`",
        ),
        (
            "/mutate",
            br#"{"apiVersion":"admission.k8s.io/v1beta1","kind":"AdmissionReview","request":{}}"#
                .to_vec(),
            400,
            "expected apiVersion",
        ),
        ("/mutate", big.into_bytes(), 413, ""),
        ("/nope", b"{}".to_vec(), 404, "not found"),
    ];
    for (path, body, want, text) in cases {
        let (mut sender, _) = client.http1(running.addr).await;
        let (status, answer) = send1(&mut sender, path, body).await;
        assert_eq!(status, want, "{path}: {answer}");
        assert!(answer.contains(text), "{path}: {answer}");
        let (mut sender, _) = client.http1(running.addr).await;
        let (status, _) = send1(&mut sender, "/mutate", review("pod-create-mapped.json")).await;
        assert_eq!(status, 200, "the server answers after {path}");
    }
    running.shutdown.cancel();
    running.wait().await.unwrap();
}

/// A Kubernetes-style Secret mount: `..data` points at a timestamped folder, the files at `..data`.
fn k8s_mount(dir: &Path, version: &str) -> String {
    let real = dir.join(version);
    std::fs::create_dir_all(&real).unwrap();
    let ca = write_bundle(&real);
    let tmp = dir.join("..data_tmp");
    let _ = std::fs::remove_file(&tmp);
    std::os::unix::fs::symlink(version, &tmp).unwrap();
    std::fs::rename(&tmp, dir.join("..data")).unwrap();
    for name in ["tls.crt", "tls.key", "ca.crt"] {
        let link = dir.join(name);
        if std::fs::symlink_metadata(&link).is_err() {
            std::os::unix::fs::symlink(PathBuf::from("..data").join(name), &link).unwrap();
        }
    }
    ca
}

#[tokio::test]
async fn certificate_symlink_swap_reaches_new_connections_and_keeps_open_ones() {
    let dir = tempfile::tempdir().unwrap();
    let old_ca = k8s_mount(dir.path(), "..2026_11_22_a");
    let running = serve::start(options(files_in(dir.path()), example_rules()))
        .await
        .unwrap();
    let (mut open, old_cert) = Client::new(&old_ca, b"http/1.1", None)
        .http1(running.addr)
        .await;
    assert_eq!(
        send1(&mut open, "/mutate", review("pod-create-mapped.json"))
            .await
            .0,
        200
    );

    let new_ca = k8s_mount(dir.path(), "..2026_11_22_b");
    let new_client = Client::new(&new_ca, b"http/1.1", None);
    let started = Instant::now();
    let new_cert = loop {
        if let Ok(tls) = new_client.tls(running.addr).await {
            break tls.get_ref().1.peer_certificates().unwrap()[0]
                .clone()
                .into_owned();
        }
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "the new certificate was not served within 5 s"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_ne!(new_cert, old_cert);
    eprintln!("new certificate served after {:?}", started.elapsed());
    // The connection opened before the swap still works.
    assert_eq!(
        send1(&mut open, "/mutate", review("pod-create-mapped.json"))
            .await
            .0,
        200
    );
    assert!(metrics(&running)
        .await
        .contains(r#"poolguard_reloads_total{what="tls",result="success"}"#));
    running.shutdown.cancel();
    running.wait().await.unwrap();
}

#[tokio::test]
async fn broken_policy_push_keeps_the_old_policy_and_is_counted() {
    let dir = tempfile::tempdir().unwrap();
    let ca = write_bundle(dir.path());
    let policies = dir.path().join("policies");
    std::fs::create_dir(&policies).unwrap();
    std::fs::copy(
        "policies/allowedrepositories.yaml",
        policies.join("allowedrepositories.yaml"),
    )
    .unwrap();
    let sources = Sources {
        config: Some("testdata/config/example.yaml".into()),
        policies_dir: Some(policies.clone()),
    };
    let running = serve::start(options(files_in(dir.path()), sources))
        .await
        .unwrap();
    let client = Client::new(&ca, b"http/1.1", None);

    std::fs::write(policies.join("allowedrepositories.yaml"), "name: allowedrepositories\npolicy: |\n  package allowedrepositories\n  infringement[{\"msg\": m}] {\n").unwrap();
    let started = Instant::now();
    let failure = r#"poolguard_reloads_total{what="rules",result="failure"} 1"#;
    while !metrics(&running).await.contains(failure) {
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "the failed reload was not counted"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (mut sender, _) = client.http1(running.addr).await;
    let (_, body) = send1(
        &mut sender,
        "/validate",
        review("deployment-create-bad-image.json"),
    )
    .await;
    let doc: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        doc["response"]["allowed"], false,
        "the old policy still denies: {body}"
    );
    assert!(doc["response"]["status"]["message"]
        .as_str()
        .unwrap()
        .contains("allowedrepositories"));
    running.shutdown.cancel();
    running.wait().await.unwrap();
}

#[tokio::test]
async fn mtls_requires_a_client_certificate_from_the_ca() {
    let dir = tempfile::tempdir().unwrap();
    let ca = write_bundle(dir.path());
    let client_ca = Authority::generate("clients", 1).unwrap();
    std::fs::write(dir.path().join("client-ca.crt"), client_ca.cert_pem()).unwrap();
    let files = TlsFiles {
        client_ca: Some(dir.path().join("client-ca.crt")),
        ..files_in(dir.path())
    };
    let running = serve::start(options(files, example_rules())).await.unwrap();

    let anonymous = Client::new(&ca, b"http/1.1", None);
    let refused = match anonymous.tls(running.addr).await {
        Err(_) => true,
        // TLS 1.3 reports the missing certificate after the client's handshake completes.
        Ok(tls) => {
            let result = http1::handshake::<_, Full<Bytes>>(TokioIo::new(tls)).await;
            match result {
                Err(_) => true,
                Ok((mut sender, conn)) => {
                    tokio::spawn(conn);
                    sender
                        .send_request(post("/mutate", review("pod-create-mapped.json")))
                        .await
                        .is_err()
                }
            }
        }
    };
    assert!(refused, "a client without a certificate was served");

    let issued = client_ca
        .issue("apiserver", &[], &[], Usage::Client, 1)
        .unwrap();
    let trusted = Client::new(&ca, b"http/1.1", Some((issued.cert_pem, issued.key_pem)));
    let (mut sender, _) = trusted.http1(running.addr).await;
    assert_eq!(
        send1(&mut sender, "/mutate", review("pod-create-mapped.json"))
            .await
            .0,
        200
    );
    running.shutdown.cancel();
    running.wait().await.unwrap();
}

#[tokio::test]
async fn past_the_deadline_the_failure_behaviour_applies() {
    let dir = tempfile::tempdir().unwrap();
    let ca = write_bundle(dir.path());
    let policies = dir.path().join("policies");
    std::fs::create_dir(&policies).unwrap();
    std::fs::write(
        policies.join("slow.rego"),
        "package slow\ninfringement[{\"msg\": \"x\"}] { input.parameters.go; count([1 | numbers.range(1, 1500)[_]; numbers.range(1, 1500)[_]]) < 0 }\n",
    )
    .unwrap();
    let config = dir.path().join("config.yaml");
    std::fs::write(
        &config,
        "evaluation: {timeoutMillis: 20000}\npolicies:\n  slow:\n    parameters: {go: true}\n",
    )
    .unwrap();
    let mut opts = options(
        files_in(dir.path()),
        Sources {
            config: Some(config),
            policies_dir: Some(policies),
        },
    );
    opts.deadline = Duration::from_millis(100);
    let running = serve::start(opts).await.unwrap();
    let (mut sender, _) = Client::new(&ca, b"http/1.1", None)
        .http1(running.addr)
        .await;
    let started = Instant::now();
    let (status, body) = send1(&mut sender, "/validate", review("pod-create-placed.json")).await;
    assert_eq!(status, 200);
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "answered after {:?}",
        started.elapsed()
    );
    let doc: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(doc["response"]["allowed"], false, "{body}");
    assert!(body.contains("deadline"), "{body}");
    running.shutdown.cancel();
    running.wait().await.unwrap();
}

#[tokio::test]
async fn sigterm_finishes_the_request_in_flight_then_exits_0() {
    let dir = tempfile::tempdir().unwrap();
    let ca = write_bundle(dir.path());
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_poolguard"))
        .args([
            "serve",
            "--addr",
            LOCAL,
            "--metrics-addr",
            LOCAL,
            "--log-format",
            "json",
        ])
        .args([
            "--namespaces-file",
            "testdata/namespaces.yaml",
            "--policies-dir",
            "policies",
        ])
        .arg("--tls-cert-file")
        .arg(dir.path().join("tls.crt"))
        .arg("--tls-key-file")
        .arg(dir.path().join("tls.key"))
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    // The listening address is in the JSON log line announcing it.
    let stderr = child.stderr.take().unwrap();
    let mut lines = tokio::io::AsyncBufReadExt::lines(tokio::io::BufReader::new(stderr));
    let addr: SocketAddr = loop {
        let line = tokio::time::timeout(Duration::from_secs(20), lines.next_line())
            .await
            .unwrap()
            .unwrap()
            .expect("serve exited early");
        let log: Value = serde_json::from_str(&line).unwrap_or_default();
        if let Some(addr) = log["fields"]["addr"].as_str() {
            break addr.parse().unwrap();
        }
    };
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });

    // Headers and half the body, then SIGTERM, then the rest.
    let body = review("pod-create-mapped.json");
    let mut tls = Client::new(&ca, b"http/1.1", None).tls(addr).await.unwrap();
    let head = format!("POST /mutate HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n", body.len());
    tls.write_all(head.as_bytes()).await.unwrap();
    tls.write_all(&body[..body.len() / 2]).await.unwrap();
    tls.flush().await.unwrap();
    let pid = child.id().unwrap().to_string();
    assert!(std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap()
        .success());
    tokio::time::sleep(Duration::from_millis(500)).await;
    // No new connections once shutting down.
    assert!(
        TcpStream::connect(addr).await.is_err(),
        "still accepting after SIGTERM"
    );
    tls.write_all(&body[body.len() / 2..]).await.unwrap();
    tls.flush().await.unwrap();
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(
        Duration::from_secs(10),
        tokio::io::AsyncReadExt::read_to_end(&mut tls, &mut answer),
    )
    .await;
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(answer.contains("\"uid\":\"pod-create-mapped\""), "{answer}");
    let status = tokio::time::timeout(Duration::from_secs(10), child.wait())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(status.code(), Some(0));
}
