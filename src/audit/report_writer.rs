//! Writes a pass's reports: one per namespace with results, by server-side apply (poolguard's
//! field manager owns the whole report, so fields it no longer writes disappear), then deletes
//! poolguard's reports in namespaces that have none this pass.

use std::collections::BTreeSet;

use anyhow::{Context, Result};
use futures::StreamExt;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams};
use kube::core::{ApiResource, GroupVersionKind};
use kube::Client;

use poolguard_core::report::{Report, ReportApi, MANAGED_BY, REPORT_NAME};

/// The field manager of poolguard's reports.
const FIELD_MANAGER: &str = "poolguard-audit";
/// Reports written at once.
const CONCURRENT_WRITES: usize = 8;

/// What a write did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Written {
    pub applied: usize,
    /// Reports that could not be written (logged one by one).
    pub failed: usize,
    pub deleted: usize,
}

fn api_resource(api: ReportApi) -> ApiResource {
    let (group, version) = api
        .api_version()
        .split_once('/')
        .expect("report API versions have a group");
    ApiResource::from_gvk(&GroupVersionKind::gvk(group, version, api.kind()))
}

/// Applies `reports` and deletes poolguard's other reports.
pub async fn write(client: &Client, api: ReportApi, reports: &[Report]) -> Result<Written> {
    let resource = api_resource(api);
    let crd = format!("{}.{}", resource.plural, resource.group);
    let params = PatchParams::apply(FIELD_MANAGER).force();
    // The futures are collected first (a stream of closures borrowing `reports` is not Send for
    // every lifetime). Each serializes its report as it is sent and keeps only the outcome, not
    // the object the API server returns: with 1,000 reports, holding those until the last write
    // was ~60 MiB of the pass's peak (bench/audit-scale.sh).
    let writes: Vec<_> = reports
        .iter()
        .map(|report| {
            let namespace = report.metadata.namespace.clone();
            let api: Api<DynamicObject> =
                Api::namespaced_with(client.clone(), &namespace, &resource);
            let params = params.clone();
            async move {
                let outcome = api
                    .patch(REPORT_NAME, &params, &Patch::Apply(report))
                    .await
                    .map(drop);
                (namespace, outcome)
            }
        })
        .collect();
    let outcomes: Vec<(String, kube::Result<()>)> = futures::stream::iter(writes)
        .buffer_unordered(CONCURRENT_WRITES)
        .collect()
        .await;
    let mut failed: Vec<String> = Vec::new();
    for (namespace, outcome) in outcomes {
        if let Err(e) = outcome {
            if is_missing_resource(&e) {
                return Err(missing_crd(e, &crd));
            }
            // One namespace (being deleted, say) does not keep the others' reports back.
            tracing::warn!(%namespace, error = %e, "writing the audit report failed");
            failed.push(namespace);
        }
    }
    // A namespace whose report failed keeps its last one rather than none.
    let current: BTreeSet<&str> = reports
        .iter()
        .map(|r| r.metadata.namespace.as_str())
        .collect();
    let all: Api<DynamicObject> = Api::all_with(client.clone(), &resource);
    let selector = format!("{}={}", MANAGED_BY.0, MANAGED_BY.1);
    let mut params = ListParams::default().labels(&selector).limit(500);
    let mut stale = Vec::new();
    loop {
        let page = all
            .list_metadata(&params)
            .await
            .map_err(|e| {
                if is_missing_resource(&e) {
                    missing_crd(e, &crd)
                } else {
                    e.into()
                }
            })
            .context("listing poolguard's reports")?;
        for report in page.items {
            let (Some(name), Some(namespace)) = (report.metadata.name, report.metadata.namespace)
            else {
                continue;
            };
            if name == REPORT_NAME && !current.contains(namespace.as_str()) {
                stale.push(namespace);
            }
        }
        match page.metadata.continue_.filter(|t| !t.is_empty()) {
            Some(token) => params = params.continue_token(&token),
            None => break,
        }
    }
    for namespace in &stale {
        let reports: Api<DynamicObject> =
            Api::namespaced_with(client.clone(), namespace, &resource);
        match reports.delete(REPORT_NAME, &DeleteParams::default()).await {
            Ok(_) => {}
            // Its namespace is being deleted, or another writer was first.
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(e) => {
                return Err(e)
                    .with_context(|| format!("deleting the stale report of namespace {namespace}"))
            }
        }
    }
    Ok(Written {
        applied: reports.len() - failed.len(),
        failed: failed.len(),
        deleted: stale.len(),
    })
}

/// A 404 for the resource itself (not for one object): its CRD is not installed.
fn is_missing_resource(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(status) if status.code == 404
        && status.message.contains("the server could not find the requested resource"))
}

fn missing_crd(e: kube::Error, crd: &str) -> anyhow::Error {
    anyhow::anyhow!("the CustomResourceDefinition {crd} is not installed (the chart installs it unless audit.crd.install is false): {e}")
}
