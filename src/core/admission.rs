//! AdmissionReview v1 in and out, and which objects carry a pod spec.

use base64::Engine as _;
use json_patch::Patch;
use serde_json::{json, Value};

pub const API_VERSION: &str = "admission.k8s.io/v1";
pub const KIND: &str = "AdmissionReview";

/// Why a review could not be read: answered with HTTP 400 (or a CLI error).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct BadReview(pub String);

/// The most memory the parsed document of one review may take, as [`parsed_cost`] estimates it.
/// A JSON text can take many times its size once parsed (`[[],[],…]` or `0,0,…` about 30 times:
/// every value is a node of its own), so the body limit alone does not bound it. Real reviews
/// take about 5 to 20 times their size, and a pod's review is at most a few MB.
pub const MAX_PARSED_BYTES: usize = 48 * 1024 * 1024;

/// The deepest nesting of arrays and objects accepted (a pod's is under 20).
pub(crate) const MAX_DEPTH: usize = 64;

/// Parses and checks an AdmissionReview v1, returning the whole document. The request is at
/// `review["request"]`; read it with [`Request::from_value`]. A body whose parsed document would
/// take more than [`MAX_PARSED_BYTES`] or nest deeper than [`MAX_DEPTH`] is refused before any
/// of it is built.
pub fn parse_review(body: &[u8]) -> Result<Value, BadReview> {
    Estimate::of(body)?.parse()
}

/// A body whose parsed size is estimated ([`parsed_cost`]) and within [`MAX_PARSED_BYTES`]:
/// the server reserves [`Estimate::bytes`] of its parse budget, then [`Estimate::parse`]s.
#[derive(Debug, Clone, Copy)]
pub struct Estimate<'a> {
    body: &'a [u8],
    bytes: usize,
}

