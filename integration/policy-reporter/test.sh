#!/usr/bin/env bash
# Policy Reporter reads the reports poolguard's background audit writes, for both report APIs:
#
#   bash integration/policy-reporter/test.sh
#
# 1. Builds (or reuses) Policy Reporter (build.sh) and starts a throwaway control plane
#    (integration/controlplane/start.sh: etcd and kube-apiserver on loopback, no controllers).
# 2. Creates, with no webhook registered, three audited namespaces (label
#    policy-reporter-test=true): two with a pool (agentpool=pool1, agentpool=pool2), one without;
#    in them Pods and Deployments that pass and fail the example config's policies
#    (testdata/config/example.yaml: allowedrepositories allows registry.example.com/ and
#    registry.k8s.io/, latesttag refuses :latest and depends on allowedrepositories) and
#    placement (a pod without its pool's selector, or with another pool's). A Gatekeeper
#    constraint (testdata/gatekeeper/namespaceteam's template) asks the audited Namespaces for a
#    `team` label, so the cluster report has results too: one namespace has it, two do not.
# 3. For each report API, policyreport then openreports: installs the CRDs the chart ships for
#    it (charts/poolguard templates/report-crds.yaml with audit.reportApi set), runs `poolguard
#    controller` with the audit on (its first pass runs as it takes the Lease, the next one in an
#    hour), waits until poolguard_audit_runs_total{result="success"} counts that pass, stops it,
#    and runs check.sh against the cluster; then deletes those CRDs (and with them the reports),
#    since Policy Reporter reads every report API the cluster serves.
# poolguard is the binary cargo builds (POOLGUARD_BIN to use another); helm comes from
# integration/helm/helm.sh. Everything is stopped on exit. Needs curl and jq.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."

log() { printf '[policy-reporter-test] %s\n' "$*" >&2; }
die() { log "FAIL: $*"; exit 1; }

for tool in curl jq; do
    command -v "${tool}" >/dev/null || die "${tool} is required"
done
if [[ -n "${POOLGUARD_BIN:-}" ]]; then
    poolguard="${POOLGUARD_BIN}"
else
    cargo build --locked --quiet --bin poolguard
    poolguard="${CARGO_TARGET_DIR:-target}/debug/poolguard"
fi
[[ -x "${poolguard}" ]] || die "no poolguard binary at ${poolguard}"
helm="${HELM:-$(bash integration/helm/helm.sh | tail -n1)}"
# Built before the control plane starts: a cold build takes minutes.
POOLGUARD_POLICY_REPORTER="$(integration/policy-reporter/build.sh | tail -n1)"
export POOLGUARD_POLICY_REPORTER

work="$(mktemp -d "${TMPDIR:-/tmp}/poolguard-policy-reporter-test.XXXXXX")"
state=""
controller_pid=""
stop_controller() {
    if [[ -n "${controller_pid}" ]] && kill -0 "${controller_pid}" 2>/dev/null; then
        kill -TERM "${controller_pid}" 2>/dev/null || true
        wait "${controller_pid}" 2>/dev/null || true
    fi
    controller_pid=""
}
cleanup() {
    stop_controller
    if [[ -n "${state}" ]]; then
        bash integration/controlplane/stop.sh "${state}" --purge >/dev/null 2>&1 || true
    fi
    rm -rf "${work}"
}
trap cleanup EXIT

start=${SECONDS}
state="$(bash integration/controlplane/start.sh "${work}/controlplane" | tail -n1)"
# shellcheck source=/dev/null
source "${state}/env"
export KUBECONFIG
KUBECTL="${POOLGUARD_CP_BIN}/kubectl"
export KUBECTL
kubectl() { "${KUBECTL}" --request-timeout=20s "$@"; }
log "control plane up in $((SECONDS - start))s"

