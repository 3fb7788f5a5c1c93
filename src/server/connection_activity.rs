//! What is happening on one connection: requests in flight (and whether their bodies are still
//! arriving), when the last one ended, a request head on the way (HTTP/1.1), shutdown, and
//! whether it has been chosen to make room at the connection cap.

use std::net::IpAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Body;
use axum::body::Bytes;
use http_body::{Frame, SizeHint};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::idle_eviction::Evictable;

/// A request whose body has been arriving this long without its end counts as stalled: the
/// connection may be chosen to make room at the cap (the API server sends a body at once).
pub const STALLED_BODY: Duration = Duration::from_secs(1);

/// Requests in flight on one connection, when the last one ended, when the first bytes of the
/// next one arrived (HTTP/1.1), and whether poolguard is shutting down.
pub struct Activity {
    in_flight: AtomicUsize,
    last: Mutex<Instant>,
    head_since: Mutex<Option<Instant>>,
    draining: AtomicBool,
    /// Cancelled when the connection is chosen to make room at the cap.
    evict: CancellationToken,
    peer: IpAddr,
    /// A request has been answered.
    served: AtomicBool,
    /// Requests in flight whose bodies have not arrived in full, and since when (the first).
    receiving: AtomicUsize,
    receiving_since: Mutex<Option<Instant>>,
}

/// The client address a request came from: a request extension, set for every request of a
/// connection, by which the budgets count what each address holds.
#[derive(Debug, Clone, Copy)]
pub struct Peer(pub IpAddr);

/// One request in flight; ends when dropped (its answer is ready).
pub struct Busy<'a>(&'a Activity);

impl Activity {
    pub fn new(peer: IpAddr) -> Activity {
        Activity {
            in_flight: AtomicUsize::new(0),
            last: Mutex::new(Instant::now()),
            head_since: Mutex::new(None),
            draining: AtomicBool::new(false),
            evict: CancellationToken::new(),
            peer,
            served: AtomicBool::new(false),
            receiving: AtomicUsize::new(0),
            receiving_since: Mutex::new(None),
        }
    }

    /// Bytes came from the client: with no request in flight they begin the next request head.
    pub fn bytes_arrived(&self) {
        if self.in_flight.load(Ordering::SeqCst) == 0 {
            let mut since = self.head_since.lock().unwrap_or_else(|e| e.into_inner());
            since.get_or_insert_with(Instant::now);
        }
    }

    /// Returns once a request head has been arriving for `limit` without being complete.
    pub async fn head_overdue(&self, limit: Duration) {
        let step = (limit / 4).max(Duration::from_millis(10));
        loop {
            let since = *self.head_since.lock().unwrap_or_else(|e| e.into_inner());
            let now = Instant::now();
            let wake = match since {
                Some(at) if now >= at + limit => return,
                Some(at) => at + limit,
                None => now + step,
            };
            tokio::time::sleep_until(wake).await;
        }
    }

    pub fn draining(&self) -> bool {
        self.draining.load(Ordering::SeqCst)
    }

    pub fn start_draining(&self) {
        self.draining.store(true, Ordering::SeqCst);
    }

    /// A request's head has arrived in full and its handling begins.
    pub fn begin(&self) -> Busy<'_> {
        self.in_flight.fetch_add(1, Ordering::SeqCst);
        *self.head_since.lock().unwrap_or_else(|e| e.into_inner()) = None;
        Busy(self)
    }

    /// `body` of a request begun on this connection, telling the connection when it has
    /// arrived in full (or is dropped unread).
    pub fn track_body(self: &Arc<Self>, body: Body) -> Body {
        if self.receiving.fetch_add(1, Ordering::SeqCst) == 0 {
            *self
                .receiving_since
                .lock()
                .unwrap_or_else(|e| e.into_inner()) = Some(Instant::now());
        }
        Body::new(TrackedBody {
            inner: body,
            activity: Some(self.clone()),
        })
    }

    /// Returns once the connection has been chosen to make room.
    pub async fn evicted_signal(&self) {
        self.evict.cancelled().await
    }

    fn body_done(&self) {
        if self.receiving.fetch_sub(1, Ordering::SeqCst) == 1 {
            *self
                .receiving_since
                .lock()
                .unwrap_or_else(|e| e.into_inner()) = None;
        }
    }

    /// Whether every request in flight is waiting for a body that has stalled (or none is in
    /// flight): nothing would be lost by closing now but requests that cannot finish anyway.
    pub fn nothing_to_deliver(&self) -> bool {
        let in_flight = self.in_flight.load(Ordering::SeqCst);
        in_flight == 0 || self.stalled_since().is_some()
    }

    /// Since when every request in flight has been waiting for its body, if for longer than
    /// [`STALLED_BODY`].
    fn stalled_since(&self) -> Option<Instant> {
        let in_flight = self.in_flight.load(Ordering::SeqCst);
        if in_flight == 0 || self.receiving.load(Ordering::SeqCst) < in_flight {
            return None;
        }
        let since = (*self
            .receiving_since
            .lock()
            .unwrap_or_else(|e| e.into_inner()))?;
        (since.elapsed() >= STALLED_BODY).then_some(since)
    }

    pub fn last(&self) -> Instant {
        *self.last.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Returns once no request has been in flight for `idle`.
    pub async fn idle_for(&self, idle: Duration) {
        loop {
            let now = Instant::now();
            let wake = if self.in_flight.load(Ordering::SeqCst) == 0 {
                let at = self.last() + idle;
                if now >= at {
                    return;
                }
                at
            } else {
                now + (idle / 4).max(Duration::from_millis(10))
            };
            tokio::time::sleep_until(wake).await;
        }
    }
}

