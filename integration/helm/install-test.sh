#!/usr/bin/env bash
# Install charts/poolguard with a real helm into a throwaway kube-apiserver on loopback
# (integration/controlplane) and check what only a real API server can tell:
#
#   * every rendered object of modes self, provided and the optional switches passes the API
#     server's validation (server-side dry run; certManager and ServiceMonitor need CRDs the
#     throwaway cluster does not have, so those are only rendered, by lint.sh);
#   * the namespaceSelectors: with no poolguard pod behind the Service (no controllers run here)
#     the webhooks fail closed, so a pod is refused exactly where a webhook applies: in a
#     labelled namespace (mutating + validating), in an unlabelled one (validating, all
#     namespaces by default; allowed with validating.failurePolicy=Ignore), never in the release
#     namespace or kube-system;
#   * RBAC grants exactly what the chart README says (kubectl auth can-i as poolguard's
#     ServiceAccount);
#   * the real write path of mode self: `poolguard serve` runs on loopback with the Deployment's
#     arguments, as poolguard's ServiceAccount (a kubeconfig with a token from the TokenRequest
#     API), creates its certificate Secret and injects the CA into both webhook configurations:
#     every caBundle equals the Secret's ca.crt, and every other field of the configurations
#     (including a matchCondition another field manager added) is unchanged;
#   * that injected caBundle survives `helm upgrade`;
#   * `helm uninstall` leaves no webhook configuration behind (and, as documented, the Secret
#     poolguard created at run time stays).
#
#   bash integration/helm/install-test.sh      # HELM=/path/to/helm, POOLGUARD_CP_BIN=dir to reuse
#
# Needs jq, openssl, base64 and a poolguard binary (POOLGUARD_BIN, else $CARGO_TARGET_DIR or
# target/, debug or release; `cargo test` builds one); without one it fails at once.
#
# Prints "N passed, N failed" at the end; exits non-zero on any failure.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."

log() { printf '[helm-install] %s\n' "$*" >&2; }
die() { log "FAIL: $*"; exit 1; }

for cmd in jq openssl base64; do
    command -v "$cmd" >/dev/null 2>&1 || die "$cmd is required"
done
# shellcheck source=integration/helm/poolguard-bin.sh
source integration/helm/poolguard-bin.sh
poolguard="$(poolguard_bin)"
[[ -n "$poolguard" ]] \
    || die "no poolguard binary (set POOLGUARD_BIN or build one: cargo build --bin poolguard)"
poolguard="$(cd "$(dirname "$poolguard")" && pwd)/$(basename "$poolguard")"

chart=charts/poolguard
release=poolguard
ns="poolguard-system"
sa="system:serviceaccount:${ns}:poolguard"
helm="${HELM:-$(bash integration/helm/helm.sh | tail -n1)}"

state="$(bash integration/controlplane/start.sh | tail -n1)"
pg_pid=""
cleanup() {
    if [[ -n "$pg_pid" ]] && kill -0 "$pg_pid" 2>/dev/null; then
        kill -TERM "$pg_pid" 2>/dev/null
        wait "$pg_pid" 2>/dev/null
    fi
    bash integration/controlplane/stop.sh "$state" --purge >/dev/null 2>&1 || true
}
trap cleanup EXIT
cmd_out="${state}/cmd.out"
# shellcheck source=/dev/null
source "${state}/env"
export KUBECONFIG
kubectl() { "${POOLGUARD_CP_BIN}/kubectl" --request-timeout=20s "$@"; }
helm() { "$helm" --kubeconfig "$KUBECONFIG" "$@"; }

