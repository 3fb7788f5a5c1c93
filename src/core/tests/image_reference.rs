//! Tests for `poolguard_core::image`.
//!
//! 1. `table`: a table of references with the expected registry/path/tag/digest
//!    or error kind. It contains the test vectors of distribution/reference
//!    v0.6.0 (normalize_test.go and reference_test.go), with the expectation
//!    recomputed for `ParseNormalizedNamed` (reference_test.go tests the
//!    un-normalised `Parse`), plus security-relevant cases.
//! 2. `oracle`: a literal, regex-based port of `ParseNormalizedNamed` +
//!    go-digest validation (built from the same regular-expression pieces as
//!    regexp.go, with the `regex` crate, whose leftmost-first capture semantics
//!    are those of Go's RE2). The hand-written scanner must agree with it on
//!    the table, on grammar-generated references and on random strings.
//! 3. `oci_spec_*`: differential test against `oci_spec::distribution::Reference`
//!    with a documented allow-list of its known deviations.
//! 4. fuzz-like robustness (no panics, one-line errors, idempotence) and a
//!    linear-time check.

use poolguard_core::image::{self, ErrorKind, ImageRef};
use std::str::FromStr;
use std::time::Duration;

#[path = "data/image_reference_table.rs"]
mod image_reference_table;
use image_reference_table::{table, Fields, D1, HEX64};

fn fields(r: &ImageRef) -> Fields {
    (
        r.registry.clone(),
        r.path.clone(),
        r.tag.clone(),
        r.digest.clone(),
    )
}

