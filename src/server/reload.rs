//! Re-reading files when they change: TLS material, the config, the policies. Directories are
//! watched, not files, so Kubernetes' atomic symlink swap of mounted Secrets and ConfigMaps is
//! seen. A reload that fails keeps the last good version serving; it is logged and counted.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use notify::{EventKind, RecursiveMode, Watcher};

use crate::telemetry::metrics::Metrics;

/// Changes closer together than this are handled once.
const DEBOUNCE: Duration = Duration::from_millis(200);

/// Something to reload when a file in one of its directories changes.
pub struct Target {
    /// `tls`, `config` or `policies`: the label in logs and metrics.
    pub what: &'static str,
    pub dirs: Vec<PathBuf>,
    pub reload: Box<dyn Fn() -> Result<()> + Send + Sync>,
}

/// The directory to watch for `path`: itself when it is a directory, else its parent.
pub fn dir_of(path: &Path) -> PathBuf {
    let absolute = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
    if absolute.is_dir() {
        absolute
    } else {
        absolute
            .parent()
            .map_or_else(|| PathBuf::from("/"), Path::to_path_buf)
    }
}

/// Counts and logs the outcome of reloading `what`.
pub fn record(what: &'static str, outcome: Result<()>, metrics: &Metrics) {
    match outcome {
        Ok(()) => {
            metrics.reload(what, true);
            tracing::info!(what, "reloaded");
        }
        Err(e) => {
            metrics.reload(what, false);
            tracing::error!(what, error = %format!("{e:#}"), "reload failed; the last good version keeps serving");
        }
    }
}

/// Starts watching. The returned watcher must be kept alive for as long as reloads are wanted.
pub fn watch(targets: Vec<Target>, metrics: Arc<Metrics>) -> Result<notify::RecommendedWatcher> {
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<PathBuf>();
    let mut watcher =
        notify::recommended_watcher(move |event: notify::Result<notify::Event>| match event {
            // Reading the files (as a reload does) raises access events: only changes count.
            Ok(event)
                if matches!(
                    event.kind,
                    EventKind::Create(_) | EventKind::Modify(_) | EventKind::Remove(_)
                ) =>
            {
                for path in event.paths {
                    let _ = tx.send(path);
                }
            }
            Ok(_) => {}
            Err(e) => tracing::warn!(error = %e, "file watch error"),
        })
        .context("starting the file watcher")?;
    let mut watched: Vec<PathBuf> = Vec::new();
    for dir in targets.iter().flat_map(|t| t.dirs.iter()) {
        if !watched.contains(dir) {
            watcher
                .watch(dir, RecursiveMode::NonRecursive)
                .with_context(|| format!("watching {}", dir.display()))?;
            watched.push(dir.clone());
        }
    }
    let targets = Arc::new(targets);
    tokio::spawn(async move {
        while let Some(first) = rx.recv().await {
            tokio::time::sleep(DEBOUNCE).await;
            let mut changed = vec![first];
            while let Ok(path) = rx.try_recv() {
                changed.push(path);
            }
            for (i, target) in targets.iter().enumerate() {
                let touched = changed.iter().any(|p| {
                    target
                        .dirs
                        .iter()
                        .any(|d| p == d || p.parent() == Some(d.as_path()))
                });
                if !touched {
                    continue;
                }
                // Reading files and compiling Rego block: on the blocking pool, not a worker
                // that serves requests. One reload at a time, in order.
                let all = targets.clone();
                let done = tokio::task::spawn_blocking(move || (all[i].reload)()).await;
                let done = done.unwrap_or_else(|e| Err(anyhow::anyhow!("the reload stopped: {e}")));
                record(target.what, done, &metrics);
            }
        }
    });
    Ok(watcher)
}
