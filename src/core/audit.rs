//! The audit of objects already stored in the cluster: each Pod or workload poolguard validates
//! gets one result per applied policy and one for its placement, from the same checks the
//! validating webhook runs ([`validate::check`]); for a Pod bound to a node, the node's pool is
//! checked too. An object of another kind gets one result per Gatekeeper constraint that
//! matches it ([`validate::constraints_only`], as admission judges it). Pure: the objects,
//! namespace labels and node labels are given.
//!
//! Result semantics (the `result` of a PolicyReport entry):
//! - `placement`: `pass` when the object selects its namespace's pool (a Pod bound to a node:
//!   and that node is in the pool; a workload template without the selector: its pods get it when
//!   created); `fail` for a Pod without the pool's selector, any conflicting or unreadable
//!   selector, or a Pod bound to a node of another pool or of no pool; `error` when the Pod's
//!   node is not in the node list given; `skip` when the namespace has no pool.
//! - a policy: `pass` without infringements; `fail` with any, whatever the policy's enforcement
//!   (deny, warn and dryrun alike: the object does not meet the policy; the enforcement, which
//!   decides what admission does about it, is in `properties`); `error` when the policy could
//!   not be evaluated or the pod spec cannot be read; `skip` when it is Pending (a dependency
//!   is not in the required compliance: not evaluated), the message naming the dependency —
//!   `pass`, with the same message, for a policy with `ignorePending`. Policies the config
//!   gives no parameters for the namespace's pool are not applied, at admission as here, and
//!   get no result.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;
use serde_json::{json, Value};

use crate::admission::{pod_spec_path, DenyCode, PodSpecAt};
use crate::config::{Config, Enforcement};
use crate::exceptions::ExceptionMark;
use crate::namespaces::NodeLabels;
use crate::node_selector::Placement;
use crate::policy::{Evaluation, Outcome};
use crate::ruleset::{Budget, RuleSet};
use crate::scope::Scope;
use crate::validate::{self, one_line};

/// The policy (and rule) name of the placement result.
pub(crate) const PLACEMENT: &str = "placement";
/// The rule of a policy's result: SIT policies have one entry rule.
pub(crate) const INFRINGEMENT_RULE: &str = "infringement";
/// The policy of a result for an object that cannot be read at all.
pub(crate) const OBJECT_POLICY: &str = "poolguard";
/// Property naming the rollout group of a result for a policy under a rollout.
pub(crate) const ROLLOUT_GROUP: &str = "rolloutGroup";
/// Property naming the policy version that produced a result under a rollout.
pub(crate) const POLICY_VERSION: &str = "policyVersion";
/// Property of a constraint's `fail` results, one per violation: which of them (1, 2, ...);
/// counts of objects take the first only.
pub(crate) const VIOLATION: &str = "violation";
/// Longest message of one result (several infringements are joined into one).
const MAX_MESSAGE_CHARS: usize = 1000;

/// The outcome of one check, as PolicyReports spell it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    Pass,
    Fail,
    Warn,
    Error,
    Skip,
}

impl Verdict {
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Pass => "pass",
            Verdict::Fail => "fail",
            Verdict::Warn => "warn",
            Verdict::Error => "error",
            Verdict::Skip => "skip",
        }
    }
}

/// How much a result matters, as PolicyReports spell it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    Critical,
    High,
    Medium,
    Low,
    Info,
}

impl Severity {
    /// Placement and deny-enforced policies are high; warn medium; dryrun low.
    pub fn of(enforcement: Enforcement) -> Severity {
        match enforcement {
            Enforcement::Deny => Severity::High,
            Enforcement::Warn => Severity::Medium,
            Enforcement::Dryrun => Severity::Low,
        }
    }
}

/// The object a result is about (an ObjectReference).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Resource {
    pub api_version: String,
    pub kind: String,
    pub name: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub namespace: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub uid: String,
}

impl Resource {
    /// The reference to `object`, from its apiVersion, kind and metadata.
    pub fn of(object: &Value) -> Resource {
        let text = |v: &Value| v.as_str().unwrap_or_default().to_string();
        let meta = &object["metadata"];
        Resource {
            api_version: text(&object["apiVersion"]),
            kind: text(&object["kind"]),
            name: text(&meta["name"]),
            namespace: text(&meta["namespace"]),
            uid: text(&meta["uid"]),
        }
    }
}

/// One check of one object.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AuditResult {
    pub resource: Resource,
    pub policy: String,
    pub rule: String,
    pub result: Verdict,
    pub message: String,
    pub severity: Severity,
    /// `pool`, `enforcement`, `infringements`, `node`, `nodePool`, as they apply.
    pub properties: BTreeMap<String, String>,
}

impl AuditResult {
    /// The `error` result of an object that cannot be audited at all (not an object, no
    /// namespace, a document that does not parse); `resource` says what is known of it.
    pub fn unreadable(resource: Resource, reason: &str) -> AuditResult {
        AuditResult {
            resource,
            policy: OBJECT_POLICY.to_string(),
            rule: "read".to_string(),
            result: Verdict::Error,
            message: cap(one_line(reason)),
            severity: Severity::High,
            properties: BTreeMap::new(),
        }
    }
}

/// A resource the cluster audit lists: the kinds with a pod spec ([`LISTED`]), and those the
/// loaded Gatekeeper constraints name ([`constraint_kinds`], found by the shell's discovery).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listed {
    pub group: Cow<'static, str>,
    pub version: Cow<'static, str>,
    pub kind: Cow<'static, str>,
    /// The resource name in API paths.
    pub plural: Cow<'static, str>,
}

impl Listed {
    /// `v1` or `group/version`, as objects spell it.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.to_string()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// The API path that lists this resource in `namespace` (a DNS label, as the API server
    /// names namespaces).
    pub fn namespaced_path(&self, namespace: &str) -> String {
        if self.group.is_empty() {
            format!(
                "/api/{}/namespaces/{namespace}/{}",
                self.version, self.plural
            )
        } else {
            format!(
                "/apis/{}/{}/namespaces/{namespace}/{}",
                self.group, self.version, self.plural
            )
        }
    }

