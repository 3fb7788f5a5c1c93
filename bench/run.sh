#!/usr/bin/env bash
# poolguard vs OPA on the same admission decisions, over TLS with keep-alive, on 127.0.0.1.
# Builds what it needs, runs both servers in turn, writes bench/results/latest.{md,json} and
# bench/results/latency.png, and prints the Markdown table; then, unless E2E=0, measures pod CREATE
# latency through kube-apiserver with and without poolguard (bench/e2e-latency.sh, results in
# bench/results/e2e-latency.{md,json}). See bench/README.md.
#
# Knobs (environment): SAT_SECONDS (10) RATE_SECONDS (10) RATES ("500 1000 2000 5000")
#   SIZES ("1c 3c 10c") SIZE_SECONDS (5) E2E (1; 0 skips the kube-apiserver part)
#   FLOOR_RATE (2000, poolguard /mutate open loop) CONNS (16, closed loop) OPEN_CONNS (32, open loop) LOADGEN_THREADS (2) NAMESPACES (10000)
#   OPA_VERSION (v1.22.2) PG_PORT (18443) PG_METRICS_PORT (19090) OPA_PORT (18181)
#   CARGO_TARGET_DIR (default: target/)
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
B=$ROOT/bench
W=$B/work
R=$B/results
mkdir -p "$W" "$R"

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
NAMESPACES=${NAMESPACES:-10000}
OPA_VERSION=${OPA_VERSION:-v1.22.2}
PG_PORT=${PG_PORT:-18443}
PG_METRICS_PORT=${PG_METRICS_PORT:-19090}
OPA_PORT=${OPA_PORT:-18181}
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
export CARGO_TARGET_DIR=$TARGET
OPA_DIR=${OPA_DIR:-$HOME/.cache/poolguard/opa/$OPA_VERSION}

