//! A CA and the certificates it signs (rcgen), written as PEM under the Kubernetes TLS Secret names.

use std::net::IpAddr;
use std::path::Path;

use anyhow::{bail, Context, Result};
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, PublicKeyData, SanType,
};
use rustls::pki_types::pem::PemObject;
use time::OffsetDateTime;

const DAY: std::time::Duration = std::time::Duration::from_secs(24 * 3600);

/// A certificate and its private key, PEM encoded.
#[derive(Debug, Clone)]
pub struct Issued {
    pub cert_pem: String,
    pub key_pem: String,
}

/// A CA able to sign further certificates.
pub struct Authority {
    issuer: Issuer<'static, KeyPair>,
    cert_pem: String,
    key_pem: String,
}

/// What a certificate is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Usage {
    Server,
    Client,
}

impl Authority {
    /// A new self-signed CA valid for `days`.
    pub fn generate(common_name: &str, days: u32) -> Result<Authority> {
        Authority::generate_for(common_name, OffsetDateTime::now_utc(), DAY * days)
    }

    /// A new self-signed CA valid for `valid_for` from `start`.
    pub fn generate_for(
        common_name: &str,
        start: OffsetDateTime,
        valid_for: std::time::Duration,
    ) -> Result<Authority> {
        let mut params = CertificateParams::default();
        params
            .distinguished_name
            .push(DnType::CommonName, common_name);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        set_validity(&mut params, start, valid_for)?;
        let key = KeyPair::generate().context("generating the CA key")?;
        let key_pem = key.serialize_pem();
        let cert_pem = params
            .self_signed(&key)
            .context("signing the CA certificate")?
            .pem();
        Ok(Authority {
            issuer: Issuer::new(params, key),
            cert_pem,
            key_pem,
        })
    }

    /// A CA from its PEM certificate and key (as stored in a Secret).
    pub fn from_pem(cert_pem: &str, key_pem: &str) -> Result<Authority> {
        let key = KeyPair::from_pem(key_pem).context("reading the CA key")?;
        let issuer =
            Issuer::from_ca_cert_pem(cert_pem, key).context("reading the CA certificate")?;
        Ok(Authority {
            issuer,
            cert_pem: cert_pem.to_string(),
            key_pem: key_pem.to_string(),
        })
    }

    /// The CA of `poolguard certs --ca-cert --ca-key`: its PEM certificate and key from files,
    /// checked to be a CA certificate and to belong together (a key of another certificate would
    /// sign certificates that do not verify against this one).
    pub fn from_files(cert: &Path, key: &Path) -> Result<Authority> {
        let read = |p: &Path| {
            std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))
        };
        let (cert_pem, key_pem) = (read(cert)?, read(key)?);
        let der = rustls::pki_types::CertificateDer::from_pem_slice(cert_pem.as_bytes())
            .with_context(|| format!("{}: no PEM certificate", cert.display()))?;
        let (_, parsed) = x509_parser::parse_x509_certificate(&der)
            .map_err(|e| anyhow::anyhow!("{}: not an X.509 certificate: {e}", cert.display()))?;
        if !parsed.is_ca() {
            bail!(
                "{}: not a CA certificate (basicConstraints CA:TRUE)",
                cert.display()
            );
        }
        KeyPair::from_pem(&key_pem).with_context(|| format!("reading {}", key.display()))?;
        if !key_matches(&der, &key_pem) {
            bail!("{} is not the key of {}", key.display(), cert.display());
        }
        Authority::from_pem(&cert_pem, &key_pem)
            .with_context(|| format!("{} and {}", cert.display(), key.display()))
    }

    pub fn cert_pem(&self) -> String {
        self.cert_pem.clone()
    }

    pub fn key_pem(&self) -> &str {
        &self.key_pem
    }

    /// A certificate for `usage` valid for `days`, with `dns_names` and `ips` as subject
    /// alternative names.
    pub fn issue(
        &self,
        common_name: &str,
        dns_names: &[String],
        ips: &[IpAddr],
        usage: Usage,
        days: u32,
    ) -> Result<Issued> {
        let start = OffsetDateTime::now_utc();
        self.issue_for(common_name, dns_names, ips, usage, start, DAY * days)
    }

    /// Like [`Authority::issue`], valid for `valid_for` from `start`.
    pub fn issue_for(
        &self,
        common_name: &str,
        dns_names: &[String],
        ips: &[IpAddr],
        usage: Usage,
        start: OffsetDateTime,
        valid_for: std::time::Duration,
    ) -> Result<Issued> {
        let mut params = CertificateParams::default();
        params
            .distinguished_name
            .push(DnType::CommonName, common_name);
        for name in dns_names {
            if !valid_dns_name(name) {
                bail!("{name:?} is not a valid DNS name");
            }
            let ia5 = name
                .as_str()
                .try_into()
                .with_context(|| format!("{name:?} is not a valid DNS name"))?;
            params.subject_alt_names.push(SanType::DnsName(ia5));
        }
        params
            .subject_alt_names
            .extend(ips.iter().map(|ip| SanType::IpAddress(*ip)));
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        params.extended_key_usages = vec![match usage {
            Usage::Server => ExtendedKeyUsagePurpose::ServerAuth,
            Usage::Client => ExtendedKeyUsagePurpose::ClientAuth,
        }];
        set_validity(&mut params, start, valid_for)?;
        let key = KeyPair::generate().context("generating a key")?;
        let cert = params
            .signed_by(&key, &self.issuer)
            .context("signing the certificate")?;
        Ok(Issued {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        })
    }
}

