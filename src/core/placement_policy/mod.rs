//! Choosing a pool for a pod with placement (SAT) policies — issue 16, pure core part. So far:
//! the facts such policies reason about, from Node objects ([`facts::NodeFacts`],
//! [`facts::PoolFacts`]) and pod specs ([`facts::PodRequirements`]), with amounts read by
//! [`quantity`].

pub mod facts;
pub mod quantity;
