#!/usr/bin/env bash
# Lint charts/poolguard and render it in every supported mode with a real helm binary
# (integration/helm/helm.sh provides one). Fails on any lint message, render error or rendered
# document that is not YAML, and checks properties of the output per case: the webhooks' scope and
# clientConfig, RBAC, and the background audit (its flags, a namespace selector equal to the
# validating webhook's, its RBAC and report CRDs whose schemas keep a sample report whole).
#
#   bash integration/helm/lint.sh            # HELM=/path/to/helm to skip helm.sh
#
# Needs cargo, to build chart_lint (integration/e2e/src/bin/chart_lint/: the checks of the
# rendered manifests; a debug build in ${CARGO_TARGET_DIR:-target}), and a poolguard binary
# (POOLGUARD_BIN, else $CARGO_TARGET_DIR or target/, debug or release; `cargo test` builds one);
# without either it fails at once, since the manifest checks and the config load checks need them.
#
# POOLGUARD_CHART_DIR lints another copy of the chart (default charts/poolguard).
# Rendered manifests are left in ${POOLGUARD_HELM_OUT:-target/helm}/<case>.yaml for inspection.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."

chart="${POOLGUARD_CHART_DIR:-charts/poolguard}"
out="${POOLGUARD_HELM_OUT:-target/helm}"
release=poolguard
namespace="poolguard-system"

log() { printf '[helm-lint] %s\n' "$*" >&2; }
die() { log "FAIL: $*"; exit 1; }

# Prerequisites first: a check that cannot run is a failure, not a skip.
cargo build --locked -q -p poolguard-e2e --bin chart_lint \
    || die "cannot build chart_lint (cargo build -p poolguard-e2e --bin chart_lint)"
chart_lint="${CARGO_TARGET_DIR:-target}/debug/chart_lint"
[[ -x "$chart_lint" ]] || die "${chart_lint} was not built"
# shellcheck source=integration/helm/poolguard-bin.sh
source integration/helm/poolguard-bin.sh
poolguard="$(poolguard_bin)"
[[ -n "$poolguard" ]] \
    || die "no poolguard binary (set POOLGUARD_BIN or build one: cargo build --bin poolguard)"
helm="${HELM:-$(bash integration/helm/helm.sh | tail -n1)}"

log "helm: ${helm} ($("$helm" version --short 2>/dev/null || true))"
mkdir -p "$out"

