//! poolguard: a Kubernetes admission webhook for node-pool placement and Rego (SIT) policies.
//!
//! Pure decisions (`placement`, `policy`, `mutate`, `validate`) take plain values; the shells
//! (`eval`, `certs`, `namespaces`) do the I/O around them.

pub mod admission;
pub mod certs;
pub mod config;
pub mod documents;
pub mod eval;
pub mod image;
pub mod metrics;
pub mod mutate;
pub mod namespaces;
pub mod ops;
pub mod placement;
pub mod policy;
pub mod reload;
pub mod ruleset;
pub mod selfcert;
pub mod serve;
pub mod server;
pub mod tls;
pub mod validate;
pub mod webhook;
