//! gator-style test suites (`kind: Suite`): each test names a template and a constraint, each
//! case an object (and namespaces as `inventory`) and assertions on the violations. Cases are
//! decided by the same code as admission ([`super::review::evaluate`]). No I/O: files are read
//! through the caller's `read`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{bail, Result};
use serde::Deserialize;
use serde_json::Value;

use super::review;
use crate::config::Config;
use crate::exceptions::{ExceptionSet, PolicyException};
use crate::gatekeeper::Documents;
use crate::policy::{Evaluation, PolicySet};
use crate::ruleset::{Budget, RuleSet};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct SuiteDoc {
    kind: String,
    #[serde(default)]
    api_version: Option<String>,
    #[serde(default)]
    metadata: Option<Value>,
    #[serde(default)]
    tests: Vec<TestDoc>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TestDoc {
    #[serde(default)]
    name: String,
    template: String,
    constraint: String,
    #[serde(default)]
    cases: Vec<CaseDoc>,
    #[serde(default)]
    skip: bool,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct CaseDoc {
    #[serde(default)]
    name: String,
    object: String,
    #[serde(default)]
    inventory: Vec<String>,
    #[serde(default)]
    assertions: Vec<Assertion>,
    #[serde(default)]
    skip: bool,
}

/// One assertion: how many violations (those whose message matches `message`, a regular
/// expression found anywhere in it) the case must have.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Assertion {
    /// `yes` (at least one, the default), `no` (none) or a number (exactly that many).
    #[serde(default)]
    pub violations: Option<Value>,
    #[serde(default)]
    pub message: Option<String>,
}

/// How many violations an assertion wants.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Expected {
    AtLeastOne,
    None,
    Exactly(u64),
}

impl Assertion {
    pub fn expected(&self) -> Result<Expected, String> {
        match &self.violations {
            None => Ok(Expected::AtLeastOne),
            Some(Value::String(s)) if s == "yes" => Ok(Expected::AtLeastOne),
            Some(Value::String(s)) if s == "no" => Ok(Expected::None),
            Some(Value::Bool(true)) => Ok(Expected::AtLeastOne),
            Some(Value::Bool(false)) => Ok(Expected::None),
            Some(Value::Number(n)) if n.as_u64().is_some() => {
                Ok(Expected::Exactly(n.as_u64().unwrap_or_default()))
            }
            Some(other) => Err(format!(
                "`violations` must be yes, no or a number of at least 0, got {other}"
            )),
        }
    }

    /// Checks `messages` (one per violation) against the assertion: `Err` says why not.
    pub fn check(&self, messages: &[String]) -> Result<(), String> {
        let expected = self.expected()?;
        let pattern = match &self.message {
            Some(m) => Some(
                regex::Regex::new(m)
                    .map_err(|e| format!("`message` is not a regular expression: {e}"))?,
            ),
            None => None,
        };
        let count = messages
            .iter()
            .filter(|m| pattern.as_ref().is_none_or(|p| p.is_match(m)))
            .count() as u64;
        let holds = match expected {
            Expected::AtLeastOne => count > 0,
            Expected::None => count == 0,
            Expected::Exactly(n) => count == n,
        };
        if holds {
            return Ok(());
        }
        let want = match expected {
            Expected::AtLeastOne => "at least 1".to_string(),
            Expected::None => "0".to_string(),
            Expected::Exactly(n) => n.to_string(),
        };
        let which = self
            .message
            .as_ref()
            .map_or(String::new(), |m| format!(" matching `{m}`"));
        Err(format!(
            "expected {want} violations{which}, got {count}: {messages:?}"
        ))
    }
}

/// A case's result.
#[derive(Debug, Clone, PartialEq)]
pub enum CaseResult {
    /// Every assertion holds.
    Agrees,
    /// An assertion does not hold, or the case could not be decided: why.
    Disagrees(String),
    Skipped,
}

#[derive(Debug, Clone, PartialEq)]
pub struct CaseReport {
    pub name: String,
    pub result: CaseResult,
}

