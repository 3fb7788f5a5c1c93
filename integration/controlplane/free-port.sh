# shellcheck shell=bash
# Sourced by the scripts that start servers on loopback (controlplane/start.sh, e2e.sh,
# bench/e2e-latency.sh). The caller defines `die`.
#
# pick_port NAME: sets the variable NAME to a free high port on 127.0.0.1, never one this shell
# has handed out before (the servers given earlier ports may not be listening yet).

port_in_use() {
    if command -v ss >/dev/null 2>&1; then
        ss -Htan 2>/dev/null | awk '{ print $4 }' | grep -qE "[:.]$1\$"
    else
        (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
    fi
}

pick_port() {
    local p i
    for ((i = 0; i < 200; i++)); do
        p=$((20000 + (RANDOM * 32768 + RANDOM) % 40000))
        [[ "${picked_ports:- }" == *" ${p} "* ]] && continue
        port_in_use "${p}" && continue
        picked_ports="${picked_ports:- }${p} "
        printf -v "$1" '%s' "${p}"
        return 0
    done
    die "no free port found"
}
