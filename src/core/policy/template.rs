//! Policy templates on disk: StackL-format YAML (`name`, `inputs`, `policy`) or plain `.rego` files.

use std::path::PathBuf;

use anyhow::{bail, Result};
use serde::Deserialize;

/// One policy's source, as found in the policies directory.
#[derive(Debug, Clone, PartialEq)]
pub struct Template {
    pub name: String,
    pub description: String,
    /// Parameter names the template declares it needs.
    pub inputs: Vec<String>,
    /// Rego source, padded with blank lines so that line numbers match the file's.
    pub rego: String,
    pub path: PathBuf,
}

/// A Rego unit-test file (`*_test.rego`): loaded by `policy test`, never by admission.
#[derive(Debug, Clone, PartialEq)]
pub struct TestFile {
    pub rego: String,
    pub path: PathBuf,
}

/// The StackL policy template document.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TemplateDoc {
    name: String,
    #[serde(default)]
    description: String,
    #[serde(rename = "type")]
    kind: Option<String>,
    #[serde(default)]
    category: Option<String>,
    #[serde(default)]
    inputs: Vec<String>,
    policy: String,
}

const TEMPLATE_TYPE: &str = "policy_template";

/// A plain Rego file: the policy is named by the file's stem.
pub fn from_rego(stem: &str, rego: String, path: PathBuf) -> Template {
    Template {
        name: stem.to_string(),
        description: String::new(),
        inputs: Vec::new(),
        rego,
        path,
    }
}

/// A StackL policy template.
pub fn from_yaml(text: &str, path: PathBuf) -> Result<Template> {
    let doc: TemplateDoc = crate::documents::parse_one(text, &path.display().to_string())?;
    if let Some(kind) = doc.kind.as_deref() {
        if kind != TEMPLATE_TYPE {
            bail!(
                "{}: at `type`: expected `{TEMPLATE_TYPE}`, got `{kind}`",
                path.display()
            );
        }
    }
    let _ = doc.category;
    let padding = "\n".repeat(policy_first_line(text));
    Ok(Template {
        name: doc.name,
        description: doc.description,
        inputs: doc.inputs,
        rego: padding + &doc.policy,
        path,
    })
}

/// Zero-based line on which the `policy: |` block's content starts, so Rego line N is file
/// line N + this. Zero when the policy is not a block scalar.
fn policy_first_line(text: &str) -> usize {
    text.lines()
        .position(|line| {
            line.strip_prefix("policy:")
                .is_some_and(|rest| rest.trim_start().starts_with(['|', '>']))
        })
        .map_or(0, |i| i + 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn yaml_template_keeps_line_numbers() {
        let text =
            "name: p\ntype: policy_template\ninputs: [a]\npolicy: |\n  package p\n  x := 1\n";
        let t = from_yaml(text, "p.yaml".into()).unwrap();
        assert_eq!(t.name, "p");
        assert_eq!(t.inputs, vec!["a"]);
        let lines: Vec<&str> = t.rego.lines().collect();
        assert_eq!(lines[4], "package p", "Rego line 5 is file line 5");
        assert_eq!(lines[5], "x := 1");
    }

    #[test]
    fn yaml_template_errors_name_file_and_field() {
        let cases = [
            ("name: p\npolicy: x\nextra: 1\n", "unknown field `extra`"),
            ("policy: x\n", "missing field `name`"),
            ("name: p\ntype: sat\npolicy: x\n", "at `type`"),
            ("name: [p]\npolicy: x\n", "at `name`"),
        ];
        for (text, want) in cases {
            let err = from_yaml(text, "dir/p.yaml".into())
                .unwrap_err()
                .to_string();
            assert!(
                err.contains(want) && err.contains("dir/p.yaml"),
                "{text:?}: {err}"
            );
        }
    }
}
