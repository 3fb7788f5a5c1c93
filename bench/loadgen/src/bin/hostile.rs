//! Hostile clients against one poolguard server, and what a well-behaved client sees meanwhile.
//!
//! One phase per attack (`--attacks`, default all), each `--seconds` long after a
//! `--ramp-seconds` start of the attack:
//! - `none`: no attack (the baseline);
//! - `idle`: `--connections` connections (default 5,000) that connect and send nothing, half
//!   after a TLS handshake and half without one, reconnecting whenever the server closes them;
//! - `slow-head`: as many connections sending a request head a byte a second;
//! - `slow-body`: as many connections sending a whole head, then the body a byte a second;
//! - `rapid-reset`: `--h2-connections` HTTP/2 connections opening streams and resetting them at
//!   once, as fast as they can, reconnecting after each GOAWAY;
//! - `vanish`: `--vanishing` clients in a loop: connect, send a request (half of them only half
//!   its body) and close without reading the answer.
//!
//! The well-behaved client, during every phase: requests at `--rate` per second over four
//! keep-alive HTTP/1.1 connections opened before the attack (as the API server keeps its
//! connections), and every 200 ms a request on a new connection (connect, TLS and request timed
//! together, as the API server's next connection would be). Each request gets 5 s. Prints a
//! Markdown table, and one JSON object per phase on stdout with `--json`.
//!
//! Loopback only: the URL must name 127.0.0.1 or localhost. The attackers connect from another
//! loopback address (`--attacker-address`, default 127.0.0.2), as a pod would from its own IP.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use bytes::Bytes;
use clap::Parser;
use hdrhistogram::Histogram;
use poolguard_testclient::{client_config, post, send1, TlsClient};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::Mutex;

#[derive(Parser)]
#[command(about = "Hostile clients against a poolguard server on loopback")]
struct Args {
    /// The endpoint, e.g. https://localhost:18443/validate.
    #[arg(long)]
    url: String,
    /// CA certificate (PEM) of the server.
    #[arg(long)]
    ca: String,
    /// An AdmissionReview to send (JSON).
    #[arg(long)]
    body: String,
    /// Attacks, in order (none, idle, slow-head, slow-body, rapid-reset, vanish).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "none,idle,slow-head,slow-body,rapid-reset,vanish"
    )]
    attacks: Vec<String>,
    /// Connections of the idle, slow-head and slow-body attacks.
    #[arg(long, default_value_t = 5000)]
    connections: usize,
    /// HTTP/2 connections of the rapid-reset attack.
    #[arg(long, default_value_t = 16)]
    h2_connections: usize,
    /// Concurrent vanishing clients.
    #[arg(long, default_value_t = 64)]
    vanishing: usize,
    /// The well-behaved client's requests per second (keep-alive connections).
    #[arg(long, default_value_t = 200.0)]
    rate: f64,
    /// Measured seconds per phase.
    #[arg(long, default_value_t = 10)]
    seconds: u64,
    /// Seconds the attack runs before the measurement starts.
    #[arg(long, default_value_t = 3)]
    ramp_seconds: u64,
    /// Source address of the attackers' connections (a loopback address).
    #[arg(long, default_value = "127.0.0.2")]
    attacker_address: std::net::Ipv4Addr,
    /// poolguard's pid (on this machine): its RSS and open files are sampled at the end of
    /// each phase.
    #[arg(long)]
    server_pid: Option<u32>,
    /// Also print one JSON object per phase.
    #[arg(long)]
    json: bool,
}

const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);
/// Streams one rapid-reset connection opens and resets before it starts over.
const RESETS_PER_CONNECTION: usize = 2000;
/// Connection attempts of one attack in flight at once (the rest queue in the attack).
const CONNECT_PARALLELISM: usize = 256;

#[derive(Clone)]
struct Target {
    addr: String,
    /// The server's address, and the attackers' source address.
    server: std::net::SocketAddr,
    attacker: std::net::Ipv4Addr,
    server_name: tokio_rustls::rustls::pki_types::ServerName<'static>,
    host: String,
    path: String,
    http1: Arc<TlsClient>,
    http2: Arc<TlsClient>,
    body: Bytes,
}

