//! Faults under load, through the local control plane of `integration/e2e.sh`: while pods are
//! created steadily in a namespace of a pool (every n-th with an image the policies must refuse),
//! one fault at a time is injected, and each CREATE is accounted for:
//!
//! * `apiserver-restart`: kube-apiserver gets SIGTERM and is started again with the same command
//!   line and environment (`integration/controlplane/restart.sh`);
//! * `etcd-restart`: the same for etcd;
//! * `poolguard-kill`: poolguard gets SIGKILL and is started again (`poolguard-ctl.sh start`);
//!   e2e.sh runs one replica, so with failurePolicy Fail CREATEs fail until it is back;
//! * `config-flap`: poolguard's config file and one policy file (in the copies e2e.sh gives it)
//!   are rewritten every second, alternately broken (invalid YAML, an unknown field, invalid
//!   Rego) and good (the original, a harmless variant); the reload failures must be counted and
//!   the last good version keep serving;
//! * `cert-rotation`: new serving certificates of the same CA are put in place three times.
//!
//! A failure is "unavoidable" when the CREATE was under way while the API server could not
//! serve (from the signal until /readyz answers again: kube-apiserver stopped, or etcd stopped)
//! or while the only poolguard replica was down (fail closed); every other failure, a pod the
//! policies had to refuse that was admitted, and an admitted pod that is not stored with the
//! pool's nodeSelector make the exit status 1. Whether a CREATE whose answer was lost was stored
//! anyway is read back by listing the run's pods afterwards (`poolguard_e2e::load`).
//!
//! Needs KUBECONFIG (the cluster admin), the work directory of e2e.sh (poolguard.env,
//! poolguard.pid) and the control plane's state directory. `faults --help` lists the options.

use std::collections::BTreeMap;
use std::fmt::{Display, Write as _};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::api::{Api, DeleteParams, PostParams};
use kube::Client;
use poolguard_e2e::load::{self, Attempt, Outcome};
use poolguard_e2e::{node_selector, replicas};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const USAGE: &str = "\
usage: faults --work-dir DIR --controlplane DIR [options]   (needs KUBECONFIG)

  --work-dir DIR        integration/e2e.sh's work directory: poolguard.env, poolguard.pid
  --controlplane DIR    the control plane's state directory (start.sh: pids, cmd/, env)
  --ca-dir DIR          ca.crt and ca.key of poolguard's serving certificate (default WORK/ca)
  --out FILE            also write the table as markdown to FILE
  --faults LIST         comma-separated, in order (default: all): apiserver-restart,
                        etcd-restart, poolguard-kill, config-flap, cert-rotation
  --rate N              pod CREATEs per second (default 20)
  --refused-every N     every N-th pod has an image the policies refuse (default 5)
  --lead N              load seconds before each fault (default 3)
  --tail N              load seconds after each fault has ended (default 10)
  --flap-seconds N      config-flap: seconds of rewriting, one version a second (default 20)
  --pool NAME           pool of the load's namespace (default pool1)
  --label KEY           poolguard's namespaceLabel (default agentpool)
  --selector-key KEY    poolguard's nodeSelectorKey (default: the label)
  --image IMAGE         an image the config allows (default registry.k8s.io/pause:3.10)
  --refused-image IMG   an image the config refuses in the pool (default nginx:1.27)";

/// The policy file config-flap rewrites (in the policies directory poolguard reads).
const FLAPPED_POLICY: &str = "allowedrepositories.yaml";
/// Recovery: the length of the first stretch without failures after a fault.
const CLEAN_WINDOW: Duration = Duration::from_secs(5);
/// Longest a probe waits for admissions to work (before the first fault and between faults).
const SETTLE_TIMEOUT: Duration = Duration::from_secs(90);

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Fault {
    ApiserverRestart,
    EtcdRestart,
    PoolguardKill,
    ConfigFlap,
    CertRotation,
}

const ALL: [Fault; 5] = [
    Fault::ApiserverRestart,
    Fault::EtcdRestart,
    Fault::PoolguardKill,
    Fault::ConfigFlap,
    Fault::CertRotation,
];

impl Fault {
    fn id(self) -> &'static str {
        match self {
            Fault::ApiserverRestart => "apiserver-restart",
            Fault::EtcdRestart => "etcd-restart",
            Fault::PoolguardKill => "poolguard-kill",
            Fault::ConfigFlap => "config-flap",
            Fault::CertRotation => "cert-rotation",
        }
    }

    fn parse(s: &str) -> Result<Fault> {
        ALL.into_iter()
            .find(|f| f.id() == s.trim())
            .with_context(|| {
                let known: Vec<_> = ALL.iter().map(|f| f.id()).collect();
                format!("unknown fault {s:?} (known: {})", known.join(", "))
            })
    }

    /// What failures while the fault lasts are, when they are expected.
    fn unavoidable(self) -> Option<&'static str> {
        match self {
            Fault::ApiserverRestart | Fault::EtcdRestart => Some("API server down"),
            Fault::PoolguardKill => Some("webhook down, fail closed"),
            Fault::ConfigFlap | Fault::CertRotation => None,
        }
    }
}

struct Args {
    work_dir: PathBuf,
    controlplane: PathBuf,
    ca_dir: Option<PathBuf>,
    out: Option<PathBuf>,
    faults: Vec<Fault>,
    rate: u32,
    refused_every: usize,
    lead: u64,
    tail: u64,
    flap_seconds: u64,
    pool: String,
    label: String,
    selector_key: Option<String>,
    image: String,
    refused_image: String,
}

