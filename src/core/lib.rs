//! poolguard's decisions, free of I/O: what an admission request gets (placement patch, policy
//! infringements, denial) is a function of plain values — the request, the namespace's labels,
//! the config and the prepared policies. This crate depends on no async runtime, Kubernetes
//! client, logger or CLI parser, so the compiler keeps it that way; the `poolguard` crate holds
//! the shells (HTTPS server, cluster watches, certificates, command line) around it.

#![forbid(unsafe_code)]

// The shared test data of tests/data/ names this crate as the integration tests see it; the unit
// tests that include it (native::cel_differential) see it under the same name.
#[cfg(test)]
extern crate self as poolguard_core;

pub mod admission;
pub mod audit;
pub mod audit_tally;
pub mod config;
pub mod documents;
pub mod evidence;
pub mod exceptions;
pub mod gatekeeper;
pub mod gator;
pub mod globs;
pub mod image;
pub mod labels;
pub mod matching;
pub mod mutate;
pub mod namespace_object;
pub mod namespaces;
pub mod native;
pub mod node_selector;
pub mod placement_policy;
pub mod pod_images;
pub mod policy;
pub(crate) mod pool_authority;
pub mod report;
pub mod rollout;
pub mod rollout_mark;
pub mod ruleset;
pub mod scope;
pub mod validate;
pub mod webhook;
