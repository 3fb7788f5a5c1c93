#!/usr/bin/env bash
# Where poolguard spends its CPU on /validate: poolguard pinned to the first PROFILE_CORES CPUs
# (default settings), the load generator on the next ones, closed loop on pods all different
# ("distinct", every request misses the remembered results; WORKLOAD=replicas for the hit path),
# and `perf record --call-graph dwarf` on the server for PROFILE_SECONDS. Writes the top frames by self time and by
# inclusive time to bench/results/profile-<workload>-<cores>c.txt, and the raw perf.data into
# bench/work/.
#
# Needs perf (Debian: linux-perf) and kernel.perf_event_paranoid <= 1 (or root). The release
# profile keeps line tables, so frames have names.
#
# Knobs (environment): PROFILE_CORES (1; a 2-core machine has room for 1), PROFILE_SECONDS (10),
#   CORE_POLICY (shipped; gatekeeper: a Gatekeeper template instead, as bench/cores.sh runs it,
#   written to profile-gatekeeper-<workload>-<cores>c.txt), WORKLOAD (distinct), CONNS (64),
#   NAMESPACES (10000), TOP (40), POOLGUARD_BIN LOADGEN_BIN
#   OPA_BIN (prebuilt binaries; OPA is only used by bench/prepare.sh's input check), PG_PORT
#   (18443), PG_METRICS_PORT (19090), OPA_PORT (18181), CARGO_TARGET_DIR (default: target/)
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
B=$ROOT/bench
W=$B/work
R=$B/results
mkdir -p "$W" "$R"

PROFILE_CORES=${PROFILE_CORES:-1}
PROFILE_SECONDS=${PROFILE_SECONDS:-10}
WORKLOAD=${WORKLOAD:-distinct}
CONNS=${CONNS:-64}
TOP=${TOP:-40}

log() { printf '[profile %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
command -v perf >/dev/null || { echo "profile.sh: perf is required (Debian: linux-perf)" >&2; exit 1; }
case $WORKLOAD in replicas) DIR=reviews ;; distinct) DIR=reviews-distinct ;;
  *) echo "profile.sh: WORKLOAD must be replicas or distinct, not '$WORKLOAD'" >&2; exit 1 ;; esac

SERVER_PID=
trap '[ -n "$SERVER_PID" ] && kill "$SERVER_PID" 2>/dev/null; wait 2>/dev/null || true' EXIT

# shellcheck source=bench/prepare.sh
. "$B/prepare.sh"

if ((PROFILE_CORES + 1 > ${#CPUS[@]})); then
  echo "profile.sh: PROFILE_CORES=$PROFILE_CORES needs $((PROFILE_CORES + 1)) CPUs; this machine gives ${#CPUS[@]}" >&2
  exit 1
fi
SERVER_CPUS=$(join "${CPUS[@]:0:PROFILE_CORES}")
LOADGEN_CPUS=("${CPUS[@]:PROFILE_CORES:8}")

taskset -c "$SERVER_CPUS" "${PG_CMD[@]}" >"$W/profile-poolguard.log" 2>&1 &
SERVER_PID=$!
for _ in $(seq 1 3000); do
  [ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$PG_METRICS_PORT/readyz" || true)" = 200 ] && break
  sleep 0.01
done

args=()
for f in "$W/$DIR/pg"/*.json; do args+=(--body "$f"); done
log "load: $WORKLOAD pods, $CONNS connections, on CPUs $(join "${LOADGEN_CPUS[@]}"); poolguard on $SERVER_CPUS"
taskset -c "$(join "${LOADGEN_CPUS[@]}")" "$LOADGEN" --label "profile:$WORKLOAD" --url "$PG_URL" --ca "$W/certs/ca.crt" \
  "${args[@]}" --seq-token seqno --mode closed --connections "$CONNS" --duration $((PROFILE_SECONDS + 3)) \
  --threads "${#LOADGEN_CPUS[@]}" >"$W/profile-load.json" &
LOAD_PID=$!
sleep 2
DATA=$W/perf-$CORE_POLICY-$WORKLOAD-${PROFILE_CORES}c.data
log "perf record (dwarf call graphs) on poolguard for ${PROFILE_SECONDS}s"
perf record -F 299 --call-graph dwarf,16384 -p "$SERVER_PID" -o "$DATA" -- sleep "$PROFILE_SECONDS" 2>/dev/null
wait "$LOAD_PID"
OUTFILE=$R/profile-$WORKLOAD-${PROFILE_CORES}c.txt
[ "$CORE_POLICY" = shipped ] || OUTFILE=$R/profile-$CORE_POLICY-$WORKLOAD-${PROFILE_CORES}c.txt
{
  echo "# poolguard /validate, $CORE_POLICY policies, $WORKLOAD pods, $PROFILE_CORES server core(s), ${PROFILE_SECONDS}s, $(git -C "$ROOT" rev-parse --short HEAD), $(date -u +%Y-%m-%dT%H:%MZ)"
  echo "# load: $(python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); print("%.0f req/s, p50 %.0f us" % (r["throughput_rps"], r["latency_us"]["p50"]))' "$W/profile-load.json")"
  echo "## self time"
  perf report -i "$DATA" --no-children --stdio --sort symbol --percent-limit 0.5 -g none 2>/dev/null |
    awk -v top="$TOP" '/^ +[0-9]/ && n++ < top' 
  echo "## inclusive time"
  perf report -i "$DATA" --children --stdio --sort symbol --percent-limit 2 -g none 2>/dev/null |
    awk -v top="$TOP" '/^ +[0-9]/ && n++ < top' 
} >"$OUTFILE"
cat "$OUTFILE"
