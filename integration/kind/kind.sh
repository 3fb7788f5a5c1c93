#!/usr/bin/env bash
# kind itself (versions.env KIND_VERSION), built from its Go module sigs.k8s.io/kind into
# ${POOLGUARD_KIND_CACHE:-$HOME/.cache/poolguard/kind}/kind-<version>/kind unless a kind of that
# version is already there (or is on PATH). Last stdout line: the kind binary.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=versions.env
source "${here}/versions.env"
log() { printf '[kind] %s\n' "$*" >&2; }

if command -v kind >/dev/null 2>&1 && [[ "$(kind version 2>/dev/null)" == "kind ${KIND_VERSION} "* ]]; then
    command -v kind
    exit 0
fi
: "${HOME:?HOME must be set (or set POOLGUARD_KIND_CACHE)}"
dir="${POOLGUARD_KIND_CACHE:-${HOME}/.cache/poolguard/kind}/kind-${KIND_VERSION}"
if [[ ! -x "${dir}/kind" || "$("${dir}/kind" version 2>/dev/null)" != "kind ${KIND_VERSION} "* ]]; then
    command -v go >/dev/null 2>&1 || { log "error: go is needed to build kind"; exit 1; }
    log "building kind ${KIND_VERSION} (sigs.k8s.io/kind)"
    mkdir -p "${dir}"
    GOBIN="${dir}/.build" CGO_ENABLED=0 GOWORK=off nice -n "${POOLGUARD_CP_NICE:-10}" \
        go install -trimpath -buildvcs=false -ldflags "-s -w" "sigs.k8s.io/kind@${KIND_VERSION}"
    mv -f "${dir}/.build/kind" "${dir}/kind"
    rmdir "${dir}/.build"
fi
printf '%s\n' "${dir}/kind"
