//! A fake Kubernetes API server for the `selfcert` and native-object tests: objects kept in
//! memory by path, every request recorded. It knows GET (an object, or a collection listed with
//! one `labelSelector` equality), POST (create), PUT (replace, with the resourceVersion
//! precondition), JSON PATCH (applied to the stored JSON, so fields nobody declared survive),
//! server-side apply (the applied object replaces the stored one) and DELETE, and answers
//! everything else 405.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::sync::{Arc, Mutex, MutexGuard};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::http::{Method, Request, Response, StatusCode};
use serde_json::{json, Value};

pub const NAMESPACE: &str = "poolguard";
pub const SECRETS: &str = "/api/v1/namespaces/poolguard/secrets";
pub const MUTATING: &str = "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations";
pub const VALIDATING: &str =
    "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations";

#[derive(Debug, Clone)]
pub struct Recorded {
    pub method: Method,
    pub path: String,
    pub query: String,
    pub content_type: Option<String>,
    pub body: Option<Value>,
}

#[derive(Default)]
pub struct State {
    /// Objects by item path (`<collection>/<name>`).
    pub objects: BTreeMap<String, Value>,
    pub requests: Vec<Recorded>,
    last_version: u64,
    /// Answer this many of the next Secret writes 409, as if another replica had written first.
    pub secret_conflicts: u32,
    /// Before the next PATCH, change the target as another writer would (a new resourceVersion).
    pub touch_before_patch: bool,
}

impl State {
    fn next_version(&mut self) -> String {
        self.last_version += 1;
        self.last_version.to_string()
    }

    /// Stores `object` under `collection`, with a new resourceVersion.
    pub fn put(&mut self, collection: &str, mut object: Value) {
        object["metadata"]["resourceVersion"] = json!(self.next_version());
        let name = object["metadata"]["name"]
            .as_str()
            .expect("a name")
            .to_string();
        self.objects.insert(format!("{collection}/{name}"), object);
    }

    /// The objects of `collection` whose labels match the query's `labelSelector=key%3Dvalue`
    /// (one equality term), as a List.
    fn list(&self, collection: &str, query: &str) -> Value {
        let selector = query
            .split('&')
            .find_map(|p| p.strip_prefix("labelSelector="))
            .unwrap_or_default()
            .replace("%3D", "=")
            .replace("%2F", "/");
        let (key, value) = selector.split_once('=').unwrap_or((&selector, ""));
        let prefix = format!("{collection}/");
        let items: Vec<&Value> = self
            .objects
            .iter()
            .filter(|(path, _)| path.strip_prefix(&prefix).is_some_and(|n| !n.contains('/')))
            .map(|(_, object)| object)
            .filter(|object| object["metadata"]["labels"][key] == json!(value))
            .collect();
        json!({"apiVersion": "v1", "kind": "List", "metadata": {"resourceVersion": "1"}, "items": items})
    }

    /// Requests with this method whose path starts with `prefix`.
    pub fn count(&self, method: &Method, prefix: &str) -> usize {
        self.requests
            .iter()
            .filter(|r| r.method == *method && r.path.starts_with(prefix))
            .count()
    }

    /// Secret writes (create or replace), including refused ones.
    pub fn secret_writes(&self) -> usize {
        self.count(&Method::POST, SECRETS) + self.count(&Method::PUT, SECRETS)
    }
}

#[derive(Clone, Default)]
pub struct FakeApi(Arc<Mutex<State>>);

