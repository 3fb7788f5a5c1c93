//! One SIT policy in Rego: a prepared regorus engine holding it, cloned for each evaluation,
//! and what every policy engine shares (Rego v0, the builtins, a guard on parser depth,
//! evaluation within a time limit).

use std::num::NonZeroU32;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use regorus::utils::limits::ExecutionTimerConfig;
use regorus::{Engine, Value};

use super::shipped::Shipped;
use super::string_literal::skip_quoted;
use super::template::Template;
use super::{builtins, memo, review_paths};
use crate::config::Config;

/// Time checks happen every this many units of interpreter work.
const TIMER_CHECK_INTERVAL: u32 = 16;

/// One loaded policy: a prepared engine holding its Rego, cloned for each evaluation.
#[derive(Clone)]
pub struct Policy {
    pub name: String,
    pub inputs: Vec<String>,
    /// Every parameter name it may read ([`Template::parameter_names`]); `None` when unknown.
    pub parameter_names: Option<Vec<String>>,
    pub path: PathBuf,
    pub(super) engine: Engine,
    pub(super) rule: String,
    /// Whether the policy may read `input.review` (see [`reads_review`]).
    pub(super) reads_review: bool,
    /// What of the review it may read ([`review_paths::of`]); `None`: all of it.
    pub(super) review_paths: Option<Vec<Vec<String>>>,
    /// The Rego source, kept for [`Policy::version`].
    pub(super) rego: Arc<str>,
    /// Its identity in memo keys ([`memo::next_policy_id`]).
    pub(super) id: u64,
    /// Whether its results may be remembered: it reads no `review` and calls no builtin whose
    /// answer changes ([`memo::deterministic`]).
    pub(super) memoizable: bool,
    /// For a Gatekeeper constraint, the objects it applies to (its `spec.match`) and its
    /// template's text; none for a SIT policy, which applies to every object the webhook checks.
    pub(super) constraint: Option<Arc<ConstraintSource>>,
    /// For a shipped policy loaded unchanged, its copy in Rust ([`Shipped`]), which decides
    /// the inputs it takes without the interpreter.
    pub(super) shipped: Option<Shipped>,
}

/// What a Gatekeeper constraint is made of beside its settings: its `spec.match` and its
/// template's Rego (as written, before poolguard rewrites multi-body rules) and libs. Enough to
/// compile it again anywhere, which a stored rollout version does.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ConstraintSource {
    pub matching: crate::matching::Match,
    /// The template's `metadata.name`.
    pub template: String,
    /// The template's kind (its constraints' kind).
    pub kind: String,
    pub rego: String,
    #[serde(default)]
    pub libs: Vec<String>,
    /// Whether the audit reports it: false when its `scopedEnforcementActions` name no audit
    /// point ([`crate::gatekeeper::constraint::Constraint::audited`]).
    #[serde(default = "audited_by_default")]
    pub audited: bool,
}

fn audited_by_default() -> bool {
    true
}

/// A regorus engine with the settings every policy shares: Rego v0 syntax accepted (StackL-era
/// templates; `import rego.v1` opts a file into v1) and OPA's deprecated `any`/`all`.
pub(crate) fn new_engine() -> Result<Engine> {
    let mut engine = Engine::new();
    engine.set_rego_v0(true);
    // regorus writes `print()` output raw to standard error, which is poolguard's log stream: a
    // value with a newline in it (a pod annotation) would make a line that reads as a log record
    // of poolguard's own. Gathered instead, and dropped with the evaluation's engine.
    engine.set_gather_prints(true);
    builtins::register(&mut engine)?;
    Ok(engine)
}

/// The deepest nesting of `{` and `[` accepted in Rego source. regorus (0.14) parses a bracket
/// whose content starts with more brackets over again (as a comprehension, then as a literal),
/// so its parse time doubles with each level: about a second at 16 levels, minutes at 24 (found
/// by fuzzing). poolguard's own policies and tests nest 6 deep at most.
pub(crate) const MAX_NESTING: usize = 12;

