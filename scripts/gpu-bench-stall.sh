#!/usr/bin/env bash
# The application's stall per capture (#34) on a CUDA machine, one run, every figure beside its
# limit and beside the baselines measured in the same run:
#   scripts/gpu-bench-stall.sh [BIN_DIR] [OLD_LIB]
#     BIN_DIR: kreplay and libkreplay_record.so (scripts/dist.sh; default dist)
#     OLD_LIB: an older libkreplay_record.so to measure beside (optional)
# Limit: stall <= 2 x captured bytes / device-to-device bandwidth + 5 ms, the bandwidth measured
# here (copybench). Cases:
#   zeros-4g     bigmem zeros 4 64: 4 GiB of zeros reached, 64 MiB of it written
#   floats-16g   bigmem floats 16: 16 GiB of float-like data (KREPLAY_STALL_FLOATS_GIB, 0: skip)
#   torch-gemm   a PyTorch training step's GEMM (torch_train_app.py), its first capture in the
#                process and its tenth
#   ptrtable     a dispatch whose argument points at a table of 10,000 allocations of 4 KiB
# Each case runs as shipped, then with KREPLAY_DEBUG_PREWARM=0 (nothing made when a context is
# created: the first capture makes it), then with OLD_LIB; each line shows the stall's phases.
# The pointer table also runs with KREPLAY_DEBUG_TABLE=0 (every word asked of the driver, as
# before the recorder's allocation table: the same build's baseline), three times each, with
# KREPLAY_DEBUG_POOL=0 (the capture's host blocks glibc's, as before the recorder kept them)
# twice, and
# once more with KREPLAY_DEBUG_STALL=1 and KREPLAY_DEBUG_TABLE=check for the walk's own line
# (its per-lookup clocks make that run slower: its stall is not a figure).
# KREPLAY_STALL_VARIANTS="new" leaves out the no-prewarm runs (a shorter run).
# Exits 1 when a figure of the shipped run misses its limit (MISSED) or could not be measured.
set -u
HERE=$(cd "$(dirname "$0")/.." && pwd)
BIN=$(cd "${1:-$HERE/dist}" && pwd) || { echo "no binary directory"; exit 2; }
OLD=${2:-}
KR="$BIN/kreplay"
W=${KREPLAY_WORK:-$(mktemp -d /tmp/kreplay-stall.XXXXXX)}
mkdir -p "$W"
ARCH=${KREPLAY_ARCH:-sm_90}
FLOATS=${KREPLAY_STALL_FLOATS_GIB:-16}
export PYTHONUNBUFFERED=1
for app in bigmem ptrtable copybench; do
  nvcc -O2 -std=c++17 -arch="$ARCH" -o "$W/$app" "$HERE/testdata/apps/$app.cu" || exit 2
done
dtod=$("$W/copybench" $((4 << 30)) dtod | tee /dev/stderr | grep -o '([0-9.]* GB/s)' | grep -o '[0-9.]*')
[ -n "$dtod" ] || { echo "no device-to-device bandwidth measured"; exit 2; }
echo "device-to-device: $dtod GB/s (copybench, 4 GiB)"
# The host: the pointer table's stall is host work, and the same build's varies from host to
# host (3.2 to 6.2 ms on H100 hosts, session 23).
echo "host: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1); $(lscpu 2> /dev/null \
  | sed -n 's/^Model name: *//p; s/^CPU(s): */CPUs /p; s/^NUMA node(s): */NUMA nodes /p; s/^CPU max MHz: */max MHz /p' \
  | paste -sd ';' -)"

