//! The shipped SIT policies, `allowedrepositories` and `latesttag`, decided in Rust.
//!
//! A policy loaded under a shipped name with the shipped Rego, unchanged, is recognised here.
//! Its Rego stays the reference: this is a compiled copy of it, giving the same messages for
//! every input it takes, and the tests below prove the two equal on the image table and on
//! generated documents. It takes only the common shapes (the document poolguard builds, string
//! lists as parameters, texts a Go `%q` writes as they are); for anything else it answers
//! `None` and the Rego runs, so an odd parameter or an error reads exactly as the Rego gives it.
//!
//! Why: on a pod never seen before, the Rego interpreter is most of a validating decision
//! (about 40 µs per image under regorus); this path is a few µs per pod.

use serde_json::{Map, Value};

use super::template;

/// The shipped templates by name, with their text.
pub(crate) const SOURCES: [(&str, &str); 2] = [
    (
        "allowedrepositories",
        include_str!("../../../policies/allowedrepositories.yaml"),
    ),
    (
        "latesttag",
        include_str!("../../../policies/latesttag.yaml"),
    ),
];

/// A shipped policy, recognised by its name and Rego ([`Shipped::recognise`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shipped {
    AllowedRepositories,
    LatestTag,
}

impl Shipped {
    /// The shipped policy a template named `name` with Rego `rego` is: the name and the Rego
    /// text both those of a shipped template.
    pub(crate) fn recognise(name: &str, rego: &str) -> Option<Shipped> {
        let (shipped_name, text) = SOURCES.iter().find(|(n, _)| *n == name)?;
        let shipped = template::from_yaml(text, format!("policies/{shipped_name}.yaml").into());
        if shipped.ok()?.rego != rego {
            return None;
        }
        Some(match name {
            "allowedrepositories" => Shipped::AllowedRepositories,
            _ => Shipped::LatestTag,
        })
    }

    /// The infringement messages, sorted, of the policy on `document` (an
    /// [`super::input::document`]) with `parameters`; `None` where this path does not take the
    /// input and the Rego must decide.
    pub fn infringements(
        self,
        document: &Value,
        parameters: &Map<String, Value>,
    ) -> Option<Vec<String>> {
        let mut out = Vec::new();
        match self {
            Shipped::AllowedRepositories => {
                let list = parameters.get("repositories")?;
                let allowed = prefixes(list)?;
                let mut shown = None;
                for (key, requirement) in requirements(document)? {
                    let image = requirement.image;
                    let repository = crate::image::repository(image).ok()?;
                    if under_any(&allowed, &repository) {
                        continue;
                    }
                    let shown = shown.get_or_insert_with(|| json_list(list));
                    let mut msg = requirement.opening(key)?;
                    msg.push_str(" (repository ");
                    go_quoted(&mut msg, &repository)?;
                    msg.push_str(") is not from an allowed repository ");
                    msg.push_str(shown);
                    out.push(msg);
                }
            }
            Shipped::LatestTag => {
                let exempt = match parameters.get("exemptRepositories") {
                    None => Vec::new(),
                    Some(list) => prefixes(list)?,
                };
                for (key, requirement) in requirements(document)? {
                    let image = requirement.image;
                    let reference = crate::image::parse(image).ok()?;
                    if reference.digest.is_some() {
                        continue;
                    }
                    let why = match reference.tag.as_deref() {
                        None | Some("") => "has no tag, so the runtime pulls :latest",
                        Some("latest") => "uses the :latest tag",
                        Some(_) => continue,
                    };
                    if under_any(&exempt, &reference.repository()) {
                        continue;
                    }
                    let mut msg = requirement.opening(key)?;
                    msg.push(' ');
                    msg.push_str(why);
                    msg.push_str("; pin a version tag or a digest");
                    out.push(msg);
                }
            }
        }
        out.sort();
        out.dedup();
        Some(out)
    }
}

/// One image a document lists, as the shipped Rego reads it.
struct Requirement<'d> {
    /// `image` (absent: `""`).
    image: &'d str,
    /// What pulls it, in words (`source_name` in the Rego).
    source: &'static str,
    /// `name`, when present (else the requirement's key is its name).
    name: Option<&'d str>,
}

impl Requirement<'_> {
    /// How both policies' messages open: `<source> "<name>": image "<image>"` (`key` is the
    /// requirement's key, its name when it has none); `None` where `%q` is left to the Rego.
    fn opening(&self, key: &str) -> Option<String> {
        let mut msg = String::new();
        msg.push_str(self.source);
        msg.push(' ');
        go_quoted(&mut msg, self.name.unwrap_or(key))?;
        msg.push_str(": image ");
        go_quoted(&mut msg, self.image)?;
        Some(msg)
    }
}

/// Every requirement of every service in `document`, with its key; `None` when the document
/// is not of the shape [`super::input::document`] builds, or an `image` or `name` is not a
/// string.
fn requirements(document: &Value) -> Option<Vec<(&str, Requirement<'_>)>> {
    let mut out = Vec::new();
    let Some(services) = document.get("services") else {
        return Some(out);
    };
    for service in services.as_object()?.values() {
        let Some(requirements) = service.get("functional_requirements") else {
            continue;
        };
        for (key, requirement) in requirements.as_object()? {
            let requirement = requirement.as_object()?;
            let image = match requirement.get("image") {
                None => "",
                Some(image) => image.as_str()?,
            };
            let source = match requirement.get("type").and_then(Value::as_str) {
                Some("initContainer") => "initContainer",
                Some("ephemeralContainer") => "ephemeralContainer",
                Some("imageVolume") => "image volume",
                _ => "container",
            };
            let name = match requirement.get("name") {
                None => None,
                Some(name) => Some(name.as_str()?),
            };
            out.push((
                key.as_str(),
                Requirement {
                    image,
                    source,
                    name,
                },
            ));
        }
    }
    Some(out)
}

/// The entries of a list of repository prefixes as the shipped Rego reads them: trailing `/`s
/// trimmed, empty entries dropped (they match nothing); `None` when it is not a list of strings.
/// The native generator reads the parameters with it too.
pub(crate) fn prefixes(list: &Value) -> Option<Vec<&str>> {
    list.as_array()?
        .iter()
        .map(|entry| Some(entry.as_str()?.trim_end_matches('/')))
        .filter(|prefix| prefix.is_none_or(|p| !p.is_empty()))
        .collect()
}

/// Whether `repository` is one of `prefixes` or lies under one, on whole path components.
fn under_any(prefixes: &[&str], repository: &str) -> bool {
    prefixes.iter().any(|prefix| {
        repository
            .strip_prefix(prefix)
            .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
    })
}

/// A list as Rego's `%v` writes it: each element as JSON, `, ` between.
fn json_list(list: &Value) -> String {
    let items: Vec<String> = list
        .as_array()
        .into_iter()
        .flatten()
        .map(Value::to_string)
        .collect();
    format!("[{}]", items.join(", "))
}

/// Appends `text` as Go's `%q` writes it, for texts of printable ASCII; `None` for any other
/// character (the Rego decides those).
fn go_quoted(out: &mut String, text: &str) -> Option<()> {
    out.push('"');
    for c in text.chars() {
        match c {
            '"' | '\\' => {
                out.push('\\');
                out.push(c);
            }
            ' '..='~' => out.push(c),
            _ => return None,
        }
    }
    out.push('"');
    Some(())
}
