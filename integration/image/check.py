#!/usr/bin/env python3
"""Compare a poolguard OCI image archive with the Dockerfile that defines it.

    python3 integration/image/check.py IMAGE.oci.tar [Dockerfile]   # one line per check; exit 1 on a failure
    python3 integration/image/check.py --summary IMAGE.oci.tar       # "ID ..., size ..." only

Reads the archive itself (index, manifest, config, layers), not the build script's intentions:
  * config: USER, EXPOSE, ENTRYPOINT, CMD, ENV, WORKDIR, LABEL of the Dockerfile's runtime stage,
    on top of the distroless static nonroot base's PATH, SSL_CERT_FILE, user 65532 and workdir;
  * every COPY: a directory from the build context arrives file by file with the same bytes and
    modes, owned by root; a file from the build stage is a static ELF executable owned by root,
    stripped when the build stage strips it, and reports `poolguard <Cargo.toml version>`;
  * the base: the nonroot user and group (65532), its home (0700), /tmp (1777), /root (0700), the
    CA bundle, zoneinfo, /etc/services, /etc/mime.types, nsswitch.conf;
  * nothing that runs: no ELF file other than the copied binaries, no shell, no package manager.
"""

import hashlib
import io
import json
import os
import re
import stat
import struct
import subprocess
import sys
import tarfile
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dockerfile  # noqa: E402

BASE_ENV = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            "SSL_CERT_FILE": "/etc/ssl/certs/ca-certificates.crt"}
BASE_USER = "65532"
BASE_WORKDIR = "/home/nonroot"


def read_archive(path):
    with tarfile.open(path) as outer:
        def blob(digest):
            algo, _, hexd = digest.partition(":")
            data = outer.extractfile(f"blobs/{algo}/{hexd}").read()
            if hashlib.sha256(data).hexdigest() != hexd:
                raise SystemExit(f"[image] error: blob {digest} does not match its digest")
            return data
        index = json.load(outer.extractfile("index.json"))
        if len(index["manifests"]) != 1:
            raise SystemExit(f"[image] error: {path} holds {len(index['manifests'])} manifests, expected 1")
        mdesc = index["manifests"][0]
        manifest = json.loads(blob(mdesc["digest"]))
        config = json.loads(blob(manifest["config"]["digest"]))
        files = {}
        for layer in manifest["layers"]:
            with tarfile.open(fileobj=io.BytesIO(blob(layer["digest"])), mode="r:*") as lt:
                for m in lt.getmembers():
                    name = "/" + m.name.lstrip("./").rstrip("/") if m.name not in (".", "./") else "/"
                    base = os.path.basename(name)
                    if base.startswith(".wh."):
                        target = os.path.join(os.path.dirname(name), base[4:])
                        files = {k: v for k, v in files.items() if k != target and not k.startswith(target + "/")}
                        continue
                    entry = {"type": m.type, "mode": stat.S_IMODE(m.mode), "uid": m.uid, "gid": m.gid, "size": m.size,
                             "link": m.linkname}
                    if m.isfile():
                        data = lt.extractfile(m).read()
                        entry["sha256"] = hashlib.sha256(data).hexdigest()
                        entry["head"] = data[:4]
                        entry["data"] = data if (data[:4] == b"\x7fELF" or m.size < 1 << 20) else None
                    files[name] = entry
        layers_size = sum(layer["size"] for layer in manifest["layers"])
        return {"ref": mdesc.get("annotations", {}).get("org.opencontainers.image.ref.name"),
                "config_digest": manifest["config"]["digest"], "config": config,
                "files": files, "layers_size": layers_size, "layers": len(manifest["layers"])}


def elf_info(data):
    """(static, has_symtab) of an ELF64 little-endian file."""
    phoff, shoff = struct.unpack_from("<QQ", data, 0x20)
    phentsize, phnum, shentsize, shnum, shstrndx = struct.unpack_from("<HHHHH", data, 0x36)
    interp = any(struct.unpack_from("<I", data, phoff + i * phentsize)[0] == 3 for i in range(phnum))
    names = []
    if shnum and shstrndx < shnum:
        str_off = struct.unpack_from("<Q", data, shoff + shstrndx * shentsize + 0x18)[0]
        for i in range(shnum):
            name_off = struct.unpack_from("<I", data, shoff + i * shentsize)[0]
            end = data.index(b"\0", str_off + name_off)
            names.append(data[str_off + name_off:end].decode(errors="replace"))
    return (not interp, ".symtab" in names)


