//! `poolguard policy test`: runs every `test_*` rule of the `*_test.rego` files against the
//! policies they sit beside, as OPA's test runner does.

use anyhow::{Context, Result};
use regorus::Value;

use super::template::{Template, TestFile};
use super::{add_source, new_engine};

#[derive(Debug, Clone, PartialEq)]
pub struct TestResult {
    /// `package.rule`
    pub name: String,
    /// `None` when the test passed, else why it failed.
    pub failure: Option<String>,
}

/// Loads all templates and test files into one engine and evaluates each test rule.
pub fn run(templates: &[Template], tests: &[TestFile]) -> Result<Vec<TestResult>> {
    let mut engine = new_engine()?;
    for t in templates {
        add_source(&mut engine, t.path.display().to_string(), t.rego.clone())
            .with_context(|| format!("loading policy `{}`", t.name))?;
    }
    let mut rules = Vec::new();
    for file in tests {
        let package = add_source(
            &mut engine,
            file.path.display().to_string(),
            file.rego.clone(),
        )
        .with_context(|| format!("loading {}", file.path.display()))?;
        for name in test_rule_names(&file.rego) {
            rules.push(format!("{package}.{name}"));
        }
    }
    Ok(rules
        .into_iter()
        .map(|rule| {
            let failure = match engine.eval_rule(rule.clone()) {
                Ok(Value::Bool(true)) => None,
                Ok(Value::Undefined) => {
                    Some("undefined: a condition in the test was false".to_string())
                }
                Ok(other) => Some(format!("returned {other}, not true")),
                Err(e) => Some(format!("error: {e:#}")),
            };
            TestResult {
                name: rule.trim_start_matches("data.").to_string(),
                failure,
            }
        })
        .collect())
}

/// Names of the top-level rules starting with `test_`, in file order, each once.
fn test_rule_names(rego: &str) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    for line in rego.lines() {
        if !line.starts_with("test_") {
            continue;
        }
        let name: String = line
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        if !names.contains(&name) {
            names.push(name);
        }
    }
    names
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::template::from_rego;

    #[test]
    fn names_are_found_once_in_order() {
        let rego = "package p_test\ntest_b if { true }\n  test_nested := 1\ntest_a { true }\ntest_b if { false }\n";
        assert_eq!(test_rule_names(rego), ["test_b", "test_a"]);
    }

    #[test]
    fn passing_failing_and_erroring_tests() {
        let policy = from_rego(
            "p",
            "package p\nimport rego.v1\ndouble(x) := x * 2\n".into(),
            "p.rego".into(),
        );
        let tests = TestFile {
            path: "p_test.rego".into(),
            rego: "package p_test\nimport rego.v1\ntest_ok if { data.p.double(2) == 4 }\ntest_false if { data.p.double(2) == 5 }\ntest_value := 3\ntest_err if { 1 / 0 == 1 }\n".into(),
        };
        let results = run(&[policy], &[tests]).unwrap();
        let by_name = |n: &str| {
            results
                .iter()
                .find(|r| r.name == format!("p_test.{n}"))
                .unwrap()
                .failure
                .clone()
        };
        assert_eq!(by_name("test_ok"), None);
        assert!(by_name("test_false").unwrap().contains("undefined"));
        assert!(by_name("test_value").unwrap().contains("not true"));
        assert!(by_name("test_err").is_some());
    }
}
