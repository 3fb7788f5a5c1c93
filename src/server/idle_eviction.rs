//! At the connection cap, the open connection idle the longest makes room for a new one.
//!
//! Without it, clients that open connections and then send nothing (or a request now and then)
//! hold every slot, and the API server's next connection waits in the listen backlog until one
//! of them times out: anyone who can reach the Service could stall admission. A connection with
//! a request in flight is never chosen; among the others the one with the oldest activity goes
//! (a connection still in its TLS handshake counts from its accept). Go's HTTP client reuses its
//! most recently used idle connection first, so the API server's idlest connection is also the
//! one it is least likely to pick at that moment.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use tokio::time::Instant;

/// What the table needs of a connection.
pub trait Evictable {
    /// Since when the connection has had nothing in flight; `None` while it has (or when it has
    /// already been told to close).
    fn idle_since(&self) -> Option<Instant>;
    /// Tells the connection to close.
    fn evict(&self);
}

/// The open connections, by an id of their own.
pub struct Table<T> {
    next: AtomicU64,
    open: Mutex<HashMap<u64, Arc<T>>>,
}

/// A connection's place in the table; it leaves the table when dropped.
pub struct Entry<T: Evictable> {
    table: Arc<Table<T>>,
    id: u64,
}

impl<T: Evictable> Table<T> {
    pub fn new() -> Arc<Table<T>> {
        Arc::new(Table {
            next: AtomicU64::new(0),
            open: Mutex::new(HashMap::new()),
        })
    }

    pub fn insert(self: &Arc<Self>, connection: Arc<T>) -> Entry<T> {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        self.lock().insert(id, connection);
        Entry {
            table: self.clone(),
            id,
        }
    }

    /// Tells the connection idle the longest to close; false when every connection is busy.
    pub fn evict_idlest(&self) -> bool {
        let open = self.lock();
        let idlest = open
            .values()
            .filter_map(|c| c.idle_since().map(|since| (since, c)))
            .min_by_key(|(since, _)| *since);
        match idlest {
            Some((_, connection)) => {
                connection.evict();
                true
            }
            None => false,
        }
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.lock().len()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Arc<T>>> {
        self.open.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl<T: Evictable> Drop for Entry<T> {
    fn drop(&mut self) {
        self.table.lock().remove(&self.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicBool;
    use std::time::Duration;

    struct Fake {
        idle_since: Option<Instant>,
        evicted: AtomicBool,
    }

    impl Evictable for Fake {
        fn idle_since(&self) -> Option<Instant> {
            self.idle_since
                .filter(|_| !self.evicted.load(Ordering::SeqCst))
        }
        fn evict(&self) {
            self.evicted.store(true, Ordering::SeqCst);
        }
    }

    #[test]
    fn the_idlest_connection_goes_and_busy_ones_never() {
        let t0 = Instant::now();
        let at = |secs: u64| Some(t0 + Duration::from_secs(secs));
        // Idle since second 5, busy, since second 1, since second 3, busy.
        let table = Table::new();
        let fakes: Vec<Arc<Fake>> = [at(5), None, at(1), at(3), None]
            .into_iter()
            .map(|idle_since| {
                Arc::new(Fake {
                    idle_since,
                    evicted: AtomicBool::new(false),
                })
            })
            .collect();
        let entries: Vec<_> = fakes.iter().map(|f| table.insert(f.clone())).collect();
        let evicted = |f: &Fake| f.evicted.load(Ordering::SeqCst);
        let order = [2, 3, 0];
        for n in 0..order.len() {
            assert!(table.evict_idlest());
            for (i, fake) in fakes.iter().enumerate() {
                assert_eq!(
                    evicted(fake),
                    order[..=n].contains(&i),
                    "step {n}, fake {i}"
                );
            }
        }
        assert!(!table.evict_idlest(), "only busy connections are left");
        assert_eq!(table.len(), 5);
        drop(entries);
        assert_eq!(table.len(), 0);
        assert!(!table.evict_idlest());
    }
}
