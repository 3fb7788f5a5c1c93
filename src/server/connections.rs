//! Accepting connections: a cap on how many are open, TLS handshakes with the current
//! certificate, HTTP/1.1 and HTTP/2 with their limits, idle connections closed, graceful
//! shutdown.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Result;
use arc_swap::ArcSwap;
use axum::extract::Request;
use axum::middleware::Next;
use axum::Router;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto::Builder;
use hyper_util::service::TowerToHyperService;
use rustls::ServerConfig;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::limits::Limits;

/// Time a client gets to finish the TLS handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// HTTP/1.1: time a client gets to send a request's headers. hyper starts this clock whenever
/// it waits for a request head, so it also closes keep-alive connections left unused this long.
const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// HTTP/1.1: largest read buffer, which bounds the request head.
const HTTP1_MAX_BUFFER: usize = 64 * 1024;
/// HTTP/2 flow control: what a client may send ahead of poolguard reading it, per stream and
/// per connection. Bodies are read as they arrive (and counted in the body budget); these bound
/// what waits unread.
const HTTP2_STREAM_WINDOW: u32 = 256 * 1024;
const HTTP2_CONNECTION_WINDOW: u32 = 1024 * 1024;
/// HTTP/2: largest header block (SETTINGS_MAX_HEADER_LIST_SIZE).
const HTTP2_MAX_HEADER_LIST: u32 = 32 * 1024;
/// HTTP/2: streams a client may open and reset before poolguard has accepted them (the "rapid
/// reset" attack); past it the connection ends with GOAWAY(ENHANCE_YOUR_CALM).
const HTTP2_MAX_PENDING_RESETS: usize = 20;
/// HTTP/2: streams poolguard may have to reset for the client's protocol errors before it ends
/// the connection.
const HTTP2_MAX_ERROR_RESETS: usize = 100;
/// HTTP/2: a PING when the connection has been silent this long, and the time its answer gets
/// before the connection is closed as dead.
const HTTP2_KEEP_ALIVE_INTERVAL: Duration = Duration::from_secs(30);
const HTTP2_KEEP_ALIVE_TIMEOUT: Duration = Duration::from_secs(10);

