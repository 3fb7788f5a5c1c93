#!/usr/bin/env bash
# Runs the README's "5-minute tour" exactly as printed: every command of the fenced ```sh blocks
# between <!-- tour:start --> and <!-- tour:end -->, in order, in one shell (so the tour's own
# `serve ... &` and `kill %1` work as they would for a reader), and checks what the README says
# of them: exit statuses and key outputs. Fails when a command fails, when an expectation below
# no longer matches a tour command, or when the tour lost a command this script expects.
#
# Needs cargo, curl and awk; builds with `cargo run` as the tour does. The dev server is
# stopped on exit, whatever happens. Ports 8443 and 9090 on 127.0.0.1 must be free.
set -euo pipefail
cd "$(dirname "$0")/.."

readme=README.md
work=$(mktemp -d)
server_pid=""
cleanup() {
    if [[ -n $server_pid ]] && kill -0 "$server_pid" 2>/dev/null; then
        kill "$server_pid" 2>/dev/null || true
        wait "$server_pid" 2>/dev/null || true
    fi
    rm -rf "$work"
}
trap cleanup EXIT

say() { echo "[readme-tour] $*" >&2; }
fail() {
    say "FAIL: $*"
    exit 1
}

# The tour's commands, one per line (continuation lines joined, comments and blank lines dropped).
[[ "$(grep -c -- '<!-- tour:start -->' "$readme")" == 1 && "$(grep -c -- '<!-- tour:end -->' "$readme")" == 1 ]] \
    || fail "$readme: expected one <!-- tour:start --> before one <!-- tour:end -->"
status=0
awk '
    /<!-- tour:start -->/ { tour = 1; next }
    /<!-- tour:end -->/ { if (!tour) exit 3; tour = 0; next }
    !tour { next }
    !block && /^```sh$/ { block = 1; blocks++; next }
    block && /^```$/ { if (command != "") exit 4; block = 0; next }
    block {
        if (command == "" && ($0 ~ /^[[:space:]]*$/ || $0 ~ /^[[:space:]]*#/)) next
        if ($0 ~ /\\$/) { command = command substr($0, 1, length($0) - 1); next }
        print command $0
        command = ""
    }
    END { if (!blocks) exit 5 }
' "$readme" >"$work/commands" || status=$?
case $status in
    0) ;;
    3) fail "$readme: expected one <!-- tour:start --> before one <!-- tour:end -->" ;;
    4) fail "$readme: a tour command ends with a backslash" ;;
    5) fail "$readme: no \`\`\`sh block in the tour" ;;
    *) fail "reading the tour's commands from $readme failed (awk exit ${status})" ;;
esac
[[ -s $work/commands ]] || fail "no commands found in the README's tour"

# What the README says of each command: a fixed string the command must contain (its key), the
# exit status, and a pattern its standard output must match (grep -E; empty: not checked).
# Every tour command without an entry must exit 0; every entry must match a tour command.
expectations=(
    "serve --dev --config testdata/config/example.yaml &|background|"
    "/readyz|0|"
    "/mutate --data-binary @testdata/reviews/pod-create-mapped.json|0|\"patchType\": ?\"JSONPatch\""
    "/validate --data-binary @testdata/reviews/deployment-create-bad-image.json|0|\"allowed\": ?false.*\"code\": ?403|\"code\": ?403.*\"allowed\": ?false"
    "localhost:9090/metrics|0|poolguard_admission_requests_total\\{.*webhook=\"validate\""
    "--webhook mutate testdata/manifests/pod.yaml|0|ALLOWED, patched"
    "--webhook validate testdata/manifests/deployment-bad-image.yaml|1|DENIED \\(403\\)"
    "--webhook validate testdata/manifests/pod-foreign-untagged.yaml|1|# pending: latesttag"
    "policy test --policies-dir policies\$|0|[0-9]+ passed, 0 failed"
    "policy test --policies-dir policies/placement|0|[0-9]+ passed, 0 failed"
    "audit --manifests testdata/audit/manifests|1|fail"
    "--webhook mutate testdata/placement/pods.yaml|1|pool gpu, chosen by the placement policies"
    "kill %1|0|"
)

matches() { # $1 command, $2 key (a trailing $ anchors it at the end)
    local key=$2
    if [[ $key == *'$' ]]; then
        [[ $1 == *"${key%\$}" ]]
    else
        [[ $1 == *"$key"* ]]
    fi
}

used=()
n=0
while IFS= read -r command; do
    n=$((n + 1))
    want_rc=0 pattern="" found=""
    for i in "${!expectations[@]}"; do
        IFS='|' read -r key rc pat <<<"${expectations[$i]}"
        # The pattern is everything after the second '|', alternatives included.
        pat=${expectations[$i]#*|*|}
        if matches "$command" "$key"; then
            found=$i want_rc=$rc pattern=$pat
            break
        fi
    done
    [[ -n $found ]] && used+=("$found")
    say "\$ $command"
    if [[ $want_rc == background ]]; then
        [[ $command == *'&' ]] || fail "expected a background command: $command"
        eval "$command" >"$work/server.log" 2>&1
        server_pid=$!
        continue
    fi
    set +e
    eval "$command" >"$work/out" 2>"$work/err"
    rc=$?
    set -e
    cat "$work/out"
    if [[ $rc != "$want_rc" ]]; then
        cat "$work/err" >&2
        [[ -f $work/server.log ]] && tail -20 "$work/server.log" >&2
        fail "exit status $rc, the README says $want_rc: $command"
    fi
    if [[ -n $pattern ]] && ! grep -Eq -- "$pattern" "$work/out"; then
        cat "$work/err" >&2
        fail "output does not match /$pattern/: $command"
    fi
done <"$work/commands"

for i in "${!expectations[@]}"; do
    if [[ " ${used[*]} " != *" $i "* ]]; then
        fail "the tour has no command matching \"${expectations[$i]%%|*}\" (update the README or this script)"
    fi
done
# The tour stops its server (SIGTERM: it drains, then exits 0).
for _ in $(seq 30); do
    [[ -n $server_pid ]] && kill -0 "$server_pid" 2>/dev/null || break
    sleep 1
done
if [[ -n $server_pid ]] && kill -0 "$server_pid" 2>/dev/null; then
    fail "the dev server still runs 30 s after the tour stopped it"
fi
server_pid=""
say "OK: $n commands ran as printed"
