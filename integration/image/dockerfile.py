#!/usr/bin/env python3
"""Read poolguard's Dockerfile into the plan that integration/image/build.sh follows and that
check.py compares an image with, so that the local build is derived from the Dockerfile and
cannot drift from it silently.

    python3 integration/image/dockerfile.py [Dockerfile]   # prints the plan as JSON

The plan:
  build:   the stage the runtime stage copies from: its WORKDIR, the `cargo build` arguments of
           its RUN, which file it copies to which artifact path (`cp SRC /poolguard`) and whether
           it strips that artifact (`strip /poolguard`);
  runtime: the last stage: its base (only a distroless static nonroot base is known), COPY
           instructions, USER, EXPOSE, ENTRYPOINT, CMD, ENV, WORKDIR, LABEL.
Anything else (another instruction in the runtime stage, a COPY from an unknown stage, a build
step the local build cannot reproduce) is an error with a one-line message.
"""

import json
import shlex
import sys

# The base the runtime stage must name (any registry): what build.sh lays out from Debian packages.
KNOWN_BASE_SUFFIX = "/distroless/static:nonroot"
RUNTIME_KEYS = {"COPY", "USER", "EXPOSE", "ENTRYPOINT", "CMD", "ENV", "WORKDIR", "LABEL", "ARG"}


class PlanError(Exception):
    pass


def instructions(text):
    """(line number, KEYWORD, rest) per instruction, continuations joined, comments dropped."""
    out, buf, start = [], "", 0
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not buf and (not line or line.startswith("#")):
            continue
        if buf and line.startswith("#"):
            continue
        if not buf:
            start = n
        if line.endswith("\\"):
            buf += line[:-1] + " "
            continue
        buf += line
        keyword, _, rest = buf.partition(" ")
        out.append((start, keyword.upper(), rest.strip()))
        buf = ""
    if buf:
        raise PlanError("the Dockerfile ends inside a continued line")
    return out


def split_stages(instrs):
    stages, args = [], {}
    for n, kw, rest in instrs:
        if kw == "ARG" and not stages:
            name, _, value = rest.partition("=")
            args[name.strip()] = value.strip()
            continue
        if kw == "FROM":
            words = rest.split()
            flags = [w for w in words if w.startswith("--")]
            words = [w for w in words if not w.startswith("--")]
            if flags:
                raise PlanError(f"line {n}: FROM flags {flags} are not supported by the local build")
            image = words[0]
            for k, v in args.items():
                image = image.replace("${" + k + "}", v).replace("$" + k, v)
            name = words[2] if len(words) == 3 and words[1].upper() == "AS" else None
            stages.append({"line": n, "image": image, "name": name, "instrs": []})
            continue
        if not stages:
            raise PlanError(f"line {n}: {kw} before the first FROM")
        stages[-1]["instrs"].append((n, kw, rest))
    if len(stages) < 2:
        raise PlanError("expected a build stage and a runtime stage")
    return stages


def json_or_shell(n, kw, rest):
    rest = rest.strip()
    if rest.startswith("["):
        try:
            value = json.loads(rest)
        except json.JSONDecodeError as e:
            raise PlanError(f"line {n}: {kw} is not a valid JSON array: {e}") from None
        if not all(isinstance(v, str) for v in value):
            raise PlanError(f"line {n}: {kw} must be an array of strings")
        return value
    raise PlanError(f"line {n}: {kw} in shell form is not supported (the image has no shell)")


def parse_copy(n, rest):
    words = shlex.split(rest)
    opts = {}
    while words and words[0].startswith("--"):
        key, _, value = words.pop(0)[2:].partition("=")
        if key not in ("from", "chown", "chmod"):
            raise PlanError(f"line {n}: COPY --{key} is not supported by the local build")
        opts[key] = value
    if len(words) != 2:
        raise PlanError(f"line {n}: COPY with {len(words) - 1} sources is not supported (one source, one destination)")
    return {"line": n, "from": opts.get("from"), "src": words[0], "dest": words[1],
            "chown": opts.get("chown"), "chmod": opts.get("chmod")}


