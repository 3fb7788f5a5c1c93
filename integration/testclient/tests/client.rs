//! The client against a rustls server on loopback with certificates made here: trust only in
//! the given CA, the presented leaf, ALPN, mTLS, and an HTTP/1.1 round trip.

use std::net::SocketAddr;
use std::sync::Arc;

use poolguard_testclient::{
    client_config, peer_certificate, pem_certs, post, send1, Identity, TlsClient, H2, HTTP11,
};
use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, ExtendedKeyUsagePurpose, IsCa, KeyPair,
};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

struct Ca {
    issuer: CertifiedIssuer<'static, KeyPair>,
}

struct Leaf {
    cert_pem: String,
    key_pem: String,
}

impl Ca {
    fn new() -> Ca {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        Ca {
            issuer: CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap(),
        }
    }

    fn pem(&self) -> String {
        self.issuer.pem()
    }

    fn leaf(&self, name: &str, usage: ExtendedKeyUsagePurpose) -> Leaf {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(vec![name.to_string()]).unwrap();
        params.extended_key_usages = vec![usage];
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        Leaf {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        }
    }
}

/// What the server saw of one connection.
struct Seen {
    client_cert: Option<CertificateDer<'static>>,
    alpn: Option<Vec<u8>>,
}

/// A TLS server for 127.0.0.1 with a certificate from `ca`; with `client_ca` it requires client
/// certificates from that CA. It answers one HTTP/1.1 request per connection with 200 and the
/// request body, and reports what it saw of every handshake that succeeded.
async fn server(
    ca: &Ca,
    client_ca: Option<&Ca>,
    alpn: &[&[u8]],
) -> (
    SocketAddr,
    CertificateDer<'static>,
    tokio::sync::mpsc::UnboundedReceiver<Seen>,
) {
    let leaf = ca.leaf("127.0.0.1", ExtendedKeyUsagePurpose::ServerAuth);
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .unwrap();
    let builder = match client_ca {
        None => builder.with_no_client_auth(),
        Some(client_ca) => {
            let mut roots = rustls::RootCertStore::empty();
            roots.add(client_ca.issuer.der().clone()).unwrap();
            let verifier =
                rustls::server::WebPkiClientVerifier::builder_with_provider(roots.into(), provider)
                    .build()
                    .unwrap();
            builder.with_client_cert_verifier(verifier)
        }
    };
    let chain = pem_certs(leaf.cert_pem.as_bytes()).unwrap();
    let served = chain[0].clone();
    let key = PrivateKeyDer::from_pem_slice(leaf.key_pem.as_bytes()).unwrap();
    let mut config = builder.with_single_cert(chain, key).unwrap();
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        loop {
            let (tcp, _) = listener.accept().await.unwrap();
            let (acceptor, tx) = (acceptor.clone(), tx.clone());
            tokio::spawn(async move {
                let Ok(mut tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let conn = tls.get_ref().1;
                let _ = tx.send(Seen {
                    client_cert: conn.peer_certificates().map(|c| c[0].clone().into_owned()),
                    alpn: conn.alpn_protocol().map(<[u8]>::to_vec),
                });
                let mut request = Vec::new();
                let mut buf = [0u8; 4096];
                let body = loop {
                    let Ok(n) = tls.read(&mut buf).await else {
                        return;
                    };
                    if n == 0 {
                        return;
                    }
                    request.extend_from_slice(&buf[..n]);
                    let text = String::from_utf8_lossy(&request).into_owned();
                    if let Some(end) = text.find("\r\n\r\n") {
                        let length: usize = text[..end]
                            .lines()
                            .find_map(|l| {
                                l.to_ascii_lowercase()
                                    .strip_prefix("content-length:")
                                    .map(|v| v.trim().parse().unwrap())
                            })
                            .unwrap_or(0);
                        if request.len() >= end + 4 + length {
                            break request[end + 4..end + 4 + length].to_vec();
                        }
                    }
                };
                let head = format!("HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n", body.len());
                let _ = tls.write_all(head.as_bytes()).await;
                let _ = tls.write_all(&body).await;
                let _ = tls.flush().await;
            });
        }
    });
    (addr, served, rx)
}

#[test]
fn pem_input_is_checked() {
    assert!(pem_certs(b"").is_err(), "no certificate is an error");
    assert!(pem_certs(b"-----BEGIN CERTIFICATE-----\n!!!\n-----END CERTIFICATE-----\n").is_err());
    let ca = Ca::new();
    let two = format!("{}{}", ca.pem(), Ca::new().pem());
    assert_eq!(pem_certs(two.as_bytes()).unwrap().len(), 2);
    assert!(client_config(b"not pem", None, &[]).is_err());
    let ca_pem = ca.pem();
    let bad_key = Identity {
        cert_pem: ca_pem.as_bytes(),
        key_pem: b"no key here",
    };
    assert!(client_config(ca_pem.as_bytes(), Some(bad_key), &[]).is_err());
}

