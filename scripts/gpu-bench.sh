#!/usr/bin/env bash
# Replay benchmarks on a CUDA machine (figures next to their baselines, one run):
#   scripts/gpu-bench.sh [BIN_DIR]          # BIN_DIR: kreplay, libkreplay_record.so, replay_bench
#   scripts/gpu-bench.sh BIN_DIR samples    # only the in-app samples section (the last one)
# Exits 1 when a figure misses its target (OVER) or could not be measured.
set -u
MISSED=0
HERE=$(cd "$(dirname "$0")/.." && pwd)
BIN=$(cd "${1:-$HERE/dist}" && pwd)
W=${KREPLAY_WORK:-$(mktemp -d /tmp/kreplay-bench.XXXXXX)}
mkdir -p "$W"
nvcc -O2 -std=c++17 -arch=${KREPLAY_ARCH:-sm_90} -o "$W/kapps" "$HERE/testdata/apps/kapps.cu" || exit 2
rec() { local name=$1 regex=$2 nth=$3; shift 3; "$BIN/kreplay" record -k "$regex" --nth "$nth" -o "$W/$name.krr" -- "$@" > /dev/null 2> "$W/$name.rec.err" || cat "$W/$name.rec.err"; }
nvcc -O2 -arch=${KREPLAY_ARCH:-sm_90} -o "$W/copybench" "$HERE/testdata/apps/copybench.cu" || exit 2

if [ "${2:-all}" = all ]; then
# Recorder stall for a dispatch reaching 4 GiB (2 GiB in, 2 GiB out) against a bare pinned
# device-to-host copy of the same 4 GiB.
rec big4g big_scale 1 "$W/kapps" big4g
stall=$(grep -o 'stalled the app [0-9.]* ms' "$W/big4g.rec.err" | grep -o '[0-9.]*')
grep -h "captured" "$W/big4g.rec.err"
bare=$("$W/copybench" $((4 << 30)) | tee /dev/stderr | grep -o ': [0-9.]* ms' | grep -o '[0-9.]*')
python3 -c "import sys
try:
    s, b = float('$stall'), float('$bare')
except ValueError:
    print('bench: record stall or bare DtoH not measured (stall \'$stall\', bare \'$bare\') -> MISSED'); sys.exit(3)
print(f'bench: record stall {s:.1f} ms for a 4 GiB dispatch; bare pinned DtoH of 4 GiB {b:.1f} ms; ratio {s / b:.2f} (target <= 1.3) -> ' + ('ok' if s <= 1.3 * b else 'OVER'))
sys.exit(0 if s <= 1.3 * b else 3)" || MISSED=1
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
fi

# Replayed median against the original in-app duration, with several in-app samples: one
# launch is one sample of the original. "runs": the app is run 5 times and its first matching
# launch captured; "count": the app launches the kernel 5 times in one process and
# `--count 5` captures each (later captures follow the recorder's work for the one before).
# Each sample is measured by the recorder after settling L2; the original figure is the
# median of the 5 in-app samples, the replay figure the median of the 5 captures' replay
# medians (20 passes each, --cache flush: the recorder's empty-L2 condition).
echo "== in-app samples (5 per kernel) against replay --cache flush"
multi() {
  local name=$1 regex=$2 how=$3; shift 3
  local i
  rm -f "$W/$name"-s*.krr
  if [ "$how" = runs ]; then
    for i in 1 2 3 4 5; do
      "$BIN/kreplay" record -k "$regex" -o "$W/$name-s$i.krr" -- "$@" > /dev/null 2> "$W/$name.multi.err" || tail -3 "$W/$name.multi.err"
    done
  else
    "$BIN/kreplay" record -k "$regex" --count 5 -o "$W/$name-s%n.krr" -- "$@" 5 > /dev/null 2> "$W/$name.multi.err" || tail -3 "$W/$name.multi.err"
  fi
  local f
  for f in "$W/$name"-s*.krr; do
    "$BIN/kreplay" play "$f" --passes 20 --cache flush --json 2> /dev/null || echo '{}'
  done | python3 -c "
import json, statistics, sys
rows = [json.loads(l) for l in sys.stdin if l.strip()]
orig = [r['original_ns'] for r in rows if r.get('original_ns')]
rep = [r['median_ns'] for r in rows if r.get('median_ns')]
first = [r['durations_ns'][0] for r in rows if r.get('durations_ns')]
if len(orig) < 3 or len(rep) < 3:
    print('bench: $name ($how): too few captures (%d) -> MISSED' % len(rows)); sys.exit(3)
o, p, f1 = statistics.median(orig), statistics.median(rep), statistics.median(first)
d = (p - o) / o * 100
print('bench: $name ($how): in-app %s us -> median %.1f us; replay medians %s us -> median %.1f us (first passes: median %.1f us, %+.1f%%); diff %+.1f%%%s' % (
    ' '.join('%.1f' % (x / 1e3) for x in orig), o / 1e3, ' '.join('%.1f' % (x / 1e3) for x in rep), p / 1e3, f1 / 1e3, (f1 - o) / o * 100, d,
    '' if o < 20000 else ' (target +-5% for >= 20 us) -> ' + ('ok' if abs(d) <= 5 else 'OVER')))
sys.exit(3 if o >= 20000 and abs(d) > 5 else 0)
" || MISSED=1
}
for how in ${KREPLAY_BENCH_SAMPLES:-runs count}; do
  multi globals poly_globals $how "$W/kapps" globals
  multi bigsmem smem_reverse $how "$W/kapps" bigsmem
  multi coop coop_normalize $how "$W/kapps" coop
done
multi stencil stencil_iter runs "$W/kapps" stencil
if [ "$MISSED" != 0 ]; then echo "bench: a target was missed (OVER/MISSED above)"; exit 1; fi
