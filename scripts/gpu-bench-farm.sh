#!/usr/bin/env bash
# The corpus and farm benchmarks of issue 33 on a CUDA machine, one run, each figure next to its
# baseline measured in the same run:
#   scripts/gpu-bench-farm.sh [BIN_DIR]      # BIN_DIR: kreplay, libkreplay_record.so (scripts/dist.sh)
#   KREPLAY_BENCH_OVERHEAD_ONLY=1 scripts/gpu-bench-farm.sh   # the corpus, the overhead and compare only
# 1. A corpus of >= 200 captures from three applications, each taken by one
#    `record --each-kernel --by shape` run: a CUDA C++ app (testdata/apps/corpus_app.cu), PyTorch
#    model code (testdata/apps/torch_block_app.py) and Triton kernels
#    (testdata/apps/triton_corpus_app.py, -k selecting its Triton kernels); every application's
#    output identical to its plain run.
# 2. `play CORPUS --no-timing --jobs 8` against a plain shell loop of `kreplay play` over the same
#    files with the same per-capture work (one verified pass): captures per second, both.
# 3. The farm's per-capture overhead over a lone `kreplay play` of the same file (timed replays,
#    --jobs 1, a sample of the corpus): <= 10 %; then where a lone replay's time goes, and the
#    farm's --no-timing throughput for --jobs 1 to 16 on one GPU.
# 4. Two timed farm runs of the sample compared with `kreplay compare` (their JSON lines are kept
#    under KREPLAY_BENCH_OUT for the report pictures).
# Exits 1 when a figure misses its target (MISSED) or could not be measured.
set -u
MISSED=0
HERE=$(cd "$(dirname "$0")/.." && pwd)
BIN=$(cd "${1:-$HERE/dist}" && pwd)
KR="$BIN/kreplay"
W=${KREPLAY_WORK:-$(mktemp -d /tmp/kreplay-farm.XXXXXX)}
KEEP=${KREPLAY_BENCH_OUT:-$W}
ARCH=${KREPLAY_ARCH:-sm_90}
mkdir -p "$W" "$KEEP"
C="$W/corpus"
rm -rf "$C"
mkdir -p "$C"
missed() { echo "MISSED: $*"; MISSED=1; }
now() { date +%s.%N; }
secs() { python3 -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.2f}')" "$1" "$2"; }

nvcc -O2 -arch=$ARCH -o "$W/corpus_app" "$HERE/testdata/apps/corpus_app.cu" || exit 2

# app-name, record flags (before --), then the application's argv
take() {
  local name=$1 flags=$2; shift 2
  "$@" > "$W/$name.plain" 2> "$W/$name.plain.err" || { missed "$name: plain run failed: $(tail -2 "$W/$name.plain.err")"; return; }
  local t0 t1; t0=$(now)
  # shellcheck disable=SC2086
  "$KR" record --each-kernel --by shape $flags -o "$C/$name/" -- "$@" > "$W/$name.rec" 2> "$W/$name.rec.err"
  local rc=$?; t1=$(now)
  local n; n=$(find "$C/$name" -name '*.krr' 2>/dev/null | wc -l)
  local bytes; bytes=$(du -sb "$C/$name" 2>/dev/null | cut -f1)
  echo "corpus $name: $n captures, $((bytes / 1048576)) MiB, recorded in $(secs "$t0" "$t1") s (exit $rc)"
  [ "$rc" = 0 ] || missed "$name: record exit $rc: $(tail -3 "$W/$name.rec.err")"
  cmp -s "$W/$name.plain" "$W/$name.rec" || missed "$name: the application's output changed under record --each-kernel"
  [ -s "$C/$name/corpus.json" ] || missed "$name: no corpus.json"
}
take cuda "--per-kernel 6" "$W/corpus_app" 8
take torch "--per-kernel 3" python3 "$HERE/testdata/apps/torch_block_app.py" 3
take triton "--per-kernel 6 -k regex:^(fused_gelu_add|row_softmax|row_sum)$" python3 "$HERE/testdata/apps/triton_corpus_app.py" 8

find "$C" -name '*.krr' | sort > "$W/files"
N=$(wc -l < "$W/files")
echo "corpus: $N captures from 3 applications ($(du -sh "$C" | cut -f1))"
[ "$N" -ge 200 ] || missed "corpus of $N captures, 200 wanted"

