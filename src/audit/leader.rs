//! Leader election for the audit: a `coordination.k8s.io` Lease held and renewed by one replica
//! at a time (kube-lease-manager: server-side apply on the Lease, so two replicas cannot both
//! take it). The other replicas take over once the holder has not renewed it for the lease
//! duration; a replica that stops releases it at once.

use std::time::Duration;

use anyhow::{Context, Result};
use kube::Client;
use kube_lease_manager::{LeaseManager, LeaseManagerBuilder};
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// Which Lease and who this replica is.
#[derive(Debug, Clone)]
pub struct LeaseSettings {
    pub name: String,
    pub namespace: String,
    pub identity: String,
    /// How long a holder that stopped renewing keeps the lease.
    pub duration: Duration,
}

/// Leadership while it lasts: `leading` turns true when this replica holds the lease and false
/// when it loses it. Dropping `leading` (then awaiting `task`) releases the lease.
pub struct Leadership {
    pub leading: watch::Receiver<bool>,
    pub task: JoinHandle<kube_lease_manager::Result<LeaseManager>>,
}

/// Starts competing for the lease (creating it when missing).
pub async fn compete(client: Client, settings: &LeaseSettings) -> Result<Leadership> {
    let duration = settings.duration.as_secs().max(2);
    // Renew a third of the duration before it runs out (at least a second).
    let grace = (duration / 3).max(1);
    let manager = LeaseManagerBuilder::new(client, &settings.name)
        .with_namespace(&settings.namespace)
        .with_identity(&settings.identity)
        .with_duration(duration)
        .with_grace(grace)
        .with_field_manager(format!("poolguard-audit-{}", settings.identity))
        .build()
        .await
        .with_context(|| {
            format!(
                "using the audit lease {}/{}",
                settings.namespace, settings.name
            )
        })?;
    let (leading, task) = manager.watch().await;
    Ok(Leadership { leading, task })
}

/// This replica's identity when none is given: the pod's name (POD_NAME, from the downward
/// API), else the host name, with the process id.
pub fn default_identity() -> String {
    if let Ok(pod) = std::env::var("POD_NAME") {
        if !pod.is_empty() {
            return pod;
        }
    }
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_default();
    let host = if host.is_empty() {
        "poolguard".to_string()
    } else {
        host
    };
    format!("{host}-{}", std::process::id())
}
