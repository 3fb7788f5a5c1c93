//! The config file: its types, defaults and validation. Errors name the offending path.

use std::collections::BTreeMap;

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};

pub mod dependencies;
pub mod parameters;
pub mod rollout;
pub mod selector;

use dependencies::{Dependency, PLACEMENT};
use parameters::Parameters;
use rollout::RolloutSpec;

/// The whole config file. Every field has a default, so an empty file is a valid config.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Config {
    /// Namespace label whose value names the namespace's pool.
    #[serde(default = "default_label")]
    pub namespace_label: String,
    /// Node label key written into the pod's nodeSelector.
    #[serde(default = "default_label")]
    pub node_selector_key: String,
    /// How pre-set node selectors are treated.
    #[serde(default)]
    pub selector_policy: SelectorPolicy,
    /// Cluster-wide settings per policy name.
    #[serde(default)]
    pub policies: BTreeMap<String, PolicySettings>,
    /// Per-pool overrides.
    #[serde(default)]
    pub pools: BTreeMap<String, PoolSettings>,
    /// Limits and failure behaviour of policy evaluation.
    #[serde(default)]
    pub evaluation: EvaluationSettings,
    /// Bounds on what one object may ask poolguard to check.
    #[serde(default)]
    pub limits: Limits,
    /// Who may set, change or remove a namespace's pool label.
    #[serde(default)]
    pub pool_authority: PoolAuthority,
    /// Choosing a pool for pods by placement (SAT) policies. Absent: pools are only ever the
    /// namespace's label, as without this section.
    #[serde(default)]
    pub placement: Option<PlacementSettings>,
    /// Where PolicyExceptions count and how long one may last ([`crate::exceptions`]).
    #[serde(default)]
    pub exceptions: ExceptionSettings,
}

/// Where PolicyExceptions count and how long one may last.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ExceptionSettings {
    /// The namespaces whose PolicyExceptions count (none by default: the chart names its
    /// release namespace). Whoever may create PolicyExceptions there may except any object.
    #[serde(default)]
    pub namespaces: Vec<String>,
    /// The longest an exception may last, from when it is written (`spec.expires` at most this
    /// far away). Default 30 days.
    #[serde(
        default = "default_max_exception",
        deserialize_with = "rollout::whole_seconds"
    )]
    pub max_duration: std::time::Duration,
}

fn default_max_exception() -> std::time::Duration {
    std::time::Duration::from_secs(30 * 86_400)
}

impl Default for ExceptionSettings {
    fn default() -> ExceptionSettings {
        ExceptionSettings {
            namespaces: Vec::new(),
            max_duration: default_max_exception(),
        }
    }
}

/// When and how poolguard chooses a pool for a pod (see [`crate::placement_policy`]).
#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct PlacementSettings {
    /// The namespace pool label value meaning "choose a pool for each pod" (e.g. `auto`).
    #[serde(default)]
    pub choose_value: Option<String>,
    /// What pods in namespaces without a pool label get.
    #[serde(default)]
    pub unlabelled_namespaces: UnlabelledNamespaces,
    /// The only pools placement may choose (required, not empty). Pools are node label values,
    /// and a kubelet may label its own Node with any unprefixed label and report any
    /// allocatable: a pool named by nodes alone would let one node draw the pods of every
    /// choosing namespace. Nodes of pools not listed are ignored.
    #[serde(default)]
    pub pools: Vec<String>,
    /// Pools (of `pools`) in the order they are preferred when several are acceptable; pools not
    /// listed here follow in name order.
    #[serde(default)]
    pub preference: Vec<String>,
    /// Settings per placement policy name. Every loaded placement policy is evaluated, listed
    /// here or not.
    #[serde(default)]
    pub policies: BTreeMap<String, PlacementPolicySettings>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum UnlabelledNamespaces {
    /// No pool, as without a `placement` section.
    #[default]
    Ignore,
    /// A pool is chosen, as for the `chooseValue` label.
    Choose,
}

/// Settings of one placement policy.
#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlacementPolicySettings {
    /// The policy's `input.parameters`.
    #[serde(default)]
    pub parameters: Parameters,
}

/// The users and groups allowed to set, change or remove the namespace labels poolguard trusts
/// (the validating webhook checks Namespace CREATE and UPDATE, of the main resource and of every
/// subresource). Service accounts are users named `system:serviceaccount:<namespace>:<name>`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct PoolAuthority {
    #[serde(default)]
    pub users: Vec<String>,
    /// Default: the cluster admins, [`DEFAULT_AUTHORITY_GROUPS`].
    #[serde(default = "default_authority_groups")]
    pub groups: Vec<String>,
    /// Namespace label keys guarded like the pool label: those that decide whether and how
    /// poolguard checks a namespace elsewhere (the webhooks' opt-in labels, say). The pool label
    /// (`namespaceLabel`) and every key a rollout group's `namespaceSelector` reads are always
    /// guarded too ([`Config::guarded_labels`]).
    #[serde(default)]
    pub guarded_labels: Vec<String>,
}

/// The groups of a cluster's admins: `system:masters`, and `kubeadm:cluster-admins`, the group
/// of the admin.conf user kubeadm (kind included) writes since Kubernetes 1.29, which is no
/// longer in `system:masters`.
pub(crate) const DEFAULT_AUTHORITY_GROUPS: [&str; 2] = ["system:masters", "kubeadm:cluster-admins"];

fn default_authority_groups() -> Vec<String> {
    DEFAULT_AUTHORITY_GROUPS.map(String::from).to_vec()
}

impl Default for PoolAuthority {
    fn default() -> Self {
        PoolAuthority {
            users: Vec::new(),
            groups: default_authority_groups(),
            guarded_labels: Vec::new(),
        }
    }
}

fn default_label() -> String {
    "agentpool".to_string()
}

impl Default for Config {
    fn default() -> Self {
        Config {
            namespace_label: default_label(),
            node_selector_key: default_label(),
            selector_policy: SelectorPolicy::default(),
            policies: BTreeMap::new(),
            pools: BTreeMap::new(),
            evaluation: EvaluationSettings::default(),
            limits: Limits::default(),
            pool_authority: PoolAuthority::default(),
            placement: None,
            exceptions: ExceptionSettings::default(),
        }
    }
}

/// Bounds on the work and the answer for one object; past them the object is refused with a
/// clear reason (400), never let through unchecked.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Limits {
    /// Images one pod spec may pull (containers, initContainers, ephemeralContainers and image
    /// volumes together).
    #[serde(default = "default_max_images")]
    pub max_images_per_pod: usize,
    /// Reasons listed in one denial; the rest are counted ("... and N more").
    #[serde(default = "default_max_denial_reasons")]
    pub max_denial_reasons: usize,
}

fn default_max_images() -> usize {
    250
}

