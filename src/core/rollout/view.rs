//! What every replica knows of the rollouts, and how a decision uses it: each policy's state,
//! and the versions the state names kept as source (Rego and the policy's settings) so that a
//! replica can run them whatever its own files hold — the version being rolled out when the
//! local files already hold a newer one, and the previous version that groups not reached yet
//! stay on. [`RolloutView::resolve`] answers, for one policy and one namespace, which code runs
//! with which parameters and how strictly; admission and the audit both call it.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::machine::{enforcement_for, GroupStatus, RolloutState, Which};
use crate::config::parameters::Parameters;
use crate::config::{Config, Enforcement, PolicySettings, PoolSettings};
use crate::gatekeeper::template::{self, ConstraintTemplate};
use crate::labels::Labels;
use crate::policy::engine::{ConstraintSource, Policy};
use crate::policy::template::Template;
pub use crate::rollout_mark::RolloutMark;

/// One version of a policy as stored beside the rollout state: enough to run it anywhere.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StoredVersion {
    pub version: String,
    pub rego: String,
    pub inputs: Vec<String>,
    /// Cluster-wide settings of the policy.
    pub settings: StoredSettings,
    /// Per-pool settings of the policy.
    #[serde(default)]
    pub pools: BTreeMap<String, StoredSettings>,
    /// For a Gatekeeper constraint, its match and template (`rego` is then the text that
    /// versions it, not what is compiled).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub constraint: Option<ConstraintSource>,
}

/// The parts of a policy's settings that a version carries.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StoredSettings {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enforcement: Option<Enforcement>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parameters: Option<Map<String, Value>>,
}

impl StoredVersion {
    /// The version of `policy` that `config` gives.
    pub fn of(policy: &Policy, config: &Config) -> StoredVersion {
        let settings = |s: Option<&PolicySettings>| StoredSettings {
            enforcement: s.and_then(|s| s.enforcement),
            parameters: s.and_then(|s| s.parameters.as_ref().map(|p| p.map().clone())),
        };
        StoredVersion {
            version: policy.version(config),
            rego: policy.rego().to_string(),
            inputs: policy.inputs.clone(),
            settings: settings(config.policies.get(&policy.name)),
            pools: config
                .pools
                .iter()
                .filter_map(|(pool, p)| {
                    p.policies
                        .get(&policy.name)
                        .map(|s| (pool.clone(), settings(Some(s))))
                })
                .collect(),
            constraint: policy.constraint_source().cloned(),
        }
    }

    /// Compiles the stored Rego into a policy named `name`, with a config holding only its
    /// settings.
    pub fn compile(&self, name: &str) -> Result<CompiledVersion> {
        let template = Template {
            name: name.to_string(),
            description: String::new(),
            inputs: self.inputs.clone(),
            // The names its Rego reads stand for what it may take.
            optional_inputs: None,
            rego: self.rego.clone(),
            path: PathBuf::from(format!("rollout:{name}@{}", self.version)),
        };
        let policy = match &self.constraint {
            None => Policy::compile(&template),
            Some(source) => compile_constraint(name, template.path, &self.rego, source),
        }
        .with_context(|| format!("the stored version {} of policy {name}", self.version))?;
        let to_settings = |s: &StoredSettings| PolicySettings {
            enforcement: s.enforcement,
            parameters: s.parameters.clone().map(Parameters::from),
            ..PolicySettings::default()
        };
        let mut config = Config::default();
        config
            .policies
            .insert(name.to_string(), to_settings(&self.settings));
        for (pool, s) in &self.pools {
            config.pools.insert(
                pool.clone(),
                PoolSettings {
                    policies: BTreeMap::from([(name.to_string(), to_settings(s))]),
                },
            );
        }
        Ok(CompiledVersion {
            version: self.version.clone(),
            policy,
            config,
        })
    }
}

/// A constraint's stored version compiled as its template is at load ([`template::compile`]).
fn compile_constraint(
    name: &str,
    path: PathBuf,
    versioned: &str,
    source: &ConstraintSource,
) -> Result<Policy> {
    let compiled = template::compile(ConstraintTemplate {
        name: source.template.clone(),
        kind: source.kind.clone(),
        rego: source.rego.clone(),
        libs: source.libs.clone(),
        path: path.clone(),
    })?;
    Ok(Policy::constraint(
        name.to_string(),
        path,
        compiled.engine,
        compiled.rule,
        versioned,
        source.clone(),
    ))
}

/// A stored version, compiled.
#[derive(Clone)]
pub struct CompiledVersion {
    pub version: String,
    pub policy: Policy,
    /// Only this policy's settings.
    pub config: Config,
}

