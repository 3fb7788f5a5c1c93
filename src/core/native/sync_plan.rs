//! What the leader writes to make the cluster hold exactly the generated objects: which to apply
//! (all of them, when a sync is due) and which of poolguard's own objects to delete. Only
//! objects carrying poolguard's label ([`MANAGED_LABEL`]=[`MANAGED_VALUE`]) are ever deleted;
//! an object without it is never touched, whatever its name.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use super::object::{Native, MANAGED_LABEL, MANAGED_VALUE};

/// The four kinds, in apply order (a policy before its binding).
pub const KINDS: [&str; 4] = [
    "MutatingAdmissionPolicy",
    "MutatingAdmissionPolicyBinding",
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding",
];

/// An admission policy object found in the cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Existing {
    pub kind: String,
    pub name: String,
    pub labels: BTreeMap<String, String>,
}

/// What to delete, as `(kind, name)`, bindings before policies (so no binding is left pointing
/// at a deleted policy): every object labelled as poolguard's that `wanted` does not hold.
pub fn deletions(wanted: &Native, existing: &[Existing]) -> Vec<(String, String)> {
    let keep: BTreeSet<(String, String)> = wanted.names().into_iter().collect();
    let mut delete: Vec<(String, String)> = existing
        .iter()
        .filter(|e| e.labels.get(MANAGED_LABEL).map(String::as_str) == Some(MANAGED_VALUE))
        .map(|e| (e.kind.clone(), e.name.clone()))
        .filter(|id| !keep.contains(id))
        .collect();
    let binding_first = |kind: &str| (!kind.ends_with("Binding"), kind.to_string());
    delete.sort_by(|a, b| {
        binding_first(&a.0)
            .cmp(&binding_first(&b.0))
            .then(a.1.cmp(&b.1))
    });
    delete.dedup();
    delete
}

/// When the leader writes again. It re-applies everything (server-side apply is idempotent) when
/// the generated objects differ from the last ones it wrote, when it has written none yet (a new
/// leader, or the last sync failed), and every `resync` even when nothing changed, to repair
/// objects someone edited or deleted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Due {
    /// Nothing to do now.
    No,
    /// The generated objects changed (or were never written by this leader).
    Changed,
    /// Unchanged, but the last sync is older than the resync interval.
    Resync,
}

/// Whether a sync is due: `last` is what this leader last wrote successfully, `since_last` how
/// long ago.
pub fn due(last: Option<&Native>, wanted: &Native, since_last: Duration, resync: Duration) -> Due {
    match last {
        Some(last) if last.objects == wanted.objects => {
            if since_last >= resync {
                Due::Resync
            } else {
                Due::No
            }
        }
        _ => Due::Changed,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn object(kind: &str, name: &str) -> serde_json::Value {
        json!({"kind": kind, "metadata": {"name": name, "labels": {MANAGED_LABEL: MANAGED_VALUE}}})
    }

    fn existing(kind: &str, name: &str, label: Option<&str>) -> Existing {
        Existing {
            kind: kind.into(),
            name: name.into(),
            labels: label
                .map(|v| BTreeMap::from([(MANAGED_LABEL.to_string(), v.to_string())]))
                .unwrap_or_default(),
        }
    }

    fn native(objects: Vec<serde_json::Value>) -> Native {
        Native {
            objects,
            skipped: Vec::new(),
        }
    }

    #[test]
    fn only_poolguards_objects_no_longer_generated_are_deleted_bindings_first() {
        let wanted = native(vec![
            object("ValidatingAdmissionPolicy", "poolguard-images"),
            object("ValidatingAdmissionPolicyBinding", "poolguard-images"),
        ]);
        let cluster = [
            existing(
                "ValidatingAdmissionPolicy",
                "poolguard-images",
                Some("poolguard"),
            ),
            existing(
                "ValidatingAdmissionPolicyBinding",
                "poolguard-images",
                Some("poolguard"),
            ),
            existing(
                "ValidatingAdmissionPolicy",
                "poolguard-latesttag",
                Some("poolguard"),
            ),
            existing(
                "ValidatingAdmissionPolicyBinding",
                "poolguard-latesttag",
                Some("poolguard"),
            ),
            existing(
                "MutatingAdmissionPolicy",
                "poolguard-pool",
                Some("poolguard"),
            ),
            // Not poolguard's: a user's policy named like one of ours, one managed by Helm, one
            // of ours that is still generated under another kind.
            existing(
                "ValidatingAdmissionPolicy",
                "poolguard-allowedrepositories",
                None,
            ),
            existing(
                "ValidatingAdmissionPolicyBinding",
                "poolguard-x",
                Some("Helm"),
            ),
        ];
        assert_eq!(
            deletions(&wanted, &cluster),
            vec![
                (
                    "ValidatingAdmissionPolicyBinding".into(),
                    "poolguard-latesttag".into()
                ),
                ("MutatingAdmissionPolicy".into(), "poolguard-pool".into()),
                (
                    "ValidatingAdmissionPolicy".into(),
                    "poolguard-latesttag".into()
                ),
            ]
        );
    }

    #[test]
    fn nothing_generated_deletes_every_labelled_object_and_nothing_else() {
        let cluster = [
            existing(
                "MutatingAdmissionPolicyBinding",
                "poolguard-pool",
                Some("poolguard"),
            ),
            existing(
                "MutatingAdmissionPolicy",
                "poolguard-pool",
                Some("poolguard"),
            ),
            existing("MutatingAdmissionPolicy", "team-defaults", None),
        ];
        assert_eq!(
            deletions(&native(Vec::new()), &cluster),
            vec![
                (
                    "MutatingAdmissionPolicyBinding".into(),
                    "poolguard-pool".into()
                ),
                ("MutatingAdmissionPolicy".into(), "poolguard-pool".into()),
            ]
        );
    }

    #[test]
    fn a_sync_is_due_when_the_objects_change_or_the_resync_interval_passed() {
        let minute = Duration::from_secs(60);
        let a = native(vec![object(
            "ValidatingAdmissionPolicy",
            "poolguard-images",
        )]);
        let b = native(vec![object(
            "ValidatingAdmissionPolicy",
            "poolguard-latesttag",
        )]);
        assert_eq!(due(None, &a, Duration::ZERO, minute), Due::Changed);
        assert_eq!(due(Some(&a), &b, Duration::ZERO, minute), Due::Changed);
        assert_eq!(due(Some(&a), &a, Duration::from_secs(59), minute), Due::No);
        assert_eq!(due(Some(&a), &a, minute, minute), Due::Resync);
        // What is left to the webhook does not change the objects: no write.
        let mut c = a.clone();
        c.skipped.push(crate::native::Skipped {
            what: "policy x".into(),
            why: "custom Rego".into(),
            requests: crate::native::Requests::Pods,
        });
        assert_eq!(due(Some(&a), &c, Duration::ZERO, minute), Due::No);
    }
}
