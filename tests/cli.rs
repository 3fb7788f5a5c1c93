//! The `poolguard` binary as a user runs it.

use std::process::{Command, Output};

use serde_json::Value;

fn poolguard(args: &[&str], stdin: Option<&str>) -> Output {
    poolguard_in(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")),
        args,
        stdin,
    )
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

const NS: &str = "testdata/namespaces.yaml";

#[test]
fn eval_review_prints_the_response_with_the_uid() {
    let out = poolguard(
        &[
            "eval",
            "--namespaces-file",
            NS,
            "--webhook",
            "mutate",
            "testdata/reviews/pod-create-mapped.json",
        ],
        None,
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let review: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(review["apiVersion"], "admission.k8s.io/v1");
    assert_eq!(review["response"]["uid"], "pod-create-mapped");
    assert_eq!(review["response"]["patchType"], "JSONPatch");
}

#[test]
fn eval_denial_exits_1_and_reads_stdin() {
    let review = std::fs::read_to_string("testdata/reviews/pod-create-conflict.json").unwrap();
    let out = poolguard(
        &[
            "eval",
            "--namespaces-file",
            NS,
            "--webhook",
            "validate",
            "-",
        ],
        Some(&review),
    );
    assert_eq!(out.status.code(), Some(1));
    let review: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(review["response"]["status"]["code"], 403);
}

#[test]
fn eval_manifest_prints_verdict_and_patched_object() {
    let out = poolguard(
        &[
            "eval",
            "--namespaces-file",
            NS,
            "--webhook",
            "mutate",
            "testdata/manifests/pod.yaml",
        ],
        None,
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(stdout.contains("ALLOWED, patched"), "{stdout}");
    let docs: Vec<&str> = stdout.lines().filter(|l| !l.starts_with('#')).collect();
    let patched: Value = poolguard_core::documents::parse_one(&docs.join("\n"), "stdout").unwrap();
    assert_eq!(patched["spec"]["nodeSelector"]["agentpool"], "pool1");
    assert_eq!(patched["spec"]["nodeSelector"]["kubernetes.io/os"], "linux");
}

/// The README's example: a foreign, untagged image is refused once, by allowedrepositories;
/// latesttag, which depends on it being Compliant, is reported Pending. Moved to an allowed
/// registry, the same image gets latesttag's own denial.
#[test]
fn eval_reports_a_dependent_policy_as_pending() {
    let args = [
        "eval",
        "--namespaces-file",
        NS,
        "--config",
        "testdata/config/example.yaml",
        "--webhook",
        "validate",
    ];
    let file = "testdata/manifests/pod-foreign-untagged.yaml";
    let out = poolguard(&[&args[..], &[file]].concat(), None);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stdout),
        concat!(
            "# Pod tools in namespace mapped (pool pool1): DENIED (403)\n",
            "#   allowedrepositories: container \"tools\": image \"quay.io/team/tools\" (repository \"quay.io/team/tools\") is not from an allowed repository [\"registry.example.com/\", \"registry.k8s.io/\"]\n",
            "# pending: latesttag (not evaluated): dependency allowedrepositories is NonCompliant, Compliant required\n",
        )
    );

    let moved = std::fs::read_to_string(file)
        .unwrap()
        .replace("quay.io/team/tools", "registry.example.com/team/tools");
    let out = poolguard(&[&args[..], &["-"]].concat(), Some(&moved));
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stdout),
        concat!(
            "# Pod tools in namespace mapped (pool pool1): DENIED (403)\n",
            "#   latesttag: container \"tools\": image \"registry.example.com/team/tools\" has no tag, so the runtime pulls :latest; pin a version tag or a digest\n",
        )
    );

    // Tagged, or from the exempt repository: allowed.
    for image in [
        "registry.example.com/team/tools:1.4",
        "registry.example.com/dev/tools",
    ] {
        let pod = moved.replace("registry.example.com/team/tools", image);
        let out = poolguard(&[&args[..], &["-"]].concat(), Some(&pod));
        assert_eq!(out.status.code(), Some(0), "{image}: {}", text(&out.stdout));
    }
}

/// The README's placement example: in a namespace labelled agentpool=auto the placement
/// policies choose each pod's pool from the nodes file; a pod no node can hold is refused with
/// the policy's message. The validating webhook checks the choice again.
#[test]
fn eval_chooses_pools_with_placement_policies() {
    let args = [
        "eval",
        "--namespaces-file",
        "testdata/placement/namespaces.yaml",
        "--nodes-file",
        "testdata/placement/nodes.yaml",
        "--config",
        "testdata/placement/config.yaml",
    ];
    let pods = "testdata/placement/pods.yaml";
    let out = poolguard(&[&args[..], &["--webhook", "mutate", pods]].concat(), None);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let verdicts: Vec<String> = text(&out.stdout)
        .lines()
        .filter(|l| l.starts_with("# ") && !l.starts_with("# patch"))
        .map(str::to_string)
        .collect();
    assert_eq!(
        verdicts,
        [
            "# Pod web in namespace ml-team (pool general, chosen by the placement policies): ALLOWED, patched",
            "# Pod train in namespace ml-team (pool gpu, chosen by the placement policies): ALLOWED, patched",
            "# Pod huge in namespace ml-team (no pool can be chosen by the placement policies): DENIED (403)",
            "#   no pool can take this pod (the placement policies choose the pools of namespace \"ml-team\"):",
            "#   fitsresources: no pool has or can launch a node with room for the pod's requests (cpu 48000m, memory 300Gi)",
        ]
    );

    // Validating: the web pod as mutated passes; placed on the GPU pool by its author, refused.
    let web = std::fs::read_to_string(pods).unwrap();
    let web = web.split("---").next().unwrap();
    let placed = |pool: &str| {
        web.replace(
            "spec:\n",
            &format!("spec:\n  nodeSelector: {{agentpool: {pool}}}\n"),
        )
    };
    let out = poolguard(
        &[&args[..], &["--webhook", "validate", "-"]].concat(),
        Some(&placed("general")),
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stdout));
    let out = poolguard(
        &[&args[..], &["--webhook", "validate", "-"]].concat(),
        Some(&placed("gpu")),
    );
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stdout));
    assert!(
        text(&out.stdout).contains("the pod selects pool \"gpu\" (nodeSelector agentpool=gpu), which the placement policies do not accept for it; they accept general, large"),
        "{}",
        text(&out.stdout)
    );

    // Without the nodes file there is nothing to choose from.
    let out = poolguard(
        &[&args[..3], &args[5..], &["--webhook", "mutate", pods]].concat(),
        None,
    );
    assert!(
        text(&out.stdout).contains("no pool to choose from: no node carries the label agentpool"),
        "{}",
        text(&out.stdout)
    );
}

