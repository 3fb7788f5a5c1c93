//! Karpenter NodePools (`karpenter.sh/v1`) as pools. A NodePool often has no node until a pod
//! asks for one, so its facts come from what it can launch: the instance types of a catalog
//! (the format of Karpenter's kwok provider) that meet its requirements and fit in what its
//! limits leave, together with the nodes it has already launched.
//!
//! - [`NodePool::from_object`] reads a NodePool object.
//! - [`Catalog::from_json`] reads an instance-type catalog.
//! - [`NodePool::launch`] says what the NodePool can launch from the catalog ([`Launch`]).
//! - [`NodePool::facts`] combines that with its existing nodes into the [`PoolFacts`] that
//!   placement policies see.
//!
//! Pure: no I/O and no clock; the caller reads the objects and the catalog.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use serde_json::{Map, Value};

use super::facts::{NodeFacts, PoolFacts, Resources, Taint};
use super::quantity;
use crate::labels::Labels;

/// The label Karpenter puts on every node a NodePool launches, naming the NodePool.
pub const NODEPOOL_LABEL: &str = "karpenter.sh/nodepool";
const INSTANCE_TYPE_LABEL: &str = "node.kubernetes.io/instance-type";
const ARCH_LABEL: &str = "kubernetes.io/arch";
const OS_LABEL: &str = "kubernetes.io/os";
/// The labels the kwok provider derives from an instance type's name and resources.
const KWOK_SIZE_LABEL: &str = "karpenter.kwok.sh/instance-size";
const KWOK_FAMILY_LABEL: &str = "karpenter.kwok.sh/instance-family";
const KWOK_CPU_LABEL: &str = "karpenter.kwok.sh/instance-cpu";
const KWOK_MEMORY_LABEL: &str = "karpenter.kwok.sh/instance-memory";

/// Deprecated label keys and the keys Karpenter reads them as.
const NORMALIZED_KEYS: [(&str, &str); 5] = [
    (
        "failure-domain.beta.kubernetes.io/zone",
        "topology.kubernetes.io/zone",
    ),
    (
        "failure-domain.beta.kubernetes.io/region",
        "topology.kubernetes.io/region",
    ),
    ("beta.kubernetes.io/arch", ARCH_LABEL),
    ("beta.kubernetes.io/os", OS_LABEL),
    ("beta.kubernetes.io/instance-type", INSTANCE_TYPE_LABEL),
];

/// A node selector operator, as NodePool requirements use them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Operator {
    In,
    NotIn,
    Exists,
    DoesNotExist,
    /// The label is an integer greater than the value.
    Gt,
    /// The label is an integer less than the value.
    Lt,
    /// The label is an integer at least the value.
    Gte,
    /// The label is an integer at most the value.
    Lte,
}

impl Operator {
    const ALL: [Operator; 8] = [
        Operator::In,
        Operator::NotIn,
        Operator::Exists,
        Operator::DoesNotExist,
        Operator::Gt,
        Operator::Lt,
        Operator::Gte,
        Operator::Lte,
    ];

    /// The operator's name as written in a NodePool.
    pub fn as_str(self) -> &'static str {
        match self {
            Operator::In => "In",
            Operator::NotIn => "NotIn",
            Operator::Exists => "Exists",
            Operator::DoesNotExist => "DoesNotExist",
            Operator::Gt => "Gt",
            Operator::Lt => "Lt",
            Operator::Gte => "Gte",
            Operator::Lte => "Lte",
        }
    }

    fn parse(text: &str) -> Option<Operator> {
        Operator::ALL.into_iter().find(|o| o.as_str() == text)
    }

    fn is_bound(self) -> bool {
        matches!(
            self,
            Operator::Gt | Operator::Lt | Operator::Gte | Operator::Lte
        )
    }
}

/// One requirement on a node label: `key`, `operator`, `values`. Deprecated keys
/// (`beta.kubernetes.io/arch`, `failure-domain.beta.kubernetes.io/zone`, …) are read as the
/// keys that replaced them, as Karpenter reads them.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Requirement {
    pub key: String,
    pub operator: Operator,
    /// The values of `In` and `NotIn`; the one integer of `Gt`, `Lt`, `Gte` and `Lte`; empty
    /// for `Exists` and `DoesNotExist`.
    pub values: Vec<String>,
}

impl Requirement {
    /// Whether a node with `labels` meets the requirement. A node without the label meets only
    /// `NotIn` and `DoesNotExist`; `Gt`, `Lt`, `Gte` and `Lte` need a label that is an integer.
    pub fn matches(&self, labels: &Labels) -> bool {
        let Some(value) = labels.get(&self.key) else {
            return matches!(self.operator, Operator::NotIn | Operator::DoesNotExist);
        };
        match self.operator {
            Operator::In => self.values.contains(value),
            Operator::NotIn => !self.values.contains(value),
            Operator::Exists => true,
            Operator::DoesNotExist => false,
            bound => {
                let (Ok(value), Some(Ok(limit))) = (
                    value.parse::<i64>(),
                    self.values.first().map(|v| v.parse::<i64>()),
                ) else {
                    return false;
                };
                match bound {
                    Operator::Gt => value > limit,
                    Operator::Lt => value < limit,
                    Operator::Gte => value >= limit,
                    _ => value <= limit,
                }
            }
        }
    }

    /// The value every node meeting the requirement has for its key, if there is exactly one:
    /// `In` with one value.
    fn fixed(&self) -> Option<&str> {
        match (self.operator, self.values.as_slice()) {
            (Operator::In, [value]) => Some(value),
            _ => None,
        }
    }
}

impl fmt::Display for Requirement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.operator {
            Operator::Exists | Operator::DoesNotExist => {
                write!(f, "{} {}", self.key, self.operator.as_str())
            }
            op if op.is_bound() => {
                write!(f, "{} {} {}", self.key, op.as_str(), self.values.join(""))
            }
            op => write!(
                f,
                "{} {} [{}]",
                self.key,
                op.as_str(),
                self.values.join(", ")
            ),
        }
    }
}

/// What poolguard reads of a `karpenter.sh/v1` NodePool.
#[derive(Debug, Clone, PartialEq)]
pub struct NodePool {
    /// `metadata.name`.
    pub name: String,
    /// `spec.template.metadata.labels`: labels every node it launches gets.
    pub labels: Labels,
    /// `spec.template.spec.requirements`, in order (`minValues` is not read).
    pub requirements: Vec<Requirement>,
    /// `spec.template.spec.taints`, sorted (the temporary `startupTaints` are not read).
    pub taints: Vec<Taint>,
    /// `spec.limits`: the most its nodes may have together, per resource (`cpu`, `memory`,
    /// `nodes`, …); a resource not named is unlimited.
    pub limits: Resources,
    /// `status.resources`: what its nodes have now, per resource.
    pub used: Resources,
}

/// One instance type of a [`Catalog`].
#[derive(Debug, Clone, PartialEq)]
pub struct InstanceType {
    pub name: String,
    /// The labels a node of this type gets from the type itself: `node.kubernetes.io/instance-type`,
    /// `kubernetes.io/arch`, and those the kwok provider derives (`karpenter.kwok.sh/instance-size`,
    /// `-family`, `-cpu`, `-memory`).
    pub labels: Labels,
    /// `operatingSystems`: a node gets one of them as `kubernetes.io/os`.
    pub operating_systems: Vec<String>,
    /// `resources`: the node's capacity (`pods` is 110 when not given, as in the kwok provider).
    pub capacity: Resources,
    pub offerings: Vec<Offering>,
}

/// Where and how an instance type can be launched: the labels a node of this offering gets
/// (`karpenter.sh/capacity-type`, `topology.kubernetes.io/zone`, …), its price, and whether it
/// can be launched now.
#[derive(Debug, Clone, PartialEq)]
pub struct Offering {
    pub labels: Labels,
    pub price: Option<f64>,
    pub available: bool,
}

/// The instance types a NodePool may launch, read from a JSON catalog in the format of
/// Karpenter's kwok provider (`kwok/cloudprovider/instance_types.json`).
#[derive(Debug, Clone, PartialEq)]
pub struct Catalog {
    /// Where the catalog came from, for messages.
    pub origin: String,
    pub instance_types: Vec<InstanceType>,
    /// What a node reserves for itself: a launched node's allocatable is its capacity less
    /// this. [`Catalog::from_json`] sets the kwok provider's (cpu 100m, memory 10Mi).
    pub overhead: Resources,
}

/// An instance type a NodePool can launch now.
#[derive(Debug, Clone, PartialEq)]
pub struct LaunchableType {
    pub name: String,
    pub capacity: Resources,
    /// The capacity less the catalog's overhead.
    pub allocatable: Resources,
    /// The full labels a launched node of this type gets, one set per offering and operating
    /// system the NodePool allows, sorted: the NodePool's template labels,
    /// `karpenter.sh/nodepool`, the labels its requirements fix (`In` with one value), then the
    /// type's and the offering's labels.
    pub labels: Vec<Labels>,
}

/// What a NodePool can launch now ([`NodePool::launch`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Launch {
    /// The instance types, in catalog order.
    pub types: Vec<LaunchableType>,
    /// The distinct allocatable combinations of `types`, sorted.
    pub shapes: Vec<Resources>,
    /// When `types` is empty, why: no instance type meets the requirements, or the limits
    /// leave room for none (`limits reached: cpu 16 of 16 used`).
    pub reason: Option<String>,
}

impl Launch {
    fn nothing(reason: String) -> Launch {
        Launch {
            types: Vec::new(),
            shapes: Vec::new(),
            reason: Some(reason),
        }
    }
}

