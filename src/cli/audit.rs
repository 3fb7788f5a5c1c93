//! `poolguard audit`: the background audit's results, once, printed as a table, as JSON, or as
//! the policy reports (one per namespace) the background audit writes. Against the cluster (one
//! pass of the background audit's listing, without writing reports), or with `--manifests DIR`
//! for objects dumped from a cluster (`kubectl get pods,deployments,... -A -o yaml`), without
//! one. Either way every Pod and workload gets [`audit::audit`]'s results.

use poolguard_core::placement_policy::PoolSet;
use poolguard_core::scope::Scope;
use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use serde_json::Value;

use poolguard_core::audit::{self, AuditResult, Resource, Verdict};
use poolguard_core::documents;
use poolguard_core::namespaces::{NamespaceLabels, NodeLabels};
use poolguard_core::report::{self, ReportApi, Timestamp};
use poolguard_core::ruleset::RuleSet;

/// How results are printed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Output {
    /// One line per result: namespace, object, policy, result, message.
    Table,
    /// A JSON array of results.
    Json,
    /// The policy reports, one YAML document per namespace.
    Reports,
}

/// What the audit reads besides the rules.
pub struct Inputs<'a> {
    pub manifests: &'a Path,
    pub namespaces: &'a NamespaceLabels,
    pub nodes: Option<&'a NodeLabels>,
    /// The pools gathered from the nodes (placement policies choose among them).
    pub pools: Option<&'a PoolSet>,
}

/// How reports are written.
pub struct ReportOptions {
    pub api: ReportApi,
    pub max_results: usize,
    pub timestamp: Timestamp,
}

/// The results for every object in the manifest files.
pub fn manifests(inputs: &Inputs, rules: &RuleSet) -> Result<Vec<AuditResult>> {
    let mut results = Vec::new();
    for path in manifest_files(inputs.manifests)? {
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("reading {}", path.display()))?;
        let origin = path.display().to_string();
        for (i, doc) in documents::each::<Value>(&text).into_iter().enumerate() {
            let at = format!("{origin}: document {}", i + 1);
            match doc {
                Ok(Value::Null) => {}
                Ok(doc) => {
                    for (object, at) in poolguard_core::documents::objects(doc, &at) {
                        results.extend(audit_one(object, &at, inputs, rules));
                    }
                }
                Err(e) => results.push(unreadable(&at, &e)),
            }
        }
    }
    Ok(results)
}

/// Writes `results` to `out` (and, for reports, the results that belong to no namespace to
/// `err`). True when no result is `fail` or `error`.
pub fn print(
    results: &[AuditResult],
    output: Output,
    reports: &ReportOptions,
    out: &mut impl Write,
    err: &mut impl Write,
) -> Result<bool> {
    let mut printer = Printer::new(output, reports, out, err);
    printer.results(results)?;
    printer.finish()
}

/// Prints results a batch at a time (the cluster audit's namespace by namespace), so none is
/// held after it is printed: a table's columns are as wide as the widest cell of their batch,
/// JSON is one array, reports are one YAML document per namespace.
pub struct Printer<'a, O: Write, E: Write> {
    output: Output,
    reports: &'a ReportOptions,
    out: &'a mut O,
    err: &'a mut E,
    clean: bool,
    /// Nothing printed yet (no table header, no JSON array opened, no report).
    first: bool,
}

impl<'a, O: Write, E: Write> Printer<'a, O, E> {
    pub fn new(output: Output, reports: &'a ReportOptions, out: &'a mut O, err: &'a mut E) -> Self {
        Printer {
            output,
            reports,
            out,
            err,
            clean: true,
            first: true,
        }
    }

    /// Prints one batch.
    pub fn results(&mut self, results: &[AuditResult]) -> Result<()> {
        self.batch(results, false)
    }

    /// Prints the results of cluster-scoped objects (the cluster audit's last batch): as the
    /// cluster report in reports output, as [`Printer::results`] does otherwise.
    pub fn cluster_results(&mut self, results: &[AuditResult]) -> Result<()> {
        self.batch(results, true)
    }