/// One policy's rollout as replicas see it.
#[derive(Clone)]
pub struct PolicyRollout {
    pub state: RolloutState,
    /// The version `state.version` names, compiled (absent if its stored source is missing or
    /// does not compile).
    pub current: Option<CompiledVersion>,
    /// The version `state.previous_version` names, compiled.
    pub previous: Option<CompiledVersion>,
}

/// Every policy's rollout.
#[derive(Clone, Default)]
pub struct RolloutView {
    pub policies: BTreeMap<String, PolicyRollout>,
}

/// What runs for one policy in one namespace.
pub(crate) struct Resolved<'a> {
    pub policy: &'a Policy,
    pub parameters: &'a Parameters,
    pub enforcement: Enforcement,
    /// Set when the policy is under a rollout.
    pub rollout: Option<RolloutMark>,
}

impl RolloutView {
    /// The code, parameters and enforcement of `policy` (the local, loaded version, whose
    /// version string is `version`) for a namespace with `labels` in `pool`. `None` when the
    /// policy is not applied there (no parameters for the pool). Without a rollout in `config`
    /// this is the config's own answer. Under a rollout with no state yet (the leader has not
    /// stepped it), the loaded version in dryrun.
    pub(crate) fn resolve<'a>(
        &'a self,
        policy: &'a Policy,
        version: &str,
        config: &'a Config,
        pool: Option<&str>,
        labels: Option<&Labels>,
    ) -> Option<Resolved<'a>> {
        let empty = Labels::new();
        let group = config
            .rollout(&policy.name)
            .and_then(|spec| spec.group_of(labels.unwrap_or(&empty)));
        self.resolve_group(policy, version, config, pool, group)
    }

    /// [`RolloutView::resolve`] for the namespaces of rollout group `group` (an index into the
    /// spec's groups; `None`: the namespaces no group selects), whatever their labels. The
    /// native generator compiles each group with it.
    pub(crate) fn resolve_group<'a>(
        &'a self,
        policy: &'a Policy,
        version: &str,
        config: &'a Config,
        pool: Option<&str>,
        group: Option<usize>,
    ) -> Option<Resolved<'a>> {
        let local = config.effective_policy(&policy.name, pool);
        let Some(spec) = config.rollout(&policy.name) else {
            let local = local?;
            return Some(Resolved {
                policy,
                parameters: local.parameters,
                enforcement: local.enforcement,
                rollout: None,
            });
        };
        let group_name = group
            .and_then(|i| spec.groups.get(i))
            .map_or(String::new(), |g| g.name.clone());
        let Some(rollout) = self.policies.get(&policy.name) else {
            let local = local?;
            return Some(Resolved {
                policy,
                parameters: local.parameters,
                enforcement: Enforcement::Dryrun,
                rollout: Some(RolloutMark {
                    group: group_name,
                    status: None,
                    version: version.to_string(),
                }),
            });
        };
        let state = &rollout.state;
        // The state's groups follow the spec's order (the leader maps them by name).
        let index = group.and_then(|i| {
            let name = &spec.groups[i].name;
            state.groups.iter().position(|g| &g.name == name)
        });
        let status = index.map(|i| state.groups[i].status);
        let final_enforcement = local
            .as_ref()
            .map_or(Enforcement::Dryrun, |l| l.enforcement);
        let applied = enforcement_for(state, index, final_enforcement);
        // The code to run and its parameters: the loaded version's (already looked up), or a
        // stored version's under its own settings.
        let stored = |v: &'a CompiledVersion| {
            v.config
                .effective_policy(&policy.name, pool)
                .map(|s| (&v.policy, v.version.as_str(), s.parameters))
        };
        let (code, code_version, parameters) =
            match (applied.version, &rollout.current, &rollout.previous) {
                (Which::Current, _, _) if state.version == version => {
                    (policy, version, local?.parameters)
                }
                (Which::Previous, _, Some(p)) if p.version == version => {
                    (policy, version, local?.parameters)
                }
                (Which::Current, Some(c), _) => stored(c)?,
                (Which::Previous, _, Some(p)) => stored(p)?,
                // The version the state names cannot be run here: the loaded one, observing only.
                (Which::Current, None, _) | (Which::Previous, _, None) => {
                    return observe_only(policy, version, local?.parameters, group_name, status)
                }
            };
        Some(Resolved {
            policy: code,
            parameters,
            // The stored version's own enforcement never loosens what the state says; the
            // state's answer is already capped by the local final enforcement.
            enforcement: applied.enforcement,
            rollout: Some(RolloutMark {
                group: group_name,
                status,
                version: code_version.to_string(),
            }),
        })
    }
}

