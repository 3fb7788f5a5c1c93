//! Native admission per native.mode: no policy objects, RBAC for them or --native-* flags unless
//! native.mode asks for them. Mode static renders exactly what `poolguard native` printed
//! (OUT/native.yaml; the chart generates nothing); mode apply gives the controller, never the
//! serving pods, --native-apply with the webhooks' scope, RBAC for the four kinds in its own
//! ClusterRole, and (native.webhookFallback) --native-fallback with its canary namespace.

use serde_json::{json, Value};

use super::{
    arr, has, has_str, is_strs, kind_of, load_truthy, name_of, parse_truthy, report, repr_list,
    repr_values, strings, text,
};

const POLICY_KINDS: [&str; 4] = [
    "MutatingAdmissionPolicy",
    "MutatingAdmissionPolicyBinding",
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding",
];

const POLICY_RESOURCES: [&str; 4] = [
    "mutatingadmissionpolicies",
    "mutatingadmissionpolicybindings",
    "validatingadmissionpolicies",
    "validatingadmissionpolicybindings",
];

/// The arguments of the first container of every Deployment whose first argument is `command`.
fn deployment_args(docs: &[Value], command: &str) -> Vec<String> {
    docs.iter()
        .filter(|d| kind_of(d) == "Deployment")
        .filter_map(|d| arr(&d["spec"]["template"]["spec"]["containers"]).first())
        .filter(|c| arr(&c["args"]).first().and_then(Value::as_str) == Some(command))
        .flat_map(|c| strings(&c["args"]))
        .collect()
}

/// The rules of the ClusterRoles named `role_name`.
fn role_rules<'a>(docs: &'a [Value], role_name: &str) -> Vec<&'a Value> {
    docs.iter()
        .filter(|d| kind_of(d) == "ClusterRole" && name_of(d) == role_name)
        .flat_map(|d| arr(&d["rules"]))
        .collect()
}

/// The values after each occurrence of `flag`.
fn values_of(args: &[String], flag: &str) -> Vec<String> {
    args.iter()
        .enumerate()
        .filter(|(_, a)| *a == flag)
        .filter_map(|(i, _)| args.get(i + 1).cloned())
        .collect()
}

/// An array of strings, sorted.
fn sorted_strings(v: &Value) -> Vec<String> {
    let mut items = strings(v);
    items.sort();
    items
}

