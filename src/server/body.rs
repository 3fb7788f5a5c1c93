//! Reading request bodies within the limits, and answering without reading them.

use std::convert::Infallible;
use std::fmt;
use std::net::IpAddr;
use std::task::Poll;
use std::time::Duration;

use axum::body::{Body, BodyDataStream, Bytes};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode, Version};
use axum::response::{IntoResponse, Response};
use futures::StreamExt;

use super::limits::{Gates, Reservation, Short};

/// How often a body's arrival rate is checked ([`super::limits::Limits::body_min_bytes_per_second`]),
/// and the grace before the first check.
const RATE_WINDOW: Duration = Duration::from_secs(1);
const RATE_GRACE: Duration = Duration::from_secs(2);

/// The first allocation for a body, and the least it grows by.
const FIRST_CAPACITY: usize = 16 * 1024;

/// A body read in full, with the budget it holds until the request is answered.
pub struct Received {
    pub bytes: Bytes,
    pub reservation: Reservation,
}

/// Why a body was not read; each is answered with its status and a one-line reason.
#[derive(Debug)]
pub enum Refusal {
    /// Declared (`Content-Length`) or found while reading to be over the limit.
    TooLarge { bytes: u64, limit: usize },
    /// Not complete within the body timeout.
    TimedOut { received: usize, within: Duration },
    /// Arriving slower than the minimum rate: fewer than `rate` bytes in a second.
    TooSlow { received: usize, rate: usize },
    /// The client's address holds its share of a budget (`body` or `parse`) already.
    OverShare {
        budget: &'static str,
        bytes: u64,
        held: usize,
        share: usize,
    },
    /// The body budget cannot hold it now.
    OverBudget {
        bytes: u64,
        reserved: usize,
        budget: usize,
    },
    /// The parse budget could not hold the review's parsed estimate before its deadline.
    ParseOverBudget {
        bytes: u64,
        estimate: usize,
        reserved: usize,
        budget: usize,
    },
    /// The client's stream failed (reset, malformed chunk).
    Broken(String),
}

impl Refusal {
    pub fn status(&self) -> StatusCode {
        match self {
            Refusal::TooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            Refusal::TimedOut { .. } | Refusal::TooSlow { .. } => StatusCode::REQUEST_TIMEOUT,
            Refusal::OverShare { .. } => StatusCode::TOO_MANY_REQUESTS,
            Refusal::OverBudget { .. } | Refusal::ParseOverBudget { .. } => {
                StatusCode::SERVICE_UNAVAILABLE
            }
            Refusal::Broken(_) => StatusCode::BAD_REQUEST,
        }
    }

    /// The body's size as far as known: declared or read so far.
    pub fn bytes(&self) -> Option<u64> {
        match self {
            Refusal::TooLarge { bytes, .. }
            | Refusal::OverBudget { bytes, .. }
            | Refusal::ParseOverBudget { bytes, .. }
            | Refusal::OverShare { bytes, .. } => Some(*bytes),
            Refusal::TimedOut { received, .. } | Refusal::TooSlow { received, .. } => {
                Some(*received as u64)
            }
            Refusal::Broken(_) => None,
        }
    }

    /// The `decision` label of the requests metric.
    pub fn decision(&self) -> &'static str {
        match self {
            Refusal::TooLarge { .. } => "too_large",
            Refusal::TimedOut { .. } | Refusal::TooSlow { .. } => "body_timeout",
            Refusal::OverBudget { .. }
            | Refusal::ParseOverBudget { .. }
            | Refusal::OverShare { .. } => "overloaded",
            Refusal::Broken(_) => "invalid",
        }
    }
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refusal::TooLarge { bytes, limit } => write!(
                f,
                "request body too large: {bytes} bytes, the limit is {limit} bytes"
            ),
            Refusal::TimedOut { received, within } => write!(
                f,
                "request body not received within {} ms ({received} bytes arrived)",
                within.as_millis()
            ),
            Refusal::TooSlow { received, rate } => write!(
                f,
                "request body arriving too slowly: fewer than {rate} bytes in a second ({received} bytes arrived)"
            ),
            Refusal::OverShare {
                budget,
                bytes,
                held,
                share,
            } => write!(
                f,
                "overloaded: {bytes} more bytes would take this client past its {share}-byte share of the {budget} budget ({held} held by its requests in flight); retry"
            ),
            Refusal::OverBudget {
                bytes,
                reserved,
                budget,
            } => write!(
                f,
                "overloaded: {bytes} more body bytes do not fit the {budget}-byte budget ({reserved} held by requests in flight); retry"
            ),
            Refusal::ParseOverBudget {
                bytes,
                estimate,
                reserved,
                budget,
            } => write!(
                f,
                "overloaded: parsing this {bytes}-byte review takes about {estimate} bytes, which did not fit the {budget}-byte parse budget before the deadline ({reserved} held by requests in flight); retry"
            ),
            Refusal::Broken(e) => write!(f, "reading the request body failed: {e}"),
        }
    }
}

