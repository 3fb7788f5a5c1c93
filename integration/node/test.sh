#!/usr/bin/env bash
# poolguard's own image on a real node: the chart installed with helm, its pods run by
# kubelet + containerd + runc from the image built here, the API server calling the webhooks
# through the Service (kube-proxy), then the e2e suites and operations under load against those
# pods.
#
#   sudo integration/node/test.sh        # root: bridge, cgroups, mounts, nftables (see README.md)
#
# 1. builds: control plane + kubelet + kube-proxy, containerd + CNI plugins, the pause image, helm,
#    poolguard's image (integration/image/build.sh, checked against the Dockerfile), the tests and
#    the under_load harness; every prerequisite is checked first (one line each when missing);
# 2. control plane with controllers; kube-apiserver on all addresses (pods reach it through the
#    kubernetes Service), IP 10.0.0.1 in its certificate, kubelet access by InternalIP with the
#    admin client certificate (kubectl logs); the fake nodes of integration/e2e.sh (pool1 x2, gpu);
# 3. the real node (start.sh) with the image imported;
# 4. helm install with the chart's defaults (2 replicas, securityContext, resources, PDB,
#    certificates.mode=self unchanged) plus: the image (localhost/poolguard:<version>, pullPolicy
#    Never), nodeSelector + toleration for the real node, `config` =
#    integration/e2e/manifests/poolguard-config.yaml; waits until both pods are Ready through
#    kubelet's probes;
# 5. evidence from the runtime and the host: the OCI spec containerd gave runc (read-only root,
#    uid, no new privileges, capabilities, seccomp), the memory limit in the container's cgroup,
#    and each container's process as seen from the host (uid, CapEff, Seccomp, NoNewPrivs, its
#    root mount read-only);
# 6. the chart's own admission path: the Service's EndpointSlice lists both pods ready; poolguard
#    created its certificate Secret and injected its CA into both webhook configurations; the
#    certificate served through the ClusterIP and at each pod verifies for the Service's DNS name
#    against the injected bundle; poolguard's own token authenticates as the chart's
#    ServiceAccount; kube-proxy routes the ClusterIP; the webhooks are in effect through it;
#    the background audit, under the chart's CRD and RBAC, reports a pod created before the
#    install on another pool's node, and one replica holds its Lease;
# 7. the e2e suites against those pods: tests/e2e.rs, tests/bypasses.rs (the two size tests alone,
#    with each pod's peak RSS), poolguard's admission counter grown; tests/fail_closed.rs (the
#    Deployment scaled to 0 and back to 2);
# 8. operations under load (integration/e2e/src/bin/under_load.rs): pods created steadily while
#    `kubectl rollout restart`, deleting one replica's pod, SIGKILL of one replica's poolguard
#    (the kubelet restarts it; the other replica keeps admitting), `kubectl drain` of the node; a
#    table of admissions attempted / failed and pods lost;
# 9. helm uninstall: kubelet runs the preStop sleep and SIGTERM, poolguard exits 0, nothing of the
#    release is left, and a pod in a labelled namespace is admitted untouched.
# Prints "N passed, N failed" and the time of each phase. Everything started is stopped on exit;
# on failure the work directory (logs) is kept.
#
# Environment: POOLGUARD_E2E_FILTER (test name filters for tests/e2e.rs), POOLGUARD_NODE_TEST_KEEP=1
# (keep the work directory), POOLGUARD_UNDER_LOAD_RATE (default 20 pods/s),
# POOLGUARD_UNDER_LOAD_SECONDS (default 30 per operation), POOLGUARD_UNDER_LOAD_OPERATIONS
# (default rollout-restart,delete-pod,drain; "none" skips the phase), HELM, CARGO_TARGET_DIR,
# KUBEBUILDER_ASSETS/POOLGUARD_CP_CACHE/POOLGUARD_NODE_CACHE.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "${root}"

log() { printf '[node-test] %s\n' "$*" >&2; }
die() { printf '[node-test] error (%s): %s\n' "${phase:-setup}" "$*" >&2; exit 1; }

release=poolguard
ns=poolguard-system
label=agentpool
pools=(pool1 gpu)
phase=prerequisites
((EUID == 0)) || die "run as root: the node creates a bridge, cgroups, mounts and nftables rules"
# Everything the phases below need, checked before anything is built: one line per missing piece.
for pair in jq:jq curl:curl openssl:openssl ip:iproute2 ss:iproute2 nft:nftables runc:runc buildah:buildah \
    musl-gcc:musl-tools strip:binutils flock:util-linux apt-get:apt dpkg-deb:dpkg; do
    command -v "${pair%%:*}" >/dev/null 2>&1 || die "${pair%%:*} is missing (Debian: apt-get install -y ${pair#*:})"
