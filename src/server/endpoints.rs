//! The webhook endpoints: AdmissionReview in, decision out, with limits, deadline, metrics and
//! logs.

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::BodyDataStream;
use axum::extract::{Request as HttpRequest, State};
use axum::http::{header, HeaderValue, StatusCode, Version};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use serde_json::Value;
use tokio::sync::OwnedSemaphorePermit;

use poolguard_core::admission::{self, BadReview, Decision, DenyCode, Request, Ruling};
use poolguard_core::labels::Labels;
use poolguard_core::ruleset::{Budget, RuleSet};
use poolguard_core::scope::Scope;
use poolguard_core::webhook::Webhook;

use super::body::{self, Received, Refusal};
use super::connection_activity::Peer;
use super::limits::{NoSlot, Reservation, Short};
use super::state::ServerState;
use crate::telemetry::metrics::{
    kind_label, InfringementLabels, Metrics, PolicyLabels, RequestLabels, WebhookLabels,
};
use crate::telemetry::phase_times::{Phase, PhaseClock};

pub fn router(app: Arc<ServerState>) -> Router {
    Router::new()
        .route(
            "/mutate",
            post(|s: State<Arc<ServerState>>, r: HttpRequest| handle(s, Webhook::Mutate, r))
                .fallback(not_allowed),
        )
        .route(
            "/validate",
            post(|s: State<Arc<ServerState>>, r: HttpRequest| handle(s, Webhook::Validate, r))
                .fallback(not_allowed),
        )
        .fallback(not_found)
        .with_state(app)
}

/// Unknown paths get 404 once their body has been read (and dropped) or given up on, so an
/// HTTP/2 client gets the answer rather than a reset stream.
async fn not_found(State(app): State<Arc<ServerState>>, request: HttpRequest) -> Response {
    let text = "not found: poolguard serves POST /mutate and POST /validate\n";
    without_body(&app, request, StatusCode::NOT_FOUND, text).await
}

async fn not_allowed(State(app): State<Arc<ServerState>>, request: HttpRequest) -> Response {
    let text = "method not allowed: poolguard serves POST /mutate and POST /validate\n";
    let mut response = without_body(&app, request, StatusCode::METHOD_NOT_ALLOWED, text).await;
    response
        .headers_mut()
        .insert(header::ALLOW, HeaderValue::from_static("POST"));
    response
}

async fn without_body(
    app: &ServerState,
    request: HttpRequest,
    status: StatusCode,
    text: &str,
) -> Response {
    let version = request.version();
    let limits = app.gates.limits();
    let rest = request.into_body().into_data_stream();
    let unread = body::discard(rest, limits.max_body_bytes, limits.body_timeout).await;
    body::answer(status, text.to_string(), version, unread)
}

/// Who and what a request is about, for logs and metrics, borrowed from the request.
struct Subject<'r> {
    uid: &'r str,
    namespace: &'r str,
    name: &'r str,
    kind: &'r str,
    /// [`kind_label`] of the kind.
    kind_label: &'static str,
    operation: &'static str,
}

