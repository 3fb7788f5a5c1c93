#!/usr/bin/env bash
# Provide a Kubernetes control plane (etcd, kube-apiserver,
# kube-controller-manager, kube-scheduler, kubectl) for integration tests.
#
#   BIN=$(integration/controlplane/build.sh | tail -1)
#   BIN=$(integration/controlplane/build.sh kubelet kube-proxy | tail -1)
#
# Arguments name extra commands of the same Kubernetes module to provide as
# well (kubelet and kube-proxy for integration/node, and kubeadm for kind's node
# image, integration/kind); without arguments nothing but the control plane is
# built.
# The last line on stdout is the directory holding the binaries; every log line
# goes to stderr.
#
# * KUBEBUILDER_ASSETS set: those binaries are used as they are and nothing is
#   built. The directory must hold etcd and kube-apiserver;
#   kube-controller-manager, kube-scheduler and kubectl are optional (a warning
#   is logged when they are missing).
# * Otherwise the pinned versions (versions.env) are compiled from the Go
#   modules k8s/ and etcd/ into
#   ${POOLGUARD_CP_CACHE:-$HOME/.cache/poolguard/controlplane}/<k8s-version>/bin.
#   A binary already there that reports the pinned version is not rebuilt.
#   kubectl is only compiled when no kubectl within one minor version of the
#   pinned release is on PATH; such a kubectl is symlinked into the bin
#   directory instead (POOLGUARD_CP_BUILD_KUBECTL=1 always compiles it).
#
# Other knobs: POOLGUARD_CP_NICE (niceness of the go builds, default 10).
# The usual Go settings (GOMODCACHE, GOCACHE, GOPROXY, ...) are respected.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=versions.env
source "${here}/versions.env"

log() { printf '[controlplane] %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

k8s_cmds=(kube-apiserver kube-controller-manager kube-scheduler)
extra_cmds=()
for arg in "$@"; do
    case "${arg}" in
        kubelet | kube-proxy | kubeadm) extra_cmds+=("${arg}") ;;
        *) die "unknown extra command '${arg}' (known: kubelet kube-proxy kubeadm)" ;;
    esac
done

# ---------------------------------------------------------------------------
# Prebuilt binaries (envtest style)
# ---------------------------------------------------------------------------
if [[ -n "${KUBEBUILDER_ASSETS:-}" ]]; then
    assets="$(cd "${KUBEBUILDER_ASSETS}" 2>/dev/null && pwd)" \
        || die "KUBEBUILDER_ASSETS=${KUBEBUILDER_ASSETS} is not a directory"
    for b in etcd kube-apiserver; do
        [[ -x "${assets}/${b}" ]] \
            || die "KUBEBUILDER_ASSETS=${assets} has no executable ${b} (unset KUBEBUILDER_ASSETS to build from source)"
    done
    for b in kube-controller-manager kube-scheduler kubectl; do
        [[ -x "${assets}/${b}" ]] || log "warning: KUBEBUILDER_ASSETS has no ${b}"
    done
    for b in "${extra_cmds[@]}"; do
        [[ -x "${assets}/${b}" ]] \
            || die "KUBEBUILDER_ASSETS=${assets} has no executable ${b} (unset KUBEBUILDER_ASSETS to build from source)"
    done
    log "using prebuilt binaries from KUBEBUILDER_ASSETS; building nothing"
    printf '%s\n' "${assets}"
    exit 0
fi

# ---------------------------------------------------------------------------
# Helpers
# ---------------------------------------------------------------------------
k8s_minor="${K8S_VERSION#v1.}"
k8s_minor="${k8s_minor%%.*}"

# First line of "<binary> <args>", or nothing when it does not run.
first_line() {
    local out
    out="$(timeout 30 "$@" 2>/dev/null)" || return 0
    printf '%s\n' "${out%%$'\n'*}"
}

