#!/usr/bin/env bash
# kube-apiserver's CPU per pod CREATE for native admission objects, read from its CPU profile:
# steadier than latency on a small machine (bench/README.md, "What kube-apiserver spends per
# pod"). Starts a throwaway control plane (integration/controlplane), then for each arm in turn
# and each of RUNS rounds: two loops of dry-run pod CREATEs (one container, an allowed image)
# into the arm's namespace for PROFILE_SECONDS + 2 s, while /debug/pprof/profile records
# PROFILE_SECONDS; the cumulative time of the validating and the mutating admission-policy
# plugins is divided by the pods created. Prints one line per arm and round, then the median per
# arm, ms per pod.
#
#   bash bench/native-cpu.sh [ARM=FILE ...]
#
# An arm is a name and a file of native objects generated with
# `poolguard native ... --namespace-match-label poolguard-floor=ARM` (so that its bindings
# select only its namespace). With no arms: `none` (a namespace no policy selects: the plugins'
# base cost) and `generated` (what this checkout's `poolguard native` prints for the e2e config
# and the shipped policies). `none` is always measured.
#
# NATIVE_VARIANTS="static shared-static refused handwritten ..." adds one arm per variant, named
# after it: the generated objects changed as bench/e2e/native_variant.py says (the variants of
# bench/e2e-floor.sh, `baseline` aside), or bench/e2e/handwritten-native.yaml for `handwritten`.
#
# Environment: RUNS (3), PROFILE_SECONDS (25), POOLGUARD_BIN (default: cargo build, debug),
#   POOLGUARD_CP_BIN (prebuilt control plane binaries; default integration/controlplane/build.sh),
#   PROFILES_DIR (keep each round's profile there as ARM-ROUND.pprof, for `go tool pprof`).
set -euo pipefail
cd "$(dirname "$0")/.."

RUNS=${RUNS:-3}
PROFILE_SECONDS=${PROFILE_SECONDS:-25}
log() { printf '[native-cpu %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() {
    log "error: $*"
    exit 1
}
[[ $RUNS =~ ^[1-9][0-9]*$ ]] || die "RUNS must be a positive number"
[[ $PROFILE_SECONDS =~ ^[1-9][0-9]*$ ]] || die "PROFILE_SECONDS must be a positive number"
command -v go >/dev/null || die "go is needed (go tool pprof)"

work="$(mktemp -d "${TMPDIR:-/tmp}/poolguard-native-cpu.XXXXXX")"
cp_state="${work}/controlplane"
cleanup() {
    jobs -p | xargs -r kill 2>/dev/null || true
    [[ -f "${cp_state}/pids" ]] && integration/controlplane/stop.sh "${cp_state}" >/dev/null 2>&1
    rm -rf "${work}"
}
trap cleanup EXIT

if [[ -n ${POOLGUARD_BIN:-} ]]; then
    poolguard=${POOLGUARD_BIN}
else
    cargo build -q --bin poolguard
    poolguard="$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')/debug/poolguard"
fi
cp_bin=${POOLGUARD_CP_BIN:-$(integration/controlplane/build.sh | tail -n1)}

