//! The parts of the AdmissionRequest a policy can read, so that only those are converted for
//! the Rego engine. Converting a review costs about what evaluating it does (every key and
//! string becomes its own allocation), and most policies read one branch of it
//! (`input.review.object.spec`): a Gatekeeper template that reads nothing else need not pay
//! for `userInfo`, `oldObject`, `metadata.managedFields` or `status`.
//!
//! The analysis is of the text, and says "everything" whenever it is not sure: every
//! `review` in the Rego (comments and strings included) must be `input.review` followed by at
//! least one `.name`; the path is those names up to the first thing that is not one (`[`, a
//! call, an operator), and everything under it is kept. An alias (`r := input.review`,
//! `import input.review`), `input` taken whole or indexed (`walk(input)`, `input["review"]`),
//! or `review` anywhere else reads the whole review.

use std::collections::BTreeMap;

use regorus::Value as RegoValue;
use serde::Deserialize;
use serde_json::Value;

/// Whether `rego` takes `input` other than by a named field (`input.services`): `input` on its
/// own (`walk(input)`, `import input`), indexed (`input[k]`), or spaced (`input .x`). Such Rego
/// can reach every part of the input document, the review included.
pub(crate) fn input_taken_whole(rego: &str) -> bool {
    rego.match_indices("input").any(|(at, _)| {
        let before = rego[..at].chars().next_back();
        let after = &rego[at + "input".len()..];
        if before.is_some_and(|c| word(c) || c == '.') || after.starts_with(word) {
            return false; // part of another name, or a field called `input`
        }
        let mut rest = after.chars();
        !(rest.next() == Some('.')
            && rest
                .next()
                .is_some_and(|c| c.is_ascii_alphabetic() || c == '_'))
    })
}

fn word(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// The paths under `input.review` that `rego` may read, or `None` for the whole review.
pub fn of(rego: &str) -> Option<Vec<Vec<String>>> {
    if input_taken_whole(rego) {
        return None;
    }
    let mut paths = Vec::new();
    for (at, _) in rego.match_indices("review") {
        let before = &rego[..at];
        let after = &rego[at + "review".len()..];
        if after.starts_with(word) || !before.ends_with("input.") {
            return None;
        }
        let input_at = before.len() - "input.".len();
        if rego[..input_at]
            .chars()
            .next_back()
            .is_some_and(|c| word(c) || c == '.')
        {
            return None; // `my_input.review` or `x.input.review`: not the input document
        }
        let mut path = Vec::new();
        let mut rest = after;
        while let Some(next) = rest.strip_prefix('.') {
            let len = next.find(|c: char| !word(c)).unwrap_or(next.len());
            if len == 0 || !next.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_') {
                return None;
            }
            path.push(next[..len].to_string());
            rest = &next[len..];
        }
        if path.is_empty() {
            return None;
        }
        paths.push(path);
    }
    Some(normal(paths))
}

/// `paths` sorted, without repeats and without those under another (which keeps them whole).
fn normal(mut paths: Vec<Vec<String>>) -> Vec<Vec<String>> {
    paths.sort();
    paths.dedup();
    let mut out: Vec<Vec<String>> = Vec::new();
    for path in paths {
        // Sorted, so a prefix of `path` comes before it, and after every other path.
        if !out.last().is_some_and(|kept| path.starts_with(kept)) {
            out.push(path);
        }
    }
    out
}

/// `value` for regorus, converted in place (no copy of it is made first).
pub fn rego(value: &Value) -> RegoValue {
    RegoValue::deserialize(value).unwrap_or(RegoValue::Undefined)
}

/// `review` for regorus with only what lies on or under `paths` (as [`of`] gives them: none
/// under another). A path that is absent keeps nothing; one that goes through something that
/// is not an object keeps that.
pub fn keep(review: &Value, paths: &[Vec<String>]) -> RegoValue {
    parts(review, paths).rego()
}

/// The same parts as JSON text, written without a copy: what a policy reads of the review, for
/// the memo's key. Equal texts are equal parts.
pub fn text(review: &Value, paths: &[Vec<String>]) -> String {
    serde_json::to_string(&parts(review, paths)).unwrap_or_default()
}