impl<'r> Subject<'r> {
    fn of(req: &Request<'r>) -> Subject<'r> {
        Subject {
            uid: req.uid,
            namespace: req.namespace,
            name: req.object_name(),
            kind: req.kind,
            kind_label: kind_label(req.group, req.kind),
            operation: req.operation.as_str(),
        }
    }
}

/// One webhook request, as a pipeline: [`receive`] the body, wait for an [`evaluation_slot`],
/// [`parse`] the review, read its request, [`decide`], [`record`] and answer. A step that
/// cannot go on answers for the request itself (an HTTP 4xx/5xx without an AdmissionReview);
/// from a readable request on, every answer is an AdmissionReview response.
async fn handle(
    State(app): State<Arc<ServerState>>,
    webhook: Webhook,
    request: HttpRequest,
) -> Response {
    match answer(&app, webhook, request).await {
        Ok(response) => response,
        Err(Refused::Body {
            refusal,
            version,
            unread,
        }) => refuse_body(&app, webhook, &refusal, version, unread).await,
        Err(Refused::Malformed(e)) => refuse_malformed(&app, webhook, &e),
    }
}

/// Why a request was not decided: answered with an HTTP status and a one-line reason, not an
/// AdmissionReview.
enum Refused {
    /// The body was not read, or its parse did not fit the budget ([`Refusal::status`]).
    Body {
        refusal: Refusal,
        version: Version,
        unread: Option<BodyDataStream>,
    },
    /// Not an AdmissionReview poolguard can read: 400.
    Malformed(BadReview),
}

/// The steps of [`handle`], each timed under its [`Phase`] (`poolguard_admission_phase_duration_seconds`).
async fn answer(
    app: &ServerState,
    webhook: Webhook,
    request: HttpRequest,
) -> Result<Response, Refused> {
    let version = request.version();
    let mut clock = PhaseClock::start(&app.metrics.phases, webhook);
    let received = receive(app, request).await?;
    clock.lap(Phase::Read);
    let started = Instant::now();
    let deadline = tokio::time::Instant::from_std(started + app.deadline);
    let rules = app.rules.load_full();
    let slot = evaluation_slot(app, webhook, &rules, deadline).await;
    clock.lap(Phase::Wait);
    let (review, reservation) = parse(app, received, version, deadline).await?;
    let req = Request::from_value(&review["request"]).map_err(Refused::Malformed)?;
    clock.lap(Phase::Parse);
    let subject = Subject::of(&req);
    let work = Work {
        rules: &rules,
        req: &req,
        review: &review,
        reservation: Some(reservation),
        deadline,
    };
    let (decision, namespace_found) = decide(app, webhook, slot, work, &mut clock).await;
    record(app, webhook, &subject, &decision, namespace_found, started);
    let response = Json(admission::respond(subject.uid, &decision)).into_response();
    clock.lap(Phase::Respond);
    Ok(response)
}

/// Reads the body within the limits.
async fn receive(app: &ServerState, request: HttpRequest) -> Result<Received, Refused> {
    let version = request.version();
    let (parts, body) = request.into_parts();
    let peer = parts.extensions.get::<Peer>().map(|peer| peer.0);
    body::receive(&app.gates, &parts.headers, body, peer)
        .await
        .map_err(|(refusal, unread)| Refused::Body {
            refusal,
            version,
            unread,
        })
}

/// A request whose decision may run Rego waits for its evaluation slot before its body is
/// parsed: waiting, it holds the bytes (counted in the body budget), not the several times
/// larger document. `None` when it runs no policy.
async fn evaluation_slot(
    app: &ServerState,
    webhook: Webhook,
    rules: &RuleSet,
    deadline: tokio::time::Instant,
) -> Option<Result<OwnedSemaphorePermit, NoSlot>> {
    if webhook.runs_policies(rules) {
        Some(app.gates.evaluation_slot(deadline).await)
    } else {
        None
    }
}

/// Parses the review, its memory reserved first from the process-wide parse budget, so that
/// many large reviews at once cannot together take more than the budget. The review is shared
/// with the blocking pool, which decides on it; the reservation is held until the answer.
async fn parse(
    app: &ServerState,
    received: Received,
    version: Version,
    deadline: tokio::time::Instant,
) -> Result<(Arc<Value>, Reservation), Refused> {
    let Received {
        bytes,
        mut reservation,
    } = received;
    let estimate = admission::Estimate::of(&bytes).map_err(Refused::Malformed)?;
    let reserved = app
        .gates
        .reserve_parse(&mut reservation, estimate.bytes(), deadline)
        .await;
    if let Err(short) = reserved {
        let refusal = match short {
            Short::Budget => Refusal::ParseOverBudget {
                bytes: bytes.len() as u64,
                estimate: estimate.bytes(),
                reserved: app.gates.parse_bytes_reserved(),
                budget: app.gates.limits().parse_budget_bytes,
            },
            Short::Share { held, share } => Refusal::OverShare {
                budget: "parse",
                bytes: estimate.bytes() as u64,
                held,
                share,
            },
        };
        return Err(Refused::Body {
            refusal,
            version,
            unread: None,
        });
    }
    let parsed = estimate.parse();
    drop(bytes);
    let review = parsed.map_err(Refused::Malformed)?;
    Ok((Arc::new(review), reservation))
}

/// What deciding one request works on.
struct Work<'a> {
    rules: &'a Arc<RuleSet>,
    req: &'a Request<'a>,
    review: &'a Arc<Value>,
    /// Given to the blocking pool with the slot when policies run there; held until the answer
    /// otherwise.
    reservation: Option<Reservation>,
    deadline: tokio::time::Instant,
}

