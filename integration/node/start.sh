#!/usr/bin/env bash
# Start a real node for a control plane started by ../controlplane/start.sh: containerd (CRI, runc,
# cgroupfs), a CNI bridge network, kubelet and kube-proxy (nftables), all on this machine, with
# every file under NODE_DIR. See README.md.
#
#   sudo integration/node/start.sh CP_STATE [NODE_DIR] [IMAGE_TAR...]   # last stdout line: NODE_DIR
#   integration/node/stop.sh NODE_DIR [--purge]
#
# CP_STATE is the control plane's state directory. Its kube-apiserver must listen on all addresses
# and have the kubernetes Service's address in its certificate, so that pods reach it through the
# Service (POOLGUARD_CP_APISERVER_ARGS=--bind-address=0.0.0.0 POOLGUARD_CP_APISERVER_SANS=IP:10.0.0.1;
# start.sh checks and says so). For kubectl logs/exec it also needs
# --kubelet-preferred-address-types=InternalIP and a client certificate for the kubelet
# (--kubelet-client-certificate/--kubelet-client-key; test.sh passes the admin one). NODE_DIR must
# be new or empty. IMAGE_TARs (OCI or docker archives) are imported into containerd's k8s.io
# namespace before kubelet starts, next to the node's own sandbox ("pause") image.
#
# kubelet serves on the bridge address (its InternalIP), its healthz and kube-proxy's ports on
# loopback; all ports are picked free. Other machine-wide traces: kubelet's iptables chains
# (KUBE-FIREWALL, KUBE-KUBELET-CANARY, KUBE-IPTABLES-HINT; stop.sh removes them), the shims'
# sockets below /run/containerd/s (containerd's fixed place; each shim removes its own).
#
# The node (name POOLGUARD_NODE_NAME, default realnode-1) registers with the taint
# poolguard.io/real-node=true:NoSchedule and the label poolguard.io/real-node=true: only pods that
# tolerate the taint run on it, so tests that create pods for the fake nodes never make it pull.
# containerd refuses every pull (all registries resolve to a closed port on loopback): images come
# only from the tars.
#
# Network: a bridge pgnode-<random> with 10.251.X.1/24 in this network namespace (X random,
# skipped when the machine already uses 10.251.X.0/24); pods get 10.251.X.2-254. No IP forwarding
# and no masquerading are turned on: pods reach the host (the API server through the kubernetes
# Service) and the host reaches pods; kube-proxy (nftables mode, its own tables) routes ClusterIPs.
# A table of our own drops anything the pod subnet would send past the bridge.
#
# Only one such node runs on a machine at a time (kube-proxy's nftables tables and the Service
# range are machine-wide): a second start fails at once.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

