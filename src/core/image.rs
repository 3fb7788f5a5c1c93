//! Container image reference parsing, as containerd does it.
//!
//! containerd (CRI plugin) turns the `image:` string of a pod into a registry
//! location with `ParseNormalizedNamed` from
//! `github.com/distribution/reference` (v0.6.0), and validates digests with
//! `github.com/opencontainers/go-digest` (v1.0.0). CRI-O differs for short
//! names (no registry component): it tries the node's unqualified search
//! registries (containers-registries.conf), which no admission webhook can see.
//! This module reproduces containerd's behaviour with a hand-written,
//! single-pass scanner: no regular expressions, no backtracking, no allocation
//! beyond the result, no panics, no I/O, std only.
//! Running time is linear in the length of the input.
//!
//! # Normalisation (what `ParseNormalizedNamed` does)
//!
//! * The text before the first `/` is the registry ("domain") only when it is
//!   exactly `localhost`, contains `.` or `:`, or is not all lowercase
//!   (`Evilhost/app` → registry `Evilhost`, `LOCALHOST/app` → `LOCALHOST`).
//!   Otherwise the registry is `docker.io` and the whole name is the path.
//! * `index.docker.io` (the legacy Docker Hub name) is folded into `docker.io`.
//!   Nothing else is folded: `registry-1.docker.io`, `Docker.io` or
//!   `INDEX.DOCKER.IO` stay as written, because the runtime treats them as
//!   different hosts in its configuration.
//! * On `docker.io` a single-component path gets `library/` in front
//!   (`nginx`, `docker.io/nginx` and `index.docker.io/nginx` are all
//!   `docker.io/library/nginx`). `docker.io/library/x` stays as it is, and
//!   `docker.io/library/a/b` is not shortened.
//! * A bare 64-character lowercase hex string is rejected (it is an image ID,
//!   not a name). `sha256:<hex>` however is parsed as the repository
//!   `docker.io/library/sha256` with tag `<hex>` — exactly what
//!   `ParseNormalizedNamed` returns. See [`is_local_image_id`]: containerd
//!   resolves such strings as local image IDs instead.
//! * No default tag is added (`tag` is `None` when the reference has none;
//!   the runtime would pull `:latest`).
//!
//! # Validation (the distribution/reference grammar)
//!
//! * path components: `[a-z0-9]+` separated by `.`, `_`, `__` or one or more
//!   `-`; components separated by `/`; uppercase is invalid.
//! * registry: DNS-like labels `[a-zA-Z0-9]([a-zA-Z0-9-]*[a-zA-Z0-9])?` joined
//!   by `.`, or an IPv6 literal `\[[a-fA-F0-9:]+\]`; optional `:port` (digits).
//! * tag: `[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}` (ASCII only).
//! * digest: `algorithm:hex` where only `sha256` (64), `sha384` (96) and
//!   `sha512` (128 lowercase hex characters) are accepted — the algorithms
//!   go-digest v1.0.0 registers and the runtime binaries link. Anything else
//!   (`md5`, `blake3`, `sha256+b64`, uppercase hex, wrong length) is rejected.
//! * the path (after the registry, including an added `library/`) may be at
//!   most 255 bytes. Since v0.6.0 the registry does not count.
//! * a tag and a digest together (`name:tag@sha256:…`) are valid; the runtime
//!   pulls by digest and ignores the tag.
//!
//! # One deliberate difference
//!
//! If the first component contains `.` or `:` but is not a valid registry name
//! while it *is* a valid path component (only possible with `_`, e.g.
//! `a_b.example.com/app`), the Go library silently treats the whole string as
//! a path with an *empty* domain. containerd then contacts the host
//! `a_b.example.com` anyway (it takes everything before the first `/` as the
//! host). We report `registry = "a_b.example.com"`, `path = "app"`: the host
//! really contacted. [`repository`] equals the Go `Name()` either way
//! (`a_b.example.com/app`), and the 255-byte limit is applied to the Go path
//! (`a_b.example.com/app`), so acceptance is identical.
//!
//! CRI-O uses the containers/image fork of this package; older copies of the
//! Go code (and possibly that fork) count the registry in the 255 limit, so
//! they may reject very long names that this module accepts. That only makes
//! the runtime stricter, never a different registry.
//!
//! # Comparing registries
//!
//! Registry names are returned with their original case. DNS is
//! case-insensitive, so `Example.com` and `example.com` reach the same host;
//! an allow-list should either compare case-sensitively (and so fail closed)
//! or lowercase both sides; a deny-list must lowercase.