/// One test: its template and constraint loaded (or why not) and its cases.
#[derive(Debug, Clone, PartialEq)]
pub struct TestReport {
    pub name: String,
    pub template: PathBuf,
    /// `Err`: the load error (its cases are not run; each counts as disagreeing).
    pub load: Result<(), String>,
    pub skipped: bool,
    pub cases: Vec<CaseReport>,
    /// Lint warnings of the template ([`crate::gatekeeper::lint::warnings`]).
    pub warnings: Vec<String>,
}

/// A suite's results.
#[derive(Debug, Clone, PartialEq)]
pub struct SuiteReport {
    pub name: String,
    pub tests: Vec<TestReport>,
}

impl SuiteReport {
    /// Cases agreeing, disagreeing (not run for a load error included), skipped.
    pub fn counts(&self) -> (usize, usize, usize) {
        let mut counts = (0, 0, 0);
        for test in &self.tests {
            for case in &test.cases {
                match (&test.load, &case.result, test.skipped) {
                    (_, CaseResult::Skipped, _) | (_, _, true) => counts.2 += 1,
                    (Err(_), _, _) | (_, CaseResult::Disagrees(_), _) => counts.1 += 1,
                    (Ok(()), CaseResult::Agrees, _) => counts.0 += 1,
                }
            }
        }
        counts
    }
}

/// Runs the suite in `text` (read from `origin`); `read` gives the text of a file the suite
/// names, relative to the suite's directory. Bad suite YAML is an error; a template or
/// constraint that does not load, or an object that cannot be read, is that test's or case's
/// result.
pub fn run(
    text: &str,
    origin: &Path,
    read: &dyn Fn(&Path) -> Result<String>,
) -> Result<SuiteReport> {
    run_with(text, origin, read, &Excepting::default())
}

/// PolicyExceptions a suite's cases are decided under (`verify --exceptions-dir`), live at
/// `now`: a case an exception matches is decided as admission decides it, its violations
/// allowed (none are counted).
#[derive(Debug, Clone, Default)]
pub struct Excepting {
    pub exceptions: Vec<PolicyException>,
    pub now: Option<i64>,
}

/// [`run`] under `excepting`.
pub fn run_with(
    text: &str,
    origin: &Path,
    read: &dyn Fn(&Path) -> Result<String>,
    excepting: &Excepting,
) -> Result<SuiteReport> {
    let name = origin.display().to_string();
    let shape: Value = crate::documents::parse_one(text, &name)?;
    match shape.get("kind").and_then(Value::as_str) {
        Some(kind) if kind != "Suite" => bail!(
            "{name}: not a test suite: `kind: {kind}`, where a gator test suite has `kind: Suite` (with `tests`)"
        ),
        None if shape.get("tests").is_none() => bail!(
            "{name}: not a test suite: a gator test suite has `kind: Suite` and `tests`"
        ),
        _ => {}
    }
    let suite: SuiteDoc = crate::documents::parse_one(text, &name)?;
    if suite.kind != "Suite" {
        bail!("{name}: at `kind`: expected `Suite`, got `{}`", suite.kind);
    }
    let _ = (&suite.api_version, &suite.metadata);
    let dir = origin.parent().unwrap_or(Path::new(""));
    let mut tests = Vec::new();
    for (i, test) in suite.tests.iter().enumerate() {
        let test_name = if test.name.is_empty() {
            format!("tests[{i}]")
        } else {
            test.name.clone()
        };
        let template = dir.join(&test.template);
        let mut report = TestReport {
            name: test_name,
            template: template.clone(),
            load: Ok(()),
            skipped: test.skip,
            cases: Vec::new(),
            warnings: Vec::new(),
        };
        let loaded = if test.skip {
            None
        } else {
            match load(&template, &dir.join(&test.constraint), read, excepting) {
                Ok((rules, name, warnings)) => {
                    report.warnings = warnings;
                    Some((rules, name))
                }
                Err(e) => {
                    report.load = Err(format!("{e:#}"));
                    None
                }
            }
        };
        for (k, case) in test.cases.iter().enumerate() {
            let case_name = if case.name.is_empty() {
                format!("cases[{k}]")
            } else {
                case.name.clone()
            };
            let result = match &loaded {
                _ if case.skip || test.skip => CaseResult::Skipped,
                None => CaseResult::Disagrees("the template or constraint did not load".into()),
                Some((rules, constraint)) => {
                    match decide(case, dir, read, rules, constraint, excepting.now) {
                        Ok(()) => CaseResult::Agrees,
                        Err(why) => CaseResult::Disagrees(why),
                    }
                }
            };
            report.cases.push(CaseReport {
                name: case_name,
                result,
            });
        }
        tests.push(report);
    }
    Ok(SuiteReport { name, tests })
}

