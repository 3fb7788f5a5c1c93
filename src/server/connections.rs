//! Accepting connections: a cap on how many are open (an idle one closed to make room),
//! TLS handshakes with the current certificate, HTTP/1.1 and HTTP/2 with their limits, idle connections closed, graceful
//! shutdown, closed connections lingering until the client has closed too.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use anyhow::Result;
use arc_swap::ArcSwap;
use axum::extract::Request;
use axum::http::{header, HeaderValue, Version};
use axum::middleware::Next;
use axum::Router;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto::Builder;
use hyper_util::service::TowerToHyperService;
use rustls::ServerConfig;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;

use super::connection_activity::{Activity, Peer};
use super::idle_eviction::{Evictable, Table};
use super::limits::Limits;

/// Time a client gets to finish the TLS handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
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
/// At the cap with no idle connection to close (or one that turned busy as it was chosen): how
/// soon to look again.
const EVICTION_RETRY: Duration = Duration::from_millis(100);
/// HTTP/2: a PING when the connection has been silent this long, and the time its answer gets
/// before the connection is closed as dead.
const HTTP2_KEEP_ALIVE_INTERVAL: Duration = Duration::from_secs(30);
const HTTP2_KEEP_ALIVE_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a closed connection goes on reading (and discarding) what the client still sends,
/// at most (see [`LingeringStream`]).
const LINGER: Duration = Duration::from_secs(2);

/// Accepts TLS connections on `listener` until `shutdown`, at most `connections`' permits at
/// once, each with the TLS configuration current at its handshake; then waits up to `drain` for
/// in-flight requests to finish.
///
/// On `shutdown` an HTTP/2 connection gets GOAWAY and ends once its streams have been answered.
/// An HTTP/1.1 connection is not closed under the client: a keep-alive connection that the
/// server closes races with the next request the client writes on it, and kube-apiserver (which
/// calls webhooks over HTTP/1.1 only) does not send a POST again, so with `failurePolicy: Fail`
/// that request is refused (`http: server closed idle connection`, `write: broken pipe`; seen
/// under load when a pod was deleted, kubernetes issue 127335). Instead every answer from then
/// on carries `Connection: close`, so the client closes the connection after reading it, and
/// poolguard closes only connections on which no request has come for half the drain time
/// (the longer a connection has been idle, the less likely its client picks it at the moment it
/// closes). The chart's preStop sleep has taken the pod out of the Service's endpoints by then,
/// so the client's next connection goes to another replica.
///
/// At the cap a new connection makes room by closing an idle one (see [`super::idle_eviction`]:
/// the client address holding more connections than every other gives one up; counted in
/// `evicted`); when no address holds more than every other, or that one's connections all have
/// a request in flight, it waits for one to close, and the kernel keeps the connections after it in the
/// listen backlog, so a short burst costs the API server latency instead of failed calls.
#[allow(clippy::too_many_arguments)]
pub async fn serve_tls(
    listener: TcpListener,
    tls: Arc<ArcSwap<ServerConfig>>,
    router: Router,
    shutdown: CancellationToken,
    drain: Duration,
    limits: &Limits,
    connections: Arc<Semaphore>,
    evicted: prometheus_client::metrics::counter::Counter,
) -> Result<()> {
    let builder = Arc::new(http_builder(limits));
    let idle_timeout = limits.idle_timeout;
    let header_timeout = limits.header_timeout;
    let shutdown_idle = drain / 2;
    let table = Table::<Activity>::new();
    'accept: loop {
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
        let permit = loop {
            if let Ok(permit) = connections.clone().try_acquire_owned() {
                break permit;
            }
            if table.evict_one() {
                evicted.inc();
            }
            // The evicted connection frees its permit as it closes; if it turned busy at that
            // moment, or every connection is busy, look again shortly.
            tokio::select! {
                permit = connections.clone().acquire_owned() => break permit?,
                () = tokio::time::sleep(EVICTION_RETRY) => {}
                () = shutdown.cancelled() => break 'accept,
            }
        };
        // Answers are small and written as a few TLS records (HTTP/2: headers, then data);
        // with Nagle's algorithm on, the later ones wait for the client's delayed ACK.
        if let Err(e) = stream.set_nodelay(true) {
            tracing::debug!(%peer, error = %e, "setting TCP_NODELAY failed");
        }
        let acceptor = tokio_rustls::TlsAcceptor::from(tls.load_full());
        let activity = Arc::new(Activity::new(peer.ip()));
        let service = TowerToHyperService::new(router.clone().layer(axum::middleware::from_fn({
            let activity = activity.clone();
            move |request: Request, next: Next| {
                let activity = activity.clone();
                async move {
                    let _busy = activity.begin();
                    let mut request = request.map(|body| activity.track_body(body));
                    request.extensions_mut().insert(Peer(activity.peer()));
                    let http1 = request.version() < Version::HTTP_2;
                    let mut response = next.run(request).await;
                    if http1 && activity.draining() {
                        response
                            .headers_mut()
                            .insert(header::CONNECTION, HeaderValue::from_static("close"));
                    }
                    response
                }
            }
        })));
        let (builder, stop) = (builder.clone(), shutdown.clone());
        // The stream holds the connection's permit until it is closed for good.
        let stream = LingeringStream::new(stream, permit, activity.clone());
        let entry = table.insert(activity.clone());
        tokio::spawn(async move {
            let _entry = entry;
            let handshake = tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream));
            let mut tls_stream = tokio::select! {
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
                () = activity.evicted_signal() => return,
            };
            tls_stream.get_mut().0.linger_on_close();
            let http2 = tls_stream.get_ref().1.alpn_protocol() == Some(b"h2".as_slice());
            if !http2 {
                // The first request's head is due from the handshake on (the bytes that follow
                // the client's handshake may already be read); later ones from their first
                // byte. Without ALPN the client may still speak HTTP/2 (prior knowledge); its
                // frames then count as request heads, which only brings the idle close forward.
                activity.bytes_arrived();
                tls_stream.get_mut().0.report_reads();
            }
            let conn = builder.serve_connection(TokioIo::new(tls_stream), service);
            tokio::pin!(conn);
            let mut closing = false;
            loop {
                let idle = if activity.draining() {
                    shutdown_idle
                } else {
                    idle_timeout
                };
                tokio::select! {
                    ended = conn.as_mut() => {
                        if let Err(e) = ended {
                            tracing::debug!(%peer, error = %e, "connection ended with an error");
                        }
                        break;
                    }
                    () = stop.cancelled(), if !activity.draining() => {
                        activity.start_draining();
                        if http2 {
                            conn.as_mut().graceful_shutdown();
                            closing = true;
                        }
                    }
                    () = activity.idle_for(idle), if !closing => {
                        tracing::debug!(%peer, "closing an idle connection");
                        conn.as_mut().graceful_shutdown();
                        closing = true;
                    }
                    () = activity.head_overdue(header_timeout), if !http2 => {
                        tracing::debug!(%peer, "request head not complete in time; closing");
                        break;
                    }
                    () = activity.evicted_signal(), if !closing => {
                        tracing::debug!(%peer, "closing an idle connection to make room");
                        if activity.nothing_to_deliver() {
                            break;
                        }
                        // A request began as it was chosen: answer it, then close.
                        conn.as_mut().graceful_shutdown();
                        closing = true;
                    }
                }
            }
        });
    }
    drop(listener);
    // Every connection holds a permit until it has closed (lingering included).
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
        // hyper's clock starts whenever it waits for a request head, so it would also close a
        // keep-alive connection that waits for its next request; poolguard's own clock
        // (`Limits::header_timeout`) starts at the head's first byte instead.
        .header_read_timeout(None)
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

