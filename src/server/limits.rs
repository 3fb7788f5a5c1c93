//! The bounds on what clients can make poolguard hold: body sizes and the bytes of all bodies in
//! flight, policy evaluations running and waiting, connections, and the time each may take.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

const MIB: usize = 1024 * 1024;

/// Settings of the limits; [`Limits::default`] is what `serve` uses unless told otherwise.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    /// Largest AdmissionReview accepted (413 above it). The API server stores objects of up to
    /// 1.5 MiB (etcd's request limit, protobuf-encoded) but writes them into reviews as JSON
    /// with HTML characters escaped (`<` becomes `\u003c`, six bytes), and an UPDATE review
    /// carries the object and the old object: measured through kube-apiserver v1.37, a 1.1 MB
    /// Deployment of `<` makes a 13.7 MB UPDATE review, so one at the limit makes about 19 MB.
    pub max_body_bytes: usize,
    /// Bytes of request bodies all requests together may hold at once: a request reserves the
    /// memory of its body as the bytes arrive (a declared `Content-Length` reserves nothing
    /// before the bytes come), and keeps the reservation until it is answered; past the budget
    /// the answer is 503 with `Retry-After`.
    pub body_budget_bytes: usize,
    /// Share of the body budget and of the parse budget that the requests of one client address
    /// may hold at once, in percent; never less than one largest request (`max_body_bytes`, and
    /// `admission::MAX_PARSED_BYTES` of the parse budget). Past it the answer is 429 with
    /// `Retry-After`: a client that reaches the Service cannot take the budget the API server's
    /// requests need.
    pub peer_share_percent: usize,
    /// Slowest a body may arrive, in bytes per second: after a grace of two seconds, every
    /// second must bring this many bytes (or the body's end), else 408; 0 sets no minimum. A
    /// body that stops arriving cannot hold its connection and reservation until `body_timeout`.
    pub body_min_bytes_per_second: usize,
    /// Bytes that all requests' parsed reviews together may take, as
    /// `poolguard_core::admission::Estimate` estimates them (a review takes up to about 30
    /// times its size once parsed). A request reserves its estimate before parsing, waiting at
    /// most until its deadline, and keeps it until it is answered; when it cannot, the answer is
    /// 503 with `Retry-After` and the API server applies the webhook's failure policy. At least
    /// `admission::MAX_PARSED_BYTES`, so that every review accepted alone can be parsed.
    pub parse_budget_bytes: usize,
    /// Time a request's body gets to arrive in full (408 after it).
    pub body_timeout: Duration,
    /// Policy evaluations (validating decisions) running at once. They are CPU-bound, so more
    /// than the CPUs adds no throughput. Default: the CPUs the process may use
    /// ([`evaluation_slots_for`]; a cgroup CPU quota counts, so a pod with `limits.cpu: 2` gets
    /// 2; without a CPU limit the count is the node's). Their memory does not grow with the
    /// slots: an evaluation takes about 50 times its review's size (24 MB for a 470 KB
    /// Deployment), and the request holds its share of `parse_budget_bytes` until it is
    /// answered, so big reviews wait for the budget, not for a slot.
    pub max_evaluations: usize,
    /// Evaluations that may run in place, on the async runtime's worker that received the
    /// request, instead of being handed to the blocking pool (the hand-off costs two thread
    /// wake-ups per request, which on a multi-core machine cost more than a remembered or short
    /// evaluation). Each evaluation is bounded by the deadline (policies' time limits are cut to
    /// it), and at least one worker stays free for the rest (accepting connections, health,
    /// metrics): default [`in_place_evaluations_for`] the CPUs, none on one CPU. Not a flag.
    pub in_place_evaluations: usize,
    /// Validating requests that may wait for an evaluation slot; beyond it, or past the deadline
    /// while waiting, `evaluation.onError` decides. Default: [`queued_evaluations_for`] the slots.
    pub max_queued_evaluations: usize,
    /// Open HTTPS connections (TLS handshakes included). At the cap a new connection closes an
    /// idle one: of the client address holding more connections than every other address, one
    /// that never completed a request, else the idlest (`server::idle_eviction`). When no
    /// address holds more than every other, or that one's connections all have a request in
    /// flight, it waits (and the ones after it in the listen backlog) until one closes.
    pub max_connections: usize,
    /// A connection with no request in flight for this long is closed (HTTP/2: GOAWAY). Longer
    /// than the 90 seconds kube-apiserver keeps an idle connection to a webhook, so that the API
    /// server, not poolguard, closes idle keep-alive connections: a close from poolguard races
    /// with the next request the API server writes on it, which it does not send again.
    pub idle_timeout: Duration,
    /// HTTP/1.1: time a request head gets to arrive in full, counted from its first byte (the
    /// connection's first request: from the TLS handshake). A connection waiting for its next
    /// request is under `idle_timeout` instead.
    pub header_timeout: Duration,
    /// HTTP/2 streams a client may have open on one connection (SETTINGS_MAX_CONCURRENT_STREAMS).
    pub http2_max_concurrent_streams: u32,
}

