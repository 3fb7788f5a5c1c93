//! Who may choose a namespace's pool. The namespace's pool label is the only authority for
//! placement, so setting, changing or removing it is reserved to the users and groups the config
//! names (`poolAuthority`); everyone else — a namespace editor with `patch` on their own
//! Namespace included — is refused. Pure: the request's userInfo and labels in, a decision out.

use serde_json::Value;

use crate::admission::{Decision, Operation, Request};
use crate::config::Config;

/// Decides a Namespace CREATE or UPDATE (anything else is allowed).
pub fn check(req: &Request, config: &Config) -> Decision {
    if !matches!(req.operation, Operation::Create | Operation::Update) {
        return Decision::allow();
    }
    let label = &config.namespace_label;
    let pool_of = |object: Option<&Value>| -> Result<Option<String>, String> {
        match object
            .and_then(|o| o.get("metadata"))
            .and_then(|m| m.get("labels"))
        {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Object(labels)) => match labels.get(label) {
                None | Some(Value::Null) => Ok(None),
                Some(Value::String(pool)) => Ok(Some(pool.clone())),
                Some(_) => Err(format!("label {label:?} must be a string")),
            },
            Some(_) => Err("metadata.labels must be an object".to_string()),
        }
    };
    let (new, old) = match (pool_of(req.object), pool_of(req.old_object)) {
        (Ok(new), Ok(old)) => (new, old),
        (Err(e), _) | (_, Err(e)) => return Decision::deny(400, e),
    };
    if new == old {
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
    Decision::deny(
        403,
        format!(
            "namespace {:?}: only the users and groups in poolAuthority may set, change or remove its pool label {label} (from {} to {}); {username:?} is not one of them",
            req.object.or(req.old_object).and_then(|o| o["metadata"]["name"].as_str()).unwrap_or(req.namespace),
            show(&old),
            show(&new),
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
            assert_eq!(d.allowed, allowed, "{what}: {d:?}");
            if !allowed {
                assert_eq!(d.code, 403, "{what}");
                assert!(
                    d.message.contains("team-a") && d.message.contains("poolAuthority"),
                    "{what}: {}",
                    d.message
                );
            }
        }
        let d = decide("UPDATE", Some("gpu"), Some("pool1"), editor, &config);
        assert!(
            d.message.contains("from \"pool1\" to \"gpu\""),
            "{}",
            d.message
        );
    }

    #[test]
    fn by_default_only_the_cluster_admins_choose() {
        // An empty config file gets the same groups as the built-in default.
        let parsed = Config::parse("{}", "config").unwrap();
        for config in [Config::default(), parsed] {
            let masters = json!({"username": "kubernetes-admin", "groups": ["system:masters", "system:authenticated"]});
            assert!(decide("UPDATE", Some("gpu"), None, masters, &config).allowed);
            // admin.conf of kubeadm (and kind) clusters since Kubernetes 1.29.
            let kubeadm_admin = json!({"username": "kubernetes-admin", "groups": ["kubeadm:cluster-admins", "system:authenticated"]});
            assert!(decide("UPDATE", Some("gpu"), None, kubeadm_admin, &config).allowed);
            let editor = json!({"username": "alice", "groups": ["system:authenticated"]});
            assert!(!decide("UPDATE", Some("gpu"), None, editor, &config).allowed);
        }
        // A config naming groups replaces the default.
        let config =
            Config::parse("poolAuthority:\n  groups: [platform-admins]\n", "config").unwrap();
        let masters = json!({"username": "kubernetes-admin", "groups": ["system:masters"]});
        assert!(!decide("UPDATE", Some("gpu"), None, masters, &config).allowed);
    }
}