/// Letters, digits and `-` in dot-separated labels of at most 63 characters; a leading `*.`
/// wildcard is allowed.
fn valid_dns_name(name: &str) -> bool {
    let name = name.strip_prefix("*.").unwrap_or(name);
    !name.is_empty()
        && name.len() <= 253
        && name.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && !label.starts_with('-')
                && !label.ends_with('-')
                && label.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
        })
}

fn set_validity(
    params: &mut CertificateParams,
    start: OffsetDateTime,
    valid_for: std::time::Duration,
) -> Result<()> {
    // A little slack for clocks that are slightly behind: five minutes, or a tenth of a short
    // lifetime (so that renewal "with a third left" stays a third of the useful lifetime).
    let slack = std::cmp::min(std::time::Duration::from_secs(300), valid_for / 10);
    // X.509 times end with the year 9999; a longer lifetime is a mistake, not a panic.
    let not_after = time::Duration::try_from(valid_for)
        .ok()
        .and_then(|d| start.checked_add(d))
        .filter(|t| t.year() <= 9999)
        .with_context(|| {
            format!(
                "a certificate valid for {} would end after the year 9999",
                humantime::format_duration(valid_for)
            )
        })?;
    params.not_before = start - slack;
    params.not_after = not_after;
    Ok(())
}

/// Whether `key_pem` is the private key of the certificate `cert_der`.
pub fn key_matches(cert_der: &[u8], key_pem: &str) -> bool {
    let (Ok((_, cert)), Ok(key)) = (
        x509_parser::parse_x509_certificate(cert_der),
        KeyPair::from_pem(key_pem),
    ) else {
        return false;
    };
    cert.public_key().subject_public_key.data.as_ref() == key.der_bytes()
}

/// What `poolguard certs` writes: `ca.crt`, `tls.crt`, `tls.key`.
pub struct ServingBundle {
    pub ca_pem: String,
    pub serving: Issued,
}

/// A new CA and a serving certificate for the given names. Needs at least one name or address.
pub fn serving_bundle(dns_names: &[String], ips: &[IpAddr], days: u32) -> Result<ServingBundle> {
    if dns_names.is_empty() && ips.is_empty() {
        bail!("give at least one --dns-name or --ip for the serving certificate");
    }
    if days == 0 {
        bail!("--days must be at least 1");
    }
    let ca = Authority::generate("poolguard-ca", days.saturating_mul(10))?;
    serving_bundle_from(&ca, dns_names, ips, days)
}

