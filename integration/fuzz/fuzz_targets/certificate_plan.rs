//! The self-managed certificate loop, simulated: `rotation::plan` decides each step from what
//! is stored (the Secret) and published (the webhook configurations' CA bundle), the step is
//! carried out as `cluster::managed_certs` carries it out, and `pacing` says when the next one
//! runs. The fuzzer chooses the settings, the start time, late or failing steps and what other
//! writers do to the Secret and the webhook configurations.
//!
//! Checked after every step:
//! - `plan` never panics; it fails only after outside writes, and only when the stored key is not
//!   the newest CA's;
//! - it starts over (a new CA sharing nothing with the stored bundle) only when nothing usable
//!   is stored: no Secret, no readable bundle, or its newest CA expired;
//! - it drops from the bundle only CAs that have expired, and never the one that signed the
//!   served certificate;
//! - it publishes only what is stored;
//! - without outside writes, a step never makes the served certificate untrusted (its CA, while
//!   valid, missing from the published bundle), and "again" steps in a row (on time, without a
//!   failure between them) stay within the pacing's budget;
//! - without outside writes and with every step on time, the served certificate is always
//!   within its validity, and so is its CA, once the first bundle is published (for lifetimes
//!   long enough for a renewal: a third of each covers the grace and two check intervals);
//! - after outside writes that do not corrupt keys or certificates (a deleted Secret, an old or
//!   empty published bundle, an odd or missing publication time, an extra PEM block, an earlier
//!   Secret written back), steps on time repair everything within the grace and three check
//!   intervals;
//! - the pacing waits at least the minimum interval, the check interval after a settled step and
//!   no more than the backoff cap after a failed one.
#![no_main]

use std::time::Duration;

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use poolguard_fuzz::certs::authority::Authority;
use poolguard_fuzz::certs::pacing::{self, Outcome, Pace, Pacing};
use poolguard_fuzz::certs::rotation::{facts, plan, CertFacts, Settings, Step, Stored};

/// 2020-01-01T00:00:00Z.
const EPOCH_2020: i64 = 1_577_836_800;
const MAX_EVENTS: usize = 300;
/// Late steps take the clock no further than this (the year 8307): certificates carry years up to
/// 9999, and no real clock gets near.
const MAX_NOW: i64 = 200_000_000_000;

#[derive(Arbitrary, Debug)]
struct Input {
    /// Seconds after 2020-01-01 at the first step.
    start: u32,
    check_interval: u16,
    publish_grace: u16,
    /// Lifetimes, in units of the least that lets a renewal finish in time (see `lifetimes`).
    serving_units: u8,
    ca_units: u8,
    events: Vec<Event>,
}

#[derive(Arbitrary, Debug)]
enum Event {
    /// The next step, on time.
    Step,
    /// The next step, this many seconds late (a paused process, a slow API server).
    Late(u32),
    /// The next step fails before writing anything (the API server refuses or is unreachable).
    Fail,
    /// The next step publishes but fails to record the publication in the Secret.
    FailAfterPublishing,
    /// Another writer.
    Outside(Outside),
}

#[derive(Arbitrary, Debug)]
enum Outside {
    DeleteSecret,
    /// The webhook configurations are applied again with an old or empty CA bundle.
    ResetPublishedBundle(Option<u8>),
    SetPublishedAt(i64),
    ClearPublishedAt,
    /// A field of the Secret replaced by these bytes.
    Replace(Field, Vec<u8>),
    /// A field of the Secret cut to this many bytes.
    Truncate(Field, u16),
    /// A PEM block of this type added before or after the CA bundle's certificates.
    AddPemBlock {
        label: Label,
        before: bool,
        body: Vec<u8>,
    },
    /// The CA bundle's blocks in reverse order.
    ReverseBundle,
    /// An earlier content of the Secret written back (a replica with a stale copy).
    RestoreEarlier(u8),
}

impl Outside {
    /// Whether the loop must repair this by itself, promptly: everything but corrupting the
    /// Secret's keys and certificates (which may wait for the next CA).
    fn repairable(&self) -> bool {
        !matches!(
            self,
            Outside::Replace(..) | Outside::Truncate(..) | Outside::ReverseBundle
        )
    }
}

#[derive(Arbitrary, Debug, Clone, Copy)]
enum Field {
    Bundle,
    CaKey,
    TlsCrt,
    TlsKey,
}

