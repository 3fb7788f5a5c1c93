//! Where namespace labels come from: a watch cache of the cluster's namespaces with a direct GET
//! on a miss, or a file.
//!
//! Anyone who can reach the webhook can name any namespace, so a miss must not become one GET
//! per request: concurrent misses for one name share one GET, and GETs start at most
//! [`FETCHES_PER_SECOND`] a second (bursts of [`FETCH_BURST`]). Past that a lookup fails, and
//! the request is refused (fail closed). A namespace found absent is not remembered: one created
//! a moment ago, not yet in the cache, must not be taken for absent (it would skip placement).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use futures::future::{BoxFuture, FutureExt, Shared};
use tokio::time::Instant;

use poolguard_core::labels::Labels;
use poolguard_core::namespaces::NamespaceLabels;

/// A source of namespace labels. `Ok(None)`: no such namespace.
pub trait Source: Send + Sync {
    /// From memory, without I/O.
    fn cached(&self, name: &str) -> Option<Labels>;
    /// Straight from the source of truth (the API server).
    fn fetch<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<Option<Labels>, String>>;
    /// The cache holds a complete first listing.
    fn synced(&self) -> bool;
    /// Namespaces in the cache.
    fn len(&self) -> usize;
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// GETs started on cache misses, per second, at most (on average).
pub const FETCHES_PER_SECOND: f64 = 20.0;
/// GETs that may start at once after a quiet spell.
pub const FETCH_BURST: f64 = 40.0;

/// The namespace lookups the server makes.
#[derive(Clone)]
pub struct Namespaces {
    source: Arc<dyn Source>,
    /// `None` for a source whose fetch costs nothing (a file).
    fetches: Option<Arc<Fetches>>,
}

impl Namespaces {
    pub fn new(source: Arc<dyn Source>) -> Namespaces {
        Namespaces {
            source,
            fetches: Some(Arc::new(Fetches::default())),
        }
    }

    /// From a fixed map (a namespaces file): always synced, nothing to fetch.
    pub fn fixed(labels: NamespaceLabels) -> Namespaces {
        Namespaces {
            source: Arc::new(Fixed(labels)),
            fetches: None,
        }
    }

    /// The labels of `name`. A cache miss (the namespace may have been created a moment ago),
    /// or any lookup before the first listing has synced, goes to the source of truth: sharing
    /// a fetch already under way for the name, or starting one if the rate limit allows (see
    /// the module's text); `Err` when it does not.
    pub async fn labels(&self, name: &str) -> Result<Option<Labels>, String> {
        if self.source.synced() {
            if let Some(labels) = self.source.cached(name) {
                return Ok(Some(labels));
            }
        }
        match &self.fetches {
            Some(fetches) => fetches.flight(&self.source, name)?.await,
            None => self.source.fetch(name).await,
        }
    }

    pub fn ready(&self) -> bool {
        self.source.synced()
    }

    pub fn len(&self) -> usize {
        self.source.len()
    }