def build_plan(stage):
    workdir, cargo_args, copied, stripped = "/", None, {}, []
    for n, kw, rest in stage["instrs"]:
        if kw == "WORKDIR":
            workdir = rest
        elif kw == "RUN":
            for step in (s.strip() for s in rest.split("&&")):
                words = shlex.split(step)
                if words[:2] == ["cargo", "build"]:
                    if cargo_args is not None:
                        raise PlanError(f"line {n}: more than one cargo build in the build stage")
                    cargo_args = words[2:]
                elif words[:1] == ["cp"] and len(words) == 3:
                    copied[words[2]] = words[1]
                elif words[:1] == ["strip"] and len(words) == 2:
                    stripped.append(words[1])
    if cargo_args is None:
        raise PlanError(f"the build stage (line {stage['line']}) has no `cargo build`")
    artifacts = {dest: {"src": src, "strip": dest in stripped} for dest, src in copied.items()}
    return {"name": stage["name"], "workdir": workdir, "cargo_args": cargo_args, "artifacts": artifacts}


def runtime_plan(stage, build):
    if not stage["image"].endswith(KNOWN_BASE_SUFFIX):
        raise PlanError(f"line {stage['line']}: the runtime stage is FROM {stage['image']}; the local build "
                        f"only knows a base ending in {KNOWN_BASE_SUFFIX}")
    plan = {"base": stage["image"], "copies": [], "user": None, "expose": [], "entrypoint": None,
            "cmd": None, "env": {}, "workdir": None, "labels": {}}
    for n, kw, rest in stage["instrs"]:
        if kw not in RUNTIME_KEYS:
            raise PlanError(f"line {n}: {kw} in the runtime stage is not supported by the local build")
        if kw == "COPY":
            c = parse_copy(n, rest)
            if c["from"] is not None:
                if c["from"] != build["name"]:
                    raise PlanError(f"line {n}: COPY --from={c['from']}: only the build stage '{build['name']}' is known")
                if c["src"] not in build["artifacts"]:
                    raise PlanError(f"line {n}: COPY --from={c['from']} {c['src']}: the build stage makes no such file "
                                    f"with `cp` (known: {sorted(build['artifacts'])})")
            plan["copies"].append(c)
        elif kw == "USER":
            plan["user"] = rest
        elif kw == "EXPOSE":
            plan["expose"] += [p if "/" in p else p + "/tcp" for p in rest.split()]
        elif kw in ("ENTRYPOINT", "CMD"):
            plan[kw.lower()] = json_or_shell(n, kw, rest)
        elif kw == "ENV":
            for word in shlex.split(rest):
                k, eq, v = word.partition("=")
                if not eq:
                    raise PlanError(f"line {n}: ENV must use key=value")
                plan["env"][k] = v
        elif kw == "WORKDIR":
            plan["workdir"] = rest
        elif kw == "LABEL":
            for word in shlex.split(rest):
                k, _, v = word.partition("=")
                plan["labels"][k] = v
    return plan


def plan_of(path):
    with open(path, encoding="utf-8") as f:
        stages = split_stages(instructions(f.read()))
    runtime = stages[-1]
    names = {s["name"]: s for s in stages if s["name"]}
    froms = {c.partition("=")[2] for n, kw, rest in runtime["instrs"] if kw == "COPY"
             for c in shlex.split(rest) if c.startswith("--from=")}
    if len(froms) > 1:
        raise PlanError(f"the runtime stage copies from {len(froms)} stages; the local build knows one")
    source = names.get(next(iter(froms))) if froms else stages[-2]
    if source is None:
        raise PlanError(f"the runtime stage copies from unknown stage {next(iter(froms))}")
    build = build_plan(source)
    return {"build": build, "runtime": runtime_plan(runtime, build)}


def main():
    path = sys.argv[1] if len(sys.argv) > 1 else "Dockerfile"
    try:
        print(json.dumps(plan_of(path), indent=2))
    except (PlanError, OSError) as e:
        print(f"[image] error: {path}: {e}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
