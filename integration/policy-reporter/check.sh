#!/usr/bin/env bash
# Check that Policy Reporter (Kyverno's UI/API over policy reports) reads the reports poolguard's
# background audit wrote:
#
#   integration/policy-reporter/check.sh KUBECONFIG REPORT_API     # policyreport | openreports
#
# 1. Reads poolguard's reports of REPORT_API from the cluster (label
#    app.kubernetes.io/managed-by=poolguard): wgpolicyk8s.io/v1alpha2 PolicyReports and
#    ClusterPolicyReports, or openreports.io/v1alpha1 Reports and ClusterReports.
# 2. Starts Policy Reporter (build.sh) against the cluster on a free port, with its REST API and
#    its metrics on (a config file, written here). It reads every report API group the cluster
#    serves, found by discovery (no flag or setting chooses one), so poolguard's reports of the
#    other API must not be in the cluster at the same time: this is checked first. Result IDs are
#    Policy Reporter's default (poolguard's resultID property, see below).
# 3. Waits until Policy Reporter lists and counts as many poolguard results (source poolguard) as
#    the reports hold, then checks that each result poolguard wrote is listed by its REST API once
#    per time it was written, with the same policy, rule, result (status), resource (kind,
#    namespace, name) and message, and that it lists no other poolguard result:
#      GET /v1/namespaced-resources/results?sources=poolguard   results of a namespaced resource
#      GET /v1/cluster-resources/results?sources=poolguard      results of a cluster-scoped one
# 4. Checks that its /metrics counts them per result: metrics mode `custom` with the labels
#    namespace (the report's), report, policy, rule, status, kind, name (the result's resource)
#    and source; each series of policy_report_result (namespaced reports) and
#    cluster_policy_report_result (cluster reports, no namespace label) counts the results with
#    its labels, so every series with source="poolguard" must equal the number of results the
#    reports hold with those labels, and there must be no other.
# Prints a summary (results per status: as written, as the REST API lists them, as /metrics counts
# them) on stdout; every mismatch is one line on stderr, and then the exit status is 1 (2 for bad
# usage or a failure to start). Policy Reporter is stopped on exit.
#
# Environment: KUBECTL (default: kubectl on PATH, else the control plane's from
# integration/controlplane/build.sh), POOLGUARD_POLICY_REPORTER (a binary to use, see build.sh),
# POOLGUARD_POLICY_REPORTER_TIMEOUT (seconds to wait for Policy Reporter, default 90),
# POOLGUARD_POLICY_REPORTER_SETTLE (compare once its counts have not changed for this long,
# default 10 s).
# Needs curl and jq.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"

log() { printf '[policy-reporter] %s\n' "$*" >&2; }
die() { log "error: $*"; exit 2; }

[[ $# -eq 2 ]] || die "usage: $0 KUBECONFIG policyreport|openreports"
kubeconfig="$1"
api="$2"
[[ -r "${kubeconfig}" ]] || die "cannot read the kubeconfig ${kubeconfig}"
kubeconfig="$(cd "$(dirname "${kubeconfig}")" && pwd)/$(basename "${kubeconfig}")"
case "${api}" in
policyreport)
    group=wgpolicyk8s.io/v1alpha2 namespaced=policyreports.wgpolicyk8s.io
    cluster=clusterpolicyreports.wgpolicyk8s.io other_group=openreports.io/v1alpha1
    other_namespaced=reports.openreports.io other_cluster=clusterreports.openreports.io
    ;;
openreports)
    group=openreports.io/v1alpha1 namespaced=reports.openreports.io
    cluster=clusterreports.openreports.io other_group=wgpolicyk8s.io/v1alpha2
    other_namespaced=policyreports.wgpolicyk8s.io other_cluster=clusterpolicyreports.wgpolicyk8s.io
    ;;
*) die "REPORT_API must be policyreport or openreports, not '${api}'" ;;
esac
for tool in curl jq; do
    command -v "${tool}" >/dev/null || die "${tool} is required"
