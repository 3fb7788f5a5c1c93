//! `poolguard native` as a user runs it: the generated objects, in YAML, and what stays on the
//! webhook. (That the objects decide as the webhook does is proved through kube-apiserver by
//! integration/e2e/tests/native.rs.)

use std::process::Command;

use poolguard_core::documents;
use poolguard_core::native;
use serde_json::Value;

fn native_for(config: &str) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_poolguard"))
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .args([
            "native",
            "--config",
            config,
            "--policies-dir",
            "policies",
            "--exclude-namespace",
            "kube-system",
        ])
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn the_example_config_prints_its_objects_and_what_stays_on_the_webhook() {
    let (code, stdout, stderr) = native_for("testdata/config/example.yaml");
    assert_eq!(code, 0, "{stderr}");
    let objects = documents::parse(&stdout, "stdout").unwrap();
    let names: Vec<String> = objects
        .iter()
        .map(|o| {
            format!(
                "{}/{}",
                o["kind"].as_str().unwrap(),
                o["metadata"]["name"].as_str().unwrap()
            )
        })
        .collect();
    assert_eq!(
        names,
        [
            "MutatingAdmissionPolicy/poolguard-pool",
            "MutatingAdmissionPolicyBinding/poolguard-pool",
            "ValidatingAdmissionPolicy/poolguard-placement",
            "ValidatingAdmissionPolicyBinding/poolguard-placement",
            "ValidatingAdmissionPolicy/poolguard-images",
            "ValidatingAdmissionPolicyBinding/poolguard-images",
            // Both shipped policies at the same enforcement in the same namespaces: one policy
            // each, a validation per shipped policy.
            "ValidatingAdmissionPolicy/poolguard-allowedrepositories-and-latesttag",
            "ValidatingAdmissionPolicyBinding/poolguard-allowedrepositories-and-latesttag",
            "ValidatingAdmissionPolicy/poolguard-allowedrepositories-and-latesttag.pool-gpu",
            "ValidatingAdmissionPolicyBinding/poolguard-allowedrepositories-and-latesttag.pool-gpu",
        ]
    );
    for object in &objects {
        assert_eq!(object["apiVersion"], native::API_VERSION);
        assert_eq!(
            object["metadata"]["labels"][native::MANAGED_LABEL],
            native::MANAGED_VALUE
        );
    }
    // The one thing the example leaves to the webhook.
    let on_webhook: Vec<&str> = stdout
        .lines()
        .filter(|l| l.starts_with("# on the webhook: "))
        .collect();
    assert_eq!(on_webhook.len(), 1, "{stdout}");
    assert!(on_webhook[0].contains("pool authority"), "{stdout}");
}

#[test]
fn a_config_that_does_not_load_is_one_error_line() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("bad.yaml");
    std::fs::write(&config, "policies:\n  nosuchpolicy: {parameters: {}}\n").unwrap();
    let (code, stdout, stderr) = native_for(config.to_str().unwrap());
    assert_eq!(code, 2, "{stdout}");
    assert!(stdout.is_empty(), "{stdout}");
    assert!(stderr.contains("nosuchpolicy"), "{stderr}");
}

/// The configs under testdata/config, sorted.
fn configs() -> Vec<String> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/config");
    let mut out: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|entry| entry.unwrap().file_name().into_string().unwrap())
        .filter(|name| name.ends_with(".yaml"))
        .map(|name| format!("testdata/config/{name}"))
        .collect();
    out.sort();
    assert!(out.len() >= 5, "{out:?}");
    out
}

/// Every CEL expression under `value` (each `expression` and `messageExpression`), with where
/// it is.
fn expressions(value: &Value, at: &str, out: &mut Vec<(String, String)>) {
    match value {
        Value::Object(fields) => {
            for (key, field) in fields {
                let here = format!("{at}.{key}");
                match (key.as_str(), field) {
                    ("expression" | "messageExpression", Value::String(cel)) => {
                        out.push((here, cel.clone()))
                    }
                    _ => expressions(field, &here, out),
                }
            }
        }
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                expressions(item, &format!("{at}[{i}]"), out);
            }
        }
        _ => {}
    }
}

