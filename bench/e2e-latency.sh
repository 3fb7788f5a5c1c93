#!/usr/bin/env bash
# End-to-end pod CREATE latency through a real kube-apiserver, with and without poolguard:
#
#   bench/e2e-latency.sh                        # N=500 pods per side, ~35 s when nothing needs building
#   N=200 SANITY_BLOCKS=0 bench/e2e-latency.sh  # quicker look, no sanity phase
#   POOLGUARD_BIN=path/to/poolguard bench/e2e-latency.sh
#
# 1. builds or reuses the control plane (integration/controlplane/build.sh; honours
#    KUBEBUILDER_ASSETS), helm (integration/helm/helm.sh, or HELM), poolguard (release; or
#    POOLGUARD_BIN) and the measuring client (bench/e2e-latency/, binary create_latency, release);
# 2. starts etcd + kube-apiserver on loopback (no controllers, no scheduler: pods stay unbound,
#    and the client makes the ServiceAccounts pod admission needs), then `poolguard serve`
#    against it, and registers the chart's webhook configurations as integration/e2e.sh does
#    (integration/e2e/webhooks.sh), with webhook.namespaceMatchLabels poolguard-bench=on: only
#    namespaces that also carry that label are sent to poolguard;
# 3. the client creates pods one at a time, alternating between a namespace that goes through
#    poolguard and one that does not (same pool label), then a sanity phase with the webhook
#    configurations deleted and registered in turn;
# 4. writes bench/results/e2e-latency.json and bench/results/e2e-latency.md (bench/e2e/report.py)
#    and prints the table. The < 1 ms added median target is reported, never asserted.
# Everything started is stopped on exit. Scratch (logs, certificates, control-plane state, the
# client's raw output) goes to bench/work/e2e/ and is kept for inspection.
#
# Environment (all optional):
#   N (500)              measured pods per side        WARMUP (50)        unmeasured pairs first
#   SANITY_BLOCKS (10)   0 skips the sanity phase      SANITY_PAIRS (50)  pairs per sanity block
#   PAUSE_MS (0)         idle time before each timed create (0: back to back)
#   CACHE_NAMESPACES (10000)  then create this many namespaces (annotated as `kubectl apply`
#                        leaves them) and report poolguard's memory with them in its watch
#                        cache, and a restart's start -> ready time; 0 skips this part
#   POOL (pool1)         pool label of both namespaces (the e2e config denies disallowed images there)
#   POOLGUARD_BIN        poolguard binary to measure (copied first); default: cargo build --release
#   CARGO_TARGET_DIR     as for cargo (default target/)
#   KUBEBUILDER_ASSETS, POOLGUARD_CP_CACHE   where the control-plane binaries come from
#   HELM                 helm binary that renders the webhook configurations (default: helm.sh's)
set -euo pipefail