fn default_max_denial_reasons() -> usize {
    20
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_images_per_pod: default_max_images(),
            max_denial_reasons: default_max_denial_reasons(),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SelectorPolicy {
    /// Add the pool key, keep other keys, deny only a different pool value.
    #[default]
    Merge,
    /// Any pre-set selector other than exactly `{key: pool}` is denied.
    Strict,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Enforcement {
    #[default]
    Deny,
    Warn,
    Dryrun,
}

impl Enforcement {
    /// How strict it is: dryrun 0, warn 1, deny 2.
    pub fn strength(self) -> u8 {
        match self {
            Enforcement::Dryrun => 0,
            Enforcement::Warn => 1,
            Enforcement::Deny => 2,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Enforcement::Deny => "deny",
            Enforcement::Warn => "warn",
            Enforcement::Dryrun => "dryrun",
        }
    }
}

/// Settings of one policy, cluster-wide or for one pool.
#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PolicySettings {
    pub enforcement: Option<Enforcement>,
    pub parameters: Option<Parameters>,
    /// How a new version of the policy reaches `enforcement`, group by group. Cluster-wide
    /// only: a pool's settings may not have one.
    #[serde(default)]
    pub rollout: Option<RolloutSpec>,
    /// Policies (or `placement`) that must be in the given compliance for an object before
    /// this policy runs on it; otherwise it is Pending for that object (not evaluated, not
    /// enforced). Cluster-wide only.
    #[serde(default)]
    pub dependencies: Option<Vec<Dependency>>,
    /// Pending counts as compliant where compliance is summed (audit results `pass` rather
    /// than `skip`). Cluster-wide only.
    #[serde(default, rename = "ignorePending")]
    pub ignore_pending: Option<bool>,
}

#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PoolSettings {
    #[serde(default)]
    pub policies: BTreeMap<String, PolicySettings>,
}

/// What happens when a policy errors or runs past its time limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OnError {
    #[default]
    Deny,
    Allow,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct EvaluationSettings {
    /// Wall-clock limit for one policy evaluation, in milliseconds.
    #[serde(default = "default_timeout_millis")]
    pub timeout_millis: u64,
    /// Decision when a policy fails to evaluate.
    #[serde(default)]
    pub on_error: OnError,
    /// Memory for remembered policy results, in MiB, for the SIT policies and as much again
    /// for the placement policies ([`crate::policy::memo`]); 0 remembers nothing.
    #[serde(default = "default_result_cache_mib", rename = "resultCacheMiB")]
    pub result_cache_mib: u64,
}

/// 64 GiB: far past any sensible budget, low enough that the byte count cannot overflow.
const MAX_RESULT_CACHE_MIB: u64 = 64 * 1024;

fn default_result_cache_mib() -> u64 {
    16
}

fn default_timeout_millis() -> u64 {
    500
}

impl Default for EvaluationSettings {
    fn default() -> Self {
        EvaluationSettings {
            timeout_millis: default_timeout_millis(),
            on_error: OnError::default(),
            result_cache_mib: default_result_cache_mib(),
        }
    }
}

/// The settings that apply to one policy for one pool (or no pool), after layering.
#[derive(Debug, Clone, PartialEq)]
pub struct EffectivePolicy<'a> {
    pub enforcement: Enforcement,
    pub parameters: &'a Parameters,
}

impl Config {
    /// Parses YAML (or JSON) text; `origin` names the source in errors. Empty text (or only
    /// comments) is an error, not the defaults: a config file caught half-written by a reload
    /// would otherwise drop every policy, a silent allow; `{}` asks for the defaults.
    pub fn parse(text: &str, origin: &str) -> Result<Config> {
        let empty = || {
            crate::documents::parse_one::<serde_json::Value>(text, origin)
                .is_ok_and(|document| document.is_null())
        };
        let config: Config = match crate::documents::parse_one(text, origin) {
            Ok(_) | Err(_) if empty() => {
                bail!("{origin}: the config is empty (write `{{}}` for the built-in defaults)")
            }
            Ok(config) => config,
            Err(e) => return Err(e),
        };
        config.validate().with_context(|| origin.to_string())?;
        Ok(config)
    }

    fn validate(&self) -> Result<()> {
        if self.namespace_label.trim().is_empty() {
            bail!("at `namespaceLabel`: must not be empty");
        }
        if self.node_selector_key.trim().is_empty() {
            bail!("at `nodeSelectorKey`: must not be empty");
        }
        if self.evaluation.timeout_millis == 0 {
            bail!("at `evaluation.timeoutMillis`: must be at least 1");
        }
        if self.evaluation.result_cache_mib > MAX_RESULT_CACHE_MIB {
            bail!(
                "at `evaluation.resultCacheMiB`: at most {MAX_RESULT_CACHE_MIB} (MiB), got {}",
                self.evaluation.result_cache_mib
            );
        }
        if self.limits.max_images_per_pod == 0 {
            bail!("at `limits.maxImagesPerPod`: must be at least 1");
        }
        if self.limits.max_denial_reasons == 0 {
            bail!("at `limits.maxDenialReasons`: must be at least 1");
        }
        for (name, settings) in &self.policies {
            if let Some(rollout) = &settings.rollout {
                rollout.validate(&format!("policies.{name}.rollout"))?;
            }
        }
        for (pool, settings) in &self.pools {
            for (name, policy) in &settings.policies {
                if policy.rollout.is_some() {
                    bail!(
                        "at `pools.{pool}.policies.{name}.rollout`: a rollout is cluster-wide (its groups span pools); set it at `policies.{name}.rollout`"
                    );
                }
                for (field, set) in [
                    ("dependencies", policy.dependencies.is_some()),
                    ("ignorePending", policy.ignore_pending.is_some()),
                ] {
                    if set {
                        bail!(
                            "at `pools.{pool}.policies.{name}.{field}`: dependencies are cluster-wide; set them at `policies.{name}.{field}`"
                        );
                    }
                }
            }
        }
        self.validate_dependencies()?;
        self.validate_guarded_labels()?;
        self.validate_placement()
    }

    /// `poolAuthority.guardedLabels`: label keys, each once, not the pool label (always
    /// guarded).
    fn validate_guarded_labels(&self) -> Result<()> {
        let keys = &self.pool_authority.guarded_labels;
        for (i, key) in keys.iter().enumerate() {
            let at = format!("poolAuthority.guardedLabels[{i}]");
            if !is_label_key(key) {
                bail!(
                    "at `{at}`: {key:?} is not a label key ([prefix/]name: a DNS subdomain prefix, a name of 1 to 63 letters, digits, '-', '_' and '.' starting and ending with a letter or digit)"
                );
            }
            if key == &self.namespace_label {
                bail!(
                    "at `{at}`: {key:?} is `namespaceLabel`, which is always guarded; leave it out"
                );
            }
            if let Some(first) = keys[..i].iter().position(|k| k == key) {
                bail!("at `{at}`: {key:?} is already listed at `poolAuthority.guardedLabels[{first}]`");
            }
        }
        Ok(())
    }

