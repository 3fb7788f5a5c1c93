#!/usr/bin/env bash
# poolguard vs OPA /validate throughput as the server gets more cores: for each N in CORES, each
# server in turn is started pinned to the first N CPUs (taskset, default settings: poolguard's
# evaluation slots and worker threads follow the CPUs it may use), the load generator runs on the
# CPUs after them (at most 8), closed loop, on ReplicaSet-shaped pods ("replicas": one spec,
# remembered results help) and on pods all different ("distinct": every request a new image tag).
# CORE_RUNS alternating rounds (poolguard, OPA, null server in odd rounds, the reverse in even ones); each cell
# reports the median and the range, the ratio of the medians, poolguard's peak RSS, and the
# scaling from the smallest to the largest cell. A third server in every round is the floor of
# answering at all: the null AdmissionReview server (bench/loadgen/src/bin/nullserver.rs, on
# poolguard's HTTPS loop; it parses each review and allows it) on poolguard's bodies; the report
# puts poolguard's and OPA's throughput over its. Writes bench/results/cores.{md,json}.
#
# A cell needs N + 1 CPUs (at least one for the load generator); cells that do not fit this
# machine are skipped and the report says so (a 2-core machine runs the 1-core cell only).
#
# Knobs (environment): CORES ("1 2 4 8") CORE_RUNS (3) CORE_SECONDS (5) CORE_CONNS (64)
#   LOADGEN_MAX_THREADS (8) NAMESPACES (10000) OPA_VERSION (v1.22.2) PG_PORT (18443)
#   PG_METRICS_PORT (19090) OPA_PORT (18181) NULL_PORT (18543) CARGO_TARGET_DIR (default: target/)
#   MEASURED (the commit poolguard was built from; default: the checkout's)
#   POOLGUARD_BIN LOADGEN_BIN NULLSERVER_BIN OPA_BIN: prebuilt binaries (nothing is built; for a machine that
#   reaches no registry, with bench/work's inputs made beforehand or by this script).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
B=$ROOT/bench
W=$B/work
R=$B/results
mkdir -p "$W" "$R"

CORES=${CORES:-"1 2 4 8"}
CORE_RUNS=${CORE_RUNS:-3}
CORE_SECONDS=${CORE_SECONDS:-5}
CORE_CONNS=${CORE_CONNS:-64}
LOADGEN_MAX_THREADS=${LOADGEN_MAX_THREADS:-8}