#[test]
fn table_matches_expectations() {
    let cases = table();
    let mut failures = Vec::new();
    for c in &cases {
        let got = image::parse(&c.input);
        let got_cmp = got.as_ref().map(fields).map_err(|e| e.kind());
        if got_cmp != c.expect {
            failures.push(format!(
                "{:?}: expected {:?}, got {:?}",
                c.input, c.expect, got
            ));
        }
        // repository() agrees with parse()
        match (&got, image::repository(&c.input)) {
            (Ok(r), Ok(repo)) => assert_eq!(repo, format!("{}/{}", r.registry, r.path)),
            (Err(_), Err(_)) => {}
            other => panic!(
                "repository() disagrees with parse() on {:?}: {other:?}",
                c.input
            ),
        }
    }
    let valid = cases.iter().filter(|c| c.expect.is_ok()).count();
    eprintln!(
        "table: {} cases ({} valid, {} invalid)",
        cases.len(),
        valid,
        cases.len() - valid
    );
    assert!(cases.len() >= 60);
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn error_display_is_one_line() {
    let e = image::parse("x\ny\"z\u{2028}").unwrap_err();
    let s = e.to_string();
    assert_eq!(
        s,
        r#"invalid image reference "x\ny\"z\u{2028}": invalid reference format: repository path components must be lowercase letters and digits separated by '.', '_', '__' or '-'"#
    );
    let e = image::parse("docker/Docker").unwrap_err();
    assert_eq!(
        e.to_string(),
        r#"invalid image reference "docker/Docker": repository name must be lowercase"#
    );
    let long = "A".repeat(10_000);
    let s = image::parse(&long).unwrap_err().to_string();
    assert!(s.len() < 400 && s.contains("...\""), "{s}");
    let e = image::parse("").unwrap_err();
    assert_eq!(
        e.to_string(),
        r#"invalid image reference "": repository name must have at least one component"#
    );
}

#[test]
fn local_image_ids() {
    assert!(image::is_local_image_id(&format!("sha256:{D1}")));
    assert!(image::is_local_image_id("sha256:dbcc1")); // ID prefix lookup
    assert!(image::is_local_image_id(&format!(
        "sha512:{}",
        "f".repeat(128)
    )));
    assert!(!image::is_local_image_id("sha256"));
    assert!(!image::is_local_image_id(&format!(
        "docker.io/library/sha256:{D1}"
    )));
    assert!(!image::is_local_image_id(&format!("nginx@sha256:{D1}")));
    assert!(!image::is_local_image_id("nginx:1.25"));
    // It is nonetheless a valid ParseNormalizedNamed reference:
    assert_eq!(
        image::repository("sha256:dbcc1").unwrap(),
        "docker.io/library/sha256"
    );
}

// ---------------------------------------------------------------------------
// Oracle: regex transcription of distribution/reference v0.6.0 + go-digest
// ---------------------------------------------------------------------------

mod oracle {
    use regex::Regex;
    use std::sync::OnceLock;

    /// Go's `Domain()`, `Path()`, tag, digest. `domain` may be "" (see the
    /// module documentation of image.rs).
    pub type GoNamed = (String, String, Option<String>, Option<String>);

    struct Res {
        reference: Regex,
        name: Regex,
        identifier: Regex,
        go_digest: Regex,
    }

    fn res() -> &'static Res {
        static R: OnceLock<Res> = OnceLock::new();
        R.get_or_init(|| {
            // Pieces as in regexp.go. `\w` is ASCII in Go; written out here
            // because it is Unicode in the regex crate.
            let alphanumeric = "[a-z0-9]+";
            let separator = "(?:[._]|__|[-]+)";
            let domain_name_component = "(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])";
            let optional_port = "(?::[0-9]+)?";
            let tag = "[0-9A-Za-z_][0-9A-Za-z_.-]{0,127}";
            let digest = "[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*[:][[:xdigit:]]{32,}";
            let ipv6 = r"\[(?:[a-fA-F0-9:]+)\]";
            let domain_name = format!(r"{c}(?:\.{c})*", c = domain_name_component);
            let host = format!("(?:{domain_name}|{ipv6})");
            let domain_and_port = format!("{host}{optional_port}");
            let path_component = format!("{alphanumeric}(?:{separator}{alphanumeric})*");
            let remote_name = format!("{path_component}(?:/{path_component})*");
            let name = format!("(?:{domain_and_port}/)?{remote_name}");
            let reference = format!("^({name})(?::({tag}))?(?:@({digest}))?$");
            let anchored_name = format!("^(?:({domain_and_port})/)?({remote_name})$");
            Res {
                reference: Regex::new(&reference).unwrap(),
                name: Regex::new(&anchored_name).unwrap(),
                identifier: Regex::new("^[a-f0-9]{64}$").unwrap(),
                // go-digest v1.0.0 DigestRegexpAnchored
                go_digest: Regex::new("^[a-z0-9]+(?:[.+_-][a-z0-9]+)*:[a-zA-Z0-9=_-]+$").unwrap(),
            }
        })
    }

    fn split_docker_domain(name: &str) -> (String, String) {
        let (domain, mut remote) = match name.split_once('/') {
            None => return ("docker.io".into(), format!("library/{name}")),
            Some(("localhost", r)) => ("localhost".to_string(), r.to_string()),
            Some(("index.docker.io", r)) => ("docker.io".to_string(), r.to_string()),
            Some((d, r)) if d.contains(['.', ':']) => (d.to_string(), r.to_string()),
            Some((d, r)) if d.to_lowercase() != d => (d.to_string(), r.to_string()),
            Some(_) => ("docker.io".to_string(), name.to_string()),
        };
        if domain == "docker.io" && !remote.contains('/') {
            remote = format!("library/{remote}");
        }
        (domain, remote)
    }

    /// go-digest v1.0.0 Digest.Validate with sha256/384/512 registered.
    fn validate_digest(d: &str) -> Result<(), ()> {
        let i = d.find(':').ok_or(())?;
        if i == 0 || i + 1 == d.len() {
            return Err(());
        }
        let (alg, enc) = (&d[..i], &d[i + 1..]);
        let size = match alg {
            "sha256" => 32,
            "sha384" => 48,
            "sha512" => 64,
            _ => {
                let _format_or_unsupported = res().go_digest.is_match(d);
                return Err(());
            }
        };
        if enc.len() != size * 2 {
            return Err(());
        }
        if enc.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
            Ok(())
        } else {
            Err(())
        }
    }

    pub(crate) fn parse_normalized_named(s: &str) -> Result<GoNamed, ()> {
        let r = res();
        if r.identifier.is_match(s) {
            return Err(());
        }
        let (domain, remainder) = split_docker_domain(s);
        let remote = match remainder.find(':') {
            Some(i) => &remainder[..i],
            None => &remainder[..],
        };
        if remote.to_lowercase() != remote {
            return Err(());
        }
        // Parse(domain + "/" + remainder)
        let full = format!("{domain}/{remainder}");
        let caps = r.reference.captures(&full).ok_or(())?;
        let name = caps.get(1).map_or("", |m| m.as_str());
        let tag = caps.get(2).map(|m| m.as_str().to_string());
        let digest = caps.get(3).map(|m| m.as_str().to_string());
        let (go_domain, go_path) = match r.name.captures(name) {
            Some(n) => (
                n.get(1).map_or("", |m| m.as_str()).to_string(),
                n.get(2).map_or("", |m| m.as_str()).to_string(),
            ),
            None => (String::new(), name.to_string()),
        };
        if go_path.len() > 255 {
            return Err(());
        }
        if let Some(d) = &digest {
            validate_digest(d)?;
        }
        Ok((go_domain, go_path, tag, digest))
    }
}

