#!/usr/bin/env bash
# Builds every fuzz target and runs each for FUZZ_SECONDS (default 30), seeded from the test
# data, into a fresh temporary corpus. Fails when any target finds a crash, a hang or an
# out-of-memory input (saved under target/fuzz-artifacts/TARGET/). Prints per target:
# executions, crashes, exec/s, corpus size.
#
#   bash integration/fuzz/smoke.sh [TARGET...]
#
# Environment: FUZZ_SECONDS, FUZZ_SANITIZER (none), FUZZ_TOOLCHAIN (nightly, else stable),
# FUZZ_NICE (19), FUZZ_TIMEOUT (20 s per input), FUZZ_RSS_MB (2048).
set -euo pipefail
cd "$(dirname "$0")/../.."
# shellcheck source=integration/fuzz/common.sh
source integration/fuzz/common.sh

FUZZ_SECONDS=${FUZZ_SECONDS:-30}
[[ $FUZZ_SECONDS =~ ^[1-9][0-9]*$ ]] || die "FUZZ_SECONDS must be a positive number of seconds"
targets=("$@")
((${#targets[@]})) || targets=("${TARGETS[@]}")
for t in "${targets[@]}"; do
    is_target "$t" || die "no fuzz target $t (targets: ${TARGETS[*]})"
done

started=$SECONDS
build_targets
say "built in $((SECONDS - started)) s"
work=$(mktemp -d "${TMPDIR:-/tmp}/poolguard-fuzz-smoke.XXXXXX")
trap 'rm -rf "$work"' EXIT

failed=()
results=()
for t in "${targets[@]}"; do
    say "$t: ${FUZZ_SECONDS} s"
    if line=$(run_target "$t" "-max_total_time=$FUZZ_SECONDS" "$work/corpus/$t" "$work"); then
        results+=("$line")
    else
        results+=("$line")
        failed+=("$t")
        # Keep the log beside the crash input.
        cp "$work/$t.log" "$FUZZ_ARTIFACTS/$t/" 2>/dev/null || true
    fi
done

printf '\n%-24s %12s %8s %10s %8s\n' target executions crashes exec/s corpus
for line in "${results[@]}"; do
    IFS=$'\t' read -r t execs crashes rate corp _ _ <<<"$line"
    printf '%-24s %12s %8s %10s %8s\n' "$t" "$execs" "$crashes" "$rate" "$corp"
done
echo "fuzz smoke: $((SECONDS - started)) s in all"
if ((${#failed[@]})); then
    die "crashes in: ${failed[*]} (inputs and logs under $FUZZ_ARTIFACTS/)"
fi
