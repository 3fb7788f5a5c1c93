//! Self-managed certificates under a real kube-apiserver: two poolguard replicas run with
//! `--manage-certs` and short lifetimes, sharing one Secret; pods are created through the first
//! (server-side dry run) the whole time, and the test sees new serving certificates and new CA
//! bundles with no admission failing, and both replicas always serving a certificate the
//! published bundle verifies.
//!
//! Needs KUBECONFIG and POOLGUARD_BIN (the poolguard binary); integration/e2e.sh sets both.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::api::{Api, DeleteParams, PostParams};
use kube::Client;
use poolguard_e2e::replicas;
use poolguard_testclient::{client_config, peer_certificate, pem_certs, TlsClient};
use serde_json::json;

/// How long pods are created through the rotating webhook.
const WATCH_FOR: Duration = Duration::from_secs(75);

fn suffix() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    format!("{:x}", nanos ^ std::process::id())
}

/// The leaf certificate served at `addr`, verified against `bundle` (PEM).
async fn served_cert(addr: std::net::SocketAddr, bundle: &[u8]) -> Result<Vec<u8>> {
    let client = TlsClient::new(client_config(bundle, None, &[])?, "127.0.0.1")?;
    let tls = client.connect(addr).await?;
    Ok(peer_certificate(&tls).context("no certificate")?.to_vec())
}

#[tokio::test]
async fn certificates_renew_without_a_failed_admission() -> Result<()> {
    let bin =
        std::env::var("POOLGUARD_BIN").context("POOLGUARD_BIN must name the poolguard binary")?;
    std::env::var("KUBECONFIG").context("KUBECONFIG must point at the test cluster")?;
    let client = Client::try_default().await?;
    let id = suffix();
    let ns_name = format!("pg-renew-{id}");
    let hook_name = format!("poolguard-renewal-{id}");
    let (addr, addr2) = (replicas::free_address()?, replicas::free_address()?);
    let port = addr.port();

    let namespaces: Api<Namespace> = Api::all(client.clone());
    namespaces
        .create(&PostParams::default(), &serde_json::from_value(json!({
            "metadata": {"name": ns_name, "labels": {"agentpool": "pool1", "poolguard-renewal": id}}
        }))?)
        .await?;
    let hooks: Api<MutatingWebhookConfiguration> = Api::all(client.clone());
    hooks
        .create(&PostParams::default(), &serde_json::from_value(json!({
            "metadata": {"name": hook_name},
            "webhooks": [{
                "name": "renewal.poolguard.test",
                "clientConfig": {"url": format!("https://127.0.0.1:{port}/mutate")},
                "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"]}],
                "namespaceSelector": {"matchLabels": {"poolguard-renewal": id}},
                "failurePolicy": "Fail", "sideEffects": "None", "admissionReviewVersions": ["v1"], "timeoutSeconds": 5
            }]
        }))?)
        .await?;

    let replica = |addr: std::net::SocketAddr| -> std::io::Result<tokio::process::Child> {
        tokio::process::Command::new(&bin)
            .args([
                "serve",
                "--addr",
                &addr.to_string(),
                "--metrics-addr",
                "127.0.0.1:0",
                "--manage-certs",
            ])
            .args([
                "--cert-secret",
                &format!("{ns_name}/poolguard-tls"),
                "--webhook-configs",
                &hook_name,
            ])
            .args([
                "--cert-ip",
                "127.0.0.1",
                "--ca-validity",
                "40s",
                "--cert-validity",
                "15s",
            ])
            .args(["--cert-check-interval", "1s", "--ca-publish-grace", "3s"])
            // tests/audit.rs covers the audit.
            .args(["--audit-interval", "0"])
            .kill_on_drop(true)
            .spawn()
    };
    let mut child = replica(addr)?;
    let mut child2 = replica(addr2)?;

    let result = watch_rotation(&client, &ns_name, &hook_name, [addr, addr2]).await;
    let _ = child.kill().await;
    let _ = child2.kill().await;
    let _ = hooks.delete(&hook_name, &DeleteParams::default()).await;
    let _ = namespaces.delete(&ns_name, &DeleteParams::default()).await;
    result
}

