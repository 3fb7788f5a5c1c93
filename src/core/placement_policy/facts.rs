//! What placement policies reason about, as plain values: each pool's facts gathered from its
//! Node objects, and a pod's resource requirements. Amounts are integers (see
//! [`super::quantity`]): cpu in millicores, memory and storage in bytes, the rest in units.

use std::collections::BTreeMap;

use serde_json::{json, Map, Value};

use super::quantity;
use crate::labels::Labels;

/// Amounts by resource name (`cpu`, `memory`, `ephemeral-storage`, `pods`, `nvidia.com/gpu`,
/// …).
pub(crate) type Resources = BTreeMap<String, i64>;

/// A node taint (`value` empty when the taint has none).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Taint {
    pub key: String,
    pub value: String,
    pub effect: String,
}

/// The parts of one Node that placement needs. A node cache keeps these, not whole Nodes.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeFacts {
    pub name: String,
    pub labels: Labels,
    /// `status.allocatable` (empty until the kubelet reports it).
    pub allocatable: Resources,
    /// The `Ready` condition is `True` and the node is not cordoned (`spec.unschedulable`):
    /// it takes new pods.
    pub ready: bool,
    pub taints: Vec<Taint>,
}

/// What one pool offers: gathered from the nodes whose pool label (the config's
/// `nodeSelectorKey`) names it.
#[derive(Debug, Clone, PartialEq)]
pub struct PoolFacts {
    pub name: String,
    /// The labels every node of the pool carries with the same value.
    pub labels: Labels,
    pub nodes: usize,
    pub ready_nodes: usize,
    /// Per resource, the largest allocatable amount of a single node. In a pool whose nodes
    /// differ, two maxima may come from different nodes: [`PoolFacts::shapes`] says which
    /// combinations exist.
    pub largest: Resources,
    /// The distinct allocatable combinations of the pool's nodes, with how many nodes have
    /// each, largest count first (then by amounts). A uniform pool has one.
    pub shapes: Vec<(usize, Resources)>,
    /// The taints every node of the pool carries.
    pub taints: Vec<Taint>,
    /// For a pool that launches nodes on demand (a Karpenter NodePool, see
    /// [`super::nodepool`]): the distinct allocatable combinations of the nodes it can launch
    /// now. Each is also in [`PoolFacts::shapes`] (with 0 nodes when no node has it yet) and
    /// counted in [`PoolFacts::largest`]. Empty for a pool of existing nodes only.
    pub launchable: Vec<Resources>,
}

impl NodeFacts {
    /// Reads a Node object (as the API server or `kubectl get nodes -o json` gives it). Errors
    /// name the node and the field.
    pub fn from_node(node: &Value) -> Result<NodeFacts, String> {
        let Some(name) = node
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .filter(|n| !n.is_empty())
        else {
            return Err("a Node has no metadata.name".to_string());
        };
        let at = |field: &str| format!("node {name:?}: {field}");
        let mut labels = Labels::new();
        match node.pointer("/metadata/labels") {
            None | Some(Value::Null) => {}
            Some(Value::Object(map)) => {
                for (k, v) in map {
                    let Some(v) = v.as_str() else {
                        return Err(format!(
                            "{}: must be a string, got {v}",
                            at(&format!("metadata.labels[{k:?}]"))
                        ));
                    };
                    labels.insert(k.clone(), v.to_string());
                }
            }
            Some(other) => {
                return Err(format!(
                    "{}: must be an object, got {other}",
                    at("metadata.labels")
                ))
            }
        }
        let allocatable = resources(node.pointer("/status/allocatable"))
            .map_err(|(field, e)| format!("{}: {e}", at(&format!("status.allocatable{field}"))))?;
        let ready = node
            .pointer("/status/conditions")
            .and_then(Value::as_array)
            .is_some_and(|conditions| {
                conditions
                    .iter()
                    .any(|c| c["type"] == "Ready" && c["status"] == "True")
            })
            && node.pointer("/spec/unschedulable") != Some(&Value::Bool(true));
        let mut taints = Vec::new();
        if let Some(list) = node.pointer("/spec/taints").filter(|t| !t.is_null()) {
            let Some(list) = list.as_array() else {
                return Err(format!("{}: must be a list, got {list}", at("spec.taints")));
            };
            for (i, taint) in list.iter().enumerate() {
                let text = |field: &str| -> Result<String, String> {
                    match taint.get(field) {
                        None | Some(Value::Null) => Ok(String::new()),
                        Some(Value::String(s)) => Ok(s.clone()),
                        Some(other) => Err(format!(
                            "{}: must be a string, got {other}",
                            at(&format!("spec.taints[{i}].{field}"))
                        )),
                    }
                };
                taints.push(Taint {
                    key: text("key")?,
                    value: text("value")?,
                    effect: text("effect")?,
                });
            }
        }
        taints.sort();
        taints.dedup();
        Ok(NodeFacts {
            name: name.to_string(),
            labels,
            allocatable,
            ready,
            taints,
        })
    }
}

