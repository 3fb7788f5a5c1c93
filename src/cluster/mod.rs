//! The cluster side: what poolguard reads from and writes to the Kubernetes API.

pub mod exception_cache;
#[cfg(test)]
mod fake_api;
pub mod gatekeeper_objects;
pub mod managed_certs;
pub mod mirrored;
pub mod namespace_cache;
pub mod native_objects;
pub mod node_cache;
pub mod nodepool_cache;
pub mod webhook_registration;
