//! The background audit: the controller Deployment's flags (none on the serving one) and both
//! Deployments' downward-API env, its namespace selector equal to the validating webhook's
//! namespaceSelector, its RBAC (the controller's) and Lease Role, the serving pods' rollout
//! ConfigMap Role, and the report CRDs: structural schemas that keep every field of a sample
//! report with all the fields poolguard writes (the API server's own verdict is in
//! install-test.sh).

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{json, Value};

use super::{
    arr, flag_value, has, is_strs, kind_of, name_of, parse_all, parse_truthy, plain, quote, report,
    repr, repr_list, repr_opt, strings, text, truthy, Checks,
};

/// A report API: its group, version, namespaced resource and the CRDs by kind (plural, short
/// name, scope).
struct Api {
    name: &'static str,
    group: &'static str,
    version: &'static str,
    resource: &'static str,
    crds: [(&'static str, &'static str, &'static str, &'static str); 2],
}

const APIS: [Api; 2] = [
    Api {
        name: "policyreport",
        group: "wgpolicyk8s.io",
        version: "v1alpha2",
        resource: "policyreports",
        crds: [
            ("PolicyReport", "policyreports", "polr", "Namespaced"),
            (
                "ClusterPolicyReport",
                "clusterpolicyreports",
                "cpolr",
                "Cluster",
            ),
        ],
    },
    Api {
        name: "openreports",
        group: "openreports.io",
        version: "v1alpha1",
        resource: "reports",
        crds: [
            ("Report", "reports", "rep", "Namespaced"),
            ("ClusterReport", "clusterreports", "crep", "Cluster"),
        ],
    },
];

/// What the audit reads: get/list, never watch. (Nodes are watched by every replica whether the
/// audit runs or not: checked on their own.)
const READ: [(&str, &str); 8] = [
    ("", "pods"),
    ("", "replicationcontrollers"),
    ("apps", "deployments"),
    ("apps", "replicasets"),
    ("apps", "statefulsets"),
    ("apps", "daemonsets"),
    ("batch", "jobs"),
    ("batch", "cronjobs"),
];

/// One requirement of a label selector: key, operator, values.
type Requirement = (String, String, BTreeSet<String>);

/// A selector as a multiset of requirements (the order of its terms does not matter).
type Requirements = BTreeMap<Requirement, usize>;

/// The terms of a selector string: split at the commas outside parentheses.
fn split_terms(selector: &str) -> Vec<String> {
    let mut terms = Vec::new();
    let mut depth = 0i32;
    let mut cur = String::new();
    for ch in selector.chars() {
        if ch == ',' && depth == 0 {
            terms.push(std::mem::take(&mut cur));
            continue;
        }
        depth += match ch {
            '(' => 1,
            ')' => -1,
            _ => 0,
        };
        cur.push(ch);
    }
    if !selector.is_empty() {
        terms.push(cur);
    }
    terms
}

/// Whether a character may be part of a key or value in selector syntax.
fn word_char(c: char) -> bool {
    !c.is_whitespace() && !matches!(c, '!' | '=' | '(' | ')' | ',')
}

/// Splits the leading run of key characters off `s`.
fn split_word(s: &str) -> (&str, &str) {
    let end = s.find(|c| !word_char(c)).unwrap_or(s.len());
    s.split_at(end)
}

/// One term of a selector string (`key in (a,b)`, `key notin (a)`, `key=v`, `key==v`,
/// `key!=v`, `!key`, `key`).
fn parse_term(term: &str) -> Result<Requirement, String> {
    let not_a_term = || format!("not a label selector term: {}", quote(term));
    let (key, rest) = split_word(term);
    if key.is_empty() {
        let (key, rest) = split_word(term.strip_prefix('!').ok_or_else(not_a_term)?);
        if key.is_empty() || !rest.is_empty() {
            return Err(not_a_term());
        }
        return Ok((key.into(), "DoesNotExist".into(), BTreeSet::new()));
    }
    if rest.is_empty() {
        return Ok((key.into(), "Exists".into(), BTreeSet::new()));
    }
    // `key in (...)` / `key notin (...)`: whitespace around the operator.
    let spaced = rest.trim_start();
    if spaced.len() < rest.len() {
        for (word, op) in [("in", "In"), ("notin", "NotIn")] {
            let Some(after) = spaced.strip_prefix(word) else {
                continue;
            };
            let list = after.trim_start();
            if list.len() == after.len() {
                continue;
            }
            let Some(inner) = list.strip_prefix('(').and_then(|l| l.strip_suffix(')')) else {
                continue;
            };
            if inner.contains(['(', ')']) {
                continue;
            }
            let values = inner.split(',').map(|v| v.trim().to_string()).collect();
            return Ok((key.into(), op.into(), values));
        }
    }
    // `key = value` (==, =, !=), the value possibly empty.
    for (symbol, op) in [("==", "In"), ("=", "In"), ("!=", "NotIn")] {
        let Some(after) = spaced.strip_prefix(symbol) else {
            continue;
        };
        let (value, tail) = split_word(after.trim_start());
        if tail.is_empty() {
            return Ok((key.into(), op.into(), BTreeSet::from([value.to_string()])));
        }
    }
    Err(not_a_term())
}

