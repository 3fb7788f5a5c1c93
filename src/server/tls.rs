//! The rustls server configuration, built from PEM files (and rebuilt when they change).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{anyhow, bail, Context, Result};
use rustls::client::danger::HandshakeSignatureValid;
use rustls::pki_types::pem::{self, PemObject};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::server::WebPkiClientVerifier;
use rustls::{
    DigitallySignedStruct, DistinguishedName, RootCertStore, ServerConfig, SignatureScheme,
};

/// The files a TLS configuration is read from.
#[derive(Debug, Clone)]
pub struct TlsFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
    /// When set, clients must present a certificate signed by this CA that names one of
    /// `client_names`.
    pub client_ca: Option<PathBuf>,
    /// The names (subject common name or DNS subject alternative name) a client certificate
    /// must carry one of: the API server's. A cluster's CA may sign other clients too (on
    /// kubeadm it signs every kubelet's client certificate).
    pub client_names: Vec<String>,
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
            Some(path) => Some(ClientCa {
                pem: Pem {
                    bytes: read(path)?,
                    origin: path.display().to_string(),
                },
                names: self.client_names.clone(),
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

/// The CA that signs the API server's client certificate, and the names that certificate
/// carries (one of them is enough).
pub struct ClientCa {
    pub pem: Pem,
    pub names: Vec<String>,
}

/// TLS 1.3 preferred, 1.2 accepted; HTTP/2 and HTTP/1.1 offered through ALPN. With `client_ca`,
/// clients must present a certificate it signed that names one of its names.
pub fn server_config(
    cert: &Pem,
    key: &Pem,
    client_ca: Option<&ClientCa>,
) -> Result<Arc<ServerConfig>> {
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
        Some(ClientCa { pem: ca, names }) => {
            if names.is_empty() {
                bail!(
                    "{}: a client CA needs the names of the client certificate to accept (--client-name)",
                    ca.origin
                );
            }
            let mut roots = RootCertStore::empty();
            for c in read_certs(ca)? {
                roots
                    .add(c)
                    .with_context(|| format!("{}: not a usable CA certificate", ca.origin))?;
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                .build()
                .with_context(|| format!("{}: building the client verifier", ca.origin))?;
            builder.with_client_cert_verifier(Arc::new(NamedClients {
                chain: verifier,
                names: names.clone(),
            }))
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

/// A client certificate verifier that accepts a certificate the CA signed only when it names one
/// of `names` (its subject common name or a DNS subject alternative name).
#[derive(Debug)]
struct NamedClients {
    chain: Arc<dyn ClientCertVerifier>,
    names: Vec<String>,
}

impl ClientCertVerifier for NamedClients {
    fn offer_client_auth(&self) -> bool {
        self.chain.offer_client_auth()
    }

    fn client_auth_mandatory(&self) -> bool {
        self.chain.client_auth_mandatory()
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        self.chain.root_hint_subjects()
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> std::result::Result<ClientCertVerified, rustls::Error> {
        self.chain
            .verify_client_cert(end_entity, intermediates, now)?;
        let named = certificate_names(end_entity);
        if named.iter().any(|name| self.names.contains(name)) {
            return Ok(ClientCertVerified::assertion());
        }
        let why = format!(
            "the client certificate names {named:?}, none of the accepted client names {:?}",
            self.names
        );
        Err(rustls::Error::InvalidCertificate(
            rustls::CertificateError::Other(rustls::OtherError(Arc::new(std::io::Error::other(
                why,
            )))),
        ))
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        self.chain.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        self.chain.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.chain.supported_verify_schemes()
    }
}

/// A certificate's subject common names and DNS subject alternative names.
fn certificate_names(der: &CertificateDer<'_>) -> Vec<String> {
    let Ok((_, cert)) = x509_parser::parse_x509_certificate(der) else {
        return Vec::new();
    };
    let mut names: Vec<String> = cert
        .subject()
        .iter_common_name()
        .filter_map(|cn| cn.as_str().ok().map(str::to_string))
        .collect();
    if let Ok(Some(san)) = cert.subject_alternative_name() {
        for name in &san.value.general_names {
            if let x509_parser::extensions::GeneralName::DNSName(dns) = name {
                names.push(dns.to_string());
            }
        }
    }
    names
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
            client_names: vec!["kube-apiserver".into()],
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
            (
                TlsFiles {
                    client_names: Vec::new(),
                    ..files("tls.crt", "tls.key", Some("ca.crt"))
                },
                "a client CA needs the names of the client certificate to accept",
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
            client_names: Vec::new(),
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
