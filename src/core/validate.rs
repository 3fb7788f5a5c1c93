//! The validating webhook: runs on the final object (after every mutating webhook) and checks
//! pool placement, the images the pod spec pulls and the SIT policies, for Pods and for workload
//! templates at apply time.

use std::collections::HashSet;
use std::time::Duration;

use serde_json::Value;

use crate::admission::{
    pod_spec_path, summary_of, value_at, Decision, DenyCode, Operation, PodSpecAt, PolicyResult,
    Request,
};
use crate::config::{Config, Enforcement, OnError};
use crate::exceptions::{ExceptionMark, PolicyException, Target, PLACEMENT};
use crate::node_selector::{self, Placement};
use crate::placement_policy::{self, Chosen};
use crate::pod_images;
use crate::policy::dependencies::State;
use crate::policy::{input, Evaluation, Outcome};
use crate::ruleset::{RuleSet, Subject};
use crate::scope::Scope;

/// Longest policy error quoted in a denial or warning (Rego errors can quote whole sources).
const MAX_ERROR_CHARS: usize = 300;

/// One reason to deny an object.
#[derive(Debug, PartialEq)]
struct Denial {
    code: DenyCode,
    reason: String,
    kind: Kind,
}

impl Denial {
    fn new(code: DenyCode, reason: String, kind: Kind) -> Denial {
        Denial { code, reason, kind }
    }
}

/// What a denial says about the object, for UPDATE: whether the old object already had it.
#[derive(Debug, PartialEq)]
enum Kind {
    /// Something found on an object that was read: not new when the old object, read as well,
    /// had the same finding.
    Found(Finding),
    /// The object could not be read (its pod spec, or what placement needs of it), so what it
    /// holds is unknown: not new only when the old object's pod spec is the very same value
    /// (the same input gives the same result); otherwise the object is judged on its own.
    Unread,
    /// A check failed (a policy error, the pools unknown): never taken as known, whatever the
    /// old object got, since an error hides whatever the check would have found.
    Failed,
}

/// A finding, by its source and content (never by the text of a message built around it).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Finding {
    /// The placement policies refused every pool, for this reason.
    Pool(String),
    /// Placement against the pool: missing selector (`None`), or the conflict.
    Placement(Option<String>),
    /// One infringement of a policy: (policy, message).
    Policy(String, String),
}

/// Everything found wrong with one object.
#[derive(Debug, Default, PartialEq)]
struct Findings {
    denials: Vec<Denial>,
    warnings: Vec<String>,
    dryrun: Vec<String>,
    evaluations: Vec<PolicyResult>,
    /// The pool the object was checked against: its namespace's, or the one chosen for it.
    pool: Option<String>,
    /// Every policy infringement found, whatever the enforcement: (policy, message).
    infringements: Vec<(String, String)>,
    /// The PolicyExceptions that allowed findings ([`Decision::exceptions`]).
    exceptions: Vec<String>,
}

