//! Image references in CEL, as [`crate::image`] parses them: validity (the distribution/reference
//! grammar, the 255-byte path limit, the digests go-digest accepts), image IDs, and the
//! normalised repository, tag and digest that `allowedrepositories` and `latesttag` compare.
//!
//! Kubernetes has no CEL image library, so these are built from its string and regular-expression
//! functions (RE2, linear time). The expressions are written for one image map `i` of the
//! `images` variable (`{'type', 'name', 'image'}`); each function here returns the CEL text for
//! the image held in the CEL variable named by its argument.

/// A path component: `[a-z0-9]+(?:(?:[._]|__|[-]+)[a-z0-9]+)*`.
const COMPONENT: &str = "[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*";
/// A registry host and optional port: DNS labels joined by `.`, or an IPv6 literal.
const DOMAIN: &str = "(?:(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])(?:\\.(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9]))*|\\[[a-fA-F0-9:]+\\])(?::[0-9]+)?";
/// A tag: `[\w][\w.-]{0,127}` with ASCII `\w`.
const TAG: &str = "[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}";
/// The digests go-digest v1.0.0 validates: sha256, sha384, sha512 in lowercase hex of the right
/// length (any other algorithm or length fails its validation even when the grammar matches).
const DIGEST: &str = "(?:sha256:[a-f0-9]{64}|sha384:[a-f0-9]{96}|sha512:[a-f0-9]{128})";

/// The whole grammar, anchored (it holds `\\.` and `\\[`, so CEL gets it as a raw string,
/// `r'…'`). The first component before a `/` may be a registry or a path component (the parser's one deliberate difference: `a_b.example.com/app` is a path to Go and
/// a host to the runtime; both accept it).
pub fn grammar() -> String {
    format!("^(?:(?:{DOMAIN}|{COMPONENT})/)?{COMPONENT}(?:/{COMPONENT})*(?::{TAG})?(?:@{DIGEST})?$")
}

/// CEL: the text before the first `/` (all of it when there is none).
fn first(r: &str) -> String {
    format!("{r}.split('/')[0]")
}

/// CEL: whether the first component names a registry (splitDockerDomain): there is a `/` after
/// it and it is `localhost`, `index.docker.io`, holds `.` or `:`, or an uppercase letter.
pub fn names_registry(r: &str) -> String {
    let f = first(r);
    format!(
        "({r}.contains('/') && ({f} == 'localhost' || {f} == 'index.docker.io' || {f}.contains('.') || {f}.contains(':') || {f}.matches('[A-Z]')))"
    )
}

/// CEL: the reference without its registry part.
fn remainder(r: &str) -> String {
    format!(
        "({nr} ? {r}.substring(size({f}) + 1) : {r})",
        nr = names_registry(r),
        f = first(r)
    )
}

/// CEL: the repository name as written (up to the first `:` or `@` of the remainder).
fn name(r: &str) -> String {
    format!("{}.split('@')[0].split(':')[0]", remainder(r))
}

/// CEL: whether `library/` goes in front (Docker Hub and a single-component name).
fn adds_library(r: &str) -> String {
    let f = first(r);
    format!(
        "((!{nr} || {f} == 'index.docker.io' || {f} == 'docker.io') && !{name}.contains('/'))",
        nr = names_registry(r),
        name = name(r)
    )
}

/// CEL: the normalised `registry/path`, the string allow-lists compare with.
pub fn repository(r: &str) -> String {
    let f = first(r);
    format!(
        "((!{nr} || {f} == 'index.docker.io' ? 'docker.io' : {f}) + '/' + ({lib} ? 'library/' : '') + {name})",
        nr = names_registry(r),
        lib = adds_library(r),
        name = name(r)
    )
}

/// CEL: whether the reference has a digest.
pub fn has_digest(r: &str) -> String {
    format!("{}.contains('@')", remainder(r))
}

/// CEL: the tag, `''` when there is none.
pub fn tag(r: &str) -> String {
    let before_digest = format!("{}.split('@')[0]", remainder(r));
    format!("({before_digest}.contains(':') ? {before_digest}.split(':')[1] : '')")
}

/// CEL: whether the reference parses (grammar, not an image ID, path at most 255 bytes).
pub fn is_valid(r: &str) -> String {
    let f = first(r);
    let go_prefix = format!(
        "({nr} && !{f}.matches(r'^{DOMAIN}$') ? size({f}) + 1 : 0)",
        nr = names_registry(r)
    );
    format!(
        "({r}.matches(r'{grammar}') && !{r}.matches('^[a-f0-9]{{64}}$') && {go_prefix} + ({lib} ? 8 : 0) + size({name}) <= 255)",
        grammar = grammar(),
        lib = adds_library(r),
        name = name(r)
    )
}

/// CEL: whether the runtime would resolve the reference as a local image ID (`sha256:…` with no
/// `/` or `@`), which [`crate::image::is_local_image_id`] refuses.
pub fn is_image_id(r: &str) -> String {
    format!("(!{r}.contains('/') && !{r}.contains('@') && {r}.matches('^sha(256|384|512):.'))")
}

/// CEL string literal for `text` (single-quoted; backslash and quote escaped).
pub fn literal(text: &str) -> String {
    let mut out = String::from("'");
    for c in text.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\'' => out.push_str("\\'"),
            '\n' => out.push_str("\\n"),
            c if c.is_control() => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('\'');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The grammar alone (without the length limit and the image-ID rule) on a sample, against
    /// the parser; the e2e suite proves the whole CEL equal to the parser through kube-apiserver.
    #[test]
    fn the_grammar_accepts_what_the_parser_accepts_on_a_sample() {
        let re = regex::Regex::new(&grammar()).unwrap();
        for reference in [
            "nginx",
            "docker.io/library/nginx:1.27",
            "a_b.example.com/app",
            "[::1]:5000/app@sha256:abc",
            "Evilhost/app",
            "app:1.0:evil",
            "UPPER",
            "localhost:5000",
            "registry.example.com/team/app:v1@sha256:dbcc1c35ac38df41fd2f5e4130b32ffdb93ebae8b3dbe638c23575912276fc9c",
            "app@md5:dbcc1c35ac38df41fd2f5e4130b32ffd",
        ] {
            assert_eq!(
                re.is_match(reference),
                crate::image::parse(reference).is_ok(),
                "{reference}"
            );
        }
    }

    #[test]
    fn literals_are_escaped() {
        assert_eq!(literal("a'b\\c"), "'a\\'b\\\\c'");
    }
}
