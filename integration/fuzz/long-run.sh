#!/usr/bin/env bash
# Runs fuzz targets one after another for a time or a number of executions each, keeping each
# target's corpus in target/fuzz-corpus/TARGET (outside the repository's files, reused by the next
# run), and appends a result table to bench/results/fuzz-DATE.md.
#
#   bash integration/fuzz/long-run.sh [--seconds N | --runs N] [TARGET[:N]...]
#
# --seconds N (default 600) or --runs N applies to every target; TARGET:N sets it for one target
# (image_reference:3000000 with --runs). No targets: all of them. A crash, hang or out-of-memory
# input stops that target's run (libFuzzer stops at the first one), is saved under
# target/fuzz-artifacts/TARGET/ and makes the script fail once the table is written.
#
# Environment: as smoke.sh (FUZZ_SANITIZER, FUZZ_TOOLCHAIN, FUZZ_NICE, FUZZ_TIMEOUT, FUZZ_RSS_MB),
# and FUZZ_CORPUS (target/fuzz-corpus), FUZZ_RESULTS (bench/results/fuzz-DATE.md).
set -euo pipefail
cd "$(dirname "$0")/../.."
# shellcheck source=integration/fuzz/common.sh
source integration/fuzz/common.sh

mode=seconds
amount=600
specs=()
while (($#)); do
    case $1 in
    --seconds | --runs)
        mode=${1#--}
        [[ ${2:-} =~ ^[1-9][0-9]*$ ]] || die "$1 needs a positive number"
        amount=$2
        shift 2
        ;;
    -h | --help)
        sed -n '2,15p' "$0"
        exit 0
        ;;
    -*) die "unknown option $1 (see --help)" ;;
    *)
        specs+=("$1")
        shift
        ;;
    esac
done
((${#specs[@]})) || specs=("${TARGETS[@]}")
for spec in "${specs[@]}"; do
    t=${spec%%:*}
    is_target "$t" || die "no fuzz target $t (targets: ${TARGETS[*]})"
    [[ $spec != *:* || ${spec#*:} =~ ^[1-9][0-9]*$ ]] || die "$spec: expected TARGET:NUMBER"
done

FUZZ_CORPUS=${FUZZ_CORPUS:-target/fuzz-corpus}
day=$(date -u +%Y-%m-%d)
FUZZ_RESULTS=${FUZZ_RESULTS:-bench/results/fuzz-$day.md}

# What is built: the commit, and whether the code differs from it.
built=$(git rev-parse --short HEAD)
git diff --quiet HEAD -- src "$FUZZ_DIR/src" "$FUZZ_DIR/fuzz_targets" "$FUZZ_DIR/Cargo.toml" ||
    built="$built (with local changes)"
build_targets
work=$(mktemp -d "${TMPDIR:-/tmp}/poolguard-fuzz-long.XXXXXX")
trap 'rm -rf "$work"' EXIT

started_at=$(date -u +%Y-%m-%dT%H:%M:%SZ)
failed=()
rows=()
for spec in "${specs[@]}"; do
    t=${spec%%:*}
    n=$amount
    [[ $spec == *:* ]] && n=${spec#*:}
    if [[ $mode == seconds ]]; then limit=-max_total_time=$n; else limit=-runs=$n; fi
    say "$t: $mode $n (corpus $FUZZ_CORPUS/$t)"
    if ! line=$(run_target "$t" "$limit" "$FUZZ_CORPUS/$t" "$work"); then
        failed+=("$t")
        cp "$work/$t.log" "$FUZZ_ARTIFACTS/$t/" 2>/dev/null || true
    fi
    rows+=("$line")
    IFS=$'\t' read -r _ execs crashes rate corp secs _ <<<"$line"
    say "$t: $execs executions, $crashes crashes, $rate exec/s, corpus $corp, $secs s"
done

total_execs=0
total_crashes=0
total_secs=0
{
    [[ -s $FUZZ_RESULTS ]] || printf '# Fuzzing results, %s\n\n' "$day"
    printf '## Run started %s\n\n' "$started_at"
    printf 'Commit %s; %s; sanitizer %s; %s per target; %s cores, load average at the end %s.\n\n' \
        "$built" "$(rustc "+$FUZZ_TOOLCHAIN" --version)" "$FUZZ_SANITIZER" \
        "$mode $amount unless given" "$(nproc)" "$(cut -d' ' -f1-3 /proc/loadavg)"
    printf '| target | executions | crashes | exec/s | corpus | seconds |\n'
    printf '| --- | ---: | ---: | ---: | ---: | ---: |\n'
    for line in "${rows[@]}"; do
        IFS=$'\t' read -r t execs crashes rate corp secs _ <<<"$line"
        printf '| %s | %s | %s | %s | %s | %s |\n' "$t" "$execs" "$crashes" "$rate" "$corp" "$secs"
        [[ $execs =~ ^[0-9]+$ ]] && total_execs=$((total_execs + execs))
        total_crashes=$((total_crashes + crashes))
        total_secs=$((total_secs + secs))
    done
    printf '| **total** | %s | %s | | | %s |\n\n' "$total_execs" "$total_crashes" "$total_secs"
} >>"$FUZZ_RESULTS"
say "results appended to $FUZZ_RESULTS"
if ((${#failed[@]})); then
    die "crashes in: ${failed[*]} (inputs and logs under $FUZZ_ARTIFACTS/)"
fi