/// Default evaluation slots for `cpus` usable CPUs (what `available_parallelism` reports: the
/// affinity mask and a cgroup CPU quota, rounded up, count): one per CPU.
pub fn evaluation_slots_for(cpus: usize) -> usize {
    cpus.max(1)
}

/// Default evaluations run in place for `cpus` usable CPUs (the async runtime has one worker
/// per CPU): all workers but one.
pub fn in_place_evaluations_for(cpus: usize) -> usize {
    cpus.saturating_sub(1)
}

/// [`Limits::in_place_evaluations`], and never more than the workers of the async runtime
/// this is made in less one (none on a single-threaded runtime, or outside one).
fn in_place_permits(limits: &Limits) -> usize {
    let workers = tokio::runtime::Handle::try_current().map_or(0, |h| h.metrics().num_workers());
    limits
        .in_place_evaluations
        .min(workers.saturating_sub(1))
        .min(Semaphore::MAX_PERMITS)
}

/// Default places in the wait queue for `slots` evaluation slots: 16 per slot, at least 64, so a
/// burst waits up to about 16 evaluations' time before `evaluation.onError` decides.
pub fn queued_evaluations_for(slots: usize) -> usize {
    slots.saturating_mul(16).max(64)
}

impl Default for Limits {
    fn default() -> Self {
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        let slots = evaluation_slots_for(cpus);
        Limits {
            max_body_bytes: 24 * MIB,
            body_budget_bytes: 32 * MIB,
            peer_share_percent: 50,
            body_min_bytes_per_second: 64 * 1024,
            parse_budget_bytes: 64 * MIB,
            body_timeout: Duration::from_secs(10),
            max_evaluations: slots,
            in_place_evaluations: in_place_evaluations_for(cpus),
            max_queued_evaluations: queued_evaluations_for(slots),
            max_connections: 64,
            idle_timeout: Duration::from_secs(120),
            header_timeout: Duration::from_secs(10),
            http2_max_concurrent_streams: 100,
        }
    }
}

/// The shared counters behind [`Limits`].
pub struct Gates {
    limits: Limits,
    body_budget: Arc<Semaphore>,
    parse_budget: Arc<Semaphore>,
    evaluations: Arc<Semaphore>,
    /// [`Limits::in_place_evaluations`] (possibly none).
    in_place: Arc<Semaphore>,
    in_place_capacity: usize,
    waiting: Arc<AtomicUsize>,
    connections: Arc<Semaphore>,
    /// What each client address holds of the body and parse budgets.
    peers: Arc<PeerTable>,
}

/// Bytes of the body and parse budgets held by the requests of each client address.
#[derive(Default)]
struct PeerTable(Mutex<HashMap<IpAddr, Held>>);

#[derive(Default, Clone, Copy, Debug, PartialEq, Eq)]
struct Held {
    body: usize,
    parse: usize,
}

impl PeerTable {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<IpAddr, Held>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Adds to what `peer` holds if that stays within `share`; what it holds otherwise.
    fn take(&self, peer: IpAddr, body: usize, parse: usize, share: Held) -> Result<(), Held> {
        let mut table = self.lock();
        let held = table.entry(peer).or_default();
        let after = Held {
            body: held.body.saturating_add(body),
            parse: held.parse.saturating_add(parse),
        };
        if (body > 0 && after.body > share.body) || (parse > 0 && after.parse > share.parse) {
            let now = *held;
            if now == Held::default() {
                table.remove(&peer);
            }
            return Err(now);
        }
        *held = after;
        Ok(())
    }

