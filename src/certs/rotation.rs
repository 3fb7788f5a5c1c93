//! What to do next with self-managed certificates, given what is stored and published (pure).
//!
//! The CA bundle that the API server trusts must always include the CA of the certificate being
//! served, so a CA rotation goes in steps, one per call:
//! 1. a new CA joins the bundle (the old one stays, the old serving certificate keeps serving);
//! 2. the bundle is published into the webhook configurations;
//! 3. once published for the grace time, a serving certificate from the new CA is stored, which
//!    every replica then serves;
//! 4. CAs that have expired leave the bundle.
//!
//! A serving certificate alone is renewed from the current CA without touching the bundle.

use std::net::IpAddr;
use std::time::Duration;

use anyhow::{Context, Result};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::CertificateDer;

use super::authority::{key_matches, Authority, Issued, Usage};

/// The Secret's contents.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Stored {
    /// PEM certificates of the trusted CAs, newest first (`ca.crt`).
    pub bundle: String,
    /// Key of the newest CA (`ca.key`).
    pub ca_key: String,
    /// Serving certificate and key (`tls.crt`, `tls.key`).
    pub tls_crt: String,
    pub tls_key: String,
    /// Unix time at which `bundle` was seen in every webhook configuration.
    pub published_at: Option<i64>,
}

#[derive(Debug, Clone)]
pub struct Settings {
    pub ca_validity: Duration,
    pub serving_validity: Duration,
    /// How long a new bundle must have been published before a certificate from its new CA is served.
    pub publish_grace: Duration,
    pub dns_names: Vec<String>,
    pub ips: Vec<IpAddr>,
}

impl Settings {
    /// Refuses lifetimes the rotation cannot keep up with. Renewal starts with a third of a
    /// lifetime left; in that third a new CA must be published for `publish_grace` and every
    /// replica must pick up the new certificate (a check interval each, and one to notice), so
    /// a shorter lifetime would renew at every check. Over 100 years is a typing error.
    pub fn check(&self, check_interval: Duration) -> Result<()> {
        const LONGEST: Duration = Duration::from_secs(100 * 365 * 24 * 3600);
        let needed = self.publish_grace + check_interval * 2;
        for (flag, validity) in [
            ("--ca-validity", self.ca_validity),
            ("--cert-validity", self.serving_validity),
        ] {
            let show = humantime::format_duration;
            if validity > LONGEST {
                anyhow::bail!("{flag} {} is longer than 100 years", show(validity));
            }
            if validity / 3 < needed {
                anyhow::bail!(
                    "{flag} {} is too short: a third of it must cover --ca-publish-grace plus \
                     twice --cert-check-interval ({}), so at least {}",
                    show(validity),
                    show(needed),
                    show(needed * 3)
                );
            }
        }
        if self.serving_validity > self.ca_validity {
            anyhow::bail!(
                "--cert-validity {} is longer than --ca-validity {}: the serving certificate \
                 would outlive its CA",
                humantime::format_duration(self.serving_validity),
                humantime::format_duration(self.ca_validity)
            );
        }
        Ok(())
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Write this into the Secret.
    Store(Stored),
    /// Put the stored bundle into the webhook configurations, then record when.
    Publish,
    /// Nothing to do until something changes or time passes.
    Idle,
}

/// A certificate's facts that the plan needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CertFacts {
    pub subject: String,
    pub issuer: String,
    pub not_before: i64,
    pub not_after: i64,
}

impl CertFacts {
    /// Renewal is due once less than a third of the lifetime, plus `lead`, is left.
    fn renewal_due(&self, now: i64, lead: i64) -> bool {
        let lifetime = self.not_after - self.not_before;
        self.not_after - now < lifetime / 3 + lead
    }
}

