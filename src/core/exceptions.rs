//! PolicyExceptions (`poolguard.io/v1alpha1`): a named, ticketed, time-boxed way out of a policy
//! for the objects it matches. An exception names the policies it excepts (SIT policies,
//! Gatekeeper constraints, or `placement`), what it matches (namespaces by name glob or label
//! selector, kinds, object names, and the images a pod spec pulls), when it expires (RFC 3339,
//! required), the ticket that tracks it (required) and why.
//!
//! What an exception does is the decision context's to apply ([`crate::ruleset::plan`]): a
//! result it matches still runs and is reported, but it no longer denies; the decision warns,
//! naming the exception and its ticket, and the audit reports it as `skip`. An expired exception
//! matches nothing. Exceptions count only in the namespaces the config names
//! (`exceptions.namespaces`), and one longer than `exceptions.maxDuration`, or naming a policy
//! that is not loaded, is refused where it is written (the validating webhook) and ignored where
//! it is read, never half-honoured.
//!
//! Pure: times are Unix seconds passed in by the shell.

use std::collections::BTreeMap;
use std::fmt;

use serde_json::Value;

use crate::config::selector::LabelSelector;
use crate::config::Config;
use crate::globs::{glob_matches, image_matches};
use crate::labels::Labels;

/// The API group, version and kind of a PolicyException.
pub const GROUP: &str = "poolguard.io";
pub const VERSION: &str = "v1alpha1";
pub const KIND: &str = "PolicyException";
/// The name under which exceptions except the placement of pods (a pod spec's nodeSelector
/// against its namespace's pool, the placement policies' choice).
pub const PLACEMENT: &str = "placement";

/// One PolicyException, read and checked.
#[derive(Debug, Clone, PartialEq)]
pub struct PolicyException {
    pub namespace: String,
    pub name: String,
    /// The policies it excepts.
    pub policies: Vec<String>,
    pub matching: ExceptionMatch,
    /// When it stops matching (Unix seconds), and as written.
    pub expires: i64,
    pub expires_text: String,
    pub ticket: String,
    pub reason: String,
}

/// What an exception matches; every criterion given must hold.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ExceptionMatch {
    /// Namespace name globs (a leading or trailing `*`, as Gatekeeper's).
    pub namespaces: Vec<String>,
    pub namespace_selector: Option<LabelSelector>,
    /// Object kinds (`Pod`, `Deployment`, …).
    pub kinds: Vec<String>,
    /// Object name globs.
    pub names: Vec<String>,
    /// Image globs (`*` any run of characters, `?` one); every image the object's pod spec pulls
    /// must match one, as written or normalised (`docker.io/library/nginx:1.27`).
    pub images: Vec<String>,
}

/// The object a decision is about, as exceptions match it.
#[derive(Debug, Clone, Copy)]
pub struct Target<'a> {
    pub namespace: &'a str,
    pub labels: Option<&'a Labels>,
    pub kind: &'a str,
    pub name: &'a str,
    /// The images its pod spec pulls, as written (none for an object without a pod spec).
    pub images: &'a [&'a str],
}

/// What a decision records of the exception that allowed a result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExceptionMark {
    /// `namespace/name`.
    pub exception: String,
    pub ticket: String,
    /// As written (RFC 3339).
    pub expires: String,
}

impl fmt::Display for ExceptionMark {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "PolicyException {} (ticket {}, expires {})",
            self.exception, self.ticket, self.expires
        )
    }
}

/// `value` as a string, or the error naming `field`.
fn string<'a>(value: &'a Value, field: &str) -> Result<Option<&'a str>, String> {
    match value {
        Value::Null => Ok(None),
        Value::String(s) => Ok(Some(s)),
        _ => Err(format!("{field} must be a string")),
    }
}

