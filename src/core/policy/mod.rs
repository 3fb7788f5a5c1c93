//! SIT policies in Rego: templates loaded into prepared regorus engines, evaluated per request.

pub mod builtins;
pub mod input;
pub mod rego_tests;
pub mod template;

use std::collections::BTreeMap;
use std::num::NonZeroU32;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use regorus::utils::limits::ExecutionTimerConfig;
use regorus::{Engine, Value};

use crate::config::{Config, Enforcement};
use crate::placement::Labels;
use crate::rollout::view::{RolloutMark, RolloutView, SharedView};
use template::Template;

/// Time checks happen every this many units of interpreter work.
const TIMER_CHECK_INTERVAL: u32 = 16;

/// One loaded policy: a prepared engine holding its Rego, cloned for each evaluation.
#[derive(Clone)]
pub struct Policy {
    pub name: String,
    pub inputs: Vec<String>,
    pub path: PathBuf,
    engine: Engine,
    rule: String,
    /// Whether the policy may read `input.review` (see [`reads_review`]).
    reads_review: bool,
    /// The Rego source, kept for [`Policy::version`].
    rego: Arc<str>,
}

/// All loaded policies, sorted by name, with their versions under the config they were loaded
/// with and what the replicas know of their rollouts.
#[derive(Clone, Default)]
pub struct PolicySet {
    policies: Vec<Policy>,
    /// Each policy's version (see [`Policy::version`]), set by [`PolicySet::set_versions`].
    versions: BTreeMap<String, String>,
    rollouts: SharedView,
}

/// What one policy said about one object.
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    pub policy: String,
    pub enforcement: Enforcement,
    /// Infringement messages, or why the policy could not be evaluated.
    pub result: std::result::Result<Vec<String>, String>,
    /// The rollout group, status and version, for a policy under a rollout.
    pub rollout: Option<RolloutMark>,
}

/// A regorus engine with the settings every policy shares: Rego v0 syntax accepted (StackL-era
/// templates; `import rego.v1` opts a file into v1) and OPA's deprecated `any`/`all`.
pub fn new_engine() -> Result<Engine> {
    let mut engine = Engine::new();
    engine.set_rego_v0(true);
    builtins::register(&mut engine)?;
    Ok(engine)
}

impl Policy {
    /// Compiles a template. Errors name the file and, for Rego errors, the line.
    pub fn compile(template: &Template) -> Result<Policy> {
        let path = template.path.display().to_string();
        let mut engine = new_engine()?;
        let package = engine
            .add_policy(path.clone(), template.rego.clone())
            .map_err(|e| anyhow::anyhow!("{e}"))
            .with_context(|| format!("policy `{}` does not compile", template.name))?;
        let want = format!("data.{}", template.name);
        if package != want {
            bail!(
                "{path}: the package must be named like the policy: expected `package {}`, found `package {}`",
                template.name,
                package.trim_start_matches("data.")
            );
        }
        let declared = engine
            .has_declared_rule_rooted_at(&path, "infringement")
            .map_err(|e| anyhow::anyhow!("{path}: {e}"))?;
        if !declared {
            bail!(
                "{path}: policy `{}` declares no `infringement` rule",
                template.name
            );
        }
        let rule = format!("{want}.infringement");
        // Evaluating once prepares the engine (analysis, rule gathering), so that every clone
        // starts prepared; unknown functions and similar mistakes also surface only here.
        engine.set_input(Value::new_object());
        let first = engine.eval_rule(rule.clone()).map_err(|e| {
            anyhow::anyhow!("{path}: policy `{}` does not compile: {e}", template.name)
        })?;
        messages(&first).map_err(|e| anyhow::anyhow!("{path}: {e}"))?;
        Ok(Policy {
            name: template.name.clone(),
            inputs: template.inputs.clone(),
            path: template.path.clone(),
            rule,
            engine,
            reads_review: reads_review(&template.rego),
            rego: Arc::from(template.rego.as_str()),
        })
    }

    /// The Rego source the policy was compiled from.
    pub fn rego(&self) -> &str {
        &self.rego
    }

    /// The policy's version under `config`, for rollouts (see
    /// [`crate::rollout::policy_version`]).
    pub fn version(&self, config: &Config) -> String {
        crate::rollout::policy_version(&self.rego, config, &self.name)
    }

