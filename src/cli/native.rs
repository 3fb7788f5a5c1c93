//! `poolguard native`: the native admission objects the rules compile to, as YAML or written to
//! the cluster.

use std::io::Write;
use std::process::ExitCode;

use anyhow::Result;
use poolguard_core::documents;
use poolguard_core::native::{self, Options};

use crate::cluster::native_objects;
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

/// Writes the objects to the cluster ([`native_objects::sync`]) and says what it did.
pub async fn apply(
    sources: Sources,
    options: &Options,
    kubeconfig: Option<&std::path::Path>,
) -> Result<ExitCode> {
    let rules = sources.load()?;
    let generated = native::generate(&rules, options);
    let client = crate::app::kube_client(kubeconfig, "give --kubeconfig").await?;
    let synced = native_objects::sync(&client, &generated).await?;
    println!(
        "applied {} objects (field manager {}), deleted {}{}",
        synced.applied,
        native_objects::FIELD_MANAGER,
        synced.deleted.len(),
        if synced.deleted.is_empty() {
            String::new()
        } else {
            format!(": {}", synced.deleted.join(", "))
        }
    );
    for skipped in &generated.skipped {
        println!("on the webhook: {}: {}", skipped.what, skipped.why);
    }
    Ok(ExitCode::SUCCESS)
}
