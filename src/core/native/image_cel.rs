//! Image references in CEL, as [`crate::image`] parses them: validity (the distribution/reference
//! grammar, the 255-byte path limit, the digests go-digest accepts), image IDs, and the
//! normalised repository, tag and digest that `allowedrepositories` and `latesttag` compare.
//!
//! Kubernetes has no CEL image library, so these are built from its string and regular-expression
//! functions (RE2, linear time). Each function here returns the CEL [`Expr`] about the reference
//! text its argument reads (an item `t` of the `texts` variable, or the `image` of an item `i`
//! of `images`).

use super::cel::{all_of, and, any_of, concat, cond, int, not, or, size, str, Expr};

/// A path component: `[a-z0-9]+(?:(?:[._]|__|[-]+)[a-z0-9]+)*`.
const COMPONENT: &str = "[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*";
/// A registry host and optional port: DNS labels joined by `.`, or an IPv6 literal.
const DOMAIN: &str = "(?:(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])(?:\\.(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9]))*|\\[[a-fA-F0-9:]+\\])(?::[0-9]+)?";
/// A tag: `[\w][\w.-]{0,127}` with ASCII `\w`.
const TAG: &str = "[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}";
/// The digests go-digest v1.0.0 validates: sha256, sha384, sha512 in lowercase hex of the right
/// length (any other algorithm or length fails its validation even when the grammar matches).
const DIGEST: &str = "(?:sha256:[a-f0-9]{64}|sha384:[a-f0-9]{96}|sha512:[a-f0-9]{128})";

/// The whole grammar, anchored (it holds `\\.` and `\\[`, which CEL's printer writes as a raw
/// string, `r'…'`). The first component before a `/` may be a registry or a path component
/// (the parser's one deliberate difference: `a_b.example.com/app` is a path to Go and a host to
/// the runtime; both accept it).
pub fn grammar() -> String {
    format!("^(?:(?:{DOMAIN}|{COMPONENT})/)?{COMPONENT}(?:/{COMPONENT})*(?::{TAG})?(?:@{DIGEST})?$")
}

/// The text before the first `/` (all of it when there is none).
fn first(r: &Expr) -> Expr {
    r.clone().method("split", [str("/")]).index(int(0))
}

/// Whether the first component names a registry (splitDockerDomain): there is a `/` after it
/// and it is `localhost`, `index.docker.io`, holds `.` or `:`, or an uppercase letter.
pub fn names_registry(r: &Expr) -> Expr {
    let f = first(r);
    and(
        r.clone().method("contains", [str("/")]),
        any_of([
            f.clone().eq(str("localhost")),
            f.clone().eq(str("index.docker.io")),
            f.clone().method("contains", [str(".")]),
            f.clone().method("contains", [str(":")]),
            f.method("matches", [str("[A-Z]")]),
        ]),
    )
}

/// The reference without its registry part.
fn remainder(r: &Expr) -> Expr {
    cond(
        names_registry(r),
        r.clone().method("substring", [size(first(r)).add(int(1))]),
        r.clone(),
    )
}

/// The repository name as written (up to the first `:` or `@` of the remainder).
fn name(r: &Expr) -> Expr {
    remainder(r)
        .method("split", [str("@")])
        .index(int(0))
        .method("split", [str(":")])
        .index(int(0))
}

/// Whether `library/` goes in front (Docker Hub and a single-component name).
fn adds_library(r: &Expr) -> Expr {
    let f = first(r);
    and(
        any_of([
            not(names_registry(r)),
            f.clone().eq(str("index.docker.io")),
            f.eq(str("docker.io")),
        ]),
        not(name(r).method("contains", [str("/")])),
    )
}

/// The normalised `registry/path`, the string allow-lists compare with.
pub fn repository(r: &Expr) -> Expr {
    let f = first(r);
    concat([
        cond(
            or(not(names_registry(r)), f.clone().eq(str("index.docker.io"))),
            str("docker.io"),
            f,
        ),
        str("/"),
        cond(adds_library(r), str("library/"), str("")),
        name(r),
    ])
}

/// Whether the reference has a digest.
pub fn has_digest(r: &Expr) -> Expr {
    remainder(r).method("contains", [str("@")])
}

/// The tag, `''` when there is none.
pub fn tag(r: &Expr) -> Expr {
    let before_digest = remainder(r).method("split", [str("@")]).index(int(0));
    cond(
        before_digest.clone().method("contains", [str(":")]),
        before_digest.method("split", [str(":")]).index(int(1)),
        str(""),
    )
}

/// Whether the reference parses (grammar, not an image ID, path at most 255 bytes).
pub fn is_valid(r: &Expr) -> Expr {
    let f = first(r);
    let go_prefix = cond(
        and(
            names_registry(r),
            not(f.clone().method("matches", [str(format!("^{DOMAIN}$"))])),
        ),
        size(f).add(int(1)),
        int(0),
    );
    all_of([
        r.clone().method("matches", [str(grammar())]),
        not(r.clone().method("matches", [str("^[a-f0-9]{64}$")])),
        or(
            size(r.clone()).le(int(247)),
            go_prefix
                .add(cond(adds_library(r), int(8), int(0)))
                .add(size(name(r)))
                .le(int(255)),
        ),
    ])
}