impl Args {
    fn parse(mut args: impl Iterator<Item = String>) -> Result<Option<Args>> {
        let mut work_dir = None;
        let mut controlplane = None;
        let mut a = Args {
            work_dir: PathBuf::new(),
            controlplane: PathBuf::new(),
            ca_dir: None,
            out: None,
            faults: ALL.to_vec(),
            rate: 20,
            refused_every: 5,
            lead: 3,
            tail: 10,
            flap_seconds: 20,
            pool: "pool1".into(),
            label: "agentpool".into(),
            selector_key: None,
            image: "registry.k8s.io/pause:3.10".into(),
            refused_image: "nginx:1.27".into(),
        };
        while let Some(flag) = args.next() {
            if flag == "-h" || flag == "--help" {
                return Ok(None);
            }
            let value = args
                .next()
                .with_context(|| format!("{flag} needs a value\n{USAGE}"))?;
            let number = |v: &str| -> Result<u64> {
                v.parse::<u64>()
                    .ok()
                    .filter(|n| *n > 0)
                    .with_context(|| format!("{flag}: expected a positive number, got {v:?}"))
            };
            match flag.as_str() {
                "--work-dir" => work_dir = Some(PathBuf::from(value)),
                "--controlplane" => controlplane = Some(PathBuf::from(value)),
                "--ca-dir" => a.ca_dir = Some(PathBuf::from(value)),
                "--out" => a.out = Some(PathBuf::from(value)),
                "--faults" => {
                    a.faults = value
                        .split(',')
                        .filter(|s| !s.trim().is_empty())
                        .map(Fault::parse)
                        .collect::<Result<_>>()?;
                    ensure!(!a.faults.is_empty(), "--faults names no fault");
                }
                "--rate" => a.rate = u32::try_from(number(&value)?)?,
                "--refused-every" => a.refused_every = usize::try_from(number(&value)?)?,
                "--lead" => a.lead = number(&value)?,
                "--tail" => a.tail = number(&value)?,
                "--flap-seconds" => a.flap_seconds = number(&value)?,
                "--pool" => a.pool = value,
                "--label" => a.label = value,
                "--selector-key" => a.selector_key = Some(value),
                "--image" => a.image = value,
                "--refused-image" => a.refused_image = value,
                other => bail!("unknown option {other}\n{USAGE}"),
            }
        }
        a.work_dir = work_dir.with_context(|| format!("--work-dir is required\n{USAGE}"))?;
        a.controlplane =
            controlplane.with_context(|| format!("--controlplane is required\n{USAGE}"))?;
        Ok(Some(a))
    }

    fn selector_key(&self) -> &str {
        self.selector_key.as_deref().unwrap_or(&self.label)
    }
}

fn log(msg: impl Display) {
    eprintln!("[faults] {msg}");
}

/// poolguard's settings from e2e.sh's poolguard.env (read by bash, which wrote it with %q).
struct Poolguard {
    bin: PathBuf,
    addr: String,
    metrics_addr: String,
    cert_dir: PathBuf,
    config: PathBuf,
    policies_dir: PathBuf,
}

