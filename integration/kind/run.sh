#!/usr/bin/env bash
# poolguard's end-to-end tests on a kind cluster, as a user runs them: kind nodes, poolguard's
# image loaded into them, the chart installed by helm with its defaults.
#
#   sudo integration/kind/run.sh      # KEEP_CLUSTER=1 keeps the cluster afterwards
#
# Needs root, podman (kind's podman provider), buildah, mmdebstrap, musl-gcc, go, cargo, jq (all
# checked by ../preflight.sh). kind comes from kind.sh (built from its Go module), the node image
# from build-node-image.sh (built here, cached), kubectl from ../controlplane/build.sh (the pinned
# release), helm from HELM or ../helm/helm.sh.
#
# 1. the node image and kind; podman set up for kind on these machines (podman-env.sh);
# 2. a cluster of 1 control plane and 3 workers in two pools (agentpool=pool1 x2, agentpool=gpu),
#    kube-proxy in nftables mode, kubelet allowed on cgroup v1 (failCgroupV1: false), kubeadm's
#    DNS addon disabled (no coredns: nothing here resolves cluster names, see README.md);
# 3. poolguard's image built by ../image/build.sh (the Dockerfile's definition, buildah) as an
#    OCI archive, loaded into every node with `kind load image-archive`;
# 4a. an install whose image cannot be pulled (the fail-safe first install, on real pods): helm
#    --wait reports it, no webhook is registered, a pod in a pool's namespace is admitted; then
#    uninstalled;
# 4. `helm install` of charts/poolguard with its defaults (2 replicas, preferred anti-affinity
#    across nodes, PodDisruptionBudget, certificates managed by poolguard, validation in every
#    namespace) plus the image (pullPolicy Never) and the e2e config; checks that the two
#    replicas run on two different workers; in each replica's node (podman exec), the OCI spec
#    containerd gave runc (read-only root, uid/gid 65532, no new privileges, no capabilities,
#    seccomp, 128Mi) and the process as that node's /proc shows it (uid, CapEff, Seccomp,
#    NoNewPrivs, root mounted ro);
# 4c. the chart's own admission path and writer: `helm test`; the Service's EndpointSlice lists
#    both serving pods ready; the controller created the certificate Secret and injected its CA
#    into both webhook configurations; the certificate each serving pod serves (kubectl
#    port-forward) verifies for the Service's DNS name against that bundle (openssl); the tokens
#    kubelet projected into a serving pod and the controller's pod authenticate as their two
#    ServiceAccounts; kube-proxy's nftables rules on a worker route the ClusterIP; the
#    controller's background audit reports a pod bound before the install to another pool's
#    worker, and a controller pod holds the audit Lease;
# 4d. Policy Reporter (built from ../shared/vendor, run against the cluster with its defaults)
#    lists every result the controller wrote and counts them in its /metrics, for PolicyReports
#    and then, after a helm upgrade to audit.reportApi=openreports, for openreports.io Reports
#    (../policy-reporter/check.sh);
# 5. tests/e2e.rs, tests/bypasses.rs, tests/fail_closed.rs (the Deployment scaled to 0 and back)
#    and the under_load harness: rollout restart, deleting a replica's pod, SIGKILL of a
#    replica's poolguard, draining a replica's worker to completion, stopping a replica's whole
#    worker (podman kill of its node), pods created at 20/s throughout; the harness judges each
#    row by poolguard's promise (docs/operations.md) and prints the table; after the e2e and
#    bypass suites, each serving pod's peak RSS (VmHWM, from its node's /proc) and no restarts;
# 5b. native admission with the webhook as the fallback (helm upgrade to native.mode=apply,
#    native.webhookFallback): the pod webhooks left out, the Deployment scaled to 0, pods still
#    placed and refused by the native objects; back to native.mode=off;
# 6. helm uninstall: both pods terminated, poolguard exited 0 after SIGTERM, no webhook
#    configuration or object of the release left, a pod in a labelled namespace admitted untouched.
# Prints "N passed, N failed" and the time of each phase; the cluster is deleted on exit.
#
# Environment: KEEP_CLUSTER=1, KIND_CLUSTER_NAME (default poolguard-e2e), HELM,
# POOLGUARD_UNDER_LOAD_RATE (default 20), POOLGUARD_UNDER_LOAD_SECONDS (default 30),
# POOLGUARD_UNDER_LOAD_OPERATIONS (default rollout-restart,delete-pod,kill-replica,drain,stop-worker),
# POOLGUARD_KIND_CACHE (default ~/.cache/poolguard/kind).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "${root}"

log() { printf '[kind] %s\n' "$*" >&2; }
# What failed is said again as the run's last lines (cleanup): a CI log that keeps only its end,
# after the nodes' state and the cluster's deletion, still shows it.
error=""
die() { error="error (${phase:-setup}): $*"; log "${error}"; exit 1; }

((EUID == 0)) || die "run as root: podman runs kind's nodes as privileged containers"
for cmd in podman buildah mmdebstrap cargo jq go; do
    command -v "${cmd}" >/dev/null 2>&1 || die "${cmd} is required (see integration/preflight.sh)"
done
cluster="${KIND_CLUSTER_NAME:-poolguard-e2e}"
release=poolguard
ns=poolguard-system
label=agentpool
pools=(pool1 gpu)
# The serving pods (the controller's have app.kubernetes.io/name=poolguard-controller).
sel="app.kubernetes.io/name=poolguard,app.kubernetes.io/instance=${release}"

