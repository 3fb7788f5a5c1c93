//! Checks of the chart's rendered manifests, run by integration/helm/lint.sh after it rendered
//! charts/poolguard for each of its cases into OUT/<case>.yaml:
//!
//!     chart_lint native OUT CASES...                  native admission objects, flags and RBAC
//!     chart_lint values CHART                         the chart README documents every value
//!     chart_lint manifests OUT NAMESPACE CHART CASES...  webhooks, Deployments, RBAC, mounts
//!     chart_lint conditions OUT CASES...              matchConditions and validating.extraRules
//!     chart_lint audit OUT NAMESPACE SAMPLE CASES...  the background audit and its report CRDs
//!     chart_lint monitoring OUT CHART CASES...        PrometheusRule, ServiceMonitor, dashboard
//!
//! Each prints `[helm-lint] FAIL: <case>: <what>` on stderr for every property that does not
//! hold (a file that cannot be read or parsed is one too) and exits 1 when there is any, 0
//! otherwise; 2 on a usage error. The manifests are read as JSON values, an absent field as null;
//! `manifests` reports a document that lacks a field the checks read (shape.rs) as malformed.

/// Records a failure of the current case ([`Checks`]) unless `$cond` holds; the message (format
/// arguments) is formatted only then.
macro_rules! check {
    ($checks:expr, $cond:expr, $($msg:tt)+) => {
        if !$cond {
            $checks.fail(format!($($msg)+));
        }
    };
}

mod audit;
mod conditions;
mod manifests;
mod monitoring;
mod native;
mod shape;
mod values;

use std::process::ExitCode;

use serde_json::Value;

const USAGE: &str = "usage: chart_lint native OUT CASES... | values CHART | \
manifests OUT NAMESPACE CHART CASES... | conditions OUT CASES... | \
audit OUT NAMESPACE SAMPLE_REPORT CASES... | monitoring OUT CHART CASES...";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (command, rest) = match args.split_first() {
        Some((command, rest)) => (command.as_str(), rest),
        None => return usage(),
    };
    let errors = match (command, rest) {
        ("native", [out, names @ ..]) => native::run(out, names),
        ("values", [chart]) => values::run(chart),
        ("manifests", [out, namespace, chart, names @ ..]) => {
            manifests::run(out, namespace, chart, names)
        }
        ("conditions", [out, names @ ..]) => conditions::run(out, names),
        ("audit", [out, namespace, sample, names @ ..]) => {
            audit::run(out, namespace, sample, names)
        }
        ("monitoring", [out, chart, names @ ..]) => monitoring::run(out, chart, names),
        _ => return usage(),
    };
    if errors {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

fn usage() -> ExitCode {
    eprintln!("{USAGE}");
    ExitCode::from(2)
}

/// The failures of one case, each recorded as `<case>: <what>`.
struct Checks<'a> {
    name: &'a str,
    errors: &'a mut Vec<String>,
}

impl Checks<'_> {
    fn fail(&mut self, msg: String) {
        self.errors.push(format!("{}: {msg}", self.name));
    }
}

/// Prints one FAIL line per error; true when there was any.
fn report(errors: &[String]) -> bool {
    for e in errors {
        eprintln!("[helm-lint] FAIL: {e}");
    }
    !errors.is_empty()
}

/// Every document of a YAML stream in order, an empty document as null.
fn parse_all(text: &str) -> Result<Vec<Value>, String> {
    let mut reader = text.as_bytes();
    let options = serde_saphyr::options! { with_snippet: false };
    serde_saphyr::read_with_options::<_, Value>(&mut reader, options)
        .map(|doc| doc.map_err(|e| e.to_string().lines().next().unwrap_or_default().to_string()))
        .collect()
}

/// The documents of a YAML file that are not empty, null, false, 0, "" or an empty collection.
fn load_truthy(path: &str) -> Result<Vec<Value>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{path}: {e}"))?;
    let docs = parse_all(&text).map_err(|e| format!("{path}: not YAML: {e}"))?;
    Ok(docs.into_iter().filter(truthy).collect())
}

/// The non-empty documents of a YAML text (`origin` names it in errors).
fn parse_truthy(text: &str, origin: &str) -> Result<Vec<Value>, String> {
    let docs = parse_all(text).map_err(|e| format!("{origin}: not YAML: {e}"))?;
    Ok(docs.into_iter().filter(truthy).collect())
}

/// Whether a value counts as true in a condition: not null, false, zero or empty.
fn truthy(v: &Value) -> bool {
    match v {
        Value::Null => false,
        Value::Bool(b) => *b,
        Value::Number(n) => n.as_f64().is_some_and(|f| f != 0.0),
        Value::String(s) => !s.is_empty(),
        Value::Array(a) => !a.is_empty(),
        Value::Object(o) => !o.is_empty(),
    }
}

/// How many items a value holds: the characters of a string, the entries of a list or map; 0
/// for anything else.
fn len(v: &Value) -> usize {
    match v {
        Value::String(s) => s.chars().count(),
        Value::Array(a) => a.len(),
        Value::Object(o) => o.len(),
        _ => 0,
    }
}

/// A value's elements when it is an array, else none.
fn arr(v: &Value) -> &[Value] {
    v.as_array().map(Vec::as_slice).unwrap_or(&[])
}

