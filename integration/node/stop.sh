#!/usr/bin/env bash
# Stop a node started by start.sh and undo what it changed on this machine:
#
#   integration/node/stop.sh NODE_DIR [--purge]
#
# 1. kube-proxy and kubelet get SIGTERM (SIGKILL after 15 s); kube-proxy's nftables tables
#    (ip/ip6 kube-proxy) are deleted;
# 2. every pod sandbox and container containerd still runs in its k8s.io namespace is stopped and
#    removed (so their shims, mounts and network namespaces go), then containerd is stopped;
# 3. mounts left below NODE_DIR (kubelet volumes, the kubelet root's shared bind mount, netns
#    files) are unmounted, the node's cgroups removed, the bridge and our nftables table deleted.
# A pid is only signalled while it still runs the program recorded for it.
# --purge also deletes NODE_DIR.
set -uo pipefail

log() { printf '[node] %s\n' "$*" >&2; }

[[ $# -ge 1 ]] || {
    log "usage: $0 NODE_DIR [--purge]"
    exit 2
}
node_dir="$(cd "$1" 2>/dev/null && pwd)" || {
    log "no such node dir: $1"
    exit 1
}
purge=0
[[ "${2:-}" == "--purge" ]] && purge=1

declare -A undo=()
if [[ -f "${node_dir}/cleanup.env" ]]; then
    while IFS='=' read -r k v; do
        [[ -n "${k}" ]] && undo["${k}"]="${v}"
    done <"${node_dir}/cleanup.env"
fi

runs() { # pid name
    local comm stat
    comm="$(cat "/proc/$1/comm" 2>/dev/null)" || return 1
    [[ "${comm}" == "${2:0:15}" ]] || return 1
    stat="$(cat "/proc/$1/stat" 2>/dev/null)" || return 1
    stat="${stat##*) }"
    [[ "${stat:0:1}" != Z ]]
}
pid_of() { awk -v n="$1" '$2 == n { print $1 }' "${node_dir}/pids" 2>/dev/null | tail -n1; }
stop_proc() { # name
    local pid deadline
    pid="$(pid_of "$1")"
    [[ -n "${pid}" ]] && runs "${pid}" "$1" || return 0
    log "stopping $1 (pid ${pid})"
    kill -TERM "${pid}" 2>/dev/null
    deadline=$((SECONDS + 15))
    while runs "${pid}" "$1"; do
        if ((SECONDS >= deadline)); then
            log "killing $1 (pid ${pid})"
            kill -KILL "${pid}" 2>/dev/null
            sleep 0.2
            break
        fi
        sleep 0.2
    done
}

stop_proc kube-proxy
if [[ -n "${undo[kube_proxy]:-}" ]]; then
    for family in ip ip6; do
        nft delete table "${family}" kube-proxy 2>/dev/null && log "deleted nftables table ${family} kube-proxy"
    done
fi
stop_proc kubelet
# kubelet adds these iptables chains whenever iptables is installed (one node per machine, so
# they are this node's).
if [[ -n "${undo[kube_proxy]:-}" ]]; then
    for ipt in iptables ip6tables; do
        command -v "${ipt}" >/dev/null 2>&1 || continue
        for chain in INPUT OUTPUT; do
            while "${ipt}" -w 5 -t filter -D "${chain}" -j KUBE-FIREWALL 2>/dev/null; do :; done
        done
        for table_chain in filter/KUBE-FIREWALL filter/KUBE-KUBELET-CANARY nat/KUBE-KUBELET-CANARY \
            mangle/KUBE-KUBELET-CANARY mangle/KUBE-IPTABLES-HINT; do
            "${ipt}" -w 5 -t "${table_chain%/*}" -F "${table_chain#*/}" 2>/dev/null &&
                "${ipt}" -w 5 -t "${table_chain%/*}" -X "${table_chain#*/}" 2>/dev/null
        done
    done
fi

sock="${undo[containerd_sock]:-}"
ctr_bin="${undo[bin]:-}/ctr"
if [[ -n "${sock}" && -S "${sock}" && -x "${ctr_bin}" ]] && runs "$(pid_of containerd)" containerd; then
    ctr() { timeout 30 "${ctr_bin}" --address "${sock}" --namespace k8s.io "$@"; }
    # Containers first, sandboxes last: kill every task, then delete tasks and containers.
    mapfile -t ids < <(ctr containers ls -q 2>/dev/null)
    if ((${#ids[@]})); then
        log "removing ${#ids[@]} containers"
        for id in "${ids[@]}"; do ctr tasks kill -s SIGKILL "${id}" >/dev/null 2>&1; done
        sleep 1
        for id in "${ids[@]}"; do
            ctr tasks delete -f "${id}" >/dev/null 2>&1
            ctr containers delete "${id}" >/dev/null 2>&1
        done
    fi
fi
stop_proc containerd
# Shims outlive containerd by design; those of this node run with our socket in their command line.
if [[ -n "${sock}" ]]; then
    for p in /proc/[0-9]*; do
        [[ "$(cat "${p}/comm" 2>/dev/null)" == containerd-shim ]] || continue
        if tr '\0' ' ' <"${p}/cmdline" 2>/dev/null | grep -qF -- "${sock}"; then
            log "killing leftover shim ${p#/proc/}"
            kill -KILL "${p#/proc/}" 2>/dev/null
        fi
    done
fi

# Mounts below the node dir, deepest first.
mapfile -t mounts < <(awk -v d="${node_dir}/" 'index($5, d) == 1 { print $5 }' /proc/self/mountinfo | sort -r | uniq)
for m in "${mounts[@]}"; do
    umount "${m}" 2>/dev/null || umount -l "${m}" 2>/dev/null
done
((${#mounts[@]})) && log "unmounted ${#mounts[@]} mounts below ${node_dir}"
kroot="${undo[kubelet_root]:-}"
if [[ -n "${kroot}" ]] && grep -qF " ${kroot} " /proc/self/mountinfo; then
    umount "${kroot}" 2>/dev/null || umount -l "${kroot}" 2>/dev/null
fi

# cgroups: the node's root in every v1 hierarchy (and the unified one), deepest first.
cg="${undo[cgroup_root]:-}"
if [[ -n "${cg}" && "${cg}" == /poolguard-node-* ]]; then
    for h in /sys/fs/cgroup/*/; do
        [[ -d "${h}${cg#/}" ]] || continue
        find "${h}${cg#/}" -depth -type d -exec rmdir {} + 2>/dev/null
        [[ -d "${h}${cg#/}" ]] && log "warning: could not remove cgroup ${h}${cg#/}"
    done
fi

if [[ -n "${undo[bridge]:-}" ]]; then
    ip link del "${undo[bridge]}" 2>/dev/null && log "deleted bridge ${undo[bridge]}"
fi
if [[ -n "${undo[guard_table]:-}" ]]; then
    nft delete table inet "${undo[guard_table]}" 2>/dev/null
fi

[[ -f "${node_dir}/pids" ]] && : >"${node_dir}/pids"
: >"${node_dir}/cleanup.env" 2>/dev/null
if ((purge)); then
    rm -rf -- "${node_dir}"
fi
exit 0
