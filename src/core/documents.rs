//! YAML (which includes JSON) text: one document with errors that name the field's path, or a
//! stream of several documents. Every YAML read of poolguard goes through here (serde-saphyr:
//! pure Rust, with depth and size budgets against hostile input, duplicate keys refused).

use anyhow::{anyhow, Result};
use serde::de::DeserializeOwned;
use serde_json::Value;

fn options() -> serde_saphyr::Options {
    // One-line errors: no source snippet under the message.
    serde_saphyr::options! { with_snippet: false }
}

/// One document; errors read `origin: at `path.to.field`: reason`.
pub fn parse_one<T: DeserializeOwned>(text: &str, origin: &str) -> Result<T> {
    let mut path = String::new();
    serde_saphyr::with_deserializer_from_str_with_options(text, options(), |de| {
        serde_path_to_error::deserialize(de).map_err(|e| {
            path = e.path().to_string();
            e.into_inner()
        })
    })
    .map_err(|e| {
        let reason = in_users_words(e.to_string().lines().next().unwrap_or_default());
        // The path as far as it is known (a key the parser could not read shows as `?`).
        let path = path.trim_end_matches('?').trim_end_matches('.');
        if path.is_empty() {
            anyhow!("{origin}: {reason}")
        } else {
            anyhow!("{origin}: at `{path}`: {reason}")
        }
    })
}

/// A YAML library's error in the user's words: what it tells its own callers (options to set)
/// left out, its names for YAML's constructs replaced by the user's.
fn in_users_words(reason: &str) -> String {
    let reason = reason.replace(", set DuplicateKeyPolicy in Options if acceptable", "");
    let reason = reason.replace(
        "duplicate mapping key: ",
        "a key given twice in the same mapping: ",
    );
    let mut reason = reason.replace(
        "comment intercepting the multiline text",
        "a comment inside a multi-line text (a `|` or `>` block, or a quoted or plain scalar over several lines): indent it as the text, or move it out",
    );
    for (library, user) in TYPE_WORDS {
        reason = reason.replace(library, user);
    }
    reason
}

/// The YAML library's names for what it expected, and the user's.
const TYPE_WORDS: [(&str, &str); 14] = [
    (
        "expected mapping start",
        "expected a mapping (key: value lines)",
    ),
    ("expected sequence start", "expected a list"),
    ("expected string scalar", "expected a string"),
    ("invalid boolean", "expected true or false"),
    ("invalid u64", "expected a whole number, 0 or more"),
    ("invalid u32", "expected a whole number, 0 or more"),
    ("invalid u16", "expected a whole number, 0 or more"),
    ("invalid u8", "expected a whole number, 0 or more"),
    ("invalid usize", "expected a whole number, 0 or more"),
    ("invalid i64", "expected a whole number"),
    ("invalid i32", "expected a whole number"),
    ("invalid isize", "expected a whole number"),
    ("invalid f64", "expected a number"),
    ("invalid f32", "expected a number"),
];

/// Each document of a stream, in order (an empty document is `None` for `Option<T>`).
pub fn each<T: DeserializeOwned>(text: &str) -> Vec<Result<T, String>> {
    let mut reader = text.as_bytes();
    serde_saphyr::read_with_options::<_, T>(&mut reader, options())
        .map(|d| d.map_err(|e| in_users_words(e.to_string().lines().next().unwrap_or_default())))
        .collect()
}

/// Every non-empty document in `text`, as JSON values. `origin` names the source in errors.
pub fn parse(text: &str, origin: &str) -> Result<Vec<Value>> {
    let mut out = Vec::new();
    for (i, doc) in each::<Value>(text).into_iter().enumerate() {
        let value = doc.map_err(|e| anyhow!("{origin}: document {}: {e}", i + 1))?;
        if !value.is_null() {
            out.push(value);
        }
    }
    Ok(out)
}

/// The objects of a document: a List's (or `PodList`'s, …) items, each named `at: items[j]`,
/// or the document itself, named `at`.
pub fn objects(doc: Value, at: &str) -> Vec<(Value, String)> {
    let is_list =
        doc["kind"].as_str().is_some_and(|k| k.ends_with("List")) && doc["items"].is_array();
    if !is_list {
        return vec![(doc, at.to_string())];
    }
    let Value::Array(items) = doc["items"].clone() else {
        return Vec::new();
    };
    items
        .into_iter()
        .enumerate()
        .map(|(j, item)| (item, format!("{at}: items[{j}]")))
        .collect()
}

/// `value` as YAML text.
pub fn to_yaml(value: &Value) -> Result<String> {
    let mut text = serde_saphyr::to_string(value).map_err(|e| anyhow!("writing YAML: {e}"))?;
    if !text.ends_with('\n') {
        text.push('\n');
    }
    Ok(text)
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
    fn type_errors_are_in_the_user_s_words() {
        #[derive(serde::Deserialize, Debug)]
        #[allow(dead_code)]
        struct Doc {
            count: Option<u64>,
            on: Option<bool>,
            name: Option<String>,
            list: Option<Vec<String>>,
            map: Option<std::collections::BTreeMap<String, String>>,
        }
        for (text, want) in [
            (
                "count: 1.5",
                "at `count`: expected a whole number, 0 or more",
            ),
            (
                "count: -1",
                "at `count`: expected a whole number, 0 or more",
            ),
            ("on: maybe", "at `on`: expected true or false"),
            ("name: {a: 1}", "at `name`: expected a string"),
            ("list: {a: 1}", "at `list`: expected a list"),
            ("map: [1]", "at `map`: expected a mapping"),
        ] {
            let err = parse_one::<Doc>(text, "f.yaml").unwrap_err().to_string();
            assert!(err.starts_with("f.yaml: "), "{text}: {err}");
            assert!(err.contains(want), "{text}: {err}");
            assert!(
                !err.contains("invalid") && !err.contains("scalar"),
                "{text}: {err}"
            );
        }
    }

    #[test]
    fn errors_name_origin_and_document() {
        let err = parse("a: 1\n---\nb: [\n", "f.yaml")
            .unwrap_err()
            .to_string();
        assert!(err.contains("f.yaml: document 2"), "{err}");
    }
}
