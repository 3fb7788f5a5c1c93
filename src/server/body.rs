//! Reading request bodies within the limits, and answering without reading them.

use std::convert::Infallible;
use std::fmt;
use std::task::Poll;
use std::time::Duration;

use axum::body::{Body, BodyDataStream, Bytes};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode, Version};
use axum::response::{IntoResponse, Response};
use futures::StreamExt;

use super::limits::{Gates, Reservation};

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
            Refusal::TimedOut { .. } => StatusCode::REQUEST_TIMEOUT,
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
            | Refusal::ParseOverBudget { bytes, .. } => Some(*bytes),
            Refusal::TimedOut { received, .. } => Some(*received as u64),
            Refusal::Broken(_) => None,
        }
    }

    /// The `decision` label of the requests metric.
    pub fn decision(&self) -> &'static str {
        match self {
            Refusal::TooLarge { .. } => "too_large",
            Refusal::TimedOut { .. } => "body_timeout",
            Refusal::OverBudget { .. } | Refusal::ParseOverBudget { .. } => "overloaded",
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

/// Reads the body: refused before reading when its declared length is over the limit or over
/// the budget; read within the body timeout, reserving budget for every byte. On refusal the
/// unread rest of the body comes back, for [`answer`].
pub async fn receive(
    gates: &Gates,
    headers: &HeaderMap,
    body: Body,
) -> Result<Received, (Refusal, Option<BodyDataStream>)> {
    let limits = gates.limits();
    let declared = declared_length(headers);
    let mut stream = body.into_data_stream();
    let mut reservation = match declared {
        Some(bytes) if bytes > limits.max_body_bytes as u64 => {
            let limit = limits.max_body_bytes;
            return Err((Refusal::TooLarge { bytes, limit }, Some(stream)));
        }
        Some(bytes) => match gates.try_reserve(bytes as usize) {
            Some(reservation) => reservation,
            None => return Err((over_budget(gates, bytes), Some(stream))),
        },
        None => gates.nothing_reserved(),
    };
    let mut data = Vec::with_capacity(reservation.bytes());
    let read = async {
        while let Some(chunk) = stream.next().await {
            let chunk = chunk.map_err(|e| Refusal::Broken(e.to_string()))?;
            let total = data.len() + chunk.len();
            if total > limits.max_body_bytes {
                let (bytes, limit) = (total as u64, limits.max_body_bytes);
                return Err(Refusal::TooLarge { bytes, limit });
            }
            // Bytes beyond a declared length end the stream with an error in hyper; a body
            // without one reserves as it grows.
            let short = total.saturating_sub(reservation.bytes());
            if short > 0 && !reservation.grow(gates, short) {
                return Err(over_budget(gates, short as u64));
            }
            data.extend_from_slice(&chunk);
        }
        Ok(())
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
        let got = receive(&g, &length(5), chunks(&["ab", "cde"]))
            .await
            .ok()
            .unwrap();
        assert_eq!(&got.bytes[..], b"abcde");
        assert_eq!(g.body_bytes_reserved(), 5);
        let undeclared = receive(&g, &HeaderMap::new(), chunks(&["12345", "67890"])).await;
        assert!(matches!(
            undeclared.err().unwrap().0,
            Refusal::OverBudget { bytes: 5, .. }
        ));
        drop(got);
        assert_eq!(g.body_bytes_reserved(), 0);
        let got = receive(&g, &HeaderMap::new(), chunks(&["12345", "67890"]))
            .await
            .ok()
            .unwrap();
        assert_eq!(got.reservation.bytes(), 10);
    }

    #[tokio::test]
    async fn too_large_is_refused_declared_or_found() {
        let g = gates(4, 100);
        let (refusal, rest) = receive(&g, &length(5), chunks(&["abcde"]))
            .await
            .err()
            .unwrap();
        assert!(matches!(refusal, Refusal::TooLarge { bytes: 5, limit: 4 }));
        assert!(rest.is_some());
        let (refusal, _) = receive(&g, &HeaderMap::new(), chunks(&["abc", "de"]))
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
        let (refusal, _) = receive(&g, &length(10), body).await.err().unwrap();
        assert_eq!(refusal.status(), StatusCode::REQUEST_TIMEOUT);
        assert_eq!(
            refusal.to_string(),
            "request body not received within 200 ms (2 bytes arrived)"
        );
    }
}
