//! `policies.<name>.rollout`: the config form of a progressive rollout (namespaces in groups
//! ordered by risk, how long each must prove itself) and its validation. The state machine that
//! moves a rollout along is [`crate::rollout::machine`].

use std::collections::HashMap;
use std::fmt;
use std::time::Duration;

use anyhow::{bail, Result};
use serde::{de, Deserialize, Deserializer};

use super::selector::LabelSelector;
use crate::labels::Labels;

/// `policies.<name>.rollout`: how a new version of the policy reaches its final enforcement.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RolloutSpec {
    /// Lowest risk first. A namespace belongs to the first group that selects it.
    pub groups: Vec<Group>,
    /// How long a group must stay within `maxFailures` to succeed.
    #[serde(deserialize_with = "whole_seconds")]
    pub min_success_time: Duration,
    /// How long a group has, from its start, to succeed before it times out.
    #[serde(deserialize_with = "whole_seconds")]
    pub progress_deadline: Duration,
    /// Failures a group may have and still succeed. Default 0: any failure holds it back.
    #[serde(default)]
    pub max_failures: MaxFailures,
    /// Safety valve: a group already enforcing whose denials in the last minute exceed this
    /// fails, and drops back to warn.
    #[serde(default)]
    pub max_denials_per_minute: Option<u64>,
}

/// One group of namespaces.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Group {
    pub name: String,
    /// Absent only on the last group, which takes every namespace no group before selected.
    #[serde(default)]
    pub namespace_selector: Option<LabelSelector>,
    /// A manual gate: the group starts only once approved.
    #[serde(default)]
    pub approval: Option<Approval>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Approval {
    Required,
}

impl Group {
    pub(crate) fn needs_approval(&self) -> bool {
        self.approval == Some(Approval::Required)
    }

    /// Whether the group's selector takes `labels` (a group without one takes everything).
    pub fn selects(&self, labels: &Labels) -> bool {
        self.namespace_selector
            .as_ref()
            .is_none_or(|s| s.matches(labels))
    }
}

/// `maxFailures`: a count, or a percentage of the group's objects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MaxFailures {
    Count(u64),
    /// Millionths of a percent (`"2%"` is 2_000_000, `"0.5%"` 500_000), so the limit is exact.
    Percent(u64),
}

impl Default for MaxFailures {
    fn default() -> Self {
        MaxFailures::Count(0)
    }
}

/// Decimal places a percentage may have.
const PERCENT_DECIMALS: u32 = 6;
const PERCENT_SCALE: u64 = 10u64.pow(PERCENT_DECIMALS);

impl MaxFailures {
    /// The failures a group of `objects` objects may have: the count, or
    /// floor(objects × percentage / 100).
    pub fn limit(self, objects: u64) -> u64 {
        match self {
            MaxFailures::Count(n) => n,
            MaxFailures::Percent(micro) => {
                let limit =
                    u128::from(objects) * u128::from(micro) / u128::from(100 * PERCENT_SCALE);
                u64::try_from(limit).unwrap_or(u64::MAX)
            }
        }
    }

    /// Parses `"2%"` or `"0.5%"`: 0 to 100, at most six decimal places.
    pub(crate) fn parse_percent(text: &str) -> Result<MaxFailures, String> {
        let bad = || {
            format!("{text:?} is neither a count (a non-negative integer such as 2) nor a percentage from 0% to 100% (such as \"2%\" or \"0.5%\")")
        };
        let number = text.strip_suffix('%').ok_or_else(bad)?;
        let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
        let digits = |s: &str| s.chars().all(|c| c.is_ascii_digit());
        if whole.is_empty() || !digits(whole) || !digits(fraction) || number.ends_with('.') {
            return Err(bad());
        }
        if fraction.len() > PERCENT_DECIMALS as usize {
            return Err(format!(
                "{text:?}: a percentage has at most {PERCENT_DECIMALS} decimal places"
            ));
        }
        let whole: u64 = whole.parse().map_err(|_| bad())?;
        let fraction_micro: u64 = format!("{fraction:0<6}").parse().map_err(|_| bad())?;
        let micro = whole
            .checked_mul(PERCENT_SCALE)
            .and_then(|w| w.checked_add(fraction_micro))
            .filter(|m| *m <= 100 * PERCENT_SCALE)
            .ok_or_else(|| format!("{text:?}: a percentage must be from 0% to 100%"))?;
        Ok(MaxFailures::Percent(micro))
    }
}