/// docs/placement.md's Karpenter example: NodePools with no node at all are pools with what
/// their instance types offer (testdata/karpenter): the placement policies choose general for a
/// small pod, big for a 12-cpu one, gpu for a GPU pod, never capped (its limits are spent), and
/// refuse a pod no NodePool can launch a node for; a pod naming another NodePool than its
/// namespace's is refused. Without the catalog the NodePools launch nothing known, and say so.
#[test]
fn eval_places_pods_on_nodepools_that_have_no_node() {
    let args = [
        "eval",
        "--namespaces-file",
        "testdata/karpenter/namespaces.yaml",
        "--nodes-file",
        "testdata/karpenter/nodepools.yaml",
        "--config",
        "testdata/karpenter/config.yaml",
        "--instance-types-file",
        "testdata/karpenter/instance-types.json",
    ];
    let pods = "testdata/karpenter/pods.yaml";
    let out = poolguard(
        &[&args[..], &["--webhook", "admission", pods]].concat(),
        None,
    );
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert_eq!(text(&out.stderr), "", "no NodePool problem");
    let verdicts: Vec<String> = text(&out.stdout)
        .lines()
        .filter(|l| l.starts_with("# ") && !l.starts_with("# patch"))
        .map(str::to_string)
        .collect();
    assert_eq!(
        verdicts,
        [
            "# Pod web in namespace ml-team (pool general, chosen by the placement policies): ALLOWED, patched",
            "# Pod build in namespace ml-team (pool big, chosen by the placement policies): ALLOWED, patched",
            "# Pod train in namespace ml-team (pool gpu, chosen by the placement policies): ALLOWED, patched",
            "# Pod huge in namespace ml-team (no pool can be chosen by the placement policies): DENIED (403)",
            "#   no pool can take this pod (the placement policies choose the pools of namespace \"ml-team\"):",
            "#   fitsresources: no pool has or can launch a node with room for the pod's requests (cpu 48000m, memory 300Gi)",
            "# Pod elsewhere in namespace batch (pool big): DENIED (403)",
            "#   namespace \"batch\" is assigned to pool \"big\" (namespace label agentpool=big): nodeSelector karpenter.sh/nodepool=\"general\" is not allowed here",
        ]
    );
    assert!(text(&out.stdout).contains("karpenter.sh/nodepool: general"));

    // Without the catalog: every NodePool is said to launch nothing known, and none is chosen.
    let out = poolguard(&[&args[..7], &["--webhook", "mutate", pods]].concat(), None);
    let stderr = text(&out.stderr);
    for nodepool in ["general", "big", "gpu", "capped"] {
        assert!(
            stderr.contains(&format!(
                "poolguard: warning: NodePool \"{nodepool}\": no instance-type catalog is given"
            )),
            "{stderr}"
        );
    }
    assert!(
        !text(&out.stdout).contains("ALLOWED"),
        "{}",
        text(&out.stdout)
    );

    // A catalog that does not list a type a NodePool allows by name: said, never guessed.
    let dir = tempfile::tempdir().unwrap();
    let catalog = dir.path().join("types.json");
    let text_of = std::fs::read_to_string("testdata/karpenter/instance-types.json").unwrap();
    std::fs::write(&catalog, text_of.replace("\"gpu-8x\"", "\"gpu-9x\"")).unwrap();
    let out = poolguard(
        &[
            &args[..7],
            &[
                "--instance-types-file",
                catalog.to_str().unwrap(),
                "--webhook",
                "mutate",
                pods,
            ],
        ]
        .concat(),
        None,
    );
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("\"gpu-8x\"") && stderr.contains("only its existing nodes count"),
        "{stderr}"
    );
    assert!(
        text(&out.stdout).contains("# Pod train in namespace ml-team (no pool can be chosen"),
        "{}",
        text(&out.stdout)
    );
}

/// Dependency cycles, self-dependencies and names that are neither loaded nor `placement` are
/// load errors (exit 2) naming the cycle or the name.
#[test]
fn bad_dependencies_are_load_errors_naming_them() {
    let dir = tempfile::tempdir().unwrap();
    let cases = [
        (
            "policies:\n  latesttag:\n    dependencies: [{policy: allowedrepository}]\n",
            "at `policies.latesttag.dependencies[0].policy`: no policy named `allowedrepository` is loaded, and it is not `placement` (loaded: allowedrepositories, latesttag)",
        ),
        (
            "policies:\n  latesttag:\n    dependencies: [{policy: latesttag}]\n",
            "at `policies.latesttag.dependencies[0].policy`: policy `latesttag` depends on itself",
        ),
        (
            "policies:\n  allowedrepositories:\n    dependencies: [{policy: latesttag}]\n  latesttag:\n    dependencies: [{policy: allowedrepositories}]\n",
            "at `policies.allowedrepositories.dependencies`: dependency cycle allowedrepositories -> latesttag -> allowedrepositories",
        ),
    ];
    for (i, (config, want)) in cases.iter().enumerate() {
        let path = dir.path().join(format!("config-{i}.yaml"));
        std::fs::write(&path, config).unwrap();
        let out = poolguard(
            &[
                "eval",
                "--namespaces-file",
                NS,
                "--config",
                path.to_str().unwrap(),
                "--webhook",
                "validate",
                "testdata/manifests/pod.yaml",
            ],
            None,
        );
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{config}: {stderr}");
        assert!(
            stderr.contains(path.to_str().unwrap()) && stderr.contains(want),
            "{config}: {stderr}"
        );
    }
}

#[test]
fn bad_input_is_a_clear_error_with_exit_2() {
    let cases: Vec<(Vec<&str>, Option<&str>, &str)> = vec![
        (
            vec!["eval", "--namespaces-file", NS, "--webhook", "mutate", "-"],
            Some("{\"kind\": \"AdmissionReview\"}"),
            "expected apiVersion",
        ),
        (
            vec!["eval", "--namespaces-file", NS, "--webhook", "mutate", "-"],
            Some("a: [\n"),
            "<stdin>",
        ),
        (
            vec!["eval", "--namespaces-file", NS, "--webhook", "mutate", "-"],
            Some(""),
            "no document",
        ),
        (
            vec![
                "eval",
                "--namespaces-file",
                "nope.yaml",
                "--webhook",
                "mutate",
            ],
            None,
            "nope.yaml",
        ),
        (
            vec![
                "eval",
                "--namespaces-file",
                NS,
                "--config",
                "testdata/namespaces.yaml",
                "--webhook",
                "mutate",
            ],
            None,
            "unknown field",
        ),
        (
            vec![
                "eval",
                "--namespaces-file",
                NS,
                "--policies-dir",
                "nope",
                "--webhook",
                "mutate",
            ],
            None,
            "--policies-dir nope: no such directory",
        ),
        (
            vec!["policy", "test", "--policies-dir", "testdata/reviews"],
            None,
            "no *_test.rego",
        ),
        (
            vec!["certs", "--out-dir", "target/unused-certs"],
            None,
            "--dns-name",
        ),
        (
            vec![
                "certs",
                "--out-dir",
                "target/unused-certs",
                "--ip",
                "127.0.0.1",
                "--days",
                "4294967295",
            ],
            None,
            "after the year 9999",
        ),
        (
            vec![
                "serve",
                "--manage-certs",
                "--cert-secret",
                "poolguard/tls",
                "--webhook-configs",
                "poolguard",
                "--cert-ip",
                "127.0.0.1",
                "--cert-validity",
                "1m",
            ],
            None,
            "--cert-validity 1m is too short",
        ),
        (
            vec!["serve", "--dev", "--native-apply", "--audit-interval", "0"],
            None,
            "--native-apply needs the audit's leader election",
        ),
    ];
    for (args, stdin, want) in cases {
        let out = poolguard(&args, stdin);
        assert_eq!(
            out.status.code(),
            Some(2),
            "{args:?}: {}",
            text(&out.stderr)
        );
        let stderr = text(&out.stderr);
        assert!(stderr.contains(want), "{args:?}: {stderr}");
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
    }
}

#[test]
fn unknown_flag_values_are_refused_by_the_parser() {
    let out = poolguard(
        &["eval", "--namespaces-file", NS, "--webhook", "both"],
        None,
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("possible values"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn policy_test_passes_shipped_policies_and_fails_a_broken_test() {
    let out = poolguard(&["policy", "test", "--policies-dir", "policies"], None);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stdout));
    assert!(text(&out.stdout).contains(" passed, 0 failed"));

    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("p.rego"),
        "package p\ninfringement[{\"msg\": \"x\"}] { input.bad }\n",
    )
    .unwrap();
    std::fs::write(dir.path().join("p_test.rego"), "package p_test\ntest_good { count(data.p.infringement) == 0 }\ntest_bad { count(data.p.infringement) == 0 with input as {\"bad\": true} }\n").unwrap();
    let out = poolguard(
        &[
            "policy",
            "test",
            "--policies-dir",
            dir.path().to_str().unwrap(),
        ],
        None,
    );
    assert_eq!(out.status.code(), Some(1));
    let stdout = text(&out.stdout);
    assert!(
        stdout.contains("PASS p_test.test_good") && stdout.contains("FAIL p_test.test_bad"),
        "{stdout}"
    );
    assert!(stdout.contains("1 passed, 1 failed"), "{stdout}");
}

