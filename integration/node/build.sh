#!/usr/bin/env bash
# Provide the binaries of a real node for the local control plane (see README.md):
#
#   BIN=$(integration/node/build.sh | tail -1)
#
# * kubelet, kube-proxy: the control plane's Kubernetes module and pins
#   (../controlplane/build.sh kubelet kube-proxy), in the control plane's bin directory;
# * containerd, containerd-shim-runc-v2, ctr (versions.env CONTAINERD_VERSION) and the CNI plugins
#   bridge, host-local, loopback, portmap (CNI_PLUGINS_VERSION), compiled from the wrapper modules
#   containerd/ and cni/ into ${POOLGUARD_NODE_CACHE:-$HOME/.cache/poolguard/node}/<versions>/bin;
# * runc: Debian's package, only checked for here.
#
# The last line on stdout is a directory that holds (links to) all of them; logs go to stderr.
# A binary already built with the current pins and recipe (bin/.stamp) is reused.
# Builds: CGO_ENABLED=0 -trimpath -mod=readonly -buildvcs=false under nice (POOLGUARD_CP_NICE,
# default 10), serialised with flock.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=versions.env
source "${here}/versions.env"

log() { printf '[node] %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

RECIPE=recipe-1

command -v runc >/dev/null 2>&1 || die "runc is not installed (Debian: apt-get install -y runc)"
command -v go >/dev/null 2>&1 || die "go is not installed"

: "${HOME:?HOME must be set (or set POOLGUARD_NODE_CACHE)}"
cache_root="${POOLGUARD_NODE_CACHE:-${HOME}/.cache/poolguard/node}"
version_dir="${cache_root}/containerd-${CONTAINERD_VERSION}_cni-${CNI_PLUGINS_VERSION}"
bin="${version_dir}/bin"
mkdir -p "${bin}"

exec 9>"${version_dir}/.lock"
if ! flock -n 9; then
    log "waiting for another build.sh working on ${version_dir}"
    flock 9
fi

stamp="containerd ${CONTAINERD_VERSION} cni ${CNI_PLUGINS_VERSION} ${RECIPE}"
containerd_cmds=(containerd containerd-shim-runc-v2 ctr)
cni_cmds=(bridge host-local loopback portmap)
complete=1
for b in "${containerd_cmds[@]}" "${cni_cmds[@]}"; do
    [[ -x "${bin}/${b}" ]] || complete=0
done
if ((complete)) && [[ "$(cat "${bin}/.stamp" 2>/dev/null)" == "${stamp}" ]]; then
    log "containerd ${CONTAINERD_VERSION}, CNI plugins ${CNI_PLUGINS_VERSION}: up to date"
else
    staging="$(mktemp -d "${version_dir}/.build.XXXXXX")"
    trap 'rm -rf "${staging}"' EXIT
    export CGO_ENABLED=0 GOWORK=off
    gobuild=(nice -n "${POOLGUARD_CP_NICE:-10}" go build -mod=readonly -trimpath -buildvcs=false)

    pkg=github.com/containerd/containerd/v2
    ldflags="-s -w -X ${pkg}/version.Version=${CONTAINERD_VERSION}"
    ldflags+=" -X ${pkg}/version.Revision=${CONTAINERD_GIT_COMMIT:-0000000000000000000000000000000000000000}"
    ldflags+=" -X ${pkg}/version.Package=${pkg}"
    log "building containerd ${CONTAINERD_VERSION} (containerd, ctr, containerd-shim-runc-v2)"
    start=${SECONDS}
    (cd "${here}/containerd" && "${gobuild[@]}" -tags urfave_cli_no_docs -ldflags "${ldflags}" \
        -o "${staging}/" "${pkg}/cmd/containerd" "${pkg}/cmd/ctr")
    # The shim as upstream builds it: without gRPC (ttrpc only).
    (cd "${here}/containerd" && "${gobuild[@]}" -tags "urfave_cli_no_docs no_grpc" -ldflags "${ldflags}" \
        -o "${staging}/containerd-shim-runc-v2" "${pkg}/cmd/containerd-shim-runc-v2")
    log "built containerd in $((SECONDS - start))s"

    log "building CNI plugins ${CNI_PLUGINS_VERSION} (${cni_cmds[*]})"
    start=${SECONDS}
    cni_pkgs=()
    for p in ipam/host-local main/bridge main/loopback meta/portmap; do
        cni_pkgs+=("github.com/containernetworking/plugins/plugins/${p}")
    done
    (cd "${here}/cni" && "${gobuild[@]}" \
        -ldflags "-s -w -X github.com/containernetworking/plugins/pkg/utils/buildversion.BuildVersion=${CNI_PLUGINS_VERSION}" \
        -o "${staging}/" "${cni_pkgs[@]}")
    log "built CNI plugins in $((SECONDS - start))s"

    [[ "$("${staging}/containerd" --version)" == *" ${CONTAINERD_VERSION} "* ]] \
        || die "freshly built containerd does not report ${CONTAINERD_VERSION}"
    for f in "${staging}"/*; do
        mv -f "${f}" "${bin}/"
    done
    printf '%s\n' "${stamp}" > "${bin}/.stamp"
fi

cp_bin="$("${here}/../controlplane/build.sh" kubelet kube-proxy | tail -n1)"

# One directory with everything the node runs (symlinks), for PATH and for start.sh.
for b in kubelet kube-proxy kubectl; do
    ln -sfn "${cp_bin}/${b}" "${bin}/${b}"
done
ln -sfn "$(command -v runc)" "${bin}/runc"
log "kubelet $("${bin}/kubelet" --version), $("${bin}/containerd" --version | awk '{ print $1, $3 }'), runc $(runc --version | awk 'NR == 1 { print $3 }')"
printf '%s\n' "${bin}"