impl<'a> Estimate<'a> {
    /// The estimate of `body`, refused when over [`MAX_PARSED_BYTES`] or deeper than
    /// [`MAX_DEPTH`].
    pub fn of(body: &'a [u8]) -> Result<Estimate<'a>, BadReview> {
        let bytes = parsed_cost(body, MAX_DEPTH)?;
        if bytes > MAX_PARSED_BYTES {
            return Err(BadReview(format!(
                "the AdmissionReview is too large once parsed: its {} bytes would take about {} MiB, at most {} MiB are accepted",
                body.len(),
                bytes.div_ceil(1024 * 1024),
                MAX_PARSED_BYTES / (1024 * 1024)
            )));
        }
        Ok(Estimate { body, bytes })
    }

    /// Bytes the parsed document may take (an over-estimate).
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Parses and checks the review.
    pub fn parse(self) -> Result<Value, BadReview> {
        let review: Value = serde_json::from_slice(self.body)
            .map_err(|e| BadReview(format!("the body is not valid JSON: {e}")))?;
        check_review(&review)?;
        Ok(review)
    }
}

/// Bytes that parsing `body` into a [`Value`] may take, over-estimated, found in one pass over
/// the bytes that allocates only a flag per level of nesting: every array element counts a
/// value and the spare room a growing list keeps, every object member a map entry and its key,
/// every string its bytes.
/// Nesting deeper than `max_depth` is refused. Malformed JSON is left to the parser (the
/// estimate is then meaningless but still bounded by the length).
pub(crate) fn parsed_cost(body: &[u8], max_depth: usize) -> Result<usize, BadReview> {
    /// A value in a list: 32 bytes, twice for the room a doubling list may leave spare.
    const ELEMENT: usize = 64;
    /// An entry in a map: the key's String and the value (56 bytes) in B-tree nodes that may be
    /// half empty, and the key's allocation.
    const MEMBER: usize = 160;
    /// A string's allocation beyond its bytes (rounding up to the allocator's size classes).
    const STRING: usize = 16;
    // One bit per level: whether it is an object.
    let mut objects = vec![false; max_depth + 1];
    let mut depth = 0usize;
    let mut cost = 32usize;
    let mut in_string = false;
    let mut escaped = false;
    // Whether the next value starts an element of the enclosing list.
    let mut want_element = false;
    for &b in body {
        if in_string {
            cost += 1;
            if escaped {
                escaped = false;
            } else if b == b'\\' {
                escaped = true;
            } else if b == b'"' {
                in_string = false;
            }
            continue;
        }
        if want_element && !matches!(b, b' ' | b'\t' | b'\n' | b'\r' | b']') {
            cost += ELEMENT;
        }
        if !matches!(b, b' ' | b'\t' | b'\n' | b'\r') {
            want_element = false;
        }
        match b {
            b'"' => {
                in_string = true;
                cost += STRING;
            }
            b'[' | b'{' => {
                depth += 1;
                if depth > max_depth {
                    return Err(BadReview(format!(
                        "the AdmissionReview nests arrays and objects deeper than {max_depth} levels"
                    )));
                }
                objects[depth] = b == b'{';
                want_element = b == b'[';
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            b',' => want_element = !objects[depth],
            b':' => cost += MEMBER,
            _ => {}
        }
    }
    Ok(cost)
}

/// Checks the envelope of an already parsed AdmissionReview.
pub fn check_review(review: &Value) -> Result<(), BadReview> {
    if !review.is_object() {
        return Err(BadReview("an AdmissionReview must be a JSON object".into()));
    }
    let api_version = review["apiVersion"].as_str().unwrap_or_default();
    let kind = review["kind"].as_str().unwrap_or_default();
    if kind != KIND || api_version != API_VERSION {
        return Err(BadReview(format!(
            "expected apiVersion {API_VERSION} kind {KIND}, got apiVersion {api_version:?} kind {kind:?}"
        )));
    }
    Request::from_value(&review["request"]).map(|_| ())
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operation {
    Create,
    Update,
    Delete,
    Connect,
}

impl Operation {
    pub fn as_str(self) -> &'static str {
        match self {
            Operation::Create => "CREATE",
            Operation::Update => "UPDATE",
            Operation::Delete => "DELETE",
            Operation::Connect => "CONNECT",
        }
    }
}

/// A borrowed view of an AdmissionRequest: the fields decisions use, and the raw request.
#[derive(Debug, Clone, Copy)]
pub struct Request<'a> {
    pub raw: &'a Value,
    pub uid: &'a str,
    pub group: &'a str,
    pub kind: &'a str,
    /// Empty when the request is for the main resource.
    pub sub_resource: &'a str,
    /// `request.namespace`: the object's own `metadata.namespace` may be absent.
    pub namespace: &'a str,
    pub operation: Operation,
    pub object: Option<&'a Value>,
    pub old_object: Option<&'a Value>,
}

impl<'a> Request<'a> {
    pub fn from_value(raw: &'a Value) -> Result<Request<'a>, BadReview> {
        if raw.is_null() {
            return Err(BadReview("the AdmissionReview has no `request`".into()));
        }
        if !raw.is_object() {
            return Err(BadReview("`request` must be an object".into()));
        }
        let text = |field: &str| -> Result<&'a str, BadReview> {
            match &raw[field] {
                Value::Null => Ok(""),
                Value::String(s) => Ok(s.as_str()),
                other => Err(BadReview(format!(
                    "`request.{field}` must be a string, got {other}"
                ))),
            }
        };
        let uid = text("uid")?;
        if uid.is_empty() {
            return Err(BadReview("`request.uid` is missing".into()));
        }
        let kind = &raw["kind"];
        let kind_name = kind["kind"].as_str().unwrap_or_default();
        if kind_name.is_empty() {
            return Err(BadReview("`request.kind.kind` is missing".into()));
        }
        let operation = match text("operation")? {
            "CREATE" => Operation::Create,
            "UPDATE" => Operation::Update,
            "DELETE" => Operation::Delete,
            "CONNECT" => Operation::Connect,
            other => {
                return Err(BadReview(format!(
                    "`request.operation` must be CREATE, UPDATE, DELETE or CONNECT, got {other:?}"
                )))
            }
        };
        let object = object_field(raw, "object")?;
        let old_object = object_field(raw, "oldObject")?;
        if object.is_none() && matches!(operation, Operation::Create | Operation::Update) {
            return Err(BadReview(format!(
                "`request.object` is missing for a {} request",
                operation.as_str()
            )));
        }
        let group = match &kind["group"] {
            Value::Null => "",
            Value::String(g) => g.as_str(),
            other => {
                return Err(BadReview(format!(
                    "`request.kind.group` must be a string, got {}",
                    type_name(other)
                )))
            }
        };
        check_resource(raw, group, kind_name)?;
        let namespace = text("namespace")?;
        if namespace.is_empty() && pod_spec_path(group, kind_name).is_some() {
            return Err(BadReview(format!(
                "`request.namespace` is missing for a {kind_name}, which lives in a namespace"
            )));
        }
        Ok(Request {
            raw,
            uid,
            group,
            kind: kind_name,
            sub_resource: text("subResource")?,
            namespace,
            operation,
            object,
            old_object,
        })
    }

