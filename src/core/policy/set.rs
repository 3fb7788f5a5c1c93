//! The loaded policies as a set: their evaluation order, versions and remembered results, and
//! the runner that evaluates one of them on one object. Which policies apply to an object is
//! the decision context's to say ([`crate::ruleset::plan`]).

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::Result;
use regorus::Value;

use super::dependencies::{Plan, State, Unmet};
use super::engine::{compile_sorted, Policy};
use super::memo::Memo;
use super::review_paths;
use super::template::Template;
use crate::config::parameters::Parameters;
use crate::config::{Config, Enforcement};
use crate::exceptions::ExceptionMark;
use crate::rollout_mark::RolloutMark;

/// All loaded policies, sorted by name, with their versions and dependencies under the config
/// they were loaded with.
#[derive(Clone, Default)]
pub struct PolicySet {
    policies: Vec<Policy>,
    /// Each policy's version (see [`Policy::version`]), set by [`PolicySet::set_versions`].
    versions: BTreeMap<String, String>,
    /// The evaluation order and each policy's dependencies, set by [`PolicySet::set_plan`].
    plan: Plan,
    /// Remembered results ([`memo`]), set by [`PolicySet::set_memo`]; none until then.
    memo: Memo<Vec<String>>,
}

/// What one policy said about one object.
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    pub policy: String,
    pub enforcement: Enforcement,
    pub result: Evaluation,
    /// The rollout group, status and version, for a policy under a rollout.
    pub rollout: Option<RolloutMark>,
    /// The live PolicyException that excepts the object from this policy: what it found is
    /// allowed, with a warning naming the exception.
    pub exception: Option<ExceptionMark>,
}

/// Whether a policy ran on an object, and what it found.
#[derive(Debug, Clone, PartialEq)]
pub enum Evaluation {
    /// Infringement messages (none: compliant), or why the policy could not be evaluated.
    Ran(std::result::Result<Vec<String>, String>),
    /// Not evaluated and not enforced: a dependency is not in the required compliance.
    Pending(Pending),
}

/// Why a policy is Pending for an object.
#[derive(Debug, Clone, PartialEq)]
pub struct Pending {
    pub unmet: Unmet,
    /// The policy's `ignorePending`: Pending counts as compliant where compliance is summed.
    pub ignore_pending: bool,
}

impl Evaluation {
    /// What the policies depending on this one see.
    pub fn state(&self) -> State {
        match self {
            Evaluation::Ran(result) => State::of(result),
            Evaluation::Pending(_) => State::Pending,
        }
    }
}

impl PolicySet {
    pub fn compile(templates: &[Template]) -> Result<PolicySet> {
        let policies = compile_sorted(templates, Policy::compile, |p| &p.name)?;
        Ok(PolicySet {
            plan: Plan::unordered(policies.len()),
            policies,
            ..PolicySet::default()
        })
    }

    /// The set of `sit` policies and `constraints` (Gatekeeper constraints compiled by
    /// [`crate::gatekeeper`]): one name may not be both.
    pub fn with_constraints(sit: PolicySet, constraints: Vec<Policy>) -> Result<PolicySet> {
        let mut policies = sit.policies;
        for constraint in constraints {
            if let Some(same) = policies.iter().find(|p| p.name == constraint.name) {
                anyhow::bail!(
                    "{}: constraint `{}` has the name of the policy loaded from {}; names must be unique",
                    constraint.path.display(),
                    constraint.name,
                    same.path.display()
                );
            }
            policies.push(constraint);
        }
        policies.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(PolicySet {
            plan: Plan::unordered(policies.len()),
            policies,
            ..PolicySet::default()
        })
    }

    /// Resolves the dependencies `config` gives the loaded policies into the order they are
    /// evaluated in (once per load: nothing of it is computed per request). An unknown name or
    /// a cycle is an error naming it.
    pub(crate) fn set_plan(&mut self, config: &Config) -> Result<()> {
        let names: Vec<&str> = self.names().collect();
        self.plan = Plan::new(&names, config)?;
        Ok(())
    }

