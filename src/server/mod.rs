//! The HTTPS admission server: connections and their limits, bodies, the admission and
//! operations endpoints, TLS, and the state the handlers share. Wired by [`crate::app`].

use std::net::SocketAddr;

use tokio::net::TcpListener;

pub mod body;
mod connection_activity;
pub mod connections;
pub mod endpoints;
pub mod idle_eviction;
pub mod limits;
pub mod ops;
pub mod reload;
pub mod state;
pub mod tls;

pub use limits::Limits;

/// The admission listener, with a long accept queue: under a flood of connections (see
/// `idle_eviction`) a client whose SYN finds the queue full waits a second to send it again.
/// The kernel caps it at `net.core.somaxconn`.
pub(crate) fn listen(addr: SocketAddr) -> std::io::Result<TcpListener> {
    const ACCEPT_QUEUE: u32 = 4096;
    let socket = if addr.is_ipv4() {
        tokio::net::TcpSocket::new_v4()?
    } else {
        tokio::net::TcpSocket::new_v6()?
    };
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(ACCEPT_QUEUE)
}
