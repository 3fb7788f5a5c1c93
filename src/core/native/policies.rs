//! The shipped SIT policies (`allowedrepositories`, `latesttag`) as ValidatingAdmissionPolicies,
//! with the webhook's reading of pod specs: an invalid image reference, an image ID or too many
//! images is refused before any policy runs. One policy object per parameter set, one binding
//! per group of namespaces (cluster-wide, or a pool with its own settings), whose
//! `validationActions` say the enforcement: deny `[Deny]`, warn `[Warn]`, dryrun `[Audit]`.

use serde_json::{json, Map, Value};

use super::cel::{
    all_of, and, any_of, bool, concat, cond, ident, int, list, map, not, or, size, str, string,
    var, Expr,
};
use super::image_cel;
use super::object::{
    metadata, validation, variable, Native, Options, Requests, Skipped, API_VERSION,
};
use super::{selectors, workloads};
use crate::config::dependencies::Compliance;
use crate::config::rollout::RolloutSpec;
use crate::config::{Config, Enforcement};
use crate::policy::engine::Policy;
use crate::rollout::machine::GroupStatus;
use crate::ruleset::RuleSet;

/// Name of the policy refusing pod specs the webhook cannot read.
pub(crate) const IMAGES: &str = "poolguard-images";

pub fn generate(rules: &RuleSet, options: &Options, native: &mut Native) {
    let config = &rules.config;
    images_policy(config, options, native);
    let mut checks = Vec::new();
    for name in rules.policies.names() {
        if let Some(why) = super::object::excepted(rules, name) {
            skip(native, name, &why);
            continue;
        }
        let Some(policy) = rules.policies.get(name).filter(|p| is_shipped(name, p)) else {
            skip(
                native,
                name,
                "custom Rego: only the shipped allowedrepositories and latesttag are compiled",
            );
            continue;
        };
        let cells = match config.rollout(name) {
            Some(spec) => rollout_cells(rules, policy, spec, options, native),
            None => dependency_of(rules, name)
                .and_then(|dependency| plain_cells(name, dependency, config, options)),
        };
        match cells.and_then(|cells| compile(name, cells)) {
            Ok(compiled) => checks.extend(compiled),
            Err(why) => skip(native, name, why),
        }
    }
    emit(checks, config, native);
}

/// The one dependency a policy may have here: another shipped policy without dependencies or
/// rollout of its own, loaded unchanged. `Err`: why the webhook keeps the policy.
fn dependency_of<'r>(
    rules: &'r RuleSet,
    name: &str,
) -> Result<Option<(&'r str, Compliance)>, &'static str> {
    let config = &rules.config;
    let deps = match config
        .policies
        .get(name)
        .and_then(|s| s.dependencies.as_ref())
    {
        None => return Ok(None),
        Some(deps) if deps.is_empty() => return Ok(None),
        Some(deps) => deps,
    };
    let [dep] = deps.as_slice() else {
        return Err("it has several dependencies, which the webhook resolves per object");
    };
    let target = config.policies.get(&dep.policy);
    let compiled = rules
        .policies
        .get(&dep.policy)
        .is_some_and(|p| is_shipped(&dep.policy, p))
        && super::object::excepted(rules, &dep.policy).is_none()
        && target.is_none_or(|s| {
            s.rollout.is_none() && s.dependencies.as_ref().is_none_or(Vec::is_empty)
        });
    if !compiled {
        return Err("it depends on a policy (or placement) that stays on the webhook");
    }
    Ok(Some((dep.policy.as_str(), dep.compliance)))
}

/// Whether `policy`, loaded as `name`, runs the shipped Rego of that name (a loaded policy of
/// a shipped name whose Rego differs is custom and stays on the webhook).
fn is_shipped(name: &str, policy: &Policy) -> bool {
    policy.name == name && policy.shipped().is_some()
}

fn skip(native: &mut Native, policy: &str, why: &str) {
    native.skipped.push(Skipped {
        what: format!("policy {policy}"),
        why: why.into(),
        requests: Requests::Pods,
    });
}

/// One group of namespaces a shipped policy is compiled for, with what the webhook decides
/// there.
struct Cell<'r> {
    /// What follows `poolguard-<policy>` in the name of its policy and binding: the pool's
    /// (`.pool-<pool>`) and the rollout group's (`.group-<group>`, `.ungrouped`), if any.
    suffix: String,
    /// The pool whose own settings apply, for the policy's annotation.
    pool: Option<&'r str>,
    /// The binding's namespace selector.
    namespaces: Vec<Value>,
    /// Over `namespaceObject`, what must also hold: what a namespace selector cannot say (a
    /// rollout group takes only namespaces no group before it selects). `true` for most cells.
    in_group: Expr,
    parameters: &'r Map<String, Value>,
    enforcement: Enforcement,
    /// The policy it depends on, with the parameters that policy has in the cell.
    dependency: Option<(&'r str, Compliance, &'r Map<String, Value>)>,
}

