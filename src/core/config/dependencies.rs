//! `policies.<name>.dependencies`: the config form of a policy's dependencies (which policies,
//! or the built-in placement check, must be in which compliance before it runs), and the
//! evaluation order they imply, checked for cycles when the config is parsed. Evaluation
//! against them is [`crate::policy::dependencies`].

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

/// The name a dependency gives the pool placement check.
pub(crate) const PLACEMENT: &str = "placement";

/// The compliance a dependency requires.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum Compliance {
    /// Evaluated without infringements (placement: the object selects its namespace's pool).
    #[default]
    Compliant,
    /// Evaluated with infringements (placement: a conflicting, invalid or missing selector).
    NonCompliant,
}

impl Compliance {
    pub fn as_str(self) -> &'static str {
        match self {
            Compliance::Compliant => "Compliant",
            Compliance::NonCompliant => "NonCompliant",
        }
    }
}

/// One entry of `policies.<name>.dependencies`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Dependency {
    /// A loaded policy, or [`PLACEMENT`].
    pub policy: String,
    /// Default: Compliant.
    #[serde(default)]
    pub compliance: Compliance,
}

/// An order of the nodes `0..edges.len()` in which each comes after every node it depends on
/// (`edges[i]`: the nodes `i` depends on), nodes that are free to go earliest first — so
/// without edges the order is `0, 1, 2, …`. On a cycle, the nodes of one cycle, starting and
/// ending with its smallest node.
pub(crate) fn order(edges: &[Vec<usize>]) -> std::result::Result<Vec<usize>, Vec<usize>> {
    let n = edges.len();
    let mut waiting_on: Vec<usize> = edges
        .iter()
        .map(|e| e.iter().collect::<BTreeSet<_>>().len())
        .collect();
    let mut dependents: Vec<Vec<usize>> = vec![Vec::new(); n];
    for (i, deps) in edges.iter().enumerate() {
        for &d in deps.iter().collect::<BTreeSet<_>>() {
            dependents[d].push(i);
        }
    }
    let mut ready: BTreeSet<usize> = (0..n).filter(|&i| waiting_on[i] == 0).collect();
    let mut out = Vec::with_capacity(n);
    while let Some(i) = ready.pop_first() {
        out.push(i);
        for &j in &dependents[i] {
            waiting_on[j] -= 1;
            if waiting_on[j] == 0 {
                ready.insert(j);
            }
        }
    }
    if out.len() == n {
        return Ok(out);
    }
    // Every node left waits on another node left: walking to the smallest such dependency
    // from any of them must come back to a node already seen.
    let left = |i: usize| waiting_on[i] > 0;
    let start = (0..n).find(|&i| left(i)).expect("some node is left");
    let mut path = vec![start];
    loop {
        let last = *path.last().expect("not empty");
        let next = edges[last]
            .iter()
            .copied()
            .filter(|&d| left(d))
            .min()
            .expect("a node left waits on another node left");
        if let Some(at) = path.iter().position(|&p| p == next) {
            let mut cycle = path.split_off(at);
            let smallest = (0..cycle.len())
                .min_by_key(|&k| cycle[k])
                .expect("not empty");
            cycle.rotate_left(smallest);
            cycle.push(cycle[0]);
            return Err(cycle);
        }
        path.push(next);
    }
}

/// The load error for a dependency cycle (its names, the first repeated at the end).
pub(crate) fn cycle_error(cycle: &[&str]) -> anyhow::Error {
    if cycle.len() == 2 {
        return anyhow::anyhow!(
            "at `policies.{0}.dependencies`: policy `{0}` depends on itself",
            cycle[0]
        );
    }
    anyhow::anyhow!(
        "at `policies.{}.dependencies`: dependency cycle {}",
        cycle[0],
        cycle.join(" -> ")
    )
}