use std::fmt;

/// Docker Hub's canonical name.
pub(crate) const DEFAULT_DOMAIN: &str = "docker.io";
/// Docker Hub's legacy name, folded into [`DEFAULT_DOMAIN`].
pub(crate) const LEGACY_DEFAULT_DOMAIN: &str = "index.docker.io";
/// Namespace of Docker Hub's official images.
const OFFICIAL_REPO_PREFIX: &str = "library/";
/// Reserved name that is always a registry.
const LOCALHOST: &str = "localhost";
/// Maximum length, in bytes, of the path part of a name.
pub const NAME_TOTAL_LENGTH_MAX: usize = 255;
/// Maximum number of characters of the offending reference kept in errors.
const MAX_ERROR_REFERENCE_CHARS: usize = 256;

/// A parsed and normalised image reference.
///
/// All fields are owned `String`s (the path may need a `library/` prefix that
/// is not in the input, so borrowing is not always possible).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ImageRef {
    /// Registry host, with optional `:port`, as written (case preserved),
    /// except that `index.docker.io` becomes `docker.io` and a missing
    /// registry becomes `docker.io`. Never empty.
    pub registry: String,
    /// Repository path inside the registry, e.g. `library/nginx`. Never empty.
    pub path: String,
    /// Tag without the `:`; `None` if absent (no `latest` is added).
    pub tag: Option<String>,
    /// Digest `algorithm:hex` without the `@`; `None` if absent.
    pub digest: Option<String>,
}

impl ImageRef {
    /// `registry/path`, the string allow-lists compare with.
    pub fn repository(&self) -> String {
        let mut s = String::with_capacity(self.registry.len() + 1 + self.path.len());
        s.push_str(&self.registry);
        s.push('/');
        s.push_str(&self.path);
        s
    }
}

impl fmt::Display for ImageRef {
    /// The fully qualified form: `registry/path[:tag][@digest]`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.registry, self.path)?;
        if let Some(tag) = &self.tag {
            write!(f, ":{tag}")?;
        }
        if let Some(digest) = &self.digest {
            write!(f, "@{digest}")?;
        }
        Ok(())
    }
}

/// Why a reference was rejected. The variants follow the errors of
/// distribution/reference and go-digest.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// The empty string.
    Empty,
    /// A bare 64-character hex string (an image ID, not a name).
    Identifier,
    /// Uppercase letters in the repository path.
    NameContainsUppercase,
    /// The string does not match the reference grammar.
    InvalidFormat,
    /// The path is longer than 255 bytes.
    NameTooLong,
    /// Digest algorithm other than sha256, sha384, sha512.
    DigestUnsupported,
    /// Digest hex part of the wrong length for its algorithm.
    DigestInvalidLength,
    /// Digest hex part not lowercase hex.
    DigestInvalidFormat,
}

impl ErrorKind {
    fn message(self) -> &'static str {
        match self {
            ErrorKind::Empty => "repository name must have at least one component",
            ErrorKind::Identifier => {
                "cannot specify 64-byte hexadecimal strings (an image ID is not a repository name)"
            }
            ErrorKind::NameContainsUppercase => "repository name must be lowercase",
            ErrorKind::InvalidFormat => "invalid reference format",
            ErrorKind::NameTooLong => "repository name must not be more than 255 characters",
            ErrorKind::DigestUnsupported => {
                "unsupported digest algorithm (only sha256, sha384 and sha512 are accepted)"
            }
            ErrorKind::DigestInvalidLength => "invalid checksum digest length",
            ErrorKind::DigestInvalidFormat => "invalid checksum digest format",
        }
    }
}

/// A rejected reference. `Display` is a single line of printable ASCII:
/// `invalid image reference "<reference>": <reason>`; the reference is
/// escaped (`\n`, `\"`, `\u{..}`) and cut after 256 characters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InvalidReference {
    /// The first [`MAX_ERROR_REFERENCE_CHARS`] characters of the input.
    reference: String,
    truncated: bool,
    kind: ErrorKind,
    /// Which part failed, for `InvalidFormat` (empty otherwise).
    detail: &'static str,
}

