#!/usr/bin/env bash
# Runs gatekeeper-library's own gator suites (general and pod-security-policy) through
# `poolguard verify`: templates loaded, cases agreeing, and each disagreement with its reason.
# Fetches the library (git clone) unless GATEKEEPER_LIBRARY names a local copy; CI does not run
# this (it fetches), the unit tests use testdata/gatekeeper instead.
#
#   bench/gatekeeper-library.sh                       # clone into ~/.cache/poolguard, run
#   GATEKEEPER_LIBRARY=../gatekeeper-library bench/gatekeeper-library.sh
#   GATEKEEPER_LIBRARY_REF=<commit> bench/gatekeeper-library.sh   # pin the library's version
#   POOLGUARD=target/debug/poolguard bench/gatekeeper-library.sh  # a binary already built
#
# Writes bench/results/gatekeeper-library.txt (the verify output; git ignores it, as it quotes
# the library's messages) and prints it without the lint lines.
set -euo pipefail
cd "$(dirname "$0")/.."

library="${GATEKEEPER_LIBRARY:-}"
if [[ -z "$library" ]]; then
  library="${HOME}/.cache/poolguard/gatekeeper-library"
  if [[ ! -d "$library/.git" ]]; then
    mkdir -p "$(dirname "$library")"
    git clone --quiet https://github.com/open-policy-agent/gatekeeper-library "$library"
  fi
  if [[ -n "${GATEKEEPER_LIBRARY_REF:-}" ]]; then
    git -C "$library" fetch --quiet origin "$GATEKEEPER_LIBRARY_REF"
    git -C "$library" checkout --quiet "$GATEKEEPER_LIBRARY_REF"
  fi
fi
for part in general pod-security-policy; do
  [[ -d "$library/library/$part" ]] || { echo "no library/$part in $library" >&2; exit 2; }
done

poolguard="${POOLGUARD:-}"
if [[ -z "$poolguard" ]]; then
  cargo build --locked --release --quiet --bin poolguard
  poolguard="${CARGO_TARGET_DIR:-target}/release/poolguard"
fi
mkdir -p bench/results
out=bench/results/gatekeeper-library.txt
status=0
"$poolguard" verify "$library/library/general" "$library/library/pod-security-policy" \
  | sed "s#$library/##g" > "$out" || status=$?
{
  echo "# gatekeeper-library $(git -C "$library" rev-parse --short HEAD 2>/dev/null || echo '(not a git checkout)')"
  echo "# lint warnings: $(grep -c '^# lint' "$out" || true)"
} >> "$out"
grep -v '^# lint' "$out"
# 1 is "some case disagrees": the summary says which; anything else is a failure of the run.
[[ $status -le 1 ]]
