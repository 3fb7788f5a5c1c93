#!/usr/bin/env bash
# Lint charts/poolguard and render it in every supported mode with a real helm binary
# (integration/helm/helm.sh provides one). Fails on any lint message, render error or rendered
# document that is not YAML, and checks properties of the output per case: the webhooks' scope and
# clientConfig, RBAC, and the background audit (its flags, a namespace selector equal to the
# validating webhook's, its RBAC and report CRDs whose schemas keep a sample report whole).
#
#   bash integration/helm/lint.sh            # HELM=/path/to/helm to skip helm.sh
#
# Needs python3 with PyYAML (Debian: python3-yaml) and a poolguard binary (POOLGUARD_BIN, else
# $CARGO_TARGET_DIR or target/, debug or release; `cargo test` builds one); without either it
# fails at once, since the webhook safety checks and the config load check need them.
#
# Rendered manifests are left in ${POOLGUARD_HELM_OUT:-target/helm}/<case>.yaml for inspection.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."

chart=charts/poolguard
out="${POOLGUARD_HELM_OUT:-target/helm}"
release=poolguard
namespace="poolguard-system"

log() { printf '[helm-lint] %s\n' "$*" >&2; }
die() { log "FAIL: $*"; exit 1; }

# Prerequisites first: a check that cannot run is a failure, not a skip.
python3 -c 'import yaml' 2>/dev/null \
    || die "python3 with PyYAML is required (Debian: apt-get install python3-yaml)"
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

# Native admission: no policy objects, RBAC for them or --native-apply unless native.mode says so;
# mode static renders exactly what `poolguard native` printed (the chart generates nothing);
# mode apply gives the controller (never the serving pods) --native-apply with the webhooks' scope
# and, in its own ClusterRole, RBAC for the four kinds (and --native-fallback with
# native.webhookFallback).
if python3 - "$out" "${cases[@]%%|*}" <<'PY'; then
import sys, yaml
out, names = sys.argv[1], sys.argv[2:]
errors = []
kinds = {"MutatingAdmissionPolicy", "MutatingAdmissionPolicyBinding",
         "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"}
generated = [d for d in yaml.safe_load_all(open(f"{out}/native.yaml")) if d]
for name in names:
    docs = [d for d in yaml.safe_load_all(open(f"{out}/{name}.yaml")) if d]
    objects = [d for d in docs if d.get("kind") in kinds]
    # The controller (`poolguard controller`) writes the objects; the serving pods never do.
    def deployment_args(command):
        return [a for d in docs if d.get("kind") == "Deployment"
                for c in d["spec"]["template"]["spec"]["containers"][:1] if c.get("args", [])[:1] == [command]
                for a in c["args"]]
    args, serve_args = deployment_args("controller"), deployment_args("serve")
    if not serve_args:
        errors.append(f"{name}: no serving Deployment (args serve)")
    if any(a.startswith("--native") for a in serve_args):
        errors.append(f"{name}: the serving Deployment has native flags: {serve_args}")
    def role_rules(role_name):
        return [r for d in docs if d.get("kind") == "ClusterRole" and d["metadata"]["name"] == role_name
                for r in d.get("rules", [])]
    fullname = "pg" if name == "options" else "poolguard"
    rules = role_rules(f"{fullname}-controller")
    writes = [r for r in rules if "validatingadmissionpolicies" in r.get("resources", [])]
    owner_reads = [r for r in rules if r.get("resources") == ["validatingwebhookconfigurations"]
                   and r.get("resourceNames") == ["poolguard-validating"] and r.get("verbs") == ["get"]]
    if [r for r in role_rules(fullname) if set(r.get("resources", [])) & {
            "mutatingadmissionpolicies", "mutatingadmissionpolicybindings",
            "validatingadmissionpolicies", "validatingadmissionpolicybindings"}]:
        errors.append(f"{name}: the serving ClusterRole {fullname} grants access to admission policies")
    if name == "native-static":
        # helm orders documents by kind; each object exactly as printed.
        key = lambda d: (d["kind"], d["metadata"]["name"])
        if sorted(objects, key=key) != sorted(generated, key=key) or not generated:
            errors.append(f"{name}: renders {len(objects)} policy objects, not the {len(generated)} poolguard native printed")
    elif objects:
        errors.append(f"{name}: renders policy objects without native.mode static")
    if name == "native-apply":
        excluded = sorted(args[i + 1] for i, a in enumerate(args) if a == "--native-exclude-namespace")
        matched = [args[i + 1] for i, a in enumerate(args) if a == "--native-namespace-match-label"]
        owner = args[args.index("--native-owner") + 1:][:1] if "--native-owner" in args else []
        if "--native-apply" not in args or "--native-require-namespace-label" not in args \
                or "--native-fallback" not in args or owner != ["poolguard-validating"] \
                or excluded != ["kube-system", "monitoring", "poolguard-system"] or matched != ["poolguard=on"]:
            errors.append(f"{name}: args {args}")
        if len(writes) != 1 or sorted(writes[0]["resources"]) != [
                "mutatingadmissionpolicies", "mutatingadmissionpolicybindings",
                "validatingadmissionpolicies", "validatingadmissionpolicybindings"] \
                or sorted(writes[0]["verbs"]) != ["create", "delete", "get", "list", "patch"]:
            errors.append(f"{name}: the controller's ClusterRole rules for the policy kinds: {writes}")
        # The canary (--native-canary-namespace): a namespace of its own, selected by the
        # native bindings (pool label, match labels, not excluded from them) and left out by the
        # pod webhooks; the controller may only create pods there.
        canary = args[args.index("--native-canary-namespace") + 1:][:1] if "--native-canary-namespace" in args else []
        if canary != ["poolguard-canary"] or "--native-canary-image" not in args:
            errors.append(f"{name}: no --native-canary-namespace poolguard-canary / --native-canary-image: {args}")
        spaces = [d for d in docs if d.get("kind") == "Namespace" and d["metadata"]["name"] == "poolguard-canary"]
        labels = spaces[0]["metadata"].get("labels", {}) if spaces else {}
        if len(spaces) != 1 or not labels.get("agentpool") or labels.get("poolguard") != "on" \
                or labels.get("pod-security.kubernetes.io/enforce") != "restricted":
            errors.append(f"{name}: the canary namespace: {spaces}")
        if "poolguard-canary" in excluded:
            errors.append(f"{name}: the native bindings leave the canary namespace out")
        roles = [d for d in docs if d.get("kind") == "Role" and d["metadata"].get("namespace") == "poolguard-canary"]
        bindings = [d for d in docs if d.get("kind") == "RoleBinding" and d["metadata"].get("namespace") == "poolguard-canary"]
        if [r.get("rules") for r in roles] != [[{"apiGroups": [""], "resources": ["pods"], "verbs": ["create"]}]] \
                or [[s["name"] for s in b["subjects"]] for b in bindings] != [["poolguard-controller"]]:
            errors.append(f"{name}: the canary namespace's RBAC: {roles} {bindings}")
        hooks = {w["name"]: w for d in docs if d.get("kind") == "ConfigMap" and d["metadata"]["name"] == "poolguard-webhooks"
                 for text in d.get("data", {}).values() for c in yaml.safe_load_all(text) if c
                 for w in c.get("webhooks", [])}
        for hook in ("mutate.poolguard.io", "validate.poolguard.io"):
            left_out = [v for e in hooks.get(hook, {}).get("namespaceSelector", {}).get("matchExpressions", [])
                        if e["key"] == "kubernetes.io/metadata.name" and e["operator"] == "NotIn" for v in e["values"]]
            if "poolguard-canary" not in left_out:
                errors.append(f"{name}: webhook {hook} does not leave the canary namespace out: {left_out}")
        # The owner (--native-owner): its uid, read by name.
        if len(owner_reads) != 1:
            errors.append(f"{name}: the controller's ClusterRole does not get poolguard-validating (the native objects' owner) by name")
    else:
        if any(a.startswith("--native") for a in args):
            errors.append(f"{name}: native flags without native.mode apply: {args}")
        if writes:
            errors.append(f"{name}: RBAC for admission policies without native.mode apply")
        if [d for d in docs if d.get("kind") == "Namespace"]:
            errors.append(f"{name}: a Namespace (the canary's) without native.webhookFallback")
for e in errors:
    print(f"[helm-lint] FAIL: {e}", file=sys.stderr)
sys.exit(1 if errors else 0)
PY
    log "native admission objects, flags and RBAC per native.mode: ok"
    passed=$((passed + 1))
else
    failures=$((failures + 1))
fi

# The chart README documents every value the schema knows (one table row per key).
if python3 - "$chart" <<'PY'; then
import json, sys
chart = sys.argv[1]
schema = json.load(open(f"{chart}/values.schema.json"))
readme = open(f"{chart}/README.md").read()
keys = []
def walk(node, prefix):
    props = node.get("properties")
    # A container's resources (the serving pods' and the controller's) are one value each.
    if props and node.get("additionalProperties") is False and prefix not in ("resources", "controller.resources"):
        for key, sub in props.items():
            if key != "global":
                walk(sub, f"{prefix}.{key}" if prefix else key)
    else:
        keys.append(prefix)
walk(schema, "")
missing = [k for k in keys if f"| `{k}` |" not in readme]
for k in missing:
    print(f"[helm-lint] FAIL: {chart}/README.md has no row for value `{k}`", file=sys.stderr)
