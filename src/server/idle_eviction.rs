//! At the connection cap, an open connection makes room for a new one.
//!
//! Without it, clients that open connections and then send nothing (or a request now and then)
//! hold every slot, and the API server's next connection waits in the listen backlog until one
//! of them times out: anyone who can reach the Service could stall admission.
//!
//! Which connection goes: only one of the client address holding strictly more connections than
//! every other address (a unique maximum), and never one with a request in flight (a request
//! whose body has stalled does not count: see `connection_activity`). Of those, first the one
//! that has never completed a request (the oldest: a TLS handshake or a request head that does
//! not come), then the one idle the longest. When no address holds more than every other, or
//! that address has nothing to give up, the new connection waits.
//!
//! So an address only ever loses connections down to the count of the next largest holder:
//! a client that opens thousands of connections from one address only competes with itself,
//! and clients spread over many addresses (pods holding one connection each) can never close a
//! connection of an address that holds as many as each of them — the API server keeps at least
//! as many connections as any other single address, and at least one. Breaking a tie by
//! idleness across addresses would let ~60 pods with a connection each close the API server's
//! idle HTTP/2 connection, which races with the next request it writes there (not sent again).
//! The price: such spread-out clients, holding every slot, make new connections wait until one
//! of theirs closes (`--idle-timeout-seconds` when they stay idle); the API server's open
//! connections keep serving meanwhile; with `--client-ca-file` (mTLS) they are not served, and
//! hold a slot only while their TLS handshake may last. Within the one address, Go's HTTP client reuses its most recently used idle
//! connection first, so the API server's idlest connection is also the one it is least likely
//! to pick at that moment.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use tokio::time::Instant;

/// What the table needs of a connection.
pub trait Evictable {
    /// The client's address.
    fn peer(&self) -> IpAddr;
    /// Whether a request has been answered on it.
    fn served(&self) -> bool;
    /// Since when the connection has had nothing in flight (from its accept when nothing has
    /// been); `None` while it has, or once it has been told to close.
    fn idle_since(&self) -> Option<Instant>;
    /// Tells the connection to close.
    fn evict(&self);
    /// Whether it has been told to close (it leaves the table once closed).
    fn evicted(&self) -> bool;
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

    /// Tells one connection to close (see the module's text for which); false when no address
    /// holds more connections than every other, or the one that does has a request in flight
    /// on each.
    pub fn evict_one(&self) -> bool {
        let open = self.lock();
        let mut per_peer: HashMap<IpAddr, usize> = HashMap::new();
        for connection in open.values().filter(|c| !c.evicted()) {
            *per_peer.entry(connection.peer()).or_default() += 1;
        }
        // The address holding the most, unless another holds as many.
        let mut most: Option<(usize, IpAddr)> = None;
        let mut tied = false;
        for (&peer, &n) in &per_peer {
            match most {
                Some((m, _)) if n < m => {}
                Some((m, _)) if n == m => tied = true,
                _ => (most, tied) = (Some((n, peer)), false),
            }
        }
        let Some((_, peer)) = most.filter(|_| !tied) else {
            return false;
        };
        // Never served before served, then the oldest activity.
        let chosen = open
            .values()
            .filter(|c| !c.evicted() && c.peer() == peer)
            .filter_map(|c| Some(((c.served(), c.idle_since()?), c)))
            .min_by_key(|(rank, _)| *rank);
        match chosen {
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
        peer: IpAddr,
        served: bool,
        idle_since: Option<Instant>,
        evicted: AtomicBool,
    }

    impl Evictable for Fake {
        fn peer(&self) -> IpAddr {
            self.peer
        }
        fn served(&self) -> bool {
            self.served
        }
        fn idle_since(&self) -> Option<Instant> {
            self.idle_since
                .filter(|_| !self.evicted.load(Ordering::SeqCst))
        }
        fn evict(&self) {
            self.evicted.store(true, Ordering::SeqCst);
        }
        fn evicted(&self) -> bool {
            self.evicted.load(Ordering::SeqCst)
        }
    }

    /// A connection: its peer, whether it has been served, and since which second it has been
    /// idle (`None`: a request in flight).
    type Connection<'a> = (&'a str, bool, Option<u64>);

