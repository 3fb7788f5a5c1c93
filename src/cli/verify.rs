//! `poolguard verify`: gator-style suites of Gatekeeper templates and constraints, decided by
//! the same code as admission.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, Result};
use poolguard_core::gator::suite::{self, CaseResult};

/// Runs every suite (a `Suite` file, or a directory searched for `suite.yaml` files); prints
/// one line per disagreeing case (every case with `verbose`), each template's load error and
/// lint warnings, and a summary. 0 when every case agrees, 1 otherwise.
pub fn run(
    paths: &[PathBuf],
    verbose: bool,
    excepting: &suite::Excepting,
    out: &mut impl Write,
) -> Result<ExitCode> {
    let mut suites = Vec::new();
    for path in paths {
        find_suites(path, &mut suites)?;
    }
    if suites.is_empty() {
        anyhow::bail!("no suite found in {}", list(paths));
    }
    let read =
        |p: &Path| std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()));
    let (mut agree, mut disagree, mut skipped) = (0, 0, 0);
    let (mut loaded, mut failed) = (
        std::collections::BTreeSet::new(),
        std::collections::BTreeMap::new(),
    );
    let mut warned = std::collections::BTreeSet::new();
    for path in &suites {
        let text = read(path)?;
        let report = suite::run_with(&text, path, &read, excepting)?;
        let counts = report.counts();
        agree += counts.0;
        disagree += counts.1;
        skipped += counts.2;
        for test in &report.tests {
            match &test.load {
                Ok(()) if !test.skipped => {
                    loaded.insert(test.template.clone());
                }
                Ok(()) => {}
                Err(e) => {
                    failed.insert(test.template.clone(), e.clone());
                }
            }
            for w in &test.warnings {
                if warned.insert(w.clone()) {
                    writeln!(out, "# lint: {w}")?;
                }
            }
            for case in &test.cases {
                let at = format!("{} / {} / {}", report.name, test.name, case.name);
                match (&case.result, &test.load) {
                    (CaseResult::Agrees, _) if verbose => writeln!(out, "ok   {at}")?,
                    (CaseResult::Skipped, _) if verbose => writeln!(out, "skip {at}")?,
                    (CaseResult::Disagrees(why), Ok(())) => writeln!(out, "FAIL {at}: {why}")?,
                    _ => {}
                }
            }
        }
    }
    for (template, e) in &failed {
        // The error names the template's file.
        loaded.remove(template);
        writeln!(out, "LOAD {e}")?;
    }
    writeln!(
        out,
        "{} suite{}; templates: {} loaded, {} not; cases: {agree} agree, {disagree} disagree, {skipped} skipped",
        suites.len(),
        if suites.len() == 1 { "" } else { "s" },
        loaded.len(),
        failed.len()
    )?;
    Ok(if disagree == 0 && failed.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

fn list(paths: &[PathBuf]) -> String {
    paths
        .iter()
        .map(|p| p.display().to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

/// `path` itself when it is a file; under a directory, every `suite.yaml`, in name order.
fn find_suites(path: &Path, out: &mut Vec<PathBuf>) -> Result<()> {
    let meta = std::fs::metadata(path).with_context(|| format!("reading {}", path.display()))?;
    if !meta.is_dir() {
        out.push(path.to_path_buf());
        return Ok(());
    }
    let mut entries: Vec<PathBuf> = std::fs::read_dir(path)
        .with_context(|| format!("reading {}", path.display()))?
        .map(|e| e.map(|e| e.path()))
        .collect::<std::io::Result<_>>()
        .with_context(|| format!("reading {}", path.display()))?;
    entries.sort();
    for entry in entries {
        if entry.is_dir() {
            find_suites(&entry, out)?;
        } else if entry.file_name().is_some_and(|n| n == "suite.yaml") {
            out.push(entry);
        }
    }
    Ok(())
}
