# Sourced by bench/run.sh and bench/cores.sh: builds (or takes) poolguard, the load generator and
# OPA, and writes the benchmark inputs into $W.
# Reads: ROOT B W TARGET OPA_VERSION OPA_DIR NAMESPACES and log(). Sets: POOLGUARD LOADGEN OPA.
# POOLGUARD_BIN, LOADGEN_BIN and OPA_BIN name prebuilt binaries instead (for a machine that
# reaches no registry: copy them there with the repository).

if [ -n "${POOLGUARD_BIN:-}" ] && [ -n "${LOADGEN_BIN:-}" ]; then
  POOLGUARD=$POOLGUARD_BIN LOADGEN=$LOADGEN_BIN
else
  log "building poolguard (release) and the load generator"
  cargo build --release --locked --bin poolguard
  cargo build --release --locked -p poolguard-loadgen
  POOLGUARD=$TARGET/release/poolguard
  LOADGEN=$TARGET/release/poolguard-loadgen
fi

if [ -n "${OPA_BIN:-}" ]; then
  OPA=$OPA_BIN
else
  if [ ! -x "$OPA_DIR/opa" ]; then
    log "building OPA $OPA_VERSION from its Go module into $OPA_DIR (first time only; several minutes on 2 cores)"
    mkdir -p "$OPA_DIR"
    (cd "$W" && GOBIN=$OPA_DIR nice go install "github.com/open-policy-agent/opa@$OPA_VERSION")
  fi
  OPA=$OPA_DIR/opa
fi

python3 "$B/gen.py" "$W" "$NAMESPACES" >&2
"$POOLGUARD" certs --out-dir "$W/certs" --dns-name localhost --ip 127.0.0.1 >&2
log "opa test bench/opa (the Rego written for this benchmark)"
"$OPA" test "$B/opa" >&2

# The two servers as the benchmarks start them (a caller may put e.g. `taskset -c 0-3` before).
PG_CMD=("$POOLGUARD" serve --namespaces-file "$W/namespaces.json" --config "$ROOT/testdata/config/example.yaml"
  --policies-dir "$ROOT/policies" --tls-cert-file "$W/certs/tls.crt" --tls-key-file "$W/certs/tls.key"
  --addr "127.0.0.1:$PG_PORT" --metrics-addr "127.0.0.1:$PG_METRICS_PORT")
OPA_CMD=("$OPA" run --server --disable-telemetry --log-level error --addr "127.0.0.1:$OPA_PORT"
  --tls-cert-file "$W/certs/tls.crt" --tls-private-key-file "$W/certs/tls.key"
  "$B/opa/poolguard.rego" "$W/opa-data.json")
PG_URL=https://localhost:$PG_PORT/validate
OPA_URL=https://localhost:$OPA_PORT/v1/data/poolguard/bench/decision