#[test]
fn certs_writes_the_secret_files() {
    let dir = tempfile::tempdir().unwrap();
    let out_dir = dir.path().join("certs");
    let out = poolguard(
        &[
            "certs",
            "--out-dir",
            out_dir.to_str().unwrap(),
            "--dns-name",
            "poolguard.default.svc",
            "--ip",
            "127.0.0.1",
        ],
        None,
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    for name in ["ca.crt", "tls.crt", "tls.key"] {
        let pem = std::fs::read_to_string(out_dir.join(name)).unwrap();
        assert!(pem.starts_with("-----BEGIN"), "{name}");
    }
}

/// `--ca-cert/--ca-key`: a new serving certificate signed by an existing CA, whose certificate is
/// copied unchanged (the webhooks' caBundle stays valid); a key that is not the CA's, a
/// certificate that is not a CA's and a lone flag are refused.
#[test]
fn certs_signs_with_a_given_ca() {
    use poolguard::certs::authority::Authority;
    use rustls::client::danger::ServerCertVerifier;
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, ServerName, UnixTime};

    let dir = tempfile::tempdir().unwrap();
    let path = |name: &str| dir.path().join(name).to_str().unwrap().to_string();
    let ca = Authority::generate("test-ca", 30).unwrap();
    std::fs::write(path("ca.crt"), ca.cert_pem()).unwrap();
    std::fs::write(path("ca.key"), ca.key_pem()).unwrap();
    let other = Authority::generate("other-ca", 30).unwrap();
    std::fs::write(path("other.key"), other.key_pem()).unwrap();

    let certs = |out: &str, ca_cert: &str, ca_key: &str| {
        poolguard(
            &[
                "certs",
                "--out-dir",
                &path(out),
                "--ip",
                "127.0.0.1",
                "--ca-cert",
                &path(ca_cert),
                "--ca-key",
                &path(ca_key),
            ],
            None,
        )
    };
    for out in ["one", "two"] {
        let made = certs(out, "ca.crt", "ca.key");
        assert_eq!(made.status.code(), Some(0), "{}", text(&made.stderr));
        assert!(
            text(&made.stderr).contains("signed by"),
            "{}",
            text(&made.stderr)
        );
    }
    let read = |name: &str| std::fs::read_to_string(path(name)).unwrap();
    assert_eq!(read("one/ca.crt"), ca.cert_pem());
    assert_eq!(read("two/ca.crt"), ca.cert_pem());
    assert_ne!(read("one/tls.key"), read("two/tls.key"));

    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(CertificateDer::from_pem_slice(ca.cert_pem().as_bytes()).unwrap())
        .unwrap();
    let verifier = rustls::client::WebPkiServerVerifier::builder_with_provider(
        roots.into(),
        std::sync::Arc::new(rustls::crypto::ring::default_provider()),
    )
    .build()
    .unwrap();
    for out in ["one", "two"] {
        let leaf =
            CertificateDer::from_pem_slice(read(&format!("{out}/tls.crt")).as_bytes()).unwrap();
        let server = ServerName::try_from("127.0.0.1").unwrap();
        verifier
            .verify_server_cert(&leaf, &[], &server, &[], UnixTime::now())
            .unwrap_or_else(|e| panic!("{out}/tls.crt does not verify against the CA: {e}"));
    }

    for (ca_cert, ca_key, want) in [
        ("ca.crt", "other.key", "is not the key of"),
        ("one/tls.crt", "one/tls.key", "not a CA certificate"),
        ("missing.crt", "ca.key", "reading"),
    ] {
        let refused = certs("three", ca_cert, ca_key);
        assert_eq!(refused.status.code(), Some(2), "{ca_cert} {ca_key}");
        assert!(
            text(&refused.stderr).contains(want),
            "{}",
            text(&refused.stderr)
        );
    }
    assert!(!dir.path().join("three").exists());
    let lone = poolguard(
        &[
            "certs",
            "--out-dir",
            &path("four"),
            "--ip",
            "127.0.0.1",
            "--ca-cert",
            &path("ca.crt"),
        ],
        None,
    );
    assert_eq!(lone.status.code(), Some(2));
    assert!(
        text(&lone.stderr).contains("--ca-key"),
        "{}",
        text(&lone.stderr)
    );
}

/// `poolguard serve --dev` on free ports, run in `dir` (also its HOME), outside any cluster,
/// with its log on a pipe.
fn serve_dev(dir: &std::path::Path) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_poolguard"));
    command
        .args([
            "serve",
            "--dev",
            "--addr",
            "127.0.0.1:0",
            "--metrics-addr",
            "127.0.0.1:0",
        ])
        .current_dir(dir)
        .env("HOME", dir)
        .env_remove("KUBERNETES_SERVICE_HOST")
        .stderr(std::process::Stdio::piped());
    command
}

/// Starts `command` and reads its log until a line containing `marker` (or the log ends, or
/// 30 s have passed between lines); the child keeps running.
fn start_reading_log_until(command: &mut Command, marker: &str) -> (std::process::Child, String) {
    use std::io::{BufRead, BufReader};
    use std::time::{Duration, Instant};
    let mut child = command.spawn().unwrap();
    let mut log = BufReader::new(child.stderr.take().unwrap());
    let (mut seen, mut line) = (String::new(), String::new());
    let deadline = Instant::now() + Duration::from_secs(30);
    while !seen.contains(marker) && Instant::now() < deadline {
        line.clear();
        if log.read_line(&mut line).unwrap_or(0) == 0 {
            break;
        }
        seen.push_str(&line);
    }
    (child, seen)
}