    /// The evaluation order and dependencies.
    pub fn plan(&self) -> &Plan {
        &self.plan
    }

    /// Records each policy's version under `config` (the config decisions will use).
    pub(crate) fn set_versions(&mut self, config: &Config) {
        self.versions = self
            .policies
            .iter()
            .map(|p| (p.name.clone(), p.version(config)))
            .collect();
    }

    /// The version of the loaded policy `name` (empty before [`PolicySet::set_versions`]).
    /// Gives the set a memo of `config`'s `evaluation.resultCacheMiB` (a new one: nothing
    /// remembered under other policies or parameters is carried over, though keys would tell
    /// them apart).
    pub fn set_memo(&mut self, config: &Config) {
        self.memo = Memo::new(config.evaluation.result_cache_mib.saturating_mul(1 << 20));
    }

    /// The memo's hits and misses, and the bytes it holds.
    pub fn memo_stats(&self) -> ((u64, u64), u64) {
        (self.memo.stats(), self.memo.weight())
    }

    pub fn version(&self, name: &str) -> &str {
        self.versions.get(name).map_or("", String::as_str)
    }

    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.policies.iter().map(|p| p.name.as_str())
    }

    /// Whether any policy may read `input.review` (every constraint does).
    pub(crate) fn reads_review(&self) -> bool {
        self.policies.iter().any(|p| p.reads_review)
    }

    /// Whether any policy reads the [`input::document`] (every SIT policy does; a constraint's
    /// input is Gatekeeper's, the review and its parameters only).
    pub(crate) fn reads_document(&self) -> bool {
        !self.policies.iter().all(Policy::is_constraint)
    }

    /// Whether any Gatekeeper constraint is loaded.
    pub fn has_constraints(&self) -> bool {
        self.policies.iter().any(Policy::is_constraint)
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

    /// What each policy says of its parameters, for checking the config against.
    pub(crate) fn declared_inputs(&self) -> BTreeMap<String, crate::config::Declared> {
        self.policies
            .iter()
            .map(|p| {
                let declared = crate::config::Declared {
                    inputs: p.inputs.clone(),
                    names: p.parameter_names.clone(),
                };
                (p.name.clone(), declared)
            })
            .collect()
    }

    /// The policies, in name order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &Policy> {
        self.policies.iter()
    }

    /// The policy at `index` in name order (the index dependencies use).
    pub(crate) fn at(&self, index: usize) -> &Policy {
        &self.policies[index]
    }

    /// A runner for one object: its pod spec's `document` (an empty object for an object
    /// without one) and the AdmissionRequest `review`, each converted once for all the policies
    /// run on them.
    pub(crate) fn runner<'a>(
        &'a self,
        document: &'a serde_json::Value,
        review: Option<&'a serde_json::Value>,
    ) -> Runner<'a> {
        Runner {
            set: self,
            request: RequestInput::new(document, review),
        }
    }
}

/// Runs policies on one object ([`PolicySet::runner`]).
pub(crate) struct Runner<'a> {
    set: &'a PolicySet,
    request: RequestInput<'a>,
}

impl Runner<'_> {
    /// One policy's messages on the object with `parameters`, within `limit`: from its Rust copy
    /// when it is shipped and takes the input (cheaper than a memo key), else remembered, else
    /// from the interpreter.
    pub(crate) fn run(
        &mut self,
        policy: &Policy,
        parameters: &Parameters,
        limit: Duration,
    ) -> Result<Vec<String>, String> {
        let request = &mut self.request;
        let memo = &self.set.memo;
        let shipped = policy
            .shipped
            .and_then(|shipped| shipped.infringements(request.document, parameters.map()));
        if let Some(messages) = shipped {
            return Ok(messages);
        }
        // The memo's key: the policy and its whole input as text: its parameters, the document
        // (not a constraint's), and the parts of the review it reads.
        let key = (policy.memoizable && memo.keeps(0)).then(|| {
            let review = request.review_text(policy);
            let document = (!policy.is_constraint()).then(|| request.text().to_string());
            let parts: Vec<&str> = [
                Some(parameters.text()),
                document.as_deref(),
                review.as_deref(),
            ]
            .into_iter()
            .flatten()
            .collect();
            Memo::<Vec<String>>::key(policy.id, &parts)
        });
        if let Some(messages) = key.as_deref().and_then(|k| memo.get(k)) {
            return Ok(messages);
        }
        let result = request.run(policy, parameters, limit);
        if let (Some(key), Ok(messages)) = (key, &result) {
            memo.insert(key, messages.clone());
        }
        result
    }
}