# --- the objects the audit judges ---------------------------------------------------------------
pod() { # namespace name image [pool of its nodeSelector]
    local selector=""
    [[ -n "${4:-}" ]] && selector="
  nodeSelector: {agentpool: ${4}}"
    printf -- '---
apiVersion: v1
kind: Pod
metadata: {name: %s, namespace: %s}
spec:%s
  containers: [{name: app, image: "%s"}]
' "$2" "$1" "${selector}" "$3"
}
deployment() { # namespace name image
    printf -- '---
apiVersion: apps/v1
kind: Deployment
metadata: {name: %s, namespace: %s}
spec:
  selector: {matchLabels: {app: %s}}
  template:
    metadata: {labels: {app: %s}}
    spec:
      containers: [{name: app, image: "%s"}]
' "$2" "$1" "$2" "$2" "$3"
}
namespace() { # name labels
    printf -- '---
apiVersion: v1
kind: Namespace
metadata:
  name: %s
  labels: {policy-reporter-test: "true"%s}
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: default, namespace: %s}
' "$1" "${2:+, $2}" "$1"
}
{
    namespace pr-pool1 'agentpool: pool1, team: apps'
    namespace pr-pool2 'agentpool: pool2'
    namespace pr-nopool ''
} >"${work}/namespaces.yaml"
{
    pod pr-pool1 good registry.example.com/app:1.0 pool1
    pod pr-pool1 latest-tag registry.k8s.io/pause:latest pool1
    pod pr-pool1 foreign docker.io/library/nginx:1.27
    deployment pr-pool1 web registry.k8s.io/pause:3.10
    deployment pr-pool1 tools docker.io/library/busybox:latest
    pod pr-pool2 wrong-pool registry.example.com/dev/tool:latest pool1
    deployment pr-pool2 api registry.example.com/api:2.1
    pod pr-nopool loose registry.example.com/app:1.0
} >"${work}/objects.yaml"
# The Gatekeeper constraint over the audited Namespaces (cluster-scoped: the cluster report).
mkdir -p "${work}/gatekeeper"
cp testdata/gatekeeper/namespaceteam/template.yaml "${work}/gatekeeper/template.yaml"
cat >"${work}/gatekeeper/constraint.yaml" <<'EOF'
apiVersion: constraints.gatekeeper.sh/v1beta1
kind: NamespaceTeam
metadata:
  name: namespaces-need-a-team
spec:
  enforcementAction: warn
  match:
    kinds: [{apiGroups: [""], kinds: ["Namespace"]}]
    labelSelector: {matchLabels: {policy-reporter-test: "true"}}
  parameters:
    label: team
EOF
kubectl apply -f "${work}/namespaces.yaml" >/dev/null || die "creating the namespaces failed"
kubectl apply -f "${work}/objects.yaml" >/dev/null || die "creating the Pods and Deployments failed"
log "created $(grep -c '^kind: Namespace' "${work}/namespaces.yaml") namespaces, $(grep -c '^kind: Pod' "${work}/objects.yaml") Pods, $(grep -c '^kind: Deployment' "${work}/objects.yaml") Deployments"

# --- one report API ----------------------------------------------------------------------------
# shellcheck source=integration/controlplane/free-port.sh
source integration/controlplane/free-port.sh
audit_with() { # report API
    local api="$1" crds="${work}/report-crds-$1.yaml" port="" deadline runs t0=${SECONDS}
    "${helm}" template poolguard charts/poolguard --show-only templates/report-crds.yaml \
        --set "audit.reportApi=${api}" >"${crds}" || die "rendering the ${api} report CRDs from charts/poolguard failed"
    kubectl apply -f "${crds}" >/dev/null || die "installing the ${api} report CRDs failed"
    kubectl wait --for condition=established --timeout=30s -f "${crds}" >/dev/null ||
        die "the ${api} report CRDs were not established"

    pick_port port
    "${poolguard}" controller --kubeconfig "${KUBECONFIG}" --metrics-addr "127.0.0.1:${port}" \
        --config testdata/config/example.yaml --policies-dir policies \
        --gatekeeper-dir "${work}/gatekeeper" \
        --audit-interval 1h --audit-namespace-selector policy-reporter-test=true \
        --report-api "${api}" --lease-namespace default --lease-name "poolguard-audit-${api}" \
        --lease-identity "policy-reporter-test-${api}" >"${work}/controller-${api}.log" 2>&1 &
    controller_pid=$!
    deadline=$((SECONDS + 60))
    while :; do
        runs="$(curl -sf "http://127.0.0.1:${port}/metrics" 2>/dev/null |
            sed -nE 's/^poolguard_audit_runs_total\{result="(success|failure)"\} ([0-9.]+).*/\1 \2/p' || true)"
        grep -qE '^success [1-9]' <<<"${runs}" && break
        if grep -qE '^failure [1-9]' <<<"${runs}" || ! kill -0 "${controller_pid}" 2>/dev/null ||
            ((SECONDS >= deadline)); then
            tail -n 20 "${work}/controller-${api}.log" >&2
            die "poolguard's audit pass (--report-api ${api}) did not succeed (its log above)"
        fi
        sleep 0.5
    done
    stop_controller
    log "${api}: poolguard's audit pass wrote its reports in $((SECONDS - t0))s"

    bash integration/policy-reporter/check.sh "${KUBECONFIG}" "${api}" ||
        die "Policy Reporter does not show poolguard's ${api} reports as written (mismatches above)"
    kubectl delete -f "${crds}" --wait=true >/dev/null || die "deleting the ${api} report CRDs failed"
    log "${api}: checked in $((SECONDS - t0))s"
}
audit_with policyreport
audit_with openreports
log "ok: Policy Reporter reads poolguard's policyreport and openreports reports ($((SECONDS - start))s)"