/// `serve --dev` must not attach to whatever cluster the current kubeconfig names: with a
/// KUBECONFIG (and a ~/.kube/config) pointing at a listener of ours, it serves the embedded
/// namespaces, says so, and never connects; `--kubeconfig` is the explicit way to a cluster.
#[test]
fn dev_never_reads_a_cluster_unless_given_a_kubeconfig() {
    use std::net::TcpListener;
    use std::time::{Duration, Instant};

    let cluster = TcpListener::bind("127.0.0.1:0").unwrap();
    cluster.set_nonblocking(true).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = format!(
        "apiVersion: v1\nkind: Config\nclusters: [{{name: c, cluster: {{server: \"https://{}\"}}}}]\nusers: [{{name: u, user: {{token: t}}}}]\ncontexts: [{{name: x, context: {{cluster: c, user: u}}}}]\ncurrent-context: x\n",
        cluster.local_addr().unwrap()
    );
    std::fs::create_dir_all(dir.path().join(".kube")).unwrap();
    std::fs::write(dir.path().join(".kube/config"), &kubeconfig).unwrap();
    std::fs::write(dir.path().join("kubeconfig"), &kubeconfig).unwrap();
    let mut command = serve_dev(dir.path());
    command
        .env("KUBECONFIG", dir.path().join("kubeconfig"))
        .env_remove("MIMALLOC_PURGE_DELAY")
        .env_remove("MIMALLOC_ARENA_EAGER_COMMIT");
    let (mut child, seen) = start_reading_log_until(&mut command, "serving:");
    // A watch would connect at once; give it a second to try.
    let quiet_until = Instant::now() + Duration::from_secs(1);
    let mut connected = false;
    while !connected && Instant::now() < quiet_until {
        connected = cluster.accept().is_ok();
        std::thread::sleep(Duration::from_millis(20));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(seen.contains("serving:"), "did not start: {seen}");
    assert!(
        seen.contains("embedded testdata") && seen.contains("--kubeconfig"),
        "the log must name the namespace source: {seen}"
    );
    assert!(
        !connected,
        "--dev connected to the kubeconfig's cluster: {seen}"
    );
    // It restarted itself with the allocator's settings, and says which are in force.
    assert!(
        seen.contains("MIMALLOC_ARENA_EAGER_COMMIT=0") && seen.contains("MIMALLOC_PURGE_DELAY=0"),
        "the allocator's settings must be in force and logged: {seen}"
    );

    // Asked explicitly, it does use that cluster (and fails to start when it cannot read it).
    let out = serve_dev(dir.path())
        .arg("--kubeconfig")
        .arg(dir.path().join("missing"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = text(&out.stderr);
    assert!(err.contains("reading kubeconfig"), "{err}");
}

/// An operator's `MIMALLOC_*` setting stands: poolguard neither restarts itself with its own
/// settings nor adds them, and logs what is in force.
#[test]
fn the_operators_allocator_settings_stand() {
    let dir = tempfile::tempdir().unwrap();
    let mut command = serve_dev(dir.path());
    command
        .env("MIMALLOC_PURGE_DELAY", "7")
        .env_remove("MIMALLOC_ARENA_EAGER_COMMIT");
    let (mut child, seen) = start_reading_log_until(&mut command, "memory allocator");
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(seen.contains("MIMALLOC_PURGE_DELAY=7"), "{seen}");
    assert!(!seen.contains("MIMALLOC_ARENA_EAGER_COMMIT"), "{seen}");
}

const AUDIT: [&str; 8] = [
    "audit",
    "--manifests",
    "testdata/audit/manifests",
    "--namespaces-file",
    NS,
    "--nodes-file",
    "testdata/audit/nodes.yaml",
    "--config=testdata/config/example.yaml",
];

/// (namespace, kind/name or document, policy, result)
type Row = (String, String, String, String);

/// The exit status and the results of `audit --output json`.
fn audit_json(extra: &[&str]) -> (Option<i32>, Vec<Row>) {
    let args: Vec<&str> = AUDIT.iter().chain(extra).copied().collect();
    let out = poolguard(&args, None);
    let results: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", text(&out.stderr)));
    let rows = results
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            let res = &r["resource"];
            let object = format!(
                "{}/{}",
                res["kind"].as_str().unwrap(),
                res["name"].as_str().unwrap()
            );
            let field = |k: &str| r[k].as_str().unwrap().to_string();
            (
                res["namespace"].as_str().unwrap_or("").to_string(),
                object,
                field("policy"),
                field("result"),
            )
        })
        .collect();
    (out.status.code(), rows)
}

#[test]
fn audit_reports_every_pod_and_workload_and_exits_1_on_failures() {
    let (code, rows) = audit_json(&["--output", "json"]);
    assert_eq!(code, Some(1));
    let want = [
        (
            "",
            "/testdata/audit/manifests/broken.yaml: document 1",
            "poolguard",
            "error",
        ),
        ("mapped", "Pod/web-ok", "placement", "pass"),
        ("mapped", "Pod/web-ok", "allowedrepositories", "pass"),
        ("mapped", "Pod/web-ok", "latesttag", "pass"),
        ("mapped", "Pod/web-elsewhere", "placement", "fail"),
        ("mapped", "Pod/web-elsewhere", "allowedrepositories", "pass"),
        ("mapped", "Pod/web-elsewhere", "latesttag", "pass"),
        ("gpu-team", "Pod/trainer", "placement", "pass"),
        ("gpu-team", "Pod/trainer", "allowedrepositories", "fail"),
        // latesttag depends on allowedrepositories being Compliant: Pending, so skipped.
        ("gpu-team", "Pod/trainer", "latesttag", "skip"),
        ("mapped", "Deployment/api", "placement", "fail"),
        ("mapped", "Deployment/api", "allowedrepositories", "pass"),
        ("mapped", "Deployment/api", "latesttag", "pass"),
    ];
    let got: Vec<(&str, &str, &str, &str)> = rows
        .iter()
        .map(|(a, b, c, d)| (a.as_str(), b.as_str(), c.as_str(), d.as_str()))
        .collect();
    assert_eq!(got, want, "the Service is not audited; files in name order");

    // Without the node list a pod's node is not checked.
    let args: Vec<&str> = AUDIT
        .iter()
        .copied()
        .filter(|a| !a.contains("nodes"))
        .collect();
    let out = poolguard(&args, None);
    let table = text(&out.stdout);
    assert!(table.starts_with("NAMESPACE"), "{table}");
    let line = table
        .lines()
        .find(|l| l.contains("Pod/web-elsewhere") && l.contains("placement"))
        .unwrap();
    assert!(
        line.contains(" pass ") && line.contains("not checked"),
        "{line}"
    );
}

/// With Gatekeeper constraints, the audit judges other kinds by the constraints that match
/// them: the Service of the manifests gets RequiredOwner's result, the Pods theirs beside the
/// SIT policies', the Deployment none (no constraint matches it).
#[test]
fn audit_judges_other_kinds_by_the_constraints_that_match_them() {
    let (code, rows) = audit_json(&[
        "--output",
        "json",
        "--gatekeeper-dir",
        "testdata/gatekeeper/requiredowner",
    ]);
    assert_eq!(code, Some(1));
    let constraint_rows: Vec<(&str, &str, &str, &str)> = rows
        .iter()
        .filter(|(_, _, policy, _)| policy.ends_with("-need-owner") || policy.contains("team"))
        .map(|(a, b, c, d)| (a.as_str(), b.as_str(), c.as_str(), d.as_str()))
        .collect();
    assert_eq!(
        constraint_rows,
        [
            ("mapped", "Pod/web-ok", "pods-need-owner", "fail"),
            ("mapped", "Pod/web-elsewhere", "pods-need-owner", "fail"),
            ("gpu-team", "Pod/trainer", "pods-need-owner", "fail"),
            ("mapped", "Service/api", "services-need-owner", "fail"),
        ]
    );
}

#[test]
fn audit_table_names_the_pools() {
    let out = poolguard(&AUDIT, None);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let table = text(&out.stdout);
    let line = table
        .lines()
        .find(|l| l.contains("Pod/web-elsewhere") && l.contains("placement"))
        .unwrap();
    assert!(line.starts_with("mapped "), "{line}");
    assert!(
        line.contains("fail")
            && line.contains("\"pool1\"")
            && line.contains("node \"node-gpu-a\" of pool \"gpu\""),
        "{line}"
    );
    let line = table.lines().find(|l| l.contains("broken.yaml")).unwrap();
    assert!(line.contains("error"), "{line}");
}

#[test]
fn audit_writes_one_report_per_namespace() {
    for (api, api_version, kind) in [
        ("policyreport", "wgpolicyk8s.io/v1alpha2", "PolicyReport"),
        ("openreports", "openreports.io/v1alpha1", "Report"),
    ] {
        let mut args = AUDIT.to_vec();
        args.extend([
            "--output",
            "reports",
            "--report-api",
            api,
            "--max-results-per-report",
            "3",
        ]);
        let out = poolguard(&args, None);
        assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
        let reports = poolguard_core::documents::parse(&text(&out.stdout), "stdout").unwrap();
        let namespaces: Vec<&str> = reports
            .iter()
            .map(|r| r["metadata"]["namespace"].as_str().unwrap())
            .collect();
        assert_eq!(namespaces, ["gpu-team", "mapped"], "{api}");
        for r in &reports {
            assert_eq!(
                (r["apiVersion"].as_str(), r["kind"].as_str()),
                (Some(api_version), Some(kind))
            );
            assert_eq!(r["metadata"]["name"], "poolguard-audit");
        }
        assert_eq!(
            reports[0]["summary"],
            serde_json::json!({"pass": 1, "fail": 1, "warn": 0, "error": 0, "skip": 1})
        );
        let skipped = reports[0]["results"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["result"] == "skip")
            .unwrap();
        assert_eq!(skipped["policy"], "latesttag");
        assert_eq!(
            skipped["message"],
            "not evaluated (Pending): dependency allowedrepositories is NonCompliant, Compliant required"
        );
        let mapped = &reports[1];
        assert_eq!(
            mapped["summary"],
            serde_json::json!({"pass": 7, "fail": 2, "warn": 0, "error": 0, "skip": 0})
        );
        // 9 results, 3 listed: both failures first, then the earliest pass.
        let listed: Vec<&str> = mapped["results"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["result"].as_str().unwrap())
            .collect();
        assert_eq!(listed, ["pass", "fail", "fail"], "{api}");
        assert_eq!(
            mapped["metadata"]["annotations"]["poolguard.io/results-omitted"],
            "6"
        );
        let result = &mapped["results"][1];
        assert_eq!(result["source"], "poolguard");
        assert_eq!(
            result["resources"][0]["uid"],
            "0b1c6a52-0001-4000-8000-000000000002"
        );
        assert!(result["timestamp"]["seconds"].as_i64().unwrap() > 1_600_000_000);
        // The unparsable document belongs to no namespace: it is named on stderr, in the
        // `poolguard: error: ...` form of every error line.
        assert!(
            text(&out.stderr).lines().any(|l| l.starts_with(
                "poolguard: error: testdata/audit/manifests/broken.yaml: document 1 (in no report): "
            )),
            "{}",
            text(&out.stderr)
        );
    }
}

#[test]
fn audit_of_compliant_objects_exits_0_and_bad_input_exits_2() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("pod.yaml"),
        "apiVersion: v1\nkind: Pod\nmetadata: {name: ok, namespace: mapped}\nspec:\n  nodeSelector: {agentpool: pool1}\n  containers: [{name: c, image: registry.example.com/c:1}]\n",
    )
    .unwrap();
    let manifests = dir.path().to_str().unwrap();
    let out = poolguard(
        &[
            "audit",
            "--manifests",
            manifests,
            "--namespaces-file",
            NS,
            "--config",
            "testdata/config/example.yaml",
        ],
        None,
    );
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}{}",
        text(&out.stdout),
        text(&out.stderr)
    );

    let empty = tempfile::tempdir().unwrap();
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (
            vec!["audit", "--manifests", "nope", "--namespaces-file", NS],
            "manifests directory nope",
        ),
        (
            vec![
                "audit",
                "--manifests",
                empty.path().to_str().unwrap(),
                "--namespaces-file",
                NS,
            ],
            "no *.yaml",
        ),
        (
            vec![
                "audit",
                "--manifests",
                manifests,
                "--namespaces-file",
                NS,
                "--nodes-file",
                NS,
            ],
            "expected a Node",
        ),
        (
            vec![
                "audit",
                "--manifests",
                manifests,
                "--namespaces-file",
                "nope.yaml",
            ],
            "nope.yaml",
        ),
    ];
    for (args, want) in cases {
        let out = poolguard(&args, None);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(
            stderr.contains(want) && stderr.lines().count() == 1,
            "{args:?}: {stderr}"
        );
    }
}