    /// Evaluates `infringement` on `input` within `limit`: the messages, sorted.
    pub fn infringements(&self, input: Value, limit: Duration) -> Result<Vec<String>, String> {
        let mut engine = self.engine.clone();
        engine.set_execution_timer_config(ExecutionTimerConfig {
            limit,
            check_interval: NonZeroU32::new(TIMER_CHECK_INTERVAL).expect("non-zero constant"),
        });
        engine.set_input(input);
        let value = engine
            .eval_rule(self.rule.clone())
            .map_err(|e| format!("{e:#}"))?;
        messages(&value)
    }
}

/// Whether a policy's Rego may read `input.review`. Handing every policy the whole
/// AdmissionRequest costs a conversion per request, so it is left out for policies that cannot
/// reach it: those that never spell `review` and use `input` only to read a named field
/// (`input.services`). Anything else — `review` anywhere (comments and strings included),
/// `input[...]`, `input` on its own, `import input as i` — counts as reading it.
pub fn reads_review(rego: &str) -> bool {
    if rego.contains("review") {
        return true;
    }
    let word = |c: char| c.is_ascii_alphanumeric() || c == '_';
    rego.match_indices("input").any(|(at, _)| {
        let before = rego[..at].chars().next_back();
        let after = &rego[at + "input".len()..];
        if before.is_some_and(|c| word(c) || c == '.') || after.starts_with(word) {
            return false; // part of another name, or a field called `input`
        }
        let mut rest = after.chars();
        !(rest.next() == Some('.')
            && rest
                .next()
                .is_some_and(|c| c.is_ascii_alphabetic() || c == '_'))
    })
}

/// The `msg` of every element of an `infringement` set (undefined means none).
fn messages(value: &Value) -> Result<Vec<String>, String> {
    let items: Vec<&Value> = match value {
        Value::Undefined => return Ok(Vec::new()),
        Value::Set(s) => s.iter().collect(),
        Value::Array(a) => a.iter().collect(),
        other => {
            return Err(format!(
                "`infringement` must be a set of objects with `msg`, got {other}"
            ))
        }
    };
    let msg_key = Value::from("msg");
    let mut out: Vec<String> = items
        .into_iter()
        .map(
            |item| match item.as_object().ok().and_then(|o| o.get(&msg_key)) {
                Some(Value::String(s)) => s.to_string(),
                Some(other) => other.to_string(),
                None => item.to_string(),
            },
        )
        .collect();
    out.sort();
    out.dedup();
    Ok(out)
}

impl PolicySet {
    pub fn compile(templates: &[Template]) -> Result<PolicySet> {
        let mut policies = templates
            .iter()
            .map(Policy::compile)
            .collect::<Result<Vec<_>>>()?;
        policies.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(PolicySet {
            policies,
            ..PolicySet::default()
        })
    }

    /// Records each policy's version under `config` (the config decisions will use).
    pub fn set_versions(&mut self, config: &Config) {
        self.versions = self
            .policies
            .iter()
            .map(|p| (p.name.clone(), p.version(config)))
            .collect();
    }

    /// The version of the loaded policy `name` (empty before [`PolicySet::set_versions`]).
    pub fn version(&self, name: &str) -> &str {
        self.versions.get(name).map_or("", String::as_str)
    }

    /// What is known of the rollouts.
    pub fn rollouts(&self) -> &RolloutView {
        &self.rollouts
    }

    /// What is known of the rollouts, shared.
    pub fn rollouts_shared(&self) -> SharedView {
        self.rollouts.clone()
    }

