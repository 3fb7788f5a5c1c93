# shellcheck shell=bash
# Sourced by smoke.sh and long-run.sh: the targets, their seeds, the tools, the build and one run.
# Expects `set -euo pipefail` and the repository root as the working directory.

FUZZ_DIR=integration/fuzz
TARGETS=(admission_review admission_review_edits config_file policy_template namespaces_file image_reference shipped_policy certificate_plan)
# Build, corpora and crash inputs live under the repository's (git-ignored) target directory.
FUZZ_BUILD_DIR=${FUZZ_BUILD_DIR:-target/fuzz-build}
FUZZ_ARTIFACTS=${FUZZ_ARTIFACTS:-target/fuzz-artifacts}
# No sanitizer by default: the code fuzzed is safe Rust, panics and overflow checks are what
# finds bugs here, and it runs 2-3x faster. FUZZ_SANITIZER=address needs the nightly toolchain.
FUZZ_SANITIZER=${FUZZ_SANITIZER:-none}
FUZZ_NICE=${FUZZ_NICE:-19}
# Per input: seconds before libFuzzer calls it a hang, and a memory limit.
FUZZ_TIMEOUT=${FUZZ_TIMEOUT:-20}
FUZZ_RSS_MB=${FUZZ_RSS_MB:-2048}
# cargo-fuzz's default is 1 (slowest to build); 16 builds in about two thirds of the time on 2
# cores and fuzzes about as fast.
FUZZ_CODEGEN_UNITS=${FUZZ_CODEGEN_UNITS:-16}

say() { echo "fuzz: $*" >&2; }
die() {
    say "error: $*"
    exit 1
}

is_target() {
    local t
    for t in "${TARGETS[@]}"; do
        [[ $t == "$1" ]] && return 0
    done
    return 1
}

# The toolchain to build with: FUZZ_TOOLCHAIN, else nightly (installed when missing), else stable
# (enough without a sanitizer).
pick_toolchain() {
    command -v cargo >/dev/null || die "cargo is not installed (install Rust with rustup)"
    command -v c++ >/dev/null || die "a C++ compiler (c++) is needed to build libFuzzer"
    if [[ -n ${FUZZ_TOOLCHAIN:-} ]]; then
        cargo "+$FUZZ_TOOLCHAIN" --version >/dev/null 2>&1 ||
            die "FUZZ_TOOLCHAIN=$FUZZ_TOOLCHAIN is not installed"
        return
    fi
    if ! cargo +nightly --version >/dev/null 2>&1; then
        say "no nightly toolchain: installing it (rustup toolchain install nightly --profile minimal)"
        # Bounded: a machine that cannot download toolchains may not fail fast.
        timeout 600 rustup toolchain install nightly --profile minimal >&2 ||
            say "could not install the nightly toolchain"
    fi
    if cargo +nightly --version >/dev/null 2>&1; then
        FUZZ_TOOLCHAIN=nightly
    elif [[ $FUZZ_SANITIZER == none ]]; then
        say "building with the stable toolchain (enough without a sanitizer)"
        FUZZ_TOOLCHAIN=stable
    else
        die "FUZZ_SANITIZER=$FUZZ_SANITIZER needs the nightly toolchain, which is not installed"
    fi
}

ensure_cargo_fuzz() {
    if ! cargo fuzz --version >/dev/null 2>&1; then
        say "cargo-fuzz is missing: installing it (cargo install --locked cargo-fuzz)"
        cargo install --locked cargo-fuzz --version '^0.13' >&2 || die "could not install cargo-fuzz"
    fi
}

