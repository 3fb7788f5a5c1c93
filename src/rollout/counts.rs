//! What this replica counts at admission for policies under a rollout: requests a Progressing
//! group's version would have denied (the rollout's evidence besides the audit), and denials in
//! the last minute (the safety valve's). Published into the rollout ConfigMap every few
//! seconds when they changed.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

use poolguard_core::admission::PolicyResult;
use poolguard_core::config::Enforcement;
use poolguard_core::rollout::observe::{AdmissionCounts, ReplicaCounts};
use poolguard_core::rollout::GroupStatus;

/// Seconds of denial history kept for the last-minute count.
const WINDOW: usize = 60;

struct Key {
    would_deny: u64,
    /// Denials per second over the last minute, by `second % WINDOW`, with the second each
    /// bucket counts.
    denials: [(i64, u64); WINDOW],
}

impl Default for Key {
    fn default() -> Self {
        Key {
            would_deny: 0,
            denials: [(0, 0); WINDOW],
        }
    }
}

impl Key {
    fn denied_last_minute(&self, now: i64) -> u64 {
        self.denials
            .iter()
            .filter(|(at, _)| now - at < WINDOW as i64)
            .map(|(_, n)| n)
            .sum()
    }
}

/// (policy, version, group)
type Id = (String, String, String);

/// The counters, shared by the request handlers.
#[derive(Default)]
pub struct RolloutCounts {
    keys: Mutex<BTreeMap<Id, Key>>,
    /// What was last handed out for publishing.
    published: Mutex<Option<ReplicaCounts>>,
}

impl RolloutCounts {
    /// Counts one request's policy results; `now` in Unix seconds.
    pub fn record(&self, results: &[PolicyResult], now: i64) {
        let mut seen = std::collections::BTreeSet::new();
        for r in results {
            let Some(mark) = &r.rollout else { continue };
            if r.infringements == 0 && !r.error {
                continue;
            }
            // An UPDATE runs the old object too: one request counts once per policy.
            if !seen.insert(r.policy.as_str()) {
                continue;
            }
            let id = (r.policy.clone(), mark.version.clone(), mark.group.clone());
            let mut keys = self.keys.lock().unwrap_or_else(|e| e.into_inner());
            let key = keys.entry(id).or_default();
            match (mark.status, r.enforcement) {
                (Some(GroupStatus::Progressing), _) => key.would_deny += 1,
                (_, Enforcement::Deny) => {
                    let slot = &mut key.denials[(now.rem_euclid(WINDOW as i64)) as usize];
                    if slot.0 != now {
                        *slot = (now, 0);
                    }
                    slot.1 += 1;
                }
                _ => {}
            }
        }
    }

    /// The counts to publish, when they differ from the last ones handed out (new requests,
    /// or denials leaving the last minute).
    pub fn snapshot(&self, now: i64) -> Option<ReplicaCounts> {
        let keys = self.keys.lock().unwrap_or_else(|e| e.into_inner());
        let mut out = ReplicaCounts::new();
        for ((policy, version, group), key) in keys.iter() {
            out.entry(policy.clone())
                .or_default()
                .entry(version.clone())
                .or_default()
                .insert(
                    group.clone(),
                    AdmissionCounts {
                        would_deny: key.would_deny,
                        denied_last_minute: key.denied_last_minute(now),
                    },
                );
        }
        let mut published = self.published.lock().unwrap_or_else(|e| e.into_inner());
        if published.as_ref() == Some(&out) || (published.is_none() && out.is_empty()) {
            return None;
        }
        *published = Some(out.clone());
        Some(out)
    }

    /// The last snapshot could not be published: the next one is handed out even if equal.
    pub fn forget_published(&self) {
        *self.published.lock().unwrap_or_else(|e| e.into_inner()) = None;
    }
}

/// How often counts are published.
pub const PUBLISH_EVERY: Duration = Duration::from_secs(5);

#[cfg(test)]
mod tests {
    use super::*;
    use poolguard_core::rollout::view::RolloutMark;

    fn result(status: GroupStatus, enforcement: Enforcement, infringements: usize) -> PolicyResult {
        PolicyResult {
            policy: "p".into(),
            enforcement,
            infringements,
            error: false,
            pending: None,
            rollout: Some(RolloutMark {
                group: "g".into(),
                status: Some(status),
                version: "v".into(),
            }),
        }
    }

    #[test]
    fn would_deny_while_progressing_and_denials_in_the_last_minute() {
        let c = RolloutCounts::default();
        assert!(c.snapshot(0).is_none());
        c.record(
            &[result(GroupStatus::Progressing, Enforcement::Warn, 2)],
            100,
        );
        c.record(
            &[result(GroupStatus::Progressing, Enforcement::Warn, 0)],
            100,
        );
        c.record(&[result(GroupStatus::Succeeded, Enforcement::Deny, 1)], 100);
        c.record(&[result(GroupStatus::Succeeded, Enforcement::Deny, 1)], 130);
        let at = |snap: &ReplicaCounts| snap["p"]["v"]["g"];
        let snap = c.snapshot(130).unwrap();
        assert_eq!(
            at(&snap),
            AdmissionCounts {
                would_deny: 1,
                denied_last_minute: 2
            }
        );
        // Nothing new, but denials still in the window: published again as they age out.
        let snap = c.snapshot(165).unwrap();
        assert_eq!(at(&snap).denied_last_minute, 1);
        let snap = c.snapshot(200).unwrap();
        assert_eq!(at(&snap).denied_last_minute, 0);
        assert!(c.snapshot(300).is_none());
    }
}
