//! Gatekeeper's constraints judged outside admission, through the decision context: the review
//! Gatekeeper builds for an object read from a file ([`review`]), and gator's verify suites
//! ([`suite`]). Above both [`crate::gatekeeper`], which loads the constraints, and
//! [`crate::ruleset`], which decides.

#[cfg(test)]
mod decisions;
pub mod review;
pub mod suite;