impl Poolguard {
    async fn read(work_dir: &Path) -> Result<Poolguard> {
        let file = work_dir.join("poolguard.env");
        let out = tokio::process::Command::new("bash")
            .arg("-c")
            .arg(r#"set -eu; source "$1"; printf '%s\0' "$PG_BIN" "$PG_ADDR" "$PG_METRICS_ADDR" "$PG_CERT_DIR" "$PG_CONFIG" "$PG_POLICIES_DIR""#)
            .arg("bash")
            .arg(&file)
            .output()
            .await
            .context("running bash")?;
        ensure!(
            out.status.success(),
            "reading {}: {}",
            file.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        );
        let text = String::from_utf8(out.stdout).context("poolguard.env is not UTF-8")?;
        let v: Vec<&str> = text.split('\0').collect();
        ensure!(v.len() == 7, "{}: unexpected contents", file.display());
        Ok(Poolguard {
            bin: v[0].into(),
            addr: v[1].into(),
            metrics_addr: v[2].into(),
            cert_dir: v[3].into(),
            config: v[4].into(),
            policies_dir: v[5].into(),
        })
    }

    /// `poolguard_reloads_total{what=...,result=...}` from its metrics endpoint.
    async fn reloads(&self, what: &str, result: &str) -> Result<u64> {
        let text = http_get(&self.metrics_addr, "/metrics").await?;
        let series = format!("poolguard_reloads_total{{what=\"{what}\",result=\"{result}\"}}");
        Ok(text
            .lines()
            .find_map(|l| l.strip_prefix(&series))
            .and_then(|v| v.trim().parse::<f64>().ok())
            .map_or(0, |v| v as u64))
    }
}

/// A plain HTTP/1.0 GET of loopback `addr` (poolguard's metrics port); returns the body.
async fn http_get(addr: &str, path: &str) -> Result<String> {
    let io = async {
        let mut s = tokio::net::TcpStream::connect(addr).await?;
        s.write_all(format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").as_bytes())
            .await?;
        let mut buf = Vec::new();
        s.read_to_end(&mut buf).await?;
        Ok::<_, std::io::Error>(buf)
    };
    let buf = tokio::time::timeout(Duration::from_secs(5), io)
        .await
        .with_context(|| format!("GET http://{addr}{path}: no answer within 5s"))?
        .with_context(|| format!("GET http://{addr}{path}"))?;
    let text = String::from_utf8_lossy(&buf);
    let (head, body) = text
        .split_once("\r\n\r\n")
        .with_context(|| format!("GET http://{addr}{path}: not an HTTP answer"))?;
    ensure!(
        head.starts_with("HTTP/1.1 200") || head.starts_with("HTTP/1.0 200"),
        "GET http://{addr}{path}: {}",
        head.lines().next().unwrap_or_default()
    );
    Ok(body.to_string())
}

/// When a fault began and ended, and what happened on the way.
struct Injected {
    start: Instant,
    end: Instant,
    /// The span in which failures are unavoidable (when the fault has one).
    unavoidable: Option<(Instant, Instant)>,
    notes: Vec<String>,
    /// Expectations of the fault itself that did not hold (e.g. no reload failure counted).
    problems: Vec<String>,
}

/// One row of the table.
#[derive(Default, Debug)]
struct Row {
    attempted: usize,
    /// Pods with an allowed image admitted (201).
    admitted: usize,
    /// Pods with a refused image refused by a policy (403 "denied the request").
    refused: usize,
    failed_unavoidable: usize,
    failed_other: usize,
    /// Failed CREATEs whose pod was stored anyway (the answer was lost).
    stored_anyway: usize,
    unexpectedly_allowed: usize,
    lost: usize,
    /// From the end of the fault to the first correct answer to a CREATE sent after it.
    first_success: Option<Duration>,
    /// From the end of the fault to the start of the first CLEAN_WINDOW without failures.
    clean: Option<Duration>,
    /// From the fault's start: to the first failure of a CREATE sent after it, and to the first
    /// admission of a CREATE sent after that failure.
    outage: Option<(Duration, Duration)>,
    /// Failure message -> (unavoidable?, count).
    failures: BTreeMap<(bool, String), usize>,
    /// Per-pod findings (lost, unexpectedly allowed), at most a few.
    findings: Vec<String>,
}

/// A policy's refusal, as the API server relays a webhook's denial with poolguard's code 403.
fn policy_refusal(outcome: &Outcome) -> bool {
    matches!(outcome, Outcome::Refused { code: 403, message } if message.contains("denied the request"))
}

/// What one attempt came to.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Verdict {
    /// Admitted and stored with the pool, or refused by a policy as it had to be.
    Correct,
    /// Failed (no answer, an error, or a refusal an allowed image must not get).
    Failed,
    /// Lost or unexpectedly allowed.
    Wrong,
}

/// Accounts for every attempt: `stored` is the run's pods as listed afterwards (name ->
/// nodeSelector), `unavoidable` the span in which failures are expected, `start` and `end` the
/// fault's.
fn account(
    attempts: &[Attempt],
    stored: &BTreeMap<String, BTreeMap<String, String>>,
    unavoidable: Option<(Instant, Instant)>,
    start: Instant,
    end: Instant,
    key: &str,
    pool: &str,
) -> Row {
    let mut row = Row {
        attempted: attempts.len(),
        ..Row::default()
    };
    let finding = |row: &mut Row, text: String| {
        if row.findings.len() < 20 {
            row.findings.push(text);
        }
    };
    let placed = |sel: &BTreeMap<String, String>| sel.get(key).map(String::as_str) == Some(pool);
    // Attempts in order of sending, with their verdicts.
    let mut verdicts: Vec<(&Attempt, Verdict)> = Vec::with_capacity(attempts.len());
    for a in attempts {
        let kept = stored.get(&a.name);
        let verdict = if a.refusal_expected {
            if a.outcome.admitted() || kept.is_some() {
                row.unexpectedly_allowed += 1;
                finding(
                    &mut row,
                    format!("{}: an image the policies refuse was admitted", a.name),
                );
                Verdict::Wrong
            } else if policy_refusal(&a.outcome) {
                row.refused += 1;
                Verdict::Correct
            } else {
                Verdict::Failed
            }
        } else if a.outcome.admitted() {
            row.admitted += 1;
            match kept {
                None => {
                    row.lost += 1;
                    finding(
                        &mut row,
                        format!("{}: admitted (201) but not stored", a.name),
                    );
                    Verdict::Wrong
                }
                Some(sel) if !placed(sel) => {
                    row.lost += 1;
                    finding(
                        &mut row,
                        format!("{}: stored without its pool: nodeSelector {sel:?}", a.name),
                    );
                    Verdict::Wrong
                }
                Some(_) => Verdict::Correct,
            }
        } else {
            if let Some(sel) = kept {
                row.stored_anyway += 1;
                if !placed(sel) {
                    row.lost += 1;
                    finding(
                        &mut row,
                        format!(
                            "{}: failed, but stored without its pool: nodeSelector {sel:?}",
                            a.name
                        ),
                    );
                }
            }
            Verdict::Failed
        };
        if verdict == Verdict::Failed {
            // Unavoidable when under way during the span, unless it is a policy's verdict
            // (on an allowed image), which no fault excuses.
            let during = unavoidable.is_some_and(|(from, to)| a.started <= to && a.ended() >= from)
                && !policy_refusal(&a.outcome);
            if during {
                row.failed_unavoidable += 1;
            } else {
                row.failed_other += 1;
            }
            let mut msg = a.outcome.failure().unwrap_or_default();
            if policy_refusal(&a.outcome) {
                msg = format!("an allowed image refused: {msg}");
            }
            *row.failures.entry((during, msg)).or_default() += 1;
        }
        verdicts.push((a, verdict));
    }
    verdicts.sort_by_key(|(a, _)| a.started);

    let correct = |v: &Verdict| *v == Verdict::Correct;
    // Recovery after the fault's end.
    row.first_success = verdicts
        .iter()
        .filter(|(a, v)| correct(v) && a.started >= end)
        .map(|(a, _)| a.ended() - end)
        .min();
    let last_sent = attempts.iter().map(|a| a.started).max();
    let mut from = end;
    for (a, _) in verdicts
        .iter()
        .filter(|(a, v)| !correct(v) && a.started >= end)
    {
        if a.started < from + CLEAN_WINDOW {
            from = a.started + Duration::from_millis(1);
        } else {
            break;
        }
    }
    row.clean = last_sent
        .filter(|last| *last >= from + CLEAN_WINDOW)
        .map(|_| from - end);
    // The outage as clients saw it: from the fault's start to the first failure of a CREATE sent
    // after it, and to the first admission of a CREATE sent after that failure.
    if let Some((first, _)) = verdicts
        .iter()
        .find(|(a, v)| !correct(v) && a.started >= start)
    {
        let back = verdicts
            .iter()
            .filter(|(a, v)| correct(v) && !a.refusal_expected && a.started >= first.started)
            .map(|(a, _)| a.ended())
            .min();
        if let Some(back) = back {
            row.outage = Some((first.started - start, back - start));
        }
    }
    row
}

struct Harness {
    client: Client,
    args: Args,
    pg: Poolguard,
    ns: String,
    /// Scratch space on the work directory's filesystem (renames into place are atomic).
    scratch: PathBuf,
    restart_sh: PathBuf,
    ctl_sh: PathBuf,
}

impl Harness {
    async fn setup(client: Client, args: Args) -> Result<Harness> {
        let pg = Poolguard::read(&args.work_dir).await?;
        // config-flap rewrites these: never the repository's own files.
        let repo = std::fs::canonicalize(replicas::repository())?;
        for p in [&pg.config, &pg.policies_dir] {
            let p = std::fs::canonicalize(p).with_context(|| format!("{}", p.display()))?;
            ensure!(
                !p.starts_with(&repo),
                "poolguard reads {} from the repository; the faults harness rewrites its config \
                 and policies, so it needs copies (integration/e2e.sh makes them)",
                p.display()
            );
        }
        let scratch = args.work_dir.join("faults-scratch");
        std::fs::create_dir_all(&scratch)?;
        let ns = load::namespace(&client, "pg-faults", &args.label, &args.pool).await?;
        log(format!(
            "namespace {ns} ({}={}); poolguard {} (metrics {}), config {}, policies {}",
            args.label,
            args.pool,
            pg.addr,
            pg.metrics_addr,
            pg.config.display(),
            pg.policies_dir.display()
        ));
        Ok(Harness {
            client,
            args,
            pg,
            ns,
            scratch,
            restart_sh: repo.join("integration/controlplane/restart.sh"),
            ctl_sh: repo.join("integration/e2e/poolguard-ctl.sh"),
        })
    }