impl NodePool {
    /// Reads a `karpenter.sh/v1` NodePool object (as the API server gives it). Unknown fields
    /// are ignored. Errors name the NodePool and the field.
    pub fn from_object(object: &Value) -> Result<NodePool, String> {
        let Some(name) = object
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .filter(|n| !n.is_empty())
        else {
            return Err("a NodePool has no metadata.name".to_string());
        };
        let at = |field: &str| format!("NodePool {name:?}: {field}");
        let get = |path: &[&str]| lookup(object, path).map_err(|field| at(&field));
        let labels = string_map(get(&["spec", "template", "metadata", "labels"])?).map_err(
            |(field, e)| {
                format!(
                    "{}: {e}",
                    at(&format!("spec.template.metadata.labels{field}"))
                )
            },
        )?;
        let field = "spec.template.spec.requirements";
        let requirements = requirements(get(&["spec", "template", "spec", "requirements"])?)
            .map_err(|(index, e)| format!("{}{e}", at(&format!("{field}{index}"))))?;
        let taints =
            taints(get(&["spec", "template", "spec", "taints"])?).map_err(|(index, e)| {
                format!("{}: {e}", at(&format!("spec.template.spec.taints{index}")))
            })?;
        let limits = quantities(get(&["spec", "limits"])?)
            .map_err(|(key, e)| format!("{}: {e}", at(&format!("spec.limits{key}"))))?;
        let used = quantities(get(&["status", "resources"])?)
            .map_err(|(key, e)| format!("{}: {e}", at(&format!("status.resources{key}"))))?;
        Ok(NodePool {
            name: name.to_string(),
            labels,
            requirements,
            taints,
            limits,
            used,
        })
    }

    /// The labels every node the NodePool launches gets whatever its type: the template
    /// labels, `karpenter.sh/nodepool`, and the labels the requirements fix (`In` with one
    /// value).
    pub fn node_labels(&self) -> Labels {
        let mut labels = self.labels.clone();
        labels.insert(NODEPOOL_LABEL.to_string(), self.name.clone());
        for requirement in &self.requirements {
            if let Some(value) = requirement.fixed() {
                labels.insert(requirement.key.clone(), value.to_string());
            }
        }
        labels
    }

    /// What the NodePool can launch from `catalog` now. A node of an instance type, in one of
    /// its available offerings and one of its operating systems, has the type's and the
    /// offering's labels ([`InstanceType::labels`], [`Offering::labels`], `kubernetes.io/os`);
    /// the type is launchable when some such node meets every requirement (template labels
    /// count as `In` requirements) and its capacity fits in what the limits leave
    /// (`spec.limits` less `status.resources`, for each resource the limits name; a node
    /// counts 1 against `nodes`).
    ///
    /// A requirement on a key that no instance type or offering of the catalog defines
    /// (a custom label such as `team`) chooses no type: it describes the labels the NodePool
    /// puts on its nodes, as in Karpenter. On a key the catalog defines, a type without the
    /// label meets only `NotIn` and `DoesNotExist`.
    ///
    /// An error when the NodePool allows instance types by name (`node.kubernetes.io/instance-type`
    /// `In`) that the catalog does not list; nothing launchable is not an error but a
    /// [`Launch`] with no types and the reason.
    pub fn launch(&self, catalog: &Catalog) -> Result<Launch, String> {
        self.check_instance_type_names(catalog)?;
        let defined: BTreeSet<&str> = catalog
            .instance_types
            .iter()
            .flat_map(|t| {
                let offered = t.offerings.iter().flat_map(|o| o.labels.keys());
                t.labels.keys().chain(offered).map(String::as_str)
            })
            .chain(
                catalog
                    .instance_types
                    .iter()
                    .any(|t| !t.operating_systems.is_empty())
                    .then_some(OS_LABEL),
            )
            .collect();
        let from_labels: Vec<Requirement> = self
            .labels
            .iter()
            .map(|(key, value)| Requirement {
                key: key.clone(),
                operator: Operator::In,
                values: vec![value.clone()],
            })
            .collect();
        let choosing: Vec<&Requirement> = self
            .requirements
            .iter()
            .chain(&from_labels)
            .filter(|r| defined.contains(r.key.as_str()))
            .collect();
        let base = self.node_labels();
        let mut allowed: Vec<(&InstanceType, Vec<Labels>)> = Vec::new();
        for instance_type in &catalog.instance_types {
            let variants: BTreeSet<Labels> = instance_type
                .nodes()
                .filter(|labels| choosing.iter().all(|r| r.matches(labels)))
                .map(|labels| {
                    let mut full = base.clone();
                    full.extend(labels);
                    full
                })
                .collect();
            if !variants.is_empty() {
                allowed.push((instance_type, variants.into_iter().collect()));
            }
        }
        if allowed.is_empty() {
            return Ok(Launch::nothing(unmet(catalog, &choosing)));
        }
        let need = |t: &InstanceType, resource: &str| -> i64 {
            if resource == "nodes" {
                1
            } else {
                t.capacity.get(resource).copied().unwrap_or(0)
            }
        };
        let left = |resource: &str, limit: i64| -> i64 {
            limit.saturating_sub(self.used.get(resource).copied().unwrap_or(0))
        };
        let fits = |t: &InstanceType| {
            self.limits
                .iter()
                .all(|(resource, &limit)| need(t, resource) <= left(resource, limit))
        };
        let mut types = Vec::new();
        for (instance_type, labels) in &allowed {
            if fits(instance_type) {
                types.push(LaunchableType {
                    name: instance_type.name.clone(),
                    capacity: instance_type.capacity.clone(),
                    allocatable: less(&instance_type.capacity, &catalog.overhead),
                    labels: labels.clone(),
                });
            }
        }
        if types.is_empty() {
            // The limited resources that keep some allowed type out.
            let binding: Vec<(&String, i64, i64)> = self
                .limits
                .iter()
                .filter(|(resource, &limit)| {
                    allowed
                        .iter()
                        .any(|(t, _)| need(t, resource) > left(resource, limit))
                })
                .map(|(resource, &limit)| {
                    (
                        resource,
                        self.used.get(resource).copied().unwrap_or(0),
                        limit,
                    )
                })
                .collect();
            let described = binding
                .iter()
                .map(|(resource, used, limit)| {
                    format!(
                        "{resource} {} of {} used",
                        shown(resource, *used),
                        shown(resource, *limit)
                    )
                })
                .collect::<Vec<_>>()
                .join(", ");
            let reached = binding.iter().all(|(_, used, limit)| used >= limit);
            return Ok(Launch::nothing(if reached {
                format!("limits reached: {described}")
            } else {
                format!("the limits leave room for none of its instance types: {described}")
            }));
        }
        let shapes: BTreeSet<Resources> = types.iter().map(|t| t.allocatable.clone()).collect();
        Ok(Launch {
            types,
            shapes: shapes.into_iter().collect(),
            reason: None,
        })
    }

    /// The error for instance types the NodePool allows by name that `catalog` does not list.
    fn check_instance_type_names(&self, catalog: &Catalog) -> Result<(), String> {
        let listed: BTreeSet<&str> = catalog
            .instance_types
            .iter()
            .map(|t| t.name.as_str())
            .collect();
        let by_requirement = self.requirements.iter().enumerate().map(|(i, r)| {
            (
                format!("spec.template.spec.requirements[{i}]"),
                r.key.as_str(),
                r.operator,
                r.values.iter().map(String::as_str).collect::<Vec<_>>(),
            )
        });
        let by_label = self.labels.iter().map(|(key, value)| {
            (
                format!("spec.template.metadata.labels[{key:?}]"),
                key.as_str(),
                Operator::In,
                vec![value.as_str()],
            )
        });
        for (field, key, operator, values) in by_requirement.chain(by_label) {
            if normalized(key) != INSTANCE_TYPE_LABEL || operator != Operator::In {
                continue;
            }
            let missing: Vec<String> = values
                .iter()
                .filter(|name| !listed.contains(*name))
                .map(|name| format!("{name:?}"))
                .collect();
            if !missing.is_empty() {
                return Err(format!(
                    "NodePool {:?}: {field} allows instance types that catalog {} does not list: {}",
                    self.name,
                    catalog.origin,
                    missing.join(", ")
                ));
            }
        }
        Ok(())
    }