/// The decision, and whether the request's namespace was found: rollout counts are kept only
/// for namespaces that exist, so that no one can post reviews for made-up ones to move a
/// rollout. A validating request without a slot gets `evaluation.onError` without a namespace
/// lookup; otherwise the namespace's labels are read (once, and only when the decision reads
/// them: [`RuleSet::reads_namespace_labels`]), and the request is decided on the
/// blocking pool or in place ([`decide_in_time`]) when it holds a slot, right here when it runs
/// no policy.
async fn decide(
    app: &ServerState,
    webhook: Webhook,
    slot: Option<Result<OwnedSemaphorePermit, NoSlot>>,
    mut work: Work<'_>,
    clock: &mut PhaseClock<'_>,
) -> (Decision, bool) {
    let (rules, req) = (work.rules, work.req);
    let slot = match slot {
        Some(Err(why)) if webhook == Webhook::Validate && !req.is_namespace() => {
            count_no_slot(&app.metrics, webhook, &why);
            return (rules.on_error(&busy(why, app.deadline)), false);
        }
        slot => slot,
    };
    let looked_up = if rules.reads_namespace_labels(webhook, req) {
        lookup(app, req.namespace).await
    } else {
        Ok(None)
    };
    clock.lap(Phase::Lookup);
    let labels = match looked_up {
        Ok(labels) => labels.map(Arc::new),
        Err(e) => {
            let message = format!(
                "cannot read the labels of namespace {:?}, so the request is refused: {e}",
                req.namespace
            );
            return (Decision::deny(DenyCode::InternalError, message), false);
        }
    };
    let decision = match slot {
        Some(Err(why)) => {
            count_no_slot(&app.metrics, webhook, &why);
            let labels = labels.as_deref();
            rules.unevaluated(webhook, req, labels, &busy(why, app.deadline))
        }
        Some(Ok(slot)) => {
            let held = (slot, work.reservation.take());
            decide_in_time(app, webhook, &work, labels.clone(), held).await
        }
        // Placement alone is decided right here; a thread hand-off would cost more than it.
        None => {
            let scope = Scope {
                labels: labels.as_deref(),
                pools: None,
                now: Some(crate::wall_clock::unix_now()),
            };
            rules.decide(webhook, req, scope, Budget::FULL)
        }
    };
    clock.lap(Phase::Evaluate);
    (decision, labels.is_some())
}