done
command -v go >/dev/null 2>&1 || die "go is missing (the node's binaries are built from Go modules)"
command -v cargo >/dev/null 2>&1 || die "cargo is missing (install Rust with rustup)"
musl_target=x86_64-unknown-linux-musl
if command -v rustup >/dev/null 2>&1; then
    rustup target list --installed 2>/dev/null | grep -qx "${musl_target}" \
        || die "the Rust target ${musl_target} is not installed (rustup target add ${musl_target})"
fi
# (A kube-proxy just stopped can linger as a zombie until init reaps it: not a running one.)
pid="$(pgrep -x kube-proxy | while read -r p; do
    [[ "$(awk '{ print $3 }' "/proc/${p}/stat" 2>/dev/null)" =~ ^[RSD]$ ]] && echo "${p}"
done | head -n1 || true)"
if [[ -n "${pid}" ]]; then
    die "a kube-proxy already runs on this machine (pid ${pid}): only one real node at a time (stop it with integration/node/stop.sh)"
fi

work="$(mktemp -d "${TMPDIR:-/tmp}/poolguard-nodetest.XXXXXX")"
chmod 0711 "${work}"
cp_state="${work}/controlplane"
node_dir="${work}/node"
cp_started=0
node_started=0
passed=0
failed=0
declare -A timing=()
timing_order=()
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }
t_total="$(now)"
t_phase="$(now)"
begin() {
    if [[ "${phase}" != prerequisites ]]; then
        timing["${phase}"]="$(since "${t_phase}")"
        timing_order+=("${phase}")
    fi
    phase="$1"
    t_phase="$(now)"
    log "=== ${phase}"
}
ok() { passed=$((passed + 1)); log "ok: $*"; }
bad() { failed=$((failed + 1)); log "FAIL: $*"; }