#[test]
fn config_check_loads_what_serve_loads_and_names_what_does_not() {
    let out = poolguard(
        &[
            "config",
            "check",
            "--config",
            "testdata/config/example.yaml",
            "--policies-dir",
            "policies",
            "--placement-policies-dir",
            "policies/placement",
        ],
        None,
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let said = text(&out.stdout);
    assert!(said.starts_with("config ok: "), "{said}");
    assert!(said.contains("allowedrepositories"), "{said}");

    // A semantic error the chart schema cannot see: a policy setting for no policy.
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.yaml");
    std::fs::write(
        &config,
        "policies:\n  alowedrepositories:\n    enforcement: deny\n    parameters: {repositories: [\"registry.example.com/\"]}\n",
    )
    .unwrap();
    let out = poolguard(
        &[
            "config",
            "check",
            "--config",
            config.to_str().unwrap(),
            "--policies-dir",
            "policies",
        ],
        None,
    );
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stdout));
    let error = text(&out.stderr);
    assert!(error.starts_with("poolguard: error: "), "{error}");
    assert!(error.contains("alowedrepositories"), "{error}");
    assert!(out.stdout.is_empty(), "{}", text(&out.stdout));
}

/// `poolguard` run in `dir` instead of the repository root.
fn poolguard_in(dir: &std::path::Path, args: &[&str], stdin: Option<&str>) -> Output {
    use std::io::Write;
    let mut child = Command::new(env!("CARGO_BIN_EXE_poolguard"))
        .args(args)
        .current_dir(dir)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut input = child.stdin.take().unwrap();
    input.write_all(stdin.unwrap_or("").as_bytes()).unwrap();
    drop(input);
    child.wait_with_output().unwrap()
}

/// A file of this repository by absolute path, for runs in another directory.
fn repo_file(path: &str) -> String {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join(path)
        .display()
        .to_string()
}

