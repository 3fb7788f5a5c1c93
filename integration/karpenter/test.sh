#!/usr/bin/env bash
# poolguard with Karpenter NodePools that scale from zero, on a loopback control plane (no
# containers):
#
#   bash integration/karpenter/test.sh
#
# 1. Builds (or reuses) karpenter-kwok and kwok (integration/karpenter/build.sh) and the control
#    plane (integration/controlplane/build.sh); starts etcd, kube-apiserver,
#    kube-controller-manager and kube-scheduler (integration/controlplane/start.sh), applies
#    Karpenter's CRDs, starts kwok (it plays the kubelets of the nodes Karpenter launches) and
#    karpenter-kwok with the instance types of manifests/instance-types.json (small-2x, large-16x,
#    gpu-8x), and creates the NodePools of manifests/nodepools.yaml, none with a node: general
#    (small-2x), big (large-16x), gpu (gpu-8x) and capped (large-16x, limits.cpu 0: it can launch
#    nothing).
# 2. Starts `poolguard serve` against the cluster with manifests/poolguard-config.yaml
#    (nodeSelectorKey karpenter.sh/nodepool; namespaces labelled agentpool=auto get the NodePool
#    the placement policies choose), the repository's policies/ and policies/placement/, the
#    NodePools watched from the cluster (--nodepools) and the same instance types Karpenter has
#    (--instance-types-file); its serving certificate is signed by a throwaway CA (openssl,
#    `poolguard certs --ca-cert --ca-key`) and its webhooks are rendered from charts/poolguard
#    (integration/e2e/webhooks.sh).
# 3. Checks, each printing PASS or FAIL:
#    a. a pod in a namespace labelled agentpool=general gets nodeSelector
#       karpenter.sh/nodepool=general from poolguard, Karpenter launches a small-2x node for it
#       and it becomes Running there;
#    b. a pod there that selects karpenter.sh/nodepool=big is refused (403, poolguard's message);
#    c. in a namespace labelled agentpool=auto, a pod requesting 8 cpu gets big (general's
#       largest type has 2 cpu, capped can launch nothing, gpu is kept for GPU pods), a pod
#       requesting 1 cpu gets general (capped, preferred first, is skipped), a pod requesting
#       nvidia.com/gpu gets gpu; each becomes Running on a new node of that NodePool; a pod that
#       selects capped itself is refused; the pod of a Deployment requesting 8 cpu gets big and
#       runs on a further node; no node is ever launched for capped;
#    d. a pod requesting 64 cpu there is refused: no NodePool can launch a node that holds it;
#       so is a Deployment whose pods request 64 cpu (by the validating webhook).
#    Then prints the seconds from each pod's CREATE to Running.
# Everything started is stopped on exit; the work directory (logs of poolguard, Karpenter, kwok
# and the control plane) is printed and kept on failure, or with KEEP_WORK=1.
#
# Environment (all optional):
#   POOLGUARD_BIN                  poolguard binary (default: ${CARGO_TARGET_DIR:-target}/debug/poolguard,
#                                  built with cargo when missing)
#   POOLGUARD_KARPENTER_TIMEOUT    seconds a pod may take from CREATE to Running (default 120)
#   KEEP_WORK=1                    keep the work directory after a pass
#   KARPENTER_VERSION, KWOK_VERSION, POOLGUARD_KARPENTER_CACHE, POOLGUARD_KARPENTER_NICE: build.sh
#   KUBEBUILDER_ASSETS, POOLGUARD_CP_CACHE: integration/controlplane/build.sh; HELM: the helm binary
# Needs curl, jq and openssl.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
root="$(pwd)"
manifests="${root}/integration/karpenter/manifests"

log() { printf '[karpenter-test] %s\n' "$*"; }
# What failed is said again as the run's last lines (teardown): a CI log that keeps only its end,
# after the log tails, still shows it.
error="" failures_said=()
die() { error="$*"; printf '[karpenter-test] error: %s\n' "$*" >&2; exit 1; }
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }

