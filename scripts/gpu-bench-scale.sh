#!/usr/bin/env bash
# Model-scale captures (#13) on a CUDA machine, one run, every figure next to the baseline the
# issue names, measured in the same run:
#   scripts/gpu-bench-scale.sh [BIN_DIR] [GIB]     # BIN_DIR: kreplay, libkreplay_record.so,
#                                                  # stream_rates (scripts/dist.sh); GIB: 16
# For a dispatch reaching GIB GiB of float-like data and one of zeros (testdata/apps/bigmem.cu):
#   capture complete (dispatch to file renamed) >= 0.8 x min(pinned DtoH, zstd on all cores at
#     the writer's level, disk write x the data's compression ratio): rates in bytes of memory
#   file to first launch in play >= 0.8 x min(decompression on all cores, pinned HtoD, disk read
#     x ratio); measured as play's setup_ms (the capture open: context, placement, upload,
#     module, pristine copy, up to the first launch); the whole process's wall time is printed
#     next to it
#   peak RSS of the recorded application and of play <= 2 GiB (/usr/bin/time)
#   stall <= 2 x captured bytes / DtoD bandwidth + 5 ms
# and one dispatch reaching more memory than the GPU has free (bigmem mixed, 100 GiB by default:
# KREPLAY_BIG_GIB), captured with the same host-memory bound.
# Disk baselines use O_DIRECT (the disk, not the page cache); captures are written and read
# through the page cache as a user's would be.
# Exits 1 when a figure misses its target (MISSED) or could not be measured.
set -u
MISSED=0
HERE=$(cd "$(dirname "$0")/.." && pwd)
BIN=$(cd "${1:-$HERE/dist}" && pwd)
GIB=${2:-16}
W=${KREPLAY_WORK:-$(mktemp -d /tmp/kreplay-scale.XXXXXX)}
mkdir -p "$W"
ARCH=${KREPLAY_ARCH:-sm_90}
nvcc -O2 -std=c++17 -arch=$ARCH -o "$W/bigmem" "$HERE/testdata/apps/bigmem.cu" || exit 2
nvcc -O2 -arch=$ARCH -o "$W/copybench" "$HERE/testdata/apps/copybench.cu" || exit 2

rate() { grep -o '([0-9.]* GB/s)' | grep -o '[0-9.]*'; }
dtoh=$("$W/copybench" $((1 << 30)) dtoh | tee /dev/stderr | rate)
htod=$("$W/copybench" $((1 << 30)) htod | tee /dev/stderr | rate)
dtod=$("$W/copybench" $((4 << 30)) dtod | tee /dev/stderr | rate)
rates=$("$BIN/stream_rates" 1024 | tee /dev/stderr)
dd if=/dev/zero of="$W/dd" bs=64M count=64 oflag=direct 2> "$W/dd.w"
dd if="$W/dd" of=/dev/null bs=64M iflag=direct 2> "$W/dd.r"
rm -f "$W/dd"
ddrate() { python3 -c 'import re, sys; m = re.search(r"([0-9.]+) ([kMG])B/s", open(sys.argv[1]).read()); print(float(m.group(1)) * {"k": 1e-6, "M": 1e-3, "G": 1}[m.group(2)] if m else 0)' "$1"; }
dw=$(ddrate "$W/dd.w")
dr=$(ddrate "$W/dd.r")
echo "disk (O_DIRECT, 4 GiB): write $dw GB/s, read $dr GB/s"

