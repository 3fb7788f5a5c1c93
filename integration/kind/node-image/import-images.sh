#!/bin/bash
# Import every archive under /kind/images into containerd's k8s.io namespace (once per node:
# /var/lib/containerd survives a restart of the node's container).
set -euo pipefail
for _ in $(seq 60); do
    ctr version >/dev/null 2>&1 && break
    sleep 1
done
for tar in /kind/images/*.tar; do
    ctr --namespace=k8s.io images import --all-platforms "${tar}" >/dev/null
done