/// Whether `text` holds `pattern` as whole tokens (`!true` is not in `!trueish`).
fn holds_tokens(text: &str, pattern: &str) -> bool {
    let word = |c: char| c.is_alphanumeric() || c == '_';
    text.match_indices(pattern).any(|(at, _)| {
        let before = text[..at].chars().next_back();
        let after = text[at + pattern.len()..].chars().next();
        let joined_before = pattern.starts_with(word) && before.is_some_and(word);
        let joined_after = pattern.ends_with(word) && after.is_some_and(word);
        !joined_before && !joined_after
    })
}

/// The expressions are built as a tree whose constructors fold constants: none is left with a
/// constant operand of `&&`, `||` or `!`, and none is a constant.
#[test]
fn no_generated_expression_keeps_a_constant_operand_or_is_a_constant() {
    let leftovers = [
        "|| false", "&& false", "!false", "!true", "|| true", "&& true", "false ||", "false &&",
        "true ||", "true &&",
    ];
    let mut checked = 0;
    for config in configs() {
        let (code, stdout, stderr) = native_for(&config);
        assert_eq!(code, 0, "{config}: {stderr}");
        let mut found = Vec::new();
        for object in documents::parse(&stdout, &config).unwrap() {
            let name = format!(
                "{}/{}",
                object["kind"].as_str().unwrap_or_default(),
                object["metadata"]["name"].as_str().unwrap_or_default()
            );
            expressions(&object, &name, &mut found);
        }
        for (at, cel) in found {
            // One line, one space between tokens: a leftover broken over lines shows too.
            let flat = cel.split_whitespace().collect::<Vec<_>>().join(" ");
            assert!(
                flat != "true" && flat != "false",
                "{config}: {at} is the constant {flat}"
            );
            for leftover in leftovers {
                assert!(
                    !holds_tokens(&flat, leftover),
                    "{config}: {at} holds `{leftover}`: {cel}"
                );
            }
            checked += 1;
        }
    }
    assert!(checked > 50, "{checked} expressions");
}

/// A line of CEL that is one string literal alone (after an operator, before a closing `)` or
/// `,`): the printer never breaks a literal (a regular expression, a message's text), so such a
/// line may be longer than the others.
fn is_one_literal(line: &str) -> bool {
    let mut text = line.trim();
    for operator in ["+ ", "? ", ": ", "|| ", "&& "] {
        text = text.strip_prefix(operator).unwrap_or(text);
    }
    let text = text.trim_end_matches([')', ',']);
    let (raw, body) = match text.strip_prefix("r'") {
        Some(rest) => (true, rest),
        None => (false, text.strip_prefix('\'').unwrap_or_default()),
    };
    let Some(body) = body.strip_suffix('\'') else {
        return false;
    };
    if raw {
        !body.contains('\'')
    } else {
        !body.replace("\\\\", "").replace("\\'", "").contains('\'')
    }
}

/// Long expressions come out as YAML blocks broken at their operators, each line at most 120
/// characters but for a string literal alone on its line; the comments after the objects (what
/// stays on the webhook) are prose and not counted.
#[test]
fn the_printed_objects_have_lines_of_at_most_120_characters() {
    for config in configs() {
        let (code, stdout, stderr) = native_for(&config);
        assert_eq!(code, 0, "{config}: {stderr}");
        assert!(stdout.contains("- expression: |-\n"), "{config}: {stdout}");
        for line in stdout.lines().filter(|l| !l.starts_with('#')) {
            assert!(
                line.chars().count() <= 120 || is_one_literal(line),
                "{config}: a line of {} characters: {line}",
                line.chars().count()
            );
        }
    }
    assert!(is_one_literal(
        "          + ' images; at most 250 (limits.maxImagesPerPod)'"
    ));
    assert!(is_one_literal("    r'^(?:[a-z]+\\.)*$'"));
    assert!(!is_one_literal("    'a' + b + 'c'"));
    assert!(!is_one_literal("    r'a' + 'c'"));
}