impl fmt::Display for MaxFailures {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            MaxFailures::Count(n) => write!(f, "{n}"),
            MaxFailures::Percent(micro) => {
                let whole = micro / PERCENT_SCALE;
                let fraction = micro % PERCENT_SCALE;
                if fraction == 0 {
                    write!(f, "{whole}%")
                } else {
                    let digits = format!("{fraction:06}");
                    write!(f, "{whole}.{}%", digits.trim_end_matches('0'))
                }
            }
        }
    }
}

impl<'de> Deserialize<'de> for MaxFailures {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl de::Visitor<'_> for Visitor {
            type Value = MaxFailures;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a count (a non-negative integer) or a percentage such as \"2%\"")
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<MaxFailures, E> {
                Ok(MaxFailures::Count(v))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<MaxFailures, E> {
                u64::try_from(v).map(MaxFailures::Count).map_err(|_| {
                    E::custom(format!("{v}: a count of failures must not be negative"))
                })
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<MaxFailures, E> {
                Err(E::custom(format!(
                    "{v}: a count of failures is a whole number; write a percentage as \"{v}%\""
                )))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<MaxFailures, E> {
                MaxFailures::parse_percent(v).map_err(E::custom)
            }
        }
        deserializer.deserialize_any(Visitor)
    }
}

/// A humantime duration (`"10m"`, `"2h"`, `"30s"`) of whole seconds.
pub(crate) fn whole_seconds<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Duration, D::Error> {
    let text = String::deserialize(deserializer)?;
    let duration = humantime::parse_duration(&text).map_err(|e| {
        de::Error::custom(format!(
            "{text:?} is not a duration such as \"30s\", \"10m\" or \"2h\": {e}"
        ))
    })?;
    if duration.subsec_nanos() != 0 {
        return Err(de::Error::custom(format!(
            "{text:?}: must be a whole number of seconds"
        )));
    }
    Ok(duration)
}

/// Whether `name` is a DNS label: 1 to 63 lowercase letters, digits and `-`, starting and
/// ending with a letter or digit.
fn is_dns_label(name: &str) -> bool {
    let alnum = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit();
    !name.is_empty()
        && name.len() <= 63
        && name.chars().all(|c| alnum(c) || c == '-')
        && name.starts_with(alnum)
        && name.ends_with(alnum)
}

impl RolloutSpec {
    /// Checks what the types cannot; `at` is the rollout's config path
    /// (`policies.<name>.rollout`).
    pub fn validate(&self, at: &str) -> Result<()> {
        if self.groups.is_empty() {
            bail!("at `{at}.groups`: list at least one group");
        }
        let mut names: HashMap<&str, usize> = HashMap::new();
        let last = self.groups.len() - 1;
        for (i, group) in self.groups.iter().enumerate() {
            let here = format!("{at}.groups[{i}]");
            if group.name.is_empty() {
                bail!("at `{here}.name`: must not be empty");
            }
            if !is_dns_label(&group.name) {
                bail!(
                    "at `{here}.name`: {:?} is not a DNS label (at most 63 lowercase letters, digits and '-', starting and ending with a letter or digit)",
                    group.name
                );
            }
            if let Some(first) = names.insert(&group.name, i) {
                bail!(
                    "at `{here}.name`: `{}` already names `{at}.groups[{first}]`",
                    group.name
                );
            }
            match &group.namespace_selector {
                None if i != last => bail!(
                    "at `{here}`: only the last group may omit namespaceSelector (a group without one takes every namespace left, so the groups after it would be empty)"
                ),
                None => {}
                Some(selector) => {
                    selector.validate(&format!("{here}.namespaceSelector"))?;
                    let canonical = selector.canonical();
                    let same = self.groups[..i].iter().position(|g| {
                        g.namespace_selector
                            .as_ref()
                            .is_some_and(|s| s.canonical() == canonical)
                    });
                    if let Some(j) = same {
                        bail!(
                            "at `{here}.namespaceSelector`: selects the same namespaces as `{at}.groups[{j}]` (`{}`), which takes them first, so `{}` would always be empty",
                            self.groups[j].name,
                            group.name
                        );
                    }
                }
            }
        }
        if self.progress_deadline <= self.min_success_time {
            bail!(
                "at `{at}.progressDeadline`: {} must be longer than minSuccessTime ({}), or no group could ever succeed",
                humantime::format_duration(self.progress_deadline),
                humantime::format_duration(self.min_success_time)
            );
        }
        Ok(())
    }

