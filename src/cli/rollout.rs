//! `poolguard rollout status|approve|pause|resume`: reads the rollout ConfigMap, or queues a
//! command in it for the audit's leader (which applies it at its next step, within seconds).

use std::io::Write;

use anyhow::{bail, Context, Result};
use kube::Client;

use crate::rollout::store::{self, Change, Location, Queued, COMMANDS};
use crate::wall_clock::unix_now;
use poolguard_core::rollout::{Command, RolloutState};

/// Prints every policy's rollout: a table, or the stored states as JSON.
pub async fn status(
    client: &Client,
    at: &Location,
    json: bool,
    out: &mut impl Write,
) -> Result<()> {
    let Some(contents) = store::read(client, at).await? else {
        writeln!(out, "no rollouts: {} does not exist", store::describe(at))?;
        return Ok(());
    };
    let states: Vec<(String, RolloutState)> = contents
        .policies()
        .into_iter()
        .filter_map(|p| contents.state(&p).map(|s| (p, s)))
        .collect();
    if json {
        let map: serde_json::Map<String, serde_json::Value> = states
            .iter()
            .map(|(p, s)| (p.clone(), serde_json::to_value(s).unwrap_or_default()))
            .collect();
        writeln!(out, "{}", serde_json::to_string_pretty(&map)?)?;
        return Ok(());
    }
    if states.is_empty() {
        writeln!(out, "no rollouts in {}", store::describe(at))?;
        return Ok(());
    }
    let now = unix_now();
    let mut rows = vec![[
        "POLICY", "VERSION", "GROUP", "STATUS", "FOR", "OBJECTS", "FAILURES", "REASON",
    ]
    .map(String::from)];
    for (policy, state) in &states {
        for g in &state.groups {
            rows.push([
                policy.clone(),
                state.version.clone(),
                g.name.clone(),
                format!(
                    "{:?}{}",
                    g.status,
                    if g.approved { " (approved)" } else { "" }
                ),
                humantime::format_duration(std::time::Duration::from_secs(
                    u64::try_from(now - g.since).unwrap_or(0),
                ))
                .to_string(),
                g.objects.to_string(),
                g.failures.to_string(),
                g.reason.clone(),
            ]);
        }
    }
    let mut widths = [0usize; 8];
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    for row in &rows {
        let mut line = String::new();
        for (i, cell) in row.iter().enumerate() {
            if i + 1 == row.len() {
                line.push_str(cell);
            } else {
                line.push_str(&format!("{cell:<width$}  ", width = widths[i]));
            }
        }
        writeln!(out, "{}", line.trim_end())?;
    }
    for (policy, state) in &states {
        let previous = match (&state.previous_version, state.previous_enforcement) {
            (Some(v), Some(e)) => format!("version {v} at {}", e.as_str()),
            _ => "none (a new policy: groups not reached yet observe in dryrun)".to_string(),
        };
        let paused = if state.is_paused() { "; PAUSED" } else { "" };
        writeln!(
            out,
            "{policy}: final enforcement {}; previous {previous}{paused}",
            state.final_enforcement.as_str()
        )?;
    }
    Ok(())
}

/// Queues `command` for `policy`; returns once it is stored.
pub async fn queue(client: &Client, at: &Location, policy: &str, command: Command) -> Result<()> {
    for _ in 0..5 {
        let contents = store::read(client, at).await?.unwrap_or_default();
        let Some(state) = contents.state(policy) else {
            bail!(
                "no rollout state for policy {policy:?} in {} (is the policy under a rollout, and is the audit running?)",
                store::describe(at)
            );
        };
        if let Command::Approve(group) = &command {
            if state.group(group).is_none() {
                let names: Vec<&str> = state.groups.iter().map(|g| g.name.as_str()).collect();
                bail!(
                    "policy {policy:?} has no rollout group {group:?} (groups: {})",
                    names.join(", ")
                );
            }
        }
        let mut queued = contents.commands(policy);
        queued.push(Queued {
            command: command.clone(),
            at: unix_now(),
        });
        let text = serde_json::to_string(&queued)?;
        let change = Change::Set(format!("{COMMANDS}{policy}"), text);
        if store::apply(client, at, &contents, &[change])
            .await
            .context("queueing the command")?
        {
            return Ok(());
        }
    }
    bail!("{} kept changing; try again", store::describe(at))
}