/// The rule set of one template and one constraint file (its first constraint), the
/// constraint's name, and the template's lint warnings.
fn load(
    template: &Path,
    constraint: &Path,
    read: &dyn Fn(&Path) -> Result<String>,
    excepting: &Excepting,
) -> Result<(RuleSet, String, Vec<String>)> {
    let files = vec![
        (template.to_path_buf(), read(template)?),
        (constraint.to_path_buf(), read(constraint)?),
    ];
    let mut documents = crate::gatekeeper::read(&files)?;
    let Some(first) = documents.constraints.first().cloned() else {
        bail!("{}: no constraint", constraint.display());
    };
    documents.constraints.truncate(1);
    let compiled = crate::gatekeeper::compile(&Documents {
        templates: documents.templates,
        constraints: documents.constraints.clone(),
    })?;
    let mut config = Config::default();
    crate::gatekeeper::configure(&mut config, &documents.constraints)?;
    // The exceptions given count where they are: the directory they come from is the trust
    // boundary offline, as exceptions.namespaces is in the cluster.
    config.exceptions.namespaces = excepting
        .exceptions
        .iter()
        .map(|e| e.namespace.clone())
        .collect();
    config.exceptions.max_duration = std::time::Duration::MAX;
    let policies = PolicySet::with_constraints(PolicySet::default(), compiled.policies)?;
    let rules = RuleSet::new(config, policies, Default::default(), "suite")?;
    let now = excepting.now.unwrap_or_default();
    // Exceptions naming other suites' constraints are no concern of this one's.
    let (exceptions, _) =
        ExceptionSet::new(excepting.exceptions.clone(), rules.config(), &|_| true, now);
    let rules = rules.with_exceptions(std::sync::Arc::new(exceptions));
    Ok((rules, first.name, compiled.warnings))
}

