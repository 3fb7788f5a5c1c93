//! The image reference table: references with the expected registry/path/tag/digest or error
//! kind — the test vectors of distribution/reference v0.6.0 (normalize_test.go and
//! reference_test.go), with the expectation recomputed for `ParseNormalizedNamed`, plus
//! security-relevant cases. Shared test data: `tests/image_reference.rs` checks poolguard's
//! parser against it, and the native e2e (`integration/e2e/tests/native.rs`) sends every
//! reference through the API server's CEL (the native objects) and poolguard's webhook code.
#![allow(dead_code)]

use poolguard_core::image::ErrorKind;
// ---------------------------------------------------------------------------
// Test data
// ---------------------------------------------------------------------------

pub const H64: &str = "ffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff";
pub const D1: &str = "dbcc1c35ac38df41fd2f5e4130b32ffdb93ebae8b3dbe638c23575912276fc9c";
pub const HEX64: &str = "1a3f5e7d9c1b3a5f7e9d1c3b5a7f9e1d3c5b7a9f1e3d5d7c9b1a3f5e7d9c1b3a";

pub type Fields = (String, String, Option<String>, Option<String>);

pub struct Case {
    pub input: String,
    pub expect: Result<Fields, ErrorKind>,
}

fn ok(input: impl Into<String>, registry: &str, path: impl Into<String>) -> Case {
    Case {
        input: input.into(),
        expect: Ok((registry.into(), path.into(), None, None)),
    }
}
fn ok_t(input: impl Into<String>, registry: &str, path: impl Into<String>, tag: &str) -> Case {
    Case {
        input: input.into(),
        expect: Ok((registry.into(), path.into(), Some(tag.into()), None)),
    }
}
fn ok_d(input: impl Into<String>, registry: &str, path: impl Into<String>, digest: &str) -> Case {
    Case {
        input: input.into(),
        expect: Ok((registry.into(), path.into(), None, Some(digest.into()))),
    }
}
fn ok_td(
    input: impl Into<String>,
    reg: &str,
    path: impl Into<String>,
    tag: &str,
    dig: &str,
) -> Case {
    Case {
        input: input.into(),
        expect: Ok((reg.into(), path.into(), Some(tag.into()), Some(dig.into()))),
    }
}
fn err(input: impl Into<String>, kind: ErrorKind) -> Case {
    Case {
        input: input.into(),
        expect: Err(kind),
    }
}