/// `value` as a list of strings, or the error naming `field`.
fn strings(value: &Value, field: &str) -> Result<Vec<String>, String> {
    match value {
        Value::Null => Ok(Vec::new()),
        Value::Array(items) => items
            .iter()
            .enumerate()
            .map(|(i, item)| match item {
                Value::String(s) if !s.is_empty() => Ok(s.clone()),
                _ => Err(format!("{field}[{i}] must be a non-empty string")),
            })
            .collect(),
        _ => Err(format!("{field} must be a list of strings")),
    }
}

/// An RFC 3339 time as Unix seconds.
pub fn parse_time(text: &str) -> Result<i64, String> {
    text.parse::<jiff::Timestamp>()
        .map(|t| t.as_second())
        .map_err(|e| format!("{text:?} is not an RFC 3339 time such as 2026-12-31T23:59:59Z: {e}"))
}

impl PolicyException {
    /// Reads a `poolguard.io/v1alpha1` PolicyException object (as the API server or a file gives
    /// it). Unknown fields are ignored; a missing ticket or expiry, an empty policy list, a field
    /// of the wrong type or a time that is not RFC 3339 is an error naming the exception and the
    /// field, in the user's words.
    pub fn from_object(object: &Value) -> Result<PolicyException, String> {
        let meta = &object["metadata"];
        let name = string(&meta["name"], "metadata.name")?.unwrap_or_default();
        let namespace = string(&meta["namespace"], "metadata.namespace")?.unwrap_or_default();
        let at = |e: String| format!("PolicyException {namespace}/{name}: {e}");
        if object["apiVersion"] != format!("{GROUP}/{VERSION}").as_str() || object["kind"] != KIND {
            return Err(at(format!(
                "expected apiVersion {GROUP}/{VERSION} and kind {KIND}"
            )));
        }
        if name.is_empty() {
            return Err(at("metadata.name is required".into()));
        }
        if namespace.is_empty() {
            return Err(at(
                "metadata.namespace is required: exceptions are namespaced".into(),
            ));
        }
        let spec = &object["spec"];
        if !spec.is_object() {
            return Err(at("spec is required".into()));
        }
        let policies = strings(&spec["policies"], "spec.policies").map_err(at)?;
        if policies.is_empty() {
            return Err(at("spec.policies must name at least one policy (a SIT policy, a Gatekeeper constraint, or placement)".into()));
        }
        let ticket = string(&spec["ticket"], "spec.ticket")
            .map_err(at)?
            .filter(|t| !t.trim().is_empty())
            .ok_or_else(|| {
                at("spec.ticket is required: the ticket that tracks the exception".into())
            })?;
        let expires_text = string(&spec["expires"], "spec.expires")
            .map_err(at)?
            .filter(|t| !t.is_empty())
            .ok_or_else(|| at("spec.expires is required: when the exception ends (RFC 3339, such as 2026-12-31T23:59:59Z)".into()))?;
        let expires = parse_time(expires_text).map_err(|e| at(format!("spec.expires: {e}")))?;
        let reason = string(&spec["reason"], "spec.reason")
            .map_err(at)?
            .unwrap_or_default();
        let m = &spec["match"];
        if !(m.is_null() || m.is_object()) {
            return Err(at("spec.match must be an object".into()));
        }
        let namespace_selector = match &m["namespaceSelector"] {
            Value::Null => None,
            selector => Some(
                serde_json::from_value::<LabelSelector>(selector.clone())
                    .map_err(|e| at(format!("spec.match.namespaceSelector: {e}")))?,
            ),
        };
        let matching = ExceptionMatch {
            namespaces: strings(&m["namespaces"], "spec.match.namespaces").map_err(at)?,
            namespace_selector,
            kinds: strings(&m["kinds"], "spec.match.kinds").map_err(at)?,
            names: strings(&m["names"], "spec.match.names").map_err(at)?,
            images: strings(&m["images"], "spec.match.images").map_err(at)?,
        };
        Ok(PolicyException {
            namespace: namespace.to_string(),
            name: name.to_string(),
            policies,
            matching,
            expires,
            expires_text: expires_text.to_string(),
            ticket: ticket.to_string(),
            reason: reason.to_string(),
        })
    }