/// Accepts TLS connections on `listener` until `shutdown`, at most `connections`' permits at
/// once, each with the TLS configuration current at its handshake; then waits up to `drain` for
/// in-flight requests to finish.
///
/// At the cap the loop stops accepting rather than accepting and closing: the kernel keeps new
/// connections in the listen backlog, and each is served as soon as an open one closes, so a
/// short burst costs the API server latency instead of failed calls.
pub async fn serve_tls(
    listener: TcpListener,
    tls: Arc<ArcSwap<ServerConfig>>,
    router: Router,
    shutdown: CancellationToken,
    drain: Duration,
    limits: &Limits,
    connections: Arc<Semaphore>,
) -> Result<()> {
    let builder = Arc::new(http_builder(limits));
    let idle_timeout = limits.idle_timeout;
    loop {
        let permit = tokio::select! {
            permit = connections.clone().acquire_owned() => permit?,
            () = shutdown.cancelled() => break,
        };
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(conn) => conn,
                Err(e) => {
                    tracing::warn!(error = %e, "accepting a connection failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = shutdown.cancelled() => break,
        };
        // Answers are small and written as a few TLS records (HTTP/2: headers, then data);
        // with Nagle's algorithm on, the later ones wait for the client's delayed ACK.
        if let Err(e) = stream.set_nodelay(true) {
            tracing::debug!(%peer, error = %e, "setting TCP_NODELAY failed");
        }
        let acceptor = tokio_rustls::TlsAcceptor::from(tls.load_full());
        let activity = Arc::new(Activity::new());
        let service = TowerToHyperService::new(router.clone().layer(axum::middleware::from_fn({
            let activity = activity.clone();
            move |request: Request, next: Next| {
                let activity = activity.clone();
                async move {
                    let _busy = activity.begin();
                    next.run(request).await
                }
            }
        })));
        let (builder, stop) = (builder.clone(), shutdown.clone());
        tokio::spawn(async move {
            let _permit = permit;
            let handshake = tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream));
            let tls_stream = tokio::select! {
                done = handshake => match done {
                    Ok(Ok(s)) => s,
                    Ok(Err(e)) => {
                        tracing::debug!(%peer, error = %e, "TLS handshake failed");
                        return;
                    }
                    Err(_) => {
                        tracing::debug!(%peer, "TLS handshake timed out");
                        return;
                    }
                },
                // Shutting down: a connection with no request yet is not waited for.
                () = stop.cancelled() => return,
            };
            let conn = builder.serve_connection(TokioIo::new(tls_stream), service);
            tokio::pin!(conn);
            let mut closing = false;
            loop {
                tokio::select! {
                    ended = conn.as_mut() => {
                        if let Err(e) = ended {
                            tracing::debug!(%peer, error = %e, "connection ended with an error");
                        }
                        break;
                    }
                    () = stop.cancelled(), if !closing => {
                        conn.as_mut().graceful_shutdown();
                        closing = true;
                    }
                    () = activity.idle_for(idle_timeout), if !closing => {
                        tracing::debug!(%peer, "closing an idle connection");
                        conn.as_mut().graceful_shutdown();
                        closing = true;
                    }
                }
            }
        });
    }
    drop(listener);
    // Every connection holds a permit until it has closed.
    let all = u32::try_from(limits.max_connections.max(1)).unwrap_or(u32::MAX);
    tokio::select! {
        _ = connections.acquire_many(all) => tracing::info!("all connections closed"),
        () = tokio::time::sleep(drain) => tracing::warn!(seconds = drain.as_secs(), "connections still open after the drain time; exiting"),
    }
    Ok(())
}

/// HTTP/1.1 and HTTP/2 (by ALPN or preface) with poolguard's limits.
fn http_builder(limits: &Limits) -> Builder<TokioExecutor> {
    let mut builder = Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_READ_TIMEOUT)
        .max_buf_size(HTTP1_MAX_BUFFER);
    builder
        .http2()
        .timer(TokioTimer::new())
        .max_concurrent_streams(limits.http2_max_concurrent_streams)
        .initial_stream_window_size(HTTP2_STREAM_WINDOW)
        .initial_connection_window_size(HTTP2_CONNECTION_WINDOW)
        .adaptive_window(false)
        .max_header_list_size(HTTP2_MAX_HEADER_LIST)
        .max_pending_accept_reset_streams(HTTP2_MAX_PENDING_RESETS)
        .max_local_error_reset_streams(HTTP2_MAX_ERROR_RESETS)
        .keep_alive_interval(HTTP2_KEEP_ALIVE_INTERVAL)
        .keep_alive_timeout(HTTP2_KEEP_ALIVE_TIMEOUT);
    builder
}

/// Requests in flight on one connection, and when the last one ended.
struct Activity {
    in_flight: AtomicUsize,
    last: Mutex<Instant>,
}

/// One request in flight; ends when dropped (its answer is ready).
struct Busy<'a>(&'a Activity);

impl Activity {
    fn new() -> Activity {
        Activity {
            in_flight: AtomicUsize::new(0),
            last: Mutex::new(Instant::now()),
        }
    }

    fn begin(&self) -> Busy<'_> {
        self.in_flight.fetch_add(1, Ordering::SeqCst);
        Busy(self)
    }

    fn last(&self) -> Instant {
        *self.last.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Returns once no request has been in flight for `idle`.
    async fn idle_for(&self, idle: Duration) {
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

impl Drop for Busy<'_> {
    fn drop(&mut self) {
        *self.0.last.lock().unwrap_or_else(|e| e.into_inner()) = Instant::now();
        self.0.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}
