//! Choosing a pool for a pod with placement (SAT) policies: the policies' compilation and
//! evaluation ([`PlacementSet`], [`candidates`]), the pools' facts ([`facts`], [`quantity`]) and
//! the one entry point of the webhooks and the audit ([`select`]). Design: the architecture page
//! of the manual (docs/architecture.md, "Placement policies").

pub mod facts;
pub mod nodepool;
pub(crate) mod quantity;

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Result};
use regorus::{Engine, Value};

use crate::admission::PodSpecAt;
use crate::config::parameters::Parameters;
use crate::config::{Config, UnlabelledNamespaces};
use crate::labels::Labels;
use crate::node_selector::{self, pool_of, Placement};
use crate::policy::engine::{compile, compile_sorted, eval_within, TemplateKind};
use crate::policy::memo::{Memo, Weigh};
use crate::policy::template::Template;
pub(crate) use facts::PodRequirements;
pub use facts::{NodeFacts, PoolFacts};
pub use nodepool::{
    pools, Catalog, InstanceType, Launch, LaunchableType, NodePool, Offering, Operator, Requirement,
};

/// What a placement policy without settings gets as `input.parameters`, made once.
static NO_PARAMETERS: std::sync::LazyLock<Parameters> =
    std::sync::LazyLock::new(Parameters::default);

/// One loaded placement policy: a prepared engine, cloned for each evaluation.
#[derive(Clone)]
pub struct PlacementPolicy {
    pub name: String,
    pub inputs: Vec<String>,
    pub path: PathBuf,
    engine: Engine,
    rule: String,
    reads_review: bool,
    /// As a SIT policy's: may its results be remembered, and its identity in memo keys.
    memoizable: bool,
    id: u64,
}

/// What a placement policy said about a pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Solution {
    /// The pools it accepts, sorted.
    Fulfilled(Vec<String>),
    /// Why no pool is acceptable.
    Unfulfilled(String),
}

impl Weigh for Solution {
    fn weigh(&self) -> usize {
        match self {
            Solution::Fulfilled(pools) => pools.weigh(),
            Solution::Unfulfilled(msg) => msg.len(),
        }
    }
}

impl PlacementPolicy {
    /// Compiles a SAT template. Errors name the file and, for Rego errors, the line; a SIT
    /// template is refused with a message saying so.
    pub fn compile(template: &Template) -> Result<PlacementPolicy> {
        let compiled = compile(template, TemplateKind::Sat)?;
        Ok(PlacementPolicy {
            name: template.name.clone(),
            inputs: template.inputs.clone(),
            path: template.path.clone(),
            engine: compiled.engine,
            rule: compiled.rule,
            reads_review: compiled.reads_review,
            memoizable: compiled.memoizable,
            id: compiled.id,
        })
    }

    /// Evaluates `solutions` on `input` within `limit`.
    pub(crate) fn solve(&self, input: Value, limit: Duration) -> Result<Solution, String> {
        let value = eval_within(&self.engine, &self.rule, input, limit)?;
        solution(&value)
    }
}

/// Reads a `solutions` value. Undefined (no rule body held and no `else`) is unfulfilled.
fn solution(value: &Value) -> Result<Solution, String> {
    let shape = || {
        format!(
            "`solutions` must be {{\"fulfilled\": true, \"targets\": [...]}} or {{\"fulfilled\": false, \"msg\": \"...\"}}, got {value}"
        )
    };
    let object = match value {
        Value::Undefined => {
            return Ok(Solution::Unfulfilled(
                "no solution (`solutions` is undefined for this pod)".to_string(),
            ))
        }
        Value::Object(object) => object,
        _ => return Err(shape()),
    };
    match object.get(&Value::from("fulfilled")) {
        Some(Value::Bool(true)) => {
            let items: Vec<&Value> = match object.get(&Value::from("targets")) {
                Some(Value::Array(a)) => a.iter().collect(),
                Some(Value::Set(s)) => s.iter().collect(),
                _ => return Err(shape()),
            };
            let mut targets = items
                .into_iter()
                .map(|t| match t {
                    Value::String(s) => Ok(s.to_string()),
                    other => Err(format!(
                        "`solutions.targets` must hold pool names, got {other}"
                    )),
                })
                .collect::<Result<Vec<_>, _>>()?;
            targets.sort();
            targets.dedup();
            Ok(Solution::Fulfilled(targets))
        }
        Some(Value::Bool(false)) => Ok(Solution::Unfulfilled(
            match object.get(&Value::from("msg")) {
                Some(Value::String(s)) => s.to_string(),
                Some(other) => other.to_string(),
                None => "unfulfilled (no `msg`)".to_string(),
            },
        )),
        _ => Err(shape()),
    }
}