    /// Whether the config lets this exception count, at `now`: its namespace is one of
    /// `exceptions.namespaces`, it ends within `exceptions.maxDuration` of `now`, and every
    /// policy it names is loaded (`known`) or is `placement`. The one-line reason otherwise.
    pub fn admissible(
        &self,
        config: &Config,
        known: &dyn Fn(&str) -> bool,
        now: i64,
    ) -> Result<(), String> {
        let at = |e: String| format!("PolicyException {}/{}: {e}", self.namespace, self.name);
        let settings = &config.exceptions;
        if !settings.namespaces.iter().any(|n| n == &self.namespace) {
            return Err(at(format!(
                "exceptions count only in the namespaces the config names (exceptions.namespaces: {}), not in {:?}",
                if settings.namespaces.is_empty() { "none".to_string() } else { settings.namespaces.join(", ") },
                self.namespace
            )));
        }
        let max = i64::try_from(settings.max_duration.as_secs()).unwrap_or(i64::MAX);
        if self.expires.saturating_sub(now) > max {
            return Err(at(format!(
                "spec.expires {} is more than exceptions.maxDuration ({}) away",
                self.expires_text,
                humantime::format_duration(settings.max_duration)
            )));
        }
        let unknown: Vec<&str> = self
            .policies
            .iter()
            .map(String::as_str)
            .filter(|p| *p != PLACEMENT && !known(p))
            .collect();
        if !unknown.is_empty() {
            return Err(at(format!(
                "spec.policies names {} that poolguard has not loaded",
                unknown.join(", ")
            )));
        }
        Ok(())
    }

    /// Whether the exception still counts at `now`.
    pub fn live(&self, now: i64) -> bool {
        now < self.expires
    }

    /// Whether it excepts `policy` for `target`.
    pub fn matches(&self, policy: &str, target: &Target) -> bool {
        let m = &self.matching;
        let empty = Labels::new();
        self.policies.iter().any(|p| p == policy)
            && (m.namespaces.is_empty()
                || m.namespaces
                    .iter()
                    .any(|g| glob_matches(g, target.namespace)))
            && m.namespace_selector
                .as_ref()
                .is_none_or(|s| s.matches(target.labels.unwrap_or(&empty)))
            && (m.kinds.is_empty() || m.kinds.iter().any(|k| k == target.kind))
            && (m.names.is_empty() || m.names.iter().any(|g| glob_matches(g, target.name)))
            && (m.images.is_empty() || self.all_images_match(target.images))
    }

    /// Every image matches one of the globs, as written or normalised; an object that pulls no
    /// image matches none.
    fn all_images_match(&self, images: &[&str]) -> bool {
        !images.is_empty()
            && images.iter().all(|image| {
                let normalised = crate::image::parse(image).ok().map(|r| r.to_string());
                self.matching.images.iter().any(|g| {
                    image_matches(g, image)
                        || normalised.as_deref().is_some_and(|n| image_matches(g, n))
                })
            })
    }

    /// What a decision records of it.
    pub fn mark(&self) -> ExceptionMark {
        ExceptionMark {
            exception: format!("{}/{}", self.namespace, self.name),
            ticket: self.ticket.clone(),
            expires: self.expires_text.clone(),
        }
    }
}

/// Whether a PolicyException being written (`object`) may be: it reads
/// ([`PolicyException::from_object`]), the config lets it count at `now`
/// ([`PolicyException::admissible`]), and it has not already expired. The one-line reason
/// otherwise, in the user's words.
pub fn check_written(
    object: &Value,
    config: &Config,
    known: &dyn Fn(&str) -> bool,
    now: i64,
) -> Result<(), String> {
    let exception = PolicyException::from_object(object)?;
    exception.admissible(config, known, now)?;
    if !exception.live(now) {
        return Err(format!(
            "PolicyException {}/{}: spec.expires {} has passed",
            exception.namespace, exception.name, exception.expires_text
        ));
    }
    Ok(())
}

