#!/usr/bin/env bash
# The project's test command (CI runs it): formatting, lints, and every test. GPU-only
# behaviour is covered by the GPU suite (tests/gpu, scripts/gpu-test.sh) on a CUDA machine; here, tests that would need a
# GPU check that kreplay says clearly that there is none.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo fmt --all --check
cargo clippy --all-targets -- -D warnings
# The house rules (issue #30): no import cycle between the files of a crate, no function over
# 100 lines outside tests save those in house/allow-long-functions.txt (which must shrink).
cargo run -q -p kreplay-house -- check
cargo test --workspace
# Proof on a real Slurm (issue #33): installs slurm-wlm and munge, runs
# examples/slurm/verify-corpus.sbatch as a 3-task job array over testdata/captures with the
# debug binary, and checks that every capture was verified exactly once. A machine that cannot
# install Slurm (not root, no apt-get, no network) skips it, saying why, unless
# KREPLAY_REQUIRE_SLURM=1.
cargo build -q -p kreplay
scripts/slurm-proof.sh "${CARGO_TARGET_DIR:-target}/debug/kreplay"
# The HTML reports in a real browser (issue #40): headless Chromium, installed with apt-get
# where it can be; skipped with the reason where it cannot, unless KREPLAY_REQUIRE_CHROMIUM=1.
KREPLAY_BIN="$(cd "${CARGO_TARGET_DIR:-target}" && pwd)/debug/kreplay" scripts/html-report-check.sh
# The traces of real H200 runs (testdata/traces) in Perfetto's own UI (issue #40), in the same
# Chromium; skipped with the reason where the UI or Chromium cannot be had, unless
# KREPLAY_REQUIRE_CHROMIUM=1.
scripts/perfetto-ui-check.sh
# The Python package (python/): its own crate, built by maturin into a virtual environment,
# linted like the rest, and its tests run on the captures in testdata.
cargo fmt --manifest-path python/Cargo.toml --check
cargo clippy --manifest-path python/Cargo.toml --all-targets -- -D warnings
VENV=${KREPLAY_VENV:-target/python-venv}
[ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
# Absolute from here on: maturin runs inside python/ (a relative or absolute KREPLAY_VENV alike).
VENV=$(cd "$VENV" && pwd)
"$VENV/bin/python" -m pip install -q --disable-pip-version-check "maturin>=1.5,<2" numpy pytest ml-dtypes
(cd python && VIRTUAL_ENV="$VENV" PATH="$VENV/bin:$PATH" maturin develop -q)
KREPLAY_BIN="$(cd "${CARGO_TARGET_DIR:-target}" && pwd)/debug/kreplay" "$VENV/bin/python" -m pytest -q python/tests
# The GPU suite's own helpers and case table (tests/gpu; its GPU cases need a CUDA machine).
"$VENV/bin/python" -m pytest -q -p no:cacheprovider tests/gpu -m "not gpu"
