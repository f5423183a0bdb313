#!/usr/bin/env bash
# Regenerates cuda/kernels/*.ptx from their .cu sources, then checks each with ptxas for sm_90.
# The PTX version is lowered to 7.0 so that drivers older than the nvcc that made it still
# load it (the kernels use nothing newer: vote/shfl.sync, 64-bit atomics).
#
# Needs nvcc: the one on PATH, else NVIDIA's compiler wheels (scripts/nvcc-wheels.sh).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
. "$ROOT/scripts/nvcc-wheels.sh"
ensure_nvcc "$ROOT" gen-ptx
cd "$ROOT/cuda/kernels"
for cu in *.cu; do
  nvcc -ptx -arch=compute_75 -o "${cu%.cu}.ptx" "$cu"
  sed -i 's/^\.version .*/.version 7.0/' "${cu%.cu}.ptx"
  ptxas -arch=sm_90 -o /dev/null "${cu%.cu}.ptx"
  echo "gen-ptx: ${cu%.cu}.ptx ($(grep -c '^.visible .entry' "${cu%.cu}.ptx") kernels, ptxas sm_90 ok)"
done
