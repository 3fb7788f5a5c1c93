//! HTTPS (TLS + HTTP/1.1 keep-alive) load generator for the poolguard vs OPA benchmark.
//!
//! Closed loop (`--mode closed`): N connections each send the next request as soon as the previous
//! response is read, until `--duration` or `--max-requests`: saturation throughput.
//!
//! Open loop (`--mode open --rate R`): request i is scheduled at start + i/R and sent on one of N
//! connections. Latency is measured from the scheduled time when the sender is behind schedule
//! (so queueing behind a slow server is counted: no coordinated omission), and from the actual
//! send time when the sender had to wait for its slot (so tokio's ~1 ms timer granularity is not
//! counted as server latency).
//!
//! With `--http2` the N workers are streams of one HTTP/2 connection (ALPN h2), the way
//! kube-apiserver multiplexes its calls, instead of N HTTP/1.1 connections.
//!
//! Bodies (`--body FILE`, repeatable) are sent round-robin. With `--seq-token TOKEN`, every
//! occurrence of TOKEN in a body is replaced by the request's sequence number, so that every
//! request can be a pod of its own (warm-up requests count from 10^12, apart from the measured
//! ones). Prints one JSON object on stdout.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use bytes::Bytes;
use hdrhistogram::Histogram;
use hyper::client::conn::{http1, http2};
use poolguard_testclient::{client_config, post, send1, send2, Body, TlsClient, H2};
use tokio::sync::Mutex;

#[derive(Clone, Copy, PartialEq)]
enum Mode {
    Closed,
    Open,
}

struct Args {
    url: String,
    ca: String,
    bodies: Vec<String>,
    mode: Mode,
    rate: f64,
    connections: usize,
    duration: Duration,
    max_requests: u64,
    warmup: u64,
    threads: usize,
    label: String,
    http2: bool,
    seq_token: Option<String>,
}

/// The bodies, each split at the sequence token (one part: no token).
struct Bodies(Vec<Vec<Bytes>>);

/// Where warm-up requests' sequence numbers start.
const WARMUP_SEQ: u64 = 1_000_000_000_000;

impl Bodies {
    fn read(paths: &[String], token: Option<&str>) -> Result<Bodies> {
        let mut out = Vec::new();
        for p in paths {
            let text = std::fs::read_to_string(p).with_context(|| format!("reading {p}"))?;
            let parts: Vec<Bytes> = match token {
                Some(t) => text.split(t).map(|s| Bytes::from(s.to_string())).collect(),
                None => vec![Bytes::from(text)],
            };
            out.push(parts);
        }
        Ok(Bodies(out))
    }

    /// Request `seq`'s body: body `seq mod count`, the token replaced by `seq`.
    fn get(&self, seq: u64) -> Bytes {
        let parts = &self.0[(seq % self.0.len() as u64) as usize];
        if parts.len() == 1 {
            return parts[0].clone();
        }
        let n = seq.to_string();
        let mut body = Vec::with_capacity(parts.iter().map(|p| p.len() + n.len()).sum());
        for (i, part) in parts.iter().enumerate() {
            if i > 0 {
                body.extend_from_slice(n.as_bytes());
            }
            body.extend_from_slice(part);
        }
        Bytes::from(body)
    }
}

fn parse_args() -> Result<Args> {
    let mut a = Args {
        url: String::new(),
        ca: String::new(),
        bodies: vec![],
        mode: Mode::Closed,
        rate: 0.0,
        connections: 8,
        duration: Duration::from_secs(10),
        max_requests: 5_000_000,
        warmup: 50,
        threads: 2,
        label: String::new(),
        http2: false,
        seq_token: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut val = || it.next().ok_or_else(|| anyhow!("{flag} needs a value"));
        match flag.as_str() {
            "--url" => a.url = val()?,
            "--ca" => a.ca = val()?,
            "--body" => a.bodies.push(val()?),
            "--seq-token" => a.seq_token = Some(val()?).filter(|t| !t.is_empty()),
            "--mode" => {
                a.mode = match val()?.as_str() {
                    "closed" => Mode::Closed,
                    "open" => Mode::Open,
                    m => bail!("unknown mode {m}"),
                }
            }
            "--rate" => a.rate = val()?.parse()?,
            "--connections" => a.connections = val()?.parse()?,
            "--duration" => a.duration = Duration::from_secs_f64(val()?.parse()?),
            "--max-requests" => a.max_requests = val()?.parse()?,
            "--warmup" => a.warmup = val()?.parse()?,
            "--threads" => a.threads = val()?.parse()?,
            "--label" => a.label = val()?,
            "--http2" => a.http2 = true,
            f => bail!("unknown flag {f}"),
        }
    }
    if a.url.is_empty() || a.ca.is_empty() || a.bodies.is_empty() {
        bail!("usage: poolguard-loadgen --url https://127.0.0.1:PORT/PATH --ca CA.crt --body FILE [--body FILE]... [--mode closed|open] [--rate R] [--connections N] [--duration S] [--max-requests M] [--warmup W] [--threads T] [--label L] [--http2] [--seq-token TOKEN]");
    }
    if a.mode == Mode::Open && a.rate <= 0.0 {
        bail!("--mode open needs --rate > 0");
    }
    Ok(a)
}

