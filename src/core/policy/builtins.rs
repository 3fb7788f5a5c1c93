//! Functions poolguard adds to Rego: OPA's deprecated `any()` and `all()`, which regorus does not
//! provide and StackL-era templates call, `poolguard.image_repository(ref)` and
//! `poolguard.image_reference(ref)`.

use anyhow::{bail, Result};
use regorus::{Engine, Value};

/// Adds `any(collection)`, `all(collection)`, `poolguard.image_repository(ref)` and
/// `poolguard.image_reference(ref)` to `engine`.
pub fn register(engine: &mut Engine) -> Result<()> {
    engine.add_extension(
        "poolguard.image_repository".to_string(),
        1,
        Box::new(|args: Vec<Value>| image_repository(args)),
    )?;
    engine.add_extension(
        "poolguard.image_reference".to_string(),
        1,
        Box::new(|args: Vec<Value>| image_reference(args)),
    )?;
    engine.add_extension(
        "any".to_string(),
        1,
        Box::new(|args: Vec<Value>| quantify("any", args)),
    )?;
    engine.add_extension(
        "all".to_string(),
        1,
        Box::new(|args: Vec<Value>| quantify("all", args)),
    )?;
    Ok(())
}

/// `any`: some element is `true`. `all`: every element is `true` (vacuously true when empty).
fn quantify(which: &str, args: Vec<Value>) -> Result<Value> {
    let [collection] = args.as_slice() else {
        bail!("{which}: expects one argument");
    };
    let mut items: Box<dyn Iterator<Item = &Value>> = match collection {
        Value::Array(a) => Box::new(a.iter()),
        Value::Set(s) => Box::new(s.iter()),
        other => bail!("{which}: operand must be an array or a set, got {other}"),
    };
    let is_true = |v: &Value| matches!(v, Value::Bool(true));
    Ok(Value::from(match which {
        "any" => items.any(is_true),
        _ => items.all(is_true),
    }))
}

/// The normalized `registry/path` of an image reference (see [`crate::image`]).
fn image_repository(args: Vec<Value>) -> Result<Value> {
    match args.as_slice() {
        [Value::String(reference)] => crate::image::repository(reference)
            .map(Value::from)
            .map_err(|e| anyhow::anyhow!("poolguard.image_repository: {e}")),
        [other] => bail!("poolguard.image_repository: operand must be a string, got {other}"),
        _ => bail!("poolguard.image_repository: expects one argument"),
    }
}

/// An image reference parsed as the runtime does (see [`crate::image`]): `registry`, `path`,
/// `repository` (`registry/path`), and `tag` and `digest` only when the reference has them (no
/// `latest` is added).
fn image_reference(args: Vec<Value>) -> Result<Value> {
    let reference = match args.as_slice() {
        [Value::String(reference)] => crate::image::parse(reference)
            .map_err(|e| anyhow::anyhow!("poolguard.image_reference: {e}"))?,
        [other] => bail!("poolguard.image_reference: operand must be a string, got {other}"),
        _ => bail!("poolguard.image_reference: expects one argument"),
    };
    let mut out = Value::new_object();
    let map = out.as_object_mut()?;
    map.insert(
        Value::from("repository"),
        Value::from(reference.repository()),
    );
    map.insert(Value::from("registry"), Value::from(reference.registry));
    map.insert(Value::from("path"), Value::from(reference.path));
    if let Some(tag) = reference.tag {
        map.insert(Value::from("tag"), Value::from(tag));
    }
    if let Some(digest) = reference.digest {
        map.insert(Value::from("digest"), Value::from(digest));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn eval(expr: &str) -> Result<Value> {
        let mut engine = Engine::new();
        engine.set_rego_v0(true);
        register(&mut engine)?;
        engine.add_policy(
            "t.rego".into(),
            format!("package t\nx = r {{ r := {expr} }}\n"),
        )?;
        engine.eval_rule("data.t.x".into())
    }

    #[test]
    fn table() {
        let cases = [
            ("any([false, true])", true),
            ("any([false, false])", false),
            ("any([])", false),
            ("any({true})", true),
            ("any([1, \"true\"])", false),
            ("all([true, true])", true),
            ("all([true, false])", false),
            ("all([])", true),
            ("all({false})", false),
        ];
        assert_eq!(
            eval("poolguard.image_repository(\"nginx:1\")").unwrap(),
            Value::from("docker.io/library/nginx")
        );
        for (expr, want) in cases {
            assert_eq!(eval(expr).unwrap(), Value::from(want), "{expr}");
        }
    }

    #[test]
    fn image_reference_table() {
        let digest = "sha256:0123abcd0123abcd0123abcd0123abcd0123abcd0123abcd0123abcd0123abcd";
        let cases = [
            (
                "nginx".to_string(),
                serde_json::json!({"registry": "docker.io", "path": "library/nginx",
                    "repository": "docker.io/library/nginx"}),
            ),
            (
                "registry.example.com:5000/team/app:latest".to_string(),
                serde_json::json!({"registry": "registry.example.com:5000", "path": "team/app",
                    "repository": "registry.example.com:5000/team/app", "tag": "latest"}),
            ),
            (
                format!("quay.io/app:1@{digest}"),
                serde_json::json!({"registry": "quay.io", "path": "app",
                    "repository": "quay.io/app", "tag": "1", "digest": digest}),
            ),
        ];
        for (reference, want) in cases {
            assert_eq!(
                eval(&format!("poolguard.image_reference({reference:?})")).unwrap(),
                Value::from(want),
                "{reference}"
            );
        }
        let err = eval("poolguard.image_reference(\"app:1.0:evil\")")
            .unwrap_err()
            .to_string();
        assert!(err.contains("poolguard.image_reference"), "{err}");
    }

    #[test]
    fn non_collection_is_an_error() {
        let err = eval("any(1)").unwrap_err().to_string();
        assert!(err.contains("array or a set"), "{err}");
        let err = eval("poolguard.image_repository(1)")
            .unwrap_err()
            .to_string();
        assert!(err.contains("must be a string"), "{err}");
    }
}