#[test]
fn eval_of_a_kind_poolguard_does_not_decide_is_an_error() {
    let pod = std::fs::read_to_string("testdata/manifests/pod.yaml").unwrap();
    for (manifest, webhook, named) in [
        (
            pod.replace("kind: Pod", "kind: Pdo"),
            "validate",
            "kind Pdo (apiVersion v1)",
        ),
        (
            pod.replace("kind: Pod", "kind: Pdo"),
            "mutate",
            "kind Pdo (apiVersion v1)",
        ),
        // A known kind in the wrong API group.
        (
            pod.replace("kind: Pod", "kind: Deployment"),
            "validate",
            "kind Deployment (apiVersion v1)",
        ),
        // Namespaces are decided by the validating webhook only.
        (
            "apiVersion: v1\nkind: Namespace\nmetadata: {name: a}\n".to_string(),
            "mutate",
            "kind Namespace (apiVersion v1)",
        ),
        // The second document: nothing is printed for the first either.
        (
            format!("{pod}---\n{}", pod.replace("kind: Pod", "kind: Pdo")),
            "validate",
            "document 2: ",
        ),
    ] {
        let out = poolguard(
            &["eval", "--namespaces-file", NS, "--webhook", webhook, "-"],
            Some(&manifest),
        );
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{webhook} {named}: {stderr}");
        assert_eq!(text(&out.stdout), "", "{named}");
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
        assert!(
            stderr.starts_with("poolguard: error: <stdin>: document ")
                && stderr.contains(named)
                && stderr.contains("it decides v1 Pod")
                && stderr.contains("apps/v1 Deployment"),
            "{stderr}"
        );
    }
    // A Namespace is decided by --webhook validate.
    let out = poolguard(
        &[
            "eval",
            "--namespaces-file",
            NS,
            "--webhook",
            "validate",
            "-",
        ],
        Some("apiVersion: v1\nkind: Namespace\nmetadata: {name: a}\n"),
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
}

/// With no FILE and a terminal on standard input, eval says what it needs instead of waiting.
/// Needs util-linux `script` for the terminal; skipped without it.
#[test]
fn eval_without_a_file_on_a_terminal_prints_the_usage() {
    let probe = Command::new("script")
        .args(["-qec", "true", "/dev/null"])
        .output();
    if !probe.is_ok_and(|o| o.status.success()) {
        eprintln!("skipped: no util-linux `script` to run poolguard on a terminal");
        return;
    }
    let command = format!(
        "{} eval --namespaces-file {NS} --webhook validate",
        env!("CARGO_BIN_EXE_poolguard")
    );
    let mut child = Command::new("script")
        .args(["-qec", &command, "/dev/null"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Standard input stays open: poolguard must not wait for it.
    let _stdin = child.stdin.take();
    let start = std::time::Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break Some(status);
        }
        if start.elapsed() > std::time::Duration::from_secs(30) {
            child.kill().unwrap();
            break None;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    let out = child.wait_with_output().unwrap();
    let terminal = text(&out.stdout);
    assert_eq!(status.and_then(|s| s.code()), Some(2), "{terminal}");
    assert!(
        terminal.starts_with("poolguard: error: no input: ")
            && terminal.contains("usage: poolguard eval")
            && terminal.trim_end().lines().count() == 1,
        "{terminal:?}"
    );
}

#[test]
fn a_missing_default_policies_dir_is_a_warning_and_a_missing_given_one_an_error() {
    let elsewhere = tempfile::tempdir().unwrap();
    let (ns, pod) = (repo_file(NS), repo_file("testdata/manifests/pod.yaml"));
    let eval = ["eval", "--namespaces-file", &ns, "--webhook", "mutate"];
    let out = poolguard_in(elsewhere.path(), &[&eval[..], &[&pod]].concat(), None);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.starts_with("poolguard: warning: no policies loaded: the default policies directory ./policies does not exist in ")
            && stderr.contains("give --policies-dir DIR"),
        "{stderr}"
    );
    // With the placement section on, the placement policies' default directory too.
    let config = elsewhere.path().join("config.yaml");
    std::fs::write(
        &config,
        "placement:\n  pools: [general]\n  chooseValue: auto\n",
    )
    .unwrap();
    std::fs::create_dir(elsewhere.path().join("policies")).unwrap();
    let config_flag = format!("--config={}", config.display());
    let out = poolguard_in(
        elsewhere.path(),
        &[&eval[..], &[&config_flag, &pod]].concat(),
        None,
    );
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.starts_with("poolguard: warning: no placement policies loaded")
            && stderr.contains("directory policies/placement does not exist")
            && stderr.contains("give --placement-policies-dir DIR"),
        "{stderr}"
    );
    // In the repository root the defaults are there: no warning.
    let out = poolguard(
        &[&eval[..], &["testdata/manifests/pod.yaml"]].concat(),
        None,
    );
    assert_eq!(text(&out.stderr), "");

    for flag in ["--policies-dir", "--placement-policies-dir"] {
        let missing = elsewhere.path().join("nowhere");
        let given = format!("{flag}={}", missing.display());
        let out = poolguard(
            &[&eval[..], &[&given, "testdata/manifests/pod.yaml"]].concat(),
            None,
        );
        assert_eq!(out.status.code(), Some(2), "{flag}");
        assert_eq!(
            text(&out.stderr),
            format!(
                "poolguard: error: {flag} {}: no such directory\n",
                missing.display()
            )
        );
    }
}

/// The cluster commands' errors name only flags the command has.
#[test]
fn no_cluster_hints_name_the_commands_own_flags() {
    let home = tempfile::tempdir().unwrap();
    for (args, hint) in [
        (&["rollout", "status"][..], "give --kubeconfig"),
        (
            &["audit"][..],
            "give --kubeconfig, or --manifests DIR with --namespaces-file",
        ),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_poolguard"))
            .args(args)
            .env("HOME", home.path())
            .env("KUBECONFIG", home.path().join("none"))
            .env_remove("KUBERNETES_SERVICE_HOST")
            .env_remove("KUBERNETES_SERVICE_PORT")
            .output()
            .unwrap();
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(
            stderr.contains("no cluster configured") && stderr.contains(hint),
            "{args:?}: {stderr}"
        );
        assert!(!stderr.contains("--dev"), "{args:?}: {stderr}");
        // The causes once, not repeated as a chain.
        assert_eq!(
            stderr.matches("No such file or directory").count(),
            1,
            "{args:?}: {stderr}"
        );
        if args[0] == "rollout" {
            assert!(!stderr.contains("--namespaces-file"), "{stderr}");
        }
    }
}

/// A reader that goes away (`poolguard eval ... | head -1`) ends the output quietly.
#[test]
fn a_closed_pipe_ends_quietly() {
    use std::io::Write;
    let pod = std::fs::read_to_string("testdata/manifests/pod.yaml").unwrap();
    for args in [
        &["eval", "--namespaces-file", NS, "--webhook", "mutate", "-"][..],
        &[
            "eval",
            "--namespaces-file",
            NS,
            "--webhook",
            "validate",
            "-",
        ][..],
    ] {
        let mut child = Command::new(env!("CARGO_BIN_EXE_poolguard"))
            .args(args)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        // The reader is gone before poolguard can write: it writes only after reading its input.
        drop(child.stdout.take());
        let mut input = child.stdin.take().unwrap();
        input.write_all(pod.as_bytes()).unwrap();
        drop(input);
        let out = child.wait_with_output().unwrap();
        assert_eq!(text(&out.stderr), "", "{args:?}");
        assert_eq!(out.status.code(), Some(141), "{args:?}");
    }
}

/// `serve` and `audit` spell the report flags alike; the old `serve --audit-*` spellings still
/// work.
#[test]
fn serve_and_audit_share_the_report_flags() {
    for (api, max) in [
        ("--report-api", "--max-results-per-report"),
        ("--audit-report-api", "--audit-max-results-per-report"),
    ] {
        // Refused by the check of the value, so after parsing and before serving anything.
        let out = poolguard(&["serve", api, "openreports", max, "0"], None);
        assert_eq!(
            text(&out.stderr),
            "poolguard: error: --max-results-per-report and --audit-page-size must be at least 1\n",
            "{api} {max}"
        );
        let mut args = AUDIT.to_vec();
        args.extend(["--output", "reports", api, "openreports", max, "1"]);
        let out = poolguard(&args, None);
        assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
        let reports = poolguard_core::documents::parse(&text(&out.stdout), "stdout").unwrap();
        assert_eq!(reports[0]["apiVersion"], "openreports.io/v1alpha1");
        assert_eq!(reports[0]["results"].as_array().unwrap().len(), 1);
    }
    let help = text(&poolguard(&["serve", "--help"], None).stdout);
    assert!(help.contains("--report-api") && help.contains("--max-results-per-report"));
    assert!(!help.contains("--audit-report-api"), "{help}");
}

/// Rego's `print()` never reaches poolguard's log stream (standard error): a printed value with
/// a newline could otherwise make a line that reads as poolguard's own log record.
#[test]
fn rego_print_output_is_not_written_to_the_log_stream() {
    let dir = tempfile::tempdir().unwrap();
    let policies = dir.path().join("policies");
    std::fs::create_dir(&policies).unwrap();
    std::fs::write(
        policies.join("printer.rego"),
        "package printer\ninfringement[{\"msg\": \"never\"}] { print(\"FORGED\\n{\\\"level\\\":\\\"INFO\\\",\\\"fields\\\":{\\\"message\\\":\\\"FORGED\\\"}}\", input.review.uid); input.never }\n",
    )
    .unwrap();
    let config = dir.path().join("config.yaml");
    std::fs::write(&config, "policies:\n  printer:\n    parameters: {}\n").unwrap();
    let out = poolguard(
        &[
            "eval",
            "--namespaces-file",
            NS,
            "--policies-dir",
            policies.to_str().unwrap(),
            "--config",
            config.to_str().unwrap(),
            "--webhook",
            "validate",
            "testdata/reviews/pod-create-placed.json",
        ],
        None,
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let review: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(review["response"]["allowed"], true);
    assert!(
        !text(&out.stderr).contains("FORGED"),
        "{}",
        text(&out.stderr)
    );
    assert!(
        !text(&out.stdout).contains("FORGED"),
        "{}",
        text(&out.stdout)
    );
}

/// A client CA alone would accept every client it signs (on kubeadm, every kubelet): `serve`
/// refuses it without the API server's client name, in one line.
#[test]
fn a_client_ca_without_a_client_name_is_refused() {
    let out = poolguard(
        &[
            "serve",
            "--tls-cert-file",
            "missing.crt",
            "--tls-key-file",
            "missing.key",
            "--client-ca-file",
            "missing-ca.crt",
        ],
        None,
    );
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    let error = text(&out.stderr);
    assert!(
        error.contains("--client-ca-file needs --client-name"),
        "{error}"
    );
    assert_eq!(error.trim().lines().count(), 1, "{error}");
}

/// A config that cannot lie: a policy listed without parameters (which would never run), a
/// misspelt parameter (which would change nothing), an unknown policy: `config check` reports
/// every one, a line each naming where, and exits 2; `eval` refuses the same config.
#[test]
fn config_check_reports_every_mistake_of_a_config_that_would_not_mean_what_it_says() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.yaml");
    std::fs::write(
        &config,
        "policies:\n  allowedrepositories: {enforcement: deny}\n  latesttag:\n    parameters:\n      exemptRepository: [registry.example.com/]\n  requirelimits:\n    parameters: {}\n",
    )
    .unwrap();
    let config = config.to_str().unwrap();
    let out = poolguard(&["config", "check", "--config", config], None);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stdout));
    let error = text(&out.stderr);
    let lines: Vec<&str> = error.lines().collect();
    assert_eq!(lines.len(), 3, "{error}");
    assert!(lines[0].starts_with("poolguard: error: "), "{error}");
    assert!(lines[0].contains("at `policies.allowedrepositories`: no `parameters` here or at any other level, so the policy would never run"), "{error}");
    assert!(lines[1].contains("at `policies.latesttag.parameters.exemptRepository`: the policy takes no parameter `exemptRepository` (did you mean `exemptRepositories`?"), "{error}");
    assert!(
        lines[2].contains("at `policies.requirelimits`: no policy named `requirelimits` is loaded"),
        "{error}"
    );
    let out = poolguard(
        &[
            "eval",
            "--namespaces-file",
            NS,
            "--config",
            config,
            "--webhook",
            "validate",
            "testdata/reviews/pod-create-placed.json",
        ],
        None,
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("exemptRepository"),
        "{}",
        text(&out.stderr)
    );
}

