# Sourced by ../kind/run.sh and ../node/test.sh: `suite NAME CARGO-TEST-ARGS...` runs one test
# binary of the poolguard-e2e crate and adds its "test result:" counts to the caller's `passed`
# and `failed` (a binary that fails without a count adds one failure). Uses the caller's `log`,
# `work` (the test's output is kept in ${work}/test.log) and SUITE_AGAINST (what the tests ran
# against, for the log line).
suite() {
    local name="$1" rc result p f
    shift
    set +e
    cargo test --locked -p poolguard-e2e "$@" 2>&1 | tee "${work}/test.log" >&2
    rc=${PIPESTATUS[0]}
    set -e
    result="$(grep -E '^test result:' "${work}/test.log" | tail -n1 || true)"
    p="$(sed -nE 's/.* ([0-9]+) passed.*/\1/p' <<<"${result}")"
    f="$(sed -nE 's/.* ([0-9]+) failed.*/\1/p' <<<"${result}")"
    p="${p:-0}" f="${f:-0}"
    ((rc != 0 && f == 0)) && f=1
    passed=$((passed + p))
    failed=$((failed + f))
    log "${name} against ${SUITE_AGAINST}: ${p} passed, ${f} failed"
}
