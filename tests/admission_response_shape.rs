//! poolguard's AdmissionReview responses (`admission::respond`) say to the API server what
//! kube-core's `AdmissionResponse` says for the same decision: uid, allowed, the denial's code,
//! message and reason, the JSON patch and the warnings, on one table of decisions.
//!
//! kube-core's type is not used on the hot path because building one needs the request parsed a
//! second time into `AdmissionRequest<DynamicObject>` (a typed copy of the whole object; the
//! webhook reads the review once as `serde_json::Value` and borrows from it), and its `deny`
//! leaves the code at 0 and the reason empty (set here by hand). What differs in the JSON itself
//! is pinned below. This table found poolguard's 503 denials reported with reason
//! `InternalError`; they now say `ServiceUnavailable`, as Kubernetes names a 503.

use base64::Engine as _;
use json_patch::Patch;
use kube::core::admission::{AdmissionRequest, AdmissionResponse, AdmissionReview};
use kube::core::DynamicObject;
use poolguard_core::admission::{self, Decision, DenyCode};
use serde_json::{json, Value};

const UID: &str = "705ab4f5-6393-11e8-b7cc-42010a800002";

fn review() -> Value {
    json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": UID,
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "name": "web",
            "namespace": "team-a",
            "operation": "CREATE",
            "userInfo": {"username": "alice"},
            "object": {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": "web", "namespace": "team-a"},
                "spec": {"containers": [{"name": "c", "image": "nginx"}]}
            },
            "dryRun": false
        }
    })
}

/// The same decision as kube-core builds it, from the typed request.
fn kube_core_response(decision: &Decision) -> Value {
    let review: AdmissionReview<DynamicObject> = serde_json::from_value(review()).unwrap();
    let request: AdmissionRequest<DynamicObject> = review.try_into().unwrap();
    let mut response = AdmissionResponse::from(&request);
    if let Some(patch) = decision.patch() {
        response = response.with_patch(patch.clone()).unwrap();
    }
    if !decision.allowed() {
        response = response.deny(decision.message());
        response.result.code = decision.code().unwrap();
        response.result.reason = reason_of(decision.code().unwrap()).to_string();
    }
    if !decision.warnings.is_empty() {
        response.warnings = Some(decision.warnings.clone());
    }
    serde_json::to_value(response.into_review()).unwrap()
}

fn reason_of(code: u16) -> &'static str {
    match code {
        400 => "BadRequest",
        403 => "Forbidden",
        500 => "InternalError",
        503 => "ServiceUnavailable",
        other => panic!("no reason for {other}"),
    }
}

/// What the API server reads from a response.
fn read_by_the_api_server(review: &Value) -> Value {
    let r = &review["response"];
    // Go's JSON reads a []byte from a base64 string or from an array of numbers.
    let bytes = match &r["patch"] {
        Value::String(p) => Some(base64::engine::general_purpose::STANDARD.decode(p).unwrap()),
        Value::Array(numbers) => Some(
            numbers
                .iter()
                .map(|n| u8::try_from(n.as_u64().unwrap()).unwrap())
                .collect(),
        ),
        _ => None,
    };
    let patch = bytes.map(|b| serde_json::from_slice::<Value>(&b).unwrap());
    let denied = r["allowed"] == json!(false);
    json!({
        "apiVersion": review["apiVersion"],
        "kind": review["kind"],
        "uid": r["uid"],
        "allowed": r["allowed"],
        "code": if denied { r["status"]["code"].clone() } else { Value::Null },
        "message": if denied { r["status"]["message"].clone() } else { Value::Null },
        "reason": if denied { r["status"]["reason"].clone() } else { Value::Null },
        "patchType": r["patchType"],
        "patch": patch,
        "warnings": r["warnings"],
    })
}

fn decisions() -> Vec<(&'static str, Decision)> {
    let patch: Patch = serde_json::from_value(json!([
        {"op": "add", "path": "/spec/nodeSelector", "value": {"agentpool": "blue"}},
        {"op": "add", "path": "/metadata/annotations/poolguard.io~1pool", "value": "blue"}
    ]))
    .unwrap();
    vec![
        ("allowed", Decision::allow()),
        ("patched", Decision::patched(patch.clone())),
        (
            "patched with a warning",
            Decision {
                warnings: vec!["latesttag: image nginx has no tag".into()],
                ..Decision::patched(patch)
            },
        ),
        (
            "allowed with warnings",
            Decision {
                warnings: vec!["one".into(), "two".into()],
                ..Decision::allow()
            },
        ),
        (
            "denied by a policy",
            Decision::deny(
                DenyCode::Forbidden,
                "allowedrepositories: image evil.example/x is not allowed",
            ),
        ),
        (
            "denied, several lines",
            Decision::deny(DenyCode::Forbidden, "pool red is not blue\nand one more"),
        ),
        (
            "unreadable object",
            Decision::deny(DenyCode::BadRequest, "spec.containers must be a list"),
        ),
        (
            "evaluation failed",
            Decision::deny(DenyCode::InternalError, "policy x failed"),
        ),
        (
            "not decided in time",
            Decision {
                warnings: vec!["slow".into()],
                ..Decision::deny(DenyCode::Unavailable, "no evaluation slot in time")
            },
        ),
    ]
}

#[test]
fn the_api_server_reads_the_same_from_both() {
    for (case, decision) in decisions() {
        let ours = admission::respond(UID, &decision);
        let theirs = kube_core_response(&decision);
        assert_eq!(
            read_by_the_api_server(&ours),
            read_by_the_api_server(&theirs),
            "{case}:\nours   {ours}\ntheirs {theirs}"
        );
    }
}

/// The JSON differs in form, not in what the API server reads:
/// - kube-core writes the patch as an array of numbers (serde's form of `Vec<u8>`), poolguard
///   as base64 (Kubernetes' own form of `[]byte`, about a third of the size);
/// - kube-core always writes `status` (an empty one when allowed), poolguard only for a denial.
#[test]
fn where_the_json_differs() {
    for (case, decision) in decisions() {
        let mut ours = admission::respond(UID, &decision);
        let mut theirs = kube_core_response(&decision);
        if let Some(patch) = decision.patch() {
            let bytes = serde_json::to_vec(patch).unwrap();
            let encoded = base64::engine::general_purpose::STANDARD.encode(&bytes);
            assert_eq!(ours["response"]["patch"], json!(encoded), "{case}");
            assert_eq!(theirs["response"]["patch"], json!(bytes), "{case}");
            ours["response"]["patch"] = Value::Null;
            theirs["response"]["patch"] = Value::Null;
        }
        let their_status = theirs["response"]
            .as_object_mut()
            .unwrap()
            .remove("status")
            .unwrap();
        let our_status = ours["response"].as_object_mut().unwrap().remove("status");
        assert_eq!(ours, theirs, "{case}: apart from status");
        if decision.allowed() {
            assert_eq!(our_status, None, "{case}");
            assert_eq!(their_status, json!({}), "{case}");
        } else {
            assert_eq!(our_status, Some(their_status), "{case}");
        }
    }
}