    /// The group a namespace with `labels` belongs to: the first that selects it (the
    /// catch-all group selects every namespace left). `None` when no group selects it.
    pub fn group_of(&self, labels: &Labels) -> Option<usize> {
        self.groups.iter().position(|g| g.selects(labels))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SPEC: &str = r#"
groups:
  - name: canary
    namespaceSelector: {matchLabels: {risk: low}}
  - name: standard
    namespaceSelector: {matchExpressions: [{key: risk, operator: In, values: [medium]}]}
  - name: critical
    approval: required
minSuccessTime: 10m
progressDeadline: 2h
maxFailures: 2%
maxDenialsPerMinute: 30
"#;

    fn spec(text: &str) -> Result<RolloutSpec> {
        let spec: RolloutSpec = crate::documents::parse_one(text, "t")?;
        spec.validate("r")?;
        Ok(spec)
    }

    fn labels(pairs: &[(&str, &str)]) -> Labels {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn full_spec_parses() {
        let s = spec(SPEC).unwrap();
        assert_eq!(s.groups.len(), 3);
        assert_eq!(s.min_success_time, Duration::from_secs(600));
        assert_eq!(s.progress_deadline, Duration::from_secs(7200));
        assert_eq!(s.max_failures, MaxFailures::Percent(2_000_000));
        assert_eq!(s.max_denials_per_minute, Some(30));
        assert!(!s.groups[0].needs_approval());
        assert!(s.groups[2].needs_approval());
        assert!(s.groups[2].namespace_selector.is_none());
    }

    #[test]
    fn max_failures_defaults_to_zero_and_takes_counts() {
        let s = spec("groups: [{name: a}]\nminSuccessTime: 30s\nprogressDeadline: 1m\n").unwrap();
        assert_eq!(s.max_failures, MaxFailures::Count(0));
        assert_eq!(s.max_denials_per_minute, None);
        let s = spec(
            "groups: [{name: a}]\nminSuccessTime: 30s\nprogressDeadline: 1m\nmaxFailures: 3\n",
        )
        .unwrap();
        assert_eq!(s.max_failures, MaxFailures::Count(3));
    }

    #[test]
    fn percentage_limits_round_down() {
        // (maxFailures, objects, limit)
        let cases = [
            ("2%", 0, 0),
            ("2%", 49, 0),
            ("2%", 50, 1),
            ("2%", 100, 2),
            ("2%", 149, 2),
            ("0.5%", 199, 0),
            ("0.5%", 200, 1),
            ("100%", 7, 7),
            ("0%", 1000, 0),
            ("33.333333%", 3, 0),
            ("100%", u64::MAX, u64::MAX),
        ];
        for (text, objects, want) in cases {
            let m = MaxFailures::parse_percent(text).unwrap();
            assert_eq!(m.limit(objects), want, "{text} of {objects}");
            assert_eq!(m.to_string(), text);
        }
        assert_eq!(MaxFailures::Count(3).limit(0), 3);
        assert_eq!(MaxFailures::Count(3).limit(1000), 3);
    }

    #[test]
    fn group_of_takes_the_first_selecting_group() {
        let s = spec(SPEC).unwrap();
        let cases = [
            (labels(&[("risk", "low")]), Some(0)),
            (labels(&[("risk", "medium")]), Some(1)),
            (labels(&[("risk", "high")]), Some(2)),
            (labels(&[]), Some(2)),
        ];
        for (l, want) in cases {
            assert_eq!(s.group_of(&l), want, "{l:?}");
        }
        // Without a catch-all, a namespace no selector takes is in no group; overlapping
        // selectors give the namespace to the first.
        let s = spec(
            "groups:\n- {name: a, namespaceSelector: {matchLabels: {risk: low}}}\n- {name: b, namespaceSelector: {matchExpressions: [{key: risk, operator: Exists}]}}\nminSuccessTime: 1m\nprogressDeadline: 2m\n",
        )
        .unwrap();
        assert_eq!(s.group_of(&labels(&[("risk", "low")])), Some(0));
        assert_eq!(s.group_of(&labels(&[("risk", "high")])), Some(1));
        assert_eq!(s.group_of(&labels(&[("team", "x")])), None);
    }

    #[test]
    fn errors_name_the_path() {
        let base = "minSuccessTime: 10m\nprogressDeadline: 2h\n";
        let with = |groups: &str, rest: &str| format!("groups:\n{groups}{rest}");
        let one = "- name: a\n";
        let cases = [
            (format!("groups: []\n{base}"), "at `r.groups`: list at least one group"),
            (with("- name: ''\n", base), "at `r.groups[0].name`: must not be empty"),
            (with("- name: Canary\n", base), "at `r.groups[0].name`: \"Canary\" is not a DNS label"),
            (with("- name: -a\n", base), "at `r.groups[0].name`"),
            (with(&format!("- name: {}\n", "a".repeat(64)), base), "at `r.groups[0].name`"),
            (
                with("- {name: a, namespaceSelector: {matchLabels: {x: y}}}\n- {name: a}\n", base),
                "at `r.groups[1].name`: `a` already names `r.groups[0]`",
            ),
            (
                with("- {name: a}\n- {name: b, namespaceSelector: {matchLabels: {x: y}}}\n", base),
                "at `r.groups[0]`: only the last group may omit namespaceSelector",
            ),
            (
                with("- {name: a, namespaceSelector: {}}\n", base),
                "at `r.groups[0].namespaceSelector`: an empty selector selects every namespace; omit namespaceSelector for the catch-all group",
            ),
            (
                with("- {name: a, namespaceSelector: {matchExpressions: [{key: x, operator: In}]}}\n", base),
                "at `r.groups[0].namespaceSelector.matchExpressions[0].values`",
            ),
            (
                with("- {name: a, namespaceSelector: {matchExpressions: [{key: x, operator: Exists, values: [y]}]}}\n", base),
                "at `r.groups[0].namespaceSelector.matchExpressions[0].values`: operator Exists takes no values",
            ),
            (
                with("- {name: a, namespaceSelector: {matchExpressions: [{key: x, operator: DoesNotExist, values: [y]}]}}\n", base),
                "operator DoesNotExist takes no values",
            ),
            (
                with("- {name: a, namespaceSelector: {matchExpressions: [{key: x, operator: Equals, values: [y]}]}}\n", base),
                "at `groups[0].namespaceSelector.matchExpressions[0].operator`",
            ),
            (
                with(
                    "- {name: a, namespaceSelector: {matchLabels: {risk: low}}}\n- {name: b, namespaceSelector: {matchExpressions: [{key: risk, operator: In, values: [low]}]}}\n",
                    base,
                ),
                "at `r.groups[1].namespaceSelector`: selects the same namespaces as `r.groups[0]` (`a`)",
            ),
            (with("- {name: a, approval: optional}\n", base), "at `groups[0].approval`"),
            (with(one, "minSuccessTime: 10 minutes later\nprogressDeadline: 2h\n"), "at `minSuccessTime`: \"10 minutes later\" is not a duration"),
            (with(one, "minSuccessTime: 10m\nprogressDeadline: soon\n"), "at `progressDeadline`: \"soon\" is not a duration"),
            (with(one, "minSuccessTime: 10m\nprogressDeadline: 1500ms\n"), "at `progressDeadline`: \"1500ms\": must be a whole number of seconds"),
            (with(one, "progressDeadline: 2h\n"), "missing field `minSuccessTime`"),
            (with(one, "minSuccessTime: 10m\n"), "missing field `progressDeadline`"),
            (with(one, "minSuccessTime: 10m\nprogressDeadline: 10m\n"), "at `r.progressDeadline`: 10m must be longer than minSuccessTime (10m)"),
            (with(one, "minSuccessTime: 10m\nprogressDeadline: 5m\n"), "at `r.progressDeadline`"),
            (with(one, &format!("{base}maxFailures: -1\n")), "at `maxFailures`: -1: a count of failures must not be negative"),
            (with(one, &format!("{base}maxFailures: 1.5\n")), "at `maxFailures`: 1.5: a count of failures is a whole number"),
            (with(one, &format!("{base}maxFailures: 101%\n")), "at `maxFailures`: \"101%\": a percentage must be from 0% to 100%"),
            (with(one, &format!("{base}maxFailures: -2%\n")), "at `maxFailures`: \"-2%\" is neither a count"),
            (with(one, &format!("{base}maxFailures: two\n")), "at `maxFailures`: \"two\" is neither"),
            (with(one, &format!("{base}maxFailures: '2'\n")), "at `maxFailures`: \"2\" is neither"),
            (with(one, &format!("{base}maxFailures: 2.%\n")), "at `maxFailures`"),
            (with(one, &format!("{base}maxFailures: 0.0000001%\n")), "at most 6 decimal places"),
            (with(one, &format!("{base}maxDenialsPerMinute: -3\n")), "at `maxDenialsPerMinute`"),
            (with(one, &format!("{base}maxFailure: 1\n")), "unknown field `maxFailure`"),
        ];
        for (text, want) in cases {
            let err = format!("{:#}", spec(&text).unwrap_err());
            assert!(err.contains(want), "{text}\n  got: {err}\n  want: {want}");
        }
    }

    #[test]
    fn valid_edge_values() {
        for extra in [
            "maxFailures: 0%\n",
            "maxFailures: 100%\n",
            "maxFailures: 0.5%\n",
            "maxFailures: 12\n",
            "maxDenialsPerMinute: 0\n",
        ] {
            spec(&format!(
                "groups: [{{name: a}}]\nminSuccessTime: 0s\nprogressDeadline: 1s\n{extra}"
            ))
            .unwrap_or_else(|e| panic!("{extra}: {e:#}"));
        }
    }
}
