//! A differential test of the native objects: the CEL text [`generate`] writes, exactly as
//! kube-apiserver receives it, evaluated in process by an independent CEL implementation
//! (cel-rust, the `cel` crate), and what it decides compared with poolguard's own decision code
//! ([`RuleSet::decide`]: the mutating webhook, then the validating webhook on the object as
//! mutated) for the same requests.
//!
//! The API server's side is simulated as its admission plugins run the objects:
//!
//! - a policy applies when one of its `matchConstraints.resourceRules` names the request's
//!   group, resource and operation and a binding's `matchResources.namespaceSelector` selects the
//!   namespace (what this file does not model, an objectSelector or a `paramKind` say, fails the
//!   test instead of being ignored);
//! - its expressions see `object`, `oldObject` (null on CREATE), `request`, `namespaceObject`,
//!   `params` (null) and `variables.<name>`, each variable worked out on its first use and
//!   kept for the request, so that an error in one is an error only where it is used;
//! - the matchConditions first: one false skips the policy, an error with none false is a
//!   failure;
//! - a validation is violated when it does not evaluate to true, an evaluation error is a
//!   failure; under `failurePolicy: Fail` (every generated policy's) both refuse the request
//!   where a binding that selects the namespace has the `Deny` action (`Warn` and `Audit`
//!   refuse nothing);
//! - a violated validation's messageExpression must give what kube-apiserver shows (a
//!   non-empty string of one line, at most 5120 bytes, trimmed), or it falls back to the
//!   static message;
//! - the MutatingAdmissionPolicy's JSONPatch list is applied to the object (RFC 6902, the
//!   `json-patch` crate; an error refuses) before the validating policies run, and applied
//!   again to its own result (reinvocation) must change nothing.
//!
//! What cel-rust lacks of Kubernetes' CEL environment is registered here: the `JSONPatch`
//! message type and `jsonpatch.escapeKey`. The rest (macros, optionals, the strings extension,
//! `matches`) is the crate's own. Its `matches` uses the `regex` crate where kube-apiserver uses
//! Go's RE2: the same syntax and semantics for the patterns generated (no backreferences or
//! lookaround exist in either).
//!
//! What this cannot see, the native e2e (a real kube-apiserver) covers: the type check against
//! the resources' OpenAPI schemas and the cost limits.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

use cel_rust::common::types::{self, CelString};
use cel_rust::common::value::{CowVal, Val};
use cel_rust::context::VariableResolver;
use cel_rust::objects::{Key, Map};
use cel_rust::{Context, Env, ExecutionError, Program, StructDef, Value as Cel};
use serde_json::{json, Value};

use super::generate;
use super::object::{Native, Options};
use super::tests::rules;
use crate::labels::Labels;
use crate::node_selector::POOL_ANNOTATION;
use crate::ruleset::{Budget, RuleSet};
use crate::scope::Scope;

#[path = "../tests/data/image_reference_table.rs"]
mod image_reference_table;

/// The example config (`poolguard native --config testdata/config/example.yaml`).
const EXAMPLE: &str = include_str!("../../../testdata/config/example.yaml");

// ---------------------------------------------------------------------------------------------
// The CEL environment
// ---------------------------------------------------------------------------------------------

/// Kubernetes' `jsonpatch.escapeKey`: a map key as a JSON Pointer reference token (RFC 6901).
fn escape_key<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let key = args[0]
        .downcast_ref::<CelString>()
        .ok_or_else(|| ExecutionError::function_error("jsonpatch.escapeKey", "not a string"))?;
    let escaped = key.inner().replace('~', "~0").replace('/', "~1");
    Ok(CowVal::owned(CelString::from(escaped)))
}

/// The standard library and macros, optionals, the strings extension (Kubernetes has cel-go's
/// `ext.Strings`), and what MutatingAdmissionPolicy adds: the `JSONPatch` type, whose fields
/// are all optional (op, path, from, value), and `jsonpatch.escapeKey`.
fn env() -> Arc<Env> {
    let mut env = Env::stdlib();
    env.add_extension(cel_rust::extensions::strings).unwrap();
    env.add_overload(
        "jsonpatch.escapeKey",
        "jsonpatch_escape_key_string",
        vec![types::STRING_TYPE],
        escape_key,
    )
    .unwrap();
    // A field with a default is not type-checked by cel-rust, so `value` takes any value. The
    // default is only what a literal that leaves the field out reads; [`patch_of`] keeps a
    // field only when the literal set it to something other than its default.
    let unset = || Box::new(CelString::from(UNSET.to_string())) as Box<dyn Val>;
    env.add_type(
        StructDef::new("JSONPatch".into())
            .add_field_with_default("op".into(), unset())
            .add_field_with_default("path".into(), unset())
            .add_field_with_default("from".into(), unset())
            .add_field_with_default("value".into(), unset()),
    )
    .unwrap();
    Arc::new(env)
}

/// What a `JSONPatch` field the literal left out reads.
const UNSET: &str = "\u{0}unset";

/// A JSON value as CEL sees an unstructured object: integers are `int`.
fn to_cel(value: &Value) -> Cel {
    match value {
        Value::Null => Cel::Null,
        Value::Bool(b) => Cel::Bool(*b),
        Value::Number(n) => match (n.as_i64(), n.as_u64()) {
            (Some(i), _) => Cel::Int(i),
            (None, Some(u)) => Cel::UInt(u),
            _ => Cel::Float(n.as_f64().unwrap()),
        },
        Value::String(s) => Cel::String(Arc::new(s.clone())),
        Value::Array(items) => Cel::List(Arc::new(items.iter().map(to_cel).collect())),
        Value::Object(entries) => Cel::Map(Map {
            map: Arc::new(
                entries
                    .iter()
                    .map(|(k, v)| (Key::String(Arc::new(k.clone())), to_cel(v)))
                    .collect(),
            ),
        }),
    }
}

/// A CEL value as JSON (what a JSONPatch's `value` writes into the object).
fn to_json(value: &Cel) -> Result<Value, String> {
    Ok(match value {
        Cel::Null => Value::Null,
        Cel::Bool(b) => json!(b),
        Cel::Int(i) => json!(i),
        Cel::UInt(u) => json!(u),
        Cel::Float(f) => json!(f),
        Cel::String(s) => json!(s.as_str()),
        Cel::List(items) => Value::Array(items.iter().map(to_json).collect::<Result<_, _>>()?),
        Cel::Map(m) => {
            let mut out = serde_json::Map::new();
            for (k, v) in m.map.iter() {
                let Key::String(k) = k else {
                    return Err(format!("a map key that is not a string: {k:?}"));
                };
                out.insert(k.to_string(), to_json(v)?);
            }
            Value::Object(out)
        }
        other => return Err(format!("no JSON for {other:?}")),
    })
}

