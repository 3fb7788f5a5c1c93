#!/usr/bin/env bash
# kind's node image, built here because no container registry can be reached (kind's own
# kindest/node and kindest/base cannot be pulled, and `kind build node-image` downloads both):
#
#   IMAGE=$(integration/kind/build-node-image.sh | tail -1)    # needs root, podman, buildah,
#                                                               # mmdebstrap, musl-gcc, go
#
# The image, as kind's base image and `kind build node-image` make it:
# * a Debian rootfs (versions.env DEBIAN_SUITE) from mmdebstrap with systemd, iptables, nftables,
#   iproute2, runc (Debian's), jq (kind's mount hook) ..., changed as kind's base Dockerfile does
#   (units pruned, kubelet/containerd enabled), and kind's base-image files (entrypoint, units,
#   containerd configuration) taken from the kind module (versions.env KIND_VERSION);
# * containerd, its shim and ctr and the CNI plugins host-local, loopback, portmap
#   (../node/build.sh) plus ptp; the containerd configuration names kubeadm's pause image and sets
#   restrict_oom_score_adj (runc cannot set a lower oom_score_adj inside the node's container);
# * kubeadm, kubelet, kubectl (../controlplane/build.sh), /kind/version, the CNI manifest kind
#   applies (node-image/default-cni.yaml) and the node's own network unit (poolguard-cni.service);
# * the images kubeadm deploys, under the names `kubeadm config images list` prints, built FROM
#   scratch with buildah: kube-apiserver, kube-controller-manager, kube-scheduler, kube-proxy (with
#   nft and iptables copied from the rootfs), etcd (../controlplane), pause (../node/pause.c).
#   import-images.service imports them into the node's containerd before kubelet starts. No
#   coredns: run.sh's cluster disables kubeadm's DNS addon (README.md says why).
#
# Two caches under ${POOLGUARD_KIND_CACHE:-$HOME/.cache/poolguard/kind}: the Debian rootfs as
# mmdebstrap made it, rootfs-<hash>.tar (hash over the suite and make_rootfs below), and the
# finished node rootfs, node-<hash>.tar (hash over everything that goes into it: this script, the
# version pins, node-image/, pause.c). The image is localhost/poolguard-kind/node:<k8s
# version>-<hash> in podman's storage. Present image: nothing is done; cached node tar: only
# `podman import`; else the node rootfs is built on the cached (or new) Debian rootfs. Neither
# cache needs to exist. Last stdout line: the image name; logs go to stderr.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "${here}/../.." && pwd)"
# shellcheck source=versions.env
source "${here}/versions.env"
# shellcheck source=../controlplane/versions.env
source "${root}/integration/controlplane/versions.env"
# shellcheck source=../node/versions.env
source "${root}/integration/node/versions.env"

