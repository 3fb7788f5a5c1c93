#!/usr/bin/env bash
# poolguard's own image on a real node (issue 12): the chart installed with helm, its pods run by
# kubelet + containerd + runc from the image built here, the API server calling the webhooks
# through the Service (kube-proxy), then the e2e tests against those pods.
#
#   sudo integration/node/test.sh        # root: bridge, cgroups, mounts, nftables (see README.md)
#
# 1. builds: control plane + kubelet + kube-proxy, containerd + CNI plugins, the pause image, helm,
#    poolguard's image (integration/image/build.sh, checked against the Dockerfile), the tests;
# 2. control plane with controllers; kube-apiserver on all addresses (pods reach it through the
#    kubernetes Service), IP 10.0.0.1 in its certificate, kubelet access by InternalIP with the
#    admin client certificate (kubectl logs); the fake nodes of integration/e2e.sh (pool1 x2, gpu);
# 3. the real node (start.sh) with the image imported;
# 4. helm install with the chart's defaults (2 replicas, securityContext unchanged) plus: the
#    image (localhost/poolguard:<version>, pullPolicy Never), nodeSelector + toleration for the
#    real node, `config` = integration/e2e/manifests/poolguard-config.yaml; waits until both pods
#    are Ready through kubelet's probes;
# 5. evidence from the runtime and the host: the OCI spec containerd gave runc (read-only root,
#    uid, no new privileges, capabilities, seccomp) and each container's process as seen from
#    the host (uid, CapEff, Seccomp, NoNewPrivs, its root mount read-only);
# 6. the webhooks in effect through the Service, then `cargo test -p poolguard-e2e --test e2e`;
# 7. helm uninstall: kubelet runs the preStop sleep and SIGTERM, the pods go away.
# Prints "N passed, N failed" and the time of each phase. Everything started is stopped on exit;
# on failure the work directory (logs) is kept.
#
# Environment: POOLGUARD_E2E_FILTER (test name filters), POOLGUARD_NODE_TEST_KEEP=1 (keep the
# work directory), HELM, CARGO_TARGET_DIR, KUBEBUILDER_ASSETS/POOLGUARD_CP_CACHE/POOLGUARD_NODE_CACHE.
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
for pair in jq:jq curl:curl openssl:openssl ip:iproute2 nft:nftables; do
    command -v "${pair%%:*}" >/dev/null 2>&1 || die "${pair%%:*} is missing (Debian: apt-get install -y ${pair#*:})"
done

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
image_id="$(python3 integration/image/check.py --summary "${image_tar}" | sed -n 's/^ID \(sha256:[0-9a-f]*\),.*/\1/p')"
ok "image ${image_ref}: $(python3 integration/image/check.py --summary "${image_tar}")"
cargo test --locked -p poolguard-e2e --test e2e --no-run
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
begin "helm install"
{
    printf '# generated by integration/node/test.sh\n'
    printf 'image:\n  repository: %s\n  tag: "%s"\n  pullPolicy: Never\n' "${image_ref%:*}" "${image_ref##*:}"
    printf 'nodeSelector:\n  poolguard.io/real-node: "true"\n'
    printf 'tolerations:\n- key: poolguard.io/real-node\n  operator: Exists\n  effect: NoSchedule\n'
    printf 'config:\n'
    sed -e 's/^/  /' integration/e2e/manifests/poolguard-config.yaml
} >"${work}/values.yaml"
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

