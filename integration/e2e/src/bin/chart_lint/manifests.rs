//! Every rendered document parses as YAML and has a kind, an apiVersion and the fields the checks
//! read (shape.rs), and the webhook safety properties hold per case: the webhooks' scope and clientConfig, the pool-authority webhooks,
//! the two Deployments (serving and controller) with their flags, mounts and ServiceAccounts,
//! RBAC by identity, Gatekeeper and placement policies, mTLS and webhook registration. The
//! config, policies and Gatekeeper files the pods would mount are written to
//! OUT/<case>.d/{config,policies,placement-policies,gatekeeper}/ for lint.sh to load them with
//! poolguard itself.

use std::collections::BTreeMap;

use base64::Engine as _;
use serde_json::{json, Map, Value};

use super::{
    arr, flag_value, has, has_str, is_strs, labels_match, name_of, parse_all, parse_truthy, plain,
    report, repr, repr_list, repr_opt, repr_values, strings, text, truthy, Checks,
};

const MUTATING: &str = "MutatingWebhookConfiguration";
const VALIDATING: &str = "ValidatingWebhookConfiguration";

/// `True`/`False`, as the messages write a boolean.
fn py_bool(b: bool) -> &'static str {
    if b {
        "True"
    } else {
        "False"
    }
}

/// The one document of a YAML text (null when empty); more than one is an error.
fn parse_one(text: &str) -> Result<Value, String> {
    let mut docs = parse_all(text)?;
    match docs.len() {
        0 => Ok(Value::Null),
        1 => Ok(docs.remove(0)),
        n => Err(format!("{n} documents where one is expected")),
    }
}

/// Does a namespaceSelector select a namespace with these labels (the API server's rules)?
fn selects(sel: &Value, labels: &Map<String, Value>) -> bool {
    let labels_value = Value::Object(labels.clone());
    if !labels_match(&sel["matchLabels"], &labels_value) {
        return false;
    }
    arr(&sel["matchExpressions"]).iter().all(|e| {
        let values = arr(&e["values"]);
        let present = labels.get(text(&e["key"]));
        let refused = match text(&e["operator"]) {
            "In" => present.is_none_or(|v| !values.contains(v)),
            "NotIn" => present.is_some_and(|v| values.contains(v)),
            "Exists" => present.is_none(),
            "DoesNotExist" => present.is_some(),
            _ => true,
        };
        !refused
    })
}

/// The labels of a namespace named `ns_name` that carries the selector's matchLabels and `extra`.
fn ns(sel: &Value, ns_name: &str, extra: Option<(&str, Value)>) -> Map<String, Value> {
    let mut labels = Map::new();
    labels.insert("kubernetes.io/metadata.name".into(), json!(ns_name));
    if let Some(match_labels) = sel["matchLabels"].as_object() {
        labels.extend(match_labels.clone());
    }
    if let Some((key, value)) = extra {
        labels.insert(key.to_string(), value);
    }
    labels
}

/// Items of a list keyed by their `name` (a later one of the same name wins).
fn by_name(items: &Value) -> BTreeMap<&str, &Value> {
    arr(items).iter().map(|v| (text(&v["name"]), v)).collect()
}

/// How many distinct values a list holds.
fn distinct(items: &[Value]) -> usize {
    let mut seen: Vec<&Value> = Vec::new();
    for item in items {
        if !seen.contains(&item) {
            seen.push(item);
        }
    }
    seen.len()
}

/// The first container of a Deployment's pods.
fn container(dep: &Value) -> &Value {
    &dep["spec"]["template"]["spec"]["containers"][0]
}

/// A webhook configuration by kind and name.
type WebhookKey = (String, String);

/// One case's documents by kind, and what the checks derive from them.
struct Case<'a> {
    out: &'a str,
    namespace: &'a str,
    chart: &'a str,
    name: &'a str,
    kinds: BTreeMap<String, Vec<Value>>,
    /// The `-webhooks` ConfigMap (webhook.registration=poolguard), if any.
    registered: Option<Value>,
    self_mode: bool,
    label: Value,
    placement: Value,
    guarded: Vec<Value>,
}

impl Case<'_> {
    fn kind(&self, kind: &str) -> &[Value] {
        self.kinds.get(kind).map(Vec::as_slice).unwrap_or(&[])
    }

    fn config_maps_ending(&self, suffix: &str) -> Vec<&Value> {
        self.kind("ConfigMap")
            .iter()
            .filter(|cm| name_of(cm).ends_with(suffix))
            .collect()
    }
}

pub fn run(out: &str, namespace: &str, chart: &str, names: &[String]) -> bool {
    let mut errors = Vec::new();
    let mut registered_webhooks: BTreeMap<&str, BTreeMap<WebhookKey, Value>> = BTreeMap::new();
    for name in names {
        let path = format!("{out}/{name}.yaml");
        let docs = match std::fs::read_to_string(&path)
            .map_err(|e| e.to_string())
            .and_then(|t| parse_all(&t).map_err(|e| format!("not YAML: {e}")))
        {
            Ok(docs) => docs
                .into_iter()
                .filter(|d| !d.is_null())
                .collect::<Vec<_>>(),
            Err(e) => {
                errors.push(format!("{name}: {path}: {e}"));
                continue;
            }
        };
        let wanted = check_case(out, namespace, chart, name, &docs, &mut errors);
        registered_webhooks.insert(name, wanted);
        let prefix = format!("{name}: ");
        let mine = errors.iter().any(|e| e.starts_with(&prefix));
        eprintln!(
            "[helm-lint] yaml {name}: {} ({} documents)",
            if mine { "FAILED" } else { "ok" },
            docs.len()
        );
    }
    // What poolguard registers by default is exactly what the chart renders with
    // registration=chart.
    if let (Some(default), Some(chart_rendered)) = (
        registered_webhooks.get("default"),
        registered_webhooks.get("chart-registration"),
    ) {
        let same = default == chart_rendered;
        if !same {
            errors.push(
                "default: the webhooks poolguard registers differ from webhook.registration=chart's"
                    .into(),
            );
        }
        eprintln!(
            "[helm-lint] registered webhooks equal the chart-rendered ones: {}",
            if same { "ok" } else { "FAILED" }
        );
    }
    report(&errors)
}

