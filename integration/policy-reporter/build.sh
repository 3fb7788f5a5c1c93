#!/usr/bin/env bash
# Provide a Policy Reporter binary (Kyverno's UI/API over PolicyReports and openreports.io
# Reports), built from the source tarball in ../shared/vendor, never downloaded prebuilt. It is a
# test tool (check.sh), not part of the product.
#
#   POLICY_REPORTER=$(integration/policy-reporter/build.sh | tail -1)
#
# The last line on stdout is the path of the binary; every log line goes to stderr. The source's
# templates/ directory (HTML reports, which the checks never render) is kept next to the binary.
#
# * POOLGUARD_POLICY_REPORTER set: that binary is used as it is.
# * Otherwise the source ../shared/vendor/policy-reporter-*.tar.gz (from the project root) is
#   unpacked and built with `go build` into
#   ${POOLGUARD_POLICY_REPORTER_CACHE:-$HOME/.cache/poolguard/policy-reporter}/<first 16 hex digits
#   of the tarball's sha256>/policy-reporter, and reused from there without the network. Its Go
#   module is on no module proxy, but its dependencies are (GOFLAGS=-mod=mod resolves them from
#   its go.sum). Built with cgo (CGO_ENABLED=1, a C compiler is needed): the REST API keeps what
#   it reads in SQLite through github.com/mattn/go-sqlite3, which refuses to open a database
#   when built without cgo. A cold compile (empty Go build cache, modules already downloaded:
#   about 11 CPU-minutes) took 17 minutes on a 2-core machine busy with other builds (load 9-10);
#   the module download adds a few minutes. It runs under `nice` and concurrent callers are
#   serialised with flock.
#
# The usual Go settings (GOMODCACHE, GOCACHE, GOPROXY, ...) are respected; GOTOOLCHAIN=local.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"

log() { printf '[policy-reporter] %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

if [[ -n "${POOLGUARD_POLICY_REPORTER:-}" ]]; then
    "${POOLGUARD_POLICY_REPORTER}" version >/dev/null 2>&1 ||
        die "POOLGUARD_POLICY_REPORTER=${POOLGUARD_POLICY_REPORTER} does not run"
    log "using POOLGUARD_POLICY_REPORTER=${POOLGUARD_POLICY_REPORTER}"
    printf '%s\n' "${POOLGUARD_POLICY_REPORTER}"
    exit 0
fi

shopt -s nullglob
tarballs=("${root}"/../shared/vendor/policy-reporter-*.tar.gz)
shopt -u nullglob
((${#tarballs[@]} > 0)) ||
    die "no Policy Reporter source: ../shared/vendor/policy-reporter-*.tar.gz (from the project root) is missing"
((${#tarballs[@]} == 1)) ||
    die "more than one Policy Reporter source in ../shared/vendor (keep one): ${tarballs[*]##*/}"
tarball="$(cd "$(dirname "${tarballs[0]}")" && pwd)/$(basename "${tarballs[0]}")"
name="$(basename "${tarball}" .tar.gz)"
sha="$(sha256sum "${tarball}" | cut -c1-16)"

cache="${POOLGUARD_POLICY_REPORTER_CACHE:-$HOME/.cache/poolguard/policy-reporter}"
dir="${cache}/${sha}"
bin="${dir}/policy-reporter"
stamp="${dir}/policy-reporter.stamp"
recipe="${name} sha256:${sha} cgo sqlite_unlock_notify"
mkdir -p "${dir}"
if command -v flock >/dev/null; then
    exec 9>"${dir}/.lock"
    flock 9
fi

# A cached binary is reused when it runs and its stamp names this tarball and recipe.
if [[ -x "${bin}" && -f "${stamp}" && "$(cat "${stamp}")" == "${recipe}" ]] &&
    "${bin}" version >/dev/null 2>&1; then
    log "using cached ${bin}"
    printf '%s\n' "${bin}"
    exit 0
fi

command -v go >/dev/null || die "no go toolchain to build Policy Reporter from ${tarball##*/}"
command -v "${CC:-cc}" >/dev/null ||
    die "no C compiler (${CC:-cc}): Policy Reporter's SQLite driver needs cgo (Debian: apt-get install -y gcc)"
staging="$(mktemp -d "${dir}/.build.XXXXXX")"
trap 'rm -rf "${staging}"' EXIT
mkdir -p "${staging}/src" "${staging}/out"
tar -xzf "${tarball}" -C "${staging}/src" || die "cannot unpack ${tarball##*/}"
gomod="$(find "${staging}/src" -maxdepth 2 -name go.mod -print -quit)"
src="${gomod%/go.mod}"
[[ -n "${gomod}" && -f "${src}/main.go" ]] || die "${tarball##*/} holds no Go module with a main.go at its top"
version="${name#policy-reporter-}"
version="${version%-src}"
log "building ${name} with $(go version | awk '{print $3}') into ${dir} (cold builds take minutes)"
start=$(date +%s)
(
    cd "${src}"
    CGO_ENABLED=1 GOTOOLCHAIN=local GOFLAGS="${GOFLAGS:-} -mod=mod -trimpath" \
        nice -n "${POOLGUARD_POLICY_REPORTER_NICE:-10}" \
        go build -tags sqlite_unlock_notify -ldflags "-s -w -X main.Version=${version}" \
            -o "${staging}/out/policy-reporter" . >&2
) || die "go build of ${name} failed"
rm -rf "${dir}/templates"
cp -r "${src}/templates" "${dir}/templates"
rm -rf "${bin}"
mv -f "${staging}/out/policy-reporter" "${bin}"
printf '%s\n' "${recipe}" >"${stamp}"
log "built in $(($(date +%s) - start))s"
"${bin}" version >/dev/null 2>&1 || die "the built ${bin} does not run"
printf '%s\n' "${bin}"
