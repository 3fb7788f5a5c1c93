#!/usr/bin/env bash
# Waits until poolguard's webhooks are in effect: the API server picks webhook configurations up
# asynchronously, so probe with server-side dry runs in a labelled namespace until a pod gets
# POOL's nodeSelector (mutating) and a Deployment asking for OTHER_POOL is refused (validating).
#
#   KUBECTL=path/to/kubectl integration/e2e/await-webhooks.sh LABEL POOL OTHER_POOL TIMEOUT_SECONDS
#
# Uses KUBECONFIG from the environment. Exits non-zero with the last answer when time runs out.
set -euo pipefail
[[ $# -eq 4 ]] || { echo "usage: $0 LABEL POOL OTHER_POOL TIMEOUT_SECONDS" >&2; exit 2; }
label="$1" pool="$2" other="$3" timeout="$4"
k() { "${KUBECTL:-kubectl}" --request-timeout=10s "$@"; }

ns="pg-webhook-probe-${RANDOM}"
k create namespace "${ns}" >/dev/null
trap 'k delete namespace "${ns}" --wait=false >/dev/null 2>&1 || true' EXIT
k label namespace "${ns}" "${label}=${pool}" >/dev/null
pod="{\"apiVersion\": \"v1\", \"kind\": \"Pod\", \"metadata\": {\"name\": \"probe\", \"namespace\": \"${ns}\"},
  \"spec\": {\"containers\": [{\"name\": \"c\", \"image\": \"registry.k8s.io/pause:3.10\"}]}}"
deploy="{\"apiVersion\": \"apps/v1\", \"kind\": \"Deployment\", \"metadata\": {\"name\": \"probe\", \"namespace\": \"${ns}\"},
  \"spec\": {\"selector\": {\"matchLabels\": {\"app\": \"probe\"}}, \"template\": {\"metadata\": {\"labels\": {\"app\": \"probe\"}},
  \"spec\": {\"nodeSelector\": {\"${label}\": \"${other}\"}, \"containers\": [{\"name\": \"c\", \"image\": \"registry.k8s.io/pause:3.10\"}]}}}}"
deadline=$((SECONDS + timeout))
until out="$(k create --dry-run=server -o jsonpath='{.spec.nodeSelector}' -f - <<< "${pod}" 2>&1)" &&
    [[ "${out}" == *"${pool}"* ]]; do
    ((SECONDS < deadline)) || { echo "the mutating webhook did not become active within ${timeout}s: ${out}" >&2; exit 1; }
    sleep 0.5
done
echo "mutating webhook in effect: a dry-run pod got nodeSelector ${out}"
# Expected to fail: the template asks for the other pool.
until ! out="$(k create --dry-run=server -f - <<< "${deploy}" 2>&1)" &&
    [[ "${out}" == *"${label}=\"${other}\""* ]]; do
    ((SECONDS < deadline)) || { echo "the validating webhook did not become active within ${timeout}s: ${out}" >&2; exit 1; }
    sleep 0.5
done
echo "validating webhook in effect: a Deployment asking for ${other} was refused"
