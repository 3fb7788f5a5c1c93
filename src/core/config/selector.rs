//! Namespace label selectors as Kubernetes spells them (`matchLabels`, `matchExpressions` with
//! In/NotIn/Exists/DoesNotExist): their config form, validation and matching.

use std::collections::BTreeMap;

use anyhow::{bail, Result};
use serde::{Deserialize, Serialize};

use crate::labels::Labels;

/// A Kubernetes label selector. Every requirement must hold; an empty selector selects
/// everything (the config refuses one, see [`LabelSelector::validate`]).
#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct LabelSelector {
    /// Each label must be present with exactly this value.
    #[serde(default)]
    pub match_labels: BTreeMap<String, String>,
    #[serde(default)]
    pub match_expressions: Vec<Requirement>,
}

/// One `matchExpressions` entry.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Requirement {
    pub key: String,
    pub operator: Operator,
    #[serde(default)]
    pub values: Vec<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Deserialize, Serialize)]
pub enum Operator {
    /// The label is present and its value is one of `values`.
    In,
    /// The label is absent, or its value is none of `values`.
    NotIn,
    /// The label is present, whatever its value.
    Exists,
    /// The label is absent.
    DoesNotExist,
}

impl Requirement {
    pub fn matches(&self, labels: &Labels) -> bool {
        let value = labels.get(&self.key);
        match self.operator {
            Operator::In => value.is_some_and(|v| self.values.contains(v)),
            Operator::NotIn => value.is_none_or(|v| !self.values.contains(v)),
            Operator::Exists => value.is_some(),
            Operator::DoesNotExist => value.is_none(),
        }
    }
}

impl LabelSelector {
    /// Whether a namespace with `labels` is selected (Kubernetes semantics: `matchLabels` and
    /// every expression must hold; `NotIn` holds for a missing label).
    pub fn matches(&self, labels: &Labels) -> bool {
        self.match_labels
            .iter()
            .all(|(k, v)| labels.get(k) == Some(v))
            && self.match_expressions.iter().all(|r| r.matches(labels))
    }

    /// Every label key the selector reads, in order, each once.
    pub fn keys(&self) -> Vec<&str> {
        let mut keys: Vec<&str> = self.match_labels.keys().map(String::as_str).collect();
        for requirement in &self.match_expressions {
            if !keys.contains(&requirement.key.as_str()) {
                keys.push(&requirement.key);
            }
        }
        keys
    }

    /// Whether the selector has no requirement at all (and so selects every namespace).
    pub fn is_empty(&self) -> bool {
        self.match_labels.is_empty() && self.match_expressions.is_empty()
    }

    /// Checks keys, operators and values; `at` is the selector's config path.
    pub fn validate(&self, at: &str) -> Result<()> {
        if self.is_empty() {
            bail!(
                "at `{at}`: an empty selector selects every namespace; omit namespaceSelector for the catch-all group"
            );
        }
        for key in self.match_labels.keys() {
            if key.trim().is_empty() {
                bail!("at `{at}.matchLabels`: a label key must not be empty");
            }
        }
        for (i, r) in self.match_expressions.iter().enumerate() {
            let here = format!("{at}.matchExpressions[{i}]");
            if r.key.trim().is_empty() {
                bail!("at `{here}.key`: must not be empty");
            }
            match r.operator {
                Operator::In | Operator::NotIn if r.values.is_empty() => bail!(
                    "at `{here}.values`: operator {:?} needs at least one value",
                    r.operator
                ),
                Operator::Exists | Operator::DoesNotExist if !r.values.is_empty() => bail!(
                    "at `{here}.values`: operator {:?} takes no values",
                    r.operator
                ),
                _ => {}
            }
        }
        Ok(())
    }

