# Sourced by run.sh: what kind's podman provider needs on these machines (Debian 12's podman 4.3,
# runc, cgroup v1, root without CAP_SYS_RESOURCE). Sets KIND_EXPERIMENTAL_PROVIDER=podman and
# CONTAINERS_CONF, and makes sure of /lib/modules and of a `kind` network with DNS.
#
# * podman asks the runtime for nofile 1048576 and an unlimited nproc, above the hard limits
#   root may raise here (`error setting rlimit type 7: operation not permitted`); a
#   containers.conf whose default_ulimits stay below them fixes it for kind's own `podman run`.
# * kind mounts /lib/modules into every node (`statfs /lib/modules: no such file or directory`
#   where the machine has none).
# * the workers reach the control plane by name: podman's CNI backend resolves container names
#   on a network only through the dnsname plugin, and only on a network created once the plugin
#   was installed, so a `kind` network without it is recreated (when no container uses it).

kind_podman_setup() { # work-dir
    local conf="$1/containers.conf" hard_nofile hard_nproc nofile nproc
    hard_nofile="$(ulimit -H -n)"
    hard_nproc="$(ulimit -H -u)"
    nofile=20000 nproc=32768
    [[ "${hard_nofile}" == unlimited ]] || ((hard_nofile >= nofile)) || nofile="${hard_nofile}"
    [[ "${hard_nproc}" == unlimited ]] || ((hard_nproc >= nproc)) || nproc="${hard_nproc}"
    printf '[containers]\ndefault_ulimits = ["nofile=%s:%s", "nproc=%s:%s"]\n' \
        "${nofile}" "${nofile}" "${nproc}" "${nproc}" >"${conf}"
    export CONTAINERS_CONF="${conf}" KIND_EXPERIMENTAL_PROVIDER=podman
    [[ -d /lib/modules ]] || mkdir -p /lib/modules
    local dnsname=""
    for d in /usr/lib/cni /opt/cni/bin /usr/libexec/cni; do
        [[ -x "${d}/dnsname" ]] && dnsname="${d}/dnsname"
    done
    local backend
    backend="$(podman info --format '{{.Host.NetworkBackend}}' 2>/dev/null || echo cni)"
    if [[ "${backend}" == cni ]]; then
        [[ -n "${dnsname}" ]] || {
            printf '[kind] error: the CNI plugin dnsname is missing (Debian: apt-get install -y golang-github-containernetworking-plugin-dnsname)\n' >&2
            return 1
        }
        if podman network exists kind && [[ "$(podman network inspect kind --format '{{.DNSEnabled}}')" != true ]]; then
            printf '[kind] recreating the podman network kind with DNS (dnsname)\n' >&2
            podman network rm kind >/dev/null
        fi
    fi
}
