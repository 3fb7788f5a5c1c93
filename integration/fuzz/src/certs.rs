//! The root crate's certificate modules, compiled here from their own source files. Depending on
//! the `poolguard` crate instead would build its whole server (Kubernetes client, HTTP stack,
//! runtime) with fuzzing instrumentation, minutes on 2 cores, for three files that need none of
//! it: `rotation` (the renewal plan), `authority` (which it uses) and `pacing` (the loop's waits).
//! Left out of this crate's test build (`clippy --all-targets`): the files carry the root
//! crate's unit tests, whose test dependencies are not here.
#![cfg(not(test))]
#![allow(dead_code)]

#[path = "../../../src/certs/authority.rs"]
pub mod authority;
#[path = "../../../src/certs/pacing.rs"]
pub mod pacing;
#[path = "../../../src/certs/rotation.rs"]
pub mod rotation;
