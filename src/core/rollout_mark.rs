//! What a decision records of a policy's rollout: the group a namespace falls in, where that
//! group stands, and the version that ran. A leaf: the decision envelope
//! ([`crate::admission`]) carries it, the rollout ([`crate::rollout`]) makes it.

use serde::{Deserialize, Serialize};

/// Where a group stands in the rollout of the current version.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum GroupStatus {
    /// Waiting for its turn (or approval): still on the previous version.
    ToApply,
    /// On the new version at `warn`, proving itself.
    Progressing,
    /// On the new version at the final enforcement.
    Succeeded,
    /// Was enforcing, until the safety valve dropped it back to `warn`.
    Failed,
    /// Did not succeed within the progress deadline; stays at `warn`. The rollout stops here.
    TimeOut,
}

/// Which rollout group and status a decision was made under.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RolloutMark {
    /// The group's name; empty for a namespace in no group.
    pub group: String,
    pub status: Option<GroupStatus>,
    /// The version that ran.
    pub version: String,
}
