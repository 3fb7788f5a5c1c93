//! The cluster's PolicyExceptions (`poolguard.io/v1alpha1`, every namespace): a watch cache whose
//! contents are read as [`PolicyException`]s and installed into the rules decisions use, checked
//! against those rules' config and policies at the time of installing ([`ExceptionSet::new`]).
//! Installed again after every change and every [`REFRESH`], so that an exception that expired,
//! or a config reload that changed where exceptions count, takes effect within that time; the
//! metric of seconds to expiry is refreshed with it.

use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind};
use kube::runtime::reflector::Store;
use kube::Client;

use super::mirrored::{mirror, watch_dynamic, Timing};
use crate::telemetry::metrics::Metrics;
use poolguard_core::exceptions::{self, ExceptionSet, PolicyException};
use poolguard_core::ruleset::RuleSet;

/// How often the exceptions are checked and installed again without a change.
pub const REFRESH: Duration = Duration::from_secs(30);

/// The PolicyException resource.
pub fn resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(exceptions::GROUP, exceptions::VERSION, exceptions::KIND),
        "policyexceptions",
    )
}

/// Starts watching PolicyExceptions in the background, installing them into `rules`. Until the
/// first listing no exception counts; the watch retries with backoff (a cluster without the
/// CRD logs and keeps retrying) and the last exceptions read keep counting meanwhile.
pub fn start(client: Client, rules: Arc<ArcSwap<RuleSet>>, metrics: Arc<Metrics>) {
    let (store, stream) = watch_dynamic(client, resource(), |exception| {
        exception.metadata.managed_fields = None;
    });
    let timing = Timing {
        settle: std::time::Duration::ZERO,
        refresh: Some(REFRESH),
    };
    let failed = "PolicyException watch failed (is the CRD installed?); deciding with the last exceptions read and retrying";
    let mut logged = Vec::new();
    mirror(stream, store, timing, failed, move |store, _| {
        logged = install(store, &rules, &metrics, std::mem::take(&mut logged));
    });
}

/// Reads the store, installs what counts now, and logs what is left out when it differs from
/// `logged` (the lines logged last time, which it returns updated).
fn install(
    store: &Store<DynamicObject>,
    rules: &ArcSwap<RuleSet>,
    metrics: &Metrics,
    logged: Vec<String>,
) -> Vec<String> {
    let now = crate::wall_clock::unix_now();
    let mut problems = Vec::new();
    let read: Vec<PolicyException> = store
        .state()
        .iter()
        .filter_map(|object| {
            let mut value = serde_json::to_value(object.as_ref()).ok()?;
            value["apiVersion"] = format!("{}/{}", exceptions::GROUP, exceptions::VERSION).into();
            value["kind"] = exceptions::KIND.into();
            PolicyException::from_object(&value)
                .map_err(|e| problems.push(format!("{e}; it is ignored")))
                .ok()
        })
        .collect();
    let mut installed = Arc::new(ExceptionSet::default());
    let mut left_out = Vec::new();
    // May run more than once (compare-and-swap): each run replaces what the last one found.
    rules.rcu(|current| {
        let (set, out) =
            ExceptionSet::new(read.clone(), current.config(), &|p| current.knows(p), now);
        installed = Arc::new(set);
        left_out = out;
        (**current).clone().with_exceptions(installed.clone())
    });
    metrics.exceptions(&installed, now);
    problems.extend(left_out);
    if problems != logged {
        for line in &problems {
            tracing::warn!(problem = %line, "a PolicyException does not count");
        }
        tracing::info!(
            counting = installed.iter().filter(|e| e.live(now)).count(),
            "PolicyExceptions installed"
        );
    }
    problems
}
