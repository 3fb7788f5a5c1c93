#!/usr/bin/env bash
# Provide a helm binary for linting and rendering charts/poolguard, without downloading a prebuilt
# binary from the web.
#
#   HELM=$(integration/helm/helm.sh | tail -1)
#
# The last line on stdout is the path of the helm binary; every log line goes to stderr.
#
# * POOLGUARD_HELM set: that binary is used as it is (it must run and be v3.14+ or v4).
# * Otherwise a `helm` on PATH that reports v3.14 or later (or v4) is used.
# * Otherwise the pinned release (HELM_VERSION below) is compiled from its Go module with
#   `go install helm.sh/helm/v3/cmd/helm@<version>` into
#   ${POOLGUARD_HELM_CACHE:-$HOME/.cache/poolguard/helm}/<version>/helm, stamped like helm's own
#   release builds (version, Kubernetes version). A binary already there that reports the pinned
#   version and carries the current build recipe (helm.stamp) is reused without touching the
#   network. A cold build (module download + compile) took 5.5 minutes on a busy 2-core machine;
#   it runs under `nice` (POOLGUARD_HELM_NICE, default 10) and concurrent callers are serialised
#   with flock. POOLGUARD_HELM_VERSION overrides the pin (v3.x.y only).
#
# The usual Go settings (GOMODCACHE, GOCACHE, GOPROXY, ...) are respected.
set -euo pipefail

# Newest v3 release on the Go module proxy when pinned (`go list -m -versions helm.sh/helm/v3`).
HELM_VERSION="${POOLGUARD_HELM_VERSION:-v3.22.0}"
HELM_MODULE="helm.sh/helm/v3"
BUILD_RECIPE="recipe-2"

log() { printf '[helm] %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

# The ldflags below are helm v3's package paths; a v4 build would need its own recipe.
[[ "${HELM_VERSION}" =~ ^v3\.[0-9]+\.[0-9]+$ ]] \
    || die "POOLGUARD_HELM_VERSION=${HELM_VERSION}: only v3.x.y releases of ${HELM_MODULE} can be built here"

# Prints the version a helm binary reports (e.g. v3.22.0), or nothing when it does not run.
helm_version() {
    "$1" version --template '{{.Version}}' 2>/dev/null | head -n1 || true
}

# True when the version (vMAJOR.MINOR.PATCH...) is v3.14+ or v4+.
recent_enough() {
    local v="${1#v}" major minor
    major="${v%%.*}"
    minor="${v#*.}"
    minor="${minor%%.*}"
    [[ "$major" =~ ^[0-9]+$ && "$minor" =~ ^[0-9]+$ ]] || return 1
    (( major > 3 || (major == 3 && minor >= 14) ))
}

if [[ -n "${POOLGUARD_HELM:-}" ]]; then
    v="$(helm_version "${POOLGUARD_HELM}")"
    recent_enough "$v" || die "POOLGUARD_HELM=${POOLGUARD_HELM} reports '${v}', need v3.14+ or v4"
    log "using POOLGUARD_HELM=${POOLGUARD_HELM} (${v})"
    printf '%s\n' "${POOLGUARD_HELM}"
    exit 0
fi

if path_helm="$(command -v helm 2>/dev/null)"; then
    v="$(helm_version "$path_helm")"
    if recent_enough "$v"; then
        log "using helm on PATH: ${path_helm} (${v})"
        printf '%s\n' "${path_helm}"
        exit 0
    fi
    log "helm on PATH (${path_helm}) reports '${v}', need v3.14+ or v4; using ${HELM_VERSION} built from its Go module"
fi

cache="${POOLGUARD_HELM_CACHE:-$HOME/.cache/poolguard/helm}"
dir="${cache}/${HELM_VERSION}"
bin="${dir}/helm"

stamp="${dir}/helm.stamp"
mkdir -p "$dir"
# One build at a time; a caller that waited finds the binary the other one built.
if command -v flock >/dev/null; then
    exec 9>"${dir}/.lock"
    flock 9
fi

# What helm's Makefile stamps into a release build, so `helm version` reports the release and
# `helm template` / `helm lint` assume the Kubernetes version helm was built against (client-go
# v0.N -> 1.N) instead of the source default (v1.20, which fails charts with a kubeVersion).
build_ldflags() {
    local gomod client_go minor
    gomod="$(go list -m -f '{{.GoMod}}' "${HELM_MODULE}@${HELM_VERSION}")" \
        || die "cannot resolve ${HELM_MODULE}@${HELM_VERSION} on the Go module proxy"
    client_go="$(awk '$1 == "k8s.io/client-go" {print $2; exit}' "$gomod")"
    [[ "$client_go" =~ ^v0\.([0-9]+)\. ]] || die "no k8s.io/client-go v0.N in ${gomod}"
    minor="${BASH_REMATCH[1]}"
    printf '%s' "-s -w" \
        " -X ${HELM_MODULE}/internal/version.version=${HELM_VERSION}" \
        " -X ${HELM_MODULE}/internal/version.gitTreeState=clean" \
        " -X ${HELM_MODULE}/pkg/lint/rules.k8sVersionMajor=1" \
        " -X ${HELM_MODULE}/pkg/lint/rules.k8sVersionMinor=${minor}" \
        " -X ${HELM_MODULE}/pkg/chartutil.k8sVersionMajor=1" \
        " -X ${HELM_MODULE}/pkg/chartutil.k8sVersionMinor=${minor}"
}

# A cached binary is reused when it reports the pinned version and its stamp file names the
# current build recipe (bump BUILD_RECIPE when build_ldflags or the go install flags change).
# Checking it needs neither the network nor the go toolchain.
if [[ -x "$bin" && -f "$stamp" ]]; then
    v="$(helm_version "$bin")"
    if [[ "$v" == "${HELM_VERSION}" && "$(cat "$stamp")" == "${HELM_VERSION} ${BUILD_RECIPE}" ]]; then
        log "using cached ${bin} (${v})"
        printf '%s\n' "$bin"
        exit 0
    fi
    log "cached ${bin} (${v}) was built differently: rebuilding"
fi

command -v go >/dev/null || die "no helm v3.14+ on PATH and no go toolchain to build ${HELM_MODULE}@${HELM_VERSION}"

staging="$(mktemp -d "${dir}/.build.XXXXXX")"
trap 'rm -rf "$staging"' EXIT

ldflags="$(build_ldflags)"

log "building ${HELM_MODULE}/cmd/helm@${HELM_VERSION} with $(go version | awk '{print $3}') into ${dir} (cold builds take minutes)"
start=$(date +%s)
GOBIN="$staging" CGO_ENABLED=0 GOFLAGS="${GOFLAGS:-} -trimpath" \
    nice -n "${POOLGUARD_HELM_NICE:-10}" \
    go install -ldflags "$ldflags" "${HELM_MODULE}/cmd/helm@${HELM_VERSION}" >&2 \
    || die "go install ${HELM_MODULE}/cmd/helm@${HELM_VERSION} failed"
mv -f "${staging}/helm" "$bin"
printf '%s\n' "${HELM_VERSION} ${BUILD_RECIPE}" >"$stamp"
log "built in $(( $(date +%s) - start ))s"

v="$(helm_version "$bin")"
[[ "$v" == "${HELM_VERSION}" ]] || die "built ${bin} reports '${v}', expected ${HELM_VERSION}"
log "helm ${v} at ${bin}"
printf '%s\n' "$bin"