#[derive(Arbitrary, Debug, Clone, Copy)]
enum Label {
    Certificate,
    PrivateKey,
    EcPrivateKey,
    Crl,
}

/// What the cluster holds.
#[derive(Debug, Default)]
struct World {
    now: i64,
    secret: Option<Stored>,
    /// The CA bundle in the webhook configurations.
    published: Option<String>,
    /// Every content the Secret had, oldest first.
    history: Vec<Stored>,
    /// Whether anything but the loop itself wrote (this run has outside writes).
    interfered: bool,
}

fn field(stored: &mut Stored, field: Field) -> &mut String {
    match field {
        Field::Bundle => &mut stored.bundle,
        Field::CaKey => &mut stored.ca_key,
        Field::TlsCrt => &mut stored.tls_crt,
        Field::TlsKey => &mut stored.tls_key,
    }
}

fn pem_block(label: Label, body: &[u8]) -> String {
    let label = match label {
        Label::Certificate => "CERTIFICATE",
        Label::PrivateKey => "PRIVATE KEY",
        Label::EcPrivateKey => "EC PRIVATE KEY",
        Label::Crl => "X509 CRL",
    };
    // Whole base64 quanta, so that the block decodes.
    let len = body.len().min(96) / 4 * 4;
    let body: String = body[..len]
        .iter()
        .map(|b| {
            let alphabet = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
            char::from(alphabet[usize::from(b % 64)])
        })
        .collect();
    format!("-----BEGIN {label}-----\n{body}\n-----END {label}-----\n")
}

impl World {
    fn outside(&mut self, what: &Outside) {
        self.interfered = true;
        match what {
            Outside::DeleteSecret => self.secret = None,
            Outside::ResetPublishedBundle(earlier) => {
                self.published = earlier.and_then(|i| {
                    let n = self.history.len();
                    (n > 0).then(|| self.history[usize::from(i) % n].bundle.clone())
                });
            }
            Outside::SetPublishedAt(at) => {
                if let Some(s) = &mut self.secret {
                    s.published_at = Some(*at);
                }
            }
            Outside::ClearPublishedAt => {
                if let Some(s) = &mut self.secret {
                    s.published_at = None;
                }
            }
            Outside::Replace(which, bytes) => {
                let s = self.secret.get_or_insert_with(Stored::default);
                *field(s, *which) = String::from_utf8_lossy(bytes).into_owned();
            }
            Outside::Truncate(which, len) => {
                if let Some(s) = &mut self.secret {
                    let text = field(s, *which);
                    let mut cut = usize::from(*len).min(text.len());
                    while !text.is_char_boundary(cut) {
                        cut -= 1;
                    }
                    text.truncate(cut);
                }
            }
            Outside::AddPemBlock {
                label,
                before,
                body,
            } => {
                if let Some(s) = &mut self.secret {
                    let block = pem_block(*label, body);
                    s.bundle = if *before {
                        block + &s.bundle
                    } else {
                        s.bundle.clone() + &block
                    };
                }
            }
            Outside::ReverseBundle => {
                if let Some(s) = &mut self.secret {
                    let mut blocks = pem_blocks(&s.bundle);
                    blocks.reverse();
                    s.bundle = blocks.concat();
                }
            }
            Outside::RestoreEarlier(i) => {
                let n = self.history.len();
                if n > 0 {
                    self.secret = Some(self.history[usize::from(*i) % n].clone());
                }
            }
        }
    }

    fn is_published(&self) -> bool {
        match (&self.secret, &self.published) {
            (Some(s), Some(p)) => &s.bundle == p,
            _ => false,
        }
    }

    /// The served certificate's CA, when the published bundle holds it.
    fn trusted_ca(&self) -> Option<CertFacts> {
        let serving = serving(self.secret.as_ref()?)?;
        let published = facts(self.published.as_ref()?).ok()?;
        published
            .into_iter()
            .find(|ca| ca.subject == serving.issuer)
    }
}

/// The PEM blocks of `text` as `rotation` splits them (each with its trailing newline).
fn pem_blocks(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut current = String::new();
    for line in text.lines() {
        current.push_str(line);
        current.push('\n');
        if line.starts_with("-----END") {
            out.push(std::mem::take(&mut current));
        }
    }
    out
}

