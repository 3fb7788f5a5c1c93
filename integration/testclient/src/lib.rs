//! The TLS client poolguard's tests and load generator talk to it with: a rustls client
//! configuration built from a CA in PEM (optionally with a client certificate for mTLS, and ALPN
//! protocols), TCP + TLS connections, HTTP/1.1 and HTTP/2 connections over them, and a request
//! helper. The crypto provider is ring, as in poolguard itself.
//!
//! ```no_run
//! # async fn demo(ca_pem: &[u8], addr: std::net::SocketAddr) -> anyhow::Result<()> {
//! use poolguard_testclient::{client_config, post, send1, TlsClient, HTTP11};
//! let client = TlsClient::new(client_config(ca_pem, None, &[HTTP11])?, "127.0.0.1")?;
//! let (mut sender, _leaf) = client.http1(addr).await?;
//! let (status, body) = send1(&mut sender, post("127.0.0.1", "/mutate", "{}")).await?;
//! # Ok(()) }
//! ```

use std::io;
use std::sync::Arc;

use anyhow::{ensure, Context, Result};
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::{http1, http2};
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tokio::net::{TcpStream, ToSocketAddrs};

pub use tokio_rustls::client::TlsStream;

/// ALPN protocol id of HTTP/2.
pub const H2: &[u8] = b"h2";
/// ALPN protocol id of HTTP/1.1.
pub const HTTP11: &[u8] = b"http/1.1";

/// A request body as the helpers here send it.
pub type Body = Full<Bytes>;

/// The certificates in `pem`, in order. Fails on a malformed block and when there is none.
pub fn pem_certs(pem: &[u8]) -> Result<Vec<CertificateDer<'static>>> {
    let certs = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .context("reading PEM certificates")?;
    ensure!(!certs.is_empty(), "no certificate in the PEM data");
    Ok(certs)
}

/// A client certificate for mTLS: the certificate chain and its private key, both PEM.
#[derive(Clone, Copy, Debug)]
pub struct Identity<'a> {
    pub cert_pem: &'a [u8],
    pub key_pem: &'a [u8],
}

/// A rustls client configuration (ring, TLS 1.2 and 1.3) that trusts exactly the CA certificates
/// in `ca_pem`, presents `identity` when given, and offers `alpn` (in order of preference; empty:
/// no ALPN extension).
pub fn client_config(
    ca_pem: &[u8],
    identity: Option<Identity<'_>>,
    alpn: &[&[u8]],
) -> Result<rustls::ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in pem_certs(ca_pem).context("CA bundle")? {
        roots.add(cert).context("adding a CA certificate")?;
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots);
    let mut config = match identity {
        None => builder.with_no_client_auth(),
        Some(id) => {
            let chain = pem_certs(id.cert_pem).context("client certificate")?;
            let key = PrivateKeyDer::from_pem_slice(id.key_pem).context("client private key")?;
            builder
                .with_client_auth_cert(chain, key)
                .context("client certificate and key")?
        }
    };
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    Ok(config)
}

/// Connects to one server with one client configuration.
#[derive(Clone)]
pub struct TlsClient {
    config: Arc<rustls::ClientConfig>,
    server_name: ServerName<'static>,
}

impl TlsClient {
    /// A client for a server whose certificate must be valid for `server_name` (a DNS name or an
    /// IP address such as `127.0.0.1`).
    pub fn new(config: rustls::ClientConfig, server_name: &str) -> Result<TlsClient> {
        let server_name = ServerName::try_from(server_name.to_string())
            .with_context(|| format!("{server_name:?} is not a DNS name or IP address"))?;
        Ok(TlsClient {
            config: Arc::new(config),
            server_name,
        })
    }

    pub fn config(&self) -> &Arc<rustls::ClientConfig> {
        &self.config
    }

    /// TCP (with TCP_NODELAY) and the TLS handshake. The error is the handshake's, e.g. the
    /// server refusing a client without a certificate.
    pub async fn connect(&self, addr: impl ToSocketAddrs) -> io::Result<TlsStream<TcpStream>> {
        self.handshake(TcpStream::connect(addr).await?).await
    }