/// A label selector string (kubectl -l syntax) as a multiset of requirements.
fn parse_selector(selector: &str) -> Result<Requirements, String> {
    let mut reqs = Requirements::new();
    for term in split_terms(selector) {
        *reqs.entry(parse_term(term.trim())?).or_default() += 1;
    }
    Ok(reqs)
}

/// A webhook's namespaceSelector as a multiset of requirements.
fn webhook_selector(sel: &Value) -> Requirements {
    let mut reqs = Requirements::new();
    for (k, v) in sel["matchLabels"].as_object().into_iter().flatten() {
        *reqs
            .entry((k.clone(), "In".into(), BTreeSet::from([plain(v)])))
            .or_default() += 1;
    }
    for e in arr(&sel["matchExpressions"]) {
        let values = strings(&e["values"]).into_iter().collect();
        *reqs
            .entry((plain(&e["key"]), plain(&e["operator"]), values))
            .or_default() += 1;
    }
    reqs
}

/// Would the API server keep `value` as it is under this structural schema?
fn conforms(value: &Value, schema: &Value, path: &str, errors: &mut Vec<String>) {
    if path == ".metadata" {
        return;
    }
    let t = schema["type"].as_str();
    let ok = match t {
        Some("object") => value.is_object(),
        Some("array") => value.is_array(),
        Some("string") => value.is_string(),
        Some("boolean") => value.is_boolean(),
        Some("integer") => value.is_i64() || value.is_u64(),
        _ => false,
    };
    if !ok {
        let t = t.map_or_else(|| plain(&schema["type"]), str::to_string);
        errors.push(format!("{path}: {} is not of type {t}", repr(value)));
        return;
    }
    if let Some(allowed) = schema.get("enum") {
        if !arr(allowed).contains(value) {
            errors.push(format!(
                "{path}: {} not in enum {}",
                repr(value),
                repr(allowed)
            ));
        }
    }
    match t {
        Some("integer") => {
            let bits = match schema["format"].as_str() {
                Some("int32") => Some(31),
                Some("int64") => Some(63),
                _ => None,
            };
            let n = value
                .as_i64()
                .map(i128::from)
                .or_else(|| value.as_u64().map(i128::from));
            if let (Some(bits), Some(n)) = (bits, n) {
                if !(-(1i128 << bits) <= n && n < (1i128 << bits)) {
                    errors.push(format!(
                        "{path}: {n} overflows {}",
                        plain(&schema["format"])
                    ));
                }
            }
        }
        Some("object") => {
            let props = &schema["properties"];
            let extra = &schema["additionalProperties"];
            for (k, v) in value.as_object().into_iter().flatten() {
                if let Some(sub) = props.get(k) {
                    conforms(v, sub, &format!("{path}.{k}"), errors);
                } else if extra.is_object() {
                    conforms(v, extra, &format!("{path}.{k}"), errors);
                } else if !truthy(&schema["x-kubernetes-preserve-unknown-fields"]) {
                    errors.push(format!("{path}.{k}: not in the schema (pruned)"));
                }
            }
            for k in arr(&schema["required"]) {
                let k = plain(k);
                if value.get(&k).is_none() {
                    errors.push(format!("{path}: required field {k} missing"));
                }
            }
        }
        Some("array") => {
            for (i, v) in arr(value).iter().enumerate() {
                conforms(v, &schema["items"], &format!("{path}[{i}]"), errors);
            }
        }
        _ => {}
    }
}