impl PoolFacts {
    /// The pools of `nodes`: one per non-empty value of the node label `pool_label`, sorted by
    /// name. Nodes without the label belong to no pool.
    pub fn gather(nodes: &[NodeFacts], pool_label: &str) -> Vec<PoolFacts> {
        let mut members: BTreeMap<&str, Vec<&NodeFacts>> = BTreeMap::new();
        for node in nodes {
            if let Some(pool) = node.labels.get(pool_label).filter(|p| !p.is_empty()) {
                members.entry(pool).or_default().push(node);
            }
        }
        members
            .into_iter()
            .map(|(name, nodes)| PoolFacts::of(name, &nodes))
            .collect()
    }

    /// The facts of one pool from its (non-empty) `nodes`.
    fn of(name: &str, nodes: &[&NodeFacts]) -> PoolFacts {
        let first = nodes[0];
        let mut labels = first.labels.clone();
        let mut taints = first.taints.clone();
        let mut largest = Resources::new();
        let mut shapes: Vec<(usize, Resources)> = Vec::new();
        for node in nodes {
            labels.retain(|k, v| node.labels.get(k) == Some(v));
            taints.retain(|t| node.taints.contains(t));
            for (resource, &amount) in &node.allocatable {
                let entry = largest.entry(resource.clone()).or_insert(amount);
                *entry = (*entry).max(amount);
            }
            match shapes.iter_mut().find(|(_, s)| *s == node.allocatable) {
                Some((count, _)) => *count += 1,
                None => shapes.push((1, node.allocatable.clone())),
            }
        }
        shapes.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
        PoolFacts {
            name: name.to_string(),
            labels,
            nodes: nodes.len(),
            ready_nodes: nodes.iter().filter(|n| n.ready).count(),
            largest,
            shapes,
            taints,
            launchable: Vec::new(),
        }
    }

    /// The pool as one of StackL's `infrastructure_targets`: `name`, `labels` (also under
    /// StackL's name `params`, so templates that match a target's params match labels),
    /// `nodes`, `ready_nodes`, `resources` (the largest allocatable per resource),
    /// `node_shapes` (`[{"nodes": n, "allocatable": {...}}]`) and `taints`; for a pool that
    /// can launch nodes, also `launchable` (`[{"allocatable": {...}}]`, the shapes it can
    /// launch, which `node_shapes` lists too, with `"nodes": 0` when no node has one yet).
    pub fn target(&self) -> Value {
        let labels = Value::Object(
            self.labels
                .iter()
                .map(|(k, v)| (k.clone(), Value::from(v.as_str())))
                .collect(),
        );
        let mut target = json!({
            "name": self.name,
            "labels": labels,
            "params": labels,
            "nodes": self.nodes,
            "ready_nodes": self.ready_nodes,
            "resources": amounts(&self.largest),
            "node_shapes": self.shapes.iter().map(|(count, allocatable)| json!({
                "nodes": count,
                "allocatable": amounts(allocatable),
            })).collect::<Vec<_>>(),
            "taints": self.taints.iter().map(|t| json!({
                "key": t.key, "value": t.value, "effect": t.effect,
            })).collect::<Vec<_>>(),
        });
        if !self.launchable.is_empty() {
            target["launchable"] = self
                .launchable
                .iter()
                .map(|allocatable| json!({"allocatable": amounts(allocatable)}))
                .collect();
        }
        target
    }
}