arms=(none)
declare -A files=()
if (($# == 0)); then
    "${poolguard}" native --config integration/e2e/manifests/poolguard-config.yaml --policies-dir policies \
        --namespace-match-label poolguard-floor=generated >"${work}/generated.yaml"
    arms+=(generated)
    files[generated]="${work}/generated.yaml"
fi
for arg in "$@"; do
    [[ $arg == *=* ]] || die "an arm is NAME=FILE, not ${arg}"
    name=${arg%%=*} file=${arg#*=}
    [[ $name =~ ^[a-z0-9-]+$ && $name != none ]] || die "arm name ${name}: lowercase letters, digits and -, not none"
    [[ -f $file ]] || die "arm ${name}: no file ${file}"
    grep -q "poolguard-floor" "${file}" || die "arm ${name}: ${file} selects no poolguard-floor namespace (generate it with --namespace-match-label poolguard-floor=${name})"
    arms+=("${name}")
    files[${name}]=${file}
done

read -r -a variants <<<"${NATIVE_VARIANTS:-}"
declare -A lists=()
for variant in ${variants[@]+"${variants[@]}"}; do
    # An arm's name; whether it is a variant, native_variant.py says.
    [[ $variant =~ ^[a-z0-9-]+$ && $variant != none && $variant != baseline && -z ${files[${variant}]:-} ]] ||
        die "NATIVE_VARIANTS: ${variant}: not an arm of its own (none, baseline, or an ARM=FILE name)"
    arms+=("${variant}")
    if [[ $variant == handwritten ]]; then
        lists[${variant}]=bench/e2e/handwritten-native.yaml
        continue
    fi
    # Named floor-<variant>-… by native_variant.py, bound to the variant's namespace label.
    "${poolguard}" native --config integration/e2e/manifests/poolguard-config.yaml --policies-dir policies \
        --namespace-match-label "poolguard-floor=${variant}" |
        python3 bench/e2e/native_variant.py "${variant}" >"${work}/variant-${variant}.json" ||
        die "NATIVE_VARIANTS: ${variant}: bench/e2e/native_variant.py refused it"
    lists[${variant}]="${work}/variant-${variant}.json"
done

POOLGUARD_CP_BIN="${cp_bin}" integration/controlplane/start.sh "${cp_state}" >/dev/null
# shellcheck disable=SC1091
source "${cp_state}/env"
kubectl=("${cp_bin}/kubectl" --kubeconfig="${KUBECONFIG}")
pki="${cp_state}/pki"
api="${POOLGUARD_CP_APISERVER}"

for arm in "${arms[@]}"; do
    "${kubectl[@]}" create namespace "pg-cpu-${arm}" >/dev/null
    "${kubectl[@]}" label namespace "pg-cpu-${arm}" "poolguard-floor=${arm}" agentpool=pool1 >/dev/null
    if [[ -n ${files[${arm}]:-} ]]; then
        # Each arm's objects under names of its own (`cpu-<arm>-…`), so that arms do not replace
        # each other's.
        python3 - "${arm}" "${files[${arm}]}" >"${work}/objects-${arm}.json" <<'PY'
import json, sys, yaml
arm, path = sys.argv[1:]
items = [d for d in yaml.safe_load_all(open(path)) if d]
rename = lambda name: f"cpu-{arm}-" + name.removeprefix("poolguard-")
for item in items:
    item["metadata"]["name"] = rename(item["metadata"]["name"])
    if "policyName" in item["spec"]:
        item["spec"]["policyName"] = rename(item["spec"]["policyName"])
print(json.dumps({"apiVersion": "v1", "kind": "List", "items": items}))
PY
        "${kubectl[@]}" apply --server-side --field-manager poolguard -f "${work}/objects-${arm}.json" >/dev/null
    elif [[ -n ${lists[${arm}]:-} ]]; then
        "${kubectl[@]}" apply --server-side --field-manager poolguard -f "${lists[${arm}]}" >/dev/null
    fi
done
for arm in "${arms[@]}"; do
    until "${kubectl[@]}" -n "pg-cpu-${arm}" get serviceaccount default >/dev/null 2>&1; do
        "${kubectl[@]}" -n "pg-cpu-${arm}" create serviceaccount default >/dev/null 2>&1 || sleep 0.2
    done
done
# Policies are loaded by kube-apiserver a moment after they are written.
sleep 3

pod='{"apiVersion":"v1","kind":"Pod","metadata":{"generateName":"cpu-"},"spec":{"containers":[{"name":"app","image":"registry.example.com/team/app:1.0"}]}}'
curl_api=(curl -sS --cacert "${pki}/ca.crt" --cert "${pki}/admin.crt" --key "${pki}/admin.key")

# creates ARM SECONDS OUT: dry-run pod CREATEs into the arm's namespace for SECONDS; the count of
# created pods (HTTP 201) in OUT.
creates() {
    local arm=$1 seconds=$2 out=$3 end n=0
    end=$((SECONDS + seconds))
    while ((SECONDS < end)); do
        code="$("${curl_api[@]}" -o /dev/null -w '%{http_code}' -H 'Content-Type: application/json' \
            -X POST --data "${pod}" "${api}/api/v1/namespaces/pg-cpu-${arm}/pods?dryRun=All")" || code=000
        [[ $code == 201 ]] && n=$((n + 1))
    done
    echo "${n}" >"${out}"
}

# The cumulative seconds of a function in a profile.
cum() {
    go tool pprof -top -cum "$1" 2>/dev/null | awk -v f="$2" '$NF == f { v = $4; sub(/s$/, "", v); if ($4 ~ /ms$/) { sub(/ms$/, "", v); v = v / 1000 } print v; found = 1; exit } END { if (!found) print 0 }'
}

results="${work}/results.tsv"
: >"${results}"
for run in $(seq 1 "${RUNS}"); do
    for arm in "${arms[@]}"; do
        creates "${arm}" $((PROFILE_SECONDS + 2)) "${work}/a" &
        creates "${arm}" $((PROFILE_SECONDS + 2)) "${work}/b" &
        sleep 1
        "${curl_api[@]}" -o "${work}/profile" "${api}/debug/pprof/profile?seconds=${PROFILE_SECONDS}"
        wait
        if [[ -n ${PROFILES_DIR:-} ]]; then
            mkdir -p "${PROFILES_DIR}"
            cp "${work}/profile" "${PROFILES_DIR}/${arm}-${run}.pprof"
        fi
        pods=$(($(cat "${work}/a") + $(cat "${work}/b")))
        ((pods > 0)) || die "arm ${arm}: no pod was created (see ${cp_state}/logs)"
        validating="$(cum "${work}/profile" 'k8s.io/apiserver/pkg/admission/plugin/policy/validating.(*Plugin).Validate')"
        mutating="$(cum "${work}/profile" 'k8s.io/apiserver/pkg/admission/plugin/policy/mutating.(*Plugin).Admit')"
        python3 - "${arm}" "${run}" "${pods}" "${validating}" "${mutating}" "${PROFILE_SECONDS}" >>"${results}" <<'PY'
import sys
arm, run, pods, validating, mutating, seconds = sys.argv[1:]
# The loops ran 2 s longer than the profile: count the pods of the profiled seconds only.
profiled = int(pods) * int(seconds) / (int(seconds) + 2)
print(f"{arm}\t{run}\t{int(pods)}\t{float(validating) * 1000 / profiled:.3f}\t{float(mutating) * 1000 / profiled:.3f}")
PY
        log "$(tail -n1 "${results}" | awk -F'\t' '{printf "%s round %s: %s pods, validating %s ms/pod, mutating %s ms/pod", $1, $2, $3, $4, $5}')"
    done
done

python3 - "${results}" <<'PY'
import statistics, sys
rows = [line.split("\t") for line in open(sys.argv[1]).read().splitlines()]
arms = list(dict.fromkeys(r[0] for r in rows))
print("kube-apiserver CPU per dry-run pod CREATE, ms (median of the rounds [range]); above `none`: what the arm's objects add")
print(f"{'arm':<24} {'pods':>6} {'validating':>22} {'mutating':>22} {'validating above none':>22}")
base = statistics.median(float(r[3]) for r in rows if r[0] == "none")
for arm in arms:
    mine = [r for r in rows if r[0] == arm]
    v = [float(r[3]) for r in mine]
    m = [float(r[4]) for r in mine]
    pods = sum(int(r[2]) for r in mine)
    cell = lambda xs: f"{statistics.median(xs):.3f} [{min(xs):.3f}, {max(xs):.3f}]"
    print(f"{arm:<24} {pods:>6} {cell(v):>22} {cell(m):>22} {statistics.median(v) - base:>22.3f}")
PY