# Does the binary in the bin dir report the pinned version?
is_current() { # name path
    case "$1" in
        etcd) [[ "$(first_line "$2" --version)" == "etcd Version: ${ETCD_VERSION#v}" ]] ;;
        kubectl) [[ "$(first_line "$2" version --client)" == "Client Version: ${K8S_VERSION}" ]] ;;
        kubeadm) [[ "$(first_line "$2" version -o short)" == "${K8S_VERSION}" ]] ;;
        *) [[ "$(first_line "$2" --version)" == "Kubernetes ${K8S_VERSION}" ]] ;;
    esac
}

# Is this kubectl within one minor version of the pinned release?
kubectl_compatible() { # path
    local json major minor
    json="$(timeout 30 "$1" version --client -o json 2>/dev/null)" || return 1
    major="$(sed -n 's/.*"major": *"\([0-9]*\).*/\1/p' <<<"${json}" | head -n1)"
    minor="$(sed -n 's/.*"minor": *"\([0-9]*\).*/\1/p' <<<"${json}" | head -n1)"
    [[ "${major}" == 1 && -n "${minor}" ]] || return 1
    (( minor >= k8s_minor - 1 && minor <= k8s_minor + 1 ))
}

# A compatible kubectl on PATH (ignoring the bin dir itself), or nothing.
find_system_kubectl() {
    local dir candidate
    local IFS=:
    for dir in ${PATH}; do
        [[ -n "${dir}" ]] || continue
        candidate="${dir}/kubectl"
        [[ -x "${candidate}" && ! -d "${candidate}" ]] || continue
        [[ "$(cd "${dir}" 2>/dev/null && pwd -P)" == "$(cd "${bin}" && pwd -P)" ]] && continue
        if kubectl_compatible "${candidate}"; then
            printf '%s\n' "${candidate}"
            return 0
        fi
    done
}

version_ge() { # a b  -> a >= b
    [[ "$(printf '%s\n%s\n' "$2" "$1" | sort -V | head -n1)" == "$2" ]]
}

# ---------------------------------------------------------------------------
# Build from source
# ---------------------------------------------------------------------------
: "${HOME:?HOME must be set (or set POOLGUARD_CP_CACHE)}"
cache_root="${POOLGUARD_CP_CACHE:-${HOME}/.cache/poolguard/controlplane}"
version_dir="${cache_root}/${K8S_VERSION}"
bin="${version_dir}/bin"
mkdir -p "${bin}"

# Everything asked for already built: nothing to wait for, not even another build.sh building
# something else into the same directory (binaries are moved into place whole).
all_current() {
    local b
    for b in "${k8s_cmds[@]}" "${extra_cmds[@]}" etcd; do
        is_current "${b}" "${bin}/${b}" || return 1
    done
    if [[ "${POOLGUARD_CP_BUILD_KUBECTL:-0}" == 1 ]]; then
        [[ -f "${bin}/kubectl" && ! -L "${bin}/kubectl" ]] || return 1
    fi
    [[ -e "${bin}/kubectl" ]] && is_current kubectl "${bin}/kubectl"
}
if all_current; then
    log "${k8s_cmds[*]} ${extra_cmds[*]} etcd kubectl: up to date"
    printf '%s\n' "${bin}"
    exit 0
fi

# Serialise concurrent callers (e.g. several test processes starting at once).
if command -v flock >/dev/null 2>&1; then
    exec 9>"${version_dir}/.lock"
    if ! flock -n 9; then
        log "waiting for another build.sh working on ${version_dir}"
        flock 9
    fi
fi

# Decide what is missing.
todo_k8s=()
todo_etcd=0
for b in "${k8s_cmds[@]}" "${extra_cmds[@]}"; do
    if is_current "${b}" "${bin}/${b}"; then
        log "${b}: up to date"
    else
        todo_k8s+=("${b}")
    fi
done
if is_current etcd "${bin}/etcd"; then
    log "etcd: up to date"
else
    todo_etcd=1
fi

if [[ -f "${bin}/kubectl" && ! -L "${bin}/kubectl" ]] && is_current kubectl "${bin}/kubectl"; then
    log "kubectl: up to date"
