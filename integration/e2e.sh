#!/usr/bin/env bash
# End-to-end test of poolguard against a real control plane on loopback (no containers):
#
#   integration/e2e.sh
#
# 1. builds (or reuses) etcd, kube-apiserver, kube-controller-manager, kube-scheduler
#    (integration/controlplane/build.sh; honours KUBEBUILDER_ASSETS), helm
#    (integration/helm/helm.sh), poolguard and the tests;
# 2. starts the control plane with controllers, registers fake Ready nodes for two pools, and
#    for three more of different sizes (psmall, plarge, pgpu: the placement policies' test);
# 3. makes a CA (openssl; its key is kept in the work directory) and a serving certificate it
#    signs with `poolguard certs --ca-cert --ca-key`, starts `poolguard serve` against the cluster
#    with copies of the config and the policies directory (the faults suite rewrites them) and
#    registers its webhooks, rendered from charts/poolguard (integration/e2e/webhooks.sh);
# 4. runs the suites: `cargo test -p poolguard-e2e --test e2e`, `--test bypasses`, ..., the
#    faults harness (src/bin/faults.rs: restarts of kube-apiserver and etcd, a killed poolguard,
#    config flapping, certificate rotation, each under load; its table goes to WORK/faults.md and
#    is printed), then the fail-closed test, which stops poolguard (and starts it again at its end).
# Everything started is stopped on exit; on failure the work directory (logs) is kept, the tails
# of the poolguard and kube-apiserver logs are printed, and last (where a CI log's end shows it)
# the step that failed with its failing tests' or script's messages. See integration/README.md.
#
# Environment (all optional):
#   KUBEBUILDER_ASSETS    prebuilt etcd/kube-apiserver/... instead of building them (build.sh)
#   HELM                  helm binary to use instead of integration/helm/helm.sh's
#   POOLGUARD_CP_CACHE    where build.sh keeps the control-plane binaries
#   CARGO_TARGET_DIR      as for cargo; poolguard is taken from its debug/ directory
#   POOLGUARD_E2E_BIN     use this poolguard binary instead of building one
#   POOLGUARD_E2E_POOLS   two or more pools, default "pool1,gpu" (first: 2 nodes, others: 1);
#                         the second must be the one POOLGUARD_E2E_CONFIG only warns for
#   POOLGUARD_E2E_CONFIG  poolguard config, default integration/e2e/manifests/poolguard-config.yaml
#   POOLGUARD_E2E_FILTER  test name filters for tests/e2e.rs (whitespace-separated)
#   POOLGUARD_E2E_REPEAT  run tests/e2e.rs this many times (flake hunting), default 1
#   POOLGUARD_E2E_SUITES  the test files to run (whitespace-separated), default all:
#                         native e2e bypasses match_conditions cert_renewal audit exceptions rollout gatekeeper
#                         faults placement fail_closed (native runs before the webhooks are registered)
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "${root}"

log() { printf '[e2e] %s\n' "$*"; }
# What failed is said again as the run's last lines (teardown), on stdout: a CI log that keeps only
# its end still shows it.
failure=""
die() { failure="$*"; printf '[e2e] error: %s\n' "$*" >&2; exit 1; }