/// Whether the stored key belongs to the newest CA (the first certificate of the bundle).
fn can_sign(stored: &Stored) -> bool {
    let newest = pem_blocks(&stored.bundle)
        .into_iter()
        .find(|block| facts(block).is_ok_and(|f| !f.is_empty()));
    newest.is_some_and(|pem| Authority::from_pem(&pem, &stored.ca_key).is_ok())
}

fn serving(stored: &Stored) -> Option<CertFacts> {
    facts(&stored.tls_crt).ok()?.into_iter().next()
}

/// Serving and CA lifetimes: `units` times the least lifetime whose last third covers the publish
/// grace, two check intervals and the few "again" steps of a rotation.
fn lifetimes(input: &Input, check: u64, grace: u64) -> (u64, u64) {
    let least = 3 * (grace + 2 * check + 4 * pacing::MIN_INTERVAL.as_secs());
    let serving = least * (1 + u64::from(input.serving_units % 16));
    let ca = least * (1 + u64::from(input.ca_units % 16));
    (serving, ca)
}

/// `CERT_PLAN_TRACE=1` prints each step (to read a crash).
fn trace() -> bool {
    static TRACE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *TRACE.get_or_init(|| std::env::var_os("CERT_PLAN_TRACE").is_some())
}

/// What one step of the loop does, checked against the invariants that hold for any state.
fn step(world: &mut World, settings: &Settings, fail_after_publishing: bool) -> Outcome {
    let now = world.now;
    let before = world.secret.clone();
    let result = plan(before.as_ref(), world.is_published(), now, settings);
    if trace() {
        eprintln!(
            "t={now} published={} -> {}",
            world.is_published(),
            match &result {
                Ok(Step::Store(s)) => format!("Store(published_at {:?})", s.published_at),
                other => format!("{other:?}"),
            }
        );
    }
    let step = match result {
        Ok(step) => step,
        Err(e) => {
            assert!(world.interfered, "the plan fails on its own state: {e:#}");
            assert!(
                !before.as_ref().is_some_and(can_sign),
                "the plan fails although the stored key signs for the newest CA: {e:#}\n{before:?}"
            );
            return Outcome::Failed;
        }
    };
    match step {
        Step::Idle => Outcome::Settled,
        Step::Publish => {
            let mut stored = before.expect("Publish with nothing stored");
            world.published = Some(stored.bundle.clone());
            if fail_after_publishing {
                return Outcome::Failed;
            }
            stored.published_at = Some(now);
            world.secret = Some(stored.clone());
            world.history.push(stored);
            Outcome::Again
        }
        Step::Store(stored) => {
            check_store(before.as_ref(), &stored, now);
            world.secret = Some(stored.clone());
            world.history.push(stored);
            Outcome::Again
        }
    }
}

/// A new Secret content: a start over only when nothing usable is stored; otherwise only expired
/// CAs leave the bundle, and never the one that signed the served certificate.
fn check_store(before: Option<&Stored>, after: &Stored, now: i64) {
    let new_cas = facts(&after.bundle).expect("a stored bundle reads");
    assert!(!new_cas.is_empty(), "a stored bundle holds a CA");
    assert!(
        new_cas[0].not_after > now,
        "the newest stored CA has not expired"
    );
    let old_cas = match before.map(|b| facts(&b.bundle)) {
        Some(Ok(cas)) if cas.first().is_some_and(|ca| ca.not_after > now) => cas,
        _ => return, // nothing usable: starting over is right
    };
    let kept = |ca: &CertFacts| new_cas.iter().any(|n| n == ca);
    assert!(
        old_cas.iter().any(kept),
        "started over although the stored bundle's newest CA is valid\nbefore: {:?}\nafter: {:?}",
        old_cas,
        new_cas
    );
    let served_by = before.and_then(serving).map(|s| s.issuer);
    for ca in &old_cas {
        let needed = ca.not_after > now || served_by.as_deref() == Some(ca.subject.as_str());
        assert!(
            !needed || kept(ca),
            "dropped a CA still needed: {ca:?} (now {now}, serving issuer {served_by:?})\nbefore: {old_cas:?}\nafter: {new_cas:?}"
        );
    }
}

