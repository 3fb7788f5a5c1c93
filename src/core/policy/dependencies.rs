//! Policy dependencies at evaluation. A policy may name other policies, or the built-in pool
//! placement check, that must be in a given compliance for the same object before it runs; when
//! one is not, the policy is Pending for that object: not evaluated, not enforced.
//!
//! Pure. [`Plan::new`] turns the config's `dependencies` into an evaluation order once, when the
//! rules are loaded; per object, [`unmet`] tells whether a policy's dependencies hold, given the
//! [`State`] of the policies before it in that order and of placement.

use std::fmt;

use anyhow::{bail, Result};

use crate::config::dependencies::{cycle_error, order};
use crate::config::dependencies::{Compliance, PLACEMENT};
use crate::config::Config;
use crate::node_selector::Placement;

/// What a policy, or placement, was for one object, as the policies depending on it see it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    Compliant,
    NonCompliant,
    /// The policy could not be evaluated.
    Error,
    /// The policy's own dependencies were unmet.
    Pending,
    /// The policy has no parameters for the namespace's pool; placement: the namespace has no
    /// pool.
    NotApplied,
}

impl State {
    /// Whether a dependency requiring `required` holds. An error, a Pending dependency and one
    /// that does not apply never do, whichever compliance is required.
    pub fn meets(self, required: Compliance) -> bool {
        matches!(
            (self, required),
            (State::Compliant, Compliance::Compliant)
                | (State::NonCompliant, Compliance::NonCompliant)
        )
    }

    /// The state of an evaluated policy from its infringements (or its error).
    pub fn of<T>(result: &std::result::Result<Vec<T>, String>) -> State {
        match result {
            Ok(found) if found.is_empty() => State::Compliant,
            Ok(_) => State::NonCompliant,
            Err(_) => State::Error,
        }
    }

    /// The placement decision as a dependency: Compliant when the pod spec selects its
    /// namespace's pool, or is a workload template its pods get the selector from (a patch);
    /// NonCompliant for a conflicting or invalid selector, or a Pod without the pool's
    /// selector; not applied when the namespace has no pool (`None`).
    pub(crate) fn of_placement(placement: Option<&Placement>, is_pod: bool) -> State {
        match placement {
            None => State::NotApplied,
            Some(Placement::Satisfied) => State::Compliant,
            Some(Placement::Patch(_)) if !is_pod => State::Compliant,
            Some(Placement::Patch(_) | Placement::Conflict(_) | Placement::Invalid(_)) => {
                State::NonCompliant
            }
        }
    }
}

/// What a dependency names, resolved against the loaded policies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    Placement,
    /// The index of a loaded policy (policies are sorted by name).
    Policy(usize),
}

/// One dependency of a loaded policy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Need {
    pub target: Target,
    pub name: String,
    pub compliance: Compliance,
}

/// Why a policy is Pending: its first dependency (in the order the config lists them) that is
/// not in the required compliance, and what that dependency was.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unmet {
    pub dependency: String,
    pub required: Compliance,
    pub found: State,
}

impl fmt::Display for Unmet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = &self.dependency;
        let found = match self.found {
            State::Compliant => "is Compliant",
            State::NonCompliant => "is NonCompliant",
            State::Error => "could not be evaluated",
            State::Pending => "is Pending",
            State::NotApplied if name == PLACEMENT => "does not apply (the namespace has no pool)",
            State::NotApplied => "does not apply (no parameters for the namespace's pool)",
        };
        write!(
            f,
            "dependency {name} {found}, {} required",
            self.required.as_str()
        )
    }
}

/// The first of `needs` not met, given the states of the policies (by index) and of placement.
pub fn unmet(needs: &[Need], states: &[State], placement: State) -> Option<Unmet> {
    needs.iter().find_map(|need| {
        let found = match need.target {
            Target::Placement => placement,
            Target::Policy(i) => states.get(i).copied().unwrap_or(State::NotApplied),
        };
        (!found.meets(need.compliance)).then(|| Unmet {
            dependency: need.name.clone(),
            required: need.compliance,
            found,
        })
    })
}

