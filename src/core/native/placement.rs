//! Pool placement as native objects: a MutatingAdmissionPolicy giving pods in namespaces that
//! name a pool the pool's nodeSelector and the `poolguard.io/pool` annotation (as
//! [`crate::mutate`] patches), and a ValidatingAdmissionPolicy refusing what
//! [`crate::validate`] refuses for placement: another pool, a strict selector's other keys, a
//! pod created without the pool, an unscheduled pod's selector changed off its pool, a workload
//! template selecting another pool.

use serde_json::{json, Value};

use super::cel::{
    all_of, and, any_of, bool, concat, cond, has, ident, int, list, map, message, not, or, size,
    str, var, Expr,
};
use super::object::{metadata, validation, variable, Native, Options, API_VERSION};
use super::{selectors, workloads};
use crate::config::{Config, SelectorPolicy};
use crate::node_selector::POOL_ANNOTATION;

/// Name of the mutating policy and its binding.
pub const MUTATING: &str = "poolguard-pool";
/// Name of the validating placement policy and its binding.
pub const VALIDATING: &str = "poolguard-placement";

pub fn generate(config: &Config, options: &Options, native: &mut Native) {
    let namespaces = selectors::match_resources(selectors::named_pool(config, options));
    native.objects.push(mutating_policy(config));
    native.objects.push(json!({
        "apiVersion": API_VERSION,
        "kind": "MutatingAdmissionPolicyBinding",
        "metadata": metadata(MUTATING),
        "spec": {"policyName": MUTATING, "matchResources": namespaces},
    }));
    native.objects.push(validating_policy(config));
    native.objects.push(json!({
        "apiVersion": API_VERSION,
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": metadata(VALIDATING),
        "spec": {"policyName": VALIDATING, "validationActions": ["Deny"], "matchResources": namespaces},
    }));
}

/// The CEL pieces both policies share, for a node selector `sel` (a map).
struct Cel {
    /// The pool's node selector key, a string literal.
    key: Expr,
    strict: bool,
}

impl Cel {
    fn of(config: &Config) -> Cel {
        Cel {
            key: str(config.node_selector_key.as_str()),
            strict: config.selector_policy == SelectorPolicy::Strict,
        }
    }

    /// The selector names another pool.
    fn other_pool(&self, sel: &Expr) -> Expr {
        and(
            self.key.clone().within(sel.clone()),
            sel.clone().index(self.key.clone()).ne(var("pool")),
        )
    }

    /// Strict: a key besides the pool's.
    fn other_keys(&self, sel: &Expr) -> Expr {
        if self.strict {
            sel.clone().exists("k", ident("k").ne(self.key.clone()))
        } else {
            bool(false)
        }
    }

    /// What the webhook calls a conflict.
    fn conflict(&self, sel: &Expr) -> Expr {
        or(self.other_pool(sel), self.other_keys(sel))
    }

    /// The selector places the pod on the pool, as the webhook requires of a pod.
    fn satisfied(&self, sel: &Expr) -> Expr {
        all_of([
            self.key.clone().within(sel.clone()),
            sel.clone().index(self.key.clone()).eq(var("pool")),
            not(self.other_keys(sel)),
        ])
    }
}

/// `[JSONPatch{op: 'add', path: path, value: value}]`.
fn add_patch(path: Expr, value: Expr) -> Expr {
    list([message(
        "JSONPatch",
        [("op", str("add")), ("path", path), ("value", value)],
    )])
}

/// The JSON Patch path of `key` in the object at `parent`.
fn patch_path(parent: &str, key: &Expr) -> Expr {
    concat([
        str(format!("{parent}/")),
        ident("jsonpatch").method("escapeKey", [key.clone()]),
    ])
}

fn mutating_policy(config: &Config) -> Value {
    let cel = Cel::of(config);
    let key = &cel.key;
    let annotation = str(POOL_ANNOTATION);
    let (pool, sel) = (var("pool"), var("sel"));
    let object = ident("object");
    let node_selector = object.clone().field("spec").field("nodeSelector");
    let annotations = object.clone().field("metadata").field("annotations");
    let selector = cond(
        key.clone().within(sel.clone()),
        list([]),
        cond(
            size(sel.clone()).eq(int(0)),
            add_patch(
                str("/spec/nodeSelector"),
                map([(key.clone(), pool.clone())]),
            ),
            add_patch(patch_path("/spec/nodeSelector", key), pool.clone()),
        ),
    );
    let annotate = cond(
        not(has(annotations.clone())),
        add_patch(
            str("/metadata/annotations"),
            map([(annotation.clone(), pool.clone())]),
        ),
        cond(
            annotations
                .clone()
                .opt_index(annotation.clone())
                .eq(ident("optional").method("of", [pool.clone()])),
            list([]),
            add_patch(patch_path("/metadata/annotations", &annotation), pool),
        ),
    );
    // A pod whose pool key equals its annotation is left as it is by the mutation (its pool,
    // already placed; or another pool, a conflict): skipping it spares the re-invocation that
    // `IfNeeded` brings after the policy's own patch a whole evaluation.
    let placed = not(all_of([
        has(node_selector.clone()),
        key.clone().within(node_selector.clone()),
        has(annotations.clone()),
        annotation.clone().within(annotations.clone()),
        node_selector
            .index(key.clone())
            .eq(annotations.index(annotation)),
    ]));
    // A conflict is left as it is: the validating policy refuses it, as the webhook does.
    let patches = cond(cel.conflict(&sel), list([]), concat([selector, annotate]));
    json!({
        "apiVersion": API_VERSION,
        "kind": "MutatingAdmissionPolicy",
        "metadata": metadata(MUTATING),
        "spec": {
            "failurePolicy": "Fail",
            "reinvocationPolicy": "IfNeeded",
            "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                "operations": ["CREATE"], "resources": ["pods"]}]},
            "matchConditions": [{"name": "not-placed-yet", "expression": placed.long()}],
            "variables": [
                variable("pool", &namespace_label(config)),
                variable("sel", &object.field("spec").opt_field("nodeSelector").method("orValue", [map([])])),
            ],
            "mutations": [{"patchType": "JSONPatch", "jsonPatch": {"expression": patches.long()}}],
        },
    })
}