/// Compares our result with the oracle's. With an empty Go domain, our
/// registry/path must still join to Go's path (= Go's Name()).
fn agrees_with_oracle(input: &str) -> Result<(), String> {
    let ours = image::parse(input);
    let go = oracle::parse_normalized_named(input);
    match (&ours, &go) {
        (Err(_), Err(())) => Ok(()),
        (Ok(r), Ok((dom, path, tag, dig))) => {
            let same_name = if dom.is_empty() {
                r.repository() == *path && r.registry.contains('.') && r.registry.contains('_')
            } else {
                r.registry == *dom && r.path == *path
            };
            if same_name && r.tag == *tag && r.digest == *dig {
                Ok(())
            } else {
                Err(format!("{input:?}: ours {r:?}, go {go:?}"))
            }
        }
        _ => Err(format!("{input:?}: ours {ours:?}, go {go:?}")),
    }
}

#[test]
fn oracle_agrees_on_table() {
    let failures: Vec<String> = table()
        .iter()
        .filter_map(|c| agrees_with_oracle(&c.input).err())
        .collect();
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

// ---------------------------------------------------------------------------
// Generators
// ---------------------------------------------------------------------------

/// xorshift64* — deterministic, dependency-free.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    fn pick<'a>(&mut self, xs: &[&'a str]) -> &'a str {
        xs[self.below(xs.len())]
    }
}

const DOMAINS: &[&str] = &[
    "",
    "",
    "",
    "docker.io",
    "index.docker.io",
    "registry-1.docker.io",
    "localhost",
    "LOCALHOST",
    "localhost:5000",
    "Evilhost",
    "example.com",
    "Example.COM",
    "a_b.com",
    "foo_bar.com:80",
    "[::1]",
    "[::1]:5000",
    "[fe80::1%eth0]",
    "1.2.3.4:5",
    "a-.com",
    "-a.com",
    "xn--n3h.com",
    "host:port",
    "a..b",
    "ex ample.com",
    "\u{e9}.com",
    "gcr.io",
    "ghcr.io",
    "quay.io:443",
    "[2001:db8::]",
    "[]",
    "[:]",
    "sha256",
    "library",
];
const COMPONENTS: &[&str] = &[
    "library",
    "nginx",
    "a",
    "a.b",
    "a..b",
    "a__b",
    "a___b",
    "a--b",
    "A",
    "-a",
    "a-",
    "_a",
    "sha256",
    HEX64,
    "x",
    "\u{e9}",
    "",
    "..",
    ".",
    "app",
    "my-org",
    "0",
    "a_b",
    "a.-b",
    "a@b",
    "a:b",
    "UPPER",
    "foo.bar.com",
];
const TAGS: &[&str] = &[
    "latest",
    "1.0",
    "Uppercase",
    "_x",
    ".x",
    "-x",
    "1.0:evil",
    "t\u{e2}g",
    "",
    "v1-rc.2",
    "5000",
    HEX64,
    "t/g",
    "\u{660}",
];
const ALPHABET: &[&str] = &[
    "a",
    "b",
    "z",
    "0",
    "9",
    "A",
    "Z",
    "/",
    ":",
    "@",
    ".",
    "_",
    "-",
    "[",
    "]",
    "%",
    " ",
    "\n",
    "\u{e9}",
    "\u{212a}",
    "\u{660}",
    "f",
    "sha256:",
    "docker.io",
    "library/",
    "//",
];

