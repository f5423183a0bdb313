#!/usr/bin/env bash
# The GPU end-to-end suite (tests/gpu, pytest) on a CUDA machine: builds the test apps with nvcc
# (cached by source hash), runs each app plain and under kreplay record/list/profile, then
# verify, info, play --verify, --relocate, --ptx, the reproducers and the robustness cases.
# Correctness cases run in parallel; the cases that time, count or need the GPU alone
# (markers serial, mpi) run after them, one at a time, in the same run folder. Each half prints
# the table and "N passed, N failed, N skipped"; the exit status is non-zero when any case
# failed.
#
#   scripts/gpu-test.sh [BIN_DIR] [PYTEST ARGS...]   # BIN_DIR: kreplay and libkreplay_record.so (default: dist)
#   scripts/gpu-test.sh dist -k "cuda-saxpy or graph"  # some cases, by name
#
# Environment: KREPLAY_WORK=DIR keeps the work files there (the table as DIR/results.jsonl);
# KREPLAY_JOBS=N parallel workers (default 8); KREPLAY_ARCH=sm_90 the nvcc target;
# KREPLAY_CUPTI_DIRS the other CUPTI releases for cupti-versions.
set -u
HERE=$(cd "$(dirname "$0")/.." && pwd)
BIN=$(cd "${1:-$HERE/dist}" && pwd) || { echo "no binary directory"; exit 2; }
[ $# -gt 0 ] && shift
[ -x "$BIN/kreplay" ] || { echo "$BIN/kreplay not found: run scripts/dist.sh and copy dist/ there"; exit 2; }
WORK=${KREPLAY_WORK:-$(mktemp -d /tmp/kreplay-gpu.XXXXXX)}
export PYTHONUNBUFFERED=1
cd "$HERE"
run() { python3 -m pytest tests/gpu --kreplay-bin "$BIN" --gpu-work "$WORK" -p no:cacheprovider "$@"; }
run -n "${KREPLAY_JOBS:-8}" -m "not serial and not mpi" "$@"; a=$?
run -m "serial or mpi" "$@"; b=$?
# 5: nothing selected in that half (a -k for cases of the other half).
if [ $a -eq 5 ] && [ $b -eq 5 ]; then echo "no case matched"; exit 5; fi
[ $a -eq 5 ] && a=0
[ $b -eq 5 ] && b=0
echo "== run folder: $WORK (results.jsonl)"
[ $a -eq 0 ] && [ $b -eq 0 ]
