//! Results of policy evaluations, remembered by everything they depend on, so that the pods of
//! one ReplicaSet (the same images, the same pool) cost one evaluation per policy instead of
//! one each.
//!
//! A result is a pure function of the compiled policy, its parameters and its input document
//! (a constraint's has none) with the parts of the review it reads
//! ([`super::review_paths`]): the key is exactly those, written out in full (never a hash of
//! them, so two inputs can never share an entry). What is not remembered:
//! - policies that may read the review whole, where the parts they read cannot be told from
//!   their text (the AdmissionRequest carries a fresh uid each time, so the entry could never
//!   be met again), or that mention a builtin whose answer changes from call to call
//!   ([`deterministic`]);
//! - errors (a time limit hit on a busy machine says nothing of the next evaluation);
//! - a key larger than an eighth of the budget.
//!
//! The budget is in bytes (keys and values as they are stored, plus a fixed overhead per
//! entry); past it, the entries used least are dropped first (quick_cache's CLOCK-Pro). A
//! budget of 0 remembers nothing.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use quick_cache::sync::Cache;
use quick_cache::Weighter;

/// Bytes counted per entry beyond its key and value: the table slot, the `String` and `Vec`
/// headers, the allocator's rounding.
const ENTRY_OVERHEAD: usize = 128;

/// Builtins whose answer is not a function of their arguments. None of them is compiled into
/// poolguard's engine today (their regorus features are off), so a policy naming one does not
/// load; the check stands in case that changes.
const NONDETERMINISTIC: &[&str] = &[
    "time.now_ns",
    "rand.",
    "uuid.",
    "http.send",
    "opa.runtime",
    "net.lookup_ip_addr",
];

/// Whether every builtin a policy's Rego may call answers the same for the same arguments: no
/// name of [`NONDETERMINISTIC`] appears anywhere in it (comments and strings included).
pub fn deterministic(rego: &str) -> bool {
    !NONDETERMINISTIC.iter().any(|name| rego.contains(name))
}

/// A policy's identity in memo keys: unique per compiled policy in this process, shared by its
/// clones (which hold the same engine).
pub(crate) fn next_policy_id() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// What an entry's value costs, in bytes beyond [`ENTRY_OVERHEAD`].
pub(crate) trait Weigh {
    fn weigh(&self) -> usize;
}

impl Weigh for Vec<String> {
    fn weigh(&self) -> usize {
        self.iter()
            .map(|s| s.len() + std::mem::size_of::<String>())
            .sum()
    }
}

#[derive(Clone)]
struct Bytes;

impl<V: Weigh> Weighter<Arc<str>, V> for Bytes {
    fn weight(&self, key: &Arc<str>, value: &V) -> u64 {
        (key.len() + value.weigh() + ENTRY_OVERHEAD) as u64
    }
}

/// Remembered results, bounded by a byte budget. Cloning shares the entries.
#[derive(Clone)]
pub(crate) struct Memo<V> {
    cache: Option<Arc<Cache<Arc<str>, V, Bytes>>>,
    budget: u64,
}

/// An empty memo: remembers nothing.
impl<V> Default for Memo<V> {
    fn default() -> Self {
        Memo {
            cache: None,
            budget: 0,
        }
    }
}

impl<V: Clone + Weigh> Memo<V> {
    /// A memo holding up to `budget` bytes; 0 holds nothing.
    pub fn new(budget: u64) -> Memo<V> {
        let cache = (budget > 0).then(|| {
            // quick_cache sizes its table from an estimate of the entry count: ~1 KiB each.
            let estimate = usize::try_from(budget / 1024).unwrap_or(usize::MAX).max(16);
            Arc::new(Cache::with_weighter(estimate, budget, Bytes))
        });
        Memo { cache, budget }
    }

    /// The key of a policy's evaluation: its id and the JSON texts of what it reads, one per
    /// line (JSON text holds no raw newline, so the parts cannot run into each other).
    pub fn key(policy: u64, parts: &[&str]) -> String {
        let mut key = policy.to_string();
        for part in parts {
            key.push('\n');
            key.push_str(part);
        }
        key
    }

    /// Whether a key would be kept (an empty memo keeps none).
    pub fn keeps(&self, key_len: usize) -> bool {
        self.cache.is_some() && (key_len as u64) <= self.budget / 8
    }

    pub fn get(&self, key: &str) -> Option<V> {
        self.cache.as_ref()?.get(key)
    }

    pub fn insert(&self, key: String, value: V) {
        if let Some(cache) = &self.cache {
            if self.keeps(key.len()) {
                cache.insert(Arc::from(key), value);
            }
        }
    }

    /// Hits and misses since the memo was made.
    pub(crate) fn stats(&self) -> (u64, u64) {
        self.cache
            .as_ref()
            .map_or((0, 0), |c| (c.hits(), c.misses()))
    }

    /// Bytes held now, by the count of [`Weigh`] and [`ENTRY_OVERHEAD`].
    pub(crate) fn weight(&self) -> u64 {
        self.cache.as_ref().map_or(0, |c| c.weight())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deterministic_table() {
        for (rego, want) in [
            ("x := input.a", true),
            ("t := time.now_ns()", false),
            ("n := rand.intn(\"k\", 10)", false),
            ("r := http.send({})", false),
            ("u := uuid.rfc4122(\"k\")", false),
            ("# mentions opa.runtime in a comment", false),
            ("ip := net.lookup_ip_addr(\"h\")", false),
            ("c := net.cidr_contains(\"10.0.0.0/8\", \"10.1.1.1\")", true),
        ] {
            assert_eq!(deterministic(rego), want, "{rego}");
        }
    }

    #[test]
    fn remembers_by_the_whole_key_and_forgets_past_the_budget() {
        let memo: Memo<Vec<String>> = Memo::new(64 * 1024);
        let a = Memo::<Vec<String>>::key(1, &["{\"p\":1}", "{\"doc\":\"a\"}"]);
        let b = Memo::<Vec<String>>::key(1, &["{\"p\":1}", "{\"doc\":\"b\"}"]);
        let other_policy = Memo::<Vec<String>>::key(2, &["{\"p\":1}", "{\"doc\":\"a\"}"]);
        memo.insert(a.clone(), vec!["denied".into()]);
        assert_eq!(memo.get(&a), Some(vec!["denied".to_string()]));
        assert_eq!(memo.get(&b), None);
        assert_eq!(memo.get(&other_policy), None);
        assert_eq!(memo.stats(), (1, 2));

        // Far more than fits: the held weight stays within the budget.
        for i in 0..10_000 {
            memo.insert(
                Memo::<Vec<String>>::key(3, &[&format!("{{\"i\":{i}}}")]),
                vec![],
            );
        }
        assert!(memo.weight() <= 64 * 1024, "{}", memo.weight());
        assert!(memo.weight() > 32 * 1024, "{}", memo.weight());
    }

    #[test]
    fn a_key_over_an_eighth_of_the_budget_or_an_empty_memo_keeps_nothing() {
        let memo: Memo<Vec<String>> = Memo::new(8 * 1024);
        let big = "x".repeat(1025);
        memo.insert(big.clone(), vec![]);
        assert_eq!(memo.get(&big), None);
        let fits = "y".repeat(1000);
        memo.insert(fits.clone(), vec![]);
        assert_eq!(memo.get(&fits), Some(vec![]));

        let off: Memo<Vec<String>> = Memo::new(0);
        off.insert("k".into(), vec![]);
        assert_eq!(off.get("k"), None);
        assert!(!off.keeps(1));
    }
}
