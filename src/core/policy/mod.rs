//! SIT policies in Rego: templates ([`template`]) compiled into prepared regorus engines
//! ([`engine`]), gathered into a set evaluated per object ([`set`]).

pub(crate) mod builtins;
pub mod dependencies;
pub mod engine;
pub mod input;
pub mod memo;
pub mod rego_tests;
pub(crate) mod review_paths;
#[cfg(test)]
mod review_paths_tests;
pub mod set;
pub mod shipped;
pub(crate) mod string_literal;
pub mod template;
pub mod version;

pub(crate) use engine::{add_source, new_engine};
pub use engine::{kind_of, Policy};
pub use set::{Evaluation, Outcome, Pending, PolicySet};