    /// The NodePool as a pool: its existing `nodes` (those whose label `pool_label`, usually
    /// `karpenter.sh/nodepool`, names it) together with what it can launch (`launch`, from
    /// [`NodePool::launch`]).
    ///
    /// - `nodes`, `ready_nodes`: the existing nodes only.
    /// - `shapes`: the existing nodes' shapes with their counts, then each launchable shape no
    ///   node has yet with a count of 0; `launchable`: the launchable shapes; `largest`: per
    ///   resource, the most of any of them. A policy that asks whether some shape holds a pod
    ///   (`fitsresources`) so accepts a NodePool that has no node but can launch one that
    ///   holds it.
    /// - `labels`, `taints`: those every node of the pool carries, existing or launchable
    ///   (each launchable node has [`LaunchableType::labels`] and the template taints). A
    ///   NodePool with no node that can launch nothing gets the labels and taints any node it
    ///   launches would get ([`NodePool::node_labels`], the template taints).
    pub fn facts(&self, launch: &Launch, nodes: &[NodeFacts], pool_label: &str) -> PoolFacts {
        let members: Vec<NodeFacts> = nodes
            .iter()
            .filter(|n| n.labels.get(pool_label) == Some(&self.name))
            .cloned()
            .collect();
        let existing = PoolFacts::gather(&members, pool_label)
            .into_iter()
            .find(|p| p.name == self.name);
        let had_nodes = existing.is_some();
        let mut facts = existing.unwrap_or_else(|| PoolFacts {
            name: self.name.clone(),
            labels: self.node_labels(),
            nodes: 0,
            ready_nodes: 0,
            largest: Resources::new(),
            shapes: Vec::new(),
            taints: self.taints.clone(),
            launchable: Vec::new(),
        });
        let mut launched = launch.types.iter().flat_map(|t| &t.labels).peekable();
        if !had_nodes {
            if let Some(first) = launched.peek() {
                facts.labels = (*first).clone();
            }
        }
        for labels in launched {
            facts.labels.retain(|k, v| labels.get(k) == Some(v));
        }
        if had_nodes && !launch.types.is_empty() {
            facts.taints.retain(|t| self.taints.contains(t));
        }
        for shape in &launch.shapes {
            for (resource, &amount) in shape {
                let entry = facts.largest.entry(resource.clone()).or_insert(amount);
                *entry = (*entry).max(amount);
            }
            if !facts.shapes.iter().any(|(_, s)| s == shape) {
                facts.shapes.push((0, shape.clone()));
            }
        }
        facts
            .shapes
            .sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
        facts.launchable = launch.shapes.clone();
        facts
    }
}

/// A cluster's pools from its nodes and NodePools, by the node label `key` (the config's
/// `nodeSelectorKey`), sorted by name; and what was found wrong, one line each, in the user's
/// words. A pool of nodes only is [`PoolFacts::gather`]'s. A NodePool is the pool of its name,
/// with its facts from `catalog` ([`NodePool::facts`]) in place of its nodes' alone; without a
/// catalog, or when the catalog cannot say what it launches (an instance type it allows by
/// name is not listed), only its existing nodes count, and the line says so: what it could
/// launch is never guessed. A NodePool whose nodes would not carry `key` with its name is no
/// pool under `key`, said in a line too.
pub fn pools(
    nodes: &[NodeFacts],
    nodepools: &[NodePool],
    catalog: Option<&Catalog>,
    key: &str,
) -> (Vec<PoolFacts>, Vec<String>) {
    let mut found: BTreeMap<String, PoolFacts> = PoolFacts::gather(nodes, key)
        .into_iter()
        .map(|p| (p.name.clone(), p))
        .collect();
    let mut problems = Vec::new();
    for nodepool in nodepools {
        let name = &nodepool.name;
        if nodepool.node_labels().get(key) != Some(name) {
            problems.push(format!(
                "NodePool {name:?} is not a pool: the nodes it launches get no label {key}={name} (the config's nodeSelectorKey); set nodeSelectorKey to {NODEPOOL_LABEL}, or give its template that label"
            ));
            continue;
        }
        let launch = match catalog.map(|c| nodepool.launch(c)) {
            Some(Ok(launch)) => launch,
            Some(Err(e)) => {
                problems.push(format!("{e}; only its existing nodes count"));
                Launch::nothing(e)
            }
            None => {
                let why = format!("NodePool {name:?}: no instance-type catalog is given, so what it can launch is unknown; only its existing nodes count");
                problems.push(why.clone());
                Launch::nothing(why)
            }
        };
        found.insert(name.clone(), nodepool.facts(&launch, nodes, key));
    }
    (found.into_values().collect(), problems)
}

impl PoolFacts {
    /// Whether the pool can take a new pod now: it has a Ready node that is not cordoned, or
    /// it can launch a node.
    pub fn takes_new_pods(&self) -> bool {
        self.ready_nodes > 0 || !self.launchable.is_empty()
    }
}

impl InstanceType {
    /// The labels of each node of this type that can be launched now: one set per available
    /// offering and operating system.
    fn nodes(&self) -> impl Iterator<Item = Labels> + '_ {
        let systems: Vec<Option<&String>> = if self.operating_systems.is_empty() {
            vec![None]
        } else {
            self.operating_systems.iter().map(Some).collect()
        };
        self.offerings
            .iter()
            .filter(|o| o.available)
            .flat_map(move |offering| {
                systems.clone().into_iter().map(move |os| {
                    let mut labels = self.labels.clone();
                    if let Some(os) = os {
                        labels.insert(OS_LABEL.to_string(), os.clone());
                    }
                    labels.extend(offering.labels.iter().map(|(k, v)| (k.clone(), v.clone())));
                    labels
                })
            })
    }
}

impl Catalog {
    /// Reads a catalog: a JSON array of instance types, each an object with `name`,
    /// `architecture`, `operatingSystems` (a list), `resources` (quantities by resource name)
    /// and `offerings` (each with `requirements`, `price`, `available`). Field names match
    /// whatever their case (`Requirements`, `Price`, `Available`, as the kwok provider's own
    /// file writes them); unknown fields are ignored. An offering's requirements are its
    /// labels, each `In` with one value. `available` is true when absent. Errors name
    /// `origin`, the entry (index and name) and the field.
    pub fn from_json(text: &str, origin: &str) -> Result<Catalog, String> {
        let value: Value =
            serde_json::from_str(text).map_err(|e| format!("{origin}: not valid JSON: {e}"))?;
        let Value::Array(entries) = value else {
            return Err(format!(
                "{origin}: must be a JSON array of instance types, got {}",
                kind(&value)
            ));
        };
        let mut instance_types: Vec<InstanceType> = Vec::with_capacity(entries.len());
        let mut seen: BTreeMap<String, usize> = BTreeMap::new();
        for (i, entry) in entries.iter().enumerate() {
            let instance_type = instance_type(entry).map_err(|(name, e)| match name {
                Some(name) => format!("{origin}: instance type [{i}] {name:?}: {e}"),
                None => format!("{origin}: instance type [{i}]: {e}"),
            })?;
            if let Some(first) = seen.insert(instance_type.name.clone(), i) {
                return Err(format!(
                    "{origin}: instance type [{i}] {:?}: name: already used by instance type [{first}]",
                    instance_type.name
                ));
            }
            instance_types.push(instance_type);
        }
        Ok(Catalog {
            origin: origin.to_string(),
            instance_types,
            overhead: Resources::from([("cpu".to_string(), 100), ("memory".to_string(), 10 << 20)]),
        })
    }
}

/// Reads one catalog entry; the error carries the entry's name when it has one.
fn instance_type(entry: &Value) -> Result<InstanceType, (Option<String>, String)> {
    let Value::Object(entry) = entry else {
        return Err((None, format!("must be an object, got {}", kind(entry))));
    };
    let name = match field(entry, "name") {
        Some(Value::String(name)) if !name.is_empty() => name.clone(),
        other => {
            return Err((
                None,
                format!(
                    "name: must be a non-empty string, got {}",
                    other.map_or("nothing".to_string(), kind)
                ),
            ))
        }
    };
    let fail = |e: String| (Some(name.clone()), e);
    let architecture = match field(entry, "architecture") {
        Some(Value::String(arch)) if !arch.is_empty() => arch.clone(),
        other => {
            return Err(fail(format!(
                "architecture: must be a non-empty string, got {}",
                other.map_or("nothing".to_string(), kind)
            )))
        }
    };
    let operating_systems = match field(entry, "operatingSystems") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(items)) => items
            .iter()
            .enumerate()
            .map(|(j, os)| match os {
                Value::String(os) if !os.is_empty() => Ok(os.clone()),
                other => Err(fail(format!(
                    "operatingSystems[{j}]: must be a non-empty string, got {}",
                    kind(other)
                ))),
            })
            .collect::<Result<_, _>>()?,
        Some(other) => {
            return Err(fail(format!(
                "operatingSystems: must be a list, got {}",
                kind(other)
            )))
        }
    };
    let resources_value = field(entry, "resources");
    let mut capacity =
        quantities(resources_value).map_err(|(key, e)| fail(format!("resources{key}: {e}")))?;
    capacity.entry("pods".to_string()).or_insert(110);
    // The kwok provider's derived labels use the quantities as written.
    let written = |resource: &str| -> String {
        match resources_value.and_then(|r| r.get(resource)) {
            Some(Value::String(s)) => s.clone(),
            Some(Value::Number(n)) => n.to_string(),
            _ => String::new(),
        }
    };
    let cpu = written("cpu");
    let mut labels = Labels::new();
    labels.insert(INSTANCE_TYPE_LABEL.to_string(), name.clone());
    labels.insert(ARCH_LABEL.to_string(), architecture);
    labels.insert(KWOK_SIZE_LABEL.to_string(), kwok_size(&name, &cpu));
    labels.insert(KWOK_FAMILY_LABEL.to_string(), kwok_family(&name));
    labels.insert(KWOK_MEMORY_LABEL.to_string(), written("memory"));
    labels.insert(KWOK_CPU_LABEL.to_string(), cpu);
    let offerings = match field(entry, "offerings") {
        Some(Value::Array(items)) => items
            .iter()
            .enumerate()
            .map(|(j, o)| offering(o).map_err(|e| fail(format!("offerings[{j}]{e}"))))
            .collect::<Result<_, _>>()?,
        other => {
            return Err(fail(format!(
                "offerings: must be a list, got {}",
                other.map_or("nothing".to_string(), kind)
            )))
        }
    };
    Ok(InstanceType {
        name,
        labels,
        operating_systems,
        capacity,
        offerings,
    })
}

