//! Audit results as policy reports, one per namespace: `wgpolicyk8s.io/v1alpha2` `PolicyReport`
//! (the Kubernetes policy working group's format, which Kyverno and Policy Reporter read) or its
//! successor `openreports.io/v1alpha1` `Report` (same fields, plus a report-level `source`); the
//! results of cluster-scoped objects (a Namespace a constraint matches) in one cluster-scoped
//! report of the same API, `ClusterPolicyReport` or `ClusterReport` ([`cluster_report`]).
//! Plain data built by a pure function: the timestamp is given, never read from a clock.
//!
//! A report holds at most a given number of results (and about [`MAX_RESULT_BYTES`] of them),
//! failures and errors first; `summary`
//! counts every result of the namespace, listed or not, and the annotation
//! [`OMITTED_ANNOTATION`] says how many are not listed (the CRDs allow no other summary field).

use std::collections::BTreeMap;

use serde::Serialize;

use crate::audit::{AuditResult, Resource, Severity, Verdict};

/// The `source` of every result: the engine that wrote it.
pub(crate) const SOURCE: &str = "poolguard";
/// The name of poolguard's report in each namespace.
pub const REPORT_NAME: &str = "poolguard-audit";
/// Annotation counting the results left out of a report by the cap.
pub(crate) const OMITTED_ANNOTATION: &str = "poolguard.io/results-omitted";
/// Bytes of results one report lists at most, whatever `max_results` allows: a report is one
/// object in etcd, whose requests are limited to 1.5 MiB.
pub(crate) const MAX_RESULT_BYTES: usize = 1024 * 1024;
/// Label marking the reports poolguard owns.
pub const MANAGED_BY: (&str, &str) = ("app.kubernetes.io/managed-by", "poolguard");

/// Which report API to write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReportApi {
    /// `wgpolicyk8s.io/v1alpha2` `PolicyReport`.
    PolicyReport,
    /// `openreports.io/v1alpha1` `Report`.
    OpenReports,
}

impl ReportApi {
    pub fn api_version(self) -> &'static str {
        match self {
            ReportApi::PolicyReport => "wgpolicyk8s.io/v1alpha2",
            ReportApi::OpenReports => "openreports.io/v1alpha1",
        }
    }

    pub fn kind(self) -> &'static str {
        match self {
            ReportApi::PolicyReport => "PolicyReport",
            ReportApi::OpenReports => "Report",
        }
    }

    /// The kind of the cluster-scoped report of the same API.
    pub fn cluster_kind(self) -> &'static str {
        match self {
            ReportApi::PolicyReport => "ClusterPolicyReport",
            ReportApi::OpenReports => "ClusterReport",
        }
    }
}

/// A point in time as `metav1.Timestamp` spells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Timestamp {
    pub seconds: i64,
    pub nanos: i32,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Report {
    pub api_version: &'static str,
    pub kind: &'static str,
    pub metadata: Metadata,
    /// Report-level source: `openreports.io` only (the PolicyReport CRD has no such field).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub source: Option<&'static str>,
    /// The namespace the report covers; none for the cluster report.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scope: Option<Resource>,
    pub summary: Summary,
    pub results: Vec<ReportResult>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Metadata {
    pub name: String,
    /// Empty for the cluster report.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub namespace: String,
    pub labels: BTreeMap<String, String>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

/// Results by outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct Summary {
    pub pass: usize,
    pub fail: usize,
    pub warn: usize,
    pub error: usize,
    pub skip: usize,
}

impl Summary {
    fn count(&mut self, verdict: Verdict) {
        let n = match verdict {
            Verdict::Pass => &mut self.pass,
            Verdict::Fail => &mut self.fail,
            Verdict::Warn => &mut self.warn,
            Verdict::Error => &mut self.error,
            Verdict::Skip => &mut self.skip,
        };
        *n += 1;
    }
}

/// One result entry of a report.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ReportResult {
    pub source: &'static str,
    pub policy: String,
    pub rule: String,
    pub result: Verdict,
    pub message: String,
    pub severity: Severity,
    pub timestamp: Timestamp,
    pub resources: Vec<Resource>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub properties: BTreeMap<String, String>,
}

/// Which results a full report keeps first.
fn priority(verdict: Verdict) -> u8 {
    match verdict {
        Verdict::Fail => 0,
        Verdict::Error => 1,
        Verdict::Warn => 2,
        Verdict::Skip => 3,
        Verdict::Pass => 4,
    }
}

