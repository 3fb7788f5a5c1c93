#!/usr/bin/env bash
# The whole test suite:
#   1. unit, table, CLI and HTTPS server tests of every workspace crate (cargo test: the pure core,
#      the shells, the test client; the end-to-end crate runs in step 4);
#   2. the shipped Rego policies' own tests (poolguard policy test);
#   3. the helm chart: lint and render every mode, then install into a throwaway API server
#      (a real helm, built from its Go module when none is installed);
#   4. end to end against a real control plane built from pinned Go modules (integration/e2e.sh);
#   5. the same e2e tests through the chart: its Deployment's pod played by poolguard in a network
#      namespace, reached through the Service (integration/chart-path/test.sh; needs root).
# Steps 3 and 4 build and cache what they need on the first run (see integration/README.md).
set -euo pipefail
cd "$(dirname "$0")/.."

echo "== cargo test"
# Every workspace crate but the end-to-end tests, which need a cluster (step 4 runs them).
cargo test --locked --workspace --exclude poolguard-e2e
echo "== policy test"
cargo run --locked --quiet -- policy test --policies-dir policies
echo "== helm chart"
bash integration/helm/lint.sh
bash integration/helm/install-test.sh
echo "== end to end"
bash integration/e2e.sh
echo "== the admission path through the chart (Service, EndpointSlice, self-managed certificates)"
bash integration/chart-path/test.sh
