#!/usr/bin/env bash
# poolguard's end-to-end tests on a kind cluster (needs docker, kind, kubectl, cargo):
#
#   integration/kind/run.sh          # KEEP_CLUSTER=1 keeps the cluster afterwards
#
# Creates a cluster with workers in two pools (agentpool=pool1 x2, agentpool=gpu), builds the
# image from the top-level Dockerfile, loads it into kind, installs poolguard (poolguard.yaml +
# the shared webhook template; the Helm chart in charts/poolguard will replace this) and runs
# the same tests as integration/e2e.sh. CI does not use this script (see ../README.md).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "${root}"

cluster="${KIND_CLUSTER_NAME:-poolguard-e2e}"
image=poolguard:e2e
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

cargo run --locked --quiet --bin poolguard -- certs --out-dir "${work}/certs" \
    --dns-name poolguard.poolguard.svc --dns-name poolguard.poolguard.svc.cluster.local
kubectl create namespace poolguard
kubectl -n poolguard create secret tls poolguard-tls \
    --cert="${work}/certs/tls.crt" --key="${work}/certs/tls.key"
kubectl -n poolguard create configmap poolguard-config \
    --from-file=config.yaml=integration/e2e/manifests/poolguard-config.yaml
kubectl -n poolguard create configmap poolguard-policies --from-file=policies/
kubectl apply -f integration/kind/poolguard.yaml
kubectl -n poolguard rollout status deployment/poolguard --timeout=180s

sed -e 's|@MUTATE_ENDPOINT@|service: {namespace: poolguard, name: poolguard, port: 443, path: /mutate}|' \
    -e 's|@VALIDATE_ENDPOINT@|service: {namespace: poolguard, name: poolguard, port: 443, path: /validate}|' \
    -e "s|@CA_BUNDLE@|$(base64 < "${work}/certs/ca.crt" | tr -d '\n')|" \
    -e 's|@NAMESPACE_LABEL@|agentpool|' \
    integration/e2e/manifests/webhooks.yaml | kubectl apply -f -

# Webhook registrations take effect asynchronously: wait until a dry-run pod is mutated.
kubectl create namespace pg-e2e-probe
kubectl label namespace pg-e2e-probe agentpool=pool1
for _ in $(seq 60); do
    kubectl -n pg-e2e-probe run probe --image=registry.k8s.io/pause:3.10 --dry-run=server \
        -o jsonpath='{.spec.nodeSelector.agentpool}' 2>/dev/null | grep -q pool1 && break
    sleep 1
done
kubectl delete namespace pg-e2e-probe --wait=false

export POOLGUARD_E2E_POOLS=pool1,gpu
# shellcheck disable=SC2016 # expanded by the test's shell, not here
export POOLGUARD_E2E_STOP_CMD='kubectl -n poolguard scale deployment/poolguard --replicas=0 &&
  while [ -n "$(kubectl -n poolguard get pods -l app=poolguard -o name)" ]; do sleep 1; done'
export POOLGUARD_E2E_START_CMD='kubectl -n poolguard scale deployment/poolguard --replicas=1 &&
  kubectl -n poolguard rollout status deployment/poolguard --timeout=180s'
cargo test --locked -p poolguard-e2e --test e2e -- --nocapture
cargo test --locked -p poolguard-e2e --test fail_closed -- --ignored --nocapture