log() { printf '[cores %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
command -v taskset >/dev/null || { echo "cores.sh: taskset (util-linux) is required" >&2; exit 1; }

SERVER_PID=
stop_server() {
  if [ -n "$SERVER_PID" ]; then kill "$SERVER_PID" 2>/dev/null || true; wait "$SERVER_PID" 2>/dev/null || true; fi
  SERVER_PID=
}
trap stop_server EXIT

# shellcheck source=bench/prepare.sh
. "$B/prepare.sh"


# CORE_POLICY=gatekeeper (bench/prepare.sh): both servers run a Gatekeeper ConstraintTemplate and
# a constraint of it instead of the shipped policies. Writes bench/results/cores-gatekeeper.{md,json}.
REPORT=cores
TITLE="poolguard vs OPA"
if [ "$CORE_POLICY" = gatekeeper ]; then
  REPORT=cores-gatekeeper
  TITLE="a Gatekeeper template (K8sAllowedRepos), poolguard vs OPA"
fi

RESULTS=$W/$REPORT.jsonl
: >"$RESULTS"
LOAD_START=$(cut -d' ' -f1-3 /proc/loadavg)
SKIPPED=()

wait_ready() {
  for _ in $(seq 1 3000); do
    [ "$(curl -s -o /dev/null -w '%{http_code}' "$@" || true)" = 200 ] && return 0
    kill -0 "$SERVER_PID" 2>/dev/null || { log "server exited"; return 1; }
    sleep 0.01
  done
  log "not ready after ~30 s: $*"; return 1
}

# cell SERVER N RUN: start SERVER on the first N CPUs, load it from the others, stop it.
cell() {
  local server=$1 n=$2 run=$3 sub url
  local server_cpus loadgen_cpus threads
  server_cpus=$(join "${CPUS[@]:0:n}")
  loadgen_cpus=("${CPUS[@]:n:LOADGEN_MAX_THREADS}")
  threads=${#loadgen_cpus[@]}
  if [ "$server" = poolguard ]; then
    taskset -c "$server_cpus" "${PG_CMD[@]}" >"$W/cores-poolguard.log" 2>&1 &
    SERVER_PID=$!
    wait_ready "http://127.0.0.1:$PG_METRICS_PORT/readyz"
    sub=pg url=$PG_URL
  elif [ "$server" = null ]; then
    taskset -c "$server_cpus" "${NULL_CMD[@]}" >"$W/cores-null.log" 2>&1 &
    SERVER_PID=$!
    wait_ready "https://localhost:$NULL_PORT/readyz" --cacert "$W/certs/ca.crt"
    # poolguard's reviews: the floor parses the same bodies.
    sub=pg url=$NULL_URL
  else
    taskset -c "$server_cpus" "${OPA_CMD[@]}" >"$W/cores-opa.log" 2>&1 &
    SERVER_PID=$!
    wait_ready "https://localhost:$OPA_PORT/health" --cacert "$W/certs/ca.crt"
    sub=opa url=$OPA_URL
  fi
  for workload in replicas distinct; do
    local dir=reviews args=()
    [ "$workload" = distinct ] && dir=reviews-distinct
    for f in "$W/$dir/$sub"/*.json; do args+=(--body "$f"); done
    log "$n cores, round $run/$CORE_RUNS: $server, $workload pods, server on CPUs $server_cpus, load generator on $(join "${loadgen_cpus[@]}")"
    taskset -c "$(join "${loadgen_cpus[@]}")" "$LOADGEN" --label "cores:$n:$server:$workload:$run" --url "$url" \
      --ca "$W/certs/ca.crt" "${args[@]}" --seq-token seqno --mode closed --connections "$CORE_CONNS" \
      --duration "$CORE_SECONDS" --threads "$threads" >>"$RESULTS"
    # poolguard's phase histograms so far (cumulative; the report takes the difference per workload).
    [ "$server" = poolguard ] && curl -s "http://127.0.0.1:$PG_METRICS_PORT/metrics" \
      | python3 -c 'import json, sys; print(json.dumps({"label": sys.argv[1], "metrics": sys.stdin.read()}))' \
        "phases:$n:$workload:$run" >>"$RESULTS"
  done
  printf '{"label": "hwm:%s:%s:%s", "vmhwm_kib": %s}\n' "$n" "$server" "$run" \
    "$(awk '/^VmHWM:/ {print $2}' "/proc/$SERVER_PID/status")" >>"$RESULTS"
  stop_server
}

for n in $CORES; do
  if ((n + 1 > ${#CPUS[@]})); then
    SKIPPED+=("$n")
    log "skipping $n cores: a cell needs $((n + 1)) CPUs ($n for the server, 1+ for the load generator); this machine gives ${#CPUS[@]}"
    continue
  fi
  for run in $(seq 1 "$CORE_RUNS"); do
    if ((run % 2)); then order="poolguard opa null"; else order="null opa poolguard"; fi
    for server in $order; do cell "$server" "$n" "$run"; done
  done
done

# The commit measured: the checkout's, unless POOLGUARD_BIN was built from another (MEASURED=...).
MEASURED=${MEASURED:-$(git -C "$ROOT" describe --always --dirty 2>/dev/null || echo unknown)}
B=$B REPORT=$REPORT TITLE=$TITLE MEASURED=$MEASURED python3 - "$RESULTS" "$R" "${#CPUS[@]}" "$(uname -m)" "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | xargs)" \
  "$CORE_SECONDS" "$CORE_CONNS" "$OPA_VERSION" "${SKIPPED[*]:-}" "$LOAD_START" "$(cut -d' ' -f1-3 /proc/loadavg)" <<'PY'
import json, os, statistics, sys, datetime
sys.path.insert(0, os.path.join(os.environ["B"], "e2e"))
from floor_report import PHASES, histogram_series
results, out, cpus, arch, model, seconds, conns, opa, skipped, load_start, load_end = sys.argv[1:12]
rows = [json.loads(l) for l in open(results) if l.strip()]
tput, hwm, snapshots = {}, {}, {}
for r in rows:
    parts = r["label"].split(":")
    if parts[0] == "cores":
        _, n, server, workload, _run = parts
        tput.setdefault((int(n), workload, server), []).append(r["throughput_rps"])
    elif parts[0] == "hwm":
        _, n, server, _run = parts
        hwm.setdefault((int(n), server), []).append(int(r["vmhwm_kib"]))
    elif parts[0] == "phases":
        _, n, workload, run = parts
        totals = {}
        for _, suffix, labels, value in histogram_series(r["metrics"], "poolguard_admission_phase_duration_seconds"):
            if labels.get("webhook") == "validate" and suffix in ("sum", "count"):
                totals[(labels["phase"], suffix)] = value
        snapshots[(int(n), run, workload)] = totals

# poolguard's mean time per /validate request in each phase, µs: one server process serves the
# replicas round and then the distinct one, so the distinct round is its snapshot less the first.
phase_us = {}
for (n, run, workload), totals in snapshots.items():
    before = snapshots.get((n, run, "replicas"), {}) if workload == "distinct" else {}
    means = {}
    for phase in PHASES:
        count = totals.get((phase, "count"), 0) - before.get((phase, "count"), 0)
        if count:
            means[phase] = (totals.get((phase, "sum"), 0) - before.get((phase, "sum"), 0)) / count * 1e6
    phase_us.setdefault((n, workload), []).append(means)
cells = sorted({(n, w) for (n, w, _) in tput}, key=lambda c: (c[0], c[1] != "replicas"))
table, data = [], []
for n, w in cells:
    pg, op = tput.get((n, w, "poolguard"), []), tput.get((n, w, "opa"), [])
    nl = tput.get((n, w, "null"), [])
    if not pg or not op:
        continue
    mp, mo = statistics.median(pg), statistics.median(op)
    mn = statistics.median(nl) if nl else None
    floor = (f"| {mn:,.0f} ({min(nl):,.0f}–{max(nl):,.0f}) | {mp / mn:.2f} | {mo / mn:.2f} " if mn
             else "| – | – | – ")
    peak = max(hwm.get((n, "poolguard"), [0])) / 1024
    phases = {p: statistics.median(m[p] for m in phase_us.get((n, w), []) if p in m)
              for p in PHASES if any(p in m for m in phase_us.get((n, w), []))}
    data.append({"cores": n, "workload": w, "poolguard_rps": pg, "opa_rps": op,
                 "poolguard_median": mp, "opa_median": mo, "ratio": mp / mo, "poolguard_vmhwm_mib": peak,
                 "null_rps": nl, "null_median": mn,
                 "poolguard_over_null": mp / mn if mn else None, "opa_over_null": mo / mn if mn else None,
                 "poolguard_phase_us": phases})
    table.append(f"| {n} | {w} | {mp:,.0f} ({min(pg):,.0f}–{max(pg):,.0f}) | {mo:,.0f} ({min(op):,.0f}–{max(op):,.0f}) "
                 f"| {mp / mo:.1f}× {floor}| {peak:.1f} MiB |")
lines = [
    f"# /validate throughput by server cores: {os.environ['TITLE']}",
    "",
    f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC, poolguard at {os.environ['MEASURED']}, {cpus} CPUs ({arch}, {model}), OPA {opa}, "
    f"closed loop, {conns} connections, {seconds} s per round, default settings (no flags). "
    "Server on the first N CPUs, load generator on the next ones (at most 8). Median of the rounds (range). "
    f"Load average before: {load_start}, after: {load_end} (a busy machine makes every number here meaningless).",
    "",
    "| server cores | workload | poolguard req/s | OPA req/s | ratio | null server req/s | poolguard/null | OPA/null | poolguard peak RSS |",
    "|---:|---|---:|---:|---:|---:|---:|---:|---:|",
    *table,
    "",
]
if any(d["poolguard_phase_us"] for d in data):
    lines += [
        "poolguard's mean time per `/validate` request by phase, µs (its `admission_phase_duration_seconds`; median of the rounds). "
        "In a closed loop with more connections than cores a phase's time includes waiting for a CPU, so a phase that grows "
        "with the cores while the throughput stalls is where requests contend.",
        "",
        "| server cores | workload | " + " | ".join(PHASES) + " | total |",
        "|---:|---|" + "---:|" * (len(PHASES) + 1),
        *[f"| {d['cores']} | {d['workload']} | " + " | ".join(f"{d['poolguard_phase_us'].get(p, 0):,.0f}" for p in PHASES)
          + f" | {sum(d['poolguard_phase_us'].values()):,.0f} |" for d in data],
        "",
    ]
for w in ("replicas", "distinct"):
    ns = sorted(d["cores"] for d in data if d["workload"] == w)
    if len(ns) > 1:
        first = next(d for d in data if d["workload"] == w and d["cores"] == ns[0])
        last = next(d for d in data if d["workload"] == w and d["cores"] == ns[-1])
        lines.append(f"- {w}: {ns[0]}→{ns[-1]} cores, poolguard ×{last['poolguard_median'] / first['poolguard_median']:.1f}, "
                     f"OPA ×{last['opa_median'] / first['opa_median']:.1f}")
if skipped:
    lines.append(f"- Not run on this {cpus}-CPU machine (a cell needs N + 1 CPUs): {skipped.replace(' ', ', ')} cores.")
text = "\n".join(lines) + "\n"
open(f"{out}/{os.environ['REPORT']}.md", "w").write(text)
json.dump({"cpus": int(cpus), "cells": data, "skipped": skipped.split(), "loadavg": [load_start, load_end]}, open(f"{out}/{os.environ['REPORT']}.json", "w"), indent=1)
print(text)
PY
