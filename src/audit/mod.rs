//! The background audit's shell: listing the cluster ([`scan`]), writing policy reports
//! ([`report_writer`]), leader election ([`leader`]) and the loop that runs a pass every
//! interval while this replica leads ([`schedule`]). The decisions themselves are
//! `poolguard_core::audit` and `poolguard_core::report`.

pub mod leader;
pub mod report_writer;
pub mod scan;
pub mod schedule;
