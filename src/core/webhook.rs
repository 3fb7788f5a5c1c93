//! The two webhooks as one entry point: which decision a request gets.

use serde_json::Value;

use crate::admission::{Decision, DenyCode, Request, Ruling};
use crate::ruleset::{Budget, RuleSet};
use crate::scope::Scope;
use crate::{mutate, pool_authority, validate};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Webhook {
    Mutate,
    Validate,
}

impl Webhook {
    pub fn as_str(self) -> &'static str {
        match self {
            Webhook::Mutate => "mutate",
            Webhook::Validate => "validate",
        }
    }

    /// Whether deciding may run Rego, whose time only the policy time limit bounds: always when
    /// validating; when mutating, only if placement policies may choose pools (otherwise the
    /// mutating webhook does placement only: microseconds, linear in the size-limited request).
    pub fn runs_policies(self, rules: &RuleSet) -> bool {
        match self {
            Webhook::Validate => true,
            Webhook::Mutate => rules.config.placement.is_some() && !rules.placement.is_empty(),
        }
    }

    /// How many policies one decision may evaluate per object.
    pub fn policy_count(self, rules: &RuleSet) -> usize {
        match self {
            Webhook::Validate => rules.policies.len() + rules.placement.len(),
            Webhook::Mutate => rules.placement.len(),
        }
    }
}

impl RuleSet {
    /// Who may set, change or remove the labels poolguard trusts on a Namespace (`req` is a
    /// Namespace request): the part of a Namespace's validation that runs no policy.
    pub fn pool_authority(&self, req: &Request) -> Decision {
        pool_authority::check(req, &self.config)
    }

    /// Whether [`decide`](RuleSet::decide) reads the labels of the request's namespace
    /// (`scope.labels`). It does not for a Namespace's own validation when no constraint is
    /// loaded: who may set the labels poolguard trusts is read from the request alone. The
    /// server then does not look the namespace up, so a namespace being created costs no read
    /// of the API server and no share of its rate limit.
    pub fn reads_namespace_labels(&self, webhook: Webhook, req: &Request) -> bool {
        !(webhook == Webhook::Validate && req.is_namespace() && !self.policies.has_constraints())
    }

    /// Decides `req` for `webhook` in `scope`, each policy evaluation within `budget`.
    pub fn decide(
        &self,
        webhook: Webhook,
        req: &Request,
        scope: Scope,
        budget: Budget,
    ) -> Decision {
        let limit = budget.limit(&self.config);
        match webhook {
            Webhook::Mutate => mutate::mutate(req, scope, self, limit),
            Webhook::Validate if req.is_namespace() => {
                // Who may set the labels poolguard trusts first; then the constraints that
                // match Namespaces (Gatekeeper's most common: required labels).
                let authority = self.pool_authority(req);
                if !authority.allowed() || !self.reads_namespace_labels(webhook, req) {
                    return authority;
                }
                validate::validate(req, scope, self, limit)
            }
            Webhook::Validate => validate::validate(req, scope, self, limit),
        }
    }

