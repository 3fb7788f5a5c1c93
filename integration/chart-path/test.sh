#!/usr/bin/env bash
# The admission path through the Helm chart itself, as close to a cluster as a machine without
# containers allows: the API server reaches poolguard through the chart's Service (EndpointSlice
# of a Ready pod) and the certificates poolguard manages itself (certificates.mode=self).
#
#   sudo integration/chart-path/test.sh      # needs root (ip netns, mount), see README.md
#
# 1. builds/gets the control plane (integration/controlplane/build.sh), helm
#    (integration/helm/helm.sh), poolguard and the e2e tests;
# 2. creates a network namespace pg-chart-<random> with a veth pair: 10.250.X.1/30 on the host
#    side, 10.250.X.2/30 (the pod IP) inside; X random, skipped when in use;
# 3. starts the control plane with controllers; kube-apiserver additionally listens on all
#    addresses (so also on 10.250.X.1), has 10.250.X.1 in its serving certificate and runs with
#    --enable-aggregator-routing=true (webhook calls to a Service go to its endpoint IPs, there is
#    no kube-proxy); registers the fake nodes of integration/e2e.sh (pool1 x2, gpu);
# 4. `helm install poolguard charts/poolguard -n poolguard-system --create-namespace` with the
#    chart's defaults plus replicaCount=1 and, as `config`, integration/e2e/manifests/poolguard-config.yaml;
#    the controllers create the ReplicaSet and the Pod, the scheduler binds it to a fake node;
# 5. plays kubelet for that pod: materialises its volumes (the chart's ConfigMaps, the projected
#    ServiceAccount token from a TokenRequest bound to the pod, kube-root-ca.crt, the namespace)
#    and runs the pod's container args with the binary inside the network namespace, as the pod's
#    runAsUser/runAsGroup/fsGroup, no capabilities, with the in-cluster environment
#    (KUBERNETES_SERVICE_HOST=10.250.X.1); the token volume is bind-mounted at its real path
#    /var/run/secrets/kubernetes.io/serviceaccount on a private tmpfs /run, the ConfigMap mounts
#    (/config, /policies) are remapped to their directories in the work dir;
# 6. runs the pod's startup and readiness probes (curl http://10.250.X.2:9090/...) and then
#    reports the pod Running and Ready with podIP 10.250.X.2 (PATCH pods/status);
# 7. waits for the Service's EndpointSlice to list 10.250.X.2 ready, for poolguard to have
#    injected its CA into both webhook configurations, and until the API server's dry runs show
#    both webhooks in effect;
# 8. runs `cargo test -p poolguard-e2e --test e2e` against that cluster;
# 9. `helm uninstall`, plays kubelet for the pod's deletion (preStop sleep, SIGTERM, wait for
#    exit, final delete) and checks that no webhook configuration is left.
#
# Prints "N passed, N failed" (checks of this script plus the e2e tests) and the time of every
# phase. On exit everything started is stopped, the veth pair and the namespace are removed; on
# failure the work directory (logs) is kept and the log tails are printed.
#
# Environment (all optional):
#   KUBEBUILDER_ASSETS, POOLGUARD_CP_CACHE   as for integration/controlplane/build.sh
#   HELM                 helm binary to use instead of integration/helm/helm.sh's
#   CARGO_TARGET_DIR     as for cargo; poolguard is taken from its debug/ directory
#   POOLGUARD_E2E_FILTER test name filters for tests/e2e.rs (whitespace-separated)
#   POOLGUARD_CHART_PATH_KEEP=1   keep the work directory (logs, rendered volumes) on success too
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "${root}"

log() { printf '[chart-path] %s\n' "$*" >&2; }
die() { printf '[chart-path] error (%s): %s\n' "${phase:-setup}" "$*" >&2; exit 1; }

release=poolguard
ns="poolguard-system"
chart=charts/poolguard
pools=(pool1 gpu)     # as integration/e2e.sh: pool1 denies, gpu only warns (the e2e config)
label=agentpool       # namespaceLabel and nodeSelectorKey of the e2e config
e2e_config=integration/e2e/manifests/poolguard-config.yaml
phase=prerequisites

((EUID == 0)) || die "run as root: the script creates a network namespace, a veth pair and mounts"
for cmd in ip curl openssl jq ss base64 setpriv awk sed; do
    command -v "${cmd}" >/dev/null 2>&1 || die "${cmd} is required (ip: apt-get install -y iproute2)"
done

work="$(mktemp -d "${TMPDIR:-/tmp}/poolguard-chartpath.XXXXXX")"
# Traversable (not listable) for the pod's non-root user, which reads its volumes below it.
chmod 0711 "${work}"
cp_state="${work}/controlplane"
pod_dir="${work}/pod"
pg_log="${work}/poolguard.log"
cp_started=0
netns=""
veth_host=""
pg_pid=""
passed=0
failed=0
declare -A timing=()
timing_order=()

now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }
t_total="$(now)"
t_phase="$(now)"
begin() { # phase name
    if [[ -n "${phase:-}" && "${phase}" != prerequisites ]]; then
        timing["${phase}"]="$(since "${t_phase}")"
        timing_order+=("${phase}")
    fi
    phase="$1"
    t_phase="$(now)"
    log "=== ${phase}"
}
ok() { passed=$((passed + 1)); log "ok: $*"; }
bad() { failed=$((failed + 1)); log "FAIL: $*"; }

# Is pid still running (and not a zombie)?
alive() {
    local stat
    [[ -n "$1" ]] || return 1
    stat="$(cat "/proc/$1/stat" 2>/dev/null)" || return 1
    stat="${stat##*) }"
    [[ "${stat:0:1}" != Z ]]
}

