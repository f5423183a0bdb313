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
nvcc -O2 -arch=${KREPLAY_ARCH:-sm_90} -o "$W/copybench" "$HERE/testdata/apps/copybench.cu" || exit 2

# Recorder stall for a dispatch reaching 4 GiB (2 GiB in, 2 GiB out) against a bare pinned
# device-to-host copy of the same 4 GiB.
rec big4g big_scale 1 "$W/kapps" big4g
stall=$(grep -o 'stalled the app [0-9.]* ms' "$W/big4g.rec.err" | grep -o '[0-9.]*')
grep -h "captured" "$W/big4g.rec.err"
bare=$("$W/copybench" $((4 << 30)) | tee /dev/stderr | grep -o ': [0-9.]* ms' | grep -o '[0-9.]*')
python3 -c "s, b = float('$stall'), float('$bare'); print(f'bench: record stall {s:.1f} ms for a 4 GiB dispatch; bare pinned DtoH of 4 GiB {b:.1f} ms; ratio {s / b:.2f} (target <= 1.3) -> ' + ('ok' if s <= 1.3 * b else 'OVER'))"
"$BIN/kreplay" verify "$W/big4g.krr"
"$BIN/kreplay" play "$W/big4g.krr" --passes 3 --verify | tail -3
rm -f "$W/big4g.krr"

rec saxpy '^saxpy' 2 "$W/kapps" saxpy 3
rec globals poly_globals 1 "$W/kapps" globals
rec bigsmem smem_reverse 1 "$W/kapps" bigsmem
rec coop coop_normalize 1 "$W/kapps" coop
rec stencil stencil_iter 1 "$W/kapps" stencil
rec big big_scale 1 "$W/kapps" big
rec gemm 'gemm|cutlass' 1 python3 "$HERE/testdata/apps/torch_app.py"
rec triton fused_axpy_relu 1 python3 "$HERE/testdata/apps/triton_app.py"
for c in saxpy globals bigsmem coop stencil gemm triton big; do
  echo "== $c ($(stat -c %s "$W/$c.krr") bytes on disk)"
  grep -h "stalled" "$W/$c.rec.err" | sed 's/^/   /'
  "$BIN/replay_bench" "$W/$c.krr" 20
  "$BIN/replay_bench" "$W/$c.krr" 20 --flush | grep median
done
