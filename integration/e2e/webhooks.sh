#!/usr/bin/env bash
# Render poolguard's two webhook configurations from charts/poolguard (the one definition of their
# rules, failure policies, timeouts and namespaceSelectors) for a poolguard that runs outside the
# cluster, as integration/e2e.sh and bench/e2e-latency.sh run it:
#
#   integration/e2e/webhooks.sh URL CA_FILE LABEL [helm template arguments...] > webhooks.yaml
#
#   URL      base URL of poolguard, e.g. https://127.0.0.1:8443 (the webhooks call URL/mutate and
#            URL/validate: chart value webhook.url)
#   CA_FILE  PEM of the CA that signed poolguard's serving certificate (the caBundle)
#   LABEL    poolguard's namespaceLabel; both webhooks only see namespaces that carry it
#            (validating.requireNamespaceLabel), so with poolguard down (failurePolicy Fail)
#            pods in mapped namespaces are refused and everything else is unaffected
#
# Further arguments go to `helm template`, e.g.
# `--set-string webhook.namespaceMatchLabels.poolguard-bench=on`. The configurations are named
# poolguard-mutating and poolguard-validating (release poolguard). helm comes from HELM or
# integration/helm/helm.sh.
set -euo pipefail

die() { printf '[webhooks] error: %s\n' "$*" >&2; exit 1; }
(($# >= 3)) || die "usage: $0 URL CA_FILE LABEL [helm template arguments...]"
url="$1" ca_file="$2" label="$3"
shift 3
[[ -s "${ca_file}" ]] || die "CA file ${ca_file} is missing or empty"

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
helm="${HELM:-$(bash "${root}/integration/helm/helm.sh" | tail -n1)}"

# webhook.registration=chart: the chart renders the webhooks (poolguard runs outside the cluster
# and registers nothing). certificates.mode=provided renders the caBundle; its secretName is only used by the Deployment,
# which --show-only leaves out.
"${helm}" template poolguard "${root}/charts/poolguard" --namespace poolguard \
    --show-only templates/mutatingwebhookconfiguration.yaml \
    --show-only templates/validatingwebhookconfiguration.yaml \
    --set webhook.registration=chart \
    --set certificates.mode=provided \
    --set certificates.secretName=unused \
    --set-file certificates.caBundle="${ca_file}" \
    --set-string webhook.url="${url}" \
    --set-string config.namespaceLabel="${label}" \
    --set validating.requireNamespaceLabel=true \
    "$@"