    fn give_back(&self, peer: IpAddr, body: usize, parse: usize) {
        let mut table = self.lock();
        if let Some(held) = table.get_mut(&peer) {
            held.body = held.body.saturating_sub(body);
            held.parse = held.parse.saturating_sub(parse);
            if *held == Held::default() {
                table.remove(&peer);
            }
        }
    }
}

/// Gives parse bytes back to an address's count when dropped.
struct GiveBack<'a>(&'a PeerTable, IpAddr, usize);

impl Drop for GiveBack<'_> {
    fn drop(&mut self) {
        self.0.give_back(self.1, 0, self.2);
    }
}

/// Why a reservation could not grow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Short {
    /// The budget, shared by every client, has not the bytes now.
    Budget,
    /// The client's address would hold more than its share of the budget (`held` now).
    Share { held: usize, share: usize },
}

/// Why a validating request got no evaluation slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NoSlot {
    /// Every slot was taken and the wait queue was full.
    QueueFull { running: usize, waiting: usize },
    /// The deadline passed while waiting.
    Deadline,
}

/// Bytes of the body budget (and, once its parse is estimated, of the parse budget) held by one
/// request; given back when dropped.
pub struct Reservation {
    permit: Option<OwnedSemaphorePermit>,
    parse: Option<OwnedSemaphorePermit>,
    /// The client address the bytes are counted against, with [`Gates`]' table of them.
    peer: Option<(IpAddr, Arc<PeerTable>)>,
}

impl Reservation {
    /// Adds `bytes` to the reservation if the budget has them now and the client's address
    /// stays within its share.
    pub fn grow(&mut self, gates: &Gates, bytes: usize) -> Result<(), Short> {
        if bytes == 0 {
            return Ok(());
        }
        let more = gates.body_permit(bytes).ok_or(Short::Budget)?;
        if let Some((peer, table)) = &self.peer {
            let share = gates.peer_share();
            table
                .take(*peer, bytes, 0, share)
                .map_err(|held| Short::Share {
                    held: held.body,
                    share: share.body,
                })?;
        }
        match (&mut self.permit, more) {
            (Some(held), Some(more)) => held.merge(more),
            (held @ None, more) => *held = more,
            (Some(_), None) => {}
        }
        Ok(())
    }

    pub fn bytes(&self) -> usize {
        self.permit.as_ref().map_or(0, |p| p.num_permits())
    }

    fn parse_bytes(&self) -> usize {
        self.parse.as_ref().map_or(0, |p| p.num_permits())
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        if let Some((peer, table)) = &self.peer {
            table.give_back(*peer, self.bytes(), self.parse_bytes());
        }
    }
}

impl Gates {
    pub fn new(limits: Limits) -> Gates {
        let permits = |n: usize| Arc::new(Semaphore::new(n.clamp(1, Semaphore::MAX_PERMITS)));
        let in_place_capacity = in_place_permits(&limits);
        Gates {
            body_budget: permits(limits.body_budget_bytes),
            parse_budget: permits(limits.parse_budget_bytes),
            evaluations: permits(limits.max_evaluations),
            in_place: Arc::new(Semaphore::new(in_place_capacity)),
            in_place_capacity,
            waiting: Arc::new(AtomicUsize::new(0)),
            connections: permits(limits.max_connections),
            peers: Arc::default(),
            limits,
        }
    }

    /// What one client address may hold of the body and parse budgets
    /// ([`Limits::peer_share_percent`]).
    fn peer_share(&self) -> Held {
        let l = &self.limits;
        let percent = |budget: usize| {
            let share = budget as u128 * l.peer_share_percent.min(100) as u128 / 100;
            share as usize
        };
        Held {
            body: percent(l.body_budget_bytes).max(l.max_body_bytes),
            parse: percent(l.parse_budget_bytes).max(poolguard_core::admission::MAX_PARSED_BYTES),
        }
    }