/// The served certificate and its published CA are valid at `world.now`.
fn check_served(world: &World, settings: &Settings, when: &str) {
    let now = world.now;
    let serving = world.secret.as_ref().and_then(serving);
    let Some(serving) = serving else {
        panic!("{when}: no served certificate at {now}\n{settings:?}\n{world:?}");
    };
    assert!(
        serving.not_before <= now && now < serving.not_after,
        "{when}: the served certificate is not valid at {now}: {serving:?}\n{settings:?}"
    );
    let Some(ca) = world.trusted_ca() else {
        panic!("{when}: the served certificate's CA is not published at {now}\n{settings:?}\n{world:?}");
    };
    assert!(
        ca.not_before <= now && now < ca.not_after,
        "{when}: the served certificate's CA is not valid at {now}: {ca:?}\n{settings:?}"
    );
}

fn check_pace(pacing: &Pacing, outcome: Outcome, pace: &Pace) {
    assert!(pace.wait >= pacing.min_interval, "{pace:?}");
    match outcome {
        Outcome::Settled => assert_eq!(
            pace.wait,
            pacing.check_interval.max(pacing.min_interval),
            "{pace:?}"
        ),
        Outcome::Failed => {
            let cap = pacing
                .check_interval
                .min(pacing.max_backoff)
                .max(pacing.min_interval);
            assert!(pace.wait <= cap, "{pace:?}");
        }
        Outcome::Again => {}
    }
}

fuzz_target!(|input: Input| {
    let check = u64::from(input.check_interval.max(1));
    let grace = u64::from(input.publish_grace);
    let (serving_life, ca_life) = lifetimes(&input, check, grace);
    let settings = Settings {
        ca_validity: Duration::from_secs(ca_life),
        serving_validity: Duration::from_secs(serving_life),
        publish_grace: Duration::from_secs(grace),
        dns_names: vec!["poolguard.poolguard.svc".to_string()],
        ips: Vec::new(),
    };
    let pacing = Pacing::new(Duration::from_secs(check));
    let punctual = input.events.iter().all(|e| matches!(e, Event::Step));
    let repairable = input.events.iter().all(|e| match e {
        Event::Outside(what) => what.repairable(),
        _ => true,
    });
    // The time of the last outside write, while every step since has been on time.
    let mut repairing_since: Option<i64> = None;
    let repair_time = i64::from(input.publish_grace) + 3 * i64::try_from(check).unwrap() + 10;
    let mut world = World {
        now: EPOCH_2020 + i64::from(input.start),
        ..World::default()
    };
    let mut pace = Pace::default();
    let mut agains = 0u32;
    let mut bootstrapped = false;
    for event in input.events.iter().take(MAX_EVENTS) {
        let (late, fail, fail_after_publishing) = match event {
            Event::Step => (0, false, false),
            Event::Late(seconds) => (
                i64::from(*seconds).min((MAX_NOW - world.now).max(0)),
                false,
                false,
            ),
            Event::Fail => (0, true, false),
            Event::FailAfterPublishing => (0, false, true),
            Event::Outside(what) => {
                world.outside(what);
                agains = 0;
                repairing_since = repairable.then_some(world.now);
                continue;
            }
        };
        if !matches!(event, Event::Step) {
            repairing_since = None;
        }
        if late > 0 {
            agains = 0; // the budget is for steps in a row at the loop's own pace
        }
        // Trusted by a CA that has not expired (once it has, starting over is right).
        let trusted_before = world
            .trusted_ca()
            .is_some_and(|ca| ca.not_after > world.now);
        let outcome = if fail {
            Outcome::Failed
        } else {
            step(&mut world, &settings, fail_after_publishing)
        };
        if !world.interfered {
            assert!(
                !trusted_before || world.trusted_ca().is_some(),
                "a step left the served certificate untrusted: {world:?}"
            );
            if outcome == Outcome::Again {
                agains += 1;
                assert!(
                    agains <= pacing::AGAIN_BUDGET,
                    "more steps in a row than the budget: {world:?}"
                );
            } else {
                // A failure ends the run too: repeated failures are the backoff's business.
                agains = 0;
            }
        }
        if punctual && outcome == Outcome::Settled {
            bootstrapped |= world.published.is_some();
        }
        if punctual && bootstrapped {
            check_served(&world, &settings, "on time from the start");
        }
        if repairing_since.is_some_and(|since| world.now >= since + repair_time) {
            check_served(&world, &settings, "repaired after outside writes");
        }
        pace = pacing.next(outcome, pace);
        check_pace(&pacing, outcome, &pace);
        let wait = i64::try_from(pace.wait.as_secs()).expect("a wait in seconds");
        world.now += wait.max(1) + late;
    }
});