# KREPLAY_BENCH_OVERHEAD_ONLY=1: sections 1, 3 and 4 alone (the throughput figures left out).
if [ -z "${KREPLAY_BENCH_OVERHEAD_ONLY:-}" ]; then
# 2. shell loop vs farm, one verified pass per capture (what --no-timing runs in each child).
t0=$(now); fails=0
while read -r f; do
  "$KR" play "$f" --passes 1 --warmup 0 --verify --json > /dev/null 2>> "$W/loop.err" || fails=$((fails + 1))
done < "$W/files"
t1=$(now); loop_s=$(secs "$t0" "$t1")
t0=$(now)
"$KR" play "$C" --no-timing --jobs 8 --json-lines "$KEEP/farm-no-timing.jsonl" --html "$KEEP/farm-no-timing.html" > "$W/farm8.out" 2> "$W/farm8.err"
farm_rc=$?; t1=$(now); farm_s=$(secs "$t0" "$t1")
tail -2 "$W/farm8.out"
python3 - "$N" "$loop_s" "$fails" "$farm_s" "$farm_rc" "$KEEP/farm-no-timing.jsonl" <<'PY' || MISSED=1
import json, sys
n, loop_s, fails, farm_s, rc, path = int(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]), int(sys.argv[5]), sys.argv[6]
lines = [json.loads(l) for l in open(path) if l.strip()]
verdicts = {}
for r in lines:
    verdicts[r["verdict"]] = verdicts.get(r["verdict"], 0) + 1
print(f"shell loop of kreplay play: {n} captures in {loop_s:.1f} s = {n / loop_s:.2f} captures/s ({fails} failed)")
print(f"play CORPUS --no-timing --jobs 8: {len(lines)} captures in {farm_s:.1f} s = {len(lines) / farm_s:.2f} captures/s "
      f"({loop_s / farm_s:.2f} x the loop), exit {rc}, verdicts {verdicts}")
bad = len(lines) != n or rc != 0 or fails != 0 or any(v not in ("matched", "deterministic") for v in verdicts)
if bad:
    print("MISSED: not every capture replayed matched in both")
sys.exit(1 if bad else 0)
PY
fi

# 3. farm overhead per capture over lone plays (timed: --passes 8 --warmup 1, one at a time),
# on every 7th capture (KREPLAY_BENCH_EVERY), in KREPLAY_BENCH_ROUNDS interleaved rounds (3):
# a lone loop and a farm --jobs 1 run of the sample on an idle GPU, then both again beside a
# process holding a context on the GPU. Without persistence mode an idle GPU's driver state is
# torn down when its last process ends, so each lone play pays the GPU's wake-up, which the
# farm's children skip (its parent keeps the driver open); the held GPU is the fair baseline
# for the farm's own overhead, and the target is on the median of the rounds (one round's
# ratio moved by +-10 % on the H200). The lone plays do the work each farm child does: the timed
# passes and --verify (the farm verifies every replay: a verdict needs it).
TIMED="--passes 8 --warmup 1"
awk -v k="${KREPLAY_BENCH_EVERY:-7}" 'NR % k == 1' "$W/files" > "$W/sample"
S=$(wc -l < "$W/sample")
mapfile -t SAMPLE < "$W/sample"
lone_loop() {
  local t0 t1; t0=$(now)
  # shellcheck disable=SC2086
  while read -r f; do "$KR" play "$f" $TIMED --verify --json > /dev/null 2>> "$W/lone.err"; done < "$W/sample"
  t1=$(now); secs "$t0" "$t1"
}
# The mean wall time of the farm's children (its own start to record, per child), in s.
farm_run() {
  rm -f "$1"
  # shellcheck disable=SC2086
  "$KR" play "${SAMPLE[@]}" $TIMED --jobs 1 --json-lines "$1" > "$W/farm1.out" 2> "$W/farm1.err"
  python3 -c 'import json, sys; w = [json.loads(l)["wall_s"] for l in open(sys.argv[1]) if l.strip()]; print(f"{sum(w) / max(len(w), 1):.4f}")' "$1"
}
rm -f "$KEEP/base.jsonl" "$KEEP/new.jsonl" "$W/rounds"
for r in $(seq "${KREPLAY_BENCH_ROUNDS:-3}"); do
  cold=$(lone_loop); farm_idle=$(farm_run "$W/idle.jsonl")
  python3 -c 'import ctypes, time; c = ctypes.CDLL("libcuda.so.1"); c.cuInit(0); d = ctypes.c_int(); c.cuDeviceGet(ctypes.byref(d), 0); x = ctypes.c_void_p(); c.cuDevicePrimaryCtxRetain(ctypes.byref(x), d); time.sleep(3600)' > /dev/null 2>&1 &
  HOLDER=$!
  sleep 2
  warm=$(lone_loop); farm_held=$(farm_run "$KEEP/base.jsonl")
  kill $HOLDER 2> /dev/null; wait $HOLDER 2> /dev/null
  echo "$r $cold $farm_idle $warm $farm_held" >> "$W/rounds"