/// One RFC 6902 operation from a `JSONPatch` value.
fn patch_of(value: &Cel) -> Result<Value, String> {
    let Cel::Struct(s) = value else {
        return Err(format!(
            "a JSONPatch list item is not a JSONPatch: {value:?}"
        ));
    };
    if s.name() != "JSONPatch" {
        return Err(format!("a {} in the JSONPatch list", s.name()));
    }
    let mut op = serde_json::Map::new();
    for (field, v) in s.field_values() {
        let v = Cel::try_from(v.as_ref()).map_err(|e| e.to_string())?;
        if matches!(&v, Cel::String(s) if s.as_str() == UNSET) {
            continue;
        }
        op.insert(field, to_json(&v)?);
    }
    Ok(Value::Object(op))
}

// ---------------------------------------------------------------------------------------------
// The generated objects, compiled
// ---------------------------------------------------------------------------------------------

/// An expression of a generated object: where it is, its program.
struct Expression {
    at: String,
    program: Program,
}

struct Validation {
    expression: Expression,
    message_expression: Option<Expression>,
}

struct Binding {
    namespace_selector: Value,
    /// Deny, Warn, Audit (empty for a MutatingAdmissionPolicyBinding).
    actions: Vec<String>,
}

struct Policy {
    name: String,
    mutating: bool,
    /// Each resource rule as (apiGroups, resources, operations).
    rules: Vec<(Vec<String>, Vec<String>, Vec<String>)>,
    namespace_selector: Option<Value>,
    variables: Vec<(String, Expression)>,
    match_conditions: Vec<Expression>,
    validations: Vec<Validation>,
    mutations: Vec<Expression>,
    bindings: Vec<Binding>,
}

struct Compiled {
    env: Arc<Env>,
    policies: Vec<Policy>,
    expressions: usize,
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .unwrap_or_else(|| panic!("not a list: {v}"))
        .iter()
        .map(|s| s.as_str().unwrap().to_string())
        .collect()
}

/// Fails on a field this simulation does not model, so that a generated object that starts
/// using one is not silently judged by less than the API server uses.
fn only(object: &Value, at: &str, known: &[&str]) {
    if let Some(m) = object.as_object() {
        for k in m.keys() {
            assert!(
                known.contains(&k.as_str()),
                "{at}: `{k}` is not modelled by this test"
            );
        }
    }
}

fn compile(native: &Native) -> Compiled {
    let env = env();
    let mut expressions = 0;
    let mut compile = |at: String, text: &Value| -> Expression {
        expressions += 1;
        let text = text
            .as_str()
            .unwrap_or_else(|| panic!("{at}: not a string"))
            .to_string();
        let program = env.compile(&text).unwrap_or_else(|e| {
            panic!("{at}: cel-rust cannot parse the generated CEL: {e}\n{text}")
        });
        Expression { at, program }
    };
    let mut policies = vec![];
    for o in &native.objects {
        let kind = o["kind"].as_str().unwrap();
        let name = o["metadata"]["name"].as_str().unwrap().to_string();
        let spec = &o["spec"];
        match kind {
            "ValidatingAdmissionPolicy" | "MutatingAdmissionPolicy" => {
                let mutating = kind == "MutatingAdmissionPolicy";
                let at = format!("{kind}/{name}");
                only(
                    spec,
                    &at,
                    &[
                        "failurePolicy",
                        "matchConditions",
                        "matchConstraints",
                        "validations",
                        "variables",
                        "mutations",
                        "reinvocationPolicy",
                    ],
                );
                assert_eq!(spec["failurePolicy"], "Fail", "{at}");
                let constraints = &spec["matchConstraints"];
                only(
                    constraints,
                    &at,
                    &["resourceRules", "matchPolicy", "namespaceSelector"],
                );
                let rules = constraints["resourceRules"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|r| {
                        only(
                            r,
                            &at,
                            &["apiGroups", "apiVersions", "operations", "resources"],
                        );
                        (
                            strings(&r["apiGroups"]),
                            strings(&r["resources"]),
                            strings(&r["operations"]),
                        )
                    })
                    .collect();
                let list = |field: &str| spec[field].as_array().cloned().unwrap_or_default();
                let variables = list("variables")
                    .iter()
                    .enumerate()
                    .map(|(i, v)| {
                        let n = v["name"].as_str().unwrap().to_string();
                        (n, compile(format!("{at} variables[{i}]"), &v["expression"]))
                    })
                    .collect();
                let match_conditions = list("matchConditions")
                    .iter()
                    .enumerate()
                    .map(|(i, c)| compile(format!("{at} matchConditions[{i}]"), &c["expression"]))
                    .collect();
                let validations = list("validations")
                    .iter()
                    .enumerate()
                    .map(|(i, v)| {
                        only(
                            v,
                            &at,
                            &["expression", "message", "messageExpression", "reason"],
                        );
                        Validation {
                            expression: compile(format!("{at} validations[{i}]"), &v["expression"]),
                            message_expression: v.get("messageExpression").map(|m| {
                                compile(format!("{at} validations[{i}].messageExpression"), m)
                            }),
                        }
                    })
                    .collect();
                let mutations = list("mutations")
                    .iter()
                    .enumerate()
                    .map(|(i, m)| {
                        assert_eq!(m["patchType"], "JSONPatch", "{at}");
                        compile(
                            format!("{at} mutations[{i}]"),
                            &m["jsonPatch"]["expression"],
                        )
                    })
                    .collect();
                policies.push(Policy {
                    name,
                    mutating,
                    rules,
                    namespace_selector: constraints.get("namespaceSelector").cloned(),
                    variables,
                    match_conditions,
                    validations,
                    mutations,
                    bindings: vec![],
                });
            }
            "ValidatingAdmissionPolicyBinding" | "MutatingAdmissionPolicyBinding" => {
                let at = format!("{kind}/{name}");
                only(
                    spec,
                    &at,
                    &["policyName", "matchResources", "validationActions"],
                );
                only(&spec["matchResources"], &at, &["namespaceSelector"]);
                let policy = spec["policyName"].as_str().unwrap();
                let mutating = kind == "MutatingAdmissionPolicyBinding";
                let p = policies
                    .iter_mut()
                    .find(|p| p.name == policy && p.mutating == mutating)
                    .unwrap_or_else(|| panic!("{at}: its policy {policy} comes before it"));
                p.bindings.push(Binding {
                    namespace_selector: spec["matchResources"]
                        .get("namespaceSelector")
                        .cloned()
                        .unwrap_or_else(|| json!({})),
                    actions: spec
                        .get("validationActions")
                        .map(strings)
                        .unwrap_or_default(),
                });
            }
            other => panic!("an object of kind {other} is not modelled by this test"),
        }
    }
    Compiled {
        env,
        policies,
        expressions,
    }
}