cleanup() {
    local rc=$?
    set +e
    trap - EXIT INT TERM
    if ((rc != 0)); then
        printf '\n[node-test] FAILED in phase "%s" (exit %s)\n' "${phase}" "${rc}" >&2
        for f in "${node_dir}"/kubelet/pod-logs/*/poolguard/0.log; do
            [[ -f "${f}" ]] || continue
            printf '\n[node-test] ---- tail of %s\n' "${f}" >&2
            tail -n 20 "${f}" >&2
        done
        for c in kubelet containerd kube-proxy; do
            [[ -f "${node_dir}/logs/${c}.log" ]] || continue
            printf '\n[node-test] ---- errors in the %s log\n' "${c}" >&2
            grep -E '^E|level=error' "${node_dir}/logs/${c}.log" | tail -n 10 >&2
        done
    fi
    ((node_started)) && integration/node/stop.sh "${node_dir}"
    ((cp_started)) && integration/controlplane/stop.sh "${cp_state}" 2>/dev/null
    if ((rc != 0)) || [[ "${POOLGUARD_NODE_TEST_KEEP:-0}" == 1 ]]; then
        printf '[node-test] logs kept in %s\n' "${work}" >&2
    else
        umount_left="$(awk -v d="${work}/" 'index($5, d) == 1' /proc/self/mountinfo | wc -l)"
        if ((umount_left == 0)); then rm -rf -- "${work}"; else log "mounts left below ${work}; not deleting it"; fi
    fi
    exit "${rc}"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# --- 1. build ----------------------------------------------------------------------------------
begin build
t="$(now)"
cp_bin="$(integration/controlplane/build.sh kubelet kube-proxy | tail -n1)"
integration/node/build.sh >/dev/null
integration/node/build-pause.sh >/dev/null
log "node binaries: $(since "${t}")s"
helm_bin="${HELM:-$(bash integration/helm/helm.sh | tail -n1)}"
t="$(now)"
image_tar="$(integration/image/build.sh | tail -n1)"
log "image: $(since "${t}")s"
image_ref="$(tar -xOf "${image_tar}" index.json | jq -r '.manifests[0].annotations["org.opencontainers.image.ref.name"]')"
image_id="$(integration/image/check.sh --summary "${image_tar}" | sed -n 's/^ID \(sha256:[0-9a-f]*\),.*/\1/p')"
ok "image ${image_ref}: $(integration/image/check.sh --summary "${image_tar}")"
cargo test --locked -p poolguard-e2e --test e2e --test bypasses --test fail_closed --no-run
cargo build --locked -p poolguard-e2e --bin under_load
target_dir="${CARGO_TARGET_DIR:-${root}/target}"
[[ "${target_dir}" == /* ]] || target_dir="${root}/${target_dir}"
under_load="${target_dir}/debug/under_load"
[[ -x "${under_load}" ]] || die "${under_load} was not built"
kubectl() { "${cp_bin}/kubectl" --request-timeout=10s "$@"; }
helm() { "${helm_bin}" --kubeconfig "${KUBECONFIG}" "$@"; }

# --- 2. control plane ----------------------------------------------------------------------------
begin "control plane"
POOLGUARD_CP_BIN="${cp_bin}" POOLGUARD_CP_CONTROLLERS=1 \
    POOLGUARD_CP_CONTROLLER_MANAGER_ARGS='--controllers=*,-node-lifecycle-controller' \
    POOLGUARD_CP_APISERVER_ARGS="--bind-address=0.0.0.0 --kubelet-preferred-address-types=InternalIP --kubelet-client-certificate=${cp_state}/pki/admin.crt --kubelet-client-key=${cp_state}/pki/admin.key" \
    POOLGUARD_CP_APISERVER_SANS="IP:10.0.0.1" \
    integration/controlplane/start.sh "${cp_state}" >/dev/null
cp_started=1
export KUBECONFIG="${cp_state}/kubeconfig"
for n in "${pools[0]}-node-1:${pools[0]}" "${pools[0]}-node-2:${pools[0]}" "${pools[1]}-node-1:${pools[1]}"; do
    KUBECTL="${cp_bin}/kubectl" integration/controlplane/fake-node.sh "${n%%:*}" "${label}" "${n#*:}"
done
deadline=$((SECONDS + 30))
until kubectl -n kube-system get serviceaccount default >/dev/null 2>&1; do
    ((SECONDS < deadline)) || die "the ServiceAccount controller did not create kube-system/default"
    sleep 0.5
done

# --- 3. the real node --------------------------------------------------------------------------
begin "real node"
node_started=1
integration/node/start.sh "${cp_state}" "${node_dir}" "${image_tar}" >/dev/null
# shellcheck disable=SC1091
source "${node_dir}/env"
kubectl get nodes -o wide >&2
[[ "$(kubectl get node "${POOLGUARD_NODE_NAME}" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}')" == True ]] \
    && ok "node ${POOLGUARD_NODE_NAME} Ready: $(kubectl get node "${POOLGUARD_NODE_NAME}" -o jsonpath='kubelet {.status.nodeInfo.kubeletVersion}, {.status.nodeInfo.containerRuntimeVersion}, runc from Debian, cgroup v1 (failCgroupV1=false), cgroupfs')" \
    || die "node ${POOLGUARD_NODE_NAME} is not Ready"
ctr() { "${POOLGUARD_NODE_BIN}/ctr" --address "${POOLGUARD_NODE_CONTAINERD}" --namespace k8s.io "$@" 2> >(grep -v DEPRECATION >&2); }
rt_id="$(ctr images ls name=="${image_ref}" | awk 'NR == 2 { print $3 }')"
ok "containerd has ${image_ref} (manifest ${rt_id}; image ID ${image_id})"

# --- 4. helm install -----------------------------------------------------------------------------
# Something for the chart's background audit to find: a pod created before poolguard, in a
# namespace of the first pool, bound to a node of the second.
audit_ns=pg-node-audit
kubectl create namespace "${audit_ns}" >/dev/null
kubectl label namespace "${audit_ns}" "${label}=${pools[0]}" >/dev/null
kubectl -n "${audit_ns}" create serviceaccount default >/dev/null 2>&1 || true
kubectl -n "${audit_ns}" apply -f - >/dev/null <<POD
apiVersion: v1
kind: Pod
metadata: {name: misplaced}
spec:
  nodeName: ${pools[1]}-node-1
  nodeSelector: {${label}: ${pools[0]}}
  containers: [{name: main, image: registry.k8s.io/pause:3.10}]
POD
{
    printf '# generated by integration/node/test.sh\n'
    printf 'image:\n  repository: %s\n  tag: "%s"\n  pullPolicy: Never\n' "${image_ref%:*}" "${image_ref##*:}"
    printf 'nodeSelector:\n  poolguard.io/real-node: "true"\n'
    printf 'tolerations:\n- key: poolguard.io/real-node\n  operator: Exists\n  effect: NoSchedule\n'
    printf 'config:\n'
    sed -e 's/^/  /' integration/e2e/manifests/poolguard-config.yaml
} >"${work}/values.yaml"
# A first install whose image cannot be pulled refuses nothing and says so: helm install --wait
# fails, the webhook configurations have no webhooks, a pod in a pool's namespace is admitted.
begin "helm install with an image that cannot be pulled"
if helm install "${release}" charts/poolguard -n "${ns}" --create-namespace -f "${work}/values.yaml" \
    --set image.tag=not-built-here --wait --timeout 30s >"${work}/helm-install-unpullable.out" 2>&1; then
    bad "helm install --wait succeeded with an image that cannot be pulled"
else
    ok "helm install --wait reports the problem: $(tail -n1 "${work}/helm-install-unpullable.out")"
fi
webhook_total() {
    kubectl get mutatingwebhookconfiguration,validatingwebhookconfiguration -o json |
        jq --arg r "${release}" '[.items[] | select(.metadata.name | startswith($r + "-")) | .webhooks // [] | length] | add // 0'
}
[[ "$(webhook_total)" == 0 ]] && ok "the webhook configurations have no webhooks while no poolguard pod is ready" \
    || bad "$(webhook_total) webhooks registered while no poolguard pod is ready"
kubectl -n "${audit_ns}" run unpullable-install --image=registry.k8s.io/pause:3.10 --restart=Never >/dev/null 2>&1 \
    && ok "a pod in namespace ${audit_ns} (${label}=${pools[0]}) is admitted while poolguard's image cannot be pulled" \
    || bad "a pod in ${audit_ns} was refused while poolguard's image cannot be pulled"
kubectl -n "${audit_ns}" delete pod unpullable-install --force --grace-period=0 >/dev/null 2>&1 || true
helm uninstall "${release}" -n "${ns}" --wait --timeout 60s >/dev/null 2>&1 || bad "helm uninstall of the unpullable release failed"
begin "helm install"
helm install "${release}" charts/poolguard -n "${ns}" --create-namespace -f "${work}/values.yaml" \
    >"${work}/helm-install.out" 2>&1 || { cat "${work}/helm-install.out" >&2; die "helm install failed"; }
ok "helm install ${release} charts/poolguard -n ${ns} (image ${image_ref}, pullPolicy Never, pinned to ${POOLGUARD_NODE_NAME})"
kubectl -n "${ns}" rollout status deployment/"${release}" --timeout=180s >&2 \
    || { kubectl -n "${ns}" get pods -o wide >&2; kubectl -n "${ns}" get events >&2; die "the Deployment did not become ready within 180s"; }
kubectl -n "${ns}" get pods -o wide >&2
mapfile -t pods < <(kubectl -n "${ns}" get pods -l "app.kubernetes.io/name=poolguard" -o jsonpath='{range .items[*]}{.metadata.name}{"\n"}{end}')
ready=0
for p in "${pods[@]}"; do
    st="$(kubectl -n "${ns}" get pod "${p}" -o jsonpath='{.status.phase} {.status.conditions[?(@.type=="Ready")].status} {.spec.nodeName} {.status.containerStatuses[0].imageID}')"
    [[ "${st}" == "Running True ${POOLGUARD_NODE_NAME} "* ]] && ready=$((ready + 1))
    log "pod ${p}: ${st}"
done
((ready == 2 && ${#pods[@]} == 2)) && ok "both replicas Running and Ready (kubelet's startup/readiness probes) on ${POOLGUARD_NODE_NAME}" \
    || bad "${ready} of ${#pods[@]} pods Running and Ready, expected 2 of 2"
# helm test: poolguard config check on the installed config, policies and placement policies.
# (The test pod is deleted once it succeeds.)
if helm test "${release}" -n "${ns}" --timeout 90s >"${work}/helm-test.out" 2>&1 \
    && grep -q 'Phase: *Succeeded' "${work}/helm-test.out"; then
    ok "helm test: ${release}-config-check $(grep -m1 'Phase:' "${work}/helm-test.out" | tr -s ' ')"
else
    bad "helm test failed: $(tail -n 5 "${work}/helm-test.out")"
fi

# --- 5. the securityContext as the runtime applied it ---------------------------------------------
begin "securityContext evidence"
# Host pid of a pod's container (containerd's task).
container_pid() { # pod
    local cid
    cid="$(kubectl -n "${ns}" get pod "$1" -o jsonpath='{.status.containerStatuses[0].containerID}')"
    ctr tasks ls | awk -v id="${cid#containerd://}" '$1 == id { print $2 }'
}
for p in "${pods[@]}"; do
    cid="$(kubectl -n "${ns}" get pod "${p}" -o jsonpath='{.status.containerStatuses[0].containerID}')"
    cid="${cid#containerd://}"
    spec="$(ctr containers info "${cid}" | jq -c '.Spec')"
    runtime_view="$(jq -c '{readonlyRootfs: .root.readonly, uid: .process.user.uid, gid: .process.user.gid,
        noNewPrivileges: .process.noNewPrivileges, capabilities: (.process.capabilities.effective // []),
        seccomp: (.linux.seccomp.defaultAction // "none"), memoryLimit: .linux.resources.memory.limit}' <<<"${spec}")"
    log "pod ${p}: OCI spec from containerd: ${runtime_view}"
    jq -e '.readonlyRootfs == true and .uid == 65532 and .gid == 65532 and .noNewPrivileges == true
        and (.capabilities | length) == 0 and .seccomp != "none"' <<<"${runtime_view}" >/dev/null \
        && ok "pod ${p}: readOnlyRootFilesystem, runAsNonRoot (uid 65532), no privilege escalation, no capabilities, seccomp RuntimeDefault: containerd told runc read-only root, uid/gid 65532, noNewPrivileges, no capabilities, seccomp $(jq -r .seccomp <<<"${runtime_view}")" \
        || bad "pod ${p}: OCI spec ${runtime_view}"
    cg_limit="$(cat "/sys/fs/cgroup/memory$(jq -r '.linux.cgroupsPath' <<<"${spec}")/memory.limit_in_bytes" 2>/dev/null || echo none)"
    [[ "${cg_limit}" == 134217728 ]] \
        && ok "pod ${p}: the chart's memory limit 128Mi is in effect (memory.limit_in_bytes ${cg_limit} in the container's cgroup)" \
        || bad "pod ${p}: memory.limit_in_bytes of the container's cgroup is ${cg_limit}, expected 134217728 (128Mi)"
    pid="$(container_pid "${p}")"
    [[ -n "${pid}" && -r "/proc/${pid}/status" ]] || { bad "pod ${p}: no running task for container ${cid}"; continue; }
    st="$(awk '/^(Uid|Gid|CapEff|Seccomp|NoNewPrivs):/ { printf "%s%s ", $1, $2 }' "/proc/${pid}/status")"
    root_opts="$(awk '$5 == "/" { print $6; exit }' "/proc/${pid}/mountinfo")"
    comm="$(cat "/proc/${pid}/comm")"
    log "pod ${p}: host pid ${pid} (${comm}): ${st}root mount ${root_opts}"
    [[ "${comm}" == poolguard && "${st}" == *"Uid:65532 "* && "${st}" == *"CapEff:0000000000000000 "* && "${st}" == *"Seccomp:2 "* \
        && "${st}" == *"NoNewPrivs:1 "* && ",${root_opts}," == *",ro,"* ]] \
        && ok "pod ${p}: seen from the host, poolguard (pid ${pid}) runs as uid 65532 (non-root), CapEff 0, seccomp filter, no_new_privs, root filesystem mounted ro" \
        || bad "pod ${p}: host view ${comm} ${st}root ${root_opts}"
done

# --- 6. the chart's admission path: Service, EndpointSlice, self-managed certificates -------------
begin "Service, EndpointSlice, certificates"
svc_ip="$(kubectl -n "${ns}" get service "${release}" -o jsonpath='{.spec.clusterIP}')"
svc_port="$(kubectl -n "${ns}" get service "${release}" -o jsonpath='{.spec.ports[0].port}')"
sel="app.kubernetes.io/instance=${release}"
mapfile -t pod_ips < <(kubectl -n "${ns}" get pods -l "${sel}" -o jsonpath='{range .items[*]}{.status.podIP}{"\n"}{end}' | sort)
ready_endpoints() {
    kubectl -n "${ns}" get endpointslices -l "kubernetes.io/service-name=${release}" -o json |
        jq -r '[.items[].endpoints // [] | .[] | select(.conditions.ready == true) | .addresses[]] | sort | join(" ")'
}
deadline=$((SECONDS + 60))
until [[ "$(ready_endpoints)" == "${pod_ips[*]}" ]]; do
    ((SECONDS < deadline)) || break
    sleep 0.5
done
eps="$(ready_endpoints)"
[[ "${eps}" == "${pod_ips[*]}" && ${#pod_ips[@]} == 2 ]] \
    && ok "EndpointSlice of Service ${ns}/${release} lists both pods ready: ${eps} (port $(kubectl -n "${ns}" get endpointslices -l "kubernetes.io/service-name=${release}" -o jsonpath='{.items[0].ports[0].name}:{.items[0].ports[0].port}'))" \
    || bad "the EndpointSlice lists '${eps}' ready, the pods have '${pod_ips[*]}'"
# Registered by poolguard (webhook.registration=poolguard) once a pod is ready behind the Service.
deadline=$((SECONDS + 60))
until (($(webhook_total) >= 3)) || ((SECONDS >= deadline)); do sleep 0.5; done
(($(webhook_total) >= 3)) && ok "poolguard registered its webhooks once its pods were ready ($(webhook_total) webhooks)" \
    || bad "$(webhook_total) webhooks registered 60s after the pods were ready"
# Where the chart told poolguard to keep its certificate and whose CA bundles to write.
args_json="$(kubectl -n "${ns}" get deployment "${release}" -o jsonpath='{.spec.template.spec.containers[0].args}')"
arg() { jq -r --arg f "$1" 'index($f) as $i | if $i == null then "" else .[$i + 1] end' <<<"${args_json}"; }
cert_secret="$(arg --cert-secret)"
cert_dns="$(arg --cert-dns-name)"
IFS=, read -r -a webhook_configs <<<"$(arg --webhook-configs)"
secret_ca="$(kubectl -n "${cert_secret%%/*}" get secret "${cert_secret#*/}" -o jsonpath='{.data.ca\.crt}' | base64 -d || true)"
[[ "${secret_ca}" == *"BEGIN CERTIFICATE"* ]] && ok "poolguard created its certificate Secret ${cert_secret} (certificates.mode=self)" \
    || bad "Secret ${cert_secret} has no ca.crt"
for wc in "${webhook_configs[@]}"; do
    kind=mutatingwebhookconfiguration
    [[ "${wc}" == *validating* ]] && kind=validatingwebhookconfiguration
    kubectl get "${kind}" "${wc}" -o jsonpath='{.webhooks[0].clientConfig.caBundle}' | base64 -d >"${work}/${wc}-bundle.pem" || true
    if [[ -n "${secret_ca}" ]] && grep -qF -- "$(sed -n 2p <<<"${secret_ca}")" "${work}/${wc}-bundle.pem"; then
        ok "${kind} ${wc}: poolguard injected a caBundle holding the CA of ${cert_secret}"
    else
        bad "${kind} ${wc}: the caBundle does not hold the Secret's CA"
    fi
done
# What the API server checks: the certificate behind the Service, for its DNS name, against the
# injected bundle; through the ClusterIP (kube-proxy) and at each pod.
verify_tls() { # host:port
    local out
    out="$(timeout 15 openssl s_client -connect "$1" -servername "${cert_dns}" -verify_hostname "${cert_dns}" \
        -CAfile "${work}/${webhook_configs[0]}-bundle.pem" -verify_return_error </dev/null 2>&1)" &&
        grep -q 'Verify return code: 0 (ok)' <<<"${out}"
}
for target in "${svc_ip}:${svc_port}" "${pod_ips[@]/%/:8443}"; do
    verify_tls "${target}" \
        && ok "https://${target} serves a certificate for ${cert_dns} that verifies against the injected caBundle" \
        || bad "the certificate at ${target} does not verify for ${cert_dns} against the injected caBundle"
done
# Who poolguard is: the token kubelet projected into its pod.
pod_uid="$(kubectl -n "${ns}" get pod "${pods[0]}" -o jsonpath='{.metadata.uid}')"
# The file the projected `token` link resolves to: following the link itself (owned by the pod's
# uid, in a sticky world-writable tmpfs) is refused even to root where fs.protected_symlinks = 1.
token_file="$(find "${node_dir}/kubelet/root/pods/${pod_uid}/volumes/kubernetes.io~projected" -name token 2>/dev/null | head -n1)"
[[ -z "${token_file}" ]] || token_file="$(readlink -f -- "${token_file}")"
whoami=""
if [[ -n "${token_file}" ]]; then
    whoami="$(KUBECONFIG=/dev/null "${cp_bin}/kubectl" --request-timeout=10s \
        --server="$(kubectl config view -o jsonpath='{.clusters[0].cluster.server}')" \
        --certificate-authority="${cp_state}/pki/ca.crt" --token="$(cat "${token_file}")" \
        auth whoami -o jsonpath='{.status.userInfo.username}' 2>&1 || true)"
fi
sa="$(kubectl -n "${ns}" get deployment "${release}" -o jsonpath='{.spec.template.spec.serviceAccountName}')"
[[ "${whoami}" == "system:serviceaccount:${ns}:${sa}" ]] \
    && ok "the token kubelet projected into ${pods[0]} authenticates as ${whoami}: poolguard's Secret and caBundle writes ran under the chart's RBAC" \
    || bad "poolguard's token authenticates as '${whoami}' (token ${token_file:-not found})"
# (Read whole before searching: grep -q would stop reading, and nft dies of SIGPIPE on a big table.)
rules="$(nft list table ip kube-proxy 2>&1 || true)"
grep -qF "${svc_ip}" <<<"${rules}" \
    && ok "kube-proxy's nftables rules route ${svc_ip}" || bad "no nftables rule of kube-proxy mentions ${svc_ip}: $(tail -n1 <<<"${rules}")"
if out="$(KUBECTL="${cp_bin}/kubectl" integration/e2e/await-webhooks.sh "${label}" "${pools[0]}" "${pools[1]}" 90 2>&1)"; then
    ok "webhooks in effect through Service ${ns}/${release} (ClusterIP ${svc_ip}, kube-proxy nftables; no aggregator routing): ${out//$'\n'/; }"
else
    die "the webhooks did not become active: ${out}"
fi
logs="$(kubectl -n "${ns}" logs "${pods[0]}" --tail=200 2>&1 || true)"
grep -q '"level"' <<<"${logs}" && ok "kubectl logs ${pods[0]} works (API server -> kubelet)" || bad "kubectl logs: $(head -n1 <<<"${logs}")"

# The background audit, in the cluster: the chart's CRD, RBAC (lists, nodes, reports, the Lease)
# and downward-API lease namespace and identity.
report=""
deadline=$((SECONDS + 90))
while ((SECONDS < deadline)); do
    report="$(kubectl -n "${audit_ns}" get policyreports.wgpolicyk8s.io poolguard-audit -o json 2>/dev/null || true)"
    [[ -n "${report}" ]] && break
    sleep 1
done
verdict="$(jq -r '.results[]? | select(.resources[0].name == "misplaced" and .policy == "placement") | "\(.result): \(.message)"' <<<"${report:-null}")"
[[ "${verdict}" == fail:*"${pools[0]}"*"${pools[1]}"* ]] \
    && ok "the audit wrote PolicyReport ${audit_ns}/poolguard-audit: misplaced ${verdict}" \
    || bad "no audit result for ${audit_ns}/misplaced within 90s (report: ${report:0:300})"
lease="$(kubectl -n "${ns}" get deployment "${release}" -o json |
    jq -r '.spec.template.spec.containers[0].args as $a | $a[($a | index("--lease-name")) + 1]')"
holder="$(kubectl -n "${ns}" get lease "${lease}" -o jsonpath='{.spec.holderIdentity}' 2>/dev/null || true)"
[[ -n "${holder}" && " ${pods[*]} " == *" ${holder} "* ]] \
    && ok "the audit Lease ${ns}/${lease} is held by replica ${holder}" \
    || bad "the audit Lease is held by '${holder}', not one of ${pods[*]}"

# --- 7. the e2e suites -------------------------------------------------------------------------
export POOLGUARD_E2E_POOLS="${pools[0]},${pools[1]}" POOLGUARD_E2E_NAMESPACE_LABEL="${label}"
# The chart's default validating.requireNamespaceLabel=false: unlabelled namespaces are validated.
export POOLGUARD_E2E_VALIDATES_UNLABELLED=1
SUITE_AGAINST="the real pods"
# shellcheck source=../e2e/suite.sh
source integration/e2e/suite.sh
admissions() { # poolguard_admission_requests_total summed over the pods, read at the pod IPs
    local ip total=0 n
    for ip in "${pod_ips[@]}"; do
        n="$({ curl -s --max-time 5 "http://${ip}:9090/metrics" || true; } |
            awk '/^poolguard_admission_requests_total[{ ]/ { s += $NF } END { printf "%d\n", s }')"
        total=$((total + n))
    done
    echo "${total}"
}

