//! What this replica counts at admission for policies under a rollout: requests a Progressing
//! group's version would have denied (the rollout's evidence besides the audit), and denials in
//! the last minute (the safety valve's). Published into the rollout ConfigMap every few
//! seconds when they changed.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

use poolguard_core::admission::PolicyResult;
use poolguard_core::config::Enforcement;
use poolguard_core::evidence::{AdmissionCounts, ReplicaCounts};
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
    /// Counts one request's policy results; `allowed`: the decision; `now` in Unix seconds.
    ///
    /// Only results that would refuse the request count ([`PolicyResult::denies`]: on UPDATE,
    /// infringements the old object already had do not), and a denial only when the request
    /// was refused: a request the decision allowed never trips the safety valve. The caller
    /// counts only requests for namespaces that exist.
    pub fn record(&self, results: &[PolicyResult], allowed: bool, now: i64) {
        let mut seen = std::collections::BTreeSet::new();
        for r in results {
            let Some(mark) = &r.rollout else { continue };
            if !r.denies {
                continue;
            }
            // One request counts once per policy.
            if !seen.insert(r.policy.as_str()) {
                continue;
            }
            let progressing = mark.status == Some(GroupStatus::Progressing);
            let denied = !allowed && r.enforcement == Enforcement::Deny;
            if !progressing && !denied {
                continue;
            }
            let id = (r.policy.clone(), mark.version.clone(), mark.group.clone());
            let mut keys = self.keys.lock().unwrap_or_else(|e| e.into_inner());
            let key = keys.entry(id).or_default();
            if progressing {
                key.would_deny += 1;
            } else {
                let slot = &mut key.denials[(now.rem_euclid(WINDOW as i64)) as usize];
                if slot.0 != now {
                    *slot = (now, 0);
                }
                slot.1 += 1;
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
            denies: infringements > 0,
            excepted: None,
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
            true,
            100,
        );
        c.record(
            &[result(GroupStatus::Progressing, Enforcement::Warn, 0)],
            true,
            100,
        );
        let deny = [result(GroupStatus::Succeeded, Enforcement::Deny, 1)];
        c.record(&deny, false, 100);
        c.record(&deny, false, 130);
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

    /// On UPDATE, infringements the old object already had neither refuse the request nor
    /// count: not as a denial, not as a request the Progressing group's version would have
    /// denied. A request that was allowed counts no denial, whatever its results say.
    #[test]
    fn only_what_refuses_the_request_counts() {
        let c = RolloutCounts::default();
        let known = |status| PolicyResult {
            denies: false,
            ..result(status, Enforcement::Deny, 1)
        };
        c.record(&[known(GroupStatus::Succeeded)], true, 100);
        c.record(&[known(GroupStatus::Progressing)], true, 100);
        // Another policy (or placement) refused the request: this one's old findings still
        // do not count.
        c.record(&[known(GroupStatus::Succeeded)], false, 100);
        // Results that would refuse, in a decision that allowed: the decision is what counts.
        c.record(
            &[result(GroupStatus::Succeeded, Enforcement::Deny, 1)],
            true,
            100,
        );
        assert!(c.snapshot(100).is_none(), "nothing counted");

        c.record(
            &[result(GroupStatus::Succeeded, Enforcement::Deny, 1)],
            false,
            100,
        );
        assert_eq!(
            c.snapshot(100).unwrap()["p"]["v"]["g"].denied_last_minute,
            1
        );
    }
}