/// A Kubernetes label selector (matchLabels, matchExpressions) against a namespace's labels.
fn selects(selector: &Value, labels: &Labels) -> bool {
    only(
        selector,
        "a namespaceSelector",
        &["matchLabels", "matchExpressions"],
    );
    let labels_ok = selector["matchLabels"]
        .as_object()
        .into_iter()
        .flatten()
        .all(|(k, v)| labels.get(k).map(String::as_str) == v.as_str());
    let expressions_ok = selector["matchExpressions"]
        .as_array()
        .into_iter()
        .flatten()
        .all(|e| {
            let value = labels.get(e["key"].as_str().unwrap());
            let values = || strings(&e["values"]);
            match e["operator"].as_str().unwrap() {
                "In" => value.is_some_and(|v| values().contains(v)),
                "NotIn" => value.is_none_or(|v| !values().contains(v)),
                "Exists" => value.is_some(),
                "DoesNotExist" => value.is_none(),
                op => panic!("operator {op}"),
            }
        });
    labels_ok && expressions_ok
}

// ---------------------------------------------------------------------------------------------
// The requests
// ---------------------------------------------------------------------------------------------

/// One admission request, as both sides get it.
#[derive(Clone)]
struct Case {
    what: String,
    namespace: String,
    labels: Labels,
    /// (group, version, kind, resource)
    kind: (&'static str, &'static str, &'static str, &'static str),
    operation: &'static str,
    object: Value,
    old_object: Option<Value>,
}

/// What admission makes of a request.
#[derive(Debug, Clone, PartialEq)]
enum Outcome {
    /// Admitted, stored as this object.
    Admitted(Value),
    /// Refused, for this reason (for messages only: the two sides word it differently).
    Refused(String),
}

impl Outcome {
    fn admitted(&self) -> bool {
        matches!(self, Outcome::Admitted(_))
    }
}

impl Case {
    fn review(&self, object: &Value) -> Value {
        let (group, version, kind, resource) = self.kind;
        json!({
            "uid": "cel-differential",
            "kind": {"group": group, "version": version, "kind": kind},
            "resource": {"group": group, "version": version, "resource": resource},
            "name": object["metadata"]["name"],
            "namespace": self.namespace,
            "operation": self.operation,
            "userInfo": {"username": "someone", "groups": ["system:authenticated"]},
            "object": object,
            "oldObject": self.old_object,
        })
    }

    /// A line feed somewhere in the request's object.
    fn has_line_break(&self) -> bool {
        serde_json::to_string(&self.object).unwrap().contains("\\n")
    }

    fn namespace_object(&self) -> Value {
        json!({"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": self.namespace, "labels": self.labels}})
    }
}

/// poolguard's own decision: the mutating webhook (where the chart sends it: pod CREATEs in
/// namespaces with a non-empty pool label), then the validating webhook on the object as
/// mutated.
fn webhook(rules: &RuleSet, case: &Case) -> Outcome {
    let scope = Scope {
        labels: Some(&case.labels),
        pools: None,
        now: None,
    };
    let key = &rules.config.namespace_label;
    let labelled = case.labels.get(key).is_some_and(|v| !v.is_empty());
    let mutating = case.kind.2 == "Pod" && case.operation == "CREATE" && labelled;
    match rules.admit(
        &case.object,
        mutating,
        |o| case.review(o),
        scope,
        Budget::FULL,
    ) {
        Ok(object) => Outcome::Admitted(object),
        Err(message) => Outcome::Refused(message),
    }
}

/// What evaluating one policy on one request gives.
enum Applied {
    /// Not matched, or skipped by a matchCondition.
    Skipped,
    /// A failure (an evaluation error, a value of the wrong type): refused under
    /// failurePolicy Fail.
    Failed(String),
    /// Evaluated: the validations violated (by index), the mutations' patches.
    Ran {
        violated: Vec<usize>,
        patch: Vec<Value>,
    },
}

/// What one policy's expressions see on one request: `object`, `oldObject`, `request`,
/// `namespaceObject`, `params`, and `variables.<name>`, each variable worked out on its first use
/// and kept, as kube-apiserver does (an error is one only where the variable is used).
struct Bindings<'a> {
    env: &'a Arc<Env>,
    base: Vec<(&'static str, Box<dyn Val>)>,
    variables: &'a [(String, Expression)],
    /// Each variable's value once worked out; `None` inside for an error.
    values: Vec<OnceLock<Option<Box<dyn Val>>>>,
    /// Being worked out: a variable that needs itself is an error, not a deadlock.
    busy: Vec<AtomicBool>,
}

impl VariableResolver for Bindings<'_> {
    fn resolve<'b>(&'b self, name: &str) -> Option<CowVal<'b, 'b>> {
        let Some(variable) = name.strip_prefix("variables.") else {
            return self
                .base
                .iter()
                .find(|(n, _)| *n == name)
                .map(|(_, v)| CowVal::Borrowed(v.as_ref()));
        };
        let i = self.variables.iter().position(|(n, _)| n == variable)?;
        if self.values[i].get().is_none() && !self.busy[i].swap(true, Ordering::SeqCst) {
            let value = self
                .eval(&self.variables[i].1)
                .ok()
                .and_then(|v| Box::<dyn Val>::try_from(v).ok());
            let _ = self.values[i].set(value);
        }
        self.values[i].get()?.as_deref().map(CowVal::Borrowed)
    }
}