begin "e2e tests"
calls_before="$(admissions)"
read -r -a filters <<<"${POOLGUARD_E2E_FILTER:-}"
suite tests/e2e.rs --test e2e -- --nocapture "${filters[@]}"

begin "bypass tests"
# The two size tests alone, each pod's peak RSS reset before (clear_refs 5) and read after: what
# they cost within the chart's 128Mi limit.
for t in wide_objects_are_refused_clearly large_storable_objects_are_decided; do
    for p in "${pods[@]}"; do echo 5 >"/proc/$(container_pid "${p}")/clear_refs" || true; done
    suite "tests/bypasses.rs ${t}" --test bypasses -- --nocapture --exact "${t}"
    rss=""
    for p in "${pods[@]}"; do
        rss+="${p} $(awk '/^VmHWM/ { print $2 }' "/proc/$(container_pid "${p}")/status" 2>/dev/null || echo '?') kB, "
    done
    log "peak RSS of the pods during ${t}: ${rss%, } (limit 131072 kB)"
done
suite "tests/bypasses.rs (the others)" --test bypasses -- --nocapture --skip wide_objects --skip large_storable
calls_after="$(admissions)"
((calls_after > calls_before)) \
    && ok "the two pods answered $((calls_after - calls_before)) admission requests during the tests (poolguard_admission_requests_total ${calls_before} -> ${calls_after})" \
    || bad "poolguard_admission_requests_total did not grow during the tests (${calls_before} -> ${calls_after})"