/// Checks one case; returns the webhooks in effect by (configuration kind, name).
fn check_case(
    out: &str,
    namespace: &str,
    chart: &str,
    name: &str,
    docs: &[Value],
    errors: &mut Vec<String>,
) -> BTreeMap<WebhookKey, Value> {
    let mut checks = Checks { name, errors };
    let mut kinds: BTreeMap<String, Vec<Value>> = BTreeMap::new();
    for d in docs {
        let keyed = d.get("kind").is_some() && d.get("apiVersion").is_some();
        if !keyed {
            let shown: String = repr(d).chars().take(80).collect();
            checks.fail(format!("document without kind/apiVersion: {shown}"));
            continue;
        }
        // A document without a field the checks read is malformed (a check would read the
        // field as null).
        for problem in super::shape::problems(d) {
            checks.fail(format!("malformed document: {problem}"));
        }
        kinds.entry(plain(&d["kind"])).or_default().push(d.clone());
    }
    // webhook.registration=poolguard (the default): the configurations are rendered with no
    // webhooks, and the ConfigMap <fullname>-webhooks holds what poolguard registers into them.
    // The checks below judge the webhooks that will be in effect, so they read them from there.
    let registered = kinds
        .get("ConfigMap")
        .and_then(|cms| cms.iter().find(|cm| name_of(cm).ends_with("-webhooks")))
        .cloned();
    let in_effect = if let Some(cm) = &registered {
        check!(
            checks,
            name != "chart-registration",
            "webhook.registration=chart renders no webhooks ConfigMap"
        );
        let listed = parse_truthy(text(&cm["data"]["webhooks.yaml"]), "webhooks.yaml")
            .unwrap_or_else(|e| {
                checks.fail(e);
                Vec::new()
            });
        let wanted: BTreeMap<WebhookKey, Value> = listed
            .iter()
            .map(|d| {
                (
                    (plain(&d["kind"]), plain(&d["metadata"]["name"])),
                    d["webhooks"].clone(),
                )
            })
            .collect();
        for kind in [MUTATING, VALIDATING] {
            for cfg in kinds.get_mut(kind).into_iter().flatten() {
                check!(
                    checks,
                    cfg["webhooks"] == json!([]),
                    "{kind} is rendered with webhooks although poolguard registers them"
                );
                let key = (kind.to_string(), plain(&cfg["metadata"]["name"]));
                check!(
                    checks,
                    wanted.contains_key(&key),
                    "{kind} {} has no webhooks in the registration ConfigMap",
                    key.1
                );
                if let Some(cfg) = cfg.as_object_mut() {
                    let hooks = wanted.get(&key).cloned().unwrap_or_else(|| json!([]));
                    cfg.insert("webhooks".into(), hooks);
                }
            }
        }
        let names: Vec<String> = wanted
            .keys()
            .map(|(k, n)| format!("({}, {})", super::quote(k), super::quote(n)))
            .collect();
        check!(
            checks,
            wanted.len() == 2,
            "the registration ConfigMap names [{}], not the two configurations",
            names.join(", ")
        );
        wanted
    } else {
        check!(
            checks,
            matches!(name, "chart-registration" | "serve-only"),
            "no webhooks ConfigMap although webhook.registration=poolguard"
        );
        [MUTATING, VALIDATING]
            .iter()
            .flat_map(|k| kinds.get(*k).into_iter().flatten())
            .map(|d| {
                (
                    (plain(&d["kind"]), plain(&d["metadata"]["name"])),
                    d["webhooks"].clone(),
                )
            })
            .collect()
    };
    let mut label = json!("agentpool");
    let mut placement = json!({});
    let mut guarded = Vec::new();
    for cm in kinds.get("ConfigMap").into_iter().flatten() {
        if !name_of(cm).ends_with("-config") {
            continue;
        }
        let config = match parse_one(text(&cm["data"]["config.yaml"])) {
            Ok(config) => config,
            Err(e) => {
                checks.fail(format!("config.yaml: not YAML: {e}"));
                Value::Null
            }
        };
        if let Some(l) = config.get("namespaceLabel") {
            label = l.clone();
        }
        placement = if truthy(&config["placement"]) {
            config["placement"].clone()
        } else {
            json!({})
        };
        guarded = arr(&config["poolAuthority"]["guardedLabels"]).to_vec();
    }
    let case = Case {
        out,
        namespace,
        chart,
        name,
        kinds,
        registered,
        self_mode: !matches!(
            name,
            "certmanager" | "provided" | "provided-pem" | "url" | "serve-only"
        ),
        label,
        placement,
        guarded,
    };
    webhooks(&case, &mut checks);
    deployments(&case, &mut checks);
    rbac(&case, &mut checks);
    files(&case, &mut checks);
    gatekeeper(&case, &mut checks);
    placement_and_mounts(&case, &mut checks);
    in_effect
}

