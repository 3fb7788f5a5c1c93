//! The leader's side of progressive enforcement: after every audit pass, and every few seconds
//! between passes, each policy under a rollout is stepped with what was measured (the last
//! pass's results, the replicas' admission counts, queued commands), and the new state is
//! written with the versions it names. Transitions become log lines, Kubernetes Events on the
//! rollout ConfigMap, and metrics.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{bail, Result};
use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::Client;

use super::store::{self, Change, Contents, Location, COMMANDS, CURRENT, PREVIOUS, STATE};
use crate::telemetry::metrics::Metrics;
use poolguard_core::audit_tally::Tally;
use poolguard_core::evidence::{self as observe, ReplicaCounts};
use poolguard_core::rollout::view::StoredVersion;
use poolguard_core::rollout::{self, Change as Moved, Observations, RolloutState, Transition};
use poolguard_core::ruleset::RuleSet;

/// Time between steps when no audit pass brings new results.
pub const STEP_EVERY: Duration = Duration::from_secs(5);
/// A replica's last-minute denial count older than this no longer counts (it stopped writing).
const STALE_COUNTS: i64 = 90;
/// Attempts when another writer changes the ConfigMap between the read and the write.
const ATTEMPTS: usize = 5;

pub struct Controller {
    client: Client,
    at: Location,
    recorder: Recorder,
    metrics: std::sync::Arc<Metrics>,
    /// The last audit pass's result counts.
    tally: Tally,
    /// The replicas' would-be denials as of the last step, per (policy, version, group): a step
    /// observes the ones counted since, so a group proves itself by a stretch of time without
    /// any (a new leader starts from what it first reads).
    would_deny_seen: WouldDeny,
}

type WouldDeny = BTreeMap<(String, String, String), u64>;

impl Controller {
    pub fn new(
        client: Client,
        at: Location,
        identity: &str,
        metrics: std::sync::Arc<Metrics>,
    ) -> Controller {
        let recorder = Recorder::new(
            client.clone(),
            Reporter {
                controller: "poolguard".into(),
                instance: Some(identity.to_string()),
            },
        );
        Controller {
            client,
            at,
            recorder,
            metrics,
            tally: Tally::default(),
            would_deny_seen: WouldDeny::new(),
        }
    }

    /// Keeps an audit pass's result counts (the groups' objects and violations).
    pub fn observe(&mut self, tally: &Tally) {
        self.tally = tally.clone();
    }

    /// Steps every rollout once at `now` (Unix seconds) and writes the result.
    pub async fn step(&mut self, rules: &RuleSet, now: i64) -> Result<()> {
        let rolled_out = rules
            .config()
            .policies
            .keys()
            .any(|p| rules.config().rollout(p).is_some());
        for _ in 0..ATTEMPTS {
            let contents = match store::read(&self.client, &self.at).await? {
                Some(contents) => contents,
                // Nothing rolled out and nothing stored: no ConfigMap to make.
                None if !rolled_out => return Ok(()),
                None => store::read_or_create(&self.client, &self.at).await?,
            };
            if !rolled_out && contents.policies().is_empty() {
                return Ok(());
            }
            // The serving replicas' admission counts, in their own ConfigMap (made here, so that
            // they only ever patch it).
            let counts = store::read_or_create(&self.client, &self.at.counts()).await?;
            let mut seen = self.would_deny_seen.clone();
            let plan = plan(
                rules,
                &contents.with_counts(&counts),
                &self.tally,
                &mut seen,
                now,
            );
            if store::apply(&self.client, &self.at, &contents, &plan.changes).await? {
                self.would_deny_seen = seen;
                self.report(&plan.transitions).await;
                self.metrics.rollout_states(&plan.states);
                return Ok(());
            }
        }
        bail!("the rollout state kept changing while the leader wrote it; stepping again later")
    }

    async fn report(&self, transitions: &[(String, Transition)]) {
        let reference = ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("ConfigMap".into()),
            name: Some(self.at.name.clone()),
            namespace: Some(self.at.namespace.clone()),
            ..ObjectReference::default()
        };
        for (policy, t) in transitions {
            let group = t.group.as_deref().unwrap_or("");
            let (to, warning) = match &t.to {
                Moved::Status(s) => (
                    format!("{s:?}"),
                    matches!(
                        s,
                        rollout::GroupStatus::Failed | rollout::GroupStatus::TimeOut
                    ),
                ),
                Moved::Event(e) => (format!("{e:?}"), false),
            };
            let from = t.from.map(|f| format!("{f:?}")).unwrap_or_default();
            tracing::info!(policy, group, from, to, reason = %t.reason, "rollout transition");
            self.metrics.rollout_transition(policy, &to);
            let event = Event {
                type_: if warning {
                    EventType::Warning
                } else {
                    EventType::Normal
                },
                reason: format!("Rollout{to}"),
                note: Some(truncate(&format!(
                    "policy {policy}{}: {}",
                    if group.is_empty() {
                        String::new()
                    } else {
                        format!(", group {group}")
                    },
                    t.reason
                ))),
                action: "Rollout".into(),
                secondary: None,
            };
            if let Err(e) = self.recorder.publish(&event, &reference).await {
                tracing::warn!(error = %e, "recording a rollout Event failed");
            }
        }
    }
}

