//! Constraints (`constraints.gatekeeper.sh`): an instance of a template's kind, with its
//! `spec.match`, `spec.parameters` and `spec.enforcementAction`.

use std::path::PathBuf;

use anyhow::{bail, Result};
use serde_json::{Map, Value};

use crate::config::Enforcement;
use crate::matching::Match;

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
    /// Whether the audit reports it, as Gatekeeper's audit does: always, unless its
    /// `enforcementAction` is `scoped` and no `scopedEnforcementActions` entry names the audit
    /// point (`audit.gatekeeper.sh`, or `*`).
    pub audited: bool,
    pub path: PathBuf,
}

/// Gatekeeper's `enforcementAction` as poolguard's enforcement: `deny` (the default), `warn`
/// and `dryrun` are the same words; `scoped` is read from `spec.scopedEnforcementActions` by
/// [`scoped`].
pub fn enforcement(action: Option<&str>) -> Result<Enforcement, String> {
    match action.unwrap_or("deny") {
        "deny" => Ok(Enforcement::Deny),
        "warn" => Ok(Enforcement::Warn),
        "dryrun" => Ok(Enforcement::Dryrun),
        "scoped" => Err("`scoped` needs `spec.scopedEnforcementActions`".to_string()),
        other => Err(format!(
            "expected deny, warn, dryrun or scoped, got `{other}`"
        )),
    }
}

/// The enforcement point of admission (Gatekeeper's validating webhook), which poolguard's
/// validating webhook takes the place of.
const ADMISSION_POINT: &str = "validation.gatekeeper.sh";
/// The enforcement point of Gatekeeper's audit, which poolguard's audit takes the place of.
const AUDIT_POINT: &str = "audit.gatekeeper.sh";

/// Whether an entry's `enforcementPoints` name `point` (or `*`).
fn names(points: &[Value], point: &str) -> bool {
    points
        .iter()
        .any(|p| p["name"].as_str().is_some_and(|n| n == point || n == "*"))
}