struct Target {
    addr: String,
    host: String,
    path: String,
    client: TlsClient,
    /// With --http2: the one connection every worker's streams share.
    shared: Option<Mutex<Option<http2::SendRequest<Body>>>>,
}

fn target(args: &Args) -> Result<Target> {
    let rest = args
        .url
        .strip_prefix("https://")
        .ok_or_else(|| anyhow!("--url must be https://"))?;
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    let host = authority.rsplit_once(':').map_or(authority, |(h, _)| h);
    let pem = std::fs::read(&args.ca).with_context(|| format!("reading {}", args.ca))?;
    let alpn: &[&[u8]] = if args.http2 { &[H2] } else { &[] };
    let config = client_config(&pem, None, alpn).with_context(|| format!("CA file {}", args.ca))?;
    Ok(Target {
        addr: authority.to_string(),
        host: host.to_string(),
        path: path.to_string(),
        client: TlsClient::new(config, host)?,
        shared: args.http2.then(|| Mutex::new(None)),
    })
}

/// A worker's way to the server: its own HTTP/1.1 connection, or a handle on the shared HTTP/2
/// connection.
enum Sender {
    H1(http1::SendRequest<Body>),
    H2(http2::SendRequest<Body>),
}

/// TCP (TCP_NODELAY), TLS, HTTP/1.1; or with --http2 the shared connection (opened again when
/// it has closed).
async fn connect(t: &Target) -> Result<Sender> {
    let Some(shared) = &t.shared else {
        return Ok(Sender::H1(t.client.http1(t.addr.as_str()).await?.0));
    };
    let mut shared = shared.lock().await;
    if let Some(open) = shared.as_ref().filter(|s| !s.is_closed()) {
        return Ok(Sender::H2(open.clone()));
    }
    let fresh = t.client.http2(t.addr.as_str()).await?;
    *shared = Some(fresh.clone());
    Ok(Sender::H2(fresh))
}

/// Sends one request and reads the whole response; Ok(status).
async fn send(sender: &mut Sender, t: &Target, body: &Bytes) -> Result<u16> {
    let request = post(&t.host, &t.path, body.clone());
    let (status, _) = match sender {
        Sender::H1(s) => send1(s, request).await?,
        Sender::H2(s) => send2(s, request).await?,
    };
    Ok(status)
}

#[derive(Default)]
struct Counts {
    ok: AtomicU64,
    non_2xx: AtomicU64,
    errors: AtomicU64,
}

fn main() -> Result<()> {
    let args = parse_args()?;
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(args.threads.max(1))
        .enable_all()
        .build()?
        .block_on(run(args))
}