/// Reads one offering; the error starts with the field below the offering (`.price: …`).
fn offering(value: &Value) -> Result<Offering, String> {
    let Value::Object(object) = value else {
        return Err(format!(": must be an object, got {}", kind(value)));
    };
    let requirements = requirements(field(object, "requirements"))
        .map_err(|(index, e)| format!(".requirements{index}{e}"))?;
    let mut labels = Labels::new();
    for (j, requirement) in requirements.iter().enumerate() {
        let Some(value) = requirement.fixed() else {
            return Err(format!(
                ".requirements[{j}]: an offering's requirement must be In with exactly one value (the label its nodes get), got {requirement}"
            ));
        };
        labels.insert(requirement.key.clone(), value.to_string());
    }
    let price = match field(object, "price") {
        None | Some(Value::Null) => None,
        Some(Value::Number(n)) => n.as_f64(),
        Some(other) => return Err(format!(".price: must be a number, got {}", kind(other))),
    };
    let available = match field(object, "available") {
        None | Some(Value::Null) => true,
        Some(Value::Bool(b)) => *b,
        Some(other) => {
            return Err(format!(
                ".available: must be true or false, got {}",
                kind(other)
            ))
        }
    };
    Ok(Offering {
        labels,
        price,
        available,
    })
}

/// The kwok provider's `instance-size`: the size of an AWS-style name (`m5.xlarge`), else the
/// cpu count.
fn kwok_size(name: &str, cpu: &str) -> String {
    if let Some((family, size)) = name.split_once('.') {
        let word = !family.is_empty()
            && family
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_');
        let known = matches!(
            size,
            "nano" | "micro" | "small" | "medium" | "large" | "metal"
        ) || size
            .strip_suffix("xlarge")
            .is_some_and(|n| n.bytes().all(|b| b.is_ascii_digit()));
        if word && known {
            return size.to_string();
        }
    }
    cpu.to_string()
}

/// The kwok provider's `instance-family`: the name up to its first `.` or `-`, else its first
/// character.
fn kwok_family(name: &str) -> String {
    match name.split_once(['.', '-']) {
        Some((family, _)) => family.to_string(),
        None => name.chars().next().map(String::from).unwrap_or_default(),
    }
}

/// Why no instance type of `catalog` meets `requirements` (those that choose among its types).
fn unmet(catalog: &Catalog, requirements: &[&Requirement]) -> String {
    if catalog.instance_types.is_empty() {
        return format!("catalog {} lists no instance types", catalog.origin);
    }
    if requirements.is_empty() {
        return format!(
            "no instance type in catalog {} has an available offering",
            catalog.origin
        );
    }
    let described: Vec<String> = requirements.iter().map(|r| r.to_string()).collect();
    format!(
        "no available offering of the {} instance types in catalog {} meets the requirements: {}",
        catalog.instance_types.len(),
        catalog.origin,
        described.join("; ")
    )
}

/// The key Karpenter reads `key` as.
fn normalized(key: &str) -> &str {
    NORMALIZED_KEYS
        .iter()
        .find(|(old, _)| *old == key)
        .map_or(key, |(_, new)| new)
}

/// The value at `path` under `root`: `None` when a step is absent or null. The error is the
/// dotted path of a step that is neither an object nor null.
fn lookup<'a>(root: &'a Value, path: &[&str]) -> Result<Option<&'a Value>, String> {
    let mut here = root;
    for (depth, step) in path.iter().enumerate() {
        match here {
            Value::Object(map) => match map.get(*step) {
                None | Some(Value::Null) => return Ok(None),
                Some(next) => here = next,
            },
            other => {
                return Err(format!(
                    "{}: must be an object, got {}",
                    path[..depth].join("."),
                    kind(other)
                ))
            }
        }
    }
    Ok(Some(here))
}

/// A field of a catalog object: its exact name, else the first whose name matches ignoring
/// ASCII case (as Go's JSON decoding matches fields).
fn field<'a>(object: &'a Map<String, Value>, name: &str) -> Option<&'a Value> {
    object.get(name).or_else(|| {
        object
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v)
    })
}

/// Reads a map of label values (absent or null: empty). The error names the key (`["a"]`).
fn string_map(value: Option<&Value>) -> Result<Labels, (String, String)> {
    match value {
        None | Some(Value::Null) => Ok(Labels::new()),
        Some(Value::Object(map)) => map
            .iter()
            .map(|(k, v)| match v {
                Value::String(s) => Ok((k.clone(), s.clone())),
                other => Err((
                    format!("[{k:?}]"),
                    format!("must be a string, got {}", kind(other)),
                )),
            })
            .collect(),
        Some(other) => Err((
            String::new(),
            format!("must be an object, got {}", kind(other)),
        )),
    }
}

/// Reads a map of quantities (absent or null: empty). The error names the key (`["cpu"]`).
fn quantities(value: Option<&Value>) -> Result<Resources, (String, String)> {
    match value {
        None | Some(Value::Null) => Ok(Resources::new()),
        Some(Value::Object(map)) => map
            .iter()
            .map(|(resource, q)| {
                quantity::amount_of_json(resource, q)
                    .map(|amount| (resource.clone(), amount))
                    .map_err(|e| (format!("[{resource:?}]"), e.to_string()))
            })
            .collect(),
        Some(other) => Err((
            String::new(),
            format!("must be an object, got {}", kind(other)),
        )),
    }
}

/// Reads a list of requirements (absent or null: empty). The error is the index (`[2]`) and
/// the rest of the message, starting with the field below the requirement (`.operator "Maybe"
/// is not one of …`, `: must be an object …`).
fn requirements(value: Option<&Value>) -> Result<Vec<Requirement>, (String, String)> {
    let items = match value {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Array(items)) => items,
        Some(other) => {
            return Err((
                String::new(),
                format!(": must be a list, got {}", kind(other)),
            ))
        }
    };
    items
        .iter()
        .enumerate()
        .map(|(i, item)| requirement(item).map_err(|e| (format!("[{i}]"), e)))
        .collect()
}

fn requirement(item: &Value) -> Result<Requirement, String> {
    let Value::Object(object) = item else {
        return Err(format!(": must be an object, got {}", kind(item)));
    };
    let key = match field(object, "key") {
        Some(Value::String(key)) if !key.is_empty() => normalized(key).to_string(),
        other => {
            return Err(format!(
                ".key: must be a non-empty string, got {}",
                other.map_or("nothing".to_string(), kind)
            ))
        }
    };
    let names = Operator::ALL.map(Operator::as_str).join(", ");
    let operator = match field(object, "operator") {
        Some(Value::String(text)) => Operator::parse(text)
            .ok_or_else(|| format!(".operator {text:?} is not one of {names}"))?,
        other => {
            return Err(format!(
                ".operator: must be one of {names}, got {}",
                other.map_or("nothing".to_string(), kind)
            ))
        }
    };
    let values: Vec<String> = match field(object, "values") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(items)) => items
            .iter()
            .enumerate()
            .map(|(j, v)| match v {
                Value::String(s) => Ok(s.clone()),
                other => Err(format!(
                    ".values[{j}]: must be a string, got {}",
                    kind(other)
                )),
            })
            .collect::<Result<_, _>>()?,
        Some(other) => return Err(format!(".values: must be a list, got {}", kind(other))),
    };
    let op = operator.as_str();
    match operator {
        Operator::In if values.is_empty() => {
            return Err(".values: operator In needs at least one value".to_string())
        }
        Operator::Exists | Operator::DoesNotExist if !values.is_empty() => {
            return Err(format!(
                ".values: must be empty for operator {op}, got {values:?}"
            ))
        }
        bound if bound.is_bound() => {
            let whole = match values.as_slice() {
                [value] => value.parse::<i64>().ok().filter(|n| *n >= 0),
                _ => None,
            };
            if whole.is_none() {
                return Err(format!(
                    ".values: operator {op} needs exactly one value, a non-negative integer, got {values:?}"
                ));
            }
        }
        _ => {}
    }
    Ok(Requirement {
        key,
        operator,
        values,
    })
}

/// Reads a list of taints (absent or null: empty), sorted and without repeats. The error is
/// the index (`[0].key`, or empty for the list itself) and the message.
fn taints(value: Option<&Value>) -> Result<Vec<Taint>, (String, String)> {
    let items = match value {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Array(items)) => items,
        Some(other) => {
            return Err((
                String::new(),
                format!("must be a list, got {}", kind(other)),
            ))
        }
    };
    let mut taints = Vec::with_capacity(items.len());
    for (i, taint) in items.iter().enumerate() {
        let text = |name: &str| -> Result<String, (String, String)> {
            match taint.get(name) {
                None | Some(Value::Null) => Ok(String::new()),
                Some(Value::String(s)) => Ok(s.clone()),
                Some(other) => Err((
                    format!("[{i}].{name}"),
                    format!("must be a string, got {}", kind(other)),
                )),
            }
        };
        if !taint.is_object() {
            return Err((
                format!("[{i}]"),
                format!("must be an object, got {}", kind(taint)),
            ));
        }
        taints.push(Taint {
            key: text("key")?,
            value: text("value")?,
            effect: text("effect")?,
        });
    }
    taints.sort();
    taints.dedup();
    Ok(taints)
}

/// `amounts` less `overhead`, never below zero, for the resources `amounts` has.
fn less(amounts: &Resources, overhead: &Resources) -> Resources {
    amounts
        .iter()
        .map(|(resource, &amount)| {
            let reserved = overhead.get(resource).copied().unwrap_or(0);
            (resource.clone(), amount.saturating_sub(reserved).max(0))
        })
        .collect()
}