fn declared_length(headers: &HeaderMap) -> Option<u64> {
    headers
        .get(header::CONTENT_LENGTH)?
        .to_str()
        .ok()?
        .parse()
        .ok()
}

/// Reads the body: refused before reading when its declared length is over the limit; read
/// within the body timeout and at the minimum rate, reserving budget for the memory it takes as
/// the bytes arrive (a declared length reserves nothing ahead: a client that declares a large
/// body and sends nothing holds nothing), counted against `peer`'s share. On refusal the unread
/// rest of the body comes back, for [`answer`].
pub async fn receive(
    gates: &Gates,
    headers: &HeaderMap,
    body: Body,
    peer: Option<IpAddr>,
) -> Result<Received, (Refusal, Option<BodyDataStream>)> {
    let limits = gates.limits();
    let declared = declared_length(headers);
    let mut stream = body.into_data_stream();
    if let Some(bytes) = declared.filter(|&bytes| bytes > limits.max_body_bytes as u64) {
        let limit = limits.max_body_bytes;
        return Err((Refusal::TooLarge { bytes, limit }, Some(stream)));
    }
    // The most the buffer grows to: the declared length, else the limit.
    let most = declared.map_or(limits.max_body_bytes, |bytes| bytes as usize);
    let mut reservation = gates.reservation_for(peer);
    let mut data: Vec<u8> = Vec::new();
    let rate = limits.body_min_bytes_per_second;
    let first_check = tokio::time::Instant::now() + RATE_GRACE;
    let mut window = tokio::time::interval_at(first_check, RATE_WINDOW);
    window.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let read = async {
        let mut at_last_tick = 0usize;
        loop {
            let chunk = tokio::select! {
                biased;
                chunk = stream.next() => chunk,
                _ = window.tick(), if rate > 0 => {
                    if data.len() - at_last_tick < rate {
                        return Err(Refusal::TooSlow { received: data.len(), rate });
                    }
                    at_last_tick = data.len();
                    continue;
                }
            };
            let Some(chunk) = chunk else {
                return Ok(());
            };
            let chunk = chunk.map_err(|e| Refusal::Broken(e.to_string()))?;
            let total = data.len() + chunk.len();
            if total > limits.max_body_bytes {
                let (bytes, limit) = (total as u64, limits.max_body_bytes);
                return Err(Refusal::TooLarge { bytes, limit });
            }
            // The buffer grows geometrically (up to the declared length), so a body is copied
            // a few times at most; the reservation counts the buffer's capacity, which is the
            // memory it takes. Bytes beyond a declared length end the stream with an error in
            // hyper.
            if total > data.capacity() {
                let wanted = (data.capacity() * 2)
                    .max(FIRST_CAPACITY)
                    .min(most)
                    .max(total);
                let more = wanted.saturating_sub(reservation.bytes());
                reservation
                    .grow(gates, more)
                    .map_err(|short| short_of(gates, short, more as u64))?;
                data.reserve_exact(wanted - data.len());
            }
            data.extend_from_slice(&chunk);
        }
    };
    match tokio::time::timeout(limits.body_timeout, read).await {
        Ok(Ok(())) => Ok(Received {
            bytes: Bytes::from(data),
            reservation,
        }),
        Ok(Err(refusal)) => Err((refusal, Some(stream))),
        Err(_) => {
            let within = limits.body_timeout;
            let received = data.len();
            Err((Refusal::TimedOut { received, within }, Some(stream)))
        }
    }
}

/// The refusal for a reservation that could not grow by `bytes`.
fn short_of(gates: &Gates, short: Short, bytes: u64) -> Refusal {
    match short {
        Short::Budget => over_budget(gates, bytes),
        Short::Share { held, share } => Refusal::OverShare {
            budget: "body",
            bytes,
            held,
            share,
        },
    }
}

fn over_budget(gates: &Gates, bytes: u64) -> Refusal {
    Refusal::OverBudget {
        bytes,
        reserved: gates.body_bytes_reserved(),
        budget: gates.limits().body_budget_bytes,
    }
}