/// The guarded labels, the webhooks' scope and clientConfig, and the pool-authority webhooks.
fn webhooks(case: &Case, checks: &mut Checks) {
    let (name, namespace, label) = (case.name, case.namespace, &case.label);
    let label_text = plain(label);
    // The labels poolguard trusts beyond the pool label, which the chart must guard: the
    // webhooks' opt-in labels (webhook.namespaceMatchLabels) and the rollout groups' selector
    // keys.
    let must_guard: &[&str] = match name {
        "url" => &["poolguard-bench"],
        "selector" => &["poolguard", "example.com/tier"],
        "native-apply" => &["poolguard"],
        "policies" => &["risk"],
        _ => &[],
    };
    let guarded = &case.guarded;
    check!(
        checks,
        must_guard.iter().all(|k| guarded.iter().any(|g| g == *k))
            && !guarded.contains(label)
            && distinct(guarded) == guarded.len(),
        "config.poolAuthority.guardedLabels {} lists {}, each once, not the pool label",
        repr_values(guarded),
        repr_list(must_guard)
    );
    let mut authority_keys: Vec<Value> = Vec::new();
    let choose_unlabelled = case.placement["unlabelledNamespaces"] == "choose";
    // validating.requireNamespaceLabel
    let requires_label = matches!(name, "policies" | "url" | "selector" | "native-apply");
    for kind in [MUTATING, VALIDATING] {
        let mutating = kind == MUTATING;
        for cfg in case.kind(kind) {
            let ann = &cfg["metadata"]["annotations"];
            check!(
                checks,
                ann.get("helm.sh/resource-policy").is_none(),
                "{kind} must not be kept on uninstall"
            );
            for wh in arr(&cfg["webhooks"]) {
                let cc = &wh["clientConfig"];
                let path = if mutating { "/mutate" } else { "/validate" };
                let wh_name = plain(&wh["name"]);
                if wh_name.ends_with("pool-authority.poolguard.io") {
                    // Namespaces that carry a guarded label before or after the change, whatever
                    // namespace selector the others have, through the main resource and every
                    // subresource (status and finalize write labels too); nothing else.
                    check!(checks, wh["rules"]
                            == json!([{"apiGroups": [""], "apiVersions": ["v1"],
                                       "operations": ["CREATE", "UPDATE"],
                                       "resources": ["namespaces", "namespaces/*"],
                                       "scope": "Cluster"}]), "{wh_name} sees Namespace CREATE/UPDATE of the resource and every subresource only");
                    let object_selector = &wh["objectSelector"];
                    let expressions = arr(&object_selector["matchExpressions"]);
                    check!(
                        checks,
                        object_selector.as_object().is_some_and(|o| o.len() == 1)
                            && expressions.len() == 1
                            && expressions[0]["operator"] == "Exists",
                        "{wh_name} selects namespaces that carry one guarded label"
                    );
                    authority_keys.push(
                        expressions
                            .first()
                            .map_or(Value::Null, |e| e["key"].clone()),
                    );
                    check!(
                        checks,
                        wh.get("namespaceSelector").is_none() && wh["failurePolicy"] == "Fail",
                        "{wh_name} fails closed for every namespace"
                    );
                    continue;
                }
                if wh_name == "exceptions.poolguard.io" {
                    // PolicyExceptions written in any namespace (the release namespace holds
                    // them), nothing else; fails closed (only exceptions wait for poolguard).
                    check!(
                        checks,
                        !mutating
                            && wh["rules"]
                                == json!([{"apiGroups": ["poolguard.io"], "apiVersions": ["v1alpha1"],
                                       "operations": ["CREATE", "UPDATE"],
                                       "resources": ["policyexceptions"],
                                       "scope": "Namespaced"}]),
                        "{wh_name} sees PolicyException CREATE/UPDATE only"
                    );
                    check!(
                        checks,
                        wh.get("namespaceSelector").is_none()
                            && wh.get("objectSelector").is_none()
                            && wh["failurePolicy"] == "Fail",
                        "{wh_name} fails closed for every namespace"
                    );
                    continue;
                }
                let sel = &wh["namespaceSelector"];
                if mutating && !choose_unlabelled {
                    check!(
                        checks,
                        arr(&sel["matchExpressions"])
                            .contains(&json!({"key": label, "operator": "NotIn", "values": [""]})),
                        "the mutating webhook skips an empty pool label (no pool)"
                    );
                }
                // Which namespaces reach the webhook (carrying webhook.namespaceMatchLabels): a
                // pool's, one labelled with placement.chooseValue (both webhooks), unlabelled or
                // empty-labelled ones (mutating: only with unlabelledNamespaces choose;
                // validating: unless requireNamespaceLabel), never the excluded ones.
                let pool = |value: Value| Some((label_text.as_str(), value));
                check!(
                    checks,
                    selects(sel, &ns(sel, "team-a", pool(json!("pool1")))),
                    "{kind} selects a namespace of pool pool1"
                );
                let choose = &case.placement["chooseValue"];
                if truthy(choose) {
                    check!(checks, selects(sel, &ns(sel, "team-auto", pool(choose.clone()))), "{kind} selects a namespace labelled {label_text}={} (placement.chooseValue)",
                            plain(choose));
                }
                let want = if mutating {
                    choose_unlabelled
                } else {
                    !requires_label
                };
                check!(
                    checks,
                    selects(sel, &ns(sel, "plain", None)) == want,
                    "{kind} selects an unlabelled namespace: want {}",
                    py_bool(want)
                );
                // (requireNamespaceLabel asks for the label to exist: an empty one is validated.)
                let want = if mutating { choose_unlabelled } else { true };
                check!(
                    checks,
                    selects(sel, &ns(sel, "empty", pool(json!("")))) == want,
                    "{kind} selects a namespace with an empty pool label: want {}",
                    py_bool(want)
                );
                for never in [namespace, "kube-system"] {
                    check!(
                        checks,
                        !selects(sel, &ns(sel, never, None))
                            && !selects(sel, &ns(sel, never, pool(json!("pool1")))),
                        "{kind} never selects {never}"
                    );
                }
                if name == "url" {
                    let url = format!("https://127.0.0.1:8443{path}");
                    check!(
                        checks,
                        cc["url"] == url.as_str() && cc.get("service").is_none(),
                        "{kind} with webhook.url calls {url}, not the Service"
                    );
                    check!(
                        checks,
                        sel["matchLabels"] == json!({"poolguard-bench": "on"}),
                        "{kind} requires webhook.namespaceMatchLabels"
                    );
                    check!(
                        checks,
                        arr(&sel["matchExpressions"])
                            .contains(&json!({"key": "agentpool", "operator": "Exists"})),
                        "{kind} requires the pool label (validating.requireNamespaceLabel)"
                    );
                } else {
                    check!(
                        checks,
                        cc.get("url").is_none()
                            && cc["service"]["namespace"] == namespace
                            && cc["service"]["path"] == path,
                        "{kind} calls the Service at {path}"
                    );
                    match name {
                        "selector" => check!(
                            checks,
                            sel["matchLabels"]
                                == json!({"poolguard": "enabled", "example.com/tier": "gold"}),
                            "{kind} requires webhook.namespaceMatchLabels"
                        ),
                        "native-apply" => check!(
                            checks,
                            sel["matchLabels"] == json!({"poolguard": "on"}),
                            "{kind} requires webhook.namespaceMatchLabels"
                        ),
                        _ => check!(
                            checks,
                            sel.get("matchLabels").is_none(),
                            "{kind} has no matchLabels by default"
                        ),
                    }
                }
                let excluded = arr(&sel["matchExpressions"])
                    .iter()
                    .find(|e| e["key"] == "kubernetes.io/metadata.name");
                check!(
                    checks,
                    excluded.is_some_and(|e| {
                        e["operator"] == "NotIn"
                            && has_str(&e["values"], namespace)
                            && has_str(&e["values"], "kube-system")
                    }),
                    "{kind} must exclude {namespace} and kube-system"
                );
                if name.starts_with("provided") || name == "url" {
                    let b64: String = text(&cc["caBundle"])
                        .chars()
                        .filter(|c| !c.is_whitespace())
                        .collect();
                    let pem = base64::engine::general_purpose::STANDARD
                        .decode(b64)
                        .ok()
                        .and_then(|bytes| String::from_utf8(bytes).ok())
                        .unwrap_or_default();
                    check!(
                        checks,
                        pem.starts_with("-----BEGIN CERTIFICATE-----"),
                        "{kind} needs a caBundle (base64 of the PEM) in mode provided"
                    );
                } else {
                    check!(
                        checks,
                        cc.get("caBundle").is_none(),
                        "{kind} must not render caBundle in mode {name}"
                    );
                }
                if matches!(name, "certmanager" | "serve-only") {
                    check!(
                        checks,
                        ann["cert-manager.io/inject-ca-from"]
                            == format!("{namespace}/poolguard-tls").as_str(),
                        "{kind} inject-ca-from annotation"
                    );
                }
            }
        }
    }
    check!(
        checks,
        case.kind(MUTATING).len() == 1,
        "one MutatingWebhookConfiguration"
    );
    check!(
        checks,
        case.kind(VALIDATING).len() == 1,
        "one ValidatingWebhookConfiguration"
    );
    let authority: Vec<Value> = case
        .kind(VALIDATING)
        .iter()
        .flat_map(|cfg| arr(&cfg["webhooks"]))
        .filter(|wh| text(&wh["name"]).ends_with("pool-authority.poolguard.io"))
        .map(|wh| wh["name"].clone())
        .collect();
    check!(
        checks,
        authority
            .first()
            .is_some_and(|a| a == "pool-authority.poolguard.io"),
        "the pool-authority webhook is registered by default"
    );
    check!(
        checks,
        distinct(&authority) == authority.len(),
        "pool-authority webhooks have distinct names: {}",
        repr_values(&authority)
    );
    // One entry per guarded key (one objectSelector cannot OR keys), the pool label's first.
    let mut want_keys = vec![label.clone()];
    want_keys.extend(guarded.iter().cloned());
    check!(
        checks,
        authority_keys == want_keys,
        "pool-authority webhooks select {}, want one per guarded label {}",
        repr_values(&authority_keys),
        repr_values(&want_keys)
    );
}