    /// The namespace label keys only `poolAuthority` may set, change or remove: the pool label,
    /// `poolAuthority.guardedLabels`, and every key a rollout group's `namespaceSelector` reads
    /// (a namespace editor who could change them would move their namespace to a later group, out
    /// of an enforcing one). Each once, the pool label first.
    pub(crate) fn guarded_labels(&self) -> Vec<&str> {
        let mut keys = vec![self.namespace_label.as_str()];
        let listed = self
            .pool_authority
            .guarded_labels
            .iter()
            .map(String::as_str);
        let rollouts = self
            .policies
            .values()
            .filter_map(|p| p.rollout.as_ref())
            .flat_map(|r| r.groups.iter())
            .filter_map(|g| g.namespace_selector.as_ref())
            .flat_map(|s| s.keys());
        for key in listed.chain(rollouts) {
            if !keys.contains(&key) {
                keys.push(key);
            }
        }
        keys
    }

    /// The `placement` section: a way to reach it (`chooseValue` or `unlabelledNamespaces:
    /// choose`), the pools it may choose (listed, label values, each once), no pool preferred
    /// twice or preferred without being listed.
    fn validate_placement(&self) -> Result<()> {
        let Some(placement) = &self.placement else {
            return Ok(());
        };
        if let Some(value) = &placement.choose_value {
            if !is_label_value(value) {
                bail!(
                    "at `placement.chooseValue`: {value:?} is not a label value (1 to 63 letters, digits, '-', '_' and '.', starting and ending with a letter or digit)"
                );
            }
            if self.pools.contains_key(value) {
                bail!(
                    "at `placement.chooseValue`: {value:?} is a pool configured at `pools.{value}`; choose a value no pool is named"
                );
            }
        } else if placement.unlabelled_namespaces == UnlabelledNamespaces::Ignore {
            bail!(
                "at `placement`: neither `chooseValue` nor `unlabelledNamespaces: choose` is set, so no pool would ever be chosen"
            );
        }
        if placement.pools.is_empty() {
            bail!(
                "at `placement.pools`: list the pools placement may choose (e.g. `pools: [general, gpu]`); nodes can name any pool by labelling themselves, so only listed pools are ever chosen"
            );
        }
        for (i, pool) in placement.pools.iter().enumerate() {
            let at = format!("placement.pools[{i}]");
            if !is_label_value(pool) {
                bail!("at `{at}`: {pool:?} is not a label value, so no node pool is named so");
            }
            if placement.choose_value.as_ref() == Some(pool) {
                bail!("at `{at}`: {pool:?} is `placement.chooseValue`, not a pool");
            }
            if let Some(first) = placement.pools[..i].iter().position(|p| p == pool) {
                bail!("at `{at}`: {pool:?} is already listed at `placement.pools[{first}]`");
            }
        }
        for (i, pool) in placement.preference.iter().enumerate() {
            let at = format!("placement.preference[{i}]");
            if !is_label_value(pool) {
                bail!("at `{at}`: {pool:?} is not a label value, so no node pool is named so");
            }
            if placement.choose_value.as_ref() == Some(pool) {
                bail!("at `{at}`: {pool:?} is `placement.chooseValue`, not a pool");
            }
            if let Some(first) = placement.preference[..i].iter().position(|p| p == pool) {
                bail!("at `{at}`: {pool:?} is already listed at `placement.preference[{first}]`");
            }
            if !placement.pools.contains(pool) {
                bail!("at `{at}`: {pool:?} is not in `placement.pools`, so it is never chosen");
            }
        }
        Ok(())
    }

    /// Each policy's dependencies: no self-dependency, none listed twice, no cycle among the
    /// configured policies. (Names that are not loaded are found by
    /// [`Config::check_against_policies`].)
    fn validate_dependencies(&self) -> Result<()> {
        let names: Vec<&str> = self.policies.keys().map(String::as_str).collect();
        let mut edges = vec![Vec::new(); names.len()];
        for (i, (name, settings)) in self.policies.iter().enumerate() {
            let listed = settings.dependencies.iter().flatten().enumerate();
            for (k, dependency) in listed {
                let at = format!("policies.{name}.dependencies[{k}]");
                if &dependency.policy == name {
                    bail!("at `{at}.policy`: policy `{name}` depends on itself");
                }
                let mut earlier = settings.dependencies.iter().flatten().take(k);
                if let Some(first) = earlier.position(|d| d.policy == dependency.policy) {
                    bail!(
                        "at `{at}.policy`: `{}` is already listed at `policies.{name}.dependencies[{first}]`",
                        dependency.policy
                    );
                }
                if let Ok(j) = names.binary_search(&dependency.policy.as_str()) {
                    edges[i].push(j);
                }
            }
        }
        dependencies::order(&edges).map(|_| ()).map_err(|cycle| {
            let cycle: Vec<&str> = cycle.iter().map(|&i| names[i]).collect();
            dependencies::cycle_error(&cycle)
        })
    }

    /// The rollout of `policy`, if the config gives it one.
    pub fn rollout(&self, policy: &str) -> Option<&RolloutSpec> {
        self.policies.get(policy)?.rollout.as_ref()
    }

    /// Checks that every policy the config names exists, runs somewhere (some level gives it
    /// parameters), gets the inputs it declares and no parameter it does not read, and that its
    /// repository lists are readable. `declared` maps each loaded policy name to what it says of
    /// its parameters. Every mistake is reported, one line each.
    pub(crate) fn check_against_policies(
        &self,
        declared: &BTreeMap<String, Declared>,
    ) -> Result<()> {
        let known = || declared.keys().cloned().collect::<Vec<_>>().join(", ");
        let mut errors: Vec<String> = Vec::new();
        let mut layers: Vec<(String, &BTreeMap<String, PolicySettings>)> =
            vec![("policies".to_string(), &self.policies)];
        for (pool, settings) in &self.pools {
            layers.push((format!("pools.{pool}.policies"), &settings.policies));
        }
        for (name, settings) in &self.policies {
            for (k, dependency) in settings.dependencies.iter().flatten().enumerate() {
                let at = format!("policies.{name}.dependencies[{k}].policy");
                let loaded = declared.contains_key(&dependency.policy);
                if dependency.policy == PLACEMENT && loaded {
                    errors.push(format!(
                        "at `{at}`: `{PLACEMENT}` names the built-in pool placement check, so the loaded policy of that name cannot be depended on; rename it"
                    ));
                }
                if dependency.policy != PLACEMENT && !loaded {
                    errors.push(format!(
                        "at `{at}`: no policy named `{}` is loaded, and it is not `{PLACEMENT}` (loaded: {})",
                        dependency.policy,
                        known()
                    ));
                }
            }
        }
        for (prefix, policies) in &layers {
            for (name, settings) in *policies {
                let Some(declared) = declared.get(name) else {
                    errors.push(format!(
                        "at `{prefix}.{name}`: no policy named `{name}` is loaded (loaded: {})",
                        known()
                    ));
                    continue;
                };
                let at = format!("{prefix}.{name}");
                match &settings.parameters {
                    Some(params) => declared.check(params, &at, &mut errors),
                    None if !self.gives_parameters(name) => errors.push(format!(
                        "at `{at}`: no `parameters` here or at any other level, so the policy would never run; give its parameters (`parameters: {{}}` for a policy that takes none)"
                    )),
                    None => {}
                }
            }
        }
        if errors.is_empty() {
            Ok(())
        } else {
            bail!("{}", errors.join("\n"))
        }
    }

