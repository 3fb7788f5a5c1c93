//! The rollout state machine, pure: `(state, observations, now) -> (state, transitions)`. The
//! shell persists [`RolloutState`] (as camelCase JSON), gathers [`Observations`] per group,
//! passes the time in, and logs or emits each [`Transition`]. [`enforcement_for`] tells
//! admission and the audit which version of a policy applies to a namespace, and how strictly.
//!
//! The choices where the design left room:
//! - Groups go strictly in order: a group starts once every group before it has Succeeded (and
//!   it is approved, if it needs approval). A Failed or TimeOut group therefore stops the
//!   groups behind it; a group already Progressing keeps going on its own evidence.
//! - A group started in a step is first judged in the next step: the observations of the step
//!   that started it were taken before it did.
//! - A group the observations do not mention has no data: its counts keep their last values,
//!   its in-limit clock neither starts nor completes, the safety valve does not fire, but its
//!   progress deadline runs. The shell reports an empty group as zero objects.
//! - Pause freezes every transition, the safety valve included; observations are still
//!   recorded, and a Progressing group over its limit while paused loses its in-limit clock.
//!   On Resume, the `since` and `withinSince` of Progressing groups move forward by the paused
//!   time, so neither the deadline nor minSuccessTime counts it.
//! - A version change restarts the rollout from the first group and keeps a pause: a paused
//!   rollout of a new version leaves every group where ToApply puts it until Resume.
//!   Approvals belong to one version and are cleared by a version change.
//! - On a version change, the previous version and enforcement become the old rollout's
//!   version and final enforcement (as of its last step) if every group had Succeeded;
//!   otherwise the old rollout's own previous ones are kept, so a partly rolled-out version is
//!   never the fallback (for a new policy that is still none: dryrun of the current version).
//! - Resume re-arms Failed groups (the safety valve's), not TimeOut ones: a timed-out
//!   rollout needs a new version.
//! - [`enforcement_for`] never answers more strictly than the final enforcement passed in.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::config::rollout::RolloutSpec;
use crate::config::Enforcement;
pub use crate::rollout_mark::GroupStatus;

/// Seconds as the state machine counts them (Unix seconds, `i64`).
fn secs(d: Duration) -> i64 {
    i64::try_from(d.as_secs()).unwrap_or(i64::MAX)
}

/// One group's state.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GroupState {
    pub name: String,
    pub status: GroupStatus,
    /// Unix seconds when the group entered `status`. For a Progressing group this is when its
    /// clock started, moved forward by any time the rollout spent paused.
    pub since: i64,
    /// While Progressing: since when failures have continuously been within the limit.
    pub within_since: Option<i64>,
    /// Approved for the current version.
    pub approved: bool,
    /// The group's objects at the last observation.
    pub objects: u64,
    /// Violations plus would-be denials at the last observation.
    pub failures: u64,
    /// Why the group is where it is, for people.
    pub reason: String,
}

/// A policy's rollout state, persisted by the shell between steps.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RolloutState {
    /// The policy version being rolled out (see [`crate::policy::version::policy_version`]).
    pub version: String,
    /// The version groups not reached yet stay on; `None` for a new policy.
    pub previous_version: Option<String>,
    /// The enforcement of the previous version; `None` for a new policy (groups not reached yet
    /// run the current version in dryrun).
    pub previous_enforcement: Option<Enforcement>,
    /// The final enforcement as of the last step, remembered to become the previous
    /// enforcement when a finished rollout is replaced by a new version.
    pub final_enforcement: Enforcement,
    /// Unix seconds since when the rollout is paused; `None` when running.
    pub paused_since: Option<i64>,
    /// In the spec's order.
    pub groups: Vec<GroupState>,
}

impl GroupState {
    /// A group `name` in `status` since `since`, not approved, with nothing observed yet.
    pub fn new(name: &str, status: GroupStatus, since: i64, reason: &str) -> GroupState {
        GroupState {
            name: name.to_string(),
            status,
            since,
            within_since: None,
            approved: false,
            objects: 0,
            failures: 0,
            reason: reason.to_string(),
        }
    }
}

impl RolloutState {
    pub fn is_paused(&self) -> bool {
        self.paused_since.is_some()
    }

    /// Whether every group has Succeeded.
    pub(crate) fn is_complete(&self) -> bool {
        !self.groups.is_empty()
            && self
                .groups
                .iter()
                .all(|g| g.status == GroupStatus::Succeeded)
    }

    pub fn group(&self, name: &str) -> Option<&GroupState> {
        self.groups.iter().find(|g| g.name == name)
    }
}

/// What the shell saw since the last step.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Observations {
    /// The policy's current version.
    pub version: String,
    /// Per group name. A group missing here has no data this step (see the module doc).
    #[serde(default)]
    pub groups: BTreeMap<String, GroupObservation>,
    /// Operator commands, applied in order.
    #[serde(default)]
    pub commands: Vec<Command>,
}

/// The numbers of one group, for the current version.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GroupObservation {
    /// Objects in the group's namespaces the policy looks at.
    pub objects: u64,
    /// Objects the audit finds in violation.
    pub violations: u64,
    /// Admission requests that would have been denied.
    pub would_deny: u64,
    /// Admission requests denied in the last minute.
    pub denials_last_minute: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Command {
    /// Approves the named group for the current version.
    Approve(String),
    /// Freezes the rollout.
    Pause,
    /// Unfreezes it, and re-arms groups the safety valve failed.
    Resume,
}

/// A change the shell logs and emits as an Event.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Transition {
    /// The group concerned; `None` for the rollout as a whole.
    pub group: Option<String>,
    /// The group's status before; `None` for a group new to the rollout or a rollout event.
    pub from: Option<GroupStatus>,
    pub to: Change,
    pub reason: String,
    pub at: i64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Change {
    /// A group entered this status.
    Status(GroupStatus),
    /// Something happened that is not a status change.
    Event(Event),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Event {
    /// A rollout of a new version began.
    Started,
    /// Every group Succeeded.
    Completed,
    Paused,
    Resumed,
    /// A group was approved.
    Approved,
    /// It is a group's turn, but it waits for approval.
    AwaitingApproval,
    /// A group left the spec.
    Removed,
    /// A command that could not apply (an unknown group).
    Ignored,
}

/// Which version of the policy applies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Which {
    Current,
    Previous,
}

