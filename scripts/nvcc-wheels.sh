# Sourced by scripts/gen-ptx.sh and scripts/gen-patch.sh: puts an nvcc on PATH. The one on PATH
# when there is one, else NVIDIA's CUDA 13.0 compiler wheels from PyPI (nvidia-cuda-nvcc,
# nvidia-nvvm, nvidia-cuda-crt, nvidia-cuda-runtime; no GPU needed), downloaded once into
# target/nvcc. They make the same code as the GPU machine's nvcc 13.0.
#   ensure_nvcc ROOT NAME   (NAME: the calling script, for its messages)
ensure_nvcc() {
  command -v nvcc > /dev/null && return 0
  local w="$1/target/nvcc"
  if [ ! -x "$w/nvidia/cu13/bin/nvcc" ]; then
    echo "$2: no nvcc on PATH: fetching NVIDIA's compiler wheels into $w"
    mkdir -p "$w"
    python3 -m pip download -q --no-deps --disable-pip-version-check -d "$w" \
      nvidia-cuda-nvcc==13.0.88 nvidia-nvvm==13.0.88 nvidia-cuda-crt==13.0.88 nvidia-cuda-runtime==13.0.96
    for whl in "$w"/*.whl; do python3 -m zipfile -e "$whl" "$w"; done
    chmod +x "$w"/nvidia/cu13/bin/* "$w"/nvidia/cu13/nvvm/bin/*
  fi
  export PATH="$w/nvidia/cu13/bin:$PATH"
}