/// All loaded placement policies, sorted by name.
#[derive(Clone, Default)]
pub struct PlacementSet {
    policies: Vec<PlacementPolicy>,
    /// Remembered solutions ([`memo`]), set by [`PlacementSet::set_memo`]; none until then.
    memo: Memo<Solution>,
}

impl PlacementSet {
    /// Whether any placement policy may read `input.review`.
    pub(crate) fn reads_review(&self) -> bool {
        self.policies.iter().any(|p| p.reads_review)
    }

    /// Compiles the templates; two of the same name are an error.
    pub fn compile(templates: &[Template]) -> Result<PlacementSet> {
        let policies = compile_sorted(templates, PlacementPolicy::compile, |p| &p.name)?;
        if let Some(pair) = policies.windows(2).find(|w| w[0].name == w[1].name) {
            bail!(
                "{}: placement policy `{}` is already defined by {}",
                pair[1].path.display(),
                pair[1].name,
                pair[0].path.display()
            );
        }
        Ok(PlacementSet {
            policies,
            memo: Memo::default(),
        })
    }

    /// Gives the set a memo of `config`'s `evaluation.resultCacheMiB`.
    pub fn set_memo(&mut self, config: &Config) {
        self.memo = Memo::new(config.evaluation.result_cache_mib.saturating_mul(1 << 20));
    }

    /// The memo's hits and misses, and the bytes it holds.
    pub fn memo_stats(&self) -> ((u64, u64), u64) {
        (self.memo.stats(), self.memo.weight())
    }

    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.policies.iter().map(|p| p.name.as_str())
    }

    pub fn get(&self, name: &str) -> Option<&PlacementPolicy> {
        self.policies.iter().find(|p| p.name == name)
    }

    pub fn len(&self) -> usize {
        self.policies.len()
    }

    pub fn is_empty(&self) -> bool {
        self.policies.is_empty()
    }

    /// With a `placement` section: every policy it configures is loaded, and every loaded
    /// policy gets the inputs it declares. Errors name the path. Without one nothing is
    /// checked (nothing is chosen).
    pub(crate) fn check_config(&self, config: &Config) -> Result<()> {
        let Some(placement) = &config.placement else {
            return Ok(());
        };
        for name in placement.policies.keys() {
            if self.get(name).is_none() {
                let loaded: Vec<&str> = self.names().collect();
                bail!(
                    "at `placement.policies.{name}`: no placement policy named `{name}` is loaded (loaded: {})",
                    loaded.join(", ")
                );
            }
        }
        for policy in &self.policies {
            let name = &policy.name;
            let parameters = placement.policies.get(name).map(|s| &s.parameters);
            for input in &policy.inputs {
                match parameters {
                    Some(p) if p.contains_key(input) => {}
                    Some(_) => bail!(
                        "at `placement.policies.{name}.parameters`: missing `{input}`, an input the policy declares"
                    ),
                    None => bail!(
                        "at `placement.policies`: placement policy `{name}` declares the input `{input}`; give it at `placement.policies.{name}.parameters.{input}`"
                    ),
                }
            }
        }
        Ok(())
    }
}

/// Whether a pod in a namespace with `labels` gets its pool chosen by [`choose`]: the
/// namespace's pool label is `placement.chooseValue`, or it has no pool (no label, or an
/// empty one) and `placement.unlabelledNamespaces` is `choose`. Never without a `placement`
/// section.
pub fn chooses(labels: Option<&Labels>, config: &Config) -> bool {
    let Some(placement) = &config.placement else {
        return false;
    };
    match pool_of(labels, &config.namespace_label) {
        Some(pool) => placement.choose_value.as_deref() == Some(pool),
        None => placement.unlabelled_namespaces == UnlabelledNamespaces::Choose,
    }
}

/// The pools in the order they are tried: those `preference` lists, in its order, then the
/// rest by name. Preferred pools that have no facts (no nodes) are skipped.
pub(crate) fn pool_order<'a>(pools: &'a [PoolFacts], preference: &[String]) -> Vec<&'a str> {
    let mut names: Vec<&str> = pools.iter().map(|p| p.name.as_str()).collect();
    names.sort_unstable();
    names.dedup();
    let rank = |name: &str| {
        preference
            .iter()
            .position(|p| p == name)
            .unwrap_or(preference.len())
    };
    // Stable: pools outside the preference keep their name order.
    names.sort_by_key(|name| rank(name));
    names
}

