//! What an audit pass keeps of its results once each namespace's report is written: counts, not
//! results. Per policy and verdict (the metrics), per verdict (the pass's log line), and per
//! policy, rollout group and policy version (the rollout's observations). Its size grows with
//! the policies and groups configured, never with the objects audited, so a pass can drop every
//! namespace's results as soon as they are reported.

use std::collections::BTreeMap;

use crate::audit::{AuditResult, Verdict, POLICY_VERSION, ROLLOUT_GROUP, VIOLATION};

/// The objects of one rollout group for one policy, and their violations by policy version.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GroupTally {
    /// Results in the group (one per object the policy applies to).
    pub objects: u64,
    /// `fail` and `error` results, by the policy version that gave them.
    pub violations: BTreeMap<String, u64>,
}

/// The counts of an audit pass's results.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Tally {
    /// Results by policy and verdict (`Verdict::as_str`).
    pub by_policy: BTreeMap<(String, &'static str), u64>,
    /// Results by policy and rollout group, for results that name a group.
    pub groups: BTreeMap<(String, String), GroupTally>,
}

impl Tally {
    /// The tally of `results`.
    pub fn of(results: &[AuditResult]) -> Tally {
        let mut tally = Tally::default();
        tally.add_all(results);
        tally
    }

    /// Counts one result (a constraint's second and later violations of one object are not
    /// counted: the counts are of objects).
    pub fn add(&mut self, r: &AuditResult) {
        if r.properties.get(VIOLATION).is_some_and(|i| i != "1") {
            return;
        }
        *self
            .by_policy
            .entry((r.policy.clone(), r.result.as_str()))
            .or_default() += 1;
        if let Some(group) = r.properties.get(ROLLOUT_GROUP) {
            let g = self
                .groups
                .entry((r.policy.clone(), group.clone()))
                .or_default();
            g.objects += 1;
            if matches!(r.result, Verdict::Fail | Verdict::Error) {
                let version = r.properties.get(POLICY_VERSION).cloned();
                *g.violations.entry(version.unwrap_or_default()).or_default() += 1;
            }
        }
    }

    /// Counts every result of `results`.
    pub fn add_all(&mut self, results: &[AuditResult]) {
        for r in results {
            self.add(r);
        }
    }

    /// Results with this verdict, over every policy.
    pub fn count(&self, verdict: Verdict) -> u64 {
        self.by_policy
            .iter()
            .filter(|((_, v), _)| *v == verdict.as_str())
            .map(|(_, n)| n)
            .sum()
    }

    /// Every result counted.
    pub fn total(&self) -> u64 {
        self.by_policy.values().sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::audit::{Resource, Severity};

    fn result(policy: &str, verdict: Verdict, group: Option<(&str, &str)>) -> AuditResult {
        let mut properties = BTreeMap::new();
        if let Some((group, version)) = group {
            properties.insert(ROLLOUT_GROUP.to_string(), group.to_string());
            properties.insert(POLICY_VERSION.to_string(), version.to_string());
        }
        AuditResult {
            resource: Resource::default(),
            policy: policy.to_string(),
            rule: String::new(),
            result: verdict,
            message: String::new(),
            severity: Severity::Medium,
            properties,
        }
    }

    #[test]
    fn counts_by_policy_verdict_and_group_version() {
        let tally = Tally::of(&[
            result("p", Verdict::Pass, Some(("canary", "v1"))),
            result("p", Verdict::Fail, Some(("canary", "v1"))),
            result("p", Verdict::Error, Some(("canary", "v2"))),
            result("p", Verdict::Skip, Some(("rest", "v1"))),
            result("q", Verdict::Fail, None),
        ]);
        assert_eq!(tally.count(Verdict::Fail), 2);
        assert_eq!(tally.count(Verdict::Pass), 1);
        assert_eq!(tally.total(), 5);
        assert_eq!(tally.by_policy[&("q".to_string(), "fail")], 1);
        let canary = &tally.groups[&("p".to_string(), "canary".to_string())];
        assert_eq!(canary.objects, 3);
        assert_eq!(canary.violations["v1"], 1);
        assert_eq!(canary.violations["v2"], 1);
        let rest = &tally.groups[&("p".to_string(), "rest".to_string())];
        assert_eq!((rest.objects, rest.violations.len()), (1, 0));
        assert!(!tally
            .groups
            .contains_key(&("q".to_string(), "rest".to_string())));
    }

    #[test]
    fn a_constraints_violations_of_one_object_count_once() {
        let violation = |i: &str| {
            let mut r = result("c", Verdict::Fail, Some(("canary", "v1")));
            r.properties.insert(VIOLATION.to_string(), i.to_string());
            r
        };
        let tally = Tally::of(&[violation("1"), violation("2"), violation("3")]);
        assert_eq!(tally.total(), 1);
        let canary = &tally.groups[&("c".to_string(), "canary".to_string())];
        assert_eq!((canary.objects, canary.violations["v1"]), (1, 1));
    }
}