/// The two Deployments: the serving pods and the controller, their flags, mounts and
/// ServiceAccounts, and what the Services and the PodDisruptionBudget select.
fn deployments(case: &Case, checks: &mut Checks) {
    let (name, namespace) = (case.name, case.namespace);
    // The helm test pod (poolguard config check) must not be selected as one of poolguard's pods:
    // it carries neither Deployment's selector labels.
    for dep in case.kind("Deployment") {
        let selector = &dep["spec"]["selector"]["matchLabels"];
        for pod in case.kind("Pod") {
            check!(
                checks,
                !labels_match(selector, &pod["metadata"]["labels"]),
                "Pod {} carries Deployment {}'s selector labels",
                plain(&pod["metadata"]["name"]),
                plain(&dep["metadata"]["name"])
            );
        }
    }
    let (serving, controllers, fullname) = roles_of_deployments(case);
    let want_controller = want_controller(case);
    check!(
        checks,
        serving.len() == 1,
        "one serving Deployment (poolguard serve), got {}",
        serving.len()
    );
    check!(
        checks,
        controllers.len() == usize::from(want_controller),
        "{} controller Deployments, want {} (mode self, registration poolguard or the audit)",
        controllers.len(),
        usize::from(want_controller)
    );
    check!(
        checks,
        case.kind("Deployment").len() == serving.len() + controllers.len(),
        "every Deployment runs poolguard serve or poolguard controller"
    );
    let (serving_sa, controller_sa) = service_accounts(name, &fullname);
    check!(
        checks,
        fullname == if name == "options" { "pg" } else { "poolguard" },
        "the serving Deployment is named {fullname}"
    );
    for dep in &controllers {
        check!(
            checks,
            name_of(dep) == format!("{fullname}-controller"),
            "the controller Deployment is named {}",
            plain(&dep["metadata"]["name"])
        );
    }
    const WRITER_FLAGS: [&str; 8] = [
        "--manage-certs",
        "--cert-secret",
        "--webhook-configs",
        "--cert-dns-name",
        "--register-webhooks",
        "--report-api",
        "--audit-namespace-selector",
        "--max-results-per-report",
    ];
    for dep in &serving {
        let pod = &dep["spec"]["template"]["spec"];
        let c = &pod["containers"][0];
        let args = strings(&c["args"]);
        let arg = |flag: &str| flag_value(&args, flag);
        check!(
            checks,
            pod["serviceAccountName"] == serving_sa.as_str(),
            "the serving pods run as {}, want {serving_sa}",
            plain(&pod["serviceAccountName"])
        );
        let pod_labels = &dep["spec"]["template"]["metadata"]["labels"];
        let selector = &dep["spec"]["selector"]["matchLabels"];
        check!(
            checks,
            selector["app.kubernetes.io/name"] == "poolguard" && labels_match(selector, pod_labels),
            "the serving Deployment selects its pods by app.kubernetes.io/name=poolguard"
        );
        let wrote: Vec<&String> = args
            .iter()
            .filter(|a| {
                WRITER_FLAGS.contains(&a.as_str())
                    || a.starts_with("--native-")
                    || a.starts_with("--lease-")
            })
            .collect();
        check!(
            checks,
            wrote.is_empty(),
            "the serving Deployment passes writer flags {}",
            repr_list(&wrote)
        );
        check!(
            checks,
            arg("--audit-interval") == Some("0"),
            "the serving pods never audit: --audit-interval {}",
            repr_opt(arg("--audit-interval"))
        );
        check!(
            checks,
            arg("--addr") == Some("0.0.0.0:8443"),
            "the serving pods listen on 0.0.0.0:8443"
        );
        // The serving certificate from the release's TLS Secret, mounted read-only at /tls in
        // every mode (in mode self the controller writes it).
        let volumes = by_name(&pod["volumes"]);
        let tls_volume = volumes.get("tls").copied().unwrap_or(&Value::Null);
        let tls_secret = &tls_volume["secret"]["secretName"];
        check!(
            checks,
            arg("--tls-cert-file") == Some("/tls/tls.crt")
                && arg("--tls-key-file") == Some("/tls/tls.key"),
            "--tls-cert-file /tls/tls.crt --tls-key-file /tls/tls.key"
        );
        let want_secret = if name == "url" {
            "unused".to_string()
        } else if name.starts_with("provided") {
            "poolguard-serving-cert".to_string()
        } else {
            format!("{fullname}-tls")
        };
        check!(
            checks,
            arr(&c["volumeMounts"])
                .iter()
                .any(|m| m["name"] == "tls" && m["mountPath"] == "/tls" && truthy(&m["readOnly"]))
                && *tls_secret == want_secret.as_str(),
            "the TLS Secret ({}) mounted read-only at /tls",
            plain(tls_secret)
        );
        // Only the serving certificate and its key: in mode self the Secret also holds the CA's
        // key, which must stay with the controller.
        let tls_items = &tls_volume["secret"]["items"];
        let mut projected: Vec<(String, String)> = arr(tls_items)
            .iter()
            .map(|i| (plain(&i["key"]), plain(&i["path"])))
            .collect();
        projected.sort();
        let want_items = [("tls.crt", "tls.crt"), ("tls.key", "tls.key")];
        check!(
            checks,
            projected.len() == 2
                && projected
                    .iter()
                    .zip(want_items)
                    .all(|((k, p), (wk, wp))| k == wk && p == wp),
            "the tls volume projects only tls.crt and tls.key (items {})",
            if truthy(tls_items) {
                repr(tls_items)
            } else {
                "[]".to_string()
            }
        );
        let timeout =
            &case.kind(MUTATING).first().unwrap_or(&Value::Null)["webhooks"][0]["timeoutSeconds"];
        let deadline = timeout.as_i64().map(|t| (t * 1000 - 1000).to_string());
        check!(
            checks,
            deadline.is_some() && arg("--deadline-ms") == deadline.as_deref(),
            "--deadline-ms one second below timeoutSeconds {}",
            plain(timeout)
        );
        let has_sleep = c["lifecycle"].get("preStop").is_some();
        check!(
            checks,
            has_sleep == (name != "options"),
            "preStop sleep only from Kubernetes 1.30 and when > 0"
        );
        // The Services and the PodDisruptionBudget count the serving pods, never the
        // controller's; only the controller's metrics Service selects the controller's pods, and
        // only them.
        for obj in case
            .kind("Service")
            .iter()
            .chain(case.kind("PodDisruptionBudget"))
        {
            let mut sel = &obj["spec"]["selector"];
            if obj["kind"] == "PodDisruptionBudget" {
                if let Some(match_labels) = sel.get("matchLabels") {
                    sel = match_labels;
                }
            }
            let of_controller = name_of(obj) == format!("{fullname}-controller-metrics");
            let what = format!(
                "{} {}",
                plain(&obj["kind"]),
                plain(&obj["metadata"]["name"])
            );
            check!(
                checks,
                labels_match(sel, pod_labels) != of_controller,
                "{what} selects the serving pods{}",
                if of_controller {
                    " (it should not)"
                } else {
                    " (it should)"
                }
            );
            for ctrl in &controllers {
                let ctrl_labels = &ctrl["spec"]["template"]["metadata"]["labels"];
                check!(
                    checks,
                    labels_match(sel, ctrl_labels) == of_controller,
                    "{what} selects the controller's pods{}",
                    if of_controller {
                        " (it should)"
                    } else {
                        " (it should not)"
                    }
                );
            }
        }
    }
    for dep in &controllers {
        let pod = &dep["spec"]["template"]["spec"];
        let c = &pod["containers"][0];
        let args = strings(&c["args"]);
        let arg = |flag: &str| flag_value(&args, flag);
        check!(
            checks,
            pod["serviceAccountName"] == controller_sa.as_str(),
            "the controller runs as {}, want {controller_sa}",
            plain(&pod["serviceAccountName"])
        );
        let pod_labels = &dep["spec"]["template"]["metadata"]["labels"];
        let selector = &dep["spec"]["selector"]["matchLabels"];
        check!(checks, selector["app.kubernetes.io/name"] == "poolguard-controller"
                && pod_labels["app.kubernetes.io/component"] == "controller"
                && labels_match(selector, pod_labels), "the controller selects its pods by app.kubernetes.io/name=poolguard-controller (component controller)");
        check!(
            checks,
            arg("--metrics-addr") == Some("0.0.0.0:9090"),
            "the controller's --metrics-addr 0.0.0.0:9090"
        );
        // It answers no admission request: no listener, deadline, serving certificate, client CA
        // or preStop sleep.
        let served: Vec<&String> = args
            .iter()
            .filter(|a| {
                matches!(
                    a.as_str(),
                    "--addr"
                        | "--deadline-ms"
                        | "--drain-seconds"
                        | "--tls-cert-file"
                        | "--tls-key-file"
                        | "--client-ca-file"
                        | "--client-name"
                )
            })
            .collect();
        check!(
            checks,
            served.is_empty(),
            "the controller passes serving flags {}",
            repr_list(&served)
        );
        check!(
            checks,
            !arr(&c["volumeMounts"])
                .iter()
                .any(|m| m["mountPath"] == "/tls" || m["mountPath"] == "/client-ca"),
            "the controller mounts neither the TLS Secret nor the client CA"
        );
        check!(
            checks,
            c["lifecycle"].get("preStop").is_none(),
            "the controller has no preStop sleep"
        );
        // Mode self: the controller keeps the certificate in the Secret the serving pods mount
        // and the CA bundle in the release's two webhook configurations.
        check!(
            checks,
            has(&args, "--manage-certs") == case.self_mode,
            "--manage-certs only in mode self"
        );
        if case.self_mode {
            let configs: Vec<String> = [MUTATING, VALIDATING]
                .iter()
                .flat_map(|k| case.kind(k))
                .map(|cfg| plain(&cfg["metadata"]["name"]))
                .collect();
            let configs = configs.join(",");
            check!(
                checks,
                arg("--cert-secret") == Some(format!("{namespace}/{fullname}-tls").as_str()),
                "--cert-secret {}",
                repr_opt(arg("--cert-secret"))
            );
            check!(
                checks,
                arg("--webhook-configs") == Some(configs.as_str()),
                "--webhook-configs {}, want {configs}",
                repr_opt(arg("--webhook-configs"))
            );
            check!(
                checks,
                arg("--cert-dns-name") == Some(format!("{fullname}.{namespace}.svc").as_str()),
                "--cert-dns-name {}",
                repr_opt(arg("--cert-dns-name"))
            );
        } else {
            check!(
                checks,
                !["--cert-secret", "--webhook-configs", "--cert-dns-name"]
                    .iter()
                    .any(|f| has(&args, f)),
                "certificate flags only in mode self"
            );
        }
    }
    for dep in case.kind("Deployment") {
        let c = container(dep);
        let dep_name = plain(&dep["metadata"]["name"]);
        check!(
            checks,
            !arr(&c["volumeMounts"])
                .iter()
                .any(|m| m.get("subPath").is_some()),
            "{dep_name}: no subPath mounts"
        );
        let env = by_name(&c["env"]);
        for (var, field) in [
            ("POD_NAME", "metadata.name"),
            ("POD_NAMESPACE", "metadata.namespace"),
        ] {
            let from = env.get(var).copied().unwrap_or(&Value::Null);
            check!(
                checks,
                from["valueFrom"]["fieldRef"]["fieldPath"] == field,
                "{dep_name}: env {var} from the downward API ({field})"
            );
        }
    }
    // The ServiceAccounts: the serving pods' and, with the controller, its own.
    let mut accounts: Vec<String> = case
        .kind("ServiceAccount")
        .iter()
        .map(|sa| plain(&sa["metadata"]["name"]))
        .collect();
    accounts.sort();
    let mut want_accounts = Vec::new();
    if name != "options" {
        want_accounts.push(serving_sa.clone());
        if want_controller {
            want_accounts.push(controller_sa.clone());
        }
        want_accounts.sort();
    }
    check!(
        checks,
        accounts == want_accounts,
        "ServiceAccounts {}, want {}",
        repr_list(&accounts),
        repr_list(&want_accounts)
    );
}