/// Every node of a structural schema has a type (metadata's content is the API server's).
fn structural(schema: &Value, path: &str, errors: &mut Vec<String>) {
    if schema.get("type").is_none() {
        errors.push(format!("{path}: no type"));
    }
    for (k, sub) in schema["properties"].as_object().into_iter().flatten() {
        let sub_path = format!("{path}.{k}");
        if sub_path != ".metadata" {
            structural(sub, &sub_path, errors);
        }
    }
    if schema["additionalProperties"].is_object() {
        structural(
            &schema["additionalProperties"],
            &format!("{path}.*"),
            errors,
        );
    }
    if let Some(items) = schema.get("items") {
        structural(items, &format!("{path}[]"), errors);
    }
}

/// The set of an array's strings.
fn set_of(v: &Value) -> BTreeSet<String> {
    strings(v).into_iter().collect()
}

fn set(items: &[&str]) -> BTreeSet<String> {
    items.iter().map(|s| s.to_string()).collect()
}

/// A set of strings as the messages list it: sorted, ['a', 'b'].
fn sorted(items: &BTreeSet<String>) -> String {
    repr_list(&items.iter().collect::<Vec<_>>())
}

/// A (group, resource) pair as the messages show it: ('', 'pods').
fn pair(group: &str, resource: &str) -> String {
    format!("({}, {})", quote(group), quote(resource))
}

pub fn run(out: &str, namespace: &str, sample_path: &str, names: &[String]) -> bool {
    let sample: Value = match std::fs::read_to_string(sample_path)
        .map_err(|e| e.to_string())
        .and_then(|t| serde_json::from_str(&t).map_err(|e| format!("not JSON: {e}")))
    {
        Ok(sample) => sample,
        Err(e) => return report(&[format!("{sample_path}: {e}")]),
    };
    let mut errors = Vec::new();
    for name in names {
        let path = format!("{out}/{name}.yaml");
        let docs = match std::fs::read_to_string(&path)
            .map_err(|e| e.to_string())
            .and_then(|t| parse_all(&t).map_err(|e| format!("not YAML: {e}")))
        {
            Ok(docs) => docs,
            Err(e) => {
                errors.push(format!("{name}: {path}: {e}"));
                continue;
            }
        };
        let mut docs: Vec<Value> = docs.into_iter().filter(Value::is_object).collect();
        let mut checks = Checks {
            name,
            errors: &mut errors,
        };
        // webhook.registration=poolguard: the webhook configurations in effect are the
        // registered ones.
        let registered = docs
            .iter()
            .find(|d| kind_of(d) == "ConfigMap" && name_of(d).ends_with("-webhooks"))
            .map(|cm| text(&cm["data"]["webhooks.yaml"]).to_string());
        if let Some(listed) = registered {
            docs.retain(|d| !kind_of(d).ends_with("WebhookConfiguration"));
            match parse_truthy(&listed, "webhooks.yaml") {
                Ok(configs) => docs.extend(configs),
                Err(e) => checks.fail(e),
            }
        }
        if check_case(name, namespace, &sample, &docs, &mut checks) {
            let prefix = format!("{name}: ");
            let mine = errors.iter().any(|e| e.starts_with(&prefix));
            eprintln!(
                "[helm-lint] audit {name}: {}",
                if mine { "FAILED" } else { "ok" }
            );
        }
    }
    report(&errors)
}