/// Reads and drops up to `limit` bytes of `rest` within `within`; what is left when either runs
/// out comes back.
pub async fn discard(
    mut rest: BodyDataStream,
    limit: usize,
    within: Duration,
) -> Option<BodyDataStream> {
    let drained = tokio::time::timeout(within, async {
        let mut seen = 0usize;
        while let Some(Ok(chunk)) = rest.next().await {
            seen += chunk.len();
            if seen > limit {
                return false;
            }
        }
        true
    })
    .await;
    match drained {
        Ok(true) => None,
        _ => Some(rest),
    }
}

/// A plain-text answer, sent while the request body may still be arriving. The unread rest of
/// the body is kept until the answer has been sent: over HTTP/2 the stream is then closed with
/// RST_STREAM(NO_ERROR), which tells the client the answer is complete and the rest of its body
/// is not needed; dropping the body before answering would reset the stream with CANCEL, and the
/// client would see an error instead of the answer. HTTP/1.1 connections with a body left
/// unread are closed after the answer.
pub fn answer(
    status: StatusCode,
    text: String,
    version: Version,
    unread: Option<BodyDataStream>,
) -> Response {
    let Some(unread) = unread else {
        return (status, text).into_response();
    };
    let length = text.len();
    let body = futures::stream::once(async move { Ok::<_, Infallible>(Bytes::from(text)) }).chain(
        futures::stream::poll_fn(move |_| {
            // Dropped with the answer's body, once it has been sent.
            let _held = &unread;
            Poll::Ready(None)
        }),
    );
    let mut response = (status, Body::from_stream(body)).into_response();
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    headers.insert(header::CONTENT_LENGTH, HeaderValue::from(length));
    if version < Version::HTTP_2 {
        headers.insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::server::limits::Limits;

    fn gates(max: usize, budget: usize) -> Gates {
        Gates::new(Limits {
            max_body_bytes: max,
            body_budget_bytes: budget,
            body_timeout: Duration::from_millis(200),
            ..Limits::default()
        })
    }

    fn length(n: u64) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(header::CONTENT_LENGTH, HeaderValue::from(n));
        headers
    }

    fn chunks(parts: &[&'static str]) -> Body {
        let parts: Vec<Result<Bytes, Infallible>> = parts
            .iter()
            .map(|p| Ok(Bytes::from_static(p.as_bytes())))
            .collect();
        Body::from_stream(futures::stream::iter(parts))
    }

    #[tokio::test]
    async fn a_body_is_read_and_holds_its_bytes_until_dropped() {
        let g = gates(10, 12);
        let got = receive(&g, &length(5), chunks(&["ab", "cde"]), None)
            .await
            .ok()
            .unwrap();
        assert_eq!(&got.bytes[..], b"abcde");
        assert_eq!(g.body_bytes_reserved(), 5);
        // Without a declared length the buffer may grow to the limit: its first allocation
        // (here the whole limit) does not fit beside the first body.
        let undeclared = receive(&g, &HeaderMap::new(), chunks(&["12345", "67890"]), None).await;
        assert!(matches!(
            undeclared.err().unwrap().0,
            Refusal::OverBudget { bytes: 10, .. }
        ));
        drop(got);
        assert_eq!(g.body_bytes_reserved(), 0);
        let got = receive(&g, &HeaderMap::new(), chunks(&["12345", "67890"]), None)
            .await
            .ok()
            .unwrap();
        assert_eq!(got.reservation.bytes(), 10);
    }

    #[tokio::test]
    async fn too_large_is_refused_declared_or_found() {
        let g = gates(4, 100);
        let (refusal, rest) = receive(&g, &length(5), chunks(&["abcde"]), None)
            .await
            .err()
            .unwrap();
        assert!(matches!(refusal, Refusal::TooLarge { bytes: 5, limit: 4 }));
        assert!(rest.is_some());
        let (refusal, _) = receive(&g, &HeaderMap::new(), chunks(&["abc", "de"]), None)
            .await
            .err()
            .unwrap();
        assert_eq!(
            refusal.to_string(),
            "request body too large: 5 bytes, the limit is 4 bytes"
        );
        assert_eq!(g.body_bytes_reserved(), 0);
    }

    #[tokio::test]
    async fn a_body_that_stops_arriving_times_out() {
        let g = gates(100, 100);
        let first = futures::stream::iter([Ok::<_, Infallible>(Bytes::from_static(b"ab"))]);
        let body = Body::from_stream(first.chain(futures::stream::pending()));
        let (refusal, _) = receive(&g, &length(10), body, None).await.err().unwrap();
        assert_eq!(refusal.status(), StatusCode::REQUEST_TIMEOUT);
        assert_eq!(
            refusal.to_string(),
            "request body not received within 200 ms (2 bytes arrived)"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_declared_length_reserves_nothing_before_the_bytes_arrive() {
        let g = Gates::new(Limits {
            max_body_bytes: 1 << 20,
            body_budget_bytes: 1 << 20,
            body_timeout: Duration::from_secs(10),
            ..Limits::default()
        });
        // Declared at the limit, nothing sent: no budget is held while it waits, and it is cut
        // at the first check of its rate (after the two seconds' grace), long before the body
        // timeout.
        let started = tokio::time::Instant::now();
        let declared = length(1 << 20);
        let silent = receive(&g, &declared, Body::from_stream(pending()), None);
        let (refusal, _) = tokio::join!(silent, async {
            tokio::time::sleep(Duration::from_millis(500)).await;
            assert_eq!(g.body_bytes_reserved(), 0);
        })
        .0
        .err()
        .unwrap();
        assert_eq!(started.elapsed(), Duration::from_secs(2));
        assert_eq!(refusal.status(), StatusCode::REQUEST_TIMEOUT);
        assert_eq!(
            refusal.to_string(),
            "request body arriving too slowly: fewer than 65536 bytes in a second (0 bytes arrived)"
        );
        // A body that arrives and then stalls is cut at the next check, and holds only what it
        // sent meanwhile.
        let first = futures::stream::iter([Ok::<_, Infallible>(Bytes::from(vec![b'x'; 100_000]))]);
        let stalled = receive(
            &g,
            &declared,
            Body::from_stream(first.chain(pending())),
            None,
        );
        let (refusal, _) = tokio::join!(stalled, async {
            tokio::time::sleep(Duration::from_millis(1500)).await;
            assert_eq!(
                g.body_bytes_reserved(),
                100_000,
                "what arrived, not the declared length"
            );
        })
        .0
        .err()
        .unwrap();
        assert!(
            matches!(
                refusal,
                Refusal::TooSlow {
                    received: 100_000,
                    ..
                }
            ),
            "{refusal}"
        );
        assert_eq!(g.body_bytes_reserved(), 0);
    }

    fn pending() -> impl futures::Stream<Item = Result<Bytes, Infallible>> {
        futures::stream::pending()
    }

    #[tokio::test]
    async fn one_client_address_holds_at_most_its_share() {
        let g = Gates::new(Limits {
            max_body_bytes: 100,
            body_budget_bytes: 400,
            peer_share_percent: 50,
            body_timeout: Duration::from_millis(200),
            ..Limits::default()
        });
        let (a, b): (IpAddr, IpAddr) = ("10.0.0.7".parse().unwrap(), "10.0.0.8".parse().unwrap());
        let hundred = || {
            chunks(&["0123456789012345678901234567890123456789012345678901234567890123456789012345678901234567890123456789"])
        };
        // The address's share is half the budget: two bodies of 100 bytes, not a third.
        let first = receive(&g, &length(100), hundred(), Some(a))
            .await
            .ok()
            .unwrap();
        let second = receive(&g, &length(100), hundred(), Some(a))
            .await
            .ok()
            .unwrap();
        assert_eq!(g.body_bytes_held_by(a), 200);
        let (refusal, _) = receive(&g, &length(100), hundred(), Some(a))
            .await
            .err()
            .unwrap();
        assert_eq!(refusal.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(
            refusal.to_string(),
            "overloaded: 100 more bytes would take this client past its 200-byte share of the body budget (200 held by its requests in flight); retry"
        );
        // Another address is served from the rest of the budget.
        let other = receive(&g, &length(100), hundred(), Some(b))
            .await
            .ok()
            .unwrap();
        assert_eq!(g.body_bytes_reserved(), 300);
        drop((first, second, other));
        assert_eq!(g.body_bytes_held_by(a), 0);
        assert_eq!(g.body_bytes_reserved(), 0);
        // A share is never less than one largest body.
        let tight = Gates::new(Limits {
            max_body_bytes: 100,
            body_budget_bytes: 100,
            peer_share_percent: 1,
            ..Limits::default()
        });
        assert!(receive(&tight, &length(100), hundred(), Some(a))
            .await
            .is_ok());
    }
}
