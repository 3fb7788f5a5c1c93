#!/usr/bin/env bash
# The whole test suite (up to 75 minutes cold on 2 cores, root, about 25 GB of disk; what it needs is
# checked first by integration/preflight.sh, and `.ci/run` installs it):
#   1. unit, table, CLI and HTTPS server tests of every workspace crate (cargo test: the pure core,
#      the shells, the test client; of the end-to-end crate, its unit tests here, its suites in
#      steps 4 and 5);
#   2. the shipped Rego policies' own tests (poolguard policy test), SIT and placement, the
#      README's tour run as printed (integration/readme-tour.sh: `cargo build` and the dev
#      server on 127.0.0.1:8443 and :9090), and a short run of every fuzz target
#      (integration/fuzz/smoke.sh, FUZZ_SECONDS each, default 20);
#   3. the helm chart: lint and render every mode, then install into a throwaway API server
#      (a real helm, built from its Go module when none is installed); the alerting rules
#      (`promtool test rules`, promtool built from the Prometheus Go module) and `promtool check
#      metrics` over a real /metrics scrape (integration/monitoring/test.sh; that the rules and the
#      Grafana dashboard read only metrics poolguard exports is tests/referenced_metrics.rs, step 1);
#   4. end to end against a real control plane built from pinned Go modules (integration/e2e.sh);
#      then Karpenter NodePools that scale from zero: Karpenter's kwok provider and kwok, built
#      from their Go modules, launch the nodes of the NodePools poolguard places pods on
#      (integration/karpenter/test.sh);
#   5. poolguard's own image on a kind cluster (1 control plane + 3 workers, podman, a node image
#      built here), installed with the chart's defaults by helm: replicas on two workers, the
#      securityContext as the runtime applied it, the e2e suites through the Service, operations
#      under load (drain, SIGKILL, a stopped worker) and helm uninstall (integration/kind/run.sh;
#      needs root).
# Steps 3 to 5 build and cache what they need on the first run (see integration/README.md).
set -euo pipefail
cd "$(dirname "$0")/.."

# Each step's heading says when it started (seconds into the run) and how much disk is free: a full
# disk shows up as odd build failures (a linker killed by SIGBUS), and this says which.
step() { echo "== $* (at ${SECONDS} s; free disk: $(df -h --output=avail . | tail -1 | tr -d ' '))"; }

# The Go programs and poolguard's image that steps 3 to 5 need are built in the background at the
# lowest CPU priority (nice 19), so that they take only the CPU the steps before them leave idle
# (single-threaded links, tests that wait on servers). Each step waits for what it needs; the
# builders' scripts are the same the steps call, which then find their results cached. A
# background build's output is printed when it is awaited.
background_dir=$(mktemp -d "${TMPDIR:-/tmp}/poolguard-builds.XXXXXX")
declare -A background_pid=() background_start=()
background() { # name command...
    local name=$1
    shift
    # Its own process group (job control), so that stopping it stops its compilers too; not its
    # own session (setsid), which would put it in its own scheduler autogroup, where nice counts
    # only against itself and it would take half the CPU from the steps in the foreground.
    set -m
    # The subshell writes when the build ended (seconds into the run, as the step headings
    # count), so that the log says which background build the later steps waited for.
    (
        rc=0
        nice -n 19 "$@" || rc=$?
        echo "${SECONDS}" >"${background_dir}/${name}.end"
        exit "${rc}"
    ) >"${background_dir}/${name}.log" 2>&1 &
    background_pid[${name}]=$!
    background_start[${name}]=${SECONDS}
    set +m
    echo "[background] ${name}: started (pid $!)"
}
await() { # name
    local name=$1 start=${SECONDS} rc=0
    wait "${background_pid[${name}]}" || rc=$?
    unset "background_pid[${name}]"
    sed "s/^/[background ${name}] /" "${background_dir}/${name}.log"
    if ((rc != 0)); then
        echo "[background] ${name}: FAILED (exit ${rc})" >&2
        exit 1
    fi
    echo "[background] ${name}: done (ran from ${background_start[${name}]} s to $(cat "${background_dir}/${name}.end") s; waited $((SECONDS - start)) s)"
}
stop_background() {
    local pid
    for pid in "${background_pid[@]}"; do
        kill -- "-${pid}" 2>/dev/null || true
    done
    wait 2>/dev/null || true
    rm -rf -- "${background_dir}"
}
trap stop_background EXIT

step "preflight"
# Everything the later steps need, checked now: one line per missing thing, before ~40 minutes of
# building (integration/preflight.sh).
bash integration/preflight.sh
# helm (step 3), promtool (step 3), the control plane (steps 3 and 4).
background go-tools bash -c 'bash integration/helm/helm.sh >/dev/null &&
    bash integration/monitoring/promtool.sh >/dev/null &&
    integration/controlplane/build.sh >/dev/null'
step "cargo test"
# Every workspace crate but the end-to-end tests, which need a cluster (steps 4 and 5 run them).
cargo test --locked --workspace --exclude poolguard-e2e
# The end-to-end crate's own unit tests need no cluster: its helpers, the faults harness's
# accounting, the chart linter.
cargo test --locked -p poolguard-e2e --lib --bins
step "policy test"
cargo run --locked --quiet -- policy test --policies-dir policies
cargo run --locked --quiet -- policy test --policies-dir policies/placement
step "README tour"
# Every command of the README's "5-minute tour", as printed, against the dev server it starts.
bash integration/readme-tour.sh
step "fuzz smoke (every target ${FUZZ_SECONDS:-20} s)"
FUZZ_SECONDS="${FUZZ_SECONDS:-20}" bash integration/fuzz/smoke.sh
# A CI machine's disk is shared: the fuzz build (a second copy of the dependencies) is not needed
# by the later steps.
if [[ -n ${CI:-} ]]; then rm -rf target/fuzz-build; fi
step "helm chart"
await go-tools
# kind's node image (its Go programs and Debian rootfs), poolguard's image (a musl release build)
# and Policy Reporter (from ../shared/vendor), for step 5, while steps 3 and 4 mostly wait on
# servers.
background kind-images bash -c 'integration/kind/kind.sh >/dev/null &&
    integration/kind/build-node-image.sh >/dev/null &&
    POOLGUARD_CP_BUILD_KUBECTL=1 integration/controlplane/build.sh kubelet kube-proxy kubeadm >/dev/null &&
    integration/image/build.sh >/dev/null &&
    integration/policy-reporter/build.sh >/dev/null'
# Karpenter's kwok provider and kwok (their Go modules, a newer Go toolchain), for step 4.
background karpenter bash integration/karpenter/build.sh
bash integration/helm/lint.sh
bash integration/helm/install-test.sh
step "alerts and the metrics scrape (integration/monitoring/test.sh)"
bash integration/monitoring/test.sh
step "end to end"
bash integration/e2e.sh
step "Karpenter NodePools that scale from zero (integration/karpenter/test.sh)"
await karpenter
bash integration/karpenter/test.sh
step "poolguard's image on a kind cluster, installed with the chart (integration/kind/run.sh)"
await kind-images
# The image's own checks (integration/image/test.sh: the Dockerfile reader on good and bad
# Dockerfiles, check.sh on the image just built and on an altered copy of it).
bash integration/image/test.sh target/image/poolguard-*.oci.tar
bash integration/kind/run.sh