/// What of `review` lies on or under `paths`, borrowed: [`keep`] and [`text`] from one walk.
fn parts<'a>(review: &'a Value, paths: &'a [Vec<String>]) -> Part<'a> {
    let mut root = Part::Some(BTreeMap::new());
    for path in paths {
        let (mut from, mut into) = (review, &mut root);
        for (i, key) in path.iter().enumerate() {
            let (Some(value), Part::Some(map)) = (from.get(key.as_str()), into) else {
                break;
            };
            if i + 1 == path.len() || !value.is_object() {
                map.insert(key, Part::Whole(value));
                break;
            }
            from = value;
            into = map
                .entry(key)
                .or_insert_with(|| Part::Some(BTreeMap::new()));
        }
    }
    root
}

/// Some of a review: a value whole, or some of an object's fields.
enum Part<'a> {
    Whole(&'a Value),
    Some(BTreeMap<&'a String, Part<'a>>),
}

impl Part<'_> {
    fn rego(&self) -> RegoValue {
        match self {
            Part::Whole(value) => rego(value),
            Part::Some(fields) => {
                let mut out = RegoValue::new_object();
                if let Ok(map) = out.as_object_mut() {
                    for (key, part) in fields {
                        map.insert(RegoValue::from(key.as_str()), part.rego());
                    }
                }
                out
            }
        }
    }
}

impl serde::Serialize for Part<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            Part::Whole(value) => value.serialize(serializer),
            Part::Some(map) => serializer.collect_map(map),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn paths(list: &[&str]) -> Option<Vec<Vec<String>>> {
        Some(
            list.iter()
                .map(|p| p.split('.').map(String::from).collect())
                .collect(),
        )
    }

    #[test]
    fn paths_table() {
        for (rego, want) in [
            ("x := input.review.object.spec[f][_]", paths(&["object.spec"])),
            (
                "a := input.review.object.spec\nb := input.review.operation\nc := input.review.object.metadata.name",
                paths(&["object.metadata.name", "object.spec", "operation"]),
            ),
            // A shorter path keeps what is under it whole.
            ("a := input.review.object\nb := input.review.object.spec", paths(&["object"])),
            ("x := input.parameters.repos", paths(&[])),
            ("x := object.get(input.review.object, \"spec\", {})", paths(&["object"])),
            ("x := input.review.object[\"spec\"]", paths(&["object"])),
            // Anything it cannot follow reads the whole review.
            ("r := input.review\nx := r.object", None),
            ("import input.review as r", None),
            ("x := input[\"review\"].object", None),
            ("x := input.review[\"object\"]", None),
            ("i := input\nx := i.review.object", None),
            ("# the review\nx := input.review.object", None),
            ("x := my_input.review.object", None),
            ("x := data.input.review.object", None),
            ("x := input.reviews", None),
            ("x := input.review.1", None),
            ("x := walk(input)", None),
            ("import input\nx := input.review.object", None),
            ("x := object.get(input, \"review\", {})", None),
            ("x := input[k]", None),
        ] {
            assert_eq!(of(rego), want, "{rego}");
        }
    }

    #[test]
    fn keeps_what_the_paths_reach() {
        let review = json!({
            "uid": "u", "operation": "CREATE",
            "userInfo": {"username": "alice"},
            "object": {"metadata": {"name": "web", "labels": {"a": "b"}}, "spec": {"containers": [{"image": "x"}]}, "status": {}},
            "oldObject": null,
        });
        let keep_ = |list: &[&str]| keep(&review, &paths(list).unwrap());
        let json = |v: serde_json::Value| rego(&v);
        assert_eq!(
            keep_(&["object.spec"]),
            json(json!({"object": {"spec": {"containers": [{"image": "x"}]}}}))
        );
        assert_eq!(
            keep_(&["object.metadata.name", "object.spec", "operation"]),
            json(
                json!({"operation": "CREATE", "object": {"metadata": {"name": "web"}, "spec": {"containers": [{"image": "x"}]}}})
            )
        );
        // Absent, and through something that is not an object.
        assert_eq!(
            keep_(&["object.missing.x", "uid.x"]),
            json(json!({"object": {}, "uid": "u"}))
        );
        assert_eq!(keep_(&["oldObject.spec"]), json(json!({"oldObject": null})));
        assert_eq!(keep_(&[]), json(json!({})));
        // The same parts as text, for the memo's key.
        let text_ = |list: &[&str]| text(&review, &paths(list).unwrap());
        assert_eq!(
            text_(&["object.metadata.name", "object.spec", "operation"]),
            r#"{"object":{"metadata":{"name":"web"},"spec":{"containers":[{"image":"x"}]}},"operation":"CREATE"}"#
        );
        assert_eq!(
            text_(&["object.missing.x", "uid.x"]),
            r#"{"object":{},"uid":"u"}"#
        );
        assert_eq!(text_(&[]), "{}");
    }
}
