//! The HTTPS server. In process (the router called without sockets): the request/response rules,
//! the evaluation slots, the metric labels and the rollout counts. On loopback, with certificates
//! made by poolguard's own `certs` code: round trips over HTTP/1.1 and HTTP/2, certificate rotation
//! by symlink swap, broken policy pushes, mTLS, the deadline (which also stops the work), the
//! transport limits (body budget, trickled bodies, bodies left unread over HTTP/2, connection cap,
//! idle connections, HTTP/2 settings and reset floods), SIGTERM with a request in flight, and
//! HTTP/1.1 connections during the shutdown.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Body;
use bytes::Bytes;
use futures::StreamExt;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::Frame;
use hyper::client::conn::{http1, http2};
use hyper_util::rt::{TokioExecutor, TokioIo};
use poolguard::app::{self as serve, Options, Running};
use poolguard::certs::authority::{self as certs, Authority, Usage};
use poolguard::namespaces::Namespaces;
use poolguard::server::endpoints;
use poolguard::server::state::ServerState;
use poolguard::server::tls::TlsFiles;
use poolguard::server::Limits;
use poolguard::sources::{self, Sources};
use poolguard::telemetry::metrics::Metrics;
use poolguard_core::webhook::Webhook;
use poolguard_testclient::{client_config, Identity, TlsClient};
use rustls::pki_types::CertificateDer;
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tower::ServiceExt;

const LOCAL: &str = "127.0.0.1:0";

/// Writes a CA-signed serving bundle for 127.0.0.1 into `dir`.
fn write_bundle(dir: &Path) -> String {
    let bundle =
        certs::serving_bundle(&["localhost".into()], &["127.0.0.1".parse().unwrap()], 1).unwrap();
    bundle.write(dir).unwrap();
    bundle.ca_pem
}

/// The shared TLS test client, offering one ALPN protocol, connecting to 127.0.0.1.
struct Client(TlsClient);

impl Client {
    fn new(ca_pem: &str, alpn: &[u8], identity: Option<(String, String)>) -> Client {
        let identity = identity.as_ref().map(|(cert, key)| Identity {
            cert_pem: cert.as_bytes(),
            key_pem: key.as_bytes(),
        });
        let config = client_config(ca_pem.as_bytes(), identity, &[alpn]).unwrap();
        Client(TlsClient::new(config, "127.0.0.1").unwrap())
    }

    async fn tls(
        &self,
        addr: SocketAddr,
    ) -> std::io::Result<tokio_rustls::client::TlsStream<TcpStream>> {
        self.0.connect(addr).await
    }

    /// An HTTP/1.1 connection, and the certificate the server presented.
    async fn http1(
        &self,
        addr: SocketAddr,
    ) -> (http1::SendRequest<Full<Bytes>>, CertificateDer<'static>) {
        self.0.http1(addr).await.unwrap()
    }

    async fn http2(&self, addr: SocketAddr) -> http2::SendRequest<Full<Bytes>> {
        self.0.http2(addr).await.unwrap()
    }
}

fn post(path: &str, body: impl Into<Bytes>) -> hyper::Request<Full<Bytes>> {
    poolguard_testclient::post("127.0.0.1", path, body)
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
        nodes_file: None,
        nodepools: false,
        policy_exceptions: false,
        instance_types_file: None,
        deadline: Duration::from_secs(4),
        drain: Duration::from_secs(5),
        dev: false,
        kubeconfig: None,
        manage_certs: None,
        register_webhooks: None,
        audit: None,
        gatekeeper_from_cluster: false,
        rollout_follow: None,
        admission: true,
        limits: Limits::default(),
    }
}

fn files_in(dir: &Path) -> TlsFiles {
    TlsFiles {
        cert: dir.join("tls.crt"),
        key: dir.join("tls.key"),
        client_ca: None,
        client_names: Vec::new(),
    }
}

fn example_rules() -> Sources {
    Sources {
        config: Some("testdata/config/example.yaml".into()),
        policies_dir: Some("policies".into()),
        placement_dir: None,
        gatekeeper_dir: None,
        gatekeeper_cluster: None,
    }
}

async fn metrics(running: &Running) -> String {
    metrics_at(running.metrics_addr).await
}

async fn metrics_at(addr: SocketAddr) -> String {
    let tcp = TcpStream::connect(addr).await.unwrap();
    let (mut sender, conn) = http1::handshake(TokioIo::new(tcp)).await.unwrap();
    tokio::spawn(conn);
    let request = hyper::Request::get("/metrics")
        .header("host", "x")
        .body(Full::new(Bytes::new()))
        .unwrap();
    read(sender.send_request(request).await.unwrap()).await.1
}

const MIB: usize = 1024 * 1024;

