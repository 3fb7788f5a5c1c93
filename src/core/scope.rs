//! What the shell knows of the cluster around one request, as both webhooks read it.

use crate::labels::Labels;
use crate::placement_policy::PoolSet;

/// What the shell knows of the cluster around one request.
#[derive(Debug, Clone, Copy, Default)]
pub struct Scope<'a> {
    /// The labels of the request's namespace (`None`: no namespace, or not found).
    pub labels: Option<&'a Labels>,
    /// The pools and what their nodes can do; `None` while the nodes are unknown.
    pub pools: Option<&'a PoolSet>,
    /// The time (Unix seconds), which PolicyExceptions are live against; `None`: no exception
    /// counts.
    pub now: Option<i64>,
}
