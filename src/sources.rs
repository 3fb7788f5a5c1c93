//! Reading the rules and inputs from files: the config, the policies directory, a namespaces
//! file, a manifest or AdmissionReview (or standard input). The parsing itself is the core's.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{bail, Context, Result};
use poolguard_core::config::Config;
use poolguard_core::exceptions::{ExceptionSet, PolicyException};
use poolguard_core::gatekeeper;
use poolguard_core::namespaces::{parse_file_text, NamespaceLabels};
use poolguard_core::placement_policy::{Catalog, NodeFacts, NodePool, PlacementSet};
use poolguard_core::policy::template::{self, Template, TestFile};
use poolguard_core::policy::PolicySet;
use poolguard_core::ruleset::RuleSet;

use crate::cluster::gatekeeper_objects::ClusterDocuments;
use crate::pools::Inventory;

/// The rules of the moment, as the loops that outlive a reload (the audit, the webhook
/// registration) read them: they change when the config or policies are reloaded.
pub type Rules = Arc<dyn Fn() -> Arc<RuleSet> + Send + Sync>;

/// The policies directory used when none is given.
pub const DEFAULT_POLICIES_DIR: &str = "policies";

/// The placement policies' directory inside the policies directory, used when none is given.
pub const PLACEMENT_SUBDIR: &str = "placement";

/// Where the rules come from.
#[derive(Debug, Clone, Default)]
pub struct Sources {
    /// No file: the defaults.
    pub config: Option<PathBuf>,
    /// No directory: `policies/` when it exists, else no policies.
    pub policies_dir: Option<PathBuf>,
    /// The placement (SAT) policies. No directory: `placement/` inside the policies directory
    /// when it exists, else none.
    pub placement_dir: Option<PathBuf>,
    /// Gatekeeper ConstraintTemplates and constraints (`*.yaml`, `*.yml`, `*.json`, several
    /// documents to a file allowed). No directory: none.
    pub gatekeeper_dir: Option<PathBuf>,
    /// Gatekeeper's objects as the cluster holds them (`serve --gatekeeper-from-cluster`),
    /// loaded beside the directory's.
    pub gatekeeper_cluster: Option<ClusterDocuments>,
}

impl Sources {
    /// The policies directory to read, if any.
    pub fn policies_dir(&self) -> Option<PathBuf> {
        match &self.policies_dir {
            Some(dir) => Some(dir.clone()),
            None => Some(PathBuf::from(DEFAULT_POLICIES_DIR)).filter(|d| d.is_dir()),
        }
    }

    /// The placement policies directory to read, if any.
    pub fn placement_dir(&self) -> Option<PathBuf> {
        match &self.placement_dir {
            Some(dir) => Some(dir.clone()),
            None => self
                .policies_dir()
                .map(|d| d.join(PLACEMENT_SUBDIR))
                .filter(|d| d.is_dir()),
        }
    }

    /// What the defaults left out, one warning each: the default policies directory, which is
    /// relative to the working directory, not there (no policies are loaded); or, while the
    /// config has placement policies choose pools, the default placement directory not there.
    pub fn missing_defaults(&self, rules: &RuleSet) -> Vec<String> {
        let mut warnings = Vec::new();
        if self.policies_dir.is_none() && self.policies_dir().is_none() {
            warnings.push(format!("no policies loaded: {}", missing_policies_dir()));
        }
        if self.placement_dir.is_none()
            && self.placement_dir().is_none()
            && rules.config().placement.is_some()
        {
            let dir = self.policies_dir().map_or_else(
                || format!("./{DEFAULT_POLICIES_DIR}/{PLACEMENT_SUBDIR}"),
                |d| d.join(PLACEMENT_SUBDIR).display().to_string(),
            );
            warnings.push(format!(
                "no placement policies loaded, though the config's `placement` section has them choose pools: the default placement policies directory {dir} does not exist; give --placement-policies-dir DIR"
            ));
        }
        warnings
    }

    /// Loads all three, and the Gatekeeper templates and constraints when a directory is given
    /// (their lint warnings logged); a config naming a policy that is not loaded, or leaving
    /// out a declared input, is an error, and so is a directory given that is not there.
    pub fn load(&self) -> Result<RuleSet> {
        let (rules, lints) = self.load_with_lints()?;
        for lint in lints {
            tracing::warn!("{lint}");
        }
        Ok(rules)
    }

