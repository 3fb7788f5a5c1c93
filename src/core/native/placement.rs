//! Pool placement as native objects: a MutatingAdmissionPolicy giving pods in namespaces that
//! name a pool the pool's nodeSelector and the `poolguard.io/pool` annotation (as
//! [`crate::mutate`] patches), and a ValidatingAdmissionPolicy refusing what
//! [`crate::validate`] refuses for placement: another pool, a strict selector's other keys, a
//! pod created without the pool, an unscheduled pod's selector changed off its pool, a workload
//! template selecting another pool.

use serde_json::{json, Value};

use super::image_cel::literal;
use super::{metadata, selectors, workloads, Native, Options, API_VERSION};
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

/// The CEL pieces both policies share, for the selector in variable `sel`.
struct Cel {
    key: String,
    strict: bool,
}

impl Cel {
    fn of(config: &Config) -> Cel {
        Cel {
            key: literal(&config.node_selector_key),
            strict: config.selector_policy == SelectorPolicy::Strict,
        }
    }

    /// The selector names another pool.
    fn other_pool(&self, sel: &str) -> String {
        format!(
            "({key} in {sel} && {sel}[{key}] != variables.pool)",
            key = self.key
        )
    }

    /// Strict: a key besides the pool's.
    fn other_keys(&self, sel: &str) -> String {
        if self.strict {
            format!("{sel}.exists(k, k != {})", self.key)
        } else {
            "false".into()
        }
    }

    /// What the webhook calls a conflict.
    fn conflict(&self, sel: &str) -> String {
        format!("({} || {})", self.other_pool(sel), self.other_keys(sel))
    }

    /// The selector places the pod on the pool, as the webhook requires of a pod.
    fn satisfied(&self, sel: &str) -> String {
        format!(
            "({key} in {sel} && {sel}[{key}] == variables.pool && !{})",
            self.other_keys(sel),
            key = self.key
        )
    }
}

fn mutating_policy(config: &Config) -> Value {
    let cel = Cel::of(config);
    let key = &cel.key;
    let annotation = literal(POOL_ANNOTATION);
    let selector = format!(
        "({key} in variables.sel ? [] : size(variables.sel) == 0 ? \
[JSONPatch{{op: 'add', path: '/spec/nodeSelector', value: {{{key}: variables.pool}}}}] : \
[JSONPatch{{op: 'add', path: '/spec/nodeSelector/' + jsonpatch.escapeKey({key}), value: variables.pool}}])"
    );
    let annotate = format!(
        "(!has(object.metadata.annotations) ? \
[JSONPatch{{op: 'add', path: '/metadata/annotations', value: {{{annotation}: variables.pool}}}}] : \
object.metadata.annotations[?{annotation}] == optional.of(variables.pool) ? [] : \
[JSONPatch{{op: 'add', path: '/metadata/annotations/' + jsonpatch.escapeKey({annotation}), value: variables.pool}}])"
    );
    // A pod whose pool key equals its annotation is left as it is by the mutation (its pool,
    // already placed; or another pool, a conflict): skipping it spares the re-invocation that
    // `IfNeeded` brings after the policy's own patch a whole evaluation.
    let placed = format!(
        "!(has(object.spec.nodeSelector) && {key} in object.spec.nodeSelector && \
has(object.metadata.annotations) && {annotation} in object.metadata.annotations && \
object.spec.nodeSelector[{key}] == object.metadata.annotations[{annotation}])"
    );
    json!({
        "apiVersion": API_VERSION,
        "kind": "MutatingAdmissionPolicy",
        "metadata": metadata(MUTATING),
        "spec": {
            "failurePolicy": "Fail",
            "reinvocationPolicy": "IfNeeded",
            "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                "operations": ["CREATE"], "resources": ["pods"]}]},
            "matchConditions": [{"name": "not-placed-yet", "expression": placed}],
            "variables": [
                {"name": "pool", "expression": format!("namespaceObject.metadata.labels[{}]", literal(&config.namespace_label))},
                {"name": "sel", "expression": "object.spec.?nodeSelector.orValue({})"},
            ],
            // A conflict is left as it is: the validating policy refuses it, as the webhook does.
            "mutations": [{"patchType": "JSONPatch", "jsonPatch": {"expression":
                format!("{} ? [] : {selector} + {annotate}", cel.conflict("variables.sel"))}}],
        },
    })
}

fn validating_policy(config: &Config) -> Value {
    let cel = Cel::of(config);
    let key = &cel.key;
    let label = literal(&config.namespace_label);
    let assigned = format!(
        "'namespace \"' + request.namespace + '\" is assigned to pool \"' + variables.pool + '\" (namespace label ' + {label} + '=' + variables.pool + ')'"
    );
    let why = format!(
        "({other} ? 'nodeSelector ' + {key} + '=\"' + variables.sel[{key}] + '\" is not allowed here' : \
!({key} in variables.sel) ? 'the pod has no nodeSelector ' + {key} + '=' + variables.pool : \
'selectorPolicy is strict, so the nodeSelector must be empty or exactly {{' + {key} + ': ' + variables.pool + '}}')",
        other = cel.other_pool("variables.sel"),
    );
    let message = format!("{assigned} + ': ' + {why}");
    // Only a conflict the old template did not have is refused (the webhook compares the
    // conflict's message: the other pool's value, or the whole strict selector).
    let known_conflict = format!(
        "(request.operation == 'UPDATE' && ({new_other} ? {old_other} && variables.oldSel[{key}] == variables.sel[{key}] : !{old_other} && {old_keys} && variables.oldSel == variables.sel))",
        new_other = cel.other_pool("variables.sel"),
        old_other = cel.other_pool("variables.oldSel"),
        old_keys = cel.other_keys("variables.oldSel"),
    );
    let changed = ["nodeSelector", "affinity", "schedulingGates"]
        .iter()
        .map(|f| {
            format!("(has(oldObject.spec.{f}) != has(object.spec.{f}) || (has(object.spec.{f}) && oldObject.spec.{f} != object.spec.{f}))")
        })
        .collect::<Vec<_>>()
        .join(" || ");
    json!({
        "apiVersion": API_VERSION,
        "kind": "ValidatingAdmissionPolicy",
        "metadata": metadata(VALIDATING),
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": workloads::match_constraints(),
            "matchConditions": workloads::match_conditions(),
            "variables": [
                {"name": "pool", "expression": format!("namespaceObject.metadata.labels[{label}]")},
                {"name": "spec", "expression": workloads::spec("object")},
                {"name": "sel", "expression": "variables.spec.?nodeSelector.orValue({})"},
                {"name": "oldSel", "expression": format!("{}.?nodeSelector.orValue({{}})", workloads::spec("oldObject"))},
            ],
            "validations": [
                {
                    "expression": format!("object.kind != 'Pod' || request.operation != 'CREATE' || {}", cel.satisfied("variables.sel")),
                    "messageExpression": message,
                    "reason": "Forbidden",
                },
                {
                    "expression": format!(
                        "object.kind != 'Pod' || request.operation != 'UPDATE' || oldObject.spec.?nodeName.orValue('') != '' || !({changed}) || {}",
                        cel.satisfied("variables.sel")
                    ),
                    "messageExpression": format!("'the pod is not scheduled yet and its scheduling directives changed, so it must stay on pool \"' + variables.pool + '\": ' + {why}"),
                    "reason": "Forbidden",
                },
                {
                    "expression": format!("object.kind == 'Pod' || !{} || {known_conflict}", cel.conflict("variables.sel")),
                    "messageExpression": message,
                    "reason": "Forbidden",
                },
            ],
        },
    })
}
