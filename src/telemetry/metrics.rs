//! The Prometheus metrics poolguard publishes on the operations port.

use prometheus_client::encoding::{EncodeLabelSet, EncodeMetric, MetricEncoder};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
use std::sync::atomic::AtomicU64;

use poolguard_core::audit_tally::Tally;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabels {
    pub webhook: &'static str,
    pub operation: &'static str,
    /// One of [`KINDS`], or `other`: never the request's own text.
    pub kind: &'static str,
    /// allowed | patched | denied | warned | invalid | too_large | body_timeout | overloaded
    pub decision: &'static str,
}

/// The kinds poolguard knows, as (API group, kind): the `kind` label takes only these values,
/// `other` or the empty string (no readable request), so a client cannot grow the label set.
pub const KINDS: [(&str, &str); 9] = [
    ("", "Pod"),
    ("", "ReplicationController"),
    ("", "Namespace"),
    ("apps", "Deployment"),
    ("apps", "ReplicaSet"),
    ("apps", "StatefulSet"),
    ("apps", "DaemonSet"),
    ("batch", "Job"),
    ("batch", "CronJob"),
];

/// The `kind` label for a request's group and kind.
pub fn kind_label(group: &str, kind: &str) -> &'static str {
    KINDS
        .iter()
        .find(|(g, k)| *g == group && *k == kind)
        .map_or("other", |(_, k)| k)
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct WebhookLabels {
    pub webhook: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PolicyLabels {
    pub policy: String,
    pub enforcement: &'static str,
    /// pass | infringement | error | pending (a dependency unmet: not evaluated)
    pub result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct InfringementLabels {
    pub policy: String,
    pub enforcement: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReloadLabels {
    /// tls | rules (config and policies, loaded together)
    pub what: String,
    /// success | failure
    pub result: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct AuditResultLabels {
    /// A policy's name, or `placement`.
    pub policy: String,
    /// pass | fail | warn | error | skip
    pub result: String,
}

/// One PolicyException: `namespace/name` (not `namespace`, which scrapes set to the target's
/// own) and its ticket.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ExceptionLabels {
    pub exception: String,
    pub ticket: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindLabels {
    pub kind: String,
}

/// Which memo of remembered results: `sit` (the policies) or `placement`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct MemoLabels {
    pub policies: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StateLabels {
    /// registered | left_out
    pub state: &'static str,
}

/// The native fallback (`--native-fallback`), as the registration leaves it after each pass.
#[derive(Clone, Default)]
pub struct FallbackMetrics {
    /// On the leader, 1 for the state the pod and workload webhooks are in (`registered`, or
    /// `left_out` to the native objects) and 0 for the other; 0 for both on other replicas.
    pub webhooks: Family<StateLabels, Gauge>,
    /// Canary passes that did not show the API server enforcing the native objects.
    pub canary_failures: Counter,
}

impl FallbackMetrics {
    /// Records the state of the pod and workload webhooks: `Some(true)` registered,
    /// `Some(false)` left out, `None` not leading.
    pub fn set_state(&self, registered: Option<bool>) {
        for (state, on) in [
            ("registered", registered == Some(true)),
            ("left_out", registered == Some(false)),
        ] {
            self.webhooks
                .get_or_create(&StateLabels { state })
                .set(i64::from(on));
        }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OutcomeLabels {
    /// success | failure
    pub result: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct UnfinishedLabels {
    pub webhook: String,
    /// deadline (no slot, or the evaluation not done, by the request deadline) | queue_full
    pub reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RolloutGroupLabels {
    pub policy: String,
    pub group: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RolloutStatusLabels {
    pub policy: String,
    pub group: String,
    /// ToApply | Progressing | Succeeded | Failed | TimeOut
    pub status: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RolloutTransitionLabels {
    pub policy: String,
    /// The status or event transitioned to.
    pub to: String,
}

/// A family of labelled metrics that the scrape declares (`# HELP`, `# TYPE`) before its first
/// sample too, so that Prometheus, its rules and dashboards know every metric poolguard exports
/// from the first scrape on (`prometheus_client` leaves an empty family out).
#[derive(Debug)]
struct Declared<M>(M);

impl<M: EncodeMetric> EncodeMetric for Declared<M> {
    fn encode(&self, encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        self.0.encode(encoder)
    }

    fn metric_type(&self) -> prometheus_client::metrics::MetricType {
        self.0.metric_type()
    }
}

/// Every metric, registered once.
pub struct Metrics {
    registry: Registry,
    pub requests: Family<RequestLabels, Counter>,
    pub latency: Family<WebhookLabels, Histogram>,
    /// The same time, split by phase (`super::phase_times`).
    pub phases: super::phase_times::PhaseTimes,
    pub policy_evaluations: Family<PolicyLabels, Counter>,
    pub infringements: Family<InfringementLabels, Counter>,
    pub reloads: Family<ReloadLabels, Counter>,
    pub namespace_cache_size: Gauge,
    pub evaluations_running: Gauge,
    pub evaluations_waiting: Gauge,
    /// Evaluation slots (`--max-evaluations`), set once at start.
    pub evaluation_slots: Gauge,
    /// Waiting places for a slot (`--max-queued-evaluations`), set once at start.
    pub evaluation_queue_capacity: Gauge,
    pub evaluations_unfinished: Family<UnfinishedLabels, Counter>,
    /// The serving certificate's notAfter (Unix time), set whenever one is loaded.
    pub certificate_expiry: Gauge,
    /// 1 while /readyz answers 200, else 0 (set at each scrape).
    pub ready: Gauge,
    pub body_bytes_reserved: Gauge,
    pub connections: Gauge,
    pub connections_evicted: Counter,
    /// Webhooks found in poolguard's webhook configurations that poolguard did not write, removed
    /// by the registration.
    pub foreign_webhooks_removed: Counter,
    pub fallback: FallbackMetrics,
    pub audit_results: Family<AuditResultLabels, Gauge>,
    pub audit_objects: Family<KindLabels, Gauge>,
    /// Remembered results since the rules were last loaded (a reload starts empty memos).
    pub memo_hits: Family<MemoLabels, Gauge>,
    pub memo_misses: Family<MemoLabels, Gauge>,
    pub memo_bytes: Family<MemoLabels, Gauge>,
    pub audit_runs: Family<OutcomeLabels, Counter>,
    pub audit_duration_seconds: Gauge<f64, AtomicU64>,
    pub audit_last_success: Gauge,
    pub audit_leader: Gauge,
    /// `--audit-interval` in seconds, set when the audit starts (0 while it is off).
    pub audit_interval_seconds: Gauge,
    /// What each memo may hold (`evaluation.resultCacheMiB`), set at each scrape.
    pub memo_capacity_bytes: Family<MemoLabels, Gauge>,
    pub rollout_status: Family<RolloutStatusLabels, Gauge>,
    pub rollout_failures: Family<RolloutGroupLabels, Gauge>,
    pub rollout_transitions: Family<RolloutTransitionLabels, Counter>,
    /// Seconds until each PolicyException that counts expires ([`Metrics::exceptions`]).
    pub exception_expiry: Family<ExceptionLabels, Gauge>,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

impl Metrics {
    pub fn new() -> Metrics {
        let mut registry = Registry::with_prefix("poolguard");
        let requests = Family::<RequestLabels, Counter>::default();
        registry.register(
            "admission_requests",
            "Admission requests answered, by webhook, operation, kind and decision",
            Declared(requests.clone()),
        );
        let latency = Family::<WebhookLabels, Histogram>::new_with_constructor(|| {
            // 50 µs .. ~3.3 s
            Histogram::new(prometheus_client::metrics::histogram::exponential_buckets(
                0.00005, 2.0, 17,
            ))
        });
        registry.register(
            "admission_request_duration_seconds",
            "Time from request body received to response ready",
            Declared(latency.clone()),
        );
        let phases = super::phase_times::PhaseTimes::new();
        registry.register(
            "admission_phase_duration_seconds",
            "Time of each phase of an admission request (read, wait, parse, lookup, evaluate, respond), by webhook",
            Declared(phases.family()),
        );
        let policy_evaluations = Family::<PolicyLabels, Counter>::default();
        registry.register(
            "policy_evaluations",
            "Policy evaluations by policy, enforcement action and result",
            Declared(policy_evaluations.clone()),
        );
        let infringements = Family::<InfringementLabels, Counter>::default();
        registry.register(
            "policy_infringements",
            "Infringement messages by policy and enforcement action",
            Declared(infringements.clone()),
        );
        let reloads = Family::<ReloadLabels, Counter>::default();
        registry.register(
            "reloads",
            "Reloads of TLS files, config and policies, by result",
            Declared(reloads.clone()),
        );
        let namespace_cache_size = Gauge::default();
        registry.register(
            "namespace_cache_size",
            "Namespaces known to the namespace cache",
            namespace_cache_size.clone(),
        );
        let gauge = |registry: &mut Registry, name: &str, help: &str| {
            let gauge = Gauge::default();
            registry.register(name, help, gauge.clone());
            gauge
        };
        let evaluations_running = gauge(
            &mut registry,
            "evaluations_running",
            "Policy evaluations holding a slot (their work has not stopped yet)",
        );
        let evaluations_waiting = gauge(
            &mut registry,
            "evaluations_waiting",
            "Validating requests waiting for an evaluation slot",
        );
        let evaluation_slots = gauge(
            &mut registry,
            "evaluation_slots",
            "Policy evaluations that may run at once (--max-evaluations)",
        );
        let evaluation_queue_capacity = gauge(
            &mut registry,
            "evaluation_queue_capacity",
            "Validating requests that may wait for an evaluation slot (--max-queued-evaluations)",
        );
        let evaluations_unfinished = Family::<UnfinishedLabels, Counter>::default();
        registry.register(
            "evaluations_unfinished",
            "Requests whose policies were not evaluated in time (no slot by the deadline, the evaluation not done by it, or the queue full): evaluation.onError decided",
            Declared(evaluations_unfinished.clone()),
        );
        let certificate_expiry = gauge(
            &mut registry,
            "tls_certificate_expiry_timestamp_seconds",
            "When the serving certificate in use expires (its notAfter, Unix time)",
        );
        let ready = gauge(
            &mut registry,
            "ready",
            "1 while this replica is ready (/readyz answers 200), else 0",
        );
        let body_bytes_reserved = gauge(
            &mut registry,
            "request_body_bytes_reserved",
            "Bytes of the request body budget held by requests in flight",
        );
        let connections = gauge(
            &mut registry,
            "connections",
            "Open HTTPS connections, TLS handshakes included",
        );
        let connections_evicted = Counter::default();
        registry.register(
            "connections_evicted",
            "Idle connections closed at the connection cap to make room for a new one",
            connections_evicted.clone(),
        );
        let foreign_webhooks_removed = Counter::default();
        registry.register(
            "foreign_webhooks_removed",
            "Webhooks found in poolguard's webhook configurations that poolguard did not write, removed by its registration",
            foreign_webhooks_removed.clone(),
        );
        let fallback = FallbackMetrics::default();
        registry.register(
            "native_fallback_webhooks",
            "With --native-fallback, on the leader: 1 for the state of the pod and workload webhooks (registered, or left_out to the native admission objects)",
            fallback.webhooks.clone(),
        );
        registry.register(
            "native_canary_failures",
            "With --native-fallback: canary passes whose dry-run pods did not show the API server enforcing the native admission objects (the pod and workload webhooks are then registered)",
            fallback.canary_failures.clone(),
        );
        let audit_results = Family::<AuditResultLabels, Gauge>::default();
        registry.register(
            "audit_results",
            "Results of the last audit pass, by policy (or placement) and result",
            Declared(audit_results.clone()),
        );
        let audit_objects = Family::<KindLabels, Gauge>::default();
        registry.register(
            "audit_objects",
            "Objects the last audit pass listed, by kind",
            Declared(audit_objects.clone()),
        );
        let memo_family = |registry: &mut Registry, name: &str, help: &str| {
            let family = Family::<MemoLabels, Gauge>::default();
            registry.register(name, help, Declared(family.clone()));
            family
        };
        let memo_hits = memo_family(
            &mut registry,
            "result_memo_hits",
            "Policy evaluations answered from remembered results since the rules were last loaded",
        );
        let memo_misses = memo_family(
            &mut registry,
            "result_memo_misses",
            "Policy evaluations that could be remembered but were not found, since the rules were last loaded",
        );
        let memo_bytes = memo_family(
            &mut registry,
            "result_memo_bytes",
            "Bytes held by remembered results (as counted against evaluation.resultCacheMiB)",
        );
        let memo_capacity_bytes = memo_family(
            &mut registry,
            "result_memo_capacity_bytes",
            "Bytes each memo may hold (evaluation.resultCacheMiB)",
        );
        let audit_runs = Family::<OutcomeLabels, Counter>::default();
        registry.register(
            "audit_runs",
            "Audit passes by this replica, by result",
            Declared(audit_runs.clone()),
        );
        let audit_duration_seconds = Gauge::<f64, AtomicU64>::default();
        registry.register(
            "audit_duration_seconds",
            "Time the last successful audit pass took, listing and report writing included",
            audit_duration_seconds.clone(),
        );
        let audit_last_success = gauge(
            &mut registry,
            "audit_last_success_timestamp_seconds",
            "When the last successful audit pass by this replica ended (Unix time)",
        );
        let audit_leader = gauge(
            &mut registry,
            "audit_leader",
            "1 while this replica holds the audit lease, else 0",
        );
        let audit_interval_seconds = gauge(
            &mut registry,
            "audit_interval_seconds",
            "Time between two audit passes (--audit-interval); 0 while the audit is off",
        );
        let exception_expiry = Family::<ExceptionLabels, Gauge>::default();
        registry.register(
            "policy_exception_expiry_seconds",
            "Seconds until each PolicyException that counts expires (refreshed every 30 s; an expired one matches nothing and leaves the series)",
            Declared(exception_expiry.clone()),
        );
        let rollout_status = Family::<RolloutStatusLabels, Gauge>::default();
        registry.register(
            "rollout_group_status",
            "1 for each rollout group's current status (as last written by this replica as leader)",
            Declared(rollout_status.clone()),
        );
        let rollout_failures = Family::<RolloutGroupLabels, Gauge>::default();
        registry.register(
            "rollout_group_failures",
            "Failures (violations plus would-be denials) of each rollout group at its last step",
            Declared(rollout_failures.clone()),
        );
        let rollout_transitions = Family::<RolloutTransitionLabels, Counter>::default();
        registry.register(
            "rollout_transitions",
            "Rollout transitions made by this replica as leader, by policy and new status or event",
            Declared(rollout_transitions.clone()),
        );
        Metrics {
            registry,
            rollout_status,
            rollout_failures,
            rollout_transitions,
            exception_expiry,
            audit_results,
            audit_objects,
            memo_hits,
            memo_misses,
            memo_bytes,
            audit_runs,
            audit_duration_seconds,
            audit_last_success,
            audit_leader,
            audit_interval_seconds,
            memo_capacity_bytes,
            requests,
            latency,
            phases,
            policy_evaluations,
            infringements,
            reloads,
            namespace_cache_size,
            evaluations_running,
            evaluations_waiting,
            evaluation_slots,
            evaluation_queue_capacity,
            evaluations_unfinished,
            certificate_expiry,
            ready,
            body_bytes_reserved,
            connections,
            connections_evicted,
            foreign_webhooks_removed,
            fallback,
        }
    }

    /// Counts one reload attempt.
    pub fn reload(&self, what: &str, ok: bool) {
        let result = if ok { "success" } else { "failure" };
        self.reloads
            .get_or_create(&ReloadLabels {
                what: what.to_string(),
                result: result.to_string(),
            })
            .inc();
    }

    /// Counts one request whose policies were not evaluated in time.
    pub fn unfinished(&self, webhook: &str, reason: &str) {
        self.evaluations_unfinished
            .get_or_create(&UnfinishedLabels {
                webhook: webhook.to_string(),
                reason: reason.to_string(),
            })
            .inc();
    }

    /// Records a finished audit pass: its results and objects replace the last pass's.
    pub fn audit_pass(
        &self,
        tally: &Tally,
        objects: &[(String, usize)],
        seconds: f64,
        finished_unix: i64,
    ) {
        self.audit_results.clear();
        for ((policy, result), count) in &tally.by_policy {
            self.audit_results
                .get_or_create(&AuditResultLabels {
                    policy: policy.clone(),
                    result: result.to_string(),
                })
                .set(i64::try_from(*count).unwrap_or(i64::MAX));
        }
        self.audit_objects.clear();
        for (kind, count) in objects {
            self.audit_objects
                .get_or_create(&KindLabels {
                    kind: kind.to_string(),
                })
                .set(i64::try_from(*count).unwrap_or(i64::MAX));
        }
        self.audit_duration_seconds.set(seconds);
        self.audit_last_success.set(finished_unix);
        self.audit_run(true);
    }

    /// Counts one audit pass.
    pub fn audit_run(&self, ok: bool) {
        let result = if ok { "success" } else { "failure" };
        self.audit_runs
            .get_or_create(&OutcomeLabels {
                result: result.to_string(),
            })
            .inc();
    }

    /// Counts one rollout transition.
    pub fn rollout_transition(&self, policy: &str, to: &str) {
        self.rollout_transitions
            .get_or_create(&RolloutTransitionLabels {
                policy: policy.to_string(),
                to: to.to_string(),
            })
            .inc();
    }

    /// Shows the rollout states just written.
    pub fn rollout_states(&self, states: &[(String, poolguard_core::rollout::RolloutState)]) {
        self.rollout_status.clear();
        self.rollout_failures.clear();
        for (policy, state) in states {
            for g in &state.groups {
                self.rollout_status
                    .get_or_create(&RolloutStatusLabels {
                        policy: policy.clone(),
                        group: g.name.clone(),
                        status: format!("{:?}", g.status),
                    })
                    .set(1);
                self.rollout_failures
                    .get_or_create(&RolloutGroupLabels {
                        policy: policy.clone(),
                        group: g.name.clone(),
                    })
                    .set(i64::try_from(g.failures).unwrap_or(i64::MAX));
            }
        }
    }

    /// The PolicyExceptions that count now, each with the seconds left until it expires (the
    /// series of those that no longer count are removed).
    pub fn exceptions(&self, exceptions: &poolguard_core::exceptions::ExceptionSet, now: i64) {
        self.exception_expiry.clear();
        for e in exceptions.iter().filter(|e| e.live(now)) {
            self.exception_expiry
                .get_or_create(&ExceptionLabels {
                    exception: format!("{}/{}", e.namespace, e.name),
                    ticket: e.ticket.clone(),
                })
                .set(e.expires - now);
        }
    }

    /// The text exposition format.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry)
            .expect("writing to a String cannot fail");
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_show_in_the_text_format() {
        let m = Metrics::new();
        m.reload("policies", false);
        m.requests
            .get_or_create(&RequestLabels {
                webhook: "mutate",
                operation: "CREATE",
                kind: "Pod",
                decision: "patched",
            })
            .inc();
        m.namespace_cache_size.set(3);
        let text = m.encode();
        assert!(
            text.contains(r#"poolguard_reloads_total{what="policies",result="failure"} 1"#),
            "{text}"
        );
        assert!(text.contains(r#"poolguard_admission_requests_total{webhook="mutate",operation="CREATE",kind="Pod",decision="patched"} 1"#), "{text}");
        assert!(text.contains("poolguard_namespace_cache_size 3"), "{text}");
    }

    #[test]
    fn unevaluated_requests_and_capacities_show_in_the_text_format() {
        let m = Metrics::new();
        // Declared before anything is counted: the alerting rules and the dashboard read them.
        let text = m.encode();
        for family in [
            "# TYPE poolguard_evaluations_unfinished counter",
            "# TYPE poolguard_evaluation_slots gauge",
            "# TYPE poolguard_evaluation_queue_capacity gauge",
            "# TYPE poolguard_tls_certificate_expiry_timestamp_seconds gauge",
            "# TYPE poolguard_ready gauge",
            "# TYPE poolguard_audit_interval_seconds gauge",
            "# TYPE poolguard_result_memo_capacity_bytes gauge",
            "# TYPE poolguard_policy_exception_expiry_seconds gauge",
        ] {
            assert!(text.contains(family), "{family} missing from:\n{text}");
        }
        m.unfinished("validate", "deadline");
        m.unfinished("validate", "deadline");
        m.unfinished("validate", "queue_full");
        let text = m.encode();
        assert!(
            text.contains(
                r#"poolguard_evaluations_unfinished_total{webhook="validate",reason="deadline"} 2"#
            ),
            "{text}"
        );
        assert!(
            text.contains(
                r#"poolguard_evaluations_unfinished_total{webhook="validate",reason="queue_full"} 1"#
            ),
            "{text}"
        );
    }

    #[test]
    fn an_audit_pass_replaces_the_last_ones_results() {
        use poolguard_core::audit::{AuditResult, Resource, Severity, Verdict};
        use poolguard_core::audit_tally::Tally;
        let result = |policy: &str, verdict| AuditResult {
            resource: Resource::default(),
            policy: policy.to_string(),
            rule: "infringement".to_string(),
            result: verdict,
            message: String::new(),
            severity: Severity::High,
            properties: Default::default(),
        };
        let m = Metrics::new();
        let first = [
            result("placement", Verdict::Fail),
            result("placement", Verdict::Fail),
            result("repos", Verdict::Pass),
        ];
        m.audit_pass(
            &Tally::of(&first),
            &[("Pod".to_string(), 2)],
            1.5,
            1_700_000_000,
        );
        let text = m.encode();
        assert!(
            text.contains(r#"poolguard_audit_results{policy="placement",result="fail"} 2"#),
            "{text}"
        );
        assert!(
            text.contains(r#"poolguard_audit_objects{kind="Pod"} 2"#),
            "{text}"
        );
        assert!(
            text.contains("poolguard_audit_last_success_timestamp_seconds 1700000000"),
            "{text}"
        );
        m.audit_pass(
            &Tally::of(&[result("repos", Verdict::Pass)]),
            &[("Pod".to_string(), 1)],
            0.5,
            1_700_000_600,
        );
        m.audit_run(false);
        let text = m.encode();
        assert!(
            !text.contains(r#"result="fail"} "#),
            "the last pass had no failure: {text}"
        );
        assert!(
            text.contains(r#"poolguard_audit_results{policy="repos",result="pass"} 1"#),
            "{text}"
        );
        assert!(
            text.contains(r#"poolguard_audit_runs_total{result="success"} 2"#),
            "{text}"
        );
        assert!(
            text.contains(r#"poolguard_audit_runs_total{result="failure"} 1"#),
            "{text}"
        );
    }

    #[test]
    fn kind_labels_come_from_a_closed_set() {
        assert_eq!(kind_label("apps", "Deployment"), "Deployment");
        assert_eq!(kind_label("", "Pod"), "Pod");
        assert_eq!(kind_label("batch", "CronJob"), "CronJob");
        assert_eq!(kind_label("example.com", "Deployment"), "other");
        assert_eq!(kind_label("", &"K".repeat(100_000)), "other");
    }
}