# --- 5. the securityContext as the runtime applied it ---------------------------------------------
begin "securityContext evidence"
for p in "${pods[@]}"; do
    cid="$(kubectl -n "${ns}" get pod "${p}" -o jsonpath='{.status.containerStatuses[0].containerID}')"
    cid="${cid#containerd://}"
    spec="$(ctr containers info "${cid}" | jq -c '.Spec')"
    runtime_view="$(jq -c '{readonlyRootfs: .root.readonly, uid: .process.user.uid, gid: .process.user.gid,
        noNewPrivileges: .process.noNewPrivileges, capabilities: (.process.capabilities.effective // []),
        seccomp: (.linux.seccomp.defaultAction // "none")}' <<<"${spec}")"
    log "pod ${p}: OCI spec from containerd: ${runtime_view}"
    jq -e '.readonlyRootfs == true and .uid == 65532 and .gid == 65532 and .noNewPrivileges == true
        and (.capabilities | length) == 0 and .seccomp != "none"' <<<"${runtime_view}" >/dev/null \
        && ok "pod ${p}: the runtime was told: read-only root, uid/gid 65532, no new privileges, no capabilities, seccomp ($(jq -r .seccomp <<<"${runtime_view}"))" \
        || bad "pod ${p}: OCI spec ${runtime_view}"
    pid="$(ctr tasks ls | awk -v id="${cid}" '$1 == id { print $2 }')"
    [[ -n "${pid}" && -r "/proc/${pid}/status" ]] || { bad "pod ${p}: no running task for container ${cid}"; continue; }
    st="$(awk '/^(Uid|Gid|CapEff|Seccomp|NoNewPrivs):/ { printf "%s%s ", $1, $2 }' "/proc/${pid}/status")"
    root_opts="$(awk '$5 == "/" { print $6; exit }' "/proc/${pid}/mountinfo")"
    comm="$(cat "/proc/${pid}/comm")"
    log "pod ${p}: host pid ${pid} (${comm}): ${st}root mount ${root_opts}"
    [[ "${comm}" == poolguard && "${st}" == *"Uid:65532 "* && "${st}" == *"CapEff:0000000000000000 "* && "${st}" == *"Seccomp:2 "* \
        && "${st}" == *"NoNewPrivs:1 "* && ",${root_opts}," == *",ro,"* ]] \
        && ok "pod ${p}: poolguard runs as uid 65532, no capabilities, seccomp filter, no_new_privs, root filesystem mounted ro (seen from the host)" \
        || bad "pod ${p}: host view ${comm} ${st}root ${root_opts}"
done

# --- 6. webhooks through the Service, then the tests ----------------------------------------------
begin "webhooks"
svc_ip="$(kubectl -n "${ns}" get service "${release}" -o jsonpath='{.spec.clusterIP}')"
if out="$(KUBECTL="${cp_bin}/kubectl" integration/e2e/await-webhooks.sh "${label}" "${pools[0]}" "${pools[1]}" 90 2>&1)"; then
    ok "webhooks in effect through Service ${ns}/${release} (ClusterIP ${svc_ip}, kube-proxy nftables; no aggregator routing): ${out//$'\n'/; }"
else
    die "the webhooks did not become active: ${out}"
fi
nft list table ip kube-proxy 2>/dev/null | grep -q "${svc_ip}" \
    && ok "kube-proxy's nftables rules route ${svc_ip}" || bad "no nftables rule of kube-proxy mentions ${svc_ip}"
logs="$(kubectl -n "${ns}" logs "${pods[0]}" --tail=200 2>&1 || true)"
grep -q '"level"' <<<"${logs}" && ok "kubectl logs ${pods[0]} works (API server -> kubelet)" || bad "kubectl logs: $(head -n1 <<<"${logs}")"

begin "e2e tests"
export POOLGUARD_E2E_POOLS="${pools[0]},${pools[1]}" POOLGUARD_E2E_NAMESPACE_LABEL="${label}"
read -r -a filters <<<"${POOLGUARD_E2E_FILTER:-}"
set +e
cargo test --locked -p poolguard-e2e --test e2e -- --nocapture "${filters[@]}" 2>&1 | tee "${work}/e2e-test.log" >&2
test_rc=${PIPESTATUS[0]}
set -e
result="$(grep -E '^test result:' "${work}/e2e-test.log" | tail -n1 || true)"
e2e_passed="$(sed -nE 's/.* ([0-9]+) passed.*/\1/p' <<<"${result}")"
e2e_failed="$(sed -nE 's/.* ([0-9]+) failed.*/\1/p' <<<"${result}")"
e2e_passed="${e2e_passed:-0}" e2e_failed="${e2e_failed:-0}"
((test_rc != 0 && e2e_failed == 0)) && e2e_failed=1
passed=$((passed + e2e_passed))
failed=$((failed + e2e_failed))
log "tests/e2e.rs against the real pods: ${e2e_passed} passed, ${e2e_failed} failed"
restarts="$(kubectl -n "${ns}" get pods -o jsonpath='{range .items[*]}{.status.containerStatuses[0].restartCount}{" "}{end}')"
[[ "${restarts}" =~ ^(0 )+$ ]] && ok "no container restarts during the tests (${restarts% })" || bad "restart counts: ${restarts}"

# --- 7. uninstall --------------------------------------------------------------------------------
begin "helm uninstall"
helm uninstall "${release}" -n "${ns}" --wait --timeout 90s >/dev/null 2>&1 && ok "helm uninstall" || bad "helm uninstall failed"
deadline=$((SECONDS + 90))
until [[ -z "$(kubectl -n "${ns}" get pods -o name 2>/dev/null)" ]]; do
    ((SECONDS < deadline)) || break
    sleep 1
done
[[ -z "$(kubectl -n "${ns}" get pods -o name 2>/dev/null)" ]] \
    && ok "kubelet terminated both pods (preStop sleep, SIGTERM)" || bad "pods left: $(kubectl -n "${ns}" get pods -o name | tr '\n' ' ')"

begin summary
log "timings:"
for p in "${timing_order[@]}"; do
    printf '[node-test]   %-26s %6ss\n' "${p}" "${timing[${p}]}" >&2
done
printf '[node-test]   %-26s %6ss\n' total "$(since "${t_total}")" >&2
echo "${passed} passed, ${failed} failed"
((failed == 0))
