#!/usr/bin/env bash
# Start a throwaway control plane on loopback for integration tests:
# etcd + kube-apiserver (and, with POOLGUARD_CP_CONTROLLERS=1, also
# kube-controller-manager + kube-scheduler; extra controller-manager flags
# from POOLGUARD_CP_CONTROLLER_MANAGER_ARGS).
#
# Optional, for tests that reach the API server from outside loopback (e.g. pods
# of the real node, integration/node/test.sh); unset, nothing changes:
#   POOLGUARD_CP_APISERVER_ARGS  extra kube-apiserver flags, whitespace-separated
#                                (no quoting), appended after the defaults, so
#                                they win (e.g. --bind-address=0.0.0.0)
#   POOLGUARD_CP_APISERVER_SANS  extra subjectAltName entries of the API
#                                server's serving certificate, comma-separated
#                                (e.g. IP:10.0.0.1)
#
#   STATE=$(integration/controlplane/start.sh [STATE_DIR] | tail -1)
#   export KUBECONFIG=$STATE/kubeconfig      # or: source "$STATE/env"
#   ...
#   integration/controlplane/stop.sh "$STATE" [--purge]
#
# Binaries come from $POOLGUARD_CP_BIN when set, otherwise from build.sh
# (which honours KUBEBUILDER_ASSETS). Everything listens on 127.0.0.1 only, on
# free high ports picked at start. STATE_DIR (default: a new temporary
# directory) receives:
#   kubeconfig  admin kubeconfig (client cert in group system:masters)
#   env         sourceable: KUBECONFIG, POOLGUARD_CP_APISERVER, POOLGUARD_CP_ETCD,
#               POOLGUARD_CP_BIN, POOLGUARD_CP_CA (CA that signed all certs)
#   pki/        throwaway CA, serving/client certs, service-account key pair
#   logs/       one log file per component
#   pids        "<pid> <component>" per started process (read by stop.sh)
#   cmd/        per component: <component> its argv, <component>.env its environment (both
#               NUL-separated), <component>.dir its working directory; restart.sh starts it
#               again from them
# The last line on stdout is STATE_DIR; logs go to stderr. On failure every
# process started so far is stopped again.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