log() { printf '[kind] %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

((EUID == 0)) || die "run as root: mmdebstrap builds a rootfs with device nodes and owners"
for pair in podman:podman buildah:buildah mmdebstrap:mmdebstrap musl-gcc:musl-tools go:golang \
    jq:jq flock:util-linux; do
    command -v "${pair%%:*}" >/dev/null 2>&1 || die "${pair%%:*} is missing (Debian: apt-get install -y ${pair#*:})"
done

: "${HOME:?HOME must be set (or set POOLGUARD_KIND_CACHE)}"
cache="${POOLGUARD_KIND_CACHE:-${HOME}/.cache/poolguard/kind}"
mkdir -p "${cache}"

RECIPE=recipe-2
hash="$(cat "${BASH_SOURCE[0]}" "${here}/versions.env" "${root}/integration/controlplane/versions.env" \
    "${root}/integration/node/versions.env" "${root}/integration/node/pause.c" "${here}"/node-image/* \
    <(printf '%s' "${RECIPE}") | sha256sum | cut -c1-12)"
image="localhost/poolguard-kind/node:${K8S_VERSION}-${hash}"
archive="${cache}/node-${hash}.tar"

exec 9>"${cache}/.lock"
if ! flock -n 9; then
    log "waiting for another build-node-image.sh"
    flock 9
fi

if podman image exists "${image}"; then
    log "node image ${image}: present"
    printf '%s\n' "${image}"
    exit 0
fi
import_archive() {
    log "importing ${archive} as ${image}"
    podman import --quiet \
        --change 'ENV container=docker' \
        --change 'STOPSIGNAL SIGRTMIN+3' \
        --change 'ENTRYPOINT ["/usr/local/bin/entrypoint", "/sbin/init"]' \
        "${archive}" "${image}" >/dev/null
}
if [[ -s "${archive}" ]]; then
    import_archive
    printf '%s\n' "${image}"
    exit 0
fi

start_all=${SECONDS}
work="$(mktemp -d "${TMPDIR:-/tmp}/poolguard-kind-image.XXXXXX")"
b=(buildah --root "${work}/storage" --runroot "${work}/run" --storage-driver vfs)
cleanup() {
    "${b[@]}" rm -a >/dev/null 2>&1 || true
    rm -rf -- "${work}" "${archive}.tmp" "${cache}"/rootfs-*.tmp.tar
}
trap cleanup EXIT

# --- binaries ----------------------------------------------------------------------------------
cp_bin="$(POOLGUARD_CP_BUILD_KUBECTL=1 "${root}/integration/controlplane/build.sh" kubelet kube-proxy kubeadm | tail -n1)"
node_bin="$("${root}/integration/node/build.sh" | tail -n1)"
export CGO_ENABLED=0 GOWORK=off
gobuild=(nice -n "${POOLGUARD_CP_NICE:-10}" go build -mod=readonly -trimpath -buildvcs=false)
ptp_dir="${cache}/ptp-${CNI_PLUGINS_VERSION}"
if [[ ! -x "${ptp_dir}/ptp" ]]; then
    log "building the CNI plugin ptp ${CNI_PLUGINS_VERSION}"
    mkdir -p "${ptp_dir}"
    (cd "${root}/integration/node/cni" && "${gobuild[@]}" \
        -ldflags "-s -w -X github.com/containernetworking/plugins/pkg/utils/buildversion.BuildVersion=${CNI_PLUGINS_VERSION}" \
        -o "${ptp_dir}/ptp.tmp" github.com/containernetworking/plugins/plugins/main/ptp)
    mv -f "${ptp_dir}/ptp.tmp" "${ptp_dir}/ptp"
fi

# No coredns: run.sh disables kubeadm's DNS addon (nothing in the kind run resolves cluster names).
mapfile -t kubeadm_images < <("${cp_bin}/kubeadm" config images list --kubernetes-version "${K8S_VERSION}" |
    grep -v '/coredns:')
((${#kubeadm_images[@]} >= 6)) || die "kubeadm config images list printed ${#kubeadm_images[@]} images besides coredns: ${kubeadm_images[*]}"
image_named() { # short name -> the full name kubeadm expects
    local i
    for i in "${kubeadm_images[@]}"; do
        [[ "${i}" == */"$1":* ]] && { printf '%s\n' "${i}"; return; }
    done
    die "kubeadm names no $1 image (${kubeadm_images[*]})"
}
musl-gcc -static -Os -Wall -Werror -o "${work}/pause" "${root}/integration/node/pause.c"
strip "${work}/pause"

# --- rootfs ------------------------------------------------------------------------------------
kind_mod="$(go mod download -json "sigs.k8s.io/kind@${KIND_VERSION}" | jq -r .Dir)"
[[ -d "${kind_mod}/images/base/files" ]] || die "sigs.k8s.io/kind@${KIND_VERSION} has no images/base/files"
base="${kind_mod}/images/base/files"
rootfs="${work}/rootfs"
# The Debian rootfs alone is cached too (rootfs-<hash>.tar), keyed by the suite and this function,
# so that changes to the node image's own files do not run mmdebstrap again.
make_rootfs() { # suite output.tar
    mmdebstrap --quiet --variant=minbase --mode=root --format=tar \
        --include=systemd,systemd-sysv,dbus,conntrack,iptables,nftables,iproute2,ethtool,util-linux,mount,kmod,libseccomp2,pigz,bash,ca-certificates,curl,jq,procps,runc \
        "$1" "$2"
}
rootfs_hash="$(printf '%s\n' "${DEBIAN_SUITE}" "$(declare -f make_rootfs)" | sha256sum | cut -c1-12)"
rootfs_tar="${cache}/rootfs-${rootfs_hash}.tar"
if [[ ! -s "${rootfs_tar}" ]]; then
    log "mmdebstrap ${DEBIAN_SUITE}"
    start=${SECONDS}
    make_rootfs "${DEBIAN_SUITE}" "${rootfs_tar}.tmp.tar"
    mv -f "${rootfs_tar}.tmp.tar" "${rootfs_tar}"
    find "${cache}" -maxdepth 1 -name 'rootfs-*.tar' ! -name "rootfs-${rootfs_hash}.tar" -delete
    log "rootfs in $((SECONDS - start))s"
else
    log "rootfs ${DEBIAN_SUITE}: cached (rootfs-${rootfs_hash}.tar)"
fi
mkdir "${rootfs}"
tar --numeric-owner --xattrs --xattrs-include='*' -C "${rootfs}" -xpf "${rootfs_tar}"

# kind's base image: its files with the modes its Dockerfile gives them.
install -d -m 0755 "${rootfs}/kind" "${rootfs}/kind/bin" "${rootfs}/kind/manifests" "${rootfs}/kind/images" \
    "${rootfs}/etc/kubernetes/manifests" "${rootfs}/opt/cni/bin" "${rootfs}/etc/cni/net.d"
install -m 0755 "${base}"/usr/local/bin/* "${rootfs}/usr/local/bin/"
install -m 0644 "${base}"/kind/README.txt "${rootfs}/kind/"
install -m 0755 "${base}"/kind/bin/* "${here}"/node-image/*.sh "${rootfs}/kind/bin/"
install -m 0644 "${base}"/etc/crictl.yaml "${rootfs}/etc/"
install -D -m 0644 -t "${rootfs}/etc/containerd" "${base}"/etc/containerd/config.toml
install -D -m 0644 -t "${rootfs}/etc/default" "${base}"/etc/default/*
install -D -m 0644 -t "${rootfs}/etc/sysctl.d" "${base}"/etc/sysctl.d/*
install -D -m 0644 -t "${rootfs}/etc/systemd/system" "${base}"/etc/systemd/system/*.service \
    "${base}"/etc/systemd/system/*.slice "${here}"/node-image/*.service
install -D -m 0644 -t "${rootfs}/etc/systemd/system/kubelet.service.d" "${base}"/etc/systemd/system/kubelet.service.d/*
(
    cd "${rootfs}"
    find lib/systemd/system/sysinit.target.wants/ -name systemd-tmpfiles-setup.service -delete
    rm -f lib/systemd/system/multi-user.target.wants/* etc/systemd/system/*.wants/* \
        lib/systemd/system/local-fs.target.wants/* lib/systemd/system/sockets.target.wants/*udev* \
        lib/systemd/system/sockets.target.wants/*initctl* lib/systemd/system/basic.target.wants/*
    echo "ReadKMsg=no" >>etc/systemd/journald.conf
    ln -sfn /usr/lib/systemd/systemd sbin/init
)
chroot "${rootfs}" systemctl enable --quiet kubelet.service containerd.service undo-mount-hacks.service \
    import-images.service poolguard-cni.service
chroot "${rootfs}" systemctl mask --quiet systemd-binfmt.service

# What kind's base image compiles, from our pinned builds; runc is Debian's (/usr/sbin/runc).
install -m 0755 "${node_bin}"/containerd "${node_bin}"/containerd-shim-runc-v2 "${node_bin}"/ctr "${rootfs}/usr/local/bin/"
install -m 0755 "${node_bin}"/host-local "${node_bin}"/loopback "${node_bin}"/portmap "${ptp_dir}/ptp" "${rootfs}/opt/cni/bin/"
"${node_bin}/ctr" oci spec |
    jq '.hooks.createContainer[.hooks.createContainer | length] |= . + {"path": "/kind/bin/mount-product-files.sh"}' |
    jq 'del(.process.rlimits)' >"${rootfs}/etc/containerd/cri-base.json"
pause_image="$(image_named pause)"
sed -i -e "s|^\(\s*sandbox_image\s*=\s*\).*|\1\"${pause_image}\"|" \
    -e 's|^\(\s*restrict_oom_score_adj\s*=\s*\).*|\1true|' "${rootfs}/etc/containerd/config.toml"
grep -q "sandbox_image = \"${pause_image}\"" "${rootfs}/etc/containerd/config.toml" || die "sandbox_image not set"
grep -q 'restrict_oom_score_adj = true' "${rootfs}/etc/containerd/config.toml" || die "restrict_oom_score_adj not set"

# What `kind build node-image` adds.
install -m 0755 "${cp_bin}"/kubeadm "${cp_bin}"/kubelet "${rootfs}/usr/bin/"
install -m 0755 "$(readlink -f "${cp_bin}/kubectl")" "${rootfs}/usr/bin/kubectl"
printf '%s\n' "${K8S_VERSION}" >"${rootfs}/kind/version"
install -m 0644 "${here}"/node-image/default-cni.yaml "${here}"/node-image/default-storage.yaml "${rootfs}/kind/manifests/"

# --- the images kubeadm deploys ----------------------------------------------------------------
build_image() { # name dir-with-rootfs-content entrypoint-json
    local c
    c="$("${b[@]}" from scratch)"
    "${b[@]}" copy --quiet "${c}" "$2/" / >/dev/null
    "${b[@]}" config --env PATH=/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin ${3:+--entrypoint "$3"} "${c}"
    "${b[@]}" commit --quiet --format oci --timestamp 0 "${c}" "$1" >/dev/null
    "${b[@]}" push --quiet --disable-compression "$1" "oci-archive:${rootfs}/kind/images/$(basename "${1%%:*}").tar:$1"
    "${b[@]}" rm "${c}" >/dev/null
}
one_binary() { # name source path-in-image
    rm -rf "${work}/img"
    install -D -m 0755 "$2" "${work}/img$3"
}
for name in kube-apiserver kube-controller-manager kube-scheduler etcd; do
    one_binary "${name}" "${cp_bin}/${name}" "/usr/local/bin/${name}"
    build_image "$(image_named "${name}")" "${work}/img" ""
done
# kube-proxy (nftables mode) runs nft; iptables and conntrack too, for its clean-ups.
one_binary kube-proxy "${cp_bin}/kube-proxy" /usr/local/bin/kube-proxy
mapfile -t libs < <(chroot "${rootfs}" ldd /usr/sbin/nft /usr/sbin/xtables-nft-multi /usr/sbin/conntrack |
    awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\// && $1 !~ /:$/ { print $1 }' | sort -u)
for f in /usr/sbin/nft /usr/sbin/xtables-nft-multi /usr/sbin/conntrack "${libs[@]}"; do
    install -D "${rootfs}$(chroot "${rootfs}" readlink -f "${f}")" "${work}/img${f}"
done
mkdir -p "${work}/img/usr/lib/x86_64-linux-gnu"
cp -a "${rootfs}"/usr/lib/x86_64-linux-gnu/xtables "${work}/img/usr/lib/x86_64-linux-gnu/"
for t in iptables iptables-save iptables-restore ip6tables ip6tables-save ip6tables-restore; do
    ln -s xtables-nft-multi "${work}/img/usr/sbin/${t}"
done
build_image "$(image_named kube-proxy)" "${work}/img" ""
one_binary pause "${work}/pause" /pause
build_image "${pause_image}" "${work}/img" '["/pause"]'
log "images: $(cd "${rootfs}/kind/images" && du -sh -- * | tr '\t\n' ': ')"

log "packing ${archive}"
tar --numeric-owner --xattrs --xattrs-include='*' -C "${rootfs}" -cf "${archive}.tmp" .
mv -f "${archive}.tmp" "${archive}"
# Older archives of this cache are never used again.
find "${cache}" -maxdepth 1 -name 'node-*.tar' ! -name "node-${hash}.tar" -delete
import_archive
log "node image ${image} built in $((SECONDS - start_all))s"
printf '%s\n' "${image}"
