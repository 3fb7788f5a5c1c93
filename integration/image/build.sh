#!/usr/bin/env bash
# Build poolguard's container image without Docker or a registry, following the Dockerfile:
#
#   TAR=$(integration/image/build.sh | tail -1)     # OCI archive, image localhost/poolguard:<version>
#
# 1. reads the Dockerfile (dockerfile.sh): the build stage's `cargo build` arguments, the file it
#    copies out and whether it strips it; the runtime stage's base, COPYs and config;
# 2. runs that cargo build here for the musl target (CC_x86_64_unknown_linux_musl=musl-gcc, from
#    Debian's musl-tools, instead of Alpine's gcc) and strips the binary as the Dockerfile does;
# 3. lays out the runtime stage's base (a distroless static nonroot image, which cannot be pulled
#    here) from Debian packages fetched with apt-get download: base-files, netbase, tzdata,
#    media-types, the CA bundle of ca-certificates, and the same users, groups, home directories,
#    /tmp and nsswitch.conf, with the same config (PATH, SSL_CERT_FILE, user 65532, workdir
#    /home/nonroot);
# 4. adds the runtime stage's COPYs (owned by root, as COPY without --chown does) and config
#    (USER, EXPOSE, ENTRYPOINT, CMD, ENV, WORKDIR, LABEL) and commits FROM scratch with buildah
#    (private vfs storage in a temporary directory, timestamps 0) as an OCI archive;
# 5. runs check.sh, which compares the archive with the Dockerfile again, independently.
#
# Prints the image ID (config digest) and size. Output: ${POOLGUARD_IMAGE_DIR:-<repo>/target/image}/
# poolguard-<version>.oci.tar. Environment: POOLGUARD_IMAGE_NAME (default localhost/poolguard),
# POOLGUARD_IMAGE_TAG (default: the version in Cargo.toml), CARGO_TARGET_DIR as for cargo.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
here="${root}/integration/image"
cd "${root}"

