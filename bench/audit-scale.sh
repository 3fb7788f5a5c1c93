#!/usr/bin/env bash
# The audit at scale: 10,000 pods over 1,000 namespaces, audited by poolguard against a real
# kube-apiserver, once by `poolguard audit` and once by `poolguard serve`'s background audit
# writing every report. A benchmark: it prints durations and memory, and asserts none of them.
#
#   bench/audit-scale.sh                                   # ~5 min when nothing needs building
#   NAMESPACES=100 bench/audit-scale.sh                    # quick look: 1,000 pods
#   POOLGUARD_BIN=path/to/poolguard bench/audit-scale.sh   # measure that binary
#
# 1. builds or reuses the control plane (integration/controlplane/build.sh; honours
#    KUBEBUILDER_ASSETS), helm (integration/helm/helm.sh, or HELM), poolguard (release, or
#    POOLGUARD_BIN) and the object creator (integration/e2e/src/bin/audit_objects.rs, release);
# 2. starts etcd + kube-apiserver on loopback (no controllers, no scheduler: pods stay Pending
#    unless created bound), registers fake nodes for two pools (pool1: 2, gpu: 1), installs the
#    report CRDs rendered from the chart, and creates the namespaces (labelled with a pool, 20 %
#    without one, all with the bench label) and pods: most with their pool's nodeSelector, some
#    without, some with an image outside the allowed repositories, some bound to a node of their
#    pool, of the other pool or of no node (the mix is in audit_objects.rs). No webhook is
#    registered, so they are stored as created;
# 3. (a) `poolguard audit --kubeconfig ... --output json`: wall time, CPU and peak RSS
#    (/usr/bin/time -v when present, else VmHWM polled from /proc), and the results counted;
#    (b) `poolguard serve --audit-interval ...`: RSS once it is ready and has the namespaces in
#    its cache (the audit's Lease is held by a placeholder until then, so no pass has started),
#    then PASSES passes, each with its duration (its "audit pass done" log line), results,
#    reports written, and poolguard's RSS and peak RSS (VmHWM) right after it; then SIGTERM;
# 4. checks that every pod got its placement result as planned (counts, not times) and that the
#    reports in the cluster add up to the results, prints a summary and writes
#    bench/results/audit-scale.{json,md}.
# Everything started is stopped on exit, also on failure or Ctrl-C. Scratch (logs, the audit's
# JSON output, certificates, control-plane state) goes to bench/work/audit-scale/ and is kept.
#
# Environment (all optional):
#   NAMESPACES (1000)          namespaces created (each with a report)
#   PODS_PER_NAMESPACE (10)    pods in each
#   CONCURRENCY (32)           create requests in flight
#   PAGE_SIZE (500)            serve's --audit-page-size (poolguard audit always lists 500)
#   PASSES (2)                 background passes measured
#   AUDIT_INTERVAL (5s)        serve's --audit-interval (time between the end of a pass and the
#                              start of the next)
#   POOLGUARD_BIN              poolguard binary to measure (copied first); default: cargo build --release
#   CARGO_TARGET_DIR           as for cargo (default target/)
#   KUBEBUILDER_ASSETS, POOLGUARD_CP_CACHE   where the control-plane binaries come from
#   HELM                       helm binary that renders the report CRDs (default: helm.sh's)
set -euo pipefail