for cmd in curl jq openssl; do
    command -v "${cmd}" >/dev/null 2>&1 || die "${cmd} is required"
done
timeout_s="${POOLGUARD_KARPENTER_TIMEOUT:-120}"

# --- 1. binaries -------------------------------------------------------------------
if [[ -n "${POOLGUARD_BIN:-}" ]]; then
    poolguard="${POOLGUARD_BIN}"
else
    poolguard="${CARGO_TARGET_DIR:-target}/debug/poolguard"
    [[ -x "${poolguard}" ]] || cargo build --locked --bin poolguard
fi
[[ -x "${poolguard}" ]] || die "no poolguard binary at ${poolguard}"
poolguard="$(cd "$(dirname "${poolguard}")" && pwd)/$(basename "${poolguard}")"
"${poolguard}" serve --help 2>/dev/null | grep -q -- '--nodepools' ||
    die "${poolguard} has no 'serve --nodepools' (NodePools as pools): rebuild it"
helm="${HELM:-$(bash integration/helm/helm.sh | tail -n1)}"
export HELM="${helm}"
# Built before anything starts: a cold build takes minutes.
kdir="$(bash integration/karpenter/build.sh | tail -n1)"
cp_bin="$(integration/controlplane/build.sh | tail -n1)"
log "poolguard: $("${poolguard}" --version)"
log "Kubernetes: $("${cp_bin}/kube-apiserver" --version); karpenter-kwok and kwok from ${kdir}"

work="$(mktemp -d "${TMPDIR:-/tmp}/poolguard-karpenter.XXXXXX")"
cp_state="${work}/controlplane"
cp_started=0
pids=() # what this script started: "pid name"

teardown() {
    local rc=$? entry pid name i
    set +e
    trap - EXIT INT TERM
    # Log tails first, while they still end with the failure rather than the shutdown.
    if ((rc != 0)); then
        for name in poolguard karpenter kwok; do
            [[ -s "${work}/${name}.log" ]] || continue
            printf '\n[karpenter-test] ---- tail of %s\n' "${work}/${name}.log"
            tail -n 40 "${work}/${name}.log"
        done
    fi
    for entry in "${pids[@]}"; do
        read -r pid name <<<"${entry}"
        kill -0 "${pid}" 2>/dev/null && kill -TERM "${pid}" 2>/dev/null
    done
    for entry in "${pids[@]}"; do
        read -r pid name <<<"${entry}"
        for ((i = 0; i < 75; i++)); do kill -0 "${pid}" 2>/dev/null || break; sleep 0.2; done
        kill -0 "${pid}" 2>/dev/null && { log "killing ${name} (pid ${pid})"; kill -KILL "${pid}"; }
        wait "${pid}" 2>/dev/null
    done
    ((cp_started)) && integration/controlplane/stop.sh "${cp_state}" >/dev/null 2>&1
    if ((rc != 0)); then
        for entry in "${failures_said[@]}"; do
            printf '[karpenter-test] FAIL: %s\n' "${entry}"
        done
        [[ -z "${error}" ]] || printf '[karpenter-test] error: %s\n' "${error}"
    fi
    if ((rc != 0)) || [[ "${KEEP_WORK:-0}" == 1 ]]; then
        printf '[karpenter-test] %s; logs kept in %s\n' \
            "$( ((rc == 0)) && echo PASSED || echo "FAILED (exit ${rc})")" "${work}"
    else
        rm -rf -- "${work}"
        log "PASSED"
    fi
    exit "${rc}"
}
trap teardown EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# shellcheck source=integration/controlplane/free-port.sh
source integration/controlplane/free-port.sh

# --- 2. control plane, Karpenter, kwok ------------------------------------------------
t0="$(now)"
POOLGUARD_CP_BIN="${cp_bin}" POOLGUARD_CP_CONTROLLERS=1 \
    integration/controlplane/start.sh "${cp_state}" >/dev/null
