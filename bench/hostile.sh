#!/usr/bin/env bash
# Hostile clients against poolguard on loopback (bench/loadgen/src/bin/hostile.rs), and the
# latency a well-behaved client sees during each attack. Not part of CI. Writes
# bench/results/hostile.md (the table) and hostile.json (one object per phase).
#
#   bash bench/hostile.sh                    # every attack, 5,000 connections, ~2.5 min
#   ATTACKS=none,idle SECONDS_PER_PHASE=5 bash bench/hostile.sh
#
# Environment: ATTACKS (all), CONNECTIONS (5000), RATE (200 well-behaved requests/s),
# SECONDS_PER_PHASE (10), PG_PORT (18543), PG_METRICS_PORT (19190), MAX_CONNECTIONS (poolguard's
# default), SERVER_CPU / CLIENT_CPU (taskset CPU lists; default: unpinned).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
B=$ROOT/bench
W=$B/work/hostile
R=$B/results
mkdir -p "$W" "$R"
ATTACKS=${ATTACKS:-none,idle,slow-head,slow-body,rapid-reset,vanish}
CONNECTIONS=${CONNECTIONS:-5000}
RATE=${RATE:-200}
SECONDS_PER_PHASE=${SECONDS_PER_PHASE:-10}
PG_PORT=${PG_PORT:-18543}
PG_METRICS_PORT=${PG_METRICS_PORT:-19190}
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
export CARGO_TARGET_DIR=$TARGET

log() { printf '[hostile %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
pin() { if [ -n "${1:-}" ]; then echo taskset -c "$1"; fi; }

SERVER_PID=
cleanup() { if [ -n "$SERVER_PID" ]; then kill "$SERVER_PID" 2>/dev/null || true; wait "$SERVER_PID" 2>/dev/null || true; fi; }
trap cleanup EXIT

# Both sides hold thousands of sockets.
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
(( $(ulimit -n) >= CONNECTIONS + 1000 )) || { log "open files limit $(ulimit -n) is below CONNECTIONS + 1000"; exit 1; }

log "building poolguard (release) and the hostile client"
cargo build --release --locked --bin poolguard
cargo build --release --locked -p poolguard-loadgen --bin hostile
POOLGUARD=$TARGET/release/poolguard
HOSTILE=$TARGET/release/hostile

"$POOLGUARD" certs --out-dir "$W/certs" --dns-name localhost --ip 127.0.0.1 >&2
limits=()
[ -n "${MAX_CONNECTIONS:-}" ] && limits+=(--max-connections "$MAX_CONNECTIONS")
# shellcheck disable=SC2046
$(pin "${SERVER_CPU:-}") "$POOLGUARD" serve --namespaces-file "$ROOT/testdata/namespaces.yaml" \
  --config "$ROOT/testdata/config/example.yaml" --policies-dir "$ROOT/policies" \
  --tls-cert-file "$W/certs/tls.crt" --tls-key-file "$W/certs/tls.key" \
  --addr "127.0.0.1:$PG_PORT" --metrics-addr "127.0.0.1:$PG_METRICS_PORT" --audit-interval 0 \
  "${limits[@]}" >"$W/poolguard.log" 2>&1 &
SERVER_PID=$!
for _ in $(seq 100); do
  curl -fsS "http://127.0.0.1:$PG_METRICS_PORT/readyz" >/dev/null 2>&1 && break
  sleep 0.1
done
curl -fsS "http://127.0.0.1:$PG_METRICS_PORT/readyz" >/dev/null || { log "poolguard did not become ready"; cat "$W/poolguard.log" >&2; exit 1; }

log "attacks: $ATTACKS; $CONNECTIONS connections; well-behaved client at $RATE/s"
# shellcheck disable=SC2046
$(pin "${CLIENT_CPU:-}") "$HOSTILE" --url "https://localhost:$PG_PORT/validate" --ca "$W/certs/ca.crt" \
  --body "$ROOT/testdata/reviews/pod-create-placed.json" --attacks "$ATTACKS" \
  --connections "$CONNECTIONS" --rate "$RATE" --seconds "$SECONDS_PER_PHASE" --server-pid "$SERVER_PID" \
  --json >"$W/out.txt"
metrics=$(curl -fsS "http://127.0.0.1:$PG_METRICS_PORT/metrics")
rss_kib=$(awk '/VmHWM/ {print $2}' "/proc/$SERVER_PID/status")
{
  echo "# Hostile clients ($(date -u +%Y-%m-%d), $(nproc) cores, $CONNECTIONS connections, well-behaved client at $RATE req/s)"
  echo
  echo "Command: \`bash bench/hostile.sh\` (server pinned: ${SERVER_CPU:-no}, client pinned: ${CLIENT_CPU:-no})."
  echo "Latencies of the well-behaved client in ms; \"new connection\" includes connect and TLS."
  echo
  grep '^|' "$W/out.txt"
  echo
  echo "poolguard after the run: peak RSS $((rss_kib / 1024)) MiB; $(grep -E '^poolguard_connections_evicted_total ' <<<"$metrics" | tr -d '\n') idle connections closed to make room."
} >"$R/hostile.md"
grep '^{' "$W/out.txt" >"$R/hostile.json"
cat "$R/hostile.md"
if grep -qiE 'panicked|thread .* panicked' "$W/poolguard.log"; then
  log "poolguard panicked (see $W/poolguard.log)"
  exit 1
fi
kill -0 "$SERVER_PID" || { log "poolguard exited during the run"; exit 1; }
