//! Progressive enforcement of a policy: namespaces fall into groups ordered by risk, and a new
//! version of a policy reaches its final enforcement one group at a time, each group first
//! proving itself under `warn` for a while. The config form of a rollout is
//! [`crate::config::rollout`]; [`machine`] is the pure state machine that moves a rollout along;
//! [`crate::policy::version`] the digest that tells one version of a policy from the next; [`crate::evidence`] what the
//! audit saw; [`view`] what each namespace group gets now. Group statuses follow Open Cluster
//! Management's progressive rollout design (ToApply, Progressing, Succeeded, Failed, TimeOut).

pub mod machine;
pub mod view;

pub use machine::{
    step, Change, Command, Event, GroupState, GroupStatus, Observations, RolloutState, Transition,
    Which,
};