    async fn cleanup(&self) {
        let _ = Api::<Namespace>::all(self.client.clone())
            .delete(&self.ns, &DeleteParams::default())
            .await;
        let _ = std::fs::remove_dir_all(&self.scratch);
    }

    /// Waits until a pod with the allowed image is admitted with the pool's nodeSelector and one
    /// with the refused image is refused by the policies (the namespace is in poolguard's cache,
    /// everything answers); returns the time it took.
    async fn settle(&self, what: &str) -> Result<Duration> {
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), &self.ns);
        let start = Instant::now();
        let mut last = String::from("(nothing tried)");
        let mut n = 0;
        let force = DeleteParams {
            grace_period_seconds: Some(0),
            ..DeleteParams::default()
        };
        while start.elapsed() < SETTLE_TIMEOUT {
            n += 1;
            let pod = |name: &str, image: &str| -> Result<Pod> {
                Ok(serde_json::from_value(json!({
                    "metadata": {"name": name},
                    "spec": {
                        "schedulerName": load::NO_SCHEDULER,
                        "containers": [{"name": "main", "image": image}],
                        "terminationGracePeriodSeconds": 0,
                    }
                }))?)
            };
            let name = format!("probe-{what}-{n}");
            let allowed = pods
                .create(&PostParams::default(), &pod(&name, &self.args.image)?)
                .await;
            let _ = pods.delete(&name, &force).await;
            match allowed {
                Ok(p)
                    if node_selector(&p).get(self.args.selector_key()) == Some(&self.args.pool) =>
                {
                    let refused_name = format!("probe-{what}-{n}-refused");
                    let refused = pods
                        .create(
                            &PostParams::default(),
                            &pod(&refused_name, &self.args.refused_image)?,
                        )
                        .await;
                    match refused {
                        Err(kube::Error::Api(s))
                            if s.code == 403 && s.message.contains("denied the request") =>
                        {
                            return Ok(start.elapsed())
                        }
                        Ok(_) => {
                            let _ = pods.delete(&refused_name, &force).await;
                            bail!(
                                "a pod with {} was admitted in {} ({}={}): the config must refuse \
                                 it there (--refused-image)",
                                self.args.refused_image,
                                self.ns,
                                self.args.label,
                                self.args.pool
                            );
                        }
                        Err(e) => last = format!("the refused image: {e}"),
                    }
                }
                Ok(p) => {
                    last = format!(
                        "admitted without the pool: nodeSelector {:?}",
                        node_selector(&p)
                    )
                }
                Err(e) => last = e.to_string(),
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        bail!(
            "admissions did not work within {}s ({what}); last: {last}",
            SETTLE_TIMEOUT.as_secs()
        )
    }

    /// Runs a script; fails unless it succeeds; returns its output.
    async fn script(&self, script: &Path, args: &[&str], limit: Duration) -> Result<String> {
        let shown = format!("{} {}", script.display(), args.join(" "));
        log(format!("$ {shown}"));
        let (ok, text) = load::command(&script.to_string_lossy(), args, limit, log).await?;
        ensure!(ok, "{shown} failed: {}", text.trim());
        Ok(text)
    }

    /// Polls the API server's /readyz (which includes etcd) until it answers 200.
    async fn apiserver_ready(&self, limit: Duration) -> Result<Instant> {
        let start = Instant::now();
        loop {
            let req = http::Request::get("/readyz").body(Vec::new())?;
            let probe =
                tokio::time::timeout(Duration::from_secs(2), self.client.request_text(req)).await;
            if let Ok(Ok(_)) = probe {
                return Ok(Instant::now());
            }
            ensure!(
                start.elapsed() < limit,
                "the API server's /readyz did not answer 200 within {}s",
                limit.as_secs()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    async fn restart_component(&self, component: &str) -> Result<Injected> {
        let state = self.args.controlplane.to_string_lossy().into_owned();
        let start = Instant::now();
        let said = self
            .script(
                &self.restart_sh,
                &[&state, component],
                Duration::from_secs(300),
            )
            .await?;
        let restarted = Instant::now();
        let end = self.apiserver_ready(Duration::from_secs(120)).await?;
        // restart.sh's "<component> exited N s after SIGTERM".
        let exited = said
            .lines()
            .find_map(|l| l.split_once(&format!("{component} exited ")))
            .map_or_else(String::new, |(_, rest)| format!(", it exited {rest}"));
        let mut notes = vec![format!(
            "{component}: SIGTERM{exited}; started again with the same command line and \
             environment (restart.sh returned after {:.1}s); the API server's /readyz answered \
             200 {:.1}s after the signal",
            (restarted - start).as_secs_f64(),
            (end - start).as_secs_f64()
        )];
        if component == "kube-apiserver" {
            notes.push(
                "kube-apiserver stops listening at once on SIGTERM, but exits only once its open \
                 watches have ended or its shutdown timeout (--request-timeout, 60 s) has passed: \
                 any open watch (the controllers', poolguard's) keeps it for that minute (without \
                 clients it exits in about 2 s), and restart.sh waits for the exit."
                    .to_string(),
            );
        }
        Ok(Injected {
            start,
            end,
            unavoidable: Some((start, end)),
            notes,
            problems: Vec::new(),
        })
    }

    async fn kill_poolguard(&self) -> Result<Injected> {
        let pid_file = self.args.work_dir.join("poolguard.pid");
        let pid = std::fs::read_to_string(&pid_file)
            .with_context(|| format!("reading {}", pid_file.display()))?
            .trim()
            .to_string();
        ensure!(
            !pid.is_empty() && pid.chars().all(|c| c.is_ascii_digit()),
            "{} holds no pid",
            pid_file.display()
        );
        let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
        ensure!(
            comm.trim() == "poolguard",
            "pid {pid} of {} is not poolguard ({:?})",
            pid_file.display(),
            comm.trim()
        );
        let start = Instant::now();
        let killed = tokio::process::Command::new("kill")
            .args(["-KILL", &pid])
            .status()
            .await?;
        ensure!(killed.success(), "kill -KILL {pid} failed");
        // Gone (or a zombie nobody has reaped yet).
        let gone = |pid: &str| {
            std::fs::read_to_string(format!("/proc/{pid}/stat")).map_or(true, |s| {
                s.rsplit_once(") ").is_some_and(|(_, r)| r.starts_with('Z'))
            })
        };
        while !gone(&pid) {
            ensure!(
                start.elapsed() < Duration::from_secs(10),
                "poolguard (pid {pid}) still runs 10s after SIGKILL"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let dead = Instant::now();
        let work = self.args.work_dir.to_string_lossy().into_owned();
        self.script(&self.ctl_sh, &["start", &work], Duration::from_secs(120))
            .await?;
        let end = Instant::now();
        let new_pid = std::fs::read_to_string(&pid_file).unwrap_or_default();
        Ok(Injected {
            start,
            end,
            unavoidable: Some((start, end)),
            notes: vec![
                format!(
                    "poolguard (pid {pid}) SIGKILLed, gone after {:.2}s; started again (pid {}) \
                     with poolguard-ctl.sh, /readyz 200 {:.1}s after the kill",
                    (dead - start).as_secs_f64(),
                    new_pid.trim(),
                    (end - start).as_secs_f64()
                ),
                "e2e runs one replica: with failurePolicy Fail CREATEs fail while it is down (the \
                 API server retries a refused connection briefly, so some only wait). The \
                 two-replica version (one SIGKILLed, the other keeps admitting) belongs on the \
                 real node (integration/node/test.sh: the chart's two replicas behind a \
                 Service); it is not built yet - there under_load deletes one replica's pod, \
                 gracefully."
                    .to_string(),
            ],
            problems: Vec::new(),
        })
    }

    /// Puts `text` at `dest` atomically: written next to it in scratch space, renamed over it.
    fn replace(&self, dest: &Path, text: &str) -> Result<()> {
        let name = dest
            .file_name()
            .context("a file path without a name")?
            .to_string_lossy();
        let tmp = self.scratch.join(format!("{name}.new"));
        std::fs::write(&tmp, text).with_context(|| format!("writing {}", tmp.display()))?;
        std::fs::rename(&tmp, dest)
            .with_context(|| format!("renaming {} to {}", tmp.display(), dest.display()))
    }

    async fn flap_config(&self) -> Result<Injected> {
        let config_path = &self.pg.config;
        let policy_path = self.pg.policies_dir.join(FLAPPED_POLICY);
        let config = std::fs::read_to_string(config_path)
            .with_context(|| format!("reading {}", config_path.display()))?;
        let policy = std::fs::read_to_string(&policy_path)
            .with_context(|| format!("reading {}", policy_path.display()))?;
        let versions = flap_versions(&config, &policy);
        let failures_before = self.pg.reloads("rules", "failure").await?;
        let successes_before = self.pg.reloads("rules", "success").await?;
        let start = Instant::now();
        let steps = self.args.flap_seconds;
        for step in 0..steps {
            let (what, config_text, policy_text) = &versions[(step % 4) as usize];
            log(format!("config-flap {}/{steps}: {what}", step + 1));
            self.replace(config_path, config_text)?;
            self.replace(&policy_path, policy_text)?;
            let next = start + Duration::from_secs(step + 1);
            tokio::time::sleep_until(next.into()).await;
        }
        // The originals last, then the reloads they cause must have run (no change of the
        // counters for 1.5 s): poolguard serves them again.
        self.replace(config_path, &config)?;
        self.replace(&policy_path, &policy)?;
        let end = Instant::now();
        let quiet = self.reloads_quiet("rules").await?;
        let failures = self.pg.reloads("rules", "failure").await? - failures_before;
        let successes = self.pg.reloads("rules", "success").await? - successes_before;
        let mut problems = Vec::new();
        if failures == 0 {
            problems.push(
                "no reload failure was counted (poolguard_reloads_total{what=\"rules\",result=\"failure\"})"
                    .to_string(),
            );
        }
        if successes == 0 {
            problems.push("no successful reload was counted".to_string());
        }
        Ok(Injected {
            start,
            end,
            unavoidable: None,
            notes: vec![format!(
                "{steps} rewrites of {} and {FLAPPED_POLICY}, one a second (broken: invalid YAML, \
                 an unknown field, invalid Rego; good: the originals, a harmless variant), then \
                 the originals; rules reloads counted: {failures} failed, {successes} succeeded; \
                 reloads settled {:.1}s after the last write",
                config_path
                    .file_name()
                    .map_or_else(String::new, |n| n.to_string_lossy().into_owned()),
                quiet.as_secs_f64()
            )],
            problems,
        })
    }

    /// Waits until poolguard's reload counters for `what` have not changed for 1.5 s (at least
    /// 1 s from now: its debounce is 200 ms); returns how long that took.
    async fn reloads_quiet(&self, what: &str) -> Result<Duration> {
        let start = Instant::now();
        let count = || async {
            Ok::<_, anyhow::Error>(
                self.pg.reloads(what, "success").await? + self.pg.reloads(what, "failure").await?,
            )
        };
        tokio::time::sleep(Duration::from_secs(1)).await;
        let mut last = count().await?;
        let mut since = Instant::now();
        while since.elapsed() < Duration::from_millis(1500) {
            ensure!(
                start.elapsed() < Duration::from_secs(30),
                "poolguard's {what} reloads did not settle within 30s"
            );
            tokio::time::sleep(Duration::from_millis(250)).await;
            let now = count().await?;
            if now != last {
                last = now;
                since = Instant::now();
            }
        }
        Ok(start.elapsed() - Duration::from_millis(1500))
    }

    /// SHA-256 fingerprint of the certificate poolguard serves, or of a PEM file (openssl).
    async fn fingerprint(&self, file: Option<&Path>) -> Result<String> {
        let script = match file {
            Some(_) => r#"openssl x509 -in "$1" -noout -fingerprint -sha256"#,
            None => {
                r#"openssl s_client -connect "$1" -servername localhost </dev/null 2>/dev/null |
                   openssl x509 -noout -fingerprint -sha256"#
            }
        };
        let arg = match file {
            Some(f) => f.to_string_lossy().into_owned(),
            None => self.pg.addr.clone(),
        };
        let out = tokio::time::timeout(
            Duration::from_secs(10),
            tokio::process::Command::new("bash")
                .args(["-c", &format!("set -o pipefail; {script}"), "bash", &arg])
                .kill_on_drop(true)
                .output(),
        )
        .await
        .context("openssl did not answer within 10s")??;
        ensure!(
            out.status.success(),
            "openssl: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
    }

    async fn rotate_certs(&self) -> Result<Injected> {
        let ca_dir = self
            .args
            .ca_dir
            .clone()
            .unwrap_or_else(|| self.args.work_dir.join("ca"));
        let (ca_cert, ca_key) = (ca_dir.join("ca.crt"), ca_dir.join("ca.key"));
        ensure!(
            ca_key.exists(),
            "{} is missing: the rotation signs with the CA of the webhooks' caBundle",
            ca_key.display()
        );
        let failures_before = self.pg.reloads("tls", "failure").await?;
        let successes_before = self.pg.reloads("tls", "success").await?;
        let mut notes = Vec::new();
        let mut problems = Vec::new();
        let start = Instant::now();
        let mut end = start;
        for round in 1..=3 {
            if round > 1 {
                tokio::time::sleep(Duration::from_secs(3)).await;
            }
            let fresh = self.scratch.join(format!("certs-{round}"));
            let made = tokio::process::Command::new(&self.pg.bin)
                .arg("certs")
                .arg("--out-dir")
                .arg(&fresh)
                .arg("--ca-cert")
                .arg(&ca_cert)
                .arg("--ca-key")
                .arg(&ca_key)
                .args(["--ip", "127.0.0.1", "--dns-name", "localhost"])
                .output()
                .await?;
            ensure!(
                made.status.success(),
                "poolguard certs --ca-cert --ca-key failed: {}",
                String::from_utf8_lossy(&made.stderr).trim()
            );
            let want = self.fingerprint(Some(&fresh.join("tls.crt"))).await?;
            // Key first, then the certificate, each renamed into place (atomic): poolguard
            // reloads both after its 200 ms debounce; a reload that would see a new key with the
            // old certificate refuses the pair (counted) and the old pair keeps serving.
            let renamed = Instant::now();
            std::fs::rename(fresh.join("tls.key"), self.pg.cert_dir.join("tls.key"))?;
            std::fs::rename(fresh.join("tls.crt"), self.pg.cert_dir.join("tls.crt"))?;
            let served = loop {
                if self.fingerprint(None).await.ok().as_deref() == Some(want.as_str()) {
                    break Some(renamed.elapsed());
                }
                if renamed.elapsed() > Duration::from_secs(15) {
                    break None;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            };
            end = Instant::now();
            match served {
                Some(d) => notes.push(format!(
                    "rotation {round}: the new certificate served {:.2}s after the rename",
                    d.as_secs_f64()
                )),
                None => problems.push(format!(
                    "rotation {round}: the new certificate was not served within 15s"
                )),
            }
        }
        self.reloads_quiet("tls").await?;
        let failures = self.pg.reloads("tls", "failure").await? - failures_before;
        let successes = self.pg.reloads("tls", "success").await? - successes_before;
        notes.push(format!(
            "new serving certificates signed by the webhooks' CA (poolguard certs --ca-cert \
             --ca-key); tls reloads counted: {successes} succeeded, {failures} refused (a key \
             and certificate that do not match, while the pair is being replaced)"
        ));
        if successes == 0 {
            problems.push("no successful tls reload was counted".to_string());
        }
        Ok(Injected {
            start,
            end,
            unavoidable: None,
            notes,
            problems,
        })
    }

    async fn inject(&self, fault: Fault) -> Result<Injected> {
        match fault {
            Fault::ApiserverRestart => self.restart_component("kube-apiserver").await,
            Fault::EtcdRestart => self.restart_component("etcd").await,
            Fault::PoolguardKill => self.kill_poolguard().await,
            Fault::ConfigFlap => self.flap_config().await,
            Fault::CertRotation => self.rotate_certs().await,
        }
    }

    /// One fault under load.
    async fn run(&self, fault: Fault, index: usize) -> Result<Report> {
        let settled = self.settle(fault.id()).await?;
        let run_id = format!("f{index}");
        log(format!(
            "=== {} (admissions work: {:.1}s); load {}/s in {}, every {}th pod refused by policy, \
             pods labelled {}={run_id}",
            fault.id(),
            settled.as_secs_f64(),
            self.args.rate,
            self.ns,
            self.args.refused_every,
            load::LOAD_LABEL
        ));
        let stop = Arc::new(AtomicBool::new(false));
        let generator = tokio::spawn(load::generate(
            self.client.clone(),
            load::Spec {
                namespace: self.ns.clone(),
                run_id: run_id.clone(),
                rate: self.args.rate,
                image: self.args.image.clone(),
                refused: Some((self.args.refused_image.clone(), self.args.refused_every)),
                selector_key: self.args.selector_key().to_string(),
                pool: self.args.pool.clone(),
            },
            stop.clone(),
        ));
        let load_start = Instant::now();
        tokio::time::sleep(Duration::from_secs(self.args.lead)).await;
        let injected = self.inject(fault).await;
        let tail_until = match &injected {
            Ok(i) => i.end + Duration::from_secs(self.args.tail),
            Err(_) => Instant::now(),
        };
        tokio::time::sleep_until(tail_until.into()).await;
        stop.store(true, Ordering::SeqCst);
        let load_secs = load_start.elapsed().as_secs_f64();
        let attempts = generator.await.context("load task")?;
        let injected = match injected {
            Ok(i) => i,
            Err(e) => {
                let _ = load::delete_run(&self.client, &self.ns, &run_id).await;
                return Err(e.context(format!("injecting {}", fault.id())));
            }
        };
        // The API server is serving again (the fault has ended): list what was stored.
        self.apiserver_ready(Duration::from_secs(60)).await?;
        let stored: BTreeMap<String, BTreeMap<String, String>> =
            load::stored(&self.client, &self.ns, &run_id)
                .await?
                .into_iter()
                .map(|(name, pod)| (name, node_selector(&pod)))
                .collect();
        let row = account(
            &attempts,
            &stored,
            injected.unavoidable,
            injected.start,
            injected.end,
            self.args.selector_key(),
            &self.args.pool,
        );
        let (p50, p99, max) = load::latency_ms(&attempts);
        log(format!(
            "{}: {} attempted in {load_secs:.1}s, {} admitted, {} refused by policy, {} failed \
             ({} unavoidable, {} other), {} unexpectedly allowed, {} lost; latency p50 {p50:.0} \
             ms, p99 {p99:.0} ms, max {max:.0} ms",
            fault.id(),
            row.attempted,
            row.admitted,
            row.refused,
            row.failed_unavoidable + row.failed_other,
            row.failed_unavoidable,
            row.failed_other,
            row.unexpectedly_allowed,
            row.lost
        ));
        for note in &injected.notes {
            log(format!("  {note}"));
        }
        for ((during, msg), n) in &row.failures {
            log(format!(
                "  {n} x {}: {msg}",
                if *during { "unavoidable" } else { "OTHER" }
            ));
        }
        for f in &row.findings {
            log(format!("  {f}"));
        }
        for p in &injected.problems {
            log(format!("  PROBLEM: {p}"));
        }
        load::delete_run(&self.client, &self.ns, &run_id).await?;
        Ok(Report {
            fault,
            row,
            injected,
            load_secs,
            latency: (p50, p99, max),
        })
    }
}

/// config-flap's versions, one a second in this order: (what, config, policy file).
fn flap_versions(config: &str, policy: &str) -> [(String, String, String); 4] {
    let config_variant = if config.contains("timeoutMillis: 500") {
        config.replacen("timeoutMillis: 500", "timeoutMillis: 600", 1)
    } else {
        format!("{config}\n# a harmless variant (faults harness)\n")
    };
    let policy_variant = format!("# a harmless variant (faults harness)\n{policy}");
    let broken_yaml = |text: &str| format!("{text}\nbroken: [unclosed\n");
    let broken_rego = match policy.find("\n  import rego.v1\n") {
        Some(i) => format!("{}\n  this is not Rego (\n{}", &policy[..i], &policy[i..]),
        None => broken_yaml(policy),
    };
    [
        (
            "broken: invalid YAML in both".to_string(),
            broken_yaml(config),
            broken_yaml(policy),
        ),
        (
            "good: a config variant (evaluation timeout), the original policy".to_string(),
            config_variant,
            policy.to_string(),
        ),
        (
            "broken: an unknown config field, invalid Rego".to_string(),
            format!("{config}\nunknownFaultsField: true\n"),
            broken_rego,
        ),
        (
            "good: the original config, a policy variant (a comment)".to_string(),
            config.to_string(),
            policy_variant,
        ),
    ]
}

struct Report {
    fault: Fault,
    row: Row,
    injected: Injected,
    load_secs: f64,
    latency: (f64, f64, f64),
}

impl Report {
    fn clean(&self) -> bool {
        self.row.lost == 0
            && self.row.unexpectedly_allowed == 0
            && self.row.failed_other == 0
            && self.injected.problems.is_empty()
    }
}

fn secs(d: Option<Duration>) -> String {
    d.map_or_else(
        || "not seen".to_string(),
        |d| format!("{:.1} s", d.as_secs_f64()),
    )
}

/// The table and the notes, as markdown.
fn markdown(args: &Args, reports: &[Report], error: Option<&anyhow::Error>) -> String {
    let mut md = String::new();
    let _ = writeln!(
        md,
        "## Faults under load\n\n{} pod CREATEs/s in a namespace of pool {} (every {}th with {}, \
         which the policies must refuse), through both webhooks (failurePolicy Fail) of one \
         poolguard; {} s of load before each fault, {} s after its end.\n",
        args.rate, args.pool, args.refused_every, args.refused_image, args.lead, args.tail
    );
    let _ = writeln!(
        md,
        "| fault | attempted | admitted | refused by policy (expected) | failed: unavoidable | \
         failed: other | unexpectedly allowed | pods lost | fault lasted | first success after it | \
         5 s without failures after it |"
    );
    let _ = writeln!(md, "|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|");
    for r in reports {
        let row = &r.row;
        let unavoidable = match r.fault.unavoidable() {
            Some(kind) => format!("{} ({kind})", row.failed_unavoidable),
            None => "-".to_string(),
        };
        let _ = writeln!(
            md,
            "| {} | {} | {} | {} | {unavoidable} | {} | {} | {} | {:.1} s | {} | {} |",
            r.fault.id(),
            row.attempted,
            row.admitted,
            row.refused,
            row.failed_other,
            row.unexpectedly_allowed,
            row.lost,
            (r.injected.end - r.injected.start).as_secs_f64(),
            secs(row.first_success),
            secs(row.clean),
        );
    }
    let _ = writeln!(md);
    for r in reports {
        let row = &r.row;
        let _ = writeln!(
            md,
            "**{}** ({}): {:.1} s of load; latency p50 {:.0} ms, p99 {:.0} ms, max {:.0} ms.",
            r.fault.id(),
            if r.clean() { "ok" } else { "FAILED" },
            r.load_secs,
            r.latency.0,
            r.latency.1,
            r.latency.2
        );
        for note in &r.injected.notes {
            let _ = writeln!(md, "- {note}");
        }
        match row.outage {
            Some((from, to)) => {
                let _ = writeln!(
                    md,
                    "- as clients saw it, from the fault's start: the first failure after {:.1} s, \
                     the first admission again after {:.1} s",
                    from.as_secs_f64(),
                    to.as_secs_f64()
                );
            }
            None if row.failed_unavoidable + row.failed_other == 0 => {
                let _ = writeln!(md, "- no CREATE failed");
            }
            None => {}
        }
        if row.stored_anyway > 0 {
            let _ = writeln!(
                md,
                "- {} failed CREATEs were stored anyway (their answer was lost), each with its pool",
                row.stored_anyway
            );
        }
        for ((during, msg), n) in &row.failures {
            let class = match r.fault.unavoidable() {
                Some(kind) if *during => format!("{kind} (unavoidable)"),
                _ => "other".to_string(),
            };
            let _ = writeln!(md, "- {n} failed, {class}: `{}`", msg.replace('`', "'"));
        }
        for f in &row.findings {
            let _ = writeln!(md, "- {f}");
        }
        for p in &r.injected.problems {
            let _ = writeln!(md, "- problem: {p}");
        }
        let _ = writeln!(md);
    }
    if let Some(e) = error {
        let _ = writeln!(md, "**Stopped by an error:** {e:#}\n");
    }
    md
}

async fn main_inner() -> Result<bool> {
    let Some(args) = Args::parse(std::env::args().skip(1))? else {
        println!("{USAGE}");
        return Ok(true);
    };
    let client = load::connect().await?;
    let faults = args.faults.clone();
    let harness = Harness::setup(client, args).await?;
    let started = Instant::now();
    let mut reports = Vec::new();
    let mut error = None;
    for (i, fault) in faults.iter().enumerate() {
        match harness.run(*fault, i + 1).await {
            Ok(r) => reports.push(r),
            Err(e) => {
                error = Some(e);
                break;
            }
        }
    }
    harness.cleanup().await;
    log(format!(
        "{} faults in {:.0}s",
        reports.len(),
        started.elapsed().as_secs_f64()
    ));
    let md = markdown(&harness.args, &reports, error.as_ref());
    match &harness.args.out {
        Some(path) => {
            std::fs::write(path, &md).with_context(|| format!("writing {}", path.display()))?;
            log(format!("table written to {}", path.display()));
        }
        None => print!("{md}"),
    }
    if let Some(e) = error {
        return Err(e);
    }
    Ok(reports.iter().all(Report::clean))
}

#[tokio::main]
async fn main() -> ExitCode {
    match main_inner().await {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => {
            log("FAILED: failures that are not unavoidable, pods lost or unexpectedly allowed, or a fault's own check (see above)");
            ExitCode::FAILURE
        }
        Err(e) => {
            log(format!("error: {e:#}"));
            ExitCode::from(2)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attempt(t0: Instant, at_ms: u64, took_ms: u64, refused: bool, outcome: Outcome) -> Attempt {
        Attempt {
            name: format!("p{at_ms}"),
            started: t0 + Duration::from_millis(at_ms),
            latency: Duration::from_millis(took_ms),
            refusal_expected: refused,
            outcome,
        }
    }

    fn failed(msg: &str) -> Outcome {
        Outcome::Failed(msg.to_string())
    }

    fn denied() -> Outcome {
        Outcome::Refused {
            code: 403,
            message: "admission webhook \"v\" denied the request: not allowed".into(),
        }
    }

    fn placed(names: &[&str]) -> BTreeMap<String, BTreeMap<String, String>> {
        names
            .iter()
            .map(|n| {
                (
                    n.to_string(),
                    BTreeMap::from([("agentpool".to_string(), "pool1".to_string())]),
                )
            })
            .collect()
    }

    #[test]
    fn failures_are_unavoidable_only_while_the_fault_lasts() {
        let t0 = Instant::now();
        let ms = |m| t0 + Duration::from_millis(m);
        let attempts = vec![
            attempt(t0, 0, 10, false, Outcome::Placed),
            // Under way when the span began: unavoidable.
            attempt(t0, 900, 200, false, failed("connection reset")),
            attempt(t0, 1500, 10, false, failed("connection refused")),
            attempt(t0, 1600, 10, true, failed("connection refused")),
            // A policy's verdict on an allowed image is never excused.
            attempt(t0, 1700, 10, false, denied()),
            // After the span: other.
            attempt(t0, 3100, 10, false, failed("500 Internal error")),
            attempt(t0, 3200, 10, true, denied()),
            attempt(t0, 3300, 10, false, Outcome::Placed),
        ];
        let stored = placed(&["p0", "p3300"]);
        let row = account(
            &attempts,
            &stored,
            Some((ms(1000), ms(3000))),
            ms(1000),
            ms(3000),
            "agentpool",
            "pool1",
        );
        assert_eq!(row.attempted, 8);
        assert_eq!(row.admitted, 2);
        assert_eq!(row.refused, 1);
        assert_eq!(row.failed_unavoidable, 3);
        assert_eq!(row.failed_other, 2);
        assert_eq!((row.lost, row.unexpectedly_allowed), (0, 0));
        assert!(row.failures.contains_key(&(
            false,
            "an allowed image refused: 403 admission webhook \"v\" denied the request: not allowed"
                .to_string()
        )));
        // The first correct answer to a CREATE sent after the end: p3200 (a refusal), 210 ms.
        assert_eq!(row.first_success, Some(Duration::from_millis(210)));
        // The last load start (3300) is not 5 s after the end: no clean window seen.
        assert_eq!(row.clean, None);
        // The failure under way when the fault began does not count: the first one sent
        // after it (1.5 s) does; the first admission after it is p3300's (3.31 s).
        assert_eq!(
            row.outage,
            Some((Duration::from_millis(500), Duration::from_millis(2310)))
        );
    }

    #[test]
    fn lost_and_unexpectedly_allowed() {
        let t0 = Instant::now();
        let sel = BTreeMap::from([("other".to_string(), "x".to_string())]);
        let attempts = vec![
            // 201 but gone.
            attempt(t0, 0, 10, false, Outcome::Placed),
            // 201 without the pool.
            attempt(t0, 100, 10, false, Outcome::Unplaced(sel.clone())),
            // A refused image admitted.
            attempt(t0, 200, 10, true, Outcome::Placed),
            // A refused image whose CREATE timed out, stored anyway.
            attempt(t0, 300, 10, true, failed("no answer within 60s")),
            // An allowed image whose answer was lost, stored with its pool: a failure, not lost.
            attempt(t0, 400, 10, false, failed("connection reset")),
        ];
        let mut stored = placed(&["p200", "p300", "p400"]);
        stored.insert("p100".into(), sel);
        let row = account(&attempts, &stored, None, t0, t0, "agentpool", "pool1");
        assert_eq!(row.lost, 2);
        assert_eq!(row.unexpectedly_allowed, 2);
        assert_eq!(row.failed_other, 1);
        assert_eq!(row.stored_anyway, 1);
        assert_eq!(row.findings.len(), 4, "{:?}", row.findings);
    }

    #[test]
    fn a_clean_window_after_the_last_failure() {
        let t0 = Instant::now();
        let mut attempts = vec![
            attempt(t0, 1000, 10, false, failed("x")),
            attempt(t0, 2000, 10, false, failed("x")),
        ];
        for at in (2100..9000).step_by(100) {
            attempts.push(attempt(t0, at, 10, false, Outcome::Placed));
        }
        let names: Vec<String> = attempts.iter().map(|a| a.name.clone()).collect();
        let stored = placed(&names.iter().map(String::as_str).collect::<Vec<_>>());
        let end = t0 + Duration::from_millis(500);
        let row = account(&attempts, &stored, None, t0, end, "agentpool", "pool1");
        assert_eq!(row.clean, Some(Duration::from_millis(1501)));
        assert_eq!(row.first_success, Some(Duration::from_millis(1610)));
        assert_eq!(row.failed_other, 2);
    }

    #[test]
    fn flap_versions_break_and_restore() {
        let config = "namespaceLabel: agentpool\nevaluation:\n  timeoutMillis: 500\n";
        let policy = "name: p\npolicy: |\n  package p\n\n  import rego.v1\n\n  x if { true }\n";
        let v = flap_versions(config, policy);
        assert!(v[0].1.contains("[unclosed") && v[0].2.contains("[unclosed"));
        assert!(v[1].1.contains("timeoutMillis: 600") && v[1].2 == policy);
        assert!(v[2].1.contains("unknownFaultsField") && v[2].2.contains("this is not Rego"));
        assert!(v[3].1 == config && v[3].2.ends_with(policy));
    }
}