/// Policies run in place when the decision is bounded ([`Webhook::bounded`]: the shipped
/// policies' Rust copy, no user's Rego) or [`Gates::in_place`](crate::server::limits::Gates::in_place)
/// gives leave (this worker is busy until the decision, which the deadline bounds: each
/// policy's time limit is cut to its share of it). Otherwise a decision of a few policies and
/// no placement policy is first tried here within [`FIRST_TRY_SLICE`], and the rest, or one
/// not made whole in the slice, is made on the blocking pool, so that a slow policy holds up no
/// other request and the deadline can answer for it. The evaluation keeps its slot and the
/// body's reservation (`held`) until its work stops, which the deadline also bounds (see
/// [`decide_review`]).
async fn decide_in_time(
    app: &ServerState,
    webhook: Webhook,
    work: &Work<'_>,
    labels: Option<Arc<Labels>>,
    held: (OwnedSemaphorePermit, Option<Reservation>),
) -> Decision {
    let deadline = work.deadline;
    let job = Job {
        webhook,
        rules: work.rules.clone(),
        review: work.review.clone(),
        pools: app.pools.facts(work.rules.config()),
        labels: labels.clone(),
        budget: app.deadline,
    };
    // A bounded decision is made on this worker whatever the permits say: a hand-off would
    // cost more than it (on one CPU, the two context switches are most of a request).
    let bounded = webhook.bounded(work.rules);
    let in_place = if bounded { None } else { app.gates.in_place() };
    let decided = if bounded || in_place.is_some() {
        in_place_catching_panics(|| job.decide(Until::whole(deadline.into_std())))
    } else if work.rules.runs_placement_policies()
        || webhook.policy_count(work.rules) > FIRST_TRY_MAX_POLICIES
    {
        // A placement policy cut short says so in the pool it chooses, not in an error; and
        // many policies' shares of the slice would be too short for most of them to finish.
        blocking(app, job, held, work, labels.as_deref()).await
    } else {
        // Without leave to run in place, a first try here within a short slice: most
        // decisions take far less than the hand-off costs. One with a policy that erred (which
        // the slice's cut time limit may have caused) is made again on the blocking pool with
        // the time left: a slow policy holds this worker for one slice per request at most.
        // One that finished without an error is made, even past the slice (this worker was
        // preempted: on one CPU, by the blocking pool's thread); only past the deadline is it
        // late.
        let slice = (Instant::now() + FIRST_TRY_SLICE).min(deadline.into_std());
        let until = Until::first_try(slice, deadline.into_std());
        let tried = in_place_catching_panics(|| job.decide(until));
        let made = match &tried {
            Ok((decision, Late(late))) => !late && decision.policy_results.iter().all(|r| !r.error),
            Err(_) => true, // a panic: answered, not tried again
        };
        match tried {
            tried if made => tried,
            _ => blocking(app, job, held, work, labels.as_deref()).await,
        }
    };
    match decided {
        Ok((decision, Late(late))) => {
            if late {
                app.metrics.unfinished(webhook.as_str(), "deadline");
            }
            decision
        }
        Err(e) => Decision::deny(
            DenyCode::InternalError,
            format!("internal error while deciding: {e}"),
        ),
    }
}

/// How long a decision that may run a user's Rego is first tried on the worker that read the
/// request, when it has no leave to run there whole ([`decide_in_time`]).
const FIRST_TRY_SLICE: Duration = Duration::from_millis(2);

/// The most policies a decision may run for its first try on the worker: each gets an equal
/// share of [`FIRST_TRY_SLICE`] (half of it on UPDATE, which runs each twice).
const FIRST_TRY_MAX_POLICIES: usize = 4;

/// What one decision is made of, to be made on this worker or on the blocking pool.
struct Job {
    webhook: Webhook,
    rules: Arc<RuleSet>,
    review: Arc<Value>,
    pools: Option<Arc<poolguard_core::placement_policy::PoolSet>>,
    labels: Option<Arc<Labels>>,
    /// The deadline's length, for the message of a late answer.
    budget: Duration,
}

impl Job {
    /// The decision within the time `until` gives it.
    fn decide(&self, until: Until) -> (Decision, Late) {
        let scope = Scope {
            labels: self.labels.as_deref(),
            pools: self.pools.as_deref(),
            now: Some(crate::wall_clock::unix_now()),
        };
        decide_review(
            self.webhook,
            &self.review,
            scope,
            &self.rules,
            until,
            self.budget,
        )
    }
}

/// The decision made on the blocking pool, which keeps the evaluation slot and the body's
/// reservation (`held`) until its work stops; past the deadline, the deadline's answer (late).
async fn blocking(
    app: &ServerState,
    job: Job,
    held: (OwnedSemaphorePermit, Option<Reservation>),
    work: &Work<'_>,
    labels: Option<&Labels>,
) -> Result<(Decision, Late), String> {
    let (deadline, webhook) = (work.deadline, job.webhook);
    let task = tokio::task::spawn_blocking(move || {
        let _held = held;
        job.decide(Until::whole(deadline.into_std()))
    });
    match tokio::time::timeout_at(deadline, task).await {
        Ok(joined) => joined.map_err(|e| e.to_string()),
        Err(_) => {
            let message = late(app.deadline);
            let decision = work.rules.unevaluated(webhook, work.req, labels, &message);
            Ok((decision, Late(true)))
        }
    }
}

