//! Writes a pass's reports: each namespace's by server-side apply as soon as its results are
//! in (poolguard's field manager owns the whole report, so fields it no longer writes
//! disappear), then deletes poolguard's reports in namespaces that have none this pass.

use std::collections::BTreeSet;

use anyhow::{Context, Result};
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams};
use kube::core::{ApiResource, GroupVersionKind};
use kube::Client;

use poolguard_core::report::{Report, ReportApi, MANAGED_BY, REPORT_NAME};

/// The field manager of poolguard's reports.
const FIELD_MANAGER: &str = "poolguard-audit";

/// What a pass's writes did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Written {
    pub applied: usize,
    /// Reports that could not be written (logged one by one).
    pub failed: usize,
    pub deleted: usize,
    /// The namespaces that have a report this pass (written, or kept after a failed write):
    /// the others' reports are stale.
    pub current: BTreeSet<String>,
}

fn api_resource(api: ReportApi) -> ApiResource {
    let (group, version) = api
        .api_version()
        .split_once('/')
        .expect("report API versions have a group");
    ApiResource::from_gvk(&GroupVersionKind::gvk(group, version, api.kind()))
}

/// Applies one namespace's report; keeps only the outcome, not the object the API server
/// returns. A report that cannot be written is logged and counted (one namespace, being
/// deleted say, does not keep the others' reports back, and keeps its last report rather than
/// none); a missing CRD ends the pass.
pub async fn apply(
    client: &Client,
    api: ReportApi,
    report: &Report,
    written: &mut Written,
) -> Result<()> {
    let resource = api_resource(api);
    let namespace = report.metadata.namespace.clone();
    let reports: Api<DynamicObject> = Api::namespaced_with(client.clone(), &namespace, &resource);
    let params = PatchParams::apply(FIELD_MANAGER).force();
    match reports
        .patch(REPORT_NAME, &params, &Patch::Apply(report))
        .await
    {
        Ok(_) => written.applied += 1,
        Err(e) if is_missing_resource(&e) => return Err(missing_crd(e, &resource)),
        Err(e) => {
            tracing::warn!(%namespace, error = %e, "writing the audit report failed");
            written.failed += 1;
        }
    }
    written.current.insert(namespace);
    Ok(())
}

/// Deletes poolguard's reports in the namespaces outside `written.current`.
pub async fn delete_stale(client: &Client, api: ReportApi, written: &mut Written) -> Result<()> {
    let resource = api_resource(api);
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
                    missing_crd(e, &resource)
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
            if name == REPORT_NAME && !written.current.contains(&namespace) {
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
    written.deleted += stale.len();
    Ok(())
}

/// A 404 for the resource itself (not for one object): its CRD is not installed.
fn is_missing_resource(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(status) if status.code == 404
        && status.message.contains("the server could not find the requested resource"))
}

fn missing_crd(e: kube::Error, resource: &ApiResource) -> anyhow::Error {
    let crd = format!("{}.{}", resource.plural, resource.group);
    anyhow::anyhow!("the CustomResourceDefinition {crd} is not installed (the chart installs it unless audit.crd.install is false): {e}")
}
