#!/usr/bin/env bash
# probe35 (kreplay issue #35 feasibility): build, then run the CUDA C++ app and the PyTorch app
# plain and under the injected probe (CUPTI + Compute Sanitizer API in one library).
# Usage: bash run.sh          (from anywhere; works relative to this script's directory)
# Everything goes to stdout; a digest of the key lines is printed at the end.
# Total wall time is capped at ~175 s: steps that no longer fit are skipped (and say so).
set -u
cd "$(dirname "$0")"
HERE=$(pwd)
T0=$(date +%s)
BUDGET=${PROBE_BUDGET_S:-175}
LOG=$(mktemp /tmp/probe35.XXXXXX.log)
PY=${PYTHON:-python3}
PROBE="$HERE/build/libprobe.so"
PROBE134="$HERE/build/libprobe134.so"

left() { echo $(( BUDGET - ($(date +%s) - T0) )); }

# step NAME TIMEOUT_S cmd...   (never aborts the script)
step() {
  local name=$1 tmo=$2; shift 2
  local l; l=$(left)
  if [ "$l" -lt 8 ]; then echo "=== SKIP $name (time budget: ${l}s left)" | tee -a "$LOG"; return 0; fi
  [ "$tmo" -gt "$((l - 3))" ] && tmo=$((l - 3))
  echo "=== STEP $name (timeout ${tmo}s, ${l}s left): $*" | tee -a "$LOG"
  local s; s=$(date +%s.%N)
  timeout -k 3 "$tmo" "$@" 2>&1 | sed -u "s/^/[$name] /" | tee -a "$LOG"
  local rc=${PIPESTATUS[0]}
  local e; e=$(date +%s.%N)
  echo "=== END $name rc=$rc wall_s=$(awk -v a="$s" -v b="$e" 'BEGIN{printf "%.2f", b-a}')$([ "$rc" = 124 ] && echo ' TIMEOUT')" | tee -a "$LOG"
  return 0
}

INJ=(env CUDA_INJECTION64_PATH="$PROBE")   # an array, not a function: timeout must exec it

echo "=== probe35 run at $(date -u) in $HERE, log $LOG" | tee -a "$LOG"
step info 15 bash -c 'nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader; \
  ls -la /usr/local/cuda/compute-sanitizer/libsanitizer-public.so /usr/local/cuda/compute-sanitizer/include/sanitizer.h; \
  /usr/local/cuda/bin/nvcc --version | tail -1; '"$PY"' -c "import torch; print(\"torch\", torch.__version__, \"cuda\", torch.version.cuda)"'
step build 120 bash ./build.sh

if [ ! -f "$PROBE" ] || [ ! -f build/app ] || [ ! -f build/patch.fatbin ]; then
  echo "=== build incomplete: probe=$( [ -f "$PROBE" ] && echo ok || echo MISSING ) app=$( [ -f build/app ] && echo ok || echo MISSING ) patch=$( [ -f build/patch.fatbin ] && echo ok || echo MISSING )" | tee -a "$LOG"
fi

# --- CUDA C++ app: gather over 1 % of 256 MiB, 20 launches, launch 10 instrumented ---
step app_plain          30 ./build/app
step app_probe_main     40 "${INJ[@]}" PROBE_LAUNCH=10 ./build/app
# --- PyTorch: add inside a 512 MiB allocator segment; its 3rd timed iteration = add launch #4 ---
step torch_plain        60 "$PY" torch_app.py
step torch_probe_add    70 "${INJ[@]}" PROBE_KERNEL='CUDAFunctor_add|AddFunctor' PROBE_LAUNCH=4 "$PY" torch_app.py
# --- variants on the app ---
step app_probe_off      30 "${INJ[@]}" PROBE_LAUNCH=0 ./build/app                      # both subscribed, never patched
step app_sanitizer_only 30 "${INJ[@]}" PROBE_CUPTI=0 PROBE_LAUNCH=10 ./build/app       # no CUPTI subscriber
step app_sanitizer_first 30 "${INJ[@]}" PROBE_ORDER=sanitizer-first PROBE_COUNT=1 PROBE_LAUNCH=10 ./build/app
step app_patch_at_load  30 "${INJ[@]}" PROBE_PATCH=load PROBE_LAUNCH=10 ./build/app    # every launch patched, off-flag cost
step app_unpatch_after  30 "${INJ[@]}" PROBE_UNPATCH=1 PROBE_LAUNCH=10 ./build/app     # back to baseline after launch 10?
step app_cupti_only     30 "${INJ[@]}" PROBE_SANITIZER=0 ./build/app
# --- PyTorch matmul (cuBLAS, TMA on Hopper): does GLOBAL_MEMORY_ACCESS/bulk patching see its loads? ---
step torch_probe_mm     70 "${INJ[@]}" PROBE_KERNEL='gemm|nvjet|xmma|cutlass' PROBE_LAUNCH=4 PROBE_COUNT=1 "$PY" torch_app.py
# --- alternative init: LD_PRELOAD + constructor instead of CUDA_INJECTION64_PATH ---
step app_ldpreload      30 env LD_PRELOAD="$PROBE" PROBE_INIT_CTOR=1 PROBE_LAUNCH=10 ./build/app
# --- newer Sanitizer API (13.4 wheel, vendored): TMA_LOAD kind; does it run on this driver? ---
if [ -f "$PROBE134" ]; then
  step app_probe134     30 env CUDA_INJECTION64_PATH="$PROBE134" PROBE_FATBIN="$HERE/build/patch134.fatbin" PROBE_LAUNCH=10 ./build/app
  step torch_probe_mm134 70 env CUDA_INJECTION64_PATH="$PROBE134" PROBE_FATBIN="$HERE/build/patch134.fatbin" \
       PROBE_KERNEL='gemm|nvjet|xmma|cutlass' PROBE_LAUNCH=4 PROBE_COUNT=1 "$PY" torch_app.py
fi

echo
echo "================ DIGEST ($(($(date +%s) - T0)) s total) ================"
grep -E '^=== (STEP|END|SKIP)|probe: (RESULT|TIMING|SUMMARY|FAIL|init done|callbacks|range table|instrumenting)|probe: (cuptiSubscribe|sanitizerSubscribe|sanitizerAddPatchesFromFile|sanitizerPatchModule|sanitizerSetLaunchCallbackData|sanitizerSetCallbackData|sanitizerUnpatchModule)|probe: sanitizerPatchInstructions.* -> [1-9]|app: SUMMARY|torch: SUMMARY|torch: FAIL|build: (FAILED|done)|Error|error:|Segmentation|Aborted|core dumped' "$LOG" \
  | cut -c1-400
echo "================ end of digest; full log above (and in $LOG) ================"
exit 0