/// The serving and controller Deployments (by their first argument) and the release's full
/// name (the serving Deployment's name).
fn roles_of_deployments<'a>(case: &'a Case) -> (Vec<&'a Value>, Vec<&'a Value>, String) {
    let command = |dep: &Value| arr(&container(dep)["args"]).first().cloned();
    let running = |what: &str| -> Vec<&Value> {
        case.kind("Deployment")
            .iter()
            .filter(|d| command(d).is_some_and(|c| c == what))
            .collect()
    };
    let serving = running("serve");
    let controllers = running("controller");
    let fullname = serving.first().map_or_else(
        || "poolguard".to_string(),
        |d| plain(&d["metadata"]["name"]),
    );
    (serving, controllers, fullname)
}

/// Whether something needs writing (mode self, webhook.registration=poolguard, the audit), so a
/// controller Deployment (`poolguard controller`, <fullname>-controller, its own ServiceAccount)
/// is rendered.
fn want_controller(case: &Case) -> bool {
    case.self_mode || case.registered.is_some() || audit_on(case.name)
}

fn audit_on(name: &str) -> bool {
    !matches!(name, "audit-off" | "serve-only")
}

/// The serving pods' and the controller's ServiceAccounts.
fn service_accounts(name: &str, fullname: &str) -> (String, String) {
    if name == "options" {
        (
            "poolguard-existing".into(),
            "poolguard-controller-existing".into(),
        )
    } else {
        (fullname.to_string(), format!("{fullname}-controller"))
    }
}

/// The names of the roles bound to ServiceAccount `sa` by bindings of `binding_kind`, sorted.
fn bound(case: &Case, sa: &str, binding_kind: &str) -> Vec<String> {
    let subject = json!({"kind": "ServiceAccount", "name": sa, "namespace": case.namespace});
    let mut roles: Vec<String> = case
        .kind(binding_kind)
        .iter()
        .filter(|b| arr(&b["subjects"]).contains(&subject))
        .map(|b| plain(&b["roleRef"]["name"]))
        .collect();
    roles.sort();
    roles
}