/// Adds Rego source to `engine`, returning its package (`data.…`); source nested deeper than
/// [`MAX_NESTING`] is refused before it reaches the parser.
pub(crate) fn add_source(engine: &mut Engine, path: String, rego: String) -> Result<String> {
    check_nesting(&path, &rego)?;
    engine
        .add_policy(path, rego)
        .map_err(|e| anyhow::anyhow!("{e}"))
}

/// Fails on the first `{` or `[` nested more than [`MAX_NESTING`] deep, outside strings and
/// comments, naming the file and line.
fn check_nesting(path: &str, rego: &str) -> Result<()> {
    let mut depth = 0usize;
    let mut line = 1;
    let mut chars = rego.chars();
    while let Some(c) = chars.next() {
        match c {
            '\n' => line += 1,
            // A comment runs to the end of the line.
            '#' => line += usize::from(chars.by_ref().any(|c| c == '\n')),
            '"' => line += usize::from(skip_quoted(&mut chars)),
            '`' => {
                for c in chars.by_ref() {
                    match c {
                        '`' => break,
                        '\n' => line += 1,
                        _ => {}
                    }
                }
            }
            '{' | '[' => {
                depth += 1;
                if depth > MAX_NESTING {
                    bail!(
                        "{path}:{line}: brackets (`{{` and `[`) nested more than {MAX_NESTING} deep; the Rego parser takes time exponential in the nesting"
                    );
                }
            }
            '}' | ']' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    Ok(())
}

/// Which kind of policy a template is, by the entry rule it declares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TemplateKind {
    /// `infringement`: a SIT policy, checking objects ([`Policy`]).
    Sit,
    /// `solutions`: a SAT policy, choosing pools
    /// ([`crate::placement_policy::PlacementPolicy`]).
    Sat,
}

/// A fresh engine holding the template's Rego, with its package checked to be named like the
/// policy; and the path the module is known by. Errors name the file and, for Rego errors, the
/// line.
pub(crate) fn load(template: &Template) -> Result<(Engine, String)> {
    let path = template.path.display().to_string();
    let mut engine = new_engine()?;
    let package = add_source(&mut engine, path.clone(), template.rego.clone())
        .with_context(|| format!("policy `{}` does not compile", template.name))?;
    if package != format!("data.{}", template.name) {
        bail!(
            "{path}: the package must be named like the policy: expected `package {}`, found `package {}`",
            template.name,
            package.trim_start_matches("data.")
        );
    }
    Ok((engine, path))
}

/// Whether the module loaded from `path` declares `rule`.
pub(crate) fn declares(engine: &Engine, path: &str, rule: &str) -> Result<bool> {
    engine
        .has_declared_rule_rooted_at(path, rule)
        .map_err(|e| anyhow::anyhow!("{path}: {e}"))
}

/// Whether a template is a SIT policy (it declares `infringement`) or a SAT one (`solutions`);
/// one declaring both or neither is an error naming the file.
pub fn kind_of(template: &Template) -> Result<TemplateKind> {
    let (engine, path) = load(template)?;
    let name = &template.name;
    match (
        declares(&engine, &path, "infringement")?,
        declares(&engine, &path, "solutions")?,
    ) {
        (true, false) => Ok(TemplateKind::Sit),
        (false, true) => Ok(TemplateKind::Sat),
        (true, true) => bail!(
            "{path}: policy `{name}` declares both `infringement` (a SIT policy) and `solutions` (a placement policy); a template is one or the other"
        ),
        (false, false) => bail!(
            "{path}: policy `{name}` declares neither `infringement` (a SIT policy) nor `solutions` (a placement policy)"
        ),
    }
}

/// How long a template's first evaluation, at load, may run: it prepares the engine and runs
/// the template's Rego on an empty input, so a template that loops at load would otherwise keep
/// poolguard from starting (and every later reload waiting).
pub(crate) const LOAD_LIMIT: Duration = Duration::from_secs(2);

/// Evaluates `rule` once on the engine's input, stopped past [`LOAD_LIMIT`], so that every clone
/// of `engine` starts prepared (analysis, rule gathering); unknown functions and similar
/// mistakes also surface only here. Prints made meanwhile are dropped, not kept in every clone.
pub(crate) fn prepare(engine: &mut Engine, rule: &str) -> Result<Value, String> {
    engine.set_execution_timer_config(ExecutionTimerConfig {
        limit: LOAD_LIMIT,
        check_interval: NonZeroU32::new(TIMER_CHECK_INTERVAL).expect("non-zero constant"),
    });
    let first = engine.eval_rule(rule.to_string()).map_err(|e| {
        let e = format!("{e:#}");
        if e.contains("time limit") {
            format!(
                "its first evaluation (on an empty input) ran past {} s: {e}",
                LOAD_LIMIT.as_secs()
            )
        } else {
            e
        }
    });
    engine.clear_execution_timer_config();
    let _ = engine.take_prints();
    first
}

/// Evaluates `rule` on `input` in a clone of the prepared `engine`, stopped past `limit`; an
/// error as one string. Shared by SIT and placement policies.
pub(crate) fn eval_within(
    engine: &Engine,
    rule: &str,
    input: Value,
    limit: Duration,
) -> Result<Value, String> {
    let mut engine = engine.clone();
    engine.set_execution_timer_config(ExecutionTimerConfig {
        limit,
        check_interval: NonZeroU32::new(TIMER_CHECK_INTERVAL).expect("non-zero constant"),
    });
    engine.set_input(input);
    engine
        .eval_rule(rule.to_string())
        .map_err(|e| format!("{e:#}"))
}

/// A template compiled for the entry rule of its kind, SIT or SAT: the one compile path of
/// both kinds of policy.
pub(crate) struct Compiled {
    /// Prepared: evaluated once, so every clone starts prepared.
    pub engine: Engine,
    /// The entry rule's path (`data.<name>.infringement` or `data.<name>.solutions`).
    pub rule: String,
    /// The entry rule's value on an empty input.
    pub first: Value,
    pub reads_review: bool,
    pub memoizable: bool,
    pub id: u64,
}

/// Compiles `template` as a policy of `kind`. Errors name the file and, for Rego errors, the
/// line; a template of the other kind is refused with a message saying what it is.
pub(crate) fn compile(template: &Template, kind: TemplateKind) -> Result<Compiled> {
    let (mut engine, path) = load(template)?;
    let name = &template.name;
    let (entry, other, what, hint) = match kind {
        TemplateKind::Sit => (
            "infringement",
            "solutions",
            "policy",
            ": it defines `solutions`, so it is a placement (SAT) policy, loaded with the placement policies",
        ),
        TemplateKind::Sat => (
            "solutions",
            "infringement",
            "placement policy",
            ": it defines `infringement`, so it is a SIT policy, loaded with the policies",
        ),
    };
    if !declares(&engine, &path, entry)? {
        let hint = if declares(&engine, &path, other)? {
            hint
        } else {
            ""
        };
        bail!("{path}: {what} `{name}` declares no `{entry}` rule{hint}");
    }
    let rule = format!("data.{name}.{entry}");
    engine.set_input(Value::new_object());
    let first = prepare(&mut engine, &rule)
        .map_err(|e| anyhow::anyhow!("{path}: policy `{name}` does not compile: {e}"))?;
    let reads_review = reads_review(&template.rego);
    Ok(Compiled {
        engine,
        rule,
        first,
        reads_review,
        memoizable: !reads_review && memo::deterministic(&template.rego),
        id: memo::next_policy_id(),
    })
}

/// Compiles every template with `compile_one`, sorted by `name`.
pub(crate) fn compile_sorted<P>(
    templates: &[Template],
    compile_one: impl Fn(&Template) -> Result<P>,
    name: impl Fn(&P) -> &str,
) -> Result<Vec<P>> {
    let mut compiled = templates
        .iter()
        .map(compile_one)
        .collect::<Result<Vec<_>>>()?;
    compiled.sort_by(|a, b| name(a).cmp(name(b)));
    Ok(compiled)
}

impl Policy {
    /// Compiles a SIT template. Errors name the file and, for Rego errors, the line.
    pub fn compile(template: &Template) -> Result<Policy> {
        let compiled = compile(template, TemplateKind::Sit)?;
        let paths = review_paths::of(&template.rego);
        let path = template.path.display();
        messages(&compiled.first).map_err(|e| anyhow::anyhow!("{path}: {e}"))?;
        Ok(Policy {
            name: template.name.clone(),
            inputs: template.inputs.clone(),
            parameter_names: template.parameter_names(),
            path: template.path.clone(),
            rule: compiled.rule,
            engine: compiled.engine,
            reads_review: compiled.reads_review,
            // Remembered by the parts of the review it reads, when it reads known parts.
            memoizable: memo::deterministic(&template.rego)
                && (!compiled.reads_review || paths.is_some()),
            review_paths: paths,
            id: compiled.id,
            rego: Arc::from(template.rego.as_str()),
            constraint: None,
            shipped: Shipped::recognise(&template.name, &template.rego),
        })
    }

    /// A Gatekeeper constraint as a policy ([`crate::gatekeeper`]): `engine` holds its
    /// template's Rego, prepared, and `rule` is the template's `violation` rule; `rego` is what
    /// versions it (the template's source). It reads `input.review`, and applies only to the
    /// objects its `source.matching` matches.
    pub(crate) fn constraint(
        name: String,
        path: PathBuf,
        engine: Engine,
        rule: String,
        rego: &str,
        source: ConstraintSource,
    ) -> Policy {
        let paths = review_paths::of(rego);
        Policy {
            name,
            inputs: Vec::new(),
            parameter_names: None,
            path,
            engine,
            rule,
            reads_review: true,
            rego: Arc::from(rego),
            id: memo::next_policy_id(),
            // Remembered by the parts of the review it reads, when it reads known parts.
            memoizable: memo::deterministic(rego) && paths.is_some(),
            review_paths: paths,
            constraint: Some(Arc::new(source)),
            shipped: None,
        }
    }

    /// Whether the policy may read `input.review`.
    pub(crate) fn reads_review(&self) -> bool {
        self.reads_review
    }

    /// Whether the policy is a Gatekeeper constraint.
    pub fn is_constraint(&self) -> bool {
        self.constraint.is_some()
    }

    /// Whether the policy applies to the object of `review` (an AdmissionRequest, with
    /// `namespaceObject` when known): a SIT policy to every object with a pod spec
    /// (`pod_spec`); a constraint when its `spec.match` selects the object (no review: never).
    pub fn applies(&self, pod_spec: bool, review: Option<&serde_json::Value>) -> bool {
        match (&self.constraint, review) {
            (None, _) => pod_spec,
            (Some(c), Some(review)) => c.matching.matches(review),
            (Some(_), None) => false,
        }
    }

    /// The shipped policy this is, loaded unchanged under its own name; `None` for custom Rego.
    pub fn shipped(&self) -> Option<Shipped> {
        self.shipped
    }

    /// The Rego source the policy was compiled from.
    pub fn rego(&self) -> &str {
        &self.rego
    }

    /// For a Gatekeeper constraint, its match and template.
    pub fn constraint_source(&self) -> Option<&ConstraintSource> {
        self.constraint.as_deref()
    }

    /// The policy's version under `config`, for rollouts (see
    /// [`crate::policy::version::policy_version`]).
    pub fn version(&self, config: &Config) -> String {
        crate::policy::version::policy_version(&self.rego, config, &self.name)
    }

    /// Evaluates `infringement` on `input` within `limit` in the Rego interpreter (also for a
    /// shipped policy: the reference its Rust copy is tested against): the messages, sorted.
    pub fn infringements(&self, input: Value, limit: Duration) -> Result<Vec<String>, String> {
        let value = eval_within(&self.engine, &self.rule, input, limit)?;
        messages(&value)
    }
}

/// Whether a policy's Rego may read `input.review`. Handing every policy the whole
/// AdmissionRequest costs a conversion per request, so it is left out for policies that cannot
/// reach it: those that never spell `review` and use `input` only to read a named field
/// (`input.services`). Anything else — `review` anywhere (comments and strings included),
/// `input[...]`, `input` on its own, `import input as i` — counts as reading it.
pub(crate) fn reads_review(rego: &str) -> bool {
    rego.contains("review") || review_paths::input_taken_whole(rego)
}

/// The `msg` of every element of an `infringement` set (undefined means none).
pub(crate) fn messages(value: &Value) -> Result<Vec<String>, String> {
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