passed=0
failed=0
ok() { passed=$((passed + 1)); log "ok: $*"; }
bad() { failed=$((failed + 1)); log "FAIL: $*"; }
expect() { # description command... (must succeed)
    local what="$1"; shift
    if "$@" >"$cmd_out" 2>&1; then ok "$what"; else bad "$what: $(tail -n3 "$cmd_out")"; fi
}
expect_not() { # description reason command... (must fail, with reason in its output)
    local what="$1" reason="$2"; shift 2
    if "$@" >"$cmd_out" 2>&1; then
        bad "$what (succeeded)"
    elif grep -qF -- "$reason" "$cmd_out"; then
        ok "$what (${reason})"
    else
        bad "$what: failed, but not with '${reason}': $(tail -n3 "$cmd_out")"
    fi
}
can_i() { # yes|no verb resource [args...]
    local want="$1"; shift
    local got
    got="$(kubectl auth can-i --as="$sa" "$@" 2>/dev/null || true)"
    if [[ "$got" == "$want" ]]; then ok "can-i $* = $want"; else bad "can-i $* = '${got}', want ${want}"; fi
}
# A pod that needs no controller: created and stored, never scheduled.
run_pod() { # namespace name
    kubectl -n "$1" run "$2" --image=registry.example.com/pause:3.10 --restart=Never \
        --overrides='{"spec":{"automountServiceAccountToken":false}}'
}

kubectl create namespace "$ns" >/dev/null
for n in team-a plain; do kubectl create namespace "$n" >/dev/null; done
kubectl label namespace team-a agentpool=pool1 >/dev/null
# No controller-manager here: create the default ServiceAccounts pods refer to.
for n in "$ns" kube-system team-a plain; do
    kubectl -n "$n" create serviceaccount default >/dev/null 2>&1 || true
done

# --- server-side validation of the modes the throwaway cluster has the APIs for ---------------
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 1 \
    -subj /CN=poolguard-test-ca -keyout "${state}/test-ca.key" -out "${state}/test-ca.crt" 2>/dev/null
ca_pem="$(cat "${state}/test-ca.crt")"
for args in "" \
    "--set certificates.mode=provided --set certificates.secretName=serving --set-string certificates.caBundle=$(printf '%s\n' "$ca_pem" | base64 -w0)" \
    "-f ${chart}/ci/policies-values.yaml" \
    "-f ${chart}/ci/options-values.yaml --set serviceMonitor.enabled=false"; do
    # shellcheck disable=SC2086 # plain words
    expect "server-side dry run: $(cut -c1-90 <<<"${args:-defaults}")" \
        bash -c "\"$helm\" template $release $chart -n $ns $args | \"${POOLGUARD_CP_BIN}/kubectl\" apply --dry-run=server -f -"
done

# --- install (mode self) -----------------------------------------------------------------------
out="${POOLGUARD_HELM_OUT:-target/helm}"
mkdir -p "$out"
expect "helm install" helm install "$release" "$chart" -n "$ns"
cp "$cmd_out" "${out}/install-notes.txt"
if grep -q 'kubectl label namespace team-a agentpool=pool1' "${out}/install-notes.txt" \
    && grep -q "jsonpath='{.spec.nodeSelector}'" "${out}/install-notes.txt"; then
    ok "NOTES explain labelling and checking (saved to ${out}/install-notes.txt)"
else
    bad "NOTES lack the label/check instructions (${out}/install-notes.txt)"
fi
expect "MutatingWebhookConfiguration exists" kubectl get mutatingwebhookconfiguration poolguard-mutating
expect "ValidatingWebhookConfiguration exists" kubectl get validatingwebhookconfiguration poolguard-validating
if [[ -z "$(kubectl get mutatingwebhookconfiguration poolguard-mutating -o jsonpath='{.webhooks[0].clientConfig.caBundle}')" ]]; then
    ok "mode self renders no caBundle"
else
    bad "mode self rendered a caBundle"
fi

# --- namespaceSelectors (no endpoints behind the Service: the webhooks fail closed) -------------
expect_not "pod in labelled namespace team-a is sent to poolguard (refused: no poolguard)" \
    'failed calling webhook "mutate.poolguard.io"' run_pod team-a p1
expect_not "pod in unlabelled namespace is validated (refused: no poolguard, failurePolicy Fail)" \
    'failed calling webhook "validate.poolguard.io"' run_pod plain p1
expect "pod in the release namespace is never sent to poolguard" run_pod "$ns" p1
expect "pod in kube-system is never sent to poolguard" run_pod kube-system p1
expect "namespace operations are not matched" kubectl create namespace other

