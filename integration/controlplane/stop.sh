#!/usr/bin/env bash
# Stop a control plane started by start.sh:
#
#   integration/controlplane/stop.sh STATE_DIR [--purge]
#
# Sends SIGTERM to every process listed in STATE_DIR/pids (newest first),
# waits up to 15s, then SIGKILLs what is left. A pid is only signalled while
# it still runs the component recorded for it, so a recycled pid is never hit.
# --purge also deletes STATE_DIR (etcd data, certificates, logs).
set -euo pipefail

log() { printf '[controlplane] %s\n' "$*" >&2; }

[[ $# -ge 1 ]] || { log "usage: $0 STATE_DIR [--purge]"; exit 2; }
state="$1"
purge=0
[[ "${2:-}" == "--purge" ]] && purge=1

# Does pid still run the named component? (/proc/PID/comm is cut at 15 chars.)
# A zombie (exited, not yet reaped) counts as stopped.
runs() { # pid name
    local comm stat
    comm="$(cat "/proc/$1/comm" 2>/dev/null)" || return 1
    [[ "${comm}" == "${2:0:15}" ]] || return 1
    stat="$(cat "/proc/$1/stat" 2>/dev/null)" || return 1
    stat="${stat##*) }"
    [[ "${stat:0:1}" != Z ]]
}

pids=()
names=()
if [[ -f "${state}/pids" ]]; then
    while read -r pid name; do
        [[ -n "${pid}" ]] || continue
        pids=("${pid}" "${pids[@]}")
        names=("${name}" "${names[@]}")
    done < "${state}/pids"
fi

for i in "${!pids[@]}"; do
    if runs "${pids[i]}" "${names[i]}"; then
        log "stopping ${names[i]} (pid ${pids[i]})"
        kill -TERM "${pids[i]}" 2>/dev/null || true
    fi
done

deadline=$((SECONDS + 15))
for i in "${!pids[@]}"; do
    while runs "${pids[i]}" "${names[i]}"; do
        if ((SECONDS >= deadline)); then
            log "killing ${names[i]} (pid ${pids[i]})"
            kill -KILL "${pids[i]}" 2>/dev/null || true
            sleep 0.2
            break
        fi
        sleep 0.2
    done
done

[[ -f "${state}/pids" ]] && : > "${state}/pids"
if ((purge)); then
    rm -rf -- "${state}"
fi