/// One request's input to the policies, each form made once, when a policy first needs it.
struct RequestInput<'a> {
    /// The [`input::document`].
    document: &'a serde_json::Value,
    /// The AdmissionRequest, for the policies that read it.
    review: Option<&'a serde_json::Value>,
    /// `document` for regorus (its values share their contents: per-policy copies are
    /// shallow).
    converted: Option<Value>,
    /// What of `review` each policy run so far reads ([`Policy::review_paths`]), converted:
    /// one conversion for the policies that read the same parts.
    review_converted: Vec<(Option<Vec<Vec<String>>>, Value)>,
    /// `document` as JSON text, for memo keys.
    text: Option<String>,
    /// What of `review` each memoizable policy run so far reads, as text for memo keys: one
    /// text for the policies that read the same parts (the constraints of one template).
    review_texts: Vec<(Vec<Vec<String>>, String)>,
}

impl<'a> RequestInput<'a> {
    fn new(document: &'a serde_json::Value, review: Option<&'a serde_json::Value>) -> Self {
        RequestInput {
            document,
            review,
            converted: None,
            review_converted: Vec::new(),
            text: None,
            review_texts: Vec::new(),
        }
    }

    fn text(&mut self) -> &str {
        self.text.get_or_insert_with(|| self.document.to_string())
    }

    /// The parts of the review `policy` reads, as text (`None` when it reads none; `null` when
    /// there is no review).
    fn review_text(&mut self, policy: &Policy) -> Option<String> {
        let paths = policy
            .review_paths
            .as_ref()
            .filter(|_| policy.reads_review)?;
        let Some(review) = self.review else {
            return Some("null".to_string());
        };
        if let Some((_, text)) = self.review_texts.iter().find(|(p, _)| p == paths) {
            return Some(text.clone());
        }
        let text = review_paths::text(review, paths);
        self.review_texts.push((paths.clone(), text.clone()));
        Some(text)
    }