pub fn run(out: &str, names: &[String]) -> bool {
    let mut errors = Vec::new();
    let generated = load_truthy(&format!("{out}/native.yaml")).unwrap_or_else(|e| {
        errors.push(format!("native-static: {e}"));
        Vec::new()
    });
    for name in names {
        let docs = match load_truthy(&format!("{out}/{name}.yaml")) {
            Ok(docs) => docs,
            Err(e) => {
                errors.push(format!("{name}: {e}"));
                continue;
            }
        };
        let mut fail = |msg: String| errors.push(format!("{name}: {msg}"));
        let objects: Vec<&Value> = docs
            .iter()
            .filter(|d| POLICY_KINDS.contains(&kind_of(d)))
            .collect();
        // The controller (`poolguard controller`) writes the objects; the serving pods never do.
        let args = deployment_args(&docs, "controller");
        let serve_args = deployment_args(&docs, "serve");
        if serve_args.is_empty() {
            fail("no serving Deployment (args serve)".into());
        }
        if serve_args.iter().any(|a| a.starts_with("--native")) {
            fail(format!(
                "the serving Deployment has native flags: {}",
                repr_list(&serve_args)
            ));
        }
        let fullname = if name == "options" { "pg" } else { "poolguard" };
        let rules = role_rules(&docs, &format!("{fullname}-controller"));
        let writes: Vec<&Value> = rules
            .iter()
            .copied()
            .filter(|r| has_str(&r["resources"], "validatingadmissionpolicies"))
            .collect();
        let owner_reads = rules
            .iter()
            .filter(|r| {
                is_strs(&r["resources"], &["validatingwebhookconfigurations"])
                    && is_strs(&r["resourceNames"], &["poolguard-validating"])
                    && is_strs(&r["verbs"], &["get"])
            })
            .count();
        if role_rules(&docs, fullname).iter().any(|r| {
            arr(&r["resources"])
                .iter()
                .any(|res| POLICY_RESOURCES.contains(&text(res)))
        }) {
            fail(format!(
                "the serving ClusterRole {fullname} grants access to admission policies"
            ));
        }
        if name == "native-static" {
            // helm orders documents by kind: compare them ordered by kind and name, each object
            // exactly as printed.
            let by_kind_and_name = |docs: &mut Vec<&Value>| {
                docs.sort_by(|a, b| (kind_of(a), name_of(a)).cmp(&(kind_of(b), name_of(b))));
            };
            let mut rendered = objects.clone();
            let mut printed: Vec<&Value> = generated.iter().collect();
            by_kind_and_name(&mut rendered);
            by_kind_and_name(&mut printed);
            if rendered != printed || generated.is_empty() {
                fail(format!(
                    "renders {} policy objects, not the {} poolguard native printed",
                    objects.len(),
                    generated.len()
                ));
            }
        } else if !objects.is_empty() {
            fail("renders policy objects without native.mode static".into());
        }
        if name != "native-apply" {
            if args.iter().any(|a| a.starts_with("--native")) {
                fail(format!(
                    "native flags without native.mode apply: {}",
                    repr_list(&args)
                ));
            }
            if !writes.is_empty() {
                fail("RBAC for admission policies without native.mode apply".into());
            }
            if docs.iter().any(|d| kind_of(d) == "Namespace") {
                fail("a Namespace (the canary's) without native.webhookFallback".into());
            }
            continue;
        }
        let mut excluded = values_of(&args, "--native-exclude-namespace");
        excluded.sort();
        let matched = values_of(&args, "--native-namespace-match-label");
        let owner = super::flag_value(&args, "--native-owner");
        if !has(&args, "--native-apply")
            || !has(&args, "--native-require-namespace-label")
            || !has(&args, "--native-fallback")
            || owner != Some("poolguard-validating")
            || excluded != ["kube-system", "monitoring", "poolguard-system"]
            || matched != ["poolguard=on"]
        {
            fail(format!("args {}", repr_list(&args)));
        }
        if writes.len() != 1
            || sorted_strings(&writes[0]["resources"]) != POLICY_RESOURCES
            || sorted_strings(&writes[0]["verbs"]) != ["create", "delete", "get", "list", "patch"]
        {
            fail(format!(
                "the controller's ClusterRole rules for the policy kinds: {}",
                repr_values(writes.iter().copied())
            ));
        }
        // The canary (--native-canary-namespace): a namespace of its own, which the native
        // bindings select (pool label, match labels, not excluded) and the pod webhooks leave
        // out; there the controller may create pods and nothing else.
        let canary = super::flag_value(&args, "--native-canary-namespace");
        if canary != Some("poolguard-canary") || !has(&args, "--native-canary-image") {
            fail(format!(
                "no --native-canary-namespace poolguard-canary / --native-canary-image: {}",
                repr_list(&args)
            ));
        }
        let spaces: Vec<&Value> = docs
            .iter()
            .filter(|d| kind_of(d) == "Namespace" && name_of(d) == "poolguard-canary")
            .collect();
        let labels = spaces
            .first()
            .map_or(&Value::Null, |s| &s["metadata"]["labels"]);
        if spaces.len() != 1
            || !super::truthy(&labels["agentpool"])
            || labels["poolguard"] != "on"
            || labels["pod-security.kubernetes.io/enforce"] != "restricted"
        {
            fail(format!(
                "the canary namespace: {}",
                repr_values(spaces.iter().copied())
            ));
        }
        if excluded.iter().any(|e| e == "poolguard-canary") {
            fail("the native bindings leave the canary namespace out".into());
        }
        let in_canary = |kind: &str| -> Vec<&Value> {
            docs.iter()
                .filter(|d| kind_of(d) == kind && d["metadata"]["namespace"] == "poolguard-canary")
                .collect()
        };
        let roles = in_canary("Role");
        let bindings = in_canary("RoleBinding");
        let role_rules: Vec<&Value> = roles.iter().map(|r| &r["rules"]).collect();
        let subjects: Vec<Vec<&Value>> = bindings
            .iter()
            .map(|b| arr(&b["subjects"]).iter().map(|s| &s["name"]).collect())
            .collect();
        let create_pods = json!([{"apiGroups": [""], "resources": ["pods"], "verbs": ["create"]}]);
        if role_rules != [&create_pods] || subjects != [vec!["poolguard-controller"]] {
            fail(format!(
                "the canary namespace's RBAC: {} {}",
                repr_values(roles.iter().copied()),
                repr_values(bindings.iter().copied())
            ));
        }
        // The webhooks poolguard registers, by name (a later one of the same name wins).
        let mut hooks = std::collections::BTreeMap::new();
        for cm in docs
            .iter()
            .filter(|d| kind_of(d) == "ConfigMap" && name_of(d) == "poolguard-webhooks")
        {
            for (key, data) in cm["data"].as_object().into_iter().flatten() {
                let configs = match parse_truthy(text(data), &format!("poolguard-webhooks {key}")) {
                    Ok(configs) => configs,
                    Err(e) => {
                        fail(e);
                        continue;
                    }
                };
                for config in configs {
                    for w in arr(&config["webhooks"]) {
                        hooks.insert(text(&w["name"]).to_string(), w.clone());
                    }
                }
            }
        }
        for hook in ["mutate.poolguard.io", "validate.poolguard.io"] {
            let hook_config = hooks.get(hook).unwrap_or(&Value::Null);
            let left_out: Vec<&Value> = arr(&hook_config["namespaceSelector"]["matchExpressions"])
                .iter()
                .filter(|e| e["key"] == "kubernetes.io/metadata.name" && e["operator"] == "NotIn")
                .flat_map(|e| arr(&e["values"]))
                .collect();
            if !left_out.iter().any(|v| *v == "poolguard-canary") {
                fail(format!(
                    "webhook {hook} does not leave the canary namespace out: {}",
                    repr_values(left_out)
                ));
            }
        }
        // The owner (--native-owner): its uid, read by name.
        if owner_reads != 1 {
            fail(
                "the controller's ClusterRole does not get poolguard-validating (the native objects' owner) by name"
                    .into(),
            );
        }
    }
    report(&errors)
}