impl FakeApi {
    pub fn state(&self) -> MutexGuard<'_, State> {
        self.0.lock().unwrap()
    }

    /// A client talking to this server.
    pub fn client(&self) -> kube::Client {
        let api = self.clone();
        let service = tower::service_fn(move |request: Request<kube::client::Body>| {
            let api = api.clone();
            async move { Ok::<_, Infallible>(api.handle(request).await) }
        });
        kube::Client::new(service, NAMESPACE)
    }

    async fn handle(&self, request: Request<kube::client::Body>) -> Response<Full<Bytes>> {
        let (parts, body) = request.into_parts();
        let bytes = body.collect().await.expect("a request body").to_bytes();
        let body: Option<Value> = (!bytes.is_empty())
            .then(|| serde_json::from_slice(&bytes).expect("a JSON request body"));
        let path = parts.uri.path().to_string();
        let content_type = parts
            .headers
            .get(hyper::http::header::CONTENT_TYPE)
            .map(|v| v.to_str().unwrap().to_string());
        let mut state = self.state();
        state.requests.push(Recorded {
            method: parts.method.clone(),
            path: path.clone(),
            query: parts.uri.query().unwrap_or_default().to_string(),
            content_type: content_type.clone(),
            body: body.clone(),
        });
        let secret = path.starts_with(SECRETS);
        match parts.method {
            Method::GET => match state.objects.get(&path) {
                Some(object) => reply(StatusCode::OK, object),
                None if parts
                    .uri
                    .query()
                    .is_some_and(|q| q.contains("labelSelector=")) =>
                {
                    reply(
                        StatusCode::OK,
                        &state.list(&path, parts.uri.query().unwrap()),
                    )
                }
                None => status(404, "NotFound", &format!("{path} not found"), None),
            },
            Method::DELETE => match state.objects.remove(&path) {
                Some(object) => reply(StatusCode::OK, &object),
                None => status(404, "NotFound", &format!("{path} not found"), None),
            },
            Method::PATCH if content_type.as_deref() == Some("application/apply-patch+yaml") => {
                // Server-side apply, as far as these tests need it: the applied object replaces
                // the stored one.
                let collection = path.rsplit_once('/').unwrap().0.to_string();
                state.put(&collection, body.expect("an object to apply"));
                reply(StatusCode::OK, &state.objects[&path])
            }
            Method::POST | Method::PUT if secret && state.secret_conflicts > 0 => {
                state.secret_conflicts -= 1;
                status(409, "Conflict", "the object has been modified", None)
            }
            Method::POST => {
                let body = body.expect("an object to create");
                let item = format!(
                    "{path}/{}",
                    body["metadata"]["name"].as_str().expect("a name")
                );
                if state.objects.contains_key(&item) {
                    return status(409, "AlreadyExists", &format!("{item} exists"), None);
                }
                state.put(&path, body);
                reply(StatusCode::CREATED, &state.objects[&item])
            }
            Method::PUT => {
                let body = body.expect("an object to replace");
                let Some(current) = state.objects.get(&path) else {
                    return status(404, "NotFound", &format!("{path} not found"), None);
                };
                let expected = &current["metadata"]["resourceVersion"];
                let given = &body["metadata"]["resourceVersion"];
                if !given.is_null() && given != expected {
                    return status(409, "Conflict", "the object has been modified", None);
                }
                let collection = path.rsplit_once('/').unwrap().0.to_string();
                state.put(&collection, body);
                reply(StatusCode::OK, &state.objects[&path])
            }
            Method::PATCH => {
                if content_type.as_deref() != Some("application/json-patch+json") {
                    return status(415, "UnsupportedMediaType", "only JSON patches here", None);
                }
                if std::mem::take(&mut state.touch_before_patch) {
                    if let Some(mut object) = state.objects.get(&path).cloned() {
                        object["metadata"]["labels"] = json!({"touched": "yes"});
                        let collection = path.rsplit_once('/').unwrap().0.to_string();
                        state.put(&collection, object);
                    }
                }
                let Some(mut object) = state.objects.get(&path).cloned() else {
                    return status(404, "NotFound", &format!("{path} not found"), None);
                };
                let patch: json_patch::Patch =
                    serde_json::from_value(body.expect("a patch")).expect("a JSON patch");
                if let Err(e) = json_patch::patch(&mut object, &patch) {
                    // As the API server answers a failed patch: 422, the details in the causes.
                    let cause = match e.kind {
                        json_patch::PatchErrorKind::TestFailed => {
                            format!("testing value {} failed: test failed", e.path)
                        }
                        _ => e.to_string(),
                    };
                    return status(
                        422,
                        "Invalid",
                        "the server rejected our request due to an error in our request",
                        Some(&cause),
                    );
                }
                let collection = path.rsplit_once('/').unwrap().0.to_string();
                state.put(&collection, object);
                reply(StatusCode::OK, &state.objects[&path])
            }
            _ => status(405, "MethodNotAllowed", "not here", None),
        }
    }
}

fn reply(code: StatusCode, body: &Value) -> Response<Full<Bytes>> {
    Response::builder()
        .status(code)
        .header(hyper::http::header::CONTENT_TYPE, "application/json")
        .body(Full::new(Bytes::from(serde_json::to_vec(body).unwrap())))
        .unwrap()
}

fn status(code: u16, reason: &str, message: &str, cause: Option<&str>) -> Response<Full<Bytes>> {
    let mut body = json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": message, "reason": reason, "code": code,
    });
    if let Some(cause) = cause {
        body["details"] =
            json!({"causes": [{"reason": "UnexpectedServerResponse", "message": cause}]});
    }
    reply(StatusCode::from_u16(code).unwrap(), &body)
}