/// What one step does.
struct Plan {
    /// To the stored contents.
    changes: Vec<Change>,
    /// With their policy.
    transitions: Vec<(String, Transition)>,
    /// Every rolled-out policy's state after the step.
    states: Vec<(String, RolloutState)>,
}

/// The step of every rollout: the changes to the stored contents, the transitions, the states.
fn plan(
    rules: &RuleSet,
    contents: &Contents,
    tally: &Tally,
    seen: &mut WouldDeny,
    now: i64,
) -> Plan {
    let counts: Vec<ReplicaCounts> = contents
        .counts()
        .into_iter()
        .map(|doc| {
            let mut policies = doc.policies;
            if now - doc.at > STALE_COUNTS {
                for c in policies
                    .values_mut()
                    .flat_map(|v| v.values_mut())
                    .flat_map(|g| g.values_mut())
                {
                    c.denied_last_minute = 0;
                }
            }
            policies
        })
        .collect();
    let mut changes = Vec::new();
    let mut transitions = Vec::new();
    let mut states = Vec::new();
    for (name, settings) in &rules.config().policies {
        let (Some(spec), Some(policy)) = (rules.config().rollout(name), rules.policies().get(name))
        else {
            continue;
        };
        let version = rules.policies().version(name).to_string();
        let old = contents.state(name);
        let queued = contents.commands(name);
        let mut groups = observe::observed(tally, spec, name, &version, &counts);
        for (group, o) in groups.iter_mut() {
            let key = (name.clone(), version.clone(), group.clone());
            let total = o.would_deny;
            let before = seen.insert(key, total);
            // The first reading is the baseline; a total that went down (a replica's key
            // removed) counts nothing new.
            o.would_deny = before.map_or(0, |b| total.saturating_sub(b));
        }
        let obs = Observations {
            version: version.clone(),
            groups,
            commands: queued.iter().map(|q| q.command.clone()).collect(),
        };
        let final_enforcement = settings.enforcement.unwrap_or_default();
        let (new, moved) = rollout::step(spec, old.as_ref(), &obs, final_enforcement, now);
        if old.as_ref() != Some(&new) {
            changes.push(Change::Set(format!("{STATE}{name}"), json(&new)));
        }
        states.push((name.clone(), new.clone()));
        let old_version = old.as_ref().map(|o| o.version.as_str());
        if old_version != Some(new.version.as_str()) {
            let stored = StoredVersion::of(policy, rules.config());
            changes.push(Change::Set(format!("{CURRENT}{name}"), json(&stored)));
            match (&new.previous_version, old_version) {
                // The version rolled out before becomes the previous one.
                (Some(previous), Some(old_version)) if previous == old_version => {
                    if let Some(text) = contents.data.get(&format!("{CURRENT}{name}")) {
                        changes.push(Change::Set(format!("{PREVIOUS}{name}"), text.clone()));
                    }
                }
                // The old previous version stays (already stored).
                (Some(_), _) => {}
                (None, _) => changes.push(Change::Remove(format!("{PREVIOUS}{name}"))),
            }
        }
        if !queued.is_empty() {
            changes.push(Change::Remove(format!("{COMMANDS}{name}")));
        }
        transitions.extend(moved.into_iter().map(|t| (name.clone(), t)));
    }
    // Policies no longer under a rollout (or gone): their keys go.
    for name in contents.policies() {
        if rules.config().rollout(&name).is_none() {
            for prefix in [STATE, CURRENT, PREVIOUS, COMMANDS] {
                changes.push(Change::Remove(format!("{prefix}{name}")));
            }
        }
    }
    Plan {
        changes,
        transitions,
        states,
    }
}

fn json<T: serde::Serialize>(value: &T) -> String {
    serde_json::to_string(value).unwrap_or_default()
}