    /// `kind/name` for logs and messages (controller-made pods may only have a generateName).
    pub fn object_name(&self) -> &'a str {
        let meta = &self.object.or(self.old_object).unwrap_or(&Value::Null)["metadata"];
        meta["name"]
            .as_str()
            .filter(|n| !n.is_empty())
            .or_else(|| meta["generateName"].as_str())
            .or_else(|| self.raw["name"].as_str())
            .unwrap_or_default()
    }

    /// A request for a Namespace (the main resource or a subresource).
    pub fn is_namespace(&self) -> bool {
        is_namespace_kind(self.group, self.kind)
    }

    /// Whether the request is for a PolicyException (`poolguard.io`).
    pub fn is_policy_exception(&self) -> bool {
        self.group == crate::exceptions::GROUP && self.kind == crate::exceptions::KIND
    }
}

fn object_field<'a>(raw: &'a Value, field: &str) -> Result<Option<&'a Value>, BadReview> {
    match &raw[field] {
        Value::Null => Ok(None),
        v @ Value::Object(_) => Ok(Some(v)),
        other => Err(BadReview(format!(
            "`request.{field}` must be an object, got {}",
            type_name(other)
        ))),
    }
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// The resources poolguard decides on: (group, kind, resource). A request whose `resource` and
/// `kind` disagree about any of them is refused: decisions follow the kind, webhook rules the
/// resource.
const RESOURCES: [(&str, &str, &str); 10] = [
    ("", "Pod", "pods"),
    ("", "ReplicationController", "replicationcontrollers"),
    ("", "Namespace", "namespaces"),
    ("apps", "Deployment", "deployments"),
    ("apps", "ReplicaSet", "replicasets"),
    ("apps", "StatefulSet", "statefulsets"),
    ("apps", "DaemonSet", "daemonsets"),
    ("batch", "Job", "jobs"),
    ("batch", "CronJob", "cronjobs"),
    ("poolguard.io", "PolicyException", "policyexceptions"),
];

/// `request.resource`, when given, must name the resource of `request.kind` (for the kinds
/// poolguard decides on, either way round).
fn check_resource(raw: &Value, group: &str, kind: &str) -> Result<(), BadReview> {
    let resource = &raw["resource"];
    if resource.is_null() {
        return Ok(());
    }
    let r_group = match &resource["group"] {
        Value::Null => Some(""),
        group => group.as_str(),
    };
    let (Some(r_group), Some(r_name)) = (r_group, resource["resource"].as_str()) else {
        return Err(BadReview(
            "`request.resource` must have string `group` and `resource`".into(),
        ));
    };
    let by_kind = RESOURCES.iter().find(|(g, k, _)| *g == group && *k == kind);
    let by_resource = RESOURCES
        .iter()
        .find(|(g, _, r)| *g == r_group && *r == r_name);
    if by_kind != by_resource {
        return Err(BadReview(format!(
            "`request.resource` ({r_group}/{r_name}) does not match `request.kind` ({group}/{kind})"
        )));
    }
    Ok(())
}

/// Whether this group and kind are the core Namespace.
pub fn is_namespace_kind(group: &str, kind: &str) -> bool {
    group.is_empty() && kind == "Namespace"
}

