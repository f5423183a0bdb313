#!/usr/bin/env bash
# Regenerates cuda/kernels/*.ptx from their .cu sources (needs nvcc; run on the GPU machine).
# The PTX version is lowered to 7.0 so that drivers older than the nvcc that made it still
# load it (the kernels use nothing newer: vote/shfl.sync, 64-bit atomics).
set -euo pipefail
cd "$(dirname "$0")/../cuda/kernels"
for cu in *.cu; do
  nvcc -ptx -arch=compute_75 -o "${cu%.cu}.ptx" "$cu"
  sed -i 's/^\.version .*/.version 7.0/' "${cu%.cu}.ptx"
done
