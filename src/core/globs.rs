//! Name and image globs, as policies and exceptions match them. A leaf.

/// Gatekeeper's namespace and name globs: a leading or trailing `*` matches any suffix or
/// prefix; otherwise the whole name.
pub fn glob_matches(pattern: &str, name: &str) -> bool {
    match (pattern.strip_prefix('*'), pattern.strip_suffix('*')) {
        _ if pattern == "*" => true,
        (Some(suffix), _) if !suffix.ends_with('*') => name.ends_with(suffix),
        (_, Some(prefix)) if !prefix.starts_with('*') => name.starts_with(prefix),
        (Some(_), Some(_)) => name.contains(&pattern[1..pattern.len() - 1]),
        _ => pattern == name,
    }
}

/// Whether `image` matches the glob `pattern` (`*` any run of characters, `/` included; `?`
/// one character).
pub fn image_matches(pattern: &str, image: &str) -> bool {
    fn at(p: &[u8], s: &[u8]) -> bool {
        // Iterative wildcard matching with backtracking to the last `*`: linear in practice,
        // never exponential.
        let (mut pi, mut si) = (0, 0);
        let (mut star, mut mark) = (None, 0);
        while si < s.len() {
            if pi < p.len() && (p[pi] == b'?' || p[pi] == s[si]) {
                pi += 1;
                si += 1;
            } else if pi < p.len() && p[pi] == b'*' {
                star = Some(pi);
                mark = si;
                pi += 1;
            } else if let Some(star) = star {
                pi = star + 1;
                mark += 1;
                si = mark;
            } else {
                return false;
            }
        }
        p[pi..].iter().all(|&c| c == b'*')
    }
    at(pattern.as_bytes(), image.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn image_globs() {
        for (pattern, image, want) in [
            ("quay.io/*", "quay.io/a/b:1", true),
            ("quay.io/*", "quay.iox/a", false),
            ("*/nginx:1.?", "docker.io/library/nginx:1.2", true),
            ("*/nginx:1.?", "docker.io/library/nginx:1.27", false),
            ("a*b*c", "axxbyyc", true),
            ("a*b*c", "axxbyy", false),
            ("exact", "exact", true),
        ] {
            assert_eq!(image_matches(pattern, image), want, "{pattern} {image}");
        }
        // Long runs of stars cannot make it exponential.
        let pattern = "*a".repeat(30);
        let image = "a".repeat(10_000) + "b";
        assert!(!image_matches(&pattern, &image));
    }
}
