//! The PrometheusRule: absent without the monitoring.coreos.com/v1 API (every case but
//! prometheusrule) or when turned off; with it, the chart's rules file itself (one source) with
//! prometheusRule.job in up's selector, and a ServiceMonitor that names its job after the chart
//! (what the rules select) and scrapes the serving pods and the controller. The Grafana dashboard
//! ConfigMap likewise holds the dashboard file, only when enabled.

use serde_json::Value;

use super::{arr, kind_of, load_truthy, name_of, parse_all, report, repr, text};

/// Whether a ServiceMonitor's selector (matchLabels, and matchExpressions of operator In only)
/// selects these labels.
fn selected(selector: &Value, labels: &Value) -> bool {
    if !super::labels_match(&selector["matchLabels"], labels) {
        return false;
    }
    arr(&selector["matchExpressions"]).iter().all(|e| {
        e["operator"] == "In"
            && arr(&e["values"]).contains(labels.get(text(&e["key"])).unwrap_or(&Value::Null))
    })
}

/// The ServiceMonitor and PrometheusRule of the prometheusrule case; only that case has them.
fn prometheus_rule(
    name: &str,
    docs: &[Value],
    chart: &str,
    rules_text: &Result<String, String>,
    fail: &mut impl FnMut(String),
) {
    let rules: Vec<&Value> = docs
        .iter()
        .filter(|d| kind_of(d) == "PrometheusRule")
        .collect();
    if name != "prometheusrule" {
        if !rules.is_empty() {
            let why = if name == "prometheusrule-off" {
                "prometheusRule.enabled=false"
            } else {
                "no monitoring.coreos.com/v1 API"
            };
            fail(format!("a PrometheusRule is rendered ({why})"));
        }
        return;
    }
    let [rule] = rules.as_slice() else {
        fail(format!("{} PrometheusRules, want 1", rules.len()));
        return;
    };
    let want = match rules_text {
        Ok(t) => parse_all(&t.replace(r#"job="poolguard""#, r#"job="pg-metrics""#))
            .map(|docs| docs.into_iter().next().unwrap_or(Value::Null))
            .map_err(|e| format!("{chart}/files/alerts.rules.yaml: not YAML: {e}")),
        Err(e) => Err(e.clone()),
    };
    match want {
        Ok(want) if rule["spec"] == want => {}
        Ok(_) => fail(format!(
            r#"the PrometheusRule's spec is not {chart}/files/alerts.rules.yaml with job="pg-metrics""#
        )),
        Err(e) => fail(e),
    }
    let labels = &rule["metadata"]["labels"];
    if rule["apiVersion"] != "monitoring.coreos.com/v1" || labels["release"] != "prometheus" {
        fail(format!(
            "apiVersion {}, labels {}",
            super::plain(&rule["apiVersion"]),
            repr(labels)
        ));
    }
    let alerts: Vec<String> = arr(&rule["spec"]["groups"])
        .iter()
        .flat_map(|g| arr(&g["rules"]))
        .filter(|r| r.get("alert").is_some())
        .map(|r| super::plain(&r["alert"]))
        .collect();
    let monitors: Vec<&Value> = docs
        .iter()
        .filter(|d| kind_of(d) == "ServiceMonitor")
        .collect();
    if monitors
        .first()
        .is_none_or(|m| m["spec"]["jobLabel"] != "app.kubernetes.io/name")
    {
        fail("the ServiceMonitor does not name its job by app.kubernetes.io/name".into());
    }
    // It scrapes both operations ports: the serving pods' (job poolguard, what the rules select)
    // and the controller's (job poolguard-controller: registration, certificates, audit).
    let selector = monitors
        .first()
        .map_or(&Value::Null, |m| &m["spec"]["selector"]);
    let mut scraped: Vec<(String, String)> = docs
        .iter()
        .filter(|d| kind_of(d) == "Service" && selected(selector, &d["metadata"]["labels"]))
        .map(|d| {
            (
                super::plain(&d["metadata"]["labels"]["app.kubernetes.io/name"]),
                super::plain(&d["spec"]["selector"]["app.kubernetes.io/name"]),
            )
        })
        .collect();
    scraped.sort();
    let want = [
        ("poolguard", "poolguard"),
        ("poolguard-controller", "poolguard-controller"),
    ];
    if scraped.len() != want.len()
        || scraped
            .iter()
            .zip(want)
            .any(|((job, pods), (want_job, want_pods))| job != want_job || pods != want_pods)
    {
        let scraped: Vec<String> = scraped
            .iter()
            .map(|(job, pods)| format!("({}, {})", super::quote(job), super::quote(pods)))
            .collect();
        fail(format!(
            "the ServiceMonitor scrapes (job, pods) [{}], want the serving pods and the controller",
            scraped.join(", ")
        ));
    }
    eprintln!(
        "[helm-lint] prometheusrule: {} alerts: {}",
        alerts.len(),
        alerts.join(", ")
    );
}

/// The dashboard ConfigMap: only when asked for, the dashboard file itself, with the sidecar's
/// label, in grafanaDashboard.namespace.
fn dashboard(
    name: &str,
    docs: &[Value],
    chart: &str,
    dashboard: &Result<Value, String>,
    fail: &mut impl FnMut(String),
) {
    let maps: Vec<&Value> = docs
        .iter()
        .filter(|d| kind_of(d) == "ConfigMap" && name_of(d).ends_with("-grafana-dashboard"))
        .collect();
    if name != "grafana-dashboard" {
        if !maps.is_empty() {
            fail("a Grafana dashboard ConfigMap although grafanaDashboard.enabled is false".into());
        }
        return;
    }
    let [cm] = maps.as_slice() else {
        fail(format!("{} dashboard ConfigMaps, want 1", maps.len()));
        return;
    };
    let rendered: Result<Value, String> = serde_json::from_str(text(&cm["data"]["poolguard.json"]))
        .map_err(|e| format!("the ConfigMap's poolguard.json is not JSON: {e}"));
    match (&rendered, dashboard) {
        (Ok(rendered), Ok(file)) if rendered == file => {}
        (Ok(_), Ok(_)) => fail(format!(
            "the ConfigMap's poolguard.json is not {chart}/files/grafana-dashboard.json"
        )),
        (Err(e), _) | (_, Err(e)) => fail(e.clone()),
    }
    let meta = &cm["metadata"];
    if meta["labels"]["grafana_dashboard"] != "1" || meta["namespace"] != "monitoring" {
        fail(format!(
            "labels {}, namespace {}",
            repr(&meta["labels"]),
            super::plain(&meta["namespace"])
        ));
    }
}

pub fn run(out: &str, chart: &str, names: &[String]) -> bool {
    let mut errors = Vec::new();
    let rules_path = format!("{chart}/files/alerts.rules.yaml");
    let rules_text = std::fs::read_to_string(&rules_path).map_err(|e| format!("{rules_path}: {e}"));
    let dashboard_path = format!("{chart}/files/grafana-dashboard.json");
    let dashboard_file = std::fs::read_to_string(&dashboard_path)
        .map_err(|e| format!("{dashboard_path}: {e}"))
        .and_then(|t| {
            serde_json::from_str::<Value>(&t)
                .map_err(|e| format!("{dashboard_path}: not JSON: {e}"))
        });
    let mut cases = Vec::new();
    for name in names {
        match load_truthy(&format!("{out}/{name}.yaml")) {
            Ok(docs) => cases.push((name, docs)),
            Err(e) => errors.push(format!("{name}: {e}")),
        }
    }
    for (name, docs) in &cases {
        let mut fail = |msg: String| errors.push(format!("{name}: {msg}"));
        prometheus_rule(name, docs, chart, &rules_text, &mut fail);
    }
    for (name, docs) in &cases {
        let mut fail = |msg: String| errors.push(format!("{name}: {msg}"));
        dashboard(name, docs, chart, &dashboard_file, &mut fail);
    }
    report(&errors)
}