    /// The API path that lists this resource in every namespace.
    pub fn list_path(&self) -> String {
        if self.group.is_empty() {
            format!("/api/{}/{}", self.version, self.plural)
        } else {
            format!("/apis/{}/{}/{}", self.group, self.version, self.plural)
        }
    }
}

const fn listed(
    group: &'static str,
    version: &'static str,
    kind: &'static str,
    plural: &'static str,
) -> Listed {
    Listed {
        group: Cow::Borrowed(group),
        version: Cow::Borrowed(version),
        kind: Cow::Borrowed(kind),
        plural: Cow::Borrowed(plural),
    }
}

/// Every kind with a pod spec, which the cluster audit always lists, Pods first.
pub const LISTED: [Listed; 8] = [
    listed("", "v1", "Pod", "pods"),
    listed("", "v1", "ReplicationController", "replicationcontrollers"),
    listed("apps", "v1", "Deployment", "deployments"),
    listed("apps", "v1", "ReplicaSet", "replicasets"),
    listed("apps", "v1", "StatefulSet", "statefulsets"),
    listed("apps", "v1", "DaemonSet", "daemonsets"),
    listed("batch", "v1", "Job", "jobs"),
    listed("batch", "v1", "CronJob", "cronjobs"),
];

/// The kinds without a pod spec that the loaded Gatekeeper constraints match, for the cluster
/// audit to list besides [`LISTED`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ConstraintKinds {
    /// (API group, kind) named in some constraint's `spec.match.kinds`; the group is `*` when
    /// the constraint takes any group.
    pub named: BTreeSet<(String, String)>,
    /// Constraints that match every kind (`kinds: ["*"]`, or no `kinds`): the audit cannot list
    /// every resource of a cluster, so for them it lists the named kinds only.
    pub every_kind: Vec<String>,
}

/// What [`ConstraintKinds`] says of `rules`' constraints.
pub fn constraint_kinds(rules: &RuleSet) -> ConstraintKinds {
    let mut out = ConstraintKinds::default();
    for name in rules.policies.names() {
        let Some(source) = rules.policies.get(name).and_then(|p| p.constraint_source()) else {
            continue;
        };
        let kinds = &source.matching.kinds;
        if kinds.is_empty()
            || kinds
                .iter()
                .any(|k| k.kinds.is_empty() || k.kinds.iter().any(|k| k == "*"))
        {
            out.every_kind.push(name.to_string());
        }
        for selector in kinds {
            let groups: Vec<&str> =
                if selector.api_groups.is_empty() || selector.api_groups.iter().any(|g| g == "*") {
                    vec!["*"]
                } else {
                    selector.api_groups.iter().map(String::as_str).collect()
                };
            for kind in selector.kinds.iter().filter(|k| *k != "*") {
                for group in &groups {
                    if *group == "*" || pod_spec_path(group, kind).is_none() {
                        out.named.insert((group.to_string(), kind.clone()));
                    }
                }
            }
        }
    }
    out
}

/// The results for one stored object. A Pod or workload (a kind with a pod spec): its
/// placement result, then one per applied policy in name order. Any other kind, namespaced or
/// not: one per Gatekeeper constraint that matches it (none without constraints). `labels` are its namespace's
/// labels; `nodes` the labels of the cluster's nodes, when known (without them a bound Pod's
/// node is not checked).
///
/// `scope` holds the namespace's labels and, for namespaces whose pods get their pool chosen,
/// the pools: the object is then checked against the pool the placement policies choose for it,
/// as the validating webhook does ([`validate::pool_for`]).
pub fn audit(
    object: &Value,
    scope: Scope,
    nodes: Option<&NodeLabels>,
    rules: &RuleSet,
) -> Vec<AuditResult> {
    let (config, policies) = (&rules.config, &rules.policies);
    let limit = Budget::FULL.limit(config);
    let resource = Resource::of(object);
    let (group, version) = resource
        .api_version
        .rsplit_once('/')
        .unwrap_or(("", &resource.api_version));
    let path = pod_spec_path(group, &resource.kind);
    if path.is_none() && !policies.has_constraints() {
        return Vec::new();
    }
    let namespace = resource.namespace.as_str();
    // An audit has no AdmissionRequest: policies reading `input.review` get the object and
    // where it lives, with no operation, user or old object.
    let mut review = json!({
        "kind": {"group": group, "version": version, "kind": resource.kind},
        "name": resource.name,
        "object": object,
    });
    let Some(path) = path else {
        // No pod spec: the constraints that match it, as admission judges it. A cluster-scoped
        // object has no namespace.
        if !namespace.is_empty() {
            review["namespace"] = Value::from(namespace);
        }
        let mut results = Vec::new();
        for outcome in validate::constraints_only(&review, scope, rules, limit) {
            policy_results(outcome, &resource, &BTreeMap::new(), rules, &mut results);
        }
        return results;
    };
    if namespace.is_empty() {
        return vec![AuditResult::unreadable(
            resource,
            "the object has no metadata.namespace",
        )];
    }
    review["namespace"] = Value::from(namespace);
    let chosen = validate::pool_for(
        PodSpecAt {
            object,
            path,
            namespace,
        },
        scope,
        Some(&review),
        rules,
        limit,
    );
    let (pool, refusal) = match &chosen {
        Ok(pool) => (pool.as_deref(), None),
        Err(refusal) => (None, Some(refusal)),
    };
    let checks = validate::check(
        PodSpecAt {
            object,
            path,
            namespace,
        },
        pool,
        scope,
        Some(&review),
        rules,
        limit,
    );
    let mut base = BTreeMap::new();
    if let Some(pool) = pool {
        base.insert("pool".to_string(), pool.to_string());
    }
    let mut results = vec![match refusal {
        // No pool can take it, or none could be chosen.
        Some((code, reasons)) => AuditResult {
            resource: resource.clone(),
            policy: PLACEMENT.to_string(),
            rule: PLACEMENT.to_string(),
            result: if *code == DenyCode::Unavailable {
                Verdict::Error
            } else {
                Verdict::Fail
            },
            message: cap(reasons.join("; ")),
            severity: Severity::High,
            properties: base.clone(),
        },
        None => {
            let mut r = placement_result(
                object,
                path.len() == 1,
                &resource,
                pool.zip(checks.placement),
                nodes,
                config,
                base.clone(),
            );
            if let (Verdict::Fail, Some(mark)) = (r.result, &checks.placement_exception) {
                r.result = Verdict::Skip;
                r.message = cap(format!("allowed by {mark}: {}", r.message));
                mark_exception(&mut r.properties, mark);
            }
            r
        }
    }];
    match checks.policies {
        Err(reason) => {
            for name in policies.names().filter(|name| reported(rules, name)) {
                if let Some(settings) = config.effective_policy(name, pool) {
                    results.push(policy_result(
                        &resource,
                        &base,
                        name,
                        settings.enforcement,
                        Verdict::Error,
                        format!("not evaluated: the pod spec cannot be read: {reason}"),
                    ));
                }
            }
        }
        Ok(outcomes) => {
            for outcome in outcomes {
                policy_results(outcome, &resource, &base, rules, &mut results);
            }
        }
    }
    results
}

