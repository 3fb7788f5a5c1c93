//! Every metric that the alerting rules (`charts/poolguard/files/alerts.rules.yaml`: each rule's
//! `expr`, in every group) and the Grafana dashboard (`charts/poolguard/files/grafana-dashboard.json`:
//! each panel's targets' `expr`, nested panels included, and each `query` variable's query) read
//! is one poolguard exports.
//!
//! The exported names come from the registry poolguard serves on /metrics (`Metrics::new()`,
//! encoded as the scrape is): every family it declares (`# TYPE`), with or without samples yet,
//! gives its sample names by type (counter: `NAME_total`; histogram: `NAME_bucket`, `NAME_count`,
//! `NAME_sum`; gauge and unknown: `NAME`). In the expressions, every name that starts with
//! `poolguard_` is checked (recording rules are named `poolguard:...`, Prometheus's own `up` is
//! not poolguard's). A failure names each unknown metric and where it is read; the check fails too
//! when it finds no expression, or no `poolguard_` name in them, so it cannot pass vacuously.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use serde_json::Value;

use poolguard::telemetry::metrics::Metrics;

const RULES: &str = "charts/poolguard/files/alerts.rules.yaml";
const DASHBOARD: &str = "charts/poolguard/files/grafana-dashboard.json";
const BOGUS: &str = "poolguard_no_such_metric";

fn read(path: &str) -> String {
    let full = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(path);
    std::fs::read_to_string(&full).unwrap_or_else(|e| panic!("{}: {e}", full.display()))
}

/// The sample names the encoded registry (OpenMetrics text) declares.
fn exported(encoded: &str) -> Result<BTreeSet<String>, String> {
    let mut names = BTreeSet::new();
    for line in encoded.lines() {
        let parts: Vec<&str> = line.split_whitespace().collect();
        let [_, _, family, kind] = parts[..] else {
            continue;
        };
        if parts[..2] != ["#", "TYPE"] {
            continue;
        }
        let suffixes: &[&str] = match kind {
            "counter" => &["_total"],
            "histogram" => &["_bucket", "_count", "_sum"],
            "gauge" | "unknown" => &[""],
            other => {
                return Err(format!(
                    "/metrics: family {family} has type {other}, which this check does not know"
                ))
            }
        };
        names.extend(suffixes.iter().map(|s| format!("{family}{s}")));
    }
    if names.is_empty() {
        return Err("/metrics: no # TYPE line: not an OpenMetrics scrape".to_string());
    }
    Ok(names)
}

fn is_name_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}

/// The matches of `poolguard_[A-Za-z0-9_]+` in `expr` not preceded by `[A-Za-z0-9_:]`.
fn metric_names(expr: &str) -> Vec<&str> {
    const PREFIX: &[u8] = b"poolguard_";
    let bytes = expr.as_bytes();
    let mut names = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        let preceded = i > 0 && (is_name_byte(bytes[i - 1]) || bytes[i - 1] == b':');
        if !preceded && bytes[i..].starts_with(PREFIX) {
            let rest = bytes[i + PREFIX.len()..]
                .iter()
                .take_while(|b| is_name_byte(**b))
                .count();
            if rest > 0 {
                let end = i + PREFIX.len() + rest;
                names.push(&expr[i..end]);
                i = end;
                continue;
            }
        }
        i += 1;
    }
    names
}

/// One expression and where it is read (file and alert/record, panel or variable).
struct Expr {
    place: String,
    text: String,
}

fn field<'a>(value: &'a Value, key: &str, place: &str) -> Result<&'a Value, String> {
    value.get(key).ok_or_else(|| format!("{place}: no `{key}`"))
}

fn array<'a>(value: &'a Value, key: &str, place: &str) -> Result<&'a Vec<Value>, String> {
    field(value, key, place)?
        .as_array()
        .ok_or_else(|| format!("{place}: `{key}` is not a list"))
}

fn string<'a>(value: &'a Value, key: &str, place: &str) -> Result<&'a str, String> {
    field(value, key, place)?
        .as_str()
        .ok_or_else(|| format!("{place}: `{key}` is not a string"))
}

