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
#   * a caBundle injected by poolguard (simulated with kubectl patch under its own field
#     manager) survives `helm upgrade`;
#   * `helm uninstall` leaves no webhook configuration behind (and, as documented, the Secret
#     poolguard created at run time stays).
#
#   bash integration/helm/install-test.sh      # HELM=/path/to/helm, POOLGUARD_CP_BIN=dir to reuse
#
# Prints "N passed, N failed" at the end; exits non-zero on any failure.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."

log() { printf '[helm-install] %s\n' "$*" >&2; }

chart=charts/poolguard
release=poolguard
ns="poolguard-system"
sa="system:serviceaccount:${ns}:poolguard"
helm="${HELM:-$(bash integration/helm/helm.sh | tail -n1)}"

state="$(bash integration/controlplane/start.sh | tail -n1)"
cleanup() { bash integration/controlplane/stop.sh "$state" --purge >/dev/null 2>&1 || true; }
trap cleanup EXIT
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
    if "$@" >/tmp/helm-install-test.out 2>&1; then ok "$what"; else bad "$what: $(tail -n3 /tmp/helm-install-test.out)"; fi
}
expect_not() { # description command... (must fail)
    local what="$1"; shift
    if "$@" >/tmp/helm-install-test.out 2>&1; then bad "$what (succeeded)"; else ok "$what"; fi
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
cp /tmp/helm-install-test.out "${out}/install-notes.txt"
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
expect_not "pod in labelled namespace team-a is sent to poolguard (refused: no poolguard)" run_pod team-a p1
expect_not "pod in unlabelled namespace is validated (refused: no poolguard, failurePolicy Fail)" run_pod plain p1
expect "pod in the release namespace is never sent to poolguard" run_pod "$ns" p1
expect "pod in kube-system is never sent to poolguard" run_pod kube-system p1
expect "namespace operations are not matched" kubectl create namespace other
refusal="$(run_pod team-a p2 2>&1 || true)"
if grep -q 'failed calling webhook "mutate.poolguard.io"' <<<"$refusal"; then
    ok "the refusal in team-a names the mutating webhook"
else
    bad "the refusal in team-a does not name mutate.poolguard.io: ${refusal}"
fi

# --- RBAC ----------------------------------------------------------------------------------------
can_i yes watch namespaces
can_i yes get namespaces/team-a
can_i no update namespaces/team-a
can_i yes patch mutatingwebhookconfigurations/poolguard-mutating
can_i yes update validatingwebhookconfigurations/poolguard-validating
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

# --- what poolguard --manage-certs will do, done as its ServiceAccount --------------------------
expect "poolguard's ServiceAccount creates its Secret" \
    kubectl -n "$ns" create secret tls poolguard-tls --as="$sa" \
        --cert="${state}/test-ca.crt" --key="${state}/test-ca.key"
bundle="$(printf '%s\n' "$ca_pem" | base64 -w0)"
for kind in mutatingwebhookconfiguration validatingwebhookconfiguration; do
    name="poolguard-${kind%%webhookconfiguration}"
    expect "poolguard's ServiceAccount injects the caBundle into ${name}" \
        kubectl patch "$kind" "$name" --as="$sa" --field-manager=poolguard --type=json \
            -p "[{\"op\":\"add\",\"path\":\"/webhooks/0/clientConfig/caBundle\",\"value\":\"${bundle}\"}]"
done

# --- helm upgrade keeps the injected caBundle ----------------------------------------------------
expect "helm upgrade (timeoutSeconds 5 -> 7)" helm upgrade "$release" "$chart" -n "$ns" --set webhook.timeoutSeconds=7
for kind in mutatingwebhookconfiguration validatingwebhookconfiguration; do
    name="poolguard-${kind%%webhookconfiguration}"
    got="$(kubectl get "$kind" "$name" -o jsonpath='{.webhooks[0].clientConfig.caBundle}')"
    timeout="$(kubectl get "$kind" "$name" -o jsonpath='{.webhooks[0].timeoutSeconds}')"
    if [[ "$got" == "$bundle" ]]; then ok "${name}: injected caBundle survives helm upgrade"; else bad "${name}: caBundle after upgrade is '${got:0:20}...'"; fi
    if [[ "$timeout" == 7 ]]; then ok "${name}: upgrade applied timeoutSeconds 7"; else bad "${name}: timeoutSeconds ${timeout}"; fi
done
deadline="$(kubectl -n "$ns" get deployment poolguard -o jsonpath='{.spec.template.spec.containers[0].args}')"
if grep -q '"--deadline-ms","6000"' <<<"$deadline"; then ok "upgrade set --deadline-ms 6000"; else bad "deployment args: ${deadline}"; fi

# --- validating.failurePolicy=Ignore lets unlabelled namespaces through, not labelled ones ------
expect "helm upgrade (validating.failurePolicy=Ignore)" \
    helm upgrade "$release" "$chart" -n "$ns" --set validating.failurePolicy=Ignore
expect "Ignore: pod in an unlabelled namespace is admitted while poolguard is down" run_pod plain p3
expect_not "Ignore: pod in a labelled namespace is still refused (mutating Fail)" run_pod team-a p3

# --- uninstall -----------------------------------------------------------------------------------
expect "helm uninstall" helm uninstall "$release" -n "$ns"
left="$(kubectl get mutatingwebhookconfigurations,validatingwebhookconfigurations -o name | grep poolguard || true)"
if [[ -z "$left" ]]; then ok "no webhook configuration left after uninstall"; else bad "left behind: ${left}"; fi
expect "pods in team-a are admitted again after uninstall" run_pod team-a p4
expect "the Secret poolguard created at run time stays (documented)" kubectl -n "$ns" get secret poolguard-tls
left="$(kubectl get clusterroles,clusterrolebindings -o name | grep -E '/poolguard$' || true)"
if [[ -z "$left" ]]; then ok "no cluster-scoped RBAC left after uninstall"; else bad "left behind: ${left}"; fi

rm -f /tmp/helm-install-test.out
echo "${passed} passed, ${failed} failed"
(( failed == 0 ))