pools_csv="${POOLGUARD_E2E_POOLS:-pool1,gpu}"
IFS=',' read -r -a pools <<< "${pools_csv}"
((${#pools[@]} >= 2)) || die "POOLGUARD_E2E_POOLS must name at least two pools (got '${pools_csv}')"
label=agentpool # namespaceLabel and nodeSelectorKey of integration/e2e/manifests/poolguard-config.yaml
config="${POOLGUARD_E2E_CONFIG:-integration/e2e/manifests/poolguard-config.yaml}"
[[ -f "${config}" ]] || die "POOLGUARD_E2E_CONFIG=${config} is not a file"
config="$(cd "$(dirname "${config}")" && pwd)/$(basename "${config}")"
for cmd in curl openssl base64 jq ss; do
    command -v "${cmd}" >/dev/null 2>&1 || die "${cmd} is required"
done

work="$(mktemp -d "${TMPDIR:-/tmp}/poolguard-e2e.XXXXXX")"
cp_state="${work}/controlplane"
ctl="${root}/integration/e2e/poolguard-ctl.sh"
cp_started=0
pg_env_written=0
# The step running now, and the output of its commands run through `run` (WORK/phase-NAME.out):
# on failure their failing tests' or script's messages are printed last. Every step starts with
# `begin`, so a step never reports the output of the one before it.
phase="" phase_out=""
begin() { # name [description]
    phase="$1"
    phase_out="${work}/phase-$1.out"
    : >"${phase_out}"
    [[ -z "${2:-}" ]] || log "$2"
}
run() { # command...: run it, its output also kept in the phase's file
    "$@" 2>&1 | tee -a "${phase_out}"
}

teardown() {
    local rc=$?
    set +e
    trap - EXIT INT TERM
    # Log tails first, while they still end with the failure rather than the shutdown.
    if ((rc != 0)); then
        if [[ -f "${work}/poolguard.log" ]]; then
            printf '\n[e2e] ---- tail of the poolguard log (%s)\n' "${work}/poolguard.log"
            tail -n 60 "${work}/poolguard.log"
        fi
        if [[ -f "${cp_state}/logs/kube-apiserver.log" ]]; then
            printf '\n[e2e] ---- tail of the kube-apiserver log (%s)\n' "${cp_state}/logs/kube-apiserver.log"
            # (not the lines of its etcd client retrying, which fill a tail while etcd restarts)
            grep -v 'addrConn.createTransport failed' "${cp_state}/logs/kube-apiserver.log" | tail -n 40
        fi
    fi
    if ((pg_env_written)); then
        "${ctl}" stop "${work}"
    fi
    if ((cp_started)); then
        integration/controlplane/stop.sh "${cp_state}"
    fi
    if ((rc != 0)); then
        if [[ -s "${phase_out}" ]]; then
            printf '\n[e2e] ---- what failed in %s (%s)\n' "${phase}" "${phase_out}"
            # All of it when short (a script's), else the lines about failures and what follows them.
            if (($(wc -l <"${phase_out}") <= 40)); then
                cat "${phase_out}"
            else
                grep -iE -A6 'panicked at|^test [^ ]+ \.\.\. FAILED|^failures:$|FAIL|error' "${phase_out}" |
                    grep -vE 'addrConn.createTransport failed|^stack backtrace:|^ +[0-9]+: |^ +at ' |
                    tail -n 40
            fi
        fi
        [[ -z "${failure}" ]] || printf '[e2e] error: %s\n' "${failure}"
        printf '\n[e2e] FAILED in %s (exit %s); logs kept in %s\n' "${phase}" "${rc}" "${work}"
    else
        rm -rf -- "${work}"
        log "PASSED"
    fi
    exit "${rc}"
}
trap teardown EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }

# shellcheck source=integration/controlplane/free-port.sh
source integration/controlplane/free-port.sh

# --- 1. build ------------------------------------------------------------------
begin build
t_build="$(now)"
log "building the control plane (integration/controlplane/build.sh)"
cp_bin="$(integration/controlplane/build.sh | tail -n1)"
log "Kubernetes: $("${cp_bin}/kube-apiserver" --version)"
log "etcd: $("${cp_bin}/etcd" --version | head -n1)"
HELM="${HELM:-$(bash integration/helm/helm.sh | tail -n1)}"
export HELM
log "helm: $("${HELM}" version --template '{{.Version}}')"

target_dir="${CARGO_TARGET_DIR:-${root}/target}"
[[ "${target_dir}" == /* ]] || target_dir="${root}/${target_dir}"
if [[ -n "${POOLGUARD_E2E_BIN:-}" ]]; then
    poolguard="$(cd "$(dirname "${POOLGUARD_E2E_BIN}")" && pwd)/$(basename "${POOLGUARD_E2E_BIN}")"
    [[ -x "${poolguard}" ]] || die "POOLGUARD_E2E_BIN=${POOLGUARD_E2E_BIN} is not executable"
    log "building the e2e tests (poolguard: ${poolguard})"
else
    log "building poolguard and the e2e tests"
    cargo build --locked --bin poolguard
    poolguard="${target_dir}/debug/poolguard"
    [[ -x "${poolguard}" ]] || die "${poolguard} was not built"
fi
# The proxy native-leader.sh moves poolguard between two API servers with.
cargo build --locked -p poolguard-e2e --bin switch_proxy
cargo test --locked -p poolguard-e2e --test e2e --test bypasses --test match_conditions --test fail_closed --test cert_renewal --test audit --test rollout --test gatekeeper --bin faults --test placement --test native --no-run
log "poolguard: $("${poolguard}" --version)"
"${poolguard}" serve --help >/dev/null 2>&1 || die "this poolguard has no 'serve' command yet"
log "build: $(since "${t_build}")s"

# --- 2. control plane and nodes ----------------------------------------------------
begin cluster
t_cluster="$(now)"
# mTLS from the API server: kube-apiserver presents a client certificate to every webhook
# (AdmissionConfiguration -> kubeconfig, user "*"), signed by a client CA that poolguard alone
# trusts (--client-ca-file): a client that is not the API server is refused at the handshake.
mkdir -p "${work}/client-ca"
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 7 -sha256 \
    -subj "/CN=poolguard-e2e-client-ca" -addext "basicConstraints=critical,CA:TRUE" \
    -addext "keyUsage=critical,keyCertSign,cRLSign" \
    -keyout "${work}/client-ca/ca.key" -out "${work}/client-ca/ca.crt" 2>/dev/null ||
    die "openssl could not make the client CA"
openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
    -subj "/CN=kube-apiserver-webhook-client" -keyout "${work}/client-ca/apiserver.key" \
    -out "${work}/client-ca/apiserver.csr" 2>/dev/null || die "openssl could not make the API server's client key"
openssl x509 -req -in "${work}/client-ca/apiserver.csr" -CA "${work}/client-ca/ca.crt" \
    -CAkey "${work}/client-ca/ca.key" -CAcreateserial -days 7 -sha256 \
    -extfile <(printf 'extendedKeyUsage=clientAuth\nkeyUsage=critical,digitalSignature\n') \
    -out "${work}/client-ca/apiserver.crt" 2>/dev/null || die "openssl could not sign the API server's client certificate"
cat > "${work}/client-ca/webhook-kubeconfig.yaml" <<KUBECONFIG
apiVersion: v1
kind: Config
users:
  - name: "*"
    user:
      client-certificate: ${work}/client-ca/apiserver.crt
      client-key: ${work}/client-ca/apiserver.key
KUBECONFIG
cat > "${work}/client-ca/admission.yaml" <<ADMISSION
apiVersion: apiserver.config.k8s.io/v1
kind: AdmissionConfiguration
plugins:
  - name: ValidatingAdmissionWebhook
    configuration:
      apiVersion: apiserver.config.k8s.io/v1
      kind: WebhookAdmissionConfiguration
      kubeConfigFile: ${work}/client-ca/webhook-kubeconfig.yaml
  - name: MutatingAdmissionWebhook
    configuration:
      apiVersion: apiserver.config.k8s.io/v1
      kind: WebhookAdmissionConfiguration
      kubeConfigFile: ${work}/client-ca/webhook-kubeconfig.yaml
ADMISSION
# No kubelet heartbeats: without the node lifecycle controller the fake nodes stay Ready and
# untainted.
# (start.sh's messages are kept for the failure's summary: a start that fails stops what it
# started, so the kube-apiserver log's tail then shows only its shutdown.)
begin controlplane "starting the control plane (integration/controlplane/start.sh)"
run env POOLGUARD_CP_BIN="${cp_bin}" POOLGUARD_CP_CONTROLLERS=1 \
    POOLGUARD_CP_CONTROLLER_MANAGER_ARGS='--controllers=*,-node-lifecycle-controller' \
    POOLGUARD_CP_APISERVER_ARGS="${POOLGUARD_CP_APISERVER_ARGS:-} --admission-control-config-file=${work}/client-ca/admission.yaml" \
    integration/controlplane/start.sh "${cp_state}"
cp_started=1
begin nodes
export KUBECONFIG="${cp_state}/kubeconfig"
kubectl() { "${cp_bin}/kubectl" --request-timeout=10s "$@"; }

register_node() { # name pool [allocatable]
    KUBECTL="${cp_bin}/kubectl" integration/controlplane/fake-node.sh "$1" "${label}" "$2" ${3:+"$3"}
    log "node $1: ${label}=$2, Ready${3:+, allocatable $3}"
}
register_node "${pools[0]}-node-1" "${pools[0]}"
register_node "${pools[0]}-node-2" "${pools[0]}"
for pool in "${pools[@]:1}"; do
    register_node "${pool}-node-1" "${pool}"
done
# Pools that placement policies choose among (tests/placement.rs; the config prefers them in this
# order): small, large, and one with GPUs.
register_node psmall-node-1 psmall '{"cpu": "4", "memory": "8Gi", "pods": "110"}'
register_node plarge-node-1 plarge '{"cpu": "64", "memory": "256Gi", "pods": "110"}'
register_node pgpu-node-1 pgpu '{"cpu": "16", "memory": "64Gi", "nvidia.com/gpu": "4", "pods": "110"}'
deadline=$((SECONDS + 30))
until kubectl -n kube-system get serviceaccount default >/dev/null 2>&1; do
    ((SECONDS < deadline)) || die "the ServiceAccount controller did not create kube-system/default"
    sleep 0.5
done
kubectl get nodes -L "${label}"
log "cluster: $(since "${t_cluster}")s"

# --- 3. poolguard and its webhooks --------------------------------------------------
begin setup
t_pg="$(now)"
# The CA's key is kept (WORK/ca): the faults suite signs new serving certificates with it, which
# the webhooks' caBundle (ca.crt) keeps trusting.
mkdir -p "${work}/ca"
openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "${work}/ca/ca.key" 2>/dev/null ||
    die "openssl could not make the CA key"
chmod 600 "${work}/ca/ca.key"
openssl req -x509 -new -key "${work}/ca/ca.key" -subj "/CN=poolguard-e2e-ca" -days 7 -sha256 \
    -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" \
    -out "${work}/ca/ca.crt" 2>/dev/null || die "openssl could not make the CA certificate"
"${poolguard}" certs --out-dir "${work}/certs" --ca-cert "${work}/ca/ca.crt" --ca-key "${work}/ca/ca.key" \
    --ip 127.0.0.1 --dns-name localhost
# poolguard reads copies of the config and the policies (placement/ included), each in a
# directory of its own (it watches the directories; the work directory's logs would be changes
# too): the faults suite rewrites them, the repository's files stay untouched.
mkdir -p "${work}/config"
cp "${config}" "${work}/config/"
cp -R "${root}/policies" "${work}/policies"
pg_port="" metrics_port="" # set by pick_port (free-port.sh)
pick_port pg_port
pick_port metrics_port
{
    printf 'PG_BIN=%q\n' "${poolguard}"
    printf 'PG_ADDR=%q\n' "127.0.0.1:${pg_port}"
    printf 'PG_METRICS_ADDR=%q\n' "127.0.0.1:${metrics_port}"
    printf 'PG_CERT_DIR=%q\n' "${work}/certs"
    printf 'PG_CONFIG=%q\n' "${work}/config/$(basename "${config}")"
    printf 'PG_POLICIES_DIR=%q\n' "${work}/policies"
    printf 'PG_KUBECONFIG=%q\n' "${KUBECONFIG}"
    printf 'PG_CLIENT_CA=%q\n' "${work}/client-ca/ca.crt"
} > "${work}/poolguard.env"
pg_env_written=1
"${ctl}" start "${work}"

suites=" ${POOLGUARD_E2E_SUITES:-native e2e bypasses match_conditions cert_renewal audit exceptions rollout gatekeeper faults placement fail_closed} "
suite() { [[ "${suites}" == *" $1 "* ]]; }

# The native fast path, while no webhook of poolguard is registered: the generated
# MutatingAdmissionPolicy/ValidatingAdmissionPolicy objects decide alone, and every case must
# come out as poolguard's webhook code decides it (the test removes the objects again).
if suite native; then
    begin native "suite: native"
    run cargo test --locked -p poolguard-e2e --test native -- --ignored --nocapture
    # The leader keeps them written (serve --native-apply), registers the webhooks only as their
    # fallback (--native-fallback), and the objects decide with poolguard down.
    run env KUBECTL="${cp_bin}/kubectl" POOLGUARD_CP_STATE="${cp_state}" SWITCH_PROXY="${target_dir}/debug/switch_proxy" \
        integration/e2e/native-leader.sh "${poolguard}" "${work}/native-leader" "${work}/certs"
fi

# The guarded opt-in label of tests/bypasses.rs (poolAuthority.guardedLabels in the config): the
# chart registers a pool-authority webhook for it as it does for webhook.namespaceMatchLabels.
# PolicyExceptions are written and checked by tests/exceptions.rs's own replica and webhook
# (this poolguard's config names no namespace where they count, so its webhook would refuse all).
begin webhooks
integration/e2e/webhooks.sh "https://127.0.0.1:${pg_port}" "${work}/certs/ca.crt" "${label}" \
    --set 'config.poolAuthority.guardedLabels={e2e.poolguard.io/opted-in}' \
    --set exceptions.enabled=false \
    > "${work}/webhooks.yaml" || die "rendering the webhook configurations from charts/poolguard failed"
kubectl apply -f "${work}/webhooks.yaml"
# A direct client (anything that reaches poolguard without being the API server) is refused at
# the TLS handshake; one with the API server's client certificate is answered. (Every admission
# of the suites below goes through the API server, so they show its certificate is accepted.)
review='{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"direct","kind":{"group":"","version":"v1","kind":"Pod"},"resource":{"group":"","version":"v1","resource":"pods"},"namespace":"default","operation":"CREATE","object":{"metadata":{"name":"p"},"spec":{"containers":[{"name":"c","image":"registry.k8s.io/pause:3.10"}]}}}}'
if direct="$(curl -sS --max-time 5 --cacert "${work}/certs/ca.crt" -H 'Content-Type: application/json' \
    --data "${review}" "https://127.0.0.1:${pg_port}/validate" 2>&1)"; then
    die "mTLS: a client without a certificate was answered: ${direct}"
fi
log "mTLS: a direct client without a client certificate is refused at the handshake (curl: ${direct##*curl: })"
if direct="$(curl -sS --max-time 5 --cacert "${work}/certs/ca.crt" -H 'Content-Type: application/json' \
    --cert "${work}/certs/tls.crt" --key "${work}/certs/tls.key" \
    --data "${review}" "https://127.0.0.1:${pg_port}/validate" 2>&1)"; then
    die "mTLS: a client certificate from another CA was answered: ${direct}"
fi
log "mTLS: a client certificate not from the API server's client CA is refused (curl: ${direct##*curl: })"
direct="$(curl -sS --max-time 5 --cacert "${work}/certs/ca.crt" -H 'Content-Type: application/json' \
    --cert "${work}/client-ca/apiserver.crt" --key "${work}/client-ca/apiserver.key" \
    --data "${review}" "https://127.0.0.1:${pg_port}/validate" 2>&1)" ||
    die "mTLS: the API server's client certificate was refused: ${direct}"
grep -q '"uid":"direct"' <<<"${direct}" || die "mTLS: no AdmissionReview answer with the API server's certificate: ${direct}"
log "mTLS: the API server's client certificate is answered"

KUBECTL="${cp_bin}/kubectl" integration/e2e/await-webhooks.sh "${label}" "${pools[0]}" "${pools[1]}" 30 >&2 ||
    die "poolguard's webhooks did not become active"
log "webhooks active; poolguard set up in $(since "${t_pg}")s"
# The report CRDs, as the chart installs them (the audit test writes PolicyReports).
"${HELM}" template poolguard charts/poolguard --show-only templates/report-crds.yaml \
    > "${work}/report-crds.yaml" || die "rendering the report CRDs from charts/poolguard failed"
kubectl apply -f "${work}/report-crds.yaml"
kubectl wait --for condition=established --timeout=30s crd/policyreports.wgpolicyk8s.io
# The PolicyException CRD, as the chart installs it (tests/exceptions.rs writes exceptions).
"${HELM}" template poolguard charts/poolguard --show-only templates/policyexception-crd.yaml \
    > "${work}/policyexception-crd.yaml" || die "rendering the PolicyException CRD from charts/poolguard failed"
kubectl apply -f "${work}/policyexception-crd.yaml"
kubectl wait --for condition=established --timeout=30s crd/policyexceptions.poolguard.io

# --- 4. the tests ------------------------------------------------------------------
export POOLGUARD_E2E_POOLS="${pools_csv}"
export POOLGUARD_E2E_NAMESPACE_LABEL="${label}"
printf -v POOLGUARD_E2E_STOP_CMD '%q stop %q' "${ctl}" "${work}"
printf -v POOLGUARD_E2E_START_CMD '%q start %q' "${ctl}" "${work}"
export POOLGUARD_E2E_STOP_CMD POOLGUARD_E2E_START_CMD
read -r -a filters <<< "${POOLGUARD_E2E_FILTER:-}"
repeat="${POOLGUARD_E2E_REPEAT:-1}"
t_e2e="$(now)"
if suite e2e; then
    for ((pass = 1; pass <= repeat; pass++)); do
        begin e2e "running tests/e2e.rs${filters[*]:+ (filter: ${filters[*]})}$( ((repeat > 1)) && printf ' (run %s of %s)' "${pass}" "${repeat}")"
        run cargo test --locked -p poolguard-e2e --test e2e -- --nocapture "${filters[@]}"
    done
fi
if suite bypasses; then
    begin bypasses "running tests/bypasses.rs (what a namespace editor might try)"
    # The two tests about size run alone first, each with poolguard's peak RSS reset before it
    # (clear_refs 5) and read after it: the memory they cost through the API server.
    pg_pid="$(cat "${work}/poolguard.pid")"
    for t in wide_objects_are_refused_clearly large_storable_objects_are_decided; do
        echo 5 > "/proc/${pg_pid}/clear_refs"
        rss_before="$(awk '/VmRSS/ {print $2}' "/proc/${pg_pid}/status")"
        run cargo test --locked -p poolguard-e2e --test bypasses -- --nocapture --exact "${t}"
        log "poolguard RSS during ${t}: peak $(awk '/VmHWM/ {print $2}' "/proc/${pg_pid}/status") kB (${rss_before} kB before)"
    done
    run cargo test --locked -p poolguard-e2e --test bypasses -- --nocapture --skip wide_objects --skip large_storable
fi
if suite match_conditions; then
    begin match_conditions "running tests/match_conditions.rs (which UPDATEs the chart's matchConditions leave out; one test at a time, they read poolguard's request counter)"
    run env POOLGUARD_E2E_METRICS_ADDR="127.0.0.1:${metrics_port}" \
        cargo test --locked -p poolguard-e2e --test match_conditions -- --nocapture --test-threads=1
fi
if suite cert_renewal; then
    begin cert_renewal "running tests/cert_renewal.rs (a second poolguard with --manage-certs and short lifetimes)"
    run env POOLGUARD_BIN="${poolguard}" cargo test --locked -p poolguard-e2e --test cert_renewal -- --nocapture
fi
if suite audit; then
    begin audit "running tests/audit.rs (two more poolguard replicas auditing the test's namespaces, one killed)"
    run env POOLGUARD_BIN="${poolguard}" POOLGUARD_E2E_CONFIG_FILE="${config}" \
        cargo test --locked -p poolguard-e2e --test audit -- --nocapture
fi
if suite exceptions; then
    begin exceptions "running tests/exceptions.rs (a poolguard replica reading PolicyExceptions: admitted with a warning, reported skip, refused and reported fail once expired; bad exceptions refused)"
    run env POOLGUARD_BIN="${poolguard}" cargo test --locked -p poolguard-e2e --test exceptions -- --nocapture
fi
if suite rollout; then
    begin rollout "running tests/rollout.rs (two more poolguard replicas rolling a policy out over three groups)"
    run env POOLGUARD_BIN="${poolguard}" cargo test --locked -p poolguard-e2e --test rollout -- --nocapture
fi
if suite gatekeeper; then
    begin gatekeeper "running tests/gatekeeper.rs (a poolguard replica with --gatekeeper-dir: a K8sAllowedRepos constraint denies, warns in a rollout group, is reported; one with --gatekeeper-from-cluster follows the cluster's templates and constraints)"
    run env POOLGUARD_BIN="${poolguard}" cargo test --locked -p poolguard-e2e --test gatekeeper -- --nocapture --test-threads=1
fi
if suite faults; then
    begin faults "running the faults harness (src/bin/faults.rs: faults of the control plane and of poolguard under load)"
    t_faults="$(now)"
    faults_rc=0
    run cargo run --locked -q -p poolguard-e2e --bin faults -- --work-dir "${work}" --controlplane "${cp_state}" \
        --ca-dir "${work}/ca" --pool "${pools[0]}" --label "${label}" --out "${work}/faults.md" || faults_rc=$?
    [[ -f "${work}/faults.md" ]] && cat "${work}/faults.md"
    log "faults suite: $(since "${t_faults}")s"
    ((faults_rc == 0)) || die "the faults harness failed (exit ${faults_rc})"
fi
if suite placement; then
    begin placement "running tests/placement.rs (placement policies choose the pools of pods in namespaces labelled ${label}=auto)"
    run cargo test --locked -p poolguard-e2e --test placement -- --nocapture
fi
if suite fail_closed; then
    begin fail_closed "running tests/fail_closed.rs (stops poolguard, then starts it again)"
    run cargo test --locked -p poolguard-e2e --test fail_closed -- --ignored --nocapture
fi

# --- 5. API server gone: poolguard answers from its namespace cache ------------------------------
begin outage
log "API server down: poolguard must keep answering from its namespace cache, and fail closed on the unknown"
kubectl create namespace pg-e2e-cached >/dev/null
kubectl label namespace pg-e2e-cached "${label}=${pools[0]}" >/dev/null
review() { # namespace -> AdmissionReview response from poolguard's /mutate (as the API server: mTLS)
    jq --arg ns "$1" '.request.namespace = $ns' testdata/reviews/pod-create-mapped.json |
        curl -sS --max-time 10 --cacert "${work}/certs/ca.crt" --data-binary @- \
            --cert "${work}/client-ca/apiserver.crt" --key "${work}/client-ca/apiserver.key" \
            "https://127.0.0.1:${pg_port}/mutate"
}
patched_pool() { # response -> the pool in its nodeSelector patch, if any
    jq -r '.response.patch // empty' | base64 -d 2>/dev/null |
        jq -r --arg k "${label}" '.[] | select(.path == "/spec/nodeSelector") | .value[$k]'
}
deadline=$((SECONDS + 15))
until [[ "$(review pg-e2e-cached | patched_pool)" == "${pools[0]}" ]]; do
    ((SECONDS < deadline)) || die "poolguard did not see namespace pg-e2e-cached within 15s"
    sleep 0.2
done
apiserver_pid="$(awk '$2 == "kube-apiserver" { print $1 }' "${cp_state}/pids")"
kill -TERM "${apiserver_pid}"
deadline=$((SECONDS + 30))
while kill -0 "${apiserver_pid}" 2>/dev/null; do
    ((SECONDS < deadline)) || { kill -KILL "${apiserver_pid}" 2>/dev/null || true; break; }
    sleep 0.2
done
log "kube-apiserver stopped"
got="$(review pg-e2e-cached | patched_pool)"
[[ "${got}" == "${pools[0]}" ]] || die "with the API server down, a pod in a cached namespace got ${got:-no patch}"
log "  ok: a pod in a cached namespace still gets ${label}=${got}"
answer="$(review pg-e2e-never-seen)"
[[ "$(jq -r '.response.allowed' <<< "${answer}")" == false && "$(jq -r '.response.status.code' <<< "${answer}")" == 500 ]] ||
    die "with the API server down, a pod in an unknown namespace was not refused: ${answer}"
log "  ok: a pod in a namespace it cannot read is refused: $(jq -r '.response.status.message' <<< "${answer}")"
ready="$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:${metrics_port}/readyz")"
[[ "${ready}" == 200 ]] || die "/readyz answered ${ready} with the API server down"
log "  ok: /readyz stays 200 (the cache has synced; it keeps serving)"
log "e2e phase: $(since "${t_e2e}")s"