/// Every rule's `expr`, in every group.
fn rule_exprs(rules: &Value) -> Result<Vec<Expr>, String> {
    let mut exprs = Vec::new();
    for group in array(rules, "groups", RULES)? {
        for rule in array(group, "rules", RULES)? {
            let name = match (rule.get("alert"), rule.get("record")) {
                (Some(Value::String(alert)), _) => format!("alert {alert}"),
                (_, Some(Value::String(record))) => format!("record {record}"),
                _ => {
                    return Err(format!(
                        "{RULES}: a rule with neither alert nor record: {rule}"
                    ))
                }
            };
            let place = format!("{RULES}: {name}");
            let text = string(rule, "expr", &place)?.to_string();
            exprs.push(Expr { place, text });
        }
    }
    Ok(exprs)
}

/// Every panel's targets' `expr` (nested panels included) and every `query` variable's query.
fn dashboard_exprs(dashboard: &Value) -> Result<Vec<Expr>, String> {
    fn panels(items: &[Value], exprs: &mut Vec<Expr>) -> Result<(), String> {
        for panel in items {
            let title = string(panel, "title", &format!("{DASHBOARD}: a panel"))?;
            let place = format!("{DASHBOARD}: panel {title:?}");
            if panel.get("targets").is_some() {
                for target in array(panel, "targets", &place)? {
                    let text = string(target, "expr", &place)?.to_string();
                    let place = place.clone();
                    exprs.push(Expr { place, text });
                }
            }
            if panel.get("panels").is_some() {
                panels(array(panel, "panels", &place)?, exprs)?;
            }
        }
        Ok(())
    }
    let mut exprs = Vec::new();
    panels(array(dashboard, "panels", DASHBOARD)?, &mut exprs)?;
    let variables = dashboard
        .get("templating")
        .and_then(|t| t.get("list"))
        .and_then(Value::as_array);
    for variable in variables.into_iter().flatten() {
        if variable.get("type").and_then(Value::as_str) != Some("query") {
            continue;
        }
        let name = string(variable, "name", &format!("{DASHBOARD}: a variable"))?;
        let query = match variable.get("query") {
            Some(Value::Object(query)) => query.get("query").and_then(Value::as_str),
            Some(query) => query.as_str(),
            None => None,
        };
        if let Some(text) = query.filter(|q| !q.is_empty()) {
            let place = format!("{DASHBOARD}: variable {name}");
            let text = text.to_string();
            exprs.push(Expr { place, text });
        }
    }
    Ok(exprs)
}

/// A metric an expression reads that poolguard does not export.
#[derive(Debug, PartialEq, Eq)]
struct Unknown {
    place: String,
    name: String,
}

impl fmt::Display for Unknown {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: {} is not exported by poolguard",
            self.place, self.name
        )
    }
}

/// What the check found: how many expressions, which `poolguard_` names they read (and in which
/// file), and the references to names not in `exported`.
struct Checked {
    expressions: usize,
    read: BTreeMap<String, BTreeSet<&'static str>>,
    unknown: Vec<Unknown>,
}

/// Checks the rules' and the dashboard's expressions against the exported names. Err when a file
/// does not parse or has not the expected shape, or when nothing at all would be checked.
fn check(rules: &str, dashboard: &str, exported: &BTreeSet<String>) -> Result<Checked, String> {
    let rules: Value =
        poolguard_core::documents::parse_one(rules, RULES).map_err(|e| format!("{e:#}"))?;
    let dashboard: Value =
        serde_json::from_str(dashboard).map_err(|e| format!("{DASHBOARD}: {e}"))?;
    let exprs = [
        (RULES, rule_exprs(&rules)?),
        (DASHBOARD, dashboard_exprs(&dashboard)?),
    ];
    let mut checked = Checked {
        expressions: 0,
        read: BTreeMap::new(),
        unknown: Vec::new(),
    };
    for (file, exprs) in exprs {
        if exprs.is_empty() {
            return Err(format!("{file}: no expression found"));
        }
        checked.expressions += exprs.len();
        for expr in exprs {
            for name in metric_names(&expr.text) {
                checked
                    .read
                    .entry(name.to_string())
                    .or_default()
                    .insert(file);
                if !exported.contains(name) {
                    checked.unknown.push(Unknown {
                        place: expr.place.clone(),
                        name: name.to_string(),
                    });
                }
            }
        }
    }
    if checked.read.is_empty() {
        return Err(
            "no poolguard_ metric is read at all: the files are not what this check expects"
                .to_string(),
        );
    }
    Ok(checked)
}

