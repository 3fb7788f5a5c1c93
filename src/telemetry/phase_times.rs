//! Where an admission request's time goes, step by step: a histogram per webhook and phase
//! (`poolguard_admission_phase_duration_seconds`), so that poolguard's own handling can be told
//! apart from what the API server adds around it. The series are made once at start, so timing
//! a request takes no label lookup and no allocation.

use std::time::Instant;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};

use poolguard_core::webhook::Webhook;

/// The steps of one request, in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// The body, from the request head to its last byte.
    Read,
    /// Waiting for an evaluation slot (requests that run policies).
    Wait,
    /// The review parsed and its request read.
    Parse,
    /// The namespace's labels looked up (the watch cache; a GET on a miss).
    Lookup,
    /// The decision (in place, or on the blocking pool with the hand-off counted, when policies
    /// run).
    Evaluate,
    /// Metrics, log lines and the response written out.
    Respond,
}

impl Phase {
    pub const ALL: [Phase; 6] = [
        Phase::Read,
        Phase::Wait,
        Phase::Parse,
        Phase::Lookup,
        Phase::Evaluate,
        Phase::Respond,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Read => "read",
            Phase::Wait => "wait",
            Phase::Parse => "parse",
            Phase::Lookup => "lookup",
            Phase::Evaluate => "evaluate",
            Phase::Respond => "respond",
        }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PhaseLabels {
    pub webhook: String,
    pub phase: String,
}

const WEBHOOKS: [Webhook; 2] = [Webhook::Mutate, Webhook::Validate];

/// The histograms, registered under one family, with a handle to each series.
pub struct PhaseTimes {
    family: Family<PhaseLabels, Histogram>,
    series: [[Histogram; Phase::ALL.len()]; WEBHOOKS.len()],
}

impl PhaseTimes {
    pub fn new() -> PhaseTimes {
        // 5 µs .. ~2.6 s
        let family = Family::<PhaseLabels, Histogram>::new_with_constructor(|| {
            Histogram::new(exponential_buckets(0.000005, 2.0, 20))
        });
        let series = WEBHOOKS.map(|webhook| {
            Phase::ALL.map(|phase| {
                family
                    .get_or_create(&PhaseLabels {
                        webhook: webhook.as_str().to_string(),
                        phase: phase.as_str().to_string(),
                    })
                    .clone()
            })
        });
        PhaseTimes { family, series }
    }

    /// The family, for the registry.
    pub fn family(&self) -> Family<PhaseLabels, Histogram> {
        self.family.clone()
    }

    pub fn observe(&self, webhook: Webhook, phase: Phase, seconds: f64) {
        let w = match webhook {
            Webhook::Mutate => 0,
            Webhook::Validate => 1,
        };
        self.series[w][phase as usize].observe(seconds);
    }
}

impl Default for PhaseTimes {
    fn default() -> Self {
        PhaseTimes::new()
    }
}

/// Times one request's phases: each [`PhaseClock::lap`] records the time since the previous one
/// (or the start) under its phase.
pub struct PhaseClock<'a> {
    times: &'a PhaseTimes,
    webhook: Webhook,
    last: Instant,
}

impl<'a> PhaseClock<'a> {
    pub fn start(times: &'a PhaseTimes, webhook: Webhook) -> PhaseClock<'a> {
        PhaseClock {
            times,
            webhook,
            last: Instant::now(),
        }
    }

    pub fn lap(&mut self, phase: Phase) {
        let now = Instant::now();
        let seconds = now.duration_since(self.last).as_secs_f64();
        self.times.observe(self.webhook, phase, seconds);
        self.last = now;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus_client::encoding::text::encode;
    use prometheus_client::registry::Registry;

    #[test]
    fn each_lap_lands_in_its_own_series_and_every_series_exists_from_the_start() {
        let times = PhaseTimes::new();
        let mut registry = Registry::default();
        registry.register("phase", "test", times.family());
        let mut clock = PhaseClock::start(&times, Webhook::Validate);
        clock.lap(Phase::Read);
        clock.lap(Phase::Evaluate);
        clock.lap(Phase::Evaluate);
        let mut text = String::new();
        encode(&mut text, &registry).unwrap();
        let count = |webhook: &str, phase: &str| {
            let prefix = format!("phase_count{{webhook=\"{webhook}\",phase=\"{phase}\"}} ");
            text.lines()
                .find_map(|l| l.strip_prefix(prefix.as_str()))
                .unwrap_or_else(|| panic!("no series {webhook}/{phase}:\n{text}"))
                .to_string()
        };
        assert_eq!(count("validate", "read"), "1");
        assert_eq!(count("validate", "evaluate"), "2");
        assert_eq!(count("validate", "parse"), "0");
        assert_eq!(count("mutate", "respond"), "0");
        for phase in Phase::ALL {
            assert_eq!(Phase::ALL[phase as usize], phase);
        }
    }
}