async fn watch_rotation(
    client: &Client,
    ns: &str,
    hook: &str,
    replicas: [std::net::SocketAddr; 2],
) -> Result<()> {
    let hooks: Api<MutatingWebhookConfiguration> = Api::all(client.clone());
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let bundle_of = |h: &MutatingWebhookConfiguration| {
        h.webhooks
            .as_ref()
            .and_then(|w| w[0].client_config.ca_bundle.clone())
            .map(|b| b.0)
    };
    // Wait for the first published bundle.
    let started = Instant::now();
    let mut bundle = loop {
        if let Some(b) = bundle_of(&hooks.get(hook).await?) {
            break b;
        }
        ensure!(
            started.elapsed() < Duration::from_secs(30),
            "no CA bundle was published within 30 s"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    println!("first CA bundle published after {:?}", started.elapsed());
    // Both replicas listening (plain TCP: whether what they serve verifies is the test below).
    for addr in replicas {
        while tokio::net::TcpStream::connect(addr).await.is_err() {
            ensure!(
                started.elapsed() < Duration::from_secs(60),
                "replica {addr} was not listening within 60 s"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    let mut bundles = BTreeSet::from([bundle.clone()]);
    let mut served = BTreeSet::new();
    let (mut admitted, mut failed, mut unverified) = (0u32, Vec::new(), Vec::new());
    let dry_run = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    let begin = Instant::now();
    let mut n = 0;
    while begin.elapsed() < WATCH_FOR {
        n += 1;
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": format!("renewal-{n}")},
            "spec": {"containers": [{"name": "c", "image": "registry.example.com/app:1"}]}
        }))?;
        match pods.create(&dry_run, &pod).await {
            Ok(p)
                if p.spec
                    .as_ref()
                    .and_then(|s| s.node_selector.as_ref())
                    .is_some_and(|s| s.get("agentpool").map(String::as_str) == Some("pool1")) =>
            {
                admitted += 1
            }
            Ok(p) => failed.push(format!(
                "#{n}: admitted without the patch: {:?}",
                p.spec.and_then(|s| s.node_selector)
            )),
            Err(e) => failed.push(format!("#{n} at {:?}: {e}", begin.elapsed())),
        }
        if let Some(b) = bundle_of(&hooks.get(hook).await?) {
            if bundles.insert(b.clone()) {
                println!(
                    "new CA bundle at {:?} ({} certificates)",
                    begin.elapsed(),
                    pem_certs(&b).map_or(0, |c| c.len())
                );
            }
            bundle = b;
        }
        for (i, addr) in replicas.iter().enumerate() {
            match served_cert(*addr, &bundle).await {
                Ok(cert) => {
                    if served.insert(cert) {
                        println!(
                            "new serving certificate (replica {}) at {:?}",
                            i + 1,
                            begin.elapsed()
                        );
                    }
                }
                Err(e) => {
                    unverified.push(format!("replica {} at {:?}: {e}", i + 1, begin.elapsed()))
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    println!(
        "{admitted} admissions, {} failed; {} serving certificates, {} CA bundles seen; {} samples of a replica's certificate not verifiable against the bundle just read",
        failed.len(),
        served.len(),
        bundles.len(),
        unverified.len()
    );
    if !failed.is_empty() {
        bail!("admissions failed during rotation:\n{}", failed.join("\n"));
    }
    // A new CA is published before any certificate from it is served, and an old one stays in
    // the bundle while a certificate from it may still be served: the bundle read just before
    // must always verify what either replica serves.
    ensure!(
        unverified.is_empty(),
        "a replica served a certificate the CA bundle published at that moment does not verify:\n{}",
        unverified.join("\n")
    );
    ensure!(
        served.len() >= 3,
        "expected at least 3 serving certificates in {WATCH_FOR:?}, saw {}",
        served.len()
    );
    ensure!(
        bundles.len() >= 2,
        "expected a new CA bundle in {WATCH_FOR:?}, saw {}",
        bundles.len()
    );
    Ok(())
}
