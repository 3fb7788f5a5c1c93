#!/usr/bin/env bash
# Registers a fake Node that the scheduler can bind pods to: labelled with a pool, Ready, with
# capacity, and without the not-ready taint (there is no kubelet, so run kube-controller-manager
# without its node lifecycle controller to keep it so).
#
#   KUBECTL=path/to/kubectl integration/controlplane/fake-node.sh NAME LABEL_KEY POOL [ALLOCATABLE]
#
# ALLOCATABLE is a JSON object of resources, default {"cpu": "8", "memory": "32Gi", "pods": "110"}
# (capacity is the same). Uses KUBECONFIG from the environment; KUBECTL defaults to kubectl on
# PATH.
set -euo pipefail
[[ $# -eq 3 || $# -eq 4 ]] || { echo "usage: $0 NAME LABEL_KEY POOL [ALLOCATABLE]" >&2; exit 2; }
name="$1" key="$2" pool="$3"
default_allocatable='{"cpu": "8", "memory": "32Gi", "pods": "110"}'
allocatable="${4:-${default_allocatable}}"
k() { "${KUBECTL:-kubectl}" --request-timeout=10s "$@"; }

k apply -f - >/dev/null <<YAML
apiVersion: v1
kind: Node
metadata:
  name: ${name}
  labels:
    ${key}: "${pool}"
    kubernetes.io/os: linux
    kubernetes.io/arch: amd64
    kubernetes.io/hostname: ${name}
YAML
ts="$(date -u +%Y-%m-%dT%H:%M:%SZ)"
k patch node "${name}" --subresource=status --type=merge -p "{\"status\": {
    \"capacity\": ${allocatable},
    \"allocatable\": ${allocatable},
    \"conditions\": [{\"type\": \"Ready\", \"status\": \"True\", \"reason\": \"KubeletReady\",
        \"message\": \"fake node for poolguard tests\",
        \"lastHeartbeatTime\": \"${ts}\", \"lastTransitionTime\": \"${ts}\"}]}}" >/dev/null
# The API server taints new nodes not-ready; the (disabled) node lifecycle controller would remove
# that taint once the node is Ready.
k patch node "${name}" --type=merge -p '{"spec": {"taints": null}}' >/dev/null
