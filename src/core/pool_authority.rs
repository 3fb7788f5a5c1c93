//! Who may choose a namespace's pool, and change the other namespace labels poolguard trusts.
//! The namespace's pool label is the only authority for placement, and other labels decide
//! whether and how poolguard checks a namespace at all (the webhooks' opt-in labels, the
//! rollout groups' selectors), so setting, changing or removing any guarded label
//! ([`Config::guarded_labels`]) is reserved to the users and groups the config names
//! (`poolAuthority`); everyone else — a namespace editor with `patch` on their own Namespace
//! included — is refused. Pure: the request's userInfo and labels in, a decision out.
//!
//! The request's subresource plays no part: the API server lets a Namespace's labels be
//! written through `namespaces/status` and `namespaces/finalize` as well as the main resource,
//! so each is decided exactly as a main-resource UPDATE of the same objects.

use serde_json::{Map, Value};

use crate::admission::{Decision, DenyCode, Operation, Request};
use crate::config::Config;

/// Decides a Namespace CREATE or UPDATE, of the main resource or of any subresource
/// (anything else is allowed).
pub fn check(req: &Request, config: &Config) -> Decision {
    if !matches!(req.operation, Operation::Create | Operation::Update) {
        return Decision::allow();
    }
    let labels_of = |object: Option<&'_ Value>| -> Result<Option<Map<String, Value>>, String> {
        match object
            .and_then(|o| o.get("metadata"))
            .and_then(|m| m.get("labels"))
        {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Object(labels)) => Ok(Some(labels.clone())),
            Some(_) => Err("metadata.labels must be an object".to_string()),
        }
    };
    let (new, old) = match (labels_of(req.object), labels_of(req.old_object)) {
        (Ok(new), Ok(old)) => (new, old),
        (Err(e), _) | (_, Err(e)) => return Decision::deny(DenyCode::BadRequest, e),
    };
    let value =
        |labels: &Option<Map<String, Value>>, key: &str| -> Result<Option<String>, String> {
            match labels.as_ref().and_then(|l| l.get(key)) {
                None | Some(Value::Null) => Ok(None),
                Some(Value::String(v)) => Ok(Some(v.clone())),
                Some(_) => Err(format!("label {key:?} must be a string")),
            }
        };
    // Every guarded key that differs, with its old and new value.
    let mut changed = Vec::new();
    for key in config.guarded_labels() {
        let (after, before) = match (value(&new, key), value(&old, key)) {
            (Ok(after), Ok(before)) => (after, before),
            (Err(e), _) | (_, Err(e)) => return Decision::deny(DenyCode::BadRequest, e),
        };
        if after != before {
            changed.push((key, before, after));
        }
    }
    if changed.is_empty() {
        return Decision::allow();
    }
    let authority = &config.pool_authority;
    let user = &req.raw["userInfo"];
    let username = user["username"].as_str().unwrap_or_default();
    let groups = user["groups"].as_array();
    let allowed = authority.users.iter().any(|u| u == username)
        || groups.is_some_and(|gs| {
            gs.iter()
                .filter_map(Value::as_str)
                .any(|g| authority.groups.iter().any(|a| a == g))
        });
    if allowed {
        return Decision::allow();
    }
    let show = |p: &Option<String>| {
        p.as_deref()
            .map_or("none".to_string(), |p| format!("{p:?}"))
    };
    let changes: Vec<String> = changed
        .iter()
        .map(|(key, before, after)| {
            let what = if *key == config.namespace_label {
                "pool label"
            } else {
                "guarded label"
            };
            format!(
                "its {what} {key} (from {} to {})",
                show(before),
                show(after)
            )
        })
        .collect();
    let via = match req.sub_resource {
        "" => String::new(),
        sub => format!(" (through the {sub} subresource)"),
    };
    Decision::deny(
        DenyCode::Forbidden,
        format!(
            "namespace {:?}: only the users and groups in poolAuthority may set, change or remove {}{via}; {username:?} is not one of them",
            req.object.or(req.old_object).and_then(|o| o["metadata"]["name"].as_str()).unwrap_or(req.namespace),
            changes.join(", "),
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn decide(
        op: &str,
        new: Option<&str>,
        old: Option<&str>,
        user: Value,
        config: &Config,
    ) -> Decision {
        let ns = |pool: Option<&str>| match pool {
            Some(p) => {
                json!({"metadata": {"name": "team-a", "labels": {"agentpool": p, "team": "a"}}})
            }
            None => json!({"metadata": {"name": "team-a", "labels": {"team": "a"}}}),
        };
        let mut raw = json!({"uid": "u", "kind": {"group": "", "version": "v1", "kind": "Namespace"},
            "operation": op, "object": ns(new), "userInfo": user});
        if op == "UPDATE" {
            raw["oldObject"] = ns(old);
        }
        let req = Request::from_value(&raw).unwrap();
        check(&req, config)
    }

    #[test]
    fn only_the_pool_authority_chooses_pools() {
        let config: Config = serde_json::from_value(json!({
            "poolAuthority": {"users": ["system:serviceaccount:gitops:argocd"], "groups": ["platform-admins"]}
        }))
        .unwrap();
        let editor =
            json!({"username": "alice", "groups": ["system:authenticated", "team-a-editors"]});
        let admin = json!({"username": "bob", "groups": ["platform-admins"]});
        let gitops = json!({"username": "system:serviceaccount:gitops:argocd", "groups": []});
        let cases = [
            (
                "editor moves to the gpu pool",
                "UPDATE",
                Some("gpu"),
                Some("pool1"),
                &editor,
                false,
            ),
            (
                "editor labels an unlabelled namespace",
                "UPDATE",
                Some("gpu"),
                None,
                &editor,
                false,
            ),
            (
                "editor removes the pool",
                "UPDATE",
                None,
                Some("pool1"),
                &editor,
                false,
            ),
            (
                "editor creates a namespace with a pool",
                "CREATE",
                Some("gpu"),
                None,
                &editor,
                false,
            ),
            (
                "editor changes other labels",
                "UPDATE",
                Some("pool1"),
                Some("pool1"),
                &editor,
                true,
            ),
            (
                "editor creates a namespace without a pool",
                "CREATE",
                None,
                None,
                &editor,
                true,
            ),
            (
                "admin group moves it",
                "UPDATE",
                Some("gpu"),
                Some("pool1"),
                &admin,
                true,
            ),
            (
                "named service account moves it",
                "UPDATE",
                Some("gpu"),
                Some("pool1"),
                &gitops,
                true,
            ),
            (
                "no userInfo at all",
                "UPDATE",
                Some("gpu"),
                Some("pool1"),
                &Value::Null,
                false,
            ),
        ];
        for (what, op, new, old, user, allowed) in cases {
            let d = decide(op, new, old, user.clone(), &config);
            assert_eq!(d.allowed(), allowed, "{what}: {d:?}");
            if !allowed {
                assert_eq!(d.code(), Some(403), "{what}");
                assert!(
                    d.message().contains("team-a") && d.message().contains("poolAuthority"),
                    "{what}: {}",
                    d.message()
                );
            }
        }
        let d = decide("UPDATE", Some("gpu"), Some("pool1"), editor, &config);
        assert!(
            d.message().contains("from \"pool1\" to \"gpu\""),
            "{}",
            d.message()
        );
    }

    #[test]
    fn by_default_only_the_cluster_admins_choose() {
        // An empty config file gets the same groups as the built-in default.
        let parsed = Config::parse("{}", "config").unwrap();
        for config in [Config::default(), parsed] {
            let masters = json!({"username": "kubernetes-admin", "groups": ["system:masters", "system:authenticated"]});
            assert!(decide("UPDATE", Some("gpu"), None, masters, &config).allowed());
            // admin.conf of kubeadm (and kind) clusters since Kubernetes 1.29.
            let kubeadm_admin = json!({"username": "kubernetes-admin", "groups": ["kubeadm:cluster-admins", "system:authenticated"]});
            assert!(decide("UPDATE", Some("gpu"), None, kubeadm_admin, &config).allowed());
            let editor = json!({"username": "alice", "groups": ["system:authenticated"]});
            assert!(!decide("UPDATE", Some("gpu"), None, editor, &config).allowed());
        }
        // A config naming groups replaces the default.
        let config =
            Config::parse("poolAuthority:\n  groups: [platform-admins]\n", "config").unwrap();
        let masters = json!({"username": "kubernetes-admin", "groups": ["system:masters"]});
        assert!(!decide("UPDATE", Some("gpu"), None, masters, &config).allowed());
    }
}

#[cfg(test)]
mod guarded_tests {
    use super::*;
    use serde_json::json;

    const CONFIG: &str = r#"
poolAuthority:
  groups: [platform-admins]
  guardedLabels: [poolguard.example.com/enabled, tier]
policies:
  allowedrepositories:
    parameters: {repositories: ["registry.example.com/"]}
    rollout:
      groups:
        - {name: canary, namespaceSelector: {matchLabels: {risk: low}}}
        - name: standard
          namespaceSelector: {matchExpressions: [{key: example.com/stage, operator: In, values: [dev]}]}
        - {name: rest}
      minSuccessTime: 10m
      progressDeadline: 2h
"#;

    /// A Namespace UPDATE (of `sub`, "" for the main resource) from `old` to `new` labels.
    fn decide(sub: &str, old: Value, new: Value, user: &Value, config: &Config) -> Decision {
        let ns = |labels: Value| json!({"metadata": {"name": "team-a", "labels": labels}});
        let mut raw = json!({"uid": "u", "kind": {"group": "", "version": "v1", "kind": "Namespace"},
            "resource": {"group": "", "version": "v1", "resource": "namespaces"},
            "name": "team-a", "operation": "UPDATE", "object": ns(new), "oldObject": ns(old),
            "userInfo": user});
        if !sub.is_empty() {
            raw["subResource"] = json!(sub);
        }
        let req = Request::from_value(&raw).unwrap();
        check(&req, config)
    }

    #[test]
    fn guarded_keys_are_the_pool_label_the_listed_ones_and_the_rollout_selectors() {
        let config = Config::parse(CONFIG, "t").unwrap();
        assert_eq!(
            config.guarded_labels(),
            [
                "agentpool",
                "poolguard.example.com/enabled",
                "tier",
                "risk",
                "example.com/stage"
            ]
        );
        assert_eq!(Config::default().guarded_labels(), ["agentpool"]);
    }

    #[test]
    fn every_guarded_key_through_every_subresource() {
        let config = Config::parse(CONFIG, "t").unwrap();
        let editor =
            json!({"username": "alice", "groups": ["system:authenticated", "team-a-editors"]});
        let admin = json!({"username": "bob", "groups": ["platform-admins"]});
        let base = json!({"team": "a", "agentpool": "pool1", "poolguard.example.com/enabled": "true",
            "tier": "gold", "risk": "high", "example.com/stage": "prod"});
        let keys = [
            "agentpool",
            "poolguard.example.com/enabled",
            "tier",
            "risk",
            "example.com/stage",
        ];
        for sub in ["", "status", "finalize"] {
            for key in keys {
                let mut changed = base.clone();
                changed[key] = json!("other");
                let mut removed = base.clone();
                removed.as_object_mut().unwrap().remove(key);
                let cases = [
                    ("change", base.clone(), changed),
                    ("remove", base.clone(), removed.clone()),
                    ("set", removed, base.clone()),
                ];
                for (what, old, new) in cases {
                    let ctx = format!("{what} {key} via {sub:?}");
                    let d = decide(sub, old.clone(), new.clone(), &editor, &config);
                    assert!(!d.allowed(), "{ctx}: {d:?}");
                    assert_eq!(d.code(), Some(403), "{ctx}");
                    assert!(
                        d.message().contains(key) && d.message().contains("poolAuthority"),
                        "{ctx}: {}",
                        d.message()
                    );
                    if !sub.is_empty() {
                        assert!(d.message().contains(sub), "{ctx}: {}", d.message());
                    }
                    assert!(decide(sub, old, new, &admin, &config).allowed(), "{ctx}");
                }
            }
            // Labels poolguard does not trust stay the editor's.
            let mut other = base.clone();
            other["team"] = json!("b");
            other["new-label"] = json!("x");
            assert!(
                decide(sub, base.clone(), other, &editor, &config).allowed(),
                "{sub:?}"
            );
        }
    }

    #[test]
    fn a_subresource_is_decided_as_the_main_resource() {
        let config = Config::default();
        let editor = json!({"username": "alice", "groups": ["system:authenticated"]});
        let masters = json!({"username": "root", "groups": ["system:masters"]});
        let labelled = |pool: &str| json!({"agentpool": pool});
        let cases = [
            (labelled("pool1"), labelled("gpu")),
            (json!({}), labelled("gpu")),
            (labelled("pool1"), json!({})),
            (labelled("pool1"), json!({"agentpool": "pool1", "x": "y"})),
            (json!(null), json!(null)),
        ];
        for (old, new) in cases {
            for user in [&editor, &masters] {
                let main = decide("", old.clone(), new.clone(), user, &config);
                for sub in ["status", "finalize"] {
                    let d = decide(sub, old.clone(), new.clone(), user, &config);
                    assert_eq!(d.allowed(), main.allowed(), "{sub}: {old} -> {new}: {d:?}");
                    assert_eq!(d.code(), main.code(), "{sub}: {old} -> {new}");
                }
            }
        }
    }
}