/// Checks one case; false when it has no single serving Deployment to check against.
fn check_case(
    name: &str,
    namespace: &str,
    sample: &Value,
    docs: &[Value],
    checks: &mut Checks,
) -> bool {
    let kind = |k: &str| -> Vec<&Value> { docs.iter().filter(|d| kind_of(d) == k).collect() };
    let audit_on = !matches!(name, "audit-off" | "serve-only");
    let api = if name == "openreports" {
        &APIS[1]
    } else {
        &APIS[0]
    };
    let rbac = name != "options";
    // The controller (`poolguard controller`) runs the audit; the serving pods (`poolguard
    // serve`) never audit and only read progressive enforcement's state.
    let running = |command: &str| -> Vec<&Value> {
        kind("Deployment")
            .into_iter()
            .filter(|d| {
                arr(&d["spec"]["template"]["spec"]["containers"][0]["args"])
                    .first()
                    .is_some_and(|a| a == command)
            })
            .collect()
    };
    let serving = running("serve");
    let controllers = running("controller");
    let [serve_dep] = serving.as_slice() else {
        checks.fail(format!("{} serving Deployments, want 1", serving.len()));
        return false;
    };
    let fullname = plain(&serve_dep["metadata"]["name"]);
    let lease = format!("{fullname}-audit");
    let rollouts = format!("{fullname}-rollouts");
    let serve_args = strings(&serve_dep["spec"]["template"]["spec"]["containers"][0]["args"]);
    let serve_arg = |flag: &str| flag_value(&serve_args, flag);
    check!(
        checks,
        controllers.len() == 1 || (!audit_on && controllers.is_empty()),
        "{} controller Deployments, want 1 with the audit on",
        controllers.len()
    );
    // Without a controller (nothing to write), the checks of its flags below see no arguments.
    let no_controller = json!({"metadata": {"name": format!("{fullname}-controller"), "labels": {}},
                               "spec": {"template": {"spec": {"containers": [{"args": []}]}}}});
    let dep = controllers.first().copied().unwrap_or(&no_controller);
    let pod = &dep["spec"]["template"]["spec"];
    let args = strings(&pod["containers"][0]["args"]);
    let arg = |flag: &str| flag_value(&args, flag);
    const AUDIT_FLAGS: [&str; 5] = [
        "--audit-namespace-selector",
        "--report-api",
        "--max-results-per-report",
        "--lease-name",
        "--lease-duration",
    ];
    // The serving pods: --audit-interval 0, none of the audit's flags, and the rollout ConfigMap
    // (what they decide with) only with the audit on.
    check!(
        checks,
        serve_arg("--audit-interval") == Some("0"),
        "the serving pods' --audit-interval {}, want '0'",
        repr_opt(serve_arg("--audit-interval"))
    );
    check!(
        checks,
        !AUDIT_FLAGS.iter().any(|f| has(&serve_args, f)),
        "the serving pods pass none of the audit's flags"
    );
    let want_rollouts = audit_on.then_some(rollouts.as_str());
    check!(
        checks,
        serve_arg("--rollout-configmap") == want_rollouts,
        "the serving pods' --rollout-configmap {}, want {}",
        repr_opt(serve_arg("--rollout-configmap")),
        want_rollouts.unwrap_or("None")
    );
    // Flags of the controller.
    if !controllers.is_empty() {
        let interval = match name {
            "audit-off" => "0",
            "openreports" => "1h30m",
            _ => "10m",
        };
        check!(
            checks,
            arg("--audit-interval") == Some(interval),
            "the controller's --audit-interval {}",
            repr_opt(arg("--audit-interval"))
        );
        check!(
            checks,
            arg("--rollout-configmap") == want_rollouts,
            "the controller's --rollout-configmap {}",
            repr_opt(arg("--rollout-configmap"))
        );
    }
    if audit_on {
        let openreports = name == "openreports";
        check!(
            checks,
            arg("--report-api") == Some(api.name),
            "--report-api {}",
            repr_opt(arg("--report-api"))
        );
        check!(
            checks,
            arg("--max-results-per-report") == Some(if openreports { "200" } else { "1000" }),
            "--max-results-per-report {}",
            repr_opt(arg("--max-results-per-report"))
        );
        check!(
            checks,
            arg("--lease-name") == Some(lease.as_str()),
            "--lease-name {}, want {lease}",
            repr_opt(arg("--lease-name"))
        );
        check!(
            checks,
            arg("--lease-duration") == Some(if openreports { "30s" } else { "15s" }),
            "--lease-duration {}",
            repr_opt(arg("--lease-duration"))
        );
    } else {
        check!(
            checks,
            !AUDIT_FLAGS
                .iter()
                .chain(&["--rollout-configmap"])
                .any(|f| has(&args, f)),
            "audit off: only --audit-interval 0 is passed"
        );
    }
    // Both Deployments: the pod's name and namespace (the controller's Lease identity and
    // namespace; a serving pod's name in the rollout ConfigMap's counts).
    for d in serving.iter().chain(&controllers) {
        let c = &d["spec"]["template"]["spec"]["containers"][0];
        let env: BTreeMap<&str, &Value> = arr(&c["env"])
            .iter()
            .map(|e| (text(&e["name"]), e))
            .collect();
        for (var, field) in [
            ("POD_NAME", "metadata.name"),
            ("POD_NAMESPACE", "metadata.namespace"),
        ] {
            let from = env.get(var).copied().unwrap_or(&Value::Null);
            check!(
                checks,
                from["valueFrom"]["fieldRef"]["fieldPath"] == field,
                "{}: env {var} from the downward API ({field})",
                plain(&d["metadata"]["name"])
            );
        }
    }
    // The audit's namespaces are the validating webhook's namespaces.
    let validating = kind("ValidatingWebhookConfiguration")
        .into_iter()
        .flat_map(|cfg| arr(&cfg["webhooks"]))
        .find(|wh| wh["name"] == "validate.poolguard.io");
    check!(
        checks,
        validating.is_some(),
        "no webhook validate.poolguard.io in the ValidatingWebhookConfiguration"
    );
    let webhook_namespaces = validating.map_or(&Value::Null, |wh| &wh["namespaceSelector"]);
    let selector = arg("--audit-namespace-selector");
    if audit_on {
        let same = match selector.map(parse_selector) {
            Some(Ok(reqs)) => reqs == webhook_selector(webhook_namespaces),
            Some(Err(e)) => {
                checks.fail(e);
                false
            }
            None => false,
        };
        check!(checks, same, "--audit-namespace-selector {} differs from the validating webhook's namespaceSelector {}",
                repr_opt(selector),
                repr(webhook_namespaces));
    }
    let expected_selector = match name {
        "default" => Some(format!(
            "kubernetes.io/metadata.name notin ({namespace},kube-system)"
        )),
        "url" => Some(format!(
            "poolguard-bench=on,agentpool,kubernetes.io/metadata.name notin ({namespace},kube-system)"
        )),
        "policies" => Some(format!(
            "team.example.com/pool,kubernetes.io/metadata.name notin ({namespace},kube-system,monitoring)"
        )),
        "selector" => Some(format!(
            "example.com/tier=gold,poolguard=enabled,agentpool,kubernetes.io/metadata.name notin ({namespace},kube-system,monitoring,cert-manager)"
        )),
        _ => None,
    };
    if let Some(expected) = expected_selector {
        check!(
            checks,
            selector == Some(expected.as_str()),
            "--audit-namespace-selector {}, want {}",
            repr_opt(selector),
            quote(&expected)
        );
    }
    if name == "default" {
        eprintln!(
            "[helm-lint] audit default: --audit-namespace-selector {}",
            repr_opt(selector)
        );
    }
    // RBAC: the audit's reads and report writes in the controller's ClusterRole, none of them in
    // the serving one (<fullname>); both read the nodes.
    let grants_of = |role_name: &str| -> BTreeMap<(String, String), BTreeSet<String>> {
        let mut grants: BTreeMap<(String, String), BTreeSet<String>> = BTreeMap::new();
        for role in kind("ClusterRole") {
            if name_of(role) != role_name {
                continue;
            }
            for rule in arr(&role["rules"]) {
                if rule.get("resourceNames").is_some() {
                    continue;
                }
                for g in strings(&rule["apiGroups"]) {
                    for r in strings(&rule["resources"]) {
                        grants
                            .entry((g.clone(), r))
                            .or_default()
                            .extend(strings(&rule["verbs"]));
                    }
                }
            }
        }
        grants
    };
    let none = BTreeSet::new();
    for (role_name, is_controller) in [
        (format!("{fullname}-controller"), true),
        (fullname.clone(), false),
    ] {
        let grants = grants_of(&role_name);
        let granted = |group: &str, resource: &str| {
            grants
                .get(&(group.to_string(), resource.to_string()))
                .unwrap_or(&none)
        };
        for (group, resource) in READ {
            let want = if audit_on && rbac && is_controller {
                set(&["get", "list"])
            } else {
                BTreeSet::new()
            };
            let got = granted(group, resource);
            check!(
                checks,
                *got == want,
                "ClusterRole {role_name} grants {} on {}, want {}",
                sorted(got),
                pair(group, resource),
                sorted(&want)
            );
        }
        // The node watch cache (placement policies) and the audit's node reads, audit on or
        // off.
        let want = if rbac && (!controllers.is_empty() || !is_controller) {
            set(&["get", "list", "watch"])
        } else {
            BTreeSet::new()
        };
        let got = granted("", "nodes");
        check!(
            checks,
            *got == want,
            "ClusterRole {role_name} grants {} on nodes, want {}",
            sorted(got),
            sorted(&want)
        );
        // The namespace reports and the cluster report (of cluster-scoped kinds constraints
        // match).
        for other in &APIS {
            for resource in [
                other.resource.to_string(),
                format!("cluster{}", other.resource),
            ] {
                let want = if audit_on && rbac && is_controller && other.name == api.name {
                    set(&["get", "list", "create", "patch", "delete"])
                } else {
                    BTreeSet::new()
                };
                let got = granted(other.group, &resource);
                check!(
                    checks,
                    *got == want,
                    "ClusterRole {role_name} grants {} on {}, want {}",
                    sorted(got),
                    pair(other.group, &resource),
                    sorted(&want)
                );
            }
        }
    }
    // The serving pods' Role: progressive enforcement's state read (get/list/watch) and their
    // admission counts patched into its counts ConfigMap, each by name, neither created; bound
    // to the serving ServiceAccount.
    let counts = format!("{rollouts}-counts");
    let serving_roles: Vec<&Value> = kind("Role")
        .into_iter()
        .filter(|r| name_of(r) == fullname)
        .collect();
    check!(
        checks,
        serving_roles.len() == usize::from(audit_on && rbac),
        "the serving pods' Role only with the audit on and rbac.create"
    );
    for role in &serving_roles {
        check!(
            checks,
            role["metadata"]["namespace"] == namespace,
            "the serving pods' Role is in the release namespace"
        );
        let want = json!([
            {"apiGroups": [""], "resources": ["configmaps"], "resourceNames": [rollouts], "verbs": ["get", "list", "watch"]},
            {"apiGroups": [""], "resources": ["configmaps"], "resourceNames": [counts], "verbs": ["patch"]},
        ]);
        check!(checks, role["rules"] == want, "the serving pods' Role grants {}, want get/list/watch on ConfigMap {rollouts} and patch on ConfigMap {counts} only",
                repr(&role["rules"]));
        let bindings: Vec<&Value> = kind("RoleBinding")
            .into_iter()
            .filter(|b| b["roleRef"]["name"] == fullname.as_str())
            .collect();
        let subject = json!([{"kind": "ServiceAccount",
                              "name": serve_dep["spec"]["template"]["spec"]["serviceAccountName"],
                              "namespace": namespace}]);
        check!(
            checks,
            bindings.len() == 1
                && bindings[0]["roleRef"]["kind"] == "Role"
                && bindings[0]["subjects"] == subject,
            "the serving pods' Role is bound to the serving ServiceAccount"
        );
    }
    let lease_roles: Vec<&Value> = kind("Role")
        .into_iter()
        .filter(|r| name_of(r) == lease)
        .collect();
    check!(
        checks,
        lease_roles.len() == usize::from(audit_on && rbac),
        "the Lease Role only with the audit on and rbac.create"
    );
    for role in &lease_roles {
        check!(
            checks,
            role["metadata"]["namespace"] == namespace,
            "the Lease Role is in the release namespace"
        );
        let mut verbs = BTreeSet::new();
        let mut rollout_verbs = BTreeSet::new();
        let mut counts_verbs = BTreeSet::new();
        check!(
            checks,
            arg("--rollout-configmap") == Some(rollouts.as_str()),
            "--rollout-configmap {rollouts}"
        );
        let only_create = |rule: &Value| set_of(&rule["verbs"]).iter().all(|v| v == "create");
        for rule in arr(&role["rules"]) {
            if is_strs(&rule["resources"], &["configmaps"]) {
                // Progressive enforcement's state: get/patch only on its ConfigMap.
                check!(
                    checks,
                    is_strs(&rule["apiGroups"], &[""]),
                    "configmaps in the core group"
                );
                // Only create is unrestricted; get/patch/list/watch only on its ConfigMap (the
                // watch lists with metadata.name=<name>, authorized by resourceNames), and get
                // only on the serving pods' counts ConfigMap.
                if is_strs(&rule["resourceNames"], &[counts.as_str()]) {
                    counts_verbs.extend(set_of(&rule["verbs"]));
                    continue;
                }
                check!(
                    checks,
                    only_create(rule) || is_strs(&rule["resourceNames"], &[rollouts.as_str()]),
                    "get/patch/list/watch only on ConfigMap {rollouts}"
                );
                rollout_verbs.extend(set_of(&rule["verbs"]));
                continue;
            }
            if is_strs(&rule["resources"], &["events"]) {
                let mut groups = strings(&rule["apiGroups"]);
                groups.sort();
                check!(
                    checks,
                    groups == ["", "events.k8s.io"]
                        && set_of(&rule["verbs"]) == set(&["create", "patch"]),
                    "events: create and patch"
                );
                continue;
            }
            check!(
                checks,
                is_strs(&rule["apiGroups"], &["coordination.k8s.io"])
                    && is_strs(&rule["resources"], &["leases"]),
                "the Lease Role grants leases, the rollout ConfigMap and events only"
            );
            check!(
                checks,
                only_create(rule) || is_strs(&rule["resourceNames"], &[lease.as_str()]),
                "get/update/patch only on Lease {lease}"
            );
            verbs.extend(set_of(&rule["verbs"]));
        }
        // The lease manager gets, creates and patches its Lease; it never lists or watches.
        check!(
            checks,
            verbs == set(&["get", "create", "update", "patch"]),
            "Lease verbs {}",
            sorted(&verbs)
        );
        check!(
            checks,
            rollout_verbs == set(&["get", "patch", "create", "list", "watch"]),
            "rollout ConfigMap verbs {}",
            sorted(&rollout_verbs)
        );
        // The leader reads the serving pods' counts (it makes that ConfigMap with create above).
        check!(
            checks,
            counts_verbs == set(&["get"]),
            "counts ConfigMap {counts} verbs {}, want get",
            sorted(&counts_verbs)
        );
        let bindings: Vec<&Value> = kind("RoleBinding")
            .into_iter()
            .filter(|b| b["roleRef"]["name"] == lease.as_str())
            .collect();
        let subject = json!([{"kind": "ServiceAccount", "name": pod["serviceAccountName"], "namespace": namespace}]);
        check!(
            checks,
            bindings.len() == 1 && bindings[0]["subjects"] == subject,
            "the Lease Role is bound to the controller's ServiceAccount"
        );
        check!(
            checks,
            pod["serviceAccountName"] == format!("{fullname}-controller").as_str(),
            "the controller runs as {fullname}-controller"
        );
    }
    // The report CRDs; the PolicyException CRD (exceptions.enabled) is not the audit's.
    let report_crds: Vec<&Value> = kind("CustomResourceDefinition")
        .into_iter()
        .filter(|d| d["metadata"]["name"] != "policyexceptions.poolguard.io")
        .collect();
    crds(name, api, audit_on, sample, serve_dep, &report_crds, checks);
    true
}