fn exported_by_poolguard() -> BTreeSet<String> {
    exported(&Metrics::new().encode()).unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn every_metric_the_rules_and_the_dashboard_read_is_exported() {
    let exported = exported_by_poolguard();
    let checked =
        check(&read(RULES), &read(DASHBOARD), &exported).unwrap_or_else(|e| panic!("{e}"));
    for (name, files) in &checked.read {
        let files: Vec<&str> = files.iter().copied().collect();
        eprintln!("[metrics] {name}: read by {}", files.join(", "));
    }
    eprintln!(
        "[metrics] {} expressions read {} poolguard metrics ({} exported sample names), {} \
         references to metrics poolguard does not export",
        checked.expressions,
        checked.read.len(),
        exported.len(),
        checked.unknown.len()
    );
    let unknown: Vec<String> = checked.unknown.iter().map(ToString::to_string).collect();
    assert!(unknown.is_empty(), "\n{}", unknown.join("\n"));
}

#[test]
fn a_metric_poolguard_does_not_export_is_named_where_it_is_read() {
    let exported = exported_by_poolguard();
    let (rules_text, dashboard_text) = (read(RULES), read(DASHBOARD));

    // One rule's expression altered (the rules passed on as JSON, which is YAML too).
    let mut rules: Value = poolguard_core::documents::parse_one(&rules_text, RULES).unwrap();
    let rule = &mut rules["groups"][0]["rules"][0];
    let place = format!("{RULES}: alert {}", rule["alert"].as_str().unwrap());
    let expr = rule["expr"].as_str().unwrap().to_string();
    rule["expr"] = Value::from(format!("{expr} or {BOGUS}"));
    let checked = check(&rules.to_string(), &dashboard_text, &exported).unwrap();
    let expected = Unknown {
        place: place.clone(),
        name: BOGUS.to_string(),
    };
    assert_eq!(checked.unknown, [expected]);
    assert_eq!(
        checked.unknown[0].to_string(),
        format!("{place}: {BOGUS} is not exported by poolguard")
    );

    // The dashboard's `job` variable (a query given as an object) altered.
    let mut dashboard: Value = serde_json::from_str(&dashboard_text).unwrap();
    let variable = dashboard["templating"]["list"]
        .as_array_mut()
        .unwrap()
        .iter_mut()
        .find(|v| v["name"] == "job")
        .unwrap();
    variable["query"]["query"] = Value::from(format!("label_values({BOGUS}, job)"));
    let checked = check(&rules_text, &dashboard.to_string(), &exported).unwrap();
    let expected = Unknown {
        place: format!("{DASHBOARD}: variable job"),
        name: BOGUS.to_string(),
    };
    assert_eq!(checked.unknown, [expected]);

    // Nothing to check is a failure, not a pass.
    let err = check("groups: []", &dashboard_text, &exported)
        .err()
        .unwrap();
    assert_eq!(err, format!("{RULES}: no expression found"));
}

#[test]
fn names_are_taken_as_prometheus_reads_them() {
    let expr = "sum(rate(poolguard_a_total[5m])) / poolguard:ratio5m + up{job=\"poolguard\"} \
                + x_poolguard_b + poolguard_ + (poolguard_c_bucket)";
    assert_eq!(
        metric_names(expr),
        ["poolguard_a_total", "poolguard_c_bucket"]
    );
    let encoded = "# HELP poolguard_x X.\n# TYPE poolguard_x counter\n\
                   # TYPE poolguard_h histogram\n# TYPE poolguard_g gauge\n# EOF\n";
    let names: Vec<String> = exported(encoded).unwrap().into_iter().collect();
    assert_eq!(
        names,
        [
            "poolguard_g",
            "poolguard_h_bucket",
            "poolguard_h_count",
            "poolguard_h_sum",
            "poolguard_x_total"
        ]
    );
    assert_eq!(
        exported("# TYPE poolguard_s stateset\n").unwrap_err(),
        "/metrics: family poolguard_s has type stateset, which this check does not know"
    );
}
