//! Gatekeeper ConstraintTemplates and Constraints, run unchanged as poolguard policies.
//!
//! Each constraint becomes one [`Policy`] named by the constraint: its template's Rego in a
//! prepared engine whose entry rule is `violation`, applying to the objects its `spec.match`
//! selects ([`Match`]). Its `spec.parameters` and `spec.enforcementAction` become the config's
//! `policies.<name>` settings ([`configure`]), so from there on a constraint is decided by the
//! same code as a SIT policy: [`crate::ruleset::RuleSet::evaluate`] with its rollouts,
//! dependencies, memo-free evaluation within the time limit, and the audit. The input is
//! Gatekeeper's: `input.review` (the AdmissionRequest, with `namespaceObject` when the
//! namespace is known) and `input.parameters`.

pub mod bodies;
pub mod constraint;
#[cfg(test)]
mod engine_differences;
pub mod lint;
pub mod template;

use std::collections::BTreeMap;
use std::path::PathBuf;

use anyhow::{bail, Result};
use serde_json::Value;

pub(crate) use constraint::Constraint;
pub(crate) use template::{CompiledTemplate, ConstraintTemplate};

use crate::config::Config;
use crate::policy::engine::ConstraintSource;
use crate::policy::Policy;

/// The templates and constraints of a set of files.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Documents {
    pub templates: Vec<ConstraintTemplate>,
    pub constraints: Vec<Constraint>,
}

/// Whether a parsed document is a ConstraintTemplate.
pub fn is_template(doc: &Value) -> bool {
    doc["kind"] == "ConstraintTemplate"
        && doc["apiVersion"]
            .as_str()
            .is_some_and(|v| v.starts_with("templates.gatekeeper.sh/"))
}

/// Reads every document of `files` (each a path and its YAML text, possibly several
/// documents): ConstraintTemplates and constraints; gator suites (`kind: Suite`) are skipped.
/// Anything else is an error naming the file.
pub fn read(files: &[(PathBuf, String)]) -> Result<Documents> {
    let mut out = Documents::default();
    for (path, text) in files {
        let origin = path.display().to_string();
        for (i, doc) in crate::documents::parse(text, &origin)?.iter().enumerate() {
            if doc["kind"] == "Suite" {
                // A gator suite kept beside its templates: not a rule.
                continue;
            }
            if is_template(doc) {
                out.templates.push(template::from_value(doc, path.clone())?);
            } else if constraint::is_constraint(doc) {
                out.constraints
                    .push(constraint::from_value(doc, path.clone())?);
            } else {
                bail!(
                    "{origin}: document {}: expected a ConstraintTemplate (templates.gatekeeper.sh) or a constraint (constraints.gatekeeper.sh), got apiVersion {} kind {}",
                    i + 1,
                    doc["apiVersion"],
                    doc["kind"]
                );
            }
        }
    }
    Ok(out)
}

/// Compiled constraints, and the warnings of their templates ([`lint::warnings`]).
pub struct Compiled {
    pub policies: Vec<Policy>,
    pub warnings: Vec<String>,
}

/// Compiles each template once and makes each constraint a policy cloning its template's
/// engine. A template that does not compile, two templates of one kind, a constraint whose
/// kind no template declares, or two constraints of one name: an error naming them.
pub fn compile(documents: &Documents) -> Result<Compiled> {
    compile_with(documents, Documents::default()).map(|(compiled, _)| compiled)
}