/// `decide()` on this worker; a panic is answered as the blocking pool answers it (an error
/// naming the panic's message), not with a dropped connection.
fn in_place_catching_panics(
    decide: impl FnOnce() -> (Decision, Late),
) -> Result<(Decision, Late), String> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(decide)).map_err(|panic| {
        let message = panic
            .downcast_ref::<&str>()
            .map(|m| m.to_string())
            .or_else(|| panic.downcast_ref::<String>().cloned())
            .unwrap_or_default();
        format!("the decision panicked with message {message:?}")
    })
}

/// A body that was not read (too large, too slow, over the budget, broken): counted, logged
/// with its size, and answered with a one-line reason. Over budget, `Retry-After` asks the
/// client to come back: the API server's client retries a 503 that carries it.
async fn refuse_body(
    app: &ServerState,
    webhook: Webhook,
    refusal: &Refusal,
    version: Version,
    mut unread: Option<BodyDataStream>,
) -> Response {
    count(&app.metrics, webhook, "", "", refusal.decision());
    tracing::warn!(webhook = webhook.as_str(), status = refusal.status().as_u16(), bytes = refusal.bytes(), reason = %refusal, "refused a request body");
    // HTTP/1.1 can stop a body only by closing the connection, and closing with unread data
    // may reset it before the client has read the answer: a body of moderate size is read
    // (and dropped) first. HTTP/2 ends the stream alone, cleanly (see `body::answer`).
    let limits = app.gates.limits();
    let moderate = match refusal {
        Refusal::TooLarge { .. } | Refusal::OverBudget { .. } => refusal
            .bytes()
            .is_some_and(|bytes| bytes <= 2 * limits.max_body_bytes as u64),
        Refusal::TimedOut { .. }
        | Refusal::TooSlow { .. }
        | Refusal::ParseOverBudget { .. }
        | Refusal::OverShare { .. }
        | Refusal::Broken(_) => false,
    };
    if version < Version::HTTP_2 && moderate {
        if let Some(rest) = unread {
            let limit = 2 * limits.max_body_bytes;
            unread = body::discard(rest, limit, limits.body_timeout).await;
        }
    }
    let mut response = body::answer(refusal.status(), format!("{refusal}\n"), version, unread);
    if let Refusal::OverBudget { .. }
    | Refusal::ParseOverBudget { .. }
    | Refusal::OverShare { .. } = refusal
    {
        response
            .headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    }
    response
}

/// 400 for a body that is not an AdmissionReview poolguard can read, counted and logged.
fn refuse_malformed(
    app: &ServerState,
    webhook: Webhook,
    reason: &dyn std::fmt::Display,
) -> Response {
    count(&app.metrics, webhook, "", "", "invalid");
    tracing::warn!(webhook = webhook.as_str(), reason = %reason, "refused a malformed AdmissionReview");
    (
        StatusCode::BAD_REQUEST,
        format!("bad AdmissionReview: {reason}\n"),
    )
        .into_response()
}