else
    system_kubectl=""
    if [[ "${POOLGUARD_CP_BUILD_KUBECTL:-0}" != 1 ]]; then
        system_kubectl="$(find_system_kubectl || true)"
    fi
    if [[ -n "${system_kubectl}" ]]; then
        ln -sfn "${system_kubectl}" "${bin}/kubectl"
        log "kubectl: using ${system_kubectl} (within one minor of ${K8S_VERSION})"
    else
        rm -f "${bin}/kubectl"
        todo_k8s+=(kubectl)
    fi
fi

if (( ${#todo_k8s[@]} == 0 && todo_etcd == 0 )); then
    log "nothing to build"
    printf '%s\n' "${bin}"
    exit 0
fi

command -v go >/dev/null 2>&1 || die "go is not installed (need Go >= ${GO_MIN_VERSION}), or set KUBEBUILDER_ASSETS"
# Asked inside the module so that the toolchain go would really use answers.
go_version="$(cd "${here}/k8s" && go env GOVERSION)" \
    || die "cannot use the Go toolchain (need Go >= ${GO_MIN_VERSION})"
go_version="${go_version#go}"
if [[ "${go_version}" != devel* ]] && ! version_ge "${go_version%%[!0-9.]*}" "${GO_MIN_VERSION}"; then
    die "Go ${go_version} is too old; ${K8S_VERSION} needs Go >= ${GO_MIN_VERSION}"
fi

staging="$(mktemp -d "${version_dir}/.build.XXXXXX")"
trap 'rm -rf "${staging}"' EXIT

export CGO_ENABLED=0 GOWORK=off
gobuild=(nice -n "${POOLGUARD_CP_NICE:-10}" go build -mod=readonly -trimpath -buildvcs=false)

if (( ${#todo_k8s[@]} > 0 )); then
    # Reproducible build date: SOURCE_DATE_EPOCH, else the release's timestamp
    # from the module proxy, else now.
    if [[ -n "${SOURCE_DATE_EPOCH:-}" ]]; then
        build_date="$(date -u -d "@${SOURCE_DATE_EPOCH}" +%Y-%m-%dT%H:%M:%SZ)"
    else
        build_date="$(cd "${here}/k8s" && go list -mod=readonly -m \
            -f '{{with .Time}}{{.UTC.Format "2006-01-02T15:04:05Z"}}{{end}}' k8s.io/kubernetes 2>/dev/null)" \
            || build_date=""
        [[ -n "${build_date}" ]] || build_date="$(date -u +%Y-%m-%dT%H:%M:%SZ)"
    fi
    ldflags="-s -w"
    for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
        ldflags+=" -X ${pkg}.gitVersion=${K8S_VERSION}"
        ldflags+=" -X ${pkg}.gitMajor=1 -X ${pkg}.gitMinor=${k8s_minor}"
        ldflags+=" -X ${pkg}.gitCommit=${K8S_GIT_COMMIT:-0000000000000000000000000000000000000000}"
        ldflags+=" -X ${pkg}.gitTreeState=archive"
        ldflags+=" -X ${pkg}.buildDate=${build_date}"
    done
    pkgs=()
    for b in "${todo_k8s[@]}"; do pkgs+=("k8s.io/kubernetes/cmd/${b}"); done
    log "building ${todo_k8s[*]} ${K8S_VERSION} (this takes a while the first time)"
    start=${SECONDS}
    (cd "${here}/k8s" && "${gobuild[@]}" -ldflags "${ldflags}" -o "${staging}/" "${pkgs[@]}")
    log "built ${todo_k8s[*]} in $((SECONDS - start))s"
fi

if (( todo_etcd )); then
    log "building etcd ${ETCD_VERSION}"
    start=${SECONDS}
    (cd "${here}/etcd" && "${gobuild[@]}" \
        -ldflags "-s -w -X go.etcd.io/etcd/api/v3/version.GitSHA=${ETCD_GIT_SHA:-0000000}" \
        -o "${staging}/etcd" go.etcd.io/etcd/server/v3)
    log "built etcd in $((SECONDS - start))s"
fi

for f in "${staging}"/*; do
    b="$(basename "${f}")"
    is_current "${b}" "${f}" || die "freshly built ${b} does not report the pinned version"
    mv -f "${f}" "${bin}/${b}"
done

log "binaries in ${bin}"
printf '%s\n' "${bin}"