    /// Runs `policy` on the document with its `parameters`, and `review` if it reads it.
    fn run(
        &mut self,
        policy: &Policy,
        parameters: &Parameters,
        limit: Duration,
    ) -> Result<Vec<String>, String> {
        let document = self.document;
        // A constraint's input is Gatekeeper's: `review` and `parameters`, nothing else.
        let mut doc = if policy.is_constraint() {
            Value::new_object()
        } else {
            self.converted
                .get_or_insert_with(|| review_paths::rego(document))
                .clone()
        };
        let Ok(map) = doc.as_object_mut() else {
            return Err("the input document is not an object".to_string());
        };
        map.insert(Value::from("parameters"), parameters.rego().clone());
        if let Some(review) = self.review.filter(|_| policy.reads_review) {
            let paths = &policy.review_paths;
            let known = self.review_converted.iter().find(|(p, _)| p == paths);
            let converted = match known {
                Some((_, converted)) => converted.clone(),
                None => {
                    let converted = match paths {
                        Some(paths) => review_paths::keep(review, paths),
                        None => review_paths::rego(review),
                    };
                    self.review_converted
                        .push((paths.clone(), converted.clone()));
                    converted
                }
            };
            map.insert(Value::from("review"), converted);
        }
        policy.infringements(doc, limit)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::engine::*;
    use crate::policy::{rego_tests, template};
    use serde_json::json;

    /// The configured per-policy time limit, uncut.
    fn limit(config: &Config) -> Duration {
        Duration::from_millis(config.evaluation.timeout_millis)
    }

    /// What the policies that apply say of a pod spec `document` under `config`, through the
    /// decision context (no rollouts, no placement policies; the memo stays `policies'`).
    fn evaluate(
        policies: &PolicySet,
        config: &Config,
        document: Option<&serde_json::Value>,
        review: Option<&serde_json::Value>,
        pool: Option<&str>,
        placement: State,
    ) -> Vec<Outcome> {
        let rules = crate::ruleset::RuleSet {
            config: config.clone(),
            policies: policies.clone(),
            placement: Default::default(),
            rollouts: Default::default(),
            exceptions: Default::default(),
        };
        let subject = crate::ruleset::Subject {
            document,
            review,
            pool,
            labels: None,
            placement,
            target: None,
            now: None,
        };
        rules.evaluate(subject, limit(config))
    }

    fn template(name: &str, rego: &str) -> Template {
        template::from_rego(name, rego.to_string(), format!("{name}.rego").into())
    }

    #[test]
    fn deep_nesting_is_refused_before_the_parser_spends_exponential_time_on_it() {
        // Found by fuzzing (policy_template): a run of `{` in a template took the Rego parser
        // minutes. Refused at once, naming the file and line.
        let deep = format!(
            "package p\n\ninfringement[{{\"msg\": m}}] {{\n  m := object.get({}r, \"type\", \"c\")\n}}\n",
            "{".repeat(64)
        );
        let start = std::time::Instant::now();
        let err = format!(
            "{:#}",
            Policy::compile(&template("p", &deep)).err().unwrap()
        );
        assert!(
            start.elapsed() < Duration::from_secs(1),
            "{:?}",
            start.elapsed()
        );
        assert!(err.contains("p.rego:4: brackets"), "{err}");
        assert!(err.contains("nested more than 12 deep"), "{err}");
        let tests = [template::TestFile {
            rego: deep.replace("package p", "package p_test"),
            path: "p_test.rego".into(),
        }];
        let err = format!("{:#}", rego_tests::run(&[], &tests).err().unwrap());
        assert!(err.contains("p_test.rego:4: brackets"), "{err}");
    }

    #[test]
    fn nesting_up_to_the_limit_and_brackets_in_strings_and_comments_are_accepted() {
        let nested = format!("{}1{}", "[".repeat(MAX_NESTING), "]".repeat(MAX_NESTING));
        let rego = format!(
            "package p\n# {{{{{{{{{{{{{{{{{{{{{{{{{{{{\nx := {nested}\ny := \"[[[[[[[[[[[[[[[[\\\"[[\"\nz := `{{{{{{{{{{{{{{{{\n{{{{`\ninfringement[{{\"msg\": \"m\"}}] {{\n  false\n}}\n"
        );
        Policy::compile(&template("p", &rego)).unwrap();
        let too_deep = rego.replace(&nested, &format!("[{nested}]"));
        let err = format!(
            "{:#}",
            Policy::compile(&template("p", &too_deep)).err().unwrap()
        );
        assert!(err.contains("p.rego:3: brackets"), "{err}");
    }

    #[test]
    fn templates_are_sit_or_sat_by_their_entry_rule() {
        let sit = template("s", "package s\ninfringement[{\"msg\": \"x\"}] { false }\n");
        let sat = template(
            "t",
            "package t\nsolutions = {\"fulfilled\": false, \"msg\": \"no\"} { true }\n",
        );
        assert_eq!(kind_of(&sit).unwrap(), TemplateKind::Sit);
        assert_eq!(kind_of(&sat).unwrap(), TemplateKind::Sat);
        let both = template(
            "b",
            "package b\ninfringement[{\"msg\": \"x\"}] { false }\nsolutions := {}\n",
        );
        let err = kind_of(&both).unwrap_err().to_string();
        assert!(err.starts_with("b.rego: policy `b` declares both"), "{err}");
        let err = kind_of(&template("n", "package n\nx := 1\n"))
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("n.rego: policy `n` declares neither"),
            "{err}"
        );
        // A placement policy given to the SIT loader says where it belongs.
        let err = Policy::compile(&sat).err().unwrap().to_string();
        assert_eq!(
            err,
            "t.rego: policy `t` declares no `infringement` rule: it defines `solutions`, so it is a placement (SAT) policy, loaded with the placement policies"
        );
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

    /// Loading evaluates a template once: that evaluation is bounded in time, and a huge range
    /// is an error, not an allocation that aborts the process. Each is refused with its reason.
    #[test]
    fn a_template_cannot_stall_or_abort_its_load() {
        let stalls = "package stalls\ninfringement[{\"msg\": \"x\"}] { some i, j; numbers.range(1, 1000000)[i]; numbers.range(1, 1000000)[j]; i * j < 0 }\n";
        let err = Policy::compile(&template("stalls", stalls))
            .err()
            .unwrap()
            .to_string();
        assert!(
            err.contains("policy `stalls` does not compile: its first evaluation (on an empty input) ran past 2 s"),
            "{err}"
        );
        let huge =
            "package huge\ninfringement[{\"msg\": \"x\"}] { count(numbers.range(1, 1e11)) > 0 }\n";
        let err = Policy::compile(&template("huge", huge))
            .err()
            .unwrap()
            .to_string();
        assert!(
            err.contains(
                "numbers.range: 100000000000 elements, more than the 1000000 poolguard allows"
            ),
            "{err}"
        );
        // Sized by the input at admission: the evaluation fails (onError decides), the process
        // lives on.
        let sized = "package sized\ninfringement[{\"msg\": \"x\"}] { count(numbers.range(1, input.n)) > 0 }\n";
        let p = Policy::compile(&template("sized", sized)).unwrap();
        let err = p
            .infringements(Value::from(json!({"n": 1e11})), Duration::from_secs(1))
            .unwrap_err();
        assert!(
            err.contains("more than the 1000000 poolguard allows"),
            "{err}"
        );
    }

    #[test]
    fn print_output_does_not_reach_standard_error() {
        // Gathered, not written: the engine's buffer holds it (and is dropped with the clone
        // that evaluated), so nothing reaches poolguard's log stream.
        let mut engine = crate::policy::engine::new_engine().unwrap();
        engine
            .add_policy(
                "p.rego".into(),
                "package p\nx { print(\"line\\n{\\\"level\\\":\\\"INFO\\\"}\") }\n".into(),
            )
            .unwrap();
        assert_eq!(
            engine.eval_rule("data.p.x".into()).unwrap(),
            Value::from(true)
        );
        let prints = engine.take_prints().unwrap();
        assert_eq!(prints.len(), 1, "{prints:?}");
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
    fn results_are_remembered_by_policy_parameters_document_and_the_review_parts_read() {
        let mut policies = PolicySet::compile(&[
            template(
                "images",
                "package images\ninfringement[{\"msg\": m}] { some s, c; i := input.services[s].functional_requirements[c].image; not startswith(i, input.parameters.prefix); m := sprintf(\"%v: %v\", [c, i]) }\n",
            ),
            template(
                "sees",
                "package sees\ninfringement[{\"msg\": m}] { m := sprintf(\"uid %v\", [input.review.uid]) }\n",
            ),
        ])
        .unwrap();
        let config = |prefix: &str| -> Config {
            serde_json::from_value(json!({"policies": {
                "images": {"parameters": {"prefix": prefix}}, "sees": {"parameters": {}}
            }}))
            .unwrap()
        };
        let cluster = config("good/");
        policies.set_memo(&cluster);
        let doc = |image: &str| json!({"services": {"web-": {"functional_requirements": {"c": {"image": image}}}}, "target": null});
        let run = |policies: &PolicySet, config: &Config, image: &str, uid: &str| {
            let outcomes = evaluate(
                policies,
                config,
                Some(&doc(image)),
                Some(&json!({"uid": uid})),
                None,
                State::NotApplied,
            );
            outcomes
                .into_iter()
                .map(|o| match o.result {
                    Evaluation::Ran(Ok(found)) => (o.policy, found),
                    other => panic!("{other:?}"),
                })
                .collect::<Vec<_>>()
        };
        let want = |images: Vec<&str>, uid: &str| {
            vec![
                (
                    "images".to_string(),
                    images.into_iter().map(String::from).collect::<Vec<_>>(),
                ),
                ("sees".to_string(), vec![format!("uid {uid}")]),
            ]
        };
        // Table: (parameters, image, uid, messages, memo hits so far). `sees` reads the
        // review's uid: remembered by it, so a fresh uid is never a hit and always shows; the
        // same uid again (the last case) is.
        let other = config("bad/");
        let cases: [(&Config, &str, &str, Vec<&str>, u64); 6] = [
            (&cluster, "bad/x", "u1", vec!["c: bad/x"], 0),
            (&cluster, "bad/x", "u2", vec!["c: bad/x"], 1),
            (&cluster, "good/x", "u3", vec![], 1),
            (&other, "bad/x", "u4", vec![], 1),
            (&other, "bad/x", "u5", vec![], 2),
            (&other, "bad/x", "u5", vec![], 4),
        ];
        for (i, (config, image, uid, messages, hits)) in cases.into_iter().enumerate() {
            assert_eq!(
                run(&policies, config, image, uid),
                want(messages, uid),
                "case {i}"
            );
            assert_eq!(policies.memo_stats().0 .0, hits, "case {i}");
        }
        // The same answers with nothing remembered.
        let mut off = policies.clone();
        off.set_memo(
            &serde_json::from_value(json!({"evaluation": {"resultCacheMiB": 0}})).unwrap(),
        );
        assert_eq!(
            run(&off, &cluster, "bad/x", "u6"),
            want(vec!["c: bad/x"], "u6")
        );
        assert_eq!(off.memo_stats(), ((0, 0), 0));
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
        let outcomes = evaluate(
            &policies,
            &config,
            Some(&document),
            Some(&review),
            None,
            State::NotApplied,
        );
        let by_name = |n: &str| {
            outcomes
                .iter()
                .find(|o| o.policy == n)
                .unwrap()
                .result
                .clone()
        };
        let by_name = |n: &str| match by_name(n) {
            Evaluation::Ran(Ok(found)) => found,
            other => panic!("{n}: {other:?}"),
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

    /// Policies that fail or error on a flag of the input: `flags.<name>: fail | error`.
    fn flagged(names: &[&str]) -> PolicySet {
        let templates: Vec<Template> = names
            .iter()
            .map(|n| {
                template(
                    n,
                    &format!(
                        "package {n}\ninfringement[{{\"msg\": \"{n} fails\"}}] {{ input.flags.{n} == \"fail\" }}\ninfringement[{{\"msg\": m}}] {{ input.flags.{n} == \"error\"; m := 1 / 0 }}\n"
                    ),
                )
            })
            .collect();
        PolicySet::compile(&templates).unwrap()
    }

    /// Dependencies point from later names to earlier ones, so name order would be wrong.
    const DEPENDENT: &str = r#"
policies:
  z: {parameters: {}}
  y: {parameters: {}, dependencies: [{policy: z}]}
  x: {parameters: {}, dependencies: [{policy: y}], ignorePending: true}
  w: {parameters: {}, dependencies: [{policy: z, compliance: NonCompliant}]}
  v: {parameters: {}, dependencies: [{policy: placement}], enforcement: warn}
  u: {parameters: {}, dependencies: [{policy: t}]}
  s: {parameters: {}}
pools:
  only:
    policies:
      t: {parameters: {}}
"#;

    #[test]
    fn dependencies_table() {
        use super::super::dependencies::State::{Compliant, NonCompliant, NotApplied};
        let rules = crate::ruleset::RuleSet::new(
            Config::parse(DEPENDENT, "t").unwrap(),
            flagged(&["s", "t", "u", "v", "w", "x", "y", "z"]),
            Default::default(),
            "t",
        )
        .unwrap();
        let pending = |what: &str| format!("pending: {what}");
        // (case, flags, pool, placement, each applied policy in name order: pass, fail, error
        // or pending: why)
        type Case = (
            &'static str,
            serde_json::Value,
            Option<&'static str>,
            State,
            Vec<(&'static str, String)>,
        );
        let cases: Vec<Case> = vec![
            (
                "all compliant, no pool",
                json!({}),
                None,
                NotApplied,
                vec![
                    ("s", "pass".into()),
                    ("u", pending("dependency t does not apply (no parameters for the namespace's pool), Compliant required")),
                    ("v", pending("dependency placement does not apply (the namespace has no pool), Compliant required")),
                    ("w", pending("dependency z is Compliant, NonCompliant required")),
                    ("x", "pass".into()),
                    ("y", "pass".into()),
                    ("z", "pass".into()),
                ],
            ),
            (
                "z fails: y and the chain after it are pending, w runs",
                json!({"z": "fail", "y": "fail", "x": "fail", "w": "fail"}),
                None,
                NotApplied,
                vec![
                    ("s", "pass".into()),
                    ("u", pending("dependency t does not apply (no parameters for the namespace's pool), Compliant required")),
                    ("v", pending("dependency placement does not apply (the namespace has no pool), Compliant required")),
                    ("w", "fail".into()),
                    ("x", pending("dependency y is Pending, Compliant required")),
                    ("y", pending("dependency z is NonCompliant, Compliant required")),
                    ("z", "fail".into()),
                ],
            ),
            (
                "z errors: unmet whichever compliance is required",
                json!({"z": "error"}),
                None,
                NotApplied,
                vec![
                    ("s", "pass".into()),
                    ("u", pending("dependency t does not apply (no parameters for the namespace's pool), Compliant required")),
                    ("v", pending("dependency placement does not apply (the namespace has no pool), Compliant required")),
                    ("w", pending("dependency z could not be evaluated, NonCompliant required")),
                    ("x", pending("dependency y is Pending, Compliant required")),
                    ("y", pending("dependency z could not be evaluated, Compliant required")),
                    ("z", "error".into()),
                ],
            ),
            (
                "y fails: x is pending; placement satisfied",
                json!({"y": "fail"}),
                Some("pool1"),
                Compliant,
                vec![
                    ("s", "pass".into()),
                    ("u", pending("dependency t does not apply (no parameters for the namespace's pool), Compliant required")),
                    ("v", "pass".into()),
                    ("w", pending("dependency z is Compliant, NonCompliant required")),
                    ("x", pending("dependency y is NonCompliant, Compliant required")),
                    ("y", "fail".into()),
                    ("z", "pass".into()),
                ],
            ),
            (
                "a dependency applied in this pool only; placement conflicts",
                json!({"y": "error", "v": "fail", "u": "fail"}),
                Some("only"),
                NonCompliant,
                vec![
                    ("s", "pass".into()),
                    ("t", "pass".into()),
                    ("u", "fail".into()),
                    ("v", pending("dependency placement is NonCompliant, Compliant required")),
                    ("w", pending("dependency z is Compliant, NonCompliant required")),
                    ("x", pending("dependency y could not be evaluated, Compliant required")),
                    ("y", "error".into()),
                    ("z", "pass".into()),
                ],
            ),
            (
                "t fails in its pool: u pending",
                json!({"t": "fail", "v": "fail"}),
                Some("only"),
                Compliant,
                vec![
                    ("s", "pass".into()),
                    ("t", "fail".into()),
                    ("u", pending("dependency t is NonCompliant, Compliant required")),
                    ("v", "fail".into()),
                    ("w", pending("dependency z is Compliant, NonCompliant required")),
                    ("x", "pass".into()),
                    ("y", "pass".into()),
                    ("z", "pass".into()),
                ],
            ),
        ];
        for (name, flags, pool, placement, want) in cases {
            let document = json!({"services": {}, "flags": flags});
            let got: Vec<(String, String)> = evaluate(
                &rules.policies,
                &rules.config,
                Some(&document),
                None,
                pool,
                placement,
            )
            .into_iter()
            .map(|o| {
                let what = match &o.result {
                    Evaluation::Ran(Ok(found)) if found.is_empty() => "pass".to_string(),
                    Evaluation::Ran(Ok(_)) => "fail".to_string(),
                    Evaluation::Ran(Err(_)) => "error".to_string(),
                    Evaluation::Pending(p) => {
                        // ignorePending is x's alone.
                        assert_eq!(p.ignore_pending, o.policy == "x", "{name}");
                        pending(&p.unmet.to_string())
                    }
                };
                (o.policy, what)
            })
            .collect();
            let want: Vec<(String, String)> =
                want.into_iter().map(|(p, w)| (p.to_string(), w)).collect();
            assert_eq!(got, want, "{name}");
        }
    }

    #[test]
    fn without_dependencies_policies_run_in_name_order() {
        let policies = flagged(&["b", "a"]);
        assert_eq!(policies.plan(), &Plan::unordered(2));
        let rules = crate::ruleset::RuleSet::new(
            Config::parse("policies: {a: {parameters: {}}, b: {parameters: {}}}", "t").unwrap(),
            policies,
            Default::default(),
            "t",
        )
        .unwrap();
        assert!(!rules.policies.plan().has_dependencies());
        assert_eq!(rules.policies.plan().order, [0, 1]);
        let outcomes = evaluate(
            &rules.policies,
            &rules.config,
            Some(&json!({"flags": {"a": "fail", "b": "error"}})),
            None,
            None,
            State::NotApplied,
        );
        let names: Vec<&str> = outcomes.iter().map(|o| o.policy.as_str()).collect();
        assert_eq!(names, ["a", "b"]);
        assert_eq!(outcomes[0].result.state(), State::NonCompliant);
        assert_eq!(outcomes[1].result.state(), State::Error);
    }

    #[test]
    fn loading_rejects_unknown_dependencies_and_cycles() {
        let load = |text: &str| {
            // As written, without the config's own checks, to reach the load's.
            let config: Config = crate::documents::parse_one(text, "t").unwrap();
            crate::ruleset::RuleSet::new(
                config,
                flagged(&["a", "b"]),
                Default::default(),
                "cfg.yaml",
            )
            .err()
            .map(|e| e.to_string())
        };
        assert_eq!(
            load("policies:\n  a: {dependencies: [{policy: c}], parameters: {}}\n").as_deref(),
            Some("cfg.yaml: at `policies.a.dependencies[0].policy`: no policy named `c` is loaded, and it is not `placement` (loaded: a, b)")
        );
        assert_eq!(
            load("policies:\n  a: {dependencies: [{policy: b}], parameters: {}}\n  b: {dependencies: [{policy: a}], parameters: {}}\n").as_deref(),
            Some("cfg.yaml: at `policies.a.dependencies`: dependency cycle a -> b -> a")
        );
        assert_eq!(
            load("policies:\n  b: {dependencies: [{policy: b}], parameters: {}}\n").as_deref(),
            Some("cfg.yaml: at `policies.b.dependencies`: policy `b` depends on itself")
        );
        assert_eq!(
            load("policies:\n  b: {dependencies: [{policy: a}], parameters: {}}\n"),
            None
        );
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
            crate::policy::version::policy_version(rego, &on, "v")
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
