//! Container image references: `nginx` is `docker.io/library/nginx`. Rego policies reach this as
//! `poolguard.image_repository(ref)`; regorus runs the same logic written in Rego ~20x slower.

/// The parts of an image reference.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageRef<'a> {
    /// Registry host, with port if any; Docker Hub's aliases are `docker.io`.
    pub registry: &'a str,
    /// Repository path inside the registry (Docker Hub's official images under `library/`).
    pub path: String,
    pub tag: Option<&'a str>,
    pub digest: Option<&'a str>,
}

const DOCKER_HUB: &str = "docker.io";
const DOCKER_HUB_ALIASES: [&str; 3] = ["docker.io", "index.docker.io", "registry-1.docker.io"];

/// Splits a reference. The first path component is a registry only when it contains `.` or
/// `:` or is `localhost`; a tag follows the last `:` after the last `/`; a digest follows `@`.
pub fn parse(reference: &str) -> ImageRef<'_> {
    let (name, digest) = match reference.split_once('@') {
        Some((name, digest)) => (name, Some(digest)),
        None => (reference, None),
    };
    let last_slash = name.rfind('/').map_or(0, |i| i + 1);
    let (name, tag) = match name[last_slash..].rfind(':') {
        Some(i) => (&name[..last_slash + i], Some(&name[last_slash + i + 1..])),
        None => (name, None),
    };
    let (registry, path) = match name.split_once('/') {
        Some((first, rest)) if first.contains(['.', ':']) || first == "localhost" => (first, rest),
        _ => (DOCKER_HUB, name),
    };
    let registry = if DOCKER_HUB_ALIASES.contains(&registry) {
        DOCKER_HUB
    } else {
        registry
    };
    let path = if registry == DOCKER_HUB && !path.contains('/') {
        format!("library/{path}")
    } else {
        path.to_string()
    };
    ImageRef {
        registry,
        path,
        tag,
        digest,
    }
}

/// `registry/path` without tag or digest: what allow-lists compare against.
pub fn repository(reference: &str) -> String {
    let image = parse(reference);
    format!("{}/{}", image.registry, image.path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repository_table() {
        let cases = [
            ("nginx", "docker.io/library/nginx"),
            ("nginx:1.27", "docker.io/library/nginx"),
            ("nginx@sha256:0123abcd", "docker.io/library/nginx"),
            ("nginx:1.27@sha256:0123abcd", "docker.io/library/nginx"),
            ("bitnami/redis:7", "docker.io/bitnami/redis"),
            ("docker.io/nginx", "docker.io/library/nginx"),
            (
                "index.docker.io/library/nginx:latest",
                "docker.io/library/nginx",
            ),
            (
                "registry-1.docker.io/bitnami/redis",
                "docker.io/bitnami/redis",
            ),
            ("registry.example.com/app:1.0", "registry.example.com/app"),
            (
                "registry.example.com:5000/team/app:1.0",
                "registry.example.com:5000/team/app",
            ),
            (
                "registry.example.com:5000/team/app",
                "registry.example.com:5000/team/app",
            ),
            ("localhost/app", "localhost/app"),
            ("localhost:5000/app:dev", "localhost:5000/app"),
            ("gcr.io/project/app@sha256:0123abcd", "gcr.io/project/app"),
            ("team/app", "docker.io/team/app"),
            ("a.b.c/x/y/z:t", "a.b.c/x/y/z"),
        ];
        for (reference, want) in cases {
            assert_eq!(repository(reference), want, "{reference}");
        }
    }

    #[test]
    fn parts() {
        let image = parse("registry.example.com:5000/team/app:1.0@sha256:ab");
        assert_eq!(image.registry, "registry.example.com:5000");
        assert_eq!(image.path, "team/app");
        assert_eq!(image.tag, Some("1.0"));
        assert_eq!(image.digest, Some("sha256:ab"));
        let image = parse("localhost:5000/app");
        assert_eq!((image.registry, image.tag), ("localhost:5000", None));
    }
}
