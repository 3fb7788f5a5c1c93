//! Progressive enforcement's shell. The state lives in one ConfigMap (see [`store`]); every
//! replica watches it and decides with what it holds ([`sync`]) and reports what it counted at
//! admission (`crate::telemetry::rollout_counts`); the audit's leader steps each rollout after every audit pass and
//! between passes ([`controller`]). The state machine and the decisions are
//! `poolguard_core::rollout`.

pub mod controller;
pub mod store;
pub mod sync;