    /// The selector's requirements in one order-free form: `matchLabels` entries become `In`
    /// with one value, values are sorted and deduplicated, requirements sorted and
    /// deduplicated. Two selectors with equal canonical forms select the same namespaces.
    pub fn canonical(&self) -> Vec<(String, Operator, Vec<String>)> {
        let mut out: Vec<(String, Operator, Vec<String>)> = self
            .match_labels
            .iter()
            .map(|(k, v)| (k.clone(), Operator::In, vec![v.clone()]))
            .chain(self.match_expressions.iter().map(|r| {
                let mut values = r.values.clone();
                values.sort();
                values.dedup();
                (r.key.clone(), r.operator, values)
            }))
            .collect();
        out.sort();
        out.dedup();
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> Labels {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn selector(yaml: &str) -> LabelSelector {
        crate::documents::parse_one(yaml, "t").unwrap()
    }

    #[test]
    fn matches_table() {
        let low = labels(&[("risk", "low"), ("team", "a")]);
        let medium = labels(&[("risk", "medium")]);
        let none = labels(&[]);
        // (selector, [low, medium, none])
        let cases = [
            ("matchLabels: {risk: low}", [true, false, false]),
            ("matchLabels: {risk: low, team: a}", [true, false, false]),
            ("matchLabels: {risk: low, team: b}", [false, false, false]),
            (
                "matchExpressions: [{key: risk, operator: In, values: [low, medium]}]",
                [true, true, false],
            ),
            (
                "matchExpressions: [{key: risk, operator: NotIn, values: [low]}]",
                [false, true, true],
            ),
            (
                "matchExpressions: [{key: team, operator: Exists}]",
                [true, false, false],
            ),
            (
                "matchExpressions: [{key: team, operator: DoesNotExist}]",
                [false, true, true],
            ),
            (
                "{matchLabels: {risk: medium}, matchExpressions: [{key: team, operator: DoesNotExist}]}",
                [false, true, false],
            ),
            ("{}", [true, true, true]),
        ];
        for (text, want) in cases {
            let s = selector(text);
            let got = [s.matches(&low), s.matches(&medium), s.matches(&none)];
            assert_eq!(got, want, "{text}");
        }
    }

    #[test]
    fn validate_table() {
        let cases = [
            ("matchLabels: {risk: low}", None),
            (
                "matchExpressions: [{key: risk, operator: Exists, values: []}]",
                None,
            ),
            ("{}", Some("at `s`: an empty selector")),
            (
                "matchExpressions: [{key: risk, operator: In}]",
                Some("at `s.matchExpressions[0].values`: operator In needs"),
            ),
            (
                "matchExpressions: [{key: risk, operator: NotIn, values: []}]",
                Some("at `s.matchExpressions[0].values`: operator NotIn needs"),
            ),
            (
                "matchExpressions: [{key: a, operator: Exists}, {key: risk, operator: Exists, values: [x]}]",
                Some("at `s.matchExpressions[1].values`: operator Exists takes no values"),
            ),
            (
                "matchExpressions: [{key: risk, operator: DoesNotExist, values: [x]}]",
                Some("operator DoesNotExist takes no values"),
            ),
            (
                "matchExpressions: [{key: '', operator: Exists}]",
                Some("at `s.matchExpressions[0].key`"),
            ),
            ("matchLabels: {'': x}", Some("at `s.matchLabels`")),
        ];
        for (text, want) in cases {
            let got = selector(text).validate("s");
            match want {
                None => got.unwrap(),
                Some(want) => {
                    let err = got.unwrap_err().to_string();
                    assert!(err.contains(want), "{text}: {err}");
                }
            }
        }
    }

    #[test]
    fn canonical_ignores_order_and_spelling() {
        let a = selector(
            "{matchLabels: {risk: low}, matchExpressions: [{key: t, operator: In, values: [b, a]}]}",
        );
        let b = selector(
            "matchExpressions: [{key: t, operator: In, values: [a, b, a]}, {key: risk, operator: In, values: [low]}]",
        );
        assert_eq!(a.canonical(), b.canonical());
        let c = selector("matchLabels: {risk: high}");
        assert_ne!(a.canonical(), c.canonical());
    }
}
