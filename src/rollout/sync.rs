//! Every replica: watches the rollout ConfigMap and decides with what it holds (the states,
//! and the stored versions compiled once each), and publishes its admission counts into the
//! counts ConfigMap beside it (`Location::counts`).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use arc_swap::ArcSwap;
use futures::StreamExt;
use kube::runtime::{watcher, WatchStreamExt};
use kube::Client;
use tokio_util::sync::CancellationToken;

use super::store::{self, Contents, CountsDoc, Location, COUNTS, CURRENT, PREVIOUS};
use crate::telemetry::rollout_counts::{RolloutCounts, PUBLISH_EVERY};
use crate::wall_clock::unix_now;
use poolguard_core::rollout::view::{CompiledVersion, PolicyRollout, RolloutView, StoredVersion};
use poolguard_core::ruleset::RuleSet;

/// A serving replica that does not audit (the audit runs in `poolguard controller`): the rollout
/// state it decides with, and its name in the admission counts it adds.
#[derive(Debug, Clone)]
pub struct Follow {
    pub at: Location,
    pub identity: String,
}

/// Compiled stored versions, by policy and version: those the last contents named.
#[derive(Default)]
struct Compiled {
    by_version: HashMap<(String, String), Option<CompiledVersion>>,
}

impl Compiled {
    /// The compiled `stored` version of `policy`, noted in `named`.
    fn get(
        &mut self,
        policy: &str,
        stored: Option<StoredVersion>,
        named: &mut HashSet<(String, String)>,
    ) -> Option<CompiledVersion> {
        let stored = stored?;
        let key = (policy.to_string(), stored.version.clone());
        named.insert(key.clone());
        self.by_version
            .entry(key)
            .or_insert_with(|| match stored.compile(policy) {
                Ok(c) => Some(c),
                Err(e) => {
                    tracing::error!(policy, version = %stored.version, error = %format!("{e:#}"), "a stored policy version does not compile; its groups only observe");
                    None
                }
            })
            .clone()
    }
}

/// The view the ConfigMap's contents give.
fn view(contents: &Contents, compiled: &mut Compiled) -> RolloutView {
    let mut view = RolloutView::default();
    let mut named = HashSet::new();
    for policy in contents.policies() {
        let Some(state) = contents.state(&policy) else {
            continue;
        };
        let current = compiled.get(&policy, contents.stored(CURRENT, &policy), &mut named);
        let previous = compiled.get(&policy, contents.stored(PREVIOUS, &policy), &mut named);
        view.policies.insert(
            policy,
            PolicyRollout {
                state,
                current,
                previous,
            },
        );
    }
    // Versions no longer named (rolled past) are not kept compiled.
    compiled.by_version.retain(|key, _| named.contains(key));
    view
}

/// Installs `view` into the rules decisions use (the rules themselves may be reloaded from
/// files meanwhile: the swap keeps whichever is newer of each).
pub fn install(rules: &ArcSwap<RuleSet>, view: Arc<RolloutView>) {
    rules.rcu(|rules| (**rules).clone().with_rollouts(view.clone()));
}

/// Watches the ConfigMap until `shutdown`, handing each new rollout view to `on_view` (the
/// server installs it into its rules).
pub async fn watch(
    client: Client,
    at: Location,
    on_view: impl Fn(Arc<RolloutView>) + Send + 'static,
    shutdown: CancellationToken,
) {
    let api = store::api(&client, &at);
    let config = watcher::Config::default().fields(&format!("metadata.name={}", at.name));
    let stream = watcher::watcher(api, config)
        .default_backoff()
        .applied_objects();
    let mut stream = std::pin::pin!(stream);
    let mut compiled = Compiled::default();
    loop {
        let next = tokio::select! {
            () = shutdown.cancelled() => return,
            next = stream.next() => next,
        };
        match next {
            Some(Ok(cm)) => {
                let contents = Contents::from_configmap(&cm);
                let view = view(&contents, &mut compiled);
                tracing::debug!(policies = view.policies.len(), "rollout state updated");
                on_view(Arc::new(view));
            }
            Some(Err(e)) => {
                tracing::warn!(error = %e, configmap = %store::describe(&at), "watching the rollout state failed; deciding with the last state seen, retrying")
            }
            None => return,
        }
    }
}

/// Publishes this replica's counts every few seconds when they changed, until `shutdown`.
pub async fn publish(
    client: Client,
    at: Location,
    identity: String,
    counts: Arc<RolloutCounts>,
    shutdown: CancellationToken,
) {
    let key = format!("{COUNTS}{}", sanitize(&identity));
    loop {
        tokio::select! {
            () = shutdown.cancelled() => return,
            () = tokio::time::sleep(PUBLISH_EVERY) => {}
        }
        let now = unix_now();
        let Some(policies) = counts.snapshot(now) else {
            continue;
        };
        let doc = CountsDoc { at: now, policies };
        let text = match serde_json::to_string(&doc) {
            Ok(t) => t,
            Err(_) => continue,
        };
        if let Err(e) = store::merge_key(&client, &at.counts(), &key, &text).await {
            tracing::warn!(error = %format!("{e:#}"), "publishing rollout counts failed; retrying");
            // Handed out but not written: make the next snapshot differ.
            counts.forget_published();
        }
    }
}

/// A ConfigMap key from a replica identity (keys allow `[-._a-zA-Z0-9]`).
fn sanitize(identity: &str) -> String {
    identity
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "-._".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect()
}
