#!/usr/bin/env bash
# Soak: poolguard under a steady mixed load for a long time, sampled every window.
#
#   bash bench/soak.sh            # 30 minutes; not part of CI
#
# One poolguard (release build) with bench/gen.py's namespaces, testdata/config/example.yaml and
# the shipped policies (copied, so they can be rewritten) serves two open-loop load generators at
# once: /mutate and /validate, Pod CREATEs with 1, 3 and 10 containers in mapped and unmapped
# namespaces (bench/gen.py's reviews, round-robin). Every window (10 s) records poolguard's RSS,
# open file descriptors, threads and each generator's p50/p99 and failures; every RELOAD_EVERY
# seconds the config is rewritten (two valid versions, alternately), so hot reloads run
# throughout. Writes bench/results/soak.{json,md,png} and prints the Markdown table.
#
# Knobs (environment): SOAK_MINUTES (30) WINDOW_SECONDS (10) RELOAD_EVERY (60)
#   MUTATE_RATE (500) VALIDATE_RATE (500) CONNS (8 per generator) WARMUP_WINDOWS (6)
#   NAMESPACES (10000) PG_PORT (18543) PG_METRICS_PORT (19190) CARGO_TARGET_DIR (target/)
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
B=$ROOT/bench
W=$B/work/soak
R=$B/results
mkdir -p "$W" "$R"

SOAK_MINUTES=${SOAK_MINUTES:-30}
WINDOW_SECONDS=${WINDOW_SECONDS:-10}
RELOAD_EVERY=${RELOAD_EVERY:-60}
MUTATE_RATE=${MUTATE_RATE:-500}
VALIDATE_RATE=${VALIDATE_RATE:-500}
CONNS=${CONNS:-8}
WARMUP_WINDOWS=${WARMUP_WINDOWS:-6}
NAMESPACES=${NAMESPACES:-10000}
PG_PORT=${PG_PORT:-18543}
PG_METRICS_PORT=${PG_METRICS_PORT:-19190}
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
export CARGO_TARGET_DIR=$TARGET

log() { printf '[soak %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

log "building poolguard and the load generator (release)"
cargo build --release --locked -p poolguard --bin poolguard >&2
cargo build --release --locked -p poolguard-loadgen >&2
POOLGUARD=$TARGET/release/poolguard
LOADGEN=$TARGET/release/poolguard-loadgen
python3 -c 'import matplotlib' 2>/dev/null || { log "installing matplotlib"; python3 -m pip install -q matplotlib; }
python3 "$B/gen.py" "$W" "$NAMESPACES" >&2
"$POOLGUARD" certs --out-dir "$W/certs" --dns-name localhost --ip 127.0.0.1 >&2

# Rules poolguard reloads: a copy of the example config and of the shipped policies.
rm -rf "$W/rules" && mkdir -p "$W/rules/policies"
cp policies/*.yaml "$W/rules/policies/"
cp testdata/config/example.yaml "$W/rules/config.yaml"
sed 's/timeoutMillis: 500/timeoutMillis: 400/' testdata/config/example.yaml > "$W/rules/config-b.yaml"
cmp -s testdata/config/example.yaml "$W/rules/config-b.yaml" && { log "config-b.yaml is not a variant"; exit 1; }
cp "$W/rules/config.yaml" "$W/rules/config-a.yaml"

"$POOLGUARD" serve --namespaces-file "$W/namespaces.json" --config "$W/rules/config.yaml" \
  --policies-dir "$W/rules/policies" --tls-cert-file "$W/certs/tls.crt" --tls-key-file "$W/certs/tls.key" \
  --addr "127.0.0.1:$PG_PORT" --metrics-addr "127.0.0.1:$PG_METRICS_PORT" --audit-interval 0 \
  >"$W/poolguard.log" 2>&1 &
PID=$!
trap 'kill $PID 2>/dev/null || true; wait $PID 2>/dev/null || true' EXIT
for _ in $(seq 1 600); do
  curl -fs -o /dev/null "http://127.0.0.1:$PG_METRICS_PORT/readyz" && break
  kill -0 $PID 2>/dev/null || { log "poolguard exited"; tail "$W/poolguard.log" >&2; exit 1; }
  sleep 0.1
done

bodies=()
for f in "$W"/reviews/pg/*.json; do bodies+=(--body "$f"); done
SAMPLES=$W/samples.jsonl
: >"$SAMPLES"
windows=$(( SOAK_MINUTES * 60 / WINDOW_SECONDS ))
last_reload=$SECONDS
version=a
log "soak: $windows windows of ${WINDOW_SECONDS}s, mutate ${MUTATE_RATE}/s + validate ${VALIDATE_RATE}/s, reload every ${RELOAD_EVERY}s"
for ((i = 1; i <= windows; i++)); do
  if (( SECONDS - last_reload >= RELOAD_EVERY )); then
    version=$([ "$version" = a ] && echo b || echo a)
    cp "$W/rules/config-$version.yaml" "$W/rules/config.yaml.tmp" && mv "$W/rules/config.yaml.tmp" "$W/rules/config.yaml"
    last_reload=$SECONDS
  fi
  "$LOADGEN" --label mutate --url "https://localhost:$PG_PORT/mutate" --ca "$W/certs/ca.crt" "${bodies[@]}" \
    --mode open --rate "$MUTATE_RATE" --connections "$CONNS" --duration "$WINDOW_SECONDS" --threads 1 >"$W/m.json" &
  m=$!
  "$LOADGEN" --label validate --url "https://localhost:$PG_PORT/validate" --ca "$W/certs/ca.crt" "${bodies[@]}" \
    --mode open --rate "$VALIDATE_RATE" --connections "$CONNS" --duration "$WINDOW_SECONDS" --threads 1 >"$W/v.json"
  wait $m
  kill -0 $PID 2>/dev/null || { log "poolguard exited"; tail "$W/poolguard.log" >&2; exit 1; }
  rss=$(awk '/^VmRSS:/ {print $2}' /proc/$PID/status)
  threads=$(awk '/^Threads:/ {print $2}' /proc/$PID/status)
  fds=$(ls /proc/$PID/fd | wc -l)
  reloads=$(curl -fs "http://127.0.0.1:$PG_METRICS_PORT/metrics" | awk '/^poolguard_reloads_total/ {s += $2} END {print s + 0}')
  printf '{"window": %d, "t_s": %d, "rss_kib": %s, "threads": %s, "fds": %s, "reloads": %s, "mutate": %s, "validate": %s}\n' \
    "$i" "$SECONDS" "$rss" "$threads" "$fds" "$reloads" "$(cat "$W/m.json")" "$(cat "$W/v.json")" >>"$SAMPLES"
  (( i % 6 == 0 )) && log "window $i/$windows: RSS ${rss} KiB, fds $fds, threads $threads, reloads $reloads"
done
python3 "$B/soak_report.py" "$SAMPLES" "$R" "$WARMUP_WINDOWS" \
  "{\"minutes\": $SOAK_MINUTES, \"window_s\": $WINDOW_SECONDS, \"mutate_rate\": $MUTATE_RATE, \"validate_rate\": $VALIDATE_RATE, \"reload_every_s\": $RELOAD_EVERY, \"namespaces\": $NAMESPACES, \"cpus\": $(nproc), \"date\": \"$(date -u +%Y-%m-%dT%H:%M:%SZ)\"}"