/// The config's dependencies resolved against the loaded policies, and the order to evaluate
/// them in. Computed once per load ([`crate::ruleset::RuleSet::new`]).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Plan {
    /// Indices of the policies (sorted by name) in evaluation order.
    pub order: Vec<usize>,
    /// Each policy's dependencies, by index; empty when no policy has any.
    pub needs: Vec<Vec<Need>>,
    /// Each policy's `ignorePending`, by index; empty when no policy has dependencies.
    pub ignore_pending: Vec<bool>,
}

impl Plan {
    /// Name order, no dependencies: what policies compiled without a config run in.
    pub(crate) fn unordered(policies: usize) -> Plan {
        Plan {
            order: (0..policies).collect(),
            ..Plan::default()
        }
    }

    /// Whether some policy has dependencies (else every policy runs, in name order).
    pub fn has_dependencies(&self) -> bool {
        !self.needs.is_empty()
    }

    /// The plan for the loaded policies `names` (sorted) under `config`. A dependency naming
    /// neither a loaded policy nor `placement`, and a cycle, are errors naming them and their
    /// config path.
    pub fn new(names: &[&str], config: &Config) -> Result<Plan> {
        let index = |name: &str| names.binary_search(&name).ok();
        let mut needs: Vec<Vec<Need>> = vec![Vec::new(); names.len()];
        let mut ignore_pending = vec![false; names.len()];
        for (name, settings) in &config.policies {
            let Some(i) = index(name) else {
                continue; // check_against_policies names it
            };
            ignore_pending[i] = settings.ignore_pending.unwrap_or(false);
            for (k, dependency) in settings.dependencies.iter().flatten().enumerate() {
                let target = match index(&dependency.policy) {
                    Some(j) => Target::Policy(j),
                    None if dependency.policy == PLACEMENT => Target::Placement,
                    None => bail!(
                        "at `policies.{name}.dependencies[{k}].policy`: no policy named `{}` is loaded, and it is not `{PLACEMENT}` (loaded: {})",
                        dependency.policy,
                        names.join(", ")
                    ),
                };
                needs[i].push(Need {
                    target,
                    name: dependency.policy.clone(),
                    compliance: dependency.compliance,
                });
            }
        }
        if needs.iter().all(Vec::is_empty) {
            return Ok(Plan::unordered(names.len()));
        }
        let edges: Vec<Vec<usize>> = needs
            .iter()
            .map(|n| {
                n.iter()
                    .filter_map(|need| match need.target {
                        Target::Policy(j) => Some(j),
                        Target::Placement => None,
                    })
                    .collect()
            })
            .collect();
        let order = order(&edges).map_err(|cycle| {
            let cycle: Vec<&str> = cycle.iter().map(|&i| names[i]).collect();
            cycle_error(&cycle)
        })?;
        Ok(Plan {
            order,
            needs,
            ignore_pending,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn order_table() {
        // (edges: what each node depends on, the order or the cycle)
        type Case = (
            &'static str,
            Vec<Vec<usize>>,
            std::result::Result<Vec<usize>, Vec<usize>>,
        );
        let cases: Vec<Case> = vec![
            ("no nodes", vec![], Ok(vec![])),
            (
                "no edges: index order",
                vec![vec![], vec![], vec![]],
                Ok(vec![0, 1, 2]),
            ),
            (
                "a depends on c",
                vec![vec![2], vec![], vec![]],
                Ok(vec![1, 2, 0]),
            ),
            (
                "chain c <- b <- a",
                vec![vec![1], vec![2], vec![]],
                Ok(vec![2, 1, 0]),
            ),
            (
                "diamond: free nodes earliest first",
                vec![vec![1, 2], vec![3], vec![3], vec![]],
                Ok(vec![3, 1, 2, 0]),
            ),
            (
                "a dependency listed twice",
                vec![vec![1, 1], vec![]],
                Ok(vec![1, 0]),
            ),
            ("self", vec![vec![], vec![1]], Err(vec![1, 1])),
            ("two", vec![vec![1], vec![0]], Err(vec![0, 1, 0])),
            (
                "three, behind a free node and a waiting one",
                vec![vec![], vec![2], vec![3], vec![1], vec![1]],
                Err(vec![1, 2, 3, 1]),
            ),
            (
                "two cycles: the one through the smallest node",
                vec![vec![], vec![2], vec![1], vec![4], vec![3]],
                Err(vec![1, 2, 1]),
            ),
        ];
        for (name, edges, want) in cases {
            assert_eq!(order(&edges), want, "{name}");
        }
    }

    #[test]
    fn order_puts_every_node_after_its_dependencies() {
        // Every graph on 4 nodes whose edges go to larger nodes only (so it has no cycle),
        // relabelled by reversing: dependencies then point both ways.
        let pairs: Vec<(usize, usize)> = (0..4)
            .flat_map(|a| (a + 1..4).map(move |b| (a, b)))
            .collect();
        for mask in 0..(1u32 << pairs.len()) {
            let mut edges = vec![Vec::new(); 4];
            for (bit, &(a, b)) in pairs.iter().enumerate() {
                if mask & (1 << bit) != 0 {
                    edges[3 - a].push(3 - b);
                }
            }
            let got = order(&edges).unwrap();
            let at = |i: usize| got.iter().position(|&x| x == i).unwrap();
            for (i, deps) in edges.iter().enumerate() {
                for &d in deps {
                    assert!(at(d) < at(i), "{edges:?}: {got:?}");
                }
            }
        }
    }

    #[test]
    fn meets_table() {
        use Compliance::{Compliant as C, NonCompliant as N};
        // (state, meets Compliant, meets NonCompliant)
        let cases = [
            (State::Compliant, true, false),
            (State::NonCompliant, false, true),
            (State::Error, false, false),
            (State::Pending, false, false),
            (State::NotApplied, false, false),
        ];
        for (state, c, n) in cases {
            assert_eq!((state.meets(C), state.meets(N)), (c, n), "{state:?}");
        }
        assert_eq!(State::of::<String>(&Ok(vec![])), State::Compliant);
        assert_eq!(State::of(&Ok(vec!["x".to_string()])), State::NonCompliant);
        assert_eq!(State::of::<String>(&Err("boom".into())), State::Error);
    }

    #[test]
    fn placement_state_table() {
        let patch = Placement::Patch(json_patch::Patch(Vec::new()));
        let cases = [
            (None, true, State::NotApplied),
            (None, false, State::NotApplied),
            (Some(Placement::Satisfied), true, State::Compliant),
            (Some(Placement::Satisfied), false, State::Compliant),
            // A workload template's pods get the selector from the mutating webhook.
            (Some(patch.clone()), false, State::Compliant),
            // A Pod without it bypassed the mutating webhook.
            (Some(patch), true, State::NonCompliant),
            (
                Some(Placement::Conflict("c".into())),
                true,
                State::NonCompliant,
            ),
            (
                Some(Placement::Conflict("c".into())),
                false,
                State::NonCompliant,
            ),
            (
                Some(Placement::Invalid("i".into())),
                true,
                State::NonCompliant,
            ),
            (
                Some(Placement::Invalid("i".into())),
                false,
                State::NonCompliant,
            ),
        ];
        for (placement, is_pod, want) in cases {
            assert_eq!(
                State::of_placement(placement.as_ref(), is_pod),
                want,
                "{placement:?} pod: {is_pod}"
            );
        }
    }

    fn need(target: Target, name: &str, compliance: Compliance) -> Need {
        Need {
            target,
            name: name.to_string(),
            compliance,
        }
    }

    #[test]
    fn unmet_table() {
        use Compliance::{Compliant as C, NonCompliant as N};
        use State::{Compliant, Error, NonCompliant, NotApplied, Pending};
        let a = |c| need(Target::Policy(0), "a", c);
        let b = |c| need(Target::Policy(1), "b", c);
        let placement = |c| need(Target::Placement, PLACEMENT, c);
        // (case, needs, states of a and b, placement, the unmet dependency and what it was)
        type Case = (
            &'static str,
            Vec<Need>,
            [State; 2],
            State,
            Option<(&'static str, Compliance, State)>,
        );
        let cases: Vec<Case> = vec![
            ("none", vec![], [Error, Error], NotApplied, None),
            (
                "compliant as required",
                vec![a(C)],
                [Compliant, Error],
                NotApplied,
                None,
            ),
            (
                "non-compliant as required",
                vec![a(N)],
                [NonCompliant, Error],
                NotApplied,
                None,
            ),
            (
                "non-compliant, compliant required",
                vec![a(C)],
                [NonCompliant, Compliant],
                NotApplied,
                Some(("a", C, NonCompliant)),
            ),
            (
                "compliant, non-compliant required",
                vec![a(N)],
                [Compliant, Compliant],
                NotApplied,
                Some(("a", N, Compliant)),
            ),
            (
                "an error is unmet, whichever required",
                vec![a(C)],
                [Error, Compliant],
                NotApplied,
                Some(("a", C, Error)),
            ),
            (
                "an error is unmet (NonCompliant required)",
                vec![a(N)],
                [Error, Compliant],
                NotApplied,
                Some(("a", N, Error)),
            ),
            (
                "a pending dependency is unmet",
                vec![a(C)],
                [Pending, Compliant],
                NotApplied,
                Some(("a", C, Pending)),
            ),
            (
                "a pending dependency is unmet (NonCompliant required)",
                vec![a(N)],
                [Pending, Compliant],
                NotApplied,
                Some(("a", N, Pending)),
            ),
            (
                "a dependency not applied is unmet",
                vec![a(C)],
                [NotApplied, Compliant],
                Compliant,
                Some(("a", C, NotApplied)),
            ),
            (
                "the first unmet in the listed order",
                vec![a(C), b(C)],
                [NonCompliant, Error],
                NotApplied,
                Some(("a", C, NonCompliant)),
            ),
            (
                "listed order, not index order",
                vec![b(C), a(C)],
                [NonCompliant, Error],
                NotApplied,
                Some(("b", C, Error)),
            ),
            (
                "all met",
                vec![b(N), a(C)],
                [Compliant, NonCompliant],
                Compliant,
                None,
            ),
            (
                "placement satisfied",
                vec![placement(C)],
                [Error, Error],
                Compliant,
                None,
            ),
            (
                "placement conflict, compliant required",
                vec![placement(C)],
                [Error, Error],
                NonCompliant,
                Some((PLACEMENT, C, NonCompliant)),
            ),
            (
                "placement conflict as required",
                vec![placement(N)],
                [Error, Error],
                NonCompliant,
                None,
            ),
            (
                "no pool: placement does not apply",
                vec![placement(C)],
                [Compliant, Compliant],
                NotApplied,
                Some((PLACEMENT, C, NotApplied)),
            ),
            (
                "no pool, NonCompliant required: still unmet",
                vec![placement(N)],
                [Compliant, Compliant],
                NotApplied,
                Some((PLACEMENT, N, NotApplied)),
            ),
            (
                "placement and a policy",
                vec![placement(C), a(C)],
                [NonCompliant, Compliant],
                Compliant,
                Some(("a", C, NonCompliant)),
            ),
        ];
        for (name, needs, states, placement_state, want) in cases {
            let got = unmet(&needs, &states, placement_state);
            let want = want.map(|(dependency, required, found)| Unmet {
                dependency: dependency.to_string(),
                required,
                found,
            });
            assert_eq!(got, want, "{name}");
        }
    }

    #[test]
    fn unmet_messages() {
        let text = |dependency: &str, required, found| {
            Unmet {
                dependency: dependency.to_string(),
                required,
                found,
            }
            .to_string()
        };
        use Compliance::{Compliant as C, NonCompliant as N};
        assert_eq!(
            text("allowedrepositories", C, State::NonCompliant),
            "dependency allowedrepositories is NonCompliant, Compliant required"
        );
        assert_eq!(
            text("a", N, State::Compliant),
            "dependency a is Compliant, NonCompliant required"
        );
        assert_eq!(
            text("a", C, State::Error),
            "dependency a could not be evaluated, Compliant required"
        );
        assert_eq!(
            text("a", C, State::Pending),
            "dependency a is Pending, Compliant required"
        );
        assert_eq!(
            text("a", C, State::NotApplied),
            "dependency a does not apply (no parameters for the namespace's pool), Compliant required"
        );
        assert_eq!(
            text(PLACEMENT, C, State::NotApplied),
            "dependency placement does not apply (the namespace has no pool), Compliant required"
        );
    }

    /// A config as written, without [`Config::parse`]'s own checks.
    fn config(text: &str) -> Config {
        crate::documents::parse_one(text, "t").unwrap()
    }

    #[test]
    fn plan_table() {
        let names = ["a", "b", "c", "placement_free"];
        // (case, config, order, ignorePending of a, b, c)
        let cases = [
            ("no dependencies: name order, nothing to check", "policies: {a: {parameters: {}}}", vec![0, 1, 2, 3], None),
            (
                "a after c after b",
                "policies:\n  a: {dependencies: [{policy: c}]}\n  c: {dependencies: [{policy: b, compliance: NonCompliant}], ignorePending: true}\n",
                vec![1, 2, 0, 3],
                Some([false, false, true]),
            ),
            (
                "placement orders nothing",
                "policies:\n  b: {dependencies: [{policy: placement}]}\n",
                vec![0, 1, 2, 3],
                Some([false, false, false]),
            ),
        ];
        for (name, text, order, ignore) in cases {
            let plan = Plan::new(&names, &config(text)).unwrap();
            assert_eq!(plan.order, order, "{name}");
            assert_eq!(plan.has_dependencies(), ignore.is_some(), "{name}");
            if let Some(ignore) = ignore {
                assert_eq!(plan.ignore_pending[..3], ignore, "{name}");
            }
        }
        let plan = Plan::new(
            &names,
            &config("policies:\n  a: {dependencies: [{policy: placement, compliance: NonCompliant}, {policy: c}]}\n"),
        )
        .unwrap();
        assert_eq!(
            plan.needs[0],
            vec![
                need(Target::Placement, PLACEMENT, Compliance::NonCompliant),
                need(Target::Policy(2), "c", Compliance::Compliant)
            ]
        );
        assert!(plan.needs[1].is_empty());
    }

    #[test]
    fn plan_errors_name_the_cycle_or_the_name() {
        let names = ["a", "b", "c"];
        let cases = [
            (
                "policies:\n  a: {dependencies: [{policy: a}]}\n",
                "at `policies.a.dependencies`: policy `a` depends on itself",
            ),
            (
                "policies:\n  a: {dependencies: [{policy: b}]}\n  b: {dependencies: [{policy: c}]}\n  c: {dependencies: [{policy: a}]}\n",
                "at `policies.a.dependencies`: dependency cycle a -> b -> c -> a",
            ),
            (
                "policies:\n  b: {dependencies: [{policy: c}]}\n  c: {dependencies: [{policy: b}]}\n",
                "at `policies.b.dependencies`: dependency cycle b -> c -> b",
            ),
            (
                "policies:\n  b: {dependencies: [{policy: placement}, {policy: nope}]}\n",
                "at `policies.b.dependencies[1].policy`: no policy named `nope` is loaded, and it is not `placement` (loaded: a, b, c)",
            ),
        ];
        for (text, want) in cases {
            let err = Plan::new(&names, &config(text)).unwrap_err().to_string();
            assert_eq!(err, want, "{text}");
        }
    }
}