#[tokio::test]
async fn trusts_its_ca_only_and_round_trips_over_http1() {
    let ca = Ca::new();
    let (addr, served, mut seen) = server(&ca, None, &[H2, HTTP11]).await;

    let client = TlsClient::new(
        client_config(ca.pem().as_bytes(), None, &[HTTP11]).unwrap(),
        "127.0.0.1",
    )
    .unwrap();
    let (mut sender, leaf) = client.http1(addr).await.unwrap();
    assert_eq!(leaf, served, "http1 returns the leaf the server presented");
    let (status, body) = send1(&mut sender, post("127.0.0.1", "/mutate", "{\"a\":1}"))
        .await
        .unwrap();
    assert_eq!((status, &body[..]), (200, &b"{\"a\":1}"[..]));
    let s = seen.recv().await.unwrap();
    assert_eq!(s.alpn.as_deref(), Some(HTTP11));
    assert!(s.client_cert.is_none());

    let stranger = TlsClient::new(
        client_config(Ca::new().pem().as_bytes(), None, &[]).unwrap(),
        "127.0.0.1",
    )
    .unwrap();
    let err = stranger
        .connect(addr)
        .await
        .expect_err("another CA's client must not trust the server");
    assert!(
        err.to_string().contains("invalid peer certificate"),
        "{err}"
    );

    let wrong_name = TlsClient::new(
        client_config(ca.pem().as_bytes(), None, &[]).unwrap(),
        "localhost",
    )
    .unwrap();
    let err = wrong_name
        .connect(addr)
        .await
        .expect_err("the certificate is for 127.0.0.1 only");
    assert!(err.to_string().contains("not valid for name"), "{err}");
}

#[tokio::test]
async fn alpn_decides_http2() {
    let ca = Ca::new();
    let (addr, _, mut seen) = server(&ca, None, &[H2, HTTP11]).await;
    let h2 = TlsClient::new(
        client_config(ca.pem().as_bytes(), None, &[H2, HTTP11]).unwrap(),
        "127.0.0.1",
    )
    .unwrap();
    let tls = h2.connect(addr).await.unwrap();
    assert_eq!(tls.get_ref().1.alpn_protocol(), Some(H2));
    assert!(peer_certificate(&tls).is_some());
    assert_eq!(seen.recv().await.unwrap().alpn.as_deref(), Some(H2));

    let (addr1, _, _) = server(&ca, None, &[HTTP11]).await;
    let err = h2
        .http2(addr1)
        .await
        .expect_err("an HTTP/1.1-only server is not HTTP/2");
    assert!(err.to_string().contains("did not choose h2"), "{err:#}");
}

#[tokio::test]
async fn presents_the_client_certificate_for_mtls() {
    let (server_ca, client_ca) = (Ca::new(), Ca::new());
    let (addr, _, mut seen) = server(&server_ca, Some(&client_ca), &[]).await;
    let leaf = client_ca.leaf("poolguard-test-client", ExtendedKeyUsagePurpose::ClientAuth);
    let identity = Identity {
        cert_pem: leaf.cert_pem.as_bytes(),
        key_pem: leaf.key_pem.as_bytes(),
    };
    let client = TlsClient::new(
        client_config(server_ca.pem().as_bytes(), Some(identity), &[]).unwrap(),
        "127.0.0.1",
    )
    .unwrap();
    let (mut sender, _) = client.http1(addr).await.unwrap();
    let (status, _) = send1(&mut sender, post("127.0.0.1", "/validate", "{}"))
        .await
        .unwrap();
    assert_eq!(status, 200);
    let presented = seen.recv().await.unwrap().client_cert;
    assert_eq!(
        presented.as_ref(),
        Some(&pem_certs(leaf.cert_pem.as_bytes()).unwrap()[0])
    );

    // Without an identity the server refuses the handshake; no connection reaches it.
    let anonymous = TlsClient::new(
        client_config(server_ca.pem().as_bytes(), None, &[]).unwrap(),
        "127.0.0.1",
    )
    .unwrap();
    let refused = match anonymous.http1(addr).await {
        Err(_) => true,
        Ok((mut sender, _)) => send1(&mut sender, post("127.0.0.1", "/validate", "{}"))
            .await
            .is_err(),
    };
    assert!(refused, "a client without a certificate must be refused");
    assert!(
        seen.try_recv().is_err(),
        "the server accepted a handshake without a client certificate"
    );
}