done
if [[ -z "${KUBECTL:-}" ]]; then
    if command -v kubectl >/dev/null; then
        # The path: the function below is named kubectl too.
        KUBECTL="$(command -v kubectl)"
    else
        KUBECTL="$("${root}/integration/controlplane/build.sh" | tail -n1)/kubectl"
    fi
fi
kubectl() { "${KUBECTL}" --kubeconfig "${kubeconfig}" "$@"; }
timeout_s="${POOLGUARD_POLICY_REPORTER_TIMEOUT:-90}"

pr_bin="$("${root}/integration/policy-reporter/build.sh" | tail -n1)"
[[ -x "${pr_bin}" ]] || die "build.sh gave no Policy Reporter binary"

work="$(mktemp -d "${TMPDIR:-/tmp}/poolguard-policy-reporter.XXXXXX")"
pr_pid=""
cleanup() {
    if [[ -n "${pr_pid}" ]] && kill -0 "${pr_pid}" 2>/dev/null; then
        kill "${pr_pid}" 2>/dev/null || true
        wait "${pr_pid}" 2>/dev/null || true
    fi
    rm -rf "${work}"
}
trap cleanup EXIT

# --- 1. what poolguard wrote -------------------------------------------------------------------
selector=app.kubernetes.io/managed-by=poolguard
kubectl get --raw "/apis/${group}" >/dev/null 2>&1 ||
    die "the cluster does not serve ${group}: install the report CRDs (charts/poolguard, audit.reportApi=${api})"
kubectl get "${namespaced}" -A -l "${selector}" -o json >"${work}/namespaced.json" ||
    die "kubectl get ${namespaced} failed"
kubectl get "${cluster}" -l "${selector}" -o json >"${work}/cluster.json" ||
    die "kubectl get ${cluster} failed"
# Policy Reporter would also read poolguard's reports of the other API and list them alongside.
if kubectl get --raw "/apis/${other_group}" >/dev/null 2>&1; then
    for kind in "${other_namespaced}" "${other_cluster}"; do
        n="$(kubectl get "${kind}" -A -l "${selector}" -o name 2>/dev/null | wc -l)"
        ((n == 0)) || die "the cluster also holds ${n} poolguard ${kind}: Policy Reporter reads every report API the cluster serves, so it would list those too; delete them first"
    done
fi