/// The namespaces of each pool in `own` (pools with settings of their own) and the rest:
/// (object name suffix, pool, requirements).
fn pool_groups<'r>(
    config: &Config,
    options: &Options,
    own: &[&'r str],
) -> Vec<(String, Option<&'r str>, Vec<Value>)> {
    let label = &config.namespace_label;
    let mut rest = selectors::validated(config, options);
    if !own.is_empty() {
        rest.push(json!({"key": label, "operator": "NotIn", "values": own}));
    }
    let mut groups = vec![(String::new(), None, rest)];
    for (i, pool) in own.iter().enumerate() {
        let mut only = selectors::validated(config, options);
        only.push(json!({"key": label, "operator": "In", "values": [pool]}));
        groups.push((format!(".pool-{}", name_part(pool, i)), Some(*pool), only));
    }
    groups
}

/// A policy without a rollout: a cell for the namespaces of each pool with its own settings
/// (for the policy or the policy it depends on), and one for the rest.
fn plain_cells<'r>(
    name: &str,
    dependency: Option<(&'r str, Compliance)>,
    config: &'r Config,
    options: &Options,
) -> Result<Vec<Cell<'r>>, &'static str> {
    let own: Vec<&str> = config
        .pools
        .iter()
        .filter(|(_, p)| {
            p.policies.contains_key(name)
                || dependency.is_some_and(|(dep, _)| p.policies.contains_key(dep))
        })
        .map(|(pool, _)| pool.as_str())
        .collect();
    let mut cells = Vec::new();
    for (suffix, pool, namespaces) in pool_groups(config, options, &own) {
        let Some(effective) = config.effective_policy(name, pool) else {
            continue; // no parameters at any level: not applied there
        };
        // A dependency that does not apply in the group (no parameters) is unmet: the policy
        // is Pending there, never enforced.
        let dependency = match dependency {
            None => None,
            Some((dep, compliance)) => match config.effective_policy(dep, pool) {
                None => continue,
                Some(d) => Some((dep, compliance, d.parameters.map())),
            },
        };
        cells.push(Cell {
            suffix,
            pool,
            namespaces,
            in_group: bool(true),
            parameters: effective.parameters.map(),
            enforcement: effective.enforcement,
            dependency,
        });
    }
    Ok(cells)
}