/// RBAC by identity: what each ServiceAccount is bound to, and what each role grants.
fn rbac(case: &Case, checks: &mut Checks) {
    let name = case.name;
    let (_, _, fullname) = roles_of_deployments(case);
    let (serving_sa, controller_sa) = service_accounts(name, &fullname);
    let want_controller = want_controller(case);
    let audit_on = audit_on(name);
    let registered = case.registered.is_some();
    for binding_kind in ["ClusterRoleBinding", "RoleBinding"] {
        let role_kind = binding_kind.trim_end_matches("Binding");
        for b in case.kind(binding_kind) {
            let subjects = arr(&b["subjects"]);
            check!(
                checks,
                b["roleRef"]["kind"] == role_kind
                    && b["roleRef"]["name"] == b["metadata"]["name"]
                    && subjects.len() == 1
                    && (subjects[0]["name"] == serving_sa.as_str()
                        || subjects[0]["name"] == controller_sa.as_str()),
                "{binding_kind} {} binds one of poolguard's ServiceAccounts to its own {role_kind}",
                plain(&b["metadata"]["name"])
            );
        }
    }
    if name != "options" {
        let serving_cluster = bound(case, &serving_sa, "ClusterRoleBinding");
        check!(
            checks,
            serving_cluster == [fullname.as_str()],
            "the serving ServiceAccount is bound to ClusterRoles {}, want [{fullname}]",
            repr_list(&serving_cluster)
        );
        let serving_roles = bound(case, &serving_sa, "RoleBinding");
        let want_serving_roles: Vec<&str> = if audit_on { vec![&fullname] } else { vec![] };
        check!(
            checks,
            serving_roles == want_serving_roles,
            "the serving ServiceAccount is bound to Roles {}",
            repr_list(&serving_roles)
        );
        // native.webhookFallback: pods may be created in the canary namespace (dry-run
        // canaries).
        let fallback = case
            .kind("Deployment")
            .iter()
            .any(|d| has_str(&container(d)["args"], "--native-fallback"));
        let want_roles = writer_roles(case, &fullname, fallback);
        let controller_cluster = bound(case, &controller_sa, "ClusterRoleBinding");
        let want_cluster: Vec<String> = if want_controller {
            vec![format!("{fullname}-controller")]
        } else {
            vec![]
        };
        check!(
            checks,
            controller_cluster == want_cluster,
            "the controller's ServiceAccount is bound to ClusterRoles {}",
            repr_list(&controller_cluster)
        );
        let controller_roles = bound(case, &controller_sa, "RoleBinding");
        check!(
            checks,
            controller_roles == want_roles,
            "the controller's ServiceAccount is bound to Roles {}, want {} (the writer Roles)",
            repr_list(&controller_roles),
            repr_list(&want_roles)
        );
        let mut cluster_roles: Vec<String> = case
            .kind("ClusterRole")
            .iter()
            .map(|r| plain(&r["metadata"]["name"]))
            .collect();
        cluster_roles.sort();
        let mut want_cluster_roles = vec![fullname.clone()];
        if want_controller {
            want_cluster_roles.push(format!("{fullname}-controller"));
        }
        want_cluster_roles.sort();
        check!(
            checks,
            cluster_roles == want_cluster_roles,
            "ClusterRoles {}, want {}",
            repr_list(&cluster_roles),
            repr_list(&want_cluster_roles)
        );
        let mut roles: Vec<String> = case
            .kind("Role")
            .iter()
            .map(|r| plain(&r["metadata"]["name"]))
            .collect();
        roles.sort();
        let mut want_all_roles = want_roles.clone();
        if audit_on {
            want_all_roles.push(fullname.clone());
        }
        want_all_roles.sort();
        check!(
            checks,
            roles == want_all_roles,
            "Roles {}",
            repr_list(&roles)
        );
    }
    // The serving ServiceAccount writes nothing but its admission counts, into the rollout
    // ConfigMap's counts ConfigMap <fullname>-rollouts-counts (patch, by name).
    let counts = format!("{fullname}-rollouts-counts");
    for (role_kind, binding_kind) in [
        ("ClusterRole", "ClusterRoleBinding"),
        ("Role", "RoleBinding"),
    ] {
        for role_name in bound(case, &serving_sa, binding_kind) {
            for role in case.kind(role_kind) {
                if name_of(role) != role_name {
                    continue;
                }
                for rule in arr(&role["rules"]) {
                    let mut verbs: Vec<String> = strings(&rule["verbs"])
                        .into_iter()
                        .filter(|v| !matches!(v.as_str(), "get" | "list" | "watch"))
                        .collect();
                    verbs.sort();
                    verbs.dedup();
                    check!(checks, verbs.is_empty()
                            || (role_kind == "Role"
                                && verbs == ["patch"]
                                && is_strs(&rule["apiGroups"], &[""])
                                && is_strs(&rule["resources"], &["configmaps"])
                                && is_strs(&rule["resourceNames"], &[&counts])), "a {role_kind} bound to the serving ServiceAccount grants {} on {}: only patch on ConfigMap {counts}",
                            repr_list(&verbs),
                            repr(&rule["resources"]));
                }
            }
        }
    }
    // The serving ClusterRole: the namespaces, the nodes, the PolicyExceptions (exceptions.enabled,
    // on in every case) and (gatekeeperFromCluster) the Gatekeeper objects, read only; nothing
    // else.
    let mut reads = vec![
        json!({"apiGroups": [""], "resources": ["namespaces"], "verbs": ["get", "list", "watch"]}),
        json!({"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch"]}),
        json!({"apiGroups": ["poolguard.io"], "resources": ["policyexceptions"], "verbs": ["get", "list", "watch"]}),
    ];
    if name == "gatekeeper-cluster" {
        reads.extend(gatekeeper_reads());
    }
    let reads = Value::Array(reads);
    for role in case.kind("ClusterRole") {
        if name_of(role) == fullname {
            check!(
                checks,
                role["rules"] == reads,
                "the serving ClusterRole {fullname} grants {}, want the reads {} only",
                repr(&role["rules"]),
                repr(&reads)
            );
        }
    }
    for role in case.kind("ClusterRole") {
        if name_of(role) != format!("{fullname}-controller") {
            continue;
        }
        for resource in ["namespaces", "nodes"] {
            check!(checks, arr(&role["rules"]).contains(
                    &json!({"apiGroups": [""], "resources": [resource], "verbs": ["get", "list", "watch"]}),
                ), "the controller's ClusterRole reads {resource} (get/list/watch)");
        }
        // Its webhook configurations: get/patch by name, with mode self or registration
        // poolguard.
        let configs: Vec<&Value> = arr(&role["rules"])
            .iter()
            .filter(|r| {
                is_strs(
                    &r["resources"],
                    &[
                        "mutatingwebhookconfigurations",
                        "validatingwebhookconfigurations",
                    ],
                )
            })
            .collect();
        let want: Vec<Value> = if case.self_mode || registered {
            vec![json!({"apiGroups": ["admissionregistration.k8s.io"],
                        "resources": ["mutatingwebhookconfigurations", "validatingwebhookconfigurations"],
                        "resourceNames": ["poolguard-mutating", "poolguard-validating"],
                        "verbs": ["get", "patch"]})]
        } else {
            vec![]
        };
        check!(
            checks,
            configs.iter().copied().eq(want.iter()),
            "the controller's webhook configuration rules {}, want {}",
            repr_values(configs.iter().copied()),
            repr_values(&want)
        );
    }
    for role in case.kind("Role") {
        if name_of(role) == format!("{fullname}-registration") {
            check!(
                checks,
                role["rules"]
                    == json!([{"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": ["list"]}]),
                "the registration Role lists EndpointSlices only: {}",
                repr(&role["rules"])
            );
        }
    }
    let has_pdb = !case.kind("PodDisruptionBudget").is_empty();
    let has_cluster_roles = !case.kind("ClusterRole").is_empty();
    check!(
        checks,
        has_pdb == (name != "options"),
        "PDB only with replicaCount > 1"
    );
    check!(
        checks,
        has_cluster_roles == (name != "options"),
        "RBAC only with rbac.create"
    );
    let secret_roles: Vec<&Value> = case
        .kind("Role")
        .iter()
        .filter(|r| {
            arr(&r["rules"])
                .iter()
                .any(|rule| has_str(&rule["resources"], "secrets"))
        })
        .collect();
    let has_secret_roles = !secret_roles.is_empty();
    check!(
        checks,
        has_secret_roles == (case.self_mode && name != "options"),
        "the Secret Role only in mode self"
    );
    let tls_role = format!("{fullname}-tls");
    for role in &secret_roles {
        let controller_bound = bound(case, &controller_sa, "RoleBinding");
        let serving_bound = bound(case, &serving_sa, "RoleBinding");
        check!(
            checks,
            name_of(role) == tls_role
                && controller_bound.iter().filter(|r| **r == tls_role).count() == 1
                && !serving_bound.contains(&tls_role),
            "the Secret Role {} is {tls_role}, bound to the controller's ServiceAccount only",
            plain(&role["metadata"]["name"])
        );
        for rule in arr(&role["rules"]) {
            if !has_str(&rule["resources"], "secrets") {
                continue;
            }
            // The certificates' Secret is read and replaced, never patched, listed or watched;
            // only create (no name known to the authorizer) is not limited to it.
            let named = super::len(&rule["resourceNames"]) == 1;
            let mut verbs = strings(&rule["verbs"]);
            verbs.sort();
            verbs.dedup();
            check!(
                checks,
                (named && verbs == ["get", "update"])
                    || (!truthy(&rule["resourceNames"]) && is_strs(&rule["verbs"], &["create"])),
                "Secret rule {}: get/update on the certificates' Secret, create, nothing else",
                repr(rule)
            );
        }
    }
}