    pub fn is_empty(&self) -> bool {
        self.source.is_empty()
    }
}

/// One fetch, awaited by every lookup of its name while it runs.
type Flight = Shared<BoxFuture<'static, Result<Option<Labels>, String>>>;

/// The fetches under way, and the rate limit on starting new ones.
struct Fetches {
    flights: Mutex<HashMap<String, Flight>>,
    bucket: Mutex<Bucket>,
}

impl Default for Fetches {
    fn default() -> Self {
        Fetches {
            flights: Mutex::default(),
            bucket: Mutex::new(Bucket {
                tokens: FETCH_BURST,
                at: Instant::now(),
            }),
        }
    }
}

impl Fetches {
    /// The fetch of `name` under way, or a new one; `Err` when the rate limit allows none.
    /// The fetch runs as a task of its own, which leaves the table when it ends, so lookups
    /// that give up waiting (their request cancelled) leave nothing behind.
    fn flight(self: &Arc<Self>, source: &Arc<dyn Source>, name: &str) -> Result<Flight, String> {
        let mut flights = lock(&self.flights);
        if let Some(flight) = flights.get(name) {
            return Ok(flight.clone());
        }
        if !lock(&self.bucket).take(Instant::now()) {
            return Err(format!(
                "too many namespaces missed the cache at once (more than {FETCHES_PER_SECOND} API server reads a second), so this one was not read"
            ));
        }
        let (fetches, source, key) = (self.clone(), source.clone(), name.to_string());
        // Its end waits on the table's lock, so it leaves the table only after it is in it.
        let task = tokio::spawn(async move {
            let result = source.fetch(&key).await;
            lock(&fetches.flights).remove(&key);
            result
        });
        let flight = async move {
            task.await
                .unwrap_or_else(|e| Err(format!("the namespace read failed: {e}")))
        }
        .boxed()
        .shared();
        flights.insert(name.to_string(), flight.clone());
        Ok(flight)
    }
}

/// A token bucket: [`FETCH_BURST`] tokens, refilled at [`FETCHES_PER_SECOND`].
struct Bucket {
    tokens: f64,
    /// When `tokens` was last brought up to date.
    at: Instant,
}

impl Bucket {
    fn take(&mut self, now: Instant) -> bool {
        let refill = now.saturating_duration_since(self.at).as_secs_f64() * FETCHES_PER_SECOND;
        self.tokens = (self.tokens + refill).min(FETCH_BURST);
        self.at = now;
        if self.tokens < 1.0 {
            return false;
        }
        self.tokens -= 1.0;
        true
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

struct Fixed(NamespaceLabels);

impl Source for Fixed {
    fn cached(&self, name: &str) -> Option<Labels> {
        self.0.get(name).cloned()
    }
    fn fetch<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<Option<Labels>, String>> {
        Box::pin(std::future::ready(Ok(self.0.get(name).cloned())))
    }
    fn synced(&self) -> bool {
        true
    }
    fn len(&self) -> usize {
        self.0.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    use std::time::Duration;

    /// A cache with a scripted API behind it.
    #[derive(Default)]
    struct Fake {
        cache: Mutex<NamespaceLabels>,
        api: Mutex<NamespaceLabels>,
        api_down: AtomicBool,
        synced: AtomicBool,
        gets: AtomicUsize,
        /// How long a GET takes.
        latency: Mutex<Duration>,
    }

    impl Source for Fake {
        fn cached(&self, name: &str) -> Option<Labels> {
            self.cache.lock().unwrap().get(name).cloned()
        }
        fn fetch<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<Option<Labels>, String>> {
            self.gets.fetch_add(1, Ordering::SeqCst);
            let result = if self.api_down.load(Ordering::SeqCst) {
                Err("connection refused".to_string())
            } else {
                Ok(self.api.lock().unwrap().get(name).cloned())
            };
            let latency = *self.latency.lock().unwrap();
            Box::pin(async move {
                if !latency.is_zero() {
                    tokio::time::sleep(latency).await;
                }
                result
            })
        }
        fn synced(&self) -> bool {
            self.synced.load(Ordering::SeqCst)
        }
        fn len(&self) -> usize {
            self.cache.lock().unwrap().len()
        }
    }

    fn labels(pool: &str) -> Labels {
        [("agentpool".to_string(), pool.to_string())].into()
    }

    #[tokio::test]
    async fn hit_miss_and_sync_gating() {
        let fake = Arc::new(Fake::default());
        fake.cache
            .lock()
            .unwrap()
            .insert("cached".into(), labels("a"));
        fake.api
            .lock()
            .unwrap()
            .insert("cached".into(), labels("a"));
        fake.api.lock().unwrap().insert("new".into(), labels("b"));
        let ns = Namespaces::new(fake.clone());

        // Before the first listing has synced: not ready, and every lookup asks the API.
        assert!(!ns.ready());
        assert_eq!(ns.labels("cached").await.unwrap(), Some(labels("a")));
        assert_eq!(fake.gets.load(Ordering::SeqCst), 1);

        fake.synced.store(true, Ordering::SeqCst);
        assert!(ns.ready());
        // A hit needs no GET.
        assert_eq!(ns.labels("cached").await.unwrap(), Some(labels("a")));
        assert_eq!(fake.gets.load(Ordering::SeqCst), 1);
        // A miss (created a moment ago) is fetched.
        assert_eq!(ns.labels("new").await.unwrap(), Some(labels("b")));
        assert_eq!(fake.gets.load(Ordering::SeqCst), 2);
        // No such namespace anywhere: no labels.
        assert_eq!(ns.labels("gone").await.unwrap(), None);
    }

    #[tokio::test]
    async fn api_down_still_serves_the_cache_and_reports_misses() {
        let fake = Arc::new(Fake::default());
        fake.cache
            .lock()
            .unwrap()
            .insert("cached".into(), labels("a"));
        fake.synced.store(true, Ordering::SeqCst);
        fake.api_down.store(true, Ordering::SeqCst);
        let ns = Namespaces::new(fake.clone());
        assert_eq!(ns.labels("cached").await.unwrap(), Some(labels("a")));
        let err = ns.labels("new").await.unwrap_err();
        assert!(err.contains("connection refused"), "{err}");
    }

    #[tokio::test]
    async fn fixed_source() {
        let ns = Namespaces::fixed([("a".to_string(), labels("p"))].into());
        assert!(ns.ready());
        assert_eq!(ns.len(), 1);
        assert_eq!(ns.labels("a").await.unwrap(), Some(labels("p")));
        assert_eq!(ns.labels("b").await.unwrap(), None);
    }

    /// Misses of one name while its GET is under way share it; a miss after it ended reads
    /// again (an absent namespace is not remembered: it may be created the next moment).
    #[tokio::test(start_paused = true)]
    async fn concurrent_misses_of_one_name_share_one_get() {
        let fake = Arc::new(Fake::default());
        fake.synced.store(true, Ordering::SeqCst);
        *fake.latency.lock().unwrap() = Duration::from_millis(50);
        let ns = Namespaces::new(fake.clone());
        let lookups = (0..50).map(|_| ns.labels("missing"));
        let answers = futures::future::join_all(lookups).await;
        assert!(answers.iter().all(|a| a == &Ok(None)), "{answers:?}");
        assert_eq!(fake.gets.load(Ordering::SeqCst), 1);

        fake.api
            .lock()
            .unwrap()
            .insert("missing".into(), labels("a"));
        assert_eq!(ns.labels("missing").await, Ok(Some(labels("a"))));
        assert_eq!(fake.gets.load(Ordering::SeqCst), 2);
    }

    /// Misses of many names: GETs start at the rate limit, and the lookups past it fail (their
    /// requests are refused) without reaching the API server.
    #[tokio::test(start_paused = true)]
    async fn misses_beyond_the_rate_limit_fail_without_a_get() {
        let fake = Arc::new(Fake::default());
        fake.synced.store(true, Ordering::SeqCst);
        let ns = Namespaces::new(fake.clone());
        let names: Vec<String> = (0..100).map(|i| format!("ns-{i}")).collect();
        let answers = futures::future::join_all(names.iter().map(|n| ns.labels(n))).await;
        let failed: Vec<&String> = answers.iter().filter_map(|a| a.as_ref().err()).collect();
        assert_eq!(failed.len(), 100 - FETCH_BURST as usize);
        assert!(failed[0].contains("too many namespaces"), "{}", failed[0]);
        assert_eq!(fake.gets.load(Ordering::SeqCst), FETCH_BURST as usize);

        // A second later, a second's worth more.
        tokio::time::advance(Duration::from_secs(1)).await;
        let answers = futures::future::join_all(names.iter().map(|n| ns.labels(n))).await;
        let read = answers.iter().filter(|a| a.is_ok()).count();
        assert_eq!(read, FETCHES_PER_SECOND as usize);
        assert_eq!(
            fake.gets.load(Ordering::SeqCst),
            (FETCH_BURST + FETCHES_PER_SECOND) as usize
        );
    }
}