    /// Whether some level (cluster-wide or a pool's) gives `policy` parameters.
    fn gives_parameters(&self, policy: &str) -> bool {
        let given = |policies: &BTreeMap<String, PolicySettings>| {
            policies
                .get(policy)
                .is_some_and(|settings| settings.parameters.is_some())
        };
        given(&self.policies) || self.pools.values().any(|pool| given(&pool.policies))
    }

    /// The settings of `policy` for `pool`: the pool's own settings win over the cluster-wide ones.
    /// `None` when no level gives parameters (the policy is not applied).
    pub fn effective_policy(
        &self,
        policy: &str,
        pool: Option<&str>,
    ) -> Option<EffectivePolicy<'_>> {
        let global = self.policies.get(policy);
        let local = pool
            .and_then(|p| self.pools.get(p))
            .and_then(|p| p.policies.get(policy));
        let parameters = local
            .and_then(|s| s.parameters.as_ref())
            .or_else(|| global.and_then(|s| s.parameters.as_ref()))?;
        let enforcement = local
            .and_then(|s| s.enforcement)
            .or_else(|| global.and_then(|s| s.enforcement))
            .unwrap_or_default();
        Some(EffectivePolicy {
            enforcement,
            parameters,
        })
    }
}

/// Whether `value` can be a Kubernetes label value that names something: 1 to 63 ASCII
/// letters, digits, `-`, `_` and `.`, starting and ending with a letter or digit.
pub(crate) fn is_label_value(value: &str) -> bool {
    let edge = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric());
    value.len() <= 63
        && edge(value.chars().next())
        && edge(value.chars().next_back())
        && value
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

/// Whether `key` is a Kubernetes label key: an optional prefix (a DNS subdomain of at most 253
/// characters) and `/`, then a name that is a label value (1 to 63 characters).
pub(crate) fn is_label_key(key: &str) -> bool {
    let (prefix, name) = match key.rsplit_once('/') {
        Some((prefix, name)) => (Some(prefix), name),
        None => (None, key),
    };
    let subdomain = |p: &str| {
        !p.is_empty()
            && p.len() <= 253
            && p.split('.').all(|part| {
                let edge = |c: Option<char>| {
                    c.is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
                };
                part.len() <= 63
                    && edge(part.chars().next())
                    && edge(part.chars().next_back())
                    && part
                        .chars()
                        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
            })
    };
    prefix.is_none_or(subdomain) && is_label_value(name)
}

/// What a loaded policy says of its parameters (`input.parameters`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Declared {
    /// The names it needs (a StackL template's `inputs`).
    pub inputs: Vec<String>,
    /// Every name it may read, `inputs` included; `None` when that is not known (its Rego reads
    /// `input.parameters` as a whole, or it is a Gatekeeper constraint), and then any name goes.
    pub names: Option<Vec<String>>,
}

impl Declared {
    /// Pushes one error for each declared input `params` leaves out, each name it gives that
    /// the policy does not read (with the likeliest name meant), and each unreadable
    /// repository list.
    fn check(&self, params: &Parameters, at: &str, errors: &mut Vec<String>) {
        for input in &self.inputs {
            if !params.contains_key(input) {
                errors.push(format!(
                    "at `{at}.parameters`: missing `{input}`, an input the policy declares"
                ));
            }
        }
        if let Some(names) = &self.names {
            for given in params.keys().filter(|k| !names.contains(k)) {
                let hint = closest(given, names)
                    .map(|name| format!("did you mean `{name}`? "))
                    .unwrap_or_default();
                let reads = if names.is_empty() {
                    "none".to_string()
                } else {
                    names.join(", ")
                };
                errors.push(format!(
                    "at `{at}.parameters.{given}`: the policy takes no parameter `{given}` ({hint}it reads: {reads})"
                ));
            }
        }
        for key in ["repositories", "exemptRepositories"] {
            if let Some(entries) = params.get(key) {
                if let Err(e) = check_repositories(entries, &format!("{at}.parameters.{key}")) {
                    errors.push(e.to_string());
                }
            }
        }
    }
}

impl From<Vec<String>> for Declared {
    /// Declared inputs, any other name allowed.
    fn from(inputs: Vec<String>) -> Declared {
        Declared {
            inputs,
            names: None,
        }
    }
}

/// The name of `names` closest to `given` (edit distance at most a third of its length, at
/// least 1, ignoring case), if any.
fn closest<'a>(given: &str, names: &'a [String]) -> Option<&'a str> {
    let given = given.to_lowercase();
    names
        .iter()
        .map(|name| (edit_distance(&given, &name.to_lowercase()), name))
        .filter(|(d, name)| *d <= (name.len() / 3).max(1))
        .min_by_key(|(d, _)| *d)
        .map(|(_, name)| name.as_str())
}

/// Levenshtein distance between two strings, by characters.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut previous = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let substituted = previous + usize::from(ca != *cb);
            previous = row[j + 1];
            row[j + 1] = substituted.min(row[j] + 1).min(row[j + 1] + 1);
        }
    }
    row[b.len()]
}

