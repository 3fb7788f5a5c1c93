//! Where namespace labels come from: a watch cache of the cluster's namespaces with a direct GET
//! on a miss, or a file.

use std::sync::Arc;

use futures::future::BoxFuture;

use poolguard_core::namespaces::NamespaceLabels;
use poolguard_core::placement::Labels;

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

/// The namespace lookups the server makes.
#[derive(Clone)]
pub struct Namespaces {
    source: Arc<dyn Source>,
}

impl Namespaces {
    pub fn new(source: Arc<dyn Source>) -> Namespaces {
        Namespaces { source }
    }

    /// From a fixed map (a namespaces file): always synced, nothing to fetch.
    pub fn fixed(labels: NamespaceLabels) -> Namespaces {
        Namespaces::new(Arc::new(Fixed(labels)))
    }

    /// The labels of `name`. A cache miss (the namespace may have been created a moment ago),
    /// or any lookup before the first listing has synced, goes to the source of truth.
    pub async fn labels(&self, name: &str) -> Result<Option<Labels>, String> {
        if self.source.synced() {
            if let Some(labels) = self.source.cached(name) {
                return Ok(Some(labels));
            }
        }
        self.source.fetch(name).await
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
    use std::sync::Mutex;

    /// A cache with a scripted API behind it.
    #[derive(Default)]
    struct Fake {
        cache: Mutex<NamespaceLabels>,
        api: Mutex<NamespaceLabels>,
        api_down: AtomicBool,
        synced: AtomicBool,
        gets: AtomicUsize,
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
            Box::pin(std::future::ready(result))
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
}