one() { # kind gib
  local kind=$1 g=$2 f="$W/$1$2.krr"
  local line; line=$(echo "$rates" | grep "rates: $kind ")
  [ -z "$line" ] && line=$(echo "$rates" | grep "rates: floats ")
  local zc zd ratio
  zc=$(echo "$line" | sed -E 's/.* compress ([0-9.]+) .*/\1/')
  zd=$(echo "$line" | sed -E 's/.* decompress ([0-9.]+) .*/\1/')
  ratio=$(echo "$line" | sed -E 's/.* ratio ([0-9.]+) .*/\1/')
  echo "== $kind, $g GiB"
  "$W/bigmem" "$kind" "$g"
  /usr/bin/time -f "%M" -o "$W/rec.rss" "$BIN/kreplay" record --json -k bigmem_reduce -o "$f" -- "$W/bigmem" "$kind" "$g" > "$W/rec.out" 2> "$W/rec.err"
  grep -v '^{' "$W/rec.out"; grep -h "captured\|stall of\|error\|warning" "$W/rec.err"
  /usr/bin/time -f "%e %M" -o "$W/play.t" "$BIN/kreplay" play "$f" --passes 1 --json > "$W/play1.json" 2> "$W/play1.err" || tail -3 "$W/play1.err"
  /usr/bin/time -f "%e %M" -o "$W/verify.t" "$BIN/kreplay" play "$f" --passes 2 --verify --json > "$W/play2.json" 2> "$W/play2.err" || tail -3 "$W/play2.err"
  python3 - "$W" "$kind" "$g" "$dtoh" "$htod" "$dtod" "$zc" "$zd" "$ratio" "$dw" "$dr" "$(stat -c %s "$f" 2>/dev/null || echo 0)" <<'PY'
import json, sys
w, kind, g = sys.argv[1], sys.argv[2], sys.argv[3]
dtoh, htod, dtod, zc, zd, ratio, dw, dr = map(float, sys.argv[4:12])
size = int(sys.argv[12])
rec = json.loads([l for l in open(f"{w}/rec.out") if l.startswith("{")][-1])
c = rec["captures"][0]
raw, total_s, stall = c["raw_bytes"], c["total_ms"] / 1e3, c["stall_ms"]
rss_rec = int(open(f"{w}/rec.rss").read().split()[-1]) / 1024
play_s, rss_play = open(f"{w}/play.t").read().split()[-2:]
play_s, rss_play = float(play_s), int(rss_play) / 1024
ver_s, rss_ver = open(f"{w}/verify.t").read().split()[-2:]
ver_s, rss_ver = float(ver_s), int(rss_ver) / 1024
p1 = json.load(open(f"{w}/play1.json")); p2 = json.load(open(f"{w}/play2.json"))
ok = lambda b: "ok" if b else "MISSED"
GB = 1e9
cap_rate = raw / total_s / GB
cap_base = min(dtoh, zc, dw * ratio)
print(f"bench: {kind} {g} GiB: capture complete {total_s:.2f} s = {cap_rate:.2f} GB/s of memory ({raw / 2**30:.1f} GiB, stored in {size / 2**30:.2f} GiB); "
      f"baseline min(DtoH {dtoh:.1f}, zstd {zc:.1f}, disk {dw:.2f} x ratio {ratio:.2f}) = {cap_base:.2f} GB/s; target >= {0.8 * cap_base:.2f} -> {ok(cap_rate >= 0.8 * cap_base)}")
setup_s = p1["setup_ms"] / 1e3
first = raw / setup_s / GB
play_base = min(zd, htod, dr * ratio)
print(f"bench: {kind} {g} GiB: play file to first launch {setup_s:.2f} s (the whole process {play_s:.2f} s) = {first:.2f} GB/s; "
      f"baseline min(unzstd {zd:.1f}, HtoD {htod:.1f}, disk {dr:.2f} x ratio {ratio:.2f}) = {play_base:.2f} GB/s; target >= {0.8 * play_base:.2f} -> {ok(first >= 0.8 * play_base)}")
print(f"bench: {kind} {g} GiB: peak RSS recorded app {rss_rec:.0f} MiB, play {rss_play:.0f} MiB, play --verify {rss_ver:.0f} MiB ({ver_s:.1f} s, {p2['verify']['matched'] and 'matched' or 'NOT matched'}); target <= 2048 MiB -> {ok(max(rss_rec, rss_play, rss_ver) <= 2048)}")
stall_budget = 2 * raw / (dtod * GB) * 1e3 + 5
phases = ", ".join(f"{p['phase']} {p['ms']:.1f}" for p in c.get("stall_phases", []))
print(f"bench: {kind} {g} GiB: stall {stall:.1f} ms ({phases} ms); target <= 2 x {raw / 2**30:.1f} GiB / DtoD {dtod:.0f} GB/s + 5 ms = {stall_budget:.1f} ms -> {ok(stall <= stall_budget)}")
met = [cap_rate >= 0.8 * cap_base, first >= 0.8 * play_base, max(rss_rec, rss_play, rss_ver) <= 2048, stall <= stall_budget,
       bool(p2["verify"]["matched"])]
sys.exit(0 if all(met) else 3)
PY
  [ $? -eq 0 ] || MISSED=1
  rm -f "$f"
}

one floats "$GIB"
one zeros "$GIB"

BIG=${KREPLAY_BIG_GIB:-100}
[ "$BIG" = 0 ] && { [ "$MISSED" = 0 ] || echo "bench: a target was missed (MISSED above)"; exit "$MISSED"; }
echo "== beyond free device memory: bigmem mixed $BIG GiB (4 GiB float-like, the rest zeros)"
nvidia-smi --query-gpu=memory.total,memory.used --format=csv,noheader
"$W/bigmem" mixed "$BIG"
/usr/bin/time -f "%M" -o "$W/big.rss" "$BIN/kreplay" record --json -k bigmem_reduce -o "$W/big.krr" -- "$W/bigmem" mixed "$BIG" > "$W/big.out" 2> "$W/big.err"
grep -v '^{' "$W/big.out"; grep -h "captured\|stall of\|error\|warning" "$W/big.err"
/usr/bin/time -f "%e %M" -o "$W/bigplay.t" "$BIN/kreplay" play "$W/big.krr" --passes 2 --verify --json > "$W/bigplay.json" 2> "$W/bigplay.err" || tail -3 "$W/bigplay.err"
python3 - "$W" "$BIG" <<'PY'
import json, sys
w, g = sys.argv[1], sys.argv[2]
rec = json.loads([l for l in open(f"{w}/big.out") if l.startswith("{")][-1])
c = rec["captures"][0]
rss = int(open(f"{w}/big.rss").read().split()[-1]) / 1024
t, prss = open(f"{w}/bigplay.t").read().split()[-2:]
p = json.load(open(f"{w}/bigplay.json"))
print(f"bench: beyond free memory {g} GiB: captured {c['raw_bytes'] / 2**30:.1f} GiB in {c['total_ms'] / 1e3:.1f} s (stall {c['stall_ms'] / 1e3:.1f} s: written during it), stored {c['stored_bytes'] / 2**30:.2f} GiB; "
      f"peak RSS recorded app {rss:.0f} MiB, play --verify {int(prss) / 1024:.0f} MiB ({float(t):.1f} s, {'matched' if p['verify']['matched'] else 'NOT matched'}); target <= 2048 MiB -> {'ok' if max(rss, int(prss) / 1024) <= 2048 else 'MISSED'}")
sys.exit(0 if max(rss, int(prss) / 1024) <= 2048 and p["verify"]["matched"] else 3)
PY
[ $? -eq 0 ] || MISSED=1
rm -f "$W/big.krr"
if [ "$MISSED" != 0 ]; then echo "bench: a target was missed (MISSED above)"; exit 1; fi