    /// What admission does with `object`: the mutating webhook's decision (when `mutating`:
    /// where the API server sends the request to it), then the validating webhook's on the
    /// object as mutated. `review` makes the AdmissionReview request for an object. `Ok` is the
    /// object as it would be stored, `Err` the refusal's message.
    pub fn admit(
        &self,
        object: &Value,
        mutating: bool,
        review: impl Fn(&Value) -> Value,
        scope: Scope,
        budget: Budget,
    ) -> Result<Value, String> {
        let decide = |webhook: Webhook, object: &Value| -> Decision {
            let review = review(object);
            match Request::from_value(&review) {
                Ok(req) => self.decide(webhook, &req, scope, budget),
                Err(e) => Decision::deny(DenyCode::BadRequest, e.0),
            }
        };
        let mut stored = object.clone();
        if mutating {
            match decide(Webhook::Mutate, object).ruling {
                Ruling::Deny { message, .. } => return Err(message),
                Ruling::Allow { patch: Some(patch) } => json_patch::patch(&mut stored, &patch)
                    .map_err(|e| format!("the mutating webhook's patch does not apply: {e}"))?,
                Ruling::Allow { patch: None } => {}
            }
        }
        match decide(Webhook::Validate, &stored).ruling {
            Ruling::Deny { message, .. } => Err(message),
            Ruling::Allow { .. } => Ok(stored),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use crate::labels::Labels;
    use crate::policy::PolicySet;
    use serde_json::{json, Value};

    /// A Namespace CREATE by `user` of a namespace labelled `agentpool=gpu`.
    fn namespace_create(user: &str) -> Value {
        json!({"uid": "u", "kind": {"group": "", "version": "v1", "kind": "Namespace"},
            "resource": {"group": "", "version": "v1", "resource": "namespaces"},
            "name": "team", "namespace": "team", "operation": "CREATE",
            "userInfo": {"username": user, "groups": [if user == "admin" { "system:masters" } else { "system:authenticated" }]},
            "object": {"apiVersion": "v1", "kind": "Namespace",
                "metadata": {"name": "team", "labels": {"agentpool": "gpu"}}}})
    }

    fn pod_create() -> Value {
        json!({"uid": "u", "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "name": "p", "namespace": "team", "operation": "CREATE",
            "userInfo": {"username": "bob"},
            "object": {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "x"}]}}})
    }

    fn plain_rules() -> RuleSet {
        RuleSet::new(
            Config::default(),
            PolicySet::default(),
            Default::default(),
            "cfg",
        )
        .unwrap()
    }

    #[test]
    fn a_namespace_is_decided_without_its_stored_labels_unless_a_constraint_may_read_them() {
        let rules = plain_rules();
        let stored: Labels = [("agentpool".to_string(), "pool1".to_string())].into();
        for user in ["admin", "editor"] {
            let raw = namespace_create(user);
            let req = Request::from_value(&raw).unwrap();
            assert!(!rules.reads_namespace_labels(Webhook::Validate, &req));
            // The claim the server relies on: whatever the lookup would find, the same decision.
            let decide = |labels: Option<&Labels>| {
                let scope = Scope {
                    labels,
                    pools: None,
                };
                rules.decide(Webhook::Validate, &req, scope, Budget::FULL)
            };
            let (unlooked, looked) = (decide(None), decide(Some(&stored)));
            assert_eq!(unlooked, looked, "{user}");
            assert_eq!(unlooked.allowed(), user == "admin", "{user}: {unlooked:?}");
            // The mutating webhook is never sent Namespaces, but would read them.
            assert!(rules.reads_namespace_labels(Webhook::Mutate, &req));
        }
        let raw = pod_create();
        let pod = Request::from_value(&raw).unwrap();
        assert!(rules.reads_namespace_labels(Webhook::Validate, &pod));
        assert!(rules.reads_namespace_labels(Webhook::Mutate, &pod));

        // A constraint may match Namespaces by their labels: then they are read.
        let files = [
            (
                std::path::PathBuf::from("template.yaml"),
                include_str!("../../testdata/gatekeeper/allowedrepos/template.yaml").to_string(),
            ),
            (
                std::path::PathBuf::from("constraint.yaml"),
                include_str!("../../testdata/gatekeeper/allowedrepos/constraint.yaml").to_string(),
            ),
        ];
        let (with_constraint, _) = crate::ruleset::RuleSet::with_gatekeeper(
            Config::default(),
            PolicySet::default(),
            Default::default(),
            crate::gatekeeper::Files::of(&files),
            "cfg.yaml",
        )
        .unwrap();
        let raw = namespace_create("admin");
        let req = Request::from_value(&raw).unwrap();
        assert!(with_constraint.reads_namespace_labels(Webhook::Validate, &req));
    }
}