/// Decides on the blocking pool, which needs the review owned: the request view is taken again
/// there (it was checked before, so the error arm is not expected). Each policy's time limit is
/// cut to its share of the time left before `until.slice` (on a first try an exact equal share;
/// else rounded up to whole milliseconds), so that the work stops about when the
/// answer is given, not when the configured limits run out; work cut short that ends past
/// `until.deadline` is answered as the deadline answers (the handler may have already), and says
/// so (`Late`: the handler counts it, unless it answered first). `budget` is the deadline's
/// length, for the late answer's message.
fn decide_review(
    webhook: Webhook,
    review: &serde_json::Value,
    scope: Scope,
    rules: &RuleSet,
    until: Until,
    budget: Duration,
) -> (Decision, Late) {
    let deadline = until.deadline;
    let req = match Request::from_value(&review["request"]) {
        Ok(req) => req,
        Err(e) => return (Decision::deny(DenyCode::BadRequest, e.0), Late(false)),
    };
    let late_answer = |scope: Scope| {
        let decision = rules.unevaluated(webhook, &req, scope.labels, &late(budget));
        (decision, Late(true))
    };
    if Instant::now() >= deadline {
        return late_answer(scope);
    }
    let runs = webhook.policy_count(rules);
    let left = until.slice.saturating_duration_since(Instant::now());
    let cut = if until.first_try {
        Some(Budget::split(runs, req.operation, left))
    } else {
        Budget::within(rules.config(), runs, req.operation, left)
    };
    let decision = rules.decide(webhook, &req, scope, cut.unwrap_or(Budget::FULL));
    if cut.is_some() && Instant::now() >= deadline {
        return late_answer(scope);
    }
    (decision, Late(false))
}

/// Whether a decision is the deadline's answer (the policies were not evaluated in time).
struct Late(bool);

/// The time a decision is given: its policies share what is left before `slice`, and its
/// answer is late past `deadline`, the request's.
#[derive(Clone, Copy)]
struct Until {
    slice: Instant,
    deadline: Instant,
    /// Each policy an exact equal share of the slice (a first try on the worker), not one
    /// rounded up to whole milliseconds.
    first_try: bool,
}

impl Until {
    /// The whole time left before the request's deadline.
    fn whole(deadline: Instant) -> Until {
        Until {
            slice: deadline,
            deadline,
            first_try: false,
        }
    }

    /// A first try on the worker: the policies share `slice`, so that all of them end within
    /// it; a decision they finish is late only past `deadline`.
    fn first_try(slice: Instant, deadline: Instant) -> Until {
        Until {
            slice,
            deadline,
            first_try: true,
        }
    }
}

async fn lookup(app: &ServerState, namespace: &str) -> Result<Option<Labels>, String> {
    if namespace.is_empty() {
        return Ok(None);
    }
    app.namespaces.labels(namespace).await
}

/// Why a request was not decided in time.
fn late(deadline: Duration) -> String {
    let ms = deadline.as_millis();
    format!("poolguard did not decide within the {ms} ms deadline")
}

/// Counts a request left to `evaluation.onError` for want of an evaluation slot.
fn count_no_slot(metrics: &Metrics, webhook: Webhook, why: &NoSlot) {
    let reason = match why {
        NoSlot::Deadline => "deadline",
        NoSlot::QueueFull { .. } => "queue_full",
    };
    metrics.unfinished(webhook.as_str(), reason);
}

/// Why a request got no evaluation slot.
fn busy(why: NoSlot, deadline: Duration) -> String {
    match why {
        NoSlot::Deadline => late(deadline),
        NoSlot::QueueFull { running, waiting } => {
            format!("poolguard is busy ({running} policy evaluations running, {waiting} waiting)")
        }
    }
}

/// Label values are static strings, so counting allocates nothing.
fn count(
    metrics: &Metrics,
    webhook: Webhook,
    operation: &'static str,
    kind: &'static str,
    decision: &'static str,
) {
    metrics
        .requests
        .get_or_create(&RequestLabels {
            webhook: webhook.as_str(),
            operation,
            kind,
            decision,
        })
        .inc();
}