# record NAME VARIANT ARGS...: one `kreplay record --json`, its report in $W/NAME-VARIANT.json.
record() {
  local name=$1 variant=$2; shift 2
  local env=()
  case $variant in
    no-prewarm) env=(KREPLAY_DEBUG_PREWARM=0) ;;
    old) env=(KREPLAY_RECORD_LIB="$OLD") ;;
    table-off*) env=(KREPLAY_DEBUG_TABLE=0) ;;
    pool-off*) env=(KREPLAY_DEBUG_POOL=0) ;;
    walk-line) env=(KREPLAY_DEBUG_STALL=1 KREPLAY_DEBUG_TABLE=check) ;;
  esac
  rm -rf "$W/$name-$variant" && mkdir -p "$W/$name-$variant"
  env "${env[@]}" "$KR" record --json --force -o "$W/$name-$variant/%n.krr" "$@" \
    > "$W/$name-$variant.json" 2> "$W/$name-$variant.err"
  echo "  $name ($variant): exit $?; $(grep -v '^{' "$W/$name-$variant.json" | tail -1)"
  grep -h 'kreplay: walk:' "$W/$name-$variant.err" | sed 's/^/    /'
  [ "$name-$variant" = ptrtable-new ] && address_order "$W/$name-$variant"/*.krr
  rm -rf "$W/$name-$variant"
}

# address_order CAPTURE: the order of the pointer table's allocations along the table (the
# regions the walk reached through it, in region order): how often the next is above or below,
# and the longest ascending run. The walk's bookkeeping depends on it (docs/PERFORMANCE.md).
address_order() {
  "$KR" info --json "$1" 2> /dev/null | python3 -c '
import json, sys
r = [x["address"] for x in json.load(sys.stdin)["regions"] if x["role"] == "indirect"]
up = sum(b > a for a, b in zip(r, r[1:])); down = sum(b < a for a, b in zip(r, r[1:]))
run = best = 1
for a, b in zip(r, r[1:]):
    run = run + 1 if b > a else 1
    best = max(best, run)
print(f"    allocation order along the table: {len(r)} regions, next above {up} times, below {down} times, longest ascending run {best}")
' || echo "    allocation order: no capture to read"
}

variants=${KREPLAY_STALL_VARIANTS:-new no-prewarm}
[ -n "$OLD" ] && variants="$variants old"
echo "== cases ($variants)"
for v in $variants; do
  record zeros-4g "$v" -k bigmem_reduce -- "$W/bigmem" zeros 4 64
  [ "$FLOATS" != 0 ] && [ "$v" != no-prewarm ] && record floats-16g "$v" -k bigmem_reduce -- "$W/bigmem" floats "$FLOATS"
  record torch-gemm "$v" -k 'regex:gemm|xmma|cutlass' --count 10 -- python3 "$HERE/testdata/apps/torch_train_app.py" 6
  record ptrtable "$v" -k ptrtable_sum -- "$W/ptrtable" 10000 4
done
for v in new-2 table-off table-off-2 new-3 table-off-3 pool-off pool-off-2 walk-line; do
  record ptrtable "$v" -k ptrtable_sum -- "$W/ptrtable" 10000 4
done

python3 - "$W" "$dtod" "$variants" "$FLOATS" <<'PY'
import json, sys
w, dtod, variants, floats = sys.argv[1], float(sys.argv[2]) * 1e9, sys.argv[3].split(), sys.argv[4]
missed = 0

def captures(name, variant):
    try:
        lines = [l for l in open(f"{w}/{name}-{variant}.json") if l.startswith("{")]
        return sorted(json.loads(lines[-1]).get("captures") or [], key=lambda c: c.get("match_index", 0))
    except (OSError, IndexError, ValueError):
        return []

def line(label, c):
    """A capture's stall beside its limit, with its phases; (text, within the limit)."""
    limit = 2 * c["raw_bytes"] / dtod * 1e3 + 5
    phases = ", ".join(f"{p['phase']} {p['ms']:.1f}" for p in c.get("stall_phases") or [])
    ok = c["stall_ms"] <= limit
    return (f"{label}: stall {c['stall_ms']:.1f} ms, limit {limit:.1f} ms (2 x {c['raw_bytes'] / 2**20:.1f} MiB "
            f"/ {dtod / 1e9:.0f} GB/s + 5 ms) -> {'ok' if ok else 'MISSED'}; phases (ms): {phases}"), ok

cases = [("zeros-4g", [0]), ("floats-16g", [0]), ("torch-gemm", [0, 9]), ("ptrtable", [0])]
if floats == "0":
    cases = [c for c in cases if c[0] != "floats-16g"]
# The pointer table's repeats and its baseline without the allocation table (same build).
extra = {"ptrtable": ["new-2", "new-3", "table-off", "table-off-2", "table-off-3", "pool-off", "pool-off-2"]}
for name, picks in cases:
    for v in variants + extra.get(name, []):
        cs = captures(name, v)
        if name == "floats-16g" and v == "no-prewarm":
            continue
        for i in picks:
            label = f"stall: {name}{' capture ' + str(i + 1) if len(picks) > 1 else ''} ({v})"
            if i >= len(cs):
                print(f"{label}: no capture {i + 1} ({len(cs)} captured)")
                missed += v.startswith("new")
                continue
            text, ok = line(label, cs[i])
            print(text)
            missed += v.startswith("new") and not ok
# The pointer table's stall varies by milliseconds from run to run: its runs of the shipped
# build side by side, with their median.
runs = [c[0]["stall_ms"] for c in (captures("ptrtable", v) for v in ("new", "new-2", "new-3")) if c]
if runs:
    runs.sort()
    print(f"stall: ptrtable (new, {len(runs)} runs): " + ", ".join(f"{x:.1f}" for x in runs)
          + f" ms, median {runs[len(runs) // 2]:.1f} ms")
# The training step's ten captures, each (the limit names the first and the tenth; outliers
# between them, once in ten captures, are where a wait on other threads' GPU work shows), with
# the largest phase of each capture over twice the median.
for v in variants:
    cs = captures("torch-gemm", v)
    if not cs:
        continue
    stalls = sorted(c["stall_ms"] for c in cs)
    median = stalls[len(stalls) // 2]
    def worst(c):
        p = max(c.get("stall_phases") or [{"phase": "?", "ms": 0}], key=lambda p: p["ms"])
        return f"{p['phase']} {p['ms']:.1f}"
    print(f"stall: torch-gemm all {len(cs)} captures ({v}): "
          + " ".join(f"{c['stall_ms']:.1f}" + (f" ({worst(c)})" if c["stall_ms"] > 2 * median else "") for c in cs)
          + f" ms, median {median:.1f} ms")
sys.exit(1 if missed else 0)
PY