/// The exceptions that count, by namespace and name.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ExceptionSet {
    exceptions: BTreeMap<(String, String), PolicyException>,
}

impl ExceptionSet {
    /// The exceptions of `all` that the config lets count at `now` ([`PolicyException::admissible`]),
    /// and a line for each one left out.
    pub fn new(
        all: Vec<PolicyException>,
        config: &Config,
        known: &dyn Fn(&str) -> bool,
        now: i64,
    ) -> (ExceptionSet, Vec<String>) {
        let mut exceptions = BTreeMap::new();
        let mut left_out = Vec::new();
        for exception in all {
            match exception.admissible(config, known, now) {
                Ok(()) => {
                    let key = (exception.namespace.clone(), exception.name.clone());
                    exceptions.insert(key, exception);
                }
                Err(why) => left_out.push(format!("{why}; it is ignored")),
            }
        }
        (ExceptionSet { exceptions }, left_out)
    }

    pub fn is_empty(&self) -> bool {
        self.exceptions.is_empty()
    }

    pub fn iter(&self) -> impl Iterator<Item = &PolicyException> {
        self.exceptions.values()
    }

    /// The first live exception (by namespace and name) that excepts `policy` for `target` at
    /// `now`.
    pub fn find(&self, policy: &str, target: &Target, now: i64) -> Option<&PolicyException> {
        self.exceptions
            .values()
            .find(|e| e.live(now) && e.matches(policy, target))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const NOW: i64 = 1_798_761_600; // 2027-01-01T00:00:00Z

    fn object(spec: Value) -> Value {
        json!({"apiVersion": "poolguard.io/v1alpha1", "kind": "PolicyException",
               "metadata": {"name": "legacy", "namespace": "poolguard"}, "spec": spec})
    }

    fn config() -> Config {
        Config::parse(
            "exceptions: {namespaces: [poolguard], maxDuration: 720h}\n",
            "t",
        )
        .unwrap()
    }

    fn exception(spec: Value) -> PolicyException {
        PolicyException::from_object(&object(spec)).unwrap()
    }

    #[test]
    fn reading_refuses_what_is_missing_in_the_users_words() {
        let cases = [
            (
                json!({"policies": ["p"], "expires": "2027-01-02T00:00:00Z"}),
                "spec.ticket is required",
            ),
            (
                json!({"policies": ["p"], "ticket": "OPS-1"}),
                "spec.expires is required",
            ),
            (
                json!({"policies": [], "ticket": "OPS-1", "expires": "2027-01-02T00:00:00Z"}),
                "spec.policies must name at least one policy",
            ),
            (
                json!({"policies": ["p"], "ticket": "OPS-1", "expires": "tomorrow"}),
                "spec.expires: \"tomorrow\" is not an RFC 3339 time",
            ),
            (
                json!({"policies": ["p"], "ticket": "OPS-1", "expires": "2027-01-02T00:00:00Z", "match": {"images": "x"}}),
                "spec.match.images must be a list of strings",
            ),
            (
                json!({"policies": ["p"], "ticket": " ", "expires": "2027-01-02T00:00:00Z"}),
                "spec.ticket is required",
            ),
        ];
        for (spec, want) in cases {
            let err = PolicyException::from_object(&object(spec.clone())).unwrap_err();
            assert!(
                err.starts_with("PolicyException poolguard/legacy: "),
                "{err}"
            );
            assert!(err.contains(want), "{spec}: {err}");
        }
        let e = exception(
            json!({"policies": ["p"], "ticket": "OPS-1", "expires": "2027-01-02T01:00:00+01:00"}),
        );
        assert_eq!(e.expires, NOW + 86_400, "offsets count");
    }

    #[test]
    fn the_config_says_where_exceptions_count_for_how_long_and_for_what() {
        let known = |p: &str| p == "allowedrepositories";
        let ok = exception(
            json!({"policies": ["allowedrepositories", "placement"], "ticket": "OPS-1", "expires": "2027-01-31T00:00:00Z"}),
        );
        assert_eq!(ok.admissible(&config(), &known, NOW), Ok(()));
        let too_long = exception(
            json!({"policies": ["allowedrepositories"], "ticket": "OPS-1", "expires": "2027-03-01T00:00:00Z"}),
        );
        let err = too_long.admissible(&config(), &known, NOW).unwrap_err();
        assert!(
            err.contains("more than exceptions.maxDuration (30days) away"),
            "{err}"
        );
        let unknown = exception(
            json!({"policies": ["allowedrepository"], "ticket": "OPS-1", "expires": "2027-01-02T00:00:00Z"}),
        );
        let err = unknown.admissible(&config(), &known, NOW).unwrap_err();
        assert!(
            err.contains("names allowedrepository that poolguard has not loaded"),
            "{err}"
        );
        let mut elsewhere = ok.clone();
        elsewhere.namespace = "team-a".into();
        let err = elsewhere.admissible(&config(), &known, NOW).unwrap_err();
        assert!(
            err.contains("exceptions.namespaces: poolguard), not in \"team-a\""),
            "{err}"
        );
        let (set, left_out) =
            ExceptionSet::new(vec![ok, elsewhere, too_long], &config(), &known, NOW);
        assert_eq!(set.iter().count(), 1);
        assert_eq!(left_out.len(), 2, "{left_out:?}");
        assert!(left_out.iter().all(|l| l.ends_with("; it is ignored")));
    }

    #[test]
    fn matching_and_expiry() {
        let e = exception(json!({
            "policies": ["allowedrepositories"], "ticket": "OPS-7", "expires": "2027-01-02T00:00:00Z",
            "match": {"namespaces": ["legacy-*"], "kinds": ["Pod", "Deployment"], "names": ["billing*"],
                      "images": ["quay.io/legacy/*", "docker.io/library/nginx:*"]}}));
        let labels = Labels::new();
        let target = |namespace, kind, name, images: &'static [&'static str]| Target {
            namespace,
            labels: Some(&labels),
            kind,
            name,
            images,
        };
        let matched = target(
            "legacy-app",
            "Pod",
            "billing-1",
            &["quay.io/legacy/api:1", "nginx:1.27"],
        );
        assert!(
            e.matches("allowedrepositories", &matched),
            "nginx matches as normalised"
        );
        assert!(!e.matches("latesttag", &matched), "another policy");
        assert!(!e.matches(
            "allowedrepositories",
            &target("team", "Pod", "billing-1", &["quay.io/legacy/api:1"])
        ));
        assert!(!e.matches(
            "allowedrepositories",
            &target("legacy-app", "Job", "billing-1", &["quay.io/legacy/api:1"])
        ));
        assert!(!e.matches(
            "allowedrepositories",
            &target("legacy-app", "Pod", "web", &["quay.io/legacy/api:1"])
        ));
        assert!(
            !e.matches(
                "allowedrepositories",
                &target(
                    "legacy-app",
                    "Pod",
                    "billing-1",
                    &["quay.io/legacy/api:1", "evil.io/x:1"]
                )
            ),
            "every image must match: one exception cannot let in another image"
        );
        assert!(!e.matches(
            "allowedrepositories",
            &target("legacy-app", "Pod", "billing-1", &[])
        ));
        let (set, _) = ExceptionSet::new(vec![e.clone()], &config(), &|_| true, NOW);
        assert!(set.find("allowedrepositories", &matched, NOW).is_some());
        assert!(
            set.find("allowedrepositories", &matched, e.expires)
                .is_none(),
            "expired at its time"
        );
        assert_eq!(
            e.mark().to_string(),
            "PolicyException poolguard/legacy (ticket OPS-7, expires 2027-01-02T00:00:00Z)"
        );
    }
}
