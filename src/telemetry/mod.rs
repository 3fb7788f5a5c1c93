//! What poolguard records about itself: the Prometheus metrics (`metrics`), the per-phase
//! request times (`phase_times`) and what admission counted for policies under a rollout
//! (`rollout_counts`, published for the rollout's leader). A low room: it imports no other module of this crate, and every
//! shell (the server, the audit, the rollout controller, the registration) may use it.

pub mod metrics;
pub mod phase_times;
pub mod rollout_counts;