# --- RBAC ----------------------------------------------------------------------------------------
can_i yes watch namespaces
can_i yes get namespaces/team-a
can_i no update namespaces/team-a
can_i yes patch mutatingwebhookconfigurations/poolguard-mutating
can_i yes patch validatingwebhookconfigurations/poolguard-validating
can_i no update validatingwebhookconfigurations/poolguard-validating
can_i no patch mutatingwebhookconfigurations/someone-else
can_i no list mutatingwebhookconfigurations
can_i no create validatingwebhookconfigurations
can_i no delete mutatingwebhookconfigurations/poolguard-mutating
can_i yes create secrets -n "$ns"
can_i yes patch secrets/poolguard-tls -n "$ns"
can_i no get secrets/someone-elses -n "$ns"
can_i no list secrets -n "$ns"
can_i no create secrets -n default
can_i no create pods -n "$ns"

# --- the real write path: poolguard --manage-certs as its ServiceAccount ---------------------------
# Another field manager adds a matchCondition to both configurations first: poolguard's write must
# keep what others own (whether it patches or applies).
marker='{"name": "install-test-marker", "expression": "true"}'
for kind in mutatingwebhookconfiguration validatingwebhookconfiguration; do
    name="poolguard-${kind%%webhookconfiguration}"
    expect "another field manager adds a matchCondition to ${name}" \
        kubectl patch "$kind" "$name" --field-manager=install-test --type=json \
            -p "[{\"op\": \"add\", \"path\": \"/webhooks/0/matchConditions\", \"value\": [${marker}]}]"
done
# What must survive: the configurations without caBundle and server-side bookkeeping.
config_view() { # kind name
    kubectl get "$1" "$2" -o json | jq -S 'del(.metadata.resourceVersion, .metadata.generation,
        .metadata.managedFields) | .webhooks[].clientConfig |= del(.caBundle)'
}
for kind in mutatingwebhookconfiguration validatingwebhookconfiguration; do
    config_view "$kind" "poolguard-${kind%%webhookconfiguration}" >"${state}/${kind}.before.json"
done

# The Deployment's container arguments, run on loopback: listen addresses on free loopback ports,
# the ConfigMaps' files where the pod would mount them.
pg_dir="${state}/poolguard"
mkdir -p "${pg_dir}/config" "${pg_dir}/policies"
kubectl -n "$ns" get configmap poolguard-config -o json | jq -j '.data["config.yaml"]' >"${pg_dir}/config/config.yaml"
policies_json="$(kubectl -n "$ns" get configmap poolguard-policies -o json)"
while IFS= read -r key; do
    jq -j --arg k "$key" '.data[$k]' <<<"$policies_json" >"${pg_dir}/policies/${key}"
done < <(jq -r '.data | keys[]' <<<"$policies_json")
# shellcheck source=integration/controlplane/free-port.sh
source integration/controlplane/free-port.sh
pg_port="" metrics_port="" # set by pick_port
pick_port pg_port
pick_port metrics_port
args=()
prev=""
while IFS= read -r arg; do
    case "$prev" in
        --addr) arg="127.0.0.1:${pg_port}" ;;
        --metrics-addr) arg="127.0.0.1:${metrics_port}" ;;
        --config) arg="${pg_dir}${arg}" ;;
        --policies-dir) arg="${pg_dir}${arg}" ;;
    esac
    args+=("$arg")
    prev="$arg"