/// One report per namespace that has results, in namespace order, each listing at most
/// `max_results` of its results (failures, then errors, warnings, skips and passes; in their
/// given order otherwise). Results without a namespace belong to no namespace report.
pub fn reports(
    results: &[AuditResult],
    api: ReportApi,
    timestamp: Timestamp,
    max_results: usize,
) -> Vec<Report> {
    let mut by_namespace: BTreeMap<&str, Vec<&AuditResult>> = BTreeMap::new();
    for r in results.iter().filter(|r| !r.resource.namespace.is_empty()) {
        by_namespace
            .entry(r.resource.namespace.as_str())
            .or_default()
            .push(r);
    }
    by_namespace
        .into_iter()
        .map(|(namespace, results)| report(Some(namespace), &results, api, timestamp, max_results))
        .collect()
}

/// The cluster report (`ClusterPolicyReport` or `ClusterReport`, named as the namespace
/// reports) of the results of cluster-scoped objects, listed as [`reports`] lists; none when
/// there are no results.
pub fn cluster_report(
    results: &[AuditResult],
    api: ReportApi,
    timestamp: Timestamp,
    max_results: usize,
) -> Option<Report> {
    let results: Vec<&AuditResult> = results.iter().collect();
    (!results.is_empty()).then(|| report(None, &results, api, timestamp, max_results))
}

/// The report of `namespace` (none: the cluster report) holding `results`.
fn report(
    namespace: Option<&str>,
    results: &[&AuditResult],
    api: ReportApi,
    timestamp: Timestamp,
    max_results: usize,
) -> Report {
    let mut summary = Summary::default();
    for r in results {
        summary.count(r.result);
    }
    let mut order: Vec<usize> = (0..results.len()).collect();
    order.sort_by_key(|&i| (priority(results[i].result), i));
    order.truncate(max_results);
    let mut bytes = 0;
    let fits = order
        .iter()
        .take_while(|&&i| {
            bytes += entry_bytes(results[i]);
            bytes <= MAX_RESULT_BYTES
        })
        .count();
    order.truncate(fits);
    order.sort_unstable();
    let omitted = results.len() - order.len();
    let mut annotations = BTreeMap::new();
    if omitted > 0 {
        annotations.insert(OMITTED_ANNOTATION.to_string(), omitted.to_string());
    }
    Report {
        api_version: api.api_version(),
        kind: match namespace {
            Some(_) => api.kind(),
            None => api.cluster_kind(),
        },
        metadata: Metadata {
            name: REPORT_NAME.to_string(),
            namespace: namespace.unwrap_or_default().to_string(),
            labels: BTreeMap::from([(MANAGED_BY.0.to_string(), MANAGED_BY.1.to_string())]),
            annotations,
        },
        source: (api == ReportApi::OpenReports).then_some(SOURCE),
        scope: namespace.map(|namespace| Resource {
            api_version: "v1".to_string(),
            kind: "Namespace".to_string(),
            name: namespace.to_string(),
            ..Resource::default()
        }),
        summary,
        results: order
            .into_iter()
            .map(|i| entry(results[i], timestamp))
            .collect(),
    }
}

/// About what one result adds to a report as JSON.
fn entry_bytes(r: &AuditResult) -> usize {
    const FIXED: usize = 330; // field names, source, severity, timestamp, resultID, punctuation
    let resource = &r.resource;
    let properties: usize = r
        .properties
        .iter()
        .map(|(k, v)| k.len() + v.len() + 6)
        .sum();
    FIXED
        + r.policy.len()
        + r.rule.len()
        + r.message.len() * 6 / 5
        + resource.api_version.len()
        + resource.kind.len()
        + resource.name.len()
        + resource.namespace.len()
        + resource.uid.len()
        + properties
}

/// The result property readers take as a result's identity when it is there (Policy Reporter's
/// `resultID`). Without it Policy Reporter makes one from the report's `scope` (for a namespace
/// report, the Namespace), the policy, rule, result and message, so two objects of one
/// namespace with the same outcome and message would collapse into one result.
pub const RESULT_ID: &str = "resultID";

