//! The chart README documents every value the schema knows: one table row, `| `key` |`, per
//! key of values.schema.json.

use serde_json::Value;

use super::{report, truthy};

/// The keys of a schema below `prefix`: an object whose properties are closed
/// (`additionalProperties: false`) is walked into, anything else is one value.
fn walk(node: &Value, prefix: &str, keys: &mut Vec<String>) {
    let props = &node["properties"];
    // A container's resources (the serving pods' and the controller's) are one value each.
    if truthy(props)
        && node["additionalProperties"] == Value::Bool(false)
        && !matches!(prefix, "resources" | "controller.resources")
    {
        for (key, sub) in props.as_object().into_iter().flatten() {
            if key != "global" {
                let path = if prefix.is_empty() {
                    key.clone()
                } else {
                    format!("{prefix}.{key}")
                };
                walk(sub, &path, keys);
            }
        }
    } else {
        keys.push(prefix.to_string());
    }
}

pub fn run(chart: &str) -> bool {
    let schema_path = format!("{chart}/values.schema.json");
    let readme_path = format!("{chart}/README.md");
    let schema: Value = match std::fs::read_to_string(&schema_path)
        .map_err(|e| e.to_string())
        .and_then(|t| serde_json::from_str(&t).map_err(|e| format!("not JSON: {e}")))
    {
        Ok(schema) => schema,
        Err(e) => return report(&[format!("{schema_path}: {e}")]),
    };
    let readme = match std::fs::read_to_string(&readme_path) {
        Ok(readme) => readme,
        Err(e) => return report(&[format!("{readme_path}: {e}")]),
    };
    let mut keys = Vec::new();
    walk(&schema, "", &mut keys);
    let missing: Vec<String> = keys
        .iter()
        .filter(|k| !readme.contains(&format!("| `{k}` |")))
        .map(|k| format!("{readme_path} has no row for value `{k}`"))
        .collect();
    let failed = report(&missing);
    eprintln!(
        "[helm-lint] README documents {}/{} values",
        keys.len() - missing.len(),
        keys.len()
    );
    failed
}
