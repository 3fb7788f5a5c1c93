//! A Gatekeeper user's K8sAllowedRepos constraint (testdata/gatekeeper/allowedrepos/: a plain
//! string prefix on each image of containers, initContainers and ephemeralContainers) against
//! poolguard's shipped `allowedrepositories` (normalised references compared on whole path
//! components), given the same list of repositories, over every reference of the image
//! reference table (tests/data/image_reference_table.rs).
//!
//! K8sAllowedRepos is decided as Gatekeeper's audit and gator decide it (the review of the Pod,
//! evaluated by [`review::evaluate`]); allowedrepositories as the webhook checks a pod spec
//! ([`validate::check`]: a reference poolguard cannot read is refused before any policy runs).
//! Every reference on which the two differ is pinned, with its reason, in
//! testdata/gatekeeper/allowedrepos/differences.tsv; docs/gatekeeper.md sums them up.

#[path = "data/image_reference_table.rs"]
mod image_reference_table;

use std::path::PathBuf;
use std::time::Duration;

use poolguard_core::admission::PodSpecAt;
use poolguard_core::config::Config;
use poolguard_core::gatekeeper;
use poolguard_core::gator::review;
use poolguard_core::image;
use poolguard_core::policy::{template, Evaluation, Outcome, PolicySet};
use poolguard_core::ruleset::RuleSet;
use poolguard_core::scope::Scope;
use poolguard_core::validate;
use serde_json::{json, Value};

const TEMPLATE: &str = include_str!("../../../testdata/gatekeeper/allowedrepos/template.yaml");
const CONSTRAINT: &str = include_str!("../../../testdata/gatekeeper/allowedrepos/constraint.yaml");
const CONSTRAINT_NAME: &str = "images-from-allowed-repos";
const SHIPPED: &str = include_str!("../../../policies/allowedrepositories.yaml");
const DIFFERENCES: &str = include_str!("../../../testdata/gatekeeper/allowedrepos/differences.tsv");

/// The repository lists compared, one entry each: what Gatekeeper users write (Docker Hub's
/// official images without a trailing `/`, a registry and a repository that is the start of
/// another's name, a registry host without its port, a registry with a trailing `/`).
const LISTS: [&str; 4] = [
    "docker.io/library",
    "example.com/private",
    "localhost",
    "gcr.io/",
];

const LIMIT: Duration = Duration::from_secs(5);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verdict {
    Allow,
    Deny,
    /// poolguard cannot read the reference: the pod is refused before any policy runs.
    Refused,
}

impl Verdict {
    fn allows(self) -> bool {
        self == Verdict::Allow
    }

    fn word(self) -> &'static str {
        match self {
            Verdict::Allow => "allow",
            Verdict::Deny => "deny",
            Verdict::Refused => "refused",
        }
    }
}

/// The two rule sets for one list: the constraint alone, and allowedrepositories alone.
struct Pair {
    gatekeeper: RuleSet,
    poolguard: RuleSet,
}

fn pair(repos: &[&str]) -> Pair {
    let mut constraint = poolguard_core::documents::parse(CONSTRAINT, "constraint.yaml")
        .unwrap()
        .remove(0);
    constraint["spec"]["parameters"]["repos"] = json!(repos);
    let files = [
        (PathBuf::from("template.yaml"), TEMPLATE.to_string()),
        (PathBuf::from("constraint.json"), constraint.to_string()),
    ];
    let (gatekeeper, warnings) = poolguard_core::ruleset::RuleSet::with_gatekeeper(
        Config::parse("{}", "cfg.yaml").unwrap(),
        PolicySet::default(),
        Default::default(),
        gatekeeper::Files::of(&files),
        "cfg.yaml",
    )
    .unwrap();
    assert!(warnings.is_empty(), "{warnings:?}");
    let config =
        json!({"policies": {"allowedrepositories": {"parameters": {"repositories": repos}}}});
    let shipped = template::from_yaml(SHIPPED, "allowedrepositories.yaml".into()).unwrap();
    let poolguard = RuleSet::new(
        Config::parse(&config.to_string(), "cfg.yaml").unwrap(),
        PolicySet::compile(&[shipped]).unwrap(),
        Default::default(),
        "cfg.yaml",
    )
    .unwrap();
    Pair {
        gatekeeper,
        poolguard,
    }
}