# The chart ships a copy of the repository's policies (helm reads no file outside the chart).
for f in policies/*.yaml policies/*.rego; do
    [[ -e "$f" ]] || continue
    case "$f" in *_test.rego) continue ;; esac
    cmp -s "$f" "${chart}/$f" || die "${chart}/$f differs from $f (copy it: cp $f ${chart}/$f)"
done
for f in "${chart}"/policies/*; do
    [[ -e "policies/$(basename "$f")" ]] || die "$f is not in policies/ (stale copy?)"
done
# Likewise the placement policies: policies/placement/ -> placement-policies/ in the chart.
for f in policies/placement/*.yaml policies/placement/*.rego; do
    [[ -e "$f" ]] || continue
    case "$f" in *_test.rego) continue ;; esac
    copy="${chart}/placement-policies/$(basename "$f")"
    cmp -s "$f" "$copy" || die "${copy} differs from $f (copy it: cp $f ${copy})"
done
for f in "${chart}"/placement-policies/*; do
    [[ -e "policies/placement/$(basename "$f")" ]] || die "$f is not in policies/placement/ (stale copy?)"
done

# A PEM CA for mode provided (any syntactically valid certificate will do for rendering).
ca_pem="-----BEGIN CERTIFICATE-----
MIIBdzCCAR2gAwIBAgIUQ0FDQUNBQ0FDQUNBQ0FDQUNBQ0FDQUMwCgYIKoZIzj0E
-----END CERTIFICATE-----"

# name | helm arguments (one per line is not needed: plain words, no spaces inside values)
cases=(
    "default|"
    # The webhooks rendered by the chart instead of registered by poolguard: the same webhooks.
    "chart-registration|--set webhook.registration=chart"
    # mTLS: only the API server's client certificate (signed by clientCA) is answered.
    "mtls|--set-file clientCA=${out}/ca.pem --set clientNames={kube-apiserver-webhook-client}"
    "certmanager|--set certificates.mode=certManager"
    "provided|--set certificates.mode=provided --set certificates.secretName=poolguard-serving-cert --set-string certificates.caBundle=$(printf '%s' "$ca_pem" | base64 -w0)"
    "provided-pem|--set certificates.mode=provided --set certificates.secretName=poolguard-serving-cert --set-file certificates.caBundle=${out}/ca.pem"
    "servicemonitor|--set serviceMonitor.enabled=true --set serviceMonitor.labels.release=prometheus"
    # The alerting rules as a PrometheusRule: only where the cluster serves monitoring.coreos.com/v1.
    "prometheusrule|--api-versions monitoring.coreos.com/v1/PrometheusRule --set serviceMonitor.enabled=true --set prometheusRule.job=pg-metrics --set prometheusRule.labels.release=prometheus"
    "prometheusrule-off|--api-versions monitoring.coreos.com/v1/PrometheusRule --set prometheusRule.enabled=false"
    "grafana-dashboard|--set grafanaDashboard.enabled=true --set grafanaDashboard.namespace=monitoring"
    "policies|-f ${chart}/ci/policies-values.yaml"
    # A Gatekeeper user's ConstraintTemplate and constraint, as files, and a rule for Services.
    "gatekeeper|--set-file gatekeeperPolicies.template\.yaml=testdata/gatekeeper/allowedrepos/template.yaml --set-file gatekeeperPolicies.constraint\.yaml=testdata/gatekeeper/allowedrepos/constraint.yaml --set-json validating.extraRules=[{\"apiGroups\":[\"\"],\"apiVersions\":[\"v1\"],\"operations\":[\"CREATE\",\"UPDATE\"],\"resources\":[\"services\"]}]"
    # The cluster's own Gatekeeper objects: the flag and read-only RBAC on the two groups.
    "gatekeeper-cluster|--set gatekeeperFromCluster=true"
    "placement|-f ${chart}/ci/placement-values.yaml"
    "no-placement-policies|--set placementPolicies.shipped=false"
    "placement-unlabelled|--set config.placement.unlabelledNamespaces=choose --set config.placement.pools={general} --set webhook.excludedNamespaces={monitoring}"
    # serviceAccount.create=false: the controller (rendered in mode self) needs its own existing
    # ServiceAccount as well.
    "options|-f ${chart}/ci/options-values.yaml --kube-version v1.29.0"
    "url|--set certificates.mode=provided --set certificates.secretName=unused --set-file certificates.caBundle=${out}/ca.pem --set webhook.url=https://127.0.0.1:8443/ --set-string webhook.namespaceMatchLabels.poolguard-bench=on --set validating.requireNamespaceLabel=true"
    # The background audit: off (an integer 0, as --set gives it), the other report API with
    # other settings, no CRDs, and a validating scope narrowed every way the values allow.
    "audit-off|--set audit.interval=0"
    "openreports|--set audit.reportApi=openreports --set audit.interval=1h30m --set audit.maxResultsPerReport=200 --set audit.leaseDuration=30s"
    "no-crd|--set audit.crd.install=false"
    # webhook.skipUnchangedUpdates off: the same configurations without matchConditions.
    "no-skip|--set webhook.skipUnchangedUpdates=false"
    # Native admission: written by the leader, or rendered verbatim from `poolguard native`.
    "native-apply|--set native.mode=apply --set native.webhookFallback=true --set validating.requireNamespaceLabel=true --set webhook.excludedNamespaces={monitoring} --set-string webhook.namespaceMatchLabels.poolguard=on"
    "native-static|--set native.mode=static --set-file native.objects=${out}/native.yaml"
    "selector|--set-string webhook.namespaceMatchLabels.poolguard=enabled --set-string webhook.namespaceMatchLabels.example\\.com/tier=gold --set validating.requireNamespaceLabel=true --set webhook.excludedNamespaces={monitoring,cert-manager,kube-system}"
    # Nothing to write (certificates by cert-manager, webhooks rendered by the chart, no audit):
    # no controller, its ServiceAccount or RBAC; only the read-only serving Deployment.
    "serve-only|--set certificates.mode=certManager --set webhook.registration=chart --set audit.interval=0"
)
printf '%s\n' "$ca_pem" >"${out}/ca.pem"
# What `poolguard native` prints for the example config, for the native-static case.
"$poolguard" native --config testdata/config/example.yaml --policies-dir policies \
    --exclude-namespace "$namespace" --exclude-namespace kube-system >"${out}/native.yaml" \
    || die "poolguard native failed"

failures=0
passed=0
lint() {
    local name="$1"; shift
    local output args=()
    # helm lint has no --api-versions (it lints as for a cluster without extra APIs).
    while (($#)); do
        if [[ "$1" == --api-versions ]]; then shift 2; continue; fi
        args+=("$1"); shift
    done
    if output="$("$helm" lint --strict "$chart" --namespace "$namespace" ${args[@]+"${args[@]}"} 2>&1)"; then
        log "lint ${name}: ok"
        passed=$((passed + 1))
    else
        printf '%s\n' "$output" >&2
        log "lint ${name}: FAILED"
        failures=$((failures + 1))
    fi
}

render() {
    local name="$1"; shift
    local file="${out}/${name}.yaml"
    if ! "$helm" template "$release" "$chart" --namespace "$namespace" "$@" >"$file" 2>"${file}.err"; then
        cat "${file}.err" >&2
        log "template ${name}: FAILED"
        failures=$((failures + 1))
        return
    fi
    if [[ -s "${file}.err" ]]; then
        cat "${file}.err" >&2
        log "template ${name}: FAILED (helm wrote to stderr)"
        failures=$((failures + 1))
        return
    fi
    rm -f "${file}.err"
    passed=$((passed + 1))
    log "template ${name}: ok ($(grep -c '^kind:' "$file") objects: $(grep '^kind:' "$file" | awk '{print $2}' | sort | uniq -c | awk '{printf "%s%s×%s", sep, $2, $1; sep=", "}'))"
}

for c in "${cases[@]}"; do
    name="${c%%|*}"
    # shellcheck disable=SC2206 # word splitting of the arguments is intended (no spaces inside)
    args=(${c#*|})
    lint "$name" "${args[@]}"
    render "$name" "${args[@]}"
done

# Values the chart must refuse (schema or template checks), each with the expected message.
refuse() {
    local name="$1" want="$2"; shift 2
    local output
    if output="$("$helm" template "$release" "$chart" --namespace "$namespace" "$@" 2>&1)"; then
        log "refuse ${name}: FAILED (rendered without error)"
        failures=$((failures + 1))
    elif ! grep -q -- "$want" <<<"$output"; then
        printf '%s\n' "$output" >&2
        log "refuse ${name}: FAILED (error does not mention '${want}')"
        failures=$((failures + 1))
    else
        log "refuse ${name}: ok"
        passed=$((passed + 1))
    fi
}
refuse "provided without secretName" "/certificates/secretName" --set certificates.mode=provided --set certificates.caBundle=Zm9v
refuse "provided without caBundle" "/certificates/caBundle" --set certificates.mode=provided --set certificates.secretName=x
refuse "unknown mode" "/certificates/mode" --set certificates.mode=manual
refuse "unknown config key" "'namespaceLabels' not allowed" --set config.namespaceLabels=x
refuse "bad enforcement" "/allowedrepositories/enforcement" --set config.policies.allowedrepositories.enforcement=block
refuse "bad rollout approval" "/rollout/groups/1/approval" --set config.policies.allowedrepositories.rollout.minSuccessTime=1m --set config.policies.allowedrepositories.rollout.progressDeadline=1h --set config.policies.allowedrepositories.rollout.groups[0].name=a --set config.policies.allowedrepositories.rollout.groups[1].name=b --set config.policies.allowedrepositories.rollout.groups[1].approval=maybe
refuse "timeout too large" "/webhook/timeoutSeconds" --set webhook.timeoutSeconds=31
refuse "bad failurePolicy" "/validating/failurePolicy" --set validating.failurePolicy=Retry
refuse "skipUnchangedUpdates not a boolean" "/webhook/skipUnchangedUpdates" --set-string webhook.skipUnchangedUpdates=yes
refuse "webhook.url without https" "/webhook/url" --set webhook.url=http://127.0.0.1:8443
refuse "webhook.url with a query" "/webhook/url" --set webhook.url=https://127.0.0.1:8443/?x=1
refuse "clientCA not a PEM certificate" "/clientCA" --set clientCA=not-a-certificate
refuse "clientCA without clientNames" "clientCA needs clientNames" --set-file clientCA="${out}/ca.pem"
refuse "shadowing extra policy" "already ships" --set-string extraPolicies.allowedrepositories\\.yaml=x
refuse "placement without a way to choose" "/config/placement" --set config.placement.preference={a}
refuse "bad chooseValue" "/config/placement/chooseValue" --set config.placement.chooseValue=-auto
refuse "bad unlabelledNamespaces" "/config/placement/unlabelledNamespaces" --set config.placement.unlabelledNamespaces=always
refuse "unknown placement key" "'prefer' not allowed" --set config.placement.chooseValue=auto --set config.placement.prefer={a}
refuse "pool preferred twice" "/config/placement/preference" --set config.placement.chooseValue=auto --set config.placement.pools={a} --set "config.placement.preference[0]=a" --set "config.placement.preference[1]=a"
refuse "placement without pools" "missing property 'pools'" --set config.placement.chooseValue=auto
refuse "no pools" "/config/placement/pools" --set config.placement.chooseValue=auto --set config.placement.pools=null
refuse "bad guarded label" "/config/poolAuthority/guardedLabels/0" --set "config.poolAuthority.guardedLabels={a b}"
refuse "unknown placement policy setting" "'parameter' not allowed" --set config.placement.chooseValue=auto --set config.placement.policies.gpuonly.parameter.x=y
refuse "shadowing extra placement policy" "already ships a placement policy" --set-string extraPlacementPolicies.gpuonly\\.yaml=x
refuse "extra placement policy not yaml or rego" "'notes.txt' does not match pattern" --set-string extraPlacementPolicies.notes\\.txt=x
refuse "unknown report API" "/audit/reportApi" --set audit.reportApi=kyverno
refuse "audit interval without unit" "/audit/interval" --set audit.interval=10
refuse "audit interval not a duration" "/audit/interval" --set audit.interval=often
refuse "zero lease duration" "/audit/leaseDuration" --set audit.leaseDuration=0s
refuse "no results per report" "/audit/maxResultsPerReport" --set audit.maxResultsPerReport=0
refuse "unknown native mode" "/native/mode" --set native.mode=on
refuse "native apply without the audit" "needs the audit's leader election" --set native.mode=apply --set audit.interval=0
refuse "native static without objects" "native.mode static needs native.objects" --set native.mode=static
refuse "native webhookFallback without mode apply" "native.webhookFallback needs native.mode apply" --set native.webhookFallback=true
refuse "native webhookFallback with registration chart" "native.webhookFallback needs native.mode apply and webhook.registration poolguard" --set native.mode=apply --set native.webhookFallback=true --set webhook.registration=chart
refuse "native static with something else" "native.mode static needs native.objects" --set native.mode=static --set-string native.objects=kind:\ ConfigMap
refuse "controller without a ServiceAccount" "controller.serviceAccountName is required" --set serviceAccount.create=false --set serviceAccount.name=poolguard-existing
refuse "config.exceptions set by hand" "config.exceptions is set by the chart" --set "config.exceptions.namespaces={ops}"
refuse "config.exceptions without exceptions.enabled" "config.exceptions is set by the chart" --set exceptions.enabled=false --set config.exceptions.maxDuration=1h

# Native admission: no policy objects, RBAC for them or --native-apply unless native.mode says so;
# mode static renders exactly what `poolguard native` printed (the chart generates nothing);
# mode apply gives the controller (never the serving pods) --native-apply with the webhooks' scope
# and, in its own ClusterRole, RBAC for the four kinds (and --native-fallback with
# native.webhookFallback).
if "$chart_lint" native "$out" "${cases[@]%%|*}"; then
    log "native admission objects, flags and RBAC per native.mode: ok"
    passed=$((passed + 1))
else
    failures=$((failures + 1))
fi

# The chart README documents every value the schema knows (one table row per key).
if "$chart_lint" values "$chart"; then
    passed=$((passed + 1))
else
    failures=$((failures + 1))
fi

# Every rendered document parses as YAML, and the webhook safety properties hold.
if "$chart_lint" manifests "$out" "$namespace" "$chart" "${cases[@]%%|*}"; then
    passed=$((passed + 1))
else
    failures=$((failures + 1))
fi

# webhook.skipUnchangedUpdates: the validating webhook (and only it) carries the one condition
# wherever it is on, no gatekeeperPolicies are given and the cluster has matchConditions (1.30+;
# the case options renders for 1.29), and switching it off changes nothing else. The expression's own behaviour is tested
# through a real kube-apiserver (integration/e2e/tests/match_conditions.rs).
if "$chart_lint" conditions "$out" "${cases[@]%%|*}"; then
    passed=$((passed + 1))
else
    failures=$((failures + 1))
fi

# The background audit: the controller Deployment's flags (none on the serving one) and both
# Deployments' downward-API env, its namespace selector equal to the validating webhook's
# namespaceSelector, its RBAC (the controller's) and Lease Role, the serving pods' rollout
# ConfigMap Role, and the report CRDs
# (structural schemas that keep every field of a sample report with all the fields poolguard
# writes; the API server's own verdict is in install-test.sh).
if "$chart_lint" audit "$out" "$namespace" integration/helm/testdata/policyreport-sample.json "${cases[@]%%|*}"; then
    passed=$((passed + 1))
else
    failures=$((failures + 1))
fi

# The rendered config and policies load in poolguard itself (unknown keys, policy names,
# declared inputs, Rego compilation).
for c in "${cases[@]}"; do
    name="${c%%|*}"
    d="${out}/${name}.d"
    gatekeeper=()
    [[ -d "${d}/gatekeeper" ]] && gatekeeper=(--gatekeeper-dir "${d}/gatekeeper")
    if output="$("$poolguard" eval --namespaces-file testdata/namespaces.yaml \
            --config "${d}/config/config.yaml" --policies-dir "${d}/policies" \
            --placement-policies-dir "${d}/placement-policies" ${gatekeeper[@]+"${gatekeeper[@]}"} \
            --webhook validate testdata/reviews/pod-create-placed.json 2>&1)"; then
        log "poolguard loads ${name}: ok"
        passed=$((passed + 1))
    elif [[ $? -eq 1 ]]; then
        log "poolguard loads ${name}: ok (the sample pod is denied by this case's policies)"
        passed=$((passed + 1))
    else
        printf '%s\n' "$output" >&2
        log "poolguard loads ${name}: FAILED (${poolguard})"
        failures=$((failures + 1))
    fi
done

# The gatekeeper case's constraint decides in poolguard: the sample pod's image is not from
# registry.k8s.io.
d="${out}/gatekeeper.d"
if output="$("$poolguard" eval --namespaces-file testdata/namespaces.yaml --config "${d}/config/config.yaml" \
        --policies-dir "${d}/policies" --placement-policies-dir "${d}/placement-policies" \
        --gatekeeper-dir "${d}/gatekeeper" --webhook validate testdata/reviews/pod-create-placed.json 2>&1)"; then
    printf '%s\n' "$output" >&2
    log "gatekeeper constraint: FAILED (the pod was allowed)"
    failures=$((failures + 1))
elif grep -q 'images-from-allowed-repos' <<<"$output"; then
    log "gatekeeper constraint: ok (the rendered constraint denies the sample pod)"
    passed=$((passed + 1))
else
    printf '%s\n' "$output" >&2
    log "gatekeeper constraint: FAILED (denied, but not by images-from-allowed-repos)"
    failures=$((failures + 1))
fi

# The placement case chooses pools in poolguard with the rendered config and placement policies:
# the shipped gpuonly with its parameter, the extra readynodes (spot, preferred, has no Ready node)
# and the preference.
d="${out}/placement.d"
if output="$("$poolguard" eval --namespaces-file integration/helm/testdata/placement-namespaces.yaml \
        --nodes-file integration/helm/testdata/placement-nodes.yaml \
        --config "${d}/config/config.yaml" --policies-dir "${d}/policies" \
        --placement-policies-dir "${d}/placement-policies" \
        --webhook mutate integration/helm/testdata/placement-pods.yaml 2>&1)" \
    && grep -q '^# Pod plain in namespace team-auto (pool general, chosen' <<<"$output" \
    && grep -q '^# Pod trainer in namespace team-auto (pool gpu, chosen' <<<"$output"; then
    log "poolguard chooses pools with the placement case: ok (plain -> general, trainer -> gpu)"
    passed=$((passed + 1))
else
    printf '%s\n' "$output" >&2
    log "poolguard chooses pools with the placement case: FAILED (want plain -> general, trainer -> gpu)"
    failures=$((failures + 1))
fi

# The PrometheusRule: absent without the monitoring.coreos.com/v1 API (every other case) or when
# turned off; with the API, the chart's rules file itself (one source), with prometheusRule.job
# in up's selector, and the ServiceMonitor names its job after the chart (what the rules select).
# The Grafana dashboard ConfigMap likewise holds the dashboard file, only when enabled.
if "$chart_lint" monitoring "$out" "$chart" "${cases[@]%%|*}"; then
    passed=$((passed + 1))
else
    failures=$((failures + 1))
fi

echo "${passed} passed, ${failures} failed"
if (( failures > 0 )); then
    exit 1
fi
log "all checks passed (rendered manifests in ${out}/)"