    /// [`Sources::load`], with the lint warnings of the Gatekeeper templates (constructs
    /// regorus and OPA may read differently) returned rather than logged.
    pub fn load_with_lints(&self) -> Result<(RuleSet, Vec<String>)> {
        for (flag, dir) in [
            ("--policies-dir", &self.policies_dir),
            ("--placement-policies-dir", &self.placement_dir),
        ] {
            match dir {
                Some(dir) if !dir.exists() => bail!("{flag} {}: no such directory", dir.display()),
                Some(dir) if !dir.is_dir() => bail!("{flag} {}: not a directory", dir.display()),
                _ => {}
            }
        }
        let config = match &self.config {
            Some(path) => load_config(path)?,
            None => Config::default(),
        };
        if self.policies_dir.is_none() && self.policies_dir().is_none() {
            let mut named: Vec<&String> = config.policies.keys().collect();
            for pool in config.pools.values() {
                named.extend(pool.policies.keys());
            }
            named.sort();
            named.dedup();
            if !named.is_empty() {
                let names: Vec<&str> = named.iter().map(|n| n.as_str()).collect();
                bail!(
                    "the config names policies ({}), but {}",
                    names.join(", "),
                    missing_policies_dir()
                );
            }
        }
        let policies = match self.policies_dir() {
            Some(dir) => load_policies(&dir)?,
            None => PolicySet::default(),
        };
        let placement = match self.placement_dir() {
            Some(dir) => load_placement_policies(&dir)?,
            None => PlacementSet::default(),
        };
        let origin = self
            .config
            .as_ref()
            .map_or_else(|| "config".to_string(), |p| p.display().to_string());
        if self.gatekeeper_dir.is_none() && self.gatekeeper_cluster.is_none() {
            return Ok((
                RuleSet::new(config, policies, placement, &origin)?,
                Vec::new(),
            ));
        }
        let files = match &self.gatekeeper_dir {
            Some(dir) => load_gatekeeper_files(dir)?,
            None => Vec::new(),
        };
        // The cluster's objects are not poolguard's: one that does not load is left out.
        let cluster = self
            .gatekeeper_cluster
            .as_ref()
            .map(ClusterDocuments::files)
            .unwrap_or_default();
        let files = gatekeeper::Files {
            strict: &files,
            tolerated: &cluster,
        };
        RuleSet::with_gatekeeper(config, policies, placement, files, &origin)
    }
}

/// Why no policies are loaded when the default directory is not there (it is relative to the
/// working directory).
fn missing_policies_dir() -> String {
    let here =
        std::env::current_dir().map_or_else(|_| ".".to_string(), |d| d.display().to_string());
    format!(
        "the default policies directory ./{DEFAULT_POLICIES_DIR} does not exist in {here}; give --policies-dir DIR"
    )
}

/// Every `*.yaml`, `*.yml` and `*.json` file directly in `dir`, in name order, with its text.
pub fn load_gatekeeper_files(dir: &Path) -> Result<Vec<(PathBuf, String)>> {
    let flag = "--gatekeeper-dir";
    if !dir.is_dir() {
        bail!("{flag} {}: no such directory", dir.display());
    }
    let mut paths: Vec<PathBuf> = std::fs::read_dir(dir)
        .with_context(|| format!("reading {flag} {}", dir.display()))?
        .map(|e| e.map(|e| e.path()))
        .collect::<std::io::Result<_>>()
        .with_context(|| format!("reading {flag} {}", dir.display()))?;
    paths.retain(|p| {
        p.is_file()
            && p.extension()
                .is_some_and(|e| e == "yaml" || e == "yml" || e == "json")
    });
    paths.sort();
    paths
        .into_iter()
        .map(|p| {
            let text =
                std::fs::read_to_string(&p).with_context(|| format!("reading {}", p.display()))?;
            Ok((p, text))
        })
        .collect()
}

pub fn load_config(path: &Path) -> Result<Config> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading config file {}", path.display()))?;
    Config::parse(&text, &path.display().to_string())
}

/// Loads and compiles every placement (SAT) template in `dir`.
pub fn load_placement_policies(dir: &Path) -> Result<PlacementSet> {
    let (templates, _tests) = load_templates(dir)?;
    PlacementSet::compile(&templates)
}

/// Loads and compiles every template in `dir` (`*_test.rego` files are not loaded).
pub fn load_policies(dir: &Path) -> Result<PolicySet> {
    let (templates, _tests) = load_templates(dir)?;
    PolicySet::compile(&templates)
}

