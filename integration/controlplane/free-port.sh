# shellcheck shell=bash
# Sourced by the scripts that start servers on loopback (controlplane/start.sh, e2e.sh, the
# benches, ...). The caller defines `die`.
#
# pick_port NAME: sets the variable NAME to a free port on 127.0.0.1 outside the ephemeral range,
# never one this shell has handed out before (the servers given earlier ports may not be listening
# yet).

port_in_use() {
    if command -v ss >/dev/null 2>&1; then
        ss -Htan 2>/dev/null | awk '{ print $4 }' | grep -qE "[:.]$1\$"
    else
        (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
    fi
}

# The ports handed out lie between 15000 (above the 10xxx defaults of Kubernetes' components) and
# the kernel's ephemeral range (net.ipv4.ip_local_port_range), from which every outgoing
# connection takes its local port: a port picked inside it could be taken by one (kube-apiserver
# alone opens hundreds to etcd) between the pick and the server's bind, or while a restarted server
# is down. Where the range leaves no room below it, above it; only where it covers nearly
# everything, anywhere from 20000 up.
pick_port_range() { # -> "first count"
    local lo=32768 hi=60999
    read -r lo hi </proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || true
    if ((lo - 15000 >= 2000)); then
        printf '%s %s\n' 15000 $((lo - 15000))
    elif ((65535 - hi >= 2000)); then
        printf '%s %s\n' $((hi + 1)) $((65535 - hi))
    else
        printf '%s %s\n' 20000 40000
    fi
}

pick_port() {
    local p i first count
    read -r first count < <(pick_port_range)
    for ((i = 0; i < 200; i++)); do
        p=$((first + (RANDOM * 32768 + RANDOM) % count))
        [[ "${picked_ports:- }" == *" ${p} "* ]] && continue
        port_in_use "${p}" && continue
        picked_ports="${picked_ports:- }${p} "
        printf -v "$1" '%s' "${p}"
        return 0
    done
    die "no free port found"
}
