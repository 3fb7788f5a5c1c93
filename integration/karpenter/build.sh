#!/usr/bin/env bash
# Provide Karpenter's kwok cloud provider (karpenter-kwok), kwok (the fake-kubelet controller) and
# the manifests they need, for integration/karpenter/test.sh, compiled from pinned Go modules (no
# containers, no images):
#
#   DIR=$(integration/karpenter/build.sh | tail -1)
#
# The last line on stdout is a directory holding
#   bin/karpenter-kwok   main package sigs.k8s.io/karpenter/kwok of sigs.k8s.io/karpenter ${KARPENTER_VERSION}
#   bin/kwok             sigs.k8s.io/kwok/cmd/kwok of sigs.k8s.io/kwok ${KWOK_VERSION}
#   crds/*.yaml          Karpenter's CRDs as its kwok chart installs them (NodePool, NodeClaim,
#                        NodeOverlay, CapacityBuffer) and the KWOKNodeClass CRD
#   stages/*.yaml        kwok's "fast" stages (nodes become Ready and keep their leases, pods
#                        Running at once), which kwok reads from its config file
# every log line goes to stderr.
#
# * Each binary is built in a module of its own (`go get -tool <pkg>@<version>` into a generated
#   go.mod), so each gets exactly the dependency versions of its own go.mod; everything goes to
#   ${POOLGUARD_KARPENTER_CACHE:-$HOME/.cache/poolguard/karpenter}/karpenter-<v>_kwok-<v>/
#   (mod-<name>/: go.mod + go.sum).
# * A binary already there whose embedded build info (go version -m) names the pinned module
#   version is not rebuilt; the manifests are copied again when a file is missing.
# * karpenter's go.mod asks for Go 1.26.9: the builds run with GOTOOLCHAIN=go1.27.3 (fetched
#   through the module proxy by the local go command when it is older).
# * A cold build (empty Go build cache) takes about 8 minutes for karpenter-kwok and 3 more for
#   kwok on 2 cores, at the lowest CPU priority (nice); with a warm build cache seconds.
#   Concurrent callers are serialised with flock.
#
# Knobs: KARPENTER_VERSION, KWOK_VERSION, POOLGUARD_KARPENTER_CACHE, POOLGUARD_KARPENTER_NICE
# (niceness of the go builds, default 19). GOMODCACHE, GOCACHE, GOPROXY, ... are respected.
set -euo pipefail

KARPENTER_VERSION="${KARPENTER_VERSION:-v1.15.0}"
KWOK_VERSION="${KWOK_VERSION:-v0.8.0}"
export GOTOOLCHAIN=go1.27.3

