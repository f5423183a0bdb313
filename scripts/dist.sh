#!/usr/bin/env bash
# Builds the release binaries and copies them into dist/ (what the GPU machine needs), as
# built: the release profile keeps line tables only (Cargo.toml), and the linker compresses the
# debug sections (tools/build.rs, record/build.rs; most of them the standard library's), so
# they are small without `strip` and backtraces, gdb and addr2line still name files and lines.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -p kreplay -p kreplay-record
cargo build --release -p kreplay-player --example replay_bench
cargo build --release -p kreplay-format --example craft_hostile --example craft_touched --example stream_rates
mkdir -p dist
# The GPU test of the chunk kernels (a cargo test binary; its test is #[ignore]d: run it with
# --ignored or --include-ignored on a GPU).
t=$(cargo test --release -p kreplay-cuda --test chunks_gpu --no-run --message-format=json 2> /dev/null \
  | python3 -c 'import json, sys; print([j["executable"] for j in map(json.loads, sys.stdin) if j.get("executable")][-1])')
cp "$t" dist/chunks_gpu
for f in kreplay libkreplay_record.so examples/replay_bench examples/craft_hostile examples/craft_touched examples/stream_rates; do
  cp "target/release/$f" "dist/$(basename "$f")"
done
# The test helpers (a test binary, examples) ship to no user: their debug information goes, so
# dist/ stays within what a device run carries (64 MiB with the source tree).
for f in chunks_gpu replay_bench craft_hostile craft_touched stream_rates; do
  strip --strip-debug "dist/$f"
done
ls -la dist
# The Python package (one abi3 wheel) and the pure-Python wheels its GPU tests run with, when
# maturin is at hand (pip install maturin).
if command -v maturin > /dev/null; then
  rm -rf dist/python && mkdir -p dist/python/deps
  maturin build --release --compatibility linux -m python/Cargo.toml -o dist/python
  pip download -q --no-deps -d dist/python/deps pytest pluggy iniconfig packaging pygments
  ls -la dist/python dist/python/deps
fi