impl InvalidReference {
    fn new(reference: &str, kind: ErrorKind, detail: &'static str) -> Self {
        let mut kept = reference.char_indices().skip(MAX_ERROR_REFERENCE_CHARS);
        let (reference, truncated) = match kept.next() {
            Some((cut, _)) => (reference[..cut].to_owned(), true),
            None => (reference.to_owned(), false),
        };
        InvalidReference {
            reference,
            truncated,
            kind,
            detail,
        }
    }

    /// The category of the failure.
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// The rejected reference (possibly truncated to 256 characters).
    pub fn reference(&self) -> &str {
        &self.reference
    }
}

impl fmt::Display for InvalidReference {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("invalid image reference \"")?;
        for c in self.reference.chars() {
            // escape_default: printable ASCII stays, everything else
            // (quotes, backslash, control characters, non-ASCII) is escaped.
            write!(f, "{}", c.escape_default())?;
        }
        if self.truncated {
            f.write_str("...")?;
        }
        write!(f, "\": {}", self.kind.message())?;
        if !self.detail.is_empty() {
            write!(f, ": {}", self.detail)?;
        }
        Ok(())
    }
}

impl std::error::Error for InvalidReference {}

/// Parses `reference` like `ParseNormalizedNamed` (distribution/reference
/// v0.6.0) followed by go-digest validation of the digest.
pub fn parse(reference: &str) -> Result<ImageRef, InvalidReference> {
    let fail = |kind, detail| Err(InvalidReference::new(reference, kind, detail));

    if reference.is_empty() {
        return fail(ErrorKind::Empty, "");
    }
    if is_identifier(reference) {
        return fail(ErrorKind::Identifier, "");
    }

    // splitDockerDomain: choose the domain and the remainder.
    let (domain, remainder, add_library) = split_docker_domain(reference);

    // The remainder is [library/]name[:tag][@digest]. Names contain neither
    // ':' nor '@', tags contain no '@', so the first ':' or '@' ends the name.
    let name_end = remainder.find([':', '@']).unwrap_or(remainder.len());
    let (name, suffix) = remainder.split_at(name_end);

    // ParseNormalizedNamed's lowercase check covers the remainder up to the
    // first ':'. Non-ASCII is rejected by the grammar below anyway.
    let remote_end = remainder.find(':').unwrap_or(remainder.len());
    if remainder[..remote_end]
        .bytes()
        .any(|b| b.is_ascii_uppercase())
    {
        return fail(ErrorKind::NameContainsUppercase, "");
    }

    let (tag, digest) = if let Some(rest) = suffix.strip_prefix(':') {
        match rest.find('@') {
            Some(at) => (Some(&rest[..at]), Some(&rest[at + 1..])),
            None => (Some(rest), None),
        }
    } else if let Some(rest) = suffix.strip_prefix('@') {
        (None, Some(rest))
    } else {
        (None, None)
    };

    // Grammar of "domain/remainder" (the string Go hands to Parse).
    // `go_path_prefix_len` is the length of what the Go path holds in front
    // of `name` when Go had to treat the domain as a path component.
    let go_path_prefix_len = if is_domain_and_port(domain.as_bytes()) {
        0
    } else if is_path_component(domain.as_bytes()) {
        // See "One deliberate difference" in the module documentation.
        domain.len() + 1
    } else if is_path_component(domain.to_ascii_lowercase().as_bytes()) {
        return fail(ErrorKind::NameContainsUppercase, "");
    } else {
        return fail(
            ErrorKind::InvalidFormat,
            "registry name is not a valid host[:port]",
        );
    };

    let library_len = if add_library {
        OFFICIAL_REPO_PREFIX.len()
    } else {
        0
    };
    if !is_remote_name(name.as_bytes()) {
        return fail(
            ErrorKind::InvalidFormat,
            "repository path components must be lowercase letters and digits \
             separated by '.', '_', '__' or '-'",
        );
    }
    if let Some(tag) = tag {
        if !is_tag(tag.as_bytes()) {
            return fail(
                ErrorKind::InvalidFormat,
                "tag must be 1-128 of [A-Za-z0-9_.-], not starting with '.' or '-'",
            );
        }
    }
    if let Some(digest) = digest {
        if !is_digest_pattern(digest.as_bytes()) {
            return fail(ErrorKind::InvalidFormat, "digest must be algorithm:hex");
        }
    }

    if go_path_prefix_len + library_len + name.len() > NAME_TOTAL_LENGTH_MAX {
        return fail(ErrorKind::NameTooLong, "");
    }

    if let Some(digest) = digest {
        if let Err(kind) = validate_digest(digest) {
            return fail(kind, "");
        }
    }

    let registry = if domain == LEGACY_DEFAULT_DOMAIN {
        DEFAULT_DOMAIN
    } else {
        domain
    };
    let mut path = String::with_capacity(library_len + name.len());
    if add_library {
        path.push_str(OFFICIAL_REPO_PREFIX);
    }
    path.push_str(name);
    Ok(ImageRef {
        registry: registry.to_owned(),
        path,
        tag: tag.map(str::to_owned),
        digest: digest.map(str::to_owned),
    })
}

