//! The fields the checks read from each kind of rendered document. A check reads an absent field
//! as null, which can make a property hold vacuously (a Role without rules grants nothing); so a
//! document that lacks one of these fields is reported as malformed instead.

use serde_json::Value;

/// One step of a path: a key, or an index into an array.
#[derive(Clone, Copy)]
enum Step {
    Key(&'static str),
    Index(usize),
}

/// What a field must be.
#[derive(Clone, Copy, PartialEq)]
enum Is {
    Map,
    List,
    Text,
    Any,
}

use Is::{Any, List, Map, Text};
use Step::{Index, Key};

/// Whether `v` is what `is` asks for.
fn fits(v: &Value, is: Is) -> bool {
    match is {
        Map => v.is_object(),
        List => v.is_array(),
        Text => v.is_string(),
        Any => true,
    }
}

/// The field at `path` under `v`, if every step exists.
fn at<'a>(v: &'a Value, path: &[Step]) -> Option<&'a Value> {
    path.iter().try_fold(v, |v, step| match step {
        Key(k) => v.get(k),
        Index(i) => v.get(i),
    })
}

/// A path as the messages write it: spec.template.spec.containers[0].args.
fn show(path: &[Step]) -> String {
    let mut out = String::new();
    for step in path {
        match step {
            Key(k) => {
                if !out.is_empty() {
                    out.push('.');
                }
                out.push_str(k);
            }
            Index(i) => out.push_str(&format!("[{i}]")),
        }
    }
    out
}

/// Checks that each path exists under `v` with the right type; `what` prefixes the messages.
fn require(v: &Value, what: &str, paths: &[(&[Step], Is)], problems: &mut Vec<String>) {
    for (path, is) in paths {
        match at(v, path) {
            Some(field) if fits(field, *is) => {}
            Some(_) => problems.push(format!("{what}: {} is not a {}", show(path), name(*is))),
            None => problems.push(format!("{what}: no {}", show(path))),
        }
    }
}

fn name(is: Is) -> &'static str {
    match is {
        Map => "map",
        List => "list",
        Text => "string",
        Any => "value",
    }
}

/// The kinds whose documents the checks find or match by name.
const NAMED: [&str; 14] = [
    "ClusterRole",
    "ClusterRoleBinding",
    "ConfigMap",
    "CustomResourceDefinition",
    "Deployment",
    "MutatingWebhookConfiguration",
    "Namespace",
    "Pod",
    "PodDisruptionBudget",
    "Role",
    "RoleBinding",
    "Service",
    "ServiceAccount",
    "ValidatingWebhookConfiguration",
];

const POD_SPEC: [Step; 3] = [Key("spec"), Key("template"), Key("spec")];

