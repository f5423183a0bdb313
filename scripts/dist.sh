#!/usr/bin/env bash
# Builds the release binaries and copies them, stripped, into dist/ (what the GPU machine needs).
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -p kreplay -p kreplay-record
mkdir -p dist
for f in kreplay libkreplay_record.so; do
  cp "target/release/$f" "dist/$f"
  strip --strip-debug "dist/$f"
done
ls -la dist