/// Where the pod spec sits inside an object of this group and kind, if it has one: the Pod
/// itself and the workload kinds whose template makes pods.
pub fn pod_spec_path(group: &str, kind: &str) -> Option<&'static [&'static str]> {
    const POD: &[&str] = &["spec"];
    const TEMPLATE: &[&str] = &["spec", "template", "spec"];
    const JOB_TEMPLATE: &[&str] = &["spec", "jobTemplate", "spec", "template", "spec"];
    match (group, kind) {
        ("", "Pod") => Some(POD),
        ("", "ReplicationController")
        | ("apps", "Deployment" | "ReplicaSet" | "StatefulSet" | "DaemonSet")
        | ("batch", "Job") => Some(TEMPLATE),
        ("batch", "CronJob") => Some(JOB_TEMPLATE),
        _ => None,
    }
}

/// A pod spec inside an object: the object, where its pod spec sits ([`pod_spec_path`]: the Pod
/// itself, or a workload's template) and the namespace it is in.
#[derive(Debug, Clone, Copy)]
pub struct PodSpecAt<'a> {
    pub object: &'a Value,
    pub path: &'a [&'a str],
    pub namespace: &'a str,
}

impl<'a> PodSpecAt<'a> {
    /// The pod spec itself (`None` when the object has nothing there).
    pub fn spec(&self) -> Option<&'a Value> {
        value_at(self.object, self.path)
    }

    /// Whether the object is a Pod (its pod spec is its own `spec`), not a workload.
    pub fn is_pod(&self) -> bool {
        self.path.len() == 1
    }
}

/// The value at `path` inside `object`.
pub(crate) fn value_at<'a>(object: &'a Value, path: &[&str]) -> Option<&'a Value> {
    path.iter().try_fold(object, |v, key| v.get(key))
}

/// What poolguard answers to one request: its [`Ruling`], and what is reported beside it.
/// Warnings go to the client whichever the ruling (Kubernetes shows them on a denial too).
#[derive(Debug, Clone, PartialEq)]
pub struct Decision {
    pub ruling: Ruling,
    /// Shown to the client (warn-mode policies).
    pub warnings: Vec<String>,
    /// Logged only (dryrun-mode policies).
    pub dryrun: Vec<String>,
    /// What each policy that ran on the object found (for metrics).
    pub policy_results: Vec<PolicyResult>,
    /// The PolicyExceptions that allowed what would have been refused, one line each
    /// (`policy: PolicyException namespace/name (ticket T, expires E)`): the response's audit
    /// annotation `policyexceptions`.
    pub exceptions: Vec<String>,
}

/// Allowed, perhaps with a patch, or denied with a status and a message: a denial cannot carry
/// a patch, nor an allowed request a status.
#[derive(Debug, Clone, PartialEq)]
pub enum Ruling {
    Allow { patch: Option<Patch> },
    Deny { code: DenyCode, message: String },
}

/// The status of a denial.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DenyCode {
    /// 400: the object could not be read.
    BadRequest,
    /// 403: a policy or placement refuses it.
    Forbidden,
    /// 500: the decision failed (an evaluation error under `onError: deny`).
    InternalError,
    /// 503: what the decision needs is not known yet (pools), or no pool could be chosen in time.
    Unavailable,
}

impl DenyCode {
    /// The HTTP status code.
    pub fn as_u16(self) -> u16 {
        match self {
            DenyCode::BadRequest => 400,
            DenyCode::Forbidden => 403,
            DenyCode::InternalError => 500,
            DenyCode::Unavailable => 503,
        }
    }

    /// The `status.reason` of the AdmissionReview response.
    fn reason(self) -> &'static str {
        match self {
            DenyCode::BadRequest => "BadRequest",
            DenyCode::Forbidden => "Forbidden",
            DenyCode::InternalError => "InternalError",
            DenyCode::Unavailable => "ServiceUnavailable",
        }
    }
}

/// One policy's evaluation on one object.
#[derive(Debug, Clone, PartialEq)]
pub struct PolicyResult {
    pub policy: String,
    pub enforcement: crate::config::Enforcement,
    pub infringements: usize,
    pub error: bool,
    /// Set when the policy was Pending (not evaluated, not enforced): why, naming the unmet
    /// dependency.
    pub pending: Option<String>,
    /// For a policy under a rollout: the group, its status and the version that ran.
    pub rollout: Option<crate::rollout_mark::RolloutMark>,
    /// Whether what the policy found would refuse the request were its enforcement `deny`: an
    /// infringement the old object did not have (on UPDATE, compared as the decision compares
    /// them; every one otherwise), or an error that `evaluation.onError: deny` refuses. False
    /// when a PolicyException allowed it (`excepted`).
    pub denies: bool,
    /// The PolicyException that allowed what the policy found.
    pub excepted: Option<crate::exceptions::ExceptionMark>,
}

