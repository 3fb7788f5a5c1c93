//! The labels of a Kubernetes object (a namespace's, a node's) as the decisions read them.

/// Label keys to values.
pub type Labels = std::collections::BTreeMap<String, String>;