/// A string value's text, else "" (a missing name or kind matches nothing wanted).
fn text(v: &Value) -> &str {
    v.as_str().unwrap_or_default()
}

/// An array's elements as strings (a number or other scalar in its own words).
fn strings(v: &Value) -> Vec<String> {
    arr(v).iter().map(plain).collect()
}

/// Whether `v` is an array of exactly these strings, in this order.
fn is_strs(v: &Value, want: &[&str]) -> bool {
    let items = arr(v);
    v.is_array()
        && items.len() == want.len()
        && items.iter().zip(want).all(|(a, b)| a.as_str() == Some(*b))
}

/// Whether an array value holds `item` (a string).
fn has_str(v: &Value, item: &str) -> bool {
    arr(v).iter().any(|a| a.as_str() == Some(item))
}

/// The argument after the first `flag` in `args`, if any.
fn flag_value<'a>(args: &'a [String], flag: &str) -> Option<&'a str> {
    let i = args.iter().position(|a| a == flag)?;
    args.get(i + 1).map(String::as_str)
}

/// Whether `args` contain `flag`.
fn has(args: &[String], flag: &str) -> bool {
    args.iter().any(|a| a == flag)
}

/// A value as messages show it: strings quoted ('x'), null as None, booleans as True/False,
/// maps as {'k': v}, lists as ['a', 'b'].
fn repr(v: &Value) -> String {
    match v {
        Value::Null => "None".to_string(),
        Value::Bool(true) => "True".to_string(),
        Value::Bool(false) => "False".to_string(),
        Value::Number(n) => n.to_string(),
        Value::String(s) => quote(s),
        Value::Array(items) => {
            let items: Vec<String> = items.iter().map(repr).collect();
            format!("[{}]", items.join(", "))
        }
        Value::Object(map) => {
            let items: Vec<String> = map
                .iter()
                .map(|(k, v)| format!("{}: {}", quote(k), repr(v)))
                .collect();
            format!("{{{}}}", items.join(", "))
        }
    }
}

/// A value as it reads inside a message: strings bare, anything else as [`repr`].
fn plain(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => repr(other),
    }
}

/// A string quoted for a message: 'x', or "x" when it holds a ' and no ".
fn quote(s: &str) -> String {
    let q = if s.contains('\'') && !s.contains('"') {
        '"'
    } else {
        '\''
    };
    let mut out = String::with_capacity(s.len() + 2);
    out.push(q);
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c == q => {
                out.push('\\');
                out.push(c);
            }
            c => out.push(c),
        }
    }
    out.push(q);
    out
}

/// An optional string as messages show it: 'x' or None.
fn repr_opt(s: Option<&str>) -> String {
    s.map_or_else(|| "None".to_string(), quote)
}

/// A list of strings as messages show it: ['a', 'b'].
fn repr_list<S: AsRef<str>>(items: &[S]) -> String {
    let items: Vec<String> = items.iter().map(|s| quote(s.as_ref())).collect();
    format!("[{}]", items.join(", "))
}

/// A list of values as messages show it.
fn repr_values<'a>(items: impl IntoIterator<Item = &'a Value>) -> String {
    let items: Vec<String> = items.into_iter().map(repr).collect();
    format!("[{}]", items.join(", "))
}

/// A document's `kind`, or "" when it has none.
fn kind_of(d: &Value) -> &str {
    text(&d["kind"])
}

/// A document's `metadata.name`, or "".
fn name_of(d: &Value) -> &str {
    text(&d["metadata"]["name"])
}

/// Whether every `key: value` of `selector` (a label map) is among `labels`.
fn labels_match(selector: &Value, labels: &Value) -> bool {
    selector.as_object().is_none_or(|sel| {
        sel.iter()
            .all(|(k, v)| labels.get(k).unwrap_or(&Value::Null) == v)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn repr_reads_like_the_messages() {
        let v = json!({"a": [1, "x", null, true], "b": "it's"});
        assert_eq!(repr(&v), r#"{'a': [1, 'x', None, True], 'b': "it's"}"#);
        assert_eq!(repr_opt(None), "None");
        assert_eq!(repr_list(&["a", "b"]), "['a', 'b']");
    }

    #[test]
    fn truthiness() {
        for v in [
            json!(null),
            json!(false),
            json!(0),
            json!(""),
            json!([]),
            json!({}),
        ] {
            assert!(!truthy(&v), "{v}");
        }
        for v in [
            json!(true),
            json!(1),
            json!("x"),
            json!([0]),
            json!({"a": null}),
        ] {
            assert!(truthy(&v), "{v}");
        }
    }

    #[test]
    fn empty_documents_are_null() {
        let docs = parse_all("a: 1\n---\n# only a comment\n---\nb: [2]\n").unwrap();
        assert_eq!(docs.iter().filter(|d| !d.is_null()).count(), 2);
        assert!(parse_all("a: [\n").is_err());
    }

    #[test]
    fn flags() {
        let args: Vec<String> = ["serve", "--addr", "x", "--last"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        assert_eq!(flag_value(&args, "--addr"), Some("x"));
        assert_eq!(flag_value(&args, "--last"), None);
        assert_eq!(flag_value(&args, "--none"), None);
    }
}