/// Decides one validating request.
///
/// On UPDATE only what the old object did not already have is denied, so an object admitted
/// under older rules stays updatable. Findings are compared by source and content (policy and
/// infringement, placement conflict), and only where both objects were read: when the old object
/// could not be read (an image ID, too many images, anything the pod spec reader refuses) the
/// new one is judged on its own, and a failed check (a policy error) is never taken as known.
/// The one exception is an unreadable pod spec left exactly as it was, which the old object
/// had. Checked again whatever the old object had: a pod's scheduling directives: while a pod is not
/// bound to a node its nodeSelector and affinity may still change (scheduling gates), and any
/// such change must keep it on its namespace's pool.
///
/// In a namespace whose pods get their pool chosen, the object is checked against the pool the
/// placement policies choose for it ([`placement_policy::select`], run again here: the
/// `poolguard.io/pool` annotation and the selector are the client's to write): a pod must
/// select a pool they accept, and a workload template that no pool can take is refused.
pub fn validate(req: &Request, scope: Scope, rules: &RuleSet, limit: Duration) -> Decision {
    let config = &rules.config;
    if !matches!(req.operation, Operation::Create | Operation::Update) {
        return Decision::allow();
    }
    let path = pod_spec_path(req.group, req.kind);
    // An object without a pod spec is judged by the Gatekeeper constraints that match it only.
    if path.is_none() && !rules.policies.has_constraints() {
        return Decision::allow();
    }
    let is_pod = path.is_some_and(|p| p.len() == 1);
    let checked_subresource =
        req.sub_resource.is_empty() || (is_pod && req.sub_resource == "ephemeralcontainers");
    let Some(object) = req.object.filter(|_| checked_subresource) else {
        return Decision::allow();
    };
    let mut found = findings(req, req.raw, object, path, scope, rules, limit);
    if req.operation == Operation::Update {
        if let Some(old) = req.old_object {
            // What the old object already had is asked of the old object: policies that read
            // `input.review` (Gatekeeper constraints, placement policies) get a review whose
            // `object` is the old one, or the new object's infringements would all look known.
            // Made only when one may read it (a review can hold megabytes).
            let old_review = reads_review(rules).then(|| review_of(req.raw, old));
            let review = old_review.as_ref().unwrap_or(req.raw);
            let before = findings(req, review, old, path, scope, rules, limit);
            let same_spec = match path {
                Some(path) => value_at(old, path) == value_at(object, path),
                None => old == object,
            };
            only_new_infringements_deny(&mut found, &before);
            found.denials = new_denials(found.denials, before.denials, same_spec);
            if let (true, Some(pool)) = (is_pod, &found.pool) {
                found
                    .denials
                    .extend(rescheduling(req, old, object, pool, config));
            }
        }
    }
    let code = if found.denials.iter().any(|d| d.code == DenyCode::Forbidden) {
        Some(DenyCode::Forbidden)
    } else {
        found.denials.first().map(|d| d.code)
    };
    let decision = match code {
        None => Decision::allow(),
        Some(code) => Decision::deny(
            code,
            summary(&found.denials, config.limits.max_denial_reasons),
        ),
    };
    Decision {
        warnings: found.warnings,
        dryrun: found.dryrun,
        policy_results: found.evaluations,
        exceptions: found.exceptions,
        ..decision
    }
}

/// The denials of the new object that the old one did not have: a finding is known when the
/// old object, read, had it; an unreadable object is known only when its pod spec did not
/// change (`same_spec`); a failure never is.
fn new_denials(new: Vec<Denial>, old: Vec<Denial>, same_spec: bool) -> Vec<Denial> {
    let mut known: HashSet<Finding> = HashSet::new();
    let mut old_unread = false;
    for denial in old {
        match denial.kind {
            Kind::Found(finding) => {
                known.insert(finding);
            }
            Kind::Unread => old_unread = true,
            Kind::Failed => {}
        }
    }
    new.into_iter()
        .filter(|denial| match &denial.kind {
            Kind::Found(finding) => !known.contains(finding),
            Kind::Unread => !(old_unread && same_spec),
            Kind::Failed => true,
        })
        .collect()
}

/// On UPDATE, a policy's result `denies` only for an infringement the old object, read, did
/// not have (as [`new_denials`] keeps a policy's denials); an error still does.
fn only_new_infringements_deny(new: &mut Findings, old: &Findings) {
    let known: HashSet<&(String, String)> = old.infringements.iter().collect();
    let fresh: HashSet<&str> = new
        .infringements
        .iter()
        .filter(|finding| !known.contains(finding))
        .map(|(policy, _)| policy.as_str())
        .collect();
    for result in new.evaluations.iter_mut().filter(|r| !r.error) {
        result.denies = fresh.contains(result.policy.as_str());
    }
}

/// The reasons, one per line, at most `max` of them and a count of the rest.
fn summary(denials: &[Denial], max: usize) -> String {
    let reasons: Vec<&str> = denials.iter().map(|d| d.reason.as_str()).collect();
    summary_of(&reasons, max)
}

/// A pod not yet bound to a node whose nodeSelector, affinity or scheduling gates changed must
/// select its namespace's pool exactly, as at creation: otherwise a pod created before its
/// namespace had a pool (or with a selector the old rules allowed) could pick any node.
fn rescheduling(
    req: &Request,
    old: &Value,
    new: &Value,
    pool: &str,
    config: &Config,
) -> Option<Denial> {
    let bound = old["spec"]["nodeName"]
        .as_str()
        .is_some_and(|n| !n.is_empty());
    let changed = ["nodeSelector", "affinity", "schedulingGates"]
        .iter()
        .any(|field| old["spec"].get(field) != new["spec"].get(field));
    if bound || !changed {
        return None;
    }
    let why = |detail: String| {
        Some(Denial::new(
            DenyCode::Forbidden,
            format!("the pod is not scheduled yet and its scheduling directives changed, so it must stay on pool {pool:?}: {detail}"),
            Kind::Failed,
        ))
    };
    match node_selector::place(
        new.get("spec"),
        &["spec"],
        req.namespace,
        pool,
        &config.placement_rules(),
    ) {
        Placement::Satisfied => None,
        Placement::Patch(_) => why(format!(
            "it has no nodeSelector {}={pool}",
            config.node_selector_key
        )),
        Placement::Conflict(message) | Placement::Invalid(message) => why(message),
    }
}

