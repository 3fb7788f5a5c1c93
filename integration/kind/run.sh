#!/usr/bin/env bash
# poolguard's end-to-end tests on a kind cluster (needs docker, kind, kubectl, cargo; helm comes
# from HELM or integration/helm/helm.sh):
#
#   integration/kind/run.sh          # KEEP_CLUSTER=1 keeps the cluster afterwards
#
# Creates a cluster with workers in two pools (agentpool=pool1 x2, agentpool=gpu), builds the
# image from the top-level Dockerfile, loads it into kind, installs poolguard with the Helm chart
# (charts/poolguard: one replica, certificates managed by poolguard, the e2e config, validation
# limited to labelled namespaces as the tests expect) and runs the same tests as
# integration/e2e.sh. CI does not use this script (see ../README.md).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "${root}"

cluster="${KIND_CLUSTER_NAME:-poolguard-e2e}"
image=poolguard:e2e
release=poolguard
ns=poolguard
helm="${HELM:-$(bash integration/helm/helm.sh | tail -n1)}"
work="$(mktemp -d "${TMPDIR:-/tmp}/poolguard-kind.XXXXXX")"
cleanup() {
    [[ "${KEEP_CLUSTER:-0}" == 1 ]] || kind delete cluster --name "${cluster}"
    rm -rf -- "${work}"
}
trap cleanup EXIT
export KUBECONFIG="${work}/kubeconfig"

cat > "${work}/kind.yaml" <<'EOF'
kind: Cluster
apiVersion: kind.x-k8s.io/v1alpha4
nodes:
  - role: control-plane
  - role: worker
    labels: {agentpool: pool1}
  - role: worker
    labels: {agentpool: pool1}
  - role: worker
    labels: {agentpool: gpu}
EOF
kind create cluster --name "${cluster}" --config "${work}/kind.yaml" --kubeconfig "${KUBECONFIG}" --wait 180s

docker build -t "${image}" -f Dockerfile .
kind load docker-image "${image}" --name "${cluster}"

# The chart with the e2e config. Mode self: poolguard creates its certificate Secret and injects
# the CA into the chart's webhook configurations. The tests expect pods in unlabelled namespaces
# to be admitted while poolguard is down, so validation is limited to labelled namespaces.
{
    printf 'replicaCount: 1\n'
    printf 'image: {repository: %s, tag: %s, pullPolicy: Never}\n' "${image%%:*}" "${image#*:}"
    printf 'validating: {requireNamespaceLabel: true}\n'
    printf 'config:\n'
    sed -e 's/^/  /' integration/e2e/manifests/poolguard-config.yaml
} > "${work}/values.yaml"
"${helm}" --kubeconfig "${KUBECONFIG}" install "${release}" charts/poolguard -n "${ns}" --create-namespace \
    -f "${work}/values.yaml" --wait --timeout 5m

# Webhook registrations (and the injected CA) take effect asynchronously: wait until dry runs
# show both webhooks in effect.
integration/e2e/await-webhooks.sh agentpool pool1 gpu 120

export POOLGUARD_E2E_POOLS=pool1,gpu
# shellcheck disable=SC2016 # expanded by the test's shell, not here
export POOLGUARD_E2E_STOP_CMD='kubectl -n poolguard scale deployment/poolguard --replicas=0 &&
  while [ -n "$(kubectl -n poolguard get pods -l app.kubernetes.io/instance=poolguard -o name)" ]; do sleep 1; done'
export POOLGUARD_E2E_START_CMD='kubectl -n poolguard scale deployment/poolguard --replicas=1 &&
  kubectl -n poolguard rollout status deployment/poolguard --timeout=180s'
cargo test --locked -p poolguard-e2e --test e2e -- --nocapture
cargo test --locked -p poolguard-e2e --test fail_closed -- --ignored --nocapture