passed=0 failed=0
failures=()
ok() { passed=$((passed + 1)); log "ok: $*"; }
bad() { failed=$((failed + 1)); failures+=("(${phase}) $*"); log "FAILED: $*"; }
declare -A timing=()
timing_order=()
phase="" phase_start=${SECONDS} t_total=${SECONDS}
begin() {
    if [[ -n "${phase}" ]]; then
        timing["${phase}"]=$((SECONDS - phase_start))
        timing_order+=("${phase}")
    fi
    phase="$1" phase_start=${SECONDS}
    log "=== $1"
}

work="$(mktemp -d "${TMPDIR:-/tmp}/poolguard-kind.XXXXXX")"
created=0
cleanup() {
    local rc=$?
    if ((created)); then
        if ((rc != 0 || failed > 0)); then
            log "nodes' state at the end:"
            kubectl get nodes -o wide >&2 2>/dev/null || true
            kubectl get pods -A -o wide >&2 2>/dev/null || true
        fi
        if [[ "${KEEP_CLUSTER:-0}" != 1 ]]; then
            "${kind}" delete cluster --name "${cluster}" >&2 || true
        else
            log "kept: cluster ${cluster} (KUBECONFIG=${work}/kubeconfig)"
        fi
    fi
    [[ "${KEEP_CLUSTER:-0}" == 1 ]] || rm -rf -- "${work}"
    if ((rc != 0 || failed > 0)); then
        local f
        for f in "${failures[@]}"; do
            log "FAILED: ${f}"
        done
        [[ -z "${error}" ]] || log "${error}"
        log "FAILED: ${passed} passed, ${failed} failed (exit ${rc})"
    fi
}
trap cleanup EXIT
export KUBECONFIG="${work}/kubeconfig"

# --- 1. builds ---------------------------------------------------------------------------------
begin "builds"
kind="$(integration/kind/kind.sh | tail -n1)"
node_image="$(integration/kind/build-node-image.sh | tail -n1)"
# kubectl of the pinned release (built with kubeadm for the node image; its cache is shared).
cp_bin="$(POOLGUARD_CP_BUILD_KUBECTL=1 integration/controlplane/build.sh kubelet kube-proxy kubeadm | tail -n1)"
export PATH="${cp_bin}:${PATH}"
helm="${HELM:-$(bash integration/helm/helm.sh | tail -n1)}"
policy_reporter="$(integration/policy-reporter/build.sh | tail -n1)"
archive="$(integration/image/build.sh | tail -n1)"
image="$(tar -xOf "${archive}" index.json | jq -r '.manifests[0].annotations["org.opencontainers.image.ref.name"]')"
[[ "${image}" == *:* ]] || die "cannot read the image's name from ${archive}"
cargo test --locked -p poolguard-e2e --test e2e --test bypasses --test fail_closed --no-run
cargo build --locked -p poolguard-e2e --bin under_load
target_dir="$(cargo metadata --format-version 1 --no-deps | jq -r .target_directory)"
under_load="${target_dir}/debug/under_load"
# shellcheck source=podman-env.sh
source integration/kind/podman-env.sh
kind_podman_setup "${work}"

# --- 2. the cluster ----------------------------------------------------------------------------
begin "kind create cluster"
if "${kind}" get clusters 2>/dev/null | grep -qx "${cluster}"; then
    log "deleting a cluster ${cluster} left by an earlier run"
    "${kind}" delete cluster --name "${cluster}" >&2
fi
cat >"${work}/kind.yaml" <<EOF
kind: Cluster
apiVersion: kind.x-k8s.io/v1alpha4
networking:
  kubeProxyMode: nftables
kubeadmConfigPatches:
  - |
    kind: KubeletConfiguration
    failCgroupV1: false
  - |
    kind: ClusterConfiguration
    dns:
      disabled: true
nodes:
  - role: control-plane
  - role: worker
    labels: {${label}: ${pools[0]}}
  - role: worker
    labels: {${label}: ${pools[0]}}
  - role: worker
    labels: {${label}: ${pools[1]}}
EOF
created=1
"${kind}" create cluster --name "${cluster}" --config "${work}/kind.yaml" --kubeconfig "${KUBECONFIG}" \
    --image "${node_image}" --wait 240s
# kind waits for the control plane only; the workers' network comes up once they have joined.
deadline=$((SECONDS + 240))
until [[ "$(kubectl get nodes -o json | jq '[.items[] | select(any(.status.conditions[]; .type == "Ready" and .status == "True"))] | length')" == 4 ]]; do
    ((SECONDS < deadline)) || break
    sleep 2
done
kubectl get nodes -o wide
not_ready="$(kubectl get nodes -o json | jq -r '.items[] | select(any(.status.conditions[]; .type == "Ready" and .status != "True")) | .metadata.name')"
[[ -z "${not_ready}" && "$(kubectl get nodes -o name | grep -c .)" == 4 ]] && ok "4 kind nodes Ready (kubelet $(kubectl get nodes -o jsonpath='{.items[0].status.nodeInfo.kubeletVersion}'))" \
    || die "nodes not Ready: ${not_ready}"
# kubeadm's DNS addon is off (README.md: nothing here resolves cluster names).
kubectl -n kube-system get deployment coredns >/dev/null 2>&1 && die "a coredns Deployment exists: the node image has no coredns"
log "no cluster DNS: kubeadm's coredns addon is disabled (dns.disabled)"

# --- 3. the image ------------------------------------------------------------------------------
begin "kind load image-archive"
"${kind}" load image-archive "${archive}" --name "${cluster}"
log "image ${image} loaded into every node"

# --- 4. the chart ------------------------------------------------------------------------------
{
    printf 'image: {repository: %s, tag: "%s", pullPolicy: Never}\n' "${image%:*}" "${image##*:}"
    printf 'config:\n'
    sed -e 's/^/  /' integration/e2e/manifests/poolguard-config.yaml
} >"${work}/values.yaml"
# The same without config.placement, for the native fallback step (5b).
awk '/^  placement:/ { skip = 1; next } skip && /^  [^ #]/ { skip = 0 } !skip' "${work}/values.yaml" \
    >"${work}/values-native.yaml"
