//! What the fuzz targets share: the repository's rules and test data, loaded once per process,
//! and the invariants every admission decision keeps.

pub mod certs;

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use base64::Engine as _;
use poolguard_core::admission::{self, Decision, Request};
use poolguard_core::config::Config;
use poolguard_core::namespaces::{self, NamespaceLabels};
use poolguard_core::placement_policy::PlacementSet;
use poolguard_core::policy::template;
use poolguard_core::policy::PolicySet;
use poolguard_core::ruleset::{Budget, RuleSet};
use poolguard_core::scope::Scope;
use poolguard_core::webhook::Webhook;
use serde_json::Value;

/// A path inside the repository.
pub fn repo_path(relative: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(relative)
}

fn read(relative: &str) -> String {
    let path = repo_path(relative);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
}

/// The files of a repository directory whose names end with `suffix`, sorted.
fn files(relative: &str, suffix: &str) -> Vec<PathBuf> {
    let dir = repo_path(relative);
    let mut paths: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
        .map(|entry| entry.expect("a directory entry").path())
        .filter(|p| p.to_str().is_some_and(|s| s.ends_with(suffix)))
        .collect();
    paths.sort();
    paths
}

/// The rules and labels that decisions are made with.
pub struct Shipped {
    /// The shipped policies (`policies/*.yaml`), compiled.
    pub policies: PolicySet,
    /// `testdata/config/*.yaml` with the shipped policies, `example.yaml` first.
    pub rules: Vec<(String, RuleSet)>,
    /// `testdata/namespaces.yaml`.
    pub namespaces: NamespaceLabels,
    /// `testdata/reviews/*.json` by file name, parsed.
    pub reviews: Vec<(String, Value)>,
}

/// Loaded on first use; a broken file in the repository fails every target at once.
pub fn shipped() -> &'static Shipped {
    static SHIPPED: OnceLock<Shipped> = OnceLock::new();
    SHIPPED.get_or_init(|| {
        let templates: Vec<_> = files("policies", ".yaml")
            .into_iter()
            .map(|path| {
                let text = std::fs::read_to_string(&path).expect("a policy file");
                template::from_yaml(&text, path).expect("a shipped policy template")
            })
            .collect();
        let policies = PolicySet::compile(&templates).expect("the shipped policies compile");
        // The shipped placement policies too: a test config may give them parameters.
        let placement_templates: Vec<_> = files("policies/placement", ".yaml")
            .into_iter()
            .map(|path| {
                let text = std::fs::read_to_string(&path).expect("a placement policy file");
                template::from_yaml(&text, path).expect("a shipped placement policy template")
            })
            .collect();
        let placement = PlacementSet::compile(&placement_templates)
            .expect("the shipped placement policies compile");
        let mut configs = files("testdata/config", ".yaml");
        configs.sort_by_key(|p| !p.ends_with("example.yaml"));
        let rules = configs
            .into_iter()
            .map(|path| {
                let name = path.file_name().unwrap().to_string_lossy().into_owned();
                let text = std::fs::read_to_string(&path).expect("a config file");
                let config = Config::parse(&text, &name).expect("a test config");
                let rules = RuleSet::new(config, policies.clone(), placement.clone(), &name)
                    .expect("a test config fits the shipped policies");
                (name, rules)
            })
            .collect();
        let namespaces =
            namespaces::parse_file_text(&read("testdata/namespaces.yaml"), "namespaces.yaml")
                .expect("the test namespaces");
        let reviews = files("testdata/reviews", ".json")
            .into_iter()
            .map(|path| {
                let name = path.file_name().unwrap().to_string_lossy().into_owned();
                let text = std::fs::read(&path).expect("a review file");
                (name, admission::parse_review(&text).expect("a test review"))
            })
            .collect();
        Shipped {
            policies,
            rules,
            namespaces,
            reviews,
        }
    })
}

impl Shipped {
    /// The test review in `testdata/reviews/{name}`.
    pub fn review(&self, name: &str) -> &Value {
        let found = self.reviews.iter().find(|(n, _)| n == name);
        &found.unwrap_or_else(|| panic!("no test review {name}")).1
    }
}

/// Decides `review` (an AdmissionReview that passed [`admission::check_review`]) with both
/// webhooks under `rules`, and checks what a client of the webhook relies on:
///
/// - the response is an AdmissionReview v1 response with the request's uid, `allowed` as
///   decided and, for a denial, a status with a known code and a message;
/// - only the mutating webhook patches (only an allowed decision can carry a patch);
/// - the patch applies to the request's object (the API server fails the request otherwise);
/// - the mutating webhook is idempotent: the patched object needs no further patch (the API
///   server may call it again).
pub fn decide_and_check(review: &Value, rules: &RuleSet, namespaces: &NamespaceLabels) {
    let req = Request::from_value(&review["request"])
        .expect("a review that passed check_review has a readable request");
    let scope = Scope {
        labels: namespaces.get(req.namespace),
        pools: None,
now: None,
    };
    for webhook in [Webhook::Mutate, Webhook::Validate] {
        let decision = rules.decide(webhook, &req, scope, Budget::FULL);
        check_response(&req, &decision);
        let Some(patch) = decision.patch() else {
            continue;
        };
        assert_eq!(
            webhook,
            Webhook::Mutate,
            "only the mutating webhook patches"
        );
        let mut object = req.object.expect("a patched request has an object").clone();
        if let Err(e) = json_patch::patch(&mut object, patch) {
            panic!("the patch does not apply to the object: {e}\npatch: {patch:?}");
        }
        let mut again = req.raw.clone();
        again["object"] = object;
        let again_req = Request::from_value(&again).expect("the patched request reads");
        let second = rules.decide(webhook, &again_req, scope, Budget::FULL);
        assert!(
            second.allowed() && second.patch().is_none(),
            "the patched object is patched or refused again: {second:?}\nfirst patch: {patch:?}"
        );
    }
}

/// The response document for `decision`, as the server sends it, read back.
pub fn check_response(req: &Request, decision: &Decision) {
    let bytes =
        serde_json::to_vec(&admission::respond(req.uid, decision)).expect("a response serializes");
    let doc: Value = serde_json::from_slice(&bytes).expect("a response is JSON");
    assert_eq!(doc["apiVersion"], admission::API_VERSION);
    assert_eq!(doc["kind"], admission::KIND);
    let response = &doc["response"];
    assert_eq!(response["uid"], req.uid);
    assert_eq!(response["allowed"], decision.allowed());
    match decision.code() {
        None => assert!(response.get("status").is_none(), "{response}"),
        Some(code) => {
            assert!(!decision.message().is_empty(), "a denial says why");
            assert_eq!(response["status"]["code"], code);
        }
    }
    match decision.patch() {
        Some(patch) => {
            assert!(!patch.0.is_empty(), "an empty patch is left out");
            assert_eq!(response["patchType"], "JSONPatch");
            let encoded = response["patch"].as_str().expect("the patch is a string");
            let decoded = base64::engine::general_purpose::STANDARD
                .decode(encoded)
                .expect("the patch is base64");
            let sent: Value = serde_json::from_slice(&decoded).expect("the patch is JSON");
            assert_eq!(sent, serde_json::to_value(patch).unwrap());
        }
        None => assert!(response.get("patch").is_none(), "{response}"),
    }
}