restarts="$(kubectl -n "${ns}" get pods -l "${sel}" -o jsonpath='{range .items[*]}{.status.containerStatuses[0].restartCount}{" "}{end}')"
[[ "${restarts}" =~ ^(0 )+$ ]] && ok "no container restarts during the tests (restart counts ${restarts% }: no OOM kill, no failed probe)" \
    || bad "restart counts: ${restarts}"

begin "fail-closed test"
# Stop: the Deployment scaled to 0, until no pod and no endpoint is left. Start: back to the
# chart's 2 replicas, rolled out, both endpoints ready.
k="$(printf '%q --request-timeout=10s -n %q' "${cp_bin}/kubectl" "${ns}")"
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

# --- 8. operations under load ------------------------------------------------------------------
begin "operations under load"
ops="${POOLGUARD_UNDER_LOAD_OPERATIONS:-rollout-restart,delete-pod,kill-replica,drain}"
if [[ "${ops}" == none ]]; then
    log "skipped (POOLGUARD_UNDER_LOAD_OPERATIONS=none)"
else
    set +e
    "${under_load}" --rate "${POOLGUARD_UNDER_LOAD_RATE:-20}" --seconds "${POOLGUARD_UNDER_LOAD_SECONDS:-30}" \
        --operations "${ops}" --namespace "${ns}" --release "${release}" --pool "${pools[0]}" --label "${label}" \
        --kubectl "${cp_bin}/kubectl" >"${work}/under-load.out" 2> >(tee "${work}/under-load.log" | sed 's/^/[node-test]   /' >&2)
    ul_rc=$?
    set -e
    sleep 0.2
    log "operations under load (one real node holds both replicas):"
    sed 's/^/[node-test]   /' "${work}/under-load.out" >&2
    while read -r row; do
        [[ "${row}" =~ op=([a-z]+)\ attempted=([0-9]+)\ admitted=([0-9]+)\ failed=([0-9]+)\ lost=([0-9]+)\ unplaced=([0-9]+) ]] || continue
        if ((BASH_REMATCH[4] == 0 && BASH_REMATCH[5] == 0 && BASH_REMATCH[6] == 0)); then
            ok "under load, ${BASH_REMATCH[1]}: ${BASH_REMATCH[2]} pod CREATEs, all admitted with their pool, 0 failed, 0 lost"
        elif [[ ${BASH_REMATCH[1]} == kill ]] && ((BASH_REMATCH[5] == 0 && BASH_REMATCH[6] == 0)); then
            # SIGKILL gives the killed replica no time to finish what it holds: its requests in
            # flight, and those the API server sends it before its endpoint is gone, fail
            # (failurePolicy Fail refuses them). Nothing admitted may be lost or unplaced.
            ok "under load, kill: ${BASH_REMATCH[2]} pod CREATEs, ${BASH_REMATCH[4]} refused while the killed replica's connections failed (fail closed), 0 lost, 0 without their pool"
        else
            bad "under load, ${BASH_REMATCH[1]}: ${BASH_REMATCH[2]} attempted, ${BASH_REMATCH[4]} failed, ${BASH_REMATCH[5]} lost, ${BASH_REMATCH[6]} admitted without their pool"
        fi
    done < <(grep -o 'row: .*' "${work}/under-load.log" || true)
    ((ul_rc == 0 || ul_rc == 1)) || bad "under_load stopped with an error (exit ${ul_rc}, see above)"