/// A policy under a progressive rollout: a cell for each rollout group (and the namespaces no
/// group selects) in each pool group, with the version and enforcement the webhook gives that
/// group now ([`crate::rollout::view::RolloutView::resolve_group`], the webhook's own answer).
/// While a group's state needs what only the webhook counts at admission (would-be denials of
/// a Progressing group, denials under `maxDenialsPerMinute`), the webhook stays on as well.
fn rollout_cells<'r>(
    rules: &'r RuleSet,
    policy: &'r Policy,
    spec: &'r RolloutSpec,
    options: &Options,
    native: &mut Native,
) -> Result<Vec<Cell<'r>>, &'static str> {
    let (config, name) = (&rules.config, policy.name.as_str());
    if config
        .policies
        .get(name)
        .and_then(|s| s.dependencies.as_ref())
        .is_some_and(|d| !d.is_empty())
    {
        return Err("it is under a progressive rollout and has dependencies, which the webhook resolves per object");
    }
    let Some(rollout) = rules.rollouts.policies.get(name) else {
        return Err("its progressive rollout has no state here yet (the audit's leader steps it; `poolguard native` outside the cluster does not read it)");
    };
    // Pools with settings of their own, here or in the versions the rollout keeps.
    let mut own: Vec<&str> = Vec::new();
    let versions = [&rollout.current, &rollout.previous];
    let pools = config.pools.iter().chain(
        versions
            .into_iter()
            .flatten()
            .flat_map(|v| v.config.pools.iter()),
    );
    for (pool, settings) in pools {
        if settings.policies.contains_key(name) && !own.contains(&pool.as_str()) {
            own.push(pool);
        }
    }
    // The rollout's groups, and the namespaces none selects when the last group has a selector.
    let mut buckets: Vec<(String, Option<usize>, Vec<Value>)> = spec
        .groups
        .iter()
        .enumerate()
        .map(|(i, g)| {
            let requirements = g
                .namespace_selector
                .as_ref()
                .map_or_else(Vec::new, selectors::requirements_of);
            (
                format!(".group-{}", name_part(&g.name, i)),
                Some(i),
                requirements,
            )
        })
        .collect();
    if spec
        .groups
        .last()
        .is_some_and(|g| g.namespace_selector.is_some())
    {
        buckets.push((".ungrouped".into(), None, Vec::new()));
    }
    let version = rules.policies.version(name);
    let mut cells = Vec::new();
    for (pool_suffix, pool, pool_namespaces) in pool_groups(config, options, &own) {
        for (group_suffix, group, requirements) in &buckets {
            let Some(resolved) = rules
                .rollouts
                .resolve_group(policy, version, config, pool, *group)
            else {
                continue; // not applied there
            };
            if !is_shipped(name, resolved.policy) {
                return Err(
                    "a version its rollout keeps is custom Rego, which stays on the webhook",
                );
            }
            // Namespaces an earlier group selects belong to that group.
            let before = group.unwrap_or(spec.groups.len());
            let earlier = spec.groups[..before]
                .iter()
                .filter_map(|g| g.namespace_selector.as_ref())
                .map(|s| not(selectors::selects_cel(s)));
            let mut namespaces = pool_namespaces.clone();
            namespaces.extend(requirements.iter().cloned());
            cells.push(Cell {
                suffix: format!("{pool_suffix}{group_suffix}"),
                pool,
                namespaces,
                in_group: all_of(earlier),
                parameters: resolved.parameters.map(),
                enforcement: resolved.enforcement,
                dependency: None,
            });
        }
    }
    if let Some(state) = rules.rollouts.policies.get(name).map(|r| &r.state) {
        let counted = state.groups.iter().find(|g| {
            g.status == GroupStatus::Progressing
                || (g.status == GroupStatus::Succeeded && spec.max_denials_per_minute.is_some())
        });
        if let Some(g) = counted {
            native.skipped.push(Skipped {
                what: format!("the admission counts of policy {name}'s rollout (group {} is {:?})", g.name, g.status),
                why: "a Progressing group's would-be denials and, under maxDenialsPerMinute, an enforcing group's denials are counted by the webhook, so it stays on beside the native objects".into(),
                requests: Requests::Pods,
            });
        }
    }
    Ok(cells)
}

