#!/usr/bin/env bash
# Builds the #35 touched-pages probe into the folder $1 (default /tmp/sp), on the GPU machine:
#   probe_patch.fatbin   the patch module (device callbacks), as NVIDIA's samples build theirs
#   libprobe.so          the injected library, against this machine's CUPTI and Sanitizer API
#   libprobe_v134.so     the same against vendor/ (CUPTI 13.4 + Sanitizer API 13.4), if present
#   touch_app            the CUDA C++ test app
# Prints every command (set -x), keeps going after a failure; exit status = failed targets.
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
OUT=${1:-/tmp/sp}
CUDA=${CUDA_HOME:-/usr/local/cuda}
NVCC=${NVCC:-$CUDA/bin/nvcc}
mkdir -p "$OUT"
fails=0
ran() { local rc=$1; shift; if [ "$rc" -ne 0 ]; then echo "build: FAILED rc=$rc: $*"; fails=$((fails + 1)); fi; }

first_dir_with() {   # first_dir_with FILE DIR... -> the first DIR holding FILE
  local f=$1; shift
  for d in "$@"; do [ -e "$d/$f" ] && { echo "$d"; return 0; }; done
  return 1
}

SAN_INC=$(first_dir_with sanitizer_patching.h "$CUDA/compute-sanitizer/include" "$CUDA/extras/compute-sanitizer/include" "$CUDA/include") \
  || SAN_INC=$(dirname "$(find "$CUDA/" -name sanitizer_patching.h 2>/dev/null | head -1)")
SAN_LIB=$(first_dir_with libsanitizer-public.so "$CUDA/compute-sanitizer" "$CUDA/extras/compute-sanitizer" "$CUDA/lib64") \
  || SAN_LIB=$(dirname "$(find "$CUDA/" -name libsanitizer-public.so 2>/dev/null | head -1)")
CUPTI_INC=$(first_dir_with cupti.h "$CUDA/extras/CUPTI/include" "$CUDA/include" "$CUDA/targets/x86_64-linux/include") \
  || CUPTI_INC=$(dirname "$(find "$CUDA/" -name cupti.h 2>/dev/null | head -1)")
META_INC=$(first_dir_with generated_cuda_meta.h "$CUPTI_INC" "$SAN_INC" "$CUDA/include") || META_INC=$CUPTI_INC
CUPTI_LIB=""
for d in "$CUDA/extras/CUPTI/lib64" "$CUDA/lib64" "$CUDA/targets/x86_64-linux/lib"; do
  [ -z "$CUPTI_LIB" ] && ls "$d"/libcupti.so* >/dev/null 2>&1 && CUPTI_LIB=$d
done
CUPTI_SO="$CUPTI_LIB/libcupti.so"; [ -e "$CUPTI_SO" ] || CUPTI_SO=$(ls "$CUPTI_LIB"/libcupti.so.* 2>/dev/null | head -1)
CUDA_LINK=$(first_dir_with libcuda.so /usr/lib/x86_64-linux-gnu "$CUDA/lib64/stubs" "$CUDA/targets/x86_64-linux/lib/stubs") || CUDA_LINK="$CUDA/lib64/stubs"
echo "build: OUT=$OUT CUDA=$CUDA NVCC=$NVCC"
echo "build: SAN_INC=$SAN_INC SAN_LIB=$SAN_LIB"
echo "build: CUPTI_INC=$CUPTI_INC META_INC=$META_INC CUPTI_LIB=$CUPTI_LIB CUPTI_SO=$CUPTI_SO CUDA_LINK=$CUDA_LINK"
set -x
"$NVCC" --version | tail -2

# 1. the patch module: the MemoryTracker sample's flags (nvcc --fatbin --compile-as-tools-patch,
#    SASS for sm_90 and PTX of compute_90); fallbacks: a cubin, then the older -rdc flags.
"$NVCC" --fatbin --compile-as-tools-patch -gencode arch=compute_90,code=sm_90 -gencode arch=compute_90,code=compute_90 \
  -I"$SAN_INC" -I"$HERE" -o "$OUT/probe_patch.fatbin" -c "$HERE/probe_patch.cu"
rc=$?
if [ $rc -ne 0 ]; then
  "$NVCC" --cubin --compile-as-tools-patch -arch=sm_90 -I"$SAN_INC" -I"$HERE" -o "$OUT/probe_patch.fatbin" -c "$HERE/probe_patch.cu"
  rc=$?
fi
if [ $rc -ne 0 ]; then
  "$NVCC" --cubin -rdc=true --keep-device-functions -arch=sm_90 -I"$SAN_INC" -I"$HERE" -o "$OUT/probe_patch.fatbin" -c "$HERE/probe_patch.cu"
  rc=$?
fi
ran $rc "probe_patch.fatbin"

# 2. the injected library. RPATH (not RUNPATH): LD_LIBRARY_PATH cannot swap the libraries.
g++ -std=c++17 -O2 -g -Wall -Wno-unused-parameter -fPIC -shared -I"$HERE" -I"$CUPTI_INC" -I"$META_INC" -I"$SAN_INC" -I"$CUDA/include" \
  "$HERE/probe_inject.cpp" -o "$OUT/libprobe.so" "$CUPTI_SO" -L"$SAN_LIB" -lsanitizer-public -L"$CUDA_LINK" -lcuda -ldl -lpthread \
  -Wl,--disable-new-dtags -Wl,-rpath,"$CUPTI_LIB" -Wl,-rpath,"$SAN_LIB"
ran $? "libprobe.so"

# 3. the same against vendor/ (CUPTI 13.4: cuptiSubscribe_v2; Sanitizer API 13.4: TMA_LOAD),
#    built with this machine's 13.0 headers (the probe looks cuptiSubscribe_v2 up with dlsym).
V="$HERE/vendor"
if [ -f "$V/libcupti.so.13" ] && [ -f "$V/libsanitizer-public.so" ]; then
  g++ -std=c++17 -O2 -g -Wall -Wno-unused-parameter -fPIC -shared -I"$HERE" -I"$CUPTI_INC" -I"$META_INC" -I"$SAN_INC" -I"$CUDA/include" \
    "$HERE/probe_inject.cpp" -o "$OUT/libprobe_v134.so" "$V/libcupti.so.13" "$V/libsanitizer-public.so" -L"$CUDA_LINK" -lcuda -ldl -lpthread \
    -Wl,--disable-new-dtags -Wl,-rpath,"$V"
  ran $? "libprobe_v134.so"
else
  echo "build: no vendor/ libraries: libprobe_v134.so not built"
fi

# 4. the CUDA C++ app
"$NVCC" -O2 -arch=sm_90 -o "$OUT/touch_app" "$HERE/apps/touch_app.cu"
ran $? "touch_app"

set +x
ls -la "$OUT"
for so in "$OUT/libprobe.so" "$OUT/libprobe_v134.so"; do
  [ -f "$so" ] && ldd "$so" | grep -E "cupti|sanitizer|libcuda|not found" | sed "s|^|build: ldd $(basename "$so"): |"
done
echo "build: done, failed targets: $fails"
exit $fails