/// An amount as people write it: cpu in cores (millicores when not whole), byte counts in
/// the largest whole binary unit, other resources as counts.
fn shown(resource: &str, amount: i64) -> String {
    if resource == "cpu" {
        return if amount % 1000 == 0 {
            (amount / 1000).to_string()
        } else {
            format!("{amount}m")
        };
    }
    let bytes = matches!(resource, "memory" | "ephemeral-storage" | "storage")
        || resource.starts_with("hugepages-");
    if bytes && amount != 0 {
        for (unit, shift) in [("Ti", 40), ("Gi", 30), ("Mi", 20), ("Ki", 10)] {
            if amount % (1i64 << shift) == 0 {
                return format!("{}{unit}", amount >> shift);
            }
        }
    }
    amount.to_string()
}

/// A JSON value in a message: strings and numbers as written, containers by their kind.
fn kind(value: &Value) -> String {
    match value {
        Value::Object(_) => "an object".to_string(),
        Value::Array(_) => "a list".to_string(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    const ORIGIN: &str = "test-catalog";
    const MIB: i64 = 1 << 20;
    const GIB: i64 = 1 << 30;

    fn res(pairs: &[(&str, i64)]) -> Resources {
        pairs.iter().map(|(k, v)| (k.to_string(), *v)).collect()
    }

    fn labels(pairs: &[(&str, &str)]) -> Labels {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    /// An offering in `zone` of `capacity_type`.
    fn offering(capacity_type: &str, zone: &str, available: bool) -> Value {
        json!({
            "requirements": [
                {"key": "karpenter.sh/capacity-type", "operator": "In", "values": [capacity_type]},
                {"key": "topology.kubernetes.io/zone", "operator": "In", "values": [zone]},
            ],
            "price": 0.25,
            "available": available,
        })
    }

    /// small (2 cpu, 8Gi), medium (4, 16Gi), large (8, 32Gi; its spot offering unavailable),
    /// arm (16, 64Gi, arm64) and gpu (8, 64Gi, one nvidia.com/gpu, zone-b only); all linux.
    fn catalog() -> Catalog {
        let both = json!([
            offering("spot", "zone-a", true),
            offering("on-demand", "zone-a", true)
        ]);
        let text = json!([
            {"name": "small", "architecture": "amd64", "operatingSystems": ["linux"],
             "resources": {"cpu": "2", "memory": "8Gi", "pods": "110"}, "offerings": both},
            {"name": "medium", "architecture": "amd64", "operatingSystems": ["linux"],
             "resources": {"cpu": "4", "memory": "16Gi", "pods": "110"}, "offerings": both},
            {"name": "large", "architecture": "amd64", "operatingSystems": ["linux"],
             "resources": {"cpu": "8", "memory": "32Gi", "pods": "110"},
             "offerings": [offering("spot", "zone-a", false), offering("on-demand", "zone-a", true)]},
            {"name": "arm", "architecture": "arm64", "operatingSystems": ["linux"],
             "resources": {"cpu": "16", "memory": "64Gi", "pods": "110"}, "offerings": both},
            {"name": "gpu", "architecture": "amd64", "operatingSystems": ["linux"],
             "resources": {"cpu": "8", "memory": "64Gi", "nvidia.com/gpu": "1", "pods": "110"},
             "offerings": [offering("on-demand", "zone-b", true)]},
        ])
        .to_string();
        Catalog::from_json(&text, ORIGIN).unwrap()
    }

    /// The allocatable of a catalog type: its capacity less the kwok overhead.
    fn allocatable(cpu: i64, memory_gib: i64, extra: &[(&str, i64)]) -> Resources {
        let mut r = res(&[
            ("cpu", cpu * 1000 - 100),
            ("memory", memory_gib * GIB - 10 * MIB),
            ("pods", 110),
        ]);
        r.extend(res(extra));
        r
    }

    fn nodepool(name: &str, spec: Value, status: Value) -> NodePool {
        NodePool::from_object(&json!({
            "apiVersion": "karpenter.sh/v1",
            "kind": "NodePool",
            "metadata": {"name": name},
            "spec": spec,
            "status": status,
        }))
        .unwrap()
    }

    /// A NodePool whose template has `requirements`, the label team=a and a taint.
    fn general(requirements: Value, limits: Value, used: Value) -> NodePool {
        nodepool(
            "general",
            json!({
                "template": {
                    "metadata": {"labels": {"team": "a"}},
                    "spec": {
                        "requirements": requirements,
                        "taints": [{"key": "dedicated", "value": "general", "effect": "NoSchedule"}],
                        "nodeClassRef": {"group": "karpenter.kwok.sh", "kind": "KWOKNodeClass", "name": "default"},
                    },
                },
                "limits": limits,
                "disruption": {"consolidationPolicy": "WhenEmptyOrUnderutilized"},
            }),
            json!({"resources": used}),
        )
    }

    fn dedicated() -> Taint {
        Taint {
            key: "dedicated".into(),
            value: "general".into(),
            effect: "NoSchedule".into(),
        }
    }

    fn names(launch: &Launch) -> Vec<&str> {
        launch.types.iter().map(|t| t.name.as_str()).collect()
    }

    fn parsed(requirement: Value) -> Requirement {
        super::requirement(&requirement).unwrap()
    }

    #[test]
    fn requirement_operators() {
        let node = labels(&[
            ("kubernetes.io/arch", "amd64"),
            ("cpus", "4"),
            ("memory", "16Gi"),
        ]);
        // (key, operator, values, met by the node)
        let cases: [(&str, &str, &[&str], bool); 24] = [
            ("kubernetes.io/arch", "In", &["arm64", "amd64"], true),
            ("kubernetes.io/arch", "In", &["arm64"], false),
            ("kubernetes.io/arch", "NotIn", &["arm64"], true),
            ("kubernetes.io/arch", "NotIn", &["amd64"], false),
            ("kubernetes.io/arch", "Exists", &[], true),
            ("kubernetes.io/arch", "DoesNotExist", &[], false),
            // A label the node does not have: only NotIn and DoesNotExist.
            ("gpu", "In", &["a100"], false),
            ("gpu", "NotIn", &["a100"], true),
            ("gpu", "Exists", &[], false),
            ("gpu", "DoesNotExist", &[], true),
            ("gpu", "Gt", &["0"], false),
            ("gpu", "Lt", &["9"], false),
            // Integers.
            ("cpus", "Gt", &["3"], true),
            ("cpus", "Gt", &["4"], false),
            ("cpus", "Lt", &["5"], true),
            ("cpus", "Lt", &["4"], false),
            ("cpus", "Gte", &["4"], true),
            ("cpus", "Gte", &["5"], false),
            ("cpus", "Lte", &["4"], true),
            ("cpus", "Lte", &["3"], false),
            // A label that is not an integer meets no bound.
            ("memory", "Gt", &["1"], false),
            ("memory", "Lt", &["99999"], false),
            // Deprecated keys are read as the keys that replaced them.
            ("beta.kubernetes.io/arch", "In", &["amd64"], true),
            ("beta.kubernetes.io/arch", "NotIn", &["amd64"], false),
        ];
        for (key, operator, values, want) in cases {
            let r =
                parsed(json!({"key": key, "operator": operator, "values": values, "minValues": 1}));
            assert_eq!(r.matches(&node), want, "{key} {operator} {values:?}");
        }
        assert_eq!(
            parsed(
                json!({"key": "beta.kubernetes.io/arch", "operator": "In", "values": ["amd64"]})
            )
            .key,
            "kubernetes.io/arch"
        );
    }

    #[test]
    fn a_nodepool_without_nodes_is_what_it_can_launch() {
        let pool = general(
            json!([
                {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]},
                {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"], "minValues": 1},
                {"key": "node.kubernetes.io/instance-type", "operator": "NotIn", "values": ["gpu"]},
            ]),
            json!(null),
            json!(null),
        );
        assert_eq!(pool.taints, [dedicated()]);
        let launch = pool.launch(&catalog()).unwrap();
        assert_eq!(names(&launch), ["small", "medium", "large"]);
        assert_eq!(launch.reason, None);
        let small = allocatable(2, 8, &[]);
        let medium = allocatable(4, 16, &[]);
        let large = allocatable(8, 32, &[]);
        assert_eq!(
            launch.shapes,
            [small.clone(), medium.clone(), large.clone()]
        );
        // Only large's on-demand offering is available, so it has one label set; small has one
        // too, its spot offering being refused by the requirements.
        let large_type = &launch.types[2];
        assert_eq!(
            large_type.capacity,
            res(&[("cpu", 8000), ("memory", 32 * GIB), ("pods", 110)])
        );
        assert_eq!(
            large_type.labels,
            [labels(&[
                ("karpenter.kwok.sh/instance-cpu", "8"),
                ("karpenter.kwok.sh/instance-family", "l"),
                ("karpenter.kwok.sh/instance-memory", "32Gi"),
                ("karpenter.kwok.sh/instance-size", "8"),
                ("karpenter.sh/capacity-type", "on-demand"),
                ("karpenter.sh/nodepool", "general"),
                ("kubernetes.io/arch", "amd64"),
                ("kubernetes.io/os", "linux"),
                ("node.kubernetes.io/instance-type", "large"),
                ("team", "a"),
                ("topology.kubernetes.io/zone", "zone-a"),
            ])]
        );
        assert_eq!(launch.types[0].labels.len(), 1);

        let facts = pool.facts(&launch, &[], NODEPOOL_LABEL);
        assert_eq!(facts.name, "general");
        assert_eq!((facts.nodes, facts.ready_nodes), (0, 0));
        // The largest shape is the biggest type it may launch (not arm, not gpu).
        assert_eq!(facts.largest, large);
        assert_eq!(
            facts.shapes,
            [(0, small.clone()), (0, medium.clone()), (0, large.clone())]
        );
        assert_eq!(facts.launchable, launch.shapes);
        assert_eq!(facts.taints, [dedicated()]);
        assert_eq!(
            facts.labels,
            labels(&[
                ("karpenter.sh/capacity-type", "on-demand"),
                ("karpenter.sh/nodepool", "general"),
                ("kubernetes.io/arch", "amd64"),
                ("kubernetes.io/os", "linux"),
                ("team", "a"),
                ("topology.kubernetes.io/zone", "zone-a"),
            ])
        );
        assert!(facts.takes_new_pods());
        let target = facts.target();
        assert_eq!(target["nodes"], 0);
        assert_eq!(target["resources"]["cpu"], 7900);
        assert_eq!(
            target["node_shapes"][2],
            json!({"nodes": 0, "allocatable": {"cpu": 7900, "memory": 32 * GIB - 10 * MIB, "pods": 110}})
        );
        assert_eq!(
            target["launchable"][0],
            json!({"allocatable": {"cpu": 1900, "memory": 8 * GIB - 10 * MIB, "pods": 110}})
        );
        assert_eq!(target["labels"]["team"], "a");
    }

    #[test]
    fn limits_reached_leave_nothing_to_launch() {
        let pool = general(
            json!([]),
            json!({"cpu": "16", "memory": "1Ti"}),
            json!({"cpu": "16", "memory": "64Gi"}),
        );
        let launch = pool.launch(&catalog()).unwrap();
        assert!(launch.types.is_empty() && launch.shapes.is_empty());
        assert_eq!(
            launch.reason.as_deref(),
            Some("limits reached: cpu 16 of 16 used")
        );
        let facts = pool.facts(&launch, &[], NODEPOOL_LABEL);
        assert!(facts.shapes.is_empty() && facts.largest.is_empty() && facts.launchable.is_empty());
        assert!(!facts.takes_new_pods());
        // What any node it launched would carry.
        assert_eq!(
            facts.labels,
            labels(&[("karpenter.sh/nodepool", "general"), ("team", "a")])
        );
        assert_eq!(facts.taints, [dedicated()]);
        // A pool that launches nothing has no `launchable` in its target.
        assert!(facts.target().get("launchable").is_none());

        let counted = general(
            json!([]),
            json!({"nodes": "3"}),
            json!({"nodes": "3", "cpu": "24"}),
        );
        let launch = counted.launch(&catalog()).unwrap();
        assert_eq!(
            launch.reason.as_deref(),
            Some("limits reached: nodes 3 of 3 used")
        );
        // Past the limit (limits lowered after the nodes were launched).
        let over = general(
            json!([]),
            json!({"memory": "32Gi"}),
            json!({"memory": "48Gi"}),
        );
        let launch = over.launch(&catalog()).unwrap();
        assert_eq!(
            launch.reason.as_deref(),
            Some("limits reached: memory 48Gi of 32Gi used")
        );
    }

    #[test]
    fn a_type_larger_than_what_the_limits_leave_is_left_out() {
        let arch = json!([{"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]}]);
        // 6 cpu left: small and medium fit, large and gpu (8 cpu) do not.
        let pool = general(arch.clone(), json!({"cpu": "16"}), json!({"cpu": "10"}));
        let launch = pool.launch(&catalog()).unwrap();
        assert_eq!(names(&launch), ["small", "medium"]);
        assert_eq!(
            pool.facts(&launch, &[], NODEPOOL_LABEL).largest,
            allocatable(4, 16, &[])
        );
        // A type fits exactly what is left.
        let pool = general(arch.clone(), json!({"cpu": "16"}), json!({"cpu": "8"}));
        assert_eq!(
            names(&pool.launch(&catalog()).unwrap()),
            ["small", "medium", "large", "gpu"]
        );
        // Too little for any.
        let pool = general(
            arch.clone(),
            json!({"cpu": "16", "memory": "1Ti"}),
            json!({"cpu": "15500m"}),
        );
        let launch = pool.launch(&catalog()).unwrap();
        assert_eq!(
            launch.reason.as_deref(),
            Some("the limits leave room for none of its instance types: cpu 15500m of 16 used")
        );
        // A limit on the GPUs leaves out only the types that have one.
        let pool = general(
            arch,
            json!({"nvidia.com/gpu": "2"}),
            json!({"nvidia.com/gpu": "2"}),
        );
        assert_eq!(
            names(&pool.launch(&catalog()).unwrap()),
            ["small", "medium", "large"]
        );
        // Without limits, everything the requirements allow.
        let pool = general(json!([]), json!(null), json!({"cpu": "1000"}));
        assert_eq!(
            names(&pool.launch(&catalog()).unwrap()),
            ["small", "medium", "large", "arm", "gpu"]
        );
    }

    #[test]
    fn requirements_that_no_type_meets_say_so() {
        let pool = general(
            json!([{"key": "kubernetes.io/arch", "operator": "In", "values": ["s390x"]}]),
            json!(null),
            json!(null),
        );
        let launch = pool.launch(&catalog()).unwrap();
        assert!(launch.types.is_empty());
        assert_eq!(
            launch.reason.as_deref(),
            Some("no available offering of the 5 instance types in catalog test-catalog meets the requirements: kubernetes.io/arch In [s390x]")
        );
        // The only spot offering of large is unavailable.
        let pool = general(
            json!([
                {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["large"]},
                {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot"]},
            ]),
            json!(null),
            json!(null),
        );
        assert!(pool.launch(&catalog()).unwrap().types.is_empty());
        let empty = Catalog::from_json("[]", "empty.json").unwrap();
        assert_eq!(
            pool.launch(&empty).unwrap_err(),
            r#"NodePool "general": spec.template.spec.requirements[0] allows instance types that catalog empty.json does not list: "large""#
        );
        let anything = general(json!([]), json!(null), json!(null));
        assert_eq!(
            anything.launch(&empty).unwrap().reason.as_deref(),
            Some("catalog empty.json lists no instance types")
        );
    }

    #[test]
    fn custom_labels_choose_no_type_and_label_the_nodes() {
        // No instance type defines `workload` or `team`: they are labels the NodePool puts on
        // its nodes. A template label on a key the catalog defines still chooses.
        let pool = nodepool(
            "ml",
            json!({"template": {
                "metadata": {"labels": {"team": "ml", "kubernetes.io/arch": "arm64"}},
                "spec": {"requirements": [
                    {"key": "workload", "operator": "In", "values": ["training"]},
                    {"key": "tier", "operator": "Exists"},
                ]},
            }}),
            json!({}),
        );
        let launch = pool.launch(&catalog()).unwrap();
        assert_eq!(names(&launch), ["arm"]);
        let facts = pool.facts(&launch, &[], NODEPOOL_LABEL);
        assert_eq!(facts.labels["workload"], "training");
        assert_eq!(facts.labels["team"], "ml");
        assert!(!facts.labels.contains_key("tier"));
    }

    #[test]
    fn instance_types_not_in_the_catalog_are_an_error() {
        let pool = general(
            json!([
                {"key": "kubernetes.io/os", "operator": "In", "values": ["linux"]},
                {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["medium", "p5.48xlarge", "x"]},
            ]),
            json!(null),
            json!(null),
        );
        assert_eq!(
            pool.launch(&catalog()).unwrap_err(),
            r#"NodePool "general": spec.template.spec.requirements[1] allows instance types that catalog test-catalog does not list: "p5.48xlarge", "x""#
        );
        let by_label = nodepool(
            "pinned",
            json!({"template": {"metadata": {"labels": {"node.kubernetes.io/instance-type": "huge"}}}}),
            json!({}),
        );
        assert_eq!(
            by_label.launch(&catalog()).unwrap_err(),
            r#"NodePool "pinned": spec.template.metadata.labels["node.kubernetes.io/instance-type"] allows instance types that catalog test-catalog does not list: "huge""#
        );
        // Names the catalog lacks under NotIn exclude nothing and are no error.
        let excluding = general(
            json!([{"key": "node.kubernetes.io/instance-type", "operator": "NotIn", "values": ["p5.48xlarge"]}]),
            json!(null),
            json!(null),
        );
        assert_eq!(excluding.launch(&catalog()).unwrap().types.len(), 5);
    }

    #[test]
    fn nodepool_errors_name_the_field() {
        let requirements = |items: Value| json!({"template": {"spec": {"requirements": items}}});
        let arch = json!({"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]});
        let cases = [
            (
                json!({"spec": requirements(json!([arch, arch, {"key": "nvidia.com/gpu.present", "operator": "Maybe", "values": ["true"]}]))}),
                r#"NodePool "gpu": spec.template.spec.requirements[2].operator "Maybe" is not one of In, NotIn, Exists, DoesNotExist, Gt, Lt, Gte, Lte"#,
            ),
            (
                json!({"spec": requirements(json!([{"key": "a"}]))}),
                r#"NodePool "gpu": spec.template.spec.requirements[0].operator: must be one of In, NotIn, Exists, DoesNotExist, Gt, Lt, Gte, Lte, got nothing"#,
            ),
            (
                json!({"spec": requirements(json!([{"operator": "In", "values": ["x"]}]))}),
                r#"NodePool "gpu": spec.template.spec.requirements[0].key: must be a non-empty string, got nothing"#,
            ),
            (
                json!({"spec": requirements(json!([{"key": "cpus", "operator": "Gt", "values": ["four"]}]))}),
                r#"NodePool "gpu": spec.template.spec.requirements[0].values: operator Gt needs exactly one value, a non-negative integer, got ["four"]"#,
            ),
            (
                json!({"spec": requirements(json!([{"key": "cpus", "operator": "Lt", "values": ["1", "2"]}]))}),
                r#"NodePool "gpu": spec.template.spec.requirements[0].values: operator Lt needs exactly one value"#,
            ),
            (
                json!({"spec": requirements(json!([{"key": "a", "operator": "In", "values": []}]))}),
                r#"NodePool "gpu": spec.template.spec.requirements[0].values: operator In needs at least one value"#,
            ),
            (
                json!({"spec": requirements(json!([{"key": "a", "operator": "Exists", "values": ["x"]}]))}),
                r#"NodePool "gpu": spec.template.spec.requirements[0].values: must be empty for operator Exists"#,
            ),
            (
                json!({"spec": requirements(json!([{"key": "a", "operator": "In", "values": [1]}]))}),
                r#"NodePool "gpu": spec.template.spec.requirements[0].values[0]: must be a string, got 1"#,
            ),
            (
                json!({"spec": requirements(json!({"key": "a"}))}),
                r#"NodePool "gpu": spec.template.spec.requirements: must be a list, got an object"#,
            ),
            (
                json!({"spec": {"limits": {"cpu": "lots"}}}),
                r#"NodePool "gpu": spec.limits["cpu"]: "lots" is not a valid quantity: expected a number"#,
            ),
            (
                json!({"spec": {"limits": [1]}}),
                r#"NodePool "gpu": spec.limits: must be an object, got a list"#,
            ),
            (
                json!({"status": {"resources": {"memory": "-1Gi"}}}),
                r#"NodePool "gpu": status.resources["memory"]: "-1Gi" is not a valid quantity: must not be negative"#,
            ),
            (
                json!({"spec": {"template": {"metadata": {"labels": {"team": 7}}}}}),
                r#"NodePool "gpu": spec.template.metadata.labels["team"]: must be a string, got 7"#,
            ),
            (
                json!({"spec": {"template": {"spec": {"taints": [{"key": "a", "effect": false}]}}}}),
                r#"NodePool "gpu": spec.template.spec.taints[0].effect: must be a string, got false"#,
            ),
            (
                json!({"spec": {"template": []}}),
                r#"NodePool "gpu": spec.template: must be an object, got a list"#,
            ),
        ];
        for (mut object, want) in cases {
            object["metadata"] = json!({"name": "gpu"});
            let err = NodePool::from_object(&object).unwrap_err();
            assert!(err.starts_with(want), "{err}\n  want: {want}");
        }
        assert_eq!(
            NodePool::from_object(&json!({"metadata": {}, "spec": {}})).unwrap_err(),
            "a NodePool has no metadata.name"
        );
        // Unknown fields and minValues are ignored; absent fields are empty.
        let bare = NodePool::from_object(
            &json!({"metadata": {"name": "bare"}, "spec": {"weight": 10, "template": {"spec": {
                "requirements": [{"key": "a", "operator": "Exists", "minValues": 2}],
                "expireAfter": "720h",
            }}}}),
        )
        .unwrap();
        assert_eq!(bare.requirements.len(), 1);
        assert!(
            bare.labels.is_empty()
                && bare.taints.is_empty()
                && bare.limits.is_empty()
                && bare.used.is_empty()
        );
    }

    #[test]
    fn catalog_errors_name_the_entry_and_field() {
        let entry = |patch: Value| {
            let mut e = json!({"name": "b", "architecture": "amd64", "operatingSystems": ["linux"],
                               "resources": {"cpu": "1"}, "offerings": [offering("spot", "z", true)]});
            for (k, v) in patch.as_object().unwrap() {
                e[k] = v.clone();
            }
            json!([{"name": "a", "architecture": "amd64", "offerings": []}, e]).to_string()
        };
        let cases = [
            ("[".to_string(), "c.json: not valid JSON: "),
            (
                "{}".to_string(),
                "c.json: must be a JSON array of instance types, got an object",
            ),
            (
                "[3]".to_string(),
                "c.json: instance type [0]: must be an object, got 3",
            ),
            (
                entry(json!({"name": ""})),
                r#"c.json: instance type [1]: name: must be a non-empty string, got """#,
            ),
            (
                entry(json!({"name": "a"})),
                r#"c.json: instance type [1] "a": name: already used by instance type [0]"#,
            ),
            (
                entry(json!({"architecture": null})),
                r#"c.json: instance type [1] "b": architecture: must be a non-empty string, got null"#,
            ),
            (
                entry(json!({"operatingSystems": "linux"})),
                r#"c.json: instance type [1] "b": operatingSystems: must be a list, got "linux""#,
            ),
            (
                entry(json!({"resources": {"memory": "lots"}})),
                r#"c.json: instance type [1] "b": resources["memory"]: "lots" is not a valid quantity: expected a number"#,
            ),
            (
                entry(json!({"offerings": null})),
                r#"c.json: instance type [1] "b": offerings: must be a list, got null"#,
            ),
            (
                entry(
                    json!({"offerings": [{"requirements": [{"key": "topology.kubernetes.io/zone", "operator": "NotIn", "values": ["z"]}]}]}),
                ),
                r#"c.json: instance type [1] "b": offerings[0].requirements[0]: an offering's requirement must be In with exactly one value (the label its nodes get), got topology.kubernetes.io/zone NotIn [z]"#,
            ),
            (
                entry(
                    json!({"offerings": [{"requirements": [{"key": "z", "operator": "Near", "values": ["z"]}]}]}),
                ),
                r#"c.json: instance type [1] "b": offerings[0].requirements[0].operator "Near" is not one of"#,
            ),
            (
                entry(json!({"offerings": [{"requirements": [], "price": "cheap"}]})),
                r#"c.json: instance type [1] "b": offerings[0].price: must be a number, got "cheap""#,
            ),
            (
                entry(json!({"offerings": [{"requirements": [], "available": "yes"}]})),
                r#"c.json: instance type [1] "b": offerings[0].available: must be true or false, got "yes""#,
            ),
        ];
        for (text, want) in cases {
            let err = Catalog::from_json(&text, "c.json").unwrap_err();
            assert!(err.starts_with(want), "{err}\n  want: {want}");
        }
    }

    #[test]
    fn the_kwok_providers_own_format() {
        // As kwok/cloudprovider/instance_types.json writes it: offering fields capitalized,
        // every offering a spot or on-demand one in one zone.
        let text = r#"[
          {"name": "c-1x-amd64-linux",
           "offerings": [
             {"Price": 0.019, "Available": true, "Requirements": [
               {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot"]},
               {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["test-zone-a"]}]}],
           "architecture": "amd64", "operatingSystems": ["linux"],
           "resources": {"cpu": "1", "ephemeral-storage": "20Gi", "memory": "4Gi", "pods": "110"}},
          {"name": "c-4x-amd64-linux",
           "offerings": [
             {"Price": 0.076, "Available": true, "Requirements": [
               {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot"]},
               {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["test-zone-b"]}]},
             {"Price": 0.108, "Available": false, "Requirements": [
               {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
               {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["test-zone-b"]}]}],
           "architecture": "amd64", "operatingSystems": ["linux"],
           "resources": {"cpu": "4", "ephemeral-storage": "20Gi", "memory": "16Gi"}},
          {"name": "m5.xlarge", "offerings": [{"Requirements": []}],
           "architecture": "arm64", "operatingSystems": ["linux", "windows"],
           "resources": {"cpu": 4, "memory": "16Gi"}}
        ]"#;
        let catalog = Catalog::from_json(text, "instance_types.json").unwrap();
        let c4 = &catalog.instance_types[1];
        assert_eq!(
            c4.labels,
            labels(&[
                ("karpenter.kwok.sh/instance-cpu", "4"),
                ("karpenter.kwok.sh/instance-family", "c"),
                ("karpenter.kwok.sh/instance-memory", "16Gi"),
                ("karpenter.kwok.sh/instance-size", "4"),
                ("kubernetes.io/arch", "amd64"),
                ("node.kubernetes.io/instance-type", "c-4x-amd64-linux"),
            ])
        );
        // `pods` defaults to 110.
        assert_eq!(c4.capacity["pods"], 110);
        assert_eq!(c4.offerings[0].price, Some(0.076));
        assert!(!c4.offerings[1].available);
        let m5 = &catalog.instance_types[2];
        assert_eq!(m5.labels["karpenter.kwok.sh/instance-size"], "xlarge");
        assert_eq!(m5.labels["karpenter.kwok.sh/instance-family"], "m5");
        assert_eq!(m5.labels["karpenter.kwok.sh/instance-cpu"], "4");

        let pool = nodepool(
            "default",
            json!({"template": {"spec": {"requirements": [
                {"key": "karpenter.kwok.sh/instance-family", "operator": "In", "values": ["c"]},
                {"key": "karpenter.kwok.sh/instance-cpu", "operator": "Gt", "values": ["1"]},
            ]}}}),
            json!({}),
        );
        let launch = pool.launch(&catalog).unwrap();
        assert_eq!(names(&launch), ["c-4x-amd64-linux"]);
        // Only the available (spot) offering.
        assert_eq!(launch.types[0].labels.len(), 1);
        assert_eq!(
            launch.types[0].labels[0]["karpenter.sh/capacity-type"],
            "spot"
        );
        assert_eq!(
            launch.shapes,
            [res(&[
                ("cpu", 3900),
                ("ephemeral-storage", 20 * GIB),
                ("memory", 16 * GIB - 10 * MIB),
                ("pods", 110),
            ])]
        );
        // A type with two operating systems gives a node of each.
        let windows = nodepool(
            "any",
            json!({"template": {"spec": {"requirements": [
                {"key": "kubernetes.io/arch", "operator": "In", "values": ["arm64"]},
            ]}}}),
            json!({}),
        );
        let launch = windows.launch(&catalog).unwrap();
        let systems: Vec<&str> = launch.types[0]
            .labels
            .iter()
            .map(|l| l["kubernetes.io/os"].as_str())
            .collect();
        assert_eq!(systems, ["linux", "windows"]);
        let facts = windows.facts(&launch, &[], NODEPOOL_LABEL);
        assert!(!facts.labels.contains_key("kubernetes.io/os"));
        assert_eq!(facts.labels["kubernetes.io/arch"], "arm64");
    }

    /// A Node of `pool` with the labels of a `medium` on-demand node in zone-a.
    fn node(
        name: &str,
        pool_label: &str,
        pool: &str,
        allocatable: Value,
        ready: bool,
        taints: Value,
    ) -> NodeFacts {
        NodeFacts::from_node(&json!({
            "metadata": {"name": name, "labels": {
                pool_label: pool, "team": "a", "kubernetes.io/arch": "amd64", "kubernetes.io/os": "linux",
                "karpenter.sh/capacity-type": "on-demand", "topology.kubernetes.io/zone": "zone-a",
                "node.kubernetes.io/instance-type": "medium", "kubernetes.io/hostname": name,
            }},
            "spec": {"taints": taints},
            "status": {
                "allocatable": allocatable,
                "conditions": [{"type": "Ready", "status": if ready { "True" } else { "False" }}],
            },
        }))
        .unwrap()
    }

    #[test]
    fn existing_nodes_and_launchable_shapes_merge() {
        let medium = json!({"cpu": "3900m", "memory": "16374Mi", "pods": "110"});
        let taint = json!({"key": "dedicated", "value": "general", "effect": "NoSchedule"});
        let not_ready = json!({"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"});
        let nodes = [
            node(
                "general-1",
                NODEPOOL_LABEL,
                "general",
                medium.clone(),
                true,
                json!([taint]),
            ),
            node(
                "general-2",
                NODEPOOL_LABEL,
                "general",
                medium.clone(),
                false,
                json!([taint, not_ready]),
            ),
            // An instance type the catalog no longer lists.
            node(
                "general-3",
                NODEPOOL_LABEL,
                "general",
                json!({"cpu": "31900m", "memory": "64Gi", "pods": "110"}),
                true,
                json!([taint]),
            ),
            node(
                "other-1",
                NODEPOOL_LABEL,
                "other",
                json!({"cpu": "64"}),
                true,
                json!([]),
            ),
        ];
        let pool = general(
            json!([
                {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["small", "medium"]},
                {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
            ]),
            json!({"cpu": "100"}),
            json!({"cpu": "40"}),
        );
        let launch = pool.launch(&catalog()).unwrap();
        assert_eq!(names(&launch), ["small", "medium"]);
        let facts = pool.facts(&launch, &nodes, NODEPOOL_LABEL);
        assert_eq!((facts.nodes, facts.ready_nodes), (3, 2));
        let medium = allocatable(4, 16, &[]);
        let small = allocatable(2, 8, &[]);
        let xl = res(&[("cpu", 31900), ("memory", 64 * GIB), ("pods", 110)]);
        // The nodes' shapes with their counts; a launchable shape no node has with 0.
        assert_eq!(
            facts.shapes,
            [(2, medium.clone()), (1, xl.clone()), (0, small.clone())]
        );
        assert_eq!(facts.launchable, [small, medium]);
        assert_eq!(facts.largest, xl);
        // Shared by the existing nodes and every node it can launch: not the instance type,
        // nor the hostname.
        assert_eq!(
            facts.labels,
            labels(&[
                ("karpenter.sh/capacity-type", "on-demand"),
                ("karpenter.sh/nodepool", "general"),
                ("kubernetes.io/arch", "amd64"),
                ("kubernetes.io/os", "linux"),
                ("team", "a"),
                ("topology.kubernetes.io/zone", "zone-a"),
            ])
        );
        assert_eq!(facts.taints, [dedicated()]);
        let target = facts.target();
        assert_eq!(target["node_shapes"][0]["nodes"], 2);
        assert_eq!(target["node_shapes"][2]["nodes"], 0);
        assert_eq!(target["launchable"].as_array().map(Vec::len), Some(2));

        // The same nodes found by the config's own pool label.
        let labelled: Vec<NodeFacts> = [
            node(
                "g-1",
                "agentpool",
                "general",
                json!({"cpu": "3900m"}),
                true,
                json!([]),
            ),
            node(
                "g-2",
                "agentpool",
                "elsewhere",
                json!({"cpu": "3900m"}),
                true,
                json!([]),
            ),
        ]
        .into();
        let facts = pool.facts(&launch, &labelled, "agentpool");
        assert_eq!(facts.nodes, 1);
        // Its node has no taint, so the pool has none every node carries.
        assert!(facts.taints.is_empty());

        // With nothing launchable (limits reached), the pool is its nodes, as
        // PoolFacts::gather makes it.
        let full = general(json!([]), json!({"cpu": "40"}), json!({"cpu": "40"}));
        let launch = full.launch(&catalog()).unwrap();
        let facts = full.facts(&launch, &nodes, NODEPOOL_LABEL);
        let gathered = PoolFacts::gather(&nodes, NODEPOOL_LABEL);
        assert_eq!(Some(&facts), gathered.iter().find(|p| p.name == "general"));
        assert!(facts.takes_new_pods());
    }

    #[test]
    fn the_shipped_placement_policies_choose_a_nodepool_without_nodes() {
        use crate::config::Config;
        use crate::placement_policy::{choose, PlacementSet};
        use crate::policy::template::from_yaml;

        let templates = [
            (
                "fitsresources",
                include_str!("../../../policies/placement/fitsresources.yaml"),
            ),
            (
                "gpuonly",
                include_str!("../../../policies/placement/gpuonly.yaml"),
            ),
        ]
        .map(|(name, text)| {
            from_yaml(text, format!("policies/placement/{name}.yaml").into()).unwrap()
        });
        let policies = PlacementSet::compile(&templates).unwrap();
        let config = Config::parse(
            "placement:\n  chooseValue: auto\n  pools: [general, burst, gpu]\n  preference: [general, burst, gpu]\n",
            "t",
        )
        .unwrap();
        // general: three 4-cpu nodes, gathered from Nodes. burst and gpu: NodePools without
        // nodes; burst can launch up to large (8 cpu), gpu the GPU type.
        let general_nodes: Vec<NodeFacts> = (0..3)
            .map(|i| {
                NodeFacts::from_node(&json!({
                    "metadata": {"name": format!("general-{i}"), "labels": {"agentpool": "general"}},
                    "status": {"allocatable": {"cpu": "3860m", "memory": "16Gi", "pods": "110"},
                               "conditions": [{"type": "Ready", "status": "True"}]},
                }))
                .unwrap()
            })
            .collect();
        let mut pools = PoolFacts::gather(&general_nodes, "agentpool");
        let burst = nodepool(
            "burst",
            json!({"template": {"spec": {"requirements": [
                {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["small", "medium", "large"]},
            ]}}}),
            json!({}),
        );
        let gpu = nodepool(
            "gpu",
            json!({"template": {"spec": {"requirements": [
                {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["gpu"]},
            ]}}}),
            json!({}),
        );
        for pool in [&burst, &gpu] {
            let launch = pool.launch(&catalog()).unwrap();
            pools.push(pool.facts(&launch, &general_nodes, "agentpool"));
        }
        let pod = |requests: Value| {
            json!({"metadata": {"name": "web", "namespace": "team-a"},
                   "spec": {"containers": [{"name": "app", "resources": {"requests": requests}}]}})
        };
        let cases = [
            ("a small pod: the preferred pool", pod(json!({"cpu": "1"})), Ok("general")),
            ("a pod no node holds: a NodePool that can launch one", pod(json!({"cpu": "6", "memory": "20Gi"})), Ok("burst")),
            ("a GPU pod: the GPU NodePool", pod(json!({"cpu": "2", "nvidia.com/gpu": "1"})), Ok("gpu")),
            (
                "a pod nothing can hold",
                pod(json!({"cpu": "12"})),
                Err(vec!["fitsresources: no pool has or can launch a node with room for the pod's requests (cpu 12000m)".to_string()]),
            ),
        ];
        for (name, pod, want) in cases {
            let got = choose(&pools, &pod, &policies, &config, None);
            assert_eq!(got, want.map(str::to_string), "{name}");
        }
        // A NodePool whose limits are reached holds nothing, as a pool without nodes: only the
        // GPU NodePool holds the pod, and it is kept for GPU pods.
        let full = nodepool(
            "burst",
            json!({"template": {"spec": {}}, "limits": {"cpu": "8"}}),
            json!({"resources": {"cpu": "8"}}),
        );
        let launch = full.launch(&catalog()).unwrap();
        pools[1] = full.facts(&launch, &general_nodes, "agentpool");
        let got = choose(&pools, &pod(json!({"cpu": "6"})), &policies, &config, None);
        assert_eq!(
            got,
            Err(vec![
                "no pool is accepted by every placement policy".to_string(),
                "fitsresources: accepts only gpu".to_string(),
                "gpuonly: accepts only burst, general".to_string(),
            ])
        );
    }
}