log() { printf '[node] %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

(($# >= 1)) || die "usage: $0 CP_STATE [NODE_DIR] [IMAGE_TAR...]"
((EUID == 0)) || die "run as root: the node creates a bridge, cgroups, mounts and nftables rules"
cp_state="$(cd "$1" 2>/dev/null && pwd)" || die "control plane state dir $1 not found"
[[ -f "${cp_state}/env" && -f "${cp_state}/pki/ca.key" ]] || die "${cp_state} is not a state dir of controlplane/start.sh"
shift
if (($# >= 1)) && [[ ! -f "$1" ]]; then
    node_dir="$1"
    shift
else
    node_dir=""
fi
image_tars=()
for t in "$@"; do
    [[ -f "${t}" ]] || die "image archive ${t} not found"
    image_tars+=("$(cd "$(dirname "${t}")" && pwd)/$(basename "${t}")")
done

for pair in ip:iproute2 nft:nftables openssl:openssl mount:mount flock:util-linux runc:runc buildah:buildah musl-gcc:musl-tools; do
    command -v "${pair%%:*}" >/dev/null 2>&1 || die "${pair%%:*} is missing (Debian: apt-get install -y ${pair#*:})"
done

# shellcheck disable=SC1091
source "${cp_state}/env"
cp_bin="${POOLGUARD_CP_BIN}"
api_port="${POOLGUARD_CP_APISERVER##*:}"
node_name="${POOLGUARD_NODE_NAME:-realnode-1}"
service_ip=10.0.0.1 # first address of controlplane/start.sh's --service-cluster-ip-range

bin="$("${here}/build.sh" | tail -n1)"
pause_tar="$("${here}/build-pause.sh" | tail -n1)"

# One node per machine.
lock_file="${TMPDIR:-/tmp}/poolguard-node.lock"
exec 8>"${lock_file}"
flock -n 8 || die "another node is being started on this machine (lock ${lock_file} is held)"
# (A kube-proxy just stopped can linger as a zombie until init reaps it: not a running one.)
pid="$(pgrep -x kube-proxy | while read -r p; do
    [[ "$(awk '{ print $3 }' "/proc/${p}/stat" 2>/dev/null)" =~ ^[RSD]$ ]] && echo "${p}"
done | head -n1 || true)"
if [[ -n "${pid}" ]]; then
    die "a kube-proxy already runs on this machine (pid ${pid}); stop that node first (stop.sh)"
fi

if [[ -z "${node_dir}" ]]; then
    node_dir="$(mktemp -d "${TMPDIR:-/tmp}/poolguard-node.XXXXXX")"
fi
mkdir -p "${node_dir}"
node_dir="$(cd "${node_dir}" && pwd)"
[[ ! -s "${node_dir}/pids" ]] || die "${node_dir}/pids exists: stop that node first (stop.sh ${node_dir})"
# State of an earlier node (IP allocations, containerd's store, kubelet's checkpoints) would leak
# into this one.
[[ -z "$(ls -A "${node_dir}")" ]] || die "${node_dir} is not empty: give a new directory (or stop.sh ${node_dir} --purge first)"
chmod 0711 "${node_dir}"
pki="${node_dir}/pki"
logs="${node_dir}/logs"
mkdir -p "${pki}" "${logs}"
: >"${node_dir}/pids"
: >"${node_dir}/cleanup.env"
# What stop.sh has to undo, written as soon as it exists.
note() { printf '%s\n' "$*" >>"${node_dir}/cleanup.env"; }
note "bin=${bin}"

started_ok=0
on_exit() {
    if ((!started_ok)); then
        log "start failed; stopping what was started (logs in ${logs})"
        "${here}/stop.sh" "${node_dir}" >&2 || true
    fi
}
trap on_exit EXIT

# shellcheck source=integration/controlplane/free-port.sh
source "${here}/../controlplane/free-port.sh"
kubelet_port="" kubelet_healthz_port="" proxy_healthz_port="" proxy_metrics_port=""
pick_port kubelet_port
pick_port kubelet_healthz_port
pick_port proxy_healthz_port
pick_port proxy_metrics_port

# containerd's registry configuration (below) sends every pull to 127.0.0.1:9, which must be closed.
if (exec 3<>/dev/tcp/127.0.0.1/9) 2>/dev/null; then
    die "port 127.0.0.1:9 is in use; containerd's registry configuration points every pull there, so it must be closed"
fi

# --- network ------------------------------------------------------------------------------
x=""
for ((i = 0; i < 64; i++)); do
    c=$((RANDOM % 256))
    if ip -4 -o addr show | grep -q "inet 10\.251\.${c}\." || ip -4 route show | grep -q "^10\.251\.${c}\."; then
        continue
    fi
    x="${c}"
    break
done
[[ -n "${x}" ]] || die "no free 10.251.X.0/24 found"
pod_cidr="10.251.${x}.0/24"
gw="10.251.${x}.1"
bridge="pgnode-$(openssl rand -hex 3)"
ip link add "${bridge}" type bridge
note "bridge=${bridge}"
ip addr add "${gw}/24" dev "${bridge}"
ip link set "${bridge}" up
log "bridge ${bridge} ${gw}/24 (pods: ${pod_cidr})"

# Pods may talk to this host only: whatever they send that would be forwarded elsewhere is dropped.
guard_table="poolguard_node_${bridge#pgnode-}"
nft -f - <<EOF
table inet ${guard_table} {
    chain forward {
        type filter hook forward priority -10; policy accept;
        iifname "${bridge}" oifname != "${bridge}" drop
        ip saddr ${pod_cidr} oifname != "${bridge}" drop
    }
}
EOF
note "guard_table=${guard_table}"

# The API server must be reachable at the bridge address (kubernetes Service endpoint).
if ! (exec 3<>"/dev/tcp/${gw}/${api_port}") 2>/dev/null; then
    die "kube-apiserver does not answer on ${gw}:${api_port}: start the control plane with POOLGUARD_CP_APISERVER_ARGS=--bind-address=0.0.0.0"
fi
if ! openssl x509 -in "${cp_state}/pki/apiserver.crt" -noout -ext subjectAltName 2>/dev/null | grep -q "IP Address:${service_ip}\b"; then
    die "the API server certificate has no IP ${service_ip}: start the control plane with POOLGUARD_CP_APISERVER_SANS=IP:${service_ip}"
fi

# --- certificates -------------------------------------------------------------------------
ossl() { openssl "$@" >/dev/null 2>&1 || die "openssl $1 failed"; }
client_cert() { # name subject
    ossl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "${pki}/$1.key"
    ossl req -new -key "${pki}/$1.key" -subj "$2" -out "${pki}/$1.csr"
    printf 'basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=clientAuth\n' >"${pki}/$1.ext"
    ossl x509 -req -in "${pki}/$1.csr" -CA "${cp_state}/pki/ca.crt" -CAkey "${cp_state}/pki/ca.key" \
        -CAcreateserial -CAserial "${pki}/ca.srl" -days 7 -sha256 -extfile "${pki}/$1.ext" -out "${pki}/$1.crt"
    chmod 600 "${pki}/$1.key"
}
client_cert kubelet "/O=system:nodes/CN=system:node:${node_name}"
client_cert kube-proxy "/CN=system:kube-proxy"
kubeconfig() { # name
    cat >"${node_dir}/$1.kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: poolguard-test
  cluster:
    server: ${POOLGUARD_CP_APISERVER}
    certificate-authority: ${cp_state}/pki/ca.crt
users:
- name: $1
  user:
    client-certificate: ${pki}/$1.crt
    client-key: ${pki}/$1.key
contexts:
- name: $1
  context:
    cluster: poolguard-test
    user: $1
current-context: $1
EOF
    chmod 600 "${node_dir}/$1.kubeconfig"
}
kubeconfig kubelet
kubeconfig kube-proxy

kubectl() { "${cp_bin}/kubectl" --kubeconfig="${KUBECONFIG}" --request-timeout=10s "$@"; }
# The API server runs without the Node authorizer (RBAC only): grant the node's user the
# kubelet's ClusterRole (kube-proxy's user is bound by the default system:node-proxier binding).
kubectl apply -f - >/dev/null <<EOF
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: poolguard-node:${node_name}
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: system:node
subjects:
- apiGroup: rbac.authorization.k8s.io
  kind: User
  name: system:node:${node_name}
EOF
# The kubernetes Service: the API server was started with --endpoint-reconciler-type=none, so its
# endpoint (the bridge address, where pods can reach it) is written here.
kubectl apply -f - >/dev/null <<EOF
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: kubernetes-poolguard-node
  namespace: default
  labels:
    kubernetes.io/service-name: kubernetes
    endpointslice.kubernetes.io/managed-by: poolguard-node
addressType: IPv4
endpoints:
- addresses: ["${gw}"]
  conditions: {ready: true}
ports:
- name: https
  port: ${api_port}
  protocol: TCP
EOF

# --- processes ----------------------------------------------------------------------------
launch() { # name binary args...
    local name="$1"
    shift
    "$@" >"${logs}/${name}.log" 2>&1 8>&- & # (fd 8: the start lock, not theirs to hold)
    printf '%s %s\n' "$!" "${name}" >>"${node_dir}/pids"
    log "started ${name} (pid $!)"
}
alive() { # name
    local pid
    pid="$(awk -v n="$1" '$2 == n { print $1 }' "${node_dir}/pids")"
    [[ -n "${pid}" ]] && kill -0 "${pid}" 2>/dev/null
}
# A port taken by something else is the usual reason a component stops or never gets ready
# (kube-proxy retries its healthz port forever): name it in the error.
port_clash() { # name
    grep -m1 -oE '[^"]*address already in use' "${logs}/$1.log" 2>/dev/null | sed 's/^.*listen /listen /' || true
}
wait_for() { # name timeout description command...
    local name="$1" limit="$2" what="$3" deadline clash
    shift 3
    deadline=$((SECONDS + limit))
    until "$@" >/dev/null 2>&1; do
        clash="$(port_clash "${name}")"
        alive "${name}" || {
            [[ -n "${clash}" ]] || tail -n 30 "${logs}/${name}.log" >&2
            die "${name} exited${clash:+: ${clash}}"
        }
        [[ -z "${clash}" ]] || die "${name}: ${clash}"
        ((SECONDS < deadline)) || {
            tail -n 30 "${logs}/${name}.log" >&2
            die "${what} not ready after ${limit}s"
        }
        sleep 0.5
    done
}
# The ports a component is about to bind must still be free (they were picked free a moment ago).
ports_free() { # name port...
    local name="$1" p
    shift
    for p in "$@"; do
        ! port_in_use "${p}" || die "port ${p}, picked for ${name}, is in use now (by $(ss -Htlnp "sport = :${p}" 2>/dev/null | grep -oE 'users:\(\("[^"]+"' | cut -d'"' -f2 | head -n1 || echo '?')); start again"
    done
}

# containerd: everything under node_dir; runc (Debian) with cgroupfs; CNI from node_dir.
cd_dir="${node_dir}/containerd"
mkdir -p "${cd_dir}/certs.d/_default" "${node_dir}/cni/net.d" "${node_dir}/cni/ipam"
sock="${cd_dir}/containerd.sock"
# Every registry is mapped to a closed port on loopback: a pull fails at once and nothing leaves
# the machine.
cat >"${cd_dir}/certs.d/_default/hosts.toml" <<'EOF'
server = "http://127.0.0.1:9"
[host."http://127.0.0.1:9"]
  capabilities = ["pull", "resolve"]
EOF
cat >"${cd_dir}/config.toml" <<EOF
version = 3
root = "${cd_dir}/root"
state = "${cd_dir}/state"
# Plugins that would use machine-wide paths, or that this node does not need.
disabled_plugins = ["io.containerd.nri.v1.nri", "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper",
  "io.containerd.snapshotter.v1.erofs", "io.containerd.tracing.processor.v1.otlp",
  "io.containerd.internal.v1.tracing"]

[grpc]
  address = "${sock}"
[ttrpc]
  address = "${sock}.ttrpc"

[plugins."io.containerd.internal.v1.opt"]
  path = "${cd_dir}/opt"

[plugins."io.containerd.cri.v1.images"]
  snapshotter = "overlayfs"
  [plugins."io.containerd.cri.v1.images".pinned_images]
    sandbox = "${POOLGUARD_NODE_PAUSE_IMAGE:-localhost/poolguard-node/pause:1}"
  [plugins."io.containerd.cri.v1.images".registry]
    config_path = "${cd_dir}/certs.d"

[plugins."io.containerd.cri.v1.runtime"]
  netns_mounts_under_state_dir = true
  cdi_spec_dirs = []
  # Sandboxes get oom_score_adj -998, which needs CAP_SYS_RESOURCE; where root lacks it (these
  # machines), no container goes below containerd's own score.
  restrict_oom_score_adj = true
  [plugins."io.containerd.cri.v1.runtime".containerd]
    default_runtime_name = "runc"
    [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]
        BinaryName = "$(command -v runc)"
        Root = "${cd_dir}/runc"
        SystemdCgroup = false
  [plugins."io.containerd.cri.v1.runtime".cni]
    bin_dirs = ["${bin}"]
    conf_dir = "${node_dir}/cni/net.d"

[plugins."io.containerd.grpc.v1.cri"]
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
EOF
note "containerd_sock=${sock}"

# CNI: the bridge above, addresses from host-local (state in node_dir); no gateway setup by the
# plugin (the address is ours already, and isGateway would turn on IP forwarding).
cat >"${node_dir}/cni/net.d/10-poolguard-node.conflist" <<EOF
{
  "cniVersion": "1.0.0",
  "name": "poolguard-node",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "${bridge}",
      "isGateway": false,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "dataDir": "${node_dir}/cni/ipam",
        "ranges": [[{"subnet": "${pod_cidr}", "gateway": "${gw}"}]],
        "routes": [{"dst": "0.0.0.0/0", "gw": "${gw}"}]
      }
    },
    {"type": "loopback"}
  ]
}
EOF

PATH="${bin}:${PATH}" launch containerd "${bin}/containerd" --config "${cd_dir}/config.toml" --log-level info
ctr() { "${bin}/ctr" --address "${sock}" --namespace k8s.io "$@"; }
wait_for containerd 60 "containerd (${sock})" ctr version

for t in "${pause_tar}" "${image_tars[@]}"; do
    if ! out="$(ctr images import --snapshotter overlayfs "${t}" 2>&1)"; then
        # (ctr repeats containerd's cgroup v1 deprecation warning on every call.)
        die "ctr images import ${t} failed: $(grep -v DEPRECATION <<<"${out}" | tail -n1)"
    fi
    log "imported ${t##*/}"
done
ctr images ls -q 2>/dev/null | grep -v '^sha256:' | sed 's/^/[node]   image: /' >&2


# kubelet: cgroup v1 (these machines cannot switch), cgroupfs, its own cgroup root; disk and image
# GC thresholds relaxed for small, full disks; serving on loopback only.
kl_dir="${node_dir}/kubelet"
mkdir -p "${kl_dir}/root" "${kl_dir}/pod-logs" "${kl_dir}/volume-plugins"
printf 'nameserver 127.0.0.1\n' >"${kl_dir}/resolv.conf" # pods resolve nothing (no cluster DNS)
cgroup_root="/poolguard-node-${bridge#pgnode-}"
note "cgroup_root=${cgroup_root}"
# kubelet requires its cgroup root to exist in every hierarchy; cpuset starts with the parent's
# CPUs and memory nodes (a new v1 cpuset is empty).
for h in /sys/fs/cgroup/*/; do
    [[ -f "${h}cgroup.procs" ]] || continue
    mkdir -p "${h}${cgroup_root#/}" || die "cannot create cgroup ${h}${cgroup_root#/}"
    if [[ -f "${h}cpuset.cpus" ]]; then
        cat "${h}cpuset.cpus" >"${h}${cgroup_root#/}/cpuset.cpus"
        cat "${h}cpuset.mems" >"${h}${cgroup_root#/}/cpuset.mems"
    fi
done
note "kubelet_root=${kl_dir}/root"
cat >"${kl_dir}/config.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: ${gw}
port: ${kubelet_port}
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: ${kubelet_healthz_port}
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: false}
  x509: {clientCAFile: ${cp_state}/pki/ca.crt}
authorization: {mode: AlwaysAllow}
containerRuntimeEndpoint: unix://${sock}
imageServiceEndpoint: unix://${sock}
cgroupDriver: cgroupfs
cgroupRoot: ${cgroup_root}
failCgroupV1: false
failSwapOn: false
podCIDR: ${pod_cidr}
resolvConf: ${kl_dir}/resolv.conf
podLogsDir: ${kl_dir}/pod-logs
volumePluginDir: ${kl_dir}/volume-plugins
maxPods: 16
evictionHard:
  memory.available: 100Mi
  nodefs.available: 512Mi
  imagefs.available: 512Mi
  nodefs.inodesFree: 1%
  imagefs.inodesFree: 1%
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
registerWithTaints:
- key: poolguard.io/real-node
  value: "true"
  effect: NoSchedule
serializeImagePulls: false
EOF
# A Node object left from an earlier run would carry stale addresses and status.
kubectl delete node "${node_name}" --ignore-not-found >/dev/null
ports_free kubelet "${kubelet_port}" "${kubelet_healthz_port}"
launch kubelet "${bin}/kubelet" \
    --config="${kl_dir}/config.yaml" \
    --kubeconfig="${node_dir}/kubelet.kubeconfig" \
    --root-dir="${kl_dir}/root" \
    --cert-dir="${kl_dir}/pki" \
    --hostname-override="${node_name}" \
    --node-ip="${gw}" \
    --node-labels="poolguard.io/real-node=true" \
    --v=2

# kube-proxy: nftables mode (its own tables ip/ip6 kube-proxy), no conntrack sysctls, node ports
# only on the bridge address.
cat >"${node_dir}/kube-proxy.yaml" <<EOF
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: nftables
clientConnection:
  kubeconfig: ${node_dir}/kube-proxy.kubeconfig
hostnameOverride: ${node_name}
bindAddress: ${gw}
healthzBindAddress: 127.0.0.1:${proxy_healthz_port}
metricsBindAddress: 127.0.0.1:${proxy_metrics_port}
clusterCIDR: ${pod_cidr}
detectLocalMode: ClusterCIDR
nodePortAddresses: ["${gw}/32"]
conntrack:
  maxPerCore: 0
  min: 0
  tcpEstablishedTimeout: 0s
  tcpCloseWaitTimeout: 0s
EOF

node_ready() {
    [[ "$(kubectl get node "${node_name}" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null)" == True ]]
}
wait_for kubelet 120 "node ${node_name}" node_ready
# The API server taints a new node not-ready; the node lifecycle controller lifts that once the
# node is Ready, but the harnesses here run kube-controller-manager without it (their fake nodes
# have no kubelet), so it is lifted here, keeping our own taint.
kubectl patch node "${node_name}" --type=json -p '[{"op": "replace", "path": "/spec/taints",
    "value": [{"key": "poolguard.io/real-node", "value": "true", "effect": "NoSchedule"}]}]' >/dev/null
# kube-proxy only once the Node object carries this run's address: it exits when the node's IPs
# change under it.
note "kube_proxy=1"
ports_free kube-proxy "${proxy_healthz_port}" "${proxy_metrics_port}"
launch kube-proxy "${bin}/kube-proxy" --config="${node_dir}/kube-proxy.yaml" --v=2
proxy_healthy() { curl -sf --max-time 2 "http://127.0.0.1:${proxy_healthz_port}/healthz"; }
wait_for kube-proxy 60 "kube-proxy" proxy_healthy

cat >"${node_dir}/env" <<EOF
export POOLGUARD_NODE_NAME='${node_name}'
export POOLGUARD_NODE_BIN='${bin}'
export POOLGUARD_NODE_CONTAINERD='${sock}'
export POOLGUARD_NODE_POD_CIDR='${pod_cidr}'
export POOLGUARD_NODE_BRIDGE='${bridge}'
export POOLGUARD_NODE_GATEWAY='${gw}'
EOF
started_ok=1
log "node ${node_name} Ready ($(kubectl get node "${node_name}" -o jsonpath='{.status.nodeInfo.kubeletVersion}, {.status.nodeInfo.containerRuntimeVersion}, kernel {.status.nodeInfo.kernelVersion}'))"
printf '%s\n' "${node_dir}"
