//! poolguard's shells around the pure decisions of `poolguard-core`: the HTTPS server and the
//! operations port (`server`), the cluster side (`cluster`: namespace watch cache, self-managed
//! certificates), certificate making and rotation planning (`certs`), where namespace labels
//! come from (`namespaces`), file loading (`sources`) and the command line (`cli`). `telemetry`
//! (the metrics every shell records) is the low room all of them may use.

#![forbid(unsafe_code)]

pub mod allocator;
pub mod app;
pub mod audit;
pub mod certs;
pub mod cli;
pub mod cluster;
pub mod namespaces;
pub mod pools;
pub mod rollout;
pub mod server;
pub mod sources;
pub mod telemetry;
pub mod wall_clock;