log() { printf '[e2e-latency %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "error: $*"; exit 1; }

if [[ -n "${POOLGUARD_BIN:-}" ]]; then # relative to the caller's directory
    [[ -f "${POOLGUARD_BIN}" && -x "${POOLGUARD_BIN}" ]] || die "POOLGUARD_BIN=${POOLGUARD_BIN} is not an executable file"
    POOLGUARD_BIN="$(cd "$(dirname "${POOLGUARD_BIN}")" && pwd)/$(basename "${POOLGUARD_BIN}")"
fi
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "${root}"

n="${N:-500}"
warmup="${WARMUP:-50}"
sanity_blocks="${SANITY_BLOCKS:-10}"
sanity_pairs="${SANITY_PAIRS:-50}"
pause_ms="${PAUSE_MS:-0}"
pool="${POOL:-pool1}"
label=agentpool # namespaceLabel and nodeSelectorKey of the config below
config=integration/e2e/manifests/poolguard-config.yaml
target_dir="${CARGO_TARGET_DIR:-${root}/target}"
[[ "${target_dir}" == /* ]] || target_dir="${root}/${target_dir}"
export CARGO_TARGET_DIR="${target_dir}"
work="${root}/bench/work/e2e"
results="${root}/bench/results"
for cmd in curl ss python3 flock; do
    command -v "${cmd}" >/dev/null 2>&1 || die "${cmd} is required"
done
mkdir -p "${work}" "${results}"

# One run at a time: the work directory holds the control plane's state.
exec 9>"${work}/.lock"
flock -n 9 || die "another bench/e2e-latency.sh is running (lock ${work}/.lock)"
rm -f "${work}/poolguard.log" "${work}/client.json" "${work}/webhooks.yaml"

cp_state="${work}/controlplane"
pg_pid=
teardown() {
    local rc=$?
    set +e
    trap - EXIT INT TERM
    if ((rc != 0)); then
        [[ -f "${work}/poolguard.log" ]] && { log "tail of ${work}/poolguard.log:"; tail -n 30 "${work}/poolguard.log" >&2; }
        [[ -f "${cp_state}/logs/kube-apiserver.log" ]] &&
            { log "tail of ${cp_state}/logs/kube-apiserver.log:"; tail -n 20 "${cp_state}/logs/kube-apiserver.log" >&2; }
    fi
    if [[ -n "${pg_pid}" ]] && [[ "$(cat "/proc/${pg_pid}/comm" 2>/dev/null)" == poolguard ]]; then
        kill -TERM "${pg_pid}" 2>/dev/null
        wait "${pg_pid}" 2>/dev/null
    fi
    [[ -f "${cp_state}/pids" ]] && integration/controlplane/stop.sh "${cp_state}"
    ((rc == 0)) || log "FAILED (exit ${rc}); logs in ${work}"
    exit "${rc}"
}
trap teardown EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }
loadavg() { cut -d' ' -f1-3 /proc/loadavg; }

# shellcheck source=integration/controlplane/free-port.sh
source integration/controlplane/free-port.sh

# --- 1. build ------------------------------------------------------------------------------
t_start="$(now)"
log "control plane (integration/controlplane/build.sh)"
cp_bin="$(integration/controlplane/build.sh | tail -n1)"
k8s_version="$("${cp_bin}/kube-apiserver" --version)"
log "${k8s_version}"
HELM="${HELM:-$(bash integration/helm/helm.sh | tail -n1)}"
export HELM

if [[ -n "${POOLGUARD_BIN:-}" ]]; then
    pg_src="${POOLGUARD_BIN}"
    pg_build="binary from POOLGUARD_BIN"
else
    log "poolguard (cargo build --release --locked --bin poolguard)"
    nice cargo build --release --locked --bin poolguard
    pg_src="${target_dir}/release/poolguard"
    pg_build="release build"
fi
log "measuring client (cargo build --release --locked -p poolguard-e2e-latency --bin create_latency)"
nice cargo build --release --locked -p poolguard-e2e-latency --bin create_latency
# Copies: the originals may be rebuilt while this runs.
cp -f "${pg_src}" "${work}/poolguard"
cp -f "${target_dir}/release/create_latency" "${work}/create_latency"
poolguard="${work}/poolguard"
"${poolguard}" serve --help >/dev/null 2>&1 || die "${pg_src} has no 'serve' command"
pg_version="$("${poolguard}" --version)"
log "${pg_version} (from ${pg_src}); build step $(since "${t_start}")s"

# --- 2. control plane, poolguard, webhooks --------------------------------------------------
t_setup="$(now)"
if [[ -d "${cp_state}" ]]; then
    [[ -f "${cp_state}/pids" ]] && integration/controlplane/stop.sh "${cp_state}"
    rm -rf -- "${cp_state}"
fi
POOLGUARD_CP_BIN="${cp_bin}" integration/controlplane/start.sh "${cp_state}" >/dev/null
export KUBECONFIG="${cp_state}/kubeconfig"
kubectl() { "${cp_bin}/kubectl" --request-timeout=10s "$@"; }

rm -rf -- "${work}/certs"
"${poolguard}" certs --out-dir "${work}/certs" --ip 127.0.0.1 --dns-name localhost >/dev/null
pg_port="" metrics_port="" # set by pick_port (free-port.sh)
pick_port pg_port
pick_port metrics_port
# Started twice: here, and again in step 5 to time a restart with many namespaces.
start_poolguard() {
    NO_COLOR=1 "${poolguard}" serve \
        --addr "127.0.0.1:${pg_port}" \
        --metrics-addr "127.0.0.1:${metrics_port}" \
        --tls-cert-file "${work}/certs/tls.crt" \
        --tls-key-file "${work}/certs/tls.key" \
        --config "${config}" \
        --policies-dir policies \
        </dev/null >>"${work}/poolguard.log" 2>&1 &
    pg_pid=$!
}
await_ready() {
    local deadline=$((SECONDS + 60))
    until curl -fsS -o /dev/null --max-time 2 "http://127.0.0.1:${metrics_port}/readyz" 2>/dev/null; do
        kill -0 "${pg_pid}" 2>/dev/null || die "poolguard exited during start-up"
        ((SECONDS < deadline)) || die "poolguard not ready after 60s"
        sleep 0.005
    done
}
start_poolguard
await_ready
log "poolguard ready on https://127.0.0.1:${pg_port} (pid ${pg_pid})"

# The chart's configurations, as in integration/e2e.sh, but only namespaces that also carry
# poolguard-bench=on are sent to poolguard: the client labels one of its two namespaces so.
integration/e2e/webhooks.sh "https://127.0.0.1:${pg_port}" "${work}/certs/ca.crt" "${label}" \
    --set-string webhook.namespaceMatchLabels.poolguard-bench=on > "${work}/webhooks.yaml" ||
    die "rendering the webhook configurations from charts/poolguard failed"
kubectl apply -f "${work}/webhooks.yaml" >/dev/null
log "webhooks registered; setup $(since "${t_setup}")s"

# --- 3. measure ---------------------------------------------------------------------------
load_start="$(loadavg)"
t_measure="$(now)"
"${work}/create_latency" --n "${n}" --warmup "${warmup}" \
    --sanity-blocks "${sanity_blocks}" --sanity-pairs "${sanity_pairs}" --pause-ms "${pause_ms}" \
    --pool "${pool}" --label "${label}" --bench-label poolguard-bench --webhook-configs poolguard-mutating,poolguard-validating \
    --poolguard-metrics "127.0.0.1:${metrics_port}" --json "${work}/client.json"
measure_s="$(since "${t_measure}")"
load_end="$(loadavg)"
log "measured in ${measure_s}s (load ${load_start} -> ${load_end})"

# --- 4. report ------------------------------------------------------------------------------
python3 bench/e2e/report.py "${work}/client.json" "${results}/e2e-latency.json" "${results}/e2e-latency.md" \
    --meta kubernetes="${k8s_version}" poolguard="${pg_version}" poolguard_build="${pg_build}" \
    loadavg_start="${load_start}" loadavg_end="${load_end}" nproc="$(nproc)" \
    date="$(date -u +%Y-%m-%dT%H:%M:%SZ)" measure_seconds="${measure_s}"

# --- 5. the watch cache with many namespaces --------------------------------------------------
cache_ns="${CACHE_NAMESPACES:-10000}"
status_kib() { awk -v k="$2:" '$1 == k { print $2 }' "/proc/$1/status"; }
cache_size() {
    curl -fsS --max-time 2 "http://127.0.0.1:${metrics_port}/metrics" 2>/dev/null |
        awk '$1 == "poolguard_namespace_cache_size" { print int($2) }'
}
if ((cache_ns > 0)); then
    log "creating ${cache_ns} namespaces (half with a pool, each with a last-applied annotation)"
    t_ns="$(now)"
    python3 - "${cache_ns}" "${work}/namespaces" <<'PY'
import json, os, sys
count, out = int(sys.argv[1]), sys.argv[2]
os.makedirs(out, exist_ok=True)
parts = 4
for p in range(parts):
    items = []
    for i in range(p, count, parts):
        labels = {"team": f"team-{i % 97}"}
        if i % 2 == 0:
            labels["agentpool"] = f"pool-{i % 50}"
        meta = {"name": f"cache-{i:05d}", "labels": labels}
        applied = {"apiVersion": "v1", "kind": "Namespace", "metadata": dict(meta)}
        meta["annotations"] = {"kubectl.kubernetes.io/last-applied-configuration": json.dumps(applied)}
        items.append({"apiVersion": "v1", "kind": "Namespace", "metadata": meta})
    with open(os.path.join(out, f"part-{p}.json"), "w") as f:
        json.dump({"apiVersion": "v1", "kind": "List", "items": items}, f)
PY
    pids=()
    for f in "${work}"/namespaces/part-*.json; do
        "${cp_bin}/kubectl" create -f "${f}" >/dev/null &
        pids+=($!)
    done
    for p in "${pids[@]}"; do wait "${p}" || die "creating namespaces failed"; done
    log "namespaces created in $(since "${t_ns}")s"
    want=$((cache_ns + 2))
    deadline=$((SECONDS + 120))
    until (($(cache_size || echo 0) >= want)); do
        ((SECONDS < deadline)) || die "poolguard's cache did not reach ${want} namespaces"
        sleep 0.5
    done
    running_rss="$(status_kib "${pg_pid}" VmRSS)"
    running_hwm="$(status_kib "${pg_pid}" VmHWM)"
    log "poolguard with $(cache_size) namespaces cached (watched as they came): RSS ${running_rss} KiB, peak ${running_hwm} KiB"
    kill -TERM "${pg_pid}"; wait "${pg_pid}" 2>/dev/null || true
    t0=$(date +%s%N)
    start_poolguard
    await_ready
    ready_ms=$((($(date +%s%N) - t0) / 1000000))
    restart_rss="$(status_kib "${pg_pid}" VmRSS)"
    restart_hwm="$(status_kib "${pg_pid}" VmHWM)"
    log "restarted: ready in ${ready_ms} ms with $(cache_size) namespaces listed, RSS ${restart_rss} KiB, peak ${restart_hwm} KiB"
    python3 - "${results}/watch-cache.json" "${results}/watch-cache.md" <<PY
import json, sys
d = {"namespaces_created": ${cache_ns}, "cached": $(cache_size), "running_rss_kib": ${running_rss},
     "running_peak_kib": ${running_hwm}, "restart_ready_ms": ${ready_ms}, "restart_rss_kib": ${restart_rss},
     "restart_peak_kib": ${restart_hwm}, "kubernetes": "${k8s_version}", "date": "$(date -u +%Y-%m-%dT%H:%M:%SZ)"}
json.dump(d, open(sys.argv[1], "w"), indent=2)
mib = lambda k: f"{d[k] / 1024:.1f}"
open(sys.argv[2], "w").write(
    f"## poolguard's namespace watch cache with {d['cached']:,} namespaces — {d['date']}\n\n"
    f"{d['kubernetes']} on 127.0.0.1; {d['namespaces_created']:,} namespaces created with \`kubectl create\` "
    "(half labelled with a pool, each carrying a \`kubectl.kubernetes.io/last-applied-configuration\` annotation), "
    "read by \`poolguard serve\` through its metadata watch (no --namespaces-file).\n\n"
    "| | RSS, MiB | peak RSS (VmHWM), MiB | start → ready, ms |\n|---|---:|---:|---:|\n"
    f"| running while they were created (watch events) | {mib('running_rss_kib')} | {mib('running_peak_kib')} | |\n"
    f"| restarted (initial list of all of them) | {mib('restart_rss_kib')} | {mib('restart_peak_kib')} | {d['restart_ready_ms']:,} |\n"
)
print(open(sys.argv[2]).read())
PY
fi
log "total $(since "${t_start}")s"
