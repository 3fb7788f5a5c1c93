# Sourced by bench/run.sh, bench/cores.sh and bench/profile.sh: the knobs they share (defaults
# below, the environment's values when given), builds (or takes) poolguard, the load generator and
# OPA, and writes the benchmark inputs into $W.
# Reads: ROOT B W and log(). Sets: those knobs, POOLGUARD LOADGEN NULLSERVER OPA, the server commands and
# URLs, CPUS (the CPUs the script may use, in order) and join (a list with commas); with
# CORE_POLICY=gatekeeper (below), the servers' commands run a Gatekeeper template instead.
# POOLGUARD_BIN, LOADGEN_BIN, NULLSERVER_BIN (default: beside LOADGEN_BIN) and OPA_BIN name
# prebuilt binaries instead (for a machine that
# reaches no registry: copy them there with the repository).

NAMESPACES=${NAMESPACES:-10000}
OPA_VERSION=${OPA_VERSION:-v1.22.2}
PG_PORT=${PG_PORT:-18443}
PG_METRICS_PORT=${PG_METRICS_PORT:-19090}
OPA_PORT=${OPA_PORT:-18181}
NULL_PORT=${NULL_PORT:-18543}
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
export CARGO_TARGET_DIR=$TARGET
OPA_DIR=${OPA_DIR:-$HOME/.cache/poolguard/opa/$OPA_VERSION}

# The CPUs this script may use, in order.
mapfile -t CPUS < <(python3 -c 'import os; print(*sorted(os.sched_getaffinity(0)), sep="\n")')
join() { local IFS=,; echo "$*"; }

if [ -n "${POOLGUARD_BIN:-}" ] && [ -n "${LOADGEN_BIN:-}" ]; then
  POOLGUARD=$POOLGUARD_BIN LOADGEN=$LOADGEN_BIN
  NULLSERVER=${NULLSERVER_BIN:-$(dirname "$LOADGEN_BIN")/nullserver}
else
  log "building poolguard (release), the load generator and the null server"
  cargo build --release --locked --bin poolguard
  cargo build --release --locked -p poolguard-loadgen
  POOLGUARD=$TARGET/release/poolguard
  LOADGEN=$TARGET/release/poolguard-loadgen
  NULLSERVER=$TARGET/release/nullserver
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

# The two servers as the benchmarks start them (a caller may put e.g. `taskset -c 0-3` before);
# PG_LISTEN and OPA_LISTEN are their addresses and certificates, for a caller that starts them
# with other policies.
PG_LISTEN=(--tls-cert-file "$W/certs/tls.crt" --tls-key-file "$W/certs/tls.key"
  --addr "127.0.0.1:$PG_PORT" --metrics-addr "127.0.0.1:$PG_METRICS_PORT")
OPA_LISTEN=(--disable-telemetry --log-level error --addr "127.0.0.1:$OPA_PORT"
  --tls-cert-file "$W/certs/tls.crt" --tls-private-key-file "$W/certs/tls.key")
PG_CMD=("$POOLGUARD" serve --namespaces-file "$W/namespaces.json" --config "$ROOT/testdata/config/example.yaml"
  --policies-dir "$ROOT/policies" "${PG_LISTEN[@]}")
OPA_CMD=("$OPA" run --server "${OPA_LISTEN[@]}" "$B/opa/poolguard.rego" "$W/opa-data.json")
PG_URL=https://localhost:$PG_PORT/validate
# The floor: an AdmissionReview server on poolguard's HTTPS loop that parses each review and
# allows it (bench/loadgen/src/bin/nullserver.rs).
NULL_CMD=("$NULLSERVER" --addr "127.0.0.1:$NULL_PORT" --tls-cert-file "$W/certs/tls.crt" --tls-key-file "$W/certs/tls.key")
NULL_URL=https://localhost:$NULL_PORT/validate
OPA_URL=https://localhost:$OPA_PORT/v1/data/poolguard/bench/decision

# CORE_POLICY=gatekeeper: both servers run a Gatekeeper ConstraintTemplate and a constraint of it
# instead of the shipped policies: testdata/gatekeeper/allowedrepos's K8sAllowedRepos, its
# constraint given the repositories the shipped benchmark allows (so the same pods pass and
# fail); poolguard from --gatekeeper-dir with no SIT policy, OPA the template's Rego with
# Gatekeeper's input (bench/opa/gatekeeper.rego).
CORE_POLICY=${CORE_POLICY:-shipped}
case "$CORE_POLICY" in
  shipped) ;;
  gatekeeper)
    GK=$W/gatekeeper/constraints
    mkdir -p "$W/gatekeeper/policies" "$GK"
    printf 'namespaceLabel: agentpool\nnodeSelectorKey: agentpool\n' >"$W/gatekeeper/config.yaml"
    python3 - "$ROOT/testdata/gatekeeper/allowedrepos" "$W/gatekeeper" <<'PY'
import json, shutil, sys, yaml
source, out = sys.argv[1:3]
template = yaml.safe_load(open(f"{source}/template.yaml"))
constraint = yaml.safe_load(open(f"{source}/constraint.yaml"))
constraint["spec"]["parameters"] = {"repos": ["registry.example.com/", "registry.k8s.io/"]}
shutil.copy(f"{source}/template.yaml", f"{out}/constraints/template.yaml")
yaml.safe_dump(constraint, open(f"{out}/constraints/constraint.yaml", "w"))
open(f"{out}/template.rego", "w").write(template["spec"]["targets"][0]["rego"])
json.dump({"parameters": constraint["spec"]["parameters"]}, open(f"{out}/data.json", "w"))
PY
    PG_CMD=("$POOLGUARD" serve --namespaces-file "$W/namespaces.json" --config "$W/gatekeeper/config.yaml"
      --policies-dir "$W/gatekeeper/policies" --gatekeeper-dir "$GK" "${PG_LISTEN[@]}")
    OPA_CMD=("$OPA" run --server --v0-compatible "${OPA_LISTEN[@]}"
      "$W/gatekeeper/template.rego" "$B/opa/gatekeeper.rego" "$W/gatekeeper/data.json")
    OPA_URL=https://localhost:$OPA_PORT/v1/data/bench/gatekeeper/violations
    ;;
  *) echo "CORE_POLICY is shipped or gatekeeper, not $CORE_POLICY" >&2; exit 2 ;;
esac