    /// [`TlsClient::connect`] from the local address `from` (on loopback, any of 127.0.0.0/8:
    /// a second client address for servers that count what each address holds).
    pub async fn connect_from(
        &self,
        from: std::net::IpAddr,
        addr: std::net::SocketAddr,
    ) -> io::Result<TlsStream<TcpStream>> {
        let socket = match from {
            std::net::IpAddr::V4(_) => tokio::net::TcpSocket::new_v4()?,
            std::net::IpAddr::V6(_) => tokio::net::TcpSocket::new_v6()?,
        };
        socket.bind(std::net::SocketAddr::new(from, 0))?;
        self.handshake(socket.connect(addr).await?).await
    }

    async fn handshake(&self, tcp: TcpStream) -> io::Result<TlsStream<TcpStream>> {
        tcp.set_nodelay(true)?;
        tokio_rustls::TlsConnector::from(self.config.clone())
            .connect(self.server_name.clone(), tcp)
            .await
    }

    /// An HTTP/1.1 connection (its driver spawned on the current tokio runtime) and the leaf
    /// certificate the server presented.
    pub async fn http1(
        &self,
        addr: impl ToSocketAddrs,
    ) -> Result<(http1::SendRequest<Body>, CertificateDer<'static>)> {
        let tls = self.connect(addr).await.context("TLS connection")?;
        let leaf = peer_certificate(&tls).context("the server presented no certificate")?;
        let (sender, conn) = http1::handshake(TokioIo::new(tls)).await?;
        tokio::spawn(conn);
        Ok((sender, leaf))
    }

    /// An HTTP/2 connection (its driver spawned on the current tokio runtime). Fails unless the
    /// server chose `h2` by ALPN, so the configuration must offer [`H2`].
    pub async fn http2(&self, addr: impl ToSocketAddrs) -> Result<http2::SendRequest<Body>> {
        let tls = self.connect(addr).await.context("TLS connection")?;
        let alpn = tls.get_ref().1.alpn_protocol().map(<[u8]>::to_vec);
        ensure!(
            alpn.as_deref() == Some(H2),
            "the server did not choose h2 by ALPN (chose {:?})",
            alpn.map(|p| String::from_utf8_lossy(&p).into_owned())
        );
        let (sender, conn) = http2::handshake(TokioExecutor::new(), TokioIo::new(tls)).await?;
        tokio::spawn(conn);
        Ok(sender)
    }
}

/// The leaf certificate the server presented on `tls`.
pub fn peer_certificate(tls: &TlsStream<TcpStream>) -> Option<CertificateDer<'static>> {
    let certs = tls.get_ref().1.peer_certificates()?;
    certs.first().map(|c| c.clone().into_owned())
}

/// `POST path` with `Host: host`, a JSON content type and `body`.
pub fn post(host: &str, path: &str, body: impl Into<Bytes>) -> hyper::Request<Body> {
    hyper::Request::post(path)
        .header(hyper::header::HOST, host)
        .header(hyper::header::CONTENT_TYPE, "application/json")
        .body(Full::new(body.into()))
        .expect("a POST with a valid path and host")
}

/// Sends `request` once `sender` is ready and reads the whole response: status and body.
pub async fn send1(
    sender: &mut http1::SendRequest<Body>,
    request: hyper::Request<Body>,
) -> Result<(u16, Bytes)> {
    sender.ready().await?;
    read(sender.send_request(request).await?).await
}

/// [`send1`] over HTTP/2.
pub async fn send2(
    sender: &mut http2::SendRequest<Body>,
    request: hyper::Request<Body>,
) -> Result<(u16, Bytes)> {
    sender.ready().await?;
    read(sender.send_request(request).await?).await
}

async fn read(response: hyper::Response<hyper::body::Incoming>) -> Result<(u16, Bytes)> {
    let status = response.status().as_u16();
    let body = response.into_body().collect().await?.to_bytes();
    Ok((status, body))
}
