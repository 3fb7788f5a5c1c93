//! A policy's version for rollouts: a short digest of what decides its answers — its Rego
//! text and every parameter the config gives it, cluster-wide and per pool. Enforcement and
//! rollout settings are left out, so changing them does not restart a rollout.

use std::fmt::Write as _;

use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::config::Config;

/// Hex digits in a version: 64 bits of SHA-256.
const VERSION_HEX_DIGITS: usize = 16;

/// The version of policy `policy` whose Rego is `rego_source`, under `config`: the first
/// 16 hex digits of a SHA-256 over the Rego (blank lines before its first line do not count,
/// so the padding a YAML template gets to keep line numbers does not either), the
/// cluster-wide parameters and each pool's, with object keys sorted so that reordering YAML
/// keys changes nothing.
pub(crate) fn policy_version(rego_source: &str, config: &Config, policy: &str) -> String {
    let mut hasher = Sha256::new();
    let mut field = |tag: &str, text: &str| {
        // Length-prefixed, so that no two different inputs hash the same stream.
        for part in [tag, text] {
            hasher.update((part.len() as u64).to_be_bytes());
            hasher.update(part.as_bytes());
        }
    };
    field("poolguard policy version", "1");
    field("rego", rego_source.trim_start_matches(['\n', '\r']));
    if let Some(params) = config
        .policies
        .get(policy)
        .and_then(|s| s.parameters.as_ref())
    {
        field("cluster", &canonical(&Value::Object(params.map().clone())));
    }
    for (pool, settings) in &config.pools {
        if let Some(params) = settings
            .policies
            .get(policy)
            .and_then(|s| s.parameters.as_ref())
        {
            field("pool", pool);
            field(
                "parameters",
                &canonical(&Value::Object(params.map().clone())),
            );
        }
    }
    let digest = hasher.finalize();
    let mut hex = String::with_capacity(VERSION_HEX_DIGITS);
    for byte in &digest[..VERSION_HEX_DIGITS / 2] {
        let _ = write!(hex, "{byte:02x}");
    }
    hex
}

/// JSON text with every object's keys in sorted order, whatever order the map keeps.
fn canonical(value: &Value) -> String {
    let mut out = String::new();
    write_canonical(value, &mut out);
    out
}

fn write_canonical(value: &Value, out: &mut String) {
    match value {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            out.push('{');
            for (i, key) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::from(key.as_str()).to_string());
                out.push(':');
                write_canonical(&map[key], out);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_canonical(item, out);
            }
            out.push(']');
        }
        scalar => out.push_str(&scalar.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const REGO: &str = "package p\ninfringement[{\"msg\": \"x\"}] { input.bad }\n";

    fn config(text: &str) -> Config {
        Config::parse(text, "t").unwrap()
    }

    fn version(text: &str) -> String {
        policy_version(REGO, &config(text), "p")
    }

    const BASE: &str = "policies:\n  p:\n    enforcement: deny\n    parameters: {repos: [a, b], mode: {x: 1, y: 2}}\npools:\n  gpu:\n    policies:\n      p:\n        parameters: {repos: [c]}\n";

    #[test]
    fn short_stable_hex() {
        let v = version(BASE);
        assert_eq!(v.len(), 16);
        assert!(v
            .chars()
            .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase()));
        assert_eq!(v, version(BASE));
    }

    #[test]
    fn what_changes_the_version() {
        let base = version(BASE);
        // (config, same version as BASE)
        let cases = [
            // Key order and YAML spelling do not matter.
            ("policies:\n  p:\n    parameters: {mode: {y: 2, x: 1}, repos: [a, b]}\n    enforcement: deny\npools:\n  gpu:\n    policies:\n      p:\n        parameters: {repos: [c]}\n", true),
            // Enforcement, here or per pool, does not.
            ("policies:\n  p:\n    enforcement: warn\n    parameters: {repos: [a, b], mode: {x: 1, y: 2}}\npools:\n  gpu:\n    policies:\n      p:\n        enforcement: dryrun\n        parameters: {repos: [c]}\n", true),
            // Nor a rollout spec, nor another policy's parameters, nor a pool without any.
            ("policies:\n  p:\n    parameters: {repos: [a, b], mode: {x: 1, y: 2}}\n    rollout: {groups: [{name: all}], minSuccessTime: 1m, progressDeadline: 1h}\n  q:\n    parameters: {z: 1}\npools:\n  gpu:\n    policies:\n      p:\n        parameters: {repos: [c]}\n  cpu:\n    policies:\n      p:\n        enforcement: warn\n", true),
            // A cluster-wide parameter does.
            ("policies:\n  p:\n    parameters: {repos: [a, b, d], mode: {x: 1, y: 2}}\npools:\n  gpu:\n    policies:\n      p:\n        parameters: {repos: [c]}\n", false),
            // Order inside a list does.
            ("policies:\n  p:\n    parameters: {repos: [b, a], mode: {x: 1, y: 2}}\npools:\n  gpu:\n    policies:\n      p:\n        parameters: {repos: [c]}\n", false),
            // A pool's parameter does, and so does which pool has it.
            ("policies:\n  p:\n    parameters: {repos: [a, b], mode: {x: 1, y: 2}}\npools:\n  gpu:\n    policies:\n      p:\n        parameters: {repos: [d]}\n", false),
            ("policies:\n  p:\n    parameters: {repos: [a, b], mode: {x: 1, y: 2}}\npools:\n  cpu:\n    policies:\n      p:\n        parameters: {repos: [c]}\n", false),
            ("policies:\n  p:\n    parameters: {repos: [a, b], mode: {x: 1, y: 2}}\n", false),
        ];
        for (text, same) in cases {
            assert_eq!(version(text) == base, same, "{text}");
        }
        let rego_changed = policy_version(&REGO.replace("bad", "worse"), &config(BASE), "p");
        assert_ne!(rego_changed, base);
        let padded = policy_version(&format!("\n\n\n{REGO}"), &config(BASE), "p");
        assert_eq!(
            padded, base,
            "leading blank lines (YAML template padding) do not count"
        );
        assert_ne!(policy_version(REGO, &config(BASE), "q"), base);
    }

    #[test]
    fn canonical_sorts_keys_at_every_depth() {
        let v: Value =
            serde_json::from_str(r#"{"b": [{"d": 1, "c": "x\"y"}], "a": null}"#).unwrap();
        assert_eq!(canonical(&v), r#"{"a":null,"b":[{"c":"x\"y","d":1}]}"#);
    }
}
