#!/usr/bin/env bash
# Pod CREATE latency through a real kube-apiserver against its floor, against OPA and against
# poolguard's native admission objects, one run, interleaved (bench/README.md, "through
# kube-apiserver against a null webhook and OPA"):
#
#   bench/e2e-floor.sh                        # 300 rounds alone, then 10/50/200 creators
#   ROUNDS=100 LEVELS="10 50" bench/e2e-floor.sh
#   LEVELS= bench/e2e-floor.sh                # one creator only
#
# Arms, each with its own namespace and its own admission configuration, selected by the
# namespace label poolguard-floor=<arm>:
#   none       no webhook (the baseline every other arm is paired with, round by round)
#   null       bench/e2e-latency's null_webhook: same TLS/HTTP stack as poolguard, allowed: true
#   nullpatch  the same null_webhook, whose mutating answer carries the patch poolguard writes
#              (the pool's nodeSelector and annotation), found without any lookup: the API
#              server's cost of applying poolguard's answer, so that poolguard/nullpatch is what
#              poolguard's deciding adds
#   opa        OPA (bench/run.sh's build) serving the AdmissionReview itself (bench/opa/admission.rego)
#   poolguard  poolguard serve with the e2e config
#   native     no webhook: the MutatingAdmissionPolicy/ValidatingAdmissionPolicy objects that
#              `poolguard native --namespace-match-label poolguard-floor=native` prints for the
#              same config and policies (docs/native.md), server-side applied; the API server
#              decides in process
# The webhook arms' configurations are the chart's own (rendered by integration/e2e/webhooks.sh),
# only renamed and pointed at the arm's server, so rules, timeouts and failure policies are the
# same. The client (create_floor) creates one pod per arm per round, arm order rotating; it checks
# every pod (nullpatch, opa, poolguard and native must set the pool), kube-apiserver's call count per
# webhook, and that native's policies refuse a foreign image before and after the rounds.
# Writes bench/results/e2e-floor.{json,md} (bench/e2e/floor_report.py), with poolguard's own time
# per request and phase from its /metrics after the rounds, and kube-apiserver's time per admission
# policy evaluation from its /metrics.
#
# Environment: ROUNDS (300) WARMUP (30) LEVELS ("10 50 200") ROUNDS_PER_CREATOR (3)
#   OPA_VERSION (v1.22.2) POOLGUARD_BIN (default: cargo build --release) CARGO_TARGET_DIR
#   NATIVE_VARIANTS (none): more native arms, each the native arm's objects renamed
#     floor-<variant>-… and bound to its own namespace, with one change, to tell what a change
#     to the generated objects would gain:
#       never      the MutatingAdmissionPolicy at reinvocationPolicy: Never (one evaluation per
#                  pod; a later webhook's change is then not re-examined)
#       noskip     the MutatingAdmissionPolicy without its matchCondition (as generated before
#                  2026-11-27): the re-invocation after its own patch evaluates it in full
#       drop-NAME  without the policy poolguard-NAME and its binding (drop-latesttag,
#                  drop-images, drop-placement): what that one object costs each pod
#       merged     the validating policies that apply in the arm's namespace folded into one
#                  (bench/e2e/native_variant.py says how): what one policy in place of several
#                  would cost (a measurement, not the generated semantics)
#       shared     merged, each variable the policies share (the pod spec, its images, whether
#                  they are readable) worked out once
#       static     every validation with its static message only, no messageExpression: what
#                  the detailed messages cost (kube-apiserver evaluates messageExpressions on
#                  every request, in an activation of their own)
#       shared-static  shared and static together
#       refused    each validating policy that does not read the namespace evaluated only for a
#                  request it refuses (a matchCondition, the negation of its validations with the
#                  variables inlined): what messages only on refusal would save
#       baseline   the objects another poolguard binary generates (NATIVE_BASELINE_BIN, e.g.
#                  one built from an earlier commit), unchanged: a change to the generator
#                  measured against what it replaces, in the same run
#     and one arm that is not generated:
#       handwritten  bench/e2e/handwritten-native.yaml, the least a person would write by hand
#                  (one MutatingAdmissionPolicy evaluated once, one ValidatingAdmissionPolicy,
#                  pods only, no image parsing): a hand-written MAP+VAP pair, the reference
#                  "what is generated costs nothing extra" is measured against
set -euo pipefail