fn target(args: &Args) -> Result<Target> {
    let rest = args
        .url
        .strip_prefix("https://")
        .context("--url must be https://")?;
    let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    let host = authority
        .rsplit_once(':')
        .map_or(authority, |(h, _)| h)
        .trim_matches(['[', ']']);
    if !matches!(host, "127.0.0.1" | "localhost") {
        bail!("--url must name a loopback address (127.0.0.1 or localhost), not {host}");
    }
    if !args.attacker_address.is_loopback() {
        bail!("--attacker-address must be a loopback address");
    }
    let port = authority
        .rsplit_once(':')
        .and_then(|(_, p)| p.parse::<u16>().ok())
        .context("--url needs a port")?;
    let pem = std::fs::read(&args.ca).with_context(|| format!("reading {}", args.ca))?;
    let client = |alpn: &[&[u8]]| -> Result<Arc<TlsClient>> {
        Ok(Arc::new(TlsClient::new(
            client_config(&pem, None, alpn)?,
            host,
        )?))
    };
    Ok(Target {
        addr: authority.to_string(),
        server: std::net::SocketAddr::from(([127, 0, 0, 1], port)),
        attacker: args.attacker_address,
        server_name: tokio_rustls::rustls::pki_types::ServerName::try_from(host.to_string())?,
        host: host.to_string(),
        path: if path.is_empty() { "/" } else { path }.to_string(),
        http1: client(&[b"http/1.1"])?,
        http2: client(&[b"h2"])?,
        body: Bytes::from(
            std::fs::read(&args.body).with_context(|| format!("reading {}", args.body))?,
        ),
    })
}

/// What an attack did: connections opened, and those the server closed (or refused).
#[derive(Default)]
struct AttackCounts {
    opened: AtomicU64,
    closed_by_server: AtomicU64,
    streams_reset: AtomicU64,
    requests_abandoned: AtomicU64,
}

/// The well-behaved client's view of one phase.
struct Seen {
    keepalive: Histogram<u64>,
    keepalive_errors: u64,
    fresh: Histogram<u64>,
    fresh_errors: u64,
}

fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 60_000_000, 3).expect("valid histogram bounds")
}

fn main() -> Result<()> {
    let args = Args::parse();
    let target = target(&args)?;
    for attack in &args.attacks {
        if ![
            "none",
            "idle",
            "slow-head",
            "slow-body",
            "rapid-reset",
            "vanish",
        ]
        .contains(&attack.as_str())
        {
            bail!("unknown attack {attack:?}");
        }
    }
    // The attackers run on their own runtime (threads): the well-behaved client's tasks never
    // queue behind theirs, so its latencies are the server's (and the machine's), not this
    // process's scheduler's.
    let attack = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("attacker")
        .enable_all()
        .build()?;
    let probe = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("well-behaved")
        .enable_all()
        .build()?;
    let result = probe.block_on(run(args, target, attack.handle().clone()));
    attack.shutdown_background();
    result
}