# Builds every target: optimized, with debug assertions and overflow checks.
build_targets() {
    pick_toolchain
    ensure_cargo_fuzz
    say "building ${#TARGETS[@]} targets ($(cargo "+$FUZZ_TOOLCHAIN" --version), sanitizer $FUZZ_SANITIZER)"
    # The fuzz crate's own lock file is checked in: a build that would change it fails.
    cargo "+$FUZZ_TOOLCHAIN" metadata --locked --format-version 1 \
        --manifest-path "$FUZZ_DIR/Cargo.toml" >/dev/null ||
        die "$FUZZ_DIR/Cargo.lock is out of date"
    nice -n "$FUZZ_NICE" cargo "+$FUZZ_TOOLCHAIN" fuzz build --fuzz-dir "$FUZZ_DIR" \
        --release --debug-assertions --sanitizer "$FUZZ_SANITIZER" \
        --codegen-units "$FUZZ_CODEGEN_UNITS" --target-dir "$FUZZ_BUILD_DIR" >&2 ||
        die "the fuzz targets do not build ($(df -h --output=avail "$FUZZ_BUILD_DIR" 2>/dev/null | tail -1 | tr -d ' ') free on its disk)"
    local triple
    triple=$(rustc "+$FUZZ_TOOLCHAIN" -vV | sed -n 's/^host: //p')
    FUZZ_BIN_DIR=$FUZZ_BUILD_DIR/$triple/release
}

# Seed directories of a target (read only; libFuzzer reads them recursively). The images of the
# test data are written into WORK_DIR first, one file per reference.
seed_dirs() {
    local target=$1 work=$2
    case $target in
    admission_review) echo testdata/reviews ;;
    config_file) echo testdata/config ;;
    policy_template) echo policies ;;
    namespaces_file) echo testdata ;;
    image_reference | shipped_policy)
        local dir=$work/image-seeds i=0 image
        mkdir -p "$dir"
        while IFS= read -r image; do
            i=$((i + 1))
            printf '%s' "$image" >"$dir/$i"
        done < <(grep -rhoE '"image": *"[^"]*"|image: *[^ ,}]+' testdata |
            sed -E 's/^"?image"?: *"?//; s/"$//' | sort -u)
        echo "$dir"
        ;;
    *) ;; # structured input: libFuzzer starts from nothing
    esac
}

# Runs TARGET once; LIMIT is a libFuzzer option (-max_total_time=N or -runs=N). New inputs go to
# CORPUS. Prints one tab-separated line: target, executions, crashes, exec/s, corpus, seconds,
# log file. Returns non-zero when the run found a crash (or libFuzzer failed).
run_target() {
    local target=$1 limit=$2 corpus=$3 work=$4
    local log=$work/$target.log artifacts=$FUZZ_ARTIFACTS/$target/
    local dict=$FUZZ_DIR/dict/$target.dict
    mkdir -p "$corpus" "$artifacts"
    local args=("$limit" -print_final_stats=1 "-timeout=$FUZZ_TIMEOUT" "-rss_limit_mb=$FUZZ_RSS_MB"
        "-artifact_prefix=$artifacts")
    [[ -f $dict ]] && args+=("-dict=$dict")
    local seeds
    read -r -a seeds <<<"$(seed_dirs "$target" "$work")"
    local before after status=0 started=$SECONDS
    before=$(find "$artifacts" -type f | wc -l)
    nice -n "$FUZZ_NICE" "$FUZZ_BIN_DIR/$target" "${args[@]}" "$corpus" "${seeds[@]}" >"$log" 2>&1 ||
        status=$?
    after=$(find "$artifacts" -type f | wc -l)
    local execs rate corp
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
    rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
    corp=$(grep -oE 'corp: [0-9]+' "$log" | tail -1 | cut -d' ' -f2)
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$target" "${execs:-?}" "$((after - before))" \
        "${rate:-?}" "${corp:-?}" "$((SECONDS - started))" "$log"
    if ((status != 0)); then
        say "$target: libFuzzer exited with status $status; the end of $log:"
        grep -E "panicked at|^SUMMARY|ERROR: libFuzzer|Test unit written" "$log" >&2 || tail -20 "$log" >&2
        return 1
    fi
}
