#!/usr/bin/env bash
# The whole test suite: unit, table and CLI tests, then the shipped Rego policies' own tests.
set -euo pipefail
cd "$(dirname "$0")/.."

cargo test --locked
cargo run --locked --quiet -- policy test --policies-dir policies