/// The Roles the controller's ServiceAccount is bound to: the writer Roles, sorted.
fn writer_roles(case: &Case, fullname: &str, fallback: bool) -> Vec<String> {
    let mut roles = Vec::new();
    if case.self_mode {
        roles.push(format!("{fullname}-tls"));
    }
    if case.registered.is_some() {
        roles.push(format!("{fullname}-registration"));
    }
    if audit_on(case.name) {
        roles.push(format!("{fullname}-audit"));
    }
    if fallback {
        roles.push(format!("{fullname}-controller-canary"));
    }
    roles.sort();
    roles
}

/// get/list/watch on ConstraintTemplates and on every constraints.gatekeeper.sh resource.
fn gatekeeper_reads() -> [Value; 2] {
    [
        json!({"apiGroups": ["templates.gatekeeper.sh"], "resources": ["constrainttemplates"], "verbs": ["get", "list", "watch"]}),
        json!({"apiGroups": ["constraints.gatekeeper.sh"], "resources": ["*"], "verbs": ["get", "list", "watch"]}),
    ]
}

/// Writes `text` to `path`, creating its directory; a failure is a failed check.
fn write(checks: &mut Checks, dir: &str, file: &str, content: &str) {
    let result = std::fs::create_dir_all(dir)
        .and_then(|()| std::fs::write(format!("{dir}/{file}"), content));
    if let Err(e) = result {
        checks.fail(format!("writing {dir}/{file}: {e}"));
    }
}

/// The mounted files, as poolguard would see them (lint.sh loads them with the binary): the
/// config, the policies and placement policies (templates, no Rego tests, the shipped ones as
/// shipped) and the Gatekeeper files.
fn files(case: &Case, checks: &mut Checks) {
    let base = format!("{}/{}.d", case.out, case.name);
    for cm in case.kind("ConfigMap") {
        let cm_name = name_of(cm);
        if cm_name.ends_with("-config") {
            let config = text(&cm["data"]["config.yaml"]);
            if let Err(e) = parse_one(config) {
                checks.fail(format!("config/config.yaml: not YAML: {e}"));
            }
            write(checks, &format!("{base}/config"), "config.yaml", config);
        }
        let subdir = if cm_name.ends_with("-placement-policies") {
            Some("placement-policies")
        } else if cm_name.ends_with("-policies") {
            Some("policies")
        } else {
            None
        };
        if let Some(subdir) = subdir {
            let dir = format!("{base}/{subdir}");
            if let Err(e) = std::fs::create_dir_all(&dir) {
                checks.fail(format!("creating {dir}: {e}"));
            }
            for (key, data) in cm["data"].as_object().into_iter().flatten() {
                let content = text(data);
                write(checks, &dir, key, content);
                if key.ends_with(".yaml") {
                    let is_template = match parse_one(content) {
                        Ok(Value::Object(doc)) => doc.contains_key("policy"),
                        Ok(Value::Array(items)) => items.iter().any(|i| i == "policy"),
                        Ok(Value::String(s)) => s.contains("policy"),
                        Ok(_) | Err(_) => false,
                    };
                    check!(checks, is_template, "{subdir}/{key} is a template");
                }
                check!(
                    checks,
                    !key.ends_with("_test.rego"),
                    "{subdir}/{key}: Rego tests are not shipped"
                );
                let shipped = format!("{}/{subdir}/{key}", case.chart);
                if std::path::Path::new(&shipped).exists() {
                    let same = std::fs::read_to_string(&shipped).is_ok_and(|s| s == content);
                    check!(checks, same, "{subdir}/{key} differs from {shipped}");
                }
            }
        }
        if cm_name.ends_with("-gatekeeper") {
            let dir = format!("{base}/gatekeeper");
            if let Err(e) = std::fs::create_dir_all(&dir) {
                checks.fail(format!("creating {dir}: {e}"));
            }
            for (key, data) in cm["data"].as_object().into_iter().flatten() {
                write(checks, &dir, key, text(data));
            }
        }
    }
}

/// Gatekeeper: files only from gatekeeperPolicies (their ConfigMap, mount and
/// --gatekeeper-dir), the cluster's objects only with gatekeeperFromCluster (the flag and
/// read-only RBAC), and validating.extraRules' RBAC in the controller's ClusterRole.
fn gatekeeper(case: &Case, checks: &mut Checks) {
    let name = case.name;
    let (_, _, fullname) = roles_of_deployments(case);
    let want_controller = want_controller(case);
    let gatekeeper_cms = case.config_maps_ending("-gatekeeper");
    check!(
        checks,
        gatekeeper_cms.len() == usize::from(name == "gatekeeper"),
        "a Gatekeeper ConfigMap only with gatekeeperPolicies"
    );
    for workload in case.kind("Deployment").iter().chain(case.kind("Pod")) {
        let pod = if workload["kind"] == "Deployment" {
            &workload["spec"]["template"]["spec"]
        } else {
            &workload["spec"]
        };
        let c = &pod["containers"][0];
        let args = strings(&c["args"]);
        let has_dir = flag_value(&args, "--gatekeeper-dir") == Some("/gatekeeper");
        let mounted = arr(&c["volumeMounts"]).iter().any(|m| {
            m["name"] == "gatekeeper" && m["mountPath"] == "/gatekeeper" && truthy(&m["readOnly"])
        });
        check!(
            checks,
            has_dir == mounted && mounted == (name == "gatekeeper"),
            "{} {}: --gatekeeper-dir /gatekeeper, mounted read-only, only with gatekeeperPolicies",
            plain(&workload["kind"]),
            plain(&workload["metadata"]["name"])
        );
    }
    // gatekeeperFromCluster: --gatekeeper-from-cluster on the server, and get/list/watch
    // (nothing more) on ConstraintTemplates and every constraints.gatekeeper.sh resource;
    // neither otherwise.
    let from_cluster = name == "gatekeeper-cluster";
    for workload in case.kind("Deployment") {
        check!(
            checks,
            has_str(&container(workload)["args"], "--gatekeeper-from-cluster") == from_cluster,
            "Deployment {}: --gatekeeper-from-cluster only with gatekeeperFromCluster",
            plain(&workload["metadata"]["name"])
        );
    }
    // Both ClusterRoles (serving and controller: both decide with the constraints) read them.
    let want_rules: Vec<Value> = if from_cluster {
        gatekeeper_reads().to_vec()
    } else {
        vec![]
    };
    for role in case.kind("ClusterRole") {
        let gk_rules: Vec<&Value> = arr(&role["rules"])
            .iter()
            .filter(|r| {
                has_str(&r["apiGroups"], "templates.gatekeeper.sh")
                    || has_str(&r["apiGroups"], "constraints.gatekeeper.sh")
            })
            .collect();
        check!(
            checks,
            gk_rules.iter().copied().eq(want_rules.iter()),
            "ClusterRole {}: Gatekeeper RBAC {}, wanted {}",
            plain(&role["metadata"]["name"]),
            repr_values(gk_rules.iter().copied()),
            repr_values(&want_rules)
        );
    }
    check!(
        checks,
        !from_cluster || case.kind("ClusterRole").len() == 1 + usize::from(want_controller),
        "gatekeeperFromCluster: both ClusterRoles are rendered"
    );
    // validating.extraRules (the gatekeeper case: Services): the audit (the controller's
    // ClusterRole, never the serving one) may list those kinds.
    for role in case.kind("ClusterRole") {
        let extra_rbac: Vec<&Value> = arr(&role["rules"])
            .iter()
            .filter(|r| has_str(&r["resources"], "services"))
            .collect();
        let want_extra: Vec<Value> = if name == "gatekeeper"
            && name_of(role) == format!("{fullname}-controller")
        {
            vec![json!({"apiGroups": [""], "resources": ["services"], "verbs": ["get", "list"]})]
        } else {
            vec![]
        };
        check!(
            checks,
            extra_rbac.iter().copied().eq(want_extra.iter()),
            "ClusterRole {}: RBAC for validating.extraRules {}, wanted {}",
            plain(&role["metadata"]["name"]),
            repr_values(extra_rbac.iter().copied()),
            repr_values(&want_extra)
        );
    }
    check!(
        checks,
        name != "gatekeeper"
            || case
                .kind("ClusterRole")
                .iter()
                .any(|r| name_of(r) == format!("{fullname}-controller")),
        "validating.extraRules with the audit: the controller's ClusterRole is rendered"
    );
}

