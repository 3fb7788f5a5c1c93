#!/usr/bin/env bash
# Restart one component of a control plane started by start.sh, with exactly the command line,
# environment and working directory it was started with (STATE_DIR/cmd/):
#
#   integration/controlplane/restart.sh STATE_DIR COMPONENT
#
# COMPONENT: etcd, kube-apiserver, kube-controller-manager or kube-scheduler. A running instance
# gets SIGTERM (SIGKILL after 90s) and is waited for; a stopped one is just started. (kube-apiserver
# stops listening at once but exits only when its open watches have ended or its shutdown timeout,
# --request-timeout, 60s by default, has passed.) Output is
# appended to STATE_DIR/logs/COMPONENT.log (after a "=== restart" line), the component's line in
# STATE_DIR/pids is replaced by the new pid (stop.sh stops it as before). Returns once the
# component is ready: etcd answers its health check, kube-apiserver /readyz, the others have run
# for 2s. Exit status 1 when it is not ready in time (or exits).
set -euo pipefail

log() { printf '[controlplane] %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

[[ $# -eq 2 ]] || { log "usage: $0 STATE_DIR COMPONENT"; exit 2; }
state="$(cd "$1" && pwd)"
name="$2"
cmd="${state}/cmd/${name}"
[[ -s "${cmd}" && -f "${cmd}.env" && -f "${cmd}.dir" ]] ||
    die "${cmd}{,.env,.dir} missing: was ${name} started by this start.sh?"
logfile="${state}/logs/${name}.log"

# Does pid still run the named component? (as stop.sh: comm is cut at 15 chars; a zombie counts
# as stopped)
runs() { # pid
    local comm stat
    comm="$(cat "/proc/$1/comm" 2>/dev/null)" || return 1
    [[ "${comm}" == "${name:0:15}" ]] || return 1
    stat="$(cat "/proc/$1/stat" 2>/dev/null)" || return 1
    stat="${stat##*) }"
    [[ "${stat:0:1}" != Z ]]
}

old="$(awk -v n="${name}" '$2 == n { print $1 }' "${state}/pids")"
if [[ -n "${old}" ]] && runs "${old}"; then
    log "stopping ${name} (pid ${old})"
    stop_start=${EPOCHREALTIME}
    kill -TERM "${old}" 2>/dev/null || true
    deadline=$((SECONDS + 90))
    while runs "${old}"; do
        if ((SECONDS >= deadline)); then
            log "${name} ignored SIGTERM for 90s; killing it"
            kill -KILL "${old}" 2>/dev/null || true
        fi
        sleep 0.1
    done
    log "${name} exited $(awk -v a="${stop_start}" -v b="${EPOCHREALTIME}" 'BEGIN { printf "%.1f", b - a }')s after SIGTERM"
fi

mapfile -d '' -t argv < "${cmd}"
mapfile -d '' -t environment < "${cmd}.env"
dir="$(cat "${cmd}.dir")"
printf '=== restart %s\n' "$(date -u +%FT%T.%NZ)" >> "${logfile}"
(cd "${dir}" && exec env -i "${environment[@]}" "${argv[@]}") </dev/null >>"${logfile}" 2>&1 &
pid=$!
# The pids line is replaced in place: stop.sh stops the components newest first by line order.
awk -v n="${name}" -v p="${pid}" '$2 == n { $1 = p } { print }' "${state}/pids" > "${state}/pids.new"
mv "${state}/pids.new" "${state}/pids"
grep -q " ${name}\$" "${state}/pids" || printf '%s %s\n' "${pid}" "${name}" >> "${state}/pids"
log "started ${name} (pid ${pid})"

arg() { # --flag: its value in argv
    local a
    for a in "${argv[@]}"; do
        [[ "${a}" == "$1="* ]] && { printf '%s\n' "${a#*=}"; return; }
    done
}
ready() {
    case "${name}" in
    etcd)
        local url
        url="$(arg --listen-client-urls)"
        curl -fsS --max-time 2 "${url%%,*}/health" 2>/dev/null | grep -q '"health":"true"'
        ;;
    kube-apiserver)
        # shellcheck source=/dev/null
        (source "${state}/env" && "${POOLGUARD_CP_BIN}/kubectl" --request-timeout=2s get --raw /readyz) >/dev/null 2>&1
        ;;
    *)
        sleep 2
        ;;
    esac
}
# Our own child (not reaped before this script ends, so the pid cannot be reused): running
# unless a zombie. Its comm becomes the component's only once the subshell's exec has happened.
alive() {
    local stat
    stat="$(cat "/proc/${pid}/stat" 2>/dev/null)" || return 1
    stat="${stat##*) }"
    [[ "${stat:0:1}" != Z ]]
}
deadline=$((SECONDS + 180))
until ready; do
    alive || { tail -n 30 "${logfile}" >&2; die "${name} exited"; }
    ((SECONDS < deadline)) || { tail -n 30 "${logfile}" >&2; die "${name} not ready after 180s"; }
    sleep 0.2
done
alive || { tail -n 30 "${logfile}" >&2; die "${name} exited"; }
log "${name} ready (pid ${pid})"