/// What is missing from a rendered document (one with a kind and apiVersion) that the checks
/// read; empty when nothing is.
pub fn problems(doc: &Value) -> Vec<String> {
    let kind = super::kind_of(doc);
    let what = format!("{kind} {}", super::plain(&doc["metadata"]["name"]));
    let mut problems = Vec::new();
    if NAMED.contains(&kind) {
        require(
            doc,
            &what,
            &[
                (&[Key("metadata")], Map),
                (&[Key("metadata"), Key("name")], Text),
            ],
            &mut problems,
        );
    }
    match kind {
        "Deployment" => {
            let containers = [POD_SPEC.as_slice(), &[Key("containers")]].concat();
            let first = [containers.as_slice(), &[Index(0)]].concat();
            require(
                doc,
                &what,
                &[
                    (&[Key("spec"), Key("selector"), Key("matchLabels")], Map),
                    (
                        &[Key("spec"), Key("template"), Key("metadata"), Key("labels")],
                        Map,
                    ),
                    (&[POD_SPEC.as_slice(), &[Key("volumes")]].concat(), List),
                    (&containers, List),
                    (&[first.as_slice(), &[Key("args")]].concat(), List),
                    (&[first.as_slice(), &[Key("volumeMounts")]].concat(), List),
                ],
                &mut problems,
            );
            let volumes = [POD_SPEC.as_slice(), &[Key("volumes")]].concat();
            let mounts = [first.as_slice(), &[Key("volumeMounts")]].concat();
            for volume in super::arr(at(doc, &volumes).unwrap_or(&Value::Null)) {
                require(volume, &what, &[(&[Key("name")], Text)], &mut problems);
            }
            for mount in super::arr(at(doc, &mounts).unwrap_or(&Value::Null)) {
                require(
                    mount,
                    &what,
                    &[(&[Key("name")], Text), (&[Key("mountPath")], Text)],
                    &mut problems,
                );
            }
        }
        "Pod" => require(
            doc,
            &what,
            &[(
                &[Key("spec"), Key("containers"), Index(0), Key("args")],
                List,
            )],
            &mut problems,
        ),
        "ClusterRole" | "Role" => {
            require(doc, &what, &[(&[Key("rules")], List)], &mut problems);
            for rule in super::arr(&doc["rules"]) {
                require(
                    rule,
                    &format!("{what}: a rule"),
                    &[
                        (&[Key("apiGroups")], List),
                        (&[Key("resources")], List),
                        (&[Key("verbs")], List),
                    ],
                    &mut problems,
                );
            }
        }
        "ClusterRoleBinding" | "RoleBinding" => {
            require(
                doc,
                &what,
                &[
                    (&[Key("roleRef"), Key("kind")], Text),
                    (&[Key("roleRef"), Key("name")], Text),
                    (&[Key("subjects")], List),
                ],
                &mut problems,
            );
            for subject in super::arr(&doc["subjects"]) {
                require(
                    subject,
                    &format!("{what}: a subject"),
                    &[(&[Key("name")], Any)],
                    &mut problems,
                );
            }
        }
        "MutatingWebhookConfiguration" | "ValidatingWebhookConfiguration" => {
            require(doc, &what, &[(&[Key("webhooks")], List)], &mut problems);
            webhooks(doc, &what, &mut problems);
        }
        "Service" | "PodDisruptionBudget" => {
            require(
                doc,
                &what,
                &[(&[Key("spec"), Key("selector")], Map)],
                &mut problems,
            );
        }
        "ConfigMap" => {
            let name = super::name_of(doc);
            for (suffix, key) in [("-webhooks", "webhooks.yaml"), ("-config", "config.yaml")] {
                if name.ends_with(suffix) {
                    require(
                        doc,
                        &what,
                        &[(&[Key("data"), Key(key)], Text)],
                        &mut problems,
                    );
                }
            }
        }
        "CustomResourceDefinition" => require(
            doc,
            &what,
            &[
                (&[Key("spec"), Key("group")], Any),
                (&[Key("spec"), Key("scope")], Any),
                (&[Key("spec"), Key("names"), Key("shortNames")], Any),
                (
                    &[
                        Key("spec"),
                        Key("versions"),
                        Index(0),
                        Key("additionalPrinterColumns"),
                    ],
                    List,
                ),
                (
                    &[
                        Key("spec"),
                        Key("versions"),
                        Index(0),
                        Key("schema"),
                        Key("openAPIV3Schema"),
                        Key("properties"),
                    ],
                    Map,
                ),
            ],
            &mut problems,
        ),
        _ => {}
    }
    problems
}

/// The webhooks of a configuration: a name, clientConfig and rules each; the namespaceSelector's
/// expressions (every webhook but the pool-authority ones, which have an objectSelector, and the
/// PolicyException one, which has none).
fn webhooks(doc: &Value, what: &str, problems: &mut Vec<String>) {
    for wh in super::arr(&doc["webhooks"]) {
        let what = format!("{what}: webhook {}", super::plain(&wh["name"]));
        require(
            wh,
            &what,
            &[
                (&[Key("name")], Text),
                (&[Key("clientConfig")], Map),
                (&[Key("rules")], List),
            ],
            problems,
        );
        let name = super::text(&wh["name"]);
        if name == "exceptions.poolguard.io" {
            // PolicyExceptions in every namespace: no selector to read.
            continue;
        }
        let selector = if name.ends_with("pool-authority.poolguard.io") {
            Key("objectSelector")
        } else {
            Key("namespaceSelector")
        };
        require(wh, &what, &[(&[selector], Map)], problems);
        if let Key("namespaceSelector") = selector {
            require(
                wh,
                &what,
                &[(&[selector, Key("matchExpressions")], List)],
                problems,
            );
        }
        for e in super::arr(&wh["namespaceSelector"]["matchExpressions"]) {
            require(
                e,
                &what,
                &[(&[Key("key")], Text), (&[Key("operator")], Text)],
                problems,
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn missing_fields_are_named() {
        let role = json!({"kind": "Role", "apiVersion": "v1", "metadata": {"name": "r"}});
        assert_eq!(problems(&role), ["Role r: no rules"]);
        let dep = json!({"kind": "Deployment", "metadata": {"name": "d"},
                         "spec": {"selector": {"matchLabels": {}},
                                  "template": {"metadata": {"labels": {}},
                                               "spec": {"volumes": [], "containers": [{"args": "serve", "volumeMounts": []}]}}}});
        assert_eq!(
            problems(&dep),
            ["Deployment d: spec.template.spec.containers[0].args is not a list"]
        );
        let cm = json!({"kind": "ConfigMap", "metadata": {}});
        assert_eq!(problems(&cm), ["ConfigMap None: no metadata.name"]);
    }
}
