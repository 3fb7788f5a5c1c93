//! What the request handlers share: the rules (replaced whole on reload), where namespace
//! labels and pools come from, metrics, the deadline and the limits.

use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use poolguard_core::ruleset::RuleSet;

use super::limits::{Gates, Limits};
use crate::namespaces::Namespaces;
use crate::pools::Pools;
use crate::telemetry::metrics::Metrics;
use crate::telemetry::rollout_counts::RolloutCounts;

/// What the request handlers share.
pub struct ServerState {
    /// Replaced whole on a config or policy reload.
    pub rules: Arc<ArcSwap<RuleSet>>,
    pub namespaces: Namespaces,
    /// The pools placement policies choose among (unknown until set).
    pub pools: Pools,
    pub metrics: Arc<Metrics>,
    /// Per-request deadline; past it, `evaluation.onError` decides.
    pub deadline: Duration,
    /// The limits and their counters.
    pub gates: Gates,
    /// What admission counted for policies under a rollout.
    pub rollout_counts: Arc<RolloutCounts>,
}

impl ServerState {
    pub fn new(
        rules: RuleSet,
        namespaces: Namespaces,
        metrics: Arc<Metrics>,
        deadline: Duration,
        limits: Limits,
    ) -> ServerState {
        let clamp = |n: usize| i64::try_from(n).unwrap_or(i64::MAX);
        // As many as the gates allow (at least one slot).
        metrics
            .evaluation_slots
            .set(clamp(limits.max_evaluations.max(1)));
        metrics
            .evaluation_queue_capacity
            .set(clamp(limits.max_queued_evaluations));
        ServerState {
            rules: Arc::new(ArcSwap::from_pointee(rules)),
            namespaces,
            pools: Pools::unknown(),
            metrics,
            deadline,
            gates: Gates::new(limits),
            rollout_counts: Arc::default(),
        }
    }
}