impl Evictable for Activity {
    fn peer(&self) -> IpAddr {
        self.peer
    }

    fn served(&self) -> bool {
        self.served.load(Ordering::SeqCst)
    }

    /// Idle from the accept (TLS handshake and a request head on the way count as idle: a
    /// well-behaved client sends them at once) or the end of the last request; a connection
    /// whose requests all wait for stalled bodies counts as idle since they began.
    fn idle_since(&self) -> Option<Instant> {
        if self.evict.is_cancelled() {
            return None;
        }
        if self.in_flight.load(Ordering::SeqCst) == 0 {
            return Some(self.last());
        }
        self.stalled_since()
    }

    fn evict(&self) {
        self.evict.cancel();
    }

    fn evicted(&self) -> bool {
        self.evict.is_cancelled()
    }
}

impl Drop for Busy<'_> {
    fn drop(&mut self) {
        self.0.served.store(true, Ordering::SeqCst);
        *self.0.last.lock().unwrap_or_else(|e| e.into_inner()) = Instant::now();
        self.0.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A request body that tells its connection when it has arrived in full or is dropped.
struct TrackedBody {
    inner: Body,
    /// Taken when the connection has been told.
    activity: Option<Arc<Activity>>,
}

impl TrackedBody {
    fn done(&mut self) {
        if let Some(activity) = self.activity.take() {
            activity.body_done();
        }
    }
}

impl http_body::Body for TrackedBody {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        if matches!(polled, Poll::Ready(None) | Poll::Ready(Some(Err(_))))
            || self.inner.is_end_stream()
        {
            self.done();
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

impl Drop for TrackedBody {
    fn drop(&mut self) {
        self.done();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_connection_waiting_for_a_stalled_body_is_idle_for_eviction() {
        let activity = Arc::new(Activity::new(IpAddr::from([127, 0, 0, 1])));
        let accepted = Instant::now();
        assert_eq!(
            activity.idle_since(),
            Some(accepted),
            "nothing yet: idle from the accept"
        );
        let busy = activity.begin();
        let (sender, chunks) = futures::channel::mpsc::unbounded::<Result<Bytes, std::io::Error>>();
        let body = activity.track_body(Body::from_stream(chunks));
        assert_eq!(
            activity.idle_since(),
            None,
            "a body just begun is not stalled"
        );
        assert!(!activity.nothing_to_deliver());
        tokio::time::advance(STALLED_BODY).await;
        let stalled = activity.idle_since().expect("stalled after STALLED_BODY");
        assert!(stalled <= Instant::now() - STALLED_BODY);
        assert!(activity.nothing_to_deliver());
        // The body arrives: the request is being answered, not idle.
        drop(sender);
        let bytes = axum::body::to_bytes(body, 1024).await.unwrap();
        assert_eq!(&bytes[..], b"");
        assert_eq!(activity.idle_since(), None);
        assert!(!activity.nothing_to_deliver());
        drop(busy);
        assert_eq!(activity.idle_since(), Some(Instant::now()));
        activity.evict();
        assert_eq!(
            activity.idle_since(),
            None,
            "told to close: not chosen again"
        );
    }
}
