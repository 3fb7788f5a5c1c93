//! Which policies apply to one object, and running them. [`Plan::of`] resolves, from the
//! decision context, every policy that applies to the object — with the parameters, enforcement
//! and rollout version its namespace gets, and what it depends on — in the order they run;
//! [`Plan::run`] evaluates them with the bare runner ([`crate::policy::PolicySet::runner`]).

use std::time::Duration;

use serde_json::Value;

use crate::config::parameters::Parameters;
use crate::config::{Config, Enforcement};
use crate::exceptions::{ExceptionSet, PolicyException, Target};
use crate::labels::Labels;
use crate::policy::dependencies::{self, Need, State};
use crate::policy::{Evaluation, Outcome, Pending, Policy, PolicySet};
use crate::rollout::view::RolloutView;
use crate::rollout_mark::RolloutMark;

/// An object as the policies judge it.
#[derive(Debug, Clone, Copy)]
pub struct Subject<'a> {
    /// The [`crate::policy::input::document`] of its pod spec; `None` for an object without
    /// one (only the Gatekeeper constraints whose match selects it apply: SIT policies judge
    /// pod specs).
    pub document: Option<&'a Value>,
    /// The AdmissionRequest, for the policies that read `input.review` and the constraints'
    /// matches.
    pub review: Option<&'a Value>,
    /// Its namespace's pool (the one the placement policies chose, where they choose).
    pub pool: Option<&'a str>,
    /// Its namespace's labels (rollout groups and constraint namespace selectors read them).
    pub labels: Option<&'a Labels>,
    /// The placement decision's state, for policies that depend on `placement`.
    pub placement: State,
    /// The object as PolicyExceptions match it, and the time they are live against; with
    /// either `None` no exception counts.
    pub target: Option<Target<'a>>,
    pub now: Option<i64>,
}

/// One policy of a plan, as it applies to the object.
struct Step<'r> {
    /// The policy's index in the loaded set (dependencies name policies by index).
    index: usize,
    policy: &'r Policy,
    parameters: &'r Parameters,
    enforcement: Enforcement,
    rollout: Option<RolloutMark>,
    needs: &'r [Need],
    ignore_pending: bool,
    /// The live PolicyException that excepts the object from this policy.
    exception: Option<&'r PolicyException>,
}

/// The policies that apply to one object, in the order they run.
pub struct Plan<'r> {
    steps: Vec<Step<'r>>,
    /// The review the policies read: the subject's, with a `namespaceObject` made from its
    /// namespace's labels when Gatekeeper constraints are loaded and it has none.
    review: Option<Value>,
    /// Whether some policy has dependencies: outcomes then come back to name order.
    dependent: bool,
    /// How many policies are loaded (the dependency states are indexed by them).
    loaded: usize,
}

impl<'r> Plan<'r> {
    /// Every loaded policy that applies to `subject`: the SIT policies when it has a pod spec
    /// and the config gives them parameters for its pool (at cluster or pool level), the
    /// constraints whose match selects it. A policy under a rollout gets the version and
    /// enforcement its rollout gives the namespace's group ([`RolloutView::resolve`]); one a
    /// live PolicyException matches for the object is marked with it.
    pub(crate) fn of(
        policies: &'r PolicySet,
        config: &'r Config,
        rollouts: &'r RolloutView,
        exceptions: &'r ExceptionSet,
        subject: &Subject,
    ) -> Plan<'r> {
        let excepting = subject
            .target
            .zip(subject.now)
            .filter(|_| !exceptions.is_empty());
        // Constraints read the namespace as Gatekeeper gives it, `namespaceObject`: made here
        // from the namespace's labels when the review has none (only when constraints are
        // loaded).
        let review = subject
            .review
            .filter(|_| policies.has_constraints())
            .and_then(|r| crate::namespace_object::with_namespace_object(r, subject.labels));
        let matched = review.as_ref().or(subject.review);
        let order = policies.plan();
        let dependent = order.has_dependencies();
        let mut steps = Vec::new();
        for &index in &order.order {
            let loaded = policies.at(index);
            if !loaded.applies(subject.document.is_some(), matched) {
                continue;
            }
            let version = policies.version(&loaded.name);
            let Some(settings) =
                rollouts.resolve(loaded, version, config, subject.pool, subject.labels)
            else {
                continue;
            };
            steps.push(Step {
                index,
                policy: settings.policy,
                parameters: settings.parameters,
                enforcement: settings.enforcement,
                rollout: settings.rollout,
                needs: if dependent { &order.needs[index] } else { &[] },
                ignore_pending: dependent && order.ignore_pending[index],
                exception: excepting
                    .and_then(|(target, now)| exceptions.find(&loaded.name, &target, now)),
            });
        }
        Plan {
            steps,
            review,
            dependent,
            loaded: policies.len(),
        }
    }

    /// The policies of the plan, by name, in the order they run.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.steps.iter().map(|s| s.policy.name.as_str())
    }

    /// Runs the plan on `subject` (the one it was made for) with `policies`' runner, each
    /// evaluation within `limit`. A policy whose dependency is not in the required compliance
    /// — given the policies run before it and the subject's placement state — is Pending: not
    /// run. Outcomes come in policy name order.
    pub(crate) fn run(
        self,
        policies: &PolicySet,
        subject: &Subject,
        limit: Duration,
    ) -> Vec<Outcome> {
        let Plan {
            steps,
            review,
            dependent,
            loaded,
        } = self;
        let review = review.as_ref().or(subject.review);
        let no_pod_spec = Value::Object(Default::default());
        let mut runner = policies.runner(subject.document.unwrap_or(&no_pod_spec), review);
        // What each policy was for this object, for the ones after it: only when some policy
        // has dependencies.
        let mut states = if dependent {
            vec![State::NotApplied; loaded]
        } else {
            Vec::new()
        };
        let mut outcomes = Vec::with_capacity(steps.len());
        for step in steps {
            let unmet = if dependent {
                dependencies::unmet(step.needs, &states, subject.placement)
            } else {
                None
            };
            let result = match unmet {
                Some(unmet) => Evaluation::Pending(Pending {
                    unmet,
                    ignore_pending: step.ignore_pending,
                }),
                None => Evaluation::Ran(runner.run(step.policy, step.parameters, limit)),
            };
            if dependent {
                // What an exception allows is Compliant to the policies that depend on it (the
                // outcome says which exception).
                states[step.index] = match (&result, step.exception) {
                    (Evaluation::Ran(Ok(_)), Some(_)) => State::Compliant,
                    _ => result.state(),
                };
            }
            outcomes.push(Outcome {
                policy: step.policy.name.clone(),
                enforcement: step.enforcement,
                result,
                rollout: step.rollout,
                exception: step.exception.map(PolicyException::mark),
            });
        }
        if dependent {
            // Back to name order (the names are unique).
            outcomes.sort_by(|a, b| a.policy.cmp(&b.policy));
        }
        outcomes
    }
}