# One record per result: the report, and the resource as Policy Reporter takes it (the result's
# first resource, else the report's scope; its namespace, else the report's).
jq -s '[.[].items[] | . as $r | .results // [] | .[] |
    ((.resources // [])[0] // $r.scope // {}) as $res |
    {reportNamespace: ($r.metadata.namespace // ""), report: $r.metadata.name,
     policy: (.policy // ""), rule: (.rule // ""), status: (.result // ""),
     kind: ($res.kind // ""), name: ($res.name // ""),
     namespace: (if ($res.namespace // "") != "" then $res.namespace else ($r.metadata.namespace // "") end),
     message: (.message // "")}]' \
    "${work}/namespaced.json" "${work}/cluster.json" >"${work}/expected.json"
reports="$(jq -s '[.[].items[]] | length' "${work}/namespaced.json" "${work}/cluster.json")"
expected="$(jq length "${work}/expected.json")"
((reports > 0)) || die "the cluster holds no poolguard ${namespaced} or ${cluster} (label ${selector}): run the audit first"
log "poolguard wrote ${expected} results in ${reports} reports (${namespaced}, ${cluster})"

# --- 2. Policy Reporter ------------------------------------------------------------------------
# shellcheck source=integration/controlplane/free-port.sh
source "${root}/integration/controlplane/free-port.sh"
port=""
pick_port port
cat >"${work}/config.yaml" <<'EOF'
rest:
  enabled: true
metrics:
  enabled: true
  mode: custom
  customLabels: [namespace, report, policy, rule, status, kind, name, source]
leaderElection:
  enabled: false
EOF
# Policy Reporter keys each result it stores by an ID: the result's `properties.resultID` when it
# has one, else a hash of the report's scope (poolguard's namespace report is scoped to its
# Namespace), policy, rule, result, category and message, under which two objects of a namespace
# with the same outcome and message would be stored once. poolguard writes a resultID per result,
# so Policy Reporter's default settings are what is checked here.
templates="$(dirname "${pr_bin}")/templates"
template_args=()
[[ -d "${templates}" ]] && template_args=(--template-dir "${templates}")
# Its working directory is the scratch directory: it would read a config.yaml found there, and
# keeps its SQLite database (-d) there.
(cd "${work}" && exec "${pr_bin}" run -k "${kubeconfig}" -c "${work}/config.yaml" -p "${port}" \
    -d "${work}/policy-reporter.db" -r -m "${template_args[@]}") >"${work}/policy-reporter.log" 2>&1 &
pr_pid=$!
base="http://127.0.0.1:${port}"
fail_start() {
    tail -n 20 "${work}/policy-reporter.log" >&2 || true
    die "$*"
}

deadline=$((SECONDS + timeout_s))
until curl -sf "${base}/ready" >/dev/null 2>&1; do
    kill -0 "${pr_pid}" 2>/dev/null || fail_start "Policy Reporter exited (its log above)"
    ((SECONDS < deadline)) || fail_start "Policy Reporter was not ready within ${timeout_s}s"
    sleep 0.5
done

# --- 3. its REST API and metrics, once it lists them all -----------------------------------------
fetch() {
    curl -sf "${base}/v1/namespaced-resources/results?sources=poolguard" >"${work}/rest-namespaced.json" &&
        curl -sf "${base}/v1/cluster-resources/results?sources=poolguard" >"${work}/rest-cluster.json" &&
        curl -sf "${base}/metrics" >"${work}/metrics.txt"
}
# The series of both gauges, labels unescaped (\\, \" and \n in the text format).
metrics_json() {
    jq -R -n '[inputs | select(test("^(cluster_)?policy_report_result\\{")) |
        capture("^(?<metric>[a-z_]+)\\{(?<labels>.*)\\} (?<value>[^ ]+)$") |
        {metric, value: (.value | tonumber),
         labels: ([.labels | scan("([a-zA-Z_][a-zA-Z0-9_]*)=\"((?:[^\"\\\\]|\\\\.)*)\"") |
                   {key: .[0], value: (.[1] | gsub("\\\\(?<c>.)"; if .c == "n" then "\n" else .c end))}] |
                  from_entries)} |
        select(.labels.source == "poolguard")]' "${work}/metrics.txt"
}
# Until both match, or neither has changed for POOLGUARD_POLICY_REPORTER_SETTLE seconds (default
# 10: its informers have synced, and it reads a few reports in well under a second), or the
# timeout.
settle_s="${POOLGUARD_POLICY_REPORTER_SETTLE:-10}"
listed=-1 counted=-1 seen="" changed=${SECONDS}
while :; do
    if fetch; then
        listed="$(jq -s 'map(.count) | add' "${work}/rest-namespaced.json" "${work}/rest-cluster.json")"
        metrics_json >"${work}/metrics.json"
        counted="$(jq 'map(.value) | add // 0' "${work}/metrics.json")"
        ((listed == expected && counted == expected)) && break
        [[ "${seen}" == "${listed} ${counted}" ]] || { seen="${listed} ${counted}"; changed=${SECONDS}; }
    fi
    kill -0 "${pr_pid}" 2>/dev/null || fail_start "Policy Reporter exited (its log above)"
    if ((SECONDS >= deadline)) || { [[ -n "${seen}" ]] && ((SECONDS - changed >= settle_s)); }; then
        log "Policy Reporter lists ${listed} and its /metrics counts ${counted} of the ${expected} results after $((SECONDS - deadline + timeout_s))s (comparing them)"
        break
    fi
    sleep 1
done
fetch || fail_start "Policy Reporter's REST API or /metrics did not answer"
metrics_json >"${work}/metrics.json"

# Each result's key, and how often poolguard wrote it and Policy Reporter lists it.
jq -n -r --slurpfile expected "${work}/expected.json" \
    --slurpfile ns "${work}/rest-namespaced.json" --slurpfile cl "${work}/rest-cluster.json" '
    def key: [.namespace, .kind, .name, .policy, .rule, .status, .message];
    def tally: reduce .[] as $x ({}; .[$x | key | tojson] += 1);
    ($expected[0] | tally) as $w |
    ([$ns[0].items[], $cl[0].items[]] | map(.namespace //= "") | tally) as $h |
    (($w + $h) | keys[]) as $k |
    select(($w[$k] // 0) != ($h[$k] // 0)) |
    ($k | fromjson) as $f |
    "REST: \(if $f[0] == "" then "" else "\($f[0])/" end)\($f[1])/\($f[2]) policy=\($f[3]) rule=\($f[4]) result=\($f[5]) message=\($f[6] | tojson): poolguard wrote \($w[$k] // 0), Policy Reporter lists \($h[$k] // 0)"
    ' >"${work}/mismatches.txt"
jq -n -r --slurpfile expected "${work}/expected.json" --slurpfile metrics "${work}/metrics.json" '
    def key: [.metric, .namespace, .report, .policy, .rule, .status, .kind, .name];
    ($expected[0] | reduce .[] as $x ({};
        .[$x | .metric = (if .reportNamespace == "" then "cluster_policy_report_result" else "policy_report_result" end) |
            .namespace = .reportNamespace | key | tojson] += 1)) as $w |
    ($metrics[0] | reduce .[] as $m ({}; .[$m.labels + {metric: $m.metric} | .namespace //= "" | key | tojson] += $m.value)) as $h |
    (($w + $h) | keys[]) as $k |
    select(($w[$k] // 0) != ($h[$k] // 0)) |
    ($k | fromjson) as $f |
    "/metrics: \($f[0]){\(if $f[1] == "" then "" else "namespace=\($f[1] | tojson)," end)report=\($f[2] | tojson),policy=\($f[3] | tojson),rule=\($f[4] | tojson),status=\($f[5] | tojson),kind=\($f[6] | tojson),name=\($f[7] | tojson)}: poolguard wrote \($w[$k] // 0) such results, the Policy Reporter series is \($h[$k] // "absent")"
    ' >>"${work}/mismatches.txt"

# --- 4. the summary ----------------------------------------------------------------------------
by_status() { jq -r "${1} | group_by(.) | map(\"\\(.[0]) \\(length)\") | join(\", \") | if . == \"\" then \"none\" else . end"; }
written="$(by_status 'map(.status)' <"${work}/expected.json")"
rest="$(jq -s '[.[].items[].status]' "${work}/rest-namespaced.json" "${work}/rest-cluster.json" | by_status '.')"
metric_status="$(jq -r 'group_by(.labels.status) | map("\(.[0].labels.status) \(map(.value) | add)") | join(", ") | if . == "" then "none" else . end' "${work}/metrics.json")"
n_ns="$(jq .count "${work}/rest-namespaced.json")"
n_cl="$(jq .count "${work}/rest-cluster.json")"
m_ns="$(jq '[.[] | select(.metric == "policy_report_result") | .value] | add // 0' "${work}/metrics.json")"
m_cl="$(jq '[.[] | select(.metric == "cluster_policy_report_result") | .value] | add // 0' "${work}/metrics.json")"
printf 'policy-reporter %s: poolguard wrote %s results in %s reports: %s\n' "${api}" "${expected}" "${reports}" "${written}"
printf 'policy-reporter %s: REST lists %s (namespaced %s, cluster %s): %s\n' "${api}" "$((n_ns + n_cl))" "${n_ns}" "${n_cl}" "${rest}"
printf 'policy-reporter %s: /metrics counts %s (policy_report_result %s, cluster_policy_report_result %s): %s\n' \
    "${api}" "$((m_ns + m_cl))" "${m_ns}" "${m_cl}" "${metric_status}"
if [[ -s "${work}/mismatches.txt" ]]; then
    while IFS= read -r line; do log "mismatch: ${line}"; done <"${work}/mismatches.txt"
    log "FAIL: $(wc -l <"${work}/mismatches.txt") mismatches between poolguard's ${api} reports and Policy Reporter"
    exit 1
fi
log "ok: every result poolguard wrote (${api}) is in Policy Reporter's REST API and counted by its /metrics"