/// Facts of every certificate in a PEM text, in order.
pub fn facts(pem: &str) -> Result<Vec<CertFacts>> {
    let mut out = Vec::new();
    for der in CertificateDer::pem_slice_iter(pem.as_bytes()) {
        let der = der.context("reading PEM")?;
        let (_, cert) =
            x509_parser::parse_x509_certificate(&der).context("parsing a certificate")?;
        out.push(CertFacts {
            subject: cert.subject().to_string(),
            issuer: cert.issuer().to_string(),
            not_before: cert.validity().not_before.timestamp(),
            not_after: cert.validity().not_after.timestamp(),
        });
    }
    Ok(out)
}

/// The next step. `published`: every webhook configuration carries exactly `stored.bundle`.
pub fn plan(
    stored: Option<&Stored>,
    published: bool,
    now: i64,
    settings: &Settings,
) -> Result<Step> {
    let Some(stored) = stored else {
        return fresh(now, settings).map(Step::Store);
    };
    let Ok(cas) = facts(&stored.bundle) else {
        return fresh(now, settings).map(Step::Store);
    };
    let serving = facts(&stored.tls_crt)
        .ok()
        .and_then(|f| f.into_iter().next());
    if !cas.iter().any(|ca| ca.not_after > now) {
        return fresh(now, settings).map(Step::Store);
    }
    // The CA that signs is the one whose key is stored, wherever the bundle has it (a bundle
    // edited by hand may list it last). When none has it, a new CA joins the bundle, as in a
    // rotation: the CAs there stay trusted until the new one is published and serving.
    let Some((newest_pem, newest)) = signing_ca(stored, now) else {
        return Ok(Step::Store(with_new_ca(stored, now, settings)?));
    };
    let Some(serving) = serving else {
        // No usable serving certificate: issue one (the newest CA is in the bundle, but only the
        // published bundle is trusted, so wait for publication as for any new CA).
        return serving_step(stored, &newest_pem, published, now, settings);
    };

    // Expired CAs leave the bundle (never the one signing the served certificate). Each block is
    // judged by its own certificate: other PEM blocks (a key, a CRL) hold none and stay.
    let pems = split_pem(&stored.bundle);
    let live: Vec<&str> = pems
        .iter()
        .filter(|pem| {
            facts(pem).is_ok_and(|cas| {
                cas.iter()
                    .all(|ca| ca.not_after > now || ca.subject == serving.issuer)
            })
        })
        .map(|pem| pem.as_str())
        .collect();
    if live.len() < pems.len() {
        return Ok(Step::Store(Stored {
            bundle: live.concat(),
            published_at: None,
            ..stored.clone()
        }));
    }
    if !published || publication_time(stored, now).is_none() {
        return Ok(Step::Publish);
    }
    if newest.renewal_due(now, 0) {
        return Ok(Step::Store(with_new_ca(stored, now, settings)?));
    }
    // The serving certificate's renewal starts the publish grace earlier: when a new CA has
    // just been published, the new certificate waits that long, and every replica still needs
    // a check interval to pick it up before the old one expires.
    let lead = settings.publish_grace.as_secs() as i64;
    if serving.issuer != newest.subject || serving.renewal_due(now, lead) {
        return serving_step(stored, &newest_pem, published, now, settings);
    }
    Ok(Step::Idle)
}

/// A serving certificate from the signing CA (`ca_pem`), once its bundle has been published long
/// enough.
fn serving_step(
    stored: &Stored,
    ca_pem: &str,
    published: bool,
    now: i64,
    settings: &Settings,
) -> Result<Step> {
    let Some(published_at) = publication_time(stored, now).filter(|_| published) else {
        return Ok(Step::Publish);
    };
    let grace = settings.publish_grace.as_secs() as i64;
    if now.saturating_sub(published_at) < grace {
        return Ok(Step::Idle);
    }
    let ca = Authority::from_pem(ca_pem, &stored.ca_key).context("the stored CA cannot sign")?;
    let serving = issue(&ca, now, settings)?;
    Ok(Step::Store(Stored {
        tls_crt: serving.cert_pem,
        tls_key: serving.key_pem,
        ..stored.clone()
    }))
}