/// Decides one case; `Err` says which assertion failed, or why the case could not be run.
fn decide(
    case: &CaseDoc,
    dir: &Path,
    read: &dyn Fn(&Path) -> Result<String>,
    rules: &RuleSet,
    constraint: &str,
    now: Option<i64>,
) -> Result<(), String> {
    let path = dir.join(&case.object);
    let origin = path.display().to_string();
    let text = read(&path).map_err(|e| format!("{e:#}"))?;
    let docs = crate::documents::parse(&text, &origin).map_err(|e| format!("{e:#}"))?;
    let [object] = docs.as_slice() else {
        return Err(format!(
            "{origin}: expected one object, found {} documents",
            docs.len()
        ));
    };
    let mut namespaces: BTreeMap<String, Value> = BTreeMap::new();
    for item in &case.inventory {
        let path = dir.join(item);
        let origin = path.display().to_string();
        let text = read(&path).map_err(|e| format!("{e:#}"))?;
        for doc in crate::documents::parse(&text, &origin).map_err(|e| format!("{e:#}"))? {
            if doc["kind"] == "Namespace" && doc["apiVersion"] == "v1" {
                if let Some(name) = doc["metadata"]["name"].as_str() {
                    namespaces.insert(name.to_string(), doc.clone());
                }
            }
        }
    }
    let namespace = review::namespace_of(object).and_then(|n| namespaces.get(n));
    let review = review::of_object(object, namespace);
    let limit = Budget::FULL.limit(&rules.config);
    let outcomes = review::evaluate(rules, &review, limit, now);
    let messages = match outcomes.into_iter().find(|o| o.policy == constraint) {
        // Not matched: no violation.
        None => Vec::new(),
        // Allowed by a PolicyException, as admission allows it.
        Some(o) if o.exception.is_some() => Vec::new(),
        Some(o) => match o.result {
            Evaluation::Ran(Ok(messages)) => messages,
            Evaluation::Ran(Err(e)) => return Err(format!("evaluation error: {e}")),
            Evaluation::Pending(p) => return Err(format!("pending: {}", p.unmet)),
        },
    };
    let assertions = if case.assertions.is_empty() {
        vec![Assertion {
            violations: None,
            message: None,
        }]
    } else {
        case.assertions.clone()
    };
    for (i, a) in assertions.iter().enumerate() {
        a.check(&messages)
            .map_err(|e| format!("assertions[{i}]: {e}"))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn assertion(v: Value) -> Assertion {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn assertions_table() {
        let two = [
            "container a is privileged".to_string(),
            "initContainer b is privileged".to_string(),
        ];
        let cases = [
            (json!({}), &two[..], true),
            (json!({}), &[][..], false),
            (json!({"violations": "yes"}), &two[..], true),
            (json!({"violations": "no"}), &[][..], true),
            (json!({"violations": "no"}), &two[..], false),
            (json!({"violations": 2}), &two[..], true),
            (json!({"violations": 1}), &two[..], false),
            (
                json!({"violations": 1, "message": "^container"}),
                &two[..],
                true,
            ),
            (
                json!({"violations": "no", "message": "ephemeral"}),
                &two[..],
                true,
            ),
            (
                json!({"violations": "yes", "message": "init"}),
                &two[..],
                true,
            ),
            (json!({"violations": true}), &two[..], true),
        ];
        for (a, messages, want) in cases {
            assert_eq!(
                assertion(a.clone()).check(messages).is_ok(),
                want,
                "{a} on {messages:?}"
            );
        }
        let err = assertion(json!({"violations": "maybe"}))
            .check(&two)
            .unwrap_err();
        assert!(err.contains("yes, no or a number"), "{err}");
        let err = assertion(json!({"violations": -1}))
            .check(&two)
            .unwrap_err();
        assert!(err.contains("at least 0"), "{err}");
        let err = assertion(json!({"message": "("})).check(&two).unwrap_err();
        assert!(
            err.starts_with("`message` is not a regular expression"),
            "{err}"
        );
        let err = assertion(json!({"violations": 1, "message": "x"}))
            .check(&two)
            .unwrap_err();
        assert!(
            err.starts_with("expected 1 violations matching `x`, got 0"),
            "{err}"
        );
    }

    #[test]
    fn bad_suites_are_one_line_errors() {
        let none = |_: &Path| -> Result<String> { bail!("no files") };
        for (text, want) in [
            ("kind: Suit\n", "s.yaml: not a test suite: `kind: Suit`, where a gator test suite has `kind: Suite` (with `tests`)"),
            ("namespaceLabel: agentpool\n", "s.yaml: not a test suite: a gator test suite has `kind: Suite` and `tests`"),
            ("kind: Suite\ntests: [{template: t.yaml}]\n", "s.yaml: at `tests[0]`: missing field `constraint`"),
            ("kind: Suite\ntests: [{template: t, constraint: c, cases: [{object: o, assert: []}]}]\n", "unknown field `assert`"),
        ] {
            let err = run(text, Path::new("dir/s.yaml"), &none).unwrap_err().to_string();
            assert!(err.contains(want) && !err.contains('\n'), "{err}");
        }
        // A template that cannot be read is the test's load error, and its cases disagree.
        let report = run(
            "kind: Suite\ntests: [{name: t, template: t.yaml, constraint: c.yaml, cases: [{object: o.yaml}]}]\n",
            Path::new("dir/s.yaml"),
            &none,
        )
        .unwrap();
        assert_eq!(report.tests[0].load, Err("no files".to_string()));
        assert_eq!(report.counts(), (0, 1, 0));
    }
}
