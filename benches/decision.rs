//! Microseconds per decision on the pure path (parse the AdmissionReview, decide, build the
//! response), for pods with 1 and 10 containers. Prints numbers; asserts nothing about time.
//!
//! cargo bench --bench decision [-- ITERATIONS]

use std::hint::black_box;
use std::time::Instant;

use poolguard::sources::load_namespaces;
use poolguard::sources::Sources;
use poolguard_core::admission::{self, Request};
use poolguard_core::webhook::{decide, Webhook};
use serde_json::json;

fn review(containers: usize) -> Vec<u8> {
    let containers: Vec<_> = (0..containers)
        .map(|i| json!({"name": format!("c{i}"), "image": format!("registry.example.com/team/app{i}:1.{i}")}))
        .collect();
    serde_json::to_vec(&json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {"uid": "bench", "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "namespace": "mapped", "operation": "CREATE",
            "userInfo": {"username": "system:serviceaccount:kube-system:replicaset-controller"},
            "object": {"apiVersion": "v1", "kind": "Pod",
                "metadata": {"generateName": "web-5d9c7b-", "labels": {"app": "web", "pod-template-hash": "5d9c7b"}},
                "spec": {"containers": containers, "nodeSelector": {"agentpool": "pool1"}}}}
    }))
    .unwrap()
}

fn main() {
    let iterations: u32 = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(20_000);
    let rules = Sources {
        config: Some("testdata/config/example.yaml".into()),
        policies_dir: Some("policies".into()),
    }
    .load()
    .expect("loading testdata/config/example.yaml and policies/");
    let namespaces = load_namespaces("testdata/namespaces.yaml".as_ref()).unwrap();
    println!("poolguard decision benchmark: {iterations} iterations each, allowedrepositories on");
    println!(
        "{:<10} {:>10} {:>14}",
        "webhook", "containers", "us/decision"
    );
    for webhook in [Webhook::Mutate, Webhook::Validate] {
        for containers in [1, 10] {
            let body = review(containers);
            let once = || {
                let doc = admission::parse_review(black_box(&body)).unwrap();
                let req = Request::from_value(&doc["request"]).unwrap();
                let d = decide(
                    webhook,
                    &req,
                    namespaces.get(req.namespace),
                    &rules.config,
                    &rules.policies,
                );
                assert!(d.allowed, "{d:?}");
                serde_json::to_vec(&admission::respond(req.uid, &d)).unwrap()
            };
            for _ in 0..iterations / 10 {
                black_box(once());
            }
            let start = Instant::now();
            for _ in 0..iterations {
                black_box(once());
            }
            let us = start.elapsed().as_secs_f64() * 1e6 / f64::from(iterations);
            println!("{:<10} {:>10} {:>14.2}", webhook.as_str(), containers, us);
        }
    }
}