fn digest_variant(rng: &mut Rng) -> String {
    let hex = |n: usize, rng: &mut Rng| -> String {
        (0..n)
            .map(|_| b"0123456789abcdef"[rng.below(16)] as char)
            .collect()
    };
    match rng.below(12) {
        0 => format!("sha256:{}", hex(64, rng)),
        1 => format!("sha256:{}", hex(64, rng).to_uppercase()),
        2 => format!("sha256:{}", hex(63, rng)),
        3 => format!("sha512:{}", hex(128, rng)),
        4 => format!("sha384:{}", hex(96, rng)),
        5 => format!("blake3:{}", hex(64, rng)),
        6 => format!("SHA256:{}", hex(64, rng)),
        7 => format!("sha256+b64:{}", hex(64, rng)),
        8 => format!("md5:{}", hex(32, rng)),
        9 => "sha256:".to_string(),
        10 => String::new(),
        _ => format!("sha256:{}", hex(64, rng)),
    }
}

/// A reference assembled from grammar-ish pieces, then maybe mutated.
fn generated_reference(rng: &mut Rng) -> String {
    let mut s = String::new();
    let domain = rng.pick(DOMAINS);
    if !domain.is_empty() {
        s.push_str(domain);
        s.push('/');
    }
    let n = 1 + rng.below(4);
    for i in 0..n {
        if i > 0 {
            s.push('/');
        }
        s.push_str(rng.pick(COMPONENTS));
    }
    if rng.below(2) == 0 {
        s.push(':');
        s.push_str(rng.pick(TAGS));
    }
    if rng.below(3) == 0 {
        s.push('@');
        s.push_str(&digest_variant(rng));
    }
    // occasional long paths around the 255 limit
    if rng.below(20) == 0 {
        let extra = "a".repeat(230 + rng.below(40));
        s = format!(
            "{}/{extra}",
            rng.pick(&["example.com", "x", "a_b.com", "Evil"])
        );
    }
    for _ in 0..rng.below(3) {
        mutate(rng, &mut s);
    }
    s
}

fn mutate(rng: &mut Rng, s: &mut String) {
    let chars: Vec<char> = s.chars().collect();
    let pos = if chars.is_empty() {
        0
    } else {
        rng.below(chars.len() + 1)
    };
    let mut out: String = chars[..pos.min(chars.len())].iter().collect();
    match rng.below(3) {
        0 => out.push_str(rng.pick(ALPHABET)), // insert
        1 => {}                                // delete one
        _ => out.push_str(rng.pick(ALPHABET)), // replace
    }
    let skip = if rng.below(3) == 0 { 0 } else { 1 };
    out.extend(chars.iter().skip(pos + skip));
    *s = out;
}

