#!/usr/bin/env bash
# Replay benchmarks on a CUDA machine (figures next to their baselines, one run):
#   scripts/gpu-bench.sh [BIN_DIR]    # BIN_DIR: kreplay, libkreplay_record.so, replay_bench
set -u
HERE=$(cd "$(dirname "$0")/.." && pwd)
BIN=$(cd "${1:-$HERE/dist}" && pwd)
W=${KREPLAY_WORK:-$(mktemp -d /tmp/kreplay-bench.XXXXXX)}
mkdir -p "$W"
nvcc -O2 -std=c++17 -arch=${KREPLAY_ARCH:-sm_90} -o "$W/kapps" "$HERE/testdata/apps/kapps.cu" || exit 2
rec() { local name=$1 regex=$2 nth=$3; shift 3; "$BIN/kreplay" record -k "$regex" --nth "$nth" -o "$W/$name.krr" -- "$@" > /dev/null 2> "$W/$name.rec.err" || cat "$W/$name.rec.err"; }
rec saxpy '^saxpy' 2 "$W/kapps" saxpy 3
rec globals poly_globals 1 "$W/kapps" globals
rec bigsmem smem_reverse 1 "$W/kapps" bigsmem
rec coop coop_normalize 1 "$W/kapps" coop
rec stencil stencil_iter 3 "$W/kapps" stencil
rec big big_scale 1 "$W/kapps" big
rec gemm 'gemm|cutlass' 1 python3 "$HERE/testdata/apps/torch_app.py"
for c in saxpy globals bigsmem coop stencil gemm big; do
  echo "== $c ($(stat -c %s "$W/$c.krr") bytes on disk)"
  grep -h "stalled" "$W/$c.rec.err" | sed 's/^/   /'
  "$BIN/replay_bench" "$W/$c.krr" 20
  "$BIN/replay_bench" "$W/$c.krr" 20 --flush | grep median
done
