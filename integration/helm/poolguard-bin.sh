# Sourced by lint.sh and install-test.sh: prints the poolguard binary to use — POOLGUARD_BIN when
# set (and only it), else the debug, else the release build under ${CARGO_TARGET_DIR:-target} — or
# nothing when that is not an executable.
# shellcheck shell=bash
poolguard_bin() {
    local candidate target_dir="${CARGO_TARGET_DIR:-target}"
    local candidates=("${target_dir}/debug/poolguard" "${target_dir}/release/poolguard")
    [[ -n "${POOLGUARD_BIN:-}" ]] && candidates=("${POOLGUARD_BIN}")
    for candidate in "${candidates[@]}"; do
        [[ -x "$candidate" ]] && { printf '%s\n' "$candidate"; return 0; }
    done
    return 0
}
