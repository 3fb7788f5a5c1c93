#!/usr/bin/env bash
# poolguard vs OPA on the same admission decisions, over TLS with keep-alive, on 127.0.0.1.
# Builds what it needs, runs both servers in turn, writes bench/results/latest.{md,json} and
# bench/results/latency.png, and prints the Markdown table; then, unless E2E=0, measures pod CREATE
# latency through kube-apiserver with and without poolguard (bench/e2e-latency.sh, results in
# bench/results/e2e-latency.{md,json}) and against a null webhook, OPA and poolguard's native
# admission objects at 1/10/50/200 creators (bench/e2e-floor.sh, bench/results/e2e-floor.{md,json}).
# See bench/README.md.
#
# /validate throughput is measured first, with both servers up: TPUT_RUNS (5) alternating rounds
# of poolguard and OPA, each round on two workloads — pods shaped like ReplicaSets' (one spec, a
# name each) and pods all different (every request a new image tag: poolguard's remembered
# results never help) — TPUT_SECONDS (10) each.
#
# Knobs (environment): TPUT_RUNS (5) TPUT_SECONDS (10) SAT_SECONDS (10) RATE_SECONDS (10) RATES ("500 1000 2000 5000")
#   SIZES ("1c 3c 10c") SIZE_SECONDS (5) E2E (1; 0 skips the kube-apiserver part)
#   FLOOR_RATE (2000, poolguard /mutate open loop) CONNS (16, closed loop) OPEN_CONNS (32, open loop) LOADGEN_THREADS (2) NAMESPACES (10000)
#   OPA_VERSION (v1.22.2) PG_PORT (18443) PG_METRICS_PORT (19090) OPA_PORT (18181)
#   CARGO_TARGET_DIR (default: target/)
#   CORES (unset; e.g. "1 2 4 8"): also run the cores sweep, bench/cores.sh, with these cells
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
B=$ROOT/bench
W=$B/work
R=$B/results
mkdir -p "$W" "$R"

TPUT_RUNS=${TPUT_RUNS:-5}
TPUT_SECONDS=${TPUT_SECONDS:-10}
SAT_SECONDS=${SAT_SECONDS:-10}
RATE_SECONDS=${RATE_SECONDS:-10}
RATES=${RATES:-"500 1000 2000 5000"}
SIZES=${SIZES:-"1c 3c 10c"}
SIZE_SECONDS=${SIZE_SECONDS:-5}
FLOOR_RATE=${FLOOR_RATE:-2000}
PINNED_RATE=${PINNED_RATE:-5000}
CONNS=${CONNS:-16}
OPEN_CONNS=${OPEN_CONNS:-32}
LOADGEN_THREADS=${LOADGEN_THREADS:-2}