/// The report CRDs: installed with the audit (unless audit.crd.install is off), kept on
/// uninstall, with the chart's labels, their names, one served and stored version with the
/// printer columns, and a structural schema that keeps a sample report whole.
fn crds(
    name: &str,
    api: &Api,
    audit_on: bool,
    sample: &Value,
    serve_dep: &Value,
    rendered: &[&Value],
    checks: &mut Checks,
) {
    let crds: BTreeMap<String, &Value> = rendered
        .iter()
        .map(|d| (plain(&d["metadata"]["name"]), *d))
        .collect();
    let want_crds: BTreeSet<String> = if audit_on && name != "no-crd" {
        api.crds
            .iter()
            .map(|(_, plural, _, _)| format!("{plural}.{}", api.group))
            .collect()
    } else {
        BTreeSet::new()
    };
    let have: BTreeSet<String> = crds.keys().cloned().collect();
    check!(
        checks,
        have == want_crds,
        "CRDs {}, want {}",
        sorted(&have),
        sorted(&want_crds)
    );
    for (crd_kind, plural, short, scope) in api.crds {
        let Some(crd) = crds.get(&format!("{plural}.{}", api.group)) else {
            continue;
        };
        if !truthy(crd) {
            continue;
        }
        let (meta, spec) = (&crd["metadata"], &crd["spec"]);
        check!(
            checks,
            meta["annotations"]["helm.sh/resource-policy"] == "keep",
            "{plural}: kept on uninstall"
        );
        check!(
            checks,
            meta["labels"] == serve_dep["metadata"]["labels"],
            "{plural}: the chart's labels"
        );
        check!(
            checks,
            spec["group"] == api.group
                && spec["scope"] == scope
                && spec["names"]["kind"] == crd_kind
                && spec["names"]["plural"] == plural
                && is_strs(&spec["names"]["shortNames"], &[short]),
            "{plural}: group, scope or names"
        );
        check!(
            checks,
            arr(&spec["versions"]).len() == 1,
            "{plural}: one version"
        );
        let version = &spec["versions"][0];
        check!(
            checks,
            version["name"] == api.version
                && truthy(&version["served"])
                && truthy(&version["storage"]),
            "{plural}: {} served and stored",
            api.version
        );
        let columns: Vec<String> = arr(&version["additionalPrinterColumns"])
            .iter()
            .map(|col| plain(&col["name"]))
            .collect();
        check!(
            checks,
            columns == ["Pass", "Fail", "Warn", "Error", "Skip", "Age"],
            "{plural}: printer columns"
        );
        let schema = &version["schema"]["openAPIV3Schema"];
        let mut problems = Vec::new();
        structural(schema, "", &mut problems);
        let mut report = sample.clone();
        if let Some(fields) = report.as_object_mut() {
            fields.insert(
                "apiVersion".into(),
                json!(format!("{}/{}", api.group, api.version)),
            );
            fields.insert("kind".into(), json!(crd_kind));
            if api.name == "openreports" {
                fields.insert("source".into(), json!("poolguard"));
            }
        }
        conforms(&report, schema, "", &mut problems);
        for p in problems {
            checks.fail(format!("{plural}: {p}"));
        }
        check!(
            checks,
            schema["properties"].get("source").is_some() == (api.name == "openreports"),
            "{plural}: a report-level source only in openreports.io"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(key: &str, op: &str, values: &[&str]) -> Requirement {
        (key.into(), op.into(), set(values))
    }

    #[test]
    fn selector_terms() {
        let reqs = parse_selector(
            "a=b,c==d,e!=f,g,!h,i in (x, y),j notin (z),k=,kubernetes.io/metadata.name notin (p,q)",
        )
        .unwrap();
        let want = [
            req("a", "In", &["b"]),
            req("c", "In", &["d"]),
            req("e", "NotIn", &["f"]),
            req("g", "Exists", &[]),
            req("h", "DoesNotExist", &[]),
            req("i", "In", &["x", "y"]),
            req("j", "NotIn", &["z"]),
            req("k", "In", &[""]),
            req("kubernetes.io/metadata.name", "NotIn", &["p", "q"]),
        ];
        assert_eq!(reqs.len(), want.len());
        for r in want {
            assert_eq!(reqs.get(&r), Some(&1), "{r:?}");
        }
        assert!(parse_selector("").unwrap().is_empty());
        for bad in ["a b", "a in x", "=b", "!a=b", "a in(x)", "a=b c"] {
            assert!(parse_selector(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn selector_equals_webhook_selector() {
        let sel = json!({"matchLabels": {"poolguard": "on"},
                         "matchExpressions": [{"key": "agentpool", "operator": "Exists"},
                                              {"key": "kubernetes.io/metadata.name", "operator": "NotIn",
                                               "values": ["kube-system", "poolguard-system"]}]});
        let parsed = parse_selector(
            "poolguard=on,agentpool,kubernetes.io/metadata.name notin (poolguard-system,kube-system)",
        )
        .unwrap();
        assert_eq!(parsed, webhook_selector(&sel));
        let twice = parse_selector("poolguard=on,poolguard=on,agentpool,kubernetes.io/metadata.name notin (poolguard-system,kube-system)").unwrap();
        assert_ne!(twice, webhook_selector(&sel));
    }

    #[test]
    fn schema_conformance() {
        let schema = json!({"type": "object", "required": ["a"],
                            "properties": {"a": {"type": "integer", "format": "int32"},
                                           "b": {"type": "array", "items": {"type": "string", "enum": ["x"]}},
                                           "metadata": {"type": "object"}}});
        let mut errors = Vec::new();
        conforms(
            &json!({"a": 1, "b": ["x"], "metadata": {"name": "n"}}),
            &schema,
            "",
            &mut errors,
        );
        assert!(errors.is_empty(), "{errors:?}");
        conforms(
            &json!({"a": 4294967296_i64, "b": ["y", 1], "c": true}),
            &schema,
            "",
            &mut errors,
        );
        assert_eq!(
            errors,
            [
                ".a: 4294967296 overflows int32",
                ".b[0]: 'y' not in enum ['x']",
                ".b[1]: 1 is not of type string",
                ".c: not in the schema (pruned)",
            ]
        );
        let mut errors = Vec::new();
        structural(
            &json!({"type": "object", "properties": {"a": {}, "metadata": {}}}),
            "",
            &mut errors,
        );
        assert_eq!(errors, [".a: no type"]);
    }
}