    /// An empty reservation counted against `peer`'s share, to [`Reservation::grow`] as chunks
    /// arrive; `None` counts against no address.
    pub fn reservation_for(&self, peer: Option<IpAddr>) -> Reservation {
        Reservation {
            permit: None,
            parse: None,
            peer: peer.map(|ip| (ip, self.peers.clone())),
        }
    }

    /// Body bytes held by the requests of `peer` now.
    pub fn body_bytes_held_by(&self, peer: IpAddr) -> usize {
        self.peers.lock().get(&peer).map_or(0, |held| held.body)
    }

    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// An empty reservation, to [`Reservation::grow`] as chunks arrive.
    pub fn nothing_reserved(&self) -> Reservation {
        self.reservation_for(None)
    }

    /// `bytes` of the body budget, if they are free now (no waiting: a request over budget is
    /// answered at once, and its client retries).
    pub fn try_reserve(&self, bytes: usize) -> Option<Reservation> {
        Some(Reservation {
            permit: self.body_permit(bytes)?,
            parse: None,
            peer: None,
        })
    }

    /// `bytes` of the body budget if they are free now (`Some(None)` for none).
    fn body_permit(&self, bytes: usize) -> Option<Option<OwnedSemaphorePermit>> {
        if bytes == 0 {
            return Some(None);
        }
        let n = u32::try_from(bytes).ok()?;
        let permit = self.body_budget.clone().try_acquire_many_owned(n).ok()?;
        Some(Some(permit))
    }

    /// Adds `bytes` of the parse budget to `reservation`, waiting for them until `deadline` at
    /// most (first come, first served). [`Short::Budget`] when they did not come free in time,
    /// or are more than the whole budget; [`Short::Share`] at once when the client's address
    /// would hold more than its share.
    pub async fn reserve_parse(
        &self,
        reservation: &mut Reservation,
        bytes: usize,
        deadline: Instant,
    ) -> Result<(), Short> {
        if bytes == 0 {
            return Ok(());
        }
        let Ok(n) = u32::try_from(bytes) else {
            return Err(Short::Budget);
        };
        if bytes > self.limits.parse_budget_bytes {
            return Err(Short::Budget);
        }
        // The address's count is taken before waiting and given back unless the bytes come,
        // also when the waiting request is abandoned.
        let mut taken = None;
        if let Some((peer, table)) = &reservation.peer {
            let share = self.peer_share();
            table
                .take(*peer, 0, bytes, share)
                .map_err(|held| Short::Share {
                    held: held.parse,
                    share: share.parse,
                })?;
            taken = Some(GiveBack(table, *peer, bytes));
        }
        let wanted = self.parse_budget.clone().acquire_many_owned(n);
        let Ok(Ok(permit)) = tokio::time::timeout_at(deadline, wanted).await else {
            return Err(Short::Budget);
        };
        std::mem::forget(taken);
        match &mut reservation.parse {
            Some(held) => held.merge(permit),
            held @ None => *held = Some(permit),
        }
        Ok(())
    }

    /// Parse-budget bytes held by requests in flight.
    pub fn parse_bytes_reserved(&self) -> usize {
        self.limits
            .parse_budget_bytes
            .saturating_sub(self.parse_budget.available_permits())
    }

    /// Body bytes reserved by requests in flight.
    pub fn body_bytes_reserved(&self) -> usize {
        self.limits
            .body_budget_bytes
            .saturating_sub(self.body_budget.available_permits())
    }

    /// How many evaluations may run in place at once ([`in_place_permits`]).
    pub fn in_place_capacity(&self) -> usize {
        self.in_place_capacity
    }

    /// Leave to run an evaluation (that already holds its slot) in place, on this worker, while
    /// the permit is held; none when [`Limits::in_place_evaluations`] run already.
    pub fn in_place(&self) -> Option<OwnedSemaphorePermit> {
        self.in_place.clone().try_acquire_owned().ok()
    }