fi

# --- 9. uninstall --------------------------------------------------------------------------------
begin "helm uninstall"
mapfile -t pods < <(kubectl -n "${ns}" get pods -l "${sel}" -o jsonpath='{range .items[*]}{.metadata.name}{"\n"}{end}')
complaints=""
for p in "${pods[@]}"; do
    complaints+="$(kubectl -n "${ns}" logs "${p}" 2>/dev/null | grep -E '"level":"(WARN|ERROR)"' || true)"
done
if [[ -n "${complaints}" ]]; then
    log "the pods logged $(grep -c . <<<"${complaints}") WARN/ERROR lines (first 10):"
    head -n 10 <<<"${complaints}" >&2
else
    log "the pods logged no WARN/ERROR lines"
fi
# Each container's exit as kubelet reports it while the pods terminate.
"${cp_bin}/kubectl" -n "${ns}" get pods -l "${sel}" --watch --output-watch-events=false \
    -o jsonpath='{.metadata.name} {.status.containerStatuses[0].state.terminated.exitCode} {.status.containerStatuses[0].state.terminated.reason}{"\n"}' \
    >"${work}/terminations.log" 2>/dev/null &
watch_pid=$!
helm uninstall "${release}" -n "${ns}" --wait --timeout 90s >/dev/null 2>&1 && ok "helm uninstall" || bad "helm uninstall failed"
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
kubectl create namespace pg-node-after >/dev/null
kubectl label namespace pg-node-after "${label}=${pools[0]}" >/dev/null
after_pod='{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "probe", "namespace": "pg-node-after"},
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
    printf '[node-test]   %-36s %6ss\n' "${p}" "${timing[${p}]}" >&2
done
printf '[node-test]   %-36s %6ss\n' total "$(since "${t_total}")" >&2
echo "${passed} passed, ${failed} failed"
((failed == 0))