/// [`compile`] of `strict`, then of `tolerated` one document at a time: what of `tolerated`
/// would be an error is left out instead (a template with its constraints), with a warning
/// saying what and why. Also the constraints kept, `strict`'s then `tolerated`'s.
pub(crate) fn compile_with(
    strict: &Documents,
    tolerated: Documents,
) -> Result<(Compiled, Vec<Constraint>)> {
    let mut by_kind: BTreeMap<String, CompiledTemplate> = BTreeMap::new();
    let mut warnings = Vec::new();
    let mut left_out = Vec::new();
    let templates = strict.templates.iter().map(|t| (t, false));
    for (t, tolerant) in templates.chain(tolerated.templates.iter().map(|t| (t, true))) {
        let compiled = match by_kind.get(&t.kind) {
            Some(other) => Err(anyhow::anyhow!(
                "{}: template `{}` declares kind {}, as template `{}` of {} does",
                t.path.display(),
                t.name,
                t.kind,
                other.template.name,
                other.template.path.display()
            )),
            None => template::compile(t.clone()),
        };
        match compiled {
            Ok(compiled) => {
                warnings.extend(compiled.warnings.iter().cloned());
                by_kind.insert(t.kind.clone(), compiled);
            }
            Err(e) if tolerant => {
                warnings.push(format!("{e:#}; left out with its constraints"));
                left_out.push(t.kind.clone());
            }
            Err(e) => return Err(e),
        }
    }
    let mut policies: Vec<Policy> = Vec::new();
    let mut kept = Vec::new();
    let constraints = strict.constraints.iter().cloned().map(|c| (c, false));
    for (c, tolerant) in constraints.chain(tolerated.constraints.into_iter().map(|c| (c, true))) {
        let template = match by_kind.get(&c.kind) {
            None if tolerant && left_out.contains(&c.kind) => continue,
            None => Err(format!(
                "{}: constraint {} `{}`: no template declares kind {} (loaded: {})",
                c.path.display(),
                c.kind,
                c.name,
                c.kind,
                by_kind.keys().cloned().collect::<Vec<_>>().join(", ")
            )),
            Some(t) => match policies.iter().find(|p| p.name == c.name) {
                Some(same) => Err(format!(
                    "{}: constraint {} `{}` has the name of a constraint of {}; names must be unique",
                    c.path.display(),
                    c.kind,
                    c.name,
                    same.path.display()
                )),
                None => Ok(t),
            },
        };
        let t = match template {
            Ok(t) => t,
            Err(fault) if tolerant => {
                warnings.push(format!("{fault}; left out"));
                continue;
            }
            Err(fault) => bail!("{fault}"),
        };
        policies.push(Policy::constraint(
            c.name.clone(),
            c.path.clone(),
            t.engine.clone(),
            t.rule.clone(),
            &t.source,
            ConstraintSource {
                matching: c.matching.clone(),
                template: t.template.name.clone(),
                kind: t.template.kind.clone(),
                rego: t.template.rego.clone(),
                libs: t.template.libs.clone(),
                audited: c.audited,
            },
        ));
        kept.push(c);
    }
    Ok((Compiled { policies, warnings }, kept))
}

/// Reads `files` one at a time: one that does not read is left out, with a warning.
pub(crate) fn read_tolerant(files: &[(PathBuf, String)], warnings: &mut Vec<String>) -> Documents {
    let mut out = Documents::default();
    for file in files {
        match read(std::slice::from_ref(file)) {
            Ok(documents) => {
                out.templates.extend(documents.templates);
                out.constraints.extend(documents.constraints);
            }
            Err(e) => warnings.push(format!("{e:#}; left out")),
        }
    }
    out
}

/// Writes each constraint's parameters and enforcement into `config` as its
/// `policies.<name>` settings. The config may give a constraint a `rollout`, `dependencies`
/// and `ignorePending` (and pools may override its enforcement), but not cluster-wide
/// parameters or enforcement: those are the constraint's.
pub fn configure(config: &mut Config, constraints: &[Constraint]) -> Result<()> {
    for c in constraints {
        let settings = config.policies.entry(c.name.clone()).or_default();
        if settings.parameters.is_some() || settings.enforcement.is_some() {
            bail!(
                "at `policies.{}`: `{}` is a constraint ({}): its parameters and enforcement are its `spec.parameters` and `spec.enforcementAction`, not the config's",
                c.name,
                c.name,
                c.path.display()
            );
        }
        settings.parameters = Some(c.parameters.clone().into());
        settings.enforcement = Some(c.enforcement);
    }
    Ok(())
}

/// The Gatekeeper documents to load, each a file's path (or an object's origin) and its text.
#[derive(Debug, Clone, Copy, Default)]
pub struct Files<'a> {
    /// Must all load: what does not is one error naming the file and template or constraint
    /// (the caller keeps its last good set). A directory's files.
    pub strict: &'a [(PathBuf, String)],
    /// Load each on its own: a document that does not read, a template that does not compile
    /// (with its constraints) or a constraint that clashes is left out with a warning. The
    /// cluster's objects, which poolguard does not own.
    pub tolerated: &'a [(PathBuf, String)],
}

impl<'a> Files<'a> {
    /// `strict` files only.
    pub fn of(strict: &'a [(PathBuf, String)]) -> Files<'a> {
        Files {
            strict,
            tolerated: &[],
        }
    }
}