log() { printf '[e2e-floor %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "error: $*"; exit 1; }

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "${root}"
rounds="${ROUNDS:-300}"
warmup="${WARMUP:-30}"
levels="${LEVELS-10 50 200}"
per_creator="${ROUNDS_PER_CREATOR:-3}"
opa_version="${OPA_VERSION:-v1.22.2}"
opa_dir="${OPA_DIR:-$HOME/.cache/poolguard/opa/${opa_version}}"
target_dir="${CARGO_TARGET_DIR:-${root}/target}"
export CARGO_TARGET_DIR="${target_dir}"
work="${root}/bench/work/e2e-floor"
results="${root}/bench/results"
mkdir -p "${work}" "${results}"
exec 9>"${work}/.lock"
flock -n 9 || die "another bench/e2e-floor.sh is running"

cp_state="${work}/controlplane"
pids=()
teardown() {
    local rc=$?
    set +e
    trap - EXIT
    for p in "${pids[@]}"; do kill -TERM "${p}" 2>/dev/null; wait "${p}" 2>/dev/null; done
    [[ -f "${cp_state}/pids" ]] && integration/controlplane/stop.sh "${cp_state}"
    ((rc == 0)) || log "FAILED (exit ${rc}); logs in ${work}"
    exit "${rc}"
}
trap teardown EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
# shellcheck source=integration/controlplane/free-port.sh
source integration/controlplane/free-port.sh

# --- build ---------------------------------------------------------------------------------
cp_bin="$(integration/controlplane/build.sh | tail -n1)"
k8s_version="$("${cp_bin}/kube-apiserver" --version)"
HELM="${HELM:-$(bash integration/helm/helm.sh | tail -n1)}"
export HELM
if [[ -z "${POOLGUARD_BIN:-}" ]]; then
    nice cargo build --release --locked --bin poolguard
    POOLGUARD_BIN="${target_dir}/release/poolguard"
fi
nice cargo build --release --locked -p poolguard-e2e-latency --bin create_floor --bin null_webhook
if [[ ! -x "${opa_dir}/opa" ]]; then
    log "building OPA ${opa_version} from its Go module into ${opa_dir} (first time only)"
    mkdir -p "${opa_dir}"
    (cd "${work}" && GOBIN="${opa_dir}" nice go install "github.com/open-policy-agent/opa@${opa_version}")
fi
for b in poolguard:"${POOLGUARD_BIN}" create_floor:"${target_dir}/release/create_floor" \
    null_webhook:"${target_dir}/release/null_webhook" opa:"${opa_dir}/opa"; do
    cp -f "${b#*:}" "${work}/${b%%:*}"
done
pg_version="$("${work}/poolguard" --version)"

# --- control plane and the three servers ------------------------------------------------------
[[ -f "${cp_state}/pids" ]] && integration/controlplane/stop.sh "${cp_state}"
rm -rf -- "${cp_state}" "${work}/certs"
POOLGUARD_CP_BIN="${cp_bin}" integration/controlplane/start.sh "${cp_state}" >/dev/null
export KUBECONFIG="${cp_state}/kubeconfig"
"${work}/poolguard" certs --out-dir "${work}/certs" --ip 127.0.0.1 --dns-name localhost >/dev/null
crt="${work}/certs/tls.crt" key="${work}/certs/tls.key" ca="${work}/certs/ca.crt"
pg_port="" metrics_port="" null_port="" opa_port=""
pick_port pg_port; pick_port metrics_port; pick_port null_port; pick_port opa_port

"${work}/poolguard" serve --addr "127.0.0.1:${pg_port}" --metrics-addr "127.0.0.1:${metrics_port}" \
    --tls-cert-file "${crt}" --tls-key-file "${key}" \
    --config integration/e2e/manifests/poolguard-config.yaml --policies-dir policies \
    </dev/null >"${work}/poolguard.log" 2>&1 &
pids+=($!)
"${work}/null_webhook" --addr "127.0.0.1:${null_port}" --tls-cert-file "${crt}" --tls-key-file "${key}" \
    </dev/null >"${work}/null.log" 2>&1 &
pids+=($!)
# OPA's data: the arm's namespace with its pool, and the e2e config's repositories.
python3 - "${work}/opa-data.json" <<'PY'
import json, sys
json.dump({
    "kubernetes": {"namespaces": {"pg-floor-opa": {"metadata": {"name": "pg-floor-opa", "labels": {"agentpool": "pool1"}}}}},
    "config": {"namespaceLabel": "agentpool", "nodeSelectorKey": "agentpool",
               "repositories": ["registry.example.com/", "registry.k8s.io/"], "pools": {}},
}, open(sys.argv[1], "w"))
PY
"${work}/opa" test bench/opa >&2
opa_log_version="OPA $("${work}/opa" version | sed -n "s/^Version: //p")"
"${work}/opa" run --server --disable-telemetry --log-level error --addr "127.0.0.1:${opa_port}" \
    --tls-cert-file "${crt}" --tls-private-key-file "${key}" \
    bench/opa/poolguard.rego bench/opa/admission.rego "${work}/opa-data.json" \
    </dev/null >"${work}/opa.log" 2>&1 &
pids+=($!)
for url in "http://127.0.0.1:${metrics_port}/readyz" "https://127.0.0.1:${opa_port}/health"; do
    deadline=$((SECONDS + 60))
    until curl -fsS -o /dev/null --max-time 2 --cacert "${ca}" "${url}" 2>/dev/null; do
        ((SECONDS < deadline)) || die "${url} not ready after 60 s"
        sleep 0.05
    done
done

# The chart's configurations once per arm: poolguard's as rendered, the others renamed and sent
# to their own server.
render() {
    integration/e2e/webhooks.sh "https://127.0.0.1:${pg_port}" "${ca}" agentpool \
        --set-string "webhook.namespaceMatchLabels.poolguard-floor=$1"
}
render poolguard >"${work}/webhooks-poolguard.yaml"
render null >"${work}/webhooks-null.yaml"
render nullpatch >"${work}/webhooks-nullpatch.yaml"
render opa >"${work}/webhooks-opa.yaml"
python3 - "${work}" "${pg_port}" "${null_port}" "${opa_port}" <<'PY'
import sys
work, pg, null, opa = sys.argv[1:]
base = f"https://127.0.0.1:{pg}"
for arm, port, paths in (("null", null, ("/mutate", "/validate")),
                         ("nullpatch", null, ("/patch", "/validate")),
                         ("opa", opa, ("/v0/data/poolguard/admission/mutate", "/v0/data/poolguard/admission/validate"))):
    path = f"{work}/webhooks-{arm}.yaml"
    text = open(path).read()
    for old, new in ((f"{base}/mutate", f"https://127.0.0.1:{port}{paths[0]}"),
                     (f"{base}/validate", f"https://127.0.0.1:{port}{paths[1]}"),
                     ("name: poolguard-mutating", f"name: floor-{arm}-mutating"),
                     ("name: poolguard-validating", f"name: floor-{arm}-validating"),
                     ("mutate.poolguard.io", f"mutate.{arm}.floor.bench"),
                     ("validate.poolguard.io", f"validate.{arm}.floor.bench")):
        if old not in text:
            sys.exit(f"webhooks-{arm}.yaml: {old!r} not found in the rendered chart")
        text = text.replace(old, new)
    open(path, "w").write(text)
PY
for arm in poolguard null nullpatch opa; do
    "${cp_bin}/kubectl" apply -f "${work}/webhooks-${arm}.yaml" >/dev/null
done
# The native arm: what `poolguard native` prints for the same config and policies, every binding
# limited to the arm's namespace label, written as the leader would (server-side apply).
"${work}/poolguard" native --config integration/e2e/manifests/poolguard-config.yaml --policies-dir policies \
    --namespace-match-label poolguard-floor=native >"${work}/native.yaml"
native_objects="$(grep -c '^kind:' "${work}/native.yaml")" || die "poolguard native printed no objects"
"${cp_bin}/kubectl" apply --server-side --field-manager poolguard -f "${work}/native.yaml" >/dev/null
log "native: ${native_objects} objects applied; left to the webhook: $(grep -c '^# on the webhook:' "${work}/native.yaml" || true) (${work}/native.yaml)"
read -r -a variants <<<"${NATIVE_VARIANTS:-}"
extra=""
for variant in ${variants[@]+"${variants[@]}"}; do
    extra+=",${variant}"
    if [[ "${variant}" == handwritten ]]; then
        "${cp_bin}/kubectl" apply --server-side --field-manager poolguard -f bench/e2e/handwritten-native.yaml >/dev/null
        log "native variant handwritten: applied (bench/e2e/handwritten-native.yaml)"
        continue
    fi
    # An unknown variant: native_variant.py names the ones it knows, and the pipeline fails.
    generator="${work}/poolguard"
    if [[ "${variant}" == baseline ]]; then
        [[ -x "${NATIVE_BASELINE_BIN:-}" ]] || die "NATIVE_VARIANTS: baseline needs NATIVE_BASELINE_BIN (a poolguard binary)"
        generator="${NATIVE_BASELINE_BIN}"
    fi
    "${generator}" native --config integration/e2e/manifests/poolguard-config.yaml --policies-dir policies \
        --namespace-match-label "poolguard-floor=${variant}" >"${work}/native-${variant}.yaml"
    python3 bench/e2e/native_variant.py "${variant}" <"${work}/native-${variant}.yaml" |
        "${cp_bin}/kubectl" apply --server-side --field-manager poolguard -f - >/dev/null
    log "native variant ${variant}: applied (${work}/native-${variant}.yaml, changed as NATIVE_VARIANTS says)"
done
log "servers ready, webhooks registered; ${k8s_version}, ${pg_version}, ${opa_log_version}"

# --- measure, report ------------------------------------------------------------------------
load_start="$(cut -d' ' -f1-3 /proc/loadavg)"
# LEVELS="" measures one creator only (then poolguard's phase times are those of one creator).
more_levels=()
[[ -n "${levels// /}" ]] && more_levels=(--concurrency "$(tr ' ' ',' <<<"${levels}")" --rounds-per-worker "${per_creator}")
"${work}/create_floor" --arms "none,null,nullpatch,opa,poolguard,native${extra}" --mutating-arms "nullpatch,opa,poolguard,native${extra}" \
    --native-arms "native${extra}" --foreign-image docker.io/library/nginx:1.27 \
    --rounds "${rounds}" --warmup "${warmup}" ${more_levels[@]+"${more_levels[@]}"} \
    --json "${work}/client.json"
load_end="$(cut -d' ' -f1-3 /proc/loadavg)"
# poolguard's own time per phase, for the split of what it adds over the null webhook.
curl -fsS --max-time 5 "http://127.0.0.1:${metrics_port}/metrics" >"${work}/poolguard-metrics.txt"
# kube-apiserver's time per admission policy evaluation, for the native arm.
"${cp_bin}/kubectl" get --raw /metrics >"${work}/apiserver-metrics.txt"
python3 bench/e2e/floor_report.py "${work}/client.json" "${results}/e2e-floor.json" "${results}/e2e-floor.md" \
    --phases "${work}/poolguard-metrics.txt" --policies "${work}/apiserver-metrics.txt" --meta kubernetes="${k8s_version}" poolguard="${pg_version}" opa="${opa_log_version}" \
    native_objects="${native_objects}" nproc="$(nproc)" loadavg_start="${load_start}" loadavg_end="${load_end}" \
    date="$(date -u +%Y-%m-%dT%H:%M:%SZ)"