    /// Evicts until nothing is left to evict; the order, by index into `fakes`.
    fn order(fakes: &[Connection<'_>]) -> Vec<usize> {
        let t0 = Instant::now();
        let table = Table::new();
        let fakes: Vec<Arc<Fake>> = fakes
            .iter()
            .map(|&(peer, served, idle)| {
                Arc::new(Fake {
                    peer: peer.parse().unwrap(),
                    served,
                    idle_since: idle.map(|s| t0 + Duration::from_secs(s)),
                    evicted: AtomicBool::new(false),
                })
            })
            .collect();
        let entries: Vec<_> = fakes.iter().map(|f| table.insert(f.clone())).collect();
        assert_eq!(table.len(), fakes.len());
        let mut order = Vec::new();
        while table.evict_one() {
            let next = fakes
                .iter()
                .enumerate()
                .find(|(i, f)| f.evicted.load(Ordering::SeqCst) && !order.contains(i))
                .map(|(i, _)| i)
                .expect("an eviction marks one connection");
            order.push(next);
        }
        drop(entries);
        assert_eq!(table.len(), 0);
        order
    }

    #[test]
    fn which_connection_makes_room() {
        const API: &str = "10.0.0.1";
        const OTHER: &str = "10.0.0.2";
        // (peer, served, idle since second; None: a request in flight) -> eviction order
        let cases: Vec<(Vec<Connection>, Vec<usize>)> = vec![
            // One client: never served before served, then the oldest activity; busy never.
            (
                vec![
                    (API, true, Some(1)),
                    (API, false, Some(5)),
                    (API, true, None),
                    (API, false, Some(3)),
                    (API, true, Some(0)),
                ],
                vec![3, 1, 4, 0],
            ),
            // The client with the most connections gives one up, even a recently used one
            // before another client's idlest: 3 against 2; then 2 against 2, a tie: nothing.
            (
                vec![
                    (OTHER, true, Some(9)),
                    (API, true, Some(0)),
                    (OTHER, true, Some(8)),
                    (API, true, Some(1)),
                    (OTHER, false, Some(7)),
                ],
                vec![4],
            ),
            // Only busy connections: nothing.
            (vec![(API, true, None), (OTHER, false, None)], vec![]),
            // The client with the most has only busy connections: the others keep theirs.
            (
                vec![
                    (OTHER, false, None),
                    (API, true, Some(0)),
                    (OTHER, false, None),
                ],
                vec![],
            ),
        ];
        for (fakes, expected) in cases {
            assert_eq!(order(&fakes), expected, "{fakes:?}");
        }
    }

    /// Clients spread over many addresses, one connection each, never close the API server's
    /// connection, however long it has been idle; with two, it gives up one (down to the count
    /// of the next largest holder), and an address with many gives up its own down to that.
    #[test]
    fn spread_clients_never_take_the_api_servers_last_connection() {
        const API: &str = "10.0.0.1";
        let pods: Vec<String> = (0..60).map(|i| format!("10.1.0.{i}")).collect();
        let spread = |api: &[Connection<'static>]| -> Vec<Connection<'_>> {
            let pods = pods.iter().map(|p| (p.as_str(), true, Some(100)));
            api.iter().copied().chain(pods).collect()
        };
        assert_eq!(order(&spread(&[(API, true, Some(0))])), Vec::<usize>::new());
        assert_eq!(
            order(&spread(&[(API, true, Some(5)), (API, true, Some(0))])),
            [1]
        );
        let mut flood = spread(&[(API, true, Some(0))]);
        flood.extend([
            ("10.2.0.1", false, Some(200)),
            ("10.2.0.1", false, Some(201)),
            ("10.2.0.1", false, Some(202)),
        ]);
        assert_eq!(order(&flood), [61, 62]);
    }
}