    /// Prints one batch; `cluster`: of cluster-scoped objects, one cluster report in reports
    /// output.
    fn batch(&mut self, results: &[AuditResult], cluster: bool) -> Result<()> {
        if results.is_empty() {
            return Ok(());
        }
        self.clean &= !results
            .iter()
            .any(|r| matches!(r.result, Verdict::Fail | Verdict::Error));
        let first = std::mem::replace(&mut self.first, false);
        match self.output {
            Output::Table => table(results, first, self.out)?,
            Output::Json => {
                for (i, r) in results.iter().enumerate() {
                    let open = if first && i == 0 { "[\n" } else { ",\n" };
                    write!(self.out, "{open}")?;
                    serde_json::to_writer_pretty(&mut *self.out, r)?;
                }
            }
            Output::Reports => {
                let (api, at, max) = (
                    self.reports.api,
                    self.reports.timestamp,
                    self.reports.max_results,
                );
                let reports: Vec<report::Report> = if cluster {
                    report::cluster_report(results, api, at, max)
                        .into_iter()
                        .collect()
                } else {
                    report::reports(results, api, at, max)
                };
                for (i, report) in reports.iter().enumerate() {
                    if i > 0 || !first {
                        writeln!(self.out, "---")?;
                    }
                    write!(
                        self.out,
                        "{}",
                        documents::to_yaml(&serde_json::to_value(report)?)?
                    )?;
                }
                // A cluster batch is its report; otherwise objects without a namespace are in none.
                let outside = results
                    .iter()
                    .filter(|r| !cluster && r.resource.namespace.is_empty());
                for r in outside {
                    writeln!(
                        self.err,
                        "poolguard: {}: {} (in no report): {}",
                        r.result.as_str(),
                        object_name(&r.resource),
                        r.message
                    )?;
                }
                // Only results outside any namespace: the next report starts the output.
                if reports.is_empty() {
                    self.first = first;
                }
            }
        }
        Ok(())
    }

    /// Ends the output. True when no result was `fail` or `error`.
    pub fn finish(self) -> Result<bool> {
        match self.output {
            Output::Table if self.first => table(&[], true, self.out)?,
            Output::Json if self.first => writeln!(self.out, "[]")?,
            Output::Json => writeln!(self.out, "\n]")?,
            _ => {}
        }
        Ok(self.clean)
    }
}

/// Every `*.yaml`, `*.yml` and `*.json` file directly in `dir`, sorted (hidden files skipped).
fn manifest_files(dir: &Path) -> Result<Vec<PathBuf>> {
    let entries = std::fs::read_dir(dir)
        .with_context(|| format!("reading manifests directory {}", dir.display()))?;
    let mut paths = Vec::new();
    for entry in entries {
        let path = entry
            .with_context(|| format!("reading manifests directory {}", dir.display()))?
            .path();
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or(".");
        let manifest = [".yaml", ".yml", ".json"]
            .iter()
            .any(|ext| name.ends_with(ext));
        if manifest && !name.starts_with('.') && path.is_file() {
            paths.push(path);
        }
    }
    if paths.is_empty() {
        bail!(
            "{}: no *.yaml, *.yml or *.json files to audit",
            dir.display()
        );
    }
    paths.sort();
    Ok(paths)
}

fn audit_one(object: Value, at: &str, inputs: &Inputs, rules: &RuleSet) -> Vec<AuditResult> {
    if !object.is_object() {
        return vec![unreadable(at, "expected an object")];
    }
    if !(object["apiVersion"].is_string() && object["kind"].is_string()) {
        return vec![unreadable(at, "the object has no apiVersion or kind")];
    }
    let namespace = object["metadata"]["namespace"].as_str().unwrap_or_default();
    let scope = Scope {
        labels: inputs.namespaces.get(namespace),
        pools: inputs.pools,
        now: Some(crate::wall_clock::unix_now()),
    };
    audit::audit(&object, scope, inputs.nodes, rules)
}

/// The result for a document that cannot be audited, named after where it is.
fn unreadable(at: &str, reason: &str) -> AuditResult {
    AuditResult::unreadable(
        Resource {
            name: at.to_string(),
            ..Resource::default()
        },
        reason,
    )
}

fn object_name(resource: &Resource) -> String {
    if resource.kind.is_empty() {
        resource.name.clone()
    } else {
        format!("{}/{}", resource.kind, resource.name)
    }
}

/// Table rows for `results`, after the header when `header`.
fn table(results: &[AuditResult], header_too: bool, out: &mut impl Write) -> Result<()> {
    let header = ["NAMESPACE", "OBJECT", "POLICY", "RESULT", "MESSAGE"];
    let rows: Vec<[String; 5]> = results
        .iter()
        .map(|r| {
            [
                r.resource.namespace.clone(),
                object_name(&r.resource),
                r.policy.clone(),
                r.result.as_str().to_string(),
                r.message.clone(),
            ]
        })
        .collect();
    let mut widths = header.map(str::len);
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |cells: [&str; 5], out: &mut dyn Write| -> std::io::Result<()> {
        let mut text = String::new();
        for (i, cell) in cells.iter().enumerate().take(4) {
            text.push_str(&format!("{cell:<width$}  ", width = widths[i]));
        }
        text.push_str(cells[4]);
        writeln!(out, "{}", text.trim_end())
    };
    if header_too {
        line(header, out)?;
    }
    for row in &rows {
        line(
            [
                row[0].as_str(),
                row[1].as_str(),
                row[2].as_str(),
                row[3].as_str(),
                row[4].as_str(),
            ],
            out,
        )?;
    }
    Ok(())
}