fn random_string(rng: &mut Rng) -> String {
    let len = rng.below(40);
    match rng.below(3) {
        0 => {
            let bytes: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
            String::from_utf8_lossy(&bytes).into_owned()
        }
        1 => (0..len)
            .filter_map(|_| char::from_u32(rng.next() as u32 % 0x11_0000))
            .collect(),
        _ => (0..len).map(|_| rng.pick(ALPHABET)).collect(),
    }
}

const GENERATED: usize = 30_000;

#[test]
fn oracle_agrees_on_generated_and_random() {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut failures = Vec::new();
    let (mut valid, mut total) = (0, 0);
    for i in 0..GENERATED {
        let s = if i % 3 == 2 {
            random_string(&mut rng)
        } else {
            generated_reference(&mut rng)
        };
        total += 1;
        if image::parse(&s).is_ok() {
            valid += 1;
        }
        if let Err(e) = agrees_with_oracle(&s) {
            failures.push(e);
        }
    }
    eprintln!(
        "oracle: {total} inputs, {valid} valid, {} disagreements",
        failures.len()
    );
    assert!(
        valid > total / 20,
        "generator produces too few valid references"
    );
    failures.truncate(30);
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

// ---------------------------------------------------------------------------
// Differential test against oci-spec
// ---------------------------------------------------------------------------

/// Known deviations of `oci_spec::distribution::Reference` (0.10) from
/// distribution/reference v0.6.0 + go-digest v1.0.0. Each was checked
/// against the Go source (normalize.go, regexp.go, reference.go, go-digest
/// algorithm.go/digest.go) and against oci-spec's reference.rs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum Known {
    /// Go's splitDockerDomain treats a first component that is not all
    /// lowercase as a registry (`Evilhost/app` → registry `Evilhost`,
    /// `LOCALHOST/app` → `LOCALHOST`). oci-spec only looks for `.`, `:` and
    /// `localhost`, so it reports `docker.io` with repository `Evilhost/app`
    /// (which also makes its path longer, hence NameTooLong sometimes).
    /// Security-relevant: the runtime contacts the host `Evilhost`.
    UppercaseFirstComponentIsRegistry,
    /// regexp.go allows `[v6:addr]` hosts (ipv6address); oci-spec's single
    /// regex has no IPv6 alternative and rejects them.
    Ipv6Registry,
    /// Go's `\w` is ASCII; the regex crate's `\w` is Unicode, so oci-spec
    /// accepts tags such as `tâg` or Arabic-Indic digits (and counts the
    /// 128-character limit in chars, not bytes).
    UnicodeTag,
    /// go-digest requires lowercase hex (`^[a-f0-9]{64}$`); oci-spec only
    /// checks the length, so `sha256:FFFF…` passes there.
    UppercaseDigestHex,
    /// ParseNormalizedNamed rejects a bare 64-character lowercase hex string
    /// (anchoredIdentifierRegexp); oci-spec has no such check and returns
    /// `docker.io/library/<hex>`.
    BareIdentifier,
    /// For `a_b.example.com/...` Go's path includes the first component, so
    /// its 255-byte limit is reached earlier; oci-spec measures only the part
    /// after the first `/`.
    UnderscoreHostLength,
}

type Oci = oci_spec::distribution::Reference;