/// Run from another directory, the default `./policies` is not there: said, naming the
/// directory, by `config check` (a warning) and by every command whose config names policies
/// (an error), never "config ok: 0 policies" alone or "no policy named … (loaded: )".
#[test]
fn a_missing_default_policies_directory_is_named() {
    let elsewhere = tempfile::tempdir().unwrap();
    let out = poolguard_in(elsewhere.path(), &["config", "check"], None);
    assert_eq!(out.status.code(), Some(0));
    assert!(
        text(&out.stderr).contains("the default policies directory ./policies does not exist in"),
        "{}",
        text(&out.stderr)
    );
    let config = repo_file("testdata/config/example.yaml");
    for args in [
        vec!["config", "check", "--config", &config],
        vec![
            "eval",
            "--namespaces-file",
            "/dev/null",
            "--config",
            &config,
            "--webhook",
            "validate",
            "-",
        ],
    ] {
        let out = poolguard_in(elsewhere.path(), &args, Some("{}"));
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let error = text(&out.stderr);
        assert!(
            error.contains("the config names policies (allowedrepositories")
                && error.contains("the default policies directory ./policies does not exist in")
                && error.contains("give --policies-dir DIR"),
            "{args:?}: {error}"
        );
    }
}

/// Logs written to a file or a pipe carry no terminal colour codes.
#[test]
fn logs_to_a_pipe_are_plain_text() {
    use std::io::BufRead;
    let dir = tempfile::tempdir().unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_poolguard"))
        .args([
            "serve",
            "--dev",
            "--addr",
            "127.0.0.1:0",
            "--metrics-addr",
            "127.0.0.1:0",
            "--namespaces-file",
            &repo_file(NS),
        ])
        .current_dir(dir.path())
        .env_remove("NO_COLOR")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = std::io::BufReader::new(child.stderr.take().unwrap()).lines();
    let mut seen = Vec::new();
    for line in lines.by_ref().take(3) {
        seen.push(line.unwrap());
    }
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(seen.iter().any(|l| l.contains("INFO")), "{seen:?}");
    assert!(!seen.iter().any(|l| l.contains('\u{1b}')), "{seen:?}");
}

/// `eval` decides what admission and audit decide: a `kind: List` item by item; with
/// Gatekeeper constraints loaded, any kind they may match (a Service); and mutate's output,
/// patched or not, is what `eval --webhook validate -` reads next.
#[test]
fn eval_reads_lists_constrained_kinds_and_its_own_mutate_output() {
    let dir = tempfile::tempdir().unwrap();
    let list = dir.path().join("list.yaml");
    std::fs::write(
        &list,
        "apiVersion: v1\nkind: List\nitems:\n- apiVersion: v1\n  kind: Pod\n  metadata: {name: a, namespace: unmapped}\n  spec: {containers: [{name: c, image: registry.example.com/app:1}]}\n- apiVersion: v1\n  kind: Pod\n  metadata: {name: b, namespace: unmapped}\n  spec: {containers: [{name: c, image: docker.io/evil/miner:1}]}\n",
    )
    .unwrap();
    let config = "testdata/config/example.yaml";
    let eval = |webhook: &str, file: &str, stdin: Option<&str>| {
        poolguard(
            &[
                "eval",
                "--namespaces-file",
                NS,
                "--config",
                config,
                "--webhook",
                webhook,
                file,
            ],
            stdin,
        )
    };
    let out = eval("validate", list.to_str().unwrap(), None);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let verdicts = text(&out.stdout);
    assert!(
        verdicts.contains("# Pod a in namespace unmapped (no pool): ALLOWED"),
        "{verdicts}"
    );
    assert!(
        verdicts.contains("# Pod b in namespace unmapped (no pool): DENIED (403)"),
        "{verdicts}"
    );
    // Mutate patches nothing in an unlabelled namespace: the object still comes out, and
    // validate decides it.
    let mutated = eval("mutate", list.to_str().unwrap(), None);
    assert_eq!(mutated.status.code(), Some(0), "{}", text(&mutated.stderr));
    let piped = eval("validate", "-", Some(&text(&mutated.stdout)));
    assert_eq!(piped.status.code(), Some(1), "{}", text(&piped.stderr));
    assert_eq!(text(&piped.stdout), verdicts);
    // A Service under a Gatekeeper constraint: decided, as an AdmissionReview would be.
    let gatekeeper = dir.path().join("gatekeeper");
    std::fs::create_dir(&gatekeeper).unwrap();
    for file in ["template.yaml", "other-kinds.yaml"] {
        std::fs::copy(
            format!("testdata/gatekeeper/requiredowner/{file}"),
            gatekeeper.join(file),
        )
        .unwrap();
    }
    let service = "apiVersion: v1\nkind: Service\nmetadata: {name: web, namespace: unmapped}\nspec: {ports: [{port: 80}]}\n";
    let out = poolguard(
        &[
            "eval",
            "--namespaces-file",
            NS,
            "--gatekeeper-dir",
            gatekeeper.to_str().unwrap(),
            "--webhook",
            "validate",
            "-",
        ],
        Some(service),
    );
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("# Service web in namespace unmapped (no pool): DENIED"),
        "{}",
        text(&out.stdout)
    );
}

/// Sizes accept the forms the help prints (`24 MiB`, `24MiB`, bytes); a unit it does not know
/// is refused, naming the ones it does.
#[test]
fn sizes_accept_the_forms_the_help_prints() {
    let help = text(&poolguard(&["serve", "--help"], None).stdout);
    assert!(help.contains("24 MiB"), "{help}");
    for (max, budget) in [
        ("24MiB", "1 MiB"),
        ("25165824", "1048576"),
        ("24 MiB", "1MiB"),
    ] {
        let out = poolguard(
            &[
                "serve",
                "--max-body-bytes",
                max,
                "--body-budget-bytes",
                budget,
            ],
            None,
        );
        let error = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{error}");
        assert!(
            error.contains(
                "--body-budget-bytes (1048576) must be at least --max-body-bytes (25165824)"
            ),
            "{max} {budget}: {error}"
        );
    }
    let out = poolguard(&["serve", "--max-body-bytes", "24XB"], None);
    let error = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{error}");
    assert!(error.contains("write B, KiB, MiB or GiB"), "{error}");
}

/// Errors speak the user's words, not a library's: a duplicate key names the mapping it is in
/// (not `?`) and no library option; a config left in the policies directory and a config given
/// to `verify` are named for what they are not.
#[test]
fn errors_name_what_the_user_wrote_without_library_internals() {
    let dir = tempfile::tempdir().unwrap();
    let dup = dir.path().join("dup.yaml");
    std::fs::write(
        &dup,
        "policies:\n  latesttag: {parameters: {}}\n  latesttag: {parameters: {}}\n",
    )
    .unwrap();
    let out = poolguard(
        &["config", "check", "--config", dup.to_str().unwrap()],
        None,
    );
    let error = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{error}");
    assert!(
        error.contains("at `policies`: a key given twice in the same mapping: latesttag"),
        "{error}"
    );
    assert!(
        !error.contains("DuplicateKeyPolicy") && !error.contains('?'),
        "{error}"
    );
    let policies = dir.path().join("policies");
    std::fs::create_dir(&policies).unwrap();
    std::fs::copy("testdata/config/example.yaml", policies.join("config.yaml")).unwrap();
    let out = poolguard(
        &[
            "config",
            "check",
            "--policies-dir",
            policies.to_str().unwrap(),
        ],
        None,
    );
    let error = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{error}");
    assert!(error.contains("config.yaml: not a policy template (it looks like a poolguard config: give it with --config)"), "{error}");
    let out = poolguard(&["verify", "testdata/config/example.yaml"], None);
    let error = text(&out.stderr);
    assert!(
        error.contains("not a test suite: a gator test suite has `kind: Suite` and `tests`"),
        "{error}"
    );
    assert!(!error.contains("unknown field"), "{error}");
}

/// One vocabulary across subcommands: `-n` names the namespace in `eval` as in `rollout`, the
/// rollout ConfigMap is `--rollout-configmap` as in `serve` (the old `--configmap` still
/// works), every argument is described, and no default contradicts its description.
#[test]
fn subcommands_share_one_vocabulary() {
    let help = |args: &[&str]| text(&poolguard(args, None).stdout);
    let approve = help(&["rollout", "approve", "--help"]);
    assert!(approve.contains("--rollout-configmap <NAME>"), "{approve}");
    assert!(
        approve.contains("<POLICY>  The policy under a rollout"),
        "{approve}"
    );
    assert!(
        approve.contains("<GROUP>   The group of the policy's rollout"),
        "{approve}"
    );
    let audit = help(&["audit", "--help"]);
    assert!(!audit.contains("[default: \"\"]"), "{audit}");
    let policy_test = help(&["policy", "test", "--help"]);
    assert!(
        !policy_test.contains("[default: policies]"),
        "{policy_test}"
    );
    let eval = help(&["eval", "--help"]);
    assert!(eval.contains("-n, --namespace"), "{eval}");
    // The old spelling is kept: refused only for want of a cluster, not as an unknown flag.
    let out = poolguard(
        &[
            "rollout",
            "status",
            "--configmap",
            "x",
            "--kubeconfig",
            "/nonexistent",
        ],
        None,
    );
    assert!(
        !text(&out.stderr).contains("unexpected argument"),
        "{}",
        text(&out.stderr)
    );
}

