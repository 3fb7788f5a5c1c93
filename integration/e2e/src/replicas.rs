//! `poolguard serve` processes a test starts itself (beside the one integration/e2e.sh runs),
//! against the cluster of KUBECONFIG: the audit and rollout tests run two replicas with short
//! intervals and kill or restart them.

use std::collections::BTreeSet;
use std::hash::{BuildHasher, Hasher};
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use anyhow::{bail, ensure, Context, Result};

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

/// The ports [`free_address`] hands out: `(first, count)`, between 15000 and the kernel's
/// ephemeral range, as integration/controlplane/free-port.sh picks them. A port from that range
/// (what binding port 0 gives) may be taken by any outgoing connection's local port before the
/// server it was picked for binds it.
fn port_range(ephemeral: &str) -> (u16, u16) {
    let mut bounds = ephemeral.split_whitespace().map(str::parse::<u32>);
    let (lo, hi) = match (bounds.next(), bounds.next()) {
        (Some(Ok(lo)), Some(Ok(hi))) => (lo, hi),
        _ => (32768, 60999),
    };
    if lo >= 15000 + 2000 {
        (15000, (lo - 15000).min(u32::from(u16::MAX)) as u16)
    } else if hi + 2000 <= 65535 {
        ((hi + 1) as u16, (65535 - hi) as u16)
    } else {
        (20000, 40000)
    }
}

/// A free loopback address outside the ephemeral range (bound, then released), never one this
/// process has handed out before.
pub fn free_address() -> Result<SocketAddr> {
    static HANDED: Mutex<BTreeSet<u16>> = Mutex::new(BTreeSet::new());
    let ephemeral =
        std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range").unwrap_or_default();
    let (first, count) = port_range(&ephemeral);
    let mut handed = HANDED.lock().unwrap_or_else(|e| e.into_inner());
    for _ in 0..200 {
        let mut random = std::collections::hash_map::RandomState::new().build_hasher();
        random.write_usize(handed.len());
        let port = first + (random.finish() % u64::from(count)) as u16;
        if handed.contains(&port) {
            continue;
        }
        if let Ok(listener) = TcpListener::bind(("127.0.0.1", port)) {
            handed.insert(port);
            return Ok(listener.local_addr()?);
        }
    }
    bail!(
        "no free loopback port found between {first} and {}",
        u32::from(first) + u32::from(count) - 1
    )
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_are_picked_outside_the_ephemeral_range() {
        // Linux's default: below it, above Kubernetes' 10xxx defaults.
        assert_eq!(port_range("32768\t60999\n"), (15000, 17768));
        // A range starting low: above it.
        assert_eq!(port_range("1024 50000"), (50001, 15535));
        // One covering nearly everything, or unreadable: the wide range.
        assert_eq!(port_range("1024 65000"), (20000, 40000));
        assert_eq!(port_range(""), (15000, 17768));
        let ephemeral =
            std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range").unwrap_or_default();
        let (first, count) = port_range(&ephemeral);
        let addr = free_address().unwrap();
        let picked = u32::from(first)..u32::from(first) + u32::from(count);
        assert!(
            picked.contains(&u32::from(addr.port())),
            "{addr} not in {picked:?}"
        );
        assert_ne!(free_address().unwrap(), addr, "a port is handed out once");
    }
}
