//! The two webhooks as one entry point: which decision a request gets.

use serde_json::Value;

use crate::admission::Operation;
use crate::admission::{Decision, DenyCode, Request, Ruling};
use crate::config::OnError;
use crate::labels::Labels;
use crate::ruleset::{Budget, RuleSet};
use crate::scope::Scope;
use crate::{exceptions, mutate, placement_policy, pool_authority, validate};

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
            Webhook::Mutate => rules.runs_placement_policies(),
        }
    }

    /// Whether every decision of this webhook under `rules` runs in time bounded by the
    /// object's size, with no Rego of a user's: no placement policy is run, and every SIT
    /// policy (a rollout's stored versions included) is a shipped one, decided by its Rust copy
    /// (its own Rego, linear in the input, where the copy declines one). Such a decision may be
    /// made on the async worker that read the request, without a hand-off to the blocking
    /// pool that costs more than it; any other decision can run as long as its time limit, so
    /// it is made on the blocking pool, where it holds up no other request.
    pub fn bounded(self, rules: &RuleSet) -> bool {
        let shipped = |policy: &crate::policy::Policy| policy.shipped().is_some();
        let placement_runs = rules.runs_placement_policies();
        match self {
            Webhook::Mutate => !placement_runs,
            Webhook::Validate => {
                !placement_runs
                    && rules.policies.iter().all(shipped)
                    && rules.rollouts.policies.values().all(|rollout| {
                        [&rollout.current, &rollout.previous]
                            .into_iter()
                            .flatten()
                            .all(|version| shipped(&version.policy))
                    })
            }
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
    /// Whether placement policies choose pools (some namespaces' pods get a pool chosen).
    pub fn runs_placement_policies(&self) -> bool {
        self.config.placement.is_some() && !self.placement.is_empty()
    }

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
                self.namespace(req, || validate::validate(req, scope, self, limit))
            }
            Webhook::Validate if req.is_policy_exception() => self.exception(req, scope),
            Webhook::Validate => validate::validate(req, scope, self, limit),
        }
    }

    /// A PolicyException being created or updated: refused (403, saying why) unless it has a
    /// ticket and an expiry within `exceptions.maxDuration`, is in a namespace of
    /// `exceptions.namespaces`, and names only loaded policies (or `placement`).
    fn exception(&self, req: &Request, scope: Scope) -> Decision {
        if !matches!(req.operation, Operation::Create | Operation::Update) {
            return Decision::allow();
        }
        let Some(object) = req.object else {
            return Decision::deny(DenyCode::BadRequest, "the PolicyException has no object");
        };
        let Some(now) = scope.now else {
            return Decision::deny(
                DenyCode::InternalError,
                "no clock to check the PolicyException's expiry against",
            );
        };
        match exceptions::check_written(object, &self.config, &|p| self.knows(p), now) {
            Ok(()) => Decision::allow(),
            Err(why) => Decision::deny(DenyCode::Forbidden, why),
        }
    }

    /// A Namespace's validation: who may set the labels poolguard trusts first, decided from the
    /// request alone; then, when it is allowed and constraints match Namespaces (Gatekeeper's
    /// most common: required labels), `constraints`.
    fn namespace(&self, req: &Request, constraints: impl FnOnce() -> Decision) -> Decision {
        let authority = self.pool_authority(req);
        if !authority.allowed() || !self.reads_namespace_labels(Webhook::Validate, req) {
            return authority;
        }
        constraints()
    }

    /// The answer to a request whose policies could not be evaluated (`what` says why: no
    /// evaluation slot, the deadline passed): a validating one gets `evaluation.onError`
    /// ([`RuleSet::on_error`]). Who may change a Namespace's guarded labels runs no policy: it
    /// is decided as always, never left to `onError` (which may allow). A mutating request is
    /// still placed when its namespace names its pool (no policy is needed for that, and
    /// admitted without the patch the pod would run on any node when the validating webhook is
    /// also allowed by `onError`); a pod whose pool placement policies would choose is refused
    /// with 503, whatever `onError` says.
    pub fn unevaluated(
        &self,
        webhook: Webhook,
        req: &Request,
        labels: Option<&Labels>,
        what: &str,
    ) -> Decision {
        match webhook {
            Webhook::Validate if req.is_namespace() => {
                self.namespace(req, || self.on_error(what))
            }
            Webhook::Validate => self.on_error(what),
            Webhook::Mutate if placement_policy::chooses(labels, &self.config) => Decision::deny(
                DenyCode::Unavailable,
                format!("{what}, so no pool could be chosen for the pod; it is refused whatever evaluation.onError says"),
            ),
            Webhook::Mutate => {
                let scope = Scope { labels, pools: None, now: None };
                self.decide(webhook, req, scope, Budget::FULL)
            }
        }
    }

    /// `evaluation.onError` for a request that could not be decided because of `what`: the
    /// one place the policy for evaluation failures is applied.
    pub fn on_error(&self, what: &str) -> Decision {
        match self.config.evaluation.on_error {
            OnError::Deny => Decision::deny(
                DenyCode::InternalError,
                format!("{what}, so the request is refused (evaluation.onError: deny)"),
            ),
            OnError::Allow => Decision {
                warnings: vec![format!(
                    "{what}; allowed because evaluation.onError is allow"
                )],
                ..Decision::allow()
            },
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

    /// testdata's K8sAllowedRepos template and constraint (Pods' images from registry.k8s.io).
    fn allowed_repos_constraint() -> RuleSet {
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
        let (rules, _) = RuleSet::with_gatekeeper(
            Config::default(),
            PolicySet::default(),
            Default::default(),
            crate::gatekeeper::Files::of(&files),
            "cfg",
        )
        .unwrap();
        rules
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
    fn the_pod_document_is_built_only_when_a_sit_policy_is_loaded() {
        // Constraints alone read the review and their parameters, never the document.
        let constraints = allowed_repos_constraint();
        assert!(!constraints.policies().reads_document());
        let sit = crate::policy::template::from_rego(
            "images",
            "package images\ninfringement[{\"msg\": m}] { input.services[_]; m := \"x\"; false }\n"
                .to_string(),
            "images.rego".into(),
        );
        let sit = PolicySet::compile(&[sit]).unwrap();
        assert!(sit.reads_document());
        let mixed =
            PolicySet::with_constraints(sit, constraints.policies().iter().cloned().collect())
                .unwrap();
        assert!(mixed.reads_document());
        // No policy at all: nothing to build it for.
        assert!(!PolicySet::default().reads_document());
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
                    now: None,
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
        let with_constraint = allowed_repos_constraint();
        let raw = namespace_create("admin");
        let req = Request::from_value(&raw).unwrap();
        assert!(with_constraint.reads_namespace_labels(Webhook::Validate, &req));
    }

    #[test]
    fn decisions_are_bounded_without_a_users_rego() {
        use crate::policy::template::{from_yaml, Template};
        let shipped = |name: &str, edit: &str| -> Template {
            let text = std::fs::read_to_string(format!(
                "{}/../../policies/{name}.yaml",
                env!("CARGO_MANIFEST_DIR")
            ))
            .unwrap();
            let text = text.replacen(
                &format!("  package {name}\n"),
                &format!("  package {name}\n{edit}"),
                1,
            );
            from_yaml(&text, format!("{name}.yaml").into()).unwrap()
        };
        let rules = |templates: &[Template], placement: &str| {
            let config = Config::parse(&format!("policies:\n  allowedrepositories: {{parameters: {{repositories: [registry.example.com/]}}}}\n{placement}"), "cfg").unwrap();
            let placement = if placement.is_empty() {
                Default::default()
            } else {
                crate::placement_policy::PlacementSet::compile(&[from_yaml(
                    &std::fs::read_to_string(format!(
                        "{}/../../policies/placement/gpuonly.yaml",
                        env!("CARGO_MANIFEST_DIR")
                    ))
                    .unwrap(),
                    "gpuonly.yaml".into(),
                )
                .unwrap()])
                .unwrap()
            };
            RuleSet::new(
                config,
                PolicySet::compile(templates).unwrap(),
                placement,
                "cfg",
            )
            .unwrap()
        };
        let both = |rules: &RuleSet| {
            (
                Webhook::Mutate.bounded(rules),
                Webhook::Validate.bounded(rules),
            )
        };
        // Nothing, and the shipped policies as shipped: bounded.
        assert_eq!(both(&plain_rules()), (true, true));
        assert_eq!(
            both(&rules(&[shipped("allowedrepositories", "")], "")),
            (true, true)
        );
        // The same Rego with one comment more is a user's.
        assert_eq!(
            both(&rules(&[shipped("allowedrepositories", "  # mine\n")], "")),
            (true, false)
        );
        // Placement policies choosing pools: neither webhook.
        let placement = "placement: {pools: [gpu], chooseValue: auto, policies: {gpuonly: {}}}\n";
        assert_eq!(
            both(&rules(&[shipped("allowedrepositories", "")], placement)),
            (false, false)
        );
        // A Gatekeeper constraint.
        assert_eq!(both(&allowed_repos_constraint()), (true, false));
    }

    /// K8sAllowedRepos reads `input.review.object.spec` only: the pods of one ReplicaSet (each
    /// its own uid, name and labels, one spec) are decided once and remembered; another spec is
    /// decided again.
    #[test]
    fn a_constraint_is_remembered_by_the_parts_of_the_review_it_reads() {
        let rules = allowed_repos_constraint();
        let decide = |uid: &str, image: &str| {
            let mut raw = pod_create();
            raw["uid"] = json!(uid);
            raw["name"] = json!(format!("web-{uid}"));
            raw["object"]["metadata"] = json!({"name": format!("web-{uid}"), "labels": {"n": uid}});
            raw["object"]["spec"]["containers"][0]["image"] = json!(image);
            let req = Request::from_value(&raw).unwrap();
            let scope = Scope {
                labels: None,
                pools: None,
                now: None,
            };
            let d = rules.decide(Webhook::Validate, &req, scope, Budget::FULL);
            (d.allowed(), rules.policies().memo_stats().0)
        };
        assert_eq!(decide("a", "registry.k8s.io/pause:3"), (true, (0, 1)));
        assert_eq!(decide("b", "registry.k8s.io/pause:3"), (true, (1, 1)));
        assert_eq!(decide("c", "docker.io/nginx:1"), (false, (1, 2)));
        assert_eq!(decide("d", "docker.io/nginx:1"), (false, (2, 2)));
    }

    #[test]
    fn a_request_left_unevaluated_gets_on_error_except_where_no_policy_is_needed() {
        let rules = |on_error: &str| {
            let config = Config::parse(
                &format!("evaluation: {{onError: {on_error}}}\nplacement: {{pools: [gpu], chooseValue: auto, policies: {{}}}}\n"),
                "cfg",
            )
            .unwrap();
            RuleSet::new(config, PolicySet::default(), Default::default(), "cfg").unwrap()
        };
        let (deny, allow) = (rules("deny"), rules("allow"));
        let pod_review = pod_create();
        let pod = Request::from_value(&pod_review).unwrap();
        let what = "poolguard is busy";
        // Validation: onError, both ways, naming why.
        let denied = deny.unevaluated(Webhook::Validate, &pod, None, what);
        assert!(!denied.allowed());
        assert!(format!("{denied:?}")
            .contains("poolguard is busy, so the request is refused (evaluation.onError: deny)"));
        let allowed = allow.unevaluated(Webhook::Validate, &pod, None, what);
        assert!(allowed.allowed());
        assert_eq!(
            allowed.warnings,
            ["poolguard is busy; allowed because evaluation.onError is allow"]
        );
        // Who may label a Namespace is decided as always, even when onError allows.
        let namespace_review = namespace_create("bob");
        let namespace = Request::from_value(&namespace_review).unwrap();
        assert!(!allow
            .unevaluated(Webhook::Validate, &namespace, None, what)
            .allowed());
        // A pod whose pool the placement policies would choose is refused whatever onError says;
        // one whose namespace names its pool is still placed.
        let choose: Labels = [("agentpool".to_string(), "auto".to_string())].into();
        let refused = allow.unevaluated(Webhook::Mutate, &pod, Some(&choose), what);
        assert!(
            format!("{refused:?}").contains("no pool could be chosen"),
            "{refused:?}"
        );
        let named: Labels = [("agentpool".to_string(), "gpu".to_string())].into();
        let placed = allow.unevaluated(Webhook::Mutate, &pod, Some(&named), what);
        assert!(
            matches!(placed.ruling, Ruling::Allow { patch: Some(_) }),
            "{placed:?}"
        );
    }

    #[test]
    fn the_budget_shares_the_time_left_among_the_evaluations() {
        use crate::admission::Operation;
        use std::time::Duration;
        let config = Config::default();
        let configured = Duration::from_millis(config.evaluation.timeout_millis);
        let left = configured / 2;
        // Three policies on CREATE: a third each (rounded up to the millisecond); on UPDATE
        // each runs twice.
        let create = Budget::within(&config, 3, Operation::Create, left).unwrap();
        assert_eq!(
            create.limit(&config).as_micros(),
            (left / 3).as_micros().div_ceil(1000) * 1000
        );
        let update = Budget::within(&config, 3, Operation::Update, left).unwrap();
        assert_eq!(
            update.limit(&config).as_micros(),
            (left / 6).as_micros().div_ceil(1000) * 1000
        );
        // Time enough: the configured limit stands; no time left: one millisecond each.
        assert_eq!(
            Budget::within(&config, 1, Operation::Create, configured * 2),
            None
        );
        let none_left = Budget::within(&config, 5, Operation::Create, Duration::ZERO).unwrap();
        assert_eq!(none_left.limit(&config), Duration::from_millis(1));
        // An exact split (a first try's slice): no rounding, the evaluations end within it.
        let slice = Duration::from_millis(2);
        let split = |n, op| Budget::split(n, op, slice).limit(&config);
        assert_eq!(split(4, Operation::Create), Duration::from_micros(500));
        assert_eq!(split(4, Operation::Update), Duration::from_micros(250));
        assert_eq!(split(0, Operation::Create), slice);
        assert_eq!(
            Budget::split(3, Operation::Create, Duration::ZERO).limit(&config),
            Duration::from_micros(1)
        );
        // Never above the configured limit.
        assert_eq!(
            Budget::split(1, Operation::Create, configured * 2).limit(&config),
            configured
        );
    }
}