fn observe_only<'a>(
    policy: &'a Policy,
    version: &str,
    parameters: &'a Parameters,
    group: String,
    status: Option<GroupStatus>,
) -> Option<Resolved<'a>> {
    Some(Resolved {
        policy,
        parameters,
        enforcement: Enforcement::Dryrun,
        rollout: Some(RolloutMark {
            group,
            status,
            version: version.to_string(),
        }),
    })
}

/// A view shared by decisions.
pub(crate) type SharedView = Arc<RolloutView>;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::template;
    use crate::rollout::machine::GroupState;

    const REGO_V2: &str = "package repos\ninfringement[{\"msg\": \"v2\"}] { input.x }\n";
    const REGO_V1: &str = "package repos\ninfringement[{\"msg\": \"v1\"}] { input.x }\n";

    fn config(enforcement: &str) -> Config {
        Config::parse(
            &format!("policies:\n  repos:\n    enforcement: {enforcement}\n    parameters: {{}}\n    rollout:\n      groups:\n        - {{name: canary, namespaceSelector: {{matchLabels: {{risk: low}}}}}}\n        - {{name: standard, namespaceSelector: {{matchLabels: {{risk: medium}}}}}}\n        - {{name: critical}}\n      minSuccessTime: 10s\n      progressDeadline: 1m\n"),
            "t",
        )
        .unwrap()
    }

    fn policy(rego: &str) -> Policy {
        Policy::compile(&template::from_rego(
            "repos",
            rego.to_string(),
            "repos.rego".into(),
        ))
        .unwrap()
    }

    fn state(version: &str, previous: Option<(&str, Enforcement)>) -> RolloutState {
        let group = |name: &str, status| GroupState::new(name, status, 0, "");
        RolloutState {
            version: version.to_string(),
            previous_version: previous.map(|p| p.0.to_string()),
            previous_enforcement: previous.map(|p| p.1),
            final_enforcement: Enforcement::Deny,
            paused_since: None,
            groups: vec![
                group("canary", GroupStatus::Succeeded),
                group("standard", GroupStatus::Progressing),
                group("critical", GroupStatus::ToApply),
            ],
        }
    }

    fn labels(risk: &str) -> Labels {
        Labels::from([("risk".to_string(), risk.to_string())])
    }

    /// (risk label, enforcement, message the code that runs gives, group)
    fn answers(
        view: &RolloutView,
        loaded: &Policy,
        version: &str,
        config: &Config,
    ) -> Vec<(String, Enforcement, String, String)> {
        ["low", "medium", "high"]
            .iter()
            .map(|risk| {
                let labels = labels(risk);
                let r = view
                    .resolve(loaded, version, config, None, Some(&labels))
                    .unwrap();
                let msg = r
                    .policy
                    .infringements(
                        regorus::Value::from(serde_json::json!({"x": true})),
                        std::time::Duration::from_secs(1),
                    )
                    .unwrap()
                    .join(",");
                (
                    risk.to_string(),
                    r.enforcement,
                    msg,
                    r.rollout.unwrap().group,
                )
            })
            .collect()
    }

    #[test]
    fn each_group_gets_its_version_and_enforcement() {
        let config = config("deny");
        let v2 = policy(REGO_V2);
        let version = v2.version(&config);
        let d = Enforcement::Deny;
        let w = Enforcement::Warn;
        let dry = Enforcement::Dryrun;
        let row = |risk: &str, e, msg: &str, g: &str| {
            (risk.to_string(), e, msg.to_string(), g.to_string())
        };

        // No state yet: observing only, everywhere.
        let empty = RolloutView::default();
        assert!(answers(&empty, &v2, &version, &config)
            .iter()
            .all(|a| a.1 == dry));

        // A new policy: the group not reached yet runs it in dryrun.
        let mut view = RolloutView::default();
        view.policies.insert(
            "repos".into(),
            PolicyRollout {
                state: state(&version, None),
                current: None,
                previous: None,
            },
        );
        assert_eq!(
            answers(&view, &v2, &version, &config),
            vec![
                row("low", d, "v2", "canary"),
                row("medium", w, "v2", "standard"),
                row("high", dry, "v2", "critical")
            ]
        );

        // A changed policy: the group not reached yet stays on the previous version's code at
        // its enforcement.
        let v1 = StoredVersion::of(&policy(REGO_V1), &config);
        let previous = v1.compile("repos").unwrap();
        view.policies.insert(
            "repos".into(),
            PolicyRollout {
                state: state(&version, Some((&v1.version, d))),
                current: None,
                previous: Some(previous.clone()),
            },
        );
        assert_eq!(
            answers(&view, &v2, &version, &config),
            vec![
                row("low", d, "v2", "canary"),
                row("medium", w, "v2", "standard"),
                row("high", d, "v1", "critical")
            ]
        );

        // The local files already hold a newer version the leader has not stepped to: the
        // state's version (stored) runs as the state says.
        let v3 = policy("package repos\ninfringement[{\"msg\": \"v3\"}] { input.x }\n");
        let v3_version = v3.version(&config);
        let stored_v2 = StoredVersion::of(&v2, &config).compile("repos").unwrap();
        view.policies.insert(
            "repos".into(),
            PolicyRollout {
                state: state(&version, Some((&v1.version, d))),
                current: Some(stored_v2),
                previous: Some(previous),
            },
        );
        assert_eq!(
            answers(&view, &v3, &v3_version, &config),
            vec![
                row("low", d, "v2", "canary"),
                row("medium", w, "v2", "standard"),
                row("high", d, "v1", "critical")
            ]
        );

        // A stored version that is missing: observe only, never a stale enforcement.
        view.policies.get_mut("repos").unwrap().current = None;
        assert!(answers(&view, &v3, &v3_version, &config)[..2]
            .iter()
            .all(|a| a.1 == dry));

        // Never stricter than the local final enforcement.
        let warn_config = tests::config("warn");
        view.policies.insert(
            "repos".into(),
            PolicyRollout {
                state: state(&version, None),
                current: None,
                previous: None,
            },
        );
        assert_eq!(answers(&view, &v2, &version, &warn_config)[0].1, w);
    }

    /// A Gatekeeper constraint's stored version compiles as the constraint it was (its
    /// template's package and libs, its match), through the stored JSON, and decides as it does.
    #[test]
    fn a_constraint_version_compiles_as_the_constraint() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../testdata/gatekeeper/allowedrepos");
        let files: Vec<(PathBuf, String)> = ["template.yaml", "constraint.yaml"]
            .iter()
            .map(|f| (dir.join(f), std::fs::read_to_string(dir.join(f)).unwrap()))
            .collect();
        let documents = crate::gatekeeper::read(&files).unwrap();
        let loaded = crate::gatekeeper::compile(&documents)
            .unwrap()
            .policies
            .remove(0);
        let mut config = Config::default();
        crate::gatekeeper::configure(&mut config, &documents.constraints).unwrap();

        let stored = StoredVersion::of(&loaded, &config);
        let text = serde_json::to_string(&stored).unwrap();
        let back: StoredVersion = serde_json::from_str(&text).unwrap();
        assert_eq!(back, stored);
        let compiled = back.compile(&loaded.name).unwrap();
        assert!(compiled.policy.is_constraint());
        assert_eq!(compiled.policy.version(&config), loaded.version(&config));

        let review = |kind: &str, image: &str| {
            serde_json::json!({
                "kind": {"group": "", "version": "v1", "kind": kind},
                "operation": "CREATE",
                "namespace": "a",
                "object": {"kind": kind, "metadata": {"name": "p", "namespace": "a"},
                    "spec": {"containers": [{"name": "c", "image": image}]}}
            })
        };
        let parameters = config.policies[&loaded.name].parameters.clone().unwrap();
        for (kind, image) in [
            ("Pod", "evil.example/x"),
            ("Pod", "registry.k8s.io/pause"),
            ("Deployment", "evil.example/x"),
        ] {
            let r = review(kind, image);
            assert_eq!(
                compiled.policy.applies(true, Some(&r)),
                loaded.applies(true, Some(&r)),
                "{kind} {image}"
            );
            let run = |p: &Policy| {
                let mut input = Value::Object(Map::new());
                input["review"] = r.clone();
                input["parameters"] = Value::Object(parameters.map().clone());
                p.infringements(
                    regorus::Value::from(input),
                    std::time::Duration::from_secs(5),
                )
            };
            assert_eq!(run(&compiled.policy), run(&loaded), "{kind} {image}");
        }
        let denied = review("Pod", "evil.example/x");
        let messages = {
            let mut input = Value::Object(Map::new());
            input["review"] = denied;
            input["parameters"] = Value::Object(parameters.map().clone());
            compiled
                .policy
                .infringements(
                    regorus::Value::from(input),
                    std::time::Duration::from_secs(5),
                )
                .unwrap()
        };
        assert_eq!(messages.len(), 1, "{messages:?}");
    }
}