/// A client's TCP stream that is not simply closed when dropped.
///
/// A socket closed while bytes from the client wait unread in it, or that receives bytes
/// afterwards, makes the kernel answer with RST, and a client that receives an RST loses what it
/// had not read yet and fails what it writes next (`write: broken pipe`). For HTTP/2 what it
/// loses is the GOAWAY frame naming the last stream poolguard processed, which tells it which
/// requests it may send again on a new connection.
///
/// So once the connection has been served, a dropped stream shuts its write side (FIN), then
/// reads and discards whatever the client still sends until the client closes as well or
/// [`LINGER`] has passed, and only then lets the socket and its connection permit go (shutdown
/// waits for the permits). A stream that never completed its TLS handshake is closed at once,
/// and so is one closed to make room with no request in flight (nothing to deliver; its permit
/// is what the new connection waits for).
struct LingeringStream {
    /// `None` only once dropped.
    inner: Option<TcpStream>,
    permit: Option<OwnedSemaphorePermit>,
    linger: bool,
    activity: Arc<Activity>,
    /// Whether reads that bring bytes are reported to `activity`.
    reads: bool,
}

impl LingeringStream {
    fn new(
        stream: TcpStream,
        permit: OwnedSemaphorePermit,
        activity: Arc<Activity>,
    ) -> LingeringStream {
        LingeringStream {
            inner: Some(stream),
            permit: Some(permit),
            linger: false,
            activity,
            reads: false,
        }
    }