log() { printf '[image] %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

target=x86_64-unknown-linux-musl
for pair in cargo:rustup jq:jq buildah:buildah musl-gcc:musl-tools strip:binutils readelf:binutils \
    apt-get:apt dpkg-deb:dpkg sha256sum:coreutils tar:tar awk:mawk; do
    command -v "${pair%%:*}" >/dev/null 2>&1 || die "${pair%%:*} is missing (Debian: apt-get install -y ${pair#*:})"
done
if command -v rustup >/dev/null 2>&1 && ! rustup target list --installed 2>/dev/null | grep -qx "${target}"; then
    die "the Rust target ${target} is not installed (rustup target add ${target})"
fi
((EUID == 0)) || die "run as root (buildah's storage and the file ownership of the image need it)"

plan="$("${here}/dockerfile.sh" Dockerfile)" || exit 1
version="$(cargo metadata --no-deps --format-version 1 --locked | jq -r '.packages[] | select(.name == "poolguard") | .version')"
name="${POOLGUARD_IMAGE_NAME:-localhost/poolguard}"
tag="${POOLGUARD_IMAGE_TAG:-${version}}"
image="${name}:${tag}"
out_dir="${POOLGUARD_IMAGE_DIR:-${root}/target/image}"
mkdir -p "${out_dir}"
out="${out_dir}/poolguard-${tag}.oci.tar"

work="$(mktemp -d "${TMPDIR:-/tmp}/poolguard-image.XXXXXX")"
b=(buildah --root "${work}/storage" --runroot "${work}/run" --storage-driver vfs)
cleanup() {
    "${b[@]}" rm -a >/dev/null 2>&1 || true
    "${b[@]}" rmi -a -f >/dev/null 2>&1 || true
    rm -rf "${work}"
}
trap cleanup EXIT

# --- 1-2. the binary, as the build stage makes it ------------------------------------------------
mapfile -t cargo_args < <(jq -r '.build.cargo_args[]' <<<"${plan}")
[[ " ${cargo_args[*]} " == *" --target ${target} "* ]] \
    || die "the Dockerfile's cargo build does not target ${target}: ${cargo_args[*]}"
log "cargo build ${cargo_args[*]}   (CC_${target//-/_}=musl-gcc)"
start=${SECONDS}
env "CC_${target//-/_}=musl-gcc" cargo build "${cargo_args[@]}" >&2
log "binary built in $((SECONDS - start))s"
target_dir="${CARGO_TARGET_DIR:-${root}/target}"
[[ "${target_dir}" == /* ]] || target_dir="${root}/${target_dir}"
mkdir -p "${work}/artifacts"
while IFS=$'\t' read -r artifact src strip_it; do
    src="${src#target/}"
    cp "${target_dir}/${src}" "${work}/artifacts/${artifact#/}"
    if [[ "${strip_it}" == true ]]; then
        strip "${work}/artifacts/${artifact#/}"
    fi
    log "artifact ${artifact}: $(stat -c %s "${work}/artifacts/${artifact#/}") bytes$([[ "${strip_it}" == true ]] && echo ', stripped')"
done < <(jq -r '.build.artifacts | to_entries[] | [.key, .value.src, (.value.strip | tostring)] | @tsv' <<<"${plan}")

# --- 3. the base --------------------------------------------------------------------------------
rootfs="${work}/rootfs"
mkdir -p "${rootfs}" "${work}/debs"
debs=(base-files netbase tzdata media-types ca-certificates)
log "base: Debian packages ${debs[*]}"
(cd "${work}/debs" && apt-get download -q "${debs[@]}" >/dev/null 2>"${work}/apt.err") \
    || die "apt-get download ${debs[*]} failed: $(tail -n1 "${work}/apt.err") (run apt-get update first)"
for d in base-files netbase tzdata media-types; do
    dpkg-deb -x "$(ls "${work}/debs/${d}"_*.deb)" "${rootfs}"
done
# ca-certificates: only the bundle update-ca-certificates would make from the Mozilla set.
dpkg-deb -x "$(ls "${work}/debs/ca-certificates"_*.deb)" "${work}/ca"
mkdir -p "${rootfs}/etc/ssl/certs"
find "${work}/ca/usr/share/ca-certificates/mozilla" -name '*.crt' | LC_ALL=C sort | xargs cat \
    >"${rootfs}/etc/ssl/certs/ca-certificates.crt"
[[ -s "${rootfs}/etc/ssl/certs/ca-certificates.crt" ]] || die "the CA bundle is empty"
# Users and groups of the distroless base: root, nobody and nonroot (65532).
cat >"${rootfs}/etc/passwd" <<'EOF'
root:x:0:0:root:/root:/sbin/nologin
nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin
nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin
EOF
cat >"${rootfs}/etc/group" <<'EOF'
root:x:0:
nobody:x:65534:
tty:x:5:
staff:x:50:
nonroot:x:65532:
EOF
cat >"${rootfs}/etc/nsswitch.conf" <<'EOF'
passwd:         files
group:          files
shadow:         files
hosts:          files dns
networks:       files
protocols:      files
services:       files
ethers:         files
rpc:            files
EOF
rm -f "${rootfs}/etc/os-release"
cat >"${rootfs}/etc/os-release" <<EOF
PRETTY_NAME="poolguard base (distroless static nonroot layout, Debian packages)"
NAME="Debian GNU/Linux"
ID=debian
VERSION_ID="$(cut -d. -f1 "${rootfs}/etc/debian_version")"
EOF
install -d -m 0700 "${rootfs}/root"
install -d -m 0755 "${rootfs}/home"
install -d -m 0700 -o 65532 -g 65532 "${rootfs}/home/nonroot"
install -d -m 1777 "${rootfs}/tmp"
chown -R 0:0 "${rootfs}"
chown 65532:65532 "${rootfs}/home/nonroot"
chmod 1777 "${rootfs}/tmp"
base_env=("PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
    "SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt")
base_user=65532
base_workdir=/home/nonroot

# --- 4. the runtime stage ------------------------------------------------------------------------
while IFS=$'\t' read -r from src dest chown chmod; do
    [[ "${chown}" == - ]] || die "COPY --chown is not supported yet by the local build"
    if [[ "${from}" == - ]]; then
        source_path="${root}/${src}"
    else
        source_path="${work}/artifacts/${src#/}"
    fi
    [[ -e "${source_path}" ]] || die "COPY source ${src} not found"
    if [[ -d "${source_path}" ]]; then
        mkdir -p "${rootfs}${dest}"
        cp -a "${source_path}/." "${rootfs}${dest}"
        chown -R 0:0 "${rootfs}${dest}"
    else
        [[ "${dest}" == */ ]] && dest="${dest}$(basename "${src}")"
        mkdir -p "$(dirname "${rootfs}${dest}")"
        cp -a "${source_path}" "${rootfs}${dest}"
        chown 0:0 "${rootfs}${dest}"
    fi
    [[ "${chmod}" == - ]] || chmod -R "${chmod}" "${rootfs}${dest}"
    log "COPY ${from:+--from=${from} }${src} ${dest}"
done < <(jq -r '.runtime.copies[] | [(.from // "-"), .src, .dest, (.chown // "-"), (.chmod // "-")] | @tsv' <<<"${plan}")

c="$("${b[@]}" from scratch)"
mnt="$("${b[@]}" mount "${c}")"
cp -a "${rootfs}/." "${mnt}/"
"${b[@]}" umount "${c}" >/dev/null
config=(--os linux --arch amd64)
for e in "${base_env[@]}"; do config+=(--env "${e}"); done
while IFS= read -r e; do config+=(--env "${e}"); done < <(jq -r '.runtime.env | to_entries[] | "\(.key)=\(.value)"' <<<"${plan}")
config+=(--user "$(jq -r --arg d "${base_user}" '.runtime.user // $d' <<<"${plan}")")
config+=(--workingdir "$(jq -r --arg d "${base_workdir}" '.runtime.workdir // $d' <<<"${plan}")")
while IFS= read -r p; do config+=(--port "${p}"); done < <(jq -r '.runtime.expose[]' <<<"${plan}")
while IFS= read -r l; do config+=(--label "${l}"); done < <(jq -r '.runtime.labels | to_entries[] | "\(.key)=\(.value)"' <<<"${plan}")
config+=(--entrypoint "$(jq -c '.runtime.entrypoint' <<<"${plan}")" --cmd "$(jq -r '.runtime.cmd | @sh' <<<"${plan}" | tr -d "'")")
"${b[@]}" config "${config[@]}" "${c}"
# The CMD again as JSON (buildah config --cmd splits a string on spaces; the values have none,
# check.sh verifies the result).
"${b[@]}" commit --quiet --format oci --timestamp 0 --rm "${c}" "${image}" >/dev/null
rm -f "${out}.tmp"
"${b[@]}" push --quiet "${image}" "oci-archive:${out}.tmp:${image}"
mv -f "${out}.tmp" "${out}"

# --- 5. check and report ---------------------------------------------------------------------------
"${here}/check.sh" "${out}" Dockerfile >&2 || die "the image does not match the Dockerfile (see above)"
log "image ${image}: $("${here}/check.sh" --summary "${out}")"
printf '%s\n' "${out}"
