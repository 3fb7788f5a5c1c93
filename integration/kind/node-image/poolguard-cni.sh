#!/bin/bash
# The node's pod network, in place of kindnetd. Once kubelet has joined (its kubeconfig exists):
# * writes /etc/cni/net.d/10-poolguard.conflist: ptp + host-local over this node's podCIDR
#   (kubelet's own credentials may read its own Node);
# * keeps the routes to the other nodes' pods, every 5 s: on the control plane (which has
#   kubeadm's admin.conf) one route per node, its podCIDR via its InternalIP; on a worker (whose
#   credentials may read no other Node) one route for the cluster's pod subnet (kubeadm-config,
#   which nodes may read) via the control plane, which forwards to the right node.
# Runs as a systemd unit of the node image (poolguard-cni.service).
set -uo pipefail
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
kubelet_conf=/etc/kubernetes/kubelet.conf
admin_conf=/etc/kubernetes/admin.conf
conf=/etc/cni/net.d/10-poolguard.conflist
node="$(hostname)"

write_conf() { # podCIDR
    mkdir -p "$(dirname "${conf}")"
    cat >"${conf}.tmp" <<CONF
{
  "cniVersion": "1.0.0",
  "name": "poolguard-kind",
  "plugins": [
    {
      "type": "ptp",
      "ipMasq": false,
      "mtu": 1500,
      "ipam": {
        "type": "host-local",
        "ranges": [[{"subnet": "$1"}]],
        "routes": [{"dst": "0.0.0.0/0"}]
      }
    },
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
CONF
    mv -f "${conf}.tmp" "${conf}"
    echo "CNI configuration written for $1"
}

while :; do
    sleep 2
    [[ -s "${kubelet_conf}" ]] || continue
    k=(kubectl --kubeconfig "${kubelet_conf}" --request-timeout=10s)
    if [[ ! -s "${conf}" ]]; then
        cidr="$("${k[@]}" get node "${node}" -o jsonpath='{.spec.podCIDR}' 2>/dev/null)" || continue
        [[ -n "${cidr}" ]] && write_conf "${cidr}"
    fi
    if [[ -s "${admin_conf}" ]]; then
        kubectl --kubeconfig "${admin_conf}" --request-timeout=10s get nodes -o json 2>/dev/null |
            jq -r --arg n "${node}" '.items[] | select(.metadata.name != $n and .spec.podCIDR != null)
                | [.spec.podCIDR, (.status.addresses[] | select(.type == "InternalIP") | .address)] | @tsv' |
            while IFS=$'\t' read -r other via; do
                [[ -n "${via}" ]] && ip route replace "${other}" via "${via}"
            done
    else
        subnet="$("${k[@]}" -n kube-system get configmap kubeadm-config -o jsonpath='{.data.ClusterConfiguration}' 2>/dev/null |
            sed -n 's/^ *podSubnet: *//p' | head -n1)"
        server="$(sed -n 's|^ *server: *https://\([^:/]*\).*|\1|p' "${kubelet_conf}" | head -n1)"
        via="$(getent ahostsv4 "${server}" 2>/dev/null | awk 'NR == 1 { print $1 }')"
        [[ -n "${subnet}" && -n "${via}" ]] && ip route replace "${subnet}" via "${via}"
    fi
    sleep 3
done