pub fn table() -> Vec<Case> {
    use ErrorKind::*;
    let sha = |h: &str| format!("sha256:{h}");
    let s256 = sha(H64);
    let s384 = format!("sha384:{}", "a".repeat(96));
    let s512 = format!("sha512:{}", "f".repeat(128));
    let a = |n: usize| "a".repeat(n);
    vec![
        // --- normalize_test.go TestValidateReferenceName: valid ---
        ok("docker/docker", "docker.io", "docker/docker"),
        ok("library/debian", "docker.io", "library/debian"),
        ok("debian", "docker.io", "library/debian"),
        ok("localhost/library/debian", "localhost", "library/debian"),
        ok("localhost/debian", "localhost", "debian"),
        ok("LOCALDOMAIN/library/debian", "LOCALDOMAIN", "library/debian"),
        ok("LOCALDOMAIN/debian", "LOCALDOMAIN", "debian"),
        ok("docker.io/docker/docker", "docker.io", "docker/docker"),
        ok("docker.io/library/debian", "docker.io", "library/debian"),
        ok("docker.io/debian", "docker.io", "library/debian"),
        ok("index.docker.io/docker/docker", "docker.io", "docker/docker"),
        ok("index.docker.io/library/debian", "docker.io", "library/debian"),
        ok("index.docker.io/debian", "docker.io", "library/debian"),
        ok("127.0.0.1:5000/docker/docker", "127.0.0.1:5000", "docker/docker"),
        ok("127.0.0.1:5000/library/debian", "127.0.0.1:5000", "library/debian"),
        ok("127.0.0.1:5000/debian", "127.0.0.1:5000", "debian"),
        ok("192.168.0.1", "docker.io", "library/192.168.0.1"),
        ok_t("192.168.0.1:80", "docker.io", "library/192.168.0.1", "80"),
        ok("192.168.0.1:8/debian", "192.168.0.1:8", "debian"),
        ok("192.168.0.2:25000/debian", "192.168.0.2:25000", "debian"),
        ok(
            "thisisthesongthatneverendsitgoesonandonandonthisisthesongthatnev",
            "docker.io",
            "library/thisisthesongthatneverendsitgoesonandonandonthisisthesongthatnev",
        ),
        ok("[fc00::1]:5000/docker", "[fc00::1]:5000", "docker"),
        ok("[fc00::1]:5000/docker/docker", "[fc00::1]:5000", "docker/docker"),
        ok("[fc00:1:2:3:4:5:6:7]:5000/library/debian", "[fc00:1:2:3:4:5:6:7]:5000", "library/debian"),
        ok(format!("docker.io/{HEX64}"), "docker.io", format!("library/{HEX64}")),
        ok("Docker/docker", "Docker", "docker"),
        ok("DOCKER/docker", "DOCKER", "docker"),
        // --- TestValidateReferenceName: invalid ---
        err("https://github.com/docker/docker", InvalidFormat),
        err("docker/Docker", NameContainsUppercase),
        err("-docker", InvalidFormat),
        err("-docker/docker", InvalidFormat),
        err("-docker.io/docker/docker", InvalidFormat),
        err("docker///docker", InvalidFormat),
        err("docker.io/docker/Docker", NameContainsUppercase),
        err("docker.io/docker///docker", InvalidFormat),
        err("[fc00::1]", InvalidFormat),
        err("[fc00::1]:5000", InvalidFormat),
        err("fc00::1:5000/debian", InvalidFormat),
        err("[fe80::1%eth0]:5000/debian", InvalidFormat),
        err("[2001:db8:3:4::192.0.2.33]:5000/debian", InvalidFormat),
        err(HEX64, Identifier),
        // --- TestValidateRemoteName ---
        ok("docker-rules/docker", "docker.io", "docker-rules/docker"),
        ok("docker---rules/docker", "docker.io", "docker---rules/docker"),
        ok("doc/docker", "docker.io", "doc/docker"),
        ok("d/docker", "docker.io", "d/docker"),
        ok("jess/t", "docker.io", "jess/t"),
        ok("dock__er/docker", "docker.io", "dock__er/docker"),
        err("docker-/docker", InvalidFormat),
        err("-docker-/docker", InvalidFormat),
        err("____/____", InvalidFormat),
        err("_docker/_docker", InvalidFormat),
        err("dock..er/docker", InvalidFormat),
        err("dock_.er/docker", InvalidFormat),
        err("dock-.er/docker", InvalidFormat),
        err("docker/", InvalidFormat),
        err(
            "this_is_not_a_valid_namespace_because_its_lenth_is_greater_than_255_this_is_not_a_valid_namespace_because_its_lenth_is_greater_than_255_this_is_not_a_valid_namespace_because_its_lenth_is_greater_than_255_this_is_not_a_valid_namespace_because_its_lenth_is_greater_than_255/docker",
            NameTooLong,
        ),
        // --- TestParseRepositoryInfo (familiar, full and ambiguous names) ---
        ok("localhost/fooo", "localhost", "fooo"),
        ok("localhost/fooo/bar", "localhost", "fooo/bar"),
        ok("LOCALDOMAIN/fooo", "LOCALDOMAIN", "fooo"),
        ok("LOCALDOMAIN/fooo/bar", "LOCALDOMAIN", "fooo/bar"),
        ok("fooo/bar", "docker.io", "fooo/bar"),
        ok("docker.io/fooo/bar", "docker.io", "fooo/bar"),
        ok("index.docker.io/fooo/bar", "docker.io", "fooo/bar"),
        ok("ubuntu", "docker.io", "library/ubuntu"),
        ok("docker.io/library/ubuntu", "docker.io", "library/ubuntu"),
        ok("library/ubuntu", "docker.io", "library/ubuntu"),
        ok("nonlibrary/ubuntu", "docker.io", "nonlibrary/ubuntu"),
        ok("other/library", "docker.io", "other/library"),
        ok("127.0.0.1:8000/private/moonbase", "127.0.0.1:8000", "private/moonbase"),
        ok("127.0.0.1:8000/privatebase", "127.0.0.1:8000", "privatebase"),
        ok("example.com/private/moonbase", "example.com", "private/moonbase"),
        ok("example.com/privatebase", "example.com", "privatebase"),
        ok("example.com:8000/private/moonbase", "example.com:8000", "private/moonbase"),
        ok("example.com:8000/privatebasee", "example.com:8000", "privatebasee"),
        ok("ubuntu-12.04-base", "docker.io", "library/ubuntu-12.04-base"),
        ok("index.docker.io/library/ubuntu-12.04-base", "docker.io", "library/ubuntu-12.04-base"),
        ok("docker.io/foo", "docker.io", "library/foo"),
        ok("library/foo/bar", "docker.io", "library/foo/bar"),
        ok("store/foo/bar", "docker.io", "store/foo/bar"),
        ok("Foo/bar", "Foo", "bar"),
        ok("FOO/bar", "FOO", "bar"),
        // --- TestParseReferenceWithTagAndDigest ---
        ok_td(
            "busybox:latest@sha256:86e0e091d0da6bde2456dbb48306f3956bbeb2eae1b5b9a43045843f69fe4aaa",
            "docker.io",
            "library/busybox",
            "latest",
            "sha256:86e0e091d0da6bde2456dbb48306f3956bbeb2eae1b5b9a43045843f69fe4aaa",
        ),
        err("-foo", InvalidFormat),
        // --- TestParseAnyReference, through ParseNormalizedNamed ---
        ok_t("redis:latest", "docker.io", "library/redis", "latest"),
        ok_t("docker.io/library/redis:latest", "docker.io", "library/redis", "latest"),
        ok_d(format!("redis@sha256:{D1}"), "docker.io", "library/redis", &sha(D1)),
        ok_d(format!("dmcgowan/myapp@sha256:{D1}"), "docker.io", "dmcgowan/myapp", &sha(D1)),
        ok_t("docker.io/mcgowan/myapp:latest", "docker.io", "mcgowan/myapp", "latest"),
        // ParseAnyReference makes this a digest; ParseNormalizedNamed refuses it.
        err(D1, Identifier),
        // ParseAnyReference makes this a digest; ParseNormalizedNamed parses
        // repository "sha256" with a 64-character tag (see is_local_image_id).
        ok_t(sha(D1), "docker.io", "library/sha256", D1),
        ok(&D1[..63], "docker.io", format!("library/{}", &D1[..63])),
        ok("dbcc1", "docker.io", "library/dbcc1"),
        // --- TestNormalizedSplitHostname ---
        ok("test.com/foo", "test.com", "foo"),
        ok("test_com/foo", "docker.io", "test_com/foo"),
        ok("docker/migrator", "docker.io", "docker/migrator"),
        ok("test.com:8080/foo", "test.com:8080", "foo"),
        ok("test-com:8080/foo", "test-com:8080", "foo"),
        ok("foo", "docker.io", "library/foo"),
        ok("xn--n3h.com/foo", "xn--n3h.com", "foo"),
        ok("xn--n3h.com:18080/foo", "xn--n3h.com:18080", "foo"),
        ok("docker.io/library/foo", "docker.io", "library/foo"),
        ok("docker.io/library/foo/bar", "docker.io", "library/foo/bar"),
        // --- TestParseDockerRef ---
        ok_d(
            "busybox@sha256:e6693c20186f837fc393390135d8a598a96a833917917789d63766cab6c59582",
            "docker.io",
            "library/busybox",
            "sha256:e6693c20186f837fc393390135d8a598a96a833917917789d63766cab6c59582",
        ),
        ok("gcr.io/library/busybox", "gcr.io", "library/busybox"),
        ok_t("docker.io/busybox:latest", "docker.io", "library/busybox", "latest"),
        // --- reference_test.go TestReferenceParse, normalised ---
        ok("test_com", "docker.io", "library/test_com"),
        ok_t("test.com:tag", "docker.io", "library/test.com", "tag"),
        ok_t("test.com:5000", "docker.io", "library/test.com", "5000"),
        ok_t("test.com/repo:tag", "test.com", "repo", "tag"),
        ok("test:5000/repo", "test:5000", "repo"),
        ok_t("test:5000/repo:tag", "test:5000", "repo", "tag"),
        ok_d(format!("test:5000/repo@{s256}"), "test:5000", "repo", &s256),
        ok_td(format!("test:5000/repo:tag@{s256}"), "test:5000", "repo", "tag", &s256),
        err("", Empty),
        err(":justtag", InvalidFormat),
        err(format!("@{s256}"), InvalidFormat),
        err(format!("repo@sha256:{}", "f".repeat(34)), DigestInvalidLength),
        err(format!("validname@invaliddigest:{H64}"), DigestUnsupported),
        // The Go test expects "unsupported" only because its test binary does
        // not link crypto/sha512; containerd and CRI-O do, so it is valid.
        ok_d(format!("validname@{s512}"), "docker.io", "library/validname", &s512),
        err("Uppercase:tag", NameContainsUppercase),
        err("test:5000/Uppercase/lowercase:tag", NameContainsUppercase),
        // The FIXME case of reference_test.go: "Uppercase" becomes the registry.
        ok_t("Uppercase/lowercase:tag", "Uppercase", "lowercase", "tag"),
        ok_t("lowercase:Uppercase", "docker.io", "library/lowercase", "Uppercase"),
        err(format!("domain/{}:tag", a(256)), NameTooLong),
        ok_t(
            format!("{}a:tag-puts-this-over-max", "a/".repeat(127)),
            "docker.io",
            format!("{}a", "a/".repeat(127)),
            "tag-puts-this-over-max",
        ),
        err("aa/asdf$$^/aa", InvalidFormat),
        ok("sub-dom1.foo.com/bar/baz/quux", "sub-dom1.foo.com", "bar/baz/quux"),
        ok_t("sub-dom1.foo.com/bar/baz/quux:some-long-tag", "sub-dom1.foo.com", "bar/baz/quux", "some-long-tag"),
        ok_t("b.gcr.io/test.example.com/my-app:test.example.com", "b.gcr.io", "test.example.com/my-app", "test.example.com"),
        ok_t("xn--n3h.com/myimage:xn--n3h.com", "xn--n3h.com", "myimage", "xn--n3h.com"),
        ok_td(format!("xn--7o8h.com/myimage:xn--7o8h.com@{s256}"), "xn--7o8h.com", "myimage", "xn--7o8h.com", &s256),
        ok_t("foo_bar.com:8080", "docker.io", "library/foo_bar.com", "8080"),
        ok_t("foo/foo_bar.com:8080", "docker.io", "foo/foo_bar.com", "8080"),
        ok("192.168.1.1", "docker.io", "library/192.168.1.1"),
        ok_t("192.168.1.1:tag", "docker.io", "library/192.168.1.1", "tag"),
        ok_t("192.168.1.1:5000", "docker.io", "library/192.168.1.1", "5000"),
        ok("192.168.1.1/repo", "192.168.1.1", "repo"),
        ok("192.168.1.1:5000/repo", "192.168.1.1:5000", "repo"),
        ok_t("192.168.1.1:5000/repo:5050", "192.168.1.1:5000", "repo", "5050"),
        err("[2001:db8::1]", InvalidFormat),
        err("[2001:db8::1]:5000", InvalidFormat),
        err("[2001:db8::1]:tag", InvalidFormat),
        ok("[2001:db8::1]/repo", "[2001:db8::1]", "repo"),
        ok_t("[2001:db8:1:2:3:4:5:6]/repo:tag", "[2001:db8:1:2:3:4:5:6]", "repo", "tag"),
        ok("[2001:db8::1]:5000/repo", "[2001:db8::1]:5000", "repo"),
        ok_t("[2001:db8::1]:5000/repo:tag", "[2001:db8::1]:5000", "repo", "tag"),
        ok_d(format!("[2001:db8::1]:5000/repo@{s256}"), "[2001:db8::1]:5000", "repo", &s256),
        ok_td(format!("[2001:db8::1]:5000/repo:tag@{s256}"), "[2001:db8::1]:5000", "repo", "tag", &s256),
        ok("[2001:db8::]:5000/repo", "[2001:db8::]:5000", "repo"),
        ok("[::1]:5000/repo", "[::1]:5000", "repo"),
        err("[fe80::1%eth0]:5000/repo", InvalidFormat),
        err("[fe80::1%@invalidzone]:5000/repo", InvalidFormat),
        ok_t(format!("example.com/{}:tag", a(255)), "example.com", a(255), "tag"),
        // TestWithNameFailure
        err(format!("example.com/{}", a(256)), NameTooLong),
        // --- poolguard: registry decisions ---
        ok_t("Evilhost/app:1", "Evilhost", "app", "1"),
        ok("LOCALHOST/app", "LOCALHOST", "app"),
        ok("registry-1.docker.io/nginx", "registry-1.docker.io", "nginx"),
        ok("Index.docker.io/nginx", "Index.docker.io", "nginx"),
        ok("INDEX.DOCKER.IO/nginx", "INDEX.DOCKER.IO", "nginx"),
        ok("Docker.io/nginx", "Docker.io", "nginx"),
        ok("docker.io/library/nginx/x", "docker.io", "library/nginx/x"),
        ok("localhost", "docker.io", "library/localhost"),
        ok_t("localhost:5000", "docker.io", "library/localhost", "5000"),
        ok("docker.io", "docker.io", "library/docker.io"),
        ok("index.docker.io", "docker.io", "library/index.docker.io"),
        ok("localhost:5000/app", "localhost:5000", "app"),
        // a '_' makes the first component an invalid host name but a valid
        // path component: Go keeps the whole string as path with an empty
        // domain; containerd contacts a_b.example.com; we report that host.
        ok("a_b.example.com/app", "a_b.example.com", "app"),
        ok("a__b.c/app/x", "a__b.c", "app/x"),
        err(format!("a_b.com/{}", a(248)), NameTooLong),
        ok(format!("a_b.com/{}", a(247)), "a_b.com", a(247)),
        err("Foo_bar.com/x", NameContainsUppercase),
        err("a_b.com:5000/app", InvalidFormat),
        // registry names are not length limited, paths are (255 with library/)
        ok(format!("{}.com/app", a(300)), &format!("{}.com", a(300)), "app"),
        ok(a(247), "docker.io", format!("library/{}", a(247))),
        err(a(248), NameTooLong),
        err(format!("docker.io/library/{}", a(248)), NameTooLong),
        // ports and IPv6 literals
        ok("example.com:99999999/app", "example.com:99999999", "app"),
        err("example.com:/app", InvalidFormat),
        err("example.com:80a/app", InvalidFormat),
        err("example.com:80:80/app", InvalidFormat),
        ok("[::1]/app", "[::1]", "app"),
        ok("[:]/app", "[:]", "app"),
        err("[]/app", InvalidFormat),
        err("[::1/app", InvalidFormat),
        err("[::g]/app", InvalidFormat),
        err("[::1]x/app", InvalidFormat),
        err("ex..ample.com/app", InvalidFormat),
        err(".example.com/app", InvalidFormat),
        err("example.com./app", InvalidFormat),
        err("-example.com/app", InvalidFormat),
        err("example-.com/app", InvalidFormat),
        ok("ex--ample.com/app", "ex--ample.com", "app"),
        // tags
        err("registry.example.com/app:1.0:evil", InvalidFormat),
        ok_t("app:_x", "docker.io", "library/app", "_x"),
        err("app:.x", InvalidFormat),
        err("app:-x", InvalidFormat),
        ok_t(format!("app:{}", a(128)), "docker.io", "library/app", &a(128)),
        err(format!("app:{}", a(129)), InvalidFormat),
        err("app:", InvalidFormat),
        err("app:t@g", InvalidFormat),
        err("app:t/g", InvalidFormat),
        // digests
        ok_td(format!("name:tag@{s256}"), "docker.io", "library/name", "tag", &s256),
        ok_d(format!("app@{s384}"), "docker.io", "library/app", &s384),
        err(format!("app@sha512:{}", "f".repeat(127)), DigestInvalidLength),
        err(format!("app@sha256:{}", "f".repeat(65)), DigestInvalidLength),
        err(format!("app@sha256:{}", H64.to_uppercase()), DigestInvalidFormat),
        err(format!("app:1@SHA256:{H64}"), DigestInvalidFormat),
        err(format!("app@SHA256:{H64}"), NameContainsUppercase),
        err(format!("app@blake3:{H64}"), DigestUnsupported),
        err(format!("app@sha256+b64:{H64}"), DigestUnsupported),
        err(format!("app@md5:{}", "0".repeat(32)), DigestUnsupported),
        err(format!("app@sha256:{}", "f".repeat(31)), InvalidFormat),
        err(format!("app@sha256:{}g", "f".repeat(63)), InvalidFormat),
        err("app@", InvalidFormat),
        err(format!("app@{s256}@{s256}"), InvalidFormat),
        err(format!("app@@{s256}"), InvalidFormat),
        err(format!("app@:{H64}"), InvalidFormat),
        err(format!("app@1sha:{H64}"), InvalidFormat),
        // path traversal, separators, junk
        err("foo/../bar", InvalidFormat),
        err("foo/./bar", InvalidFormat),
        err("registry.example.com/../etc", InvalidFormat),
        err("registry.example.com/app/..", InvalidFormat),
        err("/foo", InvalidFormat),
        err("foo//bar", InvalidFormat),
        err("foo.", InvalidFormat),
        err("foo___bar", InvalidFormat),
        err("foo___bar/x.example.com", InvalidFormat),
        ok("a-----b", "docker.io", "library/a-----b"),
        err(" foo", InvalidFormat),
        err("foo ", InvalidFormat),
        err("foo\n", InvalidFormat),
        err("foo:tag\n", InvalidFormat),
        err("foo\0", InvalidFormat),
        err("example.com/app\r\nX-Injected: 1", NameContainsUppercase),
        err("example.com/app\r\nx-injected: 1", InvalidFormat),
        err("nginx:t\u{e2}g", InvalidFormat),
        err("\u{f1}ginx", InvalidFormat),
        err("ex\u{e4}mple.com/app", InvalidFormat),
        err("docker.io\u{ff0f}x", InvalidFormat),
        err("\u{212a}/app", InvalidFormat),
        err("Ex\u{e4}mple/app", InvalidFormat),
        err("http://example.com/app", InvalidFormat),
        err("example.com/app#x", InvalidFormat),
        err("example.com/app?x", InvalidFormat),
    ]
}