/// The input document without `parameters` and `review` (added per policy):
/// `infrastructure_targets` from `pools`, `services` from `pod` (an object with `metadata`
/// and `spec`: a Pod, or a workload's pod template). An error names the pod's field that
/// cannot be read.
pub fn input_document(
    pools: &[PoolFacts],
    pod: &serde_json::Value,
) -> Result<serde_json::Value, String> {
    let requirements = PodRequirements::of(pod.get("spec"), "spec")?;
    let targets: serde_json::Map<String, serde_json::Value> =
        pools.iter().map(|p| (p.name.clone(), p.target())).collect();
    Ok(serde_json::json!({
        "infrastructure_targets": targets,
        "services": { crate::policy::input::service_name(pod): requirements.service() },
    }))
}

/// The pools as placement policies see them: their facts, and their `infrastructure_targets`
/// input converted once (per node change, not per request: for 50 pools the conversion alone
/// costs more than the policies).
#[derive(Debug, Clone)]
pub struct PoolSet {
    facts: Vec<PoolFacts>,
    targets: Value,
    /// The targets as JSON text, for memo keys.
    targets_text: Arc<str>,
}

impl PoolSet {
    pub fn new(facts: Vec<PoolFacts>) -> PoolSet {
        let targets: serde_json::Map<String, serde_json::Value> =
            facts.iter().map(|p| (p.name.clone(), p.target())).collect();
        let targets = serde_json::Value::Object(targets);
        PoolSet {
            targets_text: Arc::from(targets.to_string()),
            targets: Value::from(targets),
            facts,
        }
    }

    pub fn facts(&self) -> &[PoolFacts] {
        &self.facts
    }

    /// The pools of `facts` that placement may choose: with a `placement` section, only those
    /// `placement.pools` lists (a node names its pool by its own label, which its kubelet may
    /// set, so a pool no config lists could otherwise appear and be chosen); without one, all.
    pub fn listed(facts: Vec<PoolFacts>, config: &Config) -> PoolSet {
        match &config.placement {
            Some(placement) => PoolSet::new(
                facts
                    .into_iter()
                    .filter(|p| placement.pools.contains(&p.name))
                    .collect(),
            ),
            None => PoolSet::new(facts),
        }
    }

    /// This set less the pools `config` does not list ([`PoolSet::listed`]); borrowed when
    /// there are none, as when the shell built it with [`PoolSet::listed`].
    fn restricted<'a>(&'a self, config: &Config) -> std::borrow::Cow<'a, PoolSet> {
        let unlisted = |p: &PoolFacts| {
            config
                .placement
                .as_ref()
                .is_some_and(|placement| !placement.pools.contains(&p.name))
        };
        if self.facts.iter().any(unlisted) {
            std::borrow::Cow::Owned(PoolSet::listed(self.facts.clone(), config))
        } else {
            std::borrow::Cow::Borrowed(self)
        }
    }
}

impl Default for PoolSet {
    fn default() -> PoolSet {
        PoolSet::new(Vec::new())
    }
}

/// Files one placement policy's answer: the pools it accepts, or a reason in `reasons`.
fn record<'a>(
    name: &'a str,
    solved: Result<Solution, String>,
    known: &BTreeSet<&str>,
    accepted: &mut BTreeMap<&'a str, Vec<String>>,
    reasons: &mut Vec<String>,
) {
    match solved {
        Ok(Solution::Fulfilled(targets)) => {
            if let Some(unknown) = targets.iter().find(|t| !known.contains(t.as_str())) {
                reasons.push(format!(
                    "{name}: could not be evaluated: it accepts {unknown:?}, which is not a pool"
                ));
            } else if targets.is_empty() {
                reasons.push(format!("{name}: fulfilled, but accepts no pool"));
            } else {
                accepted.insert(name, targets);
            }
        }
        Ok(Solution::Unfulfilled(msg)) => reasons.push(format!("{name}: {msg}")),
        Err(e) => reasons.push(format!("{name}: could not be evaluated: {e}")),
    }
}

