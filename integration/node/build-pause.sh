#!/usr/bin/env bash
# The node's sandbox ("pause") image, made here because no registry can be reached: pause.c
# compiled statically with musl-gcc, packed FROM scratch by buildah as an OCI archive named
# localhost/poolguard-node/pause:1 (start.sh imports it and names it as containerd's sandbox image).
#
#   TAR=$(integration/node/build-pause.sh | tail -1)
#
# Cached in ${POOLGUARD_NODE_CACHE:-$HOME/.cache/poolguard/node}/pause-<hash of pause.c and this
# script>.oci.tar. Needs musl-gcc (musl-tools) and buildah.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
log() { printf '[node] %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

image="${POOLGUARD_NODE_PAUSE_IMAGE:-localhost/poolguard-node/pause:1}"
command -v musl-gcc >/dev/null 2>&1 || die "musl-gcc is missing (Debian: apt-get install -y musl-tools)"
command -v buildah >/dev/null 2>&1 || die "buildah is missing (Debian: apt-get install -y buildah)"

cache="${POOLGUARD_NODE_CACHE:-${HOME}/.cache/poolguard/node}"
mkdir -p "${cache}"
hash="$(cat "${here}/pause.c" "${BASH_SOURCE[0]}" <(printf '%s' "${image}") | sha256sum | cut -c1-12)"
out="${cache}/pause-${hash}.oci.tar"
if [[ -s "${out}" ]]; then
    log "pause image: ${out} (cached)"
    printf '%s\n' "${out}"
    exit 0
fi

work="$(mktemp -d)"
trap 'buildah --root "${work}/storage" --runroot "${work}/run" --storage-driver vfs rm -a >/dev/null 2>&1 || true; rm -rf "${work}"' EXIT
musl-gcc -static -Os -Wall -Werror -o "${work}/pause" "${here}/pause.c"
strip "${work}/pause"
b=(buildah --root "${work}/storage" --runroot "${work}/run" --storage-driver vfs)
c="$("${b[@]}" from scratch)"
"${b[@]}" copy --chown 0:0 --chmod 0755 "${c}" "${work}/pause" /pause >/dev/null
"${b[@]}" config --entrypoint '["/pause"]' --user 65535:65535 "${c}"
"${b[@]}" commit --quiet --format oci --timestamp 0 "${c}" "${image}" >/dev/null
"${b[@]}" push --quiet "${image}" "oci-archive:${out}.tmp:${image}"
mv -f "${out}.tmp" "${out}"
log "pause image: ${out}"
printf '%s\n' "${out}"