/// `enforcementAction: scoped`: the strictest action of `scopedEnforcementActions` whose
/// `enforcementPoints` name admission (`validation.gatekeeper.sh`, or `*`); none: `dryrun`
/// (an action for `audit.gatekeeper.sh` alone is a dry run at admission). Whether the audit
/// reports the constraint is [`Constraint::audited`]. Other points (`gator.gatekeeper.sh`,
/// `vap.k8s.io`) do not change what poolguard does.
pub fn scoped(actions: &Value) -> Result<Enforcement, String> {
    let Some(list) = actions.as_array().filter(|l| !l.is_empty()) else {
        return Err(
            "`scoped` needs `spec.scopedEnforcementActions`: a list of {action, enforcementPoints}"
                .to_string(),
        );
    };
    let mut strictest = Enforcement::Dryrun;
    for (i, entry) in list.iter().enumerate() {
        let action = match entry["action"].as_str() {
            Some(a @ ("deny" | "warn" | "dryrun")) => enforcement(Some(a))?,
            other => {
                return Err(format!(
                    "at `spec.scopedEnforcementActions[{i}].action`: expected deny, warn or dryrun, got {}",
                    other.map_or_else(|| entry["action"].to_string(), |a| format!("`{a}`"))
                ))
            }
        };
        let Some(points) = entry["enforcementPoints"].as_array() else {
            return Err(format!(
                "at `spec.scopedEnforcementActions[{i}].enforcementPoints`: expected a list of {{name}}"
            ));
        };
        let admission = names(points, ADMISSION_POINT);
        if admission && action.strength() > strictest.strength() {
            strictest = action;
        }
    }
    Ok(strictest)
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
    let enforcement = match action {
        Some("scoped") => scoped(&spec["scopedEnforcementActions"]),
        _ => enforcement(action).map_err(|e| format!("at `spec.enforcementAction`: {e}")),
    }
    .map_err(|e| anyhow::anyhow!("{origin}: {e}"))?;
    // Read once `scoped` above found the list well formed.
    let audited = action != Some("scoped")
        || spec["scopedEnforcementActions"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|entry| {
                entry["enforcementPoints"]
                    .as_array()
                    .is_some_and(|points| names(points, AUDIT_POINT))
            });
    Ok(Constraint {
        kind,
        name,
        matching,
        parameters,
        enforcement,
        audited,
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
            .contains("needs `spec.scopedEnforcementActions`"));
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
             "c.yaml: constraint K8sX `x`: at `spec.enforcementAction`: expected deny, warn, dryrun or scoped, got `block`"),
            (json!({"kind": "K8sX", "metadata": {"name": "x"}, "spec": {"enforcementAction": "scoped"}}),
             "c.yaml: constraint K8sX `x`: `scoped` needs `spec.scopedEnforcementActions`"),
            (json!({"kind": "K8sX", "metadata": {"name": "x"}, "spec": {"enforcementAction": "scoped",
                "scopedEnforcementActions": [{"action": "block", "enforcementPoints": [{"name": "*"}]}]}}),
             "c.yaml: constraint K8sX `x`: at `spec.scopedEnforcementActions[0].action`: expected deny, warn or dryrun, got `block`"),
            (json!({"kind": "K8sX", "metadata": {"name": "x"}, "spec": {"enforcementAction": "scoped",
                "scopedEnforcementActions": [{"action": "deny"}]}}),
             "c.yaml: constraint K8sX `x`: at `spec.scopedEnforcementActions[0].enforcementPoints`: expected a list of {name}"),
            (json!({"kind": "K8sX", "metadata": {"name": "x"}, "spec": {"match": {"kind": []}}}),
             "c.yaml: constraint K8sX `x`: at `spec.match.kind`: unknown field `kind`"),
        ];
        for (doc, want) in cases {
            let err = read(doc).unwrap_err().to_string();
            assert!(err.starts_with(want), "{err}");
        }
    }

    #[test]
    fn scoped_actions_take_the_strictest_for_admission() {
        let action = |entries: Value| scoped(&entries);
        let point = |name: &str| json!([{"name": name}]);
        // Admission named: its action.
        assert_eq!(
            action(
                json!([{"action": "warn", "enforcementPoints": point("validation.gatekeeper.sh")}])
            ),
            Ok(Enforcement::Warn)
        );
        // Audit only: a dry run at admission.
        assert_eq!(
            action(json!([{"action": "deny", "enforcementPoints": point("audit.gatekeeper.sh")}])),
            Ok(Enforcement::Dryrun)
        );
        // `*`, and several entries: the strictest that names admission.
        assert_eq!(
            action(json!([
                {"action": "warn", "enforcementPoints": point("validation.gatekeeper.sh")},
                {"action": "deny", "enforcementPoints": point("*")},
                {"action": "dryrun", "enforcementPoints": point("gator.gatekeeper.sh")},
            ])),
            Ok(Enforcement::Deny)
        );
        assert!(action(json!([])).is_err());
        let c = read(
            json!({"apiVersion": "constraints.gatekeeper.sh/v1beta1", "kind": "K8sX",
            "metadata": {"name": "x"}, "spec": {"enforcementAction": "scoped",
            "scopedEnforcementActions": [{"action": "warn", "enforcementPoints": [
                {"name": "audit.gatekeeper.sh"}, {"name": "validation.gatekeeper.sh"}]}]}}),
        )
        .unwrap();
        assert_eq!(c.enforcement, Enforcement::Warn);
        assert!(c.audited);
    }

    /// The audit reports a constraint unless its scoped actions name no audit point, as
    /// Gatekeeper's audit does.
    #[test]
    fn the_audit_reports_what_the_audit_point_is_given() {
        let audited = |spec: Value| {
            read(
                json!({"apiVersion": "constraints.gatekeeper.sh/v1beta1", "kind": "K8sX",
                "metadata": {"name": "x"}, "spec": spec}),
            )
            .unwrap()
            .audited
        };
        let scoped = |points: Value| {
            json!({"enforcementAction": "scoped",
                "scopedEnforcementActions": [{"action": "deny", "enforcementPoints": points}]})
        };
        assert!(audited(json!({})));
        assert!(audited(json!({"enforcementAction": "dryrun"})));
        assert!(audited(scoped(json!([{"name": "audit.gatekeeper.sh"}]))));
        assert!(audited(scoped(json!([{"name": "*"}]))));
        assert!(!audited(scoped(
            json!([{"name": "validation.gatekeeper.sh"}])
        )));
        assert!(!audited(scoped(json!([{"name": "gator.gatekeeper.sh"}]))));
    }
}