/// The namespace's pool: the value of its pool label.
fn namespace_label(config: &Config) -> Expr {
    ident("namespaceObject")
        .field("metadata")
        .field("labels")
        .index(str(config.namespace_label.as_str()))
}

fn validating_policy(config: &Config) -> Value {
    let cel = Cel::of(config);
    let key = &cel.key;
    let label = str(config.namespace_label.as_str());
    let (pool, sel, old_sel) = (var("pool"), var("sel"), var("oldSel"));
    let (object, old_object, request) = (ident("object"), ident("oldObject"), ident("request"));
    let operation = || request.clone().field("operation");
    let assigned = concat([
        str("namespace \""),
        request.clone().field("namespace"),
        str("\" is assigned to pool \""),
        pool.clone(),
        str("\" (namespace label "),
        label,
        str("="),
        pool.clone(),
        str(")"),
    ]);
    let why = cond(
        cel.other_pool(&sel),
        concat([
            str("nodeSelector "),
            key.clone(),
            str("=\""),
            sel.clone().index(key.clone()),
            str("\" is not allowed here"),
        ]),
        cond(
            not(key.clone().within(sel.clone())),
            concat([
                str("the pod has no nodeSelector "),
                key.clone(),
                str("="),
                pool.clone(),
            ]),
            concat([
                str("selectorPolicy is strict, so the nodeSelector must be empty or exactly {"),
                key.clone(),
                str(": "),
                pool.clone(),
                str("}"),
            ]),
        ),
    );
    let message = concat([assigned, str(": "), why.clone()]);
    // Only a conflict the old template did not have is refused (the webhook compares the
    // conflict's message: the other pool's value, or the whole strict selector).
    let known_conflict = and(
        operation().eq(str("UPDATE")),
        cond(
            cel.other_pool(&sel),
            and(
                cel.other_pool(&old_sel),
                old_sel
                    .clone()
                    .index(key.clone())
                    .eq(sel.clone().index(key.clone())),
            ),
            all_of([
                not(cel.other_pool(&old_sel)),
                cel.other_keys(&old_sel),
                old_sel.clone().eq(sel.clone()),
            ]),
        ),
    );
    let changed = any_of(["nodeSelector", "affinity", "schedulingGates"].map(|f| {
        let (old, new) = (
            old_object.clone().field("spec").field(f),
            object.clone().field("spec").field(f),
        );
        or(
            has(old.clone()).ne(has(new.clone())),
            and(has(new.clone()), old.ne(new)),
        )
    }));
    let kind = || object.clone().field("kind");
    let validations: Vec<Value> = [
        validation(
            any_of([
                kind().ne(str("Pod")),
                operation().ne(str("CREATE")),
                cel.satisfied(&sel),
            ]),
            "the pod's nodeSelector does not place it on its namespace's pool",
            message.clone(),
            "Forbidden",
        ),
        validation(
            any_of([
                kind().ne(str("Pod")),
                operation().ne(str("UPDATE")),
                old_object
                    .clone()
                    .field("spec")
                    .opt_field("nodeName")
                    .method("orValue", [str("")])
                    .ne(str("")),
                not(changed),
                cel.satisfied(&sel),
            ]),
            "an unscheduled pod's scheduling directives changed off its namespace's pool",
            concat([
                str("the pod is not scheduled yet and its scheduling directives changed, so it must stay on pool \""),
                pool.clone(),
                str("\": "),
                why,
            ]),
            "Forbidden",
        ),
        validation(
            any_of([kind().eq(str("Pod")), not(cel.conflict(&sel)), known_conflict]),
            "the pod template's nodeSelector selects another pool than its namespace's",
            message,
            "Forbidden",
        ),
    ]
    .into_iter()
    .flatten()
    .collect();
    json!({
        "apiVersion": API_VERSION,
        "kind": "ValidatingAdmissionPolicy",
        "metadata": metadata(VALIDATING),
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": workloads::match_constraints(),
            "matchConditions": workloads::match_conditions(),
            "variables": [
                variable("pool", &namespace_label(config)),
                variable("spec", &workloads::spec("object")),
                variable("sel", &var("spec").opt_field("nodeSelector").method("orValue", [map([])])),
                variable("oldSel", &workloads::spec("oldObject").opt_field("nodeSelector").method("orValue", [map([])])),
            ],
            "validations": validations,
        },
    })
}