/// Whether the audit reports the policy `name`: every policy but a constraint whose scoped
/// actions leave the audit point out.
fn reported(rules: &RuleSet, name: &str) -> bool {
    rules
        .policies
        .get(name)
        .and_then(|p| p.constraint_source())
        .is_none_or(|c| c.audited)
}

/// A policy's result for `resource`: `base` properties and the enforcement.
fn policy_result(
    resource: &Resource,
    base: &BTreeMap<String, String>,
    policy: &str,
    enforcement: Enforcement,
    verdict: Verdict,
    message: String,
) -> AuditResult {
    let mut properties = base.clone();
    properties.insert("enforcement".into(), enforcement.as_str().into());
    AuditResult {
        resource: resource.clone(),
        policy: policy.to_string(),
        rule: INFRINGEMENT_RULE.to_string(),
        result: verdict,
        message: cap(message),
        severity: Severity::of(enforcement),
        properties,
    }
}

/// The results of one policy's outcome: one, or for a constraint with violations one per
/// violation, as Gatekeeper reports them; none for a constraint whose scoped actions leave the
/// audit point out.
fn policy_results(
    outcome: Outcome,
    resource: &Resource,
    base: &BTreeMap<String, String>,
    rules: &RuleSet,
    results: &mut Vec<AuditResult>,
) {
    if !reported(rules, &outcome.policy) {
        return;
    }
    let constraint = rules
        .policies
        .get(&outcome.policy)
        .is_some_and(|p| p.is_constraint());
    let (verdict, message, count) = match &outcome.result {
        Evaluation::Ran(Ok(found)) if found.is_empty() => {
            (Verdict::Pass, "no infringement".to_string(), Some(0))
        }
        Evaluation::Ran(Ok(found)) => match &outcome.exception {
            // Allowed by a PolicyException: reported as skip, with what it found and which
            // exception; once it expires the same object fails again.
            Some(mark) => (
                Verdict::Skip,
                format!("allowed by {mark}: {}", found.join("; ")),
                Some(found.len()),
            ),
            None => (Verdict::Fail, found.join("; "), Some(found.len())),
        },
        Evaluation::Ran(Err(error)) => (
            Verdict::Error,
            format!("could not be evaluated: {}", one_line(error)),
            None,
        ),
        Evaluation::Pending(pending) if pending.ignore_pending => (
            Verdict::Pass,
            format!(
                "not evaluated (Pending, counted as compliant: ignorePending): {}",
                pending.unmet
            ),
            None,
        ),
        Evaluation::Pending(pending) => (
            Verdict::Skip,
            format!("not evaluated (Pending): {}", pending.unmet),
            None,
        ),
    };
    let mut r = policy_result(
        resource,
        base,
        &outcome.policy,
        outcome.enforcement,
        verdict,
        message,
    );
    if let Some(mark) = &outcome.rollout {
        r.properties
            .insert(ROLLOUT_GROUP.into(), mark.group.clone());
        r.properties
            .insert(POLICY_VERSION.into(), mark.version.clone());
        if let Some(status) = mark.status {
            r.properties
                .insert("rolloutStatus".into(), format!("{status:?}"));
        }
    }
    if let Some(count) = count {
        r.properties
            .insert("infringements".into(), count.to_string());
    }
    if let (Some(mark), Verdict::Skip) = (&outcome.exception, r.result) {
        mark_exception(&mut r.properties, mark);
    }
    match outcome.result {
        Evaluation::Ran(Ok(found))
            if constraint && outcome.exception.is_none() && !found.is_empty() =>
        {
            for (i, message) in found.into_iter().enumerate() {
                let mut one = r.clone();
                one.message = cap(message);
                one.properties.insert(VIOLATION.into(), (i + 1).to_string());
                results.push(one);
            }
        }
        _ => results.push(r),
    }
}

/// The properties a result allowed by a PolicyException carries: `exception`
/// (namespace/name), `ticket` and `expires`.
fn mark_exception(properties: &mut BTreeMap<String, String>, mark: &ExceptionMark) {
    properties.insert("exception".into(), mark.exception.clone());
    properties.insert("ticket".into(), mark.ticket.clone());
    properties.insert("expires".into(), mark.expires.clone());
}