fn classify(
    input: &str,
    ours: &Result<ImageRef, image::InvalidReference>,
    theirs: &Result<Oci, oci_spec::distribution::ParseError>,
) -> Option<Known> {
    use oci_spec::distribution::ParseError as PE;
    let first = input.split_once('/').map(|(f, _)| f);
    let upper_first = first.is_some_and(|f| {
        !f.contains(['.', ':']) && f != "localhost" && f.bytes().any(|b| b.is_ascii_uppercase())
    });
    match (ours, theirs) {
        (Ok(o), Ok(t)) => {
            if upper_first
                && Some(o.registry.as_str()) == first
                && t.registry() == "docker.io"
                && t.repository() == format!("{}/{}", o.registry, o.path)
            {
                return Some(Known::UppercaseFirstComponentIsRegistry);
            }
            None
        }
        (Ok(o), Err(e)) => {
            if o.registry.starts_with('[') {
                Some(Known::Ipv6Registry)
            } else if upper_first && Some(o.registry.as_str()) == first && *e == PE::NameTooLong {
                Some(Known::UppercaseFirstComponentIsRegistry)
            } else {
                None
            }
        }
        (Err(o), Ok(t)) => match o.kind() {
            ErrorKind::Identifier => Some(Known::BareIdentifier),
            ErrorKind::InvalidFormat if t.tag().is_some_and(|g| !g.is_ascii()) => {
                Some(Known::UnicodeTag)
            }
            ErrorKind::DigestInvalidFormat
                if t.digest()
                    .is_some_and(|d| d.bytes().any(|b| b.is_ascii_uppercase())) =>
            {
                Some(Known::UppercaseDigestHex)
            }
            ErrorKind::NameTooLong if t.registry().contains('_') => {
                Some(Known::UnderscoreHostLength)
            }
            _ => None,
        },
        (Err(_), Err(_)) => None,
    }
}

/// Some(disagreement) if the two parsers disagree on `input`.
fn compare_with_oci(input: &str) -> Result<Option<Known>, String> {
    let ours = image::parse(input);
    let theirs = Oci::from_str(input);
    let same = match (&ours, &theirs) {
        (Ok(o), Ok(t)) => {
            // oci-spec adds the default tag "latest" when there is neither a
            // tag nor a digest; that is an API difference, not a parse one.
            let our_tag = match (&o.tag, &o.digest) {
                (None, None) => Some("latest"),
                (t, _) => t.as_deref(),
            };
            o.registry == t.registry()
                && o.path == t.repository()
                && our_tag == t.tag()
                && o.digest.as_deref() == t.digest()
        }
        (Err(_), Err(_)) => true,
        _ => false,
    };
    if same {
        return Ok(None);
    }
    classify(input, &ours, &theirs)
        .map(Some)
        .ok_or_else(|| format!("{input:?}: ours {ours:?}, oci-spec {theirs:?}"))
}

fn run_oci_diff(
    inputs: impl Iterator<Item = String>,
) -> (usize, std::collections::BTreeMap<Known, usize>, Vec<String>) {
    let mut counts = std::collections::BTreeMap::new();
    let mut unexplained = Vec::new();
    let mut n = 0;
    for s in inputs {
        n += 1;
        match compare_with_oci(&s) {
            Ok(None) => {}
            Ok(Some(k)) => *counts.entry(k).or_insert(0) += 1,
            Err(e) => unexplained.push(e),
        }
    }
    (n, counts, unexplained)
}

#[test]
fn oci_spec_differential_table() {
    let (n, counts, unexplained) = run_oci_diff(table().into_iter().map(|c| c.input));
    eprintln!("oci-spec on table: {n} inputs, known disagreements {counts:?}");
    assert!(
        unexplained.is_empty(),
        "unexplained:\n{}",
        unexplained.join("\n")
    );
    // every allow-listed deviation is demonstrated by the table
    for k in [
        Known::UppercaseFirstComponentIsRegistry,
        Known::Ipv6Registry,
        Known::UnicodeTag,
        Known::UppercaseDigestHex,
        Known::BareIdentifier,
        Known::UnderscoreHostLength,
    ] {
        assert!(counts.contains_key(&k), "{k:?} not exercised by the table");
    }
}

#[test]
fn oci_spec_differential_generated() {
    let mut rng = Rng(0x0123_4567_89ab_cdef);
    let inputs = (0..GENERATED).map(move |i| {
        if i % 3 == 2 {
            random_string(&mut rng)
        } else {
            generated_reference(&mut rng)
        }
    });
    let (n, counts, mut unexplained) = run_oci_diff(inputs);
    eprintln!("oci-spec on generated: {n} inputs, known disagreements {counts:?}");
    let total = unexplained.len();
    unexplained.truncate(30);
    assert!(
        unexplained.is_empty(),
        "{total} unexplained, first:\n{}",
        unexplained.join("\n")
    );
}