async fn run(args: Args) -> Result<()> {
    let t = Arc::new(target(&args)?);
    let bodies = Arc::new(Bodies::read(&args.bodies, args.seq_token.as_deref())?);
    let counts = Arc::new(Counts::default());
    let next = Arc::new(AtomicU64::new(0));
    let n = args.connections.max(1);
    let total = match args.mode {
        Mode::Closed => args.max_requests,
        Mode::Open => ((args.rate * args.duration.as_secs_f64()) as u64).min(args.max_requests),
    };
    let interval_ns = if args.mode == Mode::Open {
        1e9 / args.rate
    } else {
        0.0
    };
    let (start_tx, start_rx) = tokio::sync::watch::channel(None::<Instant>);
    let ready = Arc::new(tokio::sync::Barrier::new(n + 1));
    let mut handles = vec![];
    for w in 0..n {
        let (t, bodies, counts, next, ready, mut start_rx) = (
            t.clone(),
            bodies.clone(),
            counts.clone(),
            next.clone(),
            ready.clone(),
            start_rx.clone(),
        );
        let (mode, duration, warmup) = (args.mode, args.duration, args.warmup);
        handles.push(tokio::spawn(async move {
            let mut hist = Histogram::<u64>::new_with_bounds(1, 60_000_000_000, 3).unwrap();
            let mut sender = match connect(&t).await {
                Ok(s) => Some(s),
                Err(e) => {
                    eprintln!("connection {w}: {e:#}");
                    None
                }
            };
            // Warm-up on this connection (not measured).
            for i in 0..warmup {
                if let Some(s) = sender.as_mut() {
                    let seq = WARMUP_SEQ + (w as u64) * warmup + i;
                    let _ = send(s, &t, &bodies.get(seq)).await;
                }
            }
            ready.wait().await;
            let start = loop {
                if let Some(s) = *start_rx.borrow() {
                    break s;
                }
                if start_rx.changed().await.is_err() {
                    return hist;
                }
            };
            let deadline = start + duration;
            // Open loop: stop sending 2 s past the schedule's end even when behind.
            let hard_deadline = deadline + Duration::from_secs(2);
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= total {
                    break;
                }
                let t0 = match mode {
                    Mode::Closed => {
                        let now = Instant::now();
                        if now >= deadline {
                            break;
                        }
                        now
                    }
                    Mode::Open => {
                        let intended =
                            start + Duration::from_nanos((i as f64 * interval_ns) as u64);
                        let now = Instant::now();
                        if now >= hard_deadline {
                            break;
                        }
                        if now >= intended {
                            intended
                        } else {
                            tokio::time::sleep_until(intended.into()).await;
                            Instant::now()
                        }
                    }
                };
                if sender.is_none() {
                    sender = connect(&t).await.ok();
                }
                let Some(s) = sender.as_mut() else {
                    counts.errors.fetch_add(1, Ordering::Relaxed);
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                };
                match send(s, &t, &bodies.get(i)).await {
                    Ok(status) => {
                        let ns = t0.elapsed().as_nanos() as u64;
                        hist.saturating_record(ns.max(1));
                        if (200..300).contains(&status) {
                            counts.ok.fetch_add(1, Ordering::Relaxed);
                        } else {
                            counts.non_2xx.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                    Err(e) => {
                        if counts.errors.fetch_add(1, Ordering::Relaxed) < 5 {
                            eprintln!("request error: {e:#}");
                        }
                        sender = None;
                    }
                }
            }
            hist
        }));
    }
    ready.wait().await;
    let start = Instant::now() + Duration::from_millis(20);
    start_tx.send(Some(start))?;
    let mut hist = Histogram::<u64>::new_with_bounds(1, 60_000_000_000, 3)?;
    for h in handles {
        hist.add(h.await?)?;
    }
    let elapsed = start.elapsed().as_secs_f64();
    let ok = counts.ok.load(Ordering::Relaxed);
    let non_2xx = counts.non_2xx.load(Ordering::Relaxed);
    let errors = counts.errors.load(Ordering::Relaxed);
    // Open loop: requests of the schedule never sent (the 2 s cut-off past the end when behind).
    let unsent = match args.mode {
        Mode::Closed => 0,
        Mode::Open => total.saturating_sub(hist.len() + errors),
    };
    let us = |q: f64| hist.value_at_quantile(q) as f64 / 1000.0;
    let out = serde_json::json!({
        "label": args.label,
        "url": args.url,
        "mode": if args.mode == Mode::Closed { "closed" } else { "open" },
        "protocol": if args.http2 { "h2" } else { "http/1.1" },
        "target_rate": if args.mode == Mode::Open { Some(args.rate) } else { None },
        "connections": n,
        "threads": args.threads,
        "duration_s": elapsed,
        "requests": hist.len(),
        "ok": ok,
        "non_2xx": non_2xx,
        "errors": errors,
        "scheduled": if args.mode == Mode::Open { Some(total) } else { None },
        "unsent": unsent,
        "throughput_rps": hist.len() as f64 / elapsed,
        "latency_us": {
            "mean": hist.mean() / 1000.0,
            "p50": us(0.50), "p90": us(0.90), "p99": us(0.99), "p999": us(0.999),
            "max": hist.max() as f64 / 1000.0,
        },
    });
    println!("{out}");
    Ok(())
}