impl Decision {
    fn of(ruling: Ruling) -> Decision {
        Decision {
            ruling,
            warnings: Vec::new(),
            dryrun: Vec::new(),
            policy_results: Vec::new(),
            exceptions: Vec::new(),
        }
    }

    pub fn allow() -> Decision {
        Decision::of(Ruling::Allow { patch: None })
    }

    pub fn patched(patch: Patch) -> Decision {
        Decision::of(Ruling::Allow { patch: Some(patch) })
    }

    pub fn deny(code: DenyCode, message: impl Into<String>) -> Decision {
        Decision::of(Ruling::Deny {
            code,
            message: message.into(),
        })
    }

    pub fn allowed(&self) -> bool {
        matches!(self.ruling, Ruling::Allow { .. })
    }

    /// The HTTP status code of a denial.
    pub fn code(&self) -> Option<u16> {
        match &self.ruling {
            Ruling::Allow { .. } => None,
            Ruling::Deny { code, .. } => Some(code.as_u16()),
        }
    }

    /// Why it is denied; empty when allowed.
    pub fn message(&self) -> &str {
        match &self.ruling {
            Ruling::Allow { .. } => "",
            Ruling::Deny { message, .. } => message,
        }
    }

    pub fn patch(&self) -> Option<&Patch> {
        match &self.ruling {
            Ruling::Allow { patch } => patch.as_ref(),
            Ruling::Deny { .. } => None,
        }
    }
}

/// The AdmissionReview v1 response document for `decision`.
pub fn respond(uid: &str, decision: &Decision) -> Value {
    let mut response = json!({ "uid": uid, "allowed": decision.allowed() });
    match &decision.ruling {
        Ruling::Deny { code, message } => {
            response["status"] = json!({
                "code": code.as_u16(),
                "message": message,
                "reason": code.reason(),
            });
        }
        Ruling::Allow { patch } => {
            if let Some(patch) = patch.as_ref().filter(|p| !p.0.is_empty()) {
                let bytes = serde_json::to_vec(patch).expect("a JSON patch always serializes");
                response["patchType"] = json!("JSONPatch");
                response["patch"] = json!(base64::engine::general_purpose::STANDARD.encode(bytes));
            }
        }
    }
    if !decision.warnings.is_empty() {
        response["warnings"] = json!(decision.warnings);
    }
    if !decision.exceptions.is_empty() {
        response["auditAnnotations"] =
            json!({ "policyexceptions": decision.exceptions.join("; ") });
    }
    json!({ "apiVersion": API_VERSION, "kind": KIND, "response": response })
}