/// A `repositories` parameter (StackL's and Gatekeeper's name for an allow-list of image
/// repositories), and `latesttag`'s `exemptRepositories`, must list `registry/path` prefixes:
/// images are compared after normalization
/// (`nginx` is `docker.io/library/nginx`), so an entry without a registry, as Gatekeeper users
/// write them (`openpolicyagent/`), would never match anything and deny what it meant to allow.
fn check_repositories(entries: &serde_json::Value, at: &str) -> Result<()> {
    let Some(entries) = entries.as_array() else {
        bail!("at `{at}`: must be a list of repository prefixes such as \"registry.example.com/team/\"");
    };
    for (i, entry) in entries.iter().enumerate() {
        let Some(text) = entry.as_str() else {
            bail!("at `{at}[{i}]`: must be a string, got {entry}");
        };
        let trimmed = text.trim_end_matches('/');
        if trimmed.is_empty() {
            continue; // allows nothing, as documented
        }
        let first = trimmed.split('/').next().unwrap_or_default();
        let is_registry = first.contains(['.', ':'])
            || first == "localhost"
            || first.chars().any(|c| c.is_ascii_uppercase());
        if !is_registry {
            let fixed = if text.contains('/') {
                format!("docker.io/{text}")
            } else {
                format!("docker.io/library/{text}")
            };
            bail!(
                "at `{at}[{i}]`: {text:?} names no registry, so it would never match (images are compared as registry/path, `nginx` being docker.io/library/nginx); write {fixed:?}"
            );
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const FULL: &str = r#"
namespaceLabel: team-pool
nodeSelectorKey: kubernetes.azure.com/agentpool
selectorPolicy: strict
policies:
  allowedrepositories:
    enforcement: warn
    parameters:
      repositories: ["registry.example.com/"]
pools:
  gpu:
    policies:
      allowedrepositories:
        parameters:
          repositories: ["gpu.example.com/"]
  cpu:
    policies:
      allowedrepositories:
        enforcement: deny
evaluation:
  timeoutMillis: 100
  onError: allow
"#;

    #[test]
    fn empty_text_gives_defaults() {
        let c = Config::parse("{}", "t").unwrap();
        assert_eq!(c, Config::default());
        assert_eq!(c.namespace_label, "agentpool");
        assert_eq!(c.node_selector_key, "agentpool");
        assert_eq!(c.selector_policy, SelectorPolicy::Merge);
        assert_eq!(c.evaluation.timeout_millis, 500);
        assert_eq!(c.evaluation.on_error, OnError::Deny);
        assert_eq!(c.evaluation.result_cache_mib, 16);
    }

    #[test]
    fn full_config_parses() {
        let c = Config::parse(FULL, "t").unwrap();
        assert_eq!(c.namespace_label, "team-pool");
        assert_eq!(c.node_selector_key, "kubernetes.azure.com/agentpool");
        assert_eq!(c.selector_policy, SelectorPolicy::Strict);
        assert_eq!(c.evaluation.on_error, OnError::Allow);
    }

    #[test]
    fn layering_table() {
        let c = Config::parse(FULL, "t").unwrap();
        let repos = |e: &EffectivePolicy| {
            e.parameters["repositories"][0]
                .as_str()
                .unwrap()
                .to_string()
        };
        // (pool, expected repository, expected enforcement)
        let cases = [
            (None, "registry.example.com/", Enforcement::Warn),
            (Some("gpu"), "gpu.example.com/", Enforcement::Warn),
            (Some("cpu"), "registry.example.com/", Enforcement::Deny),
            (Some("unknown"), "registry.example.com/", Enforcement::Warn),
        ];
        for (pool, repo, enforcement) in cases {
            let e = c.effective_policy("allowedrepositories", pool).unwrap();
            assert_eq!(repos(&e), repo, "pool {pool:?}");
            assert_eq!(e.enforcement, enforcement, "pool {pool:?}");
        }
        assert!(c.effective_policy("other", Some("gpu")).is_none());
    }

    #[test]
    fn policy_without_parameters_at_any_level_is_not_applied() {
        let c = Config::parse(
            "policies:\n  allowedrepositories:\n    enforcement: warn\n",
            "t",
        )
        .unwrap();
        assert!(c.effective_policy("allowedrepositories", None).is_none());
        assert!(c
            .effective_policy("allowedrepositories", Some("x"))
            .is_none());
    }

    #[test]
    fn errors_name_the_path() {
        let cases = [
            ("namespaceLable: x\n", "unknown field `namespaceLable`"),
            ("selectorPolicy: loose\n", "at `selectorPolicy`"),
            (
                "policies:\n  a:\n    enforcement: block\n",
                "at `policies.a.enforcement`",
            ),
            (
                "policies:\n  a:\n    parameters: [1]\n",
                "at `policies.a.parameters`",
            ),
            ("pools:\n  gpu:\n    policy: {}\n", "at `pools.gpu.policy`"),
            (
                "evaluation:\n  timeoutMillis: soon\n",
                "at `evaluation.timeoutMillis`",
            ),
            ("namespaceLabel: ''\n", "at `namespaceLabel`"),
            (
                "evaluation:\n  timeoutMillis: 0\n",
                "at `evaluation.timeoutMillis`",
            ),
            (
                "evaluation:\n  resultCacheMiB: 70000\n",
                "at `evaluation.resultCacheMiB`: at most 65536",
            ),
            (
                "evaluation:\n  resultCacheMiB: lots\n",
                "at `evaluation.resultCacheMiB`",
            ),
        ];
        for (text, want) in cases {
            let err = format!("{:#}", Config::parse(text, "cfg.yaml").unwrap_err());
            assert!(err.contains(want), "{text:?}: {err}");
            assert!(err.contains("cfg.yaml"), "{text:?}: {err}");
        }
    }

    const ROLLOUT: &str = r#"
policies:
  allowedrepositories:
    enforcement: deny
    parameters:
      repositories: ["registry.example.com/"]
    rollout:
      groups:
        - name: canary
          namespaceSelector: {matchLabels: {risk: low}}
        - name: standard
          namespaceSelector: {matchExpressions: [{key: risk, operator: In, values: [medium]}]}
        - name: critical
          approval: required
      minSuccessTime: 10m
      progressDeadline: 2h
      maxFailures: 0
      maxDenialsPerMinute: 30
"#;

    #[test]
    fn rollout_parses_under_cluster_wide_settings() {
        let c = Config::parse(ROLLOUT, "t").unwrap();
        let r = c.rollout("allowedrepositories").unwrap();
        let names: Vec<&str> = r.groups.iter().map(|g| g.name.as_str()).collect();
        assert_eq!(names, ["canary", "standard", "critical"]);
        assert_eq!(r.min_success_time, std::time::Duration::from_secs(600));
        assert!(c.rollout("other").is_none());
        // A rollout may end at any enforcement, dryrun included.
        let dry = Config::parse(
            &ROLLOUT.replace("enforcement: deny", "enforcement: dryrun"),
            "t",
        )
        .unwrap();
        assert!(dry.rollout("allowedrepositories").is_some());
    }

    #[test]
    fn rollout_errors_name_the_path() {
        let cases = [
            (
                "pools:\n  gpu:\n    policies:\n      allowedrepositories:\n        rollout: {groups: [{name: a}], minSuccessTime: 1m, progressDeadline: 1h}\n",
                "at `pools.gpu.policies.allowedrepositories.rollout`: a rollout is cluster-wide",
            ),
            (
                &ROLLOUT.replace("name: standard", "name: canary"),
                "at `policies.allowedrepositories.rollout.groups[1].name`: `canary` already names `policies.allowedrepositories.rollout.groups[0]`",
            ),
            (
                &ROLLOUT.replace("name: standard", "name: Standard"),
                "at `policies.allowedrepositories.rollout.groups[1].name`",
            ),
            (
                &ROLLOUT.replace("minSuccessTime: 10m", "minSuccessTime: ten"),
                "at `policies.allowedrepositories.rollout.minSuccessTime`: \"ten\" is not a duration",
            ),
            (
                &ROLLOUT.replace("      minSuccessTime: 10m\n", ""),
                "at `policies.allowedrepositories.rollout`: missing field `minSuccessTime`",
            ),
            (
                &ROLLOUT.replace("progressDeadline: 2h", "progressDeadline: 5m"),
                "at `policies.allowedrepositories.rollout.progressDeadline`: 5m must be longer",
            ),
            (
                &ROLLOUT.replace("maxFailures: 0", "maxFailures: 120%"),
                "at `policies.allowedrepositories.rollout.maxFailures`",
            ),
            (
                &ROLLOUT.replace("{matchLabels: {risk: low}}", "{}"),
                "at `policies.allowedrepositories.rollout.groups[0].namespaceSelector`: an empty selector selects every namespace; omit namespaceSelector for the catch-all group",
            ),
            (
                &ROLLOUT.replace("operator: In", "operator: Is"),
                "at `policies.allowedrepositories.rollout.groups[1].namespaceSelector.matchExpressions[0].operator`",
            ),
            (
                &ROLLOUT.replace("approval: required", "approval: maybe"),
                "at `policies.allowedrepositories.rollout.groups[2].approval`",
            ),
        ];
        for (text, want) in cases {
            let err = format!("{:#}", Config::parse(text, "cfg.yaml").unwrap_err());
            assert!(err.contains(want), "{err}\n  want: {want}");
            assert!(err.contains("cfg.yaml"), "{err}");
        }
    }

    const DEPENDENCIES: &str = r#"
policies:
  allowedrepositories:
    parameters:
      repositories: ["registry.example.com/"]
  latesttag:
    dependencies:
      - policy: allowedrepositories
        compliance: Compliant
      - policy: placement
    ignorePending: true
    parameters: {}
"#;

    #[test]
    fn dependencies_parse_under_cluster_wide_settings() {
        use super::dependencies::{Compliance, Dependency};
        let c = Config::parse(DEPENDENCIES, "t").unwrap();
        let latest = &c.policies["latesttag"];
        assert_eq!(
            latest.dependencies.as_deref().unwrap(),
            [
                Dependency {
                    policy: "allowedrepositories".into(),
                    compliance: Compliance::Compliant
                },
                // Compliant unless said otherwise.
                Dependency {
                    policy: "placement".into(),
                    compliance: Compliance::Compliant
                },
            ]
        );
        assert_eq!(latest.ignore_pending, Some(true));
        assert_eq!(c.policies["allowedrepositories"].dependencies, None);
        let non = Config::parse(
            &DEPENDENCIES.replace("compliance: Compliant", "compliance: NonCompliant"),
            "t",
        )
        .unwrap();
        assert_eq!(
            non.policies["latesttag"].dependencies.as_ref().unwrap()[0].compliance,
            Compliance::NonCompliant
        );
    }

    #[test]
    fn dependency_errors_name_the_path_the_cycle_or_the_name() {
        let policy = |name: &str, deps: &str| {
            format!("  {name}:\n    parameters: {{}}\n    dependencies: [{deps}]\n")
        };
        let cases = [
            (
                DEPENDENCIES.replace("compliance: Compliant", "compliance: compliant"),
                "at `policies.latesttag.dependencies[0].compliance`".to_string(),
            ),
            (
                DEPENDENCIES.replace("- policy: placement", "- polic: placement"),
                "at `policies.latesttag.dependencies[1].polic`: unknown field `polic`".to_string(),
            ),
            (
                DEPENDENCIES.replace("ignorePending: true", "ignorePending: sometimes"),
                "at `policies.latesttag.ignorePending`".to_string(),
            ),
            (
                format!("policies:\n{}", policy("a", "{policy: placement}, {policy: a}")),
                "at `policies.a.dependencies[1].policy`: policy `a` depends on itself".to_string(),
            ),
            (
                format!(
                    "policies:\n{}{}",
                    policy("a", "{policy: b}, {policy: b, compliance: NonCompliant}"),
                    policy("b", "")
                ),
                "at `policies.a.dependencies[1].policy`: `b` is already listed at `policies.a.dependencies[0]`".to_string(),
            ),
            (
                format!(
                    "policies:\n{}{}",
                    policy("a", "{policy: b}"),
                    policy("b", "{policy: a, compliance: NonCompliant}")
                ),
                "at `policies.a.dependencies`: dependency cycle a -> b -> a".to_string(),
            ),
            (
                format!(
                    "policies:\n{}{}{}{}",
                    policy("a", "{policy: placement}"),
                    policy("b", "{policy: d}"),
                    policy("c", "{policy: b}"),
                    policy("d", "{policy: a}, {policy: c}")
                ),
                "at `policies.b.dependencies`: dependency cycle b -> d -> c -> b".to_string(),
            ),
            (
                "pools:\n  gpu:\n    policies:\n      latesttag:\n        dependencies: [{policy: placement}]\n".to_string(),
                "at `pools.gpu.policies.latesttag.dependencies`: dependencies are cluster-wide; set them at `policies.latesttag.dependencies`".to_string(),
            ),
            (
                "pools:\n  gpu:\n    policies:\n      latesttag:\n        ignorePending: false\n".to_string(),
                "at `pools.gpu.policies.latesttag.ignorePending`: dependencies are cluster-wide".to_string(),
            ),
        ];
        for (text, want) in cases {
            let err = format!("{:#}", Config::parse(&text, "cfg.yaml").unwrap_err());
            assert!(err.contains(&want), "{err}\n  want: {want}");
            assert!(err.contains("cfg.yaml"), "{err}");
        }
    }

    #[test]
    fn dependencies_must_name_loaded_policies_or_placement() {
        let declared = |names: &[&str]| -> BTreeMap<String, Declared> {
            names
                .iter()
                .map(|n| (n.to_string(), Declared::default()))
                .collect()
        };
        let c = Config::parse(DEPENDENCIES, "t").unwrap();
        c.check_against_policies(&declared(&["allowedrepositories", "latesttag"]))
            .unwrap();
        // Depending on a loaded policy the config does not mention is allowed (it never
        // applies, so the dependent is Pending everywhere).
        let quiet = Config::parse(
            "policies:\n  latesttag:\n    dependencies: [{policy: other}]\n    parameters: {}\n",
            "t",
        )
        .unwrap();
        quiet
            .check_against_policies(&declared(&["latesttag", "other"]))
            .unwrap();
        let err = c
            .check_against_policies(&declared(&["latesttag", "repos"]))
            .unwrap_err()
            .to_string();
        // Every mistake, a line each: the dependency and the policy itself.
        assert_eq!(
            err,
            "at `policies.latesttag.dependencies[0].policy`: no policy named `allowedrepositories` is loaded, and it is not `placement` (loaded: latesttag, repos)\nat `policies.allowedrepositories`: no policy named `allowedrepositories` is loaded (loaded: latesttag, repos)"
        );
        let err = c
            .check_against_policies(&declared(&[
                "allowedrepositories",
                "latesttag",
                "placement",
            ]))
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("at `policies.latesttag.dependencies[1].policy`: `placement` names the built-in pool placement check"),
            "{err}"
        );
    }

    #[test]
    fn placement_is_off_unless_configured() {
        assert_eq!(Config::parse("{}", "t").unwrap().placement, None);
        for empty in ["", "  \n", "# nothing here\n"] {
            let err = Config::parse(empty, "c.yaml").unwrap_err().to_string();
            assert_eq!(
                err,
                "c.yaml: the config is empty (write `{}` for the built-in defaults)"
            );
        }
        assert_eq!(Config::parse(FULL, "t").unwrap().placement, None);
        let c = Config::parse(
            "placement:\n  chooseValue: auto\n  pools: [general, gpu, spot]\n  preference: [general, gpu]\n  policies:\n    gpuonly:\n      parameters: {resources: [nvidia.com/gpu]}\n",
            "t",
        )
        .unwrap();
        let p = c.placement.unwrap();
        assert_eq!(p.choose_value.as_deref(), Some("auto"));
        assert_eq!(p.unlabelled_namespaces, UnlabelledNamespaces::Ignore);
        assert_eq!(p.pools, ["general", "gpu", "spot"]);
        assert_eq!(p.preference, ["general", "gpu"]);
        assert_eq!(
            p.policies["gpuonly"].parameters["resources"],
            serde_json::json!(["nvidia.com/gpu"])
        );
        let c = Config::parse(
            "placement: {unlabelledNamespaces: choose, pools: [general]}\n",
            "t",
        )
        .unwrap();
        let p = c.placement.unwrap();
        assert_eq!(p.choose_value, None);
        assert_eq!(p.unlabelled_namespaces, UnlabelledNamespaces::Choose);
        assert!(p.policies.is_empty());
    }

    #[test]
    fn placement_errors_name_the_path() {
        let cases = [
            ("placement: {}\n", "at `placement`: neither `chooseValue` nor `unlabelledNamespaces: choose` is set"),
            ("placement: {chooseValue: auto, prefer: [a]}\n", "at `placement.prefer`: unknown field `prefer`"),
            ("placement: {chooseValue: ''}\n", "at `placement.chooseValue`: \"\" is not a label value"),
            ("placement: {chooseValue: -auto}\n", "at `placement.chooseValue`: \"-auto\" is not a label value"),
            ("placement: {chooseValue: [auto]}\n", "at `placement.chooseValue`"),
            ("placement: {unlabelledNamespaces: always}\n", "at `placement.unlabelledNamespaces`"),
            (
                "placement: {chooseValue: gpu}\npools:\n  gpu: {}\n",
                "at `placement.chooseValue`: \"gpu\" is a pool configured at `pools.gpu`",
            ),
            (
                "placement: {chooseValue: auto, pools: [a, b], preference: [a, b, a]}\n",
                "at `placement.preference[2]`: \"a\" is already listed at `placement.preference[0]`",
            ),
            (
                "placement: {chooseValue: auto, pools: [a], preference: [a, auto]}\n",
                "at `placement.preference[1]`: \"auto\" is `placement.chooseValue`, not a pool",
            ),
            (
                "placement: {chooseValue: auto, pools: [a], preference: [a b]}\n",
                "at `placement.preference[0]`: \"a b\" is not a label value",
            ),
            (
                "placement: {chooseValue: auto}\n",
                "at `placement.pools`: list the pools placement may choose",
            ),
            (
                "placement: {unlabelledNamespaces: choose, pools: []}\n",
                "at `placement.pools`: list the pools placement may choose",
            ),
            (
                "placement: {chooseValue: auto, pools: [a, a b]}\n",
                "at `placement.pools[1]`: \"a b\" is not a label value",
            ),
            (
                "placement: {chooseValue: auto, pools: [a, auto]}\n",
                "at `placement.pools[1]`: \"auto\" is `placement.chooseValue`, not a pool",
            ),
            (
                "placement: {chooseValue: auto, pools: [a, b, a]}\n",
                "at `placement.pools[2]`: \"a\" is already listed at `placement.pools[0]`",
            ),
            (
                "placement: {chooseValue: auto, pools: [a], preference: [a, b]}\n",
                "at `placement.preference[1]`: \"b\" is not in `placement.pools`, so it is never chosen",
            ),
            (
                "placement: {chooseValue: auto, pools: [a], poolz: [b]}\n",
                "at `placement.poolz`: unknown field `poolz`",
            ),
            (
                "placement: {chooseValue: auto, policies: {gpuonly: {parameter: {}}}}\n",
                "at `placement.policies.gpuonly.parameter`: unknown field `parameter`",
            ),
            (
                "placement: {chooseValue: auto, policies: {gpuonly: {parameters: [1]}}}\n",
                "at `placement.policies.gpuonly.parameters`",
            ),
        ];
        for (text, want) in cases {
            let err = format!("{:#}", Config::parse(text, "cfg.yaml").unwrap_err());
            assert!(err.contains(want), "{err}\n  want: {want}");
            assert!(err.contains("cfg.yaml"), "{err}");
        }
    }

    #[test]
    fn guarded_labels_are_label_keys_each_once_and_not_the_pool_label() {
        let c = Config::parse(
            "poolAuthority: {guardedLabels: [poolguard, example.com/tier, a.b-c.io/x_y.z]}\n",
            "t",
        )
        .unwrap();
        assert_eq!(
            c.pool_authority.guarded_labels,
            ["poolguard", "example.com/tier", "a.b-c.io/x_y.z"]
        );
        assert_eq!(
            c.pool_authority.groups,
            ["system:masters", "kubeadm:cluster-admins"]
        );
        assert!(Config::default().pool_authority.guarded_labels.is_empty());
        let cases = [
            ("poolAuthority: {guardedLabels: [a, 'a b']}\n", "at `poolAuthority.guardedLabels[1]`: \"a b\" is not a label key"),
            ("poolAuthority: {guardedLabels: ['']}\n", "at `poolAuthority.guardedLabels[0]`: \"\" is not a label key"),
            ("poolAuthority: {guardedLabels: [Example.com/x]}\n", "at `poolAuthority.guardedLabels[0]`"),
            ("poolAuthority: {guardedLabels: [example.com/]}\n", "at `poolAuthority.guardedLabels[0]`"),
            ("poolAuthority: {guardedLabels: [/x]}\n", "at `poolAuthority.guardedLabels[0]`"),
            ("poolAuthority: {guardedLabels: [x, y, x]}\n", "at `poolAuthority.guardedLabels[2]`: \"x\" is already listed at `poolAuthority.guardedLabels[0]`"),
            ("poolAuthority: {guardedLabels: [agentpool]}\n", "at `poolAuthority.guardedLabels[0]`: \"agentpool\" is `namespaceLabel`, which is always guarded"),
            ("namespaceLabel: example.com/pool\npoolAuthority: {guardedLabels: [example.com/pool]}\n", "is `namespaceLabel`"),
            ("poolAuthority: {guardedLabels: x}\n", "at `poolAuthority.guardedLabels`"),
            ("poolAuthority: {guardedLabel: [x]}\n", "at `poolAuthority.guardedLabel`: unknown field"),
        ];
        for (text, want) in cases {
            let err = format!("{:#}", Config::parse(text, "cfg.yaml").unwrap_err());
            assert!(err.contains(want), "{err}\n  want: {want}");
        }
        for good in [
            "a",
            "a/b",
            "k8s.io/x",
            "node-restriction.kubernetes.io/pool",
            "A_b.C",
        ] {
            assert!(is_label_key(good), "{good}");
        }
        for bad in [
            "",
            "a/",
            "/a",
            "a/b/c",
            "A.io/x",
            "-a.io/x",
            "a..b/x",
            "a b",
            &"x".repeat(64),
        ] {
            assert!(!is_label_key(bad), "{bad}");
        }
    }

    #[test]
    fn label_values() {
        for good in ["a", "auto", "pool-1", "a.b_c", "A1", &"x".repeat(63)] {
            assert!(is_label_value(good), "{good}");
        }
        for bad in ["", "-a", "a-", "a b", "a/b", "é", &"x".repeat(64)] {
            assert!(!is_label_value(bad), "{bad}");
        }
    }

    /// What the user wrote is enforced or refused: a policy listed without parameters at any
    /// level would never run, a parameter the policy does not read would change nothing (a
    /// misspelt optional one silently changes decisions); each is an error, all reported.
    #[test]
    fn a_policy_that_would_not_run_and_parameters_it_does_not_read_are_errors() {
        let names = |n: &[&str]| Some(n.iter().map(|s| s.to_string()).collect());
        let declared: BTreeMap<String, Declared> = [
            (
                "allowedrepositories".to_string(),
                Declared {
                    inputs: vec!["repositories".into()],
                    names: names(&["repositories"]),
                },
            ),
            (
                "latesttag".to_string(),
                Declared {
                    inputs: vec![],
                    names: names(&["exemptRepositories"]),
                },
            ),
            ("custom".to_string(), Declared::default()),
        ]
        .into();
        let check = |text: &str| {
            Config::parse(text, "t")
                .unwrap()
                .check_against_policies(&declared)
                .err()
                .map(|e| e.to_string())
        };
        assert_eq!(
            check("policies:\n  latesttag:\n    enforcement: warn\n").as_deref(),
            Some("at `policies.latesttag`: no `parameters` here or at any other level, so the policy would never run; give its parameters (`parameters: {}` for a policy that takes none)")
        );
        // Parameters at another level are enough: the pool's, or the cluster-wide ones.
        assert_eq!(
            check("policies:\n  latesttag: {enforcement: warn}\npools:\n  gpu:\n    policies:\n      latesttag: {parameters: {}}\n"),
            None
        );
        assert_eq!(
            check("policies:\n  latesttag: {parameters: {}}\npools:\n  gpu:\n    policies:\n      latesttag: {enforcement: dryrun}\n"),
            None
        );
        assert_eq!(
            check("policies:\n  latesttag:\n    parameters:\n      exemptRepository: [registry.example.com/]\n").as_deref(),
            Some("at `policies.latesttag.parameters.exemptRepository`: the policy takes no parameter `exemptRepository` (did you mean `exemptRepositories`? it reads: exemptRepositories)")
        );
        // A policy whose Rego reads its parameters as a whole takes any name.
        assert_eq!(
            check("policies:\n  custom:\n    parameters: {anything: 1}\n"),
            None
        );
        // Several mistakes: every one, a line each.
        let all = check("policies:\n  allowedrepositories:\n    parameters: {repos: [a.io/]}\n  latesttag: {}\n  nope: {parameters: {}}\n").unwrap();
        assert_eq!(
            all.lines().collect::<Vec<_>>(),
            [
                "at `policies.allowedrepositories.parameters`: missing `repositories`, an input the policy declares",
                "at `policies.allowedrepositories.parameters.repos`: the policy takes no parameter `repos` (it reads: repositories)",
                "at `policies.latesttag`: no `parameters` here or at any other level, so the policy would never run; give its parameters (`parameters: {}` for a policy that takes none)",
                "at `policies.nope`: no policy named `nope` is loaded (loaded: allowedrepositories, custom, latesttag)",
            ]
        );
    }

    #[test]
    fn check_against_policies_rejects_unknown_names_and_missing_inputs() {
        let declared: BTreeMap<String, Declared> = [(
            "allowedrepositories".to_string(),
            Declared::from(vec!["repositories".to_string()]),
        )]
        .into();
        let ok = Config::parse(FULL, "t").unwrap();
        ok.check_against_policies(&declared).unwrap();

        let typo =
            Config::parse("policies:\n  allowedrepository:\n    parameters: {}\n", "t").unwrap();
        let err = typo
            .check_against_policies(&declared)
            .unwrap_err()
            .to_string();
        assert!(err.contains("policies.allowedrepository"), "{err}");

        let pool_typo =
            Config::parse("pools:\n  gpu:\n    policies:\n      nope: {}\n", "t").unwrap();
        let err = pool_typo
            .check_against_policies(&declared)
            .unwrap_err()
            .to_string();
        assert!(err.contains("pools.gpu.policies.nope"), "{err}");

        let gatekeeper_style = Config::parse(
            "policies:\n  allowedrepositories:\n    parameters:\n      repositories: [registry.example.com/, openpolicyagent/]\n",
            "t",
        )
        .unwrap();
        let err = gatekeeper_style
            .check_against_policies(&declared)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("policies.allowedrepositories.parameters.repositories[1]")
                && err.contains("\"docker.io/openpolicyagent/\""),
            "{err}"
        );
        let official = Config::parse(
            "pools:\n  gpu:\n    policies:\n      allowedrepositories:\n        parameters:\n          repositories: [nginx]\n",
            "t",
        )
        .unwrap();
        let err = official
            .check_against_policies(&declared)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("pools.gpu.policies") && err.contains("\"docker.io/library/nginx\""),
            "{err}"
        );
        for fine in [
            "docker.io/",
            "localhost:5000/",
            "registry.example.com",
            "Evilhost/app",
            "",
        ] {
            let c = Config::parse(
                &format!("policies:\n  allowedrepositories:\n    parameters:\n      repositories: [{fine:?}]\n"),
                "t",
            )
            .unwrap();
            c.check_against_policies(&declared).unwrap();
        }

        let exempt = Config::parse(
            "policies:\n  allowedrepositories:\n    parameters:\n      repositories: []\n      exemptRepositories: [busybox]\n",
            "t",
        )
        .unwrap();
        let err = exempt
            .check_against_policies(&declared)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("policies.allowedrepositories.parameters.exemptRepositories[0]")
                && err.contains("\"docker.io/library/busybox\""),
            "{err}"
        );

        let missing = Config::parse(
            "policies:\n  allowedrepositories:\n    parameters:\n      repos: []\n",
            "t",
        )
        .unwrap();
        let err = missing
            .check_against_policies(&declared)
            .unwrap_err()
            .to_string();
        assert!(err.contains("missing `repositories`"), "{err}");
    }
}
