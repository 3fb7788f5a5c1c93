#!/usr/bin/env bash
# poolguard's alerting rules and its /metrics scrape, checked with Prometheus's own tool:
#
#   bash integration/monitoring/test.sh
#
# 1. promtool (integration/monitoring/promtool.sh: built from the pinned Prometheus Go module,
#    cached) checks the rules file (charts/poolguard/files/alerts.rules.yaml) and runs
#    `promtool test rules` over synthetic series (alerts.test.yaml here: every alert fires in one
#    case and stays silent in another);
# 2. starts a real poolguard (the binary cargo builds; POOLGUARD_BIN to use another) on free
#    loopback ports with the README tour's config, namespaces and policies, sends it a mutating
#    and a validating AdmissionReview, scrapes /metrics, and runs `promtool check metrics` over
#    the scrape.
# That every poolguard_ metric the rules and the dashboard
# (charts/poolguard/files/grafana-dashboard.json) read is one poolguard exports is checked by
# `cargo test --test referenced_metrics` (tests/referenced_metrics.rs, part of the test suite's
# cargo test step), against the registry poolguard serves on /metrics.
# Needs go (first run only) and curl. The server is stopped on exit.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."

log() { printf '[monitoring] %s\n' "$*" >&2; }
die() { log "FAIL: $*"; exit 1; }

rules=charts/poolguard/files/alerts.rules.yaml
promtool="$(bash integration/monitoring/promtool.sh | tail -n1)"
log "promtool: $("$promtool" --version 2>&1 | head -n1)"

work="$(mktemp -d "${TMPDIR:-/tmp}/poolguard-monitoring.XXXXXX")"
server_pid=""
cleanup() {
    if [[ -n "$server_pid" ]] && kill -0 "$server_pid" 2>/dev/null; then
        kill "$server_pid" 2>/dev/null || true
        wait "$server_pid" 2>/dev/null || true
    fi
    rm -rf "$work"
}
trap cleanup EXIT

# --- 1. the rules -------------------------------------------------------------------------------
"$promtool" check rules "$rules" || die "promtool check rules $rules"
"$promtool" test rules integration/monitoring/alerts.test.yaml || die "promtool test rules"
log "alerts tested: $(grep -c '^ *- alert:' "$rules") alerts, $(grep -c '^  - name:' integration/monitoring/alerts.test.yaml) cases"

# --- 2. a real scrape ---------------------------------------------------------------------------
if [[ -n "${POOLGUARD_BIN:-}" ]]; then
    poolguard="${POOLGUARD_BIN}"
else
    cargo build --locked --quiet --bin poolguard
    target_dir="${CARGO_TARGET_DIR:-target}"
    poolguard="${target_dir}/debug/poolguard"
fi
[[ -x "$poolguard" ]] || die "no poolguard binary at ${poolguard}"
# shellcheck source=integration/controlplane/free-port.sh
source integration/controlplane/free-port.sh
pg_port="" metrics_port=""
pick_port pg_port
pick_port metrics_port
"$poolguard" certs --out-dir "$work/certs" --ip 127.0.0.1 --dns-name localhost >/dev/null
"$poolguard" serve --addr "127.0.0.1:${pg_port}" --metrics-addr "127.0.0.1:${metrics_port}" \
    --tls-cert-file "$work/certs/tls.crt" --tls-key-file "$work/certs/tls.key" \
    --config testdata/config/example.yaml --policies-dir policies \
    --namespaces-file testdata/namespaces.yaml >"$work/server.log" 2>&1 &
server_pid=$!
if ! curl --retry 30 --retry-connrefused --retry-delay 1 -sf "http://127.0.0.1:${metrics_port}/readyz" >/dev/null; then
    tail -n 20 "$work/server.log" >&2
    die "poolguard did not become ready"
fi
for hook in mutate:testdata/reviews/pod-create-mapped.json validate:testdata/reviews/deployment-create-bad-image.json; do
    curl -sf --cacert "$work/certs/ca.crt" --data-binary "@${hook#*:}" \
        "https://localhost:${pg_port}/${hook%%:*}" >/dev/null || die "POST /${hook%%:*} failed"
done
curl -sf "http://127.0.0.1:${metrics_port}/metrics" >"$work/metrics.txt" || die "GET /metrics failed"
log "scraped $(grep -c '^# TYPE' "$work/metrics.txt") metric families, $(grep -vc '^#' "$work/metrics.txt") samples"
# promtool check metrics lints names, HELP texts, units and duplicates. It reads the Prometheus
# text format, where a counter's HELP names its sample (NAME_total); poolguard serves OpenMetrics,
# where HELP and TYPE name the family (NAME) and the sample is NAME_total. So "NAME_total no help
# text" is excused exactly where the scrape declares NAME as a counter with a HELP text; any other
# finding fails.
lint_rc=0
"$promtool" check metrics <"$work/metrics.txt" >"$work/lint.txt" 2>&1 || lint_rc=$?
cat "$work/lint.txt" >&2
excused=0
while IFS= read -r finding; do
    [[ -n "$finding" ]] || continue
    if [[ "$finding" =~ ^([a-zA-Z_:][a-zA-Z0-9_:]*)_total\ no\ help\ text$ ]] &&
        grep -q "^# TYPE ${BASH_REMATCH[1]} counter\$" "$work/metrics.txt" &&
        grep -q "^# HELP ${BASH_REMATCH[1]} ." "$work/metrics.txt"; then
        excused=$((excused + 1))
        continue
    fi
    die "promtool check metrics: ${finding}"
done <"$work/lint.txt"
((lint_rc == 0 || excused > 0)) || die "promtool check metrics failed (exit ${lint_rc}) without a finding"
log "promtool check metrics: no problems (${excused} OpenMetrics counters' HELP, on the family, excused)"

log "PASSED"