/// The bundle's certificate that the stored key belongs to, if it is still valid: its PEM block
/// and facts.
fn signing_ca(stored: &Stored, now: i64) -> Option<(String, CertFacts)> {
    split_pem(&stored.bundle).into_iter().find_map(|pem| {
        let der = CertificateDer::from_pem_slice(pem.as_bytes()).ok()?;
        if !key_matches(&der, &stored.ca_key) {
            return None;
        }
        let ca = facts(&pem).ok()?.into_iter().next()?;
        (ca.not_after > now).then_some((pem, ca))
    })
}

/// `stored` with a new CA in front of its bundle and its key stored, to be published.
fn with_new_ca(stored: &Stored, now: i64, settings: &Settings) -> Result<Stored> {
    let ca = new_ca(now, settings)?;
    Ok(Stored {
        bundle: ca.cert_pem() + &stored.bundle,
        ca_key: ca.key_pem().to_string(),
        published_at: None,
        ..stored.clone()
    })
}

/// When the stored bundle was published, if that is known: a time missing (never recorded, or
/// removed) or in the future (edited by hand, another replica's clock) is not, and publishing
/// again records it.
fn publication_time(stored: &Stored, now: i64) -> Option<i64> {
    stored.published_at.filter(|&at| at <= now)
}

/// A new CA and serving certificate: nothing is trusted or served yet, so there is nothing to
/// keep in step.
fn fresh(now: i64, settings: &Settings) -> Result<Stored> {
    let ca = new_ca(now, settings)?;
    let serving = issue(&ca, now, settings)?;
    Ok(Stored {
        bundle: ca.cert_pem(),
        ca_key: ca.key_pem().to_string(),
        tls_crt: serving.cert_pem,
        tls_key: serving.key_pem,
        published_at: None,
    })
}

fn new_ca(now: i64, settings: &Settings) -> Result<Authority> {
    // The time in the name tells CAs apart: the served certificate's issuer names its CA.
    Authority::generate_for(
        &format!("poolguard-ca-{now}"),
        start(now)?,
        settings.ca_validity,
    )
}

fn start(now: i64) -> Result<time::OffsetDateTime> {
    time::OffsetDateTime::from_unix_timestamp(now).context("the clock is out of range")
}

fn issue(ca: &Authority, now: i64, settings: &Settings) -> Result<Issued> {
    let common_name = settings
        .dns_names
        .first()
        .cloned()
        .or_else(|| settings.ips.first().map(ToString::to_string))
        .unwrap_or_else(|| "poolguard".to_string());
    ca.issue_for(
        &common_name,
        &settings.dns_names,
        &settings.ips,
        Usage::Server,
        start(now)?,
        settings.serving_validity,
    )
}