print(f"[helm-lint] README documents {len(keys) - len(missing)}/{len(keys)} values", file=sys.stderr)
sys.exit(1 if missing else 0)
PY
    passed=$((passed + 1))
else
    failures=$((failures + 1))
fi

# Every rendered document parses as YAML, and the webhook safety properties hold.
if python3 - "$out" "$namespace" "$chart" "${cases[@]%%|*}" <<'PY'; then
import base64, os, sys, yaml
out, namespace, chart, names = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
errors = []
registered_webhooks = {}

def selects(sel, labels):
    """Does a namespaceSelector select a namespace with these labels (the API server's rules)?"""
    if any(labels.get(k) != v for k, v in (sel.get("matchLabels") or {}).items()):
        return False
    for e in sel.get("matchExpressions") or []:
        key, op, values = e["key"], e["operator"], e.get("values") or []
        if {"In": key not in labels or labels[key] not in values,
            "NotIn": key in labels and labels[key] in values,
            "Exists": key not in labels,
            "DoesNotExist": key in labels}[op]:
            return False
    return True

for name in names:
    path = f"{out}/{name}.yaml"
    try:
        docs = [d for d in yaml.safe_load_all(open(path)) if d is not None]
    except yaml.YAMLError as e:
        errors.append(f"{name}: {path}: not YAML: {e}")
        continue
    kinds = {}
    for d in docs:
        if not isinstance(d, dict) or "kind" not in d or "apiVersion" not in d:
            errors.append(f"{name}: document without kind/apiVersion: {str(d)[:80]}")
            continue
        kinds.setdefault(d["kind"], []).append(d)
    def check(cond, msg):
        if not cond:
            errors.append(f"{name}: {msg}")
    # webhook.registration=poolguard (the default): the configurations are rendered with no
    # webhooks, and the ConfigMap <fullname>-webhooks holds what poolguard registers into them.
    # The checks below judge the webhooks that will be in effect, so they read them from there.
    registered = [cm for cm in kinds.get("ConfigMap", []) if cm["metadata"]["name"].endswith("-webhooks")]
    if registered:
        check(name != "chart-registration", "webhook.registration=chart renders no webhooks ConfigMap")
        wanted = {(d["kind"], d["metadata"]["name"]): d["webhooks"]
                  for d in yaml.safe_load_all(registered[0]["data"]["webhooks.yaml"]) if d}
        for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
            for cfg in kinds.get(kind, []):
                check(cfg["webhooks"] == [], f"{kind} is rendered with webhooks although poolguard registers them")
                key = (kind, cfg["metadata"]["name"])
                check(key in wanted, f"{kind} {key[1]} has no webhooks in the registration ConfigMap")
                cfg["webhooks"] = wanted.get(key, [])
        check(len(wanted) == 2, f"the registration ConfigMap names {sorted(wanted)}, not the two configurations")
        registered_webhooks[name] = wanted
    else:
        check(name in ("chart-registration", "serve-only"), "no webhooks ConfigMap although webhook.registration=poolguard")
        registered_webhooks[name] = {(d["kind"], d["metadata"]["name"]): d["webhooks"]
                                     for k in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")
                                     for d in kinds.get(k, [])}
    self_mode = name not in ("certmanager", "provided", "provided-pem", "url", "serve-only")
    label = "agentpool"
    placement = {}
    guarded = []
    for cm in kinds.get("ConfigMap", []):
        if cm["metadata"]["name"].endswith("-config"):
            config = yaml.safe_load(cm["data"]["config.yaml"]) or {}
            label = config.get("namespaceLabel", label)
            placement = config.get("placement") or {}
            guarded = (config.get("poolAuthority") or {}).get("guardedLabels") or []
    # The labels poolguard trusts beyond the pool label, which the chart must guard: the webhooks'
    # opt-in labels (webhook.namespaceMatchLabels) and the rollout groups' selector keys.
    must_guard = {"url": ["poolguard-bench"], "selector": ["poolguard", "example.com/tier"], "native-apply": ["poolguard"],
                  "policies": ["risk"]}.get(name, [])
    check(all(k in guarded for k in must_guard) and label not in guarded
          and len(set(guarded)) == len(guarded),
          f"config.poolAuthority.guardedLabels {guarded} lists {must_guard}, each once, not the pool label")
    authority_keys = []
    choose_unlabelled = placement.get("unlabelledNamespaces") == "choose"
    requires_label = name in ("policies", "url", "selector", "native-apply")  # validating.requireNamespaceLabel
    for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
        for cfg in kinds.get(kind, []):
            ann = (cfg["metadata"].get("annotations") or {})
            check("helm.sh/resource-policy" not in ann, f"{kind} must not be kept on uninstall")
            for wh in cfg["webhooks"]:
                cc = wh["clientConfig"]
                path = "/mutate" if kind.startswith("Mutating") else "/validate"
                if wh["name"].endswith("pool-authority.poolguard.io"):
                    # Namespaces that carry a guarded label before or after the change, whatever
                    # namespace selector the others have, through the main resource and every
                    # subresource (status and finalize write labels too); nothing else.
                    check(wh["rules"] == [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"],
                                           "resources": ["namespaces", "namespaces/*"], "scope": "Cluster"}],
                          f"{wh['name']} sees Namespace CREATE/UPDATE of the resource and every subresource only")
                    expressions = wh["objectSelector"].get("matchExpressions") or []
                    check(len(wh["objectSelector"]) == 1 and len(expressions) == 1
                          and expressions[0]["operator"] == "Exists",
                          f"{wh['name']} selects namespaces that carry one guarded label")
                    authority_keys.append(expressions[0]["key"] if expressions else None)
                    check("namespaceSelector" not in wh and wh["failurePolicy"] == "Fail",
                          f"{wh['name']} fails closed for every namespace")
                    continue
                if kind.startswith("Mutating") and not choose_unlabelled:
                    check({"key": label, "operator": "NotIn", "values": [""]} in wh["namespaceSelector"]["matchExpressions"],
                          "the mutating webhook skips an empty pool label (no pool)")
                # Which namespaces reach the webhook (carrying webhook.namespaceMatchLabels): a
                # pool's, one labelled with placement.chooseValue (both webhooks), unlabelled or
                # empty-labelled ones (mutating: only with unlabelledNamespaces choose; validating:
                # unless requireNamespaceLabel), never the excluded ones.
                sel = wh["namespaceSelector"]
                def ns(ns_name, **labels):
                    return {"kubernetes.io/metadata.name": ns_name, **(sel.get("matchLabels") or {}), **labels}
                check(selects(sel, ns("team-a", **{label: "pool1"})), f"{kind} selects a namespace of pool pool1")
                if placement.get("chooseValue"):
                    check(selects(sel, ns("team-auto", **{label: placement["chooseValue"]})),
                          f"{kind} selects a namespace labelled {label}={placement['chooseValue']} (placement.chooseValue)")
                mutating = kind.startswith("Mutating")
                want = choose_unlabelled if mutating else not requires_label
                check(selects(sel, ns("plain")) == want, f"{kind} selects an unlabelled namespace: want {want}")
                # (requireNamespaceLabel asks for the label to exist: an empty one is validated.)
                want = choose_unlabelled if mutating else True
                check(selects(sel, ns("empty", **{label: ""})) == want, f"{kind} selects a namespace with an empty pool label: want {want}")
                for never in (namespace, "kube-system"):
                    check(not selects(sel, ns(never)) and not selects(sel, ns(never, **{label: "pool1"})),
                          f"{kind} never selects {never}")
                if name == "url":
                    check(cc.get("url") == f"https://127.0.0.1:8443{path}" and "service" not in cc,
                          f"{kind} with webhook.url calls https://127.0.0.1:8443{path}, not the Service")
                    check(wh["namespaceSelector"].get("matchLabels") == {"poolguard-bench": "on"},
                          f"{kind} requires webhook.namespaceMatchLabels")
                    check({"key": "agentpool", "operator": "Exists"} in wh["namespaceSelector"]["matchExpressions"],
                          f"{kind} requires the pool label (validating.requireNamespaceLabel)")
                else:
                    check("url" not in cc and cc["service"]["namespace"] == namespace
                          and cc["service"]["path"] == path, f"{kind} calls the Service at {path}")
                    if name == "selector":
                        check(wh["namespaceSelector"].get("matchLabels") == {"poolguard": "enabled", "example.com/tier": "gold"},
                              f"{kind} requires webhook.namespaceMatchLabels")
                    elif name == "native-apply":
                        check(wh["namespaceSelector"].get("matchLabels") == {"poolguard": "on"},
                              f"{kind} requires webhook.namespaceMatchLabels")
                    else:
                        check("matchLabels" not in wh["namespaceSelector"], f"{kind} has no matchLabels by default")
                excluded = [e for e in wh["namespaceSelector"]["matchExpressions"]
                            if e["key"] == "kubernetes.io/metadata.name"]
                check(excluded and excluded[0]["operator"] == "NotIn"
                      and {namespace, "kube-system"} <= set(excluded[0]["values"]),
                      f"{kind} must exclude {namespace} and kube-system")
                if name.startswith("provided") or name == "url":
                    pem = base64.b64decode(cc.get("caBundle") or "").decode()
                    check(pem.startswith("-----BEGIN CERTIFICATE-----"),
                          f"{kind} needs a caBundle (base64 of the PEM) in mode provided")
                else:
                    check("caBundle" not in cc, f"{kind} must not render caBundle in mode {name}")
                if name in ("certmanager", "serve-only"):
                    check(ann.get("cert-manager.io/inject-ca-from") == f"{namespace}/poolguard-tls",
                          f"{kind} inject-ca-from annotation")
    check(len(kinds.get("MutatingWebhookConfiguration", [])) == 1, "one MutatingWebhookConfiguration")
    check(len(kinds.get("ValidatingWebhookConfiguration", [])) == 1, "one ValidatingWebhookConfiguration")
    authority = [wh["name"] for cfg in kinds.get("ValidatingWebhookConfiguration", []) for wh in cfg["webhooks"]
                 if wh["name"].endswith("pool-authority.poolguard.io")]
    check(authority[:1] == ["pool-authority.poolguard.io"], "the pool-authority webhook is registered by default")
    check(len(set(authority)) == len(authority), f"pool-authority webhooks have distinct names: {authority}")
    # One entry per guarded key (one objectSelector cannot OR keys), the pool label's first.
    check(authority_keys == [label] + guarded,
          f"pool-authority webhooks select {authority_keys}, want one per guarded label {[label] + guarded}")
    # The helm test pod (poolguard config check) must not be selected as one of poolguard's pods:
    # it carries neither Deployment's selector labels.
    for dep in kinds.get("Deployment", []):
        selector = dep["spec"]["selector"]["matchLabels"]
        for pod in kinds.get("Pod", []):
            labels = pod["metadata"].get("labels") or {}
            check(any(labels.get(k) != v for k, v in selector.items()),
                  f"Pod {pod['metadata']['name']} carries Deployment {dep['metadata']['name']}'s selector labels")
    # Two Deployments: the serving pods (`poolguard serve`, read only) and, when something needs
    # writing (mode self, webhook.registration=poolguard, the audit), the controller
    # (`poolguard controller`, <fullname>-controller, its own ServiceAccount).
    audit_on = name not in ("audit-off", "serve-only")
    rbac = name != "options"
    want_controller = self_mode or bool(registered) or audit_on
    def command(dep):
        return dep["spec"]["template"]["spec"]["containers"][0]["args"][:1]
    serving = [d for d in kinds.get("Deployment", []) if command(d) == ["serve"]]
    controllers = [d for d in kinds.get("Deployment", []) if command(d) == ["controller"]]
    check(len(serving) == 1, f"one serving Deployment (poolguard serve), got {len(serving)}")
    check(len(controllers) == want_controller,
          f"{len(controllers)} controller Deployments, want {int(want_controller)} (mode self, registration poolguard or the audit)")
    check(len(kinds.get("Deployment", [])) == len(serving) + len(controllers),
          "every Deployment runs poolguard serve or poolguard controller")
    fullname = serving[0]["metadata"]["name"] if serving else "poolguard"
    serving_sa = "poolguard-existing" if name == "options" else fullname
    controller_sa = "poolguard-controller-existing" if name == "options" else f"{fullname}-controller"
    check(fullname == ("pg" if name == "options" else "poolguard"), f"the serving Deployment is named {fullname}")
    for dep in controllers:
        check(dep["metadata"]["name"] == f"{fullname}-controller", f"the controller Deployment is named {dep['metadata']['name']}")
    writer_flags = ("--manage-certs", "--cert-secret", "--webhook-configs", "--cert-dns-name", "--register-webhooks",
                    "--report-api", "--audit-namespace-selector", "--max-results-per-report")
    writer_prefixes = ("--native-", "--lease-")
    for dep in serving:
        pod = dep["spec"]["template"]["spec"]
        c = pod["containers"][0]
        args = c["args"]
        def arg(flag):
            return args[args.index(flag) + 1] if flag in args else None
        check(pod["serviceAccountName"] == serving_sa, f"the serving pods run as {pod['serviceAccountName']}, want {serving_sa}")
        pod_labels = dep["spec"]["template"]["metadata"]["labels"]
        check(dep["spec"]["selector"]["matchLabels"].get("app.kubernetes.io/name") == "poolguard"
              and all(pod_labels.get(k) == v for k, v in dep["spec"]["selector"]["matchLabels"].items()),
              "the serving Deployment selects its pods by app.kubernetes.io/name=poolguard")
        wrote = [a for a in args if a in writer_flags or a.startswith(writer_prefixes)]
        check(not wrote, f"the serving Deployment passes writer flags {wrote}")
        check(arg("--audit-interval") == "0", f"the serving pods never audit: --audit-interval {arg('--audit-interval')!r}")
        check(arg("--addr") == "0.0.0.0:8443", "the serving pods listen on 0.0.0.0:8443")
        # The serving certificate from the release's TLS Secret, mounted read-only at /tls in
        # every mode (in mode self the controller writes it).
        tls_secret = {v["name"]: v for v in pod["volumes"]}.get("tls", {}).get("secret", {}).get("secretName")
        check(arg("--tls-cert-file") == "/tls/tls.crt" and arg("--tls-key-file") == "/tls/tls.key",
              "--tls-cert-file /tls/tls.crt --tls-key-file /tls/tls.key")
        check(any(m["name"] == "tls" and m["mountPath"] == "/tls" and m.get("readOnly") for m in c["volumeMounts"])
              and tls_secret == ("unused" if name == "url" else "poolguard-serving-cert" if name.startswith("provided")
                                 else f"{fullname}-tls"),
              f"the TLS Secret ({tls_secret}) mounted read-only at /tls")
        # Only the serving certificate and its key: in mode self the Secret also holds the CA's
        # key, which must stay with the controller.
        tls_items = {v["name"]: v for v in pod["volumes"]}.get("tls", {}).get("secret", {}).get("items") or []
        check(sorted((i["key"], i["path"]) for i in tls_items) == [("tls.crt", "tls.crt"), ("tls.key", "tls.key")],
              f"the tls volume projects only tls.crt and tls.key (items {tls_items})")
        timeout = kinds["MutatingWebhookConfiguration"][0]["webhooks"][0]["timeoutSeconds"]
        check(arg("--deadline-ms") == str(timeout * 1000 - 1000),
              f"--deadline-ms one second below timeoutSeconds {timeout}")
        has_sleep = "preStop" in (c.get("lifecycle") or {})
        check(has_sleep == (name != "options"), "preStop sleep only from Kubernetes 1.30 and when > 0")
        # The Services and the PodDisruptionBudget count the serving pods, never the controller's;
        # only the controller's metrics Service selects the controller's pods, and only them.
        for obj in kinds.get("Service", []) + kinds.get("PodDisruptionBudget", []):
            sel = obj["spec"]["selector"]
            sel = sel.get("matchLabels", sel) if obj["kind"] == "PodDisruptionBudget" else sel
            of_controller = obj["metadata"]["name"] == f"{fullname}-controller-metrics"
            check(all(pod_labels.get(k) == v for k, v in sel.items()) != of_controller,
                  f"{obj['kind']} {obj['metadata']['name']} selects the serving pods"
                  + (" (it should not)" if of_controller else " (it should)"))
            for ctrl in controllers:
                ctrl_labels = ctrl["spec"]["template"]["metadata"]["labels"]
                check(all(ctrl_labels.get(k) == v for k, v in sel.items()) == of_controller,
                      f"{obj['kind']} {obj['metadata']['name']} selects the controller's pods"
                      + (" (it should)" if of_controller else " (it should not)"))
    for dep in controllers:
        pod = dep["spec"]["template"]["spec"]
        c = pod["containers"][0]
        args = c["args"]
        def arg(flag):
            return args[args.index(flag) + 1] if flag in args else None
        check(pod["serviceAccountName"] == controller_sa,
              f"the controller runs as {pod['serviceAccountName']}, want {controller_sa}")
        pod_labels = dep["spec"]["template"]["metadata"]["labels"]
        check(dep["spec"]["selector"]["matchLabels"].get("app.kubernetes.io/name") == "poolguard-controller"
              and pod_labels.get("app.kubernetes.io/component") == "controller"
              and all(pod_labels.get(k) == v for k, v in dep["spec"]["selector"]["matchLabels"].items()),
              "the controller selects its pods by app.kubernetes.io/name=poolguard-controller (component controller)")
        check(arg("--metrics-addr") == "0.0.0.0:9090", "the controller's --metrics-addr 0.0.0.0:9090")
        # It answers no admission request: no listener, deadline, serving certificate, client CA
        # or preStop sleep.
        served = [a for a in args if a in ("--addr", "--deadline-ms", "--drain-seconds", "--tls-cert-file",
                                           "--tls-key-file", "--client-ca-file", "--client-name")]
        check(not served, f"the controller passes serving flags {served}")
        check(not any(m["mountPath"] in ("/tls", "/client-ca") for m in c["volumeMounts"]),
              "the controller mounts neither the TLS Secret nor the client CA")
        check("preStop" not in (c.get("lifecycle") or {}), "the controller has no preStop sleep")
        # Mode self: the controller keeps the certificate in the Secret the serving pods mount and
        # the CA bundle in the release's two webhook configurations.
        check(("--manage-certs" in args) == self_mode, "--manage-certs only in mode self")
        if self_mode:
            configs = ",".join(cfg["metadata"]["name"] for k in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")
                               for cfg in kinds.get(k, []))
            check(arg("--cert-secret") == f"{namespace}/{fullname}-tls", f"--cert-secret {arg('--cert-secret')!r}")
            check(arg("--webhook-configs") == configs, f"--webhook-configs {arg('--webhook-configs')!r}, want {configs}")
            check(arg("--cert-dns-name") == f"{fullname}.{namespace}.svc", f"--cert-dns-name {arg('--cert-dns-name')!r}")
        else:
            check(not any(f in args for f in ("--cert-secret", "--webhook-configs", "--cert-dns-name")),
                  "certificate flags only in mode self")
    for dep in kinds.get("Deployment", []):
        c = dep["spec"]["template"]["spec"]["containers"][0]
        check(not any("subPath" in m for m in c["volumeMounts"]), f"{dep['metadata']['name']}: no subPath mounts")
        env = {e["name"]: e for e in c.get("env") or []}
        for var, field in (("POD_NAME", "metadata.name"), ("POD_NAMESPACE", "metadata.namespace")):
            check(env.get(var, {}).get("valueFrom", {}).get("fieldRef", {}).get("fieldPath") == field,
                  f"{dep['metadata']['name']}: env {var} from the downward API ({field})")
    # The ServiceAccounts: the serving pods' and, with the controller, its own.
    accounts = sorted(sa["metadata"]["name"] for sa in kinds.get("ServiceAccount", []))
    want_accounts = [] if name == "options" else sorted([serving_sa] + ([controller_sa] if want_controller else []))
    check(accounts == want_accounts, f"ServiceAccounts {accounts}, want {want_accounts}")
    # RBAC by identity: what each ServiceAccount is bound to.
    def bound(sa, binding_kind):
        return sorted(b["roleRef"]["name"] for b in kinds.get(binding_kind, [])
                      if {"kind": "ServiceAccount", "name": sa, "namespace": namespace} in b["subjects"])
    for binding_kind in ("ClusterRoleBinding", "RoleBinding"):
        for b in kinds.get(binding_kind, []):
            check(b["roleRef"]["kind"] == binding_kind.removesuffix("Binding") and b["roleRef"]["name"] == b["metadata"]["name"]
                  and len(b["subjects"]) == 1 and b["subjects"][0]["name"] in (serving_sa, controller_sa),
                  f"{binding_kind} {b['metadata']['name']} binds one of poolguard's ServiceAccounts to its own {binding_kind.removesuffix('Binding')}")
    if rbac:
        check(bound(serving_sa, "ClusterRoleBinding") == [fullname],
              f"the serving ServiceAccount is bound to ClusterRoles {bound(serving_sa, 'ClusterRoleBinding')}, want [{fullname}]")
        check(bound(serving_sa, "RoleBinding") == ([fullname] if audit_on else []),
              f"the serving ServiceAccount is bound to Roles {bound(serving_sa, 'RoleBinding')}")
        # native.webhookFallback: pods may be created in the canary namespace (dry-run canaries).
        fallback = "--native-fallback" in (kinds.get("Deployment") and [a for d in kinds["Deployment"]
                                           for a in d["spec"]["template"]["spec"]["containers"][0].get("args", [])] or [])
        want_roles = sorted(([f"{fullname}-tls"] if self_mode else []) + ([f"{fullname}-registration"] if registered else [])
                            + ([f"{fullname}-audit"] if audit_on else []) + ([f"{fullname}-controller-canary"] if fallback else []))
        check(bound(controller_sa, "ClusterRoleBinding") == ([f"{fullname}-controller"] if want_controller else []),
              f"the controller's ServiceAccount is bound to ClusterRoles {bound(controller_sa, 'ClusterRoleBinding')}")
        check(bound(controller_sa, "RoleBinding") == want_roles,
              f"the controller's ServiceAccount is bound to Roles {bound(controller_sa, 'RoleBinding')}, want {want_roles} (the writer Roles)")
        cluster_roles = sorted(r["metadata"]["name"] for r in kinds.get("ClusterRole", []))
        want_cluster_roles = sorted([fullname] + ([f"{fullname}-controller"] if want_controller else []))
        check(cluster_roles == want_cluster_roles, f"ClusterRoles {cluster_roles}, want {want_cluster_roles}")
        roles = sorted(r["metadata"]["name"] for r in kinds.get("Role", []))
        check(roles == sorted(want_roles + ([fullname] if audit_on else [])), f"Roles {roles}")
    # The serving ServiceAccount writes nothing but its admission counts, into the rollout
    # ConfigMap's counts ConfigMap <fullname>-rollouts-counts (patch, by name).
    counts = f"{fullname}-rollouts-counts"
    serving_rules = [(k, rule) for k, binding_kind in (("ClusterRole", "ClusterRoleBinding"), ("Role", "RoleBinding"))
                     for role_name in bound(serving_sa, binding_kind)
                     for role in kinds.get(k, []) if role["metadata"]["name"] == role_name for rule in role["rules"]]
    for k, rule in serving_rules:
        verbs = set(rule["verbs"]) - {"get", "list", "watch"}
        check(not verbs or (k == "Role" and verbs == {"patch"} and rule["apiGroups"] == [""]
                            and rule["resources"] == ["configmaps"] and rule.get("resourceNames") == [counts]),
              f"a {k} bound to the serving ServiceAccount grants {sorted(verbs)} on {rule['resources']}: only patch on ConfigMap {counts}")
    # The serving ClusterRole: the namespaces, the nodes and (gatekeeperFromCluster) the
    # Gatekeeper objects, read only; nothing else.
    reads = [{"apiGroups": [""], "resources": [resource], "verbs": ["get", "list", "watch"]} for resource in ("namespaces", "nodes")]
    if name == "gatekeeper-cluster":
        reads += [{"apiGroups": ["templates.gatekeeper.sh"], "resources": ["constrainttemplates"], "verbs": ["get", "list", "watch"]},
                  {"apiGroups": ["constraints.gatekeeper.sh"], "resources": ["*"], "verbs": ["get", "list", "watch"]}]
    for role in kinds.get("ClusterRole", []):
        if role["metadata"]["name"] == fullname:
            check(role["rules"] == reads, f"the serving ClusterRole {fullname} grants {role['rules']}, want the reads {reads} only")
    for role in kinds.get("ClusterRole", []):
        if role["metadata"]["name"] == f"{fullname}-controller":
            for resource in ("namespaces", "nodes"):
                check({"apiGroups": [""], "resources": [resource], "verbs": ["get", "list", "watch"]} in role["rules"],
                      f"the controller's ClusterRole reads {resource} (get/list/watch)")
            # Its webhook configurations: get/patch by name, with mode self or registration poolguard.
            configs = [r for r in role["rules"] if r["resources"] == ["mutatingwebhookconfigurations", "validatingwebhookconfigurations"]]
            want = [{"apiGroups": ["admissionregistration.k8s.io"],
                     "resources": ["mutatingwebhookconfigurations", "validatingwebhookconfigurations"],
                     "resourceNames": ["poolguard-mutating", "poolguard-validating"],
                     "verbs": ["get", "patch"]}] if self_mode or registered else []
            check(configs == want, f"the controller's webhook configuration rules {configs}, want {want}")
    for role in kinds.get("Role", []):
        if role["metadata"]["name"] == f"{fullname}-registration":
            check(role["rules"] == [{"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": ["list"]}],
                  f"the registration Role lists EndpointSlices only: {role['rules']}")
    check(bool(kinds.get("PodDisruptionBudget")) == (name != "options"), "PDB only with replicaCount > 1")
    check(bool(kinds.get("ClusterRole")) == (name != "options"), "RBAC only with rbac.create")
    secret_roles = [r for r in kinds.get("Role", []) if any("secrets" in rule["resources"] for rule in r["rules"])]
    check(bool(secret_roles) == (self_mode and name != "options"), "the Secret Role only in mode self")
    for role in secret_roles:
        check(role["metadata"]["name"] == f"{fullname}-tls" and bound(controller_sa, "RoleBinding").count(f"{fullname}-tls") == 1
              and f"{fullname}-tls" not in bound(serving_sa, "RoleBinding"),
              f"the Secret Role {role['metadata']['name']} is {fullname}-tls, bound to the controller's ServiceAccount only")
        for rule in role["rules"]:
            if "secrets" not in rule["resources"]:
                continue
            # The certificates' Secret is read and replaced, never patched, listed or watched;
            # only create (no name known to the authorizer) is not limited to it.
            named = len(rule.get("resourceNames") or []) == 1
            check((named and set(rule["verbs"]) == {"get", "update"}) or (not rule.get("resourceNames") and rule["verbs"] == ["create"]),
                  f"Secret rule {rule}: get/update on the certificates' Secret, create, nothing else")
    # The mounted files, as poolguard would see them (checked with the binary below).
    for cm in kinds.get("ConfigMap", []):
        if cm["metadata"]["name"].endswith("-config"):
            yaml.safe_load(cm["data"]["config.yaml"])
            os.makedirs(f"{out}/{name}.d/config", exist_ok=True)
            open(f"{out}/{name}.d/config/config.yaml", "w").write(cm["data"]["config.yaml"])
        for suffix, subdir in (("-placement-policies", "placement-policies"), ("-policies", "policies")):
            if not cm["metadata"]["name"].endswith(suffix):
                continue
            os.makedirs(f"{out}/{name}.d/{subdir}", exist_ok=True)
            for key, text in (cm.get("data") or {}).items():
                open(f"{out}/{name}.d/{subdir}/{key}", "w").write(text)
                if key.endswith(".yaml"):
                    check("policy" in yaml.safe_load(text), f"{subdir}/{key} is a template")
                check(not key.endswith("_test.rego"), f"{subdir}/{key}: Rego tests are not shipped")
                shipped = os.path.join(chart, subdir, key)
                if os.path.exists(shipped):
                    check(text == open(shipped).read(), f"{subdir}/{key} differs from {shipped}")
            break
        if cm["metadata"]["name"].endswith("-gatekeeper"):
            os.makedirs(f"{out}/{name}.d/gatekeeper", exist_ok=True)
            for key, text in (cm.get("data") or {}).items():
                open(f"{out}/{name}.d/gatekeeper/{key}", "w").write(text)
    # Gatekeeper files only from gatekeeperPolicies: their ConfigMap, mount and --gatekeeper-dir.
    gatekeeper_cms = [cm for cm in kinds.get("ConfigMap", []) if cm["metadata"]["name"].endswith("-gatekeeper")]
    check(len(gatekeeper_cms) == (name == "gatekeeper"), "a Gatekeeper ConfigMap only with gatekeeperPolicies")
    for workload in kinds.get("Deployment", []) + [p for p in kinds.get("Pod", [])]:
        pod = workload["spec"]["template"]["spec"] if workload["kind"] == "Deployment" else workload["spec"]
        c = pod["containers"][0]
        has_dir = c["args"][c["args"].index("--gatekeeper-dir") + 1:][:1] == ["/gatekeeper"] if "--gatekeeper-dir" in c["args"] else False
        mounted = any(m["name"] == "gatekeeper" and m["mountPath"] == "/gatekeeper" and m.get("readOnly")
                      for m in c.get("volumeMounts", []))
        check(has_dir == mounted == (name == "gatekeeper"),
              f"{workload['kind']} {workload['metadata']['name']}: --gatekeeper-dir /gatekeeper, mounted read-only, only with gatekeeperPolicies")
    # gatekeeperFromCluster: --gatekeeper-from-cluster on the server, and get/list/watch (nothing
    # more) on ConstraintTemplates and every constraints.gatekeeper.sh resource; neither otherwise.
    from_cluster = name == "gatekeeper-cluster"
    for workload in kinds.get("Deployment", []):
        args = workload["spec"]["template"]["spec"]["containers"][0]["args"]
        check(("--gatekeeper-from-cluster" in args) == from_cluster,
              f"Deployment {workload['metadata']['name']}: --gatekeeper-from-cluster only with gatekeeperFromCluster")
    # Both ClusterRoles (serving and controller: both decide with the constraints) read them.
    want_rules = [
        {"apiGroups": ["templates.gatekeeper.sh"], "resources": ["constrainttemplates"], "verbs": ["get", "list", "watch"]},
        {"apiGroups": ["constraints.gatekeeper.sh"], "resources": ["*"], "verbs": ["get", "list", "watch"]},
    ] if from_cluster else []
    for role in kinds.get("ClusterRole", []):
        gk_rules = [r for r in role.get("rules", [])
                    if set(r.get("apiGroups", [])) & {"templates.gatekeeper.sh", "constraints.gatekeeper.sh"}]
        check(gk_rules == want_rules, f"ClusterRole {role['metadata']['name']}: Gatekeeper RBAC {gk_rules}, wanted {want_rules}")
    check(not from_cluster or len(kinds.get("ClusterRole", [])) == 1 + want_controller,
          "gatekeeperFromCluster: both ClusterRoles are rendered")
    # validating.extraRules (the gatekeeper case: Services): the audit (the controller's
    # ClusterRole, never the serving one) may list those kinds.
    for role in kinds.get("ClusterRole", []):
        extra_rbac = [r for r in role.get("rules", []) if "services" in r.get("resources", [])]
        want_extra = [{"apiGroups": [""], "resources": ["services"], "verbs": ["get", "list"]}] \
            if name == "gatekeeper" and role["metadata"]["name"] == f"{fullname}-controller" else []
        check(extra_rbac == want_extra, f"ClusterRole {role['metadata']['name']}: RBAC for validating.extraRules {extra_rbac}, wanted {want_extra}")
    check(name != "gatekeeper" or any(r["metadata"]["name"] == f"{fullname}-controller" for r in kinds.get("ClusterRole", [])),
          "validating.extraRules with the audit: the controller's ClusterRole is rendered")
    # The placement policies have their own ConfigMap and mount, beside (not inside) /policies.
    placement_cms = [cm for cm in kinds.get("ConfigMap", []) if cm["metadata"]["name"].endswith("-placement-policies")]
    check(len(placement_cms) == 1, "one placement policies ConfigMap")
    shipped_placement = sorted(f for f in os.listdir(f"{chart}/placement-policies") if not f.endswith("_test.rego"))
    if placement_cms:
        keys = sorted((placement_cms[0].get("data") or {}).keys())
        if name == "no-placement-policies":
            check(keys == [], f"placementPolicies.shipped=false: no placement policies, got {keys}")
        else:
            check(set(shipped_placement) <= set(keys), f"placement policies {keys} include the shipped {shipped_placement}")
    for dep in kinds.get("Deployment", []):
        pod = dep["spec"]["template"]["spec"]
        c = pod["containers"][0]
        args = c["args"]
        is_serving = args[:1] == ["serve"]
        check("--placement-policies-dir" in args and args[args.index("--placement-policies-dir") + 1] == "/placement-policies",
              "--placement-policies-dir /placement-policies")
        mounts = {m["name"]: m for m in c["volumeMounts"]}
        check(mounts.get("placement-policies", {}).get("mountPath") == "/placement-policies"
              and mounts["placement-policies"].get("readOnly"), "placement policies mounted read-only at /placement-policies")
        check(not any(m["mountPath"].startswith(("/policies/", "/placement-policies/")) for m in c["volumeMounts"]),
              "no mount nested in the policies directories")
        volumes = {v["name"]: v for v in pod["volumes"]}
        check(placement_cms and volumes.get("placement-policies", {}).get("configMap", {}).get("name")
              == placement_cms[0]["metadata"]["name"], "the placement-policies volume is the placement policies ConfigMap")
        # mTLS only with clientCA, on the serving pods: --client-ca-file, the CA's ConfigMap mounted
        # read-only.
        client_ca = [cm for cm in kinds.get("ConfigMap", []) if cm["metadata"]["name"].endswith("-client-ca")]
        if not is_serving:
            check("--client-ca-file" not in args and "--client-name" not in args and "client-ca" not in mounts
                  and "client-ca" not in volumes, "the controller has no client CA")
        elif name == "mtls":
            check(args[args.index("--client-ca-file") + 1:][:1] == ["/client-ca/ca.crt"]
                  if "--client-ca-file" in args else False, "--client-ca-file /client-ca/ca.crt")
            check(args[args.index("--client-name") + 1:][:1] == ["kube-apiserver-webhook-client"]
                  if "--client-name" in args else False, "--client-name kube-apiserver-webhook-client")
            check(client_ca and client_ca[0]["data"]["ca.crt"].startswith("-----BEGIN CERTIFICATE-----")
                  and mounts.get("client-ca", {}).get("mountPath") == "/client-ca" and mounts["client-ca"].get("readOnly"),
                  "the client CA ConfigMap mounted read-only at /client-ca")
        else:
            check("/client-ca/ca.crt" not in args and not client_ca and "client-ca" not in mounts,
                  "no client CA ConfigMap without clientCA")
        # The controller registers the webhooks from the mounted ConfigMap, or the chart renders
        # them; the serving pods never register.
        if not registered or is_serving:
            check("--register-webhooks" not in args and "webhooks" not in mounts and "webhooks" not in volumes,
                  f"Deployment {dep['metadata']['name']}: no --register-webhooks"
                  + ("" if registered else " (webhook.registration=chart)"))
        else:
            check(args[args.index("--register-webhooks") + 1:][:1] == ["/webhooks/webhooks.yaml"]
                  if "--register-webhooks" in args else False, "--register-webhooks /webhooks/webhooks.yaml")
            check(mounts.get("webhooks", {}).get("mountPath") == "/webhooks" and mounts["webhooks"].get("readOnly")
                  and volumes.get("webhooks", {}).get("configMap", {}).get("name") == registered[0]["metadata"]["name"],
                  "the webhooks ConfigMap mounted read-only at /webhooks")
    mine = [e for e in errors if e.startswith(f"{name}: ")]
    status = "FAILED" if mine else "ok"
    print(f"[helm-lint] yaml {name}: {status} ({len(docs)} documents)", file=sys.stderr)
