#!/usr/bin/env bash
# kreplay #35 touched-pages probe, on the GPU machine, from the repo root:
#     bash scripts/probes/sanitizer-cupti/run.sh
# Builds into /tmp/sp, runs each app plain and under the injected probe in several modes, every
# step under a timeout; keeps going after failures and skips steps once ~170 s are spent.
# Everything goes to stdout (and to $OUT/run.log when $OUT is set); a digest closes the output.
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
SP=/tmp/sp
CUDA=${CUDA_HOME:-/usr/local/cuda}
PY=${PYTHON:-python3}
T0=$(date +%s)
BUDGET=${PROBE_BUDGET_S:-170}
LOG=${OUT:-/tmp}/run.log
mkdir -p "$(dirname "$LOG")"; : > "$LOG"

left() { echo $((BUDGET - ($(date +%s) - T0))); }
# step NAME TIMEOUT_S cmd...   (never stops the script)
step() {
  local name=$1 tmo=$2; shift 2
  local l; l=$(left)
  if [ "$l" -lt 6 ]; then echo "=== SKIP $name (time budget spent)" | tee -a "$LOG"; return 0; fi
  [ "$tmo" -gt "$((l - 2))" ] && tmo=$((l - 2))
  echo "=== STEP $name (timeout ${tmo}s): $*" | tee -a "$LOG"
  local s; s=$(date +%s.%N)
  timeout -k 3 "$tmo" "$@" 2>&1 | sed -u "s/^/[$name] /" | tee -a "$LOG"
  local rc=${PIPESTATUS[0]}
  echo "=== END $name rc=$rc wall_s=$(awk -v a="$s" -v b="$(date +%s.%N)" 'BEGIN{printf "%.2f", b-a}')$([ "$rc" = 124 ] && echo ' TIMEOUT')" | tee -a "$LOG"
  return 0
}

echo "=== probe35-touched at $(date -u) in $HERE" | tee -a "$LOG"
# What is there, before anything can fail. The Sanitizer API headers carry no version macro:
# the instruction ids they define are the version that matters here.
{
  set -x
  ls /usr/local/cuda/compute-sanitizer /usr/local/cuda/compute-sanitizer/include
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  "$CUDA/compute-sanitizer/compute-sanitizer" --version | tail -2
  "$CUDA/bin/nvcc" --version | tail -2
  grep -h "define CUDA_VERSION" "$CUDA/include/cuda.h"
  grep -rh "define CUPTI_API_VERSION" "$CUDA/include" "$CUDA/extras/CUPTI/include" 2>/dev/null | head -2
  grep -h -i "version" "$CUDA"/compute-sanitizer/include/sanitizer*.h | grep -i define | head
  grep -ho "SANITIZER_INSTRUCTION_[A-Z_0-9]* *= *[0-9]*" "$CUDA/compute-sanitizer/include/sanitizer_patching.h" | tr -s ' ' | paste -sd' '
  ls -la "$CUDA"/extras/CUPTI/lib64/libcupti.so* "$CUDA"/lib64/libcupti.so* 2>/dev/null
  ls -la "$HERE/vendor" 2>/dev/null
  set +x
} 2>&1 | sed -u 's/^/[info] /' | tee -a "$LOG"
step python 20 "$PY" -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.is_available())"

step build 100 bash "$HERE/build.sh" "$SP"

P=$SP/libprobe.so
V=$SP/libprobe_v134.so
INJ=(env CUDA_INJECTION64_PATH="$P")
INJV=(env CUDA_INJECTION64_PATH="$V")
APP=$SP/touch_app
TORCH="$HERE/apps/touch_torch.py"
ADD='CUDAFunctor_add|AddFunctor'

# ---- the CUDA C++ app: gather 1 % of a 1 GiB buffer; 10 iterations, the 3rd instrumented ----
step app_plain            25 "$APP"
step app_both             30 "${INJ[@]}" PROBE_MODE=both PROBE_NTH=3 "$APP"         # CUPTI first, then the Sanitizer API
step app_sanfirst         30 "${INJ[@]}" PROBE_MODE=sanfirst PROBE_CUPTI_V2=1 PROBE_NTH=3 "$APP"   # Sanitizer API first; v2 names the holder
step app_sanitizer        30 "${INJ[@]}" PROBE_MODE=sanitizer PROBE_NTH=3 PROBE_COUNT=1 "$APP"   # the Sanitizer API alone
step app_sanitizer_keep   30 "${INJ[@]}" PROBE_MODE=sanitizer PROBE_NTH=3 PROBE_UNPATCH=0 "$APP"  # module stays patched: off cost
step app_sanitizer_load   30 "${INJ[@]}" PROBE_MODE=sanitizer PROBE_NTH=3 PROBE_PATCH=load PROBE_UNPATCH=0 PROBE_OFF=state "$APP"
step app_cupti            25 "${INJ[@]}" PROBE_MODE=cupti PROBE_NTH=3 "$APP"        # CUPTI alone: its own cost
step app_handover         30 "${INJ[@]}" PROBE_MODE=handover PROBE_NTH=3 "$APP"     # CUPTI -> Sanitizer API -> CUPTI
if [ -f "$V" ]; then
  step app_v134_both      30 "${INJV[@]}" PROBE_MODE=both PROBE_CUPTI_V2=1 PROBE_NTH=3 "$APP"
  step app_v134_sanfirst  30 "${INJV[@]}" PROBE_MODE=sanfirst PROBE_CUPTI_V2=1 PROBE_NTH=3 "$APP"
fi

# ---- PyTorch: add on 4 MiB slices of a 256 MiB segment; add launch 4 = timed iteration 3 ----
step torch_plain          40 "$PY" "$TORCH"
step torch_sanitizer      50 "${INJ[@]}" PROBE_MODE=sanitizer PROBE_KERNEL="$ADD" PROBE_NTH=4 "$PY" "$TORCH"
step torch_both           45 "${INJ[@]}" PROBE_MODE=both PROBE_KERNEL="$ADD" PROBE_NTH=4 "$PY" "$TORCH"
step torch_handover       50 "${INJ[@]}" PROBE_MODE=handover PROBE_KERNEL="$ADD" PROBE_NTH=4 "$PY" "$TORCH"
# ---- cuBLAS matmul (TMA on Hopper): does anything see its loads? 13.4 library with TMA_LOAD if there ----
if [ -f "$V" ]; then MM=("${INJV[@]}"); else MM=("${INJ[@]}"); fi
step torch_mm             60 "${MM[@]}" PROBE_MODE=sanitizer PROBE_KERNEL='nvjet|gemm|xmma|cutlass|sm90' PROBE_NTH=4 \
  PROBE_TMA=1 PROBE_COUNT=1 TOUCH_MM=1 ITERS=6 "$PY" "$TORCH"

echo
echo "================ DIGEST ($(($(date +%s) - T0)) s) ================"
grep -E '^=== (STEP|END|SKIP)|probe: (region |result |callbacks |timing |cupti launches|summary |FAIL|WARN|handover|init done|chosen launch|cuptiSubscribe|sanitizerSubscribe|sanitizerAddPatchesFromFile|sanitizerPatchInstructions|sanitizerPatchModule|sanitizerUnpatchModule|sanitizerSetLaunchCallbackData|sanitizerSetCallbackData|cupti: library|sanitizer: library)|touch_app: (summary|expected)|touch_torch: (summary|result|segment|add expected|matmul A)|build: (FAILED|done)|error|Segmentation|Aborted|core dumped' "$LOG" \
  | cut -c1-330
echo "================ end of digest (full log above; also in $LOG) ================"
exit 0