# A pool's namespace with a pod bound, before poolguard is installed, to a worker of another pool:
# what the background audit must report (4c).
audit_ns=pg-kind-audit
kubectl create namespace "${audit_ns}" >/dev/null
kubectl label namespace "${audit_ns}" "${label}=${pools[0]}" >/dev/null
other_worker="$(kubectl get nodes -l "${label}=${pools[1]}" -o jsonpath='{.items[0].metadata.name}')"
printf '{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "misplaced", "namespace": "%s"},
  "spec": {"nodeName": "%s", "nodeSelector": {"%s": "%s"},
           "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]}}' \
    "${audit_ns}" "${other_worker}" "${label}" "${pools[0]}" | kubectl create -f - >/dev/null
# And one placed as its pool asks, whose policy results say what the misplaced pod's say: two
# results a report reader must keep apart (Policy Reporter, 4d).
printf '{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "placed", "namespace": "%s"},
  "spec": {"nodeSelector": {"%s": "%s"}, "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]}}' \
    "${audit_ns}" "${label}" "${pools[0]}" | kubectl create -f - >/dev/null
webhook_total() {
    kubectl get mutatingwebhookconfiguration,validatingwebhookconfiguration -o json |
        jq --arg r "${release}" '[.items[] | select(.metadata.name | startswith($r + "-")) | .webhooks // [] | length] | add // 0'
}

# --- 4a. a first install whose image cannot be pulled refuses nothing -------------------------
begin "helm install, image not pullable"
if "${helm}" --kubeconfig "${KUBECONFIG}" install "${release}" charts/poolguard -n "${ns}" --create-namespace \
    -f "${work}/values.yaml" --set image.tag=not-built-here --wait --timeout 30s >"${work}/helm-unpullable.out" 2>&1; then
    bad "helm install --wait succeeded with an image that cannot be pulled"
else
    ok "helm install --wait reports an image that cannot be pulled: $(tail -n1 "${work}/helm-unpullable.out")"
fi
[[ "$(webhook_total)" == 0 ]] && ok "the webhook configurations have no webhooks while no poolguard pod is ready" \
    || bad "$(webhook_total) webhooks registered while no poolguard pod is ready"
out="$(kubectl -n "${audit_ns}" run unpullable-install --image=registry.k8s.io/pause:3.10 --restart=Never \
    --dry-run=server -o name 2>&1)" \
    && ok "a pod in ${audit_ns} (${label}=${pools[0]}) is admitted while poolguard's image cannot be pulled" \
    || bad "a pod in ${audit_ns} was refused while poolguard's image cannot be pulled: ${out}"
"${helm}" --kubeconfig "${KUBECONFIG}" uninstall "${release}" -n "${ns}" --wait --timeout 60s >/dev/null 2>&1 \
    || bad "helm uninstall of the release whose image cannot be pulled failed"

begin "helm install"
"${helm}" --kubeconfig "${KUBECONFIG}" install "${release}" charts/poolguard -n "${ns}" --create-namespace \
    -f "${work}/values.yaml" --wait --timeout 5m
kubectl -n "${ns}" get pods -o wide
integration/e2e/await-webhooks.sh "${label}" "${pools[0]}" "${pools[1]}" 120
mapfile -t replica_nodes < <(kubectl -n "${ns}" get pods -l "${sel}" -o json |
    jq -r '.items[] | select(any(.status.conditions[]; .type == "Ready" and .status == "True")) | .spec.nodeName')
distinct="$(printf '%s\n' "${replica_nodes[@]}" | sort -u | grep -c . || true)"
if ((${#replica_nodes[@]} == 2 && distinct == 2)); then
    ok "the chart's 2 replicas are Ready on two different workers (${replica_nodes[*]}), spread by its default anti-affinity"
else
    bad "replicas Ready on: ${replica_nodes[*]:-none} (want 2 on different workers)"
fi

# --- 4b. the securityContext as the node's runtime applied it ----------------------------------
# Inside each replica's kind node (podman exec): the OCI spec containerd gave runc, and the
# container's process as that node's kernel view shows it (/proc of the node's PID namespace).
begin "securityContext evidence"
mapfile -t pods < <(kubectl -n "${ns}" get pods -l "${sel}" -o jsonpath='{range .items[*]}{.metadata.name}{"\n"}{end}')
for p in "${pods[@]}"; do
    node="$(kubectl -n "${ns}" get pod "${p}" -o jsonpath='{.spec.nodeName}')"
    cid="$(kubectl -n "${ns}" get pod "${p}" -o jsonpath='{.status.containerStatuses[0].containerID}')"
    cid="${cid#containerd://}"
    nctr=(podman exec "${node}" ctr --namespace k8s.io)
    spec="$("${nctr[@]}" containers info "${cid}" | jq -c '.Spec')" || { bad "pod ${p}: no container ${cid} in ${node}'s containerd"; continue; }
    runtime_view="$(jq -c '{readonlyRootfs: .root.readonly, uid: .process.user.uid, gid: .process.user.gid,
        noNewPrivileges: .process.noNewPrivileges, capabilities: (.process.capabilities.effective // []),
        seccomp: (.linux.seccomp.defaultAction // "none"), memoryLimit: .linux.resources.memory.limit}' <<<"${spec}")"
    log "pod ${p} on ${node}: OCI spec from containerd: ${runtime_view}"
    jq -e '.readonlyRootfs == true and .uid == 65532 and .gid == 65532 and .noNewPrivileges == true
        and (.capabilities | length) == 0 and .seccomp != "none" and .memoryLimit == 134217728' <<<"${runtime_view}" >/dev/null \
        && ok "pod ${p}: containerd told runc read-only root, uid/gid 65532, noNewPrivileges, no capabilities, seccomp $(jq -r .seccomp <<<"${runtime_view}"), memory limit 128Mi (the chart's securityContext and resources)" \
        || bad "pod ${p}: OCI spec ${runtime_view}"
    pid="$("${nctr[@]}" tasks ls | awk -v id="${cid}" '$1 == id { print $2 }')"
    proc="$(podman exec "${node}" sh -c "cat /proc/${pid:-none}/comm && grep -E '^(Uid|Gid|CapEff|Seccomp|NoNewPrivs):' /proc/${pid:-none}/status && awk '\$5 == \"/\" { print \$6; exit }' /proc/${pid:-none}/mountinfo" 2>/dev/null || true)"
    comm="$(head -n1 <<<"${proc}")"
    st="$(awk 'NR > 1 && NF > 1 && /:/ { printf "%s%s ", $1, $2 }' <<<"${proc}")"
    root_opts="$(tail -n1 <<<"${proc}")"
    log "pod ${p}: pid ${pid:-none} in ${node} (${comm}): ${st}root mount ${root_opts}"
    [[ "${comm}" == poolguard && "${st}" == *"Uid:65532 "* && "${st}" == *"CapEff:0000000000000000 "* && "${st}" == *"Seccomp:2 "* \
        && "${st}" == *"NoNewPrivs:1 "* && ",${root_opts}," == *",ro,"* ]] \
        && ok "pod ${p}: seen from ${node}'s kernel, poolguard (pid ${pid}) runs as uid 65532, CapEff 0, seccomp filter, no_new_privs, root filesystem mounted ro" \
        || bad "pod ${p}: process view '${comm}' ${st}root '${root_opts}'"
done

# --- 4c. the chart's admission path and writer, as the cluster runs them -----------------------
begin "Service, certificates, tokens, audit"
# (The test pod is deleted once it succeeds, so its log is read only when it fails.)
if "${helm}" --kubeconfig "${KUBECONFIG}" test "${release}" -n "${ns}" --timeout 90s >"${work}/helm-test.out" 2>&1 \
    && grep -q 'Phase: *Succeeded' "${work}/helm-test.out"; then
    ok "helm test: ${release}-config-check (poolguard config check on the installed config) $(grep -m1 'Phase:' "${work}/helm-test.out" | tr -s ' ')"
    kubectl -n "${ns}" get pod "${release}-config-check" >/dev/null 2>&1 \
        && bad "the succeeded helm test pod ${release}-config-check is still there"
else
    bad "helm test failed: $(tail -n 5 "${work}/helm-test.out") $(kubectl -n "${ns}" logs "${release}-config-check" 2>&1 | tail -n 3)"
fi
svc_ip="$(kubectl -n "${ns}" get service "${release}" -o jsonpath='{.spec.clusterIP}')"
mapfile -t pod_ips < <(kubectl -n "${ns}" get pods -l "${sel}" -o jsonpath='{range .items[*]}{.status.podIP}{"\n"}{end}' | sort)
ready_endpoints() {
    kubectl -n "${ns}" get endpointslices -l "kubernetes.io/service-name=${release}" -o json |
        jq -r '[.items[].endpoints // [] | .[] | select(.conditions.ready == true) | .addresses[]] | sort | join(" ")'
}
deadline=$((SECONDS + 60))
until [[ "$(ready_endpoints)" == "${pod_ips[*]}" ]] || ((SECONDS >= deadline)); do sleep 0.5; done
eps="$(ready_endpoints)"
[[ "${eps}" == "${pod_ips[*]}" && ${#pod_ips[@]} == 2 ]] \
    && ok "the EndpointSlice of Service ${ns}/${release} lists both serving pods ready: ${eps}" \
    || bad "the EndpointSlice lists '${eps}' ready, the serving pods have '${pod_ips[*]}'"
# Where the chart told the controller to keep the certificate and whose CA bundles to write.
controller_args="$(kubectl -n "${ns}" get deployment "${release}-controller" -o jsonpath='{.spec.template.spec.containers[0].args}')"
carg() { jq -r --arg f "$1" 'index($f) as $i | if $i == null then "" else .[$i + 1] end' <<<"${controller_args}"; }
cert_secret="$(carg --cert-secret)" cert_dns="$(carg --cert-dns-name)"
IFS=, read -r -a configs <<<"$(carg --webhook-configs)"
secret_ca="$(kubectl -n "${cert_secret%%/*}" get secret "${cert_secret#*/}" -o jsonpath='{.data.ca\.crt}' | base64 -d || true)"
[[ "${secret_ca}" == *"BEGIN CERTIFICATE"* ]] && ok "the controller created the certificate Secret ${cert_secret}" \
    || bad "Secret ${cert_secret} has no ca.crt"
for wc in "${configs[@]}"; do
    kind_of=mutatingwebhookconfiguration
    [[ "${wc}" == *validating* ]] && kind_of=validatingwebhookconfiguration
    kubectl get "${kind_of}" "${wc}" -o jsonpath='{.webhooks[0].clientConfig.caBundle}' | base64 -d >"${work}/${wc}-bundle.pem" || true
    [[ -n "${secret_ca}" ]] && grep -qF -- "$(sed -n 2p <<<"${secret_ca}")" "${work}/${wc}-bundle.pem" \
        && ok "${kind_of} ${wc}: the controller injected a caBundle holding the CA of ${cert_secret}" \
        || bad "${kind_of} ${wc}: the caBundle does not hold the Secret's CA"
done
# What the API server checks: each serving pod's certificate, for the Service's DNS name, against
# the injected bundle (reached through kubectl port-forward).
port=18443
for p in "${pods[@]}"; do
    kubectl -n "${ns}" port-forward "pod/${p}" "${port}:8443" >"${work}/port-forward.log" 2>&1 &
    pf=$!
    verified="" out=""
    for _ in $(seq 1 40); do
        if out="$(timeout 10 openssl s_client -connect "127.0.0.1:${port}" -servername "${cert_dns}" -verify_hostname "${cert_dns}" \
            -CAfile "${work}/${configs[0]}-bundle.pem" -verify_return_error </dev/null 2>&1)" \
            && grep -q 'Verify return code: 0 (ok)' <<<"${out}"; then
            verified=1
            break
        fi
        sleep 0.25
    done
    kill "${pf}" 2>/dev/null || true
    wait "${pf}" 2>/dev/null || true
    [[ -n "${verified}" ]] && ok "pod ${p} serves a certificate for ${cert_dns} that verifies against the injected caBundle" \
        || bad "pod ${p}: the certificate does not verify for ${cert_dns} against the injected caBundle: $(tail -n1 <<<"${out}")"
    port=$((port + 1))
done
# Who each identity is: the token kubelet projected into the pod, read in its node.
server="$(kubectl config view --minify -o jsonpath='{.clusters[0].cluster.server}')"
kubectl config view --raw --minify -o jsonpath='{.clusters[0].cluster.certificate-authority-data}' | base64 -d >"${work}/cluster-ca.crt"
controller_pod="$(kubectl -n "${ns}" get pods -l "app.kubernetes.io/name=poolguard-controller" -o jsonpath='{.items[0].metadata.name}')"
for p in "${pods[0]}" "${controller_pod}"; do
    read -r uid node sa < <(kubectl -n "${ns}" get pod "${p}" -o jsonpath='{.metadata.uid} {.spec.nodeName} {.spec.serviceAccountName}{"\n"}')
    # The file the projected `token` link resolves to (following the link itself may be refused
    # where fs.protected_symlinks = 1).
    token="$(podman exec "${node}" sh -c 'cat "$(readlink -f "$(find "/var/lib/kubelet/pods/$1/volumes/kubernetes.io~projected" -name token | head -n1)")"' sh "${uid}" 2>/dev/null || true)"
    whoami="$(KUBECONFIG=/dev/null kubectl --request-timeout=10s --server="${server}" --certificate-authority="${work}/cluster-ca.crt" \
        --token="${token:-none}" auth whoami -o jsonpath='{.status.userInfo.username}' 2>&1 || true)"
    [[ "${whoami}" == "system:serviceaccount:${ns}:${sa}" ]] \
        && ok "the token kubelet projected into ${p} authenticates as ${whoami}" \
        || bad "${p}'s token authenticates as '${whoami}', not its ServiceAccount ${sa}"
done
# (Read whole before searching: grep -q would stop reading, and nft dies of SIGPIPE on a big table.)
rules="$(podman exec "${replica_nodes[0]}" nft list table ip kube-proxy 2>&1 || true)"
grep -qF "${svc_ip}" <<<"${rules}" && ok "kube-proxy's nftables rules on ${replica_nodes[0]} route ${svc_ip}" \
    || bad "no nftables rule of kube-proxy on ${replica_nodes[0]} mentions ${svc_ip}: $(tail -n1 <<<"${rules}")"
# The background audit, run by the controller under the chart's CRD and RBAC.
report=""
deadline=$((SECONDS + 120))
until report="$(kubectl -n "${audit_ns}" get policyreports.wgpolicyk8s.io poolguard-audit -o json 2>/dev/null)" || ((SECONDS >= deadline)); do
    sleep 1
done
verdict="$(jq -r '.results[]? | select(.resources[0].name == "misplaced" and .policy == "placement") | "\(.result): \(.message)"' <<<"${report:-null}")"
[[ "${verdict}" == fail:*"${pools[0]}"*"${pools[1]}"* ]] \
    && ok "the controller's audit wrote PolicyReport ${audit_ns}/poolguard-audit: misplaced ${verdict}" \
    || bad "no audit result for ${audit_ns}/misplaced within 120 s (report: ${report:0:300})"
lease="$(carg --lease-name)"
holder="$(kubectl -n "${ns}" get lease "${lease}" -o jsonpath='{.spec.holderIdentity}' 2>/dev/null || true)"
[[ -n "${holder}" && "${holder}" == "${controller_pod}" ]] \
    && ok "the audit Lease ${ns}/${lease} is held by the controller's pod ${holder}" \
    || bad "the audit Lease is held by '${holder}', not the controller's pod ${controller_pod}"

# --- 4d. Policy Reporter reads what the audit wrote, for both report APIs ---------------------
begin "Policy Reporter"
export POOLGUARD_POLICY_REPORTER="${policy_reporter}"
if integration/policy-reporter/check.sh "${KUBECONFIG}" policyreport; then
    ok "Policy Reporter lists and counts every result of poolguard's PolicyReports"
else
    bad "Policy Reporter and poolguard's PolicyReports differ (above)"
fi
# Policy Reporter reads every report API the cluster serves: the PolicyReport CRDs (kept on
# uninstall) go, with their reports, before the controller writes openreports.io Reports.
kubectl delete crd policyreports.wgpolicyk8s.io clusterpolicyreports.wgpolicyk8s.io --wait=true >/dev/null
"${helm}" --kubeconfig "${KUBECONFIG}" upgrade "${release}" charts/poolguard -n "${ns}" \
    -f "${work}/values.yaml" --set audit.reportApi=openreports --wait --timeout 5m >/dev/null \
    || bad "helm upgrade to audit.reportApi=openreports failed"
deadline=$((SECONDS + 180))
until kubectl -n "${audit_ns}" get reports.openreports.io poolguard-audit >/dev/null 2>&1 || ((SECONDS >= deadline)); do
    sleep 1
done
if integration/policy-reporter/check.sh "${KUBECONFIG}" openreports; then
    ok "Policy Reporter lists and counts every result of poolguard's openreports.io Reports"
else
    bad "Policy Reporter and poolguard's openreports.io Reports differ (above)"
fi
# Back to the install's values (PolicyReports) for the steps that follow.
"${helm}" --kubeconfig "${KUBECONFIG}" upgrade "${release}" charts/poolguard -n "${ns}" \
    -f "${work}/values.yaml" --wait --timeout 5m >/dev/null \
    || bad "helm upgrade back to audit.reportApi=policyreport failed"
kubectl -n "${ns}" rollout status deployment/"${release}" --timeout=180s >/dev/null
mapfile -t pods < <(kubectl -n "${ns}" get pods -l "${sel}" --field-selector=status.phase=Running \
    -o jsonpath='{range .items[*]}{.metadata.name}{"\n"}{end}')

# --- 5. the tests ------------------------------------------------------------------------------
export POOLGUARD_E2E_POOLS="${pools[0]},${pools[1]}" POOLGUARD_E2E_NAMESPACE_LABEL="${label}"
# The chart's default validating.requireNamespaceLabel=false: unlabelled namespaces are validated.
export POOLGUARD_E2E_VALIDATES_UNLABELLED=1
SUITE_AGAINST=kind
# shellcheck source=../e2e/suite.sh
source integration/e2e/suite.sh
begin "e2e tests"
suite tests/e2e.rs --test e2e -- --nocapture
begin "bypass tests"
suite tests/bypasses.rs --test bypasses -- --nocapture
# What the suites cost each serving pod: its peak RSS (VmHWM, read in its node), within the
# chart's 128Mi limit, and no restart (no OOM kill, no failed probe).
for p in "${pods[@]}"; do
    read -r node cid restarts < <(kubectl -n "${ns}" get pod "${p}" \
        -o jsonpath='{.spec.nodeName} {.status.containerStatuses[0].containerID} {.status.containerStatuses[0].restartCount}{"\n"}')
    cid="${cid#containerd://}"
    pid="$(podman exec "${node}" ctr --namespace k8s.io tasks ls | awk -v id="${cid}" '$1 == id { print $2 }')"
    hwm="$(podman exec "${node}" awk '/^VmHWM/ { print $2 }' "/proc/${pid:-none}/status" 2>/dev/null || true)"
    [[ "${hwm}" =~ ^[0-9]+$ ]] && ((hwm < 131072)) && [[ "${restarts}" == 0 ]] \
        && ok "pod ${p}: peak RSS ${hwm} kB after the e2e and bypass suites (limit 131072 kB), 0 restarts" \
        || bad "pod ${p}: peak RSS '${hwm}' kB, ${restarts} restarts"
done
begin "fail-closed test"
k="kubectl --request-timeout=10s -n ${ns}"
printf '%s\n' "set -eu" \
    "${k} scale deployment/${release} --replicas=0 >/dev/null" \
    "until [ -z \"\$(${k} get pods -l ${sel} -o name)\" ]; do sleep 0.5; done" \
    "until [ -z \"\$(${k} get endpointslices -l kubernetes.io/service-name=${release} -o jsonpath='{.items[*].endpoints[*].addresses[*]}')\" ]; do sleep 0.5; done" \
    "echo 'poolguard scaled to 0: no pod, no endpoint'" >"${work}/poolguard-stop.sh"
printf '%s\n' "set -eu" \
    "${k} scale deployment/${release} --replicas=2 >/dev/null" \
    "${k} rollout status deployment/${release} --timeout=150s" \
    "until [ \"\$(${k} get endpointslices -l kubernetes.io/service-name=${release} -o json | jq '[.items[].endpoints // [] | .[] | select(.conditions.ready == true)] | length')\" = 2 ]; do sleep 0.5; done" \
    "echo 'poolguard back to 2 ready replicas'" >"${work}/poolguard-start.sh"
export POOLGUARD_E2E_STOP_CMD="bash ${work}/poolguard-stop.sh" POOLGUARD_E2E_START_CMD="bash ${work}/poolguard-start.sh"
suite tests/fail_closed.rs --test fail_closed -- --ignored --nocapture

begin "operations under load"
ops="${POOLGUARD_UNDER_LOAD_OPERATIONS:-rollout-restart,delete-pod,kill-replica,drain,stop-worker}"
set +e
"${under_load}" --rate "${POOLGUARD_UNDER_LOAD_RATE:-20}" --seconds "${POOLGUARD_UNDER_LOAD_SECONDS:-30}" \
    --operations "${ops}" --namespace "${ns}" --release "${release}" --pool "${pools[0]}" --label "${label}" \
    --stop-node-cmd "podman kill --signal KILL {node}" \
    >"${work}/under-load.out" 2> >(tee "${work}/under-load.log" | sed 's/^/[kind]   /' >&2)
ul_rc=$?
set -e
sleep 0.2
log "operations under load (2 replicas on 3 workers):"
sed 's/^/[kind]   /' "${work}/under-load.out" >&2
while read -r row; do
    [[ "${row}" =~ op=([a-z]+)\ attempted=([0-9]+)\ admitted=([0-9]+)\ failed=([0-9]+)\ lost=([0-9]+)\ unplaced=([0-9]+).*retried=([0-9]+)\ retries_failed=([0-9]+)\ kept=(true|false) ]] || continue
    r=("${BASH_REMATCH[@]}")
    if [[ "${r[9]}" == true ]]; then
        ok "under load, ${r[1]}: ${r[2]} pod CREATEs, ${r[3]} admitted with their pool, ${r[4]} failed (each retried: $((r[7] - r[8])) admitted), 0 lost"
    else
        bad "under load, ${r[1]}: ${r[2]} attempted, ${r[4]} failed, ${r[5]} lost, ${r[6]} admitted without their pool, ${r[8]} retries failed"
    fi
done < <(grep -o 'row: .*' "${work}/under-load.log" || true)
((ul_rc == 0 || ul_rc == 1)) || bad "under_load stopped with an error (exit ${ul_rc}, see above)"
[[ -s "${work}/under-load.out" ]] || bad "under_load printed no table"

# --- 5b. native admission with the webhook as the fallback, poolguard scaled to 0 ---------------
# helm upgrade to native.mode=apply with native.webhookFallback and the e2e config without
# config.placement (namespaces whose pool is chosen keep the webhook): the leader writes the native objects and leaves the pod and
# workload webhooks out once they read back as generated; with the Deployment scaled to 0 a pod
# in a pool's namespace still gets its pool, and a foreign image and another pool are refused.
# Then back to the install's values (native.mode=off): the webhooks are registered again and the
# objects deleted.
begin "native fallback"
pod_webhooks() {
    kubectl get mutatingwebhookconfiguration "${release}-mutating" -o jsonpath='{.webhooks[*].name}'
    printf ' | '
    kubectl get validatingwebhookconfiguration "${release}-validating" -o jsonpath='{.webhooks[*].name}'
}
await_webhooks() { # what want-regex seconds
    local deadline=$((SECONDS + $3)) got=""
    until got="$(pod_webhooks 2>&1)" && [[ "${got}" =~ $2 ]]; do
        ((SECONDS < deadline)) || { bad "$1: webhooks '${got}' after $3 s"; return 1; }
        sleep 1
    done
    ok "$1 ('${got}')"
}
native_kinds=validatingadmissionpolicies,validatingadmissionpolicybindings,mutatingadmissionpolicies,mutatingadmissionpolicybindings
if "${helm}" --kubeconfig "${KUBECONFIG}" upgrade "${release}" charts/poolguard -n "${ns}" \
    -f "${work}/values-native.yaml" --set native.mode=apply --set native.webhookFallback=true \
    --wait --timeout 5m >/dev/null; then
    ok "helm upgrade to native.mode=apply, native.webhookFallback=true"
else
    bad "helm upgrade to native.mode=apply failed"
fi
if await_webhooks "the leader left the pod and workload webhooks out" '^ \| exceptions\.poolguard\.io pool-authority\.poolguard\.io' 180; then
    kubectl create namespace pg-kind-native >/dev/null
    kubectl label namespace pg-kind-native "${label}=${pools[0]}" >/dev/null
    bash "${work}/poolguard-stop.sh" >&2
    native_pod() { # name image [nodeSelector JSON]
        local selector="${3:-}"
        [[ -n "${selector}" ]] || selector='{}'
        printf '{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "%s", "namespace": "pg-kind-native"},
          "spec": {"nodeSelector": %s, "containers": [{"name": "c", "image": "%s"}]}}' "$1" "${selector}" "$2"
    }
    got="$(native_pod placed registry.k8s.io/pause:3.10 | kubectl create --dry-run=server -f - \
        -o jsonpath='{.spec.nodeSelector.agentpool} {.metadata.annotations.poolguard\.io/pool}' 2>&1)"
    [[ "${got}" == "${pools[0]} ${pools[0]}" ]] \
        && ok "poolguard at 0 replicas: a pod in pool ${pools[0]}'s namespace got its pool from the native objects" \
        || bad "poolguard at 0 replicas: the pod got '${got}', not pool ${pools[0]}"
    if out="$(native_pod foreign docker.io/library/nginx:1.27 | kubectl create --dry-run=server -f - 2>&1)"; then
        bad "poolguard at 0 replicas: a foreign image was admitted"
    else
        [[ "${out}" == *poolguard-allowedrepositories* ]] && ok "poolguard at 0 replicas: a foreign image is refused by poolguard-allowedrepositories" \
            || bad "poolguard at 0 replicas: a foreign image refused otherwise: ${out}"
    fi
    if out="$(native_pod override registry.k8s.io/pause:3.10 "{\"${label}\": \"${pools[1]}\"}" |
        kubectl create --dry-run=server -f - 2>&1)"; then
        bad "poolguard at 0 replicas: another pool was admitted"
    else
        [[ "${out}" == *poolguard-placement* ]] && ok "poolguard at 0 replicas: another pool is refused by poolguard-placement" \
            || bad "poolguard at 0 replicas: another pool refused otherwise: ${out}"
    fi
    bash "${work}/poolguard-start.sh" >&2
    kubectl delete namespace pg-kind-native --wait=false >/dev/null
fi
"${helm}" --kubeconfig "${KUBECONFIG}" upgrade "${release}" charts/poolguard -n "${ns}" \
    -f "${work}/values.yaml" --wait --timeout 5m >/dev/null \
    || bad "helm upgrade back to native.mode=off failed"
await_webhooks "native.mode=off: the controller registers the pod and workload webhooks again" \
    '^mutate\.poolguard\.io \| validate\.poolguard\.io exceptions\.poolguard\.io pool-authority' 120 || true
# native.mode apply -> off leaves the objects (docs/native.md): delete them, as the docs say.
kubectl delete "${native_kinds}" -l app.kubernetes.io/managed-by=poolguard >/dev/null

# --- 6. helm uninstall -------------------------------------------------------------------------
begin "helm uninstall"
args_json="$(kubectl -n "${ns}" get deployment "${release}-controller" -o jsonpath='{.spec.template.spec.containers[0].args}')"
IFS=, read -r -a webhook_configs <<<"$(jq -r 'index("--webhook-configs") as $i | if $i == null then "" else .[$i + 1] end' <<<"${args_json}")"
((${#webhook_configs[@]} == 2)) || bad "the controller's --webhook-configs names '${webhook_configs[*]}', expected two configurations"
# Pods of an earlier rollout (the upgrade back to native.mode=off) may still be terminating, and
# one that ends before the watch below starts would show no exit: wait until only the
# Deployment's current replicas are left, so that every pod checked here is one the uninstall stops.
replicas="$(kubectl -n "${ns}" get deployment "${release}" -o jsonpath='{.spec.replicas}')"
deadline=$((SECONDS + 120))
until (($(kubectl -n "${ns}" get pods -l "${sel}" -o name | wc -l) == replicas)); do
    ((SECONDS < deadline)) || { bad "pods of an earlier rollout still there after 120 s"; break; }
    sleep 1
done
mapfile -t pods < <(kubectl -n "${ns}" get pods -l "${sel}" -o jsonpath='{range .items[*]}{.metadata.name}{"\n"}{end}')
# Each container's exit as kubelet reports it while the pods terminate.
kubectl -n "${ns}" get pods -l "${sel}" --watch --output-watch-events=false \
    -o jsonpath='{.metadata.name} {.status.containerStatuses[0].state.terminated.exitCode} {.status.containerStatuses[0].state.terminated.reason}{"\n"}' \
    >"${work}/terminations.log" 2>/dev/null &
watch_pid=$!
"${helm}" --kubeconfig "${KUBECONFIG}" uninstall "${release}" -n "${ns}" --wait --timeout 90s >/dev/null 2>&1 \
    && ok "helm uninstall" || bad "helm uninstall failed"
# A pod on the worker the operations above stopped (the controller's single replica may have been
# rescheduled there) cannot terminate: no kubelet confirms it. Delete those at once, as an
# operator would for a node that is gone, and say so; every other pod must stop by itself.
not_ready="$(kubectl get nodes -o json | jq -c '[.items[] | select(any(.status.conditions[]; .type == "Ready" and .status != "True")) | .metadata.name]')"
while read -r p node; do
    [[ -n "${p}" ]] || continue
    log "pod ${p} is on ${node}, which is not Ready (stopped above): deleted with --force"
    kubectl -n "${ns}" delete pod "${p}" --force --grace-period=0 >/dev/null 2>&1 || true
done < <(kubectl -n "${ns}" get pods -o json | jq -r --argjson down "${not_ready}" \
    '.items[] | select(.spec.nodeName as $n | $down | index($n)) | "\(.metadata.name) \(.spec.nodeName)"')
deadline=$((SECONDS + 90))
until [[ -z "$(kubectl -n "${ns}" get pods -o name 2>/dev/null)" ]]; do
    ((SECONDS < deadline)) || break
    sleep 1
done
sleep 1
kill "${watch_pid}" 2>/dev/null || true
wait "${watch_pid}" 2>/dev/null || true
[[ -z "$(kubectl -n "${ns}" get pods -o name 2>/dev/null)" ]] \
    && ok "kubelet terminated both pods (preStop sleep, SIGTERM)" || bad "pods left: $(kubectl -n "${ns}" get pods -o name | tr '\n' ' ')"
for p in "${pods[@]}"; do
    exit_line="$(awk -v p="${p}" '$1 == p && $2 != "" { l = $0 } END { print l }' "${work}/terminations.log")"
    read -r _ code reason <<<"${exit_line:-x}"
    [[ "${code:-}" == 0 ]] && ok "pod ${p}: poolguard exited 0 after SIGTERM (${reason:-})" \
        || bad "pod ${p}: exit as kubelet reported it: '${code:-none}' ${reason:-}"
done
left="$(kubectl get mutatingwebhookconfigurations,validatingwebhookconfigurations -o name | grep -E "/(${webhook_configs[0]:-x}|${webhook_configs[1]:-x})\$" || true)"
[[ -z "${left}" ]] && ok "no webhook configuration left after helm uninstall" || bad "left behind: ${left}"
left="$(kubectl -n "${ns}" get deployment,replicaset,service,pods,poddisruptionbudget -o name 2>/dev/null || true)"
[[ -z "${left}" ]] && ok "no Deployment, ReplicaSet, Service, PodDisruptionBudget or pod of the release left" || bad "left behind: ${left}"
kubectl create namespace pg-kind-after >/dev/null
kubectl label namespace pg-kind-after "${label}=${pools[0]}" >/dev/null
after_pod='{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "probe", "namespace": "pg-kind-after"},
  "spec": {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]}}'
deadline=$((SECONDS + 30))
until out="$(kubectl create --dry-run=server -o jsonpath='{.spec.nodeSelector}' -f - <<<"${after_pod}" 2>&1)" && [[ -z "${out}" ]]; do
    ((SECONDS < deadline)) || break
    sleep 0.5
done
[[ -z "${out}" ]] && ok "after uninstall a pod in a labelled namespace is admitted untouched" || bad "after uninstall: ${out}"

begin summary
log "timings:"
for p in "${timing_order[@]}"; do
    printf '[kind]   %-28s %6ss\n' "${p}" "${timing[${p}]}" >&2
done
printf '[kind]   %-28s %6ss\n' total "$((SECONDS - t_total))" >&2
echo "${passed} passed, ${failed} failed"
((failed == 0))
