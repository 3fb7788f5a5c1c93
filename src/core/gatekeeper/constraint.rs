//! Constraints (`constraints.gatekeeper.sh`): an instance of a template's kind, with its
//! `spec.match`, `spec.parameters` and `spec.enforcementAction`.

use std::path::PathBuf;

use anyhow::{bail, Result};
use serde_json::{Map, Value};

use super::matching::Match;
use crate::config::Enforcement;

/// The API group of constraints.
pub const GROUP: &str = "constraints.gatekeeper.sh";

/// One constraint as read.
#[derive(Debug, Clone, PartialEq)]
pub struct Constraint {
    /// Its kind: the template's `spec.crd.spec.names.kind`.
    pub kind: String,
    /// `metadata.name`: the policy's name in poolguard (config, metrics, audit, rollouts).
    pub name: String,
    pub matching: Match,
    pub parameters: Map<String, Value>,
    pub enforcement: Enforcement,
    pub path: PathBuf,
}

/// Gatekeeper's `enforcementAction` as poolguard's enforcement: `deny` (the default), `warn`
/// and `dryrun` are the same words; `scoped` is not supported yet.
pub fn enforcement(action: Option<&str>) -> Result<Enforcement, String> {
    match action.unwrap_or("deny") {
        "deny" => Ok(Enforcement::Deny),
        "warn" => Ok(Enforcement::Warn),
        "dryrun" => Ok(Enforcement::Dryrun),
        "scoped" => Err(
            "`scoped` (scopedEnforcementActions) is not supported yet; use deny, warn or dryrun"
                .to_string(),
        ),
        other => Err(format!("expected deny, warn or dryrun, got `{other}`")),
    }
}

/// Whether a parsed document is a constraint (its apiVersion is in [`GROUP`]).
pub fn is_constraint(doc: &Value) -> bool {
    doc["apiVersion"]
        .as_str()
        .is_some_and(|v| v.split('/').next() == Some(GROUP))
}

/// Reads a constraint document (already parsed from YAML).
pub fn from_value(doc: &Value, path: PathBuf) -> Result<Constraint> {
    let origin = path.display().to_string();
    let kind = doc["kind"]
        .as_str()
        .filter(|k| !k.is_empty())
        .ok_or_else(|| anyhow::anyhow!("{origin}: constraint without `kind`"))?
        .to_string();
    let name = doc["metadata"]["name"]
        .as_str()
        .filter(|k| !k.is_empty())
        .ok_or_else(|| anyhow::anyhow!("{origin}: {kind} constraint without `metadata.name`"))?
        .to_string();
    let origin = format!("{origin}: constraint {kind} `{name}`");
    let spec = &doc["spec"];
    let matching: Match = match &spec["match"] {
        Value::Null => Match::default(),
        m => serde_path_to_error::deserialize(m).map_err(|e| {
            anyhow::anyhow!("{origin}: at `spec.match.{}`: {}", e.path(), e.inner())
        })?,
    };
    matching
        .validate()
        .map_err(|e| anyhow::anyhow!("{origin}: {e}"))?;
    let parameters = match &spec["parameters"] {
        Value::Null => Map::new(),
        Value::Object(m) => m.clone(),
        other => bail!("{origin}: at `spec.parameters`: expected an object, got {other}"),
    };
    let action = match &spec["enforcementAction"] {
        Value::Null => None,
        Value::String(s) => Some(s.as_str()),
        other => bail!("{origin}: at `spec.enforcementAction`: expected a string, got {other}"),
    };
    let enforcement = enforcement(action)
        .map_err(|e| anyhow::anyhow!("{origin}: at `spec.enforcementAction`: {e}"))?;
    Ok(Constraint {
        kind,
        name,
        matching,
        parameters,
        enforcement,
        path,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn read(doc: Value) -> Result<Constraint> {
        from_value(&doc, "c.yaml".into())
    }

    #[test]
    fn enforcement_actions_map_onto_poolguards() {
        assert_eq!(enforcement(None), Ok(Enforcement::Deny));
        assert_eq!(enforcement(Some("deny")), Ok(Enforcement::Deny));
        assert_eq!(enforcement(Some("warn")), Ok(Enforcement::Warn));
        assert_eq!(enforcement(Some("dryrun")), Ok(Enforcement::Dryrun));
        assert!(enforcement(Some("scoped"))
            .unwrap_err()
            .contains("not supported yet"));
        assert!(enforcement(Some("Deny"))
            .unwrap_err()
            .contains("got `Deny`"));
    }

    #[test]
    fn constraints_read_and_bad_ones_are_named() {
        let c = read(
            json!({"apiVersion": "constraints.gatekeeper.sh/v1beta1", "kind": "K8sX",
            "metadata": {"name": "x"}, "spec": {"enforcementAction": "warn", "parameters": {"a": 1},
            "match": {"kinds": [{"apiGroups": [""], "kinds": ["Pod"]}]}}}),
        )
        .unwrap();
        assert_eq!((c.kind.as_str(), c.name.as_str()), ("K8sX", "x"));
        assert_eq!(c.enforcement, Enforcement::Warn);
        assert_eq!(c.parameters["a"], 1);
        assert_eq!(c.matching.kinds.len(), 1);
        let cases = [
            (json!({"kind": "K8sX"}), "c.yaml: K8sX constraint without `metadata.name`"),
            (json!({"metadata": {"name": "x"}}), "c.yaml: constraint without `kind`"),
            (json!({"kind": "K8sX", "metadata": {"name": "x"}, "spec": {"parameters": [1]}}),
             "c.yaml: constraint K8sX `x`: at `spec.parameters`: expected an object, got [1]"),
            (json!({"kind": "K8sX", "metadata": {"name": "x"}, "spec": {"enforcementAction": "block"}}),
             "c.yaml: constraint K8sX `x`: at `spec.enforcementAction`: expected deny, warn or dryrun, got `block`"),
            (json!({"kind": "K8sX", "metadata": {"name": "x"}, "spec": {"match": {"kind": []}}}),
             "c.yaml: constraint K8sX `x`: at `spec.match.kind`: unknown field `kind`"),
        ];
        for (doc, want) in cases {
            let err = read(doc).unwrap_err().to_string();
            assert!(err.starts_with(want), "{err}");
        }
    }
}
