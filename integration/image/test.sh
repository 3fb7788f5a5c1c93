#!/usr/bin/env bash
# Tests of the image tooling that need no build: dockerfile.sh on the repository's Dockerfile (its
# plan must agree with the Dockerfile's own lines and give build.sh what it relies on) and on
# variants written to a temporary directory (the ones it cannot reproduce must fail with their
# one-line error, the others must give the expected plan); with an OCI archive, check.sh on it and
# on a copy whose config names another USER (that copy must fail).
#
#   integration/image/test.sh [IMAGE.oci.tar]     # "N passed, N failed"; status 1 on a failure
#
# Needs bash, jq, awk, sed, tar and coreutils; no root, no Docker, no Python.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
here="${root}/integration/image"
cd "${root}"
passed=0
failed=0
ok() { printf '[image-test] ok: %s\n' "$*"; passed=$((passed + 1)); }
bad() { printf '[image-test] FAIL: %s\n' "$*"; failed=$((failed + 1)); }
work="$(mktemp -d "${TMPDIR:-/tmp}/poolguard-imagetest.XXXXXX")"
trap 'rm -rf "${work}"' EXIT

# --- the repository's Dockerfile ---------------------------------------------------------------------
if plan="$("${here}/dockerfile.sh" Dockerfile 2>"${work}/err")"; then
    ok "dockerfile.sh Dockerfile"
else
    bad "dockerfile.sh Dockerfile: $(cat "${work}/err")"
    plan='{}'
fi
# plan_is WHAT JQ-EXPRESSION (true when the plan is right)
plan_is() {
    if jq -e "$2" >/dev/null 2>&1 <<<"${plan}"; then ok "plan: $1"; else bad "plan: $1 ($2)"; fi
}
# The last stage's single-line instructions, as written.
last() { awk -v kw="$1" '/^FROM / { v = "" } toupper($1) == kw { sub(/^[^ ]+ +/, ""); v = $0 } END { print v }' Dockerfile; }
plan_is "USER as in the Dockerfile" ".runtime.user == \"$(last USER)\""
plan_is "ENTRYPOINT as in the Dockerfile" ".runtime.entrypoint == $(last ENTRYPOINT)"
plan_is "CMD as in the Dockerfile" ".runtime.cmd == $(last CMD)"
plan_is "EXPOSE as in the Dockerfile, as port/proto" \
    ".runtime.expose == ($(last EXPOSE | jq -R 'split(" ") | map(select(. != ""))') | map(if test(\"/\") then . else . + \"/tcp\" end))"
plan_is "the base is distroless static nonroot" '.runtime.base | endswith("/distroless/static:nonroot")'
plan_is "cargo build targets x86_64-unknown-linux-musl" \
    '.build.cargo_args | index(["--target", "x86_64-unknown-linux-musl"]) != null'
plan_is "every COPY --from names an artifact of the build stage" \
    '.build as $b | all(.runtime.copies[] | select(.from != null); .from == $b.name and ($b.artifacts[.src] != null))'
plan_is "the artifacts are stripped" '[.build.artifacts[].strip] | length > 0 and all'

