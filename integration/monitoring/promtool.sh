#!/usr/bin/env bash
# Provide a promtool binary (Prometheus's rule and metrics checker), built from the pinned
# Prometheus Go module, never downloaded prebuilt.
#
#   PROMTOOL=$(integration/monitoring/promtool.sh | tail -1)
#
# The last line on stdout is the path of the binary; every log line goes to stderr.
#
# * POOLGUARD_PROMTOOL set: that binary is used as it is.
# * Otherwise the pinned module version (PROMETHEUS_MODULE_VERSION below) is compiled with
#   `go install github.com/prometheus/prometheus/cmd/promtool@<version>` into
#   ${POOLGUARD_PROMTOOL_CACHE:-$HOME/.cache/poolguard/promtool}/<version>/promtool and reused from
#   there without the network. The Prometheus module's versions v0.3NN.x are Prometheus v3.NN.x
#   releases. Built with the tag remove_all_sd: no service discovery plugins (their cloud SDKs
#   are most of the build), which checking and testing rules never use. A cold build (module
#   download, about 1 GB, and compile) took 14 minutes on a 2-core machine busy with other builds
#   (load 12-15); it runs under `nice` and concurrent callers are serialised with flock.
#
# The usual Go settings (GOMODCACHE, GOCACHE, GOPROXY, ...) are respected.
set -euo pipefail

PROMETHEUS_MODULE_VERSION="${POOLGUARD_PROMETHEUS_VERSION:-v0.316.0}"
MODULE="github.com/prometheus/prometheus"

log() { printf '[promtool] %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

if [[ -n "${POOLGUARD_PROMTOOL:-}" ]]; then
    "${POOLGUARD_PROMTOOL}" --version >/dev/null 2>&1 || die "POOLGUARD_PROMTOOL=${POOLGUARD_PROMTOOL} does not run"
    log "using POOLGUARD_PROMTOOL=${POOLGUARD_PROMTOOL}"
    printf '%s\n' "${POOLGUARD_PROMTOOL}"
    exit 0
fi

cache="${POOLGUARD_PROMTOOL_CACHE:-$HOME/.cache/poolguard/promtool}"
dir="${cache}/${PROMETHEUS_MODULE_VERSION}"
bin="${dir}/promtool"
stamp="${dir}/promtool.stamp"
recipe="${MODULE}@${PROMETHEUS_MODULE_VERSION} remove_all_sd version-stamped"
mkdir -p "$dir"
if command -v flock >/dev/null; then
    exec 9>"${dir}/.lock"
    flock 9
fi

# A cached binary is reused when it runs and its stamp names the pinned version.
if [[ -x "$bin" && -f "$stamp" && "$(cat "$stamp")" == "${recipe}" ]] &&
    "$bin" --version >/dev/null 2>&1; then
    log "using cached ${bin}"
    printf '%s\n' "$bin"
    exit 0
fi

command -v go >/dev/null || die "no go toolchain to build ${MODULE}/cmd/promtool@${PROMETHEUS_MODULE_VERSION}"
staging="$(mktemp -d "${dir}/.build.XXXXXX")"
trap 'rm -rf "$staging"' EXIT
log "building ${MODULE}/cmd/promtool@${PROMETHEUS_MODULE_VERSION} with $(go version | awk '{print $3}') into ${dir} (cold builds take minutes)"
start=$(date +%s)
GOBIN="$staging" CGO_ENABLED=0 GOFLAGS="${GOFLAGS:-} -trimpath" \
    nice -n "${POOLGUARD_PROMTOOL_NICE:-10}" \
    go install -tags remove_all_sd \
        -ldflags "-s -w -X github.com/prometheus/common/version.Version=${PROMETHEUS_MODULE_VERSION}" "${MODULE}/cmd/promtool@${PROMETHEUS_MODULE_VERSION}" >&2 \
    || die "go install ${MODULE}/cmd/promtool@${PROMETHEUS_MODULE_VERSION} failed"
mv -f "${staging}/promtool" "$bin"
printf '%s\n' "${recipe}" >"$stamp"
log "built in $(( $(date +%s) - start ))s"
"$bin" --version >/dev/null 2>&1 || die "the built ${bin} does not run"
printf '%s\n' "$bin"
