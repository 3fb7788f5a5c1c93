//! Peak heap of an audit pass at 50,000 pods in 5,000 namespaces, through the pass's own code
//! (`poolguard::audit::scan`'s listing and auditing a namespace at a time, each namespace's
//! report built as `serve` builds it) with a generator in place of the API server. The global
//! allocator counts live bytes and their peak. The peak above what the pass starts with must
//! stay under a bound that does not grow with the objects; the same objects held until the end
//! of the pass (every result kept, then the reports built at once, as passes did before they
//! streamed) must exceed it, so the bound is one an accumulating pass breaks.
//! Run with `--nocapture` to see the numbers.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use anyhow::Result;
use futures::StreamExt;
use serde_json::{json, Value};

use poolguard::audit::scan::{self, Facts, Page, Scan, Source};
use poolguard::sources::Sources;
use poolguard_core::audit::{AuditResult, Listed};
use poolguard_core::report::{self, ReportApi, Timestamp};
use poolguard_core::ruleset::RuleSet;

struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            let live = LIVE.fetch_add(layout.size(), Ordering::Relaxed) + layout.size();
            PEAK.fetch_max(live, Ordering::Relaxed);
        }
        p
    }
    unsafe fn dealloc(&self, p: *mut u8, layout: Layout) {
        unsafe { System.dealloc(p, layout) };
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
    }
    unsafe fn realloc(&self, p: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let q = unsafe { System.realloc(p, layout, new_size) };
        if !q.is_null() {
            if new_size > layout.size() {
                let live = LIVE.fetch_add(new_size - layout.size(), Ordering::Relaxed)
                    + (new_size - layout.size());
                PEAK.fetch_max(live, Ordering::Relaxed);
            } else {
                LIVE.fetch_sub(layout.size() - new_size, Ordering::Relaxed);
            }
        }
        q
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

const MIB: usize = 1024 * 1024;
const NAMESPACES: usize = 5_000;
const PODS_PER_NAMESPACE: usize = 10;
/// The pass's page size (`--audit-page-size`'s default).
const PAGE_SIZE: u32 = 500;
/// The most heap a pass may add to what it starts with, whatever the object count.
const BOUND: usize = 16 * MIB;
const POOLS: [&str; 2] = ["pool1", "gpu"];

/// Pods made up on request: `PODS_PER_NAMESPACE` in every namespace, the mix of
/// `integration/e2e/src/bin/audit_objects.rs` (allowed images with a sidecar, no nodeSelector,
/// an image outside the allowed repositories, bound to a node), nothing of the other kinds.
struct Generated;

fn pod(namespace: &str, index: usize) -> Value {
    let ns: usize = namespace.trim_start_matches("ns-").parse().unwrap_or(0);
    let pool = POOLS[ns % 2];
    let image = match index {
        7 => "nginx:1.27",
        _ => "registry.k8s.io/pause:3.10",
    };
    let mut containers = vec![json!({"name": "main", "image": image})];
    if index.is_multiple_of(3) {
        containers.push(
            json!({"name": "shipper", "image": "registry.example.com/platform/log-shipper:2.3"}),
        );
    }
    let mut spec = json!({"containers": containers});
    if index != 6 {
        spec["nodeSelector"] = json!({"agentpool": pool});
    }
    if index == 8 {
        spec["nodeName"] = json!(format!("{pool}-node-1"));
    }
    json!({
        "metadata": {
            "name": format!("pod-{index}"),
            "namespace": namespace,
            "uid": format!("{namespace}-{index}-0000-0000-000000000000"),
            "labels": {"app": "bench"},
        },
        "spec": spec,
    })
}

impl Source for Generated {
    async fn page(
        &self,
        namespace: &str,
        listed: &Listed,
        limit: u32,
        token: Option<&str>,
    ) -> Result<Page> {
        if listed.kind != "Pod" {
            return Ok(Page::default());
        }
        let from: usize = token.map_or(Ok(0), str::parse)?;
        let to = (from + limit as usize).min(PODS_PER_NAMESPACE);
        Ok(Page {
            items: (from..to).map(|i| pod(namespace, i)).collect(),
            next: (to < PODS_PER_NAMESPACE).then(|| to.to_string()),
        })
    }
}

fn facts(namespaces: usize) -> Facts {
    let mut facts = Facts::default();
    for i in 0..namespaces {
        let labels = [("agentpool".to_string(), POOLS[i % 2].to_string())].into();
        facts.namespaces.insert(format!("ns-{i}"), labels);
    }
    for pool in POOLS {
        let labels = [("agentpool".to_string(), pool.to_string())].into();
        facts.nodes.insert(format!("{pool}-node-1"), labels);
    }
    facts
}

fn rules() -> RuleSet {
    Sources {
        config: Some("integration/e2e/manifests/poolguard-config.yaml".into()),
        policies_dir: Some("policies".into()),
        placement_dir: None,
        gatekeeper_dir: None,
        gatekeeper_cluster: None,
    }
    .load()
    .unwrap()
}

const AT: Timestamp = Timestamp {
    seconds: 1_700_000_000,
    nanos: 0,
};

/// A pass as `serve` runs it: each namespace's report built (and serialized, as the write
/// sends it) once its results are in, then the results dropped. Returns the pass's counts and
/// the bytes of reports "written".
async fn streamed(facts: Arc<Facts>, rules: Arc<RuleSet>) -> (Scan, usize) {
    let mut pass = Scan::over(&facts);
    let mut bytes = 0;
    let audited = scan::namespaces(&Generated, facts, rules, PAGE_SIZE);
    let mut audited = std::pin::pin!(audited);
    while let Some(namespace) = audited.next().await {
        let namespace = namespace.unwrap();
        pass.add(&namespace);
        for r in report::reports(&namespace.results, ReportApi::OpenReports, AT, 1000) {
            bytes += serde_json::to_vec(&r).unwrap().len();
        }
    }
    (pass, bytes)
}

/// The same objects with every result held to the end of the pass and the reports built at
/// once (what passes did before they streamed).
async fn held(facts: Arc<Facts>, rules: Arc<RuleSet>) -> (Vec<AuditResult>, usize) {
    let mut results = Vec::new();
    let audited = scan::namespaces(&Generated, facts, rules, PAGE_SIZE);
    let mut audited = std::pin::pin!(audited);
    while let Some(namespace) = audited.next().await {
        results.extend(namespace.unwrap().results);
    }
    let reports = report::reports(&results, ReportApi::OpenReports, AT, 1000);
    let bytes = reports
        .iter()
        .map(|r| serde_json::to_vec(r).unwrap().len())
        .sum();
    (results, bytes)
}

/// Peak heap above what was live when `run` started, in bytes, and its outcome.
fn peak_of<T>(
    runtime: &tokio::runtime::Runtime,
    run: impl std::future::Future<Output = T>,
) -> (usize, T) {
    let base = LIVE.load(Ordering::SeqCst);
    PEAK.store(base, Ordering::SeqCst);
    let out = runtime.block_on(run);
    (PEAK.load(Ordering::SeqCst).saturating_sub(base), out)
}

#[test]
fn an_audit_pass_holds_one_namespace_not_the_cluster() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .max_blocking_threads(4)
        .enable_all()
        .build()
        .unwrap();
    let rules = Arc::new(rules());
    let small = Arc::new(facts(NAMESPACES / 10));
    let large = Arc::new(facts(NAMESPACES));
    // Warm-up: the policies' first evaluations and the runtime's threads allocate once.
    let _ = runtime.block_on(streamed(small.clone(), rules.clone()));

    let (small_peak, (small_pass, _)) = peak_of(&runtime, streamed(small.clone(), rules.clone()));
    let (peak, (pass, bytes)) = peak_of(&runtime, streamed(large.clone(), rules.clone()));
    let (held_peak, (results, held_bytes)) = peak_of(&runtime, held(large.clone(), rules.clone()));

    let objects: usize = pass.objects.iter().map(|(_, n)| n).sum();
    println!(
        "{objects} pods in {} namespaces: {} results, reports {:.1} MiB",
        pass.namespaces,
        pass.tally.total(),
        bytes as f64 / MIB as f64
    );
    println!(
        "peak heap above the start: streamed {:.1} MiB ({} pods: {:.1} MiB); held to the end {:.1} MiB; bound {} MiB",
        peak as f64 / MIB as f64,
        small_pass.objects.iter().map(|(_, n)| n).sum::<usize>(),
        small_peak as f64 / MIB as f64,
        held_peak as f64 / MIB as f64,
        BOUND / MIB
    );
    assert_eq!(objects, NAMESPACES * PODS_PER_NAMESPACE);
    assert_eq!(pass.tally.total() as usize, results.len());
    assert_eq!(bytes, held_bytes, "both ways give the same reports");
    assert!(
        peak < BOUND,
        "a streamed pass peaked at {peak} bytes above its start (bound {BOUND})"
    );
    assert!(
        held_peak > BOUND,
        "holding every result peaked at only {held_peak} bytes: the bound would not catch a pass that accumulates"
    );
    // Ten times the objects, about the same peak: it does not grow with the cluster.
    assert!(
        peak < 2 * small_peak + MIB,
        "{} pods peaked at {peak} bytes, {} at {small_peak}",
        objects,
        objects / 10
    );
}