/// The version and enforcement that apply to one namespace.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Applied {
    pub version: Which,
    pub enforcement: Enforcement,
}

const AWAITING_APPROVAL: &str = "awaiting approval";

fn weaker(a: Enforcement, b: Enforcement) -> Enforcement {
    if a.strength() <= b.strength() {
        a
    } else {
        b
    }
}

fn human(seconds: i64) -> humantime::FormattedDuration {
    humantime::format_duration(Duration::from_secs(u64::try_from(seconds).unwrap_or(0)))
}

/// What applies to a namespace in group `group` (an index into the spec's groups, from
/// [`RolloutSpec::group_of`]; `None` for a namespace in no group). `final_enforcement` is the
/// policy's enforcement for the namespace (its pool's, when a pool overrides it):
/// - Succeeded: the current version at the final enforcement;
/// - Progressing, Failed, TimeOut: the current version at `warn` (so people still see what
///   would be refused);
/// - ToApply, or in no group: the previous version at its enforcement, or the current version
///   in dryrun for a new policy.
///
/// The answer is never stricter than `final_enforcement` (a rollout to `dryrun` stays dryrun).
pub(crate) fn enforcement_for(
    state: &RolloutState,
    group: Option<usize>,
    final_enforcement: Enforcement,
) -> Applied {
    let status = group.and_then(|i| state.groups.get(i)).map(|g| g.status);
    let (version, enforcement) = match status {
        Some(GroupStatus::Succeeded) => (Which::Current, final_enforcement),
        Some(GroupStatus::Progressing | GroupStatus::Failed | GroupStatus::TimeOut) => {
            (Which::Current, Enforcement::Warn)
        }
        Some(GroupStatus::ToApply) | None => match state.previous_enforcement {
            Some(previous) => (Which::Previous, previous),
            None => (Which::Current, Enforcement::Dryrun),
        },
    };
    Applied {
        version,
        enforcement: weaker(enforcement, final_enforcement),
    }
}

/// Collects transitions with the step's time.
struct Log {
    now: i64,
    out: Vec<Transition>,
}

impl Log {
    fn push(&mut self, group: Option<&str>, from: Option<GroupStatus>, to: Change, reason: String) {
        self.out.push(Transition {
            group: group.map(str::to_string),
            from,
            to,
            reason,
            at: self.now,
        });
    }

    /// Moves `g` to `to`, recording the transition.
    fn set(&mut self, g: &mut GroupState, to: GroupStatus, reason: String) {
        let from = g.status;
        g.status = to;
        g.since = self.now;
        g.within_since = None;
        g.reason = reason.clone();
        self.push(Some(&g.name), Some(from), Change::Status(to), reason);
    }
}

fn new_group(name: &str, now: i64, reason: &str) -> GroupState {
    GroupState::new(name, GroupStatus::ToApply, now, reason)
}

/// A rollout of `version` from the first group, replacing `old` (if any).
fn restart(
    spec: &RolloutSpec,
    old: Option<&RolloutState>,
    version: &str,
    log: &mut Log,
) -> RolloutState {
    let (previous_version, previous_enforcement) = match old {
        None => (None, None),
        Some(old) if old.is_complete() => (Some(old.version.clone()), Some(old.final_enforcement)),
        Some(old) => (old.previous_version.clone(), old.previous_enforcement),
    };
    let replaces = match old {
        None => "the policy's first rollout".to_string(),
        Some(old) => format!("replaces {}", old.version),
    };
    let meanwhile = match (&previous_version, previous_enforcement) {
        (Some(v), Some(e)) => format!("stay on version {v} at {}", e.as_str()),
        _ => "run it in dryrun".to_string(),
    };
    log.push(
        None,
        None,
        Change::Event(Event::Started),
        format!("version {version} ({replaces}): groups not reached yet {meanwhile}"),
    );
    if let Some(old) = old {
        for gone in old
            .groups
            .iter()
            .filter(|g| !spec.groups.iter().any(|s| s.name == g.name))
        {
            log.push(
                Some(&gone.name),
                Some(gone.status),
                Change::Event(Event::Removed),
                "no longer in the rollout spec".to_string(),
            );
        }
    }
    let groups = spec
        .groups
        .iter()
        .map(|g| {
            let fresh = new_group(&g.name, log.now, &format!("new version {version}"));
            if let Some(before) = old.and_then(|o| o.group(&g.name)) {
                if before.status != GroupStatus::ToApply {
                    log.push(
                        Some(&g.name),
                        Some(before.status),
                        Change::Status(GroupStatus::ToApply),
                        fresh.reason.clone(),
                    );
                }
            }
            fresh
        })
        .collect();
    RolloutState {
        version: version.to_string(),
        previous_version,
        previous_enforcement,
        final_enforcement: old.map_or(Enforcement::Deny, |o| o.final_enforcement),
        paused_since: old.and_then(|o| o.paused_since),
        groups,
    }
}

/// Same version, possibly a different list of groups: matched by name, in the spec's order.
fn reconcile(spec: &RolloutSpec, state: &mut RolloutState, log: &mut Log) {
    let mut old: Vec<Option<GroupState>> = std::mem::take(&mut state.groups)
        .into_iter()
        .map(Some)
        .collect();
    for g in &spec.groups {
        let kept = old
            .iter_mut()
            .find(|o| o.as_ref().is_some_and(|o| o.name == g.name))
            .and_then(Option::take);
        state.groups.push(kept.unwrap_or_else(|| {
            let reason = "added to the rollout".to_string();
            log.push(
                Some(&g.name),
                None,
                Change::Status(GroupStatus::ToApply),
                reason.clone(),
            );
            new_group(&g.name, log.now, &reason)
        }));
    }
    for gone in old.into_iter().flatten() {
        log.push(
            Some(&gone.name),
            Some(gone.status),
            Change::Event(Event::Removed),
            "no longer in the rollout spec".to_string(),
        );
    }
}