/// The placement row of an object: `placed` is its pool and the pod spec's placement against
/// it (`None`: its namespace has no pool); `nodes` the node labels, to check a running pod's.
fn placement_result(
    object: &Value,
    is_pod: bool,
    resource: &Resource,
    placed: Option<(&str, Placement)>,
    nodes: Option<&NodeLabels>,
    config: &Config,
    mut properties: BTreeMap<String, String>,
) -> AuditResult {
    let namespace = &resource.namespace;
    let key = &config.node_selector_key;
    let node = object["spec"]["nodeName"]
        .as_str()
        .filter(|n| is_pod && !n.is_empty());
    if let Some(node) = node {
        properties.insert("node".into(), node.to_string());
    }
    let (verdict, message) = match placed {
        None => (
            Verdict::Skip,
            format!(
                "namespace {namespace:?} has no pool (no {} label)",
                config.namespace_label
            ),
        ),
        Some((pool, placement)) => match placement {
            Placement::Conflict(message) | Placement::Invalid(message) => (Verdict::Fail, message),
            Placement::Patch(_) if !is_pod => (
                Verdict::Pass,
                format!("its pods get nodeSelector {key}={pool} when they are created"),
            ),
            Placement::Patch(_) => (
                Verdict::Fail,
                format!(
                    "namespace {namespace:?} is assigned to pool {pool:?} but the pod has no nodeSelector {key}={pool}: it was created before the namespace had its pool, or the mutating webhook did not run"
                ),
            ),
            Placement::Satisfied => match (node, nodes) {
                (Some(node), Some(nodes)) => match nodes.get(node) {
                    None => (
                        Verdict::Error,
                        format!("the pod is bound to node {node:?}, which is not in the node list, so its pool is unknown"),
                    ),
                    Some(labels) => match labels.get(key.as_str()).filter(|p| !p.is_empty()) {
                        Some(node_pool) => {
                            properties.insert("nodePool".into(), node_pool.clone());
                            if node_pool == pool {
                                (Verdict::Pass, format!("runs on node {node:?} of pool {pool:?}"))
                            } else {
                                (
                                    Verdict::Fail,
                                    format!("namespace {namespace:?} is assigned to pool {pool:?} but the pod runs on node {node:?} of pool {node_pool:?}"),
                                )
                            }
                        }
                        None => (
                            Verdict::Fail,
                            format!("namespace {namespace:?} is assigned to pool {pool:?} but the pod runs on node {node:?}, which has no {key} label (no pool)"),
                        ),
                    },
                },
                (Some(node), None) => (
                    Verdict::Pass,
                    format!("selects pool {pool:?} (node {node:?} not checked: no node list)"),
                ),
                (None, _) => (Verdict::Pass, format!("selects pool {pool:?}")),
            },
        },
    };
    AuditResult {
        resource: resource.clone(),
        policy: PLACEMENT.to_string(),
        rule: PLACEMENT.to_string(),
        result: verdict,
        message: cap(message),
        severity: Severity::High,
        properties,
    }
}

