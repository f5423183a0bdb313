#!/usr/bin/env bash
# The project's test command (CI runs it): formatting, lints, and every test. GPU-only
# behaviour is covered by scripts/gpu-test.sh on a CUDA machine; here, tests that would need a
# GPU check that kreplay says clearly that there is none.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo fmt --all --check
cargo clippy --all-targets -- -D warnings
cargo test --workspace
