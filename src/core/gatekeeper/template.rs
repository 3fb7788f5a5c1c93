//! ConstraintTemplates: their YAML (`templates.gatekeeper.sh`), and their Rego compiled once
//! into a prepared engine that each of the template's constraints clones.

use std::path::PathBuf;

use anyhow::{bail, Result};
use regorus::{Engine, Value as RegoValue};
use serde_json::Value;

use super::{bodies, lint};
use crate::policy::engine::{add_source, new_engine, prepare};

/// The entry rule of every template: a set of `{"msg": ..., "details": ...}`.
pub(crate) const RULE: &str = "violation";

/// The target every template is written for.
pub(crate) const ADMISSION_TARGET: &str = "admission.k8s.gatekeeper.sh";

/// One ConstraintTemplate as read.
#[derive(Debug, Clone, PartialEq)]
pub struct ConstraintTemplate {
    /// `metadata.name`.
    pub name: String,
    /// `spec.crd.spec.names.kind`: the kind of its constraints.
    pub kind: String,
    pub rego: String,
    pub libs: Vec<String>,
    pub path: PathBuf,
}

/// A template compiled: its engine, prepared, and the `violation` rule's path.
#[derive(Clone)]
pub struct CompiledTemplate {
    pub template: ConstraintTemplate,
    pub engine: Engine,
    pub rule: String,
    /// The template's Rego and libs as one text: what versions its constraints.
    pub source: String,
    /// Constructs whose result regorus and OPA may disagree on ([`lint::warnings`]).
    pub warnings: Vec<String>,
}

fn text<'a>(value: &'a Value, at: &str, origin: &str) -> Result<&'a str> {
    let pointer = format!("/{}", at.replace(['.', '['], "/").replace(']', ""));
    match value.pointer(&pointer) {
        Some(Value::String(s)) => Ok(s),
        Some(other) => bail!("{origin}: at `{at}`: expected a string, got {other}"),
        None => bail!("{origin}: `{at}` is missing"),
    }
}

/// Reads a ConstraintTemplate document (already parsed from YAML).
pub fn from_value(doc: &Value, path: PathBuf) -> Result<ConstraintTemplate> {
    let origin = path.display().to_string();
    let name = text(doc, "metadata.name", &origin)?.to_string();
    let origin = format!("{origin}: template `{name}`");
    let kind = text(doc, "spec.crd.spec.names.kind", &origin)?.to_string();
    let targets = doc["spec"]["targets"]
        .as_array()
        .map_or(&[][..], Vec::as_slice);
    let [target] = targets else {
        bail!(
            "{origin}: expected exactly one entry in `spec.targets`, found {}",
            targets.len()
        );
    };
    if let Some(name) = target["target"].as_str() {
        if name != ADMISSION_TARGET {
            bail!("{origin}: at `spec.targets[0].target`: expected `{ADMISSION_TARGET}`, got `{name}`");
        }
    }
    let strings = |v: &Value, at: &str| -> Result<Vec<String>> {
        match v {
            Value::Null => Ok(Vec::new()),
            Value::Array(items) => items
                .iter()
                .map(|i| {
                    i.as_str()
                        .map(String::from)
                        .ok_or_else(|| anyhow::anyhow!("{origin}: at `{at}`: expected strings"))
                })
                .collect(),
            _ => bail!("{origin}: at `{at}`: expected a list of strings"),
        }
    };
    // `code` with engine Rego (newer templates; other engines, such as CEL, are skipped), else
    // `rego` and `libs` on the target.
    let rego_code = target["code"]
        .as_array()
        .and_then(|code| code.iter().position(|c| c["engine"] == "Rego"));
    let (rego, libs) = match rego_code {
        Some(i) => {
            let source = &target["code"][i]["source"];
            let at = format!("spec.targets[0].code[{i}].source");
            (
                text(source, "rego", &format!("{origin}: at `{at}`"))?.to_string(),
                strings(&source["libs"], &format!("{at}.libs"))?,
            )
        }
        None if target["rego"].is_string() => (
            target["rego"].as_str().unwrap_or_default().to_string(),
            strings(&target["libs"], "spec.targets[0].libs")?,
        ),
        None => bail!(
            "{origin}: no Rego: neither `spec.targets[0].rego` nor a `code` entry with engine Rego (only Rego templates run in poolguard)"
        ),
    };
    Ok(ConstraintTemplate {
        name,
        kind,
        rego,
        libs,
        path,
    })
}