fn pod(spec: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": "p", "namespace": "shop"}, "spec": spec})
}

/// The one outcome of `policy`, as a verdict (its messages when it denies).
fn verdict_of(outcomes: &[Outcome], policy: &str) -> (Verdict, Vec<String>) {
    let found: Vec<&Outcome> = outcomes.iter().filter(|o| o.policy == policy).collect();
    let [outcome] = found.as_slice() else {
        panic!("expected one outcome of {policy}, got {outcomes:?}");
    };
    match &outcome.result {
        Evaluation::Ran(Ok(messages)) if messages.is_empty() => (Verdict::Allow, Vec::new()),
        Evaluation::Ran(Ok(messages)) => (Verdict::Deny, messages.clone()),
        other => panic!("{policy} did not decide: {other:?}"),
    }
}

/// What K8sAllowedRepos decides on `object`, as Gatekeeper's audit and gator do.
fn gatekeeper_verdict(pair: &Pair, object: &Value) -> (Verdict, Vec<String>) {
    let review = review::of_object(object, None);
    verdict_of(
        &review::evaluate(&pair.gatekeeper, &review, LIMIT, None),
        CONSTRAINT_NAME,
    )
}

/// What the webhook's check of the pod spec decides with allowedrepositories.
fn poolguard_verdict(pair: &Pair, object: &Value) -> (Verdict, Vec<String>) {
    let checks = validate::check(
        PodSpecAt {
            object,
            path: &["spec"],
            namespace: "shop",
        },
        None,
        Scope::default(),
        None,
        &pair.poolguard,
        LIMIT,
    );
    match checks.policies {
        Err(reason) => (Verdict::Refused, vec![reason]),
        Ok(outcomes) => verdict_of(&outcomes, "allowedrepositories"),
    }
}

/// Why the two differ on `reference` with the list `[prefix]`, from the reference itself:
/// - `invalid reference`: poolguard refuses what it cannot read; K8sAllowedRepos compares the
///   string and allows it;
/// - `normalised`: the string does not start with the prefix, the normalised repository does
///   (Docker Hub's `docker.io`, `library/` or `index.docker.io` spelled otherwise or left out);
/// - `Docker Hub name`: the string starts with the prefix, but it names a Docker Hub image
///   whose normalised repository does not;
/// - `inside a component`: the normalised repository starts with the prefix, which ends inside
///   a path component or before the registry's port (`example.com/private` is not a parent of
///   `example.com/privatebase`).
fn reason(reference: &str, prefix: &str, gatekeeper: Verdict, poolguard: Verdict) -> &'static str {
    let repository = image::repository(reference).ok();
    let normalised_starts = repository
        .as_deref()
        .is_some_and(|r| r.starts_with(prefix.trim_end_matches('/')));
    match (gatekeeper, poolguard) {
        (Verdict::Allow, Verdict::Refused) => "invalid reference",
        (Verdict::Deny, Verdict::Allow) if !reference.starts_with(prefix) && normalised_starts => {
            "normalised"
        }
        (Verdict::Allow, Verdict::Deny) if reference.starts_with(prefix) && !normalised_starts => {
            "Docker Hub name"
        }
        (Verdict::Allow, Verdict::Deny) if reference.starts_with(prefix) => "inside a component",
        _ => "unexplained",
    }
}

