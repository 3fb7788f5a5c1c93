//! Bytes as a config file: parsed and validated; a config that parses is checked against the
//! shipped policies, its settings are looked up for every policy and pool, and a config that
//! loads with the policies decides a few test reviews with the invariants of `decide_and_check`.
//! Seeded with testdata/config.
#![no_main]

use libfuzzer_sys::fuzz_target;
use poolguard_core::config::Config;
use poolguard_core::ruleset::RuleSet;
use poolguard_fuzz::{decide_and_check, shipped};

/// Reviews decided under a fuzzed config: pod and workload, create and update, a foreign image.
const REVIEWS: [&str; 4] = [
    "pod-create-unmapped.json",
    "pod-create-bad-image.json",
    "pod-update-mapped.json",
    "deployment-create-conflict.json",
];

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(config) = Config::parse(text, "fuzz.yaml") else {
        return;
    };
    let shipped = shipped();
    let policies: Vec<&str> = config
        .policies
        .keys()
        .map(String::as_str)
        .chain(shipped.policies.names())
        .collect();
    let pools: Vec<Option<&str>> = std::iter::once(None)
        .chain(config.pools.keys().map(|p| Some(p.as_str())))
        .chain([Some("pool1"), Some("gpu")])
        .collect();
    for policy in &policies {
        for pool in &pools {
            let _ = config.effective_policy(policy, *pool);
        }
        if let Some(rollout) = config.rollout(policy) {
            for labels in shipped.namespaces.values() {
                let _ = rollout.group_of(labels);
            }
        }
    }
    let Ok(rules) = RuleSet::new(
        config,
        shipped.policies.clone(),
        Default::default(),
        "fuzz.yaml",
    ) else {
        return;
    };
    for name in REVIEWS {
        decide_and_check(shipped.review(name), &rules, &shipped.namespaces);
    }
});
