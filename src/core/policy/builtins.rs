//! Functions poolguard adds to Rego: OPA's deprecated `any()` and `all()`, which regorus does not
//! provide and StackL-era templates call, `poolguard.image_repository(ref)` and
//! `poolguard.image_reference(ref)`; and `numbers.range` and `numbers.range_step` in place of
//! regorus's, bounded to [`MAX_RANGE`] elements.

use anyhow::{bail, Result};
use regorus::{Engine, Value};

/// The most elements `numbers.range` and `numbers.range_step` make. regorus allocates a range's
/// whole array before filling it, so `numbers.range(1, 1e11)` asks for terabytes at once and the
/// process aborts; no evaluation timer can stop an allocation. A million numbers take about 40
/// MB; poolguard's policies and Gatekeeper's library use ranges of tens.
pub const MAX_RANGE: u64 = 1_000_000;

/// Adds `any(collection)`, `all(collection)`, `poolguard.image_repository(ref)`,
/// `poolguard.image_reference(ref)` and the bounded `numbers.range` and `numbers.range_step` to
/// `engine` (an extension is looked up before regorus's own functions).
pub fn register(engine: &mut Engine) -> Result<()> {
    engine.add_extension(
        "numbers.range".to_string(),
        2,
        Box::new(|args: Vec<Value>| range("numbers.range", args)),
    )?;
    engine.add_extension(
        "numbers.range_step".to_string(),
        3,
        Box::new(|args: Vec<Value>| range("numbers.range_step", args)),
    )?;
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

/// `numbers.range(a, b)` and `numbers.range_step(a, b, step)` as OPA defines them: the integers
/// from `a` to `b` included, by 1 (or -1 when `b < a`) or by a positive `step` (ending at or
/// before `b`); refused past [`MAX_RANGE`] elements, naming the count.
fn range(name: &str, args: Vec<Value>) -> Result<Value> {
    let integer = |v: &Value, what: &str| -> Result<i64> {
        match v {
            Value::Number(n) if n.is_integer() => n
                .as_i64()
                .ok_or_else(|| anyhow::anyhow!("{name}: {what} {v} is out of range")),
            Value::Number(_) => bail!("{name}: {what} must be an integer, got {v}"),
            other => bail!("{name}: {what} must be a number, got {other}"),
        }
    };
    let (from, to, step) = match args.as_slice() {
        [a, b] => (integer(a, "operand 1")?, integer(b, "operand 2")?, 1),
        [a, b, s] => {
            let step = integer(s, "step")?;
            if step <= 0 {
                bail!("{name}: step must be a positive integer");
            }
            (integer(a, "operand 1")?, integer(b, "operand 2")?, step)
        }
        _ => bail!("{name}: wrong number of arguments"),
    };
    let span =
        u64::try_from((i128::from(to) - i128::from(from)).unsigned_abs()).unwrap_or(u64::MAX);
    let count = (span / step.unsigned_abs()).saturating_add(1);
    if count > MAX_RANGE {
        bail!("{name}: {count} elements, more than the {MAX_RANGE} poolguard allows");
    }
    let down = to < from;
    let values = (0..count as i64).map(|i| {
        let offset = i * step;
        Value::from(if down { from - offset } else { from + offset })
    });
    Ok(Value::from(values.collect::<Vec<_>>()))
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
    fn ranges_are_opas_and_bounded() {
        let ints = |v: &[i64]| Value::from(v.iter().map(|&i| Value::from(i)).collect::<Vec<_>>());
        let cases = [
            ("numbers.range(1, 4)", ints(&[1, 2, 3, 4])),
            ("numbers.range(2, -1)", ints(&[2, 1, 0, -1])),
            ("numbers.range(3, 3)", ints(&[3])),
            ("numbers.range_step(0, 10, 4)", ints(&[0, 4, 8])),
            ("numbers.range_step(10, 1, 4)", ints(&[10, 6, 2])),
        ];
        for (expr, want) in cases {
            assert_eq!(eval(expr).unwrap(), want, "{expr}");
        }
        // At the bound, then past it: an error naming the count, no allocation (regorus's own
        // aborted the process on `numbers.range(1, 1e11)`).
        let last = eval("count(numbers.range(1, 1000000))").unwrap();
        assert_eq!(last, Value::from(1_000_000i64));
        for (expr, count) in [
            ("numbers.range(1, 1e11)", "100000000000"),
            ("numbers.range(0, -1000000)", "1000001"),
            (
                "numbers.range_step(1, 9223372036854775807, 1)",
                "9223372036854775807",
            ),
        ] {
            let error = eval(expr).unwrap_err().to_string();
            assert!(
                error.contains(&format!(
                    "{count} elements, more than the 1000000 poolguard allows"
                )),
                "{expr}: {error}"
            );
        }
        for (expr, why) in [
            ("numbers.range(1.5, 3)", "must be an integer"),
            ("numbers.range(\"1\", 3)", "must be a number"),
            (
                "numbers.range_step(1, 3, 0)",
                "step must be a positive integer",
            ),
        ] {
            let error = eval(expr).unwrap_err().to_string();
            assert!(error.contains(why), "{expr}: {error}");
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