/// One shipped policy's check in one cell: a validation of the cell's ValidatingAdmissionPolicy.
struct CellCheck<'r> {
    cell: Cell<'r>,
    check: Check,
    /// What must hold for the check to run (its dependency met), reading `refs` and the
    /// dependency's `passes_<name>` variable.
    condition: Option<Expr>,
    /// The same of the old object (on UPDATE), reading `oldRefs` and `oldPasses_<name>`: an old
    /// finding excuses a new one only where the check ran on the old object too.
    old_condition: Option<Expr>,
    /// The dependency's name and fast path (`Check::passes`), for its `passes_<name>` variable.
    dependency_passes: Option<(String, Expr)>,
}

/// Each cell's check. `Err` (nothing generated for the policy) when one cell's parameters, or
/// its dependency's, cannot be compiled.
fn compile<'r>(name: &str, cells: Vec<Cell<'r>>) -> Result<Vec<CellCheck<'r>>, &'static str> {
    let mut out = Vec::new();
    for cell in cells {
        let mut check =
            Check::of(name, cell.parameters).ok_or("its parameters are not lists of strings")?;
        let (condition, old_condition, dependency_passes) = match cell.dependency {
            None => (None, None, None),
            Some((dep, compliance, parameters)) => {
                let dep_check = Check::of(dep, parameters)
                    .ok_or("the parameters of its dependency are not lists of strings")?;
                let met = |refs: &str, passes: String| {
                    let infringed = and(
                        not(var(&passes)),
                        var(refs).exists("i", dep_check.infringes.clone()),
                    );
                    match compliance {
                        Compliance::Compliant => not(infringed),
                        Compliance::NonCompliant => infringed,
                    }
                };
                let condition = met("refs", passes_variable(dep));
                let old_condition = met("oldRefs", old_passes_variable(dep));
                // The condition reads the dependency's fields from the same `refs`.
                for field in dep_check.fields {
                    if !check.fields.iter().any(|(name, _)| *name == field.0) {
                        check.fields.push(field);
                    }
                }
                (
                    Some(condition),
                    Some(old_condition),
                    Some((dep.to_owned(), dep_check.passes)),
                )
            }
        };
        out.push(CellCheck {
            cell,
            check,
            condition,
            old_condition,
            dependency_passes,
        });
    }
    Ok(out)
}

/// One ValidatingAdmissionPolicy and binding per group of namespaces and enforcement (cells
/// with the same namespace selector, `inGroup` condition and enforcement), holding a validation
/// for each policy of that group: the images and their parts are worked out once for all of
/// them. It is named after its policies and the first cell's suffix:
/// `poolguard-<policy>[-and-<policy>…][.pool-…][.group-…]`.
fn emit(checks: Vec<CellCheck>, config: &Config, native: &mut Native) {
    let mut groups: Vec<Vec<CellCheck>> = Vec::new();
    for check in checks {
        let key = |c: &CellCheck| {
            (
                c.cell.namespaces.clone(),
                c.cell.in_group.clone(),
                c.cell.enforcement,
            )
        };
        match groups.iter_mut().find(|g| key(&g[0]) == key(&check)) {
            Some(group) => group.push(check),
            None => groups.push(vec![check]),
        }
    }
    for group in groups {
        let first = &group[0];
        let names: Vec<&str> = group.iter().map(|c| c.check.policy.as_str()).collect();
        let object_name = format!("poolguard-{}{}", names.join("-and-"), first.cell.suffix);
        // A policy none of whose validations can refuse anything (every namespace it would
        // decide belongs to an earlier rollout group) is left out with its binding.
        let Some(mut policy) = policy_object(&object_name, &group, config) else {
            continue;
        };
        if let Some(pool) = first.cell.pool {
            policy["metadata"]["annotations"] = json!({"poolguard.io/pool": pool});
        }
        native.objects.push(policy);
        let actions = match first.cell.enforcement {
            Enforcement::Deny => "Deny",
            Enforcement::Warn => "Warn",
            Enforcement::Dryrun => "Audit",
        };
        native.objects.push(json!({
            "apiVersion": API_VERSION,
            "kind": "ValidatingAdmissionPolicyBinding",
            "metadata": metadata(&object_name),
            "spec": {"policyName": object_name, "validationActions": [actions],
                "matchResources": selectors::match_resources(first.cell.namespaces.clone())},
        }));
    }
}