/// Everything in a policies directory, sorted by file name: StackL YAML templates and `.rego`
/// files, and the `*_test.rego` files beside them. Other files and hidden entries are ignored.
pub fn load_templates(dir: &Path) -> Result<(Vec<Template>, Vec<TestFile>)> {
    let entries = std::fs::read_dir(dir)
        .with_context(|| format!("reading policies directory {}", dir.display()))?;
    let mut paths = Vec::new();
    for entry in entries {
        let path = entry
            .with_context(|| format!("reading policies directory {}", dir.display()))?
            .path();
        // Kubernetes mounts ConfigMaps with hidden `..data` folders beside the files' symlinks.
        let hidden = path
            .file_name()
            .and_then(|n| n.to_str())
            .is_none_or(|n| n.starts_with('.'));
        if !hidden && path.is_file() {
            paths.push(path);
        }
    }
    paths.sort();
    let mut templates: Vec<Template> = Vec::new();
    let mut tests = Vec::new();
    for path in paths {
        let file_name = path
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default();
        let text = || {
            std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))
        };
        let template = if file_name.ends_with("_test.rego") {
            tests.push(TestFile {
                rego: text()?,
                path,
            });
            continue;
        } else if let Some(stem) = file_name.strip_suffix(".rego") {
            template::from_rego(stem, text()?, path.clone())
        } else if file_name.ends_with(".yaml") || file_name.ends_with(".yml") {
            template::from_yaml(&text()?, path.clone())?
        } else {
            continue;
        };
        if let Some(other) = templates.iter().find(|t| t.name == template.name) {
            bail!(
                "{}: policy `{}` is already defined by {}",
                path.display(),
                template.name,
                other.path.display()
            );
        }
        templates.push(template);
    }
    Ok((templates, tests))
}

pub fn load_namespaces(path: &Path) -> Result<NamespaceLabels> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading namespaces file {}", path.display()))?;
    parse_file_text(&text, &path.display().to_string())
}

/// The nodes' facts and Karpenter NodePools (`karpenter.sh/v1`) in a file (`kubectl get
/// nodes,nodepools -o yaml|json`: a List, or several documents, of either kind), with the
/// instance-type catalog `catalog` (`--instance-types-file`) for what the NodePools launch.
pub fn load_inventory(path: &Path, catalog: Option<&Path>) -> Result<Inventory> {
    let origin = path.display().to_string();
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading nodes file {origin}"))?;
    let mut inventory = Inventory {
        catalog: catalog.map(load_catalog).transpose()?.map(Arc::new),
        ..Inventory::default()
    };
    for (i, doc) in poolguard_core::documents::parse(&text, &origin)?
        .iter()
        .enumerate()
    {
        let at = format!("{origin}: document {}", i + 1);
        let items = match doc["kind"].as_str() {
            Some("Node" | "NodePool") => std::slice::from_ref(doc),
            Some("List" | "NodeList" | "NodePoolList") => {
                doc["items"].as_array().map_or(&[][..], Vec::as_slice)
            }
            _ => bail!(
                "{at}: expected a Node, a karpenter.sh/v1 NodePool or a v1 List of them, found {}",
                found(doc)
            ),
        };
        for (j, item) in items.iter().enumerate() {
            let kind = item["kind"].as_str();
            let api_version = item["apiVersion"].as_str();
            match (kind, api_version) {
                (Some("NodePool"), Some("karpenter.sh/v1")) => inventory.nodepools.push(
                    NodePool::from_object(item).map_err(|e| anyhow::anyhow!("{at}: {e}"))?,
                ),
                (Some("NodePool"), other) => bail!(
                    "{at}: items[{j}]: a NodePool of apiVersion {}: only karpenter.sh/v1 NodePools are read",
                    other.unwrap_or("(none)")
                ),
                (None | Some("Node"), _) if item.is_object() => inventory.nodes.push(
                    NodeFacts::from_node(item).map_err(|e| anyhow::anyhow!("{origin}: {e}"))?,
                ),
                _ => bail!(
                    "{at}: items[{j}]: expected a Node or a NodePool, found {}",
                    found(item)
                ),
            }
        }
    }
    Ok(inventory)
}