/// `registry/path` of `reference` after normalisation: the string to compare
/// with allow-list prefixes (`docker.io/library/nginx`, `ghcr.io/org/app`).
/// Compare with a trailing `/` on the allowed prefix (`ghcr.io/org/`), or
/// `ghcr.io/org` would also admit `ghcr.io/organisation-of-attacker`.
pub fn repository(reference: &str) -> Result<String, InvalidReference> {
    parse(reference).map(|r| r.repository())
}

/// True when containerd's CRI image service would resolve `reference` as a
/// *local image ID* (or a unique ID prefix) rather than as a repository name:
/// the reference has no `/` and no `@` and starts with `sha256:`, `sha384:`
/// or `sha512:` (kubelet passes it unchanged because `ParseNormalizedNamed`
/// accepts it as `docker.io/library/sha256:<tag>`; containerd's
/// `LocalResolve` then tries `digest.Parse` and an ID-prefix lookup first).
/// Such an image may have been pulled from any registry by anyone, so an
/// admission webhook should reject these references.
pub fn is_local_image_id(reference: &str) -> bool {
    if reference.contains(['/', '@']) {
        return false;
    }
    match reference.split_once(':') {
        Some((alg, rest)) => matches!(alg, "sha256" | "sha384" | "sha512") && !rest.is_empty(),
        None => false,
    }
}

/// splitDockerDomain. Returns (domain as written, remainder, whether
/// `library/` must be prepended to the remainder).
fn split_docker_domain(name: &str) -> (&str, &str, bool) {
    let (domain, remainder) = match name.split_once('/') {
        // Familiar single-element names ("ubuntu", "ubuntu:latest",
        // "localhost:5000" = repository localhost with tag 5000).
        None => (DEFAULT_DOMAIN, name),
        Some((first, rest)) => {
            if first == LOCALHOST
                || first == LEGACY_DEFAULT_DOMAIN
                || first.contains(['.', ':'])
                // Go: strings.ToLower(first) != first. Non-ASCII letters are
                // treated as "lowercase" here; either way the result is an
                // error, because neither branch accepts non-ASCII.
                || first.bytes().any(|b| b.is_ascii_uppercase())
            {
                (first, rest)
            } else {
                (DEFAULT_DOMAIN, name)
            }
        }
    };
    let is_hub = domain == DEFAULT_DOMAIN || domain == LEGACY_DEFAULT_DOMAIN;
    (domain, remainder, is_hub && !remainder.contains('/'))
}

/// `^[a-f0-9]{64}$`
fn is_identifier(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(is_lower_hex)
}

fn is_lower_hex(b: u8) -> bool {
    b.is_ascii_digit() || (b'a'..=b'f').contains(&b)
}

fn is_lower_alnum(b: u8) -> bool {
    b.is_ascii_lowercase() || b.is_ascii_digit()
}

