//! `poolguard native`: the native admission objects the rules compile to, as YAML.

use std::io::Write;
use std::process::ExitCode;

use anyhow::Result;
use poolguard_core::documents;
use poolguard_core::native::{self, Options};

use crate::sources::Sources;

/// Prints every generated object as a YAML document, then what stays on the webhook as
/// comments.
pub fn print(sources: Sources, options: &Options, out: &mut impl Write) -> Result<ExitCode> {
    let rules = sources.load()?;
    let generated = native::generate(&rules, options);
    for object in &generated.objects {
        writeln!(out, "---")?;
        write!(out, "{}", documents::to_yaml(object)?)?;
    }
    for skipped in &generated.skipped {
        writeln!(out, "# on the webhook: {}: {}", skipped.what, skipped.why)?;
    }
    Ok(ExitCode::SUCCESS)
}