/// `text` as part of an object name when it can be one (lowercase letters, digits, `-`, at
/// most 40 characters), else `index`.
fn name_part(text: &str, index: usize) -> String {
    if is_name_part(text) {
        text.to_string()
    } else {
        index.to_string()
    }
}

/// Whether `pool` can be part of an object name (lowercase letters, digits, `-`, `.`).
fn is_name_part(pool: &str) -> bool {
    pool.len() <= 40
        && pool
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && pool.starts_with(|c: char| c.is_ascii_alphanumeric())
        && pool.ends_with(|c: char| c.is_ascii_alphanumeric())
}

/// A policy's check of one image `i` of the `refs` variable: `{'type', 'name', 'image'}` and
/// the [`Check::fields`] it reads, each worked out once per image.
struct Check {
    policy: String,
    /// What the check (and a dependency's condition) reads of a reference beyond its text:
    /// (field, its expression over `i.image`).
    fields: Vec<(&'static str, Expr)>,
    /// Whether the image infringes.
    infringes: Expr,
    /// Over the raw text `t` of an image (an item of `texts`): a cheap condition that, for a
    /// readable reference, implies the check does not infringe ([`image_cel`]'s fast paths), so
    /// the normalised parts are worked out only for objects that may infringe. `false` when
    /// there is none.
    passes: Expr,
    /// The infringement's message (after `<type> "<name>": `).
    message: Expr,
}

impl Check {
    fn of(name: &str, params: &Map<String, Value>) -> Option<Check> {
        let i = ident("i");
        let part = |field: &str| i.clone().field(field);
        let r = part("image");
        let repository = ("repository", image_cel::repository(&r));
        match name {
            "allowedrepositories" => {
                let allowed = prefixes(params.get("repositories"))?;
                let text = serde_json::to_string(params.get("repositories")?).ok()?;
                Some(Check {
                    policy: name.into(),
                    fields: vec![repository],
                    infringes: not(matches_any(&allowed, &part("repository"))),
                    passes: image_cel::under_any_raw(&allowed, &ident("t")),
                    message: concat([
                        str("image \""),
                        part("image"),
                        str("\" (repository \""),
                        part("repository"),
                        str("\") is not from an allowed repository "),
                        str(text),
                    ]),
                })
            }
            "latesttag" => {
                let exempt = match params.get("exemptRepositories") {
                    None => Vec::new(),
                    some => prefixes(some)?,
                };
                let mut fields = vec![
                    ("tag", image_cel::tag(&r)),
                    // A CEL map's values share one type: '@' when there is a digest, else ''.
                    ("digest", cond(image_cel::has_digest(&r), str("@"), str(""))),
                ];
                if !exempt.is_empty() {
                    fields.push(repository);
                }
                let tag = || part("tag");
                Some(Check {
                    policy: name.into(),
                    fields,
                    infringes: all_of([
                        part("digest").eq(str("")),
                        or(tag().eq(str("")), tag().eq(str("latest"))),
                        not(matches_any(&exempt, &part("repository"))),
                    ]),
                    passes: image_cel::pinned_raw(&ident("t")),
                    message: concat([
                        str("image \""),
                        part("image"),
                        str("\" "),
                        cond(
                            tag().eq(str("")),
                            str("has no tag, so the runtime pulls :latest"),
                            str("uses the :latest tag"),
                        ),
                        str("; pin a version tag or a digest"),
                    ]),
                })
            }
            _ => None,
        }
    }
}

/// The entries of a list of repository prefixes, as the Rego reads them: trailing `/` removed,
/// empty entries dropped. `None` when it is not a list of strings.
fn prefixes(value: Option<&Value>) -> Option<Vec<String>> {
    let read = crate::policy::shipped::prefixes(value?)?;
    Some(read.into_iter().map(str::to_owned).collect())
}

/// Whether `repository` is one of `prefixes` or lies under one (whole path components).
fn matches_any(prefixes: &[String], repository: &Expr) -> Expr {
    if prefixes.is_empty() {
        return bool(false);
    }
    let p = ident("p");
    list(prefixes.iter().map(|prefix| str(prefix.as_str()))).exists(
        "p",
        or(
            repository.clone().eq(p.clone()),
            repository.clone().method("startsWith", [p.add(str("/"))]),
        ),
    )
}

/// The variable that holds whether every image passes `policy`'s fast path.
fn passes_variable(policy: &str) -> String {
    format!("passes_{policy}")
}

/// The same of the old object's images (on UPDATE).
fn old_passes_variable(policy: &str) -> String {
    format!("oldPasses_{policy}")
}

/// The most images a pod spec may pull, as a CEL integer.
fn max_images(config: &Config) -> Expr {
    int(i64::try_from(config.limits.max_images_per_pod).unwrap_or(i64::MAX))
}

/// Every image of the texts in variable `texts` readable and at most the limit (else the images
/// policy refuses the object and no SIT policy runs, as in the webhook; an old object that is
/// not readable excuses nothing).
fn readable(config: &Config, texts: &str) -> Expr {
    let t = ident("t");
    and(
        size(var(texts)).le(max_images(config)),
        var(texts).all(
            "t",
            and(image_cel::is_valid(&t), not(image_cel::is_image_id(&t))),
        ),
    )
}

/// What a condition of a check reads: the condition itself when it is a constant (`true` when
/// there is none), else the variable `name`, added to `variables`.
fn condition_variable(variables: &mut Vec<Value>, name: &str, condition: Option<&Expr>) -> Expr {
    match condition {
        None => bool(true),
        Some(constant) if constant.as_bool().is_some() => constant.clone(),
        Some(condition) => {
            variables.push(variable(name, condition));
            var(name)
        }
    }
}

/// The ValidatingAdmissionPolicy of one group of cells ([`emit`]): the pod spec, its images,
/// whether they are readable and each image's parts that any check reads, worked out once; then
/// for each policy whether its dependency is met, what infringes and what is found, and its
/// validation. `None` when no validation can refuse anything.
fn policy_object(object_name: &str, group: &[CellCheck], config: &Config) -> Option<Value> {
    let first = &group[0].cell;
    let deny = first.enforcement == Enforcement::Deny;
    // Each image's normalised parts, worked out once (the checks read them per prefix).
    let mut fields: Vec<&(&'static str, Expr)> = Vec::new();
    for c in group {
        for field in &c.check.fields {
            if !fields.iter().any(|f| f.0 == field.0) {
                fields.push(field);
            }
        }
    }
    let i = ident("i");
    let refs = |images: &str| {
        let given = ["type", "name", "image"].map(|f| (str(f), i.clone().field(f)));
        let parts = fields.iter().map(|(name, cel)| (str(*name), cel.clone()));
        var(images).map("i", map(given.into_iter().chain(parts)))
    };
    // The old object's (on UPDATE only: a variable is evaluated when first read).
    let old_spec = workloads::spec("oldObject");
    let mut variables = vec![
        variable("spec", &workloads::spec("object")),
        variable("images", &workloads::images(&var("spec"))),
        variable("texts", &workloads::image_texts(&var("spec"))),
        variable("oldImages", &workloads::images(&old_spec)),
        variable("oldTexts", &workloads::image_texts(&old_spec)),
        variable("readable", &readable(config, "texts")),
        variable("oldReadable", &readable(config, "oldTexts")),
        variable("refs", &refs("images")),
        variable("oldRefs", &refs("oldImages")),
    ];
    // Outside the cell's namespaces (another rollout group's), nothing is refused.
    let outside_group = match first.in_group.as_bool() {
        Some(in_group) => bool(!in_group),
        None => {
            variables.insert(0, variable("inGroup", &first.in_group));
            not(var("inGroup"))
        }
    };
    // Whether every image passes a check's fast path, once per policy: its own `infringing` and
    // a dependent's condition both read it. One fast path per name: a dependency never has a
    // rollout (`dependency_of`), so its parameters in a dependent's cell are those of its own
    // cell for the same namespaces (the pool's effective settings).
    let mut passes: Vec<(&str, &Expr)> = Vec::new();
    for c in group {
        let own = (c.check.policy.as_str(), &c.check.passes);
        let dep = c
            .dependency_passes
            .as_ref()
            .map(|(name, cel)| (name.as_str(), cel));
        for (name, cel) in std::iter::once(own).chain(dep) {
            if !passes.iter().any(|(known, _)| *known == name) {
                passes.push((name, cel));
            }
        }
    }
    variables.extend(passes.iter().map(|(name, cel)| {
        variable(
            &passes_variable(name),
            &var("texts").all("t", (*cel).clone()),
        )
    }));
    // The old object's, for the dependencies a condition reads of it.
    let mut old_passes: Vec<(&str, &Expr)> = Vec::new();
    for c in group {
        if let Some((name, cel)) = &c.dependency_passes {
            if !old_passes.iter().any(|(known, _)| known == name) {
                old_passes.push((name, cel));
            }
        }
    }
    variables.extend(old_passes.iter().map(|(name, cel)| {
        variable(
            &old_passes_variable(name),
            &var("oldTexts").all("t", (*cel).clone()),
        )
    }));
    let mut validations = Vec::new();
    for c in group {
        let policy = &c.check.policy;
        let met = condition_variable(
            &mut variables,
            &format!("dependencyMet_{policy}"),
            c.condition.as_ref(),
        );
        let old_met = condition_variable(
            &mut variables,
            &format!("oldDependencyMet_{policy}"),
            c.old_condition.as_ref(),
        );
        let (infringing, found) = (format!("infringing_{policy}"), format!("found_{policy}"));
        // A denial only for an infringement the old object had not (same image, same
        // container), as the webhook judges it: the old object readable and the check run on it
        // (its dependency met there too); warnings and dry-run findings for every one, as the
        // webhook reports them.
        let found_expression = if deny {
            let o = ident("o");
            let same = |f: &str| o.clone().field(f).eq(i.clone().field(f));
            let had = all_of([
                var("oldReadable"),
                old_met,
                var("oldImages").exists("o", all_of(["type", "name", "image"].map(same))),
            ]);
            cond(
                ident("request").field("operation").eq(str("UPDATE")),
                var(&infringing).filter("i", not(had)),
                var(&infringing),
            )
        } else {
            var(&infringing)
        };
        variables.extend([
            variable(
                &infringing,
                &cond(
                    var(&passes_variable(policy)),
                    list([]),
                    var("refs").filter("i", and(met, c.check.infringes.clone())),
                ),
            ),
            variable(&found, &found_expression),
        ]);
        // The message is one line: kube-apiserver refuses a message with a line break and falls
        // back to `message`.
        let message = var(&found)
            .map(
                "i",
                concat([
                    str(policy.as_str()),
                    str(": "),
                    i.clone().field("type"),
                    str(" \""),
                    i.clone().field("name"),
                    str("\": "),
                    c.check.message.clone(),
                ]),
            )
            .method("join", [str("; ")]);
        validations.extend(validation(
            // `readable` (the grammar) last: most objects infringe nothing.
            any_of([
                outside_group.clone(),
                size(var(&found)).eq(int(0)),
                not(var("readable")),
            ]),
            &format!("{policy}: the pod spec infringes the policy"),
            message,
            "Forbidden",
        ));
    }
    if validations.is_empty() {
        return None;
    }
    Some(json!({
        "apiVersion": API_VERSION,
        "kind": "ValidatingAdmissionPolicy",
        "metadata": metadata(object_name),
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": workloads::match_constraints(),
            "matchConditions": workloads::match_conditions(),
            "variables": variables,
            "validations": validations,
        },
    }))
}

/// The policy refusing what the webhook cannot read: too many images, an invalid reference, an
/// image ID. On UPDATE an object whose pod spec did not change is not refused again.
fn images_policy(config: &Config, options: &Options, native: &mut Native) {
    let max = config.limits.max_images_per_pod;
    let unchanged = and(
        ident("request").field("operation").eq(str("UPDATE")),
        var("oldSpec").eq(var("spec")),
    );
    let count = size(var("texts"));
    let (i, t) = (ident("i"), ident("t"));
    // `<type> "<name>": <what>` of each image of `images` for which `holds`, joined by `; `.
    let each = |holds: Expr, what: Vec<Expr>| {
        let head = [
            i.clone().field("type"),
            str(" \""),
            i.clone().field("name"),
            str("\": "),
        ];
        var("images")
            .filter("i", holds)
            .map("i", concat(head.into_iter().chain(what)))
            .method("join", [str("; ")])
    };
    let validations: Vec<Value> = [
        validation(
            or(count.clone().le(max_images(config)), unchanged.clone()),
            "the pod spec pulls more images than limits.maxImagesPerPod accepts",
            concat([
                str("the pod spec pulls "),
                string(size(var("images"))),
                str(format!(" images (containers, initContainers, ephemeralContainers and image volumes); at most {max} are accepted (limits.maxImagesPerPod)")),
            ]),
            "Invalid",
        ),
        validation(
            any_of([
                count.clone().gt(max_images(config)),
                unchanged.clone(),
                var("texts").all("t", image_cel::is_valid(&t)),
            ]),
            "the pod spec has an invalid image reference",
            each(
                not(image_cel::is_valid(&i.clone().field("image"))),
                vec![
                    str("invalid image reference \""),
                    // Line breaks escaped: kube-apiserver shows a message of one line only
                    // (else the static one), and the webhook's message escapes them too.
                    i.clone()
                        .field("image")
                        .method("replace", [str("\r"), str("\\r")])
                        .method("replace", [str("\n"), str("\\n")]),
                    str("\""),
                ],
            ),
            "Invalid",
        ),
        validation(
            any_of([
                count.gt(max_images(config)),
                unchanged,
                not(var("texts").exists("t", image_cel::is_image_id(&t))),
            ]),
            "the pod spec names an image by its ID",
            each(
                image_cel::is_image_id(&i.clone().field("image")),
                vec![
                    str("image \""),
                    i.clone().field("image"),
                    str("\" is an image ID, which the runtime resolves from the images already on the node without asking any registry; give a registry reference"),
                ],
            ),
            "Invalid",
        ),
    ]
    .into_iter()
    .flatten()
    .collect();
    native.objects.push(json!({
        "apiVersion": API_VERSION,
        "kind": "ValidatingAdmissionPolicy",
        "metadata": metadata(IMAGES),
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": workloads::match_constraints(),
            "matchConditions": workloads::match_conditions(),
            "variables": [
                variable("spec", &workloads::spec("object")),
                variable("oldSpec", &workloads::spec("oldObject")),
                variable("images", &workloads::images(&var("spec"))),
                variable("texts", &workloads::image_texts(&var("spec"))),
            ],
            "validations": validations,
        },
    }));
    native.objects.push(json!({
        "apiVersion": API_VERSION,
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": metadata(IMAGES),
        "spec": {"policyName": IMAGES, "validationActions": ["Deny"],
            "matchResources": selectors::match_resources(selectors::validated(config, options))},
    }));
}