log() { printf '[karpenter] %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

command -v go >/dev/null 2>&1 || die "go is not installed"
: "${HOME:?HOME must be set (or set POOLGUARD_KARPENTER_CACHE)}"
cache_root="${POOLGUARD_KARPENTER_CACHE:-${HOME}/.cache/poolguard/karpenter}"
version_dir="${cache_root}/karpenter-${KARPENTER_VERSION}_kwok-${KWOK_VERSION}"
bin="${version_dir}/bin"
mkdir -p "${bin}"

# name  module  version  main-package
targets=(
    "karpenter-kwok sigs.k8s.io/karpenter ${KARPENTER_VERSION} sigs.k8s.io/karpenter/kwok"
    "kwok sigs.k8s.io/kwok ${KWOK_VERSION} sigs.k8s.io/kwok/cmd/kwok"
)
# The manifests: destination, then the module (karpenter or kwok) and the path in it.
crd_files=(
    "crds/karpenter.sh_nodepools.yaml karpenter kwok/charts/crds/karpenter.sh_nodepools.yaml"
    "crds/karpenter.sh_nodeclaims.yaml karpenter kwok/charts/crds/karpenter.sh_nodeclaims.yaml"
    "crds/karpenter.sh_nodeoverlays.yaml karpenter kwok/charts/crds/karpenter.sh_nodeoverlays.yaml"
    "crds/autoscaling.x-k8s.io_capacitybuffers.yaml karpenter kwok/charts/crds/autoscaling.x-k8s.io_capacitybuffers.yaml"
    "crds/karpenter.kwok.sh_kwoknodeclasses.yaml karpenter kwok/apis/crds/karpenter.kwok.sh_kwoknodeclasses.yaml"
    "stages/node-initialize.yaml kwok kustomize/stage/node/fast/node-initialize.yaml"
    "stages/node-heartbeat-with-lease.yaml kwok kustomize/stage/node/heartbeat-with-lease/node-heartbeat-with-lease.yaml"
    "stages/pod-ready.yaml kwok kustomize/stage/pod/fast/pod-ready.yaml"
    "stages/pod-complete.yaml kwok kustomize/stage/pod/fast/pod-complete.yaml"
    "stages/pod-delete.yaml kwok kustomize/stage/pod/fast/pod-delete.yaml"
)

# Does the binary embed "dep <module> <version>" (or "mod", for a main module)?
is_current() { # path module version
    [[ -x "$1" ]] || return 1
    go version -m "$1" 2>/dev/null | awk -v m="$2" -v v="$3" '($1 == "dep" || $1 == "mod") && $2 == m && $3 == v { ok = 1 } END { exit !ok }'
}

all_current() {
    local t name mod ver pkg dest rest
    for t in "${targets[@]}"; do
        read -r name mod ver pkg <<<"${t}"
        is_current "${bin}/${name}" "${mod}" "${ver}" || return 1
    done
    for t in "${crd_files[@]}"; do
        read -r dest rest <<<"${t}"
        [[ -s "${version_dir}/${dest}" ]] || return 1
    done
}
if all_current; then
    log "karpenter-kwok ${KARPENTER_VERSION}, kwok ${KWOK_VERSION}: up to date in ${version_dir}"
    printf '%s\n' "${version_dir}"
    exit 0
fi

# Serialise concurrent callers.
if command -v flock >/dev/null 2>&1; then
    exec 9>"${version_dir}/.lock"
    if ! flock -n 9; then
        log "waiting for another build.sh working on ${version_dir}"
        flock 9
    fi
fi

staging="$(mktemp -d "${version_dir}/.build.XXXXXX")"
trap 'rm -rf "${staging}"' EXIT
export CGO_ENABLED=0 GOWORK=off GOFLAGS=-mod=mod

for t in "${targets[@]}"; do
    read -r name mod ver pkg <<<"${t}"
    moddir="${version_dir}/mod-${name}"
    if [[ ! -f "${moddir}/go.mod" ]] || ! grep -q "^tool ${pkg}\$" "${moddir}/go.mod" \
        || ! grep -qE "(^|[[:space:]])${mod//./\\.} ${ver}( |\$)" "${moddir}/go.mod"; then
        log "${name}: resolving ${mod}@${ver} into ${moddir}"
        rm -rf "${moddir}"
        mkdir -p "${moddir}"
        # A low go directive that `go get` raises to the highest one among the dependencies (the
        # module's own, e.g. 1.26.9 for karpenter): the binary then gets that release's GODEBUG
        # defaults, as upstream's build does, not those of whichever toolchain runs this.
        (cd "${moddir}" && printf 'module poolguard.local/integration/%s\n\ngo 1.21\n' "${name}" > go.mod \
            && go get -tool "${pkg}@${ver}" >&2) || die "cannot resolve ${mod}@${ver} (module proxy reachable?)"
    fi
    if is_current "${bin}/${name}" "${mod}" "${ver}"; then
        log "${name}: up to date (${mod} ${ver})"
        continue
    fi
    log "building ${name} (${pkg}@${ver}, $(cd "${moddir}" && go env GOVERSION)); this takes several minutes the first time"
    start=${SECONDS}
    (cd "${moddir}" && nice -n "${POOLGUARD_KARPENTER_NICE:-19}" \
        go build -trimpath -buildvcs=false -ldflags '-s -w' -o "${staging}/${name}" "${pkg}") \
        || die "building ${name} failed"
    is_current "${staging}/${name}" "${mod}" "${ver}" || die "freshly built ${name} does not embed ${mod} ${ver}"
    mv -f "${staging}/${name}" "${bin}/${name}"
    log "built ${name} in $((SECONDS - start))s ($(du -h "${bin}/${name}" | cut -f1))"
done

# The manifests, from the modules just resolved (in the module cache).
module_dir() { # name module version
    (cd "${version_dir}/mod-$1" && go mod download "$2" && go list -m -f '{{.Dir}}' "$2") ||
        die "cannot find $2 $3 in the module cache (module proxy reachable?)"
}
declare -A src_dir=(
    [karpenter]="$(module_dir karpenter-kwok sigs.k8s.io/karpenter "${KARPENTER_VERSION}")"
    [kwok]="$(module_dir kwok sigs.k8s.io/kwok "${KWOK_VERSION}")"
)
mkdir -p "${version_dir}/crds" "${version_dir}/stages"
for t in "${crd_files[@]}"; do
    read -r dest module path <<<"${t}"
    [[ -s "${src_dir[${module}]}/${path}" ]] || die "${path} is missing in ${src_dir[${module}]}"
    cp "${src_dir[${module}]}/${path}" "${staging}/manifest"
    mv -f "${staging}/manifest" "${version_dir}/${dest}"
done

log "binaries and manifests in ${version_dir}"
printf '%s\n' "${version_dir}"
