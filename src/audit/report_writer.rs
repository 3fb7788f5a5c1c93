//! Writes a pass's reports: each namespace's by server-side apply as soon as its results are
//! in (poolguard's field manager owns the whole report, so fields it no longer writes
//! disappear), then the cluster report, then deletes poolguard's reports in namespaces that
//! have none this pass, and its cluster report when there is none.

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
    /// Whether the cluster report is current this pass (written, or kept after a failed write).
    pub cluster: bool,
}

/// The resource of `kind` (the namespace report's or the cluster report's) of the API.
fn api_resource(api: ReportApi, kind: &str) -> ApiResource {
    let (group, version) = api
        .api_version()
        .split_once('/')
        .expect("report API versions have a group");
    ApiResource::from_gvk(&GroupVersionKind::gvk(group, version, kind))
}

/// Applies one namespace's report (or the cluster report, which has no namespace); keeps only
/// the outcome, not the object the API server returns. A report that cannot be written is
/// logged and counted (one namespace, being deleted say, does not keep the others' reports
/// back, and keeps its last report rather than none); a missing CRD ends the pass.
pub async fn apply(
    client: &Client,
    api: ReportApi,
    report: &Report,
    written: &mut Written,
) -> Result<()> {
    let resource = api_resource(api, report.kind);
    let namespace = report.metadata.namespace.clone();
    let reports: Api<DynamicObject> = match namespace.as_str() {
        "" => Api::all_with(client.clone(), &resource),
        namespace => Api::namespaced_with(client.clone(), namespace, &resource),
    };
    let params = PatchParams::apply(FIELD_MANAGER).force();
    match reports
        .patch(REPORT_NAME, &params, &Patch::Apply(report))
        .await
    {
        Ok(_) => written.applied += 1,
        Err(e) if is_missing_resource(&e) => return Err(missing_crd(e, &resource)),
        Err(e) => {
            tracing::warn!(%namespace, kind = report.kind, error = %e, "writing the audit report failed");
            written.failed += 1;
        }
    }
    match namespace.as_str() {
        "" => written.cluster = true,
        _ => {
            written.current.insert(namespace);
        }
    }
    Ok(())
}

/// Deletes poolguard's reports in the namespaces outside `written.current`, and its cluster
/// report when the pass has none.
pub async fn delete_stale(client: &Client, api: ReportApi, written: &mut Written) -> Result<()> {
    if !written.cluster {
        delete_cluster_report(client, api, written).await?;
    }
    let resource = api_resource(api, api.kind());
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

/// Deletes poolguard's cluster report if there is one: a DELETE by name, which answers 404
/// when there is none (or when the cluster report's CRD is not installed: nothing to delete).
async fn delete_cluster_report(
    client: &Client,
    api: ReportApi,
    written: &mut Written,
) -> Result<()> {
    let resource = api_resource(api, api.cluster_kind());
    let reports: Api<DynamicObject> = Api::all_with(client.clone(), &resource);
    match reports.delete(REPORT_NAME, &DeleteParams::default()).await {
        Ok(_) => written.deleted += 1,
        Err(kube::Error::Api(e)) if e.code == 404 => {}
        // An RBAC without the cluster report (a role written by hand): the namespace reports
        // still get written.
        Err(kube::Error::Api(e)) if e.code == 403 => {
            tracing::warn!(kind = api.cluster_kind(), error = %e, "poolguard may not delete its stale cluster report");
        }
        Err(e) => {
            return Err(e).with_context(|| {
                format!("deleting the stale {} {REPORT_NAME}", api.cluster_kind())
            })
        }
    }
    Ok(())
}

/// A 404 for the resource itself (not for one object): its CRD is not installed. The API
/// server answers a path it does not serve with a Status ("the server could not find the
/// requested resource") or, for a group it does not serve at all, with plain text
/// ("404 page not found", which the client reports as a Status it failed to parse).
fn is_missing_resource(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(status) if status.code == 404
        && (status.message.contains("the server could not find the requested resource")
            || status.message.trim() == "404 page not found"))
}

/// The missing CRD, named: what the API server said adds nothing to it.
fn missing_crd(_: kube::Error, resource: &ApiResource) -> anyhow::Error {
    let crd = format!("{}.{}", resource.plural, resource.group);
    anyhow::anyhow!("the CustomResourceDefinition {crd} is not installed (the chart installs it unless audit.crd.install is false)")
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::core::Status;

    /// Both ways the API server says it does not serve the report kind name the CRD; a 404
    /// for one object does not.
    #[test]
    fn a_missing_crd_is_named_however_the_api_server_says_it() {
        let api = |message: &str, reason: &str, code: u16| {
            kube::Error::Api(Status::failure(message, reason).with_code(code).boxed())
        };
        let resource = api_resource(ReportApi::PolicyReport, ReportApi::PolicyReport.kind());
        for missing in [
            api(
                "the server could not find the requested resource",
                "NotFound",
                404,
            ),
            api("404 page not found", "Failed to parse error data", 404),
        ] {
            assert!(is_missing_resource(&missing), "{missing}");
            assert_eq!(
                missing_crd(missing, &resource).to_string(),
                "the CustomResourceDefinition policyreports.wgpolicyk8s.io is not installed (the chart installs it unless audit.crd.install is false)"
            );
        }
        let object = api(
            "policyreports.wgpolicyk8s.io \"x\" not found",
            "NotFound",
            404,
        );
        assert!(!is_missing_resource(&object));
        assert!(!is_missing_resource(&api("404 page not found", "x", 500)));
    }
}
