#!/usr/bin/env bash
# The leader keeps the native admission objects written, and they decide with poolguard down:
# a second `poolguard serve --native-apply` (its own Lease and rollout ConfigMap, so it never
# meets the suite's poolguard) against the control plane of integration/e2e.sh, before any
# webhook of poolguard is registered. Checks, through the real kube-apiserver:
#  1. it writes the objects `poolguard native` generates (field manager poolguard), and leaves a
#     ValidatingAdmissionPolicy without poolguard's label alone;
#  2. a config change that drops a pool's own settings deletes that pool's objects (and only them);
#  3. the webhook as the fallback (--native-fallback, --register-webhooks with the chart's
#     webhooks at failurePolicy Fail): it registers the pod and workload webhooks, leaves them out
#     once the objects read back as generated and its dry-run canary pods (in a namespace the pod
#     webhooks leave out) show the API server enforcing them, puts them back when a custom Rego policy is loaded
#     (which only the webhook decides) and leaves them out again when it is removed; the
#     namespace (pool-authority) webhook stays all along; a policy put under a progressive
#     rollout gets a binding per group that follows the group's status (warn while Progressing,
#     deny once Succeeded), with the webhooks back while a group is Progressing;
#  3c. poolguard talks to the API server through a proxy (switch_proxy); switched to a second
#     kube-apiserver on the same etcd started with
#     --disable-admission-plugins=MutatingAdmissionPolicy,ValidatingAdmissionPolicy (it serves and
#     stores the objects and enforces nothing, as one of an HA control plane in version skew),
#     the canary fails and the pod and workload webhooks come back at once and stay (metrics
#     say so), so a pod with a foreign image and another pool sent to that API server is refused
#     by the webhook; switched back, they are left out again;
#  4. with that poolguard stopped (the webhook configurations still in place), a pod in a pool's
#     namespace gets its pool's nodeSelector and annotation, a foreign image and another pool are
#     refused;
#  5. with the validating webhook configuration that owns them deleted (as helm uninstall does),
#     the garbage collector deletes every object it wrote.
#
#   integration/e2e/native-leader.sh POOLGUARD_BIN WORK_DIR CERT_DIR
#       KUBECONFIG set; kubectl in PATH or KUBECTL; CERT_DIR holds ca.crt, tls.crt and tls.key of
#       a serving certificate for 127.0.0.1 (integration/e2e.sh makes one); POOLGUARD_CP_STATE the
#       control plane's state directory (integration/controlplane/start.sh), whose kube-apiserver
#       command line the second API server reuses; SWITCH_PROXY the switch_proxy binary
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
poolguard="$1" work="$2" certs="$3"
mkdir -p "${work}"
work="$(cd "${work}" && pwd)"
kubectl="${KUBECTL:-kubectl}"
log() { printf '[native-leader] %s\n' "$*" >&2; }
die() { log "FAIL: $*"; [[ -f "${work}/serve.log" ]] && tail -n 30 "${work}/serve.log" >&2; exit 1; }
k() { "${kubectl}" --request-timeout=10s "$@"; }
# shellcheck source=integration/controlplane/free-port.sh
source integration/controlplane/free-port.sh
kinds=validatingadmissionpolicies,validatingadmissionpolicybindings,mutatingadmissionpolicies,mutatingadmissionpolicybindings
managed=app.kubernetes.io/managed-by=poolguard
ns=pg-e2e-native-leader
# The canary pods' namespace: selected by the native bindings, left out by the pod webhooks.
canary=pg-e2e-canary
# The webhook configurations this poolguard registers into (the chart's, under another name).
registered=pg-e2e-native-fallback
pid="" proxy_pid="" second_pid=""
cleanup() {
    [[ -n "${pid}" ]] && kill -TERM "${pid}" 2>/dev/null && wait "${pid}" 2>/dev/null
    [[ -n "${proxy_pid}" ]] && kill "${proxy_pid}" 2>/dev/null
    [[ -n "${second_pid}" ]] && kill "${second_pid}" 2>/dev/null && wait "${second_pid}" 2>/dev/null
    k delete "${kinds}" -l "${managed}" --ignore-not-found >/dev/null 2>&1 || true
    k delete validatingadmissionpolicy pg-e2e-team-rules --ignore-not-found >/dev/null 2>&1 || true
    k delete namespace "${ns}" "${canary}" --ignore-not-found --wait=false >/dev/null 2>&1 || true
    k delete mutatingwebhookconfiguration "${registered}-mutating" --ignore-not-found >/dev/null 2>&1 || true
    k delete validatingwebhookconfiguration "${registered}-validating" --ignore-not-found >/dev/null 2>&1 || true
}
trap cleanup EXIT

