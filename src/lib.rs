//! poolguard: a Kubernetes admission webhook for node-pool placement and Rego (SIT) policies.

pub mod config;
pub mod placement;
pub mod policy;