log() { printf '[controlplane] %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

command -v openssl >/dev/null 2>&1 || die "openssl is required"
command -v curl >/dev/null 2>&1 || die "curl is required (Debian: apt-get install -y curl)"

if [[ -n "${POOLGUARD_CP_BIN:-}" ]]; then
    bin="$(cd "${POOLGUARD_CP_BIN}" && pwd)"
else
    bin="$("${here}/build.sh" | tail -n1)"
fi
for b in etcd kube-apiserver kubectl; do
    [[ -x "${bin}/${b}" ]] || die "${bin}/${b} is missing"
done
with_controllers="${POOLGUARD_CP_CONTROLLERS:-0}"
if [[ "${with_controllers}" == 1 ]]; then
    for b in kube-controller-manager kube-scheduler; do
        [[ -x "${bin}/${b}" ]] || die "${bin}/${b} is missing"
    done
fi

if [[ $# -ge 1 ]]; then
    state="$1"
    mkdir -p "${state}"
else
    state="$(mktemp -d "${TMPDIR:-/tmp}/poolguard-cp.XXXXXX")"
fi
state="$(cd "${state}" && pwd)"
[[ ! -s "${state}/pids" ]] || die "${state}/pids exists: stop that control plane first (stop.sh ${state})"
pki="${state}/pki"
logs="${state}/logs"
mkdir -p "${pki}" "${logs}"
: > "${state}/pids"

started_ok=0
on_exit() {
    if (( ! started_ok )); then
        log "start failed; stopping what was started (logs in ${logs})"
        "${here}/stop.sh" "${state}" >&2 || true
    fi
}
trap on_exit EXIT

# --- free loopback ports ------------------------------------------------------
# shellcheck source=integration/controlplane/free-port.sh
source "$(dirname "${BASH_SOURCE[0]}")/free-port.sh"
etcd_port="" etcd_peer_port="" api_port="" kcm_port="" scheduler_port="" # set by pick_port
pick_port etcd_port
pick_port etcd_peer_port
pick_port api_port
pick_port kcm_port
pick_port scheduler_port

# --- throwaway PKI ------------------------------------------------------------
ossl() { openssl "$@" >/dev/null 2>&1 || die "openssl $1 failed"; }
new_key() { ossl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1"; }
sign() { # name subject extensions
    new_key "${pki}/$1.key"
    ossl req -new -key "${pki}/$1.key" -subj "$2" -out "${pki}/$1.csr"
    printf '%s\n' "$3" > "${pki}/$1.ext"
    ossl x509 -req -in "${pki}/$1.csr" -CA "${pki}/ca.crt" -CAkey "${pki}/ca.key" \
        -CAcreateserial -days 7 -sha256 -extfile "${pki}/$1.ext" -out "${pki}/$1.crt"
}
log "generating throwaway certificates in ${pki}"
new_key "${pki}/ca.key"
ossl req -x509 -new -key "${pki}/ca.key" -subj "/CN=poolguard-test-ca" -days 7 -sha256 \
    -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" \
    -out "${pki}/ca.crt"
sign apiserver "/CN=kube-apiserver" "basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=serverAuth
subjectAltName=IP:127.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc${POOLGUARD_CP_APISERVER_SANS:+,${POOLGUARD_CP_APISERVER_SANS}}"
sign admin "/O=system:masters/CN=poolguard-admin" "basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=clientAuth"
ossl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out "${pki}/sa.key"
ossl pkey -in "${pki}/sa.key" -pubout -out "${pki}/sa.pub"
chmod 600 "${pki}"/*.key

# --- kubeconfig ----------------------------------------------------------------
kubeconfig="${state}/kubeconfig"
cat > "${kubeconfig}" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: poolguard-test
  cluster:
    server: https://127.0.0.1:${api_port}
    certificate-authority: ${pki}/ca.crt
users:
- name: poolguard-admin
  user:
    client-certificate: ${pki}/admin.crt
    client-key: ${pki}/admin.key
contexts:
- name: poolguard-test
  context:
    cluster: poolguard-test
    user: poolguard-admin
current-context: poolguard-test
EOF
chmod 600 "${kubeconfig}"

# --- processes -----------------------------------------------------------------
mkdir -p "${state}/cmd"
chmod 700 "${state}/cmd"
launch() { # component args...
    local name="$1"
    shift
    # What restart.sh needs to start it again exactly so.
    printf '%s\0' "${bin}/${name}" "$@" > "${state}/cmd/${name}"
    env -0 > "${state}/cmd/${name}.env"
    pwd > "${state}/cmd/${name}.dir"
    "${bin}/${name}" "$@" >"${logs}/${name}.log" 2>&1 &
    printf '%s %s\n' "$!" "${name}" >> "${state}/pids"
    log "started ${name} (pid $!)"
}
alive() { # component
    local pid
    pid="$(awk -v n="$1" '$2 == n { print $1 }' "${state}/pids")"
    [[ -n "${pid}" ]] && kill -0 "${pid}" 2>/dev/null
}
# A port taken by something else is the usual reason a component stops: name it in the error.
port_clash() { # component
    grep -m1 -oE '[^"]*address already in use' "${logs}/$1.log" 2>/dev/null | sed 's/^.*listen /listen /' || true
}
wait_for() { # component timeout-seconds description command...
    local name="$1" limit="$2" what="$3" deadline clash
    shift 3
    deadline=$((SECONDS + limit))
    until "$@" >/dev/null 2>&1; do
        clash="$(port_clash "${name}")"
        alive "${name}" || { [[ -n "${clash}" ]] || tail -n 30 "${logs}/${name}.log" >&2; die "${name} exited${clash:+: ${clash}}"; }
        [[ -z "${clash}" ]] || die "${name}: ${clash}"
        ((SECONDS < deadline)) || { tail -n 30 "${logs}/${name}.log" >&2; die "${what} not ready after ${limit}s"; }
        sleep 0.5
    done
}
# etcd's own health answer (an open port alone could be another program's).
etcd_healthy() { curl -fsS --max-time 2 "http://127.0.0.1:$1/health" | grep -q '"health":"true"'; }

launch etcd \
    --name=poolguard-test \
    --data-dir="${state}/etcd" \
    --listen-client-urls="http://127.0.0.1:${etcd_port}" \
    --advertise-client-urls="http://127.0.0.1:${etcd_port}" \
    --listen-peer-urls="http://127.0.0.1:${etcd_peer_port}" \
    --initial-advertise-peer-urls="http://127.0.0.1:${etcd_peer_port}" \
    --initial-cluster="poolguard-test=http://127.0.0.1:${etcd_peer_port}" \
    --unsafe-no-fsync=true \
    --log-level=warn
wait_for etcd 60 "etcd on 127.0.0.1:${etcd_port}" etcd_healthy "${etcd_port}"

read -r -a apiserver_extra <<< "${POOLGUARD_CP_APISERVER_ARGS:-}"
launch kube-apiserver \
    --bind-address=127.0.0.1 \
    --advertise-address=127.0.0.1 \
    --endpoint-reconciler-type=none \
    --secure-port="${api_port}" \
    --etcd-servers="http://127.0.0.1:${etcd_port}" \
    --cert-dir="${pki}" \
    --tls-cert-file="${pki}/apiserver.crt" \
    --tls-private-key-file="${pki}/apiserver.key" \
    --client-ca-file="${pki}/ca.crt" \
    --authorization-mode=RBAC \
    --service-account-issuer="https://kubernetes.default.svc" \
    --service-account-key-file="${pki}/sa.pub" \
    --service-account-signing-key-file="${pki}/sa.key" \
    --service-cluster-ip-range=10.0.0.0/24 \
    --allow-privileged=true \
    "${apiserver_extra[@]}"
kubectl_cmd=("${bin}/kubectl" --kubeconfig="${kubeconfig}" --request-timeout=5s)
wait_for kube-apiserver 180 "kube-apiserver on 127.0.0.1:${api_port}" "${kubectl_cmd[@]}" get --raw /readyz

if [[ "${with_controllers}" == 1 ]]; then
    # Extra kube-controller-manager flags, whitespace-separated (no quoting), e.g.
    # POOLGUARD_CP_CONTROLLER_MANAGER_ARGS='--controllers=*,-node-lifecycle-controller'
    # keeps fake Nodes without a kubelet from being tainted unreachable.
    read -r -a kcm_extra <<< "${POOLGUARD_CP_CONTROLLER_MANAGER_ARGS:-}"
    launch kube-controller-manager \
        --kubeconfig="${kubeconfig}" \
        --authentication-kubeconfig="${kubeconfig}" \
        --authorization-kubeconfig="${kubeconfig}" \
        --bind-address=127.0.0.1 \
        --secure-port="${kcm_port}" \
        --cert-dir="${pki}" \
        --leader-elect=false \
        --service-account-private-key-file="${pki}/sa.key" \
        --root-ca-file="${pki}/ca.crt" \
        --cluster-signing-cert-file="${pki}/ca.crt" \
        --cluster-signing-key-file="${pki}/ca.key" \
        "${kcm_extra[@]}"
    launch kube-scheduler \
        --kubeconfig="${kubeconfig}" \
        --authentication-kubeconfig="${kubeconfig}" \
        --authorization-kubeconfig="${kubeconfig}" \
        --bind-address=127.0.0.1 \
        --secure-port="${scheduler_port}" \
        --cert-dir="${pki}" \
        --leader-elect=false
    # Both are ready once they have registered their informers; a short grace
    # period plus a liveness check catches flag or kubeconfig mistakes.
    sleep 3
    alive kube-controller-manager || { tail -n 30 "${logs}/kube-controller-manager.log" >&2; die "kube-controller-manager exited"; }
    alive kube-scheduler || { tail -n 30 "${logs}/kube-scheduler.log" >&2; die "kube-scheduler exited"; }
fi

cat > "${state}/env" <<EOF
export KUBECONFIG='${kubeconfig}'
export POOLGUARD_CP_APISERVER='https://127.0.0.1:${api_port}'
export POOLGUARD_CP_ETCD='http://127.0.0.1:${etcd_port}'
export POOLGUARD_CP_BIN='${bin}'
export POOLGUARD_CP_CA='${pki}/ca.crt'
EOF

started_ok=1
log "control plane ready at https://127.0.0.1:${api_port} (state: ${state})"
printf '%s\n' "${state}"