fn truncate(text: &str) -> String {
    text.chars().take(1000).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use poolguard_core::config::Config;
    use poolguard_core::policy::{template, PolicySet};
    use poolguard_core::rollout::GroupStatus;

    fn rules(message: &str) -> RuleSet {
        let config = Config::parse(
            "policies:\n  repos:\n    enforcement: deny\n    parameters: {}\n    rollout:\n      groups:\n        - {name: canary, namespaceSelector: {matchLabels: {risk: low}}}\n        - {name: rest}\n      minSuccessTime: 0s\n      progressDeadline: 1m\n",
            "t",
        )
        .unwrap();
        let rego =
            format!("package repos\ninfringement[{{\"msg\": \"{message}\"}}] {{ input.x }}\n");
        let policies =
            PolicySet::compile(&[template::from_rego("repos", rego, "repos.rego".into())]).unwrap();
        RuleSet::new(config, policies, Default::default(), "t").unwrap()
    }

    /// Applies the planned changes to the contents, as the API server would.
    fn apply(contents: &mut Contents, changes: Vec<Change>) {
        for change in changes {
            match change {
                Change::Set(k, v) => {
                    contents.data.insert(k, v);
                }
                Change::Remove(k) => {
                    contents.data.remove(&k);
                }
            }
        }
    }

    fn statuses(contents: &Contents) -> Vec<GroupStatus> {
        let state: RolloutState = contents.state("repos").unwrap();
        state.groups.iter().map(|g| g.status).collect()
    }

    #[test]
    fn versions_are_stored_and_the_finished_one_becomes_the_previous() {
        let v1 = rules("v1");
        let mut contents = Contents::default();
        let mut seen = WouldDeny::new();
        // First step: a new rollout; its version stored, no previous one.
        let step = plan(&v1, &contents, &Tally::default(), &mut seen, 100);
        apply(&mut contents, step.changes);
        assert!(!step.transitions.is_empty());
        let current = contents.stored(CURRENT, "repos").unwrap();
        assert_eq!(current.version, v1.policies().version("repos"));
        assert!(current.rego.contains("v1"));
        assert!(contents.stored(PREVIOUS, "repos").is_none());
        // Empty groups, minSuccessTime 0: the rollout finishes step by step.
        for now in 101..110 {
            let step = plan(&v1, &contents, &Tally::default(), &mut seen, now);
            apply(&mut contents, step.changes);
        }
        assert_eq!(statuses(&contents), vec![GroupStatus::Succeeded; 2]);
        // A step that changes nothing still reports every state (the metrics show all of them).
        let idle = plan(&v1, &contents, &Tally::default(), &mut seen, 150);
        assert!(idle.changes.is_empty());
        assert_eq!(idle.states.len(), 1);
        assert_eq!(idle.states[0].0, "repos");

        // A new version: it becomes current, the finished one previous, the rollout restarts.
        let v2 = rules("v2");
        let step = plan(&v2, &contents, &Tally::default(), &mut seen, 200);
        apply(&mut contents, step.changes);
        assert!(contents
            .stored(CURRENT, "repos")
            .unwrap()
            .rego
            .contains("v2"));
        let previous = contents.stored(PREVIOUS, "repos").unwrap();
        assert!(previous.rego.contains("v1"));
        let state = contents.state("repos").unwrap();
        assert_eq!(
            state.previous_version.as_deref(),
            Some(previous.version.as_str())
        );
        assert_eq!(state.groups[1].status, GroupStatus::ToApply);

        // Queued commands are consumed; a policy no longer under a rollout loses its keys.
        contents.data.insert(
            format!("{COMMANDS}repos"),
            "[{\"command\":\"pause\",\"at\":1}]".into(),
        );
        let step = plan(&v2, &contents, &Tally::default(), &mut seen, 201);
        apply(&mut contents, step.changes);
        assert!(contents.state("repos").unwrap().is_paused());
        assert!(!contents.data.contains_key(&format!("{COMMANDS}repos")));
        let without = RuleSet::new(
            Config::parse("policies:\n  repos:\n    parameters: {}\n", "t").unwrap(),
            v2.policies().clone(),
            Default::default(),
            "t",
        )
        .unwrap();
        let step = plan(&without, &contents, &Tally::default(), &mut seen, 202);
        apply(&mut contents, step.changes);
        assert!(
            contents
                .data
                .keys()
                .all(|k| k.starts_with(super::super::store::COUNTS)),
            "{:?}",
            contents.data.keys()
        );
    }

    #[test]
    fn would_be_denials_count_once_from_the_first_reading_on() {
        let rules = rules("v1");
        let version = rules.policies().version("repos").to_string();
        let counts = |n: u64| {
            format!("{{\"at\":100,\"policies\":{{\"repos\":{{\"{version}\":{{\"canary\":{{\"wouldDeny\":{n},\"deniedLastMinute\":0}}}}}}}}}}")
        };
        let mut contents = Contents::default();
        let mut seen = WouldDeny::new();
        contents.data.insert("counts.a".into(), counts(5));
        let step = plan(&rules, &contents, &Tally::default(), &mut seen, 100);
        apply(&mut contents, step.changes);
        // The first reading is the baseline; 2 more since: the next step sees 2.
        contents.data.insert("counts.a".into(), counts(7));
        let step = plan(&rules, &contents, &Tally::default(), &mut seen, 101);
        apply(&mut contents, step.changes);
        let state = contents.state("repos").unwrap();
        assert_eq!(state.groups[0].failures, 2, "{state:?}");
        // Nothing new: no failures.
        let step = plan(&rules, &contents, &Tally::default(), &mut seen, 102);
        apply(&mut contents, step.changes);
        assert_eq!(contents.state("repos").unwrap().groups[0].failures, 0);
    }
}