fn apply_commands(state: &mut RolloutState, commands: &[Command], log: &mut Log) {
    let now = log.now;
    for command in commands {
        match command {
            Command::Approve(name) => match state.groups.iter_mut().find(|g| &g.name == name) {
                Some(g) if !g.approved => {
                    g.approved = true;
                    log.push(
                        Some(name),
                        Some(g.status),
                        Change::Event(Event::Approved),
                        format!("approved for version {}", state.version),
                    );
                }
                Some(_) => {}
                None => log.push(
                    Some(name),
                    None,
                    Change::Event(Event::Ignored),
                    format!("approve: the rollout has no group named `{name}`"),
                ),
            },
            Command::Pause => {
                if state.paused_since.is_none() {
                    state.paused_since = Some(now);
                    log.push(
                        None,
                        None,
                        Change::Event(Event::Paused),
                        "paused".to_string(),
                    );
                }
            }
            Command::Resume => {
                if let Some(paused) = state.paused_since.take() {
                    let delta = now.saturating_sub(paused).max(0);
                    for g in &mut state.groups {
                        if g.status == GroupStatus::Progressing {
                            g.since = g.since.saturating_add(delta);
                            g.within_since = g.within_since.map(|w| w.saturating_add(delta));
                        }
                    }
                    log.push(
                        None,
                        None,
                        Change::Event(Event::Resumed),
                        format!("resumed after {} paused", human(delta)),
                    );
                }
                for g in &mut state.groups {
                    if g.status == GroupStatus::Failed {
                        log.set(
                            g,
                            GroupStatus::Progressing,
                            "re-armed by resume".to_string(),
                        );
                    }
                }
            }
        }
    }
}