def cargo_version(root):
    with open(os.path.join(root, "Cargo.toml"), encoding="utf-8") as f:
        text = f.read()
    m = re.search(r'^\[package\][^\[]*?^version\s*=\s*"([^"]+)"', text, re.M | re.S)
    return m.group(1) if m else None


def summary(img):
    uncompressed = sum(f["size"] for f in img["files"].values() if f["type"] in (tarfile.REGTYPE, tarfile.AREGTYPE))
    return (f"ID {img['config_digest']}, size {img['layers_size']} bytes compressed "
            f"({img['layers_size'] / 1e6:.1f} MB, {img['layers']} layer(s)), "
            f"{uncompressed / 1e6:.1f} MB of files, {len(img['files'])} entries")


def main():
    args = sys.argv[1:]
    if args and args[0] == "--summary":
        print(summary(read_archive(args[1])))
        return 0
    if not args:
        print(__doc__, file=sys.stderr)
        return 2
    archive = args[0]
    dockerfile_path = args[1] if len(args) > 1 else "Dockerfile"
    root = os.path.dirname(os.path.abspath(dockerfile_path))
    try:
        plan = dockerfile.plan_of(dockerfile_path)
    except dockerfile.PlanError as e:
        print(f"[image] error: {dockerfile_path}: {e}", file=sys.stderr)
        return 1
    rt, build = plan["runtime"], plan["build"]
    img = read_archive(archive)
    cfg = img["config"].get("config", {})
    files = img["files"]
    failures = []

    def check(ok, what):
        print(f"[image-check] {'ok' if ok else 'FAIL'}: {what}")
        if not ok:
            failures.append(what)

    # --- config ---
    want_env = dict(BASE_ENV, **rt["env"])
    got_env = dict(e.partition("=")[::2] for e in cfg.get("Env", []))
    check(got_env == want_env, f"Env {sorted(got_env.items())} == base + ENV {sorted(want_env.items())}")
    check(cfg.get("User") == (rt["user"] or BASE_USER), f"User {cfg.get('User')!r} == {rt['user'] or BASE_USER!r}")
    check(cfg.get("WorkingDir") == (rt["workdir"] or BASE_WORKDIR),
          f"WorkingDir {cfg.get('WorkingDir')!r} == {rt['workdir'] or BASE_WORKDIR!r}")
    check(sorted(cfg.get("ExposedPorts", {})) == sorted(rt["expose"]),
          f"ExposedPorts {sorted(cfg.get('ExposedPorts', {}))} == EXPOSE {sorted(rt['expose'])}")
    check(cfg.get("Entrypoint") == rt["entrypoint"], f"Entrypoint {cfg.get('Entrypoint')} == ENTRYPOINT {rt['entrypoint']}")
    check(cfg.get("Cmd") == rt["cmd"], f"Cmd {cfg.get('Cmd')} == CMD {rt['cmd']}")
    labels = cfg.get("Labels") or {}
    check(all(labels.get(k) == v for k, v in rt["labels"].items()), f"Labels include LABEL {rt['labels']}")
    check((img["config"].get("os"), img["config"].get("architecture")) == ("linux", "amd64"), "platform linux/amd64")

    # --- COPYs ---
    binaries = set()
    for c in rt["copies"]:
        if c["from"] is None:
            src = os.path.join(root, c["src"])
            dest = c["dest"].rstrip("/") or "/"
            if os.path.isdir(src):
                expected = {}
                for d, _, names in os.walk(src):
                    for n in names:
                        p = os.path.join(d, n)
                        expected[os.path.join(dest, os.path.relpath(p, src))] = p
                bad = []
                for ipath, hpath in sorted(expected.items()):
                    f = files.get(ipath)
                    with open(hpath, "rb") as fh:
                        digest = hashlib.sha256(fh.read()).hexdigest()
                    want_mode = int(c["chmod"], 8) if c["chmod"] else stat.S_IMODE(os.stat(hpath).st_mode)
                    if not f or f.get("sha256") != digest or (f["uid"], f["gid"]) != (0, 0) or f["mode"] != want_mode:
                        bad.append(ipath)
                extra = [p for p in files if p.startswith(dest + "/") and p not in expected and files[p]["type"] != tarfile.DIRTYPE]
                check(not bad and not extra,
                      f"COPY {c['src']} {c['dest']}: {len(expected)} files, same bytes and modes, owned by root"
                      + (f" (differ: {bad[:5]})" if bad else "") + (f" (unexpected: {extra[:5]})" if extra else ""))
            else:
                check(False, f"COPY {c['src']}: only directories of the build context are checked")
        else:
            dest = c["dest"] if not c["dest"].endswith("/") else c["dest"] + os.path.basename(c["src"])
            f = files.get(dest)
            art = build["artifacts"][c["src"]]
            if not f or f.get("head") != b"\x7fELF" or f.get("data") is None:
                check(False, f"COPY --from={c['from']} {c['src']} {dest}: an ELF file in the image")
                continue
            binaries.add(dest)
            static, symtab = elf_info(f["data"])
            check((f["uid"], f["gid"]) == (0, 0) and f["mode"] & 0o111 == 0o111,
                  f"{dest}: owned by root, mode {oct(f['mode'])} executable by everyone")
            check(static, f"{dest}: statically linked (no program interpreter)")
            if art["strip"]:
                check(not symtab, f"{dest}: stripped, as the build stage does (strip {c['src']}); {f['size']} bytes")
            with tempfile.NamedTemporaryFile(delete=False) as t:
                t.write(f["data"])
            os.chmod(t.name, 0o755)
            try:
                out = subprocess.run([t.name, "--version"], capture_output=True, text=True, timeout=30).stdout.strip()
            finally:
                os.unlink(t.name)
            want = f"poolguard {cargo_version(root)}"
            check(out == want, f"{dest} --version: {out!r} == {want!r}")

    # --- the base ---
    def text(p):
        f = files.get(p)
        return f["data"].decode(errors="replace") if f and f.get("data") is not None else ""

    def is_dir(p, mode, uid):
        f = files.get(p)
        return bool(f) and f["type"] == tarfile.DIRTYPE and f["mode"] == mode and f["uid"] == uid and f["gid"] == uid

    check(re.search(r"^nonroot:x:65532:65532:[^:]*:/home/nonroot:", text("/etc/passwd"), re.M) is not None,
          "/etc/passwd: nonroot 65532:65532, home /home/nonroot")
    check(re.search(r"^nonroot:x:65532:", text("/etc/group"), re.M) is not None, "/etc/group: nonroot 65532")
    check(is_dir("/home/nonroot", 0o700, 65532), "/home/nonroot: 0700, owned by 65532")
    check(is_dir("/tmp", 0o1777, 0), "/tmp: 1777")
    check(is_dir("/root", 0o700, 0), "/root: 0700")
    certs = text("/etc/ssl/certs/ca-certificates.crt").count("BEGIN CERTIFICATE")
    check(certs > 50, f"/etc/ssl/certs/ca-certificates.crt: {certs} certificates")
    for p in ("/usr/share/zoneinfo/UTC", "/etc/services", "/etc/protocols", "/etc/mime.types", "/etc/nsswitch.conf",
              "/etc/os-release"):
        check(p in files, f"{p} present")

    # --- nothing else runs ---
    elves = sorted(p for p, f in files.items() if f.get("head") == b"\x7fELF" and p not in binaries)
    check(not elves, "no ELF file besides the copied binaries" + (f" (found {elves[:5]})" if elves else ""))
    shells = [p for p in ("/bin/sh", "/bin/bash", "/usr/bin/sh", "/bin/busybox", "/usr/bin/dpkg", "/usr/bin/apt") if p in files]
    check(not shells, "no shell, no package manager" + (f" (found {shells})" if shells else ""))

    print(f"[image-check] {summary(img)}")
    print(f"[image-check] {len(failures)} failed" if failures else "[image-check] the image matches the Dockerfile")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
