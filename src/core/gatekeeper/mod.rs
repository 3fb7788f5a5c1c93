//! Gatekeeper ConstraintTemplates and Constraints, run unchanged as poolguard policies.
//!
//! Each constraint becomes one [`Policy`] named by the constraint: its template's Rego in a
//! prepared engine whose entry rule is `violation`, applying to the objects its `spec.match`
//! selects ([`Match`]). Its `spec.parameters` and `spec.enforcementAction` become the config's
//! `policies.<name>` settings ([`configure`]), so from there on a constraint is decided by the
//! same code as a SIT policy: [`crate::policy::PolicySet::evaluate`] with its rollouts,
//! dependencies, memo-free evaluation within the time limit, and the audit. The input is
//! Gatekeeper's: `input.review` (the AdmissionRequest, with `namespaceObject` when the
//! namespace is known) and `input.parameters`.

pub mod bodies;
pub mod constraint;
#[cfg(test)]
mod decisions;
#[cfg(test)]
mod engine_differences;
pub mod lint;
pub(crate) mod matching;
pub(crate) mod namespace_object;
pub mod review;
pub mod suite;
pub mod template;

use std::collections::BTreeMap;
use std::path::PathBuf;

use anyhow::{bail, Result};
use serde_json::Value;

pub(crate) use constraint::Constraint;
pub(crate) use template::{CompiledTemplate, ConstraintTemplate};

use crate::config::Config;
use crate::policy::engine::ConstraintSource;
use crate::policy::{Policy, PolicySet};

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
    let mut by_kind: BTreeMap<&str, CompiledTemplate> = BTreeMap::new();
    let mut warnings = Vec::new();
    for t in &documents.templates {
        if let Some(other) = by_kind.get(t.kind.as_str()) {
            bail!(
                "{}: template `{}` declares kind {}, as template `{}` of {} does",
                t.path.display(),
                t.name,
                t.kind,
                other.template.name,
                other.template.path.display()
            );
        }
        let compiled = template::compile(t.clone())?;
        warnings.extend(compiled.warnings.iter().cloned());
        by_kind.insert(&t.kind, compiled);
    }
    let mut policies: Vec<Policy> = Vec::new();
    for c in &documents.constraints {
        let Some(t) = by_kind.get(c.kind.as_str()) else {
            bail!(
                "{}: constraint {} `{}`: no template declares kind {} (loaded: {})",
                c.path.display(),
                c.kind,
                c.name,
                c.kind,
                by_kind.keys().copied().collect::<Vec<_>>().join(", ")
            );
        };
        if let Some(same) = policies.iter().find(|p| p.name == c.name) {
            bail!(
                "{}: constraint {} `{}` has the name of a constraint of {}; names must be unique",
                c.path.display(),
                c.kind,
                c.name,
                same.path.display()
            );
        }
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
            },
        ));
    }
    Ok(Compiled { policies, warnings })
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

/// The rule set of `config` with the SIT policies `sit`, the placement policies `placement`
/// and the Gatekeeper documents of `files`: one error naming the file and template or
/// constraint when something does not load (the caller keeps its last good set). Also the
/// templates' lint warnings.
pub fn rules(
    mut config: Config,
    sit: PolicySet,
    placement: crate::placement_policy::PlacementSet,
    files: &[(PathBuf, String)],
    origin: &str,
) -> Result<(crate::ruleset::RuleSet, Vec<String>)> {
    let documents = read(files)?;
    let compiled = compile(&documents)?;
    configure(&mut config, &documents.constraints).map_err(|e| anyhow::anyhow!("{origin}: {e}"))?;
    let policies = PolicySet::with_constraints(sit, compiled.policies)?;
    let rules = crate::ruleset::RuleSet::new(config, policies, placement, origin)?;
    Ok((rules, compiled.warnings))
}