/// What the validating webhook's checks find on one object, before admission turns it into a
/// decision (and the audit into report results): the one place where placement and the policies
/// are run on a pod spec.
#[derive(Debug, Clone, PartialEq)]
pub struct Checks {
    /// The pod spec's placement against the namespace's pool; `None` when the namespace has no
    /// pool (nothing to check).
    pub placement: Option<Placement>,
    /// The live PolicyException that excepts the placement (when it is not satisfied): a
    /// conflict it matches is allowed, with a warning naming it.
    pub placement_exception: Option<ExceptionMark>,
    /// Each applied policy's outcome, in policy name order (policies the config gives no
    /// parameters for the pool are not run, so not listed; policies whose dependencies are
    /// unmet are listed as Pending); or, when the pod spec cannot be read (a field of the wrong
    /// type, an invalid image reference, too many images), the one-line reason, and no policy
    /// ran.
    pub policies: Result<Vec<Outcome>, String>,
}

/// Runs placement and the policies on the pod spec at `path` inside `object`, for a namespace
/// whose pool is `pool` and labels `labels` (policies under a rollout depend on its group).
/// Policies that depend on `placement` see this placement result ([`State::of_placement`]).
/// `review` is what policies that read `input.review` get (the AdmissionRequest at admission).
/// Each policy evaluation takes at most `limit`.
pub fn check(
    at: PodSpecAt,
    pool: Option<&str>,
    scope: Scope,
    review: Option<&Value>,
    rules: &RuleSet,
    limit: Duration,
) -> Checks {
    let (config, policies) = (&rules.config, &rules.policies);
    let (path, spec) = (at.path, at.spec());
    let placement = pool.map(|pool| {
        node_selector::place(spec, path, at.namespace, pool, &config.placement_rules())
    });
    let images = match pod_images::images(spec, path, config.limits.max_images_per_pod) {
        Ok(images) => images,
        Err(reason) => {
            return Checks {
                placement,
                placement_exception: None,
                policies: Err(reason),
            }
        }
    };
    let references: Vec<&str> = images.iter().map(|i| i.reference).collect();
    let target = target_of(at, scope, &references);
    let placement_exception = match &placement {
        Some(Placement::Satisfied) | None => None,
        Some(_) => placement_mark(rules, &target, scope.now),
    };
    if policies.is_empty() {
        return Checks {
            placement,
            placement_exception,
            policies: Ok(Vec::new()),
        };
    }
    // Built only when a policy reads it: constraints alone take none (an empty object stands for
    // it, as for an object without a pod spec).
    let document = if policies.reads_document() {
        input::document(at.object, &images, pool)
    } else {
        Value::Object(Default::default())
    };
    let placed = match placement_exception {
        // Placement allowed by an exception is Compliant to the policies that depend on it.
        Some(_) => State::Compliant,
        None => State::of_placement(placement.as_ref(), at.is_pod()),
    };
    Checks {
        policies: Ok(rules.evaluate(
            Subject {
                document: Some(&document),
                review,
                pool,
                labels: scope.labels,
                placement: placed,
                target: Some(target),
                now: scope.now,
            },
            limit,
        )),
        placement,
        placement_exception,
    }
}

/// The live PolicyException for `placement` that matches the pod spec `at` in `scope`, if any.
pub(crate) fn placement_exception(
    at: PodSpecAt,
    scope: Scope,
    rules: &RuleSet,
) -> Option<ExceptionMark> {
    scope.now.filter(|_| !rules.exceptions.is_empty())?;
    let limit = rules.config.limits.max_images_per_pod;
    let images = pod_images::images(at.spec(), at.path, limit).ok()?;
    let references: Vec<&str> = images.iter().map(|i| i.reference).collect();
    placement_mark(rules, &target_of(at, scope, &references), scope.now)
}

