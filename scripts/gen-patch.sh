#!/usr/bin/env bash
# Regenerates cuda/patch/touched_patch.fatbin, the Compute Sanitizer patch module of
# `record --memory touched` (issue 35), from touched_patch.cu: nvcc --fatbin
# --compile-as-tools-patch as NVIDIA's compute-sanitizer-samples build theirs, SASS for the
# architectures kreplay records on and PTX for newer ones.
#
# Needs nvcc (the one on PATH, else NVIDIA's compiler wheels: scripts/nvcc-wheels.sh) and the
# Sanitizer API's headers (CUDA_HOME's, else the nvidia-cuda-sanitizer-api wheel, downloaded once
# into target/sanitizer; no GPU needed).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
. "$ROOT/scripts/nvcc-wheels.sh"
ensure_nvcc "$ROOT" gen-patch
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
# The sources the fatbin was built from, by hash: a CPU test fails when one is edited and the
# fatbin not regenerated (the library ships the fatbin, not the source).
sha256sum touched_patch.cu touched_state.h > touched_patch.sources
echo "gen-patch: touched_patch.fatbin ($(stat -c %s touched_patch.fatbin) bytes; sm_75 to sm_120, PTX for newer)"