/// Fast path: whether the raw text `r` of a readable reference lies under one of `prefixes` (as
/// [`repository`] normalises it: `p` itself or `p/…`), decided without normalising. Sound only,
/// never complete: it holds for a prefix whose first component names a registry other than
/// Docker Hub (holds `.` or `:`, or is `localhost`) and whose path has no `:` or `@`, when the
/// text starts with `p/` (or, for a prefix with a path, is `p`, `p:tag` or `p@digest`). For such
/// a text the first component is that registry, so the repository is the text's own path. Other
/// prefixes (Docker Hub, short names) are left to the normalised comparison: `false`.
pub fn under_any_raw(prefixes: &[String], r: &Expr) -> Expr {
    let mut tests = Vec::new();
    for p in prefixes {
        let (registry, path) = match p.split_once('/') {
            Some((registry, path)) => (registry, Some(path)),
            None => (p.as_str(), None),
        };
        let names_registry = registry == "localhost" || registry.contains(['.', ':']);
        if !names_registry
            || registry == "docker.io"
            || registry == "index.docker.io"
            || path.is_some_and(|path| path.contains([':', '@']))
        {
            continue;
        }
        let starts_with = |suffix: &str| {
            r.clone()
                .method("startsWith", [str(format!("{p}{suffix}"))])
        };
        tests.push(starts_with("/"));
        if path.is_some() {
            tests.push(r.clone().eq(str(p.as_str())));
            tests.push(starts_with(":"));
            tests.push(starts_with("@"));
        }
    }
    any_of(tests)
}

/// Fast path: whether the raw text `r` of a readable reference has a digest or a tag other than
/// `latest`. In a readable reference `@` appears only before the digest and `:` in its last path
/// component only before the tag (a port's `:` is in the first component, before a `/`), so this
/// is what [`has_digest`] and [`tag`] say, without normalising.
pub fn pinned_raw(r: &Expr) -> Expr {
    let last = r.clone().method(
        "substring",
        [r.clone().method("lastIndexOf", [str("/")]).add(int(1))],
    );
    or(
        r.clone().method("contains", [str("@")]),
        and(
            last.method("contains", [str(":")]),
            not(r.clone().method("endsWith", [str(":latest")])),
        ),
    )
}

/// Whether the runtime would resolve the reference as a local image ID (`sha256:…` with no `/`
/// or `@`), which [`crate::image::is_local_image_id`] refuses.
pub fn is_image_id(r: &Expr) -> Expr {
    all_of([
        not(r.clone().method("contains", [str("/")])),
        not(r.clone().method("contains", [str("@")])),
        r.clone().method("matches", [str("^sha(256|384|512):.")]),
    ])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::native::cel::{bool, ident};

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

    /// The fast paths' reasoning against the parser, over normalisation corners and the
    /// allow-list edges: where the raw test holds for a reference the parser reads, the
    /// normalised comparison holds too. The raw tests are read here with Rust's string functions
    /// (the CEL text is proved equal to the webhook through kube-apiserver by the e2e suite).
    #[test]
    fn the_fast_paths_imply_what_the_normalised_parts_say() {
        let prefixes: Vec<String> = [
            "registry.example.com",
            "registry.k8s.io",
            "localhost:5000/team",
            "localhost",
            "docker.io/library",
            "nginx",
            "Registry.Example.com/Team",
        ]
        .map(String::from)
        .to_vec();
        let raw_under = |reference: &str, p: &str| {
            let cel = under_any_raw(&[p.to_string()], &ident("r"));
            cel.as_bool() != Some(false)
                && (reference.starts_with(&format!("{p}/"))
                    || (p.contains('/')
                        && (reference == p
                            || reference.starts_with(&format!("{p}:"))
                            || reference.starts_with(&format!("{p}@")))))
        };
        let pinned = |r: &str| {
            let last = &r[r.rfind('/').map_or(0, |at| at + 1)..];
            r.contains('@') || (last.contains(':') && !r.ends_with(":latest"))
        };
        let mut references: Vec<String> = [
            "nginx",
            "nginx:latest",
            "library/nginx:1",
            "index.docker.io/nginx:1",
            "docker.io/library/nginx:1",
            "localhost:5000",
            "localhost:5000/app:latest",
            "LOCALHOST/app",
            "a_b.example.com/app:1",
            "[::1]:5000/app:1",
            "registry.example.com.evil.io/app:1",
            "registry.example.comx/app",
            "registry.example.com:5000/app:1",
            "localhost:5000/team:1/app",
            "localhost:5000/teamx",
        ]
        .map(String::from)
        .to_vec();
        for p in &prefixes {
            for tail in [
                "",
                "/app",
                "/app:1",
                ":1",
                ":latest",
                "@sha256:",
                "x/app",
                "/app:latest",
                ":5000/app",
            ] {
                let digest = "0123456789abcdef".repeat(4);
                let tail = if tail.ends_with(':') {
                    format!("{tail}{digest}")
                } else {
                    tail.to_string()
                };
                references.push(format!("{p}{tail}"));
            }
        }
        let (mut fast, mut read) = (0, 0);
        for reference in &references {
            let Ok(parsed) = crate::image::parse(reference) else {
                continue;
            };
            read += 1;
            let repository = parsed.repository();
            for p in &prefixes {
                if raw_under(reference, p) {
                    fast += 1;
                    assert!(
                        repository == *p || repository.starts_with(&format!("{p}/")),
                        "{reference} (repository {repository}) passed the fast path of {p}"
                    );
                }
            }
            if pinned(reference) {
                assert!(
                    parsed.digest.is_some() || parsed.tag.as_deref().is_some_and(|t| t != "latest"),
                    "{reference} passed the pinned fast path: {parsed:?}"
                );
            }
        }
        assert!(
            read > 40 && fast > 10,
            "{read} references read, {fast} fast"
        );
        // Docker Hub and short names get no fast path; a prefix with a path gets four tests.
        assert_eq!(
            under_any_raw(&["docker.io/library".into(), "nginx".into()], &ident("r")),
            bool(false)
        );
        assert_eq!(
            under_any_raw(&["localhost:5000/team".into()], &ident("r"))
                .to_string()
                .matches(" || ")
                .count(),
            3
        );
    }
}