/// Compiles a template: its libs and Rego into one engine, prepared by a first evaluation.
/// Every error is one line naming the file and template: Rego that does not compile, a
/// template without `violation`, one that reads `data.inventory` (referential policies, which
/// poolguard does not provide), or a construct regorus would read differently from OPA
/// ([`lint::errors`]).
pub fn compile(template: ConstraintTemplate) -> Result<CompiledTemplate> {
    let origin = format!("{}: template `{}`", template.path.display(), template.name);
    // Multi-body v0 rules written out one rule per body, as OPA reads them.
    let expanded: Vec<String> = std::iter::once(&template.rego)
        .chain(&template.libs)
        .map(|r| bodies::expand(r).0)
        .collect();
    let all = expanded.iter();
    if all.clone().any(|r| r.contains("data.inventory")) {
        bail!("{origin} needs data.inventory (referential data, which poolguard does not provide)");
    }
    for (i, rego) in all.clone().enumerate() {
        let part = if i == 0 {
            "rego".to_string()
        } else {
            format!("libs[{}]", i - 1)
        };
        if let Some(error) = lint::errors(rego).into_iter().next() {
            bail!("{origin} ({part}): {error}");
        }
    }
    let mut engine = new_engine()?;
    for (i, lib) in expanded[1..].iter().enumerate() {
        add_source(
            &mut engine,
            format!("{}#libs[{i}]", template.name),
            lib.clone(),
        )
        .map_err(|e| anyhow::anyhow!("{origin} does not compile (libs[{i}]): {}", one_line(&e)))?;
    }
    let package = add_source(&mut engine, template.name.clone(), expanded[0].clone())
        .map_err(|e| anyhow::anyhow!("{origin} does not compile: {}", one_line(&e)))?;
    let declared = engine
        .has_declared_rule_rooted_at(&template.name, RULE)
        .map_err(|e| anyhow::anyhow!("{origin}: {e}"))?;
    if !declared {
        bail!("{origin} declares no `{RULE}` rule");
    }
    let rule = format!("{package}.{RULE}");
    // A first evaluation prepares the engine for every clone, and surfaces unknown functions.
    let mut input = RegoValue::new_object();
    if let Ok(map) = input.as_object_mut() {
        map.insert(RegoValue::from("review"), RegoValue::new_object());
        map.insert(RegoValue::from("parameters"), RegoValue::new_object());
    }
    engine.set_input(input);
    prepare(&mut engine, &rule)
        .map_err(|e| anyhow::anyhow!("{origin} does not compile: {}", one_line(&e)))?;
    let source = std::iter::once(&template.rego)
        .chain(&template.libs)
        .cloned()
        .collect::<Vec<_>>()
        .join("\n---\n");
    let at = origin.as_str();
    let warnings = std::iter::once(&template.rego)
        .chain(&template.libs)
        .enumerate()
        .flat_map(|(i, r)| {
            let part = if i == 0 {
                "rego".to_string()
            } else {
                format!("libs[{}]", i - 1)
            };
            lint::warnings(r)
                .into_iter()
                .map(move |w| format!("{at} ({part}): {w}"))
        })
        .collect();
    Ok(CompiledTemplate {
        template,
        engine,
        rule,
        source,
        warnings,
    })
}

/// An error's text on one line: regorus reports `--> file:line:col`, the source line under a
/// caret, then `error: why`; that is `file:line:col: why` here.
fn one_line(e: &dyn std::fmt::Display) -> String {
    let text = e.to_string();
    let lines: Vec<&str> = text.lines().map(str::trim).collect();
    let at = lines.iter().find_map(|l| l.strip_prefix("--> "));
    let why = lines.iter().find_map(|l| l.strip_prefix("error: "));
    match (at, why) {
        (Some(at), Some(why)) => format!("{at}: {why}"),
        _ => lines
            .iter()
            .filter(|l| !l.is_empty())
            .copied()
            .collect::<Vec<_>>()
            .join(" "),
    }
}
