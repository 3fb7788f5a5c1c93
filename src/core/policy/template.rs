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
    /// Parameter names it declares it may take besides (`optionalInputs`, poolguard's
    /// extension of StackL's format); `None` when it does not say.
    pub optional_inputs: Option<Vec<String>>,
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
    #[serde(default, rename = "optionalInputs")]
    optional_inputs: Option<Vec<String>>,
    policy: String,
}

const TEMPLATE_TYPE: &str = "policy_template";

/// A plain Rego file: the policy is named by the file's stem.
pub fn from_rego(stem: &str, rego: String, path: PathBuf) -> Template {
    Template {
        name: stem.to_string(),
        description: String::new(),
        inputs: Vec::new(),
        optional_inputs: None,
        rego,
        path,
    }
}

/// A StackL policy template.
pub fn from_yaml(text: &str, path: PathBuf) -> Result<Template> {
    let origin = path.display().to_string();
    // A YAML file with no `policy` is something else (a config, a manifest) left among the
    // templates: said so, rather than its first unknown key.
    let shape: serde_json::Value = crate::documents::parse_one(text, &origin)?;
    if shape.get("policy").is_none() {
        let looks_like = match (shape.get("kind"), shape.get("policies")) {
            (Some(kind), _) => format!(" (it is a `kind: {}`)", kind.as_str().unwrap_or("?")),
            (None, Some(_)) => {
                " (it looks like a poolguard config: give it with --config)".to_string()
            }
            _ => String::new(),
        };
        bail!(
            "{origin}: not a policy template{looks_like}: a template has `name`, `inputs` and `policy` (Rego); the policies directory holds only templates (*.yaml), Rego files and their *_test.rego tests"
        );
    }
    let doc: TemplateDoc = crate::documents::parse_one(text, &origin)?;
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
        optional_inputs: doc.optional_inputs,
        rego: padding + &doc.policy,
        path,
    })
}

impl Template {
    /// Every parameter name the policy may read: its `inputs` and `optionalInputs` when it
    /// declares the latter; otherwise its `inputs` and the names its Rego reads
    /// (`input.parameters.NAME`, `input.parameters["NAME"]`,
    /// `object.get(input.parameters, "NAME", …)`). `None` when its Rego reads
    /// `input.parameters` any other way (as a whole), so that any name may matter.
    pub fn parameter_names(&self) -> Option<Vec<String>> {
        let mut names = self.inputs.clone();
        match &self.optional_inputs {
            Some(optional) => names.extend(optional.iter().cloned()),
            None => names.extend(names_read(&self.rego)?),
        }
        names.sort();
        names.dedup();
        Some(names)
    }
}

/// The parameter names `rego` reads in the forms [`Template::parameter_names`] lists; `None`
/// when it reads `input.parameters` otherwise.
fn names_read(rego: &str) -> Option<Vec<String>> {
    const WHOLE: &str = "input.parameters";
    let identifier = |text: &str| -> String {
        text.chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect()
    };
    let quoted = |text: &str| -> Option<String> {
        let rest = text.strip_prefix('"')?;
        let name = &rest[..rest.find('"')?];
        (!name.is_empty() && !name.contains('\\')).then(|| name.to_string())
    };
    let mut names = Vec::new();
    for (at, _) in rego.match_indices(WHOLE) {
        let before = &rego[..at];
        let after = &rego[at + WHOLE.len()..];
        if before.ends_with(|c: char| c.is_ascii_alphanumeric() || c == '_' || c == '.') {
            continue; // part of a longer name (`my_input.parameters`)
        }
        let name = if let Some(rest) = after.strip_prefix('.') {
            Some(identifier(rest)).filter(|n| !n.is_empty())
        } else if let Some(rest) = after.strip_prefix('[') {
            quoted(rest.trim_start()).filter(|_| {
                rest.trim_start()
                    .splitn(3, '"')
                    .nth(2)
                    .is_some_and(|tail| tail.trim_start().starts_with(']'))
            })
        } else if before.trim_end().ends_with("object.get(") {
            after
                .trim_start()
                .strip_prefix(',')
                .and_then(|rest| quoted(rest.trim_start()))
        } else {
            None
        };
        names.push(name?);
    }
    Some(names)
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
    #[test]
    fn the_parameter_names_a_policy_reads() {
        let rego = |body: &str| super::from_rego("p", body.to_string(), "p.rego".into());
        let cases = [
            (
                "x := input.parameters.repositories[_]",
                Some(vec!["repositories"]),
            ),
            ("x := input.parameters[\"max\"]", Some(vec!["max"])),
            (
                "x := object.get(input.parameters, \"exemptRepositories\", [])",
                Some(vec!["exemptRepositories"]),
            ),
            (
                "x := input.parameters.a\ny := input.parameters.b.c",
                Some(vec!["a", "b"]),
            ),
            ("x := 1", Some(vec![])),
            ("x := my_input.parameters.z", Some(vec![])),
            ("x := input.parameters", None),
            ("x := input.parameters[k]", None),
            ("x := object.keys(input.parameters)", None),
        ];
        for (body, want) in cases {
            let want = want.map(|w| w.iter().map(|s| s.to_string()).collect::<Vec<_>>());
            assert_eq!(rego(body).parameter_names(), want, "{body}");
        }
        // Declared inputs count; `optionalInputs`, when given, replaces what the Rego reads.
        let t = super::from_yaml(
            "name: p\ninputs: [a]\noptionalInputs: [b]\npolicy: |\n  package p\n  x := input.parameters.c\n",
            "p.yaml".into(),
        )
        .unwrap();
        assert_eq!(t.parameter_names(), Some(vec!["a".into(), "b".into()]));
    }

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