    /// An evaluation slot, waiting in the bounded queue until `deadline` at most. The slot is
    /// held until the permit is dropped, which the evaluation does when its work has stopped.
    pub async fn evaluation_slot(&self, deadline: Instant) -> Result<OwnedSemaphorePermit, NoSlot> {
        if let Ok(permit) = self.evaluations.clone().try_acquire_owned() {
            return Ok(permit);
        }
        let queued = self.waiting.fetch_add(1, Ordering::SeqCst);
        let _leave = Leave(&self.waiting);
        if queued >= self.limits.max_queued_evaluations {
            return Err(NoSlot::QueueFull {
                running: self.evaluations_running(),
                waiting: queued,
            });
        }
        match tokio::time::timeout_at(deadline, self.evaluations.clone().acquire_owned()).await {
            Ok(Ok(permit)) => Ok(permit),
            _ => Err(NoSlot::Deadline),
        }
    }

    pub fn evaluations_running(&self) -> usize {
        self.limits
            .max_evaluations
            .saturating_sub(self.evaluations.available_permits())
    }

    pub fn evaluations_waiting(&self) -> usize {
        self.waiting.load(Ordering::SeqCst)
    }

    /// The connection cap, for the accept loop.
    pub fn connections(&self) -> Arc<Semaphore> {
        self.connections.clone()
    }

    pub fn connections_open(&self) -> usize {
        self.limits
            .max_connections
            .saturating_sub(self.connections.available_permits())
    }
}

/// Leaves the wait queue when dropped (also when the waiting request is abandoned).
struct Leave<'a>(&'a AtomicUsize);