/// Chooses the pool for `pod` (an object with `metadata` and `spec`) among `pools`: the first
/// of [`candidates`], each policy within the configured `evaluation.timeoutMillis`.
pub fn choose(
    pools: &[PoolFacts],
    pod: &serde_json::Value,
    policies: &PlacementSet,
    config: &Config,
    review: Option<&serde_json::Value>,
) -> Result<String, Vec<String>> {
    let pools = PoolSet::new(pools.to_vec());
    let limit = Duration::from_millis(config.evaluation.timeout_millis);
    let candidates = candidates(&pools, pod, policies, config, review, limit)?;
    Ok(candidates.into_iter().next().unwrap_or_default())
}

/// The pools every placement policy accepts for `pod` (an object with `metadata` and `spec`),
/// in [`pool_order`]; never empty. Otherwise the reasons, each prefixed with the policy it
/// comes from: every unfulfilled policy's `msg`, every policy that could not be evaluated, or,
/// when each policy accepts some pool but no pool is accepted by all, what each accepted.
/// `review`, the AdmissionRequest, reaches the policies that read it; each policy evaluation
/// takes at most `limit`.
pub(crate) fn candidates(
    set: &PoolSet,
    pod: &serde_json::Value,
    policies: &PlacementSet,
    config: &Config,
    review: Option<&serde_json::Value>,
    limit: Duration,
) -> Result<Vec<String>, Vec<String>> {
    // Only the pools the config lists are candidates, and only they are shown to the policies:
    // a node that names an unlisted pool is never chosen, nor can it make a policy refuse.
    let set = &*set.restricted(config);
    let pools = set.facts();
    if pools.is_empty() {
        let listed = config.placement.as_ref().map_or(String::new(), |p| {
            format!(" with a value in placement.pools ({})", p.pools.join(", "))
        });
        return Err(vec![format!(
            "no pool to choose from: no node carries the label {}{listed}",
            config.node_selector_key
        )]);
    }
    let requirements = PodRequirements::of(pod.get("spec"), "spec").map_err(|e| vec![e])?;
    let services = serde_json::json!({
        crate::policy::input::service_name(pod): requirements.service()
    });
    let placement = config.placement.as_ref();
    let known: BTreeSet<&str> = pools.iter().map(|p| p.name.as_str()).collect();
    let services_text = services.to_string();
    // The document of `input_document`, with the targets converted once per pool set; regorus
    // values share their contents, so per-policy copies are shallow.
    let mut base = Value::new_object();
    if let Ok(map) = base.as_object_mut() {
        map.insert(Value::from("infrastructure_targets"), set.targets.clone());
        map.insert(Value::from("services"), Value::from(services));
    }
    let mut review_value: Option<Value> = None;
    let mut accepted: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    let mut reasons = Vec::new();
    for policy in &policies.policies {
        let name = policy.name.as_str();
        let parameters = placement
            .and_then(|p| p.policies.get(name))
            .map_or(&*NO_PARAMETERS, |s| &s.parameters);
        // The memo's key: the policy, its parameters, the pools and the pod, as text.
        let key = (policy.memoizable && policies.memo.keeps(0)).then(|| {
            let parameters = parameters.text();
            Memo::<Solution>::key(policy.id, &[parameters, &set.targets_text, &services_text])
        });
        if let Some(solution) = key.as_deref().and_then(|k| policies.memo.get(k)) {
            record(name, Ok(solution), &known, &mut accepted, &mut reasons);
            continue;
        }
        let mut doc = base.clone();
        let solved = match doc.as_object_mut() {
            Ok(map) => {
                map.insert(Value::from("parameters"), parameters.rego().clone());
                if let Some(review) = review.filter(|_| policy.reads_review) {
                    let review = review_value
                        .get_or_insert_with(|| Value::from(review.clone()))
                        .clone();
                    map.insert(Value::from("review"), review);
                }
                policy.solve(doc, limit)
            }
            Err(_) => Err("the input document is not an object".to_string()),
        };
        if let (Some(key), Ok(solution)) = (key, &solved) {
            policies.memo.insert(key, solution.clone());
        }
        record(name, solved, &known, &mut accepted, &mut reasons);
    }
    if !reasons.is_empty() {
        return Err(reasons);
    }
    let preference = placement.map_or(&[][..], |p| p.preference.as_slice());
    let chosen: Vec<String> = pool_order(pools, preference)
        .into_iter()
        .filter(|pool| {
            accepted
                .values()
                .all(|targets| targets.binary_search_by(|t| t.as_str().cmp(pool)).is_ok())
        })
        .map(str::to_string)
        .collect();
    if chosen.is_empty() {
        let mut reasons = vec!["no pool is accepted by every placement policy".to_string()];
        reasons.extend(
            accepted
                .iter()
                .map(|(name, targets)| format!("{name}: accepts only {}", targets.join(", "))),
        );
        return Err(reasons);
    }
    Ok(chosen)
}

