//! webhook.skipUnchangedUpdates: the validating webhook, and only it, carries the one
//! matchCondition wherever the option is on, no gatekeeperPolicies are given and the cluster has
//! matchConditions (1.30 and later; the case options renders for 1.29), and switching it off
//! changes nothing else. validating.extraRules (the gatekeeper case: Services) join
//! validate.poolguard.io's rules. The expression's own behaviour is tested through a real
//! kube-apiserver (integration/e2e/tests/match_conditions.rs).

use serde_json::Value;

use super::{arr, kind_of, load_truthy, name_of, parse_truthy, report, repr, text};

/// The webhooks in effect for a case, each with its configuration's kind: with
/// webhook.registration=poolguard the ones poolguard registers (the `-webhooks` ConfigMap).
fn webhooks(out: &str, name: &str) -> Result<Vec<(String, Value)>, String> {
    let mut docs = load_truthy(&format!("{out}/{name}.yaml"))?;
    let registered = docs
        .iter()
        .find(|d| kind_of(d) == "ConfigMap" && name_of(d).ends_with("-webhooks"));
    if let Some(cm) = registered {
        let origin = format!("{}/webhooks.yaml", name_of(cm));
        docs = parse_truthy(text(&cm["data"]["webhooks.yaml"]), &origin)?;
    }
    Ok(docs
        .iter()
        .filter(|d| kind_of(d).ends_with("WebhookConfiguration"))
        .flat_map(|d| {
            arr(&d["webhooks"])
                .iter()
                .map(|wh| (kind_of(d).to_string(), wh.clone()))
        })
        .collect())
}

/// A case's webhooks without their matchConditions.
fn without_conditions(out: &str, name: &str) -> Result<Vec<(String, Value)>, String> {
    let mut hooks = webhooks(out, name)?;
    for (_, wh) in &mut hooks {
        if let Some(wh) = wh.as_object_mut() {
            wh.remove("matchConditions");
        }
    }
    Ok(hooks)
}

/// Substrings the expression's safety rests on (see the chart's _helpers.tpl): only UPDATEs of
/// the main resource can be left out, and subResource is read only when present.
const GUARDS: [&str; 6] = [
    r#"request.operation != "UPDATE""#,
    r#"(has(request.subResource) && request.subResource != "")"#,
    "object == null || oldObject == null",
    r#"k.startsWith("poolguard.io/")"#,
    "size(object.metadata.annotations) <= 1000",
    "size(oldObject.metadata.annotations) <= 1000",
];

pub fn run(out: &str, names: &[String]) -> bool {
    let mut errors = Vec::new();
    for name in names {
        let hooks = match webhooks(out, name) {
            Ok(hooks) => hooks,
            Err(e) => {
                errors.push(format!("{name}: {e}"));
                continue;
            }
        };
        let mut fail = |msg: String| errors.push(format!("{name}: {msg}"));
        // Gatekeeper constraints often judge labels, and Gatekeeper judges every UPDATE: with
        // gatekeeperPolicies every UPDATE is sent.
        let want = !matches!(
            name.as_str(),
            "no-skip" | "options" | "gatekeeper" | "gatekeeper-cluster"
        );
        for (_, wh) in &hooks {
            let hook_name = text(&wh["name"]);
            if hook_name == "validate.poolguard.io" {
                let extra = arr(&wh["rules"])
                    .iter()
                    .filter(|r| super::has_str(&r["resources"], "services"))
                    .count();
                if extra != usize::from(name == "gatekeeper") {
                    fail(format!(
                        "validate.poolguard.io has {extra} rules for services"
                    ));
                }
            }
            let conditions = &wh["matchConditions"];
            if hook_name != "validate.poolguard.io" {
                if !conditions.is_null() {
                    fail(format!("{hook_name} must have no matchConditions"));
                }
                continue;
            }
            if !want {
                if !conditions.is_null() {
                    fail("validate.poolguard.io must have no matchConditions".into());
                }
                continue;
            }
            let one = arr(conditions);
            if !(conditions.is_array()
                && one.len() == 1
                && one[0]["name"] == "changes-what-poolguard-checks")
            {
                fail(format!(
                    "validate.poolguard.io needs the one matchCondition changes-what-poolguard-checks, got {}",
                    repr(conditions)
                ));
                continue;
            }
            let expr = text(&one[0]["expression"]);
            for needle in GUARDS {
                if !expr.contains(needle) {
                    fail(format!("the condition lacks {}", super::quote(needle)));
                }
            }
            let has_ephemeral = arr(&wh["rules"])
                .iter()
                .any(|rule| super::has_str(&rule["resources"], "pods/ephemeralcontainers"));
            if !has_ephemeral {
                fail("pods/ephemeralcontainers must stay in the rules".into());
            }
        }
    }
    match (
        without_conditions(out, "default"),
        without_conditions(out, "no-skip"),
    ) {
        (Ok(default), Ok(no_skip)) => {
            if default != no_skip {
                errors.push(
                    "webhook.skipUnchangedUpdates=false changes more than the matchConditions"
                        .into(),
                );
            }
        }
        (Err(e), _) | (_, Err(e)) => errors.push(e),
    }
    let failed = report(&errors);
    eprintln!(
        "[helm-lint] matchConditions (webhook.skipUnchangedUpdates), validating.extraRules: {}",
        if failed { "FAILED" } else { "ok" }
    );
    failed
}