/// Polls the metrics until `line` shows, for at most 5 s.
async fn wait_for_metric(running: &Running, line: &str) {
    let started = Instant::now();
    loop {
        let text = metrics(running).await;
        if text.contains(line) {
            return;
        }
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "`{line}` not seen within 5 s:\n{text}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A server on loopback with `limits`, and the CA its certificate chains to.
async fn start_limited(dir: &Path, sources: Sources, limits: Limits) -> (Running, String) {
    let ca = write_bundle(dir);
    let running = serve::start(Options {
        limits,
        ..options(files_in(dir), sources)
    })
    .await
    .unwrap();
    (running, ca)
}

/// A policy that runs for a long time (9 million iterations, nothing materialized), with its
/// configured time limit at a minute.
fn slow_rules(dir: &Path, on_error: &str) -> Sources {
    let policies = dir.join("policies");
    std::fs::create_dir_all(&policies).unwrap();
    std::fs::write(
        policies.join("slow.rego"),
        "package slow\ninfringement[{\"msg\": \"x\"}] { input.parameters.go; x := numbers.range(1, 3000)[_]; y := numbers.range(1, 3000)[_]; x * y < 0 }\n",
    )
    .unwrap();
    let config = dir.join("config.yaml");
    std::fs::write(
        &config,
        format!("evaluation: {{timeoutMillis: 60000, onError: {on_error}}}\npolicies:\n  slow:\n    parameters: {{go: true}}\n"),
    )
    .unwrap();
    Sources {
        config: Some(config),
        policies_dir: Some(policies),
        placement_dir: None,
        gatekeeper_dir: None,
        gatekeeper_cluster: None,
    }
}

// ---- In process: the router called without sockets ----

fn state(sources: Sources, deadline: Duration, limits: Limits) -> Arc<ServerState> {
    let namespaces = sources::load_namespaces(Path::new("testdata/namespaces.yaml")).unwrap();
    Arc::new(ServerState::new(
        sources.load().unwrap(),
        Namespaces::fixed(namespaces),
        Arc::new(Metrics::new()),
        deadline,
        limits,
    ))
}

/// A request as an HTTP client sends it (with `Content-Length`).
fn request(method: &str, path: &str, body: Vec<u8>) -> axum::http::Request<Body> {
    axum::http::Request::builder()
        .method(method)
        .uri(path)
        .header("content-type", "application/json")
        .header("content-length", body.len())
        .body(Body::from(body))
        .unwrap()
}

struct Answer {
    status: u16,
    headers: axum::http::HeaderMap,
    text: String,
}

impl Answer {
    fn json(&self) -> Value {
        serde_json::from_str(&self.text).unwrap_or_else(|e| panic!("{e}: {}", self.text))
    }
}

/// A server with one evaluation slot and no queue, that slot taken by a slow evaluation (the
/// request that holds it is returned, to be awaited).
async fn one_slot_taken(
    sources: &Sources,
    namespaces: poolguard_core::namespaces::NamespaceLabels,
) -> (Arc<ServerState>, tokio::task::JoinHandle<Answer>) {
    let limits = Limits {
        max_evaluations: 1,
        max_queued_evaluations: 0,
        ..Limits::default()
    };
    let app = Arc::new(ServerState::new(
        sources.load().unwrap(),
        Namespaces::fixed(namespaces),
        Arc::new(Metrics::new()),
        Duration::from_millis(1500),
        limits,
    ));
    let slow = take_the_slot(&app).await;
    (app, slow)
}

/// Starts a slow validation and waits until it holds an evaluation slot; returns its request.
async fn take_the_slot(app: &Arc<ServerState>) -> tokio::task::JoinHandle<Answer> {
    start_slow(app, 1).await
}

/// Starts a slow validation and waits until `running` evaluations run, its own among them.
async fn start_slow(app: &Arc<ServerState>, running: usize) -> tokio::task::JoinHandle<Answer> {
    let slow = spawn_call(app, "/validate", "pod-create-placed.json");
    let started = Instant::now();
    while app.gates.evaluations_running() < running {
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "the slow evaluation did not start"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    slow
}

/// Posts the review in `file` to `path` from a task of its own (on a multi-threaded runtime,
/// a worker's).
fn spawn_call(
    app: &Arc<ServerState>,
    path: &'static str,
    file: &'static str,
) -> tokio::task::JoinHandle<Answer> {
    let app = app.clone();
    tokio::spawn(async move { call(&app, request("POST", path, review(file))).await })
}

async fn call(app: &Arc<ServerState>, request: axum::http::Request<Body>) -> Answer {
    let response = endpoints::router(app.clone())
        .oneshot(request)
        .await
        .unwrap();
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    let body = response.into_body().collect().await.unwrap().to_bytes();
    Answer {
        status,
        headers,
        text: String::from_utf8_lossy(&body).into_owned(),
    }
}

#[tokio::test]
async fn bad_requests_get_their_status_and_a_one_line_reason() {
    let limits = Limits {
        max_body_bytes: 64 * 1024,
        ..Limits::default()
    };
    let app = state(example_rules(), Duration::from_secs(4), limits);
    let not_json = b"{not json".to_vec();
    let no_request = br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}"#.to_vec();
    let old_version =
        br#"{"apiVersion":"admission.k8s.io/v1beta1","kind":"AdmissionReview","request":{}}"#
            .to_vec();
    let served = "poolguard serves POST /mutate and POST /validate\n";
    let cases: Vec<(&str, &str, Vec<u8>, u16, String)> = vec![
        ("POST", "/validate", not_json, 400, "bad AdmissionReview: the body is not valid JSON: key must be a string at line 1 column 2\n".into()),
        ("POST", "/validate", no_request, 400, "bad AdmissionReview: the AdmissionReview has no `request`\n".into()),
        ("POST", "/mutate", old_version, 400, "bad AdmissionReview: expected apiVersion admission.k8s.io/v1 kind AdmissionReview, got apiVersion \"admission.k8s.io/v1beta1\" kind \"AdmissionReview\"\n".into()),
        ("POST", "/mutate", vec![b' '; 64 * 1024 + 1], 413, "request body too large: 65537 bytes, the limit is 65536 bytes\n".into()),
        ("POST", "/nope", b"{}".to_vec(), 404, format!("not found: {served}")),
        ("GET", "/mutate", Vec::new(), 405, format!("method not allowed: {served}")),
        ("PUT", "/validate", b"{}".to_vec(), 405, format!("method not allowed: {served}")),
    ];
    for (method, path, body, status, text) in cases {
        let answer = call(&app, request(method, path, body)).await;
        assert_eq!(answer.status, status, "{method} {path}: {}", answer.text);
        assert_eq!(answer.text, text, "{method} {path}");
        if status == 405 {
            assert_eq!(answer.headers["allow"], "POST");
        }
    }
    // Without a Content-Length, the limit applies as the body arrives.
    let chunks = (0..2).map(|_| Ok::<_, Infallible>(Bytes::from(vec![b' '; 40 * 1024])));
    let streamed = axum::http::Request::post("/validate")
        .body(Body::from_stream(futures::stream::iter(chunks)))
        .unwrap();
    let answer = call(&app, streamed).await;
    assert_eq!(answer.status, 413);
    assert_eq!(
        answer.text,
        "request body too large: 81920 bytes, the limit is 65536 bytes\n"
    );
    // Every refusal is counted.
    let text = app.metrics.encode();
    for (webhook, decision, n) in [
        ("validate", "invalid", 2),
        ("mutate", "invalid", 1),
        ("mutate", "too_large", 1),
        ("validate", "too_large", 1),
    ] {
        let line = format!("poolguard_admission_requests_total{{webhook=\"{webhook}\",operation=\"\",kind=\"\",decision=\"{decision}\"}} {n}\n");
        assert!(text.contains(&line), "{line}\n{text}");
    }
}

#[tokio::test]
async fn admission_responses_carry_the_decision() {
    let app = state(example_rules(), Duration::from_secs(4), Limits::default());
    let answer = call(
        &app,
        request("POST", "/mutate", review("pod-create-mapped.json")),
    )
    .await;
    assert_eq!(answer.status, 200, "{}", answer.text);
    assert_eq!(answer.headers["content-type"], "application/json");
    let doc = answer.json();
    assert_eq!(doc["apiVersion"], "admission.k8s.io/v1");
    assert_eq!(doc["kind"], "AdmissionReview");
    assert_eq!(doc["response"]["uid"], "pod-create-mapped");
    assert_eq!(doc["response"]["allowed"], true);
    assert_eq!(doc["response"]["patchType"], "JSONPatch");
    let patch = base64::Engine::decode(
        &base64::engine::general_purpose::STANDARD,
        doc["response"]["patch"].as_str().unwrap(),
    )
    .unwrap();
    let patch: Value = serde_json::from_slice(&patch).unwrap();
    assert_eq!(
        patch,
        serde_json::json!([
            {"op": "add", "path": "/spec/nodeSelector", "value": {"agentpool": "pool1"}},
            {"op": "add", "path": "/metadata/annotations", "value": {"poolguard.io/pool": "pool1"}}
        ])
    );

    let answer = call(
        &app,
        request(
            "POST",
            "/validate",
            review("deployment-create-bad-image.json"),
        ),
    )
    .await;
    assert_eq!(answer.status, 200);
    let doc = answer.json();
    assert_eq!(doc["response"]["allowed"], false);
    assert_eq!(doc["response"]["status"]["code"], 403);
    assert_eq!(doc["response"]["status"]["reason"], "Forbidden");
    let message = doc["response"]["status"]["message"].as_str().unwrap();
    assert!(message.starts_with("allowedrepositories: "), "{message}");
    assert!(doc["response"].get("patch").is_none());
}

/// A body under the size limit that would take many times its size once parsed (20 MiB of
/// `[],`) is refused with 400 and a reason before any of it is built, on both webhooks.
#[tokio::test]
async fn bodies_that_parse_into_too_much_are_refused() {
    let app = state(example_rules(), Duration::from_secs(4), Limits::default());
    let mut body = b"[".to_vec();
    body.extend(std::iter::repeat_n(&b"[],"[..], 20 * 1024 * 1024 / 3).flatten());
    body.extend_from_slice(b"[]]");
    for path in ["/mutate", "/validate"] {
        let answer = call(&app, request("POST", path, body.clone())).await;
        assert_eq!(answer.status, 400, "{path}: {}", answer.text);
        assert!(
            answer
                .text
                .starts_with("bad AdmissionReview: the AdmissionReview is too large once parsed"),
            "{path}: {}",
            answer.text
        );
    }
}

/// An ephemeral container with a foreign image added to a pod whose old object poolguard cannot
/// read (an image ID, more images than `limits.maxImagesPerPod`, an invalid reference) is refused:
/// the old object's error hides nothing on the new one.
#[tokio::test]
async fn an_update_of_an_unreadable_pod_is_judged_on_its_own() {
    let app = state(example_rules(), Duration::from_secs(4), Limits::default());
    let base: Value = serde_json::from_slice(&review("pod-ephemeral-update.json")).unwrap();
    let image_id = format!("sha256:{}", "a".repeat(64));
    let many: Vec<Value> = (0..251)
        .map(|i| serde_json::json!({"name": format!("c{i}"), "image": "registry.example.com/web:1.0"}))
        .collect();
    let olds = [
        (
            "an image ID",
            serde_json::json!([{"name": "c0", "image": image_id}]),
        ),
        ("too many images", Value::from(many)),
        (
            "an invalid reference",
            serde_json::json!([{"name": "c0", "image": "registry.example.com/web:1.0:x"}]),
        ),
    ];
    for (what, containers) in olds {
        let mut doc = base.clone();
        doc["request"]["oldObject"]["spec"]["containers"] = containers.clone();
        doc["request"]["object"]["spec"]["containers"] = containers;
        let body = serde_json::to_vec(&doc).unwrap();
        let answer = call(&app, request("POST", "/validate", body)).await;
        assert_eq!(answer.status, 200, "{what}: {}", answer.text);
        let response = &answer.json()["response"];
        assert_eq!(response["allowed"], false, "{what}: {response}");
        assert_eq!(response["status"]["code"], 400, "{what}: {response}");
    }
    // The same pod with a readable old object: the foreign debugger alone is the new finding.
    let answer = call(
        &app,
        request("POST", "/validate", review("pod-ephemeral-update.json")),
    )
    .await;
    let response = &answer.json()["response"];
    assert_eq!(response["status"]["code"], 403, "{response}");
    assert!(response["status"]["message"]
        .as_str()
        .unwrap()
        .contains("evil.io/tools"));
}

/// What admission counts for a rollout comes only from requests for namespaces that exist, and
/// only for what would refuse the request: anyone can post reviews naming made-up namespaces,
/// or UPDATEs of objects that already had the finding.
#[tokio::test]
async fn rollout_counts_need_a_namespace_that_exists_and_a_new_finding() {
    use poolguard_core::config::Enforcement;
    use poolguard_core::rollout::machine::{GroupState, GroupStatus, RolloutState};
    use poolguard_core::rollout::view::{PolicyRollout, RolloutView};

    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.yaml");
    std::fs::write(
        &config,
        "policies:\n  allowedrepositories:\n    enforcement: deny\n    parameters: {repositories: [\"registry.example.com/\"]}\n    rollout:\n      groups: [{name: all}]\n      minSuccessTime: 10m\n      progressDeadline: 2h\n",
    )
    .unwrap();
    let sources = Sources {
        config: Some(config),
        policies_dir: Some("policies".into()),
        placement_dir: None,
        gatekeeper_dir: None,
        gatekeeper_cluster: None,
    };
    let app = state(sources, Duration::from_secs(4), Limits::default());
    let version = app
        .rules
        .load()
        .policies()
        .version("allowedrepositories")
        .to_string();
    let group = GroupState::new("all", GroupStatus::Progressing, 0, "");
    let rollout = PolicyRollout {
        state: RolloutState {
            version,
            previous_version: None,
            previous_enforcement: None,
            final_enforcement: Enforcement::Deny,
            paused_since: None,
            groups: vec![group],
        },
        current: None,
        previous: None,
    };
    let view = RolloutView {
        policies: [("allowedrepositories".to_string(), rollout)].into(),
    };
    poolguard::rollout::sync::install(&app.rules, Arc::new(view));

    let base: Value = serde_json::from_slice(&review("pod-create-unmapped.json")).unwrap();
    let post = |namespace: &str, old_image: Option<&str>| {
        let mut doc = base.clone();
        doc["request"]["namespace"] = namespace.into();
        doc["request"]["object"]["spec"]["containers"][0]["image"] = "evil.io/x:1".into();
        if let Some(old) = old_image {
            doc["request"]["operation"] = "UPDATE".into();
            doc["request"]["oldObject"] = doc["request"]["object"].clone();
            doc["request"]["oldObject"]["spec"]["containers"][0]["image"] = old.into();
        }
        let app = app.clone();
        async move {
            let body = serde_json::to_vec(&doc).unwrap();
            let answer = call(&app, request("POST", "/validate", body)).await;
            let response = answer.json()["response"].clone();
            // The Progressing group warns: allowed.
            assert_eq!(response["allowed"], true, "{response}");
        }
    };
    let would_deny = || {
        let now = poolguard::wall_clock::unix_now();
        app.rollout_counts
            .snapshot(now)
            .map(|s| s["allowedrepositories"].values().next().unwrap()["all"].would_deny)
    };
    // A namespace that does not exist: nothing counted.
    post("made-up", None).await;
    assert_eq!(would_deny(), None);
    // An UPDATE of a pod that already had the foreign image: nothing new to refuse.
    post("unmapped", Some("evil.io/x:1")).await;
    assert_eq!(would_deny(), None);
    // A new foreign image in a namespace that exists: counted.
    post("unmapped", Some("registry.example.com/web:1.0")).await;
    assert_eq!(would_deny(), Some(1));
}

#[tokio::test]
async fn metric_labels_stay_a_closed_set_whatever_the_kinds() {
    let app = state(example_rules(), Duration::from_secs(4), Limits::default());
    let mut doc: Value = serde_json::from_slice(&review("pod-create-mapped.json")).unwrap();
    let mut after_first = 0;
    for i in 0..50 {
        doc["request"]["kind"]["kind"] = Value::from(format!("K{i}{}", "x".repeat(100_000)));
        // (A kind poolguard does not know, with a resource of its own: a pods resource with
        // another kind is refused as inconsistent.)
        doc["request"]["resource"]["resource"] = Value::from(format!("k{i}s"));
        let body = serde_json::to_vec(&doc).unwrap();
        let answer = call(&app, request("POST", "/validate", body)).await;
        assert_eq!(answer.status, 200);
        if i == 0 {
            after_first = app.metrics.encode().len();
        }
    }
    let text = app.metrics.encode();
    // 49 more kinds add no series: only counts change (a few more digits).
    assert!(
        text.len() < after_first + 512,
        "{} bytes of metrics after 50 kinds, {after_first} after the first",
        text.len()
    );
    assert!(text.len() < 64 * 1024, "{} bytes of metrics", text.len());
    assert!(text.contains(r#"poolguard_admission_requests_total{webhook="validate",operation="CREATE",kind="other",decision="allowed"} 50"#), "{text}");
}

#[tokio::test]
async fn without_a_free_evaluation_slot_the_failure_behaviour_applies() {
    let limits = Limits {
        max_evaluations: 1,
        max_queued_evaluations: 0,
        ..Limits::default()
    };
    for on_error in ["deny", "allow"] {
        let dir = tempfile::tempdir().unwrap();
        let app = state(
            slow_rules(dir.path(), on_error),
            Duration::from_millis(1500),
            limits.clone(),
        );
        let slow = take_the_slot(&app).await;
        let busy = call(
            &app,
            request("POST", "/validate", review("pod-create-placed.json")),
        )
        .await
        .json();
        let what = "poolguard is busy (1 policy evaluations running, 0 waiting)";
        if on_error == "deny" {
            assert_eq!(busy["response"]["allowed"], false, "{busy}");
            assert_eq!(busy["response"]["status"]["code"], 500);
            assert_eq!(
                busy["response"]["status"]["message"],
                format!("{what}, so the request is refused (evaluation.onError: deny)")
            );
        } else {
            assert_eq!(busy["response"]["allowed"], true, "{busy}");
            assert_eq!(
                busy["response"]["warnings"][0],
                format!("{what}; allowed because evaluation.onError is allow")
            );
        }
        let slow = slow.await.unwrap().json();
        let text = slow.to_string();
        assert!(
            text.contains("did not decide within the 1500 ms deadline"),
            "{text}"
        );
        // Both left to onError are counted, each with its reason; the capacities are shown.
        let metrics = app.metrics.encode();
        for line in [
            r#"poolguard_evaluations_unfinished_total{webhook="validate",reason="queue_full"} 1"#,
            r#"poolguard_evaluations_unfinished_total{webhook="validate",reason="deadline"} 1"#,
            "poolguard_evaluation_slots 1",
            "poolguard_evaluation_queue_capacity 0",
        ] {
            assert!(metrics.contains(line), "{line} missing from:\n{metrics}");
        }
    }
}

/// With placement policies configured, mutating requests also take an evaluation slot. Without
/// one (here: the only slot held by a slow validation, onError allow), a pod of a named pool is
/// still placed — admitted unpatched it could run on any node — and a pod whose pool would be
/// chosen is refused with 503 whatever onError says.
#[tokio::test]
async fn a_busy_mutating_webhook_still_places_pods_and_never_admits_an_unchosen_one() {
    let dir = tempfile::tempdir().unwrap();
    let mut sources = slow_rules(dir.path(), "allow");
    let config = sources.config.clone().unwrap();
    let mut text = std::fs::read_to_string(&config).unwrap();
    text.push_str("placement:\n  chooseValue: auto\n  pools: [pool1, gpu]\n");
    std::fs::write(&config, text).unwrap();
    sources.placement_dir = Some("policies/placement".into());
    let mut namespaces = sources::load_namespaces(Path::new("testdata/namespaces.yaml")).unwrap();
    namespaces.insert(
        "ml".into(),
        [("agentpool".to_string(), "auto".to_string())].into(),
    );
    let (app, slow) = one_slot_taken(&sources, namespaces).await;
    let named = call(
        &app,
        request("POST", "/mutate", review("pod-create-mapped.json")),
    )
    .await
    .json();
    assert_eq!(named["response"]["allowed"], true, "{named}");
    assert!(
        named["response"]["patch"].is_string(),
        "placed without a slot: {named}"
    );

    let mut chosen: Value = serde_json::from_slice(&review("pod-create-mapped.json")).unwrap();
    chosen["request"]["namespace"] = "ml".into();
    let chosen = call(
        &app,
        request("POST", "/mutate", serde_json::to_vec(&chosen).unwrap()),
    )
    .await
    .json();
    assert_eq!(chosen["response"]["allowed"], false, "{chosen}");
    assert_eq!(chosen["response"]["status"]["code"], 503, "{chosen}");
    let message = chosen["response"]["status"]["message"].as_str().unwrap();
    assert!(
        message.starts_with("poolguard is busy (1 policy evaluations running, 0 waiting), so no pool could be chosen"),
        "{message}"
    );
    slow.await.unwrap();
}

/// Who may change a namespace's guarded labels is decided whatever the load: a busy
/// validating webhook with `onError: allow` still refuses a namespace editor's relabel, through
/// the resource or a subresource, and still allows the authority's.
#[tokio::test]
async fn a_busy_validating_webhook_still_guards_namespace_labels() {
    let dir = tempfile::tempdir().unwrap();
    let sources = slow_rules(dir.path(), "allow");
    let (app, slow) = one_slot_taken(
        &sources,
        sources::load_namespaces(Path::new("testdata/namespaces.yaml")).unwrap(),
    )
    .await;
    let relabel = |sub: &str, groups: Value| {
        let ns = |pool: &str| {
            serde_json::json!({"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": "mapped", "labels": {"agentpool": pool}}})
        };
        let mut request = serde_json::json!({"uid": "ns", "kind": {"group": "", "version": "v1", "kind": "Namespace"},
            "resource": {"group": "", "version": "v1", "resource": "namespaces"},
            "name": "mapped", "namespace": "mapped", "operation": "UPDATE",
            "userInfo": {"username": "alice", "groups": groups},
            "object": ns("gpu"), "oldObject": ns("pool1")});
        if !sub.is_empty() {
            request["subResource"] = sub.into();
        }
        serde_json::to_vec(&serde_json::json!({"apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview", "request": request}))
        .unwrap()
    };
    for sub in ["", "status", "finalize"] {
        let editor = call(
            &app,
            request(
                "POST",
                "/validate",
                relabel(sub, serde_json::json!(["system:authenticated"])),
            ),
        )
        .await
        .json();
        assert_eq!(editor["response"]["allowed"], false, "{sub:?}: {editor}");
        assert_eq!(
            editor["response"]["status"]["code"], 403,
            "{sub:?}: {editor}"
        );
        let admin = call(
            &app,
            request(
                "POST",
                "/validate",
                relabel(sub, serde_json::json!(["system:masters"])),
            ),
        )
        .await
        .json();
        assert_eq!(admin["response"]["allowed"], true, "{sub:?}: {admin}");
        assert!(admin["response"]["warnings"].is_null(), "{sub:?}: {admin}");
    }
    slow.await.unwrap();
}

/// Namespaces whose API server cannot be read: nothing cached, every GET fails and is counted.
#[derive(Default)]
struct Unreadable {
    gets: std::sync::atomic::AtomicUsize,
}

impl poolguard::namespaces::Source for Unreadable {
    fn cached(&self, _: &str) -> Option<poolguard_core::labels::Labels> {
        None
    }
    fn fetch<'a>(
        &'a self,
        name: &'a str,
    ) -> futures::future::BoxFuture<'a, Result<Option<poolguard_core::labels::Labels>, String>>
    {
        self.gets.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Box::pin(std::future::ready(Err(format!(
            "{name}: the API server is down"
        ))))
    }
    fn synced(&self) -> bool {
        true
    }
    fn len(&self) -> usize {
        0
    }
}

#[tokio::test]
async fn a_namespace_being_created_is_decided_without_reading_the_api_server() {
    let source = Arc::new(Unreadable::default());
    let app = Arc::new(ServerState::new(
        example_rules().load().unwrap(),
        Namespaces::new(source.clone()),
        Arc::new(Metrics::new()),
        Duration::from_secs(2),
        Limits::default(),
    ));
    let create = |groups: Value| {
        serde_json::to_vec(&serde_json::json!({"apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview", "request": {
            "uid": "ns", "kind": {"group": "", "version": "v1", "kind": "Namespace"},
            "resource": {"group": "", "version": "v1", "resource": "namespaces"},
            "name": "fresh", "namespace": "fresh", "operation": "CREATE",
            "userInfo": {"username": "alice", "groups": groups},
            "object": {"apiVersion": "v1", "kind": "Namespace",
                "metadata": {"name": "fresh", "labels": {"agentpool": "gpu"}}}}}))
        .unwrap()
    };
    // The namespace does not exist yet, so no cache holds it; who may set its pool is read from
    // the request alone: no GET, and no refusal when the API server cannot be read.
    for (group, code) in [("system:masters", 200), ("system:authenticated", 403)] {
        let body = create(serde_json::json!([group]));
        let answer = call(&app, request("POST", "/validate", body)).await.json();
        let allowed = code == 200;
        assert_eq!(answer["response"]["allowed"], allowed, "{group}: {answer}");
        if !allowed {
            assert_eq!(answer["response"]["status"]["code"], code, "{answer}");
        }
    }
    assert_eq!(source.gets.load(std::sync::atomic::Ordering::SeqCst), 0);
    // A pod's decision reads its namespace's labels: with the API server down it is refused.
    let pod = call(
        &app,
        request("POST", "/validate", review("pod-create-placed.json")),
    )
    .await;
    let pod = pod.json();
    assert_eq!(pod["response"]["allowed"], false, "{pod}");
    assert_eq!(pod["response"]["status"]["code"], 500, "{pod}");
    assert_eq!(source.gets.load(std::sync::atomic::Ordering::SeqCst), 1);
}

// ---- On loopback, over TLS ----

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
    // The same object again, the same answer. The shipped allowedrepositories, loaded unchanged,
    // is decided by its Rust copy (`policy::shipped`), which is cheaper than a memo lookup, so
    // nothing is remembered (the memo serves custom Rego: `policy::set`'s tests).
    let (status, again) = read(
        h2.send_request(post(
            "/validate",
            review("deployment-create-bad-image.json"),
        ))
        .await
        .unwrap(),
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(serde_json::from_str::<Value>(&again).unwrap(), doc);

    let text = metrics(&running).await;
    assert!(text.contains(r#"poolguard_admission_requests_total{webhook="mutate",operation="CREATE",kind="Pod",decision="patched"} 1"#), "{text}");
    assert!(text.contains(r#"poolguard_policy_evaluations_total{policy="allowedrepositories",enforcement="deny",result="infringement"} 2"#), "{text}");
    assert!(
        text.contains(r#"poolguard_result_memo_hits{policies="sit"} 0"#),
        "{text}"
    );
    assert!(
        text.contains(r#"poolguard_result_memo_misses{policies="sit"} 0"#),
        "{text}"
    );
    assert!(
        text.contains(r#"poolguard_result_memo_hits{policies="placement"} 0"#),
        "{text}"
    );
    // latesttag depends on allowedrepositories being Compliant (testdata/config/example.yaml).
    assert!(text.contains(r#"poolguard_policy_evaluations_total{policy="latesttag",enforcement="deny",result="pending"} 2"#), "{text}");
    assert!(text.contains("poolguard_namespace_cache_size 5"), "{text}");
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
    for name in ["allowedrepositories.yaml", "latesttag.yaml"] {
        std::fs::copy(Path::new("policies").join(name), policies.join(name)).unwrap();
    }
    let sources = Sources {
        config: Some("testdata/config/example.yaml".into()),
        policies_dir: Some(policies.clone()),
        placement_dir: None,
        gatekeeper_dir: None,
        gatekeeper_cluster: None,
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

/// A config whose dependencies name no loaded policy fails to load as a whole: the reload is
/// counted as failed and the last good rules (latesttag waiting for allowedrepositories) serve.
#[tokio::test]
async fn bad_dependency_push_keeps_the_last_good_rules() {
    let dir = tempfile::tempdir().unwrap();
    let ca = write_bundle(dir.path());
    let config_dir = dir.path().join("config");
    std::fs::create_dir(&config_dir).unwrap();
    let config = config_dir.join("config.yaml");
    let good = std::fs::read_to_string("testdata/config/example.yaml").unwrap();
    std::fs::write(&config, &good).unwrap();
    let sources = Sources {
        config: Some(config.clone()),
        policies_dir: Some("policies".into()),
        placement_dir: None,
        gatekeeper_dir: None,
        gatekeeper_cluster: None,
    };
    let running = serve::start(options(files_in(dir.path()), sources))
        .await
        .unwrap();
    let client = Client::new(&ca, b"http/1.1", None);

    let bad = good.replace(
        "- policy: allowedrepositories",
        "- policy: allowedrepository",
    );
    assert_ne!(bad, good);
    std::fs::write(&config, bad).unwrap();
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
    assert_eq!(doc["response"]["allowed"], false, "{body}");
    let text = metrics(&running).await;
    assert!(text.contains(r#"poolguard_policy_evaluations_total{policy="latesttag",enforcement="deny",result="pending"} 1"#), "{text}");
    running.shutdown.cancel();
    running.wait().await.unwrap();
}

#[tokio::test]
async fn mtls_requires_the_api_servers_client_certificate() {
    let dir = tempfile::tempdir().unwrap();
    let ca = write_bundle(dir.path());
    let client_ca = Authority::generate("clients", 1).unwrap();
    std::fs::write(dir.path().join("client-ca.crt"), client_ca.cert_pem()).unwrap();
    let files = TlsFiles {
        client_ca: Some(dir.path().join("client-ca.crt")),
        client_names: vec!["kube-apiserver-webhook-client".into()],
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

    // Signed by the CA but not the API server (on kubeadm the cluster CA signs every kubelet's
    // client certificate): refused at the handshake.
    let kubelet = client_ca
        .issue(
            "system:node:worker-7",
            &["worker-7".into()],
            &[],
            Usage::Client,
            1,
        )
        .unwrap();
    let node = Client::new(&ca, b"http/1.1", Some((kubelet.cert_pem, kubelet.key_pem)));
    let refused = match node.0.http1(running.addr).await {
        Err(_) => true,
        Ok((mut sender, _)) => {
            sender.ready().await.is_err()
                || sender
                    .send_request(post("/mutate", review("pod-create-mapped.json")))
                    .await
                    .is_err()
        }
    };
    assert!(
        refused,
        "a certificate of the CA naming another client was served"
    );
    // The API server's, by its subject's common name or by a DNS name.
    for (cn, dns) in [
        ("kube-apiserver-webhook-client", vec![]),
        (
            "apiserver",
            vec!["kube-apiserver-webhook-client".to_string()],
        ),
    ] {
        let issued = client_ca.issue(cn, &dns, &[], Usage::Client, 1).unwrap();
        let trusted = Client::new(&ca, b"http/1.1", Some((issued.cert_pem, issued.key_pem)));
        let (mut sender, _) = trusted.http1(running.addr).await;
        assert_eq!(
            send1(&mut sender, "/mutate", review("pod-create-mapped.json"))
                .await
                .0,
            200
        );
    }
    running.shutdown.cancel();
    running.wait().await.unwrap();
}

#[tokio::test]
async fn past_the_deadline_the_failure_behaviour_applies_and_the_work_stops() {
    let dir = tempfile::tempdir().unwrap();
    let ca = write_bundle(dir.path());
    let mut opts = options(files_in(dir.path()), slow_rules(dir.path(), "deny"));
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
    assert_eq!(
        doc["response"]["status"]["message"],
        "poolguard did not decide within the 100 ms deadline, so the request is refused (evaluation.onError: deny)"
    );
    // The policy's own limit is a minute; cut to the time left, it stops with the answer.
    wait_for_metric(&running, "poolguard_evaluations_running 0\n").await;
    eprintln!(
        "the evaluation stopped {:?} after the request",
        started.elapsed()
    );
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
    // The listening addresses are in the JSON log line announcing them.
    let stderr = child.stderr.take().unwrap();
    let mut lines = tokio::io::AsyncBufReadExt::lines(tokio::io::BufReader::new(stderr));
    let (addr, metrics_addr): (SocketAddr, SocketAddr) = loop {
        let line = tokio::time::timeout(Duration::from_secs(20), lines.next_line())
            .await
            .unwrap()
            .unwrap()
            .expect("serve exited early");
        let log: Value = serde_json::from_str(&line).unwrap_or_default();
        let fields = &log["fields"];
        if let (Some(addr), Some(ops)) = (fields["addr"].as_str(), fields["metrics_addr"].as_str())
        {
            break (addr.parse().unwrap(), ops.parse().unwrap());
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
    // The request is in flight once its body has its share of the budget.
    let reserved = format!("poolguard_request_body_bytes_reserved {}\n", body.len());
    let started = Instant::now();
    while !metrics_at(metrics_addr).await.contains(&reserved) {
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "the request was not in flight within 5 s"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let pid = child.id().unwrap().to_string();
    assert!(std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap()
        .success());
    // No new connections once shutting down: the listener closes (within 5 s).
    let signalled = Instant::now();
    while TcpStream::connect(addr).await.is_ok() {
        assert!(
            signalled.elapsed() < Duration::from_secs(5),
            "still accepting 5 s after SIGTERM"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
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

/// The head of an HTTP/1.1 POST, for clients that write bodies by hand.
fn head(path: &str, length: usize, close: bool) -> String {
    let connection = if close { "connection: close\r\n" } else { "" };
    format!("POST {path} HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\ncontent-length: {length}\r\n{connection}\r\n")
}

/// `{"pad":"xxx…"}`, exactly `n` bytes.
fn padded(n: usize) -> Vec<u8> {
    let body = format!("{{\"pad\":\"{}\"}}", "x".repeat(n - 10)).into_bytes();
    assert_eq!(body.len(), n);
    body
}

#[tokio::test]
async fn the_body_budget_bounds_the_bytes_held_by_requests_in_flight() {
    let dir = tempfile::tempdir().unwrap();
    let budget = 3 * MIB + MIB / 2;
    // One client address (every client here is 127.0.0.1) may take the whole budget, and a
    // body may stop arriving: what is tested is the budget all requests share.
    let limits = Limits {
        max_body_bytes: MIB,
        body_budget_bytes: budget,
        peer_share_percent: 100,
        body_min_bytes_per_second: 0,
        ..Limits::default()
    };
    let (running, ca) = start_limited(dir.path(), example_rules(), limits).await;
    let client = Client::new(&ca, b"http/1.1", None);
    let body = padded(MIB);
    // Three maximal bodies, each sent but for its last byte and held open: a body holds the
    // memory its bytes take as they arrive.
    let mut held = Vec::new();
    for _ in 0..3 {
        let mut tls = client.tls(running.addr).await.unwrap();
        tls.write_all(head("/validate", MIB, true).as_bytes())
            .await
            .unwrap();
        tls.write_all(&body[..MIB - 1]).await.unwrap();
        tls.flush().await.unwrap();
        held.push(tls);
    }
    wait_for_metric(
        &running,
        &format!("poolguard_request_body_bytes_reserved {}\n", 3 * MIB),
    )
    .await;
    // A fourth does not fit: 503, a one-line reason, Retry-After; counted. Its buffer grows by
    // doubling: its last step, from half a MiB to one, is what does not fit.
    let mut h2 = Client::new(&ca, b"h2", None).http2(running.addr).await;
    let response = h2
        .send_request(post("/validate", body.clone()))
        .await
        .unwrap();
    assert_eq!(response.headers()["retry-after"], "1");
    let (status, text) = read(response).await;
    assert_eq!(status, 503);
    assert_eq!(text, format!("overloaded: {} more body bytes do not fit the {budget}-byte budget ({} held by requests in flight); retry\n", MIB / 2, 3 * MIB + MIB / 2));
    // The same over HTTP/1.1 (where the body is read and dropped before the answer).
    let (mut h1, _) = client.http1(running.addr).await;
    assert_eq!(send1(&mut h1, "/validate", body.clone()).await.0, 503);
    // A small request still fits.
    let (status, _) = read(
        h2.send_request(post("/mutate", review("pod-create-mapped.json")))
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 200);
    // One held request completes; its bytes are given back and a maximal body fits again.
    let mut first = held.remove(0);
    first.write_all(&body[MIB - 1..]).await.unwrap();
    first.flush().await.unwrap();
    let mut answer = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), first.read_to_end(&mut answer))
        .await
        .unwrap()
        .unwrap();
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
    wait_for_metric(
        &running,
        &format!("poolguard_request_body_bytes_reserved {}\n", 2 * MIB),
    )
    .await;
    let (status, text) = read(h2.send_request(post("/validate", body)).await.unwrap()).await;
    assert_eq!(status, 400, "{text}");
    let text = metrics(&running).await;
    assert!(text.contains(r#"poolguard_admission_requests_total{webhook="validate",operation="",kind="",decision="overloaded"} 2"#), "{text}");
    drop(held);
    running.shutdown.cancel();
    running.wait().await.unwrap();
}

/// A client that reaches the Service cannot starve admission. Bodies declared large and never
/// sent hold no budget and are cut at the minimum rate, long before the body timeout; one
/// client address holds at most its share of the budget, and the requests of another address
/// (the API server's) are served all along.
#[tokio::test]
async fn a_client_that_declares_large_bodies_starves_no_one() {
    let dir = tempfile::tempdir().unwrap();
    let (running, ca) = start_limited(dir.path(), example_rules(), Limits::default()).await;
    let client = Client::new(&ca, b"http/1.1", None);
    let attacker: std::net::IpAddr = "127.0.0.2".parse().unwrap();
    // Two connections declare 24 MiB and 8 MiB on /validate and send nothing.
    let mut silent = Vec::new();
    for length in [24 * MIB, 8 * MIB] {
        let mut tls = client.0.connect_from(attacker, running.addr).await.unwrap();
        tls.write_all(head("/validate", length, true).as_bytes())
            .await
            .unwrap();
        tls.flush().await.unwrap();
        silent.push(tls);
    }
    // Meanwhile the API server's address is served, eight of eight, and nothing is reserved.
    let started = Instant::now();
    let mut h2 = Client::new(&ca, b"h2", None).http2(running.addr).await;
    for _ in 0..8 {
        let response = h2
            .send_request(post("/mutate", review("pod-create-mapped.json")))
            .await
            .unwrap();
        let (status, text) = read(response).await;
        assert_eq!(status, 200, "{text}");
        assert!(metrics(&running)
            .await
            .contains("poolguard_request_body_bytes_reserved 0\n"));
        tokio::time::sleep(Duration::from_millis(125)).await;
    }
    // The silent bodies are cut at the first check of their rate: 408, not after 10 s.
    for mut tls in silent {
        let mut answer = Vec::new();
        let _ = tokio::time::timeout(Duration::from_secs(5), tls.read_to_end(&mut answer)).await;
        let answer = String::from_utf8_lossy(&answer);
        assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
        assert!(
            answer.contains("request body arriving too slowly"),
            "{answer}"
        );
    }
    assert!(
        started.elapsed() < Duration::from_secs(6),
        "{:?}",
        started.elapsed()
    );
    // An address that sends a maximal body (all but its last byte) holds it; a second body from
    // it is refused at its share (429), while the API server's address is still served.
    let mut big = client.0.connect_from(attacker, running.addr).await.unwrap();
    big.write_all(head("/validate", 24 * MIB, true).as_bytes())
        .await
        .unwrap();
    big.write_all(&vec![b' '; 24 * MIB - 1]).await.unwrap();
    big.flush().await.unwrap();
    wait_for_metric(
        &running,
        &format!("poolguard_request_body_bytes_reserved {}\n", 24 * MIB),
    )
    .await;
    let mut second = client.0.connect_from(attacker, running.addr).await.unwrap();
    second
        .write_all(head("/validate", 64 * 1024, true).as_bytes())
        .await
        .unwrap();
    second.write_all(&padded(64 * 1024)).await.unwrap();
    second.flush().await.unwrap();
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), second.read_to_end(&mut answer)).await;
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 429"), "{answer}");
    assert!(
        answer.contains(&format!(
            "share of the body budget ({} held by its requests in flight)",
            24 * MIB
        )),
        "{answer}"
    );
    let response = h2
        .send_request(post("/mutate", review("pod-create-mapped.json")))
        .await
        .unwrap();
    assert_eq!(read(response).await.0, 200);
    drop(big);
    running.shutdown.cancel();
    running.wait().await.unwrap();
}

type BoxBody = http_body_util::combinators::BoxBody<Bytes, Infallible>;

/// An HTTP/2 connection whose requests can stream their bodies.
async fn http2_streaming(ca: &str, addr: SocketAddr) -> http2::SendRequest<BoxBody> {
    let tls = Client::new(ca, b"h2", None).tls(addr).await.unwrap();
    let (sender, conn) = http2::handshake(TokioExecutor::new(), TokioIo::new(tls))
        .await
        .unwrap();
    tokio::spawn(conn);
    sender
}

#[tokio::test]
async fn trickled_bodies_are_cut_off_at_the_body_timeout() {
    let dir = tempfile::tempdir().unwrap();
    // No minimum rate: what is tested is the body timeout.
    let limits = Limits {
        body_timeout: Duration::from_secs(1),
        body_min_bytes_per_second: 0,
        ..Limits::default()
    };
    let (running, ca) = start_limited(dir.path(), example_rules(), limits).await;
    let expected = "request body not received within 1000 ms";

    // HTTP/1.1: the head, then a byte every 100 ms.
    let tls = Client::new(&ca, b"http/1.1", None)
        .tls(running.addr)
        .await
        .unwrap();
    let (mut reader, mut writer) = tokio::io::split(tls);
    writer
        .write_all(head("/validate", 1000, false).as_bytes())
        .await
        .unwrap();
    let trickle = tokio::spawn(async move {
        for _ in 0..100 {
            if writer.write_all(b" ").await.is_err() || writer.flush().await.is_err() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    });
    let started = Instant::now();
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), reader.read_to_end(&mut answer)).await;
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(answer.contains(expected), "{answer}");
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "{:?}",
        started.elapsed()
    );
    trickle.abort();

    // HTTP/2: a stream that sends a byte, then nothing.
    let mut sender = http2_streaming(&ca, running.addr).await;
    let first = futures::stream::iter([Ok::<_, Infallible>(Frame::data(Bytes::from_static(b"{")))]);
    let body = BodyExt::boxed(StreamBody::new(first.chain(futures::stream::pending())));
    let request = hyper::Request::post("/validate")
        .header("content-length", "1000")
        .body(body)
        .unwrap();
    let started = Instant::now();
    let response = tokio::time::timeout(Duration::from_secs(5), sender.send_request(request))
        .await
        .unwrap()
        .unwrap();
    let (status, text) = read(response).await;
    assert_eq!(status, 408);
    assert!(text.starts_with(expected), "{text}");
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "{:?}",
        started.elapsed()
    );

    let text = metrics(&running).await;
    assert!(text.contains(r#"poolguard_admission_requests_total{webhook="validate",operation="",kind="",decision="body_timeout"} 2"#), "{text}");
    running.shutdown.cancel();
    running.wait().await.unwrap();
}

#[tokio::test]
async fn http2_answers_requests_whose_bodies_it_does_not_read() {
    let dir = tempfile::tempdir().unwrap();
    let limits = Limits {
        max_body_bytes: MIB,
        ..Limits::default()
    };
    let (running, ca) = start_limited(dir.path(), example_rules(), limits).await;
    let mut h2 = Client::new(&ca, b"h2", None).http2(running.addr).await;
    let not_found = "not found: poolguard serves POST /mutate and POST /validate\n";
    for _ in 0..3 {
        // Within the limit: read and dropped; beyond it: answered with the rest unread.
        for size in [MIB / 2, 4 * MIB] {
            let sent = h2.send_request(post("/nope", vec![b'x'; size])).await;
            let (status, text) = read(sent.unwrap()).await;
            assert_eq!((status, text.as_str()), (404, not_found), "{size} bytes");
        }
        let sent = h2.send_request(post("/mutate", vec![b'x'; 4 * MIB])).await;
        let (status, text) = read(sent.unwrap()).await;
        assert_eq!(status, 413);
        assert_eq!(
            text,
            "request body too large: 4194304 bytes, the limit is 1048576 bytes\n"
        );
    }
    let sent = h2.send_request(post("/mutate", review("pod-create-mapped.json")));
    assert_eq!(read(sent.await.unwrap()).await.0, 200);
    let text = metrics(&running).await;
    assert!(text.contains(r#"poolguard_admission_requests_total{webhook="mutate",operation="",kind="",decision="too_large"} 3"#), "{text}");
    running.shutdown.cancel();
    running.wait().await.unwrap();
}

/// Sends `body` on a new HTTP/2 stream as flow control allows, while awaiting the answer:
/// whether the whole body could be sent, and the answer's status and text.
async fn h2_exchange(ca: &str, addr: SocketAddr, path: &str, body: &[u8]) -> (bool, u16, String) {
    let tls = Client::new(ca, b"h2", None).tls(addr).await.unwrap();
    let (client, conn) = h2::client::handshake(tls).await.unwrap();
    tokio::spawn(conn);
    let mut client = client.ready().await.unwrap();
    let request = axum::http::Request::post(format!("https://127.0.0.1{path}"))
        .header("content-length", body.len())
        .body(())
        .unwrap();
    let (response, mut stream) = client.send_request(request, false).unwrap();
    let send = async {
        let mut sent = 0;
        while sent < body.len() {
            stream.reserve_capacity(body.len() - sent);
            let capacity = match futures::future::poll_fn(|cx| stream.poll_capacity(cx)).await {
                Some(Ok(n)) => n,
                _ => return false,
            };
            let end = (sent + capacity).min(body.len());
            let chunk = Bytes::copy_from_slice(&body[sent..end]);
            if stream.send_data(chunk, end == body.len()).is_err() {
                return false;
            }
            sent = end;
        }
        true
    };
    let answer = async {
        let response = response.await.unwrap();
        let status = response.status().as_u16();
        let mut data = response.into_body();
        let mut text = Vec::new();
        while let Some(chunk) = data.data().await {
            let chunk = chunk.unwrap();
            data.flow_control().release_capacity(chunk.len()).unwrap();
            text.extend_from_slice(&chunk);
        }
        (status, String::from_utf8_lossy(&text).into_owned())
    };
    let (sent_all, (status, text)) = tokio::time::timeout(Duration::from_secs(10), async {
        tokio::join!(send, answer)
    })
    .await
    .unwrap();
    (sent_all, status, text)
}

#[tokio::test]
async fn http2_reads_a_body_within_the_limit_before_answering_an_unknown_path() {
    let dir = tempfile::tempdir().unwrap();
    let limits = Limits {
        max_body_bytes: MIB,
        ..Limits::default()
    };
    let (running, ca) = start_limited(dir.path(), example_rules(), limits).await;
    // More than the stream window (256 KiB): the client is still sending when a server that
    // does not read would answer, and its stream would be reset.
    let (sent_all, status, text) =
        h2_exchange(&ca, running.addr, "/nope", &[b'x'; 700 * 1024]).await;
    assert_eq!(status, 404, "{text}");
    assert!(sent_all, "the stream was reset before the body was sent");
    running.shutdown.cancel();
    running.wait().await.unwrap();
}

#[tokio::test]
async fn at_the_connection_cap_the_idlest_connection_makes_room() {
    let dir = tempfile::tempdir().unwrap();
    let limits = Limits {
        max_connections: 3,
        ..Limits::default()
    };
    let (running, ca) = start_limited(dir.path(), example_rules(), limits).await;
    let client = Client::new(&ca, b"http/1.1", None);
    // Oldest first: a client that connected and sent nothing (no TLS handshake even), then two
    // that were served and went idle.
    let silent = TcpStream::connect(running.addr).await.unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;
    let (mut a, _) = client.http1(running.addr).await;
    let (mut b, _) = client.http1(running.addr).await;
    for sender in [&mut a, &mut b] {
        assert_eq!(ok_mutate(sender).await, 200);
    }
    wait_for_metric(&running, "poolguard_connections 3\n").await;
    // Each new connection is served at once; the silent one goes first, then a.
    let mut newer = Vec::new();
    for n in 1..=2 {
        let (mut c, _) = tokio::time::timeout(Duration::from_secs(2), client.http1(running.addr))
            .await
            .unwrap_or_else(|_| panic!("connection {n} past the cap was not served"));
        assert_eq!(ok_mutate(&mut c).await, 200, "past the cap: {n}");
        wait_for_metric(
            &running,
            &format!("poolguard_connections_evicted_total {n}\n"),
        )
        .await;
        newer.push(c);
    }
    let mut silent = silent;
    let mut rest = Vec::new();
    assert_eq!(
        silent
            .read_to_end(&mut rest)
            .await
            .map(|_| rest.len())
            .unwrap_or(0),
        0,
        "the silent connection was closed"
    );
    assert!(a.ready().await.is_err(), "a was closed to make room");
    assert_eq!(ok_mutate(&mut b).await, 200, "b stays open");
    running.shutdown.cancel();
    let _ = tokio::time::timeout(Duration::from_secs(5), running.wait()).await;
}

#[tokio::test]
async fn at_the_connection_cap_a_request_is_never_cut_unless_its_body_stalls() {
    let dir = tempfile::tempdir().unwrap();
    let limits = Limits {
        max_connections: 2,
        ..Limits::default()
    };
    let (running, ca) = start_limited(dir.path(), example_rules(), limits).await;
    let body = review("pod-create-mapped.json");
    // Two requests in flight: their heads sent, their bodies not yet.
    let mut busy = Vec::new();
    for _ in 0..2 {
        let tls = Client::new(&ca, b"http/1.1", None)
            .tls(running.addr)
            .await
            .unwrap();
        let (reader, mut writer) = tokio::io::split(tls);
        writer
            .write_all(head("/mutate", body.len(), false).as_bytes())
            .await
            .unwrap();
        writer.flush().await.unwrap();
        busy.push((reader, writer));
    }
    wait_for_metric(&running, "poolguard_connections 2\n").await;
    let started = Instant::now();
    let addr = running.addr;
    let mut third = tokio::spawn({
        let ca = ca.clone();
        async move {
            let (mut c, _) = Client::new(&ca, b"http/1.1", None).http1(addr).await;
            ok_mutate(&mut c).await
        }
    });
    // A body that has just begun is a request in flight: the new connection waits...
    assert!(
        tokio::time::timeout(Duration::from_millis(300), &mut third)
            .await
            .is_err(),
        "a third connection was served while two requests had just begun"
    );
    // ... until a body has stalled for a second: that connection goes (the API server sends a
    // body at once).
    let status = tokio::time::timeout(Duration::from_secs(5), third)
        .await
        .expect("the third connection was not served once a body had stalled")
        .unwrap();
    assert_eq!(status, 200);
    assert!(started.elapsed() >= Duration::from_millis(900));
    assert!(metrics(&running)
        .await
        .contains("poolguard_connections_evicted_total 1\n"));
    // One stalled request was cut (its connection closed without an answer); the other's body
    // still gets its answer.
    let mut answers = Vec::new();
    for (mut reader, mut writer) in busy {
        let _ = writer.write_all(&body).await;
        let _ = writer.flush().await;
        let mut answer = Vec::new();
        let _ = tokio::time::timeout(Duration::from_secs(2), async {
            let mut buf = [0u8; 12];
            if reader.read_exact(&mut buf).await.is_ok() {
                answer.extend_from_slice(&buf);
            }
        })
        .await;
        answers.push(String::from_utf8_lossy(&answer).into_owned());
    }
    answers.sort();
    assert_eq!(answers, ["", "HTTP/1.1 200"], "{answers:?}");
    running.shutdown.cancel();
    let _ = tokio::time::timeout(Duration::from_secs(5), running.wait()).await;
}

async fn ok_mutate(sender: &mut http1::SendRequest<Full<Bytes>>) -> u16 {
    send1(sender, "/mutate", review("pod-create-mapped.json"))
        .await
        .0
}

#[tokio::test]
async fn idle_connections_are_closed() {
    let dir = tempfile::tempdir().unwrap();
    let limits = Limits {
        idle_timeout: Duration::from_millis(300),
        ..Limits::default()
    };
    let (running, ca) = start_limited(dir.path(), example_rules(), limits).await;
    for alpn in [&b"h2"[..], b"http/1.1"] {
        let tls = Client::new(&ca, alpn, None)
            .tls(running.addr)
            .await
            .unwrap();
        let started = Instant::now();
        let status = if alpn == b"h2" {
            let (mut sender, conn) = http2::handshake(TokioExecutor::new(), TokioIo::new(tls))
                .await
                .unwrap();
            let conn = tokio::spawn(conn);
            let sent = sender.send_request(post("/mutate", review("pod-create-mapped.json")));
            let status = read(sent.await.unwrap()).await.0;
            let ended = tokio::time::timeout(Duration::from_secs(5), conn).await;
            assert!(ended.is_ok(), "the idle HTTP/2 connection is still open");
            status
        } else {
            let (mut sender, conn) = http1::handshake(TokioIo::new(tls)).await.unwrap();
            let conn = tokio::spawn(conn);
            let status = send1(&mut sender, "/mutate", review("pod-create-mapped.json"))
                .await
                .0;
            let ended = tokio::time::timeout(Duration::from_secs(5), conn).await;
            assert!(ended.is_ok(), "the idle HTTP/1.1 connection is still open");
            status
        };
        assert_eq!(status, 200);
        assert!(started.elapsed() >= Duration::from_millis(300));
    }
    running.shutdown.cancel();
    running.wait().await.unwrap();
}

/// An HTTP/1.1 keep-alive connection waiting for its next request is under the idle time, not
/// the request-head clock (kube-apiserver keeps idle webhook connections for 90 s, and a close
/// from poolguard races with the request it writes next); a head that has begun and does not
/// finish is cut off at the head clock.
#[tokio::test]
async fn http1_waiting_for_a_request_is_idle_time_and_a_slow_head_is_cut_off() {
    let dir = tempfile::tempdir().unwrap();
    let limits = Limits {
        idle_timeout: Duration::from_secs(30),
        header_timeout: Duration::from_millis(300),
        ..Limits::default()
    };
    let (running, ca) = start_limited(dir.path(), example_rules(), limits).await;
    let client = Client::new(&ca, b"http/1.1", None);

    let tls = client.tls(running.addr).await.unwrap();
    let (mut sender, conn) = http1::handshake(TokioIo::new(tls)).await.unwrap();
    let conn = tokio::spawn(conn);
    for _ in 0..2 {
        let status = send1(&mut sender, "/mutate", review("pod-create-mapped.json"))
            .await
            .0;
        assert_eq!(status, 200);
        // Three times the head clock with nothing sent.
        tokio::time::sleep(Duration::from_millis(900)).await;
        assert!(!conn.is_finished(), "the waiting connection was closed");
    }
    // The connection that waited is still served: a close by the head clock would show here as
    // a failed request, not only as a finished connection task.
    let status = send1(&mut sender, "/mutate", review("pod-create-mapped.json"))
        .await
        .0;
    assert_eq!(status, 200, "the connection that waited was not served");

    let mut slow = client.tls(running.addr).await.unwrap();
    slow.write_all(b"POST /mutate HTTP/1.1\r\nhost: x\r\n")
        .await
        .unwrap();
    slow.flush().await.unwrap();
    let started = Instant::now();
    let mut rest = Vec::new();
    let ended = tokio::time::timeout(Duration::from_secs(10), slow.read_to_end(&mut rest)).await;
    assert!(ended.is_ok(), "an unfinished head kept its connection open");
    assert!(rest.is_empty(), "answered an unfinished head: {rest:?}");
    assert!(started.elapsed() >= Duration::from_millis(300));

    running.shutdown.cancel();
    running.wait().await.unwrap();
}

/// Shutting down, poolguard does not close an HTTP/1.1 connection under its client: that races
/// with the next request the client writes, which kube-apiserver (HTTP/1.1 only) does not send
/// again. A request that comes after the shutdown began is answered, with `Connection: close`,
/// and then the connection ends; a connection left idle is closed once it has had no request
/// for half the drain time (here 5 s / 2).
#[tokio::test]
async fn shutting_down_http1_connections_end_after_an_answer_not_under_the_client() {
    let dir = tempfile::tempdir().unwrap();
    let (running, ca) = start_limited(dir.path(), example_rules(), Limits::default()).await;
    let client = Client::new(&ca, b"http/1.1", None);
    let mut connections = Vec::new();
    for _ in 0..2 {
        let tls = client.tls(running.addr).await.unwrap();
        let (mut sender, conn) = http1::handshake(TokioIo::new(tls)).await.unwrap();
        let conn = tokio::spawn(conn);
        sender.ready().await.unwrap();
        let response = sender
            .send_request(post("/mutate", review("pod-create-mapped.json")))
            .await
            .unwrap();
        assert!(response.headers().get("connection").is_none());
        assert_eq!(read(response).await.0, 200);
        connections.push((sender, conn));
    }
    let (idle, idle_conn) = connections.pop().unwrap();
    let (mut busy, busy_conn) = connections.pop().unwrap();

    running.shutdown.cancel();
    let shutdown = Instant::now();
    tokio::time::sleep(Duration::from_millis(300)).await;
    busy.ready()
        .await
        .expect("the connection is still open 300 ms into the shutdown");
    let response = busy
        .send_request(post("/mutate", review("pod-create-mapped.json")))
        .await
        .expect("a request written during the shutdown is answered");
    assert_eq!(
        response.headers().get("connection").map(|v| v.as_bytes()),
        Some(&b"close"[..])
    );
    assert_eq!(read(response).await.0, 200);
    tokio::time::timeout(Duration::from_secs(2), busy_conn)
        .await
        .expect("after that answer the connection ends")
        .unwrap()
        .unwrap();

    tokio::time::timeout(Duration::from_secs(5), idle_conn)
        .await
        .expect("the idle connection is closed within the drain time")
        .unwrap()
        .unwrap();
    assert!(
        shutdown.elapsed() >= Duration::from_secs(2),
        "the idle connection was closed {:?} into the shutdown, before it had been idle for 2.5 s",
        shutdown.elapsed()
    );
    drop(idle);
    running.wait().await.unwrap();
}

// HTTP/2 frames written and read by hand, to see the server's SETTINGS and to send what no
// well-behaved client library sends.
const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
const SETTINGS: u8 = 0x4;
const HEADERS: u8 = 0x1;
const RST_STREAM: u8 = 0x3;
const GOAWAY: u8 = 0x7;
const WINDOW_UPDATE: u8 = 0x8;

fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let mut out = (payload.len() as u32).to_be_bytes()[1..].to_vec();
    out.extend([kind, flags]);
    out.extend(stream.to_be_bytes());
    out.extend(payload);
    out
}

/// The next frame as (type, flags, stream, payload); `None` at the end of the connection.
async fn read_frame<S: tokio::io::AsyncRead + Unpin>(io: &mut S) -> Option<(u8, u8, u32, Vec<u8>)> {
    let mut head = [0u8; 9];
    io.read_exact(&mut head).await.ok()?;
    let length = u32::from_be_bytes([0, head[0], head[1], head[2]]) as usize;
    let stream = u32::from_be_bytes([head[5], head[6], head[7], head[8]]) & 0x7fff_ffff;
    let mut payload = vec![0u8; length];
    io.read_exact(&mut payload).await.ok()?;
    Some((head[3], head[4], stream, payload))
}

fn u32_at(bytes: &[u8], at: usize) -> u32 {
    u32::from_be_bytes(bytes[at..at + 4].try_into().unwrap())
}

#[tokio::test]
async fn http2_settings_advertise_the_stream_window_and_header_limits() {
    let dir = tempfile::tempdir().unwrap();
    let limits = Limits {
        http2_max_concurrent_streams: 7,
        ..Limits::default()
    };
    let (running, ca) = start_limited(dir.path(), example_rules(), limits).await;
    let mut tls = Client::new(&ca, b"h2", None)
        .tls(running.addr)
        .await
        .unwrap();
    tls.write_all(PREFACE).await.unwrap();
    tls.write_all(&frame(SETTINGS, 0, 0, &[])).await.unwrap();
    tls.flush().await.unwrap();
    let mut settings = std::collections::BTreeMap::new();
    let mut connection_window = None;
    for _ in 0..10 {
        let (kind, flags, stream, payload) =
            tokio::time::timeout(Duration::from_secs(5), read_frame(&mut tls))
                .await
                .unwrap()
                .expect("the connection ended");
        match kind {
            SETTINGS if flags & 1 == 0 => {
                for pair in payload.chunks(6) {
                    settings.insert(u16::from_be_bytes([pair[0], pair[1]]), u32_at(pair, 2));
                }
            }
            WINDOW_UPDATE if stream == 0 => connection_window = Some(u32_at(&payload, 0)),
            _ => {}
        }
        if !settings.is_empty() && connection_window.is_some() {
            break;
        }
    }
    // SETTINGS_MAX_CONCURRENT_STREAMS, SETTINGS_INITIAL_WINDOW_SIZE, SETTINGS_MAX_HEADER_LIST_SIZE
    assert_eq!(settings.get(&0x3), Some(&7), "{settings:?}");
    assert_eq!(settings.get(&0x4), Some(&(256 * 1024)), "{settings:?}");
    assert_eq!(settings.get(&0x6), Some(&(32 * 1024)), "{settings:?}");
    // The connection window grows from the protocol's 65,535 bytes to 1 MiB.
    assert_eq!(connection_window, Some(1024 * 1024 - 65_535));
    running.shutdown.cancel();
    running.wait().await.unwrap();
}

#[tokio::test]
async fn a_rapid_reset_flood_ends_its_connection_and_others_are_served() {
    let dir = tempfile::tempdir().unwrap();
    let (running, ca) = start_limited(dir.path(), example_rules(), Limits::default()).await;
    let mut steady = Client::new(&ca, b"h2", None).http2(running.addr).await;
    let sent = steady.send_request(post("/mutate", review("pod-create-mapped.json")));
    assert_eq!(read(sent.await.unwrap()).await.0, 200);

    // 500 streams, each opened (POST / with no body yet) and reset at once, in one write.
    let mut flood = Client::new(&ca, b"h2", None)
        .tls(running.addr)
        .await
        .unwrap();
    let mut bytes = PREFACE.to_vec();
    bytes.extend(frame(SETTINGS, 0, 0, &[]));
    for i in 0..500u32 {
        let stream = 2 * i + 1;
        // HPACK static table: :method POST, :scheme https, :path /
        bytes.extend(frame(HEADERS, 0x4, stream, &[0x83, 0x87, 0x84]));
        bytes.extend(frame(RST_STREAM, 0, stream, &8u32.to_be_bytes()));
    }
    flood.write_all(&bytes).await.unwrap();
    flood.flush().await.unwrap();
    let goaway = tokio::time::timeout(Duration::from_secs(5), async {
        while let Some((kind, _, _, payload)) = read_frame(&mut flood).await {
            if kind == GOAWAY {
                return Some(u32_at(&payload, 4));
            }
        }
        None
    })
    .await
    .expect("no GOAWAY within 5 s");
    assert_eq!(goaway, Some(0xb), "GOAWAY with ENHANCE_YOUR_CALM");
    let ended = tokio::time::timeout(Duration::from_secs(5), async {
        while read_frame(&mut flood).await.is_some() {}
    })
    .await;
    assert!(ended.is_ok(), "the flooding connection stayed open");

    // The other connection, and new ones, are served.
    let sent = steady.send_request(post("/mutate", review("pod-create-mapped.json")));
    assert_eq!(read(sent.await.unwrap()).await.0, 200);
    let mut fresh = Client::new(&ca, b"h2", None).http2(running.addr).await;
    let sent = fresh.send_request(post("/validate", review("pod-create-mapped.json")));
    assert_eq!(read(sent.await.unwrap()).await.0, 200);
    running.shutdown.cancel();
    running.wait().await.unwrap();
}

/// An evaluation runs in place (on the worker that received the request) when a worker is
/// left for the rest, else on the blocking pool; the answers are the same either way, for
/// every review in testdata.
#[tokio::test(flavor = "multi_thread", worker_threads = 3)]
async fn decisions_in_place_and_on_the_blocking_pool_are_the_same() {
    let with = |in_place| Limits {
        in_place_evaluations: in_place,
        ..Limits::default()
    };
    // The shipped policies are decided in place whatever the permits say (they are bounded);
    // with latesttag's Rego changed by a comment it is a user's policy, and goes where the
    // permits say.
    let dir = tempfile::tempdir().unwrap();
    let handed_off = state(
        example_rules_as_users(dir.path()),
        Duration::from_secs(4),
        with(0),
    );
    let in_place = state(
        example_rules_as_users(dir.path()),
        Duration::from_secs(4),
        with(8),
    );
    assert!(!Webhook::Validate.bounded(&handed_off.rules.load()));
    assert_eq!(handed_off.gates.in_place_capacity(), 0);
    // Never more than the workers less one.
    assert_eq!(in_place.gates.in_place_capacity(), 2);
    let mut files: Vec<_> = std::fs::read_dir("testdata/reviews")
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    files.sort();
    assert!(files.len() > 20, "{files:?}");
    let mut denied = 0;
    for file in &files {
        for path in ["/validate", "/mutate"] {
            let a = call(&handed_off, request("POST", path, review(file))).await;
            let b = call(&in_place, request("POST", path, review(file))).await;
            assert_eq!((a.status, &a.text), (b.status, &b.text), "{path} {file}");
            denied += usize::from(a.text.contains(r#""allowed":false"#));
        }
    }
    assert!(denied >= 10, "{denied} denials");
}

/// testdata/config/example.yaml over the shipped policies, latesttag's Rego with a comment
/// added: the same decisions, but latesttag is no longer the shipped policy (no Rust copy, not
/// bounded), so its evaluations go where [`Limits::in_place_evaluations`] says.
fn example_rules_as_users(dir: &Path) -> Sources {
    let policies = dir.join("policies");
    std::fs::create_dir_all(&policies).unwrap();
    for name in ["allowedrepositories", "latesttag"] {
        let mut text = std::fs::read_to_string(format!("policies/{name}.yaml")).unwrap();
        if name == "latesttag" {
            text = text.replacen(
                "  package latesttag\n",
                "  package latesttag\n  # a user's copy\n",
                1,
            );
        }
        std::fs::write(policies.join(format!("{name}.yaml")), text).unwrap();
    }
    Sources {
        policies_dir: Some(policies),
        ..example_rules()
    }
}

/// On one worker with no permit to run in place (a single-threaded runtime) and the only
/// blocking thread held by other work: a bounded decision (the shipped policies, by their Rust
/// copy) is made on the worker; a user's policy that takes less than the first try's slice is
/// made there too; a slow one, which must wait for the blocking thread after its slice, is
/// answered by the deadline as unevaluated.
#[test]
fn decisions_that_fit_the_first_try_need_no_blocking_thread() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .max_blocking_threads(1)
        .build()
        .unwrap();
    runtime.block_on(async {
        let (dir, slow_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let deadline = Duration::from_millis(300);
        let shipped = state(example_rules(), deadline, Limits::default());
        let users = state(
            example_rules_as_users(dir.path()),
            deadline,
            Limits::default(),
        );
        let slow = state(
            slow_rules(slow_dir.path(), "deny"),
            deadline,
            Limits::default(),
        );
        assert_eq!(shipped.gates.in_place_capacity(), 0);
        assert!(Webhook::Validate.bounded(&shipped.rules.load()));
        assert!(!Webhook::Validate.bounded(&users.rules.load()));
        let (release, held) = std::sync::mpsc::channel::<()>();
        let blocker = tokio::task::spawn_blocking(move || held.recv());
        let bad = review("pod-create-bad-image.json");
        for app in [&shipped, &users] {
            let decided = call(app, request("POST", "/validate", bad.clone())).await;
            assert!(
                decided.text.contains(r#""allowed":false"#),
                "{}",
                decided.text
            );
            assert!(
                decided.text.contains("is not from an allowed repository"),
                "{}",
                decided.text
            );
        }
        let waited = call(&slow, request("POST", "/validate", bad)).await;
        assert!(
            waited
                .text
                .contains("did not decide within the 300 ms deadline"),
            "{}",
            waited.text
        );
        release.send(()).unwrap();
        blocker.await.unwrap().unwrap();
    });
}

/// A slow policy holds the one worker of a single-threaded runtime for its first try's slice
/// only, then runs on the blocking pool: requests that come meanwhile are answered while it
/// runs.
#[test]
fn a_slow_policy_does_not_stall_the_one_worker() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let app = state(
            slow_rules(dir.path(), "deny"),
            Duration::from_millis(1500),
            Limits::default(),
        );
        assert_eq!(app.gates.in_place_capacity(), 0);
        let slow = start_slow(&app, 1).await;
        // Placement alone (no policy), and a bounded decision on the shipped policies.
        let placed = call(
            &app,
            request("POST", "/mutate", review("pod-create-mapped.json")),
        )
        .await;
        assert_eq!(placed.status, 200, "{}", placed.text);
        assert!(
            placed.text.contains(r#""patchType":"JSONPatch""#),
            "{}",
            placed.text
        );
        assert!(
            !slow.is_finished(),
            "the slow evaluation ended before the others were answered"
        );
        let late = slow.await.unwrap();
        assert!(late.text.contains("did not decide within"), "{}", late.text);
    });
}

/// On a single-threaded runtime nothing runs in place: the one worker would be blocked.
#[tokio::test]
async fn a_single_threaded_runtime_runs_no_evaluation_in_place() {
    let limits = Limits {
        in_place_evaluations: 8,
        ..Limits::default()
    };
    let app = state(example_rules(), Duration::from_secs(4), limits);
    assert_eq!(app.gates.in_place_capacity(), 0);
}

/// A slow evaluation in place holds its worker, but never the last one: a second slow one goes
/// to the blocking pool, and other requests are still answered while both run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_evaluation_in_place_leaves_a_worker_for_the_rest() {
    let dir = tempfile::tempdir().unwrap();
    let limits = Limits {
        max_evaluations: 2,
        max_queued_evaluations: 0,
        in_place_evaluations: 2,
        ..Limits::default()
    };
    let app = state(
        slow_rules(dir.path(), "allow"),
        Duration::from_millis(1500),
        limits,
    );
    assert_eq!(app.gates.in_place_capacity(), 1);
    let first = take_the_slot(&app).await;
    let second = start_slow(&app, 2).await;
    // Answered by a worker while both slow evaluations still run.
    let placed = spawn_call(&app, "/mutate", "pod-create-mapped.json")
        .await
        .unwrap();
    assert_eq!(placed.status, 200, "{}", placed.text);
    assert!(
        placed.text.contains(r#""patchType":"JSONPatch""#),
        "{}",
        placed.text
    );
    assert!(!first.is_finished() && !second.is_finished());
    for slow in [first, second] {
        let text = slow.await.unwrap().text;
        assert!(
            text.contains("did not decide within the 1500 ms deadline"),
            "{text}"
        );
    }
}

/// Parsed reviews share one budget: a request reserves its review's estimated parse before
/// parsing and holds it until answered; one that cannot get it before its deadline gets 503
/// with `Retry-After` (the API server's failure policy decides), not a parse past the budget.
#[tokio::test]
async fn parsed_reviews_share_one_budget_held_until_answered() {
    let body = review("pod-create-placed.json");
    let estimate = poolguard_core::admission::Estimate::of(&body)
        .unwrap()
        .bytes();
    let budget = 2 * estimate;
    let limits = Limits {
        parse_budget_bytes: budget,
        max_evaluations: 2,
        ..Limits::default()
    };
    let dir = tempfile::tempdir().unwrap();
    let app = state(
        slow_rules(dir.path(), "allow"),
        Duration::from_millis(300),
        limits,
    );
    // A request holds its estimate while it is evaluated, and gives it back when its work stops.
    let slow = take_the_slot(&app).await;
    // (It reserves right after it takes its slot.)
    let started = Instant::now();
    while app.gates.parse_bytes_reserved() == 0 && started.elapsed() < Duration::from_secs(5) {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    assert_eq!(app.gates.parse_bytes_reserved(), estimate);
    slow.await.unwrap();
    // Given back when its work stops (about at the deadline, maybe just after the answer).
    let answered = Instant::now();
    while app.gates.parse_bytes_reserved() != 0 && answered.elapsed() < Duration::from_secs(5) {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(app.gates.parse_bytes_reserved(), 0);
    // Other requests in flight hold all but half an estimate: the next review waits until its
    // deadline, then is refused.
    let mut in_flight = app.gates.nothing_reserved();
    let far = tokio::time::Instant::now() + Duration::from_secs(30);
    let held = budget - estimate / 2;
    assert!(app
        .gates
        .reserve_parse(&mut in_flight, held, far)
        .await
        .is_ok());
    let started = Instant::now();
    let refused = call(&app, request("POST", "/mutate", body.clone())).await;
    assert!(started.elapsed() >= Duration::from_millis(250));
    assert_eq!(refused.status, 503, "{}", refused.text);
    assert_eq!(refused.headers["retry-after"], "1");
    assert_eq!(
        refused.text,
        format!(
            "overloaded: parsing this {}-byte review takes about {estimate} bytes, which did not fit the {budget}-byte parse budget before the deadline ({held} held by requests in flight); retry\n",
            body.len()
        )
    );
    drop(in_flight);
    let served = call(&app, request("POST", "/mutate", body)).await;
    assert_eq!(served.status, 200, "{}", served.text);
    assert_eq!(app.gates.parse_bytes_reserved(), 0);
}

/// `poolguard controller`: its writers and the operations port, and no admission listener: a
/// client that reaches its pod finds nothing to send a review to.
#[tokio::test]
async fn a_controller_answers_no_admission_request() {
    let dir = tempfile::tempdir().unwrap();
    let free = std::net::TcpListener::bind(LOCAL).unwrap();
    let admission = free.local_addr().unwrap();
    drop(free);
    let running = serve::start(Options {
        addr: admission,
        tls: None,
        admission: false,
        ..options(files_in(dir.path()), example_rules())
    })
    .await
    .unwrap();
    assert!(
        metrics(&running).await.contains("# TYPE poolguard_"),
        "the operations port serves the metrics"
    );
    assert!(
        TcpStream::connect(admission).await.is_err(),
        "nothing listens on the admission address {admission}"
    );
    running.shutdown.cancel();
    running.wait().await.unwrap();
}