cp_started=1
export KUBECONFIG="${cp_state}/kubeconfig"
kubectl() { "${cp_bin}/kubectl" --request-timeout=20s "$@"; }
log "control plane up in $(since "${t0}")s"

kubectl apply --server-side -f "${kdir}/crds/" >/dev/null
kubectl wait --for condition=established --timeout=60s \
    crd/nodepools.karpenter.sh crd/nodeclaims.karpenter.sh crd/nodeoverlays.karpenter.sh \
    crd/kwoknodeclasses.karpenter.kwok.sh >/dev/null
log "Karpenter's CRDs established"

{
    cat "${manifests}/kwok.yaml"
    for stage in "${kdir}"/stages/*.yaml; do
        printf -- '---\n'
        cat "${stage}"
    done
} >"${work}/kwok.yaml"
# HOME is the work directory, so that a ~/.kwok/kwok.yaml of the user is not merged in.
HOME="${work}" "${kdir}/bin/kwok" --kubeconfig="${KUBECONFIG}" --config="${work}/kwok.yaml" \
    </dev/null >"${work}/kwok.log" 2>&1 &
pids+=("$! kwok")
kwok_pid=$!

# karpenter-kwok out of cluster: the admin kubeconfig (KUBECONFIG only), no leader election
# (it needs an in-cluster namespace), free ports (they bind every interface).
karpenter_metrics="" karpenter_health="" # set by pick_port
pick_port karpenter_metrics
pick_port karpenter_health
KUBECONFIG="${KUBECONFIG}" DISABLE_LEADER_ELECTION=true \
    METRICS_PORT="${karpenter_metrics}" HEALTH_PROBE_PORT="${karpenter_health}" \
    INSTANCE_TYPES_FILE_PATH="${manifests}/instance-types.json" LOG_LEVEL=info \
    BATCH_IDLE_DURATION=1s BATCH_MAX_DURATION=10s \
    "${kdir}/bin/karpenter-kwok" </dev/null >"${work}/karpenter.log" 2>&1 &
pids+=("$! karpenter")
karpenter_pid=$!
deadline=$((SECONDS + 90))
until curl -fsS --max-time 2 "http://127.0.0.1:${karpenter_health}/readyz" >/dev/null 2>&1; do
    kill -0 "${karpenter_pid}" 2>/dev/null || die "karpenter-kwok exited (${work}/karpenter.log)"
    ((SECONDS < deadline)) || die "karpenter-kwok not ready after 90s"
    sleep 0.5
done
# An unreadable or malformed instance types file is only logged (and leaves no instance types).
! grep -q 'failed constructing instance types' "${work}/karpenter.log" ||
    die "karpenter-kwok could not read ${manifests}/instance-types.json"
deadline=$((SECONDS + 30))
until grep -q '"msg":"Watch nodes"' "${work}/kwok.log"; do
    kill -0 "${kwok_pid}" 2>/dev/null || die "kwok exited (${work}/kwok.log)"
    ((SECONDS < deadline)) || die "kwok is not watching nodes after 30s"
    sleep 0.5
done
log "kwok and karpenter-kwok running"

kubectl apply -f "${manifests}/nodepools.yaml" >/dev/null
nodepools=(general big gpu capped)
deadline=$((SECONDS + 30))
for np in "${nodepools[@]}"; do
    until [[ "$(kubectl get nodepool "${np}" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null)" == True ]]; do
        ((SECONDS < deadline)) || { kubectl get nodepool "${np}" -o yaml; die "NodePool ${np} not Ready after 30s"; }
        sleep 0.5
    done
done
log "NodePools Ready: ${nodepools[*]}; nodes: $(kubectl get nodes -o name | wc -l)"

# --- 3. poolguard and its webhooks --------------------------------------------------
t_pg="$(now)"
mkdir -p "${work}/ca"
openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "${work}/ca/ca.key" 2>/dev/null ||
    die "openssl could not make the CA key"
openssl req -x509 -new -key "${work}/ca/ca.key" -subj "/CN=poolguard-karpenter-test-ca" -days 2 -sha256 \
    -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" \
    -out "${work}/ca/ca.crt" 2>/dev/null || die "openssl could not make the CA certificate"
"${poolguard}" certs --out-dir "${work}/certs" --ca-cert "${work}/ca/ca.crt" --ca-key "${work}/ca/ca.key" \
    --ip 127.0.0.1 --dns-name localhost >/dev/null
# Copies of the config and the policies, each in a directory of its own (poolguard watches them).
mkdir -p "${work}/config"
cp "${manifests}/poolguard-config.yaml" "${work}/config/"
cp -R "${root}/policies" "${work}/policies"
pg_port="" pg_metrics="" # set by pick_port
pick_port pg_port
pick_port pg_metrics
NO_COLOR=1 KUBECONFIG="${KUBECONFIG}" "${poolguard}" serve \
    --addr "127.0.0.1:${pg_port}" --metrics-addr "127.0.0.1:${pg_metrics}" \
    --tls-cert-file "${work}/certs/tls.crt" --tls-key-file "${work}/certs/tls.key" \
    --config "${work}/config/poolguard-config.yaml" \
    --policies-dir "${work}/policies" --placement-policies-dir "${work}/policies/placement" \
    --nodepools --instance-types-file "${manifests}/instance-types.json" \
    --audit-interval 0 </dev/null >"${work}/poolguard.log" 2>&1 &
pids+=("$! poolguard")
pg_pid=$!
deadline=$((SECONDS + 60))
until curl -fsS -o /dev/null --max-time 2 "http://127.0.0.1:${pg_metrics}/readyz" 2>/dev/null; do
    kill -0 "${pg_pid}" 2>/dev/null || die "poolguard exited during start-up (${work}/poolguard.log)"
    ((SECONDS < deadline)) || die "poolguard not ready after 60s"
    sleep 0.2
done

# The namespaces, and their default ServiceAccounts (made by the controller manager), without
# which the API server refuses their pods.
kubectl apply -f - >/dev/null <<'YAML'
apiVersion: v1
kind: Namespace
metadata: {name: team-general, labels: {agentpool: general}}
---
apiVersion: v1
kind: Namespace
metadata: {name: team-auto, labels: {agentpool: auto}}
YAML
deadline=$((SECONDS + 30))
for ns in team-general team-auto; do
    until kubectl -n "${ns}" get serviceaccount default >/dev/null 2>&1; do
        ((SECONDS < deadline)) || die "the ServiceAccount controller did not create ${ns}/default"
        sleep 0.5
    done
done

integration/e2e/webhooks.sh "https://127.0.0.1:${pg_port}" "${work}/certs/ca.crt" agentpool \
    >"${work}/webhooks.yaml" || die "rendering the webhook configurations from charts/poolguard failed"
kubectl apply -f "${work}/webhooks.yaml" >/dev/null
# The API server picks webhook configurations up asynchronously: server-side dry runs until a
# pod gets general's selector (mutating) and a Deployment whose pods select big is refused
# (validating).
probe_pod='{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "probe", "namespace": "team-general"},
  "spec": {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]}}'
probe_deploy='{"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "probe", "namespace": "team-general"},
  "spec": {"selector": {"matchLabels": {"app": "probe"}}, "template": {"metadata": {"labels": {"app": "probe"}},
  "spec": {"nodeSelector": {"karpenter.sh/nodepool": "big"}, "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]}}}}'
deadline=$((SECONDS + 30))
until out="$(kubectl create --dry-run=server -o jsonpath='{.spec.nodeSelector}' -f - <<<"${probe_pod}" 2>&1)" &&
    [[ "${out}" == *'"karpenter.sh/nodepool":"general"'* ]]; do
    ((SECONDS < deadline)) || die "the mutating webhook did not become active within 30s: ${out}"
    sleep 0.5
done
until ! out="$(kubectl create --dry-run=server -f - <<<"${probe_deploy}" 2>&1)" && [[ "${out}" == *validate.poolguard.io* ]]; do
    ((SECONDS < deadline)) || die "the validating webhook did not become active within 30s: ${out}"
    sleep 0.5
done
log "poolguard serving and its webhooks active in $(since "${t_pg}")s"

# --- 4. the checks --------------------------------------------------------------------
failures=0
pass() { log "PASS: $*"; }
fail() { log "FAIL: $*"; failures=$((failures + 1)); failures_said+=("$*"); }
timings=() # "pod namespace requests nodepool instance-type seconds"

pod_manifest() { # namespace name cpu [gpus] [nodepool it selects]
    local gpu="" selector=""
    [[ -n "${4:-}" ]] && gpu=", limits: {nvidia.com/gpu: \"$4\"}"
    [[ -n "${5:-}" ]] && selector="
  nodeSelector: {karpenter.sh/nodepool: $5}"
    printf 'apiVersion: v1
kind: Pod
metadata: {name: %s, namespace: %s}
spec:%s
  automountServiceAccountToken: false
  terminationGracePeriodSeconds: 0
  containers:
    - name: app
      image: registry.k8s.io/pause:3.10
      resources: {requests: {cpu: "%s", memory: 256Mi}%s}
' "$2" "$1" "${selector}" "$3" "${gpu}"
}

# Creates the pod; it must get NodePool WANT from poolguard, then be Running on a node that
# Karpenter launched for that NodePool, of instance type TYPE.
expect_running() { # want type namespace name cpu [gpus] [nodepool it selects]
    local want="$1" type="$2" ns="$3" name="$4" t_create got node node_pool node_type secs
    local requests="cpu $5${6:+, nvidia.com/gpu $6}"
    t_create="$(now)"
    if ! got="$(pod_manifest "${@:3}" | kubectl create -o jsonpath='{.spec.nodeSelector.karpenter\.sh/nodepool}' -f - 2>&1)"; then
        fail "pod ${ns}/${name} (${requests}) was refused: ${got}"
        return
    fi
    if [[ "${got}" != "${want}" ]]; then
        fail "pod ${ns}/${name} (${requests}) got nodeSelector karpenter.sh/nodepool=${got:-<none>}, want ${want}"
        return
    fi
    pass "pod ${ns}/${name} (${requests}) got nodeSelector karpenter.sh/nodepool=${got} from poolguard"
    if ! "${cp_bin}/kubectl" wait -n "${ns}" "pod/${name}" --for=jsonpath='{.status.phase}'=Running \
        --timeout="${timeout_s}s" >/dev/null 2>&1; then
        fail "pod ${ns}/${name} not Running ${timeout_s}s after CREATE"
        kubectl -n "${ns}" describe pod "${name}" | tail -n 15
        kubectl get nodeclaims,nodes -o wide
        return
    fi
    secs="$(since "${t_create}")"
    node="$(kubectl -n "${ns}" get pod "${name}" -o jsonpath='{.spec.nodeName}')"
    node_pool="$(kubectl get node "${node}" -o jsonpath='{.metadata.labels.karpenter\.sh/nodepool}')"
    node_type="$(kubectl get node "${node}" -o jsonpath='{.metadata.labels.node\.kubernetes\.io/instance-type}')"
    timings+=("${name} ${ns} ${requests// /_} ${node_pool:-?} ${node_type:-?} ${secs}")
    if [[ "${node_pool}" == "${want}" && "${node_type}" == "${type}" ]]; then
        pass "pod ${ns}/${name} Running ${secs}s after CREATE on ${node} (NodePool ${node_pool}, ${node_type})"
    else
        fail "pod ${ns}/${name} Running on ${node} of NodePool ${node_pool:-?} (${node_type:-?}), want ${want} (${type})"
    fi
}

# Creates the pod; poolguard must refuse it with 403 and a message containing every WORD.
expect_refused() { # words(|-separated) namespace name cpu [gpus] [nodepool it selects]
    local words="$1" ns="$2" name="$3" out word missing="" wanted=()
    if out="$(pod_manifest "${@:2}" | kubectl create -f - 2>&1)"; then
        fail "pod ${ns}/${name} (cpu $4${6:+, selecting $6}) was admitted: ${out}"
        kubectl -n "${ns}" delete pod "${name}" --wait=false >/dev/null 2>&1 || true
        return
    fi
    IFS='|' read -r -a wanted <<<"${words}"
    for word in "Error from server (Forbidden)" "poolguard.io" "${wanted[@]}"; do
        [[ "${out}" == *"${word}"* ]] || missing+=" '${word}'"
    done
    if [[ -z "${missing}" ]]; then
        pass "pod ${ns}/${name} (cpu $4${6:+, selecting $6}) refused with 403: ${out}"
    else
        fail "pod ${ns}/${name} (cpu $4${6:+, selecting $6}): the refusal lacks${missing}: ${out}"
    fi
}

deployment_manifest() { # namespace name cpu
    printf 'apiVersion: apps/v1
kind: Deployment
metadata: {name: %s, namespace: %s}
spec:
  replicas: 1
  selector: {matchLabels: {app: %s}}
  template:
    metadata: {labels: {app: %s}}
    spec:
      automountServiceAccountToken: false
      terminationGracePeriodSeconds: 0
      containers:
        - name: app
          image: registry.k8s.io/pause:3.10
          resources: {requests: {cpu: "%s", memory: 256Mi}}
' "$2" "$1" "$2" "$2" "$3"
}

# Creates a Deployment; the pod its ReplicaSet creates must get NodePool WANT from poolguard and
# be Running on a node of that NodePool.
expect_deployment_running() { # want namespace name cpu
    local want="$1" ns="$2" name="$3" t_create out pod="" got node node_pool node_type secs deadline
    t_create="$(now)"
    if ! out="$(deployment_manifest "${ns}" "${name}" "$4" | kubectl create -f - 2>&1)"; then
        fail "Deployment ${ns}/${name} (cpu $4) was refused: ${out}"
        return
    fi
    deadline=$((SECONDS + timeout_s))
    until pod="$(kubectl -n "${ns}" get pods -l "app=${name}" -o jsonpath='{.items[0].metadata.name}' 2>/dev/null)" && [[ -n "${pod}" ]]; do
        ((SECONDS < deadline)) || { fail "Deployment ${ns}/${name}: no pod after ${timeout_s}s"; kubectl -n "${ns}" describe replicaset | tail -n 15; return; }
        sleep 0.2
    done
    got="$(kubectl -n "${ns}" get pod "${pod}" -o jsonpath='{.spec.nodeSelector.karpenter\.sh/nodepool}')"
    if [[ "${got}" != "${want}" ]]; then
        fail "pod ${ns}/${pod} of Deployment ${name} (cpu $4) got nodeSelector karpenter.sh/nodepool=${got:-<none>}, want ${want}"
        return
    fi
    pass "pod ${ns}/${pod} of Deployment ${name} (cpu $4) got nodeSelector karpenter.sh/nodepool=${got} from poolguard"
    if ! "${cp_bin}/kubectl" wait -n "${ns}" "pod/${pod}" --for=jsonpath='{.status.phase}'=Running \
        --timeout="$((deadline - SECONDS > 1 ? deadline - SECONDS : 1))s" >/dev/null 2>&1; then
        fail "pod ${ns}/${pod} of Deployment ${name} not Running ${timeout_s}s after the Deployment's CREATE"
        kubectl -n "${ns}" describe pod "${pod}" | tail -n 15
        return
    fi
    secs="$(since "${t_create}")"
    node="$(kubectl -n "${ns}" get pod "${pod}" -o jsonpath='{.spec.nodeName}')"
    node_pool="$(kubectl get node "${node}" -o jsonpath='{.metadata.labels.karpenter\.sh/nodepool}')"
    node_type="$(kubectl get node "${node}" -o jsonpath='{.metadata.labels.node\.kubernetes\.io/instance-type}')"
    timings+=("deploy/${name} ${ns} cpu_$4 ${node_pool:-?} ${node_type:-?} ${secs}")
    if [[ "${node_pool}" == "${want}" ]]; then
        pass "pod ${ns}/${pod} of Deployment ${name} Running ${secs}s after the Deployment's CREATE on ${node} (NodePool ${node_pool}, ${node_type})"
    else
        fail "pod ${ns}/${pod} of Deployment ${name} Running on ${node} of NodePool ${node_pool:-?}, want ${want}"
    fi
}

nodes_before="$(kubectl get nodes -o name | wc -l)"
((nodes_before == 0)) && pass "no node before the first pod: every NodePool starts from zero" ||
    fail "${nodes_before} nodes before the first pod"

log "a. namespace team-general (agentpool=general)"
# 1 cpu: the one-cpu pod of c. does not fit beside it (small-2x: 1900m allocatable), so Karpenter
# launches a node for that one too.
expect_running general small-2x team-general web 1
log "b. a pod in team-general that selects another NodePool"
expect_refused 'team-general|general|big' team-general elsewhere 500m "" big
log "c. namespace team-auto (agentpool=auto): the placement policies choose the NodePool"
expect_running big large-16x team-auto eight-cpu 8
expect_running general small-2x team-auto one-cpu 1
expect_running gpu gpu-8x team-auto train 2 1
expect_refused 'capped' team-auto pinned-capped 1 "" capped
# 8 cpu: the large-16x node of eight-cpu has 7900m left, so Karpenter launches another.
expect_deployment_running big team-auto batch 8
log "d. a pod no NodePool can launch a node for"
expect_refused 'fitsresources|64000m' team-auto huge 64
if out="$(deployment_manifest team-auto huge-deploy 64 | kubectl create -f - 2>&1)"; then
    fail "Deployment team-auto/huge-deploy (cpu 64) was admitted: ${out}"
elif [[ "${out}" == *"Error from server (Forbidden)"*validate.poolguard.io*fitsresources* ]]; then
    pass "Deployment team-auto/huge-deploy (cpu 64) refused with 403 by the validating webhook: ${out}"
else
    fail "Deployment team-auto/huge-deploy (cpu 64): not refused by poolguard's validating webhook for fitsresources: ${out}"
fi

# Nothing ever selected or landed on capped.
capped_nodes="$(kubectl get nodeclaims,nodes -l karpenter.sh/nodepool=capped -o name | wc -l)"
capped_pods="$(kubectl get pods -A -o json | jq '[.items[] | select(.spec.nodeSelector["karpenter.sh/nodepool"] == "capped")] | length')"
if ((capped_nodes == 0 && capped_pods == 0)); then
    pass "no pod selects NodePool capped and it launched no node"
else
    fail "NodePool capped: ${capped_pods} pods select it, ${capped_nodes} NodeClaims and nodes"
fi

log "---- state"
kubectl get nodepools
kubectl get nodes -L karpenter.sh/nodepool,node.kubernetes.io/instance-type,karpenter.sh/capacity-type
kubectl get pods -A -o wide
printf '\n%-13s %-13s %-25s %-9s %-10s %s\n' POD NAMESPACE REQUESTS NODEPOOL TYPE CREATE-TO-RUNNING
for row in "${timings[@]}"; do
    read -r name ns requests pool type secs <<<"${row}"
    printf '%-13s %-13s %-25s %-9s %-10s %ss\n' "${name}" "${ns}" "${requests//_/ }" "${pool}" "${type}" "${secs}"
done
echo
((failures == 0)) || die "${failures} check(s) failed"
log "all checks passed"
