//! A rollout's evidence: observations for the state machine from what the shells measured: the
//! audit's results (the objects in each group, and those that violate the version being rolled out)
//! and the admission counts the replicas report (requests a Progressing group would have had
//! denied, denials in the last minute).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::audit::AuditResult;
use crate::audit_tally::Tally;
use crate::config::rollout::RolloutSpec;
use crate::rollout::machine::GroupObservation;

/// What one replica counted at admission for one policy version and group.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AdmissionCounts {
    /// Requests the version would have denied while the group was Progressing.
    pub would_deny: u64,
    /// Requests the version denied in the last minute.
    pub denied_last_minute: u64,
}

/// One replica's counts: policy → version → group → counts.
pub type ReplicaCounts = BTreeMap<String, BTreeMap<String, BTreeMap<String, AdmissionCounts>>>;

/// Every group of `spec` with its objects and violations of `version` among `results` (an
/// audit pass's), plus the admission counts of `replicas` for that version. A group with no
/// objects is reported with zeros (the state machine treats an absent group as "no data").
/// Errors count as violations: at admission the version would refuse those objects too
/// (`evaluation.onError: deny`, the default). A policy Pending for an object (a dependency
/// unmet: `skip`, or `pass` with `ignorePending`) did not run on it, so that object counts but
/// is no violation.
pub fn observations(
    results: &[AuditResult],
    spec: &RolloutSpec,
    policy: &str,
    version: &str,
    replicas: &[ReplicaCounts],
) -> BTreeMap<String, GroupObservation> {
    observed(&Tally::of(results), spec, policy, version, replicas)
}

/// [`observations`] from a pass's [`Tally`] (what the background audit keeps of its results).
pub fn observed(
    tally: &Tally,
    spec: &RolloutSpec,
    policy: &str,
    version: &str,
    replicas: &[ReplicaCounts],
) -> BTreeMap<String, GroupObservation> {
    let mut groups: BTreeMap<String, GroupObservation> = spec
        .groups
        .iter()
        .map(|g| (g.name.clone(), GroupObservation::default()))
        .collect();
    for (name, group) in groups.iter_mut() {
        if let Some(t) = tally.groups.get(&(policy.to_string(), name.clone())) {
            group.objects += t.objects;
            group.violations += t.violations.get(version).copied().unwrap_or(0);
        }
    }
    for counts in replicas {
        let Some(by_group) = counts.get(policy).and_then(|v| v.get(version)) else {
            continue;
        };
        for (name, c) in by_group {
            if let Some(group) = groups.get_mut(name) {
                group.would_deny += c.would_deny;
                group.denials_last_minute += c.denied_last_minute;
            }
        }
    }
    groups
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::audit::{Resource, Severity, Verdict, POLICY_VERSION, ROLLOUT_GROUP};

    fn spec() -> RolloutSpec {
        crate::config::Config::parse(
            "policies:\n  p:\n    parameters: {}\n    rollout:\n      groups:\n        - {name: canary, namespaceSelector: {matchLabels: {risk: low}}}\n        - {name: rest}\n      minSuccessTime: 10s\n      progressDeadline: 1m\n",
            "t",
        )
        .unwrap()
        .rollout("p")
        .unwrap()
        .clone()
    }

    fn result(policy: &str, group: &str, version: &str, verdict: Verdict) -> AuditResult {
        let mut properties = BTreeMap::new();
        if !group.is_empty() {
            properties.insert(ROLLOUT_GROUP.to_string(), group.to_string());
            properties.insert(POLICY_VERSION.to_string(), version.to_string());
        }
        AuditResult {
            resource: Resource::default(),
            policy: policy.to_string(),
            rule: "infringement".to_string(),
            result: verdict,
            message: String::new(),
            severity: Severity::High,
            properties,
        }
    }

    #[test]
    fn objects_violations_and_counts_per_group() {
        let results = vec![
            result("p", "canary", "v2", Verdict::Pass),
            result("p", "canary", "v2", Verdict::Fail),
            result("p", "canary", "v2", Verdict::Error),
            // Another version's failure (a group still on the previous one) is no violation.
            result("p", "rest", "v1", Verdict::Fail),
            result("p", "rest", "v1", Verdict::Pass),
            // Another policy, and a result with no group, are not counted.
            result("q", "canary", "v2", Verdict::Fail),
            result("p", "", "", Verdict::Fail),
        ];
        let replica = |wd, dm| -> ReplicaCounts {
            BTreeMap::from([(
                "p".to_string(),
                BTreeMap::from([(
                    "v2".to_string(),
                    BTreeMap::from([(
                        "canary".to_string(),
                        AdmissionCounts {
                            would_deny: wd,
                            denied_last_minute: dm,
                        },
                    )]),
                )]),
            )])
        };
        let obs = observations(
            &results,
            &spec(),
            "p",
            "v2",
            &[replica(2, 0), replica(1, 4)],
        );
        let canary = &obs["canary"];
        assert_eq!(
            (
                canary.objects,
                canary.violations,
                canary.would_deny,
                canary.denials_last_minute
            ),
            (3, 2, 3, 4)
        );
        let rest = &obs["rest"];
        assert_eq!((rest.objects, rest.violations, rest.would_deny), (2, 0, 0));
        // A Pending result (`skip`, or `pass` with ignorePending) is never a violation: the
        // version did not run on the object, so admission would not have refused it either.
        let pending = observations(
            &[
                result("p", "canary", "v2", Verdict::Skip),
                result("p", "canary", "v2", Verdict::Pass),
            ],
            &spec(),
            "p",
            "v2",
            &[],
        );
        assert_eq!(
            (pending["canary"].objects, pending["canary"].violations),
            (2, 0)
        );
        // An empty group is there, with zeros.
        let none = observations(&[], &spec(), "p", "v2", &[]);
        assert_eq!(none.len(), 2);
        assert_eq!(none["rest"], GroupObservation::default());
    }
}