fn amounts(resources: &Resources) -> Value {
    Value::Object(
        resources
            .iter()
            .map(|(k, &v)| (k.clone(), Value::from(v)))
            .collect(),
    )
}

/// Reads a map of quantities (absent or null: empty). The error names the key (`["cpu"]`).
fn resources(value: Option<&Value>) -> Result<Resources, (String, String)> {
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
        Some(other) => Err((String::new(), format!("must be an object, got {other}"))),
    }
}

/// One container's resources. `requests` holds what the scheduler counts: a resource with a
/// limit but no request is requested at its limit (the API server defaults it so).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ContainerResources {
    pub name: String,
    /// `container`, `initContainer`, or `sidecar` (an init container with `restartPolicy:
    /// Always`, which runs beside the containers).
    pub kind: &'static str,
    pub requests: Resources,
    pub limits: Resources,
}

/// What a pod spec asks of a node.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct PodRequirements {
    /// The amounts the scheduler reserves on a node for the pod: the containers and sidecars
    /// together, or the largest init container (with the sidecars started before it) if that
    /// is more, per resource; pod-level `resources` replace that for the resources they name;
    /// plus `overhead`. Resources requested at 0 are left out.
    pub requests: Resources,
    pub containers: Vec<ContainerResources>,
}

impl PodRequirements {
    /// Reads the pod spec at `spec` (`at` names it in errors: `spec`,
    /// `spec.template.spec`). Missing lists are empty; their shape is checked by the image
    /// reading that runs before policies.
    pub fn of(spec: Option<&Value>, at: &str) -> Result<PodRequirements, String> {
        let empty = Value::Null;
        let spec = spec.unwrap_or(&empty);
        let mut containers = Vec::new();
        for (list, default_kind) in [
            ("initContainers", "initContainer"),
            ("containers", "container"),
        ] {
            let items = match spec.get(list) {
                None | Some(Value::Null) => continue,
                Some(Value::Array(items)) => items,
                Some(other) => return Err(format!("{at}.{list}: must be a list, got {other}")),
            };
            for (i, container) in items.iter().enumerate() {
                let here = format!("{at}.{list}[{i}]");
                let name = container["name"]
                    .as_str()
                    .filter(|n| !n.is_empty())
                    .map_or_else(|| format!("{list}[{i}]"), str::to_string);
                let kind =
                    if default_kind == "initContainer" && container["restartPolicy"] == "Always" {
                        "sidecar"
                    } else {
                        default_kind
                    };
                let (requests, limits) = requests_and_limits(container.get("resources"), &here)?;
                containers.push(ContainerResources {
                    name,
                    kind,
                    requests,
                    limits,
                });
            }
        }
        let mut app = Resources::new(); // containers and sidecars
        let mut sidecars = Resources::new(); // sidecars started so far
        let mut init = Resources::new(); // the most any init phase needs
        for c in &containers {
            match c.kind {
                "container" => add(&mut app, &c.requests),
                "sidecar" => {
                    add(&mut app, &c.requests);
                    add(&mut sidecars, &c.requests);
                    max(&mut init, &sidecars);
                }
                _ => {
                    let mut phase = sidecars.clone();
                    add(&mut phase, &c.requests);
                    max(&mut init, &phase);
                }
            }
        }
        let mut requests = app;
        max(&mut requests, &init);
        let (pod_requests, _) = requests_and_limits(spec.get("resources"), at)?;
        requests.extend(pod_requests);
        let overhead = resources(spec.get("overhead"))
            .map_err(|(field, e)| format!("{at}.overhead{field}: {e}"))?;
        add(&mut requests, &overhead);
        requests.retain(|_, amount| *amount > 0);
        Ok(PodRequirements {
            requests,
            containers,
        })
    }