done < <(kubectl -n "$ns" get deployment poolguard -o json | jq -r '.spec.template.spec.containers[0].args[]')
arg_value() { # flag -> the argument after it in args
    local i
    for ((i = 0; i + 1 < ${#args[@]}; i++)); do
        [[ "${args[i]}" == "$1" ]] && { printf '%s\n' "${args[i + 1]}"; return 0; }
    done
}
[[ " ${args[*]} " == *" --manage-certs "* ]] || die "the Deployment does not run --manage-certs: ${args[*]}"
cert_secret="$(arg_value --cert-secret)"
[[ "$cert_secret" == "${ns}/poolguard-tls" ]] || die "--cert-secret is '${cert_secret}', expected ${ns}/poolguard-tls"

# A kubeconfig for poolguard's ServiceAccount: everything below runs under the chart's RBAC.
sa_kubeconfig="${state}/poolguard.kubeconfig"
token="$(kubectl -n "$ns" create token poolguard --duration=1h)" || die "TokenRequest for ServiceAccount poolguard failed"
sakc() { "${POOLGUARD_CP_BIN}/kubectl" --kubeconfig="$sa_kubeconfig" "$@" >/dev/null; }
sakc config set-cluster throwaway --server="$POOLGUARD_CP_APISERVER" --certificate-authority="$POOLGUARD_CP_CA" --embed-certs
sakc config set-credentials poolguard --token="$token"
sakc config set-context poolguard --cluster=throwaway --user=poolguard
sakc config use-context poolguard
whoami="$("${POOLGUARD_CP_BIN}/kubectl" --kubeconfig="$sa_kubeconfig" auth whoami -o jsonpath='{.status.userInfo.username}' 2>&1 || true)"
if [[ "$whoami" == "$sa" ]]; then ok "poolguard's kubeconfig authenticates as ${sa}"; else bad "poolguard's kubeconfig authenticates as '${whoami}'"; fi

log "starting ${poolguard} ${args[*]}"
KUBECONFIG="$sa_kubeconfig" "$poolguard" "${args[@]}" </dev/null >"${state}/poolguard.log" 2>&1 &
pg_pid=$!
injected() { # all caBundles of both configurations set, and the Secret there
    local kind
    kubectl -n "$ns" get secret poolguard-tls >/dev/null 2>&1 || return 1
    for kind in mutatingwebhookconfiguration validatingwebhookconfiguration; do
        kubectl get "$kind" "poolguard-${kind%%webhookconfiguration}" -o json |
            jq -e '[.webhooks[].clientConfig.caBundle // ""] | all(. != "")' >/dev/null || return 1
    done
}
deadline=$((SECONDS + 60))
until injected; do
    if ! kill -0 "$pg_pid" 2>/dev/null || ((SECONDS >= deadline)); then
        tail -n 30 "${state}/poolguard.log" >&2
        die "poolguard did not create its Secret and inject the CA into both configurations within 60s"
    fi
    sleep 0.5
done
ok "poolguard created Secret ${cert_secret} and injected a caBundle into both configurations"
# It serves the certificate it keeps in the Secret, for the Service's name.
cert_dns="$(arg_value --cert-dns-name)"
kubectl -n "$ns" get secret poolguard-tls -o jsonpath='{.data.ca\.crt}' | base64 -d >"${state}/secret-ca.crt"
deadline=$((SECONDS + 30))
until served="$(openssl s_client -connect "127.0.0.1:${pg_port}" -servername "$cert_dns" -verify_hostname "$cert_dns" \
        -CAfile "${state}/secret-ca.crt" -verify_return_error </dev/null 2>&1)" &&
    grep -q 'Verify return code: 0 (ok)' <<<"$served"; do
    ((SECONDS < deadline)) || break
    sleep 0.5
done
if grep -q 'Verify return code: 0 (ok)' <<<"$served"; then
    ok "poolguard serves a certificate for ${cert_dns} that verifies against the Secret's ca.crt"
else
    bad "poolguard's certificate does not verify for ${cert_dns}: $(grep -E 'Verify return|error' <<<"$served" | head -n2)"
fi
kill -TERM "$pg_pid"
if wait "$pg_pid"; then pg_rc=0; else pg_rc=$?; fi
if ((pg_rc == 0)); then ok "poolguard exited 0 on SIGTERM"; else bad "poolguard exited ${pg_rc} on SIGTERM (log: ${state}/poolguard.log)"; fi
pg_pid=""

bundle="$(kubectl -n "$ns" get secret poolguard-tls -o jsonpath='{.data.ca\.crt}')"
[[ -n "$bundle" ]] || bad "Secret ${cert_secret} has no ca.crt"
for kind in mutatingwebhookconfiguration validatingwebhookconfiguration; do
    name="poolguard-${kind%%webhookconfiguration}"
    got="$(kubectl get "$kind" "$name" -o json | jq -r '.webhooks[].clientConfig.caBundle' | sort -u)"
    if [[ -n "$bundle" && "$got" == "$bundle" ]]; then
        ok "${name}: every caBundle equals the Secret's ca.crt"
    else
        bad "${name}: caBundle(s) '${got:0:40}...' differ from the Secret's ca.crt '${bundle:0:40}...'"
    fi
    if config_view "$kind" "$name" | diff -u "${state}/${kind}.before.json" - >"$cmd_out"; then
        ok "${name}: every other field (rules, selectors, matchConditions, labels, ...) survived poolguard's write"
    else
        bad "${name}: poolguard's write changed more than the caBundle: $(head -n 20 "$cmd_out")"
    fi
done

# --- helm upgrade keeps the injected caBundle ----------------------------------------------------
expect "helm upgrade (timeoutSeconds 5 -> 7)" helm upgrade "$release" "$chart" -n "$ns" --set webhook.timeoutSeconds=7
for kind in mutatingwebhookconfiguration validatingwebhookconfiguration; do
    name="poolguard-${kind%%webhookconfiguration}"
    got="$(kubectl get "$kind" "$name" -o jsonpath='{.webhooks[0].clientConfig.caBundle}')"
    timeout="$(kubectl get "$kind" "$name" -o jsonpath='{.webhooks[0].timeoutSeconds}')"
    if [[ "$got" == "$bundle" ]]; then ok "${name}: injected caBundle survives helm upgrade"; else bad "${name}: caBundle after upgrade is '${got:0:20}...'"; fi
    if [[ "$timeout" == 7 ]]; then ok "${name}: upgrade applied timeoutSeconds 7"; else bad "${name}: timeoutSeconds ${timeout}"; fi
    conditions="$(kubectl get "$kind" "$name" -o jsonpath='{.webhooks[0].matchConditions[*].name}')"
    if [[ "$conditions" == install-test-marker ]]; then ok "${name}: another manager's matchCondition survives helm upgrade"; else bad "${name}: matchConditions after upgrade: '${conditions}'"; fi
done
deadline="$(kubectl -n "$ns" get deployment poolguard -o jsonpath='{.spec.template.spec.containers[0].args}')"
if grep -q '"--deadline-ms","6000"' <<<"$deadline"; then ok "upgrade set --deadline-ms 6000"; else bad "deployment args: ${deadline}"; fi

# --- validating.failurePolicy=Ignore lets unlabelled namespaces through, not labelled ones ------
expect "helm upgrade (validating.failurePolicy=Ignore)" \
    helm upgrade "$release" "$chart" -n "$ns" --set validating.failurePolicy=Ignore
expect "Ignore: pod in an unlabelled namespace is admitted while poolguard is down" run_pod plain p3
expect_not "Ignore: pod in a labelled namespace is still refused (mutating Fail)" \
    'failed calling webhook "mutate.poolguard.io"' run_pod team-a p3

# --- uninstall -----------------------------------------------------------------------------------
expect "helm uninstall" helm uninstall "$release" -n "$ns"
left="$(kubectl get mutatingwebhookconfigurations,validatingwebhookconfigurations -o name | grep poolguard || true)"
if [[ -z "$left" ]]; then ok "no webhook configuration left after uninstall"; else bad "left behind: ${left}"; fi
expect "pods in team-a are admitted again after uninstall" run_pod team-a p4
expect "the Secret poolguard created at run time stays (documented)" kubectl -n "$ns" get secret poolguard-tls
left="$(kubectl get clusterroles,clusterrolebindings -o name | grep -E '/poolguard$' || true)"
if [[ -z "$left" ]]; then ok "no cluster-scoped RBAC left after uninstall"; else bad "left behind: ${left}"; fi

echo "${passed} passed, ${failed} failed"
(( failed == 0 ))
