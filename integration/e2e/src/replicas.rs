//! `poolguard serve` processes a test starts itself (beside the one integration/e2e.sh runs),
//! against the cluster of KUBECONFIG: the audit and rollout tests run two replicas with short
//! intervals and kill or restart them.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use anyhow::{ensure, Context, Result};

/// The poolguard binary (POOLGUARD_BIN).
pub fn binary() -> Result<String> {
    std::env::var("POOLGUARD_BIN").context("POOLGUARD_BIN must name the poolguard binary")
}

/// The repository's root (policies/, integration/).
pub fn repository() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
}

/// A fresh directory with a CA and a serving certificate for 127.0.0.1 (`poolguard certs`).
pub async fn certificates(id: &str) -> Result<PathBuf> {
    let dir = std::env::temp_dir().join(format!("poolguard-e2e-certs-{id}"));
    std::fs::create_dir_all(&dir)?;
    let made = tokio::process::Command::new(binary()?)
        .args(["certs", "--ip", "127.0.0.1", "--out-dir"])
        .arg(&dir)
        .output()
        .await?;
    ensure!(made.status.success(), "poolguard certs failed: {made:?}");
    Ok(dir)
}

/// A free loopback address (bound, then released).
pub fn free_address() -> Result<SocketAddr> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?)
}

/// One running replica.
pub struct Replica {
    pub identity: String,
    pub addr: SocketAddr,
    child: tokio::process::Child,
}

impl Replica {
    /// Starts `poolguard serve` on a free address with the certificates in `certs`, `config`
    /// and the repository's policies, lease identity `identity`, and `args`.
    pub fn start(certs: &Path, config: &Path, identity: &str, args: &[String]) -> Result<Replica> {
        let addr = free_address()?;
        let policies = repository().join("policies");
        let child = tokio::process::Command::new(binary()?)
            .args([
                "serve",
                "--addr",
                &addr.to_string(),
                "--metrics-addr",
                "127.0.0.1:0",
            ])
            .arg("--tls-cert-file")
            .arg(certs.join("tls.crt"))
            .arg("--tls-key-file")
            .arg(certs.join("tls.key"))
            .arg("--config")
            .arg(config)
            .arg("--policies-dir")
            .arg(policies)
            .args(["--lease-identity", identity])
            .args(args)
            .kill_on_drop(true)
            .spawn()
            .context("starting a poolguard replica")?;
        Ok(Replica {
            identity: identity.to_string(),
            addr,
            child,
        })
    }

    /// SIGKILL: no lease release, nothing flushed.
    pub async fn kill(mut self) -> Result<()> {
        self.child.kill().await?;
        Ok(())
    }
}

/// What a test that runs its own replica behind its own validating webhook makes, and removes
/// whether the test passed or not: a random id, a scratch directory, certificates, and the
/// name its webhook configuration and its replica's Lease share (`poolguard-<suite>-e2e-<id>`).
pub struct Scratch {
    pub id: String,
    pub name: String,
    pub dir: PathBuf,
    pub certs: PathBuf,
}

impl Scratch {
    pub async fn new(suite: &str) -> Result<Scratch> {
        let id = crate::random_suffix();
        let name = format!("poolguard-{suite}-e2e-{id}");
        let dir = std::env::temp_dir().join(&name);
        std::fs::create_dir_all(&dir)?;
        let certs = certificates(&id).await?;
        Ok(Scratch {
            id,
            name,
            dir,
            certs,
        })
    }

    /// Deletes the webhook configuration, the Lease `name` in `lease_namespace` and both
    /// directories (what is already gone is no error: the scenario may have failed before it).
    pub async fn remove(&self, client: &kube::Client, lease_namespace: &str) {
        use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
        use k8s_openapi::api::coordination::v1::Lease;
        use kube::api::{Api, DeleteParams};
        let _ = Api::<ValidatingWebhookConfiguration>::all(client.clone())
            .delete(&self.name, &DeleteParams::default())
            .await;
        let _ = Api::<Lease>::namespaced(client.clone(), lease_namespace)
            .delete(&self.name, &DeleteParams::default())
            .await;
        let _ = std::fs::remove_dir_all(&self.dir);
        let _ = std::fs::remove_dir_all(&self.certs);
    }
}