#[test]
fn k8sallowedrepos_and_allowedrepositories_differ_only_where_pinned() {
    let table = image_reference_table::table();
    let mut lines = Vec::new();
    let mut agree = 0;
    let mut reasons = std::collections::BTreeMap::<&str, usize>::new();
    for prefix in LISTS {
        let pair = pair(&[prefix]);
        for case in &table {
            let object = pod(json!({"containers": [{"name": "c", "image": case.input}]}));
            let (gk, gk_messages) = gatekeeper_verdict(&pair, &object);
            let (pg, pg_messages) = poolguard_verdict(&pair, &object);
            // Each side's denial names the image it judged.
            if gk == Verdict::Deny {
                assert!(gk_messages[0].contains(&case.input), "{gk_messages:?}");
            }
            if pg == Verdict::Deny {
                let quoted = format!("{:?}", case.input);
                assert!(pg_messages[0].contains(&quoted), "{pg_messages:?}");
            }
            if gk.allows() == pg.allows() {
                agree += 1;
                continue;
            }
            let why = reason(&case.input, prefix, gk, pg);
            *reasons.entry(why).or_default() += 1;
            lines.push(format!(
                "{prefix}\t{:?}\t{}\t{}\t{why}",
                case.input,
                gk.word(),
                pg.word()
            ));
        }
    }
    let got: Vec<&str> = lines.iter().map(String::as_str).collect();
    let pinned: Vec<&str> = DIFFERENCES
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .collect();
    eprintln!(
        "{} references x {} lists: {agree} agree, {} differ {reasons:?}",
        table.len(),
        LISTS.len(),
        lines.len()
    );
    assert!(
        got == pinned,
        "the differences are not the pinned ones (testdata/gatekeeper/allowedrepos/differences.tsv); now:\n{}",
        lines.join("\n")
    );
    assert!(!reasons.contains_key("unexplained"), "{reasons:?}");
    // The table is the one the image parser's tests use, whole.
    assert_eq!(table.len(), 244);
}

/// Both read every container list: an image outside the list is denied in each, an image from
/// it allowed. Image volumes (`volumes[].image.reference`) are checked by poolguard only.
#[test]
fn both_check_containers_init_containers_and_ephemeral_containers() {
    let pair = pair(&["registry.k8s.io/"]);
    let good = "registry.k8s.io/pause:3.10";
    for field in ["containers", "initContainers", "ephemeralContainers"] {
        for (image, want) in [(good, Verdict::Allow), ("nginx:1.27", Verdict::Deny)] {
            let mut spec = json!({"containers": [{"name": "main", "image": good}]});
            let name = if field == "containers" {
                "main"
            } else {
                "extra"
            };
            let list = spec[field].as_array().cloned().unwrap_or_default();
            let mut list: Vec<Value> = list.into_iter().filter(|c| c["name"] != name).collect();
            list.push(json!({"name": name, "image": image}));
            spec[field] = json!(list);
            let object = pod(spec);
            let (gk, gk_messages) = gatekeeper_verdict(&pair, &object);
            let (pg, pg_messages) = poolguard_verdict(&pair, &object);
            assert_eq!(
                (gk, pg),
                (want, want),
                "{field} {image}: {gk_messages:?} {pg_messages:?}"
            );
            if want == Verdict::Deny {
                assert!(
                    gk_messages[0].starts_with(&format!("{field} {name}: image nginx:1.27")),
                    "{gk_messages:?}"
                );
                assert!(pg_messages[0].contains("\"nginx:1.27\""), "{pg_messages:?}");
            }
        }
    }
    // An image volume: poolguard checks its reference, K8sAllowedRepos reads containers only.
    let object = pod(json!({
        "containers": [{"name": "main", "image": good}],
        "volumes": [{"name": "v", "image": {"reference": "nginx:1.27"}}],
    }));
    assert_eq!(gatekeeper_verdict(&pair, &object).0, Verdict::Allow);
    assert_eq!(poolguard_verdict(&pair, &object).0, Verdict::Deny);
}
