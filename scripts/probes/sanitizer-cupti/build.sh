#!/usr/bin/env bash
# Build probe35 into ./build (relative to this script). Prints every command; keeps going after
# a failed target so the other targets still get built. Exit status = number of failed targets.
set -u
cd "$(dirname "$0")"
HERE=$(pwd)
CUDA=${CUDA_HOME:-/usr/local/cuda}
NVCC=${NVCC:-$CUDA/bin/nvcc}
mkdir -p build
fails=0

run() { echo "+ $*"; "$@"; local rc=$?; [ $rc -ne 0 ] && { echo "build: FAILED (rc=$rc): $1 ..."; fails=$((fails+1)); }; return $rc; }

# --- locate the Sanitizer API (headers + libsanitizer-public.so) ---
SAN_INC=""; SAN_LIB=""
for d in "$CUDA/compute-sanitizer" "$CUDA/extras/compute-sanitizer" /usr/local/cuda*/compute-sanitizer /opt/nvidia/compute-sanitizer; do
  [ -z "$SAN_INC" ] && [ -f "$d/include/sanitizer.h" ] && SAN_INC="$d/include"
  [ -z "$SAN_LIB" ] && [ -f "$d/libsanitizer-public.so" ] && SAN_LIB="$d"
done
if [ -z "$SAN_INC" ] || [ -z "$SAN_LIB" ]; then
  f=$(find "$CUDA"/ -name sanitizer_patching.h 2>/dev/null | head -1); [ -n "$f" ] && SAN_INC=$(dirname "$f")
  f=$(find "$CUDA"/ -name libsanitizer-public.so 2>/dev/null | head -1); [ -n "$f" ] && SAN_LIB=$(dirname "$f")
fi
# --- locate CUPTI ---
CUPTI_INC=""; CUPTI_LIB=""
for d in "$CUDA/extras/CUPTI/include" "$CUDA/targets/x86_64-linux/include" "$CUDA/include"; do
  [ -z "$CUPTI_INC" ] && [ -f "$d/cupti.h" ] && CUPTI_INC="$d"; done
for d in "$CUDA/extras/CUPTI/lib64" "$CUDA/targets/x86_64-linux/lib" "$CUDA/lib64"; do
  [ -z "$CUPTI_LIB" ] && ls "$d"/libcupti.so* >/dev/null 2>&1 && CUPTI_LIB="$d"; done
echo "build: CUDA=$CUDA NVCC=$NVCC"
echo "build: SAN_INC=$SAN_INC SAN_LIB=$SAN_LIB"
echo "build: CUPTI_INC=$CUPTI_INC CUPTI_LIB=$CUPTI_LIB"
ls -la "$SAN_LIB"/libsanitizer-public.so "$CUPTI_LIB"/libcupti.so* 2>&1 | sed 's/^/build: /'
"$NVCC" --version | tail -2 | sed 's/^/build: /'

# libcupti.so may exist only as libcupti.so.13: link against the file itself
CUPTI_SO="$CUPTI_LIB/libcupti.so"; [ -e "$CUPTI_SO" ] || CUPTI_SO=$(ls "$CUPTI_LIB"/libcupti.so.* 2>/dev/null | head -1)

# 1. patch module (official flags: nvcc --cubin|--fatbin --compile-as-tools-patch)
if ! run "$NVCC" --fatbin --compile-as-tools-patch -gencode arch=compute_90,code=sm_90 \
      -I"$SAN_INC" -I"$CUDA/include" -I. -o build/patch.fatbin -c patch.cu; then
  echo "build: retrying the patch module with the pre-2021 flags"
  run "$NVCC" --fatbin --keep-device-functions -Xptxas --compile-as-tools-patch -gencode arch=compute_90,code=sm_90 \
      -I"$SAN_INC" -I"$CUDA/include" -I. -o build/patch.fatbin -c patch.cu && fails=$((fails-1))
fi

# 2. the injected library (CUPTI + Sanitizer API), RPATH (not RUNPATH) so LD_LIBRARY_PATH cannot swap them
run g++ -std=c++17 -O2 -g -Wall -Wno-unused-parameter -fPIC -shared -I. -I"$CUPTI_INC" -I"$SAN_INC" -I"$CUDA/include" \
    probe.cpp -o build/libprobe.so "$CUPTI_SO" -L"$SAN_LIB" -lsanitizer-public -ldl -lpthread \
    -Wl,--disable-new-dtags -Wl,-rpath,"$CUPTI_LIB" -Wl,-rpath,"$SAN_LIB"

# 3. the CUDA C++ app (static cudart, like most apps)
if ! run "$NVCC" -O2 -arch=sm_90 -o build/app app.cu; then
  run "$NVCC" -O2 -arch=sm_90 -L"$CUDA/lib64" -L"$CUDA/lib" -o build/app app.cu && fails=$((fails-1))
fi

# 4. optional: the same probe against the newer Sanitizer API (13.4 wheel, vendored in ./vendor134),
#    which adds SANITIZER_INSTRUCTION_TMA_LOAD. Whether it runs on this driver is part of the test.
if [ -f vendor134/libsanitizer-public.so ] && [ -f vendor134/include/sanitizer_patching.h ]; then
  run "$NVCC" --fatbin --compile-as-tools-patch -DPROBE_HAVE_TMA -gencode arch=compute_90,code=sm_90 \
      -Ivendor134/include -I"$CUDA/include" -I. -o build/patch134.fatbin -c patch.cu
  run g++ -std=c++17 -O2 -g -Wall -Wno-unused-parameter -fPIC -shared -DPROBE_HAVE_TMA -I. -Ivendor134/include \
      -I"$CUPTI_INC" -I"$CUDA/include" probe.cpp -o build/libprobe134.so "$CUPTI_SO" \
      -L"$HERE/vendor134" -lsanitizer-public -ldl -lpthread \
      -Wl,--disable-new-dtags -Wl,-rpath,"$CUPTI_LIB" -Wl,-rpath,"$HERE/vendor134"
fi
ls -la build | sed 's/^/build: /'
for so in build/libprobe.so build/libprobe134.so; do
  [ -f "$so" ] && ldd "$so" | grep -E "cupti|sanitizer|not found" | sed "s|^|build: ldd $so: |"
done
echo "build: done, failed targets: $fails"
exit $fails