    /// Replaces what is known of the rollouts.
    pub fn set_rollouts(&mut self, rollouts: SharedView) {
        self.rollouts = rollouts;
    }

    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.policies.iter().map(|p| p.name.as_str())
    }

    pub fn len(&self) -> usize {
        self.policies.len()
    }

    /// The policy named `name`.
    pub fn get(&self, name: &str) -> Option<&Policy> {
        self.policies.iter().find(|p| p.name == name)
    }

    pub fn is_empty(&self) -> bool {
        self.policies.is_empty()
    }

    /// Each policy's declared inputs, for checking the config against.
    pub fn declared_inputs(&self) -> BTreeMap<String, Vec<String>> {
        self.policies
            .iter()
            .map(|p| (p.name.clone(), p.inputs.clone()))
            .collect()
    }

    /// Runs every policy the config gives parameters for (at cluster or `pool` level) on `input`
    /// (an [`input::document`]), adding `review` for the policies that read it. A policy under a
    /// rollout runs the version, and at the enforcement, that its rollout gives a namespace
    /// with `labels` ([`RolloutView::resolve`]).
    pub fn evaluate(
        &self,
        input: &serde_json::Value,
        review: Option<&serde_json::Value>,
        pool: Option<&str>,
        labels: Option<&Labels>,
        config: &Config,
    ) -> Vec<Outcome> {
        let limit = Duration::from_millis(config.evaluation.timeout_millis);
        // Converted once per request, when the first policy needs them; regorus values share
        // their contents, so the per-policy copies below are shallow.
        let mut base: Option<Value> = None;
        let mut review_value: Option<Value> = None;
        let mut outcomes = Vec::new();
        for loaded in &self.policies {
            let version = self.version(&loaded.name);
            let Some(settings) = self.rollouts.resolve(loaded, version, config, pool, labels)
            else {
                continue;
            };
            let policy = settings.policy;
            let mut doc = base
                .get_or_insert_with(|| Value::from(input.clone()))
                .clone();
            let parameters = Value::from(serde_json::Value::Object(settings.parameters.clone()));
            let result = match doc.as_object_mut() {
                Ok(map) => {
                    map.insert(Value::from("parameters"), parameters);
                    if let Some(review) = review.filter(|_| policy.reads_review) {
                        let review = review_value
                            .get_or_insert_with(|| Value::from(review.clone()))
                            .clone();
                        map.insert(Value::from("review"), review);
                    }
                    policy.infringements(doc, limit)
                }
                Err(_) => Err("the input document is not an object".to_string()),
            };
            outcomes.push(Outcome {
                policy: policy.name.clone(),
                enforcement: settings.enforcement,
                result,
                rollout: settings.rollout,
            });
        }
        outcomes
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn template(name: &str, rego: &str) -> Template {
        template::from_rego(name, rego.to_string(), format!("{name}.rego").into())
    }

    #[test]
    fn compile_errors_name_file_and_line() {
        let err = format!(
            "{:#}",
            Policy::compile(&template(
                "bad",
                "package bad\n\ninfringement[{\"msg\": m}] {\n  m := \n}\n"
            ))
            .err()
            .unwrap()
        );
        assert!(err.contains("bad.rego:"), "{err}");
        assert!(err.contains("bad.rego:3:"), "{err}");
    }

    #[test]
    fn yaml_template_errors_report_file_lines() {
        let text = "name: bad\ntype: policy_template\npolicy: |\n  package bad\n  infringement[{\"msg\": m}] {\n    m := nope(1)\n  }\n";
        let t = template::from_yaml(text, "bad.yaml".into()).unwrap();
        let err = format!("{:#}", Policy::compile(&t).err().unwrap());
        assert!(err.contains("bad.yaml:6"), "{err}");
    }

    #[test]
    fn package_must_match_name_and_rule_must_exist() {
        let err = Policy::compile(&template(
            "a",
            "package b\ninfringement[{\"msg\": \"x\"}] { true }\n",
        ))
        .err()
        .unwrap()
        .to_string();
        assert!(err.contains("package a"), "{err}");
        let err = Policy::compile(&template("a", "package a\ndeny = true\n"))
            .err()
            .unwrap()
            .to_string();
        assert!(err.contains("no `infringement` rule"), "{err}");
    }

    #[test]
    fn runaway_policy_hits_the_time_limit() {
        let p = Policy::compile(&template(
            "slow",
            "package slow\ninfringement[{\"msg\": \"x\"}] { input.go; count([1 | numbers.range(1, 3000)[_]; numbers.range(1, 3000)[_]]) > 0 }\n",
        ))
        .unwrap();
        let err = p
            .infringements(Value::from(json!({"go": true})), Duration::from_millis(50))
            .unwrap_err();
        assert!(
            err.to_lowercase().contains("time") || err.contains("limit"),
            "{err}"
        );
    }

    #[test]
    fn reads_review_table() {
        let cases = [
            ("x := input.services[_]", false),
            ("x := input.target\ny := input.parameters.repos", false),
            ("x := data.input_config", false),
            ("x := my_input.review_free", true), // spells review
            ("x := input.review.object", true),
            ("# uses the review\nx := 1", true),
            ("x := input[\"rev\"]", true),
            ("x := input", true),
            ("import input as i\nx := i.services", true),
            ("x := object.get(input, \"services\", {})", true),
            ("x := walk(input)", true),
            ("x := input .services", true), // spacing we do not try to read
            ("x := foo.input", false),
            ("x := inputs.services", false),
            ("x := input.\"services\"", true),
        ];
        for (rego, want) in cases {
            assert_eq!(reads_review(rego), want, "{rego}");
        }
    }

    #[test]
    fn review_reaches_only_the_policies_that_read_it() {
        let policies = PolicySet::compile(&[
            template(
                "sees",
                "package sees\ninfringement[{\"msg\": m}] { m := sprintf(\"uid %v\", [input.review.uid]) }\n",
            ),
            template(
                "blind",
                "package blind\ninfringement[{\"msg\": m}] { m := sprintf(\"keys %v\", [object.keys(input)]) }\n",
            ),
            template(
                "fields",
                "package fields\ninfringement[{\"msg\": \"has target\"}] { input.target }\n",
            ),
        ])
        .unwrap();
        let config: Config = serde_json::from_value(json!({"policies": {
            "sees": {"parameters": {}}, "blind": {"parameters": {}}, "fields": {"parameters": {}}
        }}))
        .unwrap();
        let document = json!({"services": {}, "target": "gpu"});
        let review = json!({"uid": "u-1"});
        let outcomes = policies.evaluate(&document, Some(&review), None, None, &config);
        let by_name = |n: &str| {
            outcomes
                .iter()
                .find(|o| o.policy == n)
                .unwrap()
                .result
                .clone()
                .unwrap()
        };
        assert_eq!(by_name("sees"), vec!["uid u-1".to_string()]);
        // `object.keys(input)` uses `input` whole, so it gets `review` too.
        assert_eq!(
            by_name("blind"),
            vec![r#"keys {"parameters", "review", "services", "target"}"#.to_string()]
        );
        assert!(
            !policies
                .policies
                .iter()
                .find(|p| p.name == "fields")
                .unwrap()
                .reads_review
        );
        assert_eq!(by_name("fields"), vec!["has target".to_string()]);
    }

    #[test]
    fn the_version_follows_rego_and_parameters_not_enforcement() {
        let rego = "package v\ninfringement[{\"msg\": \"x\"}] { input.parameters.on }\n";
        let policies = PolicySet::compile(&[template("v", rego)]).unwrap();
        let policy = policies.get("v").unwrap();
        assert_eq!(policy.rego(), rego);
        assert!(policies.get("w").is_none());
        let config = |text: &str| Config::parse(text, "t").unwrap();
        let on = config("policies:\n  v:\n    enforcement: deny\n    parameters: {on: true}\n");
        let warn = config("policies:\n  v:\n    enforcement: warn\n    parameters: {on: true}\n");
        let off = config("policies:\n  v:\n    parameters: {on: false}\n");
        assert_eq!(
            policy.version(&on),
            crate::rollout::policy_version(rego, &on, "v")
        );
        assert_eq!(policy.version(&on), policy.version(&warn));
        assert_ne!(policy.version(&on), policy.version(&off));
        let edited = PolicySet::compile(&[template("v", &rego.replace("on", "enabled"))]).unwrap();
        assert_ne!(edited.get("v").unwrap().version(&on), policy.version(&on));
        // A YAML template's padding (blank lines that keep line numbers) is not an edit.
        let yaml = format!(
            "name: v\ndescription: something longer\ntype: policy_template\npolicy: |\n{}",
            rego.lines().map(|l| format!("  {l}\n")).collect::<String>()
        );
        let from_yaml =
            PolicySet::compile(&[template::from_yaml(&yaml, "v.yaml".into()).unwrap()]).unwrap();
        assert_eq!(
            from_yaml.get("v").unwrap().version(&on),
            policy.version(&on)
        );
    }

    #[test]
    fn messages_table() {
        let cases = [
            (Value::Undefined, Ok(vec![])),
            (
                Value::from(json!([{"msg": "b"}, {"msg": "a"}, {"msg": "a"}])),
                Ok(vec!["a".to_string(), "b".to_string()]),
            ),
            (Value::from(json!([{"msg": 1}])), Ok(vec!["1".to_string()])),
            (Value::from(true), Err(())),
        ];
        for (value, want) in cases {
            let got = messages(&value).map_err(|_| ());
            assert_eq!(got, want, "{value}");
        }
    }
}