/// The placement policies (their own ConfigMap and mount, beside, not inside, /policies), mTLS
/// (the client CA, only on the serving pods and only with clientCA) and webhook registration
/// (the controller's --register-webhooks and mounted ConfigMap).
fn placement_and_mounts(case: &Case, checks: &mut Checks) {
    let name = case.name;
    let placement_cms = case.config_maps_ending("-placement-policies");
    check!(
        checks,
        placement_cms.len() == 1,
        "one placement policies ConfigMap"
    );
    let shipped_dir = format!("{}/placement-policies", case.chart);
    let mut shipped_placement: Vec<String> = match std::fs::read_dir(&shipped_dir) {
        Ok(entries) => entries
            .filter_map(|e| e.ok())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|f| !f.ends_with("_test.rego"))
            .collect(),
        Err(e) => {
            checks.fail(format!("{shipped_dir}: {e}"));
            Vec::new()
        }
    };
    shipped_placement.sort();
    if let Some(cm) = placement_cms.first() {
        let keys: Vec<String> = cm["data"]
            .as_object()
            .map(|data| data.keys().cloned().collect())
            .unwrap_or_default();
        if name == "no-placement-policies" {
            check!(
                checks,
                keys.is_empty(),
                "placementPolicies.shipped=false: no placement policies, got {}",
                repr_list(&keys)
            );
        } else {
            check!(
                checks,
                shipped_placement.iter().all(|f| keys.contains(f)),
                "placement policies {} include the shipped {}",
                repr_list(&keys),
                repr_list(&shipped_placement)
            );
        }
    }
    let client_ca = case.config_maps_ending("-client-ca");
    for dep in case.kind("Deployment") {
        let pod = &dep["spec"]["template"]["spec"];
        let c = &pod["containers"][0];
        let args = strings(&c["args"]);
        let is_serving = args.first().is_some_and(|a| a == "serve");
        check!(
            checks,
            flag_value(&args, "--placement-policies-dir") == Some("/placement-policies"),
            "--placement-policies-dir /placement-policies"
        );
        let mounts = by_name(&c["volumeMounts"]);
        let mount = |m: &str| mounts.get(m).copied().unwrap_or(&Value::Null);
        check!(
            checks,
            mount("placement-policies")["mountPath"] == "/placement-policies"
                && truthy(&mount("placement-policies")["readOnly"]),
            "placement policies mounted read-only at /placement-policies"
        );
        check!(
            checks,
            !arr(&c["volumeMounts"]).iter().any(|m| {
                let at = text(&m["mountPath"]);
                at.starts_with("/policies/") || at.starts_with("/placement-policies/")
            }),
            "no mount nested in the policies directories"
        );
        let volumes = by_name(&pod["volumes"]);
        let volume = |v: &str| volumes.get(v).copied().unwrap_or(&Value::Null);
        check!(
            checks,
            placement_cms.first().is_some_and(|cm| {
                volume("placement-policies")["configMap"]["name"] == cm["metadata"]["name"]
            }),
            "the placement-policies volume is the placement policies ConfigMap"
        );
        // mTLS only with clientCA, on the serving pods: --client-ca-file, the CA's ConfigMap
        // mounted read-only.
        if !is_serving {
            check!(
                checks,
                !has(&args, "--client-ca-file")
                    && !has(&args, "--client-name")
                    && !mounts.contains_key("client-ca")
                    && !volumes.contains_key("client-ca"),
                "the controller has no client CA"
            );
        } else if name == "mtls" {
            check!(
                checks,
                flag_value(&args, "--client-ca-file") == Some("/client-ca/ca.crt"),
                "--client-ca-file /client-ca/ca.crt"
            );
            check!(
                checks,
                flag_value(&args, "--client-name") == Some("kube-apiserver-webhook-client"),
                "--client-name kube-apiserver-webhook-client"
            );
            check!(
                checks,
                client_ca.first().is_some_and(|cm| {
                    text(&cm["data"]["ca.crt"]).starts_with("-----BEGIN CERTIFICATE-----")
                }) && mount("client-ca")["mountPath"] == "/client-ca"
                    && truthy(&mount("client-ca")["readOnly"]),
                "the client CA ConfigMap mounted read-only at /client-ca"
            );
        } else {
            check!(
                checks,
                !has(&args, "/client-ca/ca.crt")
                    && client_ca.is_empty()
                    && !mounts.contains_key("client-ca"),
                "no client CA ConfigMap without clientCA"
            );
        }
        // The controller registers the webhooks from the mounted ConfigMap, or the chart renders
        // them; the serving pods never register.
        match &case.registered {
            Some(cm) if !is_serving => {
                check!(
                    checks,
                    flag_value(&args, "--register-webhooks") == Some("/webhooks/webhooks.yaml"),
                    "--register-webhooks /webhooks/webhooks.yaml"
                );
                check!(
                    checks,
                    mount("webhooks")["mountPath"] == "/webhooks"
                        && truthy(&mount("webhooks")["readOnly"])
                        && volume("webhooks")["configMap"]["name"] == cm["metadata"]["name"],
                    "the webhooks ConfigMap mounted read-only at /webhooks"
                );
            }
            registered => check!(
                checks,
                !has(&args, "--register-webhooks")
                    && !mounts.contains_key("webhooks")
                    && !volumes.contains_key("webhooks"),
                "Deployment {}: no --register-webhooks{}",
                plain(&dep["metadata"]["name"]),
                if registered.is_some() {
                    ""
                } else {
                    " (webhook.registration=chart)"
                }
            ),
        }
    }
}