# --- variants ----------------------------------------------------------------------------------------
# variant NAME SED-SCRIPT: the Dockerfile edited into ${work}/NAME
variant() { sed "$2" Dockerfile >"${work}/$1"; }
# fails NAME EXPECTED: dockerfile.sh must exit 1 with one line "[image] error: <file>: ...EXPECTED..."
fails() {
    local f="${work}/$1" rc=0
    "${here}/dockerfile.sh" "${f}" >"${work}/out" 2>"${work}/err" || rc=$?
    if [[ ${rc} == 1 && ! -s ${work}/out && $(wc -l <"${work}/err") == 1 \
        && "$(cat "${work}/err")" == "[image] error: ${f}: "*"$2"* ]]; then
        ok "$1: $(cat "${work}/err")"
    else
        bad "$1: expected status 1 and one line with '$2', got status ${rc}: $(head -c 300 "${work}/err")"
    fi
}
# gives NAME JQ-EXPRESSION WHAT: dockerfile.sh must succeed with a plan for which the expression is true
gives() {
    local out
    if out="$("${here}/dockerfile.sh" "${work}/$1" 2>&1)" && jq -e "$2" >/dev/null 2>&1 <<<"${out}"; then
        ok "$1: $3"
    else
        bad "$1: expected $3 ($2), got: $(head -c 300 <<<"${out}")"
    fi
}
variant run-in-runtime '$ a RUN ["/usr/local/bin/poolguard", "--version"]'
fails run-in-runtime "RUN in the runtime stage is not supported by the local build"
variant unknown-stage 's/--from=[^ ]*/--from=nosuchstage/'
fails unknown-stage "the runtime stage copies from unknown stage nosuchstage"
variant unknown-artifact 's/--from=\([^ ]*\) [^ ]*/--from=\1 \/nothing/'
fails unknown-artifact "COPY --from=build /nothing: the build stage makes no such file with \`cp\`"
variant other-base 's|^FROM [^ ]*/distroless/static:nonroot|FROM docker.io/library/debian:bookworm-slim|'
fails other-base "the runtime stage is FROM docker.io/library/debian:bookworm-slim; the local build only knows a base ending in /distroless/static:nonroot"
variant shell-cmd 's/^CMD .*/CMD serve --policies-dir \/policies/'
fails shell-cmd "CMD in shell form is not supported (the image has no shell)"
variant bad-json 's/^ENTRYPOINT .*/ENTRYPOINT ["\/usr\/local\/bin\/poolguard"/'
fails bad-json "ENTRYPOINT is not a valid JSON array"
variant platform 's|^FROM \([^ ]*/distroless\)|FROM --platform=linux/amd64 \1|'
fails platform "FROM flags ['--platform=linux/amd64'] are not supported by the local build"
variant env-legacy '$ a ENV RUST_LOG info'
fails env-legacy "ENV must use key=value"
variant unclosed '$ a LABEL description="unclosed'
fails unclosed "no closing quotation"
variant copy-link 's/^COPY --from=/COPY --link --from=/'
fails copy-link "COPY --link is not supported by the local build"
variant two-cargo-builds 's/&& strip /\&\& cargo build --release \&\& strip /'
fails two-cargo-builds "more than one cargo build in the build stage"
printf 'FROM gcr.io/distroless/static:nonroot\nCOPY policies/ /policies/\n' >"${work}/one-stage"
fails one-stage "expected a build stage and a runtime stage"
printf 'FROM rust AS build\nRUN cargo build \\\n' >"${work}/open-continuation"
fails open-continuation "the Dockerfile ends inside a continued line"
fails no-such-file "no such file"
variant no-strip '/^ *&& strip /d'
gives no-strip '[.build.artifacts[].strip] | all | not' "no artifact stripped"
variant forms '$ a # a comment\nENV A=1 B="two words" \\\n  # a comment inside\n  C=x\\ y\nLABEL org.opencontainers.image.source="https://example.invalid/poolguard" flag\nWORKDIR /w'
gives forms '.runtime.env == {A: "1", B: "two words", C: "x y"} and .runtime.workdir == "/w"
    and .runtime.labels == {"org.opencontainers.image.source": "https://example.invalid/poolguard", flag: ""}' \
    "ENV and LABEL words (quotes, escapes, continuation, comments), WORKDIR"
variant crlf 's/$/\r/'
gives crlf ". == ${plan}" "the same plan as with LF line ends"

# --- check.sh on an archive ----------------------------------------------------------------------------
if (($# >= 1)); then
    archive=$1
    if "${here}/check.sh" "${archive}" Dockerfile >"${work}/out" 2>&1; then
        ok "check.sh ${archive}: $(tail -n1 "${work}/out")"
    else
        bad "check.sh ${archive}: $(grep -m3 -e FAIL -e error "${work}/out" | tr '\n' ' ')"
    fi
    # The same archive with User "0" in its config, the digests of config, manifest and index redone.
    mkdir "${work}/oci"
    tar -xf "${archive}" -C "${work}/oci"
    blob() { printf '%s/oci/blobs/sha256/%s' "${work}" "${1#sha256:}"; }
    put() { # put FILE: store FILE as a blob; REPLY: its digest and size
        local d
        d="$(sha256sum <"$1")"
        d=${d%% *}
        mv "$1" "$(blob "${d}")"
        REPLY="sha256:${d} $(stat -c %s "$(blob "${d}")")"
    }
    manifest="$(blob "$(jq -r '.manifests[0].digest' "${work}/oci/index.json")")"
    jq -c '.config.User = "0"' "$(blob "$(jq -r '.config.digest' "${manifest}")")" >"${work}/config"
    put "${work}/config"
    read -r d s <<<"${REPLY}"
    jq -c --arg d "${d}" --argjson s "${s}" '.config.digest = $d | .config.size = $s' "${manifest}" >"${work}/manifest"
    put "${work}/manifest"
    read -r d s <<<"${REPLY}"
    jq -c --arg d "${d}" --argjson s "${s}" '.manifests[0].digest = $d | .manifests[0].size = $s' \
        "${work}/oci/index.json" >"${work}/index"
    mv "${work}/index" "${work}/oci/index.json"
    (cd "${work}/oci" && tar -cf "${work}/user0.oci.tar" -- *)
    if "${here}/check.sh" "${work}/user0.oci.tar" Dockerfile >"${work}/out" 2>&1; then
        bad "check.sh accepts the archive with User 0"
    elif grep -q "^\[image-check\] FAIL: User '0' == " "${work}/out"; then
        ok "check.sh refuses the archive with User 0: $(grep -m1 FAIL "${work}/out")"
    else
        bad "check.sh fails on the archive with User 0, but not on its User: $(grep -m3 -e FAIL -e error "${work}/out" | tr '\n' ' ')"
    fi
fi

printf '[image-test] %d passed, %d failed\n' "${passed}" "${failed}"
((failed == 0))