/// Each PEM block of `text`, with its trailing newline.
fn split_pem(text: &str) -> Vec<String> {
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

#[cfg(test)]
mod tests {

    #[test]
    fn serving_renewal_starts_the_publish_grace_early() {
        let cert = CertFacts {
            subject: "s".into(),
            issuer: "i".into(),
            not_before: 0,
            not_after: 900,
        };
        // A third of 900 s is 300 s; with a 10 s lead renewal is due under 310 s left.
        assert!(!cert.renewal_due(589, 10));
        assert!(cert.renewal_due(591, 10));
        assert!(!cert.renewal_due(599, 0));
        assert!(cert.renewal_due(601, 0));
    }

    use super::*;

    fn settings() -> Settings {
        Settings {
            ca_validity: Duration::from_secs(3000),
            serving_validity: Duration::from_secs(900),
            publish_grace: Duration::from_secs(10),
            dns_names: vec!["poolguard.ns.svc".into()],
            ips: vec![],
        }
    }

    fn now() -> i64 {
        time::OffsetDateTime::now_utc().unix_timestamp()
    }

    fn store(step: Step) -> Stored {
        match step {
            Step::Store(s) => s,
            other => panic!("expected Store, got {other:?}"),
        }
    }

    #[test]
    fn nothing_stored_makes_a_fresh_pair_then_publishes() {
        let s = settings();
        let t = now();
        let first = store(plan(None, false, t, &s).unwrap());
        let cas = facts(&first.bundle).unwrap();
        let serving = &facts(&first.tls_crt).unwrap()[0];
        assert_eq!(cas.len(), 1);
        assert_eq!(serving.issuer, cas[0].subject);
        assert_eq!(plan(Some(&first), false, t, &s).unwrap(), Step::Publish);
        let published = Stored {
            published_at: Some(t),
            ..first
        };
        assert_eq!(plan(Some(&published), true, t, &s).unwrap(), Step::Idle);
        // Unparsable contents start over.
        let junk = Stored {
            bundle: "junk".into(),
            ..Stored::default()
        };
        assert!(matches!(
            plan(Some(&junk), true, t, &s).unwrap(),
            Step::Store(_)
        ));
    }

    #[test]
    fn serving_certificate_renews_from_the_same_ca_without_a_new_bundle() {
        let s = settings();
        let t = now();
        let first = Stored {
            published_at: Some(t),
            ..store(plan(None, false, t, &s).unwrap())
        };
        // 700 s later, under a third of the 900 s serving lifetime is left; the CA (3000 s) is fine.
        let later = t + 700;
        let renewed = store(plan(Some(&first), true, later, &s).unwrap());
        assert_eq!(renewed.bundle, first.bundle);
        assert_ne!(renewed.tls_crt, first.tls_crt);
        assert_eq!(
            facts(&renewed.tls_crt).unwrap()[0].issuer,
            facts(&first.bundle).unwrap()[0].subject
        );
    }

    #[test]
    fn ca_rotation_publishes_the_new_ca_before_serving_from_it() {
        let s = settings();
        let t = now();
        let first = Stored {
            published_at: Some(t),
            ..store(plan(None, false, t, &s).unwrap())
        };
        // 2100 s later the CA has under a third of its 3000 s left.
        let later = t + 2100;
        // (The serving certificate would also be due; the CA comes first.)
        let step1 = store(plan(Some(&first), true, later, &s).unwrap());
        let cas = facts(&step1.bundle).unwrap();
        assert_eq!(cas.len(), 2, "new CA joins, old stays");
        assert_eq!(
            step1.tls_crt, first.tls_crt,
            "still serving the old certificate"
        );
        assert_eq!(step1.published_at, None);
        // Not yet published: publish; published but within the grace: wait.
        assert_eq!(plan(Some(&step1), false, later, &s).unwrap(), Step::Publish);
        let published = Stored {
            published_at: Some(later),
            ..step1
        };
        assert_eq!(
            plan(Some(&published), true, later + 5, &s).unwrap(),
            Step::Idle
        );
        // After the grace: serve from the new CA.
        let step3 = store(plan(Some(&published), true, later + 10, &s).unwrap());
        assert_eq!(facts(&step3.tls_crt).unwrap()[0].issuer, cas[0].subject);
        assert_eq!(step3.bundle, published.bundle);
        // Once the old CA has expired it leaves the bundle, which must then be published again.
        let expired = t + 3001;
        let step4 = store(plan(Some(&step3), true, expired, &s).unwrap());
        assert_eq!(facts(&step4.bundle).unwrap().len(), 1);
        assert_eq!(
            plan(Some(&step4), false, expired, &s).unwrap(),
            Step::Publish
        );
    }

    #[test]
    fn a_bundle_changed_behind_our_back_is_published_again() {
        let s = settings();
        let t = now();
        let first = Stored {
            published_at: Some(t),
            ..store(plan(None, false, t, &s).unwrap())
        };
        assert_eq!(plan(Some(&first), false, t, &s).unwrap(), Step::Publish);
    }

    #[test]
    fn other_pem_blocks_in_the_bundle_leave_the_cas_in_place() {
        // Found by fuzzing (certificate_plan): a key block before the CA shifted which
        // certificate each block was judged by, and the key block alone was stored as the bundle.
        let s = settings();
        let t = now();
        let first = store(plan(None, false, t, &s).unwrap());
        let key_block = "-----BEGIN PRIVATE KEY-----\n-----END PRIVATE KEY-----\n";
        let with_key = Stored {
            bundle: format!("{key_block}{}", first.bundle),
            published_at: Some(t),
            ..first
        };
        assert_eq!(plan(Some(&with_key), true, t, &s).unwrap(), Step::Idle);
    }

    #[test]
    fn the_serving_certificate_is_renewed_from_the_first_certificate_of_the_bundle() {
        // Found by fuzzing (certificate_plan): with a key block first in the bundle, renewing
        // the serving certificate read that block as the CA and failed at every step.
        let s = settings();
        let t = now();
        let first = store(plan(None, false, t, &s).unwrap());
        let with_key = Stored {
            bundle: format!(
                "-----BEGIN PRIVATE KEY-----\n-----END PRIVATE KEY-----\n{}",
                first.bundle
            ),
            published_at: Some(t),
            ..first
        };
        // 700 s later the serving certificate is due (as in the test above).
        let renewed = store(plan(Some(&with_key), true, t + 700, &s).unwrap());
        assert_eq!(renewed.bundle, with_key.bundle);
        assert_ne!(renewed.tls_crt, with_key.tls_crt);
        assert_eq!(
            facts(&renewed.tls_crt).unwrap()[0].issuer,
            facts(&with_key.bundle).unwrap()[0].subject
        );
    }

    #[test]
    fn the_serving_certificate_is_signed_by_the_ca_whose_key_is_stored_wherever_it_is() {
        // Found by fuzzing (certificate_plan): a bundle listing the newest CA last made renewal
        // sign with that CA's key under the first CA's name: a certificate that verifies
        // against neither.
        let s = settings();
        let t = now();
        let old = store(plan(None, false, t, &s).unwrap());
        let newer = with_new_ca(&old, t + 1, &s).unwrap();
        let blocks = split_pem(&newer.bundle);
        let reversed = Stored {
            bundle: format!("{}{}", blocks[1], blocks[0]),
            published_at: Some(t),
            ..newer.clone()
        };
        let renewed = store(plan(Some(&reversed), true, t + 700, &s).unwrap());
        let issuer = &facts(&renewed.tls_crt).unwrap()[0].issuer;
        assert_eq!(issuer, &facts(&blocks[0]).unwrap()[0].subject);
        assert!(verifies(&renewed.tls_crt, &blocks[0]));
        assert!(!verifies(&renewed.tls_crt, &blocks[1]));
    }

    #[test]
    fn a_stored_key_of_no_ca_in_the_bundle_brings_a_new_ca_and_keeps_the_old_ones_trusted() {
        let s = settings();
        let t = now();
        let first = store(plan(None, false, t, &s).unwrap());
        let other = store(plan(None, false, t, &s).unwrap());
        let wrong_key = Stored {
            ca_key: other.ca_key,
            published_at: Some(t),
            ..first.clone()
        };
        let next = store(plan(Some(&wrong_key), true, t + 1, &s).unwrap());
        assert!(next.bundle.ends_with(&first.bundle), "the old CA stays");
        assert_eq!(facts(&next.bundle).unwrap().len(), 2);
        assert_eq!(next.tls_crt, first.tls_crt, "the served certificate stays");
        assert_eq!(next.published_at, None, "the new bundle is published first");
        assert!(signing_ca(&next, t + 1).is_some());
    }

    #[test]
    fn lifetimes_the_rotation_cannot_keep_up_with_are_refused() {
        let base = Settings {
            ca_validity: Duration::from_secs(40),
            serving_validity: Duration::from_secs(15),
            publish_grace: Duration::from_secs(3),
            ..settings()
        };
        let check = Duration::from_secs(1);
        assert!(base.check(check).is_ok(), "the e2e test's settings");
        let cases: [(Settings, &str); 4] = [
            (
                Settings {
                    serving_validity: Duration::from_secs(14),
                    ..base.clone()
                },
                "--cert-validity 14s is too short",
            ),
            (
                Settings {
                    publish_grace: Duration::from_secs(20),
                    ca_validity: Duration::from_secs(3600),
                    ..base.clone()
                },
                "--cert-validity 15s is too short",
            ),
            (
                Settings {
                    ca_validity: Duration::from_secs(u64::MAX / 2),
                    ..base.clone()
                },
                "--ca-validity",
            ),
            (
                Settings {
                    serving_validity: Duration::from_secs(60),
                    ..base.clone()
                },
                "would outlive its CA",
            ),
        ];
        for (settings, expected) in cases {
            let err = settings.check(check).unwrap_err().to_string();
            assert!(err.contains(expected), "{err}");
        }
    }

    fn verifies(cert_pem: &str, ca_pem: &str) -> bool {
        let cert = CertificateDer::from_pem_slice(cert_pem.as_bytes()).unwrap();
        let ca = CertificateDer::from_pem_slice(ca_pem.as_bytes()).unwrap();
        let (_, cert) = x509_parser::parse_x509_certificate(&cert).unwrap();
        let (_, ca) = x509_parser::parse_x509_certificate(&ca).unwrap();
        cert.verify_signature(Some(ca.public_key())).is_ok()
    }

    #[test]
    fn a_publication_time_far_in_the_past_or_in_the_future_neither_overflows_nor_stalls() {
        // The publication time is read from an annotation as any integer: i64::MIN overflowed
        // `now - at`, and a time in the future made the due serving certificate wait for it
        // (until the next CA) instead of the time being recorded again.
        let s = settings();
        let t = now();
        let first = store(plan(None, false, t, &s).unwrap());
        let at = |published_at| Stored {
            published_at: Some(published_at),
            ..first.clone()
        };
        // 700 s later the serving certificate is due.
        let later = t + 700;
        let renewed = plan(Some(&at(i64::MIN)), true, later, &s).unwrap();
        assert!(matches!(renewed, Step::Store(_)), "{renewed:?}");
        for future in [later + 1, i64::MAX] {
            assert_eq!(
                plan(Some(&at(future)), true, later, &s).unwrap(),
                Step::Publish
            );
        }
    }

    #[test]
    fn a_published_bundle_without_a_publication_time_or_serving_certificate_gets_both() {
        // A bundle already in the webhook configurations, with no serving certificate and no
        // publication time (a Secret made by hand, the annotation removed), waited for ever for
        // a publication that had happened but was not recorded.
        let s = settings();
        let t = now();
        let first = store(plan(None, false, t, &s).unwrap());
        let no_cert = Stored {
            tls_crt: String::new(),
            tls_key: String::new(),
            ..first
        };
        assert_eq!(plan(Some(&no_cert), true, t, &s).unwrap(), Step::Publish);
        let recorded = Stored {
            published_at: Some(t),
            ..no_cert
        };
        assert_eq!(plan(Some(&recorded), true, t + 5, &s).unwrap(), Step::Idle);
        let issued = store(plan(Some(&recorded), true, t + 10, &s).unwrap());
        assert_eq!(
            facts(&issued.tls_crt).unwrap()[0].issuer,
            facts(&issued.bundle).unwrap()[0].subject
        );
    }

    #[test]
    fn split_pem_keeps_each_block() {
        let text = "-----BEGIN A-----\nx\n-----END A-----\n-----BEGIN B-----\ny\n-----END B-----\n";
        let parts = split_pem(text);
        assert_eq!(parts.len(), 2);
        assert_eq!(parts.concat(), text);
    }
}
