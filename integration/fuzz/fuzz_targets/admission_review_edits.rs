//! A valid AdmissionReview (one of testdata/reviews) with structured edits: set, remove or add
//! a value anywhere in the document, with words taken mostly from what decisions look at (kinds,
//! operations, namespaces, pools, selectors, images). The edited review goes through the server's
//! parsing as bytes and, when it still reads, through both webhooks under every test config
//! (see `decide_and_check` for the invariants).
#![no_main]

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use poolguard_core::admission;
use poolguard_fuzz::{decide_and_check, shipped};
use serde_json::{Map, Value};

const WORDS: &[&str] = &[
    "",
    "Pod",
    "Namespace",
    "Deployment",
    "ReplicaSet",
    "StatefulSet",
    "DaemonSet",
    "Job",
    "CronJob",
    "ReplicationController",
    "apps",
    "batch",
    "v1",
    "pods",
    "namespaces",
    "deployments",
    "cronjobs",
    "CREATE",
    "UPDATE",
    "DELETE",
    "CONNECT",
    "ephemeralcontainers",
    "status",
    "binding",
    "mapped",
    "gpu-team",
    "unmapped",
    "kube-system",
    "default",
    "agentpool",
    "kubernetes.azure.com/agentpool",
    "pool1",
    "gpu",
    "poolguard.io/pool",
    "metadata",
    "name",
    "generateName",
    "labels",
    "annotations",
    "spec",
    "template",
    "jobTemplate",
    "nodeSelector",
    "nodeName",
    "affinity",
    "nodeAffinity",
    "requiredDuringSchedulingIgnoredDuringExecution",
    "preferredDuringSchedulingIgnoredDuringExecution",
    "nodeSelectorTerms",
    "matchExpressions",
    "matchFields",
    "key",
    "operator",
    "values",
    "In",
    "NotIn",
    "Exists",
    "DoesNotExist",
    "schedulingGates",
    "tolerations",
    "containers",
    "initContainers",
    "ephemeralContainers",
    "volumes",
    "image",
    "reference",
    "registry.example.com/web:1.0",
    "registry.example.com/dev/tool",
    "gpu.example.com/train:2",
    "registry.k8s.io/pause:3.10",
    "nginx",
    "nginx:latest",
    "docker.io/library/nginx@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
    "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
    "uid",
    "kind",
    "group",
    "version",
    "resource",
    "subResource",
    "namespace",
    "operation",
    "object",
    "oldObject",
    "userInfo",
    "username",
    "groups",
    "system:masters",
    "system:serviceaccount:kube-system:replicaset-controller",
    "kubernetes.io/os",
    "linux",
];

#[derive(Arbitrary, Debug)]
struct Input {
    seed: u8,
    edits: Vec<Edit>,
}

#[derive(Arbitrary, Debug)]
struct Edit {
    /// Which node of the document, in document order (modulo their number).
    at: u16,
    op: Op,
}

#[derive(Arbitrary, Debug)]
enum Op {
    Set(Val),
    Remove,
    /// Into an object: set a member; into an array: append.
    Add(Word, Val),
}

#[derive(Arbitrary, Debug)]
enum Word {
    Known(u8),
    Other(String),
}

#[derive(Arbitrary, Debug)]
enum Val {
    Null,
    Bool(bool),
    Int(i64),
    /// A quarter of this: fractions that read back exactly (the equality check below).
    Quarters(i32),
    Word(Word),
    Array(Vec<Val>),
    Object(Vec<(Word, Val)>),
}

impl Word {
    fn text(&self) -> String {
        match self {
            Word::Known(i) => WORDS[usize::from(*i) % WORDS.len()].to_string(),
            Word::Other(s) => s.clone(),
        }
    }
}

impl Val {
    fn json(&self) -> Value {
        match self {
            Val::Null => Value::Null,
            Val::Bool(b) => Value::from(*b),
            Val::Int(i) => Value::from(*i),
            Val::Quarters(q) => Value::from(f64::from(*q) / 4.0),
            Val::Word(w) => Value::from(w.text()),
            Val::Array(items) => items.iter().map(Val::json).collect(),
            Val::Object(members) => Value::Object(
                members
                    .iter()
                    .map(|(k, v)| (k.text(), v.json()))
                    .collect::<Map<_, _>>(),
            ),
        }
    }
}

/// JSON Pointers of every node of `doc`, the root first.
fn pointers(doc: &Value, at: String, out: &mut Vec<String>) {
    match doc {
        Value::Object(members) => {
            out.push(at.clone());
            for (k, v) in members {
                let token = k.replace('~', "~0").replace('/', "~1");
                pointers(v, format!("{at}/{token}"), out);
            }
        }
        Value::Array(items) => {
            out.push(at.clone());
            for (i, v) in items.iter().enumerate() {
                pointers(v, format!("{at}/{i}"), out);
            }
        }
        _ => out.push(at),
    }
}

fn apply(doc: &mut Value, edit: &Edit) {
    let mut all = Vec::new();
    pointers(doc, String::new(), &mut all);
    let at = &all[usize::from(edit.at) % all.len()];
    match &edit.op {
        Op::Set(v) => *doc.pointer_mut(at).expect("a listed node") = v.json(),
        Op::Remove => {
            let Some((parent, last)) = at.rsplit_once('/') else {
                return; // the root stays
            };
            let key = last.replace("~1", "/").replace("~0", "~");
            match doc.pointer_mut(parent).expect("a listed node") {
                Value::Object(members) => {
                    members.remove(&key);
                }
                Value::Array(items) => {
                    items.remove(key.parse::<usize>().expect("an index"));
                }
                _ => unreachable!("a parent is an object or an array"),
            }
        }
        Op::Add(key, v) => match doc.pointer_mut(at).expect("a listed node") {
            Value::Object(members) => {
                members.insert(key.text(), v.json());
            }
            Value::Array(items) => items.push(v.json()),
            _ => {}
        },
    }
}

fuzz_target!(|input: Input| {
    let shipped = shipped();
    let mut review = shipped.reviews[usize::from(input.seed) % shipped.reviews.len()]
        .1
        .clone();
    for edit in input.edits.iter().take(16) {
        apply(&mut review, edit);
    }
    let body = serde_json::to_vec(&review).expect("a JSON value serializes");
    let parsed = match admission::parse_review(&body) {
        Ok(parsed) => parsed,
        // The server's JSON reader refuses nesting deeper than 128 levels, which a value can have.
        Err(e) if e.0.contains("recursion limit exceeded") => return,
        Err(e) => {
            assert!(
                admission::check_review(&review).is_err(),
                "the body is refused ({e}) but the value passes the check"
            );
            return;
        }
    };
    assert_eq!(
        parsed, review,
        "the body reads back as the value it was made from"
    );
    admission::check_review(&review).expect("the value passes the check the body passed");
    for (_, rules) in &shipped.rules {
        decide_and_check(&parsed, rules, &shipped.namespaces);
    }
});