    /// From now on, reads that bring bytes are reported to the connection's activity.
    fn report_reads(&mut self) {
        self.reads = true;
    }

    /// From now on, a drop lingers.
    fn linger_on_close(&mut self) {
        self.linger = true;
    }

    fn stream(&mut self) -> Pin<&mut TcpStream> {
        Pin::new(
            self.inner
                .as_mut()
                .expect("the stream is taken only when dropped"),
        )
    }
}

impl AsyncRead for LingeringStream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let polled = self.stream().poll_read(cx, buf);
        if self.reads && buf.filled().len() > before {
            self.activity.bytes_arrived();
        }
        polled
    }
}

impl AsyncWrite for LingeringStream {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.stream().poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        self.stream().poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.as_ref().is_some_and(|s| s.is_write_vectored())
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.stream().poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.stream().poll_shutdown(cx)
    }
}

impl Drop for LingeringStream {
    fn drop(&mut self) {
        let (Some(stream), permit) = (self.inner.take(), self.permit.take()) else {
            return;
        };
        let evicted_idle = self.activity.evicted() && self.activity.nothing_to_deliver();
        if !self.linger || evicted_idle {
            return;
        }
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                linger(stream).await;
                drop(permit);
            });
        }
    }
}

/// FIN, then read until the client's FIN (or an error) for at most [`LINGER`].
async fn linger(mut stream: TcpStream) {
    // Fails harmlessly when TLS has already shut the write side.
    let _ = stream.shutdown().await;
    let mut sink = [0u8; 4096];
    let _ = tokio::time::timeout(LINGER, async {
        while let Ok(n) = stream.read(&mut sink).await {
            if n == 0 {
                break;
            }
        }
    })
    .await;
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What a client sees when the server writes `GOAWAY`, leaves the client's request unread and
    /// closes: the result of writing one more request after the close (as a client does that
    /// has not read the GOAWAY yet), and then what it reads.
    struct Seen {
        write: io::Result<()>,
        read: io::Result<Vec<u8>>,
        permits: Arc<Semaphore>,
        /// Still open.
        client: TcpStream,
    }

    async fn close_with_unread_request(linger: bool) -> Seen {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let permits = Arc::new(Semaphore::new(1));
        let server = tokio::spawn({
            let permits = permits.clone();
            async move {
                let (stream, _) = listener.accept().await.unwrap();
                let permit = permits.acquire_owned().await.unwrap();
                let mut stream = LingeringStream::new(
                    stream,
                    permit,
                    Arc::new(Activity::new(std::net::IpAddr::from([127, 0, 0, 1]))),
                );
                if linger {
                    stream.linger_on_close();
                }
                stream.write_all(b"GOAWAY").await.unwrap();
                // The client's request arrives and is never read.
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        });
        let mut client = TcpStream::connect(addr).await.unwrap();
        client.write_all(b"a request").await.unwrap();
        server.await.unwrap();
        // Whatever the server's close sent (FIN or RST) has arrived.
        tokio::time::sleep(Duration::from_millis(50)).await;
        let write = client.write_all(b"another request").await;
        tokio::time::sleep(Duration::from_millis(50)).await;
        let mut got = Vec::new();
        let read = client.read_to_end(&mut got).await.map(|_| got);
        Seen {
            write,
            read,
            permits,
            client,
        }
    }

    #[tokio::test]
    async fn a_closed_connection_lingers_so_the_client_reads_everything() {
        let seen = close_with_unread_request(true).await;
        seen.write
            .expect("the request written after the close is taken");
        assert_eq!(seen.read.expect("a clean end, not a reset"), b"GOAWAY");
        assert_eq!(
            seen.permits.available_permits(),
            0,
            "the permit is held while lingering"
        );
        // Once the client closes too, the permit comes back.
        drop(seen.client);
        let _permit = tokio::time::timeout(LINGER, seen.permits.acquire())
            .await
            .expect("the permit is released when the client has closed")
            .unwrap();
    }

    /// Why: closed at once with the request unread, the socket answers with RST, and the next
    /// request the client writes fails (the API server's `write: broken pipe`).
    #[tokio::test]
    async fn without_lingering_the_next_request_fails() {
        let seen = close_with_unread_request(false).await;
        let err = seen.write.expect_err("the kernel reset the connection");
        assert!(
            matches!(
                err.kind(),
                io::ErrorKind::BrokenPipe | io::ErrorKind::ConnectionReset
            ),
            "{err}"
        );
        assert_eq!(seen.permits.available_permits(), 1);
    }
}