/// `--webhook admission`: what the API server does, in one step: the mutating webhook, then the
/// validating webhook on the object as mutated.
#[test]
fn eval_admission_mutates_then_validates_the_mutated_object() {
    let eval = |file: &str| {
        poolguard(
            &[
                "eval",
                "--namespaces-file",
                NS,
                "--config",
                "testdata/config/example.yaml",
                "--webhook",
                "admission",
                file,
            ],
            None,
        )
    };
    let out = eval("testdata/manifests/pod.yaml");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let said = text(&out.stdout);
    let (mutating, validating) = said
        .split_once("# --- validating the objects as mutated\n")
        .expect("both webhooks");
    assert!(mutating.contains("ALLOWED, patched"), "{said}");
    // Validated as mutated: with its pool's nodeSelector, so placement passes.
    assert!(
        validating.starts_with("# Pod sleep in namespace mapped (pool pool1): ALLOWED\n"),
        "{said}"
    );
    let out = eval("testdata/manifests/deployment-bad-image.yaml");
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("DENIED (403)"),
        "{}",
        text(&out.stdout)
    );
    let out = eval("testdata/reviews/pod-create-mapped.json");
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("--webhook admission reads manifests"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn what_serve_or_controller_cannot_honour_is_refused_in_words() {
    let serve_both = [
        "serve",
        "--manage-certs",
        "--cert-secret",
        "ns/tls",
        "--webhook-configs",
        "m,v",
        "--cert-dns-name",
        "pg.ns.svc",
        "--tls-cert-file",
        "certs/tls.crt",
        "--tls-key-file",
        "certs/tls.key",
    ];
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (
            vec!["controller", "--audit-interval", "0"],
            "the controller has nothing to do",
        ),
        (
            vec![
                "controller",
                "--audit-interval",
                "0",
                "--rollout-configmap",
                "rollouts",
            ],
            "--rollout-configmap with --audit-interval 0",
        ),
        (
            serve_both.to_vec(),
            "two sources of the serving certificate",
        ),
        // The fallback leaves the webhooks out only on the canary's evidence: without a canary
        // namespace it cannot, so it is refused rather than trusting stored objects.
        (
            vec![
                "controller",
                "--native-apply",
                "--register-webhooks",
                "webhooks.yaml",
                "--native-fallback",
            ],
            "--native-canary-namespace <NAMESPACE>",
        ),
    ];
    for (args, want) in cases {
        let out = poolguard(&args, None);
        let stderr = text(&out.stderr);
        assert_ne!(out.status.code(), Some(0), "{args:?}: {stderr}");
        assert!(stderr.contains(want), "{args:?}: {stderr}");
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
    }
}

/// docs/policies.md's exception example, offline: a foreign image refused by `eval` is admitted
/// with --exceptions-dir, with a warning naming the exception and its ticket; `audit
/// --manifests` reports it as `skip` with the exception's properties; an exception the
/// validating webhook would refuse (no ticket, too long, unknown policy) is bad input (exit 2,
/// one line naming what is wrong).
#[test]
fn exceptions_offline_admit_warn_and_skip_and_bad_ones_are_bad_input() {
    let dir = tempfile::tempdir().unwrap();
    let path = |name: &str| dir.path().join(name).to_str().unwrap().to_string();
    std::fs::write(
        path("config.yaml"),
        "policies:\n  allowedrepositories:\n    enforcement: deny\n    parameters: {repositories: [registry.example.com/]}\nexceptions: {namespaces: [poolguard], maxDuration: 720h}\n",
    )
    .unwrap();
    std::fs::write(
        path("namespaces.yaml"),
        "apiVersion: v1\nkind: Namespace\nmetadata: {name: shop, labels: {agentpool: pool1}}\n",
    )
    .unwrap();
    let manifests = dir.path().join("manifests");
    std::fs::create_dir(&manifests).unwrap();
    let pod = "apiVersion: v1\nkind: Pod\nmetadata: {name: billing-1, namespace: shop}\nspec:\n  nodeSelector: {agentpool: pool1}\n  containers: [{name: c, image: quay.io/legacy/billing:3.1}]\n";
    std::fs::write(manifests.join("pod.yaml"), pod).unwrap();
    let exceptions = dir.path().join("exceptions");
    std::fs::create_dir(&exceptions).unwrap();
    let in_days = |days: u64| {
        let at = std::time::SystemTime::now() + std::time::Duration::from_secs(days * 86_400);
        humantime::format_rfc3339_seconds(at).to_string()
    };
    let exception = |spec: &str| {
        format!("apiVersion: poolguard.io/v1alpha1\nkind: PolicyException\nmetadata: {{name: legacy-billing, namespace: poolguard}}\nspec:\n{spec}")
    };
    let good = |expires: &str| {
        exception(&format!("  policies: [allowedrepositories]\n  ticket: OPS-42\n  expires: \"{expires}\"\n  match: {{namespaces: [shop], images: [\"quay.io/legacy/*\"]}}\n"))
    };
    let eval = |with_exceptions: bool| {
        let mut args = vec![
            "eval".to_string(),
            "--namespaces-file".into(),
            path("namespaces.yaml"),
            "--config".into(),
            path("config.yaml"),
            "--policies-dir".into(),
            "policies".into(),
            "--webhook".into(),
            "validate".into(),
            manifests.join("pod.yaml").to_str().unwrap().into(),
        ];
        if with_exceptions {
            args.extend(["--exceptions-dir".into(), path("exceptions")]);
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        poolguard(&args, None)
    };
    assert_eq!(
        eval(false).status.code(),
        Some(1),
        "refused without the exception"
    );

    std::fs::write(exceptions.join("legacy.yaml"), good(&in_days(1))).unwrap();
    let out = eval(true);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    assert!(
        text(&out.stdout).contains(
            "(allowed by PolicyException poolguard/legacy-billing (ticket OPS-42, expires "
        ),
        "{}",
        text(&out.stdout)
    );
    let audit = poolguard(
        &[
            "audit",
            "--manifests",
            manifests.to_str().unwrap(),
            "--namespaces-file",
            &path("namespaces.yaml"),
            "--config",
            &path("config.yaml"),
            "--policies-dir",
            "policies",
            "--exceptions-dir",
            &path("exceptions"),
            "--output",
            "json",
        ],
        None,
    );
    let results: Value = serde_json::from_slice(&audit.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", text(&audit.stderr)));
    let row = results
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["policy"] == "allowedrepositories")
        .unwrap()
        .clone();
    assert_eq!(row["result"], "skip", "{row}");
    assert_eq!(
        row["properties"]["exception"], "poolguard/legacy-billing",
        "{row}"
    );
    assert_eq!(row["properties"]["ticket"], "OPS-42", "{row}");

    // What the cluster would refuse is bad input here too.
    for (file, want) in [
        (
            exception(&format!(
                "  policies: [allowedrepositories]\n  expires: \"{}\"\n",
                in_days(1)
            )),
            "spec.ticket is required",
        ),
        (
            good(&in_days(60)),
            "more than exceptions.maxDuration (30days) away",
        ),
        (
            good(&in_days(1)).replace("[allowedrepositories]", "[allowedrepos]"),
            "names allowedrepos that poolguard has not loaded",
        ),
    ] {
        std::fs::write(exceptions.join("legacy.yaml"), file).unwrap();
        let out = eval(true);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{want}: {stderr}");
        assert!(
            stderr.contains("legacy.yaml: document 1: PolicyException poolguard/legacy-billing: ")
                && stderr.contains(want),
            "{stderr}"
        );
        assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
    }
}