log() { printf '[audit-scale %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "error: $*"; exit 1; }

if [[ -n "${POOLGUARD_BIN:-}" ]]; then # relative to the caller's directory
    [[ -f "${POOLGUARD_BIN}" && -x "${POOLGUARD_BIN}" ]] || die "POOLGUARD_BIN=${POOLGUARD_BIN} is not an executable file"
    POOLGUARD_BIN="$(cd "$(dirname "${POOLGUARD_BIN}")" && pwd)/$(basename "${POOLGUARD_BIN}")"
fi
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "${root}"

namespaces="${NAMESPACES:-1000}"
pods_per_ns="${PODS_PER_NAMESPACE:-10}"
concurrency="${CONCURRENCY:-32}"
page_size="${PAGE_SIZE:-500}"
passes="${PASSES:-2}"
interval="${AUDIT_INTERVAL:-5s}"
label=agentpool # namespaceLabel and nodeSelectorKey of the config below
pools=(pool1 gpu)
bench_label="poolguard-audit-scale=on"
lease_name="poolguard-audit"
lease_namespace=default
config=integration/e2e/manifests/poolguard-config.yaml
target_dir="${CARGO_TARGET_DIR:-${root}/target}"
[[ "${target_dir}" == /* ]] || target_dir="${root}/${target_dir}"
export CARGO_TARGET_DIR="${target_dir}"
work="${root}/bench/work/audit-scale"
results="${root}/bench/results"
for cmd in curl jq python3 flock openssl; do
    command -v "${cmd}" >/dev/null 2>&1 || die "${cmd} is required"
done
for n in "${namespaces}" "${pods_per_ns}" "${concurrency}" "${page_size}" "${passes}"; do
    [[ "${n}" =~ ^[1-9][0-9]*$ ]] || die "NAMESPACES, PODS_PER_NAMESPACE, CONCURRENCY, PAGE_SIZE and PASSES must be positive numbers"
done
mkdir -p "${work}" "${results}"

# One run at a time: the work directory holds the control plane's state.
exec 9>"${work}/.lock"
flock -n 9 || die "another bench/audit-scale.sh is running (lock ${work}/.lock)"
rm -f "${work}"/{poolguard-serve.log,audit.json,audit.stderr,audit.time,objects.json,passes.jsonl,reports.json}

cp_state="${work}/controlplane"
pg_pid=
audit_pid=
teardown() {
    local rc=$?
    set +e
    trap - EXIT INT TERM
    if ((rc != 0)); then
        [[ -s "${work}/audit.stderr" ]] && { log "tail of ${work}/audit.stderr:"; tail -n 20 "${work}/audit.stderr" >&2; }
        [[ -f "${work}/poolguard-serve.log" ]] && { log "tail of ${work}/poolguard-serve.log:"; tail -n 30 "${work}/poolguard-serve.log" >&2; }
        [[ -f "${cp_state}/logs/kube-apiserver.log" ]] &&
            { log "tail of ${cp_state}/logs/kube-apiserver.log:"; tail -n 20 "${cp_state}/logs/kube-apiserver.log" >&2; }
    fi
    for pid in "${audit_pid}" "${pg_pid}"; do
        if [[ -n "${pid}" ]] && kill -0 "${pid}" 2>/dev/null; then
            kill -TERM "${pid}" 2>/dev/null
            wait "${pid}" 2>/dev/null
        fi
    done
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
status_kib() { awk -v k="$2:" '$1 == k { print $2 }' "/proc/$1/status"; }
# utime + stime of a process, in seconds.
cpu_seconds() { awk -v hz="$(getconf CLK_TCK)" '{ sub(/^.*\) /, ""); printf "%.2f", ($12 + $13) / hz }' "/proc/$1/stat"; }

# shellcheck source=integration/controlplane/free-port.sh
source integration/controlplane/free-port.sh

# --- 1. build ------------------------------------------------------------------------------
t_start="$(now)"
log "control plane (integration/controlplane/build.sh)"
cp_bin="$(integration/controlplane/build.sh | tail -n1)"
k8s_version="$("${cp_bin}/kube-apiserver" --version)"
log "${k8s_version}"
HELM="${HELM:-$(bash integration/helm/helm.sh | tail -n1)}"
if [[ -n "${POOLGUARD_BIN:-}" ]]; then
    pg_src="${POOLGUARD_BIN}"
    pg_build="binary from POOLGUARD_BIN"
else
    log "poolguard (cargo build --release --locked --bin poolguard)"
    nice cargo build --release --locked --bin poolguard
    pg_src="${target_dir}/release/poolguard"
    pg_build="release build"
fi
log "object creator (cargo build --release --locked -p poolguard-e2e --bin audit_objects)"
nice cargo build --release --locked -p poolguard-e2e --bin audit_objects
# Copies: the originals may be rebuilt while this runs.
cp -f "${pg_src}" "${work}/poolguard"
cp -f "${target_dir}/release/audit_objects" "${work}/audit_objects"
poolguard="${work}/poolguard"
"${poolguard}" audit --help 2>/dev/null | grep -q -- --kubeconfig || die "${pg_src} has no 'audit --kubeconfig'"
pg_version="$("${poolguard}" --version)"
log "${pg_version} (from ${pg_src}); build step $(since "${t_start}")s"

# --- 2. control plane, nodes, CRDs, objects -------------------------------------------------
t_setup="$(now)"
if [[ -d "${cp_state}" ]]; then
    [[ -f "${cp_state}/pids" ]] && integration/controlplane/stop.sh "${cp_state}"
    rm -rf -- "${cp_state}"
fi
POOLGUARD_CP_BIN="${cp_bin}" integration/controlplane/start.sh "${cp_state}" >/dev/null
export KUBECONFIG="${cp_state}/kubeconfig"
kubectl() { "${cp_bin}/kubectl" --request-timeout=30s "$@"; }
apiserver_pid="$(awk '$2 == "kube-apiserver" { print $1 }' "${cp_state}/pids")"

for node in "${pools[0]}-node-1:${pools[0]}" "${pools[0]}-node-2:${pools[0]}" "${pools[1]}-node-1:${pools[1]}"; do
    KUBECTL="${cp_bin}/kubectl" integration/controlplane/fake-node.sh "${node%%:*}" "${label}" "${node##*:}"
done
"${HELM}" template poolguard charts/poolguard --show-only templates/report-crds.yaml > "${work}/report-crds.yaml" ||
    die "rendering the report CRDs from charts/poolguard failed"
kubectl apply -f "${work}/report-crds.yaml" >/dev/null
kubectl wait --for condition=established --timeout=60s crd/policyreports.wgpolicyk8s.io >/dev/null
log "control plane, 3 nodes and the report CRDs in $(since "${t_setup}")s"

total_pods=$((namespaces * pods_per_ns))
log "creating ${namespaces} namespaces and ${total_pods} pods (${concurrency} requests in flight)"
t_objects="$(now)"
"${work}/audit_objects" --namespaces "${namespaces}" --pods "${pods_per_ns}" --concurrency "${concurrency}" \
    --label "${label}" --pools "${pools[0]},${pools[1]}" --bench-label "${bench_label}" > "${work}/objects.json"
objects_s="$(since "${t_objects}")"
stored="$(kubectl get pods -A -l bench=audit-scale -o name | wc -l)"
((stored == total_pods)) || die "${stored} pods stored, ${total_pods} expected"
log "objects created in ${objects_s}s ($(jq -r '"namespaces \(.namespaces_seconds | floor) s, pods \(.pods_seconds | floor) s"' "${work}/objects.json")); ${stored} pods stored"
etcd_db_kib="$(du -sk "${cp_state}/etcd" | cut -f1)"
apiserver_rss_kib="$(status_kib "${apiserver_pid}" VmRSS)"

# Counts of a results array (poolguard audit --output json) by policy and result.
count_results() { jq -c 'group_by(.policy) | map({key: .[0].policy, value: (group_by(.result) | map({key: .[0].result, value: length}) | from_entries)}) | from_entries' "$1"; }

# --- 3a. poolguard audit, once ------------------------------------------------------------
log "poolguard audit --kubeconfig ... --namespace-selector ${bench_label} --output json"
oneshot=("${poolguard}" audit --kubeconfig "${KUBECONFIG}" --namespace-selector "${bench_label}"
    --config "${config}" --policies-dir policies --output json)
api_cpu0="$(cpu_seconds "${apiserver_pid}")"
t0="$(now)"
if [[ -x /usr/bin/time ]] && /usr/bin/time -v true >/dev/null 2>&1; then
    rss_source="/usr/bin/time -v"
    set +e
    /usr/bin/time -v -o "${work}/audit.time" "${oneshot[@]}" > "${work}/audit.json" 2> "${work}/audit.stderr" &
    audit_pid=$!
    wait "${audit_pid}"
    audit_rc=$?
    set -e
    audit_pid=
    oneshot_s="$(since "${t0}")"
    oneshot_peak_kib="$(awk -F': ' '/Maximum resident set size/ { print $2 }' "${work}/audit.time")"
    oneshot_cpu="$(awk -F': ' '/User time/ { u = $2 } /System time/ { s = $2 } END { printf "%.2f", u + s }' "${work}/audit.time")"
else
    rss_source="VmHWM polled every 20 ms (no /usr/bin/time)"
    "${oneshot[@]}" > "${work}/audit.json" 2> "${work}/audit.stderr" &
    audit_pid=$!
    oneshot_peak_kib=0 oneshot_cpu=0
    while kill -0 "${audit_pid}" 2>/dev/null; do
        hwm="$(status_kib "${audit_pid}" VmHWM 2>/dev/null || true)"
        cpu="$(cpu_seconds "${audit_pid}" 2>/dev/null || true)"
        [[ -n "${hwm}" ]] && ((hwm > oneshot_peak_kib)) && oneshot_peak_kib="${hwm}"
        [[ -n "${cpu}" ]] && oneshot_cpu="${cpu}"
        sleep 0.02
    done
    set +e
    wait "${audit_pid}"
    audit_rc=$?
    set -e
    audit_pid=
    oneshot_s="$(since "${t0}")"
fi
oneshot_api_cpu="$(awk -v a="${api_cpu0}" -v b="$(cpu_seconds "${apiserver_pid}")" 'BEGIN { printf "%.2f", b - a }')"
((audit_rc == 0 || audit_rc == 1)) || die "poolguard audit exited ${audit_rc}"
oneshot_counts="$(count_results "${work}/audit.json")"
oneshot_total="$(jq length "${work}/audit.json")"
log "one-shot: ${oneshot_s}s, peak RSS ${oneshot_peak_kib} KiB, CPU ${oneshot_cpu}s (kube-apiserver ${oneshot_api_cpu}s); ${oneshot_total} results: ${oneshot_counts}"

# Every pod must have its planned placement result.
expected_placement="$(jq -c '.expected_placement' "${work}/objects.json")"
got_placement="$(jq -c '.placement // {}' <<< "${oneshot_counts}")"
[[ "$(jq -S . <<< "${expected_placement}")" == "$(jq -S . <<< "${got_placement}")" ]] ||
    die "placement results ${got_placement}, planned ${expected_placement}"
foreign="$(jq '[.[] | select(.policy == "allowedrepositories" and .result == "fail")] | length' "${work}/audit.json")"
((foreign > 0)) || die "no allowedrepositories failure, though pods use an image outside the allowed repositories"

# --- 3b. poolguard serve, background audit writing the reports ----------------------------------
rm -rf -- "${work}/certs"
"${poolguard}" certs --out-dir "${work}/certs" --ip 127.0.0.1 --dns-name localhost >/dev/null
pg_port="" metrics_port="" # set by pick_port (free-port.sh)
pick_port pg_port
pick_port metrics_port
# The audit's Lease, held by a placeholder for a while: serve is measured idle first, with its
# namespace cache filled, and its first pass starts once the placeholder's lease has expired.
hold=20
kubectl create -f - >/dev/null <<EOF
apiVersion: coordination.k8s.io/v1
kind: Lease
metadata:
  name: ${lease_name}
  namespace: ${lease_namespace}
spec:
  holderIdentity: audit-scale-placeholder
  leaseDurationSeconds: ${hold}
  acquireTime: "$(date -u +%Y-%m-%dT%H:%M:%S.%6NZ)"
  renewTime: "$(date -u +%Y-%m-%dT%H:%M:%S.%6NZ)"
EOF
t_lease="$(now)"
NO_COLOR=1 "${poolguard}" serve \
    --addr "127.0.0.1:${pg_port}" \
    --metrics-addr "127.0.0.1:${metrics_port}" \
    --tls-cert-file "${work}/certs/tls.crt" \
    --tls-key-file "${work}/certs/tls.key" \
    --kubeconfig "${KUBECONFIG}" \
    --config "${config}" \
    --policies-dir policies \
    --log-format json \
    --audit-interval "${interval}" \
    --audit-namespace-selector "${bench_label}" \
    --audit-page-size "${page_size}" \
    --lease-name "${lease_name}" \
    --lease-namespace "${lease_namespace}" \
    --lease-identity audit-scale-serve \
    </dev/null >"${work}/poolguard-serve.log" 2>&1 &
pg_pid=$!
metric() { # name -> value of its first sample
    curl -fsS --max-time 5 "http://127.0.0.1:${metrics_port}/metrics" 2>/dev/null | awk -v n="$1" '$1 == n { print $2; exit }'
}
deadline=$((SECONDS + 60))
until curl -fsS -o /dev/null --max-time 2 "http://127.0.0.1:${metrics_port}/readyz" 2>/dev/null; do
    kill -0 "${pg_pid}" 2>/dev/null || die "poolguard serve exited during start-up"
    ((SECONDS < deadline)) || die "poolguard serve not ready after 60s"
    sleep 0.05
done
until [[ "$(metric poolguard_namespace_cache_size | cut -d. -f1)" -ge "${namespaces}" ]]; do
    ((SECONDS < deadline)) || die "poolguard's namespace cache did not reach ${namespaces}"
    sleep 0.2
done
sleep 2
grep -q '"audit pass done"' "${work}/poolguard-serve.log" && die "a pass started before the idle measurement (the placeholder lease expired too early)"
idle_rss_kib="$(status_kib "${pg_pid}" VmRSS)"
idle_hwm_kib="$(status_kib "${pg_pid}" VmHWM)"
log "serve ready, $(metric poolguard_namespace_cache_size) namespaces cached, no pass yet: RSS ${idle_rss_kib} KiB (peak so far ${idle_hwm_kib} KiB)"
log "waiting for the placeholder lease to expire ($(awk -v a="${t_lease}" -v b="$(now)" -v h="${hold}" 'BEGIN { printf "%.0f", h - (b - a) }')s), then ${passes} pass(es)"

deadline=$((SECONDS + hold + 900))
: > "${work}/passes.jsonl"
done_passes=0
pg_cpu_prev="$(cpu_seconds "${pg_pid}")"
api_cpu_prev="$(cpu_seconds "${apiserver_pid}")"
while ((done_passes < passes)); do
    kill -0 "${pg_pid}" 2>/dev/null || die "poolguard serve exited"
    ((SECONDS < deadline)) || die "${passes} passes not done in time"
    grep -q '"audit pass failed' "${work}/poolguard-serve.log" && die "an audit pass failed: $(grep -m1 '"audit pass failed' "${work}/poolguard-serve.log")"
    n="$(grep -c '"audit pass done"' "${work}/poolguard-serve.log" || true)"
    if ((n > done_passes)); then
        # Read right away, before the next pass (AUDIT_INTERVAL later).
        rss="$(status_kib "${pg_pid}" VmRSS)"
        hwm="$(status_kib "${pg_pid}" VmHWM)"
        pg_cpu="$(cpu_seconds "${pg_pid}")"
        api_cpu="$(cpu_seconds "${apiserver_pid}")"
        done_passes=$((done_passes + 1))
        grep '"audit pass done"' "${work}/poolguard-serve.log" | sed -n "${done_passes}p" |
            jq -c --argjson rss "${rss}" --argjson hwm "${hwm}" \
                --argjson pg_cpu "$(awk -v a="${pg_cpu_prev}" -v b="${pg_cpu}" 'BEGIN { printf "%.2f", b - a }')" \
                --argjson api_cpu "$(awk -v a="${api_cpu_prev}" -v b="${api_cpu}" 'BEGIN { printf "%.2f", b - a }')" \
                '.fields + {rss_kib: $rss, peak_rss_kib: $hwm, poolguard_cpu_seconds: $pg_cpu, apiserver_cpu_seconds: $api_cpu}' \
                >> "${work}/passes.jsonl"
        log "pass ${done_passes}: $(tail -n1 "${work}/passes.jsonl")"
        pg_cpu_prev="${pg_cpu}" api_cpu_prev="${api_cpu}"
    fi
    sleep 0.1
done
curl -fsS --max-time 5 "http://127.0.0.1:${metrics_port}/metrics" | grep '^poolguard_audit' > "${work}/audit-metrics.txt" || true
duration_metric="$(awk '$1 == "poolguard_audit_duration_seconds" { print $2 }' "${work}/audit-metrics.txt")"

# The reports in the cluster: one per namespace, adding up to the last pass's results.
kubectl get policyreports.wgpolicyk8s.io -A -l app.kubernetes.io/managed-by=poolguard -o json > "${work}/reports.json"
reports_n="$(jq '.items | length' "${work}/reports.json")"
report_sums="$(jq -c '[.items[].summary] | {pass: (map(.pass // 0) | add), fail: (map(.fail // 0) | add), error: (map(.error // 0) | add), skip: (map(.skip // 0) | add)}' "${work}/reports.json")"
last_pass="$(tail -n1 "${work}/passes.jsonl")"
((reports_n == namespaces)) || die "${reports_n} reports in the cluster, ${namespaces} expected"
[[ "$(jq -c '{pass, fail, error, skip}' <<< "${last_pass}")" == "${report_sums}" ]] ||
    die "the reports' summaries add up to ${report_sums}, the pass logged $(jq -c '{pass, fail, error, skip}' <<< "${last_pass}")"
[[ "$(jq -c '{pass: ((.placement.pass // 0) + (.allowedrepositories.pass // 0)), fail: ((.placement.fail // 0) + (.allowedrepositories.fail // 0))}' <<< "${oneshot_counts}")" == \
    "$(jq -c '{pass, fail}' <<< "${last_pass}")" ]] || log "note: the one-shot audit and the last pass counted differently (${oneshot_counts} vs ${last_pass})"
reports_kib="$(jq -c '.items | map(tojson | length) | add / 1024 | floor' "${work}/reports.json")"

kill -TERM "${pg_pid}"
wait "${pg_pid}" 2>/dev/null || true
pg_pid=
final_lease_holder="$(kubectl -n "${lease_namespace}" get lease "${lease_name}" -o jsonpath='{.spec.holderIdentity}')"

# --- 4. report --------------------------------------------------------------------------------
python3 - "${results}/audit-scale.json" "${results}/audit-scale.md" <<PY
import json, sys
objects = json.load(open("${work}/objects.json"))
passes = [json.loads(l) for l in open("${work}/passes.jsonl")]
d = {
    "date": "$(date -u +%Y-%m-%dT%H:%M:%SZ)", "kubernetes": "${k8s_version}", "poolguard": "${pg_version}",
    "poolguard_build": "${pg_build}", "nproc": $(nproc), "loadavg_end": "$(loadavg)",
    "objects": objects, "objects_create_seconds": float("${objects_s}"),
    "etcd_data_kib": ${etcd_db_kib}, "apiserver_rss_kib_after_create": ${apiserver_rss_kib},
    "oneshot": {"command": "poolguard audit --kubeconfig F --namespace-selector ${bench_label} --config ${config} --policies-dir policies --output json",
                "seconds": float("${oneshot_s}"), "peak_rss_kib": int("${oneshot_peak_kib}"), "rss_source": "${rss_source}",
                "cpu_seconds": float("${oneshot_cpu}"), "apiserver_cpu_seconds": float("${oneshot_api_cpu}"),
                "exit_status": ${audit_rc}, "results": ${oneshot_total}, "counts": json.loads('${oneshot_counts}')},
    "serve": {"audit_interval": "${interval}", "page_size": ${page_size}, "idle_rss_kib": ${idle_rss_kib},
              "idle_peak_rss_kib": ${idle_hwm_kib}, "passes": passes, "duration_metric_seconds": float("${duration_metric:-nan}"),
              "reports_in_cluster": ${reports_n}, "reports_json_kib": ${reports_kib}, "report_summaries": json.loads('${report_sums}'),
              "lease_holder_after_sigterm": "${final_lease_holder}"},
}
json.dump(d, open(sys.argv[1], "w"), indent=2)
mib = lambda kib: f"{kib / 1024:.1f}"
o, s = d["oneshot"], d["serve"]
rows = [
    ("objects", f"{objects['pods']:,} pods ({objects['containers']:,} containers, {objects['bound_pods']:,} bound to a node, {objects['foreign_image_pods']:,} with an image outside the allowed repositories) in {objects['namespaces']:,} namespaces ({objects['namespaces_with_pool']:,} with a pool)"),
    ("creating them (namespaces + ServiceAccounts, pods)", f"{d['objects_create_seconds']:.0f} s ({objects['namespaces_seconds']:.0f} s + {objects['pods_seconds']:.0f} s, {objects['concurrency']} in flight)"),
    ("\`poolguard audit --output json\`: wall time / CPU", f"{o['seconds']:.1f} s / {o['cpu_seconds']:.1f} s (kube-apiserver meanwhile {o['apiserver_cpu_seconds']:.1f} s CPU)"),
    ("\`poolguard audit\`: peak RSS", f"{mib(o['peak_rss_kib'])} MiB"),
    ("\`poolguard audit\`: results", f"{o['results']:,}: " + "; ".join(f"{p} " + ", ".join(f"{k} {v:,}" for k, v in sorted(c.items())) for p, c in sorted(o['counts'].items()))),
    (f"\`poolguard serve\`: RSS ready and idle ({objects['namespaces']:,} namespaces cached, no pass yet)", f"{mib(s['idle_rss_kib'])} MiB"),
]
for i, p in enumerate(passes, 1):
    rows.append((f"serve pass {i}: duration / poolguard CPU", f"{p['seconds']:.1f} s / {p['poolguard_cpu_seconds']:.1f} s (kube-apiserver {p['apiserver_cpu_seconds']:.1f} s CPU)"))
    rows.append((f"serve pass {i}: objects, results, reports written", f"{p['objects']:,} objects in {p['namespaces']:,} namespaces; pass {p['pass']:,}, fail {p['fail']:,}, error {p['error']:,}, skip {p['skip']:,}; {p['reports_written']:,} reports written, {p['reports_failed']} failed"))
    rows.append((f"serve after pass {i}: RSS / peak RSS (VmHWM)", f"{mib(p['rss_kib'])} / {mib(p['peak_rss_kib'])} MiB"))
rows.append(("reports in the cluster (their JSON)", f"{s['reports_in_cluster']:,} ({s['reports_json_kib'] / 1024:.1f} MiB); summaries add up to the last pass"))
md = (f"## Audit at scale — {d['date']}\n\n{d['kubernetes']} (etcd + kube-apiserver on 127.0.0.1, no controllers), "
      f"{d['nproc']} cores, {d['poolguard']} ({d['poolguard_build']}). \`bench/audit-scale.sh\`; peak RSS of the one-shot from {o['rss_source']}, "
      f"serve's from /proc/PID/status. Load average at the end: {d['loadavg_end']}.\n\n| | |\n|---|---|\n"
      + "".join(f"| {k} | {v} |\n" for k, v in rows))
open(sys.argv[2], "w").write(md)
print(md)
PY
log "total $(since "${t_start}")s"
