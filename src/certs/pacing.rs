//! When the certificate loop takes its next step (pure).
//!
//! - A step with nothing more to do waits for the check interval.
//! - A step that asks to run again (it wrote something, or lost a race and must read again)
//!   waits the minimum interval: no two steps are ever closer than that. More such steps in a row
//!   than any rotation needs means something keeps undoing our writes (another writer, a fight
//!   over the caBundle), and they back off like failures.
//! - A failed step backs off exponentially: 2 s, doubling, up to the check interval but never
//!   more than 5 minutes.
//!
//! Only a step with nothing more to do ends a backoff: a failure after a few "again" steps keeps
//! doubling from where it was.

use std::time::Duration;

/// No two steps closer than this.
pub const MIN_INTERVAL: Duration = Duration::from_secs(1);
/// The first wait after a failure.
pub const FIRST_BACKOFF: Duration = Duration::from_secs(2);
/// The longest wait after failures, whatever the check interval.
pub const MAX_BACKOFF: Duration = Duration::from_secs(5 * 60);
/// "Again" steps in a row at the minimum interval. A CA rotation needs three (store the CA,
/// publish, record the publication), a fresh start two; the rest is room for lost races.
pub const AGAIN_BUDGET: u32 = 8;

/// How a step ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Nothing more to do until the next check.
    Settled,
    /// Another step is due now.
    Again,
    /// The step failed.
    Failed,
}

/// What the loop carries from one step to the next.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Pace {
    /// How long to wait before the next step.
    pub wait: Duration,
    /// The current backoff (zero: not backing off).
    backoff: Duration,
    /// "Again" steps since the last settled one.
    agains: u32,
}

impl Pace {
    /// Backing off (after failures, or after too many "again" steps in a row).
    pub fn backing_off(&self) -> bool {
        !self.backoff.is_zero()
    }
}

/// The intervals; see the module documentation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pacing {
    pub check_interval: Duration,
    pub min_interval: Duration,
    pub first_backoff: Duration,
    pub max_backoff: Duration,
    pub again_budget: u32,
}

impl Pacing {
    /// The standard intervals around `check_interval`.
    pub fn new(check_interval: Duration) -> Pacing {
        Pacing {
            check_interval,
            min_interval: MIN_INTERVAL,
            first_backoff: FIRST_BACKOFF,
            max_backoff: MAX_BACKOFF,
            again_budget: AGAIN_BUDGET,
        }
    }

    /// The state after a step that ended with `outcome`; its `wait` is the delay before the next.
    pub fn next(&self, outcome: Outcome, pace: Pace) -> Pace {
        match outcome {
            Outcome::Settled => Pace {
                wait: self.check_interval.max(self.min_interval),
                ..Pace::default()
            },
            Outcome::Again if pace.agains < self.again_budget => Pace {
                wait: self.min_interval,
                agains: pace.agains + 1,
                ..pace
            },
            Outcome::Again => {
                let backoff = self.grow(pace.backoff);
                Pace {
                    wait: backoff,
                    backoff,
                    agains: pace.agains.saturating_add(1),
                }
            }
            Outcome::Failed => {
                let backoff = self.grow(pace.backoff);
                Pace {
                    wait: backoff,
                    backoff,
                    ..pace
                }
            }
        }
    }

    /// The next backoff after `current` (zero: the first).
    fn grow(&self, current: Duration) -> Duration {
        let cap = self
            .check_interval
            .min(self.max_backoff)
            .max(self.min_interval);
        let next = if current.is_zero() {
            self.first_backoff
        } else {
            current.saturating_mul(2)
        };
        next.clamp(self.min_interval, cap)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use Outcome::{Again, Failed, Settled};

    fn secs(s: u64) -> Duration {
        Duration::from_secs(s)
    }

    /// The waits after each outcome in turn, from a fresh start.
    fn waits(pacing: &Pacing, outcomes: &[Outcome]) -> Vec<u64> {
        let mut pace = Pace::default();
        outcomes
            .iter()
            .map(|&o| {
                pace = pacing.next(o, pace);
                pace.wait.as_secs()
            })
            .collect()
    }

    #[test]
    fn waits_by_outcome() {
        let minute = Pacing::new(secs(60));
        let hour = Pacing::new(secs(3600));
        let second = Pacing::new(secs(1));
        let tiny = Pacing::new(Duration::from_millis(100));
        let table: &[(&str, &Pacing, &[Outcome], &[u64])] = &[
            (
                "settled waits the check interval",
                &minute,
                &[Settled],
                &[60],
            ),
            (
                "again waits the minimum",
                &minute,
                &[Again, Again, Settled],
                &[1, 1, 60],
            ),
            (
                "failures double up to the check interval",
                &minute,
                &[Failed; 8],
                &[2, 4, 8, 16, 32, 60, 60, 60],
            ),
            (
                "with a long check interval, up to 5 minutes",
                &hour,
                &[Failed; 10],
                &[2, 4, 8, 16, 32, 64, 128, 256, 300, 300],
            ),
            (
                "settling ends the backoff",
                &minute,
                &[Failed, Failed, Settled, Failed],
                &[2, 4, 60, 2],
            ),
            (
                "progress does not end it",
                &minute,
                &[Failed, Failed, Again, Failed],
                &[2, 4, 1, 8],
            ),
            (
                "too many agains in a row back off",
                &minute,
                &[Again; 12],
                &[1, 1, 1, 1, 1, 1, 1, 1, 2, 4, 8, 16],
            ),
            (
                "a check interval shorter than the backoff caps it",
                &second,
                &[Failed, Failed, Settled, Again],
                &[1, 1, 1, 1],
            ),
            (
                "never closer than the minimum interval",
                &tiny,
                &[Settled, Again, Failed],
                &[1, 1, 1],
            ),
        ];
        for (what, pacing, outcomes, want) in table {
            assert_eq!(&waits(pacing, outcomes), want, "{what}");
        }
    }

    #[test]
    fn backing_off_is_reported_until_settled() {
        let p = Pacing::new(secs(60));
        let failed = p.next(Failed, Pace::default());
        assert!(failed.backing_off());
        assert!(p.next(Again, failed).backing_off());
        assert!(!p.next(Settled, failed).backing_off());
        assert!(!p.next(Again, Pace::default()).backing_off());
    }
}