async fn run(args: Args, target: Target, attack_runtime: tokio::runtime::Handle) -> Result<()> {
    println!(
        "| attack | attack: opened / closed by server / streams reset / abandoned | keep-alive p50 / p99 / max ms | errors | new connection p50 / p99 / max ms | errors | server RSS MiB / open files |"
    );
    println!("|---|---|---|---|---|---|---|");
    for attack in &args.attacks {
        let stop = Arc::new(AtomicBool::new(false));
        let counts = Arc::new(AttackCounts::default());
        // The well-behaved client's connections exist before the attack, as the API server's do.
        let mut keepalive = Vec::new();
        for _ in 0..4 {
            keepalive.push(Arc::new(Mutex::new(
                target.http1.http1(target.addr.as_str()).await?.0,
            )));
        }
        let attackers = start_attack(&attack_runtime, attack, &args, &target, &stop, &counts);
        tokio::time::sleep(Duration::from_secs(args.ramp_seconds)).await;
        let seen = well_behaved(
            &target,
            keepalive,
            args.rate,
            Duration::from_secs(args.seconds),
        )
        .await;
        let (rss_mib, fds) = args.server_pid.map(server_usage).unwrap_or_default();
        stop.store(true, Ordering::SeqCst);
        for task in attackers {
            task.abort();
        }
        let ms = |h: &Histogram<u64>, q: f64| h.value_at_quantile(q) as f64 / 1000.0;
        let c = |n: &AtomicU64| n.load(Ordering::SeqCst);
        println!(
            "| {attack} | {} / {} / {} / {} | {:.2} / {:.2} / {:.1} | {} of {} | {:.2} / {:.2} / {:.1} | {} of {} | {rss_mib:.1} / {fds} |",
            c(&counts.opened),
            c(&counts.closed_by_server),
            c(&counts.streams_reset),
            c(&counts.requests_abandoned),
            ms(&seen.keepalive, 0.5),
            ms(&seen.keepalive, 0.99),
            ms(&seen.keepalive, 1.0),
            seen.keepalive_errors,
            seen.keepalive.len() + seen.keepalive_errors,
            ms(&seen.fresh, 0.5),
            ms(&seen.fresh, 0.99),
            ms(&seen.fresh, 1.0),
            seen.fresh_errors,
            seen.fresh.len() + seen.fresh_errors,
        );
        if args.json {
            let q = |h: &Histogram<u64>| {
                serde_json::json!({
                    "count": h.len(),
                    "p50_ms": ms(h, 0.5), "p90_ms": ms(h, 0.9), "p99_ms": ms(h, 0.99), "max_ms": ms(h, 1.0),
                })
            };
            println!(
                "{}",
                serde_json::json!({
                    "attack": attack,
                    "attack_connections_opened": c(&counts.opened),
                    "attack_connections_closed_by_server": c(&counts.closed_by_server),
                    "attack_streams_reset": c(&counts.streams_reset),
                    "attack_requests_abandoned": c(&counts.requests_abandoned),
                    "keepalive": q(&seen.keepalive),
                    "keepalive_errors": seen.keepalive_errors,
                    "new_connection": q(&seen.fresh),
                    "new_connection_errors": seen.fresh_errors,
                    "server_rss_mib": rss_mib,
                    "server_open_files": fds,
                })
            );
        }
        // Let the server see the attack's connections go before the next phase.
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    Ok(())
}

/// The well-behaved client for `duration`: open-loop requests at `rate` over the keep-alive
/// connections, and one request on a new connection every 200 ms.
async fn well_behaved(
    target: &Target,
    keepalive: Vec<Arc<Mutex<hyper::client::conn::http1::SendRequest<poolguard_testclient::Body>>>>,
    rate: f64,
    duration: Duration,
) -> Seen {
    let start = Instant::now();
    let fresh_task = tokio::spawn({
        let target = target.clone();
        async move {
            let (mut h, mut errors) = (histogram(), 0);
            let mut tick = tokio::time::interval(Duration::from_millis(200));
            while start.elapsed() < duration {
                tick.tick().await;
                let began = Instant::now();
                let attempt = tokio::time::timeout(REQUEST_TIMEOUT, async {
                    let (mut sender, _) = target.http1.http1(target.addr.as_str()).await?;
                    send1(
                        &mut sender,
                        post(&target.host, &target.path, target.body.clone()),
                    )
                    .await
                })
                .await;
                match attempt {
                    Ok(Ok((200, _))) => record(&mut h, began),
                    _ => errors += 1,
                }
            }
            (h, errors)
        }
    });
    let interval = Duration::from_secs_f64(1.0 / rate.max(0.1));
    let mut tasks = Vec::new();
    let mut i = 0usize;
    while start.elapsed() < duration {
        let due = start + interval.mul_f64(i as f64);
        tokio::time::sleep_until(due.into()).await;
        let connection = keepalive[i % keepalive.len()].clone();
        let target = target.clone();
        tasks.push(tokio::spawn(async move {
            let attempt = tokio::time::timeout(REQUEST_TIMEOUT, async {
                let mut sender = connection.lock().await;
                // Latency from the scheduled time: waiting for the connection counts.
                let result = if sender.is_closed() {
                    match target.http1.http1(target.addr.as_str()).await {
                        Ok((fresh, _)) => {
                            *sender = fresh;
                            send1(
                                &mut sender,
                                post(&target.host, &target.path, target.body.clone()),
                            )
                            .await
                        }
                        Err(e) => Err(e),
                    }
                } else {
                    send1(
                        &mut sender,
                        post(&target.host, &target.path, target.body.clone()),
                    )
                    .await
                };
                result
            })
            .await;
            match attempt {
                Ok(Ok((200, _))) => Some(due.elapsed()),
                _ => None,
            }
        }));
        i += 1;
    }
    let (mut keepalive_h, mut keepalive_errors) = (histogram(), 0);
    for task in tasks {
        match task.await.ok().flatten() {
            Some(latency) => {
                let _ = keepalive_h.record(latency.as_micros().max(1) as u64);
            }
            None => keepalive_errors += 1,
        }
    }
    let (fresh, fresh_errors) = fresh_task.await.unwrap_or_else(|_| (histogram(), u64::MAX));
    Seen {
        keepalive: keepalive_h,
        keepalive_errors,
        fresh,
        fresh_errors,
    }
}

/// RSS (MiB) and open files of process `pid`; zeros when it cannot be read.
fn server_usage(pid: u32) -> (f64, usize) {
    let rss_kib = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|status| {
            let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
            line.split_whitespace().nth(1)?.parse::<f64>().ok()
        })
        .unwrap_or(0.0);
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count());
    (rss_kib / 1024.0, fds)
}