/// Moves the rollout along: restarts it on a new version, follows changes to the spec's
/// groups, applies commands, records observations, then (unless paused) judges Progressing
/// groups, starts the next group, and applies the safety valve. `final_enforcement` is the
/// policy's cluster-wide enforcement, where the rollout ends.
pub fn step(
    spec: &RolloutSpec,
    state: Option<&RolloutState>,
    obs: &Observations,
    final_enforcement: Enforcement,
    now: i64,
) -> (RolloutState, Vec<Transition>) {
    let mut log = Log {
        now,
        out: Vec::new(),
    };
    let mut state = match state {
        Some(s) if s.version == obs.version => {
            let mut s = s.clone();
            reconcile(spec, &mut s, &mut log);
            s
        }
        old => restart(spec, old, &obs.version, &mut log),
    };
    state.final_enforcement = final_enforcement;
    apply_commands(&mut state, &obs.commands, &mut log);

    let min_success = secs(spec.min_success_time);
    let deadline = secs(spec.progress_deadline);
    let paused = state.is_paused();
    let mut all_before_succeeded = true;
    let mut succeeded_now = false;
    for (i, (g, group_spec)) in state.groups.iter_mut().zip(&spec.groups).enumerate() {
        let seen = obs.groups.get(&g.name);
        if let Some(o) = seen {
            g.objects = o.objects;
            g.failures = o.violations.saturating_add(o.would_deny);
        }
        let limit = spec.max_failures.limit(g.objects);
        let within = g.failures <= limit;
        if paused {
            // Frozen: no transition, no clock starts, but failures still stop the in-limit one.
            if g.status == GroupStatus::Progressing && seen.is_some() && !within {
                g.within_since = None;
                g.reason = format!(
                    "{} failures in {} objects, over the limit of {limit}",
                    g.failures, g.objects
                );
            }
            continue;
        }
        match g.status {
            GroupStatus::Progressing => {
                if seen.is_some() {
                    if within {
                        let start = *g.within_since.get_or_insert(now);
                        if now.saturating_sub(start) >= min_success {
                            let reason = format!(
                                "{} failures in {} objects, within the limit of {limit} for {}",
                                g.failures,
                                g.objects,
                                human(min_success)
                            );
                            log.set(g, GroupStatus::Succeeded, reason);
                            succeeded_now = true;
                        } else {
                            g.reason = format!(
                                "{} failures in {} objects, within the limit of {limit} for {} of {}",
                                g.failures,
                                g.objects,
                                human(now.saturating_sub(start)),
                                human(min_success)
                            );
                        }
                    } else {
                        g.within_since = None;
                        g.reason = format!(
                            "{} failures in {} objects, over the limit of {limit}",
                            g.failures, g.objects
                        );
                    }
                }
                if g.status == GroupStatus::Progressing && now.saturating_sub(g.since) >= deadline {
                    let reason = format!(
                        "did not stay within {} failures for {} before the progress deadline of {} ({} failures in {} objects at the end)",
                        spec.max_failures,
                        human(min_success),
                        human(deadline),
                        g.failures,
                        g.objects
                    );
                    log.set(g, GroupStatus::TimeOut, reason);
                }
            }
            GroupStatus::ToApply if all_before_succeeded => {
                if group_spec.needs_approval() && !g.approved {
                    if g.reason != AWAITING_APPROVAL {
                        g.reason = AWAITING_APPROVAL.to_string();
                        log.push(
                            Some(&g.name),
                            Some(g.status),
                            Change::Event(Event::AwaitingApproval),
                            format!("its turn in the rollout of version {}", state.version),
                        );
                    }
                } else {
                    let turn = if i == 0 {
                        format!("first group of version {}", state.version)
                    } else {
                        "every group before it succeeded".to_string()
                    };
                    let reason = if group_spec.needs_approval() {
                        format!("approved; {turn}")
                    } else {
                        turn
                    };
                    log.set(g, GroupStatus::Progressing, reason);
                }
            }
            GroupStatus::Succeeded => {
                if let (Some(max), Some(o)) = (spec.max_denials_per_minute, seen) {
                    if o.denials_last_minute > max {
                        let reason = format!(
                            "{} denials in the last minute, over maxDenialsPerMinute {max}; enforcement drops to warn",
                            o.denials_last_minute
                        );
                        log.set(g, GroupStatus::Failed, reason);
                    }
                }
            }
            _ => {}
        }
        all_before_succeeded &= g.status == GroupStatus::Succeeded;
    }
    if succeeded_now && state.is_complete() {
        log.push(
            None,
            None,
            Change::Event(Event::Completed),
            format!(
                "every group succeeded: version {} is at its final enforcement ({})",
                state.version,
                final_enforcement.as_str()
            ),
        );
    }
    (state, log.out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::labels::Labels;
    use GroupStatus::*;

    const SPEC: &str = r#"
groups:
  - name: canary
    namespaceSelector: {matchLabels: {risk: low}}
  - name: standard
    namespaceSelector: {matchExpressions: [{key: risk, operator: In, values: [medium]}]}
  - name: critical
    approval: required
minSuccessTime: 10m
progressDeadline: 1h
maxFailures: 1
maxDenialsPerMinute: 30
"#;

    fn spec(text: &str) -> RolloutSpec {
        let s: RolloutSpec = crate::documents::parse_one(text, "t").unwrap();
        s.validate("t").unwrap();
        s
    }

    /// A rollout driven by a fake clock: observations are set per group and kept between
    /// steps, as a shell would report unchanged numbers.
    struct Sim {
        spec: RolloutSpec,
        state: Option<RolloutState>,
        version: String,
        final_enforcement: Enforcement,
        now: i64,
        groups: BTreeMap<String, GroupObservation>,
    }

    impl Sim {
        fn new(text: &str) -> Sim {
            let spec = spec(text);
            let groups = spec
                .groups
                .iter()
                .map(|g| (g.name.clone(), GroupObservation::default()))
                .collect();
            Sim {
                spec,
                state: None,
                version: "v1".to_string(),
                final_enforcement: Enforcement::Deny,
                now: 1_000_000,
                groups,
            }
        }

        fn set(&mut self, group: &str, objects: u64, violations: u64, would_deny: u64) {
            let o = self.groups.entry(group.to_string()).or_default();
            o.objects = objects;
            o.violations = violations;
            o.would_deny = would_deny;
        }

        /// Steps `after` seconds after the last step.
        fn step_with(&mut self, after: i64, commands: Vec<Command>) -> Vec<Transition> {
            self.now += after;
            let obs = Observations {
                version: self.version.clone(),
                groups: self.groups.clone(),
                commands,
            };
            let (state, transitions) = step(
                &self.spec,
                self.state.as_ref(),
                &obs,
                self.final_enforcement,
                self.now,
            );
            for t in &transitions {
                assert_eq!(t.at, self.now);
            }
            self.state = Some(state);
            transitions
        }

        fn step(&mut self, after: i64) -> Vec<Transition> {
            self.step_with(after, Vec::new())
        }

        fn state(&self) -> &RolloutState {
            self.state.as_ref().unwrap()
        }

        fn statuses(&self) -> Vec<GroupStatus> {
            self.state().groups.iter().map(|g| g.status).collect()
        }

        fn group(&self, name: &str) -> &GroupState {
            self.state().group(name).unwrap()
        }

        fn applied(&self, group: Option<usize>) -> Applied {
            enforcement_for(self.state(), group, self.final_enforcement)
        }

        /// Steps until nothing changes for `min` + a minute, one minute at a time.
        fn settle(&mut self, minutes: i64) {
            for _ in 0..minutes {
                self.step(60);
            }
        }
    }

    fn status_changes(
        transitions: &[Transition],
    ) -> Vec<(String, Option<GroupStatus>, GroupStatus)> {
        transitions
            .iter()
            .filter_map(|t| match t.to {
                Change::Status(to) => Some((t.group.clone().unwrap(), t.from, to)),
                Change::Event(_) => None,
            })
            .collect()
    }

    fn events(transitions: &[Transition]) -> Vec<(Option<String>, Event)> {
        transitions
            .iter()
            .filter_map(|t| match t.to {
                Change::Event(e) => Some((t.group.clone(), e)),
                Change::Status(_) => None,
            })
            .collect()
    }

    fn applied(version: Which, enforcement: Enforcement) -> Applied {
        Applied {
            version,
            enforcement,
        }
    }

    fn labels(pairs: &[(&str, &str)]) -> Labels {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn a_new_policy_starts_with_the_first_group() {
        let mut sim = Sim::new(SPEC);
        let t = sim.step(0);
        assert_eq!(events(&t), vec![(None, Event::Started)]);
        assert_eq!(
            status_changes(&t),
            vec![("canary".to_string(), Some(ToApply), Progressing)]
        );
        assert_eq!(sim.statuses(), [Progressing, ToApply, ToApply]);
        let s = sim.state();
        assert_eq!(s.version, "v1");
        assert_eq!(s.previous_enforcement, None);
        assert_eq!(s.previous_version, None);
        assert_eq!(s.group("canary").unwrap().since, sim.now);
        assert_eq!(
            s.group("canary").unwrap().reason,
            "first group of version v1"
        );
        assert!(
            t[0].reason.contains("the policy's first rollout"),
            "{}",
            t[0].reason
        );
        assert_eq!(s.group("canary").unwrap().within_since, None);
        // A new policy: groups not reached yet run it in dryrun, as do namespaces in no group.
        assert_eq!(
            sim.applied(Some(0)),
            applied(Which::Current, Enforcement::Warn)
        );
        assert_eq!(
            sim.applied(Some(1)),
            applied(Which::Current, Enforcement::Dryrun)
        );
        assert_eq!(
            sim.applied(None),
            applied(Which::Current, Enforcement::Dryrun)
        );
    }

    #[test]
    fn groups_succeed_in_order_through_an_approval_to_completion() {
        let mut sim = Sim::new(SPEC);
        sim.set("canary", 10, 0, 0);
        sim.step(0); // canary starts; judged from the next step on
        sim.step(60);
        let start = sim.now;
        assert_eq!(sim.group("canary").within_since, Some(start));
        sim.step(599);
        assert_eq!(
            sim.statuses(),
            [Progressing, ToApply, ToApply],
            "9m59s is not 10m"
        );
        let t = sim.step(1);
        assert_eq!(
            status_changes(&t),
            vec![
                ("canary".to_string(), Some(Progressing), Succeeded),
                ("standard".to_string(), Some(ToApply), Progressing),
            ]
        );
        assert_eq!(sim.group("canary").since, sim.now);
        assert!(sim
            .group("canary")
            .reason
            .contains("within the limit of 1 for 10m"));
        assert_eq!(
            sim.applied(Some(0)),
            applied(Which::Current, Enforcement::Deny)
        );
        assert_eq!(
            sim.applied(Some(1)),
            applied(Which::Current, Enforcement::Warn)
        );

        sim.step(60);
        // standard succeeds, and it is critical's turn: it waits for approval, saying so once.
        let t = sim.step(600);
        assert_eq!(
            status_changes(&t),
            vec![("standard".to_string(), Some(Progressing), Succeeded)]
        );
        assert_eq!(sim.statuses(), [Succeeded, Succeeded, ToApply]);
        assert_eq!(sim.group("critical").reason, AWAITING_APPROVAL);
        assert_eq!(
            events(&t),
            vec![(Some("critical".to_string()), Event::AwaitingApproval)]
        );
        assert!(sim.step(0).is_empty());
        let t = sim.step(3600 * 5);
        assert!(
            t.is_empty(),
            "no deadline runs before a group starts: {t:?}"
        );
        assert_eq!(
            sim.applied(Some(2)),
            applied(Which::Current, Enforcement::Dryrun)
        );

        let t = sim.step_with(60, vec![Command::Approve("critical".to_string())]);
        assert_eq!(
            events(&t),
            vec![(Some("critical".to_string()), Event::Approved)]
        );
        assert_eq!(
            status_changes(&t),
            vec![("critical".to_string(), Some(ToApply), Progressing)]
        );
        assert!(sim.group("critical").approved);
        sim.step(60);
        let t = sim.step(600);
        assert_eq!(sim.statuses(), [Succeeded, Succeeded, Succeeded]);
        assert_eq!(events(&t), vec![(None, Event::Completed)]);
        assert!(sim.state().is_complete());
        for g in 0..3 {
            assert_eq!(
                sim.applied(Some(g)),
                applied(Which::Current, Enforcement::Deny)
            );
        }
        // Nothing more happens.
        assert!(sim.step(3600).is_empty());
    }

    #[test]
    fn failures_over_the_limit_reset_the_success_clock() {
        let mut sim = Sim::new(SPEC); // maxFailures: 1
        sim.set("canary", 100, 1, 0);
        sim.step(0);
        sim.step(60);
        assert_eq!(
            sim.group("canary").within_since,
            Some(sim.now),
            "1 failure is within 1"
        );
        sim.step(300);
        // Violations and would-be denials add up: 1 + 1 > 1.
        sim.set("canary", 100, 1, 1);
        sim.step(60);
        assert_eq!(sim.group("canary").within_since, None);
        assert_eq!(sim.group("canary").failures, 2);
        assert!(sim.group("canary").reason.contains("over the limit of 1"));
        sim.step(300); // would have been 10m since the first in-limit step
        assert_eq!(sim.statuses()[0], Progressing);
        sim.set("canary", 100, 0, 0);
        sim.step(60);
        let back = sim.now;
        assert_eq!(sim.group("canary").within_since, Some(back));
        sim.step(599);
        assert_eq!(sim.statuses()[0], Progressing);
        sim.step(1);
        assert_eq!(sim.statuses()[0], Succeeded);
    }

    #[test]
    fn a_deadline_times_the_group_out_and_stops_the_rollout() {
        let mut sim = Sim::new(SPEC);
        sim.set("canary", 100, 5, 0);
        sim.step(0);
        let started = sim.now;
        sim.step(3599);
        assert_eq!(sim.statuses()[0], Progressing);
        let t = sim.step(1);
        assert_eq!(sim.now - started, 3600);
        assert_eq!(
            status_changes(&t),
            vec![("canary".to_string(), Some(Progressing), TimeOut)]
        );
        let reason = &sim.group("canary").reason;
        assert!(
            reason.contains("progress deadline of 1h") && reason.contains("5 failures"),
            "{reason}"
        );
        // Even once the failures are gone, the rollout stays stopped there.
        sim.set("canary", 100, 0, 0);
        sim.settle(120);
        assert_eq!(sim.statuses(), [TimeOut, ToApply, ToApply]);
        // TimeOut keeps warning; the groups behind stay where they were.
        assert_eq!(
            sim.applied(Some(0)),
            applied(Which::Current, Enforcement::Warn)
        );
        assert_eq!(
            sim.applied(Some(1)),
            applied(Which::Current, Enforcement::Dryrun)
        );
        // Resume does not re-arm a timed-out group.
        sim.step_with(60, vec![Command::Resume]);
        assert_eq!(sim.statuses(), [TimeOut, ToApply, ToApply]);
    }

    #[test]
    fn percentage_limits_decide_success() {
        let text = SPEC.replace("maxFailures: 1", "maxFailures: 2%");
        // (objects, failures, succeeds)
        let cases = [
            (0, 0, true),
            (0, 1, false),
            (49, 0, true),
            (49, 1, false),
            (50, 1, true),
            (50, 2, false),
            (100, 2, true),
            (100, 3, false),
        ];
        for (objects, failures, succeeds) in cases {
            let mut sim = Sim::new(&text);
            sim.set("canary", objects, failures, 0);
            sim.step(0);
            sim.settle(15);
            let want = if succeeds { Succeeded } else { Progressing };
            assert_eq!(
                sim.statuses()[0],
                want,
                "{failures} failures in {objects} objects"
            );
        }
    }

    #[test]
    fn count_limits_decide_success() {
        let text = SPEC.replace("maxFailures: 1", "maxFailures: 3");
        let cases = [
            (0, 3, true),
            (1000, 3, true),
            (1000, 4, false),
            (5, 0, true),
        ];
        for (objects, failures, succeeds) in cases {
            let mut sim = Sim::new(&text);
            sim.set("canary", objects, 0, failures);
            sim.step(0);
            sim.settle(15);
            let want = if succeeds { Succeeded } else { Progressing };
            assert_eq!(
                sim.statuses()[0],
                want,
                "{failures} failures in {objects} objects"
            );
        }
        // The default is zero: any failure holds a group back.
        let mut sim = Sim::new(&SPEC.replace("maxFailures: 1\n", ""));
        sim.set("canary", 1000, 1, 0);
        sim.step(0);
        sim.settle(15);
        assert_eq!(sim.statuses()[0], Progressing);
    }

    #[test]
    fn an_empty_group_still_waits_min_success_time() {
        let mut sim = Sim::new(SPEC);
        sim.set("canary", 0, 0, 0);
        sim.step(0);
        sim.step(1);
        sim.step(598);
        assert_eq!(sim.statuses()[0], Progressing);
        sim.step(2);
        assert_eq!(sim.statuses()[0], Succeeded);
        assert_eq!(sim.group("canary").objects, 0);
    }

    #[test]
    fn a_group_without_observations_holds_its_clock_but_not_its_deadline() {
        let mut sim = Sim::new(SPEC);
        sim.groups.remove("canary");
        sim.step(0);
        sim.settle(30);
        assert_eq!(sim.statuses()[0], Progressing);
        assert_eq!(sim.group("canary").within_since, None);
        sim.settle(30);
        assert_eq!(sim.statuses()[0], TimeOut);
        // And numbers last seen are kept when a step has none.
        let mut sim = Sim::new(SPEC);
        sim.set("canary", 7, 1, 0);
        sim.step(0);
        sim.groups.remove("canary");
        sim.step(60);
        assert_eq!(
            (sim.group("canary").objects, sim.group("canary").failures),
            (7, 1)
        );
        assert_eq!(sim.group("canary").within_since, None);
    }

    #[test]
    fn approval_gates_a_group_until_approved() {
        let text = SPEC.replace(
            "  - name: canary\n",
            "  - name: canary\n    approval: required\n",
        );
        let mut sim = Sim::new(&text);
        let t = sim.step(0);
        assert_eq!(sim.statuses(), [ToApply, ToApply, ToApply]);
        assert_eq!(sim.group("canary").reason, AWAITING_APPROVAL);
        assert_eq!(
            events(&t),
            vec![
                (None, Event::Started),
                (Some("canary".to_string()), Event::AwaitingApproval)
            ]
        );
        assert!(sim.step(60).is_empty(), "the wait is announced once");
        // An unknown group is reported, not approved.
        let t = sim.step_with(60, vec![Command::Approve("canery".to_string())]);
        assert_eq!(
            events(&t),
            vec![(Some("canery".to_string()), Event::Ignored)]
        );
        assert_eq!(sim.statuses()[0], ToApply);
        let t = sim.step_with(60, vec![Command::Approve("canary".to_string())]);
        assert_eq!(
            status_changes(&t),
            vec![("canary".to_string(), Some(ToApply), Progressing)]
        );
        assert_eq!(sim.group("canary").since, sim.now);
        assert_eq!(
            sim.group("canary").reason,
            "approved; first group of version v1"
        );
        // Approving again changes nothing.
        assert!(sim
            .step_with(60, vec![Command::Approve("canary".to_string())])
            .is_empty());
    }

    #[test]
    fn an_approval_given_early_is_kept_until_the_group_s_turn() {
        let mut sim = Sim::new(SPEC);
        sim.step_with(0, vec![Command::Approve("critical".to_string())]);
        assert!(sim.group("critical").approved);
        assert_eq!(sim.statuses(), [Progressing, ToApply, ToApply]);
        sim.settle(40);
        assert_eq!(sim.statuses(), [Succeeded, Succeeded, Succeeded]);
    }

    #[test]
    fn a_version_change_restarts_from_the_first_group() {
        // Mid-rollout of a new policy: nothing was enforced before, and still is not.
        let mut sim = Sim::new(SPEC);
        sim.step(0);
        sim.settle(12);
        assert_eq!(sim.statuses(), [Succeeded, Progressing, ToApply]);
        sim.version = "v2".to_string();
        let t = sim.step(60);
        assert_eq!(events(&t), vec![(None, Event::Started)]);
        assert!(
            t[0].reason
                .contains("version v2 (replaces v1): groups not reached yet run it in dryrun"),
            "{}",
            t[0].reason
        );
        assert_eq!(
            status_changes(&t),
            vec![
                ("canary".to_string(), Some(Succeeded), ToApply),
                ("standard".to_string(), Some(Progressing), ToApply),
                ("canary".to_string(), Some(ToApply), Progressing),
            ]
        );
        assert_eq!(sim.statuses(), [Progressing, ToApply, ToApply]);
        assert_eq!(sim.state().version, "v2");
        assert_eq!(sim.state().previous_enforcement, None);
        assert_eq!(sim.state().previous_version, None);
        assert_eq!(
            sim.applied(Some(1)),
            applied(Which::Current, Enforcement::Dryrun)
        );

        // A finished rollout: the previous version stays in force, at its final enforcement,
        // until each group's turn. The final enforcement is the one the finished rollout had,
        // not one changed along with the version.
        sim.step_with(0, vec![Command::Approve("critical".to_string())]);
        sim.settle(40);
        assert!(sim.state().is_complete());
        sim.final_enforcement = Enforcement::Warn;
        sim.step(60);
        sim.version = "v3".to_string();
        sim.final_enforcement = Enforcement::Deny;
        let t = sim.step(60);
        assert!(
            t[0].reason.contains("stay on version v2 at warn"),
            "{}",
            t[0].reason
        );
        assert_eq!(sim.statuses(), [Progressing, ToApply, ToApply]);
        assert_eq!(sim.state().previous_version.as_deref(), Some("v2"));
        assert_eq!(sim.state().previous_enforcement, Some(Enforcement::Warn));
        assert_eq!(
            sim.applied(Some(0)),
            applied(Which::Current, Enforcement::Warn)
        );
        assert_eq!(
            sim.applied(Some(1)),
            applied(Which::Previous, Enforcement::Warn)
        );
        assert_eq!(
            sim.applied(None),
            applied(Which::Previous, Enforcement::Warn)
        );
        // Approvals belonged to v2.
        assert!(!sim.group("critical").approved);

        // Mixed: v3 replaced mid-rollout keeps v2 as the previous version.
        sim.settle(12);
        assert_eq!(sim.statuses(), [Succeeded, Progressing, ToApply]);
        sim.version = "v4".to_string();
        sim.step(60);
        assert_eq!(sim.state().previous_version.as_deref(), Some("v2"));
        assert_eq!(sim.state().previous_enforcement, Some(Enforcement::Warn));
        assert_eq!(sim.statuses(), [Progressing, ToApply, ToApply]);
    }

    #[test]
    fn a_namespace_moving_between_groups_gets_its_new_group_s_state() {
        let mut sim = Sim::new(SPEC);
        sim.step(0);
        sim.settle(12);
        assert_eq!(sim.statuses(), [Succeeded, Progressing, ToApply]);
        let rollout = sim.spec.clone();
        // (labels, group, applied)
        let cases = [
            (
                labels(&[("risk", "low")]),
                Some(0),
                applied(Which::Current, Enforcement::Deny),
            ),
            (
                labels(&[("risk", "medium")]),
                Some(1),
                applied(Which::Current, Enforcement::Warn),
            ),
            (
                labels(&[("risk", "high")]),
                Some(2),
                applied(Which::Current, Enforcement::Dryrun),
            ),
            (
                labels(&[]),
                Some(2),
                applied(Which::Current, Enforcement::Dryrun),
            ),
        ];
        for (l, group, want) in cases {
            assert_eq!(rollout.group_of(&l), group, "{l:?}");
            assert_eq!(sim.applied(rollout.group_of(&l)), want, "{l:?}");
        }
        // Relabelled from medium to low: a late joiner of a passed group is enforced at once;
        // from low to high it drops back to the rollout's previous state.
        let mut ns = labels(&[("risk", "medium")]);
        assert_eq!(
            sim.applied(rollout.group_of(&ns)).enforcement,
            Enforcement::Warn
        );
        ns.insert("risk".to_string(), "low".to_string());
        assert_eq!(
            sim.applied(rollout.group_of(&ns)).enforcement,
            Enforcement::Deny
        );
        ns.insert("risk".to_string(), "high".to_string());
        assert_eq!(
            sim.applied(rollout.group_of(&ns)).enforcement,
            Enforcement::Dryrun
        );
        // No catch-all: a namespace in no group is treated like a group not reached yet.
        let no_catch_all = spec(&SPEC.replace("  - name: critical\n    approval: required\n", ""));
        assert_eq!(no_catch_all.group_of(&labels(&[("risk", "high")])), None);
    }

    #[test]
    fn pause_freezes_the_rollout_and_its_clocks() {
        let mut sim = Sim::new(SPEC);
        sim.step(0);
        sim.step(60);
        let within = sim.now;
        sim.step(300); // 5 of 10 minutes in the limit
        let since = sim.group("canary").since;
        let t = sim.step_with(0, vec![Command::Pause]);
        assert_eq!(events(&t), vec![(None, Event::Paused)]);
        assert!(sim.state().is_paused());
        // Past minSuccessTime and the deadline, nothing moves while paused.
        for _ in 0..120 {
            assert!(sim.step(60).is_empty());
        }
        assert_eq!(sim.statuses(), [Progressing, ToApply, ToApply]);
        let t = sim.step_with(0, vec![Command::Resume]);
        assert_eq!(events(&t), vec![(None, Event::Resumed)]);
        assert!(t[0].reason.contains("2h"), "{}", t[0].reason);
        // The clocks move forward by the 2h paused: 5 minutes of 10 are left.
        assert_eq!(sim.group("canary").since, since + 7200);
        assert_eq!(sim.group("canary").within_since, Some(within + 7200));
        assert_eq!(sim.statuses(), [Progressing, ToApply, ToApply]);
        sim.step(299);
        assert_eq!(sim.statuses()[0], Progressing);
        sim.step(1);
        assert_eq!(sim.statuses(), [Succeeded, Progressing, ToApply]);
    }

    #[test]
    fn failures_while_paused_reset_the_success_clock() {
        let mut sim = Sim::new(SPEC);
        sim.step(0);
        sim.step(60);
        sim.step_with(300, vec![Command::Pause]);
        sim.set("canary", 10, 2, 0);
        sim.step(60);
        assert_eq!(sim.group("canary").within_since, None);
        sim.set("canary", 10, 0, 0);
        sim.step(60);
        assert_eq!(
            sim.group("canary").within_since,
            None,
            "no clock starts while paused"
        );
        // The step that resumes judges the group: its clock starts there.
        sim.step_with(60, vec![Command::Resume]);
        let back = sim.now;
        assert_eq!(sim.group("canary").within_since, Some(back));
        sim.step(60);
        sim.step(539);
        assert_eq!(sim.statuses()[0], Progressing);
        sim.step(1);
        assert_eq!(sim.statuses()[0], Succeeded);
    }

    #[test]
    fn a_new_version_while_paused_waits_for_resume() {
        let mut sim = Sim::new(SPEC);
        sim.step(0);
        sim.settle(12);
        sim.step_with(0, vec![Command::Pause]);
        sim.version = "v2".to_string();
        let t = sim.step(60);
        assert_eq!(events(&t), vec![(None, Event::Started)]);
        assert!(sim.state().is_paused());
        assert_eq!(sim.statuses(), [ToApply, ToApply, ToApply]);
        assert_eq!(
            sim.applied(Some(0)),
            applied(Which::Current, Enforcement::Dryrun)
        );
        sim.step_with(60, vec![Command::Resume]);
        assert_eq!(sim.statuses(), [Progressing, ToApply, ToApply]);
    }

    #[test]
    fn the_safety_valve_fails_an_enforcing_group_and_resume_re_arms_it() {
        let mut sim = Sim::new(SPEC); // maxDenialsPerMinute: 30
        sim.step(0);
        sim.settle(12);
        assert_eq!(sim.statuses(), [Succeeded, Progressing, ToApply]);
        sim.groups.get_mut("canary").unwrap().denials_last_minute = 30;
        assert!(sim.step(60).is_empty(), "30 is not over 30");
        sim.groups.get_mut("canary").unwrap().denials_last_minute = 31;
        let t = sim.step(60);
        assert_eq!(
            status_changes(&t),
            vec![("canary".to_string(), Some(Succeeded), Failed)]
        );
        let reason = &sim.group("canary").reason;
        assert!(
            reason.contains("31 denials in the last minute, over maxDenialsPerMinute 30"),
            "{reason}"
        );
        assert_eq!(
            sim.applied(Some(0)),
            applied(Which::Current, Enforcement::Warn)
        );
        // standard goes on to succeed on its own evidence, but critical does not start while
        // canary is Failed.
        sim.step_with(0, vec![Command::Approve("critical".to_string())]);
        sim.settle(15);
        assert_eq!(sim.statuses(), [Failed, Succeeded, ToApply]);
        // Resume re-arms canary; once it succeeds again the rollout goes on.
        sim.groups.get_mut("canary").unwrap().denials_last_minute = 0;
        let t = sim.step_with(60, vec![Command::Resume]);
        assert_eq!(
            status_changes(&t),
            vec![("canary".to_string(), Some(Failed), Progressing)]
        );
        assert_eq!(sim.group("canary").since, sim.now);
        sim.settle(12);
        assert_eq!(sim.statuses(), [Succeeded, Succeeded, Progressing]);
        // Without maxDenialsPerMinute there is no valve.
        let mut sim = Sim::new(&SPEC.replace("maxDenialsPerMinute: 30\n", ""));
        sim.step(0);
        sim.settle(12);
        sim.groups.get_mut("canary").unwrap().denials_last_minute = 1000;
        sim.step(60);
        assert_eq!(sim.statuses()[0], Succeeded);
    }

    #[test]
    fn spec_group_changes_map_by_name() {
        let mut sim = Sim::new(SPEC);
        sim.step(0);
        sim.settle(12);
        assert_eq!(sim.statuses(), [Succeeded, Progressing, ToApply]);
        let standard = sim.group("standard").clone();
        // `standard` renamed to `medium`, and a `pilot` group added first.
        sim.spec = spec(&SPEC.replace("name: standard", "name: medium").replace(
            "groups:\n",
            "groups:\n  - name: pilot\n    namespaceSelector: {matchLabels: {pilot: 'yes'}}\n",
        ));
        sim.set("pilot", 0, 0, 0);
        sim.set("medium", 0, 0, 0);
        let t = sim.step(60);
        let names: Vec<&str> = sim.state().groups.iter().map(|g| g.name.as_str()).collect();
        assert_eq!(names, ["pilot", "canary", "medium", "critical"]);
        assert_eq!(
            status_changes(&t),
            vec![
                ("pilot".to_string(), None, ToApply),
                ("medium".to_string(), None, ToApply),
                ("pilot".to_string(), Some(ToApply), Progressing),
            ]
        );
        assert_eq!(
            events(&t),
            vec![(Some("standard".to_string()), Event::Removed)]
        );
        assert_eq!(sim.statuses(), [Progressing, Succeeded, ToApply, ToApply]);
        assert_eq!(sim.state().version, "v1", "a spec change is no new version");
        // canary kept its state, and indices follow the new spec.
        assert_eq!(
            sim.applied(Some(1)),
            applied(Which::Current, Enforcement::Deny)
        );
        assert_eq!(
            sim.applied(Some(2)),
            applied(Which::Current, Enforcement::Dryrun)
        );
        // medium waits for pilot, then runs its own full minSuccessTime.
        sim.settle(12);
        assert_eq!(sim.statuses(), [Succeeded, Succeeded, Progressing, ToApply]);
        assert_ne!(sim.group("medium").since, standard.since);
        // Dropping a group keeps the others.
        sim.spec = spec(&SPEC.replace(
            "  - name: standard\n    namespaceSelector: {matchExpressions: [{key: risk, operator: In, values: [medium]}]}\n",
            "",
        ));
        let t = sim.step(60);
        assert_eq!(
            events(&t)[..2],
            [
                (Some("pilot".to_string()), Event::Removed),
                (Some("medium".to_string()), Event::Removed)
            ]
        );
        assert_eq!(sim.statuses()[0], Succeeded);
        assert_eq!(sim.statuses()[1], ToApply); // critical, awaiting approval
        assert_eq!(sim.group("critical").reason, AWAITING_APPROVAL);
    }

    #[test]
    fn enforcement_for_table() {
        use Enforcement::*;
        let group = |status| GroupState::new("g", status, 0, "");
        let state = |status: GroupStatus, previous: Option<Enforcement>| RolloutState {
            version: "v2".to_string(),
            previous_version: previous.map(|_| "v1".to_string()),
            previous_enforcement: previous,
            final_enforcement: Deny,
            paused_since: None,
            groups: vec![group(status)],
        };
        // (status, previous enforcement, final enforcement, group, answer)
        let cases = [
            (Succeeded, None, Deny, Some(0), (Which::Current, Deny)),
            (Succeeded, Some(Warn), Deny, Some(0), (Which::Current, Deny)),
            (Succeeded, None, Warn, Some(0), (Which::Current, Warn)),
            (Progressing, None, Deny, Some(0), (Which::Current, Warn)),
            (Progressing, None, Dryrun, Some(0), (Which::Current, Dryrun)),
            (Failed, Some(Deny), Deny, Some(0), (Which::Current, Warn)),
            (TimeOut, Some(Deny), Deny, Some(0), (Which::Current, Warn)),
            (TimeOut, None, Warn, Some(0), (Which::Current, Warn)),
            (ToApply, None, Deny, Some(0), (Which::Current, Dryrun)),
            (ToApply, Some(Deny), Deny, Some(0), (Which::Previous, Deny)),
            (ToApply, Some(Warn), Deny, Some(0), (Which::Previous, Warn)),
            // Never stricter than the final enforcement (a pool that overrides it to warn).
            (ToApply, Some(Deny), Warn, Some(0), (Which::Previous, Warn)),
            (Succeeded, Some(Deny), Deny, None, (Which::Previous, Deny)),
            (Succeeded, None, Deny, None, (Which::Current, Dryrun)),
            // An index past the state's groups (a spec not stepped yet) is no group.
            (
                Succeeded,
                Some(Warn),
                Deny,
                Some(5),
                (Which::Previous, Warn),
            ),
        ];
        for (status, previous, final_enforcement, g, (version, enforcement)) in cases {
            assert_eq!(
                enforcement_for(&state(status, previous), g, final_enforcement),
                applied(version, enforcement),
                "{status:?} previous {previous:?} final {final_enforcement:?} group {g:?}"
            );
        }
    }

    #[test]
    fn state_and_transitions_persist_as_camel_case_json() {
        let mut sim = Sim::new(SPEC);
        sim.set("canary", 3, 0, 0);
        sim.step(0);
        sim.step(60);
        let t = sim.step_with(60, vec![Command::Pause]);
        let json = serde_json::to_value(sim.state()).unwrap();
        assert_eq!(json["previousEnforcement"], serde_json::Value::Null);
        assert_eq!(json["finalEnforcement"], "deny");
        assert_eq!(json["pausedSince"], sim.now);
        assert_eq!(json["groups"][0]["status"], "Progressing");
        assert_eq!(json["groups"][0]["withinSince"], sim.now - 60);
        assert_eq!(json["groups"][1]["status"], "ToApply");
        let back: RolloutState = serde_json::from_value(json).unwrap();
        assert_eq!(&back, sim.state());
        let event = serde_json::to_value(&t[0]).unwrap();
        assert_eq!(event["to"], serde_json::json!({"Event": "Paused"}));
        let obs: Observations = serde_json::from_value(serde_json::json!({
            "version": "v1",
            "groups": {"canary": {"objects": 2, "violations": 1, "wouldDeny": 0, "denialsLastMinute": 0}},
            "commands": [{"approve": "critical"}, "pause", "resume"]
        }))
        .unwrap();
        assert_eq!(
            obs.commands,
            [
                Command::Approve("critical".to_string()),
                Command::Pause,
                Command::Resume
            ]
        );
        assert_eq!(obs.groups["canary"].violations, 1);
    }
}