impl<'a> Bindings<'a> {
    fn new(env: &'a Arc<Env>, policy: &'a Policy, case: &Case, object: &Value) -> Self {
        let review = case.review(object);
        let request = json!({
            "uid": review["uid"], "kind": review["kind"], "resource": review["resource"],
            "name": review["name"], "namespace": review["namespace"],
            "operation": review["operation"], "userInfo": review["userInfo"], "dryRun": false,
        });
        let val = |v: &Value| Box::<dyn Val>::try_from(to_cel(v)).unwrap();
        let old = case.old_object.clone().unwrap_or(Value::Null);
        Bindings {
            env,
            base: vec![
                ("object", val(object)),
                ("oldObject", val(&old)),
                ("request", val(&request)),
                ("namespaceObject", val(&case.namespace_object())),
                ("params", val(&Value::Null)),
            ],
            variables: &policy.variables,
            values: policy.variables.iter().map(|_| OnceLock::new()).collect(),
            busy: policy
                .variables
                .iter()
                .map(|_| AtomicBool::new(false))
                .collect(),
        }
    }

    fn eval(&self, e: &Expression) -> Result<Cel, String> {
        let mut ctx = Context::with_env(Arc::clone(self.env));
        ctx.set_variable_resolver(self);
        e.program
            .execute(&ctx)
            .map_err(|err| format!("{}: {err}", e.at))
    }
}

/// Runs `policy` as kube-apiserver's admission plugin does for `case` with `object` (the
/// object as mutated so far).
fn apply(
    compiled: &Compiled,
    policy: &Policy,
    case: &Case,
    object: &Value,
    checks: &mut Vec<Check>,
) -> Applied {
    let (group, _, _, resource) = case.kind;
    let star = |list: &Vec<String>, v: &str| list.iter().any(|x| x == "*" || x == v);
    let matched = policy.rules.iter().any(|(groups, resources, operations)| {
        star(groups, group) && star(resources, resource) && star(operations, case.operation)
    }) && policy
        .namespace_selector
        .as_ref()
        .is_none_or(|s| selects(s, &case.labels));
    if !matched
        || !policy
            .bindings
            .iter()
            .any(|b| selects(&b.namespace_selector, &case.labels))
    {
        return Applied::Skipped;
    }
    let bindings = Bindings::new(&compiled.env, policy, case, object);
    let mut failure = None;
    for c in &policy.match_conditions {
        match bindings.eval(c) {
            Ok(Cel::Bool(false)) => return Applied::Skipped,
            Ok(Cel::Bool(true)) => {}
            Ok(other) => failure = Some(format!("{}: not a bool: {other:?}", c.at)),
            Err(e) => failure = Some(e),
        }
    }
    if let Some(f) = failure {
        return Applied::Failed(f);
    }
    let mut violated = vec![];
    for (i, v) in policy.validations.iter().enumerate() {
        match bindings.eval(&v.expression) {
            Ok(Cel::Bool(true)) => continue,
            Ok(_) => violated.push(i),
            Err(e) => return Applied::Failed(e),
        }
        // Violated: the message says why. kube-apiserver shows the messageExpression's string,
        // trimmed, unless it is empty, longer than 5120 bytes or spans lines: then the static
        // `message` (the refusal stands either way).
        if let Some(m) = &v.message_expression {
            match bindings.eval(m) {
                Ok(Cel::String(s)) if shown(&s) => {}
                // The reference quoted as it is: a line break in it is one in the message.
                Ok(Cel::String(s))
                    if s.contains('\n')
                        && shown(&s.replace('\n', " "))
                        && case.has_line_break() =>
                {
                    checks.push(Check::Tolerated(format!(
                        "{}: a message on two lines",
                        m.at
                    )))
                }
                other => checks.push(Check::Failed(format!("{}: not a message: {other:?}", m.at))),
            }
        }
    }
    let mut patch = vec![];
    for m in &policy.mutations {
        match bindings.eval(m) {
            Ok(Cel::List(items)) => {
                for item in items.iter() {
                    match patch_of(item) {
                        Ok(op) => patch.push(op),
                        Err(e) => return Applied::Failed(format!("{}: {e}", m.at)),
                    }
                }
            }
            Ok(other) => return Applied::Failed(format!("{}: not a list: {other:?}", m.at)),
            Err(e) => return Applied::Failed(e),
        }
    }
    Applied::Ran { violated, patch }
}

/// What kube-apiserver shows of a messageExpression's string: non-empty, at most 5120 bytes,
/// one line (`MaxEvaluatedMessageExpressionSizeBytes`, the validating admission policy's
/// validator), after trimming.
fn shown(message: &str) -> bool {
    let m = message.trim();
    !m.is_empty() && m.len() <= 5 * 1024 && !m.contains('\n')
}

/// A finding of the native side's own checks besides the decision.
enum Check {
    /// Wrong: fails the test.
    Failed(String),
    /// Known and counted: a message kube-apiserver replaces by the static one, for a request
    /// whose own text has a line break (the native message quotes image references as they
    /// are; the webhook escapes them).
    Tolerated(String),
}

/// The mutating policies on `object`, once.
fn mutate_once(
    compiled: &Compiled,
    case: &Case,
    object: &mut Value,
    checks: &mut Vec<Check>,
) -> Result<(), String> {
    for policy in compiled.policies.iter().filter(|p| p.mutating) {
        match apply(compiled, policy, case, object, checks) {
            Applied::Skipped => {}
            Applied::Failed(e) => return Err(format!("{}: {e}", policy.name)),
            Applied::Ran { patch, .. } => {
                let ops: json_patch::Patch = serde_json::from_value(Value::Array(patch.clone()))
                    .map_err(|e| format!("{}: not a JSON patch {patch:?}: {e}", policy.name))?;
                json_patch::patch(object, &ops).map_err(|e| {
                    format!("{}: the patch {patch:?} does not apply: {e}", policy.name)
                })?;
            }
        }
    }
    Ok(())
}

/// What the API server decides with the native objects alone: the mutating policies (run
/// again on their own result, as reinvocation would: it must change nothing), then the
/// validating policies on the object as mutated.
fn native(compiled: &Compiled, case: &Case, checks: &mut Vec<Check>) -> Outcome {
    let mut object = case.object.clone();
    if let Err(e) = mutate_once(compiled, case, &mut object, checks) {
        return Outcome::Refused(e);
    }
    let mut again = object.clone();
    match mutate_once(compiled, case, &mut again, checks) {
        Ok(()) if again == object => {}
        Ok(()) => checks.push(Check::Failed(format!(
            "reinvoked, the mutating policies changed {object} to {again}"
        ))),
        Err(e) => checks.push(Check::Failed(format!(
            "reinvoked, the mutating policies failed: {e}"
        ))),
    }
    let mut refusals = vec![];
    for policy in compiled.policies.iter().filter(|p| !p.mutating) {
        // Violations and failures alike go through the actions of the bindings that select the
        // namespace.
        let deny = policy.bindings.iter().any(|b| {
            selects(&b.namespace_selector, &case.labels) && b.actions.iter().any(|a| a == "Deny")
        });
        match apply(compiled, policy, case, &object, checks) {
            Applied::Skipped => {}
            Applied::Failed(e) if deny => refusals.push(format!("{}: failed: {e}", policy.name)),
            Applied::Failed(_) => {}
            Applied::Ran { violated, .. } if deny && !violated.is_empty() => {
                let which: Vec<_> = violated
                    .iter()
                    .map(|&i| policy.validations[i].expression.at.clone())
                    .collect();
                refusals.push(which.join(", "));
            }
            Applied::Ran { .. } => {}
        }
    }
    if refusals.is_empty() {
        Outcome::Admitted(object)
    } else {
        Outcome::Refused(refusals.join("; "))
    }
}

