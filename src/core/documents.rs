//! Reading YAML or JSON files that hold one or several documents.

use anyhow::{anyhow, Result};
use serde::Deserialize;
use serde_json::Value;

/// Every non-empty document in `text` (YAML, which includes JSON), as JSON values.
/// `origin` names the source in errors.
pub fn parse(text: &str, origin: &str) -> Result<Vec<Value>> {
    let mut out = Vec::new();
    for (i, doc) in serde_yaml::Deserializer::from_str(text).enumerate() {
        let value =
            Value::deserialize(doc).map_err(|e| anyhow!("{origin}: document {}: {e}", i + 1))?;
        if !value.is_null() {
            out.push(value);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn several_documents_json_and_empty_ones() {
        let docs = parse("a: 1\n---\n---\n{\"b\": [2]}\n", "t").unwrap();
        assert_eq!(docs, vec![json!({"a": 1}), json!({"b": [2]})]);
        assert!(parse("", "t").unwrap().is_empty());
    }

    #[test]
    fn errors_name_origin_and_document() {
        let err = parse("a: 1\n---\nb: [\n", "f.yaml")
            .unwrap_err()
            .to_string();
        assert!(err.contains("f.yaml: document 2"), "{err}");
    }
}