# Waits up to WAIT_S (30) s for a command to succeed.
await() { # what command...
    local what="$1"; shift
    local limit="${WAIT_S:-30}"
    local deadline=$((SECONDS + limit)) start=${SECONDS}
    until "$@" >/dev/null 2>&1; do
        ((SECONDS < deadline)) || die "${what}: not after ${limit} s"
        sleep 0.25
    done
    log "${what}: after $((SECONDS - start)) s"
}
# (The list is read whole before grep looks at it: grep -q stopping early must not fail it.)
names() { k get "${kinds}" -o name; }
has() { local all; all="$(names)" && grep -qx "$1" <<<"${all}"; }
lacks() { local all; all="$(names)" && ! grep -q "$1" <<<"${all}"; }

mkdir -p "${work}/config" "${work}/policies"
cp testdata/config/example.yaml "${work}/config/config.yaml"
cp policies/*.yaml policies/*.rego "${work}/policies/"
rm -f "${work}/policies/"*_test.rego
# A policy of someone else's, named like poolguard's, without its label.
k apply -f - >/dev/null <<'YAML'
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {name: pg-e2e-team-rules}
spec:
  matchConstraints: {resourceRules: [{apiGroups: [""], apiVersions: ["v1"], operations: ["CREATE"], resources: ["configmaps"]}]}
  validations: [{expression: "true"}]
YAML

port="" metrics="" proxy="" second=""
pick_port port
pick_port metrics
pick_port proxy
pick_port second
# poolguard reaches the API server through switch_proxy, so that step 3c can move it to another
# API server while it runs (a kubeconfig with everything inline, its server the proxy).
server="$(k config view --minify -o jsonpath='{.clusters[0].cluster.server}')"
[[ "${server}" =~ ^https://127\.0\.0\.1:([0-9]+)$ ]] || die "the API server ${server} is not on 127.0.0.1"
first="${BASH_REMATCH[1]}"
printf '127.0.0.1:%s\n' "${first}" >"${work}/backend"
"${SWITCH_PROXY}" "127.0.0.1:${proxy}" "${work}/backend" 2>"${work}/proxy.log" &
proxy_pid=$!
k config view --raw --minify --flatten | sed "s#${server}#https://127.0.0.1:${proxy}#" >"${work}/proxy.kubeconfig"
# The canary namespace, labelled with a pool no node has, as the chart makes it.
k create namespace "${canary}" >/dev/null
k label namespace "${canary}" agentpool=poolguard-canary >/dev/null
# The chart's webhooks (failurePolicy Fail, namespaces with the pool label), calling this
# poolguard; the configurations are created empty, as the chart does with
# webhook.registration=poolguard, and poolguard fills them in.
integration/e2e/webhooks.sh "https://127.0.0.1:${port}" "${certs}/ca.crt" agentpool \
    --set fullnameOverride="${registered}" --set "webhook.excludedNamespaces={${canary}}" >"${work}/webhooks.yaml"
k create --dry-run=client -o json -f "${work}/webhooks.yaml" |
    jq -s '{apiVersion: "v1", kind: "List",
            items: [.[] | if .kind == "List" then .items[] else . end | .webhooks = []]}' |
    k create -f - >/dev/null
webhook_names() { k get "$1webhookconfiguration" "${registered}-$1" -o jsonpath='{.webhooks[*].name}'; }
# The pod and workload webhooks are registered (mutating and validating), or left out with only the
# namespace webhook in place.
# The webhook on PolicyExceptions being written is not a pod or workload webhook: it stays.
pod_webhooks_in() {
    [[ "$(webhook_names mutating)" == "mutate.poolguard.io" ]] \
        && [[ "$(webhook_names validating)" == "validate.poolguard.io exceptions.poolguard.io pool-authority.poolguard.io"* ]]
}
pod_webhooks_out() {
    [[ -z "$(webhook_names mutating)" ]] \
        && [[ "$(webhook_names validating)" == "exceptions.poolguard.io pool-authority.poolguard.io"* ]]
}
"${poolguard}" serve --kubeconfig "${work}/proxy.kubeconfig" --addr "127.0.0.1:${port}" \
    --metrics-addr "127.0.0.1:${metrics}" --tls-cert-file "${certs}/tls.crt" \
    --tls-key-file "${certs}/tls.key" --config "${work}/config/config.yaml" \
    --policies-dir "${work}/policies" --audit-interval 1h --lease-name pg-e2e-native-leader \
    --lease-namespace default --rollout-configmap pg-e2e-native-leader-rollouts \
    --native-apply --native-exclude-namespace kube-system --native-owner "${registered}-validating" \
    --register-webhooks "${work}/webhooks.yaml" --native-fallback --native-canary-namespace "${canary}" \
    >"${work}/serve.log" 2>&1 &
pid=$!

# 1. Written as generated.
want="$("${poolguard}" native --config "${work}/config/config.yaml" --policies-dir "${work}/policies" \
    --exclude-namespace kube-system | grep -c '^kind:')"
count() { local all; all="$(k get "${kinds}" -l "${managed}" -o name)" && [[ "$(wc -l <<<"${all}")" -eq "${want}" ]]; }
await "the leader wrote the ${want} generated objects" count
# The example's two shipped policies share their namespaces and enforcement: one object each.
has validatingadmissionpolicy.admissionregistration.k8s.io/poolguard-allowedrepositories-and-latesttag.pool-gpu ||
    die "no policy for pool gpu's own settings"
[[ "$(k get validatingadmissionpolicy poolguard-images -o jsonpath='{.metadata.managedFields[*].manager}')" == *poolguard* ]] ||
    die "poolguard-images is not written by field manager poolguard"

# 2. Pool gpu's own settings removed from the config: its objects go, the others stay.
grep -q '^pools:$' "${work}/config/config.yaml" && grep -q '^evaluation:' "${work}/config/config.yaml" ||
    die "the config has no pools: section before evaluation: to remove"
awk '/^pools:$/ { skip = 1 } /^evaluation:/ { skip = 0 } !skip' "${work}/config/config.yaml" \
    >"${work}/config/config.yaml.new"
mv "${work}/config/config.yaml.new" "${work}/config/config.yaml"
await "pool gpu's objects deleted after the config change" lacks pool-gpu
has validatingadmissionpolicy.admissionregistration.k8s.io/poolguard-allowedrepositories-and-latesttag ||
    die "the cluster-wide policy went too"
has validatingadmissionpolicy.admissionregistration.k8s.io/pg-e2e-team-rules || die "a policy without poolguard's label was deleted"
grep -q 'native admission objects written' "${work}/serve.log" || die "no log line of the writes"

# 3. The webhook as the fallback: registered first (nothing read back yet), left out once the
# objects read back as generated for 15 s, back with a custom policy, out again without it.
WAIT_S=60 await "the leader left the pod and workload webhooks out" pod_webhooks_out
grep -q 'native fallback: the pod and workload webhooks are registered' "${work}/serve.log" \
    || die "the pod and workload webhooks were never registered before the objects read back"
cat >"${work}/policies/pgcustom.yaml" <<'YAML'
name: pgcustom
inputs: []
policy: |
  package pgcustom
  import rego.v1
  infringement contains {"msg": "never"} if false
YAML
await "a custom policy (webhook only) puts the pod and workload webhooks back" pod_webhooks_in
rm "${work}/policies/pgcustom.yaml"
WAIT_S=60 await "without it they are left out again" pod_webhooks_out

# 3b. A progressive rollout: the leader rewrites the group bindings as it steps the groups, keeps
# the webhooks while a group is Progressing (the rollout counts its would-be denials at
# admission), and leaves them out again once every group has Succeeded.
cat >"${work}/config/config.yaml" <<'YAML'
policies:
  allowedrepositories:
    enforcement: deny
    parameters:
      repositories: ["registry.example.com/", "registry.k8s.io/"]
    rollout:
      groups:
        - {name: canary, namespaceSelector: {matchLabels: {risk: low}}}
        - {name: rest}
      minSuccessTime: 10s
      progressDeadline: 5m
YAML
actions() { # binding
    [[ "$(k get validatingadmissionpolicybinding "poolguard-allowedrepositories.group-$1" \
        -o jsonpath='{.spec.validationActions[*]}')" == "$2" ]]
}
await "a rollout puts the pod and workload webhooks back" pod_webhooks_in
WAIT_S=60 await "the canary group's binding warns while it is Progressing" actions canary Warn
lacks 'validatingadmissionpolicy.admissionregistration.k8s.io/poolguard-allowedrepositories$' \
    || die "the policy's cluster-wide object stayed beside its group objects"
pod_webhooks_in || die "the pod and workload webhooks were left out while a group is Progressing"
WAIT_S=90 await "the canary group's binding denies once it has Succeeded" actions canary Deny
WAIT_S=90 await "the rest's binding denies once it has Succeeded" actions rest Deny
WAIT_S=60 await "with every group Succeeded the webhooks are left out again" pod_webhooks_out
# The namespace is labelled while poolguard serves: its pool-authority webhook stays registered.
k create namespace "${ns}" >/dev/null
k label namespace "${ns}" agentpool=blue >/dev/null
await "the ServiceAccount controller created ${ns}/default" k -n "${ns}" get serviceaccount default

# 3c. An API server that serves the native objects but enforces nothing: a second kube-apiserver
# on the same etcd, the first one's command line with another port and the two admission
# plugins off.
mapfile -d '' -t argv <"${POOLGUARD_CP_STATE}/cmd/kube-apiserver"
for i in "${!argv[@]}"; do
    [[ "${argv[i]}" == --secure-port=* ]] && argv[i]="--secure-port=${second}"
done
argv+=(--disable-admission-plugins=MutatingAdmissionPolicy,ValidatingAdmissionPolicy)
"${argv[@]}" >"${work}/second-apiserver.log" 2>&1 &
second_pid=$!
sed "s#https://127.0.0.1:${proxy}#https://127.0.0.1:${second}#" "${work}/proxy.kubeconfig" >"${work}/second.kubeconfig"
two() { "${kubectl}" --kubeconfig "${work}/second.kubeconfig" --request-timeout=10s "$@"; }
WAIT_S=120 await "a second kube-apiserver without the MutatingAdmissionPolicy and ValidatingAdmissionPolicy plugins is ready" two get --raw /readyz
pod_webhooks_out || die "the pod and workload webhooks are not left out before the switch"
metric() { curl -fsS "http://127.0.0.1:${metrics}/metrics" | grep -E "^$1 " | awk '{ print $2 }'; }
failures="$(metric poolguard_native_canary_failures_total)"
printf '127.0.0.1:%s\n' "${second}" >"${work}/backend"
log "poolguard's API server connections switched to the second kube-apiserver"
await "the canary fails there and the pod and workload webhooks are back" pod_webhooks_in
# The first pass after the switch may put them back for another reason (the connections the
# proxy cut fail a listing); the canary's own finding follows within a pass or two.
WAIT_S=30 await "the canary says its pod came back without its pool" \
    grep -q 'MutatingAdmissionPolicy did not run' "${work}/serve.log"
grep -m1 'native fallback: the pod and workload webhooks are registered.*did not run' "${work}/serve.log" >&2 || true
# They stay while the canary fails (longer than the 15 s the objects must settle).
sleep 25
pod_webhooks_in || die "the pod and workload webhooks were left out again while the canary fails"
[[ "$(metric 'poolguard_native_fallback_webhooks\{state="registered"\}')" == 1 ]] \
    || die "poolguard_native_fallback_webhooks{state=\"registered\"} is not 1"
after="$(metric poolguard_native_canary_failures_total)"
((after > failures)) || die "poolguard_native_canary_failures_total did not grow (${failures} -> ${after})"
log "poolguard_native_fallback_webhooks{state=\"registered\"} 1, poolguard_native_canary_failures_total ${failures} -> ${after}"
# The finding: through that API server a pod with a foreign image and another pool was admitted
# as sent once the webhooks were left out; now the webhook refuses it.
if out="$(two -n "${ns}" run miner --image=docker.io/evil/miner:1 \
    --overrides='{"spec":{"nodeSelector":{"agentpool":"red"}}}' --dry-run=server -o name 2>&1)"; then
    die "the API server without the plugins admitted a foreign image in another pool: ${out}"
fi
[[ "${out}" == *"poolguard.io"* ]] || die "refused, but not by poolguard's webhook: ${out}"
log "through it, a foreign image in another pool is refused by the webhook (${out:0:120}...)"
printf '127.0.0.1:%s\n' "${first}" >"${work}/backend"
log "switched back to the first kube-apiserver"
WAIT_S=60 await "the canary passes there and the webhooks are left out again" pod_webhooks_out
kill "${second_pid}" 2>/dev/null; wait "${second_pid}" 2>/dev/null || true
second_pid=""

# 4. poolguard stopped, its webhook configurations in place: the API server decides alone.
kill -TERM "${pid}"
wait "${pid}" || true
pid=""
log "poolguard stopped"
pod_webhooks_out || die "stopping poolguard registered the pod webhooks again"
got="$(k -n "${ns}" run placed --image=registry.example.com/app:1 --dry-run=server \
    -o jsonpath='{.spec.nodeSelector.agentpool} {.metadata.annotations.poolguard\.io/pool}')"
[[ "${got}" == "blue blue" ]] || die "a pod of pool blue's namespace got '${got}', not its pool"
log "a pod in a pool's namespace gets nodeSelector agentpool=blue and poolguard.io/pool=blue"
if out="$(k -n "${ns}" run foreign --image=docker.io/evil:1 --dry-run=server -o name 2>&1)"; then
    die "a foreign image was admitted: ${out}"
fi
[[ "${out}" == *"poolguard-allowedrepositories"* ]] || die "a foreign image was refused, but not by poolguard-allowedrepositories: ${out}"
log "a foreign image is refused (${out:0:120}...)"
if out="$(k -n "${ns}" run override --image=registry.example.com/app:1 \
    --overrides='{"spec":{"nodeSelector":{"agentpool":"red"}}}' --dry-run=server -o name 2>&1)"; then
    die "another pool was admitted: ${out}"
fi
[[ "${out}" == *"poolguard-placement"* ]] || die "another pool was refused, but not by poolguard-placement: ${out}"
log "another pool is refused (${out:0:120}...)"

# 5. Uninstalled: the validating webhook configuration that owns the objects (ownerReferences,
# --native-owner) is deleted, as helm uninstall does, and the garbage collector deletes them all.
written="$(k get "${kinds}" -l "${managed}" -o json)"
total="$(jq '.items | length' <<<"${written}")"
owned="$(jq --arg owner "${registered}-validating" '[.items[] | select(.metadata.ownerReferences[0].name == $owner)] | length' <<<"${written}")"
((total > 0)) && [[ "${owned}" == "${total}" ]] || die "${owned} of the ${total} objects are owned by ${registered}-validating"
k delete validatingwebhookconfiguration "${registered}-validating" >/dev/null
none_left() { [[ -z "$(k get "${kinds}" -l "${managed}" -o name)" ]]; }
await "the garbage collector deleted the ${total} native objects with their owner" none_left
log "ok"