impl Drop for Leave<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn small() -> Limits {
        Limits {
            body_budget_bytes: 100,
            max_evaluations: 1,
            max_queued_evaluations: 1,
            ..Limits::default()
        }
    }

    #[test]
    fn slots_follow_the_cpus_and_the_queue_the_slots() {
        let table = [
            (0, 1, 64),
            (1, 1, 64),
            (2, 2, 64),
            (4, 4, 64),
            (8, 8, 128),
            (64, 64, 1024),
        ];
        for (cpus, slots, queue) in table {
            assert_eq!(evaluation_slots_for(cpus), slots, "{cpus} CPUs");
            assert_eq!(
                in_place_evaluations_for(cpus),
                cpus.saturating_sub(1),
                "{cpus} CPUs"
            );
            assert_eq!(queued_evaluations_for(slots), queue, "{slots} slots");
        }
        assert_eq!(queued_evaluations_for(usize::MAX), usize::MAX);
        let cpus = std::thread::available_parallelism().unwrap().get();
        assert_eq!(Limits::default().max_evaluations, cpus);
    }

    #[test]
    fn the_body_budget_is_shared_and_given_back() {
        let gates = Gates::new(small());
        let a = gates.try_reserve(60).unwrap();
        assert!(gates.try_reserve(41).is_none());
        let mut b = gates.try_reserve(40).unwrap();
        assert_eq!(gates.body_bytes_reserved(), 100);
        assert_eq!(b.grow(&gates, 1), Err(Short::Budget));
        drop(a);
        assert!(b.grow(&gates, 10).is_ok());
        assert_eq!(b.bytes(), 50);
        let mut c = gates.nothing_reserved();
        assert!(c.grow(&gates, 50).is_ok());
        assert_eq!(gates.body_bytes_reserved(), 100);
        drop((b, c));
        assert_eq!(gates.body_bytes_reserved(), 0);
        assert!(gates.try_reserve(usize::MAX).is_none());
    }

    #[tokio::test]
    async fn the_parse_budget_is_shared_waited_for_until_the_deadline_and_given_back() {
        let gates = Gates::new(Limits {
            parse_budget_bytes: 100,
            ..small()
        });
        let soon = || Instant::now() + Duration::from_millis(50);
        let mut a = gates.nothing_reserved();
        assert!(gates.reserve_parse(&mut a, 70, soon()).await.is_ok());
        assert_eq!(gates.parse_bytes_reserved(), 70);
        // Another request's estimate does not fit beside it: refused at its deadline.
        let mut b = gates.nothing_reserved();
        assert_eq!(
            gates.reserve_parse(&mut b, 40, soon()).await,
            Err(Short::Budget)
        );
        assert_eq!(gates.parse_bytes_reserved(), 70);
        // More than the whole budget is refused at once, not waited for.
        let far = Instant::now() + Duration::from_secs(30);
        assert_eq!(
            gates.reserve_parse(&mut b, 101, far).await,
            Err(Short::Budget)
        );
        // Waiting, it gets the bytes as soon as the first request is answered.
        let (got, ()) = tokio::join!(gates.reserve_parse(&mut b, 40, far), async {
            tokio::task::yield_now().await;
            drop(a);
        });
        assert!(got.is_ok());
        assert_eq!(gates.parse_bytes_reserved(), 40);
        drop(b);
        assert_eq!(gates.parse_bytes_reserved(), 0);
    }

    #[tokio::test]
    async fn one_address_holds_at_most_its_share_of_the_parse_budget() {
        let max = poolguard_core::admission::MAX_PARSED_BYTES;
        let gates = Gates::new(Limits {
            parse_budget_bytes: 4 * max,
            peer_share_percent: 50,
            ..small()
        });
        let far = || Instant::now() + Duration::from_secs(30);
        let (a, b): (IpAddr, IpAddr) = ("10.0.0.7".parse().unwrap(), "10.0.0.8".parse().unwrap());
        let mut first = gates.reservation_for(Some(a));
        assert!(gates
            .reserve_parse(&mut first, 2 * max, far())
            .await
            .is_ok());
        // Past its share, refused at once (not waited for), and the count stays as it was.
        let mut second = gates.reservation_for(Some(a));
        assert_eq!(
            gates.reserve_parse(&mut second, 1, far()).await,
            Err(Short::Share {
                held: 2 * max,
                share: 2 * max
            })
        );
        // Another address has the rest; an abandoned wait gives its count back.
        let mut other = gates.reservation_for(Some(b));
        assert!(gates
            .reserve_parse(&mut other, 2 * max, far())
            .await
            .is_ok());
        let mut waiting = gates.reservation_for(Some(b));
        let soon = Instant::now() + Duration::from_millis(20);
        assert_eq!(
            gates.reserve_parse(&mut waiting, 1, soon).await,
            Err(Short::Share {
                held: 2 * max,
                share: 2 * max
            })
        );
        drop(other);
        let c: IpAddr = "10.0.0.9".parse().unwrap();
        let mut third = gates.reservation_for(Some(c));
        assert!(gates
            .reserve_parse(&mut third, 2 * max, far())
            .await
            .is_ok());
        let abandoned = tokio::time::timeout(
            Duration::from_millis(20),
            gates.reserve_parse(&mut waiting, 2 * max, far()),
        )
        .await;
        assert!(abandoned.is_err(), "the budget is full");
        assert!(!gates.peers.lock().contains_key(&b));
        drop((first, third));
        assert!(gates
            .reserve_parse(&mut waiting, 2 * max, far())
            .await
            .is_ok());
        drop(waiting);
        assert_eq!(gates.parse_bytes_reserved(), 0);
        assert!(gates.peers.lock().is_empty());
    }

    #[tokio::test]
    async fn evaluation_slots_queue_up_to_the_bound_and_the_deadline() {
        let gates = Gates::new(small());
        let soon = || Instant::now() + Duration::from_millis(50);
        let held = gates.evaluation_slot(soon()).await.unwrap();
        assert_eq!(gates.evaluations_running(), 1);
        // One may wait; it gives up at its deadline.
        assert_eq!(
            gates.evaluation_slot(soon()).await.unwrap_err(),
            NoSlot::Deadline
        );
        assert_eq!(gates.evaluations_waiting(), 0);
        // With the queue full, the next is turned away at once.
        let far = Instant::now() + Duration::from_secs(30);
        let (waiter, refused) = tokio::join!(gates.evaluation_slot(far), async {
            tokio::task::yield_now().await;
            let refused = gates.evaluation_slot(far).await;
            drop(held);
            refused
        });
        assert_eq!(
            refused.unwrap_err(),
            NoSlot::QueueFull {
                running: 1,
                waiting: 1
            }
        );
        assert!(waiter.is_ok(), "the waiter gets the slot once it is free");
    }
}