# What poolguard registers by default is exactly what the chart renders with registration=chart.
if "default" in registered_webhooks and "chart-registration" in registered_webhooks:
    same = registered_webhooks["default"] == registered_webhooks["chart-registration"]
    if not same:
        errors.append("default: the webhooks poolguard registers differ from webhook.registration=chart's")
    print(f"[helm-lint] registered webhooks equal the chart-rendered ones: {'ok' if same else 'FAILED'}", file=sys.stderr)
for e in errors:
    print(f"[helm-lint] FAIL: {e}", file=sys.stderr)
sys.exit(1 if errors else 0)
PY
    passed=$((passed + 1))
else
    failures=$((failures + 1))
fi

# webhook.skipUnchangedUpdates: the validating webhook (and only it) carries the one condition
# wherever it is on, no gatekeeperPolicies are given and the cluster has matchConditions (1.30+;
# the case options renders for 1.29), and switching it off changes nothing else. The expression's own behaviour is tested
# through a real kube-apiserver (integration/e2e/tests/match_conditions.rs).
if python3 - "$out" "${cases[@]%%|*}" <<'PY'; then
import sys, yaml
out, names = sys.argv[1], sys.argv[2:]
errors = []
def webhooks(name):
    docs = [d for d in yaml.safe_load_all(open(f"{out}/{name}.yaml")) if d]
    # webhook.registration=poolguard: the webhooks in effect are the ones poolguard registers.
    registered = [d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"].endswith("-webhooks")]
    if registered:
        docs = [d for d in yaml.safe_load_all(registered[0]["data"]["webhooks.yaml"]) if d]
    return [(d["kind"], wh) for d in docs if d["kind"].endswith("WebhookConfiguration") for wh in d["webhooks"]]
for name in names:
    # Gatekeeper constraints often judge labels, and Gatekeeper judges every UPDATE: with
    # gatekeeperPolicies every UPDATE is sent.
    want = name not in ("no-skip", "options", "gatekeeper", "gatekeeper-cluster")
    for kind, wh in webhooks(name):
        # validating.extraRules (the gatekeeper case: Services) join validate.poolguard.io's rules.
        if wh["name"] == "validate.poolguard.io":
            extra = [r for r in wh["rules"] if "services" in r["resources"]]
            if len(extra) != (name == "gatekeeper"):
                errors.append(f"{name}: validate.poolguard.io has {len(extra)} rules for services")
        conditions = wh.get("matchConditions")
        if wh["name"] != "validate.poolguard.io":
            if conditions is not None:
                errors.append(f"{name}: {wh['name']} must have no matchConditions")
            continue
        if not want:
            if conditions is not None:
                errors.append(f"{name}: validate.poolguard.io must have no matchConditions")
            continue
        if not (isinstance(conditions, list) and len(conditions) == 1
                and conditions[0].get("name") == "changes-what-poolguard-checks"):
            errors.append(f"{name}: validate.poolguard.io needs the one matchCondition changes-what-poolguard-checks, got {conditions}")
            continue
        expr = conditions[0]["expression"]
        # The guards the expression's safety rests on (see _helpers.tpl): only UPDATEs of the main
        # resource can be left out, and subResource is read only when present.
        for needle in ('request.operation != "UPDATE"', '(has(request.subResource) && request.subResource != "")',
                       "object == null || oldObject == null", 'k.startsWith("poolguard.io/")',
                       "size(object.metadata.annotations) <= 1000", "size(oldObject.metadata.annotations) <= 1000"):
            if needle not in expr:
                errors.append(f"{name}: the condition lacks {needle!r}")
        resources = {r for rule in wh["rules"] for r in rule["resources"]}
        if "pods/ephemeralcontainers" not in resources:
            errors.append(f"{name}: pods/ephemeralcontainers must stay in the rules")
def without_conditions(name):
    return [(k, {f: v for f, v in wh.items() if f != "matchConditions"}) for k, wh in webhooks(name)]
if without_conditions("default") != without_conditions("no-skip"):
    errors.append("webhook.skipUnchangedUpdates=false changes more than the matchConditions")
for e in errors:
    print(f"[helm-lint] FAIL: {e}", file=sys.stderr)
print(f"[helm-lint] matchConditions (webhook.skipUnchangedUpdates), validating.extraRules: {'FAILED' if errors else 'ok'}", file=sys.stderr)
sys.exit(1 if errors else 0)
PY
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
if python3 - "$out" "$namespace" integration/helm/testdata/policyreport-sample.json "${cases[@]%%|*}" <<'PY'; then
import collections, copy, json, re, sys, yaml
out, namespace, sample_path, names = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
sample = json.load(open(sample_path))
APIS = {
    "policyreport": {"group": "wgpolicyk8s.io", "version": "v1alpha2", "resource": "policyreports",
                     "crds": {"PolicyReport": ("policyreports", "polr", "Namespaced"),
                              "ClusterPolicyReport": ("clusterpolicyreports", "cpolr", "Cluster")}},
    "openreports": {"group": "openreports.io", "version": "v1alpha1", "resource": "reports",
                    "crds": {"Report": ("reports", "rep", "Namespaced"),
                             "ClusterReport": ("clusterreports", "crep", "Cluster")}},
}
# What the audit reads: get/list, never watch. (Nodes are watched by every replica whether the
# audit runs or not: checked on their own.)
READ = [("", "pods"), ("", "replicationcontrollers"), ("apps", "deployments"), ("apps", "replicasets"),
        ("apps", "statefulsets"), ("apps", "daemonsets"), ("batch", "jobs"), ("batch", "cronjobs")]

def split_terms(selector):
    terms, depth, cur = [], 0, ""
    for ch in selector:
        if ch == "," and depth == 0:
            terms.append(cur); cur = ""; continue
        depth += {"(": 1, ")": -1}.get(ch, 0)
        cur += ch
    return terms + [cur] if selector else terms

def parse_selector(selector):
    """A label selector string (kubectl -l syntax) as a multiset of (key, op, values)."""
    reqs = []
    for term in split_terms(selector):
        term = term.strip()
        if m := re.fullmatch(r"([^\s!=(),]+)\s+(in|notin)\s+\(([^()]*)\)", term):
            reqs.append((m[1], {"in": "In", "notin": "NotIn"}[m[2]], frozenset(v.strip() for v in m[3].split(","))))
        elif m := re.fullmatch(r"([^\s!=(),]+)\s*(==|=|!=)\s*([^\s!=(),]*)", term):
            reqs.append((m[1], "NotIn" if m[2] == "!=" else "In", frozenset([m[3]])))
        elif m := re.fullmatch(r"!([^\s!=(),]+)", term):
            reqs.append((m[1], "DoesNotExist", frozenset()))
        elif re.fullmatch(r"[^\s!=(),]+", term):
            reqs.append((term, "Exists", frozenset()))
        else:
            raise ValueError(f"not a label selector term: {term!r}")
    return collections.Counter(reqs)

def webhook_selector(sel):
    reqs = [(k, "In", frozenset([v])) for k, v in (sel.get("matchLabels") or {}).items()]
    reqs += [(e["key"], e["operator"], frozenset(e.get("values") or [])) for e in sel.get("matchExpressions") or []]
    return collections.Counter(reqs)

def conforms(value, schema, path, errors):
    """Would the API server keep `value` as it is under this structural schema?"""
    if path == ".metadata":
        return
    t = schema.get("type")
    ok = {"object": isinstance(value, dict), "array": isinstance(value, list), "string": isinstance(value, str),
          "boolean": isinstance(value, bool), "integer": isinstance(value, int) and not isinstance(value, bool)}.get(t)
    if not ok:
        errors.append(f"{path}: {value!r} is not of type {t}")
        return
    if "enum" in schema and value not in schema["enum"]:
        errors.append(f"{path}: {value!r} not in enum {schema['enum']}")
    if t == "integer":
        bits = {"int32": 31, "int64": 63}.get(schema.get("format"))
        if bits and not -(2 ** bits) <= value < 2 ** bits:
            errors.append(f"{path}: {value} overflows {schema['format']}")
    if t == "object":
        props, extra = schema.get("properties") or {}, schema.get("additionalProperties")
        for k, v in value.items():
            if k in props:
                conforms(v, props[k], f"{path}.{k}", errors)
            elif isinstance(extra, dict):
                conforms(v, extra, f"{path}.{k}", errors)
            elif not schema.get("x-kubernetes-preserve-unknown-fields"):
                errors.append(f"{path}.{k}: not in the schema (pruned)")
        for k in schema.get("required", []):
            if k not in value:
                errors.append(f"{path}: required field {k} missing")
    if t == "array":
        for i, v in enumerate(value):
            conforms(v, schema["items"], f"{path}[{i}]", errors)

def structural(schema, path, errors):
    """Every node of a structural schema has a type (metadata's content is the API server's)."""
    if "type" not in schema:
        errors.append(f"{path}: no type")
    for k, sub in (schema.get("properties") or {}).items():
        if f"{path}.{k}" != ".metadata":
            structural(sub, f"{path}.{k}", errors)
    if isinstance(schema.get("additionalProperties"), dict):
        structural(schema["additionalProperties"], f"{path}.*", errors)
    if "items" in schema:
        structural(schema["items"], f"{path}[]", errors)

errors = []
for name in names:
    docs = [d for d in yaml.safe_load_all(open(f"{out}/{name}.yaml")) if isinstance(d, dict)]
    # webhook.registration=poolguard: the webhook configurations in effect are the registered ones.
    registered = [d for d in docs if d.get("kind") == "ConfigMap" and d["metadata"]["name"].endswith("-webhooks")]
    if registered:
        docs = [d for d in docs if not d.get("kind", "").endswith("WebhookConfiguration")] + \
            [d for d in yaml.safe_load_all(registered[0]["data"]["webhooks.yaml"]) if d]
    def check(cond, msg):
        if not cond:
            errors.append(f"{name}: {msg}")
    def kind(k):
        return [d for d in docs if d.get("kind") == k]
    audit_on = name not in ("audit-off", "serve-only")
    api_name = "openreports" if name == "openreports" else "policyreport"
    api = APIS[api_name]
    rbac = name != "options"
    # The controller (`poolguard controller`) runs the audit; the serving pods (`poolguard serve`)
    # never audit and only read progressive enforcement's state.
    def running(command):
        return [d for d in kind("Deployment") if d["spec"]["template"]["spec"]["containers"][0]["args"][:1] == [command]]
    serving, controllers = running("serve"), running("controller")
    if len(serving) != 1:
        check(False, f"{len(serving)} serving Deployments, want 1")
        continue
    serve_dep = serving[0]
    fullname = serve_dep["metadata"]["name"]
    lease = f"{fullname}-audit"
    rollouts = f"{fullname}-rollouts"
    serve_args = serve_dep["spec"]["template"]["spec"]["containers"][0]["args"]
    def serve_arg(flag):
        return serve_args[serve_args.index(flag) + 1] if flag in serve_args else None
    check(len(controllers) == 1 or (not audit_on and len(controllers) == 0),
          f"{len(controllers)} controller Deployments, want 1 with the audit on")
    # Without a controller (nothing to write), the checks of its flags below see no arguments.
    dep = controllers[0] if controllers else {"metadata": {"name": f"{fullname}-controller", "labels": {}},
                                              "spec": {"template": {"spec": {"containers": [{"args": []}]}}}}
    pod = dep["spec"]["template"]["spec"]
    c = pod["containers"][0]
    args = c["args"]
    def arg(flag):
        return args[args.index(flag) + 1] if flag in args else None
    audit_flags = ["--audit-namespace-selector", "--report-api", "--max-results-per-report",
                   "--lease-name", "--lease-duration"]
    # The serving pods: --audit-interval 0, none of the audit's flags, and the rollout ConfigMap
    # (what they decide with) only with the audit on.
    check(serve_arg("--audit-interval") == "0", f"the serving pods' --audit-interval {serve_arg('--audit-interval')!r}, want '0'")
    check(not any(f in serve_args for f in audit_flags), "the serving pods pass none of the audit's flags")
    check(serve_arg("--rollout-configmap") == (rollouts if audit_on else None),
          f"the serving pods' --rollout-configmap {serve_arg('--rollout-configmap')!r}, want {rollouts if audit_on else None}")
    # Flags of the controller.
    if controllers:
        check(arg("--audit-interval") == {"audit-off": "0", "openreports": "1h30m"}.get(name, "10m"),
              f"the controller's --audit-interval {arg('--audit-interval')!r}")
        check(arg("--rollout-configmap") == (rollouts if audit_on else None),
              f"the controller's --rollout-configmap {arg('--rollout-configmap')!r}")
    if audit_on:
        check(arg("--report-api") == api_name, f"--report-api {arg('--report-api')!r}")
        check(arg("--max-results-per-report") == ("200" if name == "openreports" else "1000"),
              f"--max-results-per-report {arg('--max-results-per-report')!r}")
        check(arg("--lease-name") == lease, f"--lease-name {arg('--lease-name')!r}, want {lease}")
        check(arg("--lease-duration") == ("30s" if name == "openreports" else "15s"),
              f"--lease-duration {arg('--lease-duration')!r}")
    else:
        check(not any(f in args for f in audit_flags + ["--rollout-configmap"]), "audit off: only --audit-interval 0 is passed")
    # Both Deployments: the pod's name and namespace (the controller's Lease identity and
    # namespace; a serving pod's name in the rollout ConfigMap's counts).
    for d in serving + controllers:
        env = {e["name"]: e for e in d["spec"]["template"]["spec"]["containers"][0].get("env") or []}
        for var, field in (("POD_NAME", "metadata.name"), ("POD_NAMESPACE", "metadata.namespace")):
            check(env.get(var, {}).get("valueFrom", {}).get("fieldRef", {}).get("fieldPath") == field,
                  f"{d['metadata']['name']}: env {var} from the downward API ({field})")
    # The audit's namespaces are the validating webhook's namespaces.
    validating = [wh for cfg in kind("ValidatingWebhookConfiguration") for wh in cfg["webhooks"]
                  if wh["name"] == "validate.poolguard.io"][0]
    selector = arg("--audit-namespace-selector")
    if audit_on:
        try:
            same = parse_selector(selector) == webhook_selector(validating["namespaceSelector"])
        except ValueError as e:
            same = False
            check(False, str(e))
        check(same, f"--audit-namespace-selector {selector!r} differs from the validating webhook's "
                    f"namespaceSelector {validating['namespaceSelector']}")
    expected_selector = {
        "default": f"kubernetes.io/metadata.name notin ({namespace},kube-system)",
        "url": f"poolguard-bench=on,agentpool,kubernetes.io/metadata.name notin ({namespace},kube-system)",
        "policies": f"team.example.com/pool,kubernetes.io/metadata.name notin ({namespace},kube-system,monitoring)",
        "selector": "example.com/tier=gold,poolguard=enabled,agentpool,"
                    f"kubernetes.io/metadata.name notin ({namespace},kube-system,monitoring,cert-manager)",
    }
    if name in expected_selector:
        check(selector == expected_selector[name], f"--audit-namespace-selector {selector!r}, want {expected_selector[name]!r}")
    if name == "default":
        print(f"[helm-lint] audit default: --audit-namespace-selector {selector!r}", file=sys.stderr)
    # RBAC: the audit's reads and report writes in the controller's ClusterRole, none of them in
    # the serving one (<fullname>); both read the nodes.
    def grants_of(role_name):
        grants = collections.defaultdict(set)
        for role in kind("ClusterRole"):
            if role["metadata"]["name"] != role_name:
                continue
            for rule in role["rules"]:
                if "resourceNames" not in rule:
                    for g in rule["apiGroups"]:
                        for r in rule["resources"]:
                            grants[(g, r)] |= set(rule["verbs"])
        return grants
    for role_name, is_controller in ((f"{fullname}-controller", True), (fullname, False)):
        grants = grants_of(role_name)
        for gr in READ:
            want = {"get", "list"} if audit_on and rbac and is_controller else set()
            check(grants.get(gr, set()) == want, f"ClusterRole {role_name} grants {sorted(grants.get(gr, set()))} on {gr}, want {sorted(want)}")
        # The node watch cache (placement policies) and the audit's node reads, audit on or off.
        want = {"get", "list", "watch"} if rbac and (controllers or not is_controller) else set()
        check(grants.get(("", "nodes"), set()) == want,
              f"ClusterRole {role_name} grants {sorted(grants.get(('', 'nodes'), set()))} on nodes, want {sorted(want)}")
        # The namespace reports and the cluster report (of cluster-scoped kinds constraints match).
        for other_name, other in APIS.items():
            for resource in (other["resource"], "cluster" + other["resource"]):
                gr = (other["group"], resource)
                want = {"get", "list", "create", "patch", "delete"} \
                    if audit_on and rbac and is_controller and other_name == api_name else set()
                check(grants.get(gr, set()) == want, f"ClusterRole {role_name} grants {sorted(grants.get(gr, set()))} on {gr}, want {sorted(want)}")
    # The serving pods' Role: progressive enforcement's state read (get/list/watch) and their
    # admission counts patched into its counts ConfigMap, each by name, neither created; bound to
    # the serving ServiceAccount.
    counts = f"{rollouts}-counts"
    serving_roles = [r for r in kind("Role") if r["metadata"]["name"] == fullname]
    check(len(serving_roles) == (1 if audit_on and rbac else 0), "the serving pods' Role only with the audit on and rbac.create")
    for role in serving_roles:
        check(role["metadata"]["namespace"] == namespace, "the serving pods' Role is in the release namespace")
        want = [{"apiGroups": [""], "resources": ["configmaps"], "resourceNames": [rollouts], "verbs": ["get", "list", "watch"]},
                {"apiGroups": [""], "resources": ["configmaps"], "resourceNames": [counts], "verbs": ["patch"]}]
        check(role["rules"] == want, f"the serving pods' Role grants {role['rules']}, want get/list/watch on ConfigMap "
                                     f"{rollouts} and patch on ConfigMap {counts} only")
        bindings = [b for b in kind("RoleBinding") if b["roleRef"]["name"] == fullname]
        check(len(bindings) == 1 and bindings[0]["roleRef"]["kind"] == "Role" and bindings[0]["subjects"] == [
            {"kind": "ServiceAccount", "name": serve_dep["spec"]["template"]["spec"]["serviceAccountName"], "namespace": namespace}],
            "the serving pods' Role is bound to the serving ServiceAccount")
    lease_roles = [r for r in kind("Role") if r["metadata"]["name"] == lease]
    check(len(lease_roles) == (1 if audit_on and rbac else 0), "the Lease Role only with the audit on and rbac.create")
    for role in lease_roles:
        check(role["metadata"]["namespace"] == namespace, "the Lease Role is in the release namespace")
        verbs = set()
        rollout_verbs = set()
        counts_verbs = set()
        check("--rollout-configmap" in args and args[args.index("--rollout-configmap") + 1] == rollouts,
              f"--rollout-configmap {rollouts}")
        for rule in role["rules"]:
            if rule["resources"] == ["configmaps"]:
                # Progressive enforcement's state: get/patch only on its ConfigMap.
                check(rule["apiGroups"] == [""], "configmaps in the core group")
                # Only create is unrestricted; get/patch/list/watch only on its ConfigMap
                # (the watch lists with metadata.name=<name>, authorized by resourceNames), and
                # get only on the serving pods' counts ConfigMap.
                if rule.get("resourceNames") == [counts]:
                    counts_verbs |= set(rule["verbs"])
                    continue
                check(set(rule["verbs"]) <= {"create"} or rule.get("resourceNames") == [rollouts],
                      f"get/patch/list/watch only on ConfigMap {rollouts}")
                rollout_verbs |= set(rule["verbs"])
                continue
            if rule["resources"] == ["events"]:
                check(sorted(rule["apiGroups"]) == ["", "events.k8s.io"] and set(rule["verbs"]) == {"create", "patch"},
                      "events: create and patch")
                continue
            check(rule["apiGroups"] == ["coordination.k8s.io"] and rule["resources"] == ["leases"],
                  "the Lease Role grants leases, the rollout ConfigMap and events only")
            check(set(rule["verbs"]) <= {"create"} or rule.get("resourceNames") == [lease],
                  f"get/update/patch only on Lease {lease}")
            verbs |= set(rule["verbs"])
        # The lease manager gets, creates and patches its Lease; it never lists or watches.
        check(verbs == {"get", "create", "update", "patch"}, f"Lease verbs {sorted(verbs)}")
        check(rollout_verbs == {"get", "patch", "create", "list", "watch"}, f"rollout ConfigMap verbs {sorted(rollout_verbs)}")
        # The leader reads the serving pods' counts (it makes that ConfigMap with create above).
        check(counts_verbs == {"get"}, f"counts ConfigMap {counts} verbs {sorted(counts_verbs)}, want get")
        bindings = [b for b in kind("RoleBinding") if b["roleRef"]["name"] == lease]
        check(len(bindings) == 1 and bindings[0]["subjects"] == [
            {"kind": "ServiceAccount", "name": pod.get("serviceAccountName"), "namespace": namespace}],
            "the Lease Role is bound to the controller's ServiceAccount")
        check(pod.get("serviceAccountName") == f"{fullname}-controller", f"the controller runs as {fullname}-controller")
    # CRDs.
    crds = {d["metadata"]["name"]: d for d in kind("CustomResourceDefinition")}
    want_crds = set()
    if audit_on and name != "no-crd":
        want_crds = {f"{plural}.{api['group']}" for plural, _, _ in api["crds"].values()}
    check(set(crds) == want_crds, f"CRDs {sorted(crds)}, want {sorted(want_crds)}")
    for crd_kind, (plural, short, scope) in api["crds"].items():
        crd = crds.get(f"{plural}.{api['group']}")
        if not crd:
            continue
        meta, spec = crd["metadata"], crd["spec"]
        check((meta.get("annotations") or {}).get("helm.sh/resource-policy") == "keep", f"{plural}: kept on uninstall")
        check(meta["labels"] == serve_dep["metadata"]["labels"], f"{plural}: the chart's labels")
        check(spec["group"] == api["group"] and spec["scope"] == scope
              and spec["names"]["kind"] == crd_kind and spec["names"]["plural"] == plural
              and spec["names"]["shortNames"] == [short], f"{plural}: group, scope or names")
        check(len(spec["versions"]) == 1, f"{plural}: one version")
        version = spec["versions"][0]
        check(version["name"] == api["version"] and version["served"] and version["storage"],
              f"{plural}: {api['version']} served and stored")
        check([col["name"] for col in version["additionalPrinterColumns"]] == ["Pass", "Fail", "Warn", "Error", "Skip", "Age"],
              f"{plural}: printer columns")
        schema = version["schema"]["openAPIV3Schema"]
        problems = []
        structural(schema, "", problems)
        report = copy.deepcopy(sample)
        report["apiVersion"] = f"{api['group']}/{api['version']}"
        report["kind"] = crd_kind
        if api_name == "openreports":
            report["source"] = "poolguard"
        conforms(report, schema, "", problems)
        for p in problems:
            check(False, f"{plural}: {p}")
        check(("source" in schema["properties"]) == (api_name == "openreports"),
              f"{plural}: a report-level source only in openreports.io")
    mine = [e for e in errors if e.startswith(f"{name}: ")]
    print(f"[helm-lint] audit {name}: {'FAILED' if mine else 'ok'}", file=sys.stderr)
for e in errors:
    print(f"[helm-lint] FAIL: {e}", file=sys.stderr)
sys.exit(1 if errors else 0)
PY
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
if python3 - "$out" "$chart" "${cases[@]%%|*}" <<'PY'; then
import json, sys, yaml
out, chart, names = sys.argv[1], sys.argv[2], sys.argv[3:]
errors = []
rules_text = open(f"{chart}/files/alerts.rules.yaml").read()
for name in names:
    docs = [d for d in yaml.safe_load_all(open(f"{out}/{name}.yaml")) if d]
    rules = [d for d in docs if d.get("kind") == "PrometheusRule"]
    if name != "prometheusrule":
        if rules:
            errors.append(f"{name}: a PrometheusRule is rendered ({'prometheusRule.enabled=false' if name == 'prometheusrule-off' else 'no monitoring.coreos.com/v1 API'})")
        continue
    if len(rules) != 1:
        errors.append(f"{name}: {len(rules)} PrometheusRules, want 1")
        continue
    rule = rules[0]
    want = yaml.safe_load(rules_text.replace('job="poolguard"', 'job="pg-metrics"'))
    if rule["spec"] != want:
        errors.append(f"{name}: the PrometheusRule's spec is not {chart}/files/alerts.rules.yaml with job=\"pg-metrics\"")
    if rule["apiVersion"] != "monitoring.coreos.com/v1" or rule["metadata"]["labels"].get("release") != "prometheus":
        errors.append(f"{name}: apiVersion {rule['apiVersion']}, labels {rule['metadata']['labels']}")
    alerts = [r["alert"] for g in rule["spec"]["groups"] for r in g["rules"] if "alert" in r]
    monitors = [d for d in docs if d.get("kind") == "ServiceMonitor"]
    if not monitors or monitors[0]["spec"].get("jobLabel") != "app.kubernetes.io/name":
        errors.append(f"{name}: the ServiceMonitor does not name its job by app.kubernetes.io/name")
    # It scrapes both operations ports: the serving pods' (job poolguard, what the rules select)
    # and the controller's (job poolguard-controller: registration, certificates, audit).
    selector = monitors[0]["spec"]["selector"] if monitors else {}
    def selected(labels):
        if any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
            return False
        for e in selector.get("matchExpressions") or []:
            if e["operator"] != "In" or labels.get(e["key"]) not in e["values"]:
                return False
        return True
    metrics_services = [d for d in docs if d.get("kind") == "Service" and selected(d["metadata"].get("labels") or {})]
    scraped = sorted((d["metadata"]["labels"]["app.kubernetes.io/name"], d["spec"]["selector"].get("app.kubernetes.io/name"))
                     for d in metrics_services)
    if scraped != [("poolguard", "poolguard"), ("poolguard-controller", "poolguard-controller")]:
        errors.append(f"{name}: the ServiceMonitor scrapes (job, pods) {scraped}, want the serving pods and the controller")
    print(f"[helm-lint] prometheusrule: {len(alerts)} alerts: {', '.join(alerts)}", file=sys.stderr)
# The dashboard ConfigMap: only when asked for, the dashboard file itself, with the sidecar's label.
dashboard_text = open(f"{chart}/files/grafana-dashboard.json").read()
for name in names:
    docs = [d for d in yaml.safe_load_all(open(f"{out}/{name}.yaml")) if d]
    maps = [d for d in docs if d.get("kind") == "ConfigMap" and d["metadata"]["name"].endswith("-grafana-dashboard")]
    if name != "grafana-dashboard":
        if maps:
            errors.append(f"{name}: a Grafana dashboard ConfigMap although grafanaDashboard.enabled is false")
        continue
    if len(maps) != 1:
        errors.append(f"{name}: {len(maps)} dashboard ConfigMaps, want 1")
        continue
    cm = maps[0]
    if json.loads(cm["data"]["poolguard.json"]) != json.loads(dashboard_text):
        errors.append(f"{name}: the ConfigMap's poolguard.json is not {chart}/files/grafana-dashboard.json")
    if cm["metadata"]["labels"].get("grafana_dashboard") != "1" or cm["metadata"]["namespace"] != "monitoring":
        errors.append(f"{name}: labels {cm['metadata']['labels']}, namespace {cm['metadata']['namespace']}")
for e in errors:
    print(f"[helm-lint] FAIL: {e}", file=sys.stderr)
sys.exit(1 if errors else 0)
PY
    passed=$((passed + 1))
else
    failures=$((failures + 1))
fi

echo "${passed} passed, ${failures} failed"
if (( failures > 0 )); then
    exit 1
fi
log "all checks passed (rendered manifests in ${out}/)"