/// `reasons`, one per line, at most `max` of them and a count of the rest.
pub(crate) fn summary_of(reasons: &[impl AsRef<str>], max: usize) -> String {
    let mut lines: Vec<&str> = reasons.iter().take(max).map(AsRef::as_ref).collect();
    let more = reasons.len().saturating_sub(max);
    let tail = format!("... and {more} more");
    if more > 0 {
        lines.push(&tail);
    }
    lines.join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn review(request: Value) -> Vec<u8> {
        serde_json::to_vec(&json!({"apiVersion": API_VERSION, "kind": KIND, "request": request}))
            .unwrap()
    }

    fn pod_request() -> Value {
        json!({"uid": "u1", "kind": {"group": "", "version": "v1", "kind": "Pod"}, "namespace": "ns",
               "operation": "CREATE", "object": {"metadata": {"generateName": "web-"}}})
    }

    #[test]
    fn good_review_parses() {
        let body = review(pod_request());
        let doc = parse_review(&body).unwrap();
        let req = Request::from_value(&doc["request"]).unwrap();
        assert_eq!(
            (req.uid, req.group, req.kind, req.namespace),
            ("u1", "", "Pod", "ns")
        );
        assert_eq!(req.operation, Operation::Create);
        assert_eq!(req.sub_resource, "");
        assert_eq!(req.object_name(), "web-");
    }

    #[test]
    fn bad_reviews_table() {
        let mut no_uid = pod_request();
        no_uid.as_object_mut().unwrap().remove("uid");
        let mut bad_op = pod_request();
        bad_op["operation"] = json!("PATCH");
        let mut no_object = pod_request();
        no_object.as_object_mut().unwrap().remove("object");
        let mut string_object = pod_request();
        string_object["object"] = json!("pod");
        let mut no_kind = pod_request();
        no_kind["kind"] = json!({});
        let mut no_namespace = pod_request();
        no_namespace.as_object_mut().unwrap().remove("namespace");
        let mut kind_resource_mismatch = pod_request();
        kind_resource_mismatch["resource"] =
            json!({"group": "", "version": "v1", "resource": "configmaps"});
        let mut resource_kind_mismatch = pod_request();
        resource_kind_mismatch["kind"] =
            json!({"group": "apps", "version": "v1", "kind": "Deployment"});
        resource_kind_mismatch["resource"] =
            json!({"group": "", "version": "v1", "resource": "pods"});
        let mut bad_resource = pod_request();
        bad_resource["resource"] = json!({"group": "", "resource": 5});
        let cases: Vec<(Vec<u8>, &str)> = vec![
            (b"{not json".to_vec(), "not valid JSON"),
            (b"[]".to_vec(), "JSON object"),
            (br#"{"apiVersion":"admission.k8s.io/v1beta1","kind":"AdmissionReview","request":{}}"#.to_vec(), "expected apiVersion"),
            (br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}"#.to_vec(), "no `request`"),
            (br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":5}"#.to_vec(), "must be an object"),
            (review(no_uid), "uid"),
            (review(bad_op), "PATCH"),
            (review(no_object), "`request.object` is missing"),
            (review(string_object), "must be an object, got a string"),
            (review(no_kind), "kind.kind"),
            (review(no_namespace), "`request.namespace` is missing for a Pod"),
            (review(kind_resource_mismatch), "does not match `request.kind` (/Pod)"),
            (review(resource_kind_mismatch), "(/pods) does not match `request.kind` (apps/Deployment)"),
            (review(bad_resource), "must have string `group` and `resource`"),
        ];
        for (body, want) in cases {
            let err = parse_review(&body).unwrap_err().0;
            assert!(
                err.contains(want),
                "{}: {err}",
                String::from_utf8_lossy(&body)
            );
        }
    }

    /// Bodies that take many times their size once parsed are refused before any of the
    /// document is built, whatever the shape; real reviews are not.
    #[test]
    fn bodies_that_parse_into_too_much_are_refused_unbuilt() {
        let repeat = |item: &str, n: usize| vec![item; n].join(",");
        let mib = 1024 * 1024;
        let labels: String = (0..mib)
            .map(|i| format!("\"{i:x}\":\"\""))
            .collect::<Vec<_>>()
            .join(",");
        let pod = |labels: &str, containers: &str| {
            format!(
                r#"{{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{{"uid":"u","kind":{{"kind":"Pod"}},"namespace":"n","operation":"CREATE","object":{{"metadata":{{"labels":{{{labels}}}}},"spec":{{"containers":[{containers}]}}}}}}}}"#
            )
        };
        let too_much = [
            ("empty arrays", format!("[{}]", repeat("[]", 2 * mib))),
            ("empty objects", format!("[{}]", repeat("{}", 2 * mib))),
            ("numbers", format!("[{}]", repeat("0", 3 * mib))),
            ("short strings", format!("[{}]", repeat("\"\"", 2 * mib))),
            ("labels", pod(&labels, "")),
            ("containers", pod("", &repeat("{}", 2 * mib))),
        ];
        for (what, body) in too_much {
            assert!(body.len() < 24 * mib, "{what}");
            let err = parse_review(body.as_bytes()).unwrap_err().0;
            assert!(err.contains("too large once parsed"), "{what}: {err}");
        }
        let deep = format!("{}{}", "[".repeat(MAX_DEPTH + 1), "]".repeat(MAX_DEPTH + 1));
        let err = parse_review(deep.as_bytes()).unwrap_err().0;
        assert!(err.contains("deeper than 64"), "{err}");
        let deep_object = format!(
            "{}1{}",
            "{\"a\":".repeat(MAX_DEPTH + 1),
            "}".repeat(MAX_DEPTH + 1)
        );
        assert!(parse_review(deep_object.as_bytes())
            .unwrap_err()
            .0
            .contains("deeper than"));
        // Within the depth, nesting is fine; strings cost their bytes, not more: a review with
        // megabytes of text (escaped HTML, as the API server writes it) is accepted.
        let nested = format!("{}{}", "[".repeat(MAX_DEPTH), "]".repeat(MAX_DEPTH));
        assert!(parsed_cost(nested.as_bytes(), MAX_DEPTH).is_ok());
        let text = "\\u003c".repeat(3 * mib);
        let big = pod(&format!("\"a\":\"{text}\""), r#"{"name":"c","image":"x"}"#);
        parse_review(big.as_bytes()).unwrap();
        // A string with brackets, colons, commas and escaped quotes inside counts as a string.
        let tricky = format!("[\"{}\"]", "[],:{}\\\"".repeat(mib));
        let cost = parsed_cost(tricky.as_bytes(), MAX_DEPTH).unwrap();
        assert!(cost < tricky.len() + 200, "{cost}");
    }

    #[test]
    fn delete_needs_no_object() {
        let mut req = pod_request();
        req["operation"] = json!("DELETE");
        req.as_object_mut().unwrap().remove("object");
        let parsed = parse_review(&review(req)).unwrap();
        let req = Request::from_value(&parsed["request"]).unwrap();
        assert_eq!(req.operation, Operation::Delete);
        assert_eq!((req.object, req.old_object), (None, None));
        assert_eq!(req.kind, "Pod");
    }

    #[test]
    fn pod_spec_paths() {
        let cases = [
            ("", "Pod", Some(&["spec"][..])),
            (
                "apps",
                "Deployment",
                Some(&["spec", "template", "spec"][..]),
            ),
            (
                "apps",
                "ReplicaSet",
                Some(&["spec", "template", "spec"][..]),
            ),
            (
                "apps",
                "StatefulSet",
                Some(&["spec", "template", "spec"][..]),
            ),
            ("apps", "DaemonSet", Some(&["spec", "template", "spec"][..])),
            ("batch", "Job", Some(&["spec", "template", "spec"][..])),
            (
                "batch",
                "CronJob",
                Some(&["spec", "jobTemplate", "spec", "template", "spec"][..]),
            ),
            (
                "",
                "ReplicationController",
                Some(&["spec", "template", "spec"][..]),
            ),
            ("", "Service", None),
            ("extensions", "Deployment", None),
            ("apps", "Pod", None),
        ];
        for (group, kind, want) in cases {
            assert_eq!(pod_spec_path(group, kind), want, "{group}/{kind}");
        }
    }

    #[test]
    fn response_shapes() {
        let allow = respond("u", &Decision::allow());
        assert_eq!(
            allow,
            json!({"apiVersion": API_VERSION, "kind": KIND, "response": {"uid": "u", "allowed": true}})
        );

        let deny = respond("u", &Decision::deny(DenyCode::Forbidden, "no"));
        assert_eq!(
            deny["response"]["status"],
            json!({"code": 403, "message": "no", "reason": "Forbidden"})
        );

        let patch: Patch =
            serde_json::from_value(json!([{"op": "add", "path": "/a", "value": 1}])).unwrap();
        let d = Decision {
            warnings: vec!["w".into()],
            ..Decision::patched(patch)
        };
        let r = respond("u", &d)["response"].clone();
        assert_eq!(r["patchType"], "JSONPatch");
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(r["patch"].as_str().unwrap())
            .unwrap();
        assert_eq!(
            serde_json::from_slice::<Value>(&bytes).unwrap(),
            json!([{"op": "add", "path": "/a", "value": 1}])
        );
        assert_eq!(r["warnings"], json!(["w"]));
    }
}
