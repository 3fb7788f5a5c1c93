//! Certificates: a CA and what it signs (`authority`), and the pure plan of self-managed
//! certificate rotation (`rotation`). The Secret and webhook configurations they are kept in are
//! the cluster side's (`crate::cluster::managed_certs`).

pub mod authority;
pub mod pacing;
pub mod rotation;