/// A result's identity: a digest of the resource it is about and of what it says (so a changed
/// outcome or message is a new result, as readers expect), 16 hex digits.
fn result_id(r: &AuditResult) -> String {
    use sha2::{Digest, Sha256};
    let resource = &r.resource;
    let mut digest = Sha256::new();
    for part in [
        resource.api_version.as_str(),
        resource.kind.as_str(),
        resource.namespace.as_str(),
        resource.name.as_str(),
        resource.uid.as_str(),
        r.policy.as_str(),
        r.rule.as_str(),
        r.result.as_str(),
        r.message.as_str(),
    ] {
        digest.update(part.as_bytes());
        digest.update([0]);
    }
    digest.finalize()[..8]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn entry(r: &AuditResult, timestamp: Timestamp) -> ReportResult {
    let mut properties = r.properties.clone();
    properties.insert(RESULT_ID.to_string(), result_id(r));
    ReportResult {
        source: SOURCE,
        policy: r.policy.clone(),
        rule: r.rule.clone(),
        result: r.result,
        message: r.message.clone(),
        severity: r.severity,
        timestamp,
        resources: vec![r.resource.clone()],
        properties,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn result(namespace: &str, name: &str, policy: &str, verdict: Verdict) -> AuditResult {
        AuditResult {
            resource: Resource {
                api_version: "v1".into(),
                kind: "Pod".into(),
                name: name.into(),
                namespace: namespace.into(),
                uid: format!("uid-{name}"),
            },
            policy: policy.into(),
            rule: "infringement".into(),
            result: verdict,
            message: format!("{policy} on {name}"),
            severity: Severity::High,
            properties: BTreeMap::from([("pool".into(), "pool1".into())]),
        }
    }

    const T: Timestamp = Timestamp {
        seconds: 1_700_000_000,
        nanos: 5,
    };

    #[test]
    fn one_report_per_namespace_with_its_summary() {
        let results = vec![
            result("b", "p1", "placement", Verdict::Pass),
            result("a", "p2", "placement", Verdict::Fail),
            result("a", "p2", "repos", Verdict::Error),
            result("", "broken", "poolguard", Verdict::Error),
            result("a", "p3", "placement", Verdict::Skip),
        ];
        let reports = reports(&results, ReportApi::PolicyReport, T, 100);
        let namespaces: Vec<&str> = reports
            .iter()
            .map(|r| r.metadata.namespace.as_str())
            .collect();
        assert_eq!(namespaces, ["a", "b"]);
        let mut a = serde_json::to_value(&reports[0]).unwrap();
        // Each result's identity (checked apart, below).
        for result in a["results"].as_array_mut().unwrap() {
            let id = result["properties"]
                .as_object_mut()
                .unwrap()
                .remove(RESULT_ID)
                .unwrap();
            assert_eq!(id.as_str().unwrap().len(), 16, "{id}");
        }
        assert_eq!(
            a,
            json!({
                "apiVersion": "wgpolicyk8s.io/v1alpha2",
                "kind": "PolicyReport",
                "metadata": {"name": "poolguard-audit", "namespace": "a",
                             "labels": {"app.kubernetes.io/managed-by": "poolguard"}},
                "scope": {"apiVersion": "v1", "kind": "Namespace", "name": "a"},
                "summary": {"pass": 0, "fail": 1, "warn": 0, "error": 1, "skip": 1},
                "results": [
                    {"source": "poolguard", "policy": "placement", "rule": "infringement", "result": "fail",
                     "message": "placement on p2", "severity": "high",
                     "timestamp": {"seconds": 1_700_000_000, "nanos": 5},
                     "resources": [{"apiVersion": "v1", "kind": "Pod", "name": "p2", "namespace": "a", "uid": "uid-p2"}],
                     "properties": {"pool": "pool1"}},
                    {"source": "poolguard", "policy": "repos", "rule": "infringement", "result": "error",
                     "message": "repos on p2", "severity": "high",
                     "timestamp": {"seconds": 1_700_000_000, "nanos": 5},
                     "resources": [{"apiVersion": "v1", "kind": "Pod", "name": "p2", "namespace": "a", "uid": "uid-p2"}],
                     "properties": {"pool": "pool1"}},
                    {"source": "poolguard", "policy": "placement", "rule": "infringement", "result": "skip",
                     "message": "placement on p3", "severity": "high",
                     "timestamp": {"seconds": 1_700_000_000, "nanos": 5},
                     "resources": [{"apiVersion": "v1", "kind": "Pod", "name": "p3", "namespace": "a", "uid": "uid-p3"}],
                     "properties": {"pool": "pool1"}},
                ],
            })
        );
        assert_eq!(reports[1].summary.pass, 1);
    }

    #[test]
    fn each_result_has_an_identity_of_its_own_that_a_later_pass_keeps() {
        // Two pods of one namespace with the same policy, outcome and message: a reader that
        // builds identities from the report's scope would see one result.
        let mut twin = result("a", "p2", "repos", Verdict::Pass);
        twin.message = "no infringement".into();
        let mut other = twin.clone();
        other.resource.name = "p3".into();
        other.resource.uid = "uid-p3".into();
        let ids = |results: &[AuditResult]| -> Vec<String> {
            reports(results, ReportApi::PolicyReport, T, 10)[0]
                .results
                .iter()
                .map(|r| r.properties[RESULT_ID].clone())
                .collect()
        };
        let first = ids(&[twin.clone(), other.clone()]);
        assert_ne!(first[0], first[1]);
        // The next pass, later: the same results keep their identities.
        let later = reports(
            &[twin.clone(), other],
            ReportApi::PolicyReport,
            Timestamp {
                seconds: 1_800_000_000,
                nanos: 0,
            },
            10,
        );
        assert_eq!(
            later[0]
                .results
                .iter()
                .map(|r| r.properties[RESULT_ID].clone())
                .collect::<Vec<_>>(),
            first
        );
        // A changed outcome is a new result.
        let mut failed = twin.clone();
        failed.result = Verdict::Fail;
        assert_ne!(ids(&[failed])[0], ids(&[twin])[0]);
    }

    #[test]
    fn cluster_scoped_results_get_the_cluster_report() {
        let mut namespace = result("", "team-a", "namespaces-need-owner", Verdict::Fail);
        namespace.resource.kind = "Namespace".into();
        let report = cluster_report(&[namespace], ReportApi::PolicyReport, T, 10).unwrap();
        let value = serde_json::to_value(&report).unwrap();
        assert_eq!(value["kind"], "ClusterPolicyReport");
        assert_eq!(
            value["metadata"],
            json!({"name": "poolguard-audit", "labels": {"app.kubernetes.io/managed-by": "poolguard"}})
        );
        assert!(value.get("scope").is_none(), "{value}");
        assert_eq!(value["summary"]["fail"], 1);
        assert_eq!(value["results"][0]["resources"][0]["name"], "team-a");
        assert_eq!(
            cluster_report(&[], ReportApi::OpenReports, T, 10).map(|r| r.kind),
            None
        );
        let open = result("", "n", "p", Verdict::Pass);
        assert_eq!(
            cluster_report(&[open], ReportApi::OpenReports, T, 10).map(|r| r.kind),
            Some("ClusterReport")
        );
    }

    #[test]
    fn openreports_variant_has_a_report_level_source() {
        let results = vec![result("a", "p", "placement", Verdict::Pass)];
        let report =
            serde_json::to_value(&reports(&results, ReportApi::OpenReports, T, 10)[0]).unwrap();
        assert_eq!(report["apiVersion"], "openreports.io/v1alpha1");
        assert_eq!(report["kind"], "Report");
        assert_eq!(report["source"], "poolguard");
        assert_eq!(report["results"][0]["source"], "poolguard");
        let policy_report =
            serde_json::to_value(&reports(&results, ReportApi::PolicyReport, T, 10)[0]).unwrap();
        assert!(policy_report.get("source").is_none());
    }

    #[test]
    fn a_report_stays_within_the_object_size_limit_whatever_max_results_says() {
        // 3,000 results with 1,000-character messages would make a 3+ MB report.
        let results: Vec<AuditResult> = (0..3000)
            .map(|i| {
                let mut r = result("a", &format!("p{i}"), "placement", Verdict::Fail);
                r.message = "x".repeat(1000);
                r
            })
            .collect();
        let report = &reports(&results, ReportApi::PolicyReport, T, 5000)[0];
        let size = serde_json::to_string(report).unwrap().len();
        assert!(size <= MAX_RESULT_BYTES + 4096, "{size} bytes");
        assert!(
            report.results.len() > 500,
            "{} listed",
            report.results.len()
        );
        assert_eq!(report.summary.fail, 3000);
        let omitted: usize = report.metadata.annotations[OMITTED_ANNOTATION]
            .parse()
            .unwrap();
        assert_eq!(omitted + report.results.len(), 3000);
    }

    #[test]
    fn the_cap_keeps_failures_first_and_counts_the_rest() {
        let verdicts = [
            Verdict::Pass,
            Verdict::Skip,
            Verdict::Fail,
            Verdict::Pass,
            Verdict::Error,
            Verdict::Warn,
            Verdict::Fail,
        ];
        let results: Vec<AuditResult> = verdicts
            .iter()
            .enumerate()
            .map(|(i, v)| result("a", &format!("p{i}"), "placement", *v))
            .collect();
        let cases: [(usize, &[&str], Option<&str>); 4] = [
            (100, &["p0", "p1", "p2", "p3", "p4", "p5", "p6"], None),
            (3, &["p2", "p4", "p6"], Some("4")),
            (5, &["p1", "p2", "p4", "p5", "p6"], Some("2")),
            (0, &[], Some("7")),
        ];
        for (max, kept, omitted) in cases {
            let report = &reports(&results, ReportApi::PolicyReport, T, max)[0];
            let names: Vec<&str> = report
                .results
                .iter()
                .map(|r| r.resources[0].name.as_str())
                .collect();
            assert_eq!(names, kept, "cap {max}");
            assert_eq!(
                report
                    .metadata
                    .annotations
                    .get(OMITTED_ANNOTATION)
                    .map(String::as_str),
                omitted,
                "cap {max}"
            );
            assert_eq!(
                report.summary,
                Summary {
                    pass: 2,
                    fail: 2,
                    warn: 1,
                    error: 1,
                    skip: 1
                },
                "the summary counts every result"
            );
        }
    }
}