/// `text`, at most [`MAX_MESSAGE_CHARS`] characters.
fn cap(text: String) -> String {
    if text.chars().count() <= MAX_MESSAGE_CHARS {
        return text;
    }
    let mut out: String = text.chars().take(MAX_MESSAGE_CHARS).collect();
    out.push_str(" ...");
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_listed_resources_are_exactly_the_audited_kinds() {
        for listed in LISTED {
            assert!(audited(&listed.api_version(), &listed.kind), "{listed:?}");
        }
        assert_eq!(LISTED[0].list_path(), "/api/v1/pods");
        assert_eq!(LISTED[2].list_path(), "/apis/apps/v1/deployments");
        assert_eq!(
            LISTED[0].namespaced_path("team-a"),
            "/api/v1/namespaces/team-a/pods"
        );
        assert_eq!(
            LISTED[2].namespaced_path("team-a"),
            "/apis/apps/v1/namespaces/team-a/deployments"
        );
        assert_eq!(LISTED[7].api_version(), "batch/v1");
        // Every kind with a pod spec is listed.
        for (group, kind) in [
            ("", "Pod"),
            ("", "ReplicationController"),
            ("apps", "Deployment"),
            ("apps", "ReplicaSet"),
            ("apps", "StatefulSet"),
            ("apps", "DaemonSet"),
            ("batch", "Job"),
            ("batch", "CronJob"),
        ] {
            assert!(
                LISTED.iter().any(|l| l.group == group && l.kind == kind),
                "{kind}"
            );
        }
        assert!(!audited("v1", "Namespace"));
    }

    use super::*;
    use crate::labels::Labels;

    /// Whether objects of this apiVersion and kind have a pod spec: Pods and the workload
    /// kinds, which every audit checks.
    fn audited(api_version: &str, kind: &str) -> bool {
        let group = api_version.rsplit_once('/').map_or("", |(g, _)| g);
        pod_spec_path(group, kind).is_some()
    }
    use crate::policy::template;
    use crate::policy::PolicySet;

    const REPOS: &str = r#"package repos
infringement[{"msg": msg}] {
  some name
  image := input.services[_].functional_requirements[name].image
  not startswith(image, input.parameters.prefix)
  msg := sprintf("%v pulls %v", [name, image])
}
"#;
    const BROKEN: &str = r#"package broken
infringement[{"msg": msg}] {
  input.services[_]
  msg := 1 / 0
}
"#;

    fn rules_of(config: &Config, policies: &PolicySet) -> RuleSet {
        RuleSet {
            config: config.clone(),
            policies: policies.clone(),
            ..RuleSet::default()
        }
    }

    fn policies() -> PolicySet {
        PolicySet::compile(&[
            template::from_rego("repos", REPOS.to_string(), "repos.rego".into()),
            template::from_rego("broken", BROKEN.to_string(), "broken.rego".into()),
        ])
        .unwrap()
    }

    /// `repos` on everywhere (warn in pool gpu), `broken` only in pool "broken".
    fn config() -> Config {
        Config::parse(
            r#"
policies:
  repos:
    parameters: {prefix: "registry.example.com/"}
pools:
  gpu:
    policies:
      repos: {enforcement: warn}
  broken:
    policies:
      broken: {parameters: {}}
"#,
            "config",
        )
        .unwrap()
    }

    fn scope(labels: Option<&Labels>) -> Scope<'_> {
        Scope {
            labels,
            pools: None,
            now: None,
        }
    }

    fn labels(pool: &str) -> Labels {
        Labels::from([("agentpool".to_string(), pool.to_string())])
    }

    fn pod(name: &str, namespace: &str, spec: Value) -> Value {
        json!({"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": name, "namespace": namespace, "uid": format!("uid-{name}")},
               "spec": spec})
    }

    fn good_spec(pool: &str, node: Option<&str>) -> Value {
        let mut spec = json!({"nodeSelector": {"agentpool": pool},
                              "containers": [{"name": "app", "image": "registry.example.com/app:1"}]});
        if let Some(node) = node {
            spec["nodeName"] = json!(node);
        }
        spec
    }

    fn nodes() -> NodeLabels {
        NodeLabels::from([
            ("n1".to_string(), labels("pool1")),
            ("g1".to_string(), labels("gpu")),
            ("bare".to_string(), Labels::new()),
        ])
    }

    /// (policy, verdict, message part, property checks)
    type Want = (
        &'static str,
        Verdict,
        &'static str,
        &'static [(&'static str, &'static str)],
    );
    /// (case, object, its namespace's labels, node labels, wanted results)
    type Case = (
        &'static str,
        Value,
        Option<Labels>,
        Option<NodeLabels>,
        Vec<Want>,
    );

    #[test]
    fn audit_table() {
        let deployment = |selector: Value, image: &str| {
            json!({"apiVersion": "apps/v1", "kind": "Deployment",
                   "metadata": {"name": "web", "namespace": "team"},
                   "spec": {"template": {"spec": {"nodeSelector": selector,
                            "containers": [{"name": "web", "image": image}]}}}})
        };
        let cases: Vec<Case> = vec![
            (
                "pod on a node of its pool",
                pod("a", "team", good_spec("pool1", Some("n1"))),
                Some(labels("pool1")),
                Some(nodes()),
                vec![
                    (
                        PLACEMENT,
                        Verdict::Pass,
                        "node \"n1\" of pool \"pool1\"",
                        &[("pool", "pool1"), ("node", "n1"), ("nodePool", "pool1")],
                    ),
                    (
                        "repos",
                        Verdict::Pass,
                        "no infringement",
                        &[("enforcement", "deny"), ("infringements", "0")],
                    ),
                ],
            ),
            (
                "pod on a node of another pool",
                pod("b", "team", good_spec("pool1", Some("g1"))),
                Some(labels("pool1")),
                Some(nodes()),
                vec![
                    (
                        PLACEMENT,
                        Verdict::Fail,
                        "pool \"pool1\" but the pod runs on node \"g1\" of pool \"gpu\"",
                        &[("nodePool", "gpu")],
                    ),
                    ("repos", Verdict::Pass, "", &[]),
                ],
            ),
            (
                "pod on a node of no pool",
                pod("c", "team", good_spec("pool1", Some("bare"))),
                Some(labels("pool1")),
                Some(nodes()),
                vec![
                    (
                        PLACEMENT,
                        Verdict::Fail,
                        "which has no agentpool label",
                        &[],
                    ),
                    ("repos", Verdict::Pass, "", &[]),
                ],
            ),
            (
                "pod on an unknown node",
                pod("d", "team", good_spec("pool1", Some("gone"))),
                Some(labels("pool1")),
                Some(nodes()),
                vec![
                    (
                        PLACEMENT,
                        Verdict::Error,
                        "not in the node list",
                        &[("node", "gone")],
                    ),
                    ("repos", Verdict::Pass, "", &[]),
                ],
            ),
            (
                "pod bound, no node list: selector only",
                pod("e", "team", good_spec("pool1", Some("g1"))),
                Some(labels("pool1")),
                None,
                vec![
                    (PLACEMENT, Verdict::Pass, "not checked", &[]),
                    ("repos", Verdict::Pass, "", &[]),
                ],
            ),
            (
                "pod not bound yet",
                pod("f", "team", good_spec("pool1", None)),
                Some(labels("pool1")),
                Some(nodes()),
                vec![
                    (PLACEMENT, Verdict::Pass, "selects pool \"pool1\"", &[]),
                    ("repos", Verdict::Pass, "", &[]),
                ],
            ),
            (
                "pod without the selector",
                pod(
                    "g",
                    "team",
                    json!({"containers": [{"name": "app", "image": "registry.example.com/app"}]}),
                ),
                Some(labels("pool1")),
                Some(nodes()),
                vec![
                    (
                        PLACEMENT,
                        Verdict::Fail,
                        "has no nodeSelector agentpool=pool1",
                        &[],
                    ),
                    ("repos", Verdict::Pass, "", &[]),
                ],
            ),
            (
                "pod selecting another pool (even if placed by the mutating webhook once)",
                {
                    let mut p = pod("h", "team", good_spec("gpu", Some("g1")));
                    p["metadata"]["annotations"] = json!({"poolguard.io/pool": "gpu"});
                    p
                },
                Some(labels("pool1")),
                Some(nodes()),
                vec![
                    (
                        PLACEMENT,
                        Verdict::Fail,
                        "agentpool=\"gpu\" is not allowed here",
                        &[],
                    ),
                    ("repos", Verdict::Pass, "", &[]),
                ],
            ),
            (
                "pod with a foreign image, warn in pool gpu: fail, enforcement in properties",
                pod(
                    "i",
                    "ml",
                    json!({"nodeSelector": {"agentpool": "gpu"},
                    "containers": [{"name": "app", "image": "docker.io/evil/miner"}, {"name": "side", "image": "nginx"}]}),
                ),
                Some(labels("gpu")),
                None,
                vec![
                    (PLACEMENT, Verdict::Pass, "", &[]),
                    (
                        "repos",
                        Verdict::Fail,
                        "app pulls docker.io/evil/miner; side pulls nginx",
                        &[
                            ("enforcement", "warn"),
                            ("infringements", "2"),
                            ("pool", "gpu"),
                        ],
                    ),
                ],
            ),
            (
                "namespace without a pool: placement skipped, cluster-wide policies run",
                pod(
                    "j",
                    "free",
                    json!({"containers": [{"name": "app", "image": "nginx"}]}),
                ),
                None,
                Some(nodes()),
                vec![
                    (PLACEMENT, Verdict::Skip, "has no pool", &[]),
                    (
                        "repos",
                        Verdict::Fail,
                        "app pulls nginx",
                        &[("enforcement", "deny")],
                    ),
                ],
            ),
            (
                "a policy that errors; a policy applied only in its pool",
                pod("k", "b", good_spec("broken", None)),
                Some(labels("broken")),
                None,
                vec![
                    (PLACEMENT, Verdict::Pass, "", &[]),
                    (
                        "broken",
                        Verdict::Error,
                        "could not be evaluated",
                        &[("enforcement", "deny")],
                    ),
                    ("repos", Verdict::Pass, "", &[]),
                ],
            ),
            (
                "unreadable pod spec: every applied policy is an error",
                pod(
                    "l",
                    "team",
                    json!({"nodeSelector": {"agentpool": "pool1"}, "containers": {"name": "x"}}),
                ),
                Some(labels("pool1")),
                None,
                vec![
                    (PLACEMENT, Verdict::Pass, "", &[]),
                    (
                        "repos",
                        Verdict::Error,
                        "pod spec cannot be read: spec.containers must be a list",
                        &[],
                    ),
                ],
            ),
            (
                "workload template without the selector: its pods get it",
                deployment(json!(null), "registry.example.com/web"),
                Some(labels("pool1")),
                None,
                vec![
                    (PLACEMENT, Verdict::Pass, "when they are created", &[]),
                    ("repos", Verdict::Pass, "", &[]),
                ],
            ),
            (
                "workload template conflicting, foreign image",
                deployment(json!({"agentpool": "gpu"}), "quay.io/x"),
                Some(labels("pool1")),
                None,
                vec![
                    (
                        PLACEMENT,
                        Verdict::Fail,
                        "agentpool=\"gpu\" is not allowed here",
                        &[],
                    ),
                    ("repos", Verdict::Fail, "web pulls quay.io/x", &[]),
                ],
            ),
            (
                "workload template selector not an object",
                deployment(json!("pool1"), "registry.example.com/web"),
                Some(labels("pool1")),
                None,
                vec![
                    (
                        PLACEMENT,
                        Verdict::Fail,
                        "nodeSelector must be an object",
                        &[],
                    ),
                    ("repos", Verdict::Pass, "", &[]),
                ],
            ),
            (
                "pod without a namespace",
                json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "m"}, "spec": {}}),
                None,
                None,
                vec![(OBJECT_POLICY, Verdict::Error, "no metadata.namespace", &[])],
            ),
        ];
        let (config, policies) = (config(), policies());
        for (name, object, labels, nodes, want) in cases {
            let got = audit(
                &object,
                scope(labels.as_ref()),
                nodes.as_ref(),
                &rules_of(&config, &policies),
            );
            let summary: Vec<_> = got
                .iter()
                .map(|r| (&r.policy, r.result, &r.message))
                .collect();
            assert_eq!(got.len(), want.len(), "{name}: {summary:#?}");
            for (r, (policy, verdict, part, props)) in got.iter().zip(want) {
                assert_eq!(
                    (r.policy.as_str(), r.result),
                    (policy, verdict),
                    "{name}: {summary:#?}"
                );
                assert!(
                    r.message.contains(part),
                    "{name}: {:?} lacks {part:?}",
                    r.message
                );
                for (k, v) in props {
                    assert_eq!(
                        r.properties.get(*k).map(String::as_str),
                        Some(*v),
                        "{name}: {policy} {k}: {:?}",
                        r.properties
                    );
                }
                assert_eq!(r.resource, Resource::of(&object), "{name}");
            }
        }
    }

    #[test]
    fn pending_policies_are_skipped_or_pass_with_ignore_pending() {
        let rules = crate::ruleset::RuleSet::new(
            Config::parse(
                r#"
policies:
  repos: {parameters: {prefix: "registry.example.com/"}}
  nolatest: {parameters: {}, dependencies: [{policy: repos}]}
  remedy:
    parameters: {}
    enforcement: warn
    dependencies: [{policy: repos, compliance: NonCompliant}]
    ignorePending: true
  onplaced: {parameters: {}, dependencies: [{policy: placement}]}
"#,
                "config",
            )
            .unwrap(),
            PolicySet::compile(&[
                template::from_rego("repos", REPOS.to_string(), "repos.rego".into()),
                template::from_rego(
                    "nolatest",
                    "package nolatest\ninfringement[{\"msg\": msg}] {\n  image := input.services[_].functional_requirements[_].image\n  endswith(image, \":latest\")\n  msg := sprintf(\"%v is latest\", [image])\n}\n".to_string(),
                    "nolatest.rego".into(),
                ),
                template::from_rego(
                    "remedy",
                    "package remedy\ninfringement[{\"msg\": \"remedy ran\"}] { true }\n".to_string(),
                    "remedy.rego".into(),
                ),
                template::from_rego(
                    "onplaced",
                    "package onplaced\ninfringement[{\"msg\": \"never\"}] { input.never }\n".to_string(),
                    "onplaced.rego".into(),
                ),
            ])
            .unwrap(), Default::default(),
            "config",
        )
        .unwrap();
        let pending = "not evaluated (Pending): dependency";
        let ignored = "not evaluated (Pending, counted as compliant: ignorePending): dependency repos is Compliant, NonCompliant required";
        let deployment = json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "team"},
            "spec": {"template": {"spec": {"containers": [{"name": "web", "image": "registry.example.com/web:1"}]}}}});
        // (case, object, namespace labels, (policy, verdict, message part) in result order)
        type Row = (&'static str, Verdict, String);
        let cases: Vec<(&str, Value, Option<Labels>, Vec<Row>)> = vec![
            (
                "allowed repository, latest tag: the dependent runs and fails",
                pod("a", "team", json!({"nodeSelector": {"agentpool": "pool1"},
                    "containers": [{"name": "app", "image": "registry.example.com/app:latest"}]})),
                Some(labels("pool1")),
                vec![
                    (PLACEMENT, Verdict::Pass, String::new()),
                    ("nolatest", Verdict::Fail, "registry.example.com/app:latest is latest".into()),
                    ("onplaced", Verdict::Pass, "no infringement".into()),
                    ("remedy", Verdict::Pass, ignored.into()),
                    ("repos", Verdict::Pass, String::new()),
                ],
            ),
            (
                "foreign image: the dependent is skipped, naming its dependency",
                pod("b", "team", json!({"nodeSelector": {"agentpool": "pool1"},
                    "containers": [{"name": "app", "image": "quay.io/app:latest"}]})),
                Some(labels("pool1")),
                vec![
                    (PLACEMENT, Verdict::Pass, String::new()),
                    ("nolatest", Verdict::Skip, format!("{pending} repos is NonCompliant, Compliant required")),
                    ("onplaced", Verdict::Pass, String::new()),
                    ("remedy", Verdict::Fail, "remedy ran".into()),
                    ("repos", Verdict::Fail, "app pulls quay.io/app:latest".into()),
                ],
            ),
            (
                "pod without the pool's selector: placement NonCompliant",
                pod("c", "team", json!({"containers": [{"name": "app", "image": "registry.example.com/app:1"}]})),
                Some(labels("pool1")),
                vec![
                    (PLACEMENT, Verdict::Fail, String::new()),
                    ("nolatest", Verdict::Pass, String::new()),
                    ("onplaced", Verdict::Skip, format!("{pending} placement is NonCompliant, Compliant required")),
                    ("remedy", Verdict::Pass, ignored.into()),
                    ("repos", Verdict::Pass, String::new()),
                ],
            ),
            (
                "workload template without the selector: its pods get it, placement Compliant",
                deployment.clone(),
                Some(labels("pool1")),
                vec![
                    (PLACEMENT, Verdict::Pass, String::new()),
                    ("nolatest", Verdict::Pass, String::new()),
                    ("onplaced", Verdict::Pass, String::new()),
                    ("remedy", Verdict::Pass, ignored.into()),
                    ("repos", Verdict::Pass, String::new()),
                ],
            ),
            (
                "namespace without a pool: placement does not apply",
                deployment,
                None,
                vec![
                    (PLACEMENT, Verdict::Skip, String::new()),
                    ("nolatest", Verdict::Pass, String::new()),
                    ("onplaced", Verdict::Skip, format!("{pending} placement does not apply (the namespace has no pool), Compliant required")),
                    ("remedy", Verdict::Pass, ignored.into()),
                    ("repos", Verdict::Pass, String::new()),
                ],
            ),
        ];
        for (name, object, labels, want) in cases {
            let got = audit(&object, scope(labels.as_ref()), None, &rules);
            let summary: Vec<_> = got
                .iter()
                .map(|r| (r.policy.as_str(), r.result, r.message.as_str()))
                .collect();
            assert_eq!(got.len(), want.len(), "{name}: {summary:#?}");
            for (r, (policy, verdict, part)) in got.iter().zip(&want) {
                assert_eq!(
                    (r.policy.as_str(), r.result),
                    (*policy, *verdict),
                    "{name}: {summary:#?}"
                );
                assert!(
                    r.message.contains(part.as_str()),
                    "{name}: {:?} lacks {part:?}",
                    r.message
                );
                if r.message.starts_with("not evaluated") {
                    assert!(!r.properties.contains_key("infringements"), "{name}");
                    assert!(r.properties.contains_key("enforcement"), "{name}");
                }
            }
        }
    }

    /// The rules of Gatekeeper documents (each a file's text), with the default config.
    fn gatekeeper_rules(texts: &[&str]) -> RuleSet {
        let files: Vec<(std::path::PathBuf, String)> = texts
            .iter()
            .enumerate()
            .map(|(i, text)| (format!("file-{i}.yaml").into(), text.to_string()))
            .collect();
        crate::ruleset::RuleSet::with_gatekeeper(
            Config::default(),
            PolicySet::default(),
            Default::default(),
            crate::gatekeeper::Files::of(&files),
            "cfg.yaml",
        )
        .unwrap()
        .0
    }

    #[test]
    fn a_constraint_gets_one_result_per_violation() {
        let rules = gatekeeper_rules(&[
            include_str!("../../testdata/gatekeeper/allowedrepos/template.yaml"),
            include_str!("../../testdata/gatekeeper/allowedrepos/constraint.yaml"),
        ]);
        let audit_of = |images: &[&str]| {
            let containers: Vec<Value> = images
                .iter()
                .enumerate()
                .map(|(i, image)| json!({"name": format!("c{i}"), "image": image}))
                .collect();
            let object = pod("p", "team", json!({"containers": containers}));
            audit(&object, scope(None), None, &rules)
                .into_iter()
                .filter(|r| r.policy == "images-from-allowed-repos")
                .map(|r| {
                    (
                        r.result,
                        r.message,
                        r.properties.get(VIOLATION).cloned(),
                        r.properties.get("infringements").cloned(),
                    )
                })
                .collect::<Vec<_>>()
        };
        let two = "2".to_string();
        assert_eq!(
            audit_of(&["nginx:1", "registry.k8s.io/pause:3.10", "evil.io/x:1"]),
            [
                (
                    Verdict::Fail,
                    r#"containers c0: image nginx:1 starts with none of the allowed repos ["registry.k8s.io/"]"#.to_string(),
                    Some("1".to_string()),
                    Some(two.clone()),
                ),
                (
                    Verdict::Fail,
                    r#"containers c2: image evil.io/x:1 starts with none of the allowed repos ["registry.k8s.io/"]"#.to_string(),
                    Some(two.clone()),
                    Some(two),
                ),
            ]
        );
        // A compliant object: one pass result, as for any policy.
        assert_eq!(
            audit_of(&["registry.k8s.io/pause:3.10"]),
            [(
                Verdict::Pass,
                "no infringement".to_string(),
                None,
                Some("0".to_string())
            )]
        );
    }

    /// With constraints loaded, an object without a pod spec gets the results of the
    /// constraints that match it, as admission judges it; a cluster-scoped one too.
    #[test]
    fn other_kinds_get_the_constraints_that_match_them() {
        let rules = gatekeeper_rules(&[
            include_str!("../../testdata/gatekeeper/requiredowner/template.yaml"),
            include_str!("../../testdata/gatekeeper/requiredowner/other-kinds.yaml"),
        ]);
        let results_of = |object: Value| {
            audit(&object, scope(None), None, &rules)
                .into_iter()
                .map(|r| {
                    (
                        r.resource.kind,
                        r.policy,
                        r.result,
                        r.message,
                        r.properties.get("enforcement").cloned(),
                    )
                })
                .collect::<Vec<_>>()
        };
        let deny = Some("deny".to_string());
        assert_eq!(
            results_of(
                json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web", "namespace": "team"}})
            ),
            [(
                "Service".to_string(),
                "services-need-owner".to_string(),
                Verdict::Fail,
                "Service web has no owner label".to_string(),
                deny.clone(),
            )]
        );
        assert_eq!(
            results_of(
                json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web", "namespace": "team", "labels": {"owner": "me"}}})
            ),
            [(
                "Service".to_string(),
                "services-need-owner".to_string(),
                Verdict::Pass,
                "no infringement".to_string(),
                deny.clone(),
            )]
        );
        assert_eq!(
            results_of(
                json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team"}})
            ),
            [(
                "Namespace".to_string(),
                "namespaces-need-owner".to_string(),
                Verdict::Fail,
                "Namespace team has no owner label".to_string(),
                deny,
            )]
        );
        // No constraint matches a ConfigMap: no result.
        assert_eq!(
            results_of(
                json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "team"}})
            ),
            []
        );
    }

    /// A constraint whose scoped actions name no audit point is not reported; one naming it is.
    #[test]
    fn the_audit_reports_a_scoped_constraint_only_for_the_audit_point() {
        let constraint = |name: &str, point: &str| {
            format!(
                "apiVersion: constraints.gatekeeper.sh/v1beta1\nkind: RequiredOwner\nmetadata: {{name: {name}}}\nspec:\n  enforcementAction: scoped\n  scopedEnforcementActions: [{{action: deny, enforcementPoints: [{{name: {point}}}]}}]\n  parameters: {{label: owner}}\n"
            )
        };
        let rules = gatekeeper_rules(&[
            include_str!("../../testdata/gatekeeper/requiredowner/template.yaml"),
            &constraint("admission-only", "validation.gatekeeper.sh"),
            &constraint("audited", "audit.gatekeeper.sh"),
        ]);
        let object = json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web", "namespace": "team"}});
        let policies: Vec<String> = audit(&object, scope(None), None, &rules)
            .into_iter()
            .map(|r| r.policy)
            .collect();
        assert_eq!(policies, ["audited"]);
        // A pod spec that cannot be read: an error result for each reported policy only.
        let unreadable = pod("p", "team", json!({"containers": "not a list"}));
        let errors: Vec<(String, Verdict)> = audit(&unreadable, scope(None), None, &rules)
            .into_iter()
            .filter(|r| r.policy != PLACEMENT)
            .map(|r| (r.policy, r.result))
            .collect();
        assert_eq!(errors, [("audited".to_string(), Verdict::Error)]);
    }

    #[test]
    fn the_kinds_constraints_name_are_listed_besides_the_pod_kinds() {
        let rules = gatekeeper_rules(&[
            include_str!("../../testdata/gatekeeper/requiredowner/template.yaml"),
            include_str!("../../testdata/gatekeeper/requiredowner/other-kinds.yaml"),
            include_str!("../../testdata/gatekeeper/requiredowner/pods.yaml"),
            include_str!("../../testdata/gatekeeper/requiredowner/team-workloads.yaml"),
        ]);
        let kinds = constraint_kinds(&rules);
        // Pods are listed anyway; `apps` with kinds `*` cannot be listed kind by kind.
        assert_eq!(
            kinds.named,
            [("", "Namespace"), ("", "Service")]
                .map(|(g, k)| (g.to_string(), k.to_string()))
                .into()
        );
        assert_eq!(kinds.every_kind, ["team-web-needs-team"]);
        assert_eq!(
            constraint_kinds(&rules_of(&config(), &policies())),
            ConstraintKinds::default()
        );
    }

    #[test]
    fn other_kinds_are_not_audited() {
        let (config, policies) = (config(), policies());
        for object in [
            json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s", "namespace": "team"}}),
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team"}}),
            json!({"apiVersion": "extensions/v1beta1", "kind": "Deployment", "metadata": {"name": "d", "namespace": "team"}}),
        ] {
            assert!(
                audit(
                    &object,
                    Scope::default(),
                    None,
                    &rules_of(&config, &policies)
                )
                .is_empty(),
                "{object}"
            );
        }
        assert!(
            audited("apps/v1", "StatefulSet")
                && audited("batch/v1", "CronJob")
                && audited("v1", "Pod")
        );
        assert!(!audited("v1", "ConfigMap"));
    }

    #[test]
    fn severity_follows_enforcement_and_messages_are_capped() {
        let (config, policies) = (config(), policies());
        let many: Vec<Value> = (0..200)
            .map(|i| json!({"name": format!("container-{i}"), "image": format!("quay.io/some/long/image-{i}")}))
            .collect();
        let object = pod(
            "big",
            "ml",
            json!({"nodeSelector": {"agentpool": "gpu"}, "containers": many}),
        );
        let got = audit(
            &object,
            scope(Some(&labels("gpu"))),
            None,
            &rules_of(&config, &policies),
        );
        assert_eq!(got[0].severity, Severity::High);
        assert_eq!(got[1].severity, Severity::Medium, "warn in pool gpu");
        assert_eq!(got[1].properties["infringements"], "200");
        assert_eq!(got[1].message.chars().count(), MAX_MESSAGE_CHARS + 4);
        assert!(got[1].message.ends_with(" ..."));
    }
}