fn record(h: &mut Histogram<u64>, began: Instant) {
    let _ = h.record(began.elapsed().as_micros().max(1) as u64);
}

fn start_attack(
    runtime: &tokio::runtime::Handle,
    attack: &str,
    args: &Args,
    target: &Target,
    stop: &Arc<AtomicBool>,
    counts: &Arc<AttackCounts>,
) -> Vec<tokio::task::JoinHandle<()>> {
    let gate = Arc::new(tokio::sync::Semaphore::new(CONNECT_PARALLELISM));
    match attack {
        "none" => vec![],
        "idle" | "slow-head" | "slow-body" => (0..args.connections)
            .map(|i| {
                let (target, counts, stop, gate) =
                    (target.clone(), counts.clone(), stop.clone(), gate.clone());
                let attack = attack.to_string();
                runtime.spawn(async move {
                    while !stop.load(Ordering::SeqCst) {
                        let connected = {
                            let _permit = gate.acquire().await;
                            connect_attacker(&target, &attack, i).await
                        };
                        match connected {
                            Some(conn) => {
                                counts.opened.fetch_add(1, Ordering::SeqCst);
                                hold(conn, &attack, &target).await;
                                counts.closed_by_server.fetch_add(1, Ordering::SeqCst);
                            }
                            None => {
                                counts.closed_by_server.fetch_add(1, Ordering::SeqCst);
                                tokio::time::sleep(Duration::from_millis(100)).await;
                            }
                        }
                    }
                })
            })
            .collect(),
        "rapid-reset" => (0..args.h2_connections)
            .map(|_| {
                let (target, counts, stop) = (target.clone(), counts.clone(), stop.clone());
                runtime.spawn(async move {
                    while !stop.load(Ordering::SeqCst) {
                        rapid_reset(&target, &counts).await;
                    }
                })
            })
            .collect(),
        "vanish" => (0..args.vanishing)
            .map(|i| {
                let (target, counts, stop) = (target.clone(), counts.clone(), stop.clone());
                runtime.spawn(async move {
                    while !stop.load(Ordering::SeqCst) {
                        vanish(&target, &counts, i % 2 == 0).await;
                    }
                })
            })
            .collect(),
        _ => unreachable!("attacks are checked in main"),
    }
}

/// A TCP connection from the attackers' address.
async fn attacker_tcp(target: &Target) -> std::io::Result<TcpStream> {
    let socket = tokio::net::TcpSocket::new_v4()?;
    socket.bind(std::net::SocketAddr::from((target.attacker, 0)))?;
    socket.connect(target.server).await
}

/// A TLS connection from the attackers' address, offering `client`'s ALPN protocols.
async fn attacker_tls(
    target: &Target,
    client: &TlsClient,
) -> std::io::Result<tokio_rustls::client::TlsStream<TcpStream>> {
    let tcp = attacker_tcp(target).await?;
    tokio_rustls::TlsConnector::from(client.config().clone())
        .connect(target.server_name.clone(), tcp)
        .await
}

enum AttackConn {
    Tcp(TcpStream),
    Tls(Box<tokio_rustls::client::TlsStream<TcpStream>>),
}

/// The `i`th connection of an idle or slow attack; `None` when connecting failed.
async fn connect_attacker(target: &Target, attack: &str, i: usize) -> Option<AttackConn> {
    let timeout = Duration::from_secs(10);
    if attack == "idle" && i % 2 == 1 {
        let tcp = tokio::time::timeout(timeout, attacker_tcp(target)).await;
        return tcp.ok()?.ok().map(AttackConn::Tcp);
    }
    let tls = tokio::time::timeout(timeout, attacker_tls(target, &target.http1)).await;
    tls.ok()?.ok().map(|s| AttackConn::Tls(Box::new(s)))
}