/// What comparing the two sides on some cases found, each described.
struct Found {
    /// The cases where the native objects and poolguard disagree, or a native check fails.
    wrong: Vec<String>,
    /// The [`Check::Tolerated`] ones.
    tolerated: Vec<String>,
}

fn disagreements(rules: &RuleSet, compiled: &Compiled, cases: &[Case]) -> Found {
    let mut out = vec![];
    let mut tolerated = vec![];
    for case in cases {
        let mut checks = vec![];
        let ours = webhook(rules, case);
        let theirs = native(compiled, case, &mut checks);
        let what = format!(
            "{} ({} {} in {})",
            case.what, case.operation, case.kind.2, case.namespace
        );
        let agree = match (&ours, &theirs) {
            (Outcome::Admitted(a), Outcome::Admitted(b)) => a == b,
            (Outcome::Refused(_), Outcome::Refused(_)) => true,
            _ => false,
        };
        if !agree {
            out.push(format!(
                "{what}: poolguard: {ours:?}\n    native: {theirs:?}"
            ));
        }
        for c in checks {
            match c {
                Check::Failed(c) => out.push(format!("{what}: {c}")),
                Check::Tolerated(c) => tolerated.push(format!("{what}: {c}")),
            }
        }
    }
    Found {
        wrong: out,
        tolerated,
    }
}

// ---------------------------------------------------------------------------------------------
// The cases
// ---------------------------------------------------------------------------------------------

const POD: (&str, &str, &str, &str) = ("", "v1", "Pod", "pods");
const DEPLOYMENT: (&str, &str, &str, &str) = ("apps", "v1", "Deployment", "deployments");
const CRONJOB: (&str, &str, &str, &str) = ("batch", "v1", "CronJob", "cronjobs");

/// The namespaces: the gpu pool (its own policy), another pool, no pool label, an empty one.
fn namespaces() -> Vec<(String, Labels)> {
    let ns = |name: &str, pool: Option<&str>| {
        let mut labels: Labels =
            [("kubernetes.io/metadata.name".to_string(), name.to_string())].into();
        if let Some(pool) = pool {
            labels.insert("agentpool".into(), pool.into());
        }
        (name.to_string(), labels)
    };
    vec![
        ns("team-gpu", Some("gpu")),
        ns("team-cpu", Some("cpu")),
        ns("unlabelled", None),
        ns("empty-pool", Some("")),
    ]
}

/// A pod spec with one container per image.
fn spec(images: &[&str], node_selector: Option<Value>) -> Value {
    let containers: Vec<Value> = images
        .iter()
        .enumerate()
        .map(|(i, image)| json!({"name": format!("c{i}"), "image": image}))
        .collect();
    let mut spec = json!({"containers": containers});
    if let Some(sel) = node_selector {
        spec["nodeSelector"] = sel;
    }
    spec
}

/// An object of `kind` around a pod spec.
fn object(kind: (&str, &str, &str, &str), name: &str, spec: Value) -> Value {
    let (group, version, kind, _) = kind;
    let api_version = if group.is_empty() {
        version.to_string()
    } else {
        format!("{group}/{version}")
    };
    let metadata = json!({"name": name});
    let template = json!({"metadata": {"labels": {"app": name}}, "spec": spec});
    match kind {
        "Pod" => {
            json!({"apiVersion": api_version, "kind": kind, "metadata": metadata, "spec": spec})
        }
        "CronJob" => json!({"apiVersion": api_version, "kind": kind, "metadata": metadata,
            "spec": {"schedule": "* * * * *", "jobTemplate": {"spec": {"template": template}}}}),
        _ => json!({"apiVersion": api_version, "kind": kind, "metadata": metadata,
            "spec": {"selector": {"matchLabels": {"app": name}}, "template": template}}),
    }
}