/// What the pools and the placement policies make of one pod spec in a namespace whose pods
/// get their pool chosen ([`chooses`]).
#[derive(Debug, Clone, PartialEq)]
pub enum Chosen {
    /// The pool: the one the spec's nodeSelector names, or the first the policies accept; and
    /// the spec against it:
    /// [`Placement::Satisfied`], or [`Placement::Patch`] adding the pool's selector.
    Pool(String, Placement),
    /// 403: why no pool can take the pod.
    Refused(Vec<String>),
    /// 400: the pod spec cannot be read.
    Invalid(String),
    /// 503: the node facts are not known yet (the node cache has not synced).
    Unknown(String),
}

/// Chooses the pool for the pod spec at `path` inside `object` (a Pod, or a workload whose
/// template is chosen for as its pods will be): the candidates all placement policies accept
/// ([`candidates`]); the pool the spec's nodeSelector names if it is one of them (refused if
/// not), else the first, checked with [`node_selector::place`] as a named pool is. The mutating webhook patches with it; the
/// validating webhook and the audit check with it (a pod that selects a pool itself must select
/// one the policies accept). `pools` is `None` while the node facts are unknown. Each policy
/// evaluation takes at most `limit`.
pub fn select(
    pools: Option<&PoolSet>,
    at: PodSpecAt,
    policies: &PlacementSet,
    config: &Config,
    review: Option<&serde_json::Value>,
    limit: Duration,
) -> Chosen {
    let Some(pools) = pools else {
        return Chosen::Unknown(
            "no pool can be chosen yet: the nodes have not been read (the node cache has not synced)"
                .to_string(),
        );
    };
    let Some((_, template_path)) = at.path.split_last() else {
        return Chosen::Invalid("no pod spec path".to_string());
    };
    let pod =
        crate::admission::value_at(at.object, template_path).unwrap_or(&serde_json::Value::Null);
    if let Err(e) = PodRequirements::of(pod.get("spec"), &at.path.join(".")) {
        return Chosen::Invalid(e);
    }
    let candidates = match candidates(pools, pod, policies, config, review, limit) {
        Ok(candidates) => candidates,
        Err(reasons) => return Chosen::Refused(reasons),
    };
    let spec = pod.get("spec");
    let key = &config.node_selector_key;
    let own = spec
        .and_then(|s| s.get("nodeSelector"))
        .and_then(|s| s.get(key))
        .and_then(serde_json::Value::as_str);
    let pool = match own {
        Some(own) if !candidates.iter().any(|c| c == own) => {
            return Chosen::Refused(vec![format!(
                "the pod selects pool {own:?} (nodeSelector {key}={own}), which the placement policies do not accept for it; they accept {}",
                candidates.join(", ")
            )])
        }
        Some(own) => own,
        // Chosen for the pod: the first accepted pool that takes new pods: it has a node that
        // does (Ready, not cordoned), or it can launch one (a NodePool). A pool whose nodes are
        // all down or cordoned and that launches none would leave the pod Pending for as long
        // as that lasts, so it is never chosen; a pod may still name it.
        None => match candidates.iter().find(|c| {
            pools
                .facts()
                .iter()
                .any(|f| &f.name == *c && f.takes_new_pods())
        }) {
            Some(pool) => pool.as_str(),
            None => {
                return Chosen::Refused(vec![format!(
                    "no pool the placement policies accept ({}) has a Ready node that is not cordoned or can launch one, so none is chosen",
                    candidates
                        .iter()
                        .map(|c| {
                            let nodes = pools.facts().iter().find(|f| &f.name == c).map_or(0, |f| f.nodes);
                            format!("{c}: {nodes} nodes, 0 ready, none to launch")
                        })
                        .collect::<Vec<_>>()
                        .join("; ")
                )])
            }
        },
    };
    match node_selector::place(spec, at.path, at.namespace, pool, &config.placement_rules()) {
        Placement::Conflict(message) => Chosen::Refused(vec![message]),
        Placement::Invalid(message) => Chosen::Invalid(message),
        placed => Chosen::Pool(pool.to_string(), placed),
    }
}

#[cfg(test)]
mod tests;
