#!/usr/bin/env bash
# What the whole test suite (integration/run-tests.sh) needs, checked before any long step: one
# line per missing thing with the command that fixes it, then exit 1. `.ci/run` installs all of
# it; `bash .ci/run` on a machine that has none of it is the one-command setup.
#
#   bash integration/preflight.sh          # exit 0: everything is there
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

# Free disk the suite needs in the build directory: the workspace's builds (debug, release, musl,
# fuzz), the control plane, kubelet and containerd builds, helm, the image, and kind's node image
# (its cached rootfs tars and podman's copy, ~2 GB; a 4-node cluster adds ~2 GB while it runs):
# about 25 GB cold.
NEED_GB="${POOLGUARD_PREFLIGHT_DISK_GB:-25}"

missing=0
lack() { # what, fix
    printf 'preflight: missing %s; fix: %s\n' "$1" "$2" >&2
    missing=$((missing + 1))
}

if ((EUID != 0)); then
    lack "root (step 5 runs kind's nodes as privileged podman containers and builds their image)" "run the suite as root (sudo bash integration/run-tests.sh)"
fi
command -v cargo >/dev/null || lack "cargo" "install Rust with rustup (stable)"
command -v go >/dev/null || lack "go (builds the control plane, kubelet, kubeadm, containerd, CNI, kind, helm and promtool)" "install Go (a release recent enough for the pinned Kubernetes modules)"
if command -v rustup >/dev/null; then
    rustup target list --installed 2>/dev/null | grep -qx x86_64-unknown-linux-musl ||
        lack "the Rust musl target (poolguard's image)" "rustup target add x86_64-unknown-linux-musl"
else
    lack "rustup" "install Rust with rustup"
fi
# Debian packages: command -> package.
declare -A packages=(
    [jq]=jq [ip]=iproute2 [ss]=iproute2 [openssl]=openssl [curl]=curl [flock]=util-linux
    [setpriv]=util-linux [runc]=runc [nft]=nftables [buildah]=buildah
    [musl-gcc]=musl-tools [strip]=binutils [podman]=podman [mmdebstrap]=mmdebstrap
)
for cmd in "${!packages[@]}"; do
    command -v "$cmd" >/dev/null || lack "${cmd}" "apt-get install ${packages[$cmd]}"
done
# kind's workers find the control plane by name on podman's CNI network only through dnsname.
if ! [[ -x /usr/lib/cni/dnsname || -x /opt/cni/bin/dnsname || -x /usr/libexec/cni/dnsname ]]; then
    lack "the CNI plugin dnsname (kind's nodes resolve each other's names under podman)" \
        "apt-get install golang-github-containernetworking-plugin-dnsname"
fi
free_kb="$(df -Pk . | awk 'NR == 2 { print $4 }')"
if [[ -n "$free_kb" ]] && ((free_kb < NEED_GB * 1024 * 1024)); then
    lack "disk: $((free_kb / 1024 / 1024)) GB free here, the suite needs about ${NEED_GB} GB cold" \
        "free disk, or point CARGO_TARGET_DIR and POOLGUARD_CP_CACHE at a larger disk"
fi

if ((missing > 0)); then
    printf 'preflight: %d missing; `bash .ci/run` installs them all (as root, Debian), or run the fast path: see README.md\n' "$missing" >&2
    exit 1
fi
echo "preflight: ok (root, Rust with the musl target, Go, the Debian tools, PyYAML, ${NEED_GB} GB free)"