// ---------------------------------------------------------------------------
// Robustness
// ---------------------------------------------------------------------------

fn check_invariants(s: &str) {
    match image::parse(s) {
        Ok(r) => {
            assert!(!r.registry.is_empty() && !r.path.is_empty(), "{s:?}");
            assert!(r.registry.is_ascii() && r.path.is_ascii(), "{s:?}");
            // The canonical form parses to the same thing (idempotence).
            let again =
                image::parse(&r.to_string()).unwrap_or_else(|e| panic!("{s:?} -> {r} -> {e}"));
            assert_eq!(again, r, "{s:?}");
            assert_eq!(image::repository(s).unwrap(), r.repository());
        }
        Err(e) => {
            let msg = e.to_string();
            assert!(msg.starts_with("invalid image reference \""), "{msg}");
            assert!(
                msg.bytes().all(|b| (0x20..0x7f).contains(&b)),
                "not one printable line: {msg:?}"
            );
            assert!(msg.len() < 2_000);
        }
    }
}

#[test]
fn fuzz_no_panics_and_invariants() {
    let mut rng = Rng(0xdead_beef_cafe_f00d);
    for i in 0..50_000 {
        let s = match i % 3 {
            0 => random_string(&mut rng),
            _ => generated_reference(&mut rng),
        };
        check_invariants(&s);
        let _ = image::is_local_image_id(&s);
    }
    for c in table() {
        check_invariants(&c.input);
    }
}

/// The CPU time this thread has used: unlike wall-clock time, it does not grow while other
/// processes hold the cores.
fn thread_cpu_time() -> Duration {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    Duration::new(
        u64::try_from(t.tv_sec).unwrap_or(0),
        u32::try_from(t.tv_nsec).unwrap_or(0),
    )
}

/// The least CPU time of three parses of `s`.
fn fastest_parse(s: &str) -> Duration {
    (0..3)
        .map(|_| {
            let start = thread_cpu_time();
            let _ = image::parse(s);
            thread_cpu_time().saturating_sub(start)
        })
        .min()
        .expect("three runs")
}

#[test]
fn linear_time_on_hostile_input() {
    // Each hostile shape at n and at 8n units: a linear scanner takes about 8 times the CPU
    // time on the larger, a quadratic one 64 times. The bound (24 times, plus a millisecond for
    // inputs that parse in microseconds) compares the machine with itself, so it holds on a
    // slow or loaded machine too.
    let shapes: [fn(usize) -> String; 13] = [
        |n| "a-".repeat(n),
        |n| "a".repeat(n),
        |n| "a/".repeat(n),
        |n| format!("{}!", "a__".repeat(n)),
        |n| format!("example.com/{}", "a-b.".repeat(n)),
        |n| format!("{}/app", "a.".repeat(n)),
        |n| format!("[{}]/app", ":".repeat(n)),
        |n| format!("app:{}", "a".repeat(n)),
        |n| format!("app@sha256:{}", "f".repeat(n)),
        |n| format!("app@{}:{}", "a+".repeat(n), "f".repeat(64)),
        |n| ":".repeat(n),
        |n| "@".repeat(n),
        |n| "\u{e9}".repeat(n),
    ];
    let n = 12_500;
    for shape in shapes {
        let (small, large) = (shape(n), shape(8 * n));
        let (t1, t8) = (fastest_parse(&small), fastest_parse(&large));
        eprintln!(
            "{t1:?} for {} bytes, {t8:?} for {} bytes of {}...",
            small.len(),
            large.len(),
            small.chars().take(12).collect::<String>()
        );
        assert!(
            t8 <= t1 * 24 + Duration::from_millis(1),
            "{t8:?} for 8n against {t1:?} for n: not linear, for {}...",
            &small[..20]
        );
    }
}