    /// The pod as StackL's one service: `resource_requirements` (the pod's
    /// [`PodRequirements::requests`]) and `containers` by name, each with `type`, `requests` and
    /// `limits`.
    pub fn service(&self) -> Value {
        let containers: Map<String, Value> = self
            .containers
            .iter()
            .map(|c| {
                (
                    c.name.clone(),
                    json!({"type": c.kind, "requests": amounts(&c.requests), "limits": amounts(&c.limits)}),
                )
            })
            .collect();
        json!({
            "resource_requirements": amounts(&self.requests),
            "containers": containers,
        })
    }
}

/// A `resources` block's requests (a limit standing in for a missing request) and limits.
fn requests_and_limits(block: Option<&Value>, at: &str) -> Result<(Resources, Resources), String> {
    let block = match block {
        None | Some(Value::Null) => return Ok((Resources::new(), Resources::new())),
        Some(block @ Value::Object(_)) => block,
        Some(other) => return Err(format!("{at}.resources: must be an object, got {other}")),
    };
    let read = |field: &str| {
        resources(block.get(field)).map_err(|(key, e)| format!("{at}.resources.{field}{key}: {e}"))
    };
    let limits = read("limits")?;
    let mut requests = read("requests")?;
    for (resource, &amount) in &limits {
        requests.entry(resource.clone()).or_insert(amount);
    }
    Ok((requests, limits))
}

fn add(total: &mut Resources, more: &Resources) {
    for (resource, &amount) in more {
        let entry = total.entry(resource.clone()).or_insert(0);
        *entry = entry.saturating_add(amount);
    }
}