/// The pod spec `at` as PolicyExceptions match it, pulling the images `references`.
fn target_of<'a>(at: PodSpecAt<'a>, scope: Scope<'a>, references: &'a [&'a str]) -> Target<'a> {
    Target {
        namespace: at.namespace,
        labels: scope.labels,
        kind: at.object["kind"].as_str().unwrap_or_default(),
        name: at.object["metadata"]["name"].as_str().unwrap_or_default(),
        images: references,
    }
}

/// The live PolicyException for `placement` that matches `target` at `now`, if any.
fn placement_mark(rules: &RuleSet, target: &Target, now: Option<i64>) -> Option<ExceptionMark> {
    let now = now?;
    rules
        .exceptions
        .find(PLACEMENT, target, now)
        .map(PolicyException::mark)
}

/// The outcomes for an object without a pod spec (the AdmissionRequest `review` holds it): no
/// pool to place, no images; the Gatekeeper constraints that match it, at its namespace's
/// pool's settings. The audit judges such objects with the same call.
pub(crate) fn constraints_only(
    review: &Value,
    scope: Scope,
    rules: &RuleSet,
    limit: Duration,
) -> Vec<Outcome> {
    let config = &rules.config;
    let labels = scope.labels;
    let pool = node_selector::pool_of(labels, &config.namespace_label);
    let target = Target {
        namespace: review["namespace"].as_str().unwrap_or_default(),
        labels,
        kind: review["kind"]["kind"].as_str().unwrap_or_default(),
        name: review["name"].as_str().unwrap_or_default(),
        images: &[],
    };
    rules.evaluate(
        Subject {
            document: None,
            review: Some(review),
            pool,
            labels,
            placement: State::NotApplied,
            target: Some(target),
            now: scope.now,
        },
        limit,
    )
}

/// The pool a pod spec is checked against: its namespace's; or, where the placement policies
/// choose pools, the one they choose for it (`Err`: the denial when they cannot). `review` is
/// what placement policies that read `input.review` get; each takes at most `limit`.
pub fn pool_for(
    at: PodSpecAt,
    scope: Scope,
    review: Option<&Value>,
    rules: &RuleSet,
    limit: Duration,
) -> Result<Option<String>, (DenyCode, Vec<String>)> {
    let (config, namespace) = (&rules.config, at.namespace);
    if !placement_policy::chooses(scope.labels, config) {
        return Ok(
            node_selector::pool_of(scope.labels, &config.namespace_label).map(str::to_string),
        );
    }
    let chosen = placement_policy::select(scope.pools, at, &rules.placement, config, review, limit);
    match chosen {
        Chosen::Pool(pool, _) => Ok(Some(pool)),
        Chosen::Refused(reasons) => Err((
            DenyCode::Forbidden,
            reasons
                .into_iter()
                .map(|r| format!("no pool can take its pods (the placement policies choose the pools of namespace {namespace:?}): {r}"))
                .collect(),
        )),
        Chosen::Invalid(message) => Err((DenyCode::BadRequest, vec![message])),
        Chosen::Unknown(message) => Err((DenyCode::Unavailable, vec![message])),
    }
}

/// Whether any policy that may run reads `input.review`: a loaded policy or placement policy,
/// or a version a rollout keeps.
fn reads_review(rules: &RuleSet) -> bool {
    rules.policies.reads_review()
        || rules.placement.reads_review()
        || rules.rollouts.policies.values().any(|r| {
            [&r.current, &r.previous]
                .into_iter()
                .flatten()
                .any(|v| v.policy.reads_review())
        })
}

/// `review` (an AdmissionRequest) as it reads for `object` in place of its own object (the
/// review's own object is not copied).
fn review_of(review: &Value, object: &Value) -> Value {
    let mut fields: serde_json::Map<String, Value> = review
        .as_object()
        .into_iter()
        .flatten()
        .filter(|(key, _)| key.as_str() != "object")
        .map(|(key, value)| (key.clone(), value.clone()))
        .collect();
    fields.insert("object".into(), object.clone());
    Value::Object(fields)
}

/// What `object` (the pod spec at `path`) infringes; `review` is the AdmissionRequest whose
/// `object` it is, as policies reading `input.review` see it.
fn findings(
    req: &Request,
    review: &Value,
    object: &Value,
    path: Option<&[&str]>,
    scope: Scope,
    rules: &RuleSet,
    limit: Duration,
) -> Findings {
    let config = &rules.config;
    let mut found = Findings::default();
    let labels = scope.labels;
    let Some(path) = path else {
        policy_findings(
            &mut found,
            constraints_only(review, scope, rules, limit),
            config,
        );
        return found;
    };
    let at = PodSpecAt {
        object,
        path,
        namespace: req.namespace,
    };
    let is_pod = at.is_pod();
    let chosen = placement_policy::chooses(labels, config);
    match pool_for(at, scope, Some(review), rules, limit) {
        Ok(pool) => found.pool = pool,
        Err((code, reasons)) => found.denials.extend(reasons.into_iter().map(|r| {
            // 403: the placement policies' verdict on what they read; 400: they could not read
            // the object; otherwise they could not decide.
            let kind = match code {
                DenyCode::Forbidden => Kind::Found(Finding::Pool(r.clone())),
                DenyCode::BadRequest => Kind::Unread,
                DenyCode::InternalError | DenyCode::Unavailable => Kind::Failed,
            };
            Denial::new(code, r, kind)
        })),
    }
    let pool = found.pool.clone();
    let pool = pool.as_deref();
    let spec = value_at(object, path);
    let checks = check(at, pool, scope, Some(review), rules, limit);
    let denials_before = found.denials.len();
    if let (Some(pool), Some(placement)) = (pool, checks.placement) {
        match placement {
            Placement::Satisfied => {}
            // A template's pods get the selector from the mutating webhook when they are created.
            Placement::Patch(_) if !is_pod => {}
            Placement::Patch(_) => found.denials.push(Denial::new(
                DenyCode::Forbidden,
                if chosen {
                    format!(
                        "the placement policies choose the pools of namespace {:?} (pool {pool:?} for this pod) but the pod has no nodeSelector {}: the mutating webhook did not run or its change was undone",
                        req.namespace, config.node_selector_key
                    )
                } else {
                    format!(
                        "namespace {:?} is assigned to pool {pool:?} but the pod has no nodeSelector {}={pool}: the mutating webhook did not run or its change was undone",
                        req.namespace, config.node_selector_key
                    )
                },
                Kind::Found(Finding::Placement(None)),
            )),
            // The namespace was relabelled between the mutating call and this one: the pod
            // carries the pool the mutating webhook gave it, as it would had it come a moment
            // earlier. Only at creation: the annotation can be edited afterwards.
            Placement::Conflict(_)
                if is_pod
                    && req.operation == Operation::Create
                    && node_selector::placed_by_mutation(object, spec, &config.node_selector_key).is_some() => {}
            Placement::Conflict(message) => found.denials.push(Denial::new(
                DenyCode::Forbidden,
                message.clone(),
                Kind::Found(Finding::Placement(Some(message))),
            )),
            Placement::Invalid(message) => {
                found.denials.push(Denial::new(DenyCode::BadRequest, message, Kind::Unread))
            }
        }
    }
    // A PolicyException for `placement` allows what the placement check found (never an
    // unreadable pod spec): each finding is a warning naming it.
    if let Some(mark) = &checks.placement_exception {
        let placement = found.denials.split_off(denials_before);
        for denial in placement {
            if matches!(denial.kind, Kind::Found(Finding::Placement(_))) {
                found
                    .warnings
                    .push(format!("{} (allowed by {mark})", denial.reason));
                found.exceptions.push(format!("{PLACEMENT}: {mark}"));
            } else {
                found.denials.push(denial);
            }
        }
    }
    match checks.policies {
        Ok(outcomes) => policy_findings(&mut found, outcomes, config),
        Err(reason) => found
            .denials
            .push(Denial::new(DenyCode::BadRequest, reason, Kind::Unread)),
    }
    found
}

/// What the policies' `outcomes` add to `found`: denials, warnings and dry-run findings by
/// enforcement, and each policy's result.
fn policy_findings(found: &mut Findings, outcomes: Vec<Outcome>, config: &Config) {
    for outcome in outcomes {
        let name = &outcome.policy;
        // Allowed by a PolicyException: still counted and shown, never refused.
        if let (Some(mark), Evaluation::Ran(Ok(messages))) = (&outcome.exception, &outcome.result) {
            if !messages.is_empty() {
                found.evaluations.push(PolicyResult {
                    policy: name.clone(),
                    enforcement: outcome.enforcement,
                    infringements: messages.len(),
                    error: false,
                    pending: None,
                    rollout: outcome.rollout.clone(),
                    denies: false,
                    excepted: Some(mark.clone()),
                });
                found
                    .infringements
                    .extend(messages.iter().map(|m| (name.clone(), m.clone())));
                found.warnings.extend(
                    messages
                        .iter()
                        .map(|m| format!("{name}: {m} (allowed by {mark})")),
                );
                found.exceptions.push(format!("{name}: {mark}"));
                continue;
            }
        }
        let result = match outcome.result {
            Evaluation::Ran(result) => result,
            // Not evaluated, not enforced: only counted and logged.
            Evaluation::Pending(pending) => {
                found.evaluations.push(PolicyResult {
                    policy: name.clone(),
                    enforcement: outcome.enforcement,
                    infringements: 0,
                    error: false,
                    pending: Some(pending.unmet.to_string()),
                    rollout: outcome.rollout,
                    denies: false,
                    excepted: None,
                });
                continue;
            }
        };
        found.evaluations.push(PolicyResult {
            policy: name.clone(),
            enforcement: outcome.enforcement,
            infringements: result.as_ref().map_or(0, Vec::len),
            error: result.is_err(),
            pending: None,
            rollout: outcome.rollout.clone(),
            denies: match &result {
                Ok(messages) => !messages.is_empty(),
                Err(_) => config.evaluation.on_error == OnError::Deny,
            },
            excepted: None,
        });
        if let Ok(messages) = &result {
            found
                .infringements
                .extend(messages.iter().map(|m| (name.clone(), m.clone())));
        }
        let result = result.map_err(|e| one_line(&e));
        match (result, outcome.enforcement) {
            (Ok(messages), Enforcement::Deny) => {
                found.denials.extend(messages.into_iter().map(|m| {
                    Denial::new(
                        DenyCode::Forbidden,
                        format!("{name}: {m}"),
                        Kind::Found(Finding::Policy(name.clone(), m)),
                    )
                }))
            }
            (Ok(messages), Enforcement::Warn) => found
                .warnings
                .extend(messages.into_iter().map(|m| format!("{name}: {m}"))),
            (Ok(messages), Enforcement::Dryrun) => found
                .dryrun
                .extend(messages.into_iter().map(|m| format!("{name}: {m}"))),
            (Err(error), Enforcement::Deny) => match config.evaluation.on_error {
                OnError::Deny => found.denials.push(Denial::new(
                    DenyCode::InternalError,
                    format!("policy {name} could not be evaluated, so the request is denied (evaluation.onError: deny): {error}"),
                    Kind::Failed,
                )),
                OnError::Allow => found.warnings.push(format!(
                    "policy {name} could not be evaluated; allowed because evaluation.onError is allow: {error}"
                )),
            },
            (Err(error), Enforcement::Warn) => {
                found.warnings.push(format!("policy {name} could not be evaluated: {error}"))
            }
            (Err(error), Enforcement::Dryrun) => {
                found.dryrun.push(format!("policy {name} could not be evaluated: {error}"))
            }
        }
    }
}

/// The first line of `text`, at most [`MAX_ERROR_CHARS`] characters.
pub(crate) fn one_line(text: &str) -> String {
    let first = text.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
    let mut out: String = first.trim().chars().take(MAX_ERROR_CHARS).collect();
    if out.len() < first.trim().len() || text.trim().lines().nth(1).is_some() {
        out.push_str(" ...");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::PolicySet;

    #[test]
    fn summary_caps_the_reasons() {
        let denials: Vec<Denial> = (0..25)
            .map(|i| Denial::new(DenyCode::Forbidden, format!("r{i}"), Kind::Failed))
            .collect();
        let text = summary(&denials, 20);
        assert_eq!(text.lines().count(), 21);
        assert!(text.starts_with("r0\nr1\n"), "{text}");
        assert!(text.ends_with("r19\n... and 5 more"), "{text}");
        assert_eq!(summary(&denials[..2], 20), "r0\nr1");
    }

    /// A foreign image denied by `repos`; `tagged`, depending on it, runs only on images from
    /// the allowed registry.
    #[test]
    fn a_pending_policy_is_neither_enforced_nor_counted_as_an_infringement() {
        use crate::policy::template;
        let rules = crate::ruleset::RuleSet::new(
            Config::parse(
                "policies:\n  repos: {parameters: {}}\n  tagged: {parameters: {}, dependencies: [{policy: repos}]}\n",
                "t",
            )
            .unwrap(),
            PolicySet::compile(&[
                template::from_rego(
                    "repos",
                    "package repos\ninfringement[{\"msg\": sprintf(\"%v is foreign\", [i])}] { i := input.services[_].functional_requirements[_].image; not startswith(i, \"registry.example.com/\") }\n".to_string(),
                    "repos.rego".into(),
                ),
                template::from_rego(
                    "tagged",
                    "package tagged\ninfringement[{\"msg\": sprintf(\"%v has no tag\", [i])}] { i := input.services[_].functional_requirements[_].image; not contains(i, \":\") }\n".to_string(),
                    "tagged.rego".into(),
                ),
            ])
            .unwrap(), Default::default(),
            "t",
        )
        .unwrap();
        let decide = |operation: &str, image: &str, old_image: Option<&str>| {
            let pod = |image: &str| serde_json::json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": image}]}});
            let mut request = serde_json::json!({"uid": "u", "kind": {"group": "", "version": "v1", "kind": "Pod"},
                "namespace": "free", "operation": operation, "object": pod(image)});
            if let Some(old) = old_image {
                request["oldObject"] = pod(old);
            }
            let req = Request::from_value(&request).unwrap();
            validate(
                &req,
                Scope::default(),
                &rules,
                crate::ruleset::Budget::FULL.limit(&rules.config),
            )
        };
        let pending = |d: &Decision| -> Vec<(String, Option<String>)> {
            d.policy_results
                .iter()
                .map(|r| (r.policy.clone(), r.pending.clone()))
                .collect()
        };

        let d = decide("CREATE", "quay.io/app", None);
        assert_eq!((d.allowed(), d.code()), (false, Some(403)));
        assert_eq!(d.message(), "repos: quay.io/app is foreign", "one denial");
        assert_eq!(
            pending(&d),
            [
                ("repos".to_string(), None),
                (
                    "tagged".to_string(),
                    Some("dependency repos is NonCompliant, Compliant required".to_string())
                )
            ]
        );
        assert_eq!(
            (d.policy_results[1].infringements, d.policy_results[1].error),
            (0, false)
        );

        // Moved to the allowed registry: the dependent runs and denies on its own.
        let d = decide("CREATE", "registry.example.com/app", None);
        assert_eq!(d.message(), "tagged: registry.example.com/app has no tag");
        assert!(pending(&d).iter().all(|(_, p)| p.is_none()));

        // On UPDATE the old object's findings are not denied again: the dependent's denial is
        // new when the image moves, and the old object's pending policy denied nothing.
        let d = decide("UPDATE", "registry.example.com/app", Some("quay.io/app"));
        assert_eq!(d.message(), "tagged: registry.example.com/app has no tag");
        let d = decide(
            "UPDATE",
            "registry.example.com/app",
            Some("registry.example.com/app"),
        );
        assert!(d.allowed(), "{d:?}");
    }

    /// On UPDATE the old object's findings hide the new object's only where both were read and
    /// by finding, not by message: an old object that could not be read, a policy that failed
    /// on both, or an infringement whose message names no image hides nothing new.
    #[test]
    fn an_update_is_compared_only_with_what_was_read() {
        use crate::policy::template;
        let id = format!("sha256:{}", "a".repeat(64));
        let rules = crate::ruleset::RuleSet::new(
            Config::parse(
                "limits: {maxImagesPerPod: 3}\npolicies:\n  repos: {parameters: {}}\n",
                "t",
            )
            .unwrap(),
            PolicySet::compile(&[
                template::from_rego(
                    "repos",
                    "package repos\ninfringement[{\"msg\": sprintf(\"%v is foreign\", [i])}] { i := input.services[_].functional_requirements[_].image; not startswith(i, \"registry.example.com/\") }\ninfringement[{\"msg\": m}] { input.services[_].functional_requirements[_].image == \"registry.example.com/boom\"; m := 1 / 0 }\n".to_string(),
                    "repos.rego".into(),
                ),
            ])
            .unwrap(),
            Default::default(),
            "t",
        )
        .unwrap();
        let pod = |containers: &[&str], ephemeral: &[&str]| {
            let list = |prefix: &str, images: &[&str]| -> Vec<Value> {
                images
                    .iter()
                    .enumerate()
                    .map(|(i, image)| serde_json::json!({"name": format!("{prefix}{i}"), "image": image}))
                    .collect()
            };
            serde_json::json!({"metadata": {"name": "p"}, "spec": {
                "containers": list("c", containers), "ephemeralContainers": list("e", ephemeral)}})
        };
        let decide = |sub: &str, new: &Value, old: &Value| {
            let request = serde_json::json!({"uid": "u", "kind": {"group": "", "version": "v1", "kind": "Pod"},
                "namespace": "free", "operation": "UPDATE", "subResource": sub, "object": new, "oldObject": old});
            let req = Request::from_value(&request).unwrap();
            validate(
                &req,
                Scope::default(),
                &rules,
                crate::ruleset::Budget::FULL.limit(&rules.config),
            )
        };
        let ok = "registry.example.com/app:1";
        let evil = "evil.io/x:1";
        let mut relabelled = pod(&[&id], &[]);
        relabelled["metadata"]["labels"] = serde_json::json!({"a": "b"});
        // (what, old, new, subresource, the decision's (allowed, code))
        type Case<'a> = (&'a str, Value, Value, &'a str, (bool, u16));
        let cases: Vec<Case> = vec![
            (
                "image ID, foreign ephemeral container",
                pod(&[&id], &[]),
                pod(&[&id], &[evil]),
                "ephemeralcontainers",
                (false, 400),
            ),
            (
                "image ID, foreign container added",
                pod(&[&id, ok], &[]),
                pod(&[&id, evil], &[]),
                "",
                (false, 400),
            ),
            (
                "image ID removed, foreign image in",
                pod(&[&id], &[]),
                pod(&[evil], &[]),
                "",
                (false, 403),
            ),
            (
                "too many images, one swapped",
                pod(&[ok, ok, ok, ok], &[]),
                pod(&[ok, ok, ok, evil], &[]),
                "",
                (false, 400),
            ),
            (
                "too many images, ephemeral added",
                pod(&[ok, ok, ok, ok], &[]),
                pod(&[ok, ok, ok, ok], &[evil]),
                "ephemeralcontainers",
                (false, 400),
            ),
            (
                "invalid reference, foreign ephemeral",
                pod(&["Bad..host/x", ok], &[]),
                pod(&["Bad..host/x", ok], &[evil]),
                "ephemeralcontainers",
                (false, 400),
            ),
            (
                "old unreadable, new readable and clean",
                pod(&[&id], &[]),
                pod(&[ok], &[]),
                "",
                (true, 0),
            ),
            (
                "unreadable, spec unchanged",
                pod(&[&id], &[]),
                relabelled.clone(),
                "",
                (true, 0),
            ),
            (
                "a policy error on both, foreign image added",
                pod(&["registry.example.com/boom"], &[]),
                pod(&["registry.example.com/boom"], &[evil]),
                "ephemeralcontainers",
                (false, 500),
            ),
            (
                "a foreign image the old object had",
                pod(&[evil], &[]),
                pod(&[evil, ok], &[]),
                "",
                (true, 0),
            ),
            (
                "a second foreign image",
                pod(&[evil], &[]),
                pod(&[evil, "evil.io/y:1"], &[]),
                "",
                (false, 403),
            ),
        ];
        for (what, old, new, sub, want) in cases {
            let d = decide(sub, &new, &old);
            assert_eq!((d.allowed(), d.code().unwrap_or(0)), want, "{what}: {d:?}");
        }

        // What a policy result says of the request (rollout counts read it): it would refuse
        // for a new infringement or an error, not for one the old object already had.
        let denies = |old: &Value, new: &Value| {
            let d = decide("", new, old);
            let results: Vec<_> = d
                .policy_results
                .iter()
                .map(|r| (r.infringements, r.denies))
                .collect();
            results
        };
        let cases = [
            (pod(&[evil], &[]), pod(&[evil, ok], &[]), (1, false)),
            (
                pod(&[evil], &[]),
                pod(&[evil, "evil.io/y:1"], &[]),
                (2, true),
            ),
            (pod(&[&id], &[]), pod(&[evil], &[]), (1, true)),
            (pod(&[ok], &[]), pod(&[ok, ok], &[]), (0, false)),
        ];
        for (old, new, want) in cases {
            assert_eq!(denies(&old, &new), [want], "{old} -> {new}");
        }
        let boom = pod(&["registry.example.com/boom"], &[]);
        assert!(decide("", &boom, &boom).policy_results[0].denies);
    }

    #[test]
    fn one_line_errors() {
        assert_eq!(one_line("boom"), "boom");
        assert_eq!(one_line("\nerror: x\n  1 | package p\n"), "error: x ...");
        let long = "y".repeat(1000);
        assert_eq!(one_line(&long).chars().count(), MAX_ERROR_CHARS + 4);
    }
}