/// The PolicyExceptions of the files in `dir` (`*.yaml`, `*.yml`, `*.json`; several documents,
/// or a List, to a file), each with where it was read (`file: document N`). One that does not
/// read (no ticket, no expiry, …) is an error naming it and the file.
pub fn read_exceptions(dir: &Path) -> Result<Vec<(String, PolicyException)>> {
    let entries = std::fs::read_dir(dir).with_context(|| {
        format!(
            "--exceptions-dir {}: cannot read the directory",
            dir.display()
        )
    })?;
    let mut files: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.is_file()
                && p.extension()
                    .is_some_and(|e| e == "yaml" || e == "yml" || e == "json")
        })
        .collect();
    files.sort();
    let mut read = Vec::new();
    for path in files {
        let origin = path.display().to_string();
        let text = std::fs::read_to_string(&path).with_context(|| format!("reading {origin}"))?;
        for (i, doc) in poolguard_core::documents::parse(&text, &origin)?
            .iter()
            .enumerate()
        {
            let at = format!("{origin}: document {}", i + 1);
            let items = match doc["kind"].as_str() {
                Some("List" | "PolicyExceptionList") => {
                    doc["items"].as_array().map_or(&[][..], Vec::as_slice)
                }
                _ => std::slice::from_ref(doc),
            };
            for item in items {
                let exception =
                    PolicyException::from_object(item).map_err(|e| anyhow::anyhow!("{at}: {e}"))?;
                read.push((at.clone(), exception));
            }
        }
    }
    Ok(read)
}

/// The PolicyExceptions of `dir` ([`read_exceptions`]), checked as the validating webhook checks
/// one being written, at `now`: one that would be refused there (too long, in a namespace the
/// config does not name, naming a policy `rules` has not loaded) is an error naming it and the
/// file. One that has expired matches nothing, and a warning says so.
pub fn load_exceptions(
    dir: &Path,
    rules: &RuleSet,
    now: i64,
) -> Result<(ExceptionSet, Vec<String>)> {
    let mut read = Vec::new();
    let mut warnings = Vec::new();
    for (at, exception) in read_exceptions(dir)? {
        exception
            .admissible(rules.config(), &|p| rules.knows(p), now)
            .map_err(|e| anyhow::anyhow!("{at}: {e}"))?;
        warnings.extend(expired(&at, &exception, now));
        read.push(exception);
    }
    let (set, left_out) = ExceptionSet::new(read, rules.config(), &|p| rules.knows(p), now);
    warnings.extend(left_out);
    Ok((set, warnings))
}

/// The warning for an exception read at `at` that has expired by `now`.
pub fn expired(at: &str, exception: &PolicyException, now: i64) -> Option<String> {
    (!exception.live(now)).then(|| {
        format!(
            "{at}: PolicyException {}/{} expired at {}; it matches nothing",
            exception.namespace, exception.name, exception.expires_text
        )
    })
}

/// An instance-type catalog, in the format of Karpenter's kwok provider (a JSON array of
/// instance types with `name`, `architecture`, `operatingSystems`, `resources`, `offerings`).
pub fn load_catalog(path: &Path) -> Result<Catalog> {
    let origin = path.display().to_string();
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading instance types file {origin}"))?;
    Catalog::from_json(&text, &origin).map_err(|e| anyhow::anyhow!("{e}"))
}

/// What a document that is not the object expected is, for an error.
fn found(doc: &serde_json::Value) -> String {
    use serde_json::Value;
    match doc {
        Value::Object(o) => match o.get("kind") {
            Some(Value::String(kind)) => format!("kind {kind}"),
            Some(_) => "an object whose `kind` is not a string".to_string(),
            None => "an object without `kind`".to_string(),
        },
        Value::Array(_) => "a sequence (a list of items rather than an object)".to_string(),
        Value::String(_) => "a string".to_string(),
        Value::Number(_) => "a number".to_string(),
        Value::Bool(_) => "a boolean".to_string(),
        Value::Null => "null".to_string(),
    }
}