/// Holds an attack connection as its attack does until the server closes it.
async fn hold(conn: AttackConn, attack: &str, target: &Target) {
    match conn {
        AttackConn::Tcp(mut tcp) => {
            let mut buf = [0u8; 256];
            while matches!(tcp.read(&mut buf).await, Ok(n) if n > 0) {}
        }
        AttackConn::Tls(tls) => {
            let (mut reader, mut writer) = tokio::io::split(*tls);
            let trickle = match attack {
                "slow-head" => format!(
                    "POST {} HTTP/1.1\r\nHost: {}\r\nX-Slow: ",
                    target.path, target.host
                )
                .into_bytes(),
                "slow-body" => {
                    let mut head = format!(
                        "POST {} HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
                        target.path, target.host, target.body.len()
                    )
                    .into_bytes();
                    head.extend_from_slice(&target.body[..target.body.len() / 2]);
                    head
                }
                _ => vec![],
            };
            let writing = async move {
                // slow-body: the head and half the body at once, then a byte a second;
                // slow-head: the head a byte a second, never ending; idle: nothing.
                let (at_once, trickled): (&[u8], &[u8]) = match attack {
                    "slow-body" => (&trickle, b" "),
                    "slow-head" => (b"", &trickle),
                    _ => (b"", b""),
                };
                if writer.write_all(at_once).await.is_err() || writer.flush().await.is_err() {
                    return;
                }
                let mut next = trickled.iter().chain(std::iter::repeat(&b'a'));
                loop {
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    if trickled.is_empty() {
                        continue;
                    }
                    let byte = *next.next().unwrap_or(&b'a');
                    if writer.write_all(&[byte]).await.is_err() || writer.flush().await.is_err() {
                        return;
                    }
                }
            };
            let reading = async move {
                let mut buf = [0u8; 1024];
                while matches!(reader.read(&mut buf).await, Ok(n) if n > 0) {}
            };
            tokio::select! {
                () = writing => {}
                () = reading => {}
            }
        }
    }
}

/// One HTTP/2 connection: streams opened and reset at once until the server ends it.
async fn rapid_reset(target: &Target, counts: &AttackCounts) {
    let Ok(Ok(tls)) =
        tokio::time::timeout(Duration::from_secs(10), attacker_tls(target, &target.http2)).await
    else {
        tokio::time::sleep(Duration::from_millis(100)).await;
        return;
    };
    counts.opened.fetch_add(1, Ordering::SeqCst);
    let Ok((mut client, connection)) = h2::client::handshake(tls).await else {
        counts.closed_by_server.fetch_add(1, Ordering::SeqCst);
        return;
    };
    let driver = tokio::spawn(connection);
    // Bounded: a client's h2 queues frames in memory when the server stops reading.
    for n in 0..RESETS_PER_CONNECTION {
        if n % 64 == 63 {
            tokio::task::yield_now().await;
        }
        let Ok(ready) = client.ready().await else {
            break;
        };
        client = ready;
        let request = http::Request::post(format!("https://{}{}", target.host, target.path))
            .body(())
            .expect("a valid request");
        match client.send_request(request, false) {
            Ok((_, mut stream)) => {
                stream.send_reset(h2::Reason::CANCEL);
                counts.streams_reset.fetch_add(1, Ordering::SeqCst);
            }
            Err(_) => break,
        }
    }
    // The server ends such a connection (GOAWAY) long before the client's bound.
    tokio::time::sleep(Duration::from_millis(10)).await;
    if driver.is_finished() {
        counts.closed_by_server.fetch_add(1, Ordering::SeqCst);
    }
    driver.abort();
}

/// A client that sends a request (or half of it) and closes without reading the answer.
async fn vanish(target: &Target, counts: &AttackCounts, half: bool) {
    let Ok(Ok(mut tls)) =
        tokio::time::timeout(Duration::from_secs(10), attacker_tls(target, &target.http1)).await
    else {
        tokio::time::sleep(Duration::from_millis(100)).await;
        return;
    };
    counts.opened.fetch_add(1, Ordering::SeqCst);
    let body = if half {
        &target.body[..target.body.len() / 2]
    } else {
        &target.body[..]
    };
    let head = format!(
        "POST {} HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        target.path,
        target.host,
        target.body.len()
    );
    let _ = tls.write_all(head.as_bytes()).await;
    let _ = tls.write_all(body).await;
    let _ = tls.flush().await;
    counts.requests_abandoned.fetch_add(1, Ordering::SeqCst);
    // Dropped without reading or closing TLS: the TCP connection just goes.
}