cleanup() {
    local rc=$? pid i
    set +e
    trap - EXIT INT TERM
    if ((rc != 0)); then
        if [[ "${phase}" == summary ]]; then
            printf '\n[chart-path] FAILED: %s of %s checks and tests failed (see above)\n' "${failed}" "$((passed + failed))" >&2
        else
            printf '\n[chart-path] FAILED in phase "%s" (exit %s)\n' "${phase}" "${rc}" >&2
        fi
        if [[ -f "${pg_log}" ]]; then
            printf '\n[chart-path] ---- tail of the poolguard log (%s)\n' "${pg_log}" >&2
            tail -n 60 "${pg_log}" >&2
        fi
        for c in kube-apiserver kube-controller-manager; do
            if [[ -f "${cp_state}/logs/${c}.log" ]]; then
                printf '\n[chart-path] ---- tail of the %s log (%s)\n' "${c}" "${cp_state}/logs/${c}.log" >&2
                tail -n 30 "${cp_state}/logs/${c}.log" >&2
            fi
        done
    fi
    # poolguard (the pod's container): SIGTERM, then SIGKILL after 10s.
    if alive "${pg_pid}"; then
        log "stopping poolguard (pid ${pg_pid})"
        kill -TERM "${pg_pid}" 2>/dev/null
        for ((i = 0; i < 50; i++)); do alive "${pg_pid}" || break; sleep 0.2; done
        alive "${pg_pid}" && kill -KILL "${pg_pid}" 2>/dev/null
    fi
    if [[ -n "${netns}" ]]; then
        # Anything else still running in our namespace was started by this script.
        for pid in $(ip netns pids "${netns}" 2>/dev/null); do
            log "killing pid ${pid} left in ${netns}"
            kill -KILL "${pid}" 2>/dev/null
        done
        [[ -n "${veth_host}" ]] && ip link del "${veth_host}" 2>/dev/null
        ip netns del "${netns}" 2>/dev/null
        log "removed network namespace ${netns} and veth ${veth_host}"
    fi
    if ((cp_started)); then
        integration/controlplane/stop.sh "${cp_state}" 2>/dev/null
    fi
    if ((rc != 0)) || [[ "${POOLGUARD_CHART_PATH_KEEP:-0}" == 1 ]]; then
        printf '[chart-path] logs kept in %s\n' "${work}" >&2
    else
        rm -rf -- "${work}"
    fi
    exit "${rc}"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# --- 1. build -------------------------------------------------------------------------------
begin build
cp_bin="$(integration/controlplane/build.sh | tail -n1)"
log "Kubernetes: $("${cp_bin}/kube-apiserver" --version)"
helm_bin="${HELM:-$(bash integration/helm/helm.sh | tail -n1)}"
log "helm: $("${helm_bin}" version --template '{{.Version}}')"
cargo build --locked --bin poolguard
target_dir="${CARGO_TARGET_DIR:-${root}/target}"
[[ "${target_dir}" == /* ]] || target_dir="${root}/${target_dir}"
poolguard="${target_dir}/debug/poolguard"
[[ -x "${poolguard}" ]] || die "${poolguard} was not built"
cargo test --locked -p poolguard-e2e --test e2e --no-run
log "poolguard: $("${poolguard}" --version)"

kubectl() { "${cp_bin}/kubectl" --request-timeout=10s "$@"; }
helm() { "${helm_bin}" --kubeconfig "${KUBECONFIG}" "$@"; }

# --- 2. network namespace -------------------------------------------------------------------
begin "network namespace"
suffix="$(openssl rand -hex 3)"
x=""
for ((i = 0; i < 64; i++)); do
    c=$((RANDOM % 256))
    # Skip a /24 in which this machine already has an address or a route (another run, ...).
    if ip -4 -o addr show | grep -q "inet 10\.250\.${c}\." || ip -4 route show | grep -q "^10\.250\.${c}\."; then
        continue
    fi
    x="${c}"
    break
done
[[ -n "${x}" ]] || die "no free 10.250.X.0/30 found"
host_ip="10.250.${x}.1"
pod_ip="10.250.${x}.2"
netns="pg-chart-${suffix}"
veth_host="pgch-${suffix}"
veth_pod="pgcn-${suffix}"
ip netns add "${netns}" || { netns=""; die "ip netns add failed"; }
ip link add "${veth_host}" type veth peer name "${veth_pod}" netns "${netns}" || die "creating the veth pair failed"
ip addr add "${host_ip}/30" dev "${veth_host}"
ip link set "${veth_host}" up
ip -n "${netns}" addr add "${pod_ip}/30" dev "${veth_pod}"
ip -n "${netns}" link set "${veth_pod}" up
ip -n "${netns}" link set lo up
# Traffic to the pod IP must leave through our veth, never through a default route.
ip route get "${pod_ip}" | grep -q "dev ${veth_host} " || die "route to ${pod_ip} does not use ${veth_host}: $(ip route get "${pod_ip}")"
# Go and curl must not send the pod network through a proxy.
export NO_PROXY="${NO_PROXY:+${NO_PROXY},}10.250.${x}.0/30,127.0.0.1,localhost"
export no_proxy="${NO_PROXY}"
log "netns ${netns}: ${veth_host} ${host_ip}/30 (host) <-> ${veth_pod} ${pod_ip}/30 (pod), lo up"

# --- 3. control plane and nodes ---------------------------------------------------------------
begin "control plane"
cp_started=1
POOLGUARD_CP_BIN="${cp_bin}" POOLGUARD_CP_CONTROLLERS=1 \
    POOLGUARD_CP_CONTROLLER_MANAGER_ARGS='--controllers=*,-node-lifecycle-controller' \
    POOLGUARD_CP_APISERVER_ARGS='--bind-address=0.0.0.0 --enable-aggregator-routing=true' \
    POOLGUARD_CP_APISERVER_SANS="IP:${host_ip}" \
    integration/controlplane/start.sh "${cp_state}" >/dev/null
# shellcheck source=/dev/null
source "${cp_state}/env"
export KUBECONFIG
api_port="${POOLGUARD_CP_APISERVER##*:}"
log "kube-apiserver: https://127.0.0.1:${api_port} and https://${host_ip}:${api_port} (--bind-address=0.0.0.0)"
if out="$(ip netns exec "${netns}" curl -sS --noproxy '*' --max-time 5 --cacert "${POOLGUARD_CP_CA}" \
    "https://${host_ip}:${api_port}/readyz" 2>&1)" && [[ "${out}" == ok ]]; then
    ok "the API server answers inside ${netns} at https://${host_ip}:${api_port} with a certificate valid for ${host_ip}"
else
    die "the API server is not reachable from ${netns} at https://${host_ip}:${api_port}: ${out}"
fi

register_node() { # name pool
    KUBECTL="${cp_bin}/kubectl" integration/controlplane/fake-node.sh "$1" "${label}" "$2"
    log "node $1: ${label}=$2, Ready, untainted"
}
register_node "${pools[0]}-node-1" "${pools[0]}"
register_node "${pools[0]}-node-2" "${pools[0]}"
register_node "${pools[1]}-node-1" "${pools[1]}"
deadline=$((SECONDS + 30))
until kubectl -n kube-system get serviceaccount default >/dev/null 2>&1; do
    ((SECONDS < deadline)) || die "the ServiceAccount controller did not create kube-system/default"
    sleep 0.5
done

# --- 4. helm install ------------------------------------------------------------------------
begin "helm install"
# The chart's defaults (certificates.mode=self, ...), one replica (there is one kubelet: this
# script), and as `config` the e2e configuration the tests expect.
{
    printf '# generated by integration/chart-path/test.sh\nreplicaCount: 1\nconfig:\n'
    sed -e 's/^/  /' "${e2e_config}"
} > "${work}/values.yaml"
helm install "${release}" "${chart}" -n "${ns}" --create-namespace -f "${work}/values.yaml" \
    > "${work}/helm-install.out" 2>&1 || { cat "${work}/helm-install.out" >&2; die "helm install failed"; }
ok "helm install ${release} ${chart} -n ${ns} --create-namespace -f values.yaml (replicaCount=1, config=${e2e_config})"

deploy_args="$(kubectl -n "${ns}" get deployment "${release}" -o json | jq -c '.spec.template.spec.containers[0].args')"
arg_value() { jq -r --arg f "$1" 'index($f) as $i | if $i == null then "" else .[$i + 1] end' <<<"${deploy_args}"; }
jq -e 'index("--manage-certs") != null' <<<"${deploy_args}" >/dev/null || die "the Deployment does not run --manage-certs (certificates.mode is not self?): ${deploy_args}"
cert_secret="$(arg_value --cert-secret)"
cert_dns="$(arg_value --cert-dns-name)"
IFS=, read -r -a webhook_configs <<<"$(arg_value --webhook-configs)"
((${#webhook_configs[@]} == 2)) || die "--webhook-configs names ${#webhook_configs[@]} configurations: ${deploy_args}"
service="$(kubectl -n "${ns}" get service -l "app.kubernetes.io/instance=${release}" -o jsonpath='{.items[0].metadata.name}')"
log "mode self: Secret ${cert_secret}, webhook configurations ${webhook_configs[*]}, Service ${ns}/${service} (${cert_dns})"
for wc in "${webhook_configs[@]}"; do
    kind=mutatingwebhookconfiguration
    [[ "${wc}" == *validating* ]] && kind=validatingwebhookconfiguration
    got="$(kubectl get "${kind}" "${wc}" -o jsonpath='{.webhooks[0].clientConfig.service.namespace}/{.webhooks[0].clientConfig.service.name}:{.webhooks[0].clientConfig.service.port}')"
    [[ "${got}" == "${ns}/${service}:"* ]] || die "${kind} ${wc} does not call Service ${ns}/${service}: ${got}"
done

# The ReplicaSet controller creates the pod, the scheduler binds it.
deadline=$((SECONDS + 90))
selector="app.kubernetes.io/instance=${release},app.kubernetes.io/name=poolguard"
while :; do
    pods_json="$(kubectl -n "${ns}" get pods -l "${selector}" -o json)"
    n="$(jq '.items | length' <<<"${pods_json}")"
    bound="$(jq '[.items[] | select(.spec.nodeName != null)] | length' <<<"${pods_json}")"
    ((n == 1 && bound == 1)) && break
    ((SECONDS < deadline)) || {
        kubectl -n "${ns}" get deployment,replicaset,pods -o wide >&2 || true
        kubectl -n "${ns}" get events >&2 || true
        die "expected 1 bound poolguard pod within 90s, found ${n} pods (${bound} bound)"
    }
    sleep 0.5
done
pod_json="$(jq '.items[0]' <<<"${pods_json}")"
printf '%s\n' "${pod_json}" > "${work}/pod.json"
pod="$(jq -r '.metadata.name' <<<"${pod_json}")"
pod_uid="$(jq -r '.metadata.uid' <<<"${pod_json}")"
node="$(jq -r '.spec.nodeName' <<<"${pod_json}")"
ok "Deployment -> ReplicaSet -> Pod ${ns}/${pod}, bound by the scheduler to ${node}"

# --- 5. play kubelet: volumes, environment, user, the container in the netns ------------------
begin "kubelet: start the pod"
jq -e '(.spec.containers | length) == 1 and ((.spec.initContainers // []) | length) == 0' <<<"${pod_json}" >/dev/null \
    || die "this script plays kubelet for a pod with exactly one container and no init containers"
jq -e '.spec.containers[0].command == null' <<<"${pod_json}" >/dev/null \
    || die "the container sets command; this script runs the image's entrypoint (poolguard) with its args"
container="$(jq -r '.spec.containers[0].name' <<<"${pod_json}")"
run_uid="$(jq -r '.spec.containers[0].securityContext.runAsUser // .spec.securityContext.runAsUser // 0' <<<"${pod_json}")"
run_gid="$(jq -r '.spec.containers[0].securityContext.runAsGroup // .spec.securityContext.runAsGroup // 0' <<<"${pod_json}")"
fs_group="$(jq -r '.spec.securityContext.fsGroup // empty' <<<"${pod_json}")"
sa="$(jq -r '.spec.serviceAccountName' <<<"${pod_json}")"

mkdir -p "${pod_dir}/volumes" "${pod_dir}/home" "${pod_dir}/image"
chmod 0755 "${pod_dir}" "${pod_dir}/volumes" "${pod_dir}/image"
chown "${run_uid}:${run_gid}" "${pod_dir}/home"
# The "image": the binary, copied so that the pod's user can run it wherever the build lives.
install -m 0755 "${poolguard}" "${pod_dir}/image/poolguard"

# kubelet's atomic writer layout: files in ..<timestamp>/, ..data -> it, each name -> ..data/name.
# (poolguard's reload watches for exactly this symlink swap.)
atomic_begin() { # dir -> prints the payload dir
    local dir="$1" payload
    payload="..$(date -u +%Y_%m_%d_%H_%M_%S).$((RANDOM))"
    mkdir -p "${dir}/${payload}"
    printf '%s\n' "${dir}/${payload}"
}
atomic_commit() { # dir payload-dir
    local dir="$1" payload="$2" f
    ln -s "$(basename "${payload}")" "${dir}/..data"
    for f in "${payload}"/*; do
        [[ -e "${f}" ]] || continue
        ln -s "..data/$(basename "${f}")" "${dir}/$(basename "${f}")"
    done
    find "${dir}" -type d -exec chmod 0755 {} +
    [[ -n "${fs_group}" ]] && chgrp -R "${fs_group}" "${dir}"
    return 0
}
mode_of() { printf '%o' "${1:-420}"; } # defaultMode (decimal in the API) -> octal for chmod
materialize_configmap() { # namespace name payload-dir items-json mode optional
    local cm key path
    if ! cm="$(kubectl -n "$1" get configmap "$2" -o json 2>/dev/null)"; then
        [[ "$6" == true ]] && return 0
        die "ConfigMap $1/$2 (a volume of the pod) does not exist"
    fi
    if [[ "$4" == null || "$4" == "[]" ]]; then
        while IFS= read -r key; do
            write_file "$3/${key}" "$(jq -j --arg k "${key}" '.data[$k]' <<<"${cm}"; printf x)" "$(mode_of "$5")"
        done < <(jq -r '(.data // {}) | keys[]' <<<"${cm}")
    else
        while IFS=$'\t' read -r key path; do
            write_file "$3/${path}" "$(jq -j --arg k "${key}" '.data[$k]' <<<"${cm}"; printf x)" "$(mode_of "$5")"
        done < <(jq -r '.[] | [.key, .path] | @tsv' <<<"$4")
    fi
}
materialize_secret() { # namespace name payload-dir mode optional
    local s key
    if ! s="$(kubectl -n "$1" get secret "$2" -o json 2>/dev/null)"; then
        [[ "$5" == true ]] && return 0
        die "Secret $1/$2 (a volume of the pod) does not exist"
    fi
    while IFS= read -r key; do
        mkdir -p "$3"
        jq -r --arg k "${key}" '.data[$k]' <<<"${s}" | base64 -d > "$3/${key}"
        chmod "$(mode_of "$4")" "$3/${key}"
    done < <(jq -r '(.data // {}) | keys[]' <<<"${s}")
}
# printf '%s' "$(...)" drops trailing newlines; the "x" sentinel keeps them.
write_file() { # path content-with-x-sentinel mode
    mkdir -p "$(dirname "$1")"
    printf '%s' "${2%x}" > "$1"
    chmod "$3" "$1"
}

declare -A remap=()   # mountPath -> directory on the host (paths in args are rewritten)
run_mounts=()         # "source<TAB>mountPath" bind-mounted on the private /run inside the netns
token_file=""
while IFS=$'\t' read -r vm_name vm_path; do
    vol="$(jq -c --arg n "${vm_name}" '.spec.volumes[] | select(.name == $n)' <<<"${pod_json}")"
    [[ -n "${vol}" ]] || die "volumeMount ${vm_name} has no volume"
    vdir="${pod_dir}/volumes/${vm_name}"
    mkdir -p "${vdir}"
    payload="$(atomic_begin "${vdir}")"
    if jq -e '.configMap' <<<"${vol}" >/dev/null; then
        materialize_configmap "${ns}" "$(jq -r '.configMap.name' <<<"${vol}")" "${payload}" \
            "$(jq -c '.configMap.items // null' <<<"${vol}")" "$(jq -r '.configMap.defaultMode // 420' <<<"${vol}")" \
            "$(jq -r '.configMap.optional // false' <<<"${vol}")"
        what="ConfigMap $(jq -r '.configMap.name' <<<"${vol}")"
    elif jq -e '.secret' <<<"${vol}" >/dev/null; then
        materialize_secret "${ns}" "$(jq -r '.secret.secretName' <<<"${vol}")" "${payload}" \
            "$(jq -r '.secret.defaultMode // 420' <<<"${vol}")" "$(jq -r '.secret.optional // false' <<<"${vol}")"
        what="Secret $(jq -r '.secret.secretName' <<<"${vol}")"
    elif jq -e '.projected' <<<"${vol}" >/dev/null; then
        vmode="$(jq -r '.projected.defaultMode // 420' <<<"${vol}")"
        what="projected"
        while IFS= read -r src; do
            if jq -e '.serviceAccountToken' <<<"${src}" >/dev/null; then
                exp="$(jq -r '.serviceAccountToken.expirationSeconds // 3600' <<<"${src}")"
                aud="$(jq -r '.serviceAccountToken.audience // empty' <<<"${src}")"
                tpath="$(jq -r '.serviceAccountToken.path' <<<"${src}")"
                # What the kubelet does: a TokenRequest bound to this pod.
                token="$(kubectl -n "${ns}" create token "${sa}" --duration="${exp}s" ${aud:+--audience="${aud}"} \
                    --bound-object-kind=Pod --bound-object-name="${pod}" --bound-object-uid="${pod_uid}")" \
                    || die "TokenRequest for ServiceAccount ${ns}/${sa} failed"
                write_file "${payload}/${tpath}" "${token}x" 0600
                # The kubelet gives the token to the pod's user (fsGroup: group-readable).
                if [[ -n "${fs_group}" ]]; then chmod 0640 "${payload}/${tpath}"; fi
                token_file="${vdir}/${tpath}"
                token_vdir="${vdir}"
                what+=" token(${sa}, bound to pod ${pod}, ${exp}s)"
            elif jq -e '.configMap' <<<"${src}" >/dev/null; then
                materialize_configmap "${ns}" "$(jq -r '.configMap.name' <<<"${src}")" "${payload}" \
                    "$(jq -c '.configMap.items // null' <<<"${src}")" "${vmode}" "$(jq -r '.configMap.optional // false' <<<"${src}")"
                what+=" configMap($(jq -r '.configMap.name' <<<"${src}"))"
            elif jq -e '.downwardAPI' <<<"${src}" >/dev/null; then
                while IFS=$'\t' read -r dpath field; do
                    case "${field}" in
                    metadata.namespace) value="${ns}" ;;
                    metadata.name) value="${pod}" ;;
                    metadata.uid) value="${pod_uid}" ;;
                    *) die "downwardAPI field ${field} is not supported by this script" ;;
                    esac
                    write_file "${payload}/${dpath}" "${value}x" "$(mode_of "${vmode}")"
                done < <(jq -r '.downwardAPI.items[] | [.path, .fieldRef.fieldPath] | @tsv' <<<"${src}")
                what+=" downwardAPI"
            else
                die "projected source $(jq -c 'keys' <<<"${src}") is not supported by this script"
            fi
        done < <(jq -c '.projected.sources[]' <<<"${vol}")
    else
        die "volume ${vm_name} ($(jq -c 'del(.name) | keys' <<<"${vol}")) is not supported by this script"
    fi
    atomic_commit "${vdir}" "${payload}"
    case "${vm_path}" in
    /run/* | /var/run/*) run_mounts+=("${vdir}"$'\t'"${vm_path}") ; where="bind-mounted at ${vm_path} (private /run in the netns)" ;;
    *) remap["${vm_path}"]="${vdir}" ; where="${vm_path} -> ${vdir}" ;;
    esac
    log "volume ${vm_name}: ${what}; ${where}"
done < <(jq -r '.spec.containers[0].volumeMounts[] | [.name, .mountPath] | @tsv' <<<"${pod_json}")
[[ -n "${token_file}" ]] || die "the pod has no ServiceAccount token volume"

# The container's args, exactly as rendered, with the remapped mount paths.
mapfile -t pod_args < <(jq -r '.spec.containers[0].args[]' <<<"${pod_json}")
args=()
for a in "${pod_args[@]}"; do
    for mp in "${!remap[@]}"; do
        if [[ "${a}" == "${mp}" || "${a}" == "${mp}/"* ]]; then
            a="${remap[${mp}]}${a#"${mp}"}"
            break
        fi
    done
    args+=("${a}")
done
log "container args (pod spec): ${pod_args[*]}"
log "as run:                    ${args[*]}"

# Environment: what the kubelet sets (PATH, HOSTNAME, the kubernetes Service; the Service's
# address is the API server's address on the host side of the veth, there is no kube-proxy),
# plus the container's own env (plain values only).
envs=(
    "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
    "HOSTNAME=${pod}"
    "HOME=${pod_dir}/home"
    "KUBERNETES_SERVICE_HOST=${host_ip}"
    "KUBERNETES_SERVICE_PORT=${api_port}"
    "KUBERNETES_SERVICE_PORT_HTTPS=${api_port}"
    "KUBERNETES_PORT=tcp://${host_ip}:${api_port}"
)
while IFS= read -r e; do
    [[ -n "${e}" ]] || continue
    jq -e 'has("valueFrom") | not' <<<"${e}" >/dev/null || die "env $(jq -r .name <<<"${e}") uses valueFrom; not supported by this script"
    envs+=("$(jq -r '"\(.name)=\(.value // "")"' <<<"${e}")")
done < <(jq -c '.spec.containers[0].env // [] | .[]' <<<"${pod_json}")

# Launcher, run by `ip netns exec` (which gives it its own mount namespace whose mounts do not
# propagate back): a private tmpfs on /run for the token volume at its real path, then the
# pod's user and groups, no capabilities, no new privileges, a clean environment.
groups_opt="--clear-groups"
[[ -n "${fs_group}" ]] && groups_opt="--groups=${fs_group}"
{
    printf '#!/usr/bin/env bash\nset -euo pipefail\n'
    printf 'mount -t tmpfs -o mode=0755,size=4m pg-chart-run /run\n'
    for m in "${run_mounts[@]}"; do
        src="${m%%$'\t'*}"
        dst="${m#*$'\t'}"
        printf 'mkdir -p %q\nmount --bind %q %q\nmount -o remount,bind,ro %q\n' "${dst}" "${src}" "${dst}" "${dst}"
    done
    printf 'exec setpriv --reuid=%q --regid=%q %s --inh-caps=-all --bounding-set=-all --no-new-privs -- /usr/bin/env -i' \
        "${run_uid}" "${run_gid}" "${groups_opt}"
    printf ' %q' "${envs[@]}" "${pod_dir}/image/poolguard" "${args[@]}"
    printf '\n'
} > "${pod_dir}/launch.sh"
chmod 0700 "${pod_dir}/launch.sh"
ip netns exec "${netns}" "${pod_dir}/launch.sh" </dev/null >"${pg_log}" 2>&1 &
pg_pid=$!
log "poolguard started in ${netns} (pid ${pg_pid}, uid ${run_uid}, gid ${run_gid}, groups ${fs_group:-none}); log ${pg_log}"

# The pod's probes, run like the kubelet does: HTTP GET to the pod IP on the named port.
probe_url() { # startupProbe|readinessProbe|livenessProbe
    local p port path
    p="$(jq -c --arg p "$1" '.spec.containers[0][$p].httpGet // empty' <<<"${pod_json}")"
    [[ -n "${p}" ]] || return 0
    port="$(jq -r '.port' <<<"${p}")"
    path="$(jq -r '.path // "/"' <<<"${p}")"
    if ! [[ "${port}" =~ ^[0-9]+$ ]]; then
        port="$(jq -r --arg n "${port}" '.spec.containers[0].ports[] | select(.name == $n) | .containerPort' <<<"${pod_json}")"
    fi
    printf 'http://%s:%s%s\n' "${pod_ip}" "${port}" "${path}"
}
wait_probe() { # probe-name timeout
    local url code deadline=$((SECONDS + $2))
    url="$(probe_url "$1")"
    [[ -n "${url}" ]] || { log "no $1"; return 0; }
    while :; do
        alive "${pg_pid}" || die "poolguard exited (see the log below)"
        code="$(curl -s -o /dev/null -w '%{http_code}' --noproxy '*' --max-time 2 "${url}" || true)"
        if [[ "${code}" == 200 ]]; then
            ok "$1 ${url} answered 200"
            return 0
        fi
        ((SECONDS < deadline)) || die "$1 ${url} did not answer 200 within $2s (last: ${code})"
        sleep 0.5
    done
}
wait_probe startupProbe 180
comm="$(cat "/proc/${pg_pid}/comm" 2>/dev/null || true)"
[[ "${comm}" == poolguard ]] || die "pid ${pg_pid} runs '${comm}', expected poolguard"
wait_probe readinessProbe 120
inside="$(ip netns identify "${pg_pid}" 2>/dev/null || true)"
[[ "${inside}" == "${netns}" ]] && ok "poolguard (pid ${pg_pid}) runs in network namespace ${netns}" \
    || bad "poolguard (pid ${pg_pid}) is in network namespace '${inside}', expected ${netns}"
uid_now="$(awk '/^Uid:/ { print $2 }' "/proc/${pg_pid}/status")"
caps_now="$(awk '/^CapEff:/ { print $2 }' "/proc/${pg_pid}/status")"
[[ "${uid_now}" == "${run_uid}" && "${caps_now}" == 0000000000000000 ]] \
    && ok "poolguard runs as uid ${uid_now} with no capabilities (the pod's securityContext)" \
    || bad "poolguard runs as uid ${uid_now} with CapEff ${caps_now}"

# --- 6. report the pod Running and Ready -------------------------------------------------------
begin "kubelet: pod status"
ts="$(date -u +%Y-%m-%dT%H:%M:%SZ)"
image="$(jq -r '.spec.containers[0].image' <<<"${pod_json}")"
status_patch="$(jq -n --arg ts "${ts}" --arg ip "${pod_ip}" --arg name "${container}" --arg image "${image}" \
    --arg cid "chart-path://${netns}/${pg_pid}" '{status: {
        phase: "Running",
        podIP: $ip, podIPs: [{ip: $ip}],
        startTime: $ts,
        conditions: [
            {type: "PodReadyToStartContainers", status: "True", lastTransitionTime: $ts},
            {type: "Initialized", status: "True", lastTransitionTime: $ts},
            {type: "ContainersReady", status: "True", lastTransitionTime: $ts},
            {type: "Ready", status: "True", lastTransitionTime: $ts}],
        containerStatuses: [{name: $name, image: $image, imageID: "", containerID: $cid,
            ready: true, started: true, restartCount: 0,
            state: {running: {startedAt: $ts}}}]}}')"
kubectl -n "${ns}" patch pod "${pod}" --subresource=status --type=strategic -p "${status_patch}" >/dev/null \
    || die "PATCH pods/${pod}/status failed"
got="$(kubectl -n "${ns}" get pod "${pod}" -o jsonpath='{.status.phase} {.status.podIP} {.status.conditions[?(@.type=="Ready")].status}')"
[[ "${got}" == "Running ${pod_ip} True" ]] && ok "pod ${pod}: Running, podIP ${pod_ip}, Ready" || die "pod status reads '${got}'"

# --- 7. endpoints, CA injection, webhooks in effect -------------------------------------------
begin "endpoints and caBundle"
deadline=$((SECONDS + 60))
until kubectl -n "${ns}" get endpointslices -l "kubernetes.io/service-name=${service}" -o json 2>/dev/null |
    jq -e --arg ip "${pod_ip}" '[.items[].endpoints // [] | .[] | select((.addresses | index($ip)) and .conditions.ready == true)] | length == 1' >/dev/null; do
    ((SECONDS < deadline)) || {
        kubectl -n "${ns}" get endpointslices -o yaml >&2 || true
        die "the EndpointSlice of Service ${ns}/${service} does not list ${pod_ip} ready within 60s"
    }
    sleep 0.5
done
ok "EndpointSlice of Service ${ns}/${service} lists ${pod_ip} ready (port $(kubectl -n "${ns}" get endpointslices -l "kubernetes.io/service-name=${service}" -o jsonpath='{.items[0].ports[0].name}:{.items[0].ports[0].port}'))"

secret_ca="$(kubectl -n "${cert_secret%%/*}" get secret "${cert_secret#*/}" -o jsonpath='{.data.ca\.crt}' | base64 -d)"
[[ -n "${secret_ca}" ]] && ok "poolguard created Secret ${cert_secret} (ca.crt, tls.crt, tls.key)" || die "Secret ${cert_secret} has no ca.crt"
for wc in "${webhook_configs[@]}"; do
    kind=mutatingwebhookconfiguration
    [[ "${wc}" == *validating* ]] && kind=validatingwebhookconfiguration
    deadline=$((SECONDS + 60))
    until bundle="$(kubectl get "${kind}" "${wc}" -o jsonpath='{.webhooks[0].clientConfig.caBundle}')" && [[ -n "${bundle}" ]]; do
        ((SECONDS < deadline)) || die "no caBundle in ${kind} ${wc} after 60s"
        sleep 0.5
    done
    base64 -d <<<"${bundle}" > "${work}/${wc}-bundle.pem"
    if grep -qF -- "$(sed -n 2p <<<"${secret_ca}")" "${work}/${wc}-bundle.pem"; then
        ok "${kind} ${wc}: poolguard injected a caBundle containing the CA of Secret ${cert_secret}"
    else
        bad "${kind} ${wc}: the injected caBundle does not contain the Secret's CA"
    fi
done
# What the API server checks: poolguard's certificate at the endpoint, for the Service's name,
# against the injected bundle.
if out="$(openssl s_client -connect "${pod_ip}:8443" -servername "${cert_dns}" -verify_hostname "${cert_dns}" \
    -CAfile "${work}/${webhook_configs[0]}-bundle.pem" -verify_return_error </dev/null 2>&1)" &&
    grep -q 'Verify return code: 0 (ok)' <<<"${out}"; then
    ok "https://${pod_ip}:8443 serves a certificate for ${cert_dns} that verifies against the injected caBundle"
else
    bad "the certificate at ${pod_ip}:8443 does not verify for ${cert_dns}: $(grep -E 'Verify return|error' <<<"${out}" | head -n3)"
fi
# Who poolguard is: the token it was given (and nothing else: no kubeconfig in its environment).
whoami="$(ip netns exec "${netns}" env KUBECONFIG=/dev/null "${cp_bin}/kubectl" --request-timeout=10s \
    --server="https://${host_ip}:${api_port}" --certificate-authority="${token_vdir}/ca.crt" \
    --token="$(cat "${token_file}")" auth whoami -o jsonpath='{.status.userInfo.username}' 2>&1 || true)"
[[ "${whoami}" == "system:serviceaccount:${ns}:${sa}" ]] \
    && ok "poolguard's token (from inside ${netns}) authenticates as ${whoami}: everything it did ran under the chart's RBAC" \
    || bad "poolguard's token authenticates as '${whoami}'"

if out="$(KUBECTL="${cp_bin}/kubectl" integration/e2e/await-webhooks.sh "${label}" "${pools[0]}" "${pools[1]}" 60 2>&1)"; then
    ok "both webhooks in effect through the Service: ${out//$'\n'/; }"
else
    die "the webhooks did not become active through the Service: ${out}"
fi

admission_total() { # sum of poolguard_admission_requests_total, read at the pod IP
    { curl -s --noproxy '*' --max-time 5 "http://${pod_ip}:9090/metrics" || true; } |
        awk '/^poolguard_admission_requests_total[{ ]/ { s += $NF } END { printf "%d\n", s }'
}
calls_before="$(admission_total)"

# --- 8. the e2e tests ---------------------------------------------------------------------------
begin "e2e tests"
export POOLGUARD_E2E_POOLS="${pools[0]},${pools[1]}"
export POOLGUARD_E2E_NAMESPACE_LABEL="${label}"
read -r -a filters <<<"${POOLGUARD_E2E_FILTER:-}"
set +e
cargo test --locked -p poolguard-e2e --test e2e -- --nocapture "${filters[@]}" 2>&1 | tee "${work}/e2e-test.log"
test_rc=${PIPESTATUS[0]}
set -e
result="$(grep -E '^test result:' "${work}/e2e-test.log" | tail -n1 || true)"
e2e_passed="$(sed -nE 's/.* ([0-9]+) passed.*/\1/p' <<<"${result}")"
e2e_failed="$(sed -nE 's/.* ([0-9]+) failed.*/\1/p' <<<"${result}")"
e2e_passed="${e2e_passed:-0}"
e2e_failed="${e2e_failed:-0}"
if ((test_rc != 0 && e2e_failed == 0)); then e2e_failed=1; fi # did not build or run
passed=$((passed + e2e_passed))
failed=$((failed + e2e_failed))
log "tests/e2e.rs through the chart path: ${e2e_passed} passed, ${e2e_failed} failed (cargo test exit ${test_rc})"
calls_after="$(admission_total)"
if ((calls_after > calls_before)); then
    ok "poolguard in ${netns} answered $((calls_after - calls_before)) admission requests during the tests (poolguard_admission_requests_total ${calls_before} -> ${calls_after})"
else
    bad "poolguard_admission_requests_total did not grow during the tests (${calls_before} -> ${calls_after})"
fi
alive "${pg_pid}" && ok "poolguard still running after the tests" || bad "poolguard exited during the tests"

# --- 9. uninstall --------------------------------------------------------------------------------
begin "helm uninstall"
helm uninstall "${release}" -n "${ns}" > "${work}/helm-uninstall.out" 2>&1 \
    && ok "helm uninstall ${release} -n ${ns}" || { bad "helm uninstall: $(tail -n3 "${work}/helm-uninstall.out")"; }
# Play kubelet for the deletion: the garbage collector deletes the pod (grace period), the
# kubelet runs preStop, sends SIGTERM, waits for the exit, then removes the pod for good.
deadline=$((SECONDS + 60))
until [[ -n "$(kubectl -n "${ns}" get pod "${pod}" -o jsonpath='{.metadata.deletionTimestamp}' 2>/dev/null || echo gone)" ]]; do
    ((SECONDS < deadline)) || die "pod ${pod} was not deleted within 60s of helm uninstall"
    sleep 0.5
done
pre_stop="$(jq -r '.spec.containers[0].lifecycle.preStop.sleep.seconds // 0' <<<"${pod_json}")"
grace="$(jq -r '.spec.terminationGracePeriodSeconds // 30' <<<"${pod_json}")"
log "pod ${pod} terminating: preStop sleep ${pre_stop}s, then SIGTERM (grace ${grace}s)"
sleep "${pre_stop}"
if alive "${pg_pid}"; then
    kill -TERM "${pg_pid}"
    deadline=$((SECONDS + grace - pre_stop))
    while alive "${pg_pid}" && ((SECONDS < deadline)); do sleep 0.2; done
    if alive "${pg_pid}"; then
        bad "poolguard did not exit within the grace period after SIGTERM; killing it"
        kill -KILL "${pg_pid}" 2>/dev/null || true
    fi
    set +e
    wait "${pg_pid}"
    pg_rc=$?
    set -e
    ((pg_rc == 0)) && ok "poolguard exited 0 after SIGTERM" || bad "poolguard exited ${pg_rc} after SIGTERM"
else
    bad "poolguard was no longer running at uninstall"
fi
pg_pid=""
kubectl -n "${ns}" delete pod "${pod}" --grace-period=0 --force >/dev/null 2>&1 || true
left="$(kubectl get mutatingwebhookconfigurations,validatingwebhookconfigurations -o name | grep -E "/(${webhook_configs[0]}|${webhook_configs[1]})\$" || true)"
[[ -z "${left}" ]] && ok "no webhook configuration left after helm uninstall" || bad "left behind: ${left}"
left="$(kubectl -n "${ns}" get deployment,replicaset,service,pods -o name 2>/dev/null || true)"
[[ -z "${left}" ]] && ok "no Deployment, ReplicaSet, Service or pod of the release left" || bad "left behind: ${left}"
kubectl create namespace pg-chart-after >/dev/null
kubectl label namespace pg-chart-after "${label}=${pools[0]}" >/dev/null
deadline=$((SECONDS + 30))
after_pod='{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "probe", "namespace": "pg-chart-after"},
  "spec": {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]}}'
