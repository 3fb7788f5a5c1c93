//! Namespace labels from the text of Namespace objects (a namespaces file, or `kubectl get
//! namespaces -o yaml|json` output); node labels from Node objects the same way.

use std::collections::BTreeMap;

use anyhow::{bail, Result};
use serde::de::value::MapAccessDeserializer;
use serde::de::{IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;
use serde_json::Value;

use crate::labels::Labels;

/// Labels by namespace name.
pub type NamespaceLabels = BTreeMap<String, Labels>;

/// Labels by node name.
pub type NodeLabels = BTreeMap<String, Labels>;

/// The parts of a Namespace, or of a List of them, that count; everything else in the file
/// (annotations, spec, status, …) is skipped while parsing, never held in memory.
#[derive(Deserialize)]
struct Document {
    kind: Option<String>,
    #[serde(default)]
    metadata: Metadata,
    items: Option<Vec<Shape>>,
}

/// A document or a List's item as found: an object, or what it is instead (for the error).
enum Shape {
    Object(Document),
    Other(&'static str),
}

impl<'de> Deserialize<'de> for Shape {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Shape, D::Error> {
        deserializer.deserialize_any(ShapeVisitor)
    }
}

struct ShapeVisitor;

impl<'de> Visitor<'de> for ShapeVisitor {
    type Value = Shape;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("an object")
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Shape, A::Error> {
        Document::deserialize(MapAccessDeserializer::new(map)).map(Shape::Object)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Shape, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(Shape::Other(
            "a sequence (a list of items rather than an object)",
        ))
    }

    fn visit_str<E: serde::de::Error>(self, _: &str) -> Result<Shape, E> {
        Ok(Shape::Other("a string"))
    }

    fn visit_bool<E: serde::de::Error>(self, _: bool) -> Result<Shape, E> {
        Ok(Shape::Other("a boolean"))
    }

    fn visit_i64<E: serde::de::Error>(self, _: i64) -> Result<Shape, E> {
        Ok(Shape::Other("a number"))
    }

    fn visit_u64<E: serde::de::Error>(self, _: u64) -> Result<Shape, E> {
        Ok(Shape::Other("a number"))
    }

    fn visit_f64<E: serde::de::Error>(self, _: f64) -> Result<Shape, E> {
        Ok(Shape::Other("a number"))
    }

    fn visit_unit<E: serde::de::Error>(self) -> Result<Shape, E> {
        Ok(Shape::Other("null"))
    }
}

#[derive(Deserialize, Default)]
struct Metadata {
    name: Option<String>,
    /// Checked to be strings below, for an error that names the namespace.
    labels: Option<BTreeMap<String, Value>>,
}

/// Namespace objects as YAML or JSON: a `v1 List`, several documents, or both. JSON (what
/// `kubectl get namespaces -o json` prints) is read as a stream; the YAML reader holds a whole
/// document's parse events at once, several times the size of its text.
pub fn parse_file_text(text: &str, origin: &str) -> Result<NamespaceLabels> {
    parse_labels(text, origin, "Namespace")
}

/// Node objects (`kubectl get nodes -o yaml|json`), read as [`parse_file_text`] reads
/// namespaces: their names and labels.
pub fn parse_nodes_text(text: &str, origin: &str) -> Result<NodeLabels> {
    parse_labels(text, origin, "Node")
}

/// Names and labels of the objects of `kind` (cluster-scoped, so names are unique) in `text`.
fn parse_labels(text: &str, origin: &str, kind: &str) -> Result<BTreeMap<String, Labels>> {
    let list_kind = format!("{kind}List");
    let docs: Box<dyn Iterator<Item = Result<Option<Shape>, String>>> =
        if text.trim_start().starts_with('{') {
            Box::new(
                serde_json::Deserializer::from_str(text)
                    .into_iter::<Shape>()
                    .map(|d| d.map(Some).map_err(|e| e.to_string())),
            )
        } else {
            Box::new(crate::documents::each::<Option<Shape>>(text).into_iter())
        };
    let expected = format!("expected a {kind} or a v1 List of them");
    let mut out = NamespaceLabels::new();
    for (i, doc) in docs.enumerate() {
        let at = format!("{origin}: document {}", i + 1);
        let doc = match doc {
            Ok(Some(Shape::Object(doc))) => doc,
            Ok(None) => continue, // an empty document
            Ok(Some(Shape::Other(found))) => bail!("{at}: {expected}, found {found}"),
            Err(e) => bail!("{at}: {e}"),
        };
        match doc.kind.as_deref() {
            Some(k) if k == kind => add(&mut out, doc.metadata, &at, kind)?,
            Some(k) if k == "List" || k == list_kind => {
                let Some(items) = doc.items else {
                    bail!("{at}: a List needs `items`");
                };
                for (j, item) in items.into_iter().enumerate() {
                    let at = format!("{at}: items[{j}]");
                    let item = match item {
                        Shape::Object(item) => item,
                        Shape::Other(found) => bail!("{at}: expected a {kind}, found {found}"),
                    };
                    if let Some(other) = item.kind.as_deref().filter(|k| *k != kind) {
                        bail!("{at}: expected a {kind}, found kind {other}");
                    }
                    add(&mut out, item.metadata, &at, kind)?;
                }
            }
            Some(other) => bail!("{at}: {expected}, found kind {other}"),
            None => bail!("{at}: {expected}, found an object without `kind`"),
        }
    }
    Ok(out)
}

fn add(out: &mut BTreeMap<String, Labels>, meta: Metadata, at: &str, kind: &str) -> Result<()> {
    let noun = kind.to_lowercase();
    let Some(name) = meta.name.filter(|n| !n.is_empty()) else {
        bail!("{at}: the {kind} has no metadata.name");
    };
    let labels = meta
        .labels
        .unwrap_or_default()
        .into_iter()
        .map(|(k, v)| match v {
            Value::String(s) => Ok((k, s)),
            other => bail!("{at}: label {k:?} of {noun} {name:?} must be a string, got {other}"),
        })
        .collect::<Result<Labels>>()?;
    if out.contains_key(&name) {
        bail!("{at}: {noun} {name:?} appears twice");
    }
    out.insert(name, labels);
    Ok(())
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
    fn json_stream_as_kubectl_prints_it() {
        let text = r#"{"apiVersion": "v1", "kind": "List", "items": [
  {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "mapped", "labels": {"agentpool": "pool1"},
   "annotations": {"big": "ignored"}, "managedFields": [{"manager": "kubectl"}]}, "spec": {"finalizers": ["kubernetes"]}},
  {"metadata": {"name": "bare"}}
]}
{"kind": "Namespace", "metadata": {"name": "gpu", "labels": {"agentpool": "gpu"}}}
"#;
        let ns = parse_file_text(text, "ns.json").unwrap();
        assert_eq!(
            ns["mapped"],
            Labels::from([("agentpool".into(), "pool1".into())])
        );
        assert!(ns["bare"].is_empty());
        assert_eq!(ns["gpu"]["agentpool"], "gpu");
        assert_eq!(ns.len(), 3);
    }

    #[test]
    fn nodes_as_kubectl_prints_them() {
        let text = r#"
apiVersion: v1
kind: List
items:
- apiVersion: v1
  kind: Node
  metadata: {name: node-a, labels: {agentpool: pool1, kubernetes.io/os: linux}}
  status: {capacity: {cpu: "2"}}
---
kind: NodeList
items:
- metadata: {name: node-b}
"#;
        let nodes = parse_nodes_text(text, "nodes.yaml").unwrap();
        assert_eq!(nodes["node-a"]["agentpool"], "pool1");
        assert!(nodes["node-b"].is_empty());
        let err = parse_nodes_text("kind: Namespace\nmetadata: {name: a}\n", "nodes.yaml")
            .unwrap_err()
            .to_string();
        assert!(err.contains("expected a Node or a v1 List"), "{err}");
        let err = parse_nodes_text(
            "kind: Node\nmetadata: {name: a}\n---\nkind: Node\nmetadata: {name: a}\n",
            "nodes.yaml",
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("node \"a\" appears twice"), "{err}");
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
            ("{\"kind\": \"Namespace\", \"metadata\": {}}", "no metadata.name"),
            ("{\"kind\": \"List\", \"items\": []} {\"kind\": \"Namespace\", \"metadata\": {\"name\": 1}}", "document 2"),
            ("{\"kind\": \"List\", \"items\": [}", "document 1"),
            (
                "metadata: {name: a}\n",
                "document 1: expected a Namespace or a v1 List of them, found an object without `kind`",
            ),
            (
                "kind: Pod\nmetadata: {name: x}\n",
                "expected a Namespace or a v1 List of them, found kind Pod",
            ),
            (
                "- kind: Namespace\n  metadata: {name: a}\n",
                "document 1: expected a Namespace or a v1 List of them, found a sequence",
            ),
            (
                "[{\"kind\": \"Namespace\", \"metadata\": {\"name\": \"a\"}}]",
                "document 1: expected a Namespace or a v1 List of them, found a sequence",
            ),
            ("just text\n", "found a string"),
            ("kind: List\nitems:\n- [a]\n", "items[0]: expected a Namespace, found a sequence"),
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