/// Reads `path`, or standard input for `-`.
pub fn read_input(path: &str) -> Result<String> {
    if path == "-" {
        let mut text = String::new();
        std::io::Read::read_to_string(&mut std::io::stdin(), &mut text)
            .context("reading standard input")?;
        Ok(text)
    } else {
        std::fs::read_to_string(path).with_context(|| format!("reading {path}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn load_templates_sorts_kinds_and_rejects_duplicates() {
        let dir = tempfile::tempdir().unwrap();
        let write = |name: &str, text: &str| std::fs::write(dir.path().join(name), text).unwrap();
        write("b.rego", "package b\n");
        write("a.yaml", "name: a\npolicy: |\n  package a\n");
        write("a_test.rego", "package a_test\n");
        write("README.md", "not a policy");
        write(".hidden.rego", "package hidden\n");
        let (templates, tests) = load_templates(dir.path()).unwrap();
        let names: Vec<_> = templates.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(names, ["a", "b"]);
        assert_eq!(tests.len(), 1);

        write("b.yaml", "name: b\npolicy: |\n  package b\n");
        let err = load_templates(dir.path()).unwrap_err().to_string();
        assert!(err.contains("already defined"), "{err}");
    }

    #[test]
    fn nodes_file_errors_say_what_was_found() {
        let dir = tempfile::tempdir().unwrap();
        for (text, found) in [
            (
                "metadata: {name: a}\n",
                "document 1: expected a Node, a karpenter.sh/v1 NodePool or a v1 List of them, found an object without `kind`",
            ),
            ("kind: Pod\n", "found kind Pod"),
            ("- kind: Node\n  metadata: {name: a}\n", "found a sequence"),
            (
                "kind: List\nitems:\n- kind: Pod\n",
                "document 1: items[0]: expected a Node or a NodePool, found kind Pod",
            ),
            (
                "kind: List\nitems:\n- just text\n",
                "items[0]: expected a Node or a NodePool, found a string",
            ),
            (
                "kind: List\nitems:\n- {apiVersion: karpenter.sh/v1beta1, kind: NodePool, metadata: {name: a}}\n",
                "items[0]: a NodePool of apiVersion karpenter.sh/v1beta1: only karpenter.sh/v1 NodePools are read",
            ),
            (
                "apiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata: {name: gpu}\nspec: {template: {spec: {requirements: [{key: a, operator: Maybe}]}}}\n",
                "document 1: NodePool \"gpu\": spec.template.spec.requirements[0].operator \"Maybe\" is not one of",
            ),
        ] {
            let path = dir.path().join("nodes.yaml");
            std::fs::write(&path, text).unwrap();
            let err = load_inventory(&path, None).err().unwrap().to_string();
            assert!(
                err.contains("nodes.yaml: ") && err.contains(found),
                "{text:?}: {err}"
            );
        }
    }

    #[test]
    fn a_nodes_file_holds_nodes_and_nodepools_and_the_catalog_says_what_they_launch() {
        let dir = tempfile::tempdir().unwrap();
        let nodes = dir.path().join("nodes.yaml");
        std::fs::write(
            &nodes,
            "apiVersion: v1\nkind: List\nitems:\n- {apiVersion: v1, kind: Node, metadata: {name: n1, labels: {karpenter.sh/nodepool: general}}, status: {allocatable: {cpu: '2'}, conditions: [{type: Ready, status: 'True'}]}}\n---\napiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata: {name: big}\nspec: {template: {spec: {requirements: [{key: node.kubernetes.io/instance-type, operator: In, values: [large]}]}}}\n",
        )
        .unwrap();
        let catalog = dir.path().join("types.json");
        std::fs::write(
            &catalog,
            r#"[{"name": "large", "architecture": "amd64", "operatingSystems": ["linux"], "resources": {"cpu": "16", "memory": "64Gi"}, "offerings": [{"Price": 1, "Available": true, "Requirements": [{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]}]}]}]"#,
        )
        .unwrap();
        let config = Config::parse("nodeSelectorKey: karpenter.sh/nodepool\n", "t").unwrap();
        let inventory = load_inventory(&nodes, Some(&catalog)).unwrap();
        assert_eq!(inventory.nodes.len(), 1);
        assert_eq!(inventory.nodepools.len(), 1);
        let (pools, problems) = inventory.pools(&config);
        assert!(problems.is_empty(), "{problems:?}");
        let names: Vec<&str> = pools.facts().iter().map(|p| p.name.as_str()).collect();
        assert_eq!(names, ["big", "general"]);
        let big = &pools.facts()[0];
        assert_eq!((big.nodes, big.launchable.len()), (0, 1));
        assert!(big.takes_new_pods());
        // Without the catalog, what big launches is unknown: said, never guessed.
        let (pools, problems) = load_inventory(&nodes, None).unwrap().pools(&config);
        assert!(!pools.facts()[0].takes_new_pods());
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(
            problems[0].contains("NodePool \"big\": no instance-type catalog is given"),
            "{problems:?}"
        );
        // A catalog that is not one is refused, naming the file.
        std::fs::write(&catalog, "{}").unwrap();
        let err = load_inventory(&nodes, Some(&catalog))
            .err()
            .unwrap()
            .to_string();
        assert!(err.contains("types.json"), "{err}");
    }

    #[test]
    fn missing_policies_dir_is_an_error() {
        let err = load_templates(Path::new("/nonexistent/policies")).unwrap_err();
        assert!(err.to_string().contains("policies directory"), "{err}");
    }
}
