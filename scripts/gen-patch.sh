#!/usr/bin/env bash
# Regenerates cuda/patch/touched_patch.fatbin, the Compute Sanitizer patch module of
# `record --memory touched` (issue 35), from touched_patch.cu: nvcc --fatbin
# --compile-as-tools-patch as NVIDIA's compute-sanitizer-samples build theirs, SASS for the
# architectures kreplay records on and PTX for newer ones.
#
# Needs nvcc and the Sanitizer API's headers: the ones on PATH and CUDA_HOME, else NVIDIA's
# CUDA 13.0 wheels from PyPI (the compiler as scripts/gen-ptx.sh fetches it, and
# nvidia-cuda-sanitizer-api for the headers; no GPU needed), downloaded once into target/.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
W="$ROOT/target/nvcc"
if ! command -v nvcc > /dev/null; then
  if [ ! -x "$W/nvidia/cu13/bin/nvcc" ]; then
    echo "gen-patch: no nvcc on PATH: fetching NVIDIA's compiler wheels into $W"
    mkdir -p "$W"
    python3 -m pip download -q --no-deps --disable-pip-version-check -d "$W" \
      nvidia-cuda-nvcc==13.0.88 nvidia-nvvm==13.0.88 nvidia-cuda-crt==13.0.88 nvidia-cuda-runtime==13.0.96
    for whl in "$W"/*.whl; do python3 -m zipfile -e "$whl" "$W"; done
    chmod +x "$W"/nvidia/cu13/bin/* "$W"/nvidia/cu13/nvvm/bin/*
  fi
  export PATH="$W/nvidia/cu13/bin:$PATH"
fi
INC=${CUDA_HOME:-/usr/local/cuda}/compute-sanitizer/include
if [ ! -f "$INC/sanitizer_patching.h" ]; then
  S="$ROOT/target/sanitizer"
  if [ ! -f "$S/nvidia/cu13/include/sanitizer_patching.h" ]; then
    echo "gen-patch: no Sanitizer API headers: fetching nvidia-cuda-sanitizer-api into $S"
    mkdir -p "$S"
    python3 -m pip download -q --no-deps --disable-pip-version-check -d "$S" nvidia-cuda-sanitizer-api==13.0.85
    for whl in "$S"/*.whl; do python3 -m zipfile -e "$whl" "$S"; done
  fi
  INC="$S/nvidia/cu13/include"
fi
cd "$ROOT/cuda/patch"
gencode=()
for sm in 75 80 86 89 90 100 120; do gencode+=(-gencode "arch=compute_$sm,code=sm_$sm"); done
gencode+=(-gencode arch=compute_120,code=compute_120)
nvcc --fatbin --compile-as-tools-patch "${gencode[@]}" -I"$INC" -I. -o touched_patch.fatbin -c touched_patch.cu
echo "gen-patch: touched_patch.fatbin ($(stat -c %s touched_patch.fatbin) bytes; sm_75 to sm_120, PTX for newer)"