/// A serving certificate for the given names signed by an existing CA, whose certificate is
/// written as `ca.crt` unchanged: a caBundle made from it stays valid (a new serving certificate
/// without touching the webhook configurations).
pub fn serving_bundle_from(
    ca: &Authority,
    dns_names: &[String],
    ips: &[IpAddr],
    days: u32,
) -> Result<ServingBundle> {
    if dns_names.is_empty() && ips.is_empty() {
        bail!("give at least one --dns-name or --ip for the serving certificate");
    }
    if days == 0 {
        bail!("--days must be at least 1");
    }
    let common_name = dns_names
        .first()
        .map_or_else(|| ips[0].to_string(), String::clone);
    let serving = ca.issue(&common_name, dns_names, ips, Usage::Server, days)?;
    Ok(ServingBundle {
        ca_pem: ca.cert_pem(),
        serving,
    })
}

impl ServingBundle {
    /// Writes the three files into `dir` (created if needed); the key is readable by its owner only.
    pub fn write(&self, dir: &Path) -> Result<()> {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        write_file(&dir.join("ca.crt"), &self.ca_pem, 0o644)?;
        write_file(&dir.join("tls.crt"), &self.serving.cert_pem, 0o644)?;
        write_file(&dir.join("tls.key"), &self.serving.key_pem, 0o600)?;
        Ok(())
    }
}

fn write_file(path: &Path, text: &str, mode: u32) -> Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(mode)
        .open(path)
        .with_context(|| format!("writing {}", path.display()))?;
    file.write_all(text.as_bytes())
        .with_context(|| format!("writing {}", path.display()))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustls::client::danger::ServerCertVerifier;
    use rustls::pki_types::CertificateDer;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn a_lifetime_past_the_year_9999_is_an_error_not_a_panic() {
        let err = serving_bundle(&["poolguard.ns.svc".into()], &[], u32::MAX)
            .err()
            .unwrap()
            .to_string();
        assert!(err.contains("after the year 9999"), "{err}");
        let start = OffsetDateTime::now_utc();
        for valid_for in [std::time::Duration::MAX, DAY * 4_000_000] {
            assert!(Authority::generate_for("ca", start, valid_for).is_err());
        }
        assert!(Authority::generate_for("ca", start, DAY * 3650).is_ok());
    }

    #[test]
    fn bundle_is_written_and_chains_to_its_ca() {
        let dir = tempfile::tempdir().unwrap();
        let bundle = serving_bundle(
            &["poolguard.ns.svc".into()],
            &["127.0.0.1".parse().unwrap()],
            30,
        )
        .unwrap();
        bundle.write(dir.path()).unwrap();
        for name in ["ca.crt", "tls.crt", "tls.key"] {
            assert!(dir.path().join(name).exists(), "{name}");
        }
        let mode = std::fs::metadata(dir.path().join("tls.key"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);

        // The serving certificate verifies against the CA for its names, and not for others.
        let mut roots = rustls::RootCertStore::empty();
        let ca = CertificateDer::pem_slice_iter(bundle.ca_pem.as_bytes())
            .next()
            .unwrap()
            .unwrap();
        roots.add(ca).unwrap();
        let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
        let verifier =
            rustls::client::WebPkiServerVerifier::builder_with_provider(roots.into(), provider)
                .build()
                .unwrap();
        let leaf = CertificateDer::pem_slice_iter(bundle.serving.cert_pem.as_bytes())
            .next()
            .unwrap()
            .unwrap();
        let now = rustls::pki_types::UnixTime::now();
        for (name, ok) in [
            ("poolguard.ns.svc", true),
            ("127.0.0.1", true),
            ("other.ns.svc", false),
        ] {
            let server = rustls::pki_types::ServerName::try_from(name).unwrap();
            let result = verifier.verify_server_cert(&leaf, &[], &server, &[], now);
            assert_eq!(result.is_ok(), ok, "{name}: {result:?}");
        }
    }

    #[test]
    fn needs_a_name() {
        let err = serving_bundle(&[], &[], 30).err().unwrap().to_string();
        assert!(err.contains("--dns-name"), "{err}");
        for bad in ["bad name", "a..b", "-a.b", "a.b-", ""] {
            assert!(!valid_dns_name(bad), "{bad:?}");
        }
        for good in ["localhost", "poolguard.ns.svc", "*.example.com", "a-b.c1"] {
            assert!(valid_dns_name(good), "{good:?}");
        }
        let err = serving_bundle(&["bad name".into()], &[], 30)
            .err()
            .unwrap()
            .to_string();
        assert!(err.contains("not a valid DNS name"), "{err}");
    }
}
