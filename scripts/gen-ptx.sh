#!/usr/bin/env bash
# Regenerates cuda/kernels/*.ptx from their .cu sources, then checks each with ptxas for sm_90.
# The PTX version is lowered to 7.0 so that drivers older than the nvcc that made it still
# load it (the kernels use nothing newer: vote/shfl.sync, 64-bit atomics).
#
# Needs nvcc: the one on PATH, else NVIDIA's CUDA 13.0 compiler wheels from PyPI
# (nvidia-cuda-nvcc, nvidia-nvvm, nvidia-cuda-crt, nvidia-cuda-runtime; no GPU needed),
# downloaded once into target/nvcc. They make the same PTX as the GPU machine's nvcc 13.0.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
if ! command -v nvcc > /dev/null; then
  W="$ROOT/target/nvcc"
  if [ ! -x "$W/nvidia/cu13/bin/nvcc" ]; then
    echo "gen-ptx: no nvcc on PATH: fetching NVIDIA's compiler wheels into $W"
    mkdir -p "$W"
    python3 -m pip download -q --no-deps --disable-pip-version-check -d "$W" \
      nvidia-cuda-nvcc==13.0.88 nvidia-nvvm==13.0.88 nvidia-cuda-crt==13.0.88 nvidia-cuda-runtime==13.0.96
    for whl in "$W"/*.whl; do python3 -m zipfile -e "$whl" "$W"; done
    chmod +x "$W"/nvidia/cu13/bin/* "$W"/nvidia/cu13/nvvm/bin/*
  fi
  export PATH="$W/nvidia/cu13/bin:$PATH"
fi
cd "$ROOT/cuda/kernels"
for cu in *.cu; do
  nvcc -ptx -arch=compute_75 -o "${cu%.cu}.ptx" "$cu"
  sed -i 's/^\.version .*/.version 7.0/' "${cu%.cu}.ptx"
  ptxas -arch=sm_90 -o /dev/null "${cu%.cu}.ptx"
  echo "gen-ptx: ${cu%.cu}.ptx ($(grep -c '^.visible .entry' "${cu%.cu}.ptx") kernels, ptxas sm_90 ok)"
done