log() { printf '[bench %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
loadavg() { cut -d' ' -f1-3 /proc/loadavg; }

SERVER_PID=
cleanup() { if [ -n "$SERVER_PID" ]; then kill "$SERVER_PID" 2>/dev/null || true; wait "$SERVER_PID" 2>/dev/null || true; fi; }
trap cleanup EXIT

# --- build ---------------------------------------------------------------------------------
log "building poolguard (release) and the load generator"
cargo build --release --locked --bin poolguard
cargo build --release --locked -p poolguard-loadgen
POOLGUARD=$TARGET/release/poolguard
LOADGEN=$TARGET/release/poolguard-loadgen

if [ ! -x "$OPA_DIR/opa" ]; then
  log "building OPA $OPA_VERSION from its Go module into $OPA_DIR (first time only; several minutes on 2 cores)"
  mkdir -p "$OPA_DIR"
  (cd "$W" && GOBIN=$OPA_DIR nice go install "github.com/open-policy-agent/opa@$OPA_VERSION")
fi
OPA=$OPA_DIR/opa

# --- inputs --------------------------------------------------------------------------------
python3 -c 'import matplotlib' 2>/dev/null || { log "installing matplotlib"; python3 -m pip install -q matplotlib; }
python3 "$B/gen.py" "$W" "$NAMESPACES" >&2
"$POOLGUARD" certs --out-dir "$W/certs" --dns-name localhost --ip 127.0.0.1 >&2
log "opa test bench/opa (the Rego written for this benchmark)"
"$OPA" test "$B/opa" >&2

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

# load SERVER URL BODYDIR -> appends JSON lines to $RESULTS
load() {
  local server=$1 url=$2 bodies=("$3"/*.json) args=()
  for f in "${bodies[@]}"; do args+=(--body "$f"); done
  log "$server: closed loop, $CONNS connections, ${SAT_SECONDS}s (load $(loadavg))"
  "$LOADGEN" --label "$server" --url "$url" --ca "$W/certs/ca.crt" "${args[@]}" --mode closed \
    --connections "$CONNS" --duration "$SAT_SECONDS" --threads "$LOADGEN_THREADS" >>"$RESULTS"
  for size in $SIZES; do
    local sized=()
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
"$POOLGUARD" serve --namespaces-file "$W/namespaces.json" --config "$ROOT/testdata/config/example.yaml" \
  --policies-dir "$ROOT/policies" --tls-cert-file "$W/certs/tls.crt" --tls-key-file "$W/certs/tls.key" \
  --addr "127.0.0.1:$PG_PORT" --metrics-addr "127.0.0.1:$PG_METRICS_PORT" >"$W/poolguard.log" 2>&1 &
SERVER_PID=$!
PG_READY_MS=$(wait_ready "http://127.0.0.1:$PG_METRICS_PORT/readyz")
PG_IDLE_RSS=$(rss_kib)
log "poolguard ready in ${PG_READY_MS} ms, RSS $PG_IDLE_RSS KiB"
PG_URL=https://localhost:$PG_PORT/validate
for f in "$W"/reviews/pg/*.json; do
  curl -sS --cacert "$W/certs/ca.crt" "$PG_URL" --data-binary @"$f" -H 'content-type: application/json'; echo
done >"$W/poolguard-responses.jsonl"
curl -sS --cacert "$W/certs/ca.crt" "$PG_URL" --data-binary @"$W/bad/pg.json" -H 'content-type: application/json' >"$W/poolguard-bad.json"; echo >>"$W/poolguard-bad.json"
load poolguard "$PG_URL" "$W/reviews/pg"
log "poolguard /mutate: closed loop, ${SAT_SECONDS}s (secondary: placement only)"
args=(); for f in "$W"/reviews/pg/*.json; do args+=(--body "$f"); done
"$LOADGEN" --label poolguard-mutate --url "https://localhost:$PG_PORT/mutate" --ca "$W/certs/ca.crt" "${args[@]}" \
  --mode closed --connections "$CONNS" --duration "$SAT_SECONDS" --threads "$LOADGEN_THREADS" >>"$RESULTS"
log "poolguard /mutate: open loop $FLOOR_RATE req/s, ${RATE_SECONDS}s (floor: TLS round trip + client + a ~5 us decision)"
"$LOADGEN" --label poolguard-mutate --url "https://localhost:$PG_PORT/mutate" --ca "$W/certs/ca.crt" "${args[@]}" \
  --mode open --rate "$FLOOR_RATE" --connections "$OPEN_CONNS" --duration "$RATE_SECONDS" --threads "$LOADGEN_THREADS" >>"$RESULTS"
PG_HWM=$(hwm_kib)
cleanup; SERVER_PID=

# --- OPA -----------------------------------------------------------------------------------
log "starting OPA $OPA_VERSION with $NAMESPACES namespaces as data"
T0=$(date +%s%N)
"$OPA" run --server --disable-telemetry --log-level error --addr "127.0.0.1:$OPA_PORT" \
  --tls-cert-file "$W/certs/tls.crt" --tls-private-key-file "$W/certs/tls.key" \
  "$B/opa/poolguard.rego" "$W/opa-data.json" >"$W/opa.log" 2>&1 &
SERVER_PID=$!
OPA_READY_MS=$(wait_ready "https://localhost:$OPA_PORT/health" --cacert "$W/certs/ca.crt")
OPA_IDLE_RSS=$(rss_kib)
log "OPA ready in ${OPA_READY_MS} ms, RSS $OPA_IDLE_RSS KiB"
OPA_URL=https://localhost:$OPA_PORT/v1/data/poolguard/bench/decision
for f in "$W"/reviews/opa/*.json; do
  curl -sS --cacert "$W/certs/ca.crt" "$OPA_URL" --data-binary @"$f" -H 'content-type: application/json'; echo
done >"$W/opa-responses.jsonl"
curl -sS --cacert "$W/certs/ca.crt" "$OPA_URL" --data-binary @"$W/bad/opa.json" -H 'content-type: application/json' >"$W/opa-bad.json"; echo >>"$W/opa-bad.json"
load opa "$OPA_URL" "$W/reviews/opa"
OPA_HWM=$(hwm_kib)
cleanup; SERVER_PID=

LOAD_END=$(loadavg)
cat >"$META" <<EOF
{"namespaces": $NAMESPACES, "opa_version": "$OPA_VERSION", "poolguard_ready_ms": $PG_READY_MS,
 "opa_ready_ms": $OPA_READY_MS, "poolguard_vmhwm_kib": $PG_HWM, "opa_vmhwm_kib": $OPA_HWM,
 "poolguard_idle_rss_kib": $PG_IDLE_RSS, "opa_idle_rss_kib": $OPA_IDLE_RSS,
 "loadavg_start": "$LOAD_START", "loadavg_end": "$LOAD_END", "nproc": $(nproc),
 "sat_seconds": $SAT_SECONDS, "rate_seconds": $RATE_SECONDS, "size_seconds": $SIZE_SECONDS, "conns": $CONNS, "open_conns": $OPEN_CONNS,
 "loadgen_threads": $LOADGEN_THREADS, "date": "$(date -u +%Y-%m-%dT%H:%M:%SZ)"}
EOF
python3 "$B/report.py" "$W" "$R"

if [ "${E2E:-1}" != 0 ]; then
  log "pod CREATE latency through kube-apiserver (bench/e2e-latency.sh)"
  POOLGUARD_BIN=$POOLGUARD bash "$B/e2e-latency.sh"
fi
