//! Namespace labels from a file of Namespace objects (no cluster needed).

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{bail, Context, Result};
use serde_json::Value;

use crate::documents;
use crate::placement::Labels;

/// Labels by namespace name.
pub type NamespaceLabels = BTreeMap<String, Labels>;

/// Namespace objects as YAML or JSON: a `v1 List`, several documents, or both.
pub fn parse_file_text(text: &str, origin: &str) -> Result<NamespaceLabels> {
    let mut out = NamespaceLabels::new();
    for (i, doc) in documents::parse(text, origin)?.into_iter().enumerate() {
        let at = format!("{origin}: document {}", i + 1);
        match doc["kind"].as_str() {
            Some("Namespace") => add(&mut out, &doc, &at)?,
            Some("List" | "NamespaceList") => {
                let Some(items) = doc["items"].as_array() else {
                    bail!("{at}: a List needs `items`");
                };
                for (j, item) in items.iter().enumerate() {
                    if item["kind"].as_str().is_some_and(|k| k != "Namespace") {
                        bail!(
                            "{at}: items[{j}]: expected a Namespace, got kind {}",
                            item["kind"]
                        );
                    }
                    add(&mut out, item, &format!("{at}: items[{j}]"))?;
                }
            }
            other => bail!("{at}: expected a Namespace or a v1 List of them, got kind {other:?}"),
        }
    }
    Ok(out)
}

fn add(out: &mut NamespaceLabels, ns: &Value, at: &str) -> Result<()> {
    let Some(name) = ns["metadata"]["name"].as_str().filter(|n| !n.is_empty()) else {
        bail!("{at}: the Namespace has no metadata.name");
    };
    let labels = match &ns["metadata"]["labels"] {
        Value::Null => Labels::new(),
        Value::Object(map) => map
            .iter()
            .map(|(k, v)| match v.as_str() {
                Some(s) => Ok((k.clone(), s.to_string())),
                None => bail!("{at}: label {k:?} of namespace {name:?} must be a string, got {v}"),
            })
            .collect::<Result<_>>()?,
        other => bail!("{at}: metadata.labels of namespace {name:?} must be a map, got {other}"),
    };
    if out.insert(name.to_string(), labels).is_some() {
        bail!("{at}: namespace {name:?} appears twice");
    }
    Ok(())
}

pub fn load_file(path: &Path) -> Result<NamespaceLabels> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading namespaces file {}", path.display()))?;
    parse_file_text(&text, &path.display().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn list_and_documents() {
        let text = r#"
apiVersion: v1
kind: List
items:
- apiVersion: v1
  kind: Namespace
  metadata: {name: mapped, labels: {agentpool: pool1}}
- metadata: {name: bare}
---
{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "gpu", "labels": {"agentpool": "gpu", "team": "ml"}}}
"#;
        let ns = parse_file_text(text, "ns.yaml").unwrap();
        assert_eq!(ns["mapped"]["agentpool"], "pool1");
        assert!(ns["bare"].is_empty());
        assert_eq!(ns["gpu"].len(), 2);
        assert_eq!(ns.len(), 3);
    }

    #[test]
    fn errors_table() {
        let cases = [
            ("kind: Pod\nmetadata: {name: x}\n", "expected a Namespace"),
            ("kind: Namespace\nmetadata: {}\n", "no metadata.name"),
            (
                "kind: Namespace\nmetadata: {name: a, labels: {x: 1}}\n",
                "must be a string",
            ),
            (
                "kind: Namespace\nmetadata: {name: a}\n---\nkind: Namespace\nmetadata: {name: a}\n",
                "appears twice",
            ),
            ("kind: List\nitems:\n- kind: Service\n", "items[0]"),
        ];
        for (text, want) in cases {
            let err = parse_file_text(text, "ns.yaml").unwrap_err().to_string();
            assert!(
                err.contains(want) && err.contains("ns.yaml"),
                "{text:?}: {err}"
            );
        }
    }
}