fn max(total: &mut Resources, other: &Resources) {
    for (resource, &amount) in other {
        let entry = total.entry(resource.clone()).or_insert(amount);
        *entry = (*entry).max(amount);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(name: &str, labels: Value, allocatable: Value, ready: bool, taints: Value) -> Value {
        json!({
            "metadata": {"name": name, "labels": labels},
            "spec": {"taints": taints},
            "status": {
                "allocatable": allocatable,
                "conditions": [
                    {"type": "MemoryPressure", "status": "False"},
                    {"type": "Ready", "status": if ready { "True" } else { "Unknown" }},
                ],
            },
        })
    }

    fn res(pairs: &[(&str, i64)]) -> Resources {
        pairs.iter().map(|(k, v)| (k.to_string(), *v)).collect()
    }

    #[test]
    fn node_facts_from_a_node_object() {
        let n = NodeFacts::from_node(&node(
            "gpu-1",
            json!({"agentpool": "gpu", "zone": "a"}),
            json!({"cpu": "7820m", "memory": "28Gi", "nvidia.com/gpu": "1", "pods": "110"}),
            true,
            json!([{"key": "sku", "value": "gpu", "effect": "NoSchedule"}, {"key": "b", "effect": "NoExecute"}]),
        ))
        .unwrap();
        assert_eq!(n.name, "gpu-1");
        assert_eq!(n.labels["zone"], "a");
        assert_eq!(
            n.allocatable,
            res(&[
                ("cpu", 7820),
                ("memory", 28 << 30),
                ("nvidia.com/gpu", 1),
                ("pods", 110)
            ])
        );
        assert!(n.ready);
        assert_eq!(
            n.taints,
            [
                Taint {
                    key: "b".into(),
                    value: String::new(),
                    effect: "NoExecute".into()
                },
                Taint {
                    key: "sku".into(),
                    value: "gpu".into(),
                    effect: "NoSchedule".into()
                },
            ]
        );
        // A node that just registered: no status, no labels, no taints.
        let bare = NodeFacts::from_node(&json!({"metadata": {"name": "new"}})).unwrap();
        assert!(!bare.ready && bare.allocatable.is_empty() && bare.labels.is_empty());
    }

    #[test]
    fn node_errors_name_the_node_and_field() {
        let cases = [
            (json!({"metadata": {}}), "a Node has no metadata.name"),
            (
                node("n", json!({}), json!({"cpu": "lots"}), true, json!([])),
                r#"node "n": status.allocatable["cpu"]: "lots" is not a valid quantity"#,
            ),
            (
                node("n", json!({"a": 1}), json!({}), true, json!([])),
                r#"node "n": metadata.labels["a"]: must be a string"#,
            ),
            (
                node("n", json!({}), json!({}), true, json!({"key": "x"})),
                r#"node "n": spec.taints: must be a list"#,
            ),
            (
                node("n", json!({}), json!({}), true, json!([{"key": 1}])),
                r#"node "n": spec.taints[0].key: must be a string"#,
            ),
            (
                node("n", json!({}), json!([]), true, json!([])),
                r#"node "n": status.allocatable: must be an object"#,
            ),
        ];
        for (object, want) in cases {
            let err = NodeFacts::from_node(&object).unwrap_err();
            assert!(err.starts_with(want), "{err}\n  want: {want}");
        }
    }

    #[test]
    fn pools_gather_their_nodes() {
        let nodes: Vec<NodeFacts> = [
            node("a1", json!({"agentpool": "a", "zone": "1", "sku": "d4"}), json!({"cpu": "4", "memory": "16Gi"}), true,
                 json!([{"key": "dedicated", "value": "a", "effect": "NoSchedule"}])),
            node("a2", json!({"agentpool": "a", "zone": "2", "sku": "d4"}), json!({"cpu": "4", "memory": "16Gi"}), false,
                 json!([{"key": "dedicated", "value": "a", "effect": "NoSchedule"}, {"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"}])),
            node("a3", json!({"agentpool": "a", "zone": "1", "sku": "d8"}), json!({"cpu": "8", "memory": "8Gi"}), true,
                 json!([{"key": "dedicated", "value": "a", "effect": "NoSchedule"}])),
            node("b1", json!({"agentpool": "b"}), json!({"cpu": "2"}), true, json!(null)),
            node("none", json!({"other": "x"}), json!({"cpu": "64"}), true, json!([])),
            node("empty", json!({"agentpool": ""}), json!({"cpu": "64"}), true, json!([])),
        ]
        .iter()
        .map(|n| NodeFacts::from_node(n).unwrap())
        .collect();
        let pools = PoolFacts::gather(&nodes, "agentpool");
        let names: Vec<&str> = pools.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(names, ["a", "b"]);
        let a = &pools[0];
        assert_eq!(a.labels, Labels::from([("agentpool".into(), "a".into())]));
        assert_eq!((a.nodes, a.ready_nodes), (3, 2));
        // The largest cpu and the largest memory come from different nodes.
        assert_eq!(a.largest, res(&[("cpu", 8000), ("memory", 16 << 30)]));
        assert_eq!(
            a.shapes,
            [
                (2, res(&[("cpu", 4000), ("memory", 16 << 30)])),
                (1, res(&[("cpu", 8000), ("memory", 8 << 30)])),
            ]
        );
        assert_eq!(
            a.taints,
            [Taint {
                key: "dedicated".into(),
                value: "a".into(),
                effect: "NoSchedule".into()
            }]
        );
        assert_eq!(
            a.target(),
            json!({
                "name": "a",
                "labels": {"agentpool": "a"},
                "params": {"agentpool": "a"},
                "nodes": 3,
                "ready_nodes": 2,
                "resources": {"cpu": 8000, "memory": 17179869184i64},
                "node_shapes": [
                    {"nodes": 2, "allocatable": {"cpu": 4000, "memory": 17179869184i64}},
                    {"nodes": 1, "allocatable": {"cpu": 8000, "memory": 8589934592i64}},
                ],
                "taints": [{"key": "dedicated", "value": "a", "effect": "NoSchedule"}],
            })
        );
        assert!(pools[1].taints.is_empty());
        assert!(PoolFacts::gather(&nodes, "missing").is_empty());
    }

    #[test]
    fn pod_requirements_table() {
        // (case, pod spec, the pod's requests)
        let cases = [
            ("no containers", json!({}), res(&[])),
            (
                "containers add up; a limit stands in for a missing request",
                json!({"containers": [
                    {"name": "a", "resources": {"requests": {"cpu": "250m", "memory": "64Mi"}}},
                    {"name": "b", "resources": {"requests": {"cpu": "1"}, "limits": {"cpu": "2", "memory": "1Gi"}}},
                    {"name": "c"},
                ]}),
                res(&[("cpu", 1250), ("memory", (64 << 20) + (1 << 30))]),
            ),
            (
                "an init container larger than the containers sets the request",
                json!({
                    "initContainers": [{"name": "migrate", "resources": {"requests": {"cpu": "3", "memory": "1Mi"}}}],
                    "containers": [{"name": "app", "resources": {"requests": {"cpu": "1", "memory": "2Mi"}}}],
                }),
                res(&[("cpu", 3000), ("memory", 2 << 20)]),
            ),
            (
                "sidecars run beside the containers and under later init containers",
                json!({
                    "initContainers": [
                        {"name": "first", "resources": {"requests": {"cpu": "2"}}},
                        {"name": "proxy", "restartPolicy": "Always", "resources": {"requests": {"cpu": "500m"}}},
                        {"name": "second", "resources": {"requests": {"cpu": "2"}}},
                    ],
                    "containers": [{"name": "app", "resources": {"requests": {"cpu": "1"}}}],
                }),
                res(&[("cpu", 2500)]),
            ),
            (
                "extended resources and overhead",
                json!({
                    "containers": [{"name": "train", "resources": {"limits": {"nvidia.com/gpu": "2"}}}],
                    "overhead": {"cpu": "100m", "memory": "64Mi"},
                }),
                res(&[("cpu", 100), ("memory", 64 << 20), ("nvidia.com/gpu", 2)]),
            ),
            (
                "pod-level resources replace the sum for what they name",
                json!({
                    "resources": {"requests": {"cpu": "4"}},
                    "containers": [{"name": "a", "resources": {"requests": {"cpu": "1", "memory": "1Mi"}}}],
                }),
                res(&[("cpu", 4000), ("memory", 1 << 20)]),
            ),
            (
                "zero requests are left out",
                json!({"containers": [{"name": "a", "resources": {"requests": {"cpu": "0", "memory": "0"}}}]}),
                res(&[]),
            ),
        ];
        for (name, spec, want) in cases {
            let got = PodRequirements::of(Some(&spec), "spec").unwrap();
            assert_eq!(got.requests, want, "{name}");
        }
    }

    #[test]
    fn pod_requirements_as_a_service() {
        let spec = json!({
            "initContainers": [{"name": "proxy", "restartPolicy": "Always", "resources": {"requests": {"cpu": "100m"}}}],
            "containers": [{"resources": {"limits": {"memory": "1Gi"}}}],
        });
        let service = PodRequirements::of(Some(&spec), "spec").unwrap().service();
        assert_eq!(
            service,
            json!({
                "resource_requirements": {"cpu": 100, "memory": 1073741824},
                "containers": {
                    "proxy": {"type": "sidecar", "requests": {"cpu": 100}, "limits": {}},
                    "containers[0]": {"type": "container", "requests": {"memory": 1073741824}, "limits": {"memory": 1073741824}},
                },
            })
        );
    }

    #[test]
    fn pod_errors_name_the_field() {
        let cases = [
            (json!({"containers": {}}), "spec.containers: must be a list"),
            (
                json!({"containers": [{"resources": {"requests": {"cpu": "1 core"}}}]}),
                r#"spec.containers[0].resources.requests["cpu"]: "1 core" is not a valid quantity"#,
            ),
            (
                json!({"initContainers": [{"resources": []}]}),
                "spec.initContainers[0].resources: must be an object",
            ),
            (
                json!({"containers": [{"resources": {"limits": "1"}}]}),
                "spec.containers[0].resources.limits: must be an object",
            ),
            (
                json!({"overhead": {"cpu": "-1"}}),
                r#"spec.overhead["cpu"]: "-1" is not a valid quantity: must not be negative"#,
            ),
            (
                json!({"resources": {"requests": {"memory": "x"}}}),
                r#"spec.resources.requests["memory"]"#,
            ),
        ];
        for (spec, want) in cases {
            let err = PodRequirements::of(Some(&spec), "spec").unwrap_err();
            assert!(err.starts_with(want), "{err}\n  want: {want}");
        }
    }
}
