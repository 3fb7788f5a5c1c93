//! The rustls server configuration, built from PEM files (and rebuilt when they change).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{anyhow, bail, Context, Result};
use rustls::pki_types::pem::{self, PemObject};
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::{RootCertStore, ServerConfig};

/// The files a TLS configuration is read from.
#[derive(Debug, Clone)]
pub struct TlsFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
    /// When set, clients must present a certificate signed by this CA.
    pub client_ca: Option<PathBuf>,
}

impl TlsFiles {
    pub fn paths(&self) -> Vec<&Path> {
        let mut paths = vec![self.cert.as_path(), self.key.as_path()];
        paths.extend(self.client_ca.as_deref());
        paths
    }

    /// Reads the files and builds the configuration.
    pub fn server_config(&self) -> Result<Arc<ServerConfig>> {
        self.load().map(|(config, _)| config)
    }

    /// Reads the files once and builds the configuration; with it, when the serving
    /// certificate expires (Unix time).
    pub fn load(&self) -> Result<(Arc<ServerConfig>, i64)> {
        let read = |p: &Path| std::fs::read(p).with_context(|| format!("reading {}", p.display()));
        let client_ca = match &self.client_ca {
            Some(path) => Some(Pem {
                bytes: read(path)?,
                origin: path.display().to_string(),
            }),
            None => None,
        };
        let cert = Pem {
            bytes: read(&self.cert)?,
            origin: self.cert.display().to_string(),
        };
        let config = server_config(
            &cert,
            &Pem {
                bytes: read(&self.key)?,
                origin: self.key.display().to_string(),
            },
            client_ca.as_ref(),
        )?;
        Ok((config, not_after(&cert)?))
    }
}

/// PEM text and where it came from (for errors).
pub struct Pem {
    pub bytes: Vec<u8>,
    pub origin: String,
}

/// TLS 1.3 preferred, 1.2 accepted; HTTP/2 and HTTP/1.1 offered through ALPN. With `client_ca`,
/// clients must present a certificate it signed.
pub fn server_config(cert: &Pem, key: &Pem, client_ca: Option<&Pem>) -> Result<Arc<ServerConfig>> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let certs = read_certs(cert)?;
    let private_key = PrivateKeyDer::from_pem_slice(&key.bytes).map_err(|e| match e {
        pem::Error::NoItemsFound => anyhow!("{}: no private key found", key.origin),
        other => anyhow!("{}: not a PEM private key: {other}", key.origin),
    })?;
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
        .context("choosing TLS versions")?;
    let builder = match client_ca {
        None => builder.with_no_client_auth(),
        Some(ca) => {
            let mut roots = RootCertStore::empty();
            for c in read_certs(ca)? {
                roots
                    .add(c)
                    .with_context(|| format!("{}: not a usable CA certificate", ca.origin))?;
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                .build()
                .with_context(|| format!("{}: building the client verifier", ca.origin))?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    let mut config = builder
        .with_single_cert(certs, private_key)
        .with_context(|| {
            format!(
                "{} and {} do not make a usable certificate",
                cert.origin, key.origin
            )
        })?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// When the first (serving) certificate of a PEM chain expires: its notAfter, Unix time.
pub fn not_after(cert: &Pem) -> Result<i64> {
    let certs = read_certs(cert)?;
    let (_, parsed) = x509_parser::parse_x509_certificate(&certs[0])
        .map_err(|e| anyhow!("{}: not an X.509 certificate: {e}", cert.origin))?;
    Ok(parsed.validity().not_after.timestamp())
}

fn read_certs(pem: &Pem) -> Result<Vec<CertificateDer<'static>>> {
    let certs = CertificateDer::pem_slice_iter(&pem.bytes)
        .collect::<std::result::Result<Vec<_>, _>>()
        .with_context(|| format!("{}: not PEM certificates", pem.origin))?;
    if certs.is_empty() {
        bail!("{}: no certificate found", pem.origin);
    }
    Ok(certs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn good_and_bad_files() {
        let dir = tempfile::tempdir().unwrap();
        crate::certs::authority::serving_bundle(&["localhost".into()], &[], 1)
            .unwrap()
            .write(dir.path())
            .unwrap();
        let files = |cert: &str, key: &str, ca: Option<&str>| TlsFiles {
            cert: dir.path().join(cert),
            key: dir.path().join(key),
            client_ca: ca.map(|c| dir.path().join(c)),
        };
        let config = files("tls.crt", "tls.key", Some("ca.crt"))
            .server_config()
            .unwrap();
        assert_eq!(
            config.alpn_protocols,
            vec![b"h2".to_vec(), b"http/1.1".to_vec()]
        );
        for (f, want) in [
            (files("missing.crt", "tls.key", None), "reading"),
            (files("tls.key", "tls.key", None), "no certificate"),
            (files("tls.crt", "tls.crt", None), "no private key"),
            (
                files("ca.crt", "tls.key", None),
                "do not make a usable certificate",
            ),
        ] {
            let err = format!("{:#}", f.server_config().err().unwrap());
            assert!(err.contains(want), "{err}");
        }
    }

    #[test]
    fn the_serving_certificate_expiry_is_its_not_after() {
        let dir = tempfile::tempdir().unwrap();
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs() as i64;
        // The serving certificate lives 3 days, its CA 30: the expiry is the serving one's.
        crate::certs::authority::serving_bundle(&["localhost".into()], &[], 3)
            .unwrap()
            .write(dir.path())
            .unwrap();
        let files = TlsFiles {
            cert: dir.path().join("tls.crt"),
            key: dir.path().join("tls.key"),
            client_ca: None,
        };
        let (_, not_after) = files.load().unwrap();
        let three_days = 3 * 86_400;
        assert!(
            (not_after - (now + three_days)).abs() < 3_600,
            "not_after {not_after}, now {now}"
        );
        let err = not_after_of(b"not a certificate");
        assert!(err.contains("no certificate found"), "{err}");
    }

    fn not_after_of(bytes: &[u8]) -> String {
        let pem = Pem {
            bytes: bytes.to_vec(),
            origin: "x.crt".into(),
        };
        format!("{:#}", not_after(&pem).unwrap_err())
    }
}
