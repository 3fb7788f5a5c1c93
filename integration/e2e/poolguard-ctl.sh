#!/usr/bin/env bash
# Start or stop the poolguard server of an integration/e2e.sh run:
#
#   integration/e2e/poolguard-ctl.sh start WORK_DIR   # returns once /readyz answers 200
#   integration/e2e/poolguard-ctl.sh stop WORK_DIR    # returns once the process is gone
#
# WORK_DIR/poolguard.env (written by e2e.sh) sets PG_BIN, PG_ADDR, PG_METRICS_ADDR, PG_CERT_DIR,
# PG_CONFIG, PG_POLICIES_DIR, PG_KUBECONFIG. The pid goes to WORK_DIR/poolguard.pid, output is
# appended to WORK_DIR/poolguard.log. e2e.sh uses this script itself and hands it to the
# fail_closed test as POOLGUARD_E2E_STOP_CMD / POOLGUARD_E2E_START_CMD.
set -euo pipefail

log() { printf '[poolguard-ctl] %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

[[ $# -eq 2 ]] || die "usage: $0 start|stop WORK_DIR"
action="$1"
work="$2"
[[ -f "${work}/poolguard.env" ]] || die "${work}/poolguard.env is missing"
# shellcheck source=/dev/null
source "${work}/poolguard.env"
pid_file="${work}/poolguard.pid"
log_file="${work}/poolguard.log"

# Is the recorded pid still our poolguard (not a recycled pid, not a zombie)?
running() {
    local pid comm stat
    [[ -s "${pid_file}" ]] || return 1
    pid="$(cat "${pid_file}")"
    comm="$(cat "/proc/${pid}/comm" 2>/dev/null)" || return 1
    [[ "${comm}" == poolguard ]] || return 1
    stat="$(cat "/proc/${pid}/stat" 2>/dev/null)" || return 1
    stat="${stat##*) }"
    [[ "${stat:0:1}" != Z ]]
}

case "${action}" in
start)
    running && die "poolguard is already running (pid $(cat "${pid_file}"))"
    printf '=== start %s\n' "$(date -u +%FT%TZ)" >> "${log_file}"
    # No background audit here: tests/audit.rs runs replicas of its own for it.
    NO_COLOR=1 KUBECONFIG="${PG_KUBECONFIG}" "${PG_BIN}" serve \
        --addr "${PG_ADDR}" \
        --tls-cert-file "${PG_CERT_DIR}/tls.crt" \
        --tls-key-file "${PG_CERT_DIR}/tls.key" \
        --config "${PG_CONFIG}" \
        --policies-dir "${PG_POLICIES_DIR}" \
        --metrics-addr "${PG_METRICS_ADDR}" \
        --audit-interval 0 \
        ${PG_CLIENT_CA:+--client-ca-file "${PG_CLIENT_CA}" --client-name kube-apiserver-webhook-client} \
        </dev/null >>"${log_file}" 2>&1 &
    pid=$!
    printf '%s\n' "${pid}" > "${pid_file}"
    log "started poolguard (pid ${pid}) on https://${PG_ADDR}, metrics http://${PG_METRICS_ADDR}"
    deadline=$((SECONDS + ${PG_READY_TIMEOUT:-60}))
    until curl -fsS -o /dev/null --max-time 2 "http://${PG_METRICS_ADDR}/readyz" 2>/dev/null; do
        if ! running; then
            tail -n 30 "${log_file}" >&2
            die "poolguard exited during start-up"
        fi
        if ((SECONDS >= deadline)); then
            tail -n 30 "${log_file}" >&2
            die "poolguard not ready after ${PG_READY_TIMEOUT:-60}s (http://${PG_METRICS_ADDR}/readyz)"
        fi
        sleep 0.2
    done
    log "poolguard ready"
    ;;
stop)
    if ! running; then
        log "poolguard is not running"
        exit 0
    fi
    pid="$(cat "${pid_file}")"
    log "stopping poolguard (pid ${pid})"
    kill -TERM "${pid}" 2>/dev/null || true
    deadline=$((SECONDS + 15))
    while running; do
        if ((SECONDS >= deadline)); then
            log "poolguard ignored SIGTERM for 15s; killing it"
            kill -KILL "${pid}" 2>/dev/null || true
            sleep 0.2
            break
        fi
        sleep 0.1
    done
    # The port must be closed before callers rely on poolguard being down.
    port="${PG_ADDR##*:}"
    deadline=$((SECONDS + 10))
    while (exec 3<>"/dev/tcp/127.0.0.1/${port}") 2>/dev/null; do
        ((SECONDS < deadline)) || die "port ${port} still accepts connections after poolguard stopped"
        sleep 0.1
    done
    : > "${pid_file}"
    log "poolguard stopped"
    ;;
*)
    die "usage: $0 start|stop WORK_DIR"
    ;;
esac