/// Metrics and one log line per denial, warning, dry-run finding or Pending policy; rollout
/// counts when the namespace was found.
fn record(
    app: &ServerState,
    webhook: Webhook,
    s: &Subject,
    d: &Decision,
    namespace_found: bool,
    started: Instant,
) {
    let outcome = match (&d.ruling, d.warnings.is_empty()) {
        (Ruling::Deny { .. }, _) => "denied",
        (Ruling::Allow { patch: Some(_) }, _) => "patched",
        (Ruling::Allow { patch: None }, false) => "warned",
        (Ruling::Allow { patch: None }, true) => "allowed",
    };
    count(&app.metrics, webhook, s.operation, s.kind_label, outcome);
    app.metrics
        .latency
        .get_or_create(&WebhookLabels {
            webhook: webhook.as_str(),
        })
        .observe(started.elapsed().as_secs_f64());
    if namespace_found && d.policy_results.iter().any(|r| r.rollout.is_some()) {
        let now = crate::wall_clock::unix_now();
        app.rollout_counts
            .record(&d.policy_results, d.allowed(), now);
    }
    for r in &d.policy_results {
        let result = match (&r.pending, r.error, r.infringements) {
            (Some(_), _, _) => "pending",
            (None, true, _) => "error",
            (None, false, 0) => "pass",
            (None, false, _) => "infringement",
        };
        let enforcement = r.enforcement.as_str();
        app.metrics
            .policy_evaluations
            .get_or_create(&PolicyLabels {
                policy: r.policy.clone(),
                enforcement,
                result,
            })
            .inc();
        if r.infringements > 0 {
            app.metrics
                .infringements
                .get_or_create(&InfringementLabels {
                    policy: r.policy.clone(),
                    enforcement,
                })
                .inc_by(r.infringements as u64);
        }
    }
    let hook = webhook.as_str();
    if let Ruling::Deny { code, message } = &d.ruling {
        tracing::info!(uid = %s.uid, namespace = %s.namespace, name = %s.name, kind = %s.kind, webhook = hook, code = code.as_u16(), reason = %message, "denied");
    }
    for w in &d.warnings {
        tracing::info!(uid = %s.uid, namespace = %s.namespace, name = %s.name, kind = %s.kind, webhook = hook, reason = %w, "warning");
    }
    for n in &d.dryrun {
        tracing::info!(uid = %s.uid, namespace = %s.namespace, name = %s.name, kind = %s.kind, webhook = hook, reason = %n, "dryrun infringement");
    }
    for r in &d.policy_results {
        if let Some(why) = &r.pending {
            tracing::info!(uid = %s.uid, namespace = %s.namespace, name = %s.name, kind = %s.kind, webhook = hook, policy = %r.policy, reason = %why, "policy pending, not evaluated");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use poolguard_core::config::Config;
    use serde_json::json;

    /// A first try that ends past its slice without an error (its worker was preempted, or
    /// the policy's timer looked late) is the decision; only past the request's deadline is a
    /// decision the deadline's answer. The shipped policy's Rust copy reads no clock, so its
    /// share of a slice already over does not cut it short.
    #[test]
    fn a_finished_first_try_is_late_only_past_the_deadline() {
        let config = Config::parse(
            "policies:\n  allowedrepositories:\n    parameters:\n      repositories: [registry.example.com/]\n",
            "t",
        )
        .unwrap();
        let policies = crate::sources::load_policies("policies".as_ref()).unwrap();
        let rules = RuleSet::new(config, policies, Default::default(), "t").unwrap();
        let review = json!({"request": {
            "uid": "u", "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "namespace": "team", "operation": "CREATE", "userInfo": {"username": "alice"},
            "object": {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web"},
                "spec": {"containers": [{"name": "c", "image": "docker.io/library/nginx:1.27"}]}},
        }});
        let over = Instant::now();
        let decide = |until| {
            let scope = Scope {
                labels: None,
                pools: None,
                now: None,
            };
            decide_review(
                Webhook::Validate,
                &review,
                scope,
                &rules,
                until,
                Duration::from_secs(1),
            )
        };
        let (made, Late(late)) = decide(Until::first_try(over, over + Duration::from_secs(60)));
        assert!(!late);
        assert!(
            matches!(&made.ruling, Ruling::Deny { message, .. } if message.contains("nginx")),
            "{:?}",
            made.ruling
        );
        let results = &made.policy_results;
        assert!(results.len() == 1 && !results[0].error && results[0].infringements == 1);
        // The same past the deadline: the deadline's answer, as before.
        let (lost, Late(late)) = decide(Until::first_try(over, over));
        assert!(late);
        assert!(
            matches!(&lost.ruling, Ruling::Deny { message, .. } if message.contains("did not decide")),
            "{:?}",
            lost.ruling
        );
    }
}