until out="$(kubectl create --dry-run=server -o jsonpath='{.spec.nodeSelector}' -f - \
    <<<"${after_pod}" 2>&1)" && [[ -z "${out}" ]]; do
    ((SECONDS < deadline)) || break
    sleep 0.5
done
[[ -z "${out}" ]] && ok "after uninstall a pod in a labelled namespace is admitted untouched" \
    || bad "after uninstall: ${out}"

# --- summary -----------------------------------------------------------------------------------
begin summary
# poolguard's own complaints during the run (JSON log lines at WARN or ERROR).
complaints="$(grep -E '"level":"(WARN|ERROR)"' "${pg_log}" || true)"
if [[ -n "${complaints}" ]]; then
    log "poolguard logged $(wc -l <<<"${complaints}") WARN/ERROR lines (first 10):"
    head -n 10 <<<"${complaints}" >&2
else
    log "poolguard logged no WARN/ERROR lines"
fi
log "timings:"
for p in "${timing_order[@]}"; do
    printf '[chart-path]   %-24s %6ss\n' "${p}" "${timing[${p}]}" >&2
done
printf '[chart-path]   %-24s %6ss\n' total "$(since "${t_total}")" >&2
log "e2e tests: ${e2e_passed} passed, ${e2e_failed} failed; checks: $((passed - e2e_passed)) passed, $((failed - e2e_failed)) failed"
echo "${passed} passed, ${failed} failed"
((failed == 0))