/// Images the example's policies tell apart: allowed everywhere, in the gpu pool only,
/// foreign, floating tags, exempt repositories, digests, Docker Hub short names, image IDs,
/// look-alike registries.
fn policy_images() -> Vec<String> {
    let d = format!("sha256:{}", image_reference_table::D1);
    let mut out: Vec<String> = [
        "registry.example.com/app:1.2",
        "registry.example.com/app",
        "registry.example.com/app:latest",
        "registry.example.com/team/app:v1",
        "registry.example.com/dev/app",
        "registry.example.com/dev/app:latest",
        "registry.example.com/devx/app:latest",
        "registry.k8s.io/pause:3.10",
        "registry.k8s.io/pause",
        "gpu.example.com/cuda:12",
        "gpu.example.com/cuda:latest",
        "gpu.example.com/cuda",
        "docker.io/library/nginx:1.27",
        "nginx",
        "nginx:latest",
        "nginx:1.27",
        "library/nginx:1",
        "index.docker.io/library/nginx:1",
        "registry.example.com.evil.io/app:1",
        "registry.example.comx/app:1",
        "evil.io/registry.example.com/app:1",
        "registry.example.com:5000/app:1",
        "REGISTRY.EXAMPLE.COM/app:1",
        "localhost/app:1",
        "localhost:5000/app",
        "registry.example.com/App:1",
        "registry.example.com/app:1:2",
        "",
        " registry.example.com/app:1",
        "registry.example.com/app:1 ",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    out.extend([
        format!("registry.example.com/app@{d}"),
        format!("registry.example.com/app:latest@{d}"),
        format!("nginx@{d}"),
        format!("gpu.example.com/cuda@{d}"),
        d.clone(),
        image_reference_table::D1.to_string(),
        format!("registry.example.com/{}", "a".repeat(240)),
        format!("registry.example.com/{}:1", "a".repeat(240)),
        format!("registry.example.com/{}", "a".repeat(236)),
    ]);
    out
}

/// Requests, built up.
#[derive(Default)]
struct Cases(Vec<Case>);

impl Cases {
    fn add(
        &mut self,
        what: String,
        ns: &(String, Labels),
        kind: (&'static str, &'static str, &'static str, &'static str),
        operation: &'static str,
        object: Value,
        old_object: Option<Value>,
    ) {
        self.0.push(Case {
            what,
            namespace: ns.0.clone(),
            labels: ns.1.clone(),
            kind,
            operation,
            object,
            old_object,
        })
    }
}

/// The pool a namespace names, or one for the unlabelled ones to name in their selectors.
fn own(ns: &(String, Labels)) -> String {
    ns.1.get("agentpool")
        .filter(|p| !p.is_empty())
        .cloned()
        .unwrap_or_else(|| "cpu".into())
}

const GOOD: &str = "registry.example.com/app:1";

/// Every reference of the image reference table, in a `kind` in namespace `ns`.
fn table_cases(
    ns: usize,
    kind: (&'static str, &'static str, &'static str, &'static str),
) -> Vec<Case> {
    let namespaces = namespaces();
    let mut cases = Cases::default();
    for c in image_reference_table::table() {
        let image = c.input.as_str();
        cases.add(
            format!("table image {image:?}"),
            &namespaces[ns],
            kind,
            "CREATE",
            object(kind, "t", spec(&[image], None)),
            None,
        );
    }
    cases.0
}

/// The images the example's policies tell apart, in pods in each namespace and in a
/// Deployment and a CronJob.
fn image_cases() -> Vec<Case> {
    let namespaces = namespaces();
    let mut cases = Cases::default();
    for image in &policy_images() {
        for ns in &namespaces {
            cases.add(
                format!("image {image:?}"),
                ns,
                POD,
                "CREATE",
                object(POD, "x", spec(&[image], None)),
                None,
            );
        }
        cases.add(
            format!("image {image:?}"),
            &namespaces[0],
            DEPLOYMENT,
            "CREATE",
            object(DEPLOYMENT, "x", spec(&[image], None)),
            None,
        );
        cases.add(
            format!("image {image:?}"),
            &namespaces[2],
            CRONJOB,
            "CREATE",
            object(CRONJOB, "x", spec(&[image], None)),
            None,
        );
    }
    cases.0
}

/// Node selectors (none, empty, the pool, another, an empty value, another key beside the
/// pool's, another key alone) on each kind, pods already annotated with a pool; pod specs with
/// every kind of image; as many images as limits.maxImagesPerPod accepts, and one more.
fn placement_cases() -> Vec<Case> {
    let namespaces = namespaces();
    let mut cases = Cases::default();
    for ns in &namespaces {
        let pool = own(ns);
        let selectors = [
            None,
            Some(json!({})),
            Some(json!({"agentpool": pool})),
            Some(json!({"agentpool": "elsewhere"})),
            Some(json!({"agentpool": ""})),
            Some(json!({"agentpool": pool, "disk": "ssd"})),
            Some(json!({"disk": "ssd"})),
        ];
        for sel in &selectors {
            for kind in [POD, DEPLOYMENT, CRONJOB] {
                for image in [GOOD, "nginx"] {
                    cases.add(
                        format!("nodeSelector {sel:?}, image {image}"),
                        ns,
                        kind,
                        "CREATE",
                        object(kind, "s", spec(&[image], sel.clone())),
                        None,
                    );
                }
            }
            for annotated in [pool.as_str(), "elsewhere"] {
                let mut pod = object(POD, "a", spec(&[GOOD], sel.clone()));
                pod["metadata"]["annotations"] = json!({POOL_ANNOTATION: annotated, "other": "x"});
                cases.add(
                    format!("nodeSelector {sel:?}, annotated {annotated}"),
                    ns,
                    POD,
                    "CREATE",
                    pod,
                    None,
                );
            }
            let mut pod = object(POD, "a", spec(&[GOOD], sel.clone()));
            pod["metadata"]["annotations"] = json!({});
            cases.add(
                format!("nodeSelector {sel:?}, empty annotations"),
                ns,
                POD,
                "CREATE",
                pod,
                None,
            );
        }
    }
    // Init and ephemeral containers, image volumes, a container without an image.
    let full = |init: &str, main: &str, ephemeral: &str, volume: &str| {
        json!({
            "initContainers": [{"name": "init", "image": init}],
            "containers": [{"name": "main", "image": main}, {"name": "noimage"}],
            "ephemeralContainers": [{"name": "debug", "image": ephemeral}],
            "volumes": [{"name": "data", "image": {"reference": volume}}, {"name": "tmp", "emptyDir": {}}],
        })
    };
    let id = format!("sha256:{}", image_reference_table::D1);
    for ns in &namespaces {
        for (what, s) in [
            ("all allowed", full(GOOD, GOOD, GOOD, GOOD)),
            (
                "a foreign init container",
                full("nginx:1", GOOD, GOOD, GOOD),
            ),
            (
                "a foreign ephemeral container",
                full(GOOD, GOOD, "busybox", GOOD),
            ),
            (
                "a latest image volume",
                full(GOOD, GOOD, GOOD, "registry.example.com/data:latest"),
            ),
            ("an invalid image volume", full(GOOD, GOOD, GOOD, "Data:1")),
            (
                "an image ID in an init container",
                full(&id, GOOD, GOOD, GOOD),
            ),
        ] {
            cases.add(
                format!("pod with {what}"),
                ns,
                POD,
                "CREATE",
                object(POD, "f", s.clone()),
                None,
            );
            cases.add(
                format!("deployment with {what}"),
                ns,
                DEPLOYMENT,
                "CREATE",
                object(DEPLOYMENT, "f", s),
                None,
            );
        }
        let mut s = spec(&[GOOD], None);
        s["volumes"] = json!([{"name": "data", "image": {}}]);
        cases.add(
            "an image volume without a reference".into(),
            ns,
            POD,
            "CREATE",
            object(POD, "v", s),
            None,
        );
    }
    for n in [250, 251] {
        let many: Vec<String> = (0..n)
            .map(|i| format!("registry.example.com/app{i}:1"))
            .collect();
        let many: Vec<&str> = many.iter().map(String::as_str).collect();
        cases.add(
            format!("{n} images"),
            &namespaces[0],
            DEPLOYMENT,
            "CREATE",
            object(DEPLOYMENT, "m", spec(&many, None)),
            None,
        );
    }
    cases.0
}

/// Updates: what the old object already had is let through, what changed is checked.
fn update_cases() -> Vec<Case> {
    let namespaces = namespaces();
    let mut cases = Cases::default();
    let good = GOOD;
    for ns in &namespaces {
        let pool = own(ns);
        let placed = Some(json!({"agentpool": pool}));
        for kind in [POD, DEPLOYMENT] {
            for (what, old, new) in [
                ("unchanged foreign image", vec!["nginx"], vec!["nginx"]),
                ("allowed to foreign", vec![good], vec!["nginx"]),
                ("foreign to allowed", vec!["nginx"], vec![good]),
                (
                    "foreign kept, latest added",
                    vec!["nginx"],
                    vec!["nginx", "registry.example.com/app"],
                ),
                (
                    "foreign kept, another foreign added",
                    vec!["nginx"],
                    vec!["nginx", "busybox:1"],
                ),
                (
                    "latest kept",
                    vec!["registry.example.com/app:latest"],
                    vec!["registry.example.com/app:latest"],
                ),
                ("invalid kept", vec!["Bad:1"], vec!["Bad:1"]),
                (
                    "invalid kept, foreign added",
                    vec!["Bad:1"],
                    vec!["Bad:1", "nginx"],
                ),
                ("invalid to foreign", vec!["Bad:1"], vec!["nginx"]),
                (
                    "image ID kept",
                    vec!["sha256:0000000000000000000000000000000000000000000000000000000000000000"],
                    vec!["sha256:0000000000000000000000000000000000000000000000000000000000000000"],
                ),
            ] {
                let sel = if kind == POD { placed.clone() } else { None };
                let mut old_object = object(kind, "u", spec(&old, sel.clone()));
                let mut new_object = object(kind, "u", spec(&new, sel));
                if kind == POD {
                    old_object["metadata"]["annotations"] = json!({POOL_ANNOTATION: pool});
                    new_object["metadata"]["annotations"] = json!({POOL_ANNOTATION: pool});
                }
                cases.add(
                    format!("update: {what}"),
                    ns,
                    kind,
                    "UPDATE",
                    new_object,
                    Some(old_object),
                );
            }
        }
        // A workload template that already selected another pool, kept, changed, added.
        for (what, old, new) in [
            (
                "other pool kept",
                Some(json!({"agentpool": "elsewhere"})),
                Some(json!({"agentpool": "elsewhere"})),
            ),
            (
                "other pool changed",
                Some(json!({"agentpool": "elsewhere"})),
                Some(json!({"agentpool": "another"})),
            ),
            (
                "other pool added",
                None,
                Some(json!({"agentpool": "elsewhere"})),
            ),
            (
                "other pool removed",
                Some(json!({"agentpool": "elsewhere"})),
                None,
            ),
        ] {
            for kind in [DEPLOYMENT, CRONJOB] {
                cases.add(
                    format!("update: {what}"),
                    ns,
                    kind,
                    "UPDATE",
                    object(kind, "w", spec(&[good], new.clone())),
                    Some(object(kind, "w", spec(&[good], old.clone()))),
                );
            }
        }
        // An unscheduled pod's scheduling directives changed. (The API server's validation of a
        // pod update refuses some of these before the admission plugins see them, nodeSelector
        // and affinity being mutable only while the pod is gated: both sides are asked anyway.)
        for (what, old, new) in [
            (
                "selector moved off the pool",
                placed.clone(),
                Some(json!({"agentpool": "elsewhere"})),
            ),
            ("selector dropped", placed.clone(), None),
            ("selector kept", placed.clone(), placed.clone()),
            ("selector added", None, placed.clone()),
            (
                "another key added",
                placed.clone(),
                Some(json!({"agentpool": pool, "disk": "ssd"})),
            ),
            ("unplaced, unchanged", None, None),
        ] {
            let old_pod = object(POD, "n", spec(&[good], old));
            let mut new_pod = object(POD, "n", spec(&[good], new));
            cases.add(
                format!("unscheduled pod update: {what}"),
                ns,
                POD,
                "UPDATE",
                new_pod.clone(),
                Some(old_pod.clone()),
            );
            new_pod["spec"]["schedulingGates"] = json!([{"name": "wait"}]);
            cases.add(
                format!("unscheduled pod update: {what}, gates added"),
                ns,
                POD,
                "UPDATE",
                new_pod.clone(),
                Some(old_pod.clone()),
            );
            new_pod["spec"]["affinity"] = json!({"nodeAffinity": {}});
            cases.add(
                format!("unscheduled pod update: {what}, affinity added"),
                ns,
                POD,
                "UPDATE",
                new_pod,
                Some(old_pod),
            );
        }
        // A scheduled pod: its scheduling directives cannot change any more (the API server's
        // validation refuses that before admission: a bound pod has no scheduling gates), its
        // images can. One placed elsewhere before its namespace got (another) pool keeps running.
        for (what, sel, old_image, new_image) in [
            (
                "image changed",
                placed.clone(),
                good,
                "registry.example.com/app:2",
            ),
            (
                "image changed to a foreign one",
                placed.clone(),
                good,
                "nginx:1",
            ),
            (
                "placed elsewhere, image changed",
                Some(json!({"agentpool": "elsewhere"})),
                good,
                "registry.example.com/app:2",
            ),
            (
                "unplaced, image changed",
                None,
                good,
                "registry.example.com/app:2",
            ),
        ] {
            let mut old_pod = object(POD, "b", spec(&[old_image], sel.clone()));
            let mut new_pod = object(POD, "b", spec(&[new_image], sel));
            old_pod["spec"]["nodeName"] = json!("node-1");
            new_pod["spec"]["nodeName"] = json!("node-1");
            cases.add(
                format!("scheduled pod update: {what}"),
                ns,
                POD,
                "UPDATE",
                new_pod,
                Some(old_pod),
            );
        }
    }
    cases.0
}

// ---------------------------------------------------------------------------------------------
// The tests
// ---------------------------------------------------------------------------------------------

/// The example config with `from` replaced by `to` (which must be there).
fn example_with(from: &str, to: &str) -> String {
    assert!(EXAMPLE.contains(from), "the example config has no {from:?}");
    EXAMPLE.replacen(from, to, 1)
}

/// The native objects of `config` against poolguard's decisions on `cases`: no disagreement,
/// and both admitted and refused requests among them (a test of only admitted, or only
/// refused, requests could not tell a policy that refuses nothing, or everything, apart).
fn differential(name: &str, config: &str, cases: &[Case]) {
    let rules = rules(config);
    let native = generate(&rules, &Options::default());
    let compiled = compile(&native);
    let Found { wrong, tolerated } = disagreements(&rules, &compiled, cases);
    let admitted = cases
        .iter()
        .filter(|c| webhook(&rules, c).admitted())
        .count();
    eprintln!(
        "{name}: {} generated expressions in {} policies, {} cases ({admitted} admitted, {} refused by poolguard), {} disagreements, {} messages kube-apiserver would replace by the static one (line breaks)",
        compiled.expressions,
        compiled.policies.len(),
        cases.len(),
        cases.len() - admitted,
        wrong.len(),
        tolerated.len(),
    );
    assert!(
        tolerated.is_empty(),
        "{name}: messages of more than one line, which kube-apiserver replaces by the static one:\n{}",
        tolerated.join("\n")
    );
    assert!(
        wrong.is_empty(),
        "{name}: {} disagreements in {} cases:\n{}",
        wrong.len(),
        cases.len(),
        wrong
            .iter()
            .take(20)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    );
    assert!(
        admitted * 10 > cases.len() && (cases.len() - admitted) * 10 > cases.len(),
        "{name}: {admitted} of {} admitted",
        cases.len()
    );
}

/// No policy: what decides is the reading of image references alone (poolguard-images against
/// poolguard's parser), on every reference of the table.
#[test]
fn the_image_reference_table_is_read_as_poolguard_reads_it() {
    differential(
        "no policy, the image reference table",
        NO_POLICY,
        &table_cases(1, POD),
    );
}

/// Allowed repositories the table's references normalize to (Docker Hub's library and user
/// repositories, hosts with ports, IPv6 literals, localhost, upper case hosts), in the gpu
/// pool's namespace.
#[test]
fn the_image_reference_table_is_normalized_as_poolguard_normalizes_it() {
    let config = r#"namespaceLabel: agentpool
nodeSelectorKey: agentpool
policies:
  allowedrepositories:
    parameters:
      repositories: ["docker.io/library/", "docker.io/docker/", "localhost/", "127.0.0.1:5000/", "[fc00::1]:5000/", "example.com/", "Docker/", "192.168.0.1:8/"]
"#;
    differential(
        "allowed repositories of the table, the image reference table",
        config,
        &table_cases(0, DEPLOYMENT),
    );
}

#[test]
fn the_example_config_decides_images_as_poolguard() {
    differential("example.yaml, images", EXAMPLE, &image_cases());
}

#[test]
fn the_example_config_decides_placement_and_updates_as_poolguard() {
    let cases = [placement_cases(), update_cases()].concat();
    differential("example.yaml, placement and updates", EXAMPLE, &cases);
}

#[test]
fn a_strict_selector_policy_decides_placement_and_updates_as_poolguard() {
    let config = example_with("selectorPolicy: merge", "selectorPolicy: strict");
    let cases = [placement_cases(), update_cases()].concat();
    differential(
        "strict selectorPolicy, placement and updates",
        &config,
        &cases,
    );
}

#[test]
fn a_warn_policy_refuses_nothing_natively_either() {
    let config = example_with(
        "  latesttag:\n    enforcement: deny",
        "  latesttag:\n    enforcement: warn",
    );
    differential("latesttag in warn mode, images", &config, &image_cases());
}

const NO_POLICY: &str = "namespaceLabel: agentpool\nnodeSelectorKey: agentpool\n";

/// The test can fail: the same objects with one comparison flipped, or one bound of the
/// reference grammar moved, disagree with poolguard on cases the unchanged objects agree on
/// (the tests above).
#[test]
fn a_flipped_comparison_in_the_generated_cel_is_caught() {
    // A pool namespace (the cluster-wide allowed repositories), without the many-image pods (slow,
    // and not needed here).
    let placement: Vec<Case> = placement_cases()
        .into_iter()
        .filter(|c| c.namespace == "team-cpu" && !c.what.ends_with(" images"))
        .collect();
    let table = table_cases(1, POD);
    for (config, cases, policy, from, to) in [
        // Placement: a pod created with its pool's selector is refused, one without admitted.
        (
            EXAMPLE,
            &placement,
            "poolguard-placement",
            "variables.sel['agentpool'] == variables.pool",
            "variables.sel['agentpool'] != variables.pool",
        ),
        // Allowed repositories: an image of an allowed repository infringes, a foreign one not.
        (
            EXAMPLE,
            &placement,
            "poolguard-allowedrepositories-and-latesttag",
            "i.repository == p ||",
            "i.repository != p ||",
        ),
        // At most 250 images becomes more than 250.
        (
            EXAMPLE,
            &placement,
            "poolguard-images",
            "size(variables.texts) <= 250",
            "size(variables.texts) > 250",
        ),
        // The pool mutation: the pod's own selector is kept only when it names the pool.
        (
            EXAMPLE,
            &placement,
            "poolguard-pool",
            "variables.sel['agentpool'] != variables.pool",
            "variables.sel['agentpool'] == variables.pool",
        ),
        // The reference grammar: a name one character too long, a digest too short.
        (
            NO_POLICY,
            &table,
            "poolguard-images",
            "size(t) <= 247",
            "size(t) <= 248",
        ),
        (
            NO_POLICY,
            &table,
            "poolguard-images",
            "sha256:[a-f0-9]{64}",
            "sha256:[a-f0-9]{32,64}",
        ),
    ] {
        let rules = rules(config);
        let native = generate(&rules, &Options::default());
        let mut broken = native.clone();
        let object = broken
            .objects
            .iter_mut()
            .find(|o| {
                o["kind"].as_str().unwrap().ends_with("AdmissionPolicy")
                    && o["metadata"]["name"] == policy
            })
            .unwrap_or_else(|| panic!("no policy {policy}"));
        let text = serde_json::to_string(object).unwrap();
        let from_json = serde_json::to_string(from).unwrap();
        let to_json = serde_json::to_string(to).unwrap();
        let (from_json, to_json) = (
            &from_json[1..from_json.len() - 1],
            &to_json[1..to_json.len() - 1],
        );
        assert!(text.contains(from_json), "{policy} has no {from:?}");
        *object = serde_json::from_str(&text.replace(from_json, to_json)).unwrap();
        let found = disagreements(&rules, &compile(&broken), cases).wrong;
        eprintln!(
            "{policy} with {to:?}: {} disagreements in {} cases",
            found.len(),
            cases.len()
        );
        assert!(
            !found.is_empty(),
            "{policy} with {from:?} changed to {to:?}: no disagreement found"
        );
    }
}