done
python3 - "$S" "$W/rounds" <<'PY' || MISSED=1
import statistics, sys
n = int(sys.argv[1])
rounds = [[float(x) for x in l.split()[1:]] for l in open(sys.argv[2]) if l.strip()]
held, idle = [], []
for k, (cold, farm_idle, warm, farm_held) in enumerate(rounds, 1):
    held.append((farm_held / (warm / n) - 1) * 100)
    idle.append((farm_idle / (cold / n) - 1) * 100)
    print(f"round {k}, {n} timed replays (--passes 8 --warmup 1), ms per capture: GPU held by another process: "
          f"lone kreplay play --verify {warm / n * 1e3:.0f} ms, farm --jobs 1 {farm_held * 1e3:.0f} ms per child "
          f"({held[-1]:+.1f} %); idle GPU: lone {cold / n * 1e3:.0f} ms, farm {farm_idle * 1e3:.0f} ms "
          f"({idle[-1]:+.1f} %)")
pct = statistics.median(held)
print(f"farm overhead per capture over a lone play of the same file, median of {len(held)} rounds: {pct:+.1f} % "
      f"with the GPU held by another process (target <= 10 %; rounds {', '.join(f'{x:+.1f}' for x in held)} %); "
      f"{statistics.median(idle):+.1f} % on an idle GPU")
if pct > 10:
    print("MISSED: farm overhead over 10 %")
    sys.exit(1)
PY

if [ -z "${KREPLAY_BENCH_OVERHEAD_ONLY:-}" ]; then
# Where a lone replay's time goes, and how the farm scales with --jobs on one GPU (the CUDA C++
# corpus, one verified pass each; KREPLAY_BENCH_JOBS: the --jobs values, default 1 2 4 8 16).
for f in $(head -1 "$W/files") $(grep /torch/ "$W/files" | head -1); do
  /usr/bin/time -f "%e" -o "$W/one.t" "$KR" play "$f" --passes 1 --json > "$W/one.json" 2> /dev/null
  python3 - "$W/one.json" "$W/one.t" "$f" <<'PY' || true
import json, sys
def find(v, key):
    if isinstance(v, dict):
        if key in v:
            return v[key]
        for x in v.values():
            got = find(x, key)
            if got is not None:
                return got
    return None
r = json.load(open(sys.argv[1]))
wall = float(open(sys.argv[2]).read().split()[-1])
name = "/".join(sys.argv[3].split("/")[-2:])
setup = find(r, "setup_ms")
print(f"lone play of {name}: {wall * 1e3:.0f} ms wall, setup (open to first launch) "
      f"{'unknown' if setup is None else f'{setup:.0f} ms'}")
PY
done
for j in ${KREPLAY_BENCH_JOBS:-1 2 4 8 16}; do
  t0=$(now)
  "$KR" play "$C/cuda" --no-timing --jobs $j > /dev/null 2>&1
  rc=$?; t1=$(now)
  python3 -c 'import sys; n, s = int(sys.argv[1]), float(sys.argv[2]); print(f"--no-timing --jobs {sys.argv[3]:>2}: {n} captures in {s:.1f} s = {n / s:.2f} captures/s (exit {sys.argv[4]})")' "$(grep -c /cuda/ "$W/files")" "$(secs "$t0" "$t1")" $j $rc
done

fi

# 4. a second timed run of the sample, compared with the first.
# shellcheck disable=SC2086
"$KR" play "${SAMPLE[@]}" $TIMED --jobs 1 --json-lines "$KEEP/new.jsonl" > /dev/null 2> "$W/farm2.err"
"$KR" compare "$KEEP/base.jsonl" "$KEEP/new.jsonl" --html "$KEEP/compare.html" > "$KEEP/compare.txt" 2>&1
echo "compare of two timed runs of the sample (exit $?):"
tail -4 "$KEEP/compare.txt"
[ "$MISSED" = 0 ] && echo "farm benchmarks: every figure met its target" || echo "farm benchmarks: MISSED targets above"
exit $MISSED