/// `[a-z0-9]+(?:(?:[._]|__|[-]+)[a-z0-9]+)*`
fn is_path_component(c: &[u8]) -> bool {
    let mut i = 0;
    let mut need_alnum = true; // at start or just after a separator
    while i < c.len() {
        let b = c[i];
        if is_lower_alnum(b) {
            need_alnum = false;
            i += 1;
            continue;
        }
        if need_alnum {
            return false;
        }
        match b {
            b'.' => i += 1,
            b'_' => {
                i += 1;
                if c.get(i) == Some(&b'_') {
                    i += 1;
                }
            }
            b'-' => {
                while c.get(i) == Some(&b'-') {
                    i += 1;
                }
            }
            _ => return false,
        }
        need_alnum = true;
    }
    !need_alnum
}

/// `pathComponent(?:/pathComponent)*`
fn is_remote_name(name: &[u8]) -> bool {
    name.split(|&b| b == b'/').all(is_path_component)
}

/// `(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])`
fn is_domain_label(l: &[u8]) -> bool {
    match (l.first(), l.last()) {
        (Some(&first), Some(&last)) => {
            first.is_ascii_alphanumeric()
                && last.is_ascii_alphanumeric()
                && l.iter().all(|&b| b.is_ascii_alphanumeric() || b == b'-')
        }
        _ => false,
    }
}

/// `(?:domainName|\[[a-fA-F0-9:]+\])(?::[0-9]+)?`
fn is_domain_and_port(d: &[u8]) -> bool {
    let (host_ok, port) = if d.first() == Some(&b'[') {
        // IPv6 literal: no zone ("%eth0"), no embedded IPv4 ("::1.2.3.4").
        let Some(close) = d.iter().position(|&b| b == b']') else {
            return false;
        };
        let inner = &d[1..close];
        let ok = !inner.is_empty() && inner.iter().all(|&b| b.is_ascii_hexdigit() || b == b':');
        (ok, &d[close + 1..])
    } else {
        let end = d.iter().position(|&b| b == b':').unwrap_or(d.len());
        (
            d[..end].split(|&b| b == b'.').all(is_domain_label),
            &d[end..],
        )
    };
    host_ok
        && match port.split_first() {
            None => true,
            Some((b':', digits)) => !digits.is_empty() && digits.iter().all(u8::is_ascii_digit),
            Some(_) => false,
        }
}

fn is_word(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}

/// `[\w][\w.-]{0,127}` with ASCII `\w`.
fn is_tag(t: &[u8]) -> bool {
    match t.split_first() {
        Some((&first, rest)) => {
            is_word(first)
                && rest.len() <= 127
                && rest.iter().all(|&b| is_word(b) || b == b'.' || b == b'-')
        }
        None => false,
    }
}

/// `[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*[:][[:xdigit:]]{32,}`
fn is_digest_pattern(d: &[u8]) -> bool {
    let Some(colon) = d.iter().position(|&b| b == b':') else {
        return false;
    };
    let (alg, encoded) = (&d[..colon], &d[colon + 1..]);
    let alg_ok = alg
        .split(|&b| matches!(b, b'-' | b'_' | b'+' | b'.'))
        .all(|part| {
            matches!(part.split_first(), Some((f, rest))
            if f.is_ascii_alphabetic() && rest.iter().all(u8::is_ascii_alphanumeric))
        });
    alg_ok && encoded.len() >= 32 && encoded.iter().all(u8::is_ascii_hexdigit)
}

/// go-digest v1.0.0 `Digest.Validate`, for a string that already matched
/// [`is_digest_pattern`].
fn validate_digest(d: &str) -> Result<(), ErrorKind> {
    let (alg, encoded) = d.split_once(':').ok_or(ErrorKind::DigestInvalidFormat)?;
    let want = match alg {
        "sha256" => 64,
        "sha384" => 96,
        "sha512" => 128,
        // go-digest reports "invalid format" when the algorithm does not
        // match its own (lowercase) algorithm grammar, else "unsupported".
        _ if alg.bytes().any(|b| b.is_ascii_uppercase()) => {
            return Err(ErrorKind::DigestInvalidFormat)
        }
        _ => return Err(ErrorKind::DigestUnsupported),
    };
    if encoded.len() != want {
        return Err(ErrorKind::DigestInvalidLength);
    }
    if !encoded.bytes().all(is_lower_hex) {
        return Err(ErrorKind::DigestInvalidFormat);
    }
    Ok(())
}