log() { printf '[bench %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
loadavg() { cut -d' ' -f1-3 /proc/loadavg; }

# The server under measurement (load, hwm_kib, rss_kib, wait_ready); both run from the
# throughput rounds on, and are stopped on exit.
SERVER_PID= PG_PID= OPA_PID=
stop() { if [ -n "$1" ]; then kill "$1" 2>/dev/null || true; wait "$1" 2>/dev/null || true; fi; }
cleanup() { stop "$PG_PID"; stop "$OPA_PID"; }
trap cleanup EXIT

# --- build and inputs ----------------------------------------------------------------------
python3 -c 'import matplotlib' 2>/dev/null || { log "installing matplotlib"; python3 -m pip install -q matplotlib; }
# shellcheck source=bench/prepare.sh
. "$B/prepare.sh"

RESULTS=$W/runs.jsonl
META=$W/meta.json
: >"$RESULTS"
LOAD_START=$(loadavg)

# wait_ready URL CURL_ARGS... -> prints milliseconds from $T0 to the first 200
wait_ready() {
  local url=$1; shift
  for _ in $(seq 1 3000); do
    if [ "$(curl -s -o /dev/null -w '%{http_code}' "$@" "$url" || true)" = 200 ]; then
      echo $(( ($(date +%s%N) - T0) / 1000000 )); return 0
    fi
    if ! kill -0 "$SERVER_PID" 2>/dev/null; then log "server exited"; return 1; fi
    sleep 0.005
  done
  log "not ready after ~30 s: $url"; return 1
}

# bodies DIR -> the --body arguments for DIR's reviews, with the sequence token gen.py put in them
bodies() { local f; for f in "$1"/*.json; do printf -- '--body\n%s\n' "$f"; done; printf -- '--seq-token\nseqno\n'; }

# load SERVER URL BODYDIR -> appends JSON lines to $RESULTS
load() {
  local server=$1 url=$2 args=()
  mapfile -t args < <(bodies "$3")
  log "$server: closed loop, $CONNS connections, ${SAT_SECONDS}s (load $(loadavg))"
  "$LOADGEN" --label "$server" --url "$url" --ca "$W/certs/ca.crt" "${args[@]}" --mode closed \
    --connections "$CONNS" --duration "$SAT_SECONDS" --threads "$LOADGEN_THREADS" >>"$RESULTS"
  for size in $SIZES; do
    local sized=(--seq-token seqno)
    for f in "$3"/*-"$size"-*.json; do sized+=(--body "$f"); done
    log "$server: closed loop, pods with $size only (mapped and unmapped), ${SIZE_SECONDS}s"
    "$LOADGEN" --label "$server@$size" --url "$url" --ca "$W/certs/ca.crt" "${sized[@]}" --mode closed \
      --connections "$CONNS" --duration "$SIZE_SECONDS" --threads "$LOADGEN_THREADS" >>"$RESULTS"
  done
  log "$server: closed loop over HTTP/2, one connection, $CONNS streams, ${SAT_SECONDS}s"
  "$LOADGEN" --label "$server-h2" --url "$url" --ca "$W/certs/ca.crt" "${args[@]}" --mode closed --http2 \
    --connections "$CONNS" --duration "$SAT_SECONDS" --threads "$LOADGEN_THREADS" >>"$RESULTS"
  for rate in $RATES; do
    log "$server: open loop $rate req/s, $OPEN_CONNS connections, ${RATE_SECONDS}s (load $(loadavg))"
    "$LOADGEN" --label "$server" --url "$url" --ca "$W/certs/ca.crt" "${args[@]}" --mode open \
      --rate "$rate" --connections "$OPEN_CONNS" --duration "$RATE_SECONDS" --threads "$LOADGEN_THREADS" >>"$RESULTS"
  done
  # The same open loop with the server on one core and the load generator on another, so the
  # client's scheduling noise is not counted as the server's.
  if command -v taskset >/dev/null && (($(nproc) >= 2)); then
    taskset -a -p -c 0 "$SERVER_PID" >/dev/null
    log "$server: open loop $PINNED_RATE req/s, server on core 0, load generator on core 1, ${RATE_SECONDS}s"
    taskset -c 1 "$LOADGEN" --label "$server-pinned" --url "$url" --ca "$W/certs/ca.crt" "${args[@]}" --mode open \
      --rate "$PINNED_RATE" --connections "$OPEN_CONNS" --duration "$RATE_SECONDS" --threads 1 >>"$RESULTS"
    taskset -a -p -c "0-$(($(nproc) - 1))" "$SERVER_PID" >/dev/null
  fi
}

hwm_kib() { awk '/^VmHWM:/ {print $2}' "/proc/$SERVER_PID/status"; }
rss_kib() { awk '/^VmRSS:/ {print $2}' "/proc/$SERVER_PID/status"; }

# --- poolguard -----------------------------------------------------------------------------
log "starting poolguard serve with $NAMESPACES namespaces"
T0=$(date +%s%N)
"${PG_CMD[@]}" >"$W/poolguard.log" 2>&1 &
SERVER_PID=$! PG_PID=$!
PG_READY_MS=$(wait_ready "http://127.0.0.1:$PG_METRICS_PORT/readyz")
PG_IDLE_RSS=$(rss_kib)
log "poolguard ready in ${PG_READY_MS} ms, RSS $PG_IDLE_RSS KiB"
for f in "$W"/reviews/pg/*.json; do
  curl -sS --cacert "$W/certs/ca.crt" "$PG_URL" --data-binary @"$f" -H 'content-type: application/json'; echo
done >"$W/poolguard-responses.jsonl"
curl -sS --cacert "$W/certs/ca.crt" "$PG_URL" --data-binary @"$W/bad/pg.json" -H 'content-type: application/json' >"$W/poolguard-bad.json"; echo >>"$W/poolguard-bad.json"
# --- OPA -----------------------------------------------------------------------------------
log "starting OPA $OPA_VERSION with $NAMESPACES namespaces as data"
T0=$(date +%s%N)
"${OPA_CMD[@]}" >"$W/opa.log" 2>&1 &
SERVER_PID=$! OPA_PID=$!
OPA_READY_MS=$(wait_ready "https://localhost:$OPA_PORT/health" --cacert "$W/certs/ca.crt")
OPA_IDLE_RSS=$(rss_kib)
log "OPA ready in ${OPA_READY_MS} ms, RSS $OPA_IDLE_RSS KiB"
for f in "$W"/reviews/opa/*.json; do
  curl -sS --cacert "$W/certs/ca.crt" "$OPA_URL" --data-binary @"$f" -H 'content-type: application/json'; echo
done >"$W/opa-responses.jsonl"
curl -sS --cacert "$W/certs/ca.crt" "$OPA_URL" --data-binary @"$W/bad/opa.json" -H 'content-type: application/json' >"$W/opa-bad.json"; echo >>"$W/opa-bad.json"
# --- /validate throughput: alternating rounds, both servers up ------------------------------
for run in $(seq 1 "$TPUT_RUNS"); do
  for workload in replicas distinct; do
    dir=reviews; [ "$workload" = distinct ] && dir=reviews-distinct
    for server in poolguard opa; do
      if [ "$server" = poolguard ]; then url=$PG_URL sub=pg; else url=$OPA_URL sub=opa; fi
      mapfile -t args < <(bodies "$W/$dir/$sub")
      log "throughput round $run/$TPUT_RUNS: $server, $workload pods, closed loop, ${TPUT_SECONDS}s (load $(loadavg))"
      "$LOADGEN" --label "tput:$server:$workload:$run" --url "$url" --ca "$W/certs/ca.crt" "${args[@]}" \
        --mode closed --connections "$CONNS" --duration "$TPUT_SECONDS" --threads "$LOADGEN_THREADS" >>"$RESULTS"
    done
  done
done

# --- each server on its own -----------------------------------------------------------------
SERVER_PID=$PG_PID
load poolguard "$PG_URL" "$W/reviews/pg"
log "poolguard /mutate: closed loop, ${SAT_SECONDS}s (secondary: placement only)"
mapfile -t args < <(bodies "$W/reviews/pg")
"$LOADGEN" --label poolguard-mutate --url "https://localhost:$PG_PORT/mutate" --ca "$W/certs/ca.crt" "${args[@]}" \
  --mode closed --connections "$CONNS" --duration "$SAT_SECONDS" --threads "$LOADGEN_THREADS" >>"$RESULTS"
log "poolguard /mutate: open loop $FLOOR_RATE req/s, ${RATE_SECONDS}s (floor: TLS round trip + client + a ~5 us decision)"
"$LOADGEN" --label poolguard-mutate --url "https://localhost:$PG_PORT/mutate" --ca "$W/certs/ca.crt" "${args[@]}" \
  --mode open --rate "$FLOOR_RATE" --connections "$OPEN_CONNS" --duration "$RATE_SECONDS" --threads "$LOADGEN_THREADS" >>"$RESULTS"
PG_HWM=$(hwm_kib)
stop "$PG_PID"; PG_PID=

SERVER_PID=$OPA_PID
load opa "$OPA_URL" "$W/reviews/opa"
OPA_HWM=$(hwm_kib)
stop "$OPA_PID"; OPA_PID=

LOAD_END=$(loadavg)
cat >"$META" <<EOF
{"namespaces": $NAMESPACES, "opa_version": "$OPA_VERSION", "poolguard_ready_ms": $PG_READY_MS,
 "opa_ready_ms": $OPA_READY_MS, "poolguard_vmhwm_kib": $PG_HWM, "opa_vmhwm_kib": $OPA_HWM,
 "poolguard_idle_rss_kib": $PG_IDLE_RSS, "opa_idle_rss_kib": $OPA_IDLE_RSS,
 "loadavg_start": "$LOAD_START", "loadavg_end": "$LOAD_END", "nproc": $(nproc),
 "sat_seconds": $SAT_SECONDS, "rate_seconds": $RATE_SECONDS, "size_seconds": $SIZE_SECONDS, "conns": $CONNS, "open_conns": $OPEN_CONNS,
 "loadgen_threads": $LOADGEN_THREADS, "tput_seconds": $TPUT_SECONDS, "tput_runs": $TPUT_RUNS, "date": "$(date -u +%Y-%m-%dT%H:%M:%SZ)"}
EOF
python3 "$B/report.py" "$W" "$R"

if [ -n "${CORES:-}" ]; then
  log "/validate throughput by server cores: CORES=\"$CORES\" (bench/cores.sh)"
  POOLGUARD_BIN=$POOLGUARD LOADGEN_BIN=$LOADGEN OPA_BIN=$OPA bash "$B/cores.sh"
fi

if [ "${E2E:-1}" != 0 ]; then
  log "pod CREATE latency through kube-apiserver (bench/e2e-latency.sh)"
  POOLGUARD_BIN=$POOLGUARD bash "$B/e2e-latency.sh"
  log "pod CREATE through kube-apiserver: no webhook, null webhook, OPA, poolguard, poolguard native, interleaved (bench/e2e-floor.sh)"
  POOLGUARD_BIN=$POOLGUARD OPA_VERSION=$OPA_VERSION OPA_DIR=$OPA_DIR bash "$B/e2e-floor.sh"
fi
