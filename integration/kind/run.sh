#!/usr/bin/env bash
# poolguard's end-to-end tests on a kind cluster: the same image, chart and tests as
# integration/node/test.sh, on kind's nodes instead of the local real node.
#
#   integration/kind/run.sh          # KEEP_CLUSTER=1 keeps the cluster afterwards
#
# Needs kind, kubectl and cargo, and a container engine kind can use: Docker, or podman with
# KIND_EXPERIMENTAL_PROVIDER=podman (kind's own switch). helm comes from HELM or
# integration/helm/helm.sh. KIND_NODE_IMAGE picks kind's node image (default: kind's own).
#
# 1. creates a cluster with workers in two pools (agentpool=pool1 x2, agentpool=gpu);
# 2. builds poolguard's image: `docker build` of the top-level Dockerfile when Docker runs,
#    otherwise integration/image/build.sh (the Dockerfile's definition built with buildah; needs
#    root) as an OCI archive; loads it into every node (kind load docker-image / image-archive);
# 3. installs the chart (charts/poolguard) with its defaults (2 replicas, PodDisruptionBudget,
#    certificates managed by poolguard, validation in every namespace) plus the image
#    (pullPolicy Never) and the e2e config;
# 4. runs tests/e2e.rs, tests/bypasses.rs, tests/fail_closed.rs (the Deployment scaled to 0 and
#    back) and the under_load harness (rollout restart, deleting a replica's pod, draining a
#    replica's node while pods are created).
# CI does not run this: kind cannot run on the CI machines (see README.md).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "${root}"

log() { printf '[kind] %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

for cmd in kind kubectl cargo jq; do
    command -v "${cmd}" >/dev/null 2>&1 || die "${cmd} is required"
done
cluster="${KIND_CLUSTER_NAME:-poolguard-e2e}"
release=poolguard
ns=poolguard-system
engine=docker
if [[ "${KIND_EXPERIMENTAL_PROVIDER:-}" == podman ]] || ! docker info >/dev/null 2>&1; then
    engine=archive
fi
helm="${HELM:-$(bash integration/helm/helm.sh | tail -n1)}"
work="$(mktemp -d "${TMPDIR:-/tmp}/poolguard-kind.XXXXXX")"
created=0
cleanup() {
    if ((created)) && [[ "${KEEP_CLUSTER:-0}" != 1 ]]; then
        kind delete cluster --name "${cluster}"
    fi
    rm -rf -- "${work}"
}
trap cleanup EXIT
export KUBECONFIG="${work}/kubeconfig"

# --- 1. cluster ------------------------------------------------------------------------------
cat >"${work}/kind.yaml" <<'EOF'
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
created=1
kind create cluster --name "${cluster}" --config "${work}/kind.yaml" --kubeconfig "${KUBECONFIG}" --wait 180s \
    ${KIND_NODE_IMAGE:+--image "${KIND_NODE_IMAGE}"}

# --- 2. the image ------------------------------------------------------------------------------
if [[ "${engine}" == docker ]]; then
    image=poolguard:e2e
    docker build -t "${image}" -f Dockerfile .
    kind load docker-image "${image}" --name "${cluster}"
else
    ((EUID == 0)) || die "without Docker the image is built by integration/image/build.sh, which needs root"
    archive="$(integration/image/build.sh | tail -n1)"
    image="$(tar -xOf "${archive}" index.json | jq -r '.manifests[0].annotations["org.opencontainers.image.ref.name"]')"
    kind load image-archive "${archive}" --name "${cluster}"
fi
log "image ${image} loaded into every node"

# --- 3. the chart ------------------------------------------------------------------------------
{
    printf 'image: {repository: %s, tag: "%s", pullPolicy: Never}\n' "${image%:*}" "${image##*:}"
    printf 'config:\n'
    sed -e 's/^/  /' integration/e2e/manifests/poolguard-config.yaml
} >"${work}/values.yaml"
"${helm}" --kubeconfig "${KUBECONFIG}" install "${release}" charts/poolguard -n "${ns}" --create-namespace \
    -f "${work}/values.yaml" --wait --timeout 5m
kubectl -n "${ns}" get pods -o wide
# Webhook registrations (and the injected CA) take effect asynchronously.
integration/e2e/await-webhooks.sh agentpool pool1 gpu 120

# --- 4. the tests ------------------------------------------------------------------------------
export POOLGUARD_E2E_POOLS=pool1,gpu POOLGUARD_E2E_VALIDATES_UNLABELLED=1
sel="app.kubernetes.io/instance=${release}"
export POOLGUARD_E2E_STOP_CMD="kubectl -n ${ns} scale deployment/${release} --replicas=0 >/dev/null &&
  while [ -n \"\$(kubectl -n ${ns} get pods -l ${sel} -o name)\" ]; do sleep 1; done"
export POOLGUARD_E2E_START_CMD="kubectl -n ${ns} scale deployment/${release} --replicas=2 >/dev/null &&
  kubectl -n ${ns} rollout status deployment/${release} --timeout=180s"
cargo test --locked -p poolguard-e2e --test e2e -- --nocapture
cargo test --locked -p poolguard-e2e --test bypasses -- --nocapture
cargo test --locked -p poolguard-e2e --test fail_closed -- --ignored --nocapture
cargo run --locked -p poolguard-e2e --bin under_load -- --namespace "${ns}" --release "${release}" \
    --rate "${POOLGUARD_UNDER_LOAD_RATE:-20}" --seconds "${POOLGUARD_UNDER_LOAD_SECONDS:-30}"
log "PASSED"
