#!/usr/bin/env bash
# Being replaced by the pytest suite in tests/gpu (issue 31; README "Testing on a GPU"): this script stays the proven one until that suite has run on the H200 with the same verdicts.
# GPU end-to-end suite: builds the CUDA test apps with nvcc, runs every app plain and under
# `kreplay record`, then `verify`, `info --json` and `play --passes 8 --verify --json` on each
# capture. Prints a table and ends with "N passed, N failed, N skipped"; exits non-zero when
# any case failed. Needs a CUDA machine (nvcc, a GPU, python3 with torch/triton/cupy/jax for
# the Python cases).
#
#   scripts/gpu-test.sh [BIN_DIR]     # BIN_DIR holds kreplay and libkreplay_record.so (default: dist)
#
# Environment: KREPLAY_WORK=DIR keeps the work files there; KREPLAY_ONLY=regex runs only the
# cases whose name matches; KREPLAY_ARCH=sm_90 selects the nvcc target.
set -u
HERE=$(cd "$(dirname "$0")/.." && pwd)
BIN=$(cd "${1:-$HERE/dist}" && pwd) || { echo "no binary directory"; exit 2; }
KR="$BIN/kreplay"
[ -x "$KR" ] || { echo "$KR not found: build with 'cargo build --release' and copy target/release/{kreplay,libkreplay_record.so} there"; exit 2; }
WORK=${KREPLAY_WORK:-$(mktemp -d /tmp/kreplay-gpu.XXXXXX)}
mkdir -p "$WORK"
ARCH=${KREPLAY_ARCH:-sm_90}
ONLY=${KREPLAY_ONLY:-.}
# KREPLAY_SKIP=regex leaves out the kreplay profile cases whose name matches.
SKIP=${KREPLAY_SKIP:-^$}
APPS="$HERE/testdata/apps"
RESULTS="$WORK/results.jsonl"
: > "$RESULTS"
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false

echo "== building test apps ($ARCH) in $WORK"
nvcc -O2 -std=c++17 -arch="$ARCH" -o "$WORK/kapps" "$APPS/kapps.cu" || exit 2
nvcc -O2 -arch="$ARCH" -o "$WORK/driver_app" "$APPS/driver_app.cu" -lcuda || exit 2
nvcc -O2 -std=c++17 -arch="$ARCH" -o "$WORK/graph_apps" "$APPS/graph_apps.cu" || exit 2
nvcc -O2 -std=c++17 -arch="$ARCH" -o "$WORK/beyond_apps" "$APPS/beyond_apps.cu" -lcuda || exit 2
nvcc -O2 -arch="$ARCH" -cubin -o "$WORK/driver_kernel.cubin" "$APPS/driver_kernel.cu" || exit 2
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
nvcc -O2 -arch="$ARCH" -I"$CUDA_HOME/extras/CUPTI/include" -o "$WORK/cupti_app" "$APPS/cupti_app.cu" \
  -L"$CUDA_HOME/lib64" -L"$CUDA_HOME/extras/CUPTI/lib64" -lcupti || exit 2

note() { printf '%s\n' "$1" >> "$RESULTS"; }

# Sets LAUNCH to the command that starts two ranks: mpirun when there is one, else torchrun.
two_ranks() {
  if command -v mpirun > /dev/null; then
    LAUNCH=(mpirun -n 2 --allow-run-as-root --oversubscribe)
  else
    LAUNCH=(torchrun --nproc_per_node 2 --no-python)
  fi
}

# peak_rss FILE CMD...: runs CMD, writes its peak resident memory (KiB) to FILE, returns its
# exit status.
peak_rss() {
  local out=$1; shift
  python3 -c 'import resource, subprocess, sys
r = subprocess.run(sys.argv[2:])
open(sys.argv[1], "w").write(str(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss))
sys.exit(r.returncode)' "$out" "$@"
}

# run_case NAME REGEX NTH KNOWN_LIMITATION -- CMD...
run_case() {
  local name=$1 regex=$2 nth=$3 known=$4; shift 5
  [[ "$name" =~ $ONLY ]] || return 0
  local w="$WORK/$name"
  echo "== $name: -k '$regex' --nth $nth -- $*"
  local t0=$(date +%s%N)
  "$@" > "$w.base.out" 2> "$w.base.err"; local base_rc=$?
  local t1=$(date +%s%N)
  "$KR" record "${REC_EXTRA[@]}" -k "regex:$regex" --nth "$nth" -o "$w.krr" "$@" > "$w.rec.out" 2> "$w.rec.err"; local rec_rc=$?
  local t2=$(date +%s%N)
  local same=false; cmp -s "$w.base.out" "$w.rec.out" && same=true
  local ver_rc=99 play_rc=99
  if [ -f "$w.krr" ]; then
    "$KR" verify "$w.krr" > "$w.verify.out" 2>&1; ver_rc=$?
    "$KR" info --json "$w.krr" > "$w.info.json" 2> "$w.info.err"
    "$KR" info "$w.krr" > "$w.info.txt" 2>&1
    "$KR" play "$w.krr" --passes 8 --verify --json > "$w.play.json" 2> "$w.play.err"; play_rc=$?
    "$KR" play "$w.krr" --relocate --passes 2 --verify --json > "$w.reloc.json" 2> "$w.reloc.err"
    # The captured PTX, JIT-compiled (what another architecture would run), when there is one.
    if grep -Eq '"kind": ?"ptx"' "$w.info.json"; then
      "$KR" play "$w.krr" --ptx --passes 2 --verify --json > "$w.ptx.json" 2> "$w.ptx.err"
    else
      rm -f "$w.ptx.json"; : > "$w.ptx.err"
    fi
  fi
  python3 - "$name" "$w" "$base_rc" "$rec_rc" "$same" "$ver_rc" "$play_rc" "$known" $(( (t1-t0)/1000000 )) $(( (t2-t1)/1000000 )) >> "$RESULTS" <<'PY'
import json, os, sys
name, w, base_rc, rec_rc, same, ver_rc, play_rc, known, base_ms, rec_ms = sys.argv[1:]
r = {"case": name, "base_rc": int(base_rc), "record_rc": int(rec_rc), "output_same": same == "true",
     "verify_rc": int(ver_rc), "play_rc": int(play_rc), "known": known, "base_ms": int(base_ms), "record_ms": int(rec_ms)}
def load(p):
    try:
        with open(p) as f: return json.load(f)
    except Exception: return None
info = load(w + ".info.json") or {}
play = load(w + ".play.json") or {}
r["kernel"] = (info.get("kernel") or {}).get("name", "-")
r["regions"] = len(info.get("regions") or [])
r["bytes"] = os.path.getsize(w + ".krr") if os.path.exists(w + ".krr") else 0
r["original_us"] = (info.get("original_ns") or 0) / 1e3
r["median_us"] = (play.get("median_ns") or 0) / 1e3
v = play.get("verify") or {}
r["matched"] = bool(v.get("matched"))
r["deterministic"] = bool(v.get("deterministic"))
r["identical_passes"] = len(play.get("durations_ns") or []) == 8 and r["deterministic"]
r["address_mode"] = play.get("address_mode", "-")
reloc = load(w + ".reloc.json")
reloc_err = open(w + ".reloc.err").read() if os.path.exists(w + ".reloc.err") else ""
ptx = load(w + ".ptx.json")
if not any(m.get("kind") == "ptx" for m in info.get("modules") or []):
    r["ptx"] = "none"
elif ptx and ptx.get("code") == "ptx-jit" and (ptx.get("verify") or {}).get("matched"):
    r["ptx"] = "ok"
elif ptx and ptx.get("code") == "ptx-jit" and not (ptx.get("verify") or {}).get("deterministic", True):
    r["ptx"] = "nondet"
else:
    r["ptx"] = "FAIL"
if reloc and (reloc.get("verify") or {}).get("matched"):
    r["relocated"] = "ok"
elif "cannot be relocated" in reloc_err:
    r["relocated"] = "refused"
else:
    r["relocated"] = "FAIL"
ok = (r["base_rc"] == 0 and r["record_rc"] == 0 and r["output_same"] and r["verify_rc"] == 0
      and r["play_rc"] == 0 and r["identical_passes"] and (r["matched"] or not r["deterministic"])
      and r["relocated"] != "FAIL" and r["ptx"] != "FAIL")
r["ok"] = ok
if not ok:
    errs = []
    for suffix in (".rec.err", ".play.err", ".reloc.err", ".ptx.err", ".verify.out", ".base.err"):
        try:
            with open(w + suffix) as f:
                t = f.read().strip()
            if t: errs.append(suffix + ": " + (t if len(t) < 700 else t[:350] + " ... " + t[-350:]))
        except Exception: pass
    r["why"] = " | ".join(errs)[:1500]
print(json.dumps(r))
PY
}

K="$WORK/kapps"
REC_EXTRA=()
run_case cuda-saxpy        '^saxpy'        2 "" -- "$K" saxpy 3
run_case cuda-globals      'poly_globals'  1 "" -- "$K" globals
run_case cuda-pointers     'gather_sum'    1 "" -- "$K" pointers
run_case cuda-bigsmem      'smem_reverse'  1 "" -- "$K" bigsmem
run_case cuda-threads      'scale_rows'    5 "" -- "$K" threads
run_case cuda-cluster      'cluster_scale' 1 "" -- "$K" cluster
run_case cuda-coop         'coop_normalize' 1 "" -- "$K" coop
run_case cuda-stencil      'stencil_iter'  1 "" -- "$K" stencil
run_case driver-extra      '^axpb$'        1 "" -- "$WORK/driver_app" "$WORK/driver_kernel.cubin"
run_case torch-gemm        'gemm|xmma|cutlass' 1 "" -- python3 "$APPS/torch_app.py"
run_case torch-elementwise 'sigmoid'       1 "" -- python3 "$APPS/torch_app.py"
run_case triton            'fused_axpy_relu' 1 "" -- python3 "$APPS/triton_app.py"
run_case cupy              'cupy_scale_add' 1 "" -- python3 "$APPS/cupy_app.py"
run_case jax               'fusion|tanh'   1 "" -- python3 "$APPS/jax_app.py"
run_case cuda-async        '^saxpy'        1 "" -- "$K" async
run_case torch-vmm         'sigmoid'       1 "" -- env PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True python3 "$APPS/torch_app.py"
# No device scratch (as when the dispatch reaches more memory than the GPU has free): regions
# go to the file during the stall, the write set found by GPU digests (#13).
run_case spill-saxpy       '^saxpy'        2 "" -- env KREPLAY_DEBUG_SNAPSHOT=host "$K" saxpy 3
run_case spill-pointers    'gather_sum'    1 "" -- env KREPLAY_DEBUG_SNAPSHOT=host "$K" pointers
run_case spill-torch-gemm  'gemm|xmma|cutlass' 1 "" -- env KREPLAY_DEBUG_SNAPSHOT=host python3 "$APPS/torch_app.py"
# The app runs under its own profiler (Kineto, a CUPTI user): recording wins the one CUPTI
# slot, the app's output is unchanged (its profiler reports missing CUDA activities).
run_case torch-profiler    'sigmoid'       1 "" -- python3 "$APPS/torch_profiler_app.py"
# cuFFT reads its lookup table through a pointer held in the module global `lut_sp`: module
# globals are roots of the pointer walk.
run_case torch-fft         'regular_fft'   1 "" -- python3 "$APPS/fft_app.py"
# A child forked after CUDA work exits through exit(): the recorder must neither hang nor
# crash it (its threads and locks did not survive the fork).
run_case robust-fork       '^saxpy'        1 "" -- timeout 120 "$K" fork
REC_EXTRA=(--memory all)
run_case cuda-async-all    '^saxpy'        1 "" -- "$K" async
run_case torch-vmm-all     'sigmoid'       1 "" -- env PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True python3 "$APPS/torch_app.py"
REC_EXTRA=()

# Beyond linear device memory (issue 19). A kernel that prints: play --json keeps stdout
# parseable (the device output goes to stderr). The context goes away right after the target
# (cuCtxDestroy, cudaDeviceReset, cuDevicePrimaryCtxReset) while its 2 x 256 MiB capture is
# being written: the capture is complete.
B="$WORK/beyond_apps"
run_case beyond-printf       'print_scale'    1 "" -- "$B" printf
run_case beyond-ctxdestroy   'teardown_scale' 1 "" -- timeout 300 "$B" ctxdestroy
run_case beyond-devicereset  'teardown_scale' 1 "" -- timeout 300 "$B" devicereset
run_case beyond-primaryreset 'teardown_scale' 1 "" -- timeout 300 "$B" primaryreset
# Host-mapped memory read and written through device pointers (cudaHostAlloc Mapped,
# cudaHostRegister): captured as host-mapped regions, mapped at the same host address.
run_case beyond-mapped       'mapped_mix'     1 "" -- "$B" mapped
run_case beyond-registered   'mapped_mix'     1 "" -- "$B" registered
# Texture and surface objects passed by value: the objects, their arrays (2D, layered,
# cubemap, mipmapped) or pitched memory are captured, remade by the player, the handle words
# patched (in the arguments, and in a table of handles in device memory: textable).
run_case beyond-tex2d        'tex2d_read'       1 "" -- "$B" tex2d
run_case beyond-texlayered   'tex_layered_read' 1 "" -- "$B" texlayered
run_case beyond-texcube      'tex_cube_read'    1 "" -- "$B" texcube
run_case beyond-texpitch     'tex2d_read'       1 "" -- "$B" texpitch
run_case beyond-texmip       'tex_mip_read'     1 "" -- "$B" texmip
run_case beyond-surface      'surf_write'       1 "" -- "$B" surface
run_case beyond-textable     'tex_table_read'   1 "" -- "$B" textable
# The device heap (malloc inside kernels) has no driver-visible range and cannot be read from
# outside a kernel: the recorder names the heap words at record time (512 row pointers in the
# table the kernel reads), the capture carries the note, play repeats it; the app is unaffected.
if [[ "beyond-heap" =~ $ONLY ]]; then
  echo "== beyond-heap"
  hw="$WORK/beyond-heap"
  "$B" heap > "$hw.base.out" 2> /dev/null
  "$KR" record -k heap_sum -o "$hw.krr" -- "$B" heap > "$hw.rec.out" 2> "$hw.rec.err"; hrec=$?
  "$KR" info --json "$hw.krr" > "$hw.info.json" 2> /dev/null
  timeout 120 "$KR" play "$hw.krr" --passes 2 > "$hw.play.out" 2> "$hw.play.err"; hplay=$?
  python3 - "$hw" "$hrec" "$hplay" >> "$RESULTS" <<'PY'
import json, sys, filecmp
w, rec, play = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
err, perr = open(w + ".rec.err").read(), open(w + ".play.err").read()
try:
    notes = {k: v for k, v in json.load(open(w + ".info.json")).get("annotations", [])}
except Exception:
    notes = {}
checks = {
    "recorded": rec == 0,
    "output unchanged": filecmp.cmp(w + ".base.out", w + ".rec.out", shallow=False),
    "said at record time": "512 word(s) point into the device heap" in err,
    "in the capture": "device heap" in notes.get("device-heap", ""),
    "said by play": "device heap" in perr,
}
bad = [k for k, ok in checks.items() if not ok]
print(json.dumps({"case": "beyond-heap", "kernel": f"heap_sum: heap words named (play rc {play})", "ok": not bad,
                  "known": "", "why": ", ".join(bad) + " | " + (err[-300:] + " | " + perr[-300:]).replace("\n", " ")}))
PY
fi
# info lists each object and what it views.
if [[ "beyond-textures-info" =~ $ONLY ]]; then
  python3 - "$WORK" >> "$RESULTS" <<'PY'
import json, sys
w = sys.argv[1]
want = {"tex2d": ("texture", "array 2D 256x192 f32 x1"), "texlayered": ("texture", "layered 256x192 x5 layers"),
        "texcube": ("texture", "cubemap 128x128 x6 faces"),
        "texmip": ("texture", "array 2D 128x128 f32 x1, 4 mip levels"), "texpitch": ("texture", "pitch 2D 256x192 f32 x1"),
        "surface": ("surface", "array 2D 256x192 f32 x1"), "textable": ("texture", "array 2D 256x192 f32 x1")}
bad = []
for app, (kind, text) in want.items():
    try:
        t = json.load(open(f"{w}/beyond-{app}.info.json")).get("textures") or []
    except Exception as e:
        bad.append(f"{app}: {e}"); continue
    where = "memory_words" if app == "textable" else "arg_offsets"
    if not any(o["kind"] == kind and text in o["resource"] and o[where] for o in t):
        bad.append(f"{app}: {t}")
    if app == "textable" and len(t) != 3:
        bad.append(f"textable: {len(t)} objects, 3 expected")
print(json.dumps({"case": "beyond-textures-info", "kernel": "info lists texture/surface objects", "ok": not bad,
                  "known": "", "why": "; ".join(bad)[:900]}))
PY
fi

# Robustness: the application's output and exit status survive whatever the recorder meets.
# check_case NAME EXPECTED_KREPLAY_RC STDERR_REGEX -- CMD...   (CMD runs plain, then recorded)
check_case() {
  local name=$1 want_rc=$2 want_err=$3; shift 4
  [[ "$name" =~ $ONLY ]] || return 0
  local w="$WORK/$name"
  echo "== $name"
  timeout 300 "$@" > "$w.base.out" 2> /dev/null
  timeout 300 "$KR" "${KARGS[@]}" -- "$@" > "$w.rec.out" 2> "$w.rec.err"; local rc=$?
  python3 - "$name" "$rc" "$want_rc" "$want_err" "$w" "${KARGS[0]}" >> "$RESULTS" <<'PY'
import json, re, sys, filecmp
name, rc, want_rc, want_err, w, verb = sys.argv[1:]
err = open(w + ".rec.err").read()
out = open(w + ".rec.out").read()
if verb == "list":
    same = "saxpy" in out  # list prints its table on stdout
else:
    same = filecmp.cmp(w + ".base.out", w + ".rec.out", shallow=False)
ok = int(rc) == int(want_rc) and same and re.search(want_err, err, re.S) is not None
print(json.dumps({"case": name, "kernel": "-", "regions": 0, "bytes": 0, "ok": ok, "known": "",
    "address_mode": "-", "relocated": "-", "matched": same,
    "why": "" if ok else f"rc {rc} (want {want_rc}), output ok {same}, stderr: {err[-600:]}"}))
PY
}
KARGS=(record -k 'no_such_kernel_xyz'); check_case robust-no-match 3 'no dispatch matched.*saxpy' -- "$K" saxpy 3
# A directory that cannot be written in is refused before the application starts (CPU tests);
# here a file stands where the capture's directory (named by %k) would go: only the recorder
# can find that out.
mkdir -p "$WORK/unwritable" && touch "$WORK/unwritable/saxpy"
KARGS=(record -k saxpy -o "$WORK/unwritable/%k/x.krr"); check_case robust-unwritable 3 'could not be written' -- "$K" saxpy 3
# The recorder's own kernels (chunk scans, digests, L2 sweeps) are never the application's: a
# filter that would match them matches nothing (it hung the application, issue 29).
KARGS=(record -k 'regex:kreplay|digest|chunk'); check_case robust-own-kernels 3 'no dispatch matched.*saxpy' -- "$K" saxpy 3
# Every launch matched (-k 'regex:.' --count 8): it finishes, 8 captures of the application's
# first 8 launches (match index = launch index: the recorder's launches are not counted), each
# replayed bit-exact, and the application's output unchanged.
self_match_case() {
  local name=$1; shift
  [[ "$name" =~ $ONLY ]] || return 0
  echo "== $name"
  local w="$WORK/$name"; rm -rf "$w.d"; mkdir -p "$w.d"
  timeout 300 "$@" > "$w.base.out" 2> /dev/null
  timeout 300 "$KR" list --json -- "$@" > "$w.list.json" 2> /dev/null
  local t0=$(date +%s)
  timeout 600 "$KR" record -k 'regex:.' --count 8 -o "$w.d/m%n.krr" -- "$@" > "$w.rec.out" 2> "$w.rec.err"; local rc=$?
  local t1=$(date +%s)
  for f in "$w.d"/m*.krr; do
    [ -f "$f" ] || continue
    "$KR" info --json "$f" > "$f.info.json" 2> /dev/null
    timeout 120 "$KR" play "$f" --passes 2 --verify --json > "$f.play.json" 2> "$f.play.err"
  done
  python3 - "$name" "$rc" "$w" "$((t1 - t0))" >> "$RESULTS" <<'PY'
import glob, json, sys
name, rc, w, secs = sys.argv[1:]
why = []
if rc != "0": why.append(f"record rc {rc} after {secs} s")
same = open(w + ".base.out").read() == open(w + ".rec.out").read()
if not same: why.append("application output differs")
caps = sorted(glob.glob(w + ".d/m*.krr"))
if len(caps) != 8: why.append(f"{len(caps)} captures, want 8")
kernels = []
for f in caps:
    try:
        info = json.load(open(f + ".info.json"))
        play = json.load(open(f + ".play.json"))
    except Exception as e:
        why.append(f"{f}: {e}"); continue
    k = info["kernel"]["name"]; kernels.append(k.split("(")[0][-40:])
    rec = info.get("recorder") or {}
    if "kreplay" in k: why.append(f"captured the recorder's own kernel {k}")
    mi, li = rec.get("match_index"), rec.get("launch_index")
    if mi is None or mi != li: why.append(f"{f}: match {mi} != launch {li}")
    v = play.get("verify") or {}
    if v.get("matched") is not True:
        why.append(f"{f} ({k[:40]}): replay not bit-exact (deterministic {v.get('deterministic')}): " + open(f + ".play.err").read()[-200:])
try:
    ks = json.loads(open(w + ".list.json").read().strip().splitlines()[-1])
    if any("kreplay" in k["name"] for k in ks): why.append("list shows the recorder's kernels")
except Exception as e:
    why.append(f"list: {e}")
print(json.dumps({"case": name, "kernel": "regex:. x8 (" + ", ".join(sorted(set(kernels)))[:60] + ")", "regions": len(caps),
    "ok": not why, "known": "", "matched": same, "why": "; ".join(why) + " | " + open(w + ".rec.err").read()[-400:]}))
PY
}
self_match_case self-match-cuda "$K" churn 10
self_match_case self-match-torch python3 "$APPS/torch_train_app.py" 1
# Kernels inside CUDA graphs: each node execution counts; the Nth may be a node of a later
# launch, captured as the node saw memory (after its predecessors in that launch).
G="$WORK/graph_apps"
run_case graph-saxpy       '^saxpy'        2 "" -- "$K" graph
run_case graph-stream      'graph_consume' 4 "" -- "$G" stream 5
run_case graph-explicit    'graph_consume' 3 "" -- "$G" explicit 4
run_case graph-child       'graph_consume' 2 "" -- "$G" child 3
run_case graph-update      'graph_axpy'    4 "" -- "$G" update 5
run_case graph-exec-update 'graph_axpy'    4 "" -- "$G" whole 5
run_case graph-cluster     'graph_cluster' 2 "" -- "$G" cluster 3
# A host-function node before the target: not captured, said, the application unaffected.
KARGS=(record -k graph_consume --nth 2); check_case graph-host 3 'host function.*the application continues' -- "$G" host 3
# Conditional nodes (if/while): a kernel of such a graph may set a condition
# (cudaGraphSetConditional), which faults outside the graph's launch and killed the application
# (issue 29). Refused before anything runs, said, the application's output unchanged; the
# kernels of the bodies are not counted (said).
KARGS=(record -k graph_set_cond); check_case graph-cond-set 3 'conditional node.*the application continues' -- "$G" cond 3
KARGS=(record -k graph_finish); check_case graph-cond-after 3 'conditional node.*the application continues' -- "$G" cond 3
KARGS=(record -k graph_axpy); check_case graph-cond-beside 3 'conditional node.*the application continues' -- "$G" cond 3
KARGS=(record -k graph_countdown); check_case graph-cond-body 3 'bodies run a data-dependent number of times.*no dispatch matched' -- "$G" cond 3
run_case torch-cudagraph   'Gelu'          3 "" -- python3 "$APPS/torch_graph_app.py" cudagraph 3
if [[ "torch-compile" =~ $ONLY ]]; then
  # The last execution of a Triton kernel that ran in a CUDA graph is a graph replay. A first
  # run fills Inductor's cache, so the listing and the recording compile (and launch) alike.
  python3 "$APPS/torch_graph_app.py" compile 3 > /dev/null 2>&1
  "$KR" list --json -- python3 "$APPS/torch_graph_app.py" compile 3 > "$WORK/compile.list.json" 2> "$WORK/compile.list.err"
  read -r n kname < <(python3 -c 'import json,sys
ks = [k for k in json.loads(open(sys.argv[1]).read().strip().splitlines()[-1]) if "triton_" in k["demangled"] and k.get("in_graphs")]
print(ks[0]["count"], ks[0]["name"]) if ks else print(0, "-")' "$WORK/compile.list.json" 2> /dev/null || echo 0 -)
  if [ "${n:-0}" -gt 0 ]; then
    run_case torch-compile "^${kname}\$" "$n" "" -- python3 "$APPS/torch_graph_app.py" compile 3
  else
    note '{"case": "torch-compile", "kernel": "-", "ok": false, "known": "", "why": "list shows no Triton kernel inside a CUDA graph"}'
  fi
fi
# A small graph-node capture for testdata/captures (the explicit graph, 4 Ki elements).
if [[ "graph-small" =~ $ONLY ]]; then
  "$KR" record -q -k graph_consume --nth 2 -o "$WORK/graph-small.krr" -- "$G" explicit 3 4096 > /dev/null 2> "$WORK/graph-small.err"
  "$KR" play "$WORK/graph-small.krr" --passes 8 --verify > "$WORK/graph-small.play" 2>&1 && ok=true || ok=false
  why=$(cat "$WORK/graph-small.err" "$WORK/graph-small.play" | tr '\n"\\' '   ' | cut -c1-300)
  note "{\"case\": \"graph-small\", \"kernel\": \"graph_consume, 4 Ki elements (testdata)\", \"ok\": $ok, \"known\": \"\", \"why\": \"$why\"}"
fi
# list counts executions: every node each time its graph is launched, none at capture time.
if [[ "graph-list" =~ $ONLY ]]; then
  echo "== graph-list"
  for m in "stream 5" "explicit 4" "child 3" "update 5" "whole 5" "host 3" "cond 3"; do
    "$KR" list --json -- "$G" $m > "$WORK/glist-${m% *}.json" 2> /dev/null
  done
  "$KR" list --json -- python3 "$APPS/torch_graph_app.py" cudagraph 3 > "$WORK/glist-torch.json" 2> /dev/null
  python3 - "$WORK" >> "$RESULTS" <<'PY'
import json, sys
w = sys.argv[1]
expect = {  # app: {kernel substring: (count, in_graphs)}
    "stream": {"graph_produce": (5, 5), "graph_consume": (5, 5), "graph_finish": (5, 5)},
    "explicit": {"graph_produce": (4, 4), "graph_consume": (4, 4), "graph_finish": (4, 4)},
    "child": {"graph_produce": (3, 3), "graph_consume": (3, 3), "graph_finish": (3, 3)},
    "update": {"graph_axpy": (5, 5)},
    "whole": {"graph_produce": (5, 5), "graph_axpy": (5, 5)},
    "host": {"graph_consume": (3, 3)},
    # The bodies of conditional nodes (graph_cond_body, graph_countdown) are not counted.
    "cond": {"graph_set_cond": (3, 3), "graph_finish": (3, 3), "graph_axpy": (3, 3), "graph_cond_body": None, "graph_countdown": None},
    "torch": {"Gelu": (4, 3)},  # one eager warm-up, three replays; the capture is not a run
}
bad = []
for app, want in expect.items():
    try:
        ks = json.loads(open(f"{w}/glist-{app}.json").read().strip().splitlines()[-1])
    except Exception as e:
        bad.append(f"{app}: {e}"); continue
    for sub, cg in want.items():
        got = [(k["count"], k.get("in_graphs", 0)) for k in ks if sub in k["demangled"]]
        if got != ([cg] if cg else []):
            bad.append(f"{app} {sub}: {got} != {cg}")
print(json.dumps({"case": "graph-list", "kernel": "stream, explicit, child, update, torch counts", "ok": not bad, "known": "", "why": "; ".join(bad)}))
PY
fi
# Overhead: 10,000 launches of a 20-node graph, plain and under record matching nothing.
if [[ "graph-bench" =~ $ONLY ]]; then
  echo "== graph-bench"
  "$G" bench 10000 > "$WORK/gbench.plain" 2>&1
  "$KR" record -q -k no_such_kernel_xyz -- "$G" bench 10000 > "$WORK/gbench.rec" 2> "$WORK/gbench.rec.err"
  python3 - "$WORK" >> "$RESULTS" <<'PY'
import json, re, sys
w = sys.argv[1]
def ms(p):
    m = re.search(r": ([0-9.]+) ms", open(p).read())
    return float(m.group(1)) if m else None
a, b = ms(f"{w}/gbench.plain"), ms(f"{w}/gbench.rec")
ok = a is not None and b is not None and b <= a * 1.02
pct = (b / a - 1) * 100 if a and b else float("nan")
txt = f"10,000 launches x 20 nodes, best of 3 rounds: plain {a} ms, recorded {b} ms: {pct:+.2f} % (target <= 2 %)"
print(json.dumps({"case": "graph-bench", "kernel": txt, "ok": ok, "known": "", "why": "" if ok else txt}))
PY
fi
KARGS=(list); check_case robust-list 0 '' -- "$K" saxpy 3
# The app subscribes to CUPTI before its first CUDA call: recording stands down and says why.
KARGS=(record -k 'saxpy_traced'); check_case robust-cupti-user 3 'another profiler or tracer already holds CUPTI.*nothing captured' -- "$WORK/cupti_app"

# A full disk: the capture fails, the app runs on with the same output, nothing is left behind.
if [[ "robust-disk-full" =~ $ONLY ]]; then
  echo "== robust-disk-full"
  mkdir -p "$WORK/full"
  if mount -t tmpfs -o size=256k tmpfs "$WORK/full" 2> /dev/null; then
    KARGS=(record -k 'stencil_iter' -o "$WORK/full/x.krr"); check_case robust-disk-full 3 'No space left on device.*the application continues' -- "$K" stencil
    left=$(ls -A "$WORK/full")
    umount "$WORK/full"
    if [ -n "$left" ]; then
      note "{\"case\": \"robust-disk-full-clean\", \"kernel\": \"-\", \"ok\": false, \"known\": \"\", \"why\": \"left behind: $left\"}"
    else
      note '{"case": "robust-disk-full-clean", "kernel": "-", "ok": true, "known": "", "matched": true}'
    fi
  else
    note '{"case": "robust-disk-full", "kernel": "-", "ok": false, "known": "needs root to mount a 256 KiB tmpfs", "why": ""}'
  fi
fi

# --count: M matching dispatches, one file each, each replayable.
if [[ "record-count" =~ $ONLY ]]; then
  echo "== record-count"
  rm -f "$WORK"/count-*.krr
  "$KR" record -k saxpy --count 2 -o "$WORK/count-%n.krr" -- "$K" saxpy 3 > "$WORK/count.out" 2> "$WORK/count.err"; crc=$?
  ok=true; why=""
  [ $crc -eq 0 ] || { ok=false; why="record rc $crc"; }
  for n in 1 2; do
    f="$WORK/count-$n.krr"
    if [ -f "$f" ] && "$KR" verify "$f" > /dev/null 2>&1 && "$KR" play "$f" --passes 2 --verify > /dev/null 2>&1; then :; else ok=false; why="$why count-$n.krr missing or not replayable;"; fi
  done
  [ -f "$WORK/count-3.krr" ] && { ok=false; why="$why a third file was written;"; }
  note "{\"case\": \"record-count\", \"kernel\": \"saxpy x2\", \"ok\": $ok, \"known\": \"\", \"matched\": $ok, \"why\": \"$why\"}"
fi

# Counters and external tools on the player (issue 5): --metrics, a bad metric name, ncu with
# kernel replay and application replay, compute-sanitizer.
if [[ "play-tools" =~ $ONLY ]] && [ -f "$WORK/cuda-saxpy.krr" ]; then
  echo "== play-tools"
  S="$WORK/cuda-saxpy.krr"
  "$KR" play "$S" --metrics smsp__inst_executed.sum,dram__bytes_read.sum --json > "$WORK/pm.json" 2> "$WORK/pm.err"; m1=$?
  "$KR" play "$S" --metrics smsp__inst_executed.sum,no_such__metric.sum > /dev/null 2> "$WORK/pm-bad.err"; m2=$?
  if command -v ncu > /dev/null; then
    ncu --print-units base --metrics smsp__inst_executed.sum -k regex:saxpy "$KR" play "$S" > "$WORK/ncu-k.out" 2>&1; m3=$?
    ncu --print-units base --replay-mode application --metrics smsp__inst_executed.sum,dram__bytes_read.sum -k regex:saxpy "$KR" play "$S" > "$WORK/ncu-a.out" 2>&1; m4=$?
    ncu --print-units base --metrics smsp__inst_executed.sum -k regex:saxpy "$KR" play "$S" --metrics smsp__inst_executed.sum > "$WORK/ncu-m.out" 2>&1; m5=$?
  else m3=99; m4=99; m5=99; fi
  if command -v compute-sanitizer > /dev/null; then
    compute-sanitizer "$KR" play "$S" --verify > "$WORK/sanitizer.out" 2>&1; m6=$?
  else m6=99; fi
  python3 - "$WORK" "$m1" "$m2" "$m3" "$m4" "$m5" "$m6" >> "$RESULTS" <<'PY'
import json, re, sys
w, m1, m2, m3, m4, m5, m6 = sys.argv[1:]
def read(p):
    try: return open(w + "/" + p).read()
    except Exception: return ""
checks = []
try:
    j = json.load(open(w + "/pm.json"))
    inst = j["metrics"]["smsp__inst_executed.sum"]
    checks.append(("--metrics", m1 == "0" and inst > 0 and j["metric_passes"] >= 1))
except Exception:
    inst = None
    checks.append(("--metrics", False))
checks.append(("bad metric refused", m2 == "2" and "no_such__metric.sum" in read("pm-bad.err")))
# ncu prints the kernel under its real name and the same instruction count as --metrics.
def ncu_inst(text):
    m = re.search(r"smsp__inst_executed\.sum\s+\S+\s+([\d,]+)", text)
    return float(m.group(1).replace(",", "")) if m else None
k = read("ncu-k.out"); a = read("ncu-a.out"); mm = read("ncu-m.out")
checks.append(("ncu kernel replay", m3 == "0" and "saxpy" in k and ncu_inst(k) == inst))
checks.append(("ncu application replay", m4 == "0" and "saxpy" in a and ncu_inst(a) == inst))
checks.append(("--metrics under ncu refused clearly", m5 != "0" and "another profiler holds" in mm))
checks.append(("compute-sanitizer", m6 == "0" and "ERROR SUMMARY: 0 errors" in read("sanitizer.out")))
ok = all(c[1] for c in checks)
print(json.dumps({"case": "play-tools", "kernel": "saxpy (" + ", ".join(n for n, _ in checks) + ")", "ok": ok, "known": "",
    "matched": ok, "why": "" if ok else "failed: " + ", ".join(n for n, c in checks if not c) + " | " + (read("pm.err") + read("ncu-m.out")[-300:])[-800:]}))
PY
fi

# A variant module: the captured cubin itself (must replay and match), and a cubin without
# the kernel (must be refused with a clear message).
if [[ "robust-module" =~ $ONLY ]] && [ -f "$WORK/cuda-saxpy.krr" ]; then
  echo "== robust-module"
  rm -rf "$WORK/saxpy-x" && "$KR" extract "$WORK/cuda-saxpy.krr" -o "$WORK/saxpy-x" 2> /dev/null
  "$KR" play "$WORK/cuda-saxpy.krr" --module "$WORK/saxpy-x/module-0.cubin" --passes 2 --verify --json > "$WORK/module.json" 2> "$WORK/module.err"; m1=$?
  "$KR" play "$WORK/cuda-saxpy.krr" --module "$WORK/driver_kernel.cubin" > /dev/null 2> "$WORK/module-bad.err"; m2=$?
  python3 - "$m1" "$m2" "$WORK" >> "$RESULTS" <<'PY'
import json, sys
m1, m2, w = sys.argv[1:]
try:
    matched = json.load(open(w + "/module.json"))["verify"]["matched"]
except Exception:
    matched = False
bad = open(w + "/module-bad.err").read()
ok = m1 == "0" and matched and m2 == "2" and "not found" in bad
print(json.dumps({"case": "robust-module", "kernel": "-", "ok": ok, "known": "", "matched": matched,
    "why": "" if ok else f"rc {m1}/{m2}: {open(w + '/module.err').read()[-300:]} {bad[-300:]}"}))
PY
fi

# Choosing the dispatch as ncu users do: a plain name is the exact function name, -s/-c skip
# and count, --launch-index picks an execution of any kernel, and a name that matches nothing
# gets the regex: hint and the closest names.
if [[ "select-forms" =~ $ONLY ]]; then
  echo "== select-forms"
  S="$WORK/sel"; rm -rf "$S"; mkdir -p "$S"
  "$KR" record -k saxpy -o "$S/plain.krr" "$K" saxpy 3 > /dev/null 2> "$S/plain.err"; r1=$?
  "$KR" record -k _Z5saxpyifPKfPf -s 1 -c 2 -o "$S/sc-%n.krr" "$K" saxpy 3 > /dev/null 2> "$S/sc.err"; r2=$?
  "$KR" list --json "$K" saxpy 3 2> /dev/null | tail -1 > "$S/list.json"
  "$KR" record --launch-index 3 -o "$S/li.krr" "$K" saxpy 3 > /dev/null 2> "$S/li.err"; r3=$?
  "$KR" record -k sax "$K" saxpy 3 > /dev/null 2> "$S/none.err"; r4=$?
  "$KR" record -q -k saxpy -o "$S/quiet.krr" "$K" saxpy 3 > /dev/null 2> "$S/quiet.err"; r5=$?
  "$KR" play "$S/plain.krr" --passes 2 --verify --csv > "$S/play.csv" 2> /dev/null; r6=$?
  "$KR" list --csv "$K" saxpy 3 2> /dev/null | grep -v '^saxpy ' > "$S/list.csv"
  for f in plain sc-2 sc-3 li; do "$KR" info --json "$S/$f.krr" > "$S/$f.json" 2> /dev/null; done
  python3 - "$S" "$r1" "$r2" "$r3" "$r4" "$r5" "$r6" >> "$RESULTS" <<'PY'
import csv, json, os, sys
S, r1, r2, r3, r4, r5, r6 = sys.argv[1:]
def j(n):
    try: return json.load(open(f"{S}/{n}"))
    except Exception: return {}
def rec(n): return j(n + ".json").get("recorder") or {}
lst = j("list.json")
first = next((k.get("first_launch") for k in lst if "saxpy" in k.get("demangled", "")), None) if isinstance(lst, list) else None
none = open(f"{S}/none.err").read()
checks = [
    ("plain name", r1 == "0" and rec("plain").get("match_index") == 1),
    ("-s 1 -c 2", r2 == "0" and rec("sc-2").get("match_index") == 2 and rec("sc-3").get("match_index") == 3
        and not os.path.exists(f"{S}/sc-4.krr")),
    ("list first launch", first == 1),
    ("--launch-index 3", r3 == "0" and rec("li").get("launch_index") == 3),
    ("no match: hint and closest", r4 == "3" and "regex:sax" in none and "closest kernels" in none and "saxpy" in none),
]
quiet = open(f"{S}/quiet.err").read()
checks.append(("record -q", r5 == "0" and os.path.exists(f"{S}/quiet.krr") and "captured" not in quiet))
try:
    rows = list(csv.DictReader(open(f"{S}/play.csv")))
    play_csv = r6 == "0" and len(rows) == 1 and float(rows[0]["median_ns"]) > 0 and rows[0]["verify_matched"] == "true"
except Exception:
    play_csv = False
checks.append(("play --csv", play_csv))
try:
    lrows = list(csv.DictReader(open(f"{S}/list.csv")))
    list_csv = any(r["name"] == "_Z5saxpyifPKfPf" and r["count"] == "3" and r["first_launch"] == "1" for r in lrows)
except Exception:
    list_csv = False
checks.append(("list --csv", list_csv))
ok = all(c for _, c in checks)
print(json.dumps({"case": "select-forms", "kernel": ", ".join(n for n, _ in checks), "ok": ok, "known": "",
    "matched": ok, "why": "" if ok else "failed: " + ", ".join(n for n, c in checks if not c) + " | " + none[-300:]}))
PY
fi

# play --save-output writes the replay's result as a capture; diff against the recording is
# identical for deterministic kernels (the question when moving to another GPU or driver).
if [[ "diff-replay" =~ $ONLY ]] && [ -f "$WORK/cuda-saxpy.krr" ]; then
  echo "== diff-replay"
  D="$WORK/diffrep"; rm -rf "$D"; mkdir -p "$D"
  ok=true; why=""
  for c in cuda-saxpy cuda-globals torch-gemm; do
    [ -f "$WORK/$c.krr" ] || continue
    "$KR" play "$WORK/$c.krr" --passes 2 --save-output "$D/$c.out.krr" > "$D/$c.play" 2>&1 || { ok=false; why="$why $c: play failed;"; }
    "$KR" verify "$D/$c.out.krr" > /dev/null 2>&1 || { ok=false; why="$why $c: output does not verify;"; }
    "$KR" diff "$WORK/$c.krr" "$D/$c.out.krr" > "$D/$c.diff" 2>&1 || { ok=false; why="$why $c: diff says $(tail -1 "$D/$c.diff");"; }
  done
  "$KR" play "$WORK/cuda-saxpy.krr" --save-output "$D/cuda-saxpy.out.krr" > /dev/null 2> "$D/exists.err" && { ok=false; why="$why replaced an existing file without --force;"; }
  grep -q -- "--force" "$D/exists.err" || { ok=false; why="$why no --force hint;"; }
  note "{\"case\": \"diff-replay\", \"kernel\": \"play --save-output + diff (saxpy, globals, gemm)\", \"ok\": $ok, \"known\": \"\", \"matched\": $ok, \"why\": \"$why\"}"
fi

# NVTX: --nvtx-include selects the multiply inside decoder.layer.2 (its scalar, 3.0, is in
# the captured arguments), list shows each kernel's innermost range, and a range that never
# opens matches nothing.
if [[ "nvtx-select" =~ $ONLY ]]; then
  echo "== nvtx-select"
  N="$WORK/nvtx"; rm -rf "$N"; mkdir -p "$N"
  python3 "$APPS/nvtx_app.py" > "$N/base.out" 2> /dev/null
  "$KR" list python3 "$APPS/nvtx_app.py" > "$N/list.out" 2> "$N/list.err"; l1=$?
  "$KR" record -k regex:MulFunctor --nvtx-include model/decoder.layer.2 -o "$N/l2.krr" python3 "$APPS/nvtx_app.py" > "$N/rec.out" 2> "$N/rec.err"; r1=$?
  "$KR" record -k regex:MulFunctor --nvtx-include decoder.layer.9 -o "$N/none.krr" python3 "$APPS/nvtx_app.py" > /dev/null 2> "$N/none.err"; r2=$?
  "$KR" info --json "$N/l2.krr" > "$N/l2.json" 2> /dev/null
  "$KR" play "$N/l2.krr" --passes 2 --verify --json > "$N/play.json" 2> "$N/play.err"; p1=$?
  python3 - "$N" "$l1" "$r1" "$r2" "$p1" >> "$RESULTS" <<'PY'
import filecmp, json, sys
N, l1, r1, r2, p1 = sys.argv[1:]
def j(n):
    try: return json.load(open(f"{N}/{n}"))
    except Exception: return {}
lst = open(f"{N}/list.out").read()
info = j("l2.json")
hexes = " ".join(p.get("value_hex", "") for p in info.get("params") or [])
play = j("play.json")
checks = [
    ("list shows ranges", l1 == "0" and "decoder.layer.0" in lst and "nvtx" in lst),
    ("layer 2's multiply captured", r1 == "0" and "00004040" in hexes and "MulFunctor" in (info.get("kernel") or {}).get("name", "")),
    ("app output unchanged", filecmp.cmp(f"{N}/base.out", f"{N}/rec.out", shallow=False)),
    ("replays", p1 == "0" and (play.get("verify") or {}).get("matched") is True),
    ("unknown range matches nothing", r2 == "3"),
]
ok = all(c for _, c in checks)
print(json.dumps({"case": "nvtx-select", "kernel": ", ".join(n for n, _ in checks), "ok": ok, "known": "", "matched": ok,
    "why": "" if ok else "failed: " + ", ".join(n for n, c in checks if not c) + " | " + open(f"{N}/rec.err").read()[-400:] + " | " + lst[-400:]}))
PY
fi

# The application ends while a 1 GiB capture is still being written: through exec, _exit or
# its own SIGTERM. Its output and exit status are kept, no NAME.partial and no report
# directory is left behind, and a capture that did get written verifies.
ending_case() {
  local name=$1 how=$2; shift 2
  [[ "$name" =~ $ONLY ]] || return 0
  echo "== $name"
  local w="$WORK/$name"
  rm -f "$w".krr "$w".krr.partial
  "$K" end "$how" > "$w.base.out" 2> /dev/null; local base_rc=$?
  local before=$(ls -d /tmp/kreplay-*-* 2> /dev/null | wc -l)
  timeout 300 "$KR" record -k big_scale -o "$w.krr" "$K" end "$how" > "$w.rec.out" 2> "$w.rec.err"; local rc=$?
  local after=$(ls -d /tmp/kreplay-*-* 2> /dev/null | wc -l)
  local ok=true why=""
  cmp -s "$w.base.out" "$w.rec.out" || { ok=false; why="$why output differs;"; }
  # exec/_exit after a completed capture: 0; before it: 3 (nothing captured); a signal: the app's.
  if [ "$base_rc" -eq 0 ]; then [[ $rc -eq 0 || $rc -eq 3 ]] || { ok=false; why="$why rc $rc;"; }
  else [ $rc -eq $base_rc ] || { ok=false; why="$why rc $rc (app $base_rc);"; }; fi
  [ -e "$w.krr.partial" ] && { ok=false; why="$why partial file left;"; }
  [ "$after" -le "$before" ] || { ok=false; why="$why report directory left;"; }
  if [ -f "$w.krr" ]; then "$KR" verify "$w.krr" > /dev/null 2>&1 || { ok=false; why="$why capture does not verify;"; }; fi
  local got="no capture"; [ -f "$w.krr" ] && got="captured"
  grep -q "removed .*partial" "$w.rec.err" && got="$got, partial removed"
  python3 -c 'import json, sys; n, k, ok, why, ep = sys.argv[1:]; print(json.dumps({"case": n, "kernel": k, "ok": ok == "true", "known": "", "matched": ok == "true", "why": why + " " + open(ep).read()[-300:]}))' \
    "$name" "big_scale ($how: $got, rc $rc)" "$ok" "$why" "$w.rec.err" >> "$RESULTS"
}
ending_case robust-exec exec
ending_case robust-exit exit
ending_case robust-term-self term

# SIGTERM sent to kreplay record reaches the application; kreplay waits, cleans up and
# exits as the application did (143).
if [[ "robust-sigterm" =~ $ONLY ]]; then
  echo "== robust-sigterm"
  w="$WORK/sigterm"; rm -f "$w".krr "$w".krr.partial
  "$KR" record -k big_scale -o "$w.krr" "$K" end sleep > "$w.out" 2> "$w.err" &
  kp=$!
  sleep 10
  kill -TERM $kp
  t0=$(date +%s); wait $kp; rc=$?; t1=$(date +%s)
  ok=true; why=""
  [ $rc -eq 143 ] || { ok=false; why="$why rc $rc;"; }
  pgrep -f "kapps end sleep" > /dev/null && { ok=false; why="$why the application still runs;"; pkill -f "kapps end sleep"; }
  ls -d /tmp/kreplay-$kp-* > /dev/null 2>&1 && { ok=false; why="$why report directory left;"; }
  [ -e "$w.krr.partial" ] && { ok=false; why="$why partial file left;"; }
  [ $((t1 - t0)) -le 30 ] || { ok=false; why="$why took $((t1 - t0)) s;"; }
  note "{\"case\": \"robust-sigterm\", \"kernel\": \"kreplay killed after 10 s (rc $rc, $((t1 - t0)) s to exit)\", \"ok\": $ok, \"known\": \"\", \"matched\": $ok, \"why\": \"$why\"}"
fi

# Captures that lie (checksums repaired): the player refuses or bounds what the file claims.
# Salvaged captures on the GPU (issue 29): a cut output and a damaged output chunk replay with
# the lost output checked for determinism only and the surviving output still compared.
if [[ "salvage-play" =~ $ONLY ]]; then
  echo "== salvage-play"
  python3 - "$HERE/testdata/captures" "$WORK" <<'PY'
import sys
src, w = sys.argv[1:]
d = open(f"{src}/driver-extra.krr", "rb").read()
open(f"{w}/sv-cut.krr", "wb").write(d[:8893 + 100])  # inside region 0's only output chunk
s = bytearray(open(f"{src}/cuda-saxpy.krr", "rb").read())
s[42582 + 24 + 32 + 10] ^= 1  # one output chunk of y
open(f"{w}/sv-post.krr", "wb").write(bytes(s))
PY
  for c in cut post; do
    rm -f "$WORK/sv-$c.out.krr"
    "$KR" verify --salvage "$WORK/sv-$c.out.krr" "$WORK/sv-$c.krr" > "$WORK/sv-$c.salvage" 2>&1
    timeout 120 "$KR" play "$WORK/sv-$c.out.krr" --passes 4 --verify --json > "$WORK/sv-$c.play.json" 2> "$WORK/sv-$c.play.err"
    echo $? > "$WORK/sv-$c.rc"
  done
  python3 - "$WORK" >> "$RESULTS" <<'PY'
import json, sys
w = sys.argv[1]
why = []
for c in ("cut", "post"):
    rc = open(f"{w}/sv-{c}.rc").read().strip()
    try:
        v = json.load(open(f"{w}/sv-{c}.play.json")).get("verify") or {}
    except Exception as e:
        v = {}; why.append(f"{c}: no JSON ({e})")
    if rc != "0": why.append(f"{c}: play rc {rc}: " + open(f"{w}/sv-{c}.play.err").read()[-300:])
    if v.get("deterministic") is not True: why.append(f"{c}: not deterministic: {v}")
    if v.get("matched") is not True: why.append(f"{c}: the surviving output does not match: {v}")
print(json.dumps({"case": "salvage-play", "kernel": "driver-extra cut, saxpy output chunk flipped", "ok": not why, "known": "",
    "matched": not why, "why": "; ".join(why) + " | " + open(f"{w}/sv-cut.salvage").read()[-300:]}))
PY
fi
if [[ "hostile-play" =~ $ONLY ]] && [ -x "$BIN/craft_hostile" ] && [ -f "$WORK/cuda-saxpy.krr" ]; then
  echo "== hostile-play"
  H="$WORK/hostile"; mkdir -p "$H"
  "$BIN/craft_hostile" fewer-params "$WORK/cuda-saxpy.krr" "$H/params.krr"
  "$BIN/craft_hostile" bad-elf "$WORK/cuda-saxpy.krr" "$H/elf.krr"
  "$BIN/craft_hostile" huge-global "$WORK/cuda-globals.krr" "$H/global.krr"
  "$BIN/craft_hostile" bad-pointer "$WORK/cuda-pointers.krr" "$H/missing.krr"
  "$KR" play "$H/params.krr" > /dev/null 2> "$H/params.err"; r1=$?
  "$KR" play "$H/elf.krr" > /dev/null 2> "$H/elf.err"; r2=$?
  peak_rss "$H/global.rss" "$KR" play "$H/global.krr" --verify --json > "$H/global.json" 2> "$H/global.err"; r3=$?
  "$KR" play "$H/missing.krr" > /dev/null 2> "$H/missing.err"; r4=$?
  python3 - "$H" "$r1" "$r2" "$r3" "$r4" >> "$RESULTS" <<'PY'
import json, sys
h, r1, r2, r3, r4 = sys.argv[1:]
def read(n):
    try: return open(f"{h}/{n}").read()
    except Exception: return ""
try: matched = json.load(open(f"{h}/global.json"))["verify"]["matched"]
except Exception: matched = False
rss_kb = int((read("global.rss").strip().splitlines() or ["0"])[-1] or 0)
missing = read("missing.err")
checks = [
    ("fewer params refused", r1 == "2" and "parameter layout" in read("params.err")),
    ("bad ELF refused", r2 == "2" and "refused before loading" in read("elf.err")),
    (f"40 GiB global bounded ({rss_kb // 1024} MiB RSS)", r3 == "0" and matched and rss_kb < 2 * 1024 * 1024),
    ("fault explained once", r4 == "2" and "faulted" in missing and "--memory all" in missing
        and missing.count("CUDA_ERROR_ILLEGAL_ADDRESS") == 1),
]
ok = all(c for _, c in checks)
print(json.dumps({"case": "hostile-play", "kernel": "; ".join(n for n, _ in checks), "ok": ok, "known": "",
    "matched": ok, "why": "" if ok else "failed: " + ", ".join(n for n, c in checks if not c) + " | "
    + " / ".join(read(n)[-250:] for n in ("params.err", "elf.err", "global.err", "missing.err"))}))
PY
fi

# play --metrics with other CUPTI releases first on the library path (KREPLAY_CUPTI_DIRS: a
# space-separated list of directories holding libcupti.so.N and libnvperf_*.so, as the
# nvidia-cuda-cupti wheels ship them). Two layouts each: the wheel's own (no libcupti.so, so
# the toolkit's libcupti is the one loaded and must be paired with its own nvperf), and a
# toolkit-like one with libcupti.so (that CUPTI is loaded). Counters, or a clear refusal,
# never a crash.
if [[ "cupti-versions" =~ $ONLY ]] && [ -n "${KREPLAY_CUPTI_DIRS:-}" ] && [ -f "$WORK/cuda-saxpy.krr" ]; then
  for dir in $KREPLAY_CUPTI_DIRS; do
    v=$(basename "$dir")
    tk="$WORK/cupti-toolkit-$v"; rm -rf "$tk"; mkdir -p "$tk"
    for f in "$dir"/*; do ln -s "$f" "$tk/"; done
    ln -s "$(ls "$dir"/libcupti.so.* | head -1)" "$tk/libcupti.so"
    for layout in wheel toolkit; do
      d=$dir; [ $layout = toolkit ] && d=$tk
      echo "== cupti-$v-$layout"
      LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}" "$KR" play "$WORK/cuda-saxpy.krr" --metrics smsp__inst_executed.sum,dram__bytes_read.sum --json > "$WORK/cupti-$v-$layout.json" 2> "$WORK/cupti-$v-$layout.err"; rc=$?
      python3 - "$v-$layout" "$rc" "$WORK/cupti-$v-$layout.json" "$WORK/cupti-$v-$layout.err" >> "$RESULTS" <<'PY'
import json, sys
v, rc, jp, ep = sys.argv[1:]
err = open(ep).read()
try: j = json.load(open(jp)); inst = j["metrics"]["smsp__inst_executed.sum"]; c = j.get("metric_cupti") or {}
except Exception: j = {}; inst = 0; c = {}
ok = (rc == "0" and inst > 0) or (rc == "2" and "CUPTI" in err)
what = f"inst {inst:,.0f}, CUPTI API {c.get('api_version')} {c.get('path', '')[-40:]}" if rc == "0" else f"refused: {err.strip()[-200:]}"
print(json.dumps({"case": f"cupti-{v}", "kernel": f"rc {rc}: {what}", "ok": ok, "known": "",
    "matched": ok, "why": "" if ok else err[-600:]}))
PY
    done
  done
fi

# The application's stderr is a full disk (Python apps ignore SIGPIPE, so a closed pipe looks
# the same): the recorder's diagnostics are lost, the application is not. The CUPTI-user app
# makes the recorder stand down and say so at start-up, on that stderr.
if [[ "robust-stderr-full" =~ $ONLY ]]; then
  echo "== robust-stderr-full"
  "$WORK/cupti_app" > "$WORK/stderr-full.base" 2> /dev/null; brc=$?
  "$KR" record -k saxpy_traced "$WORK/cupti_app" > "$WORK/stderr-full.out" 2> /dev/full; rc=$?
  # (a file where the %k directory goes: only the recorder finds that out, after the start)
  mkdir -p "$WORK/unwritable" && touch "$WORK/unwritable/saxpy"
  "$KR" record -k saxpy -o "$WORK/unwritable/%k/x.krr" "$K" saxpy 3 > "$WORK/stderr-full2.out" 2> /dev/full; rc2=$?
  "$K" saxpy 3 > "$WORK/stderr-full2.base" 2> /dev/null
  ok=true; why=""
  [ $rc -eq 3 ] || { ok=false; why="$why cupti app: rc $rc (want 3);"; }
  cmp -s "$WORK/stderr-full.base" "$WORK/stderr-full.out" || { ok=false; why="$why cupti app output differs;"; }
  [ $rc2 -eq 3 ] || { ok=false; why="$why unwritable capture: rc $rc2 (want 3);"; }
  cmp -s "$WORK/stderr-full2.base" "$WORK/stderr-full2.out" || { ok=false; why="$why saxpy output differs;"; }
  note "{\"case\": \"robust-stderr-full\", \"kernel\": \"app stderr on /dev/full (rc $rc, $rc2)\", \"ok\": $ok, \"known\": \"\", \"matched\": $ok, \"why\": \"$why\"}"
fi

# Captures as attachments. Redaction on a GEMM and an elementwise kernel (and saxpy): the
# redacted capture replays, deterministic, no recorded output to compare with, in the same
# time within noise; --drop-post keeps the write set and the verdict.
share_case() {
  local name=$1 src=$2 flags=$3
  [[ "$name" =~ $ONLY ]] && [ -f "$WORK/$src.krr" ] || return 0
  echo "== $name: pack $flags $src"
  local w="$WORK/$name"
  rm -f "$w.krr"
  "$KR" pack "$WORK/$src.krr" -o "$w.krr" $flags --level 3 > "$w.pack.out" 2> "$w.pack.err"; local prc=$?
  "$KR" info --json "$w.krr" > "$w.info.json" 2> /dev/null
  "$KR" play "$w.krr" --passes 8 --verify --json > "$w.play.json" 2> "$w.play.err"; local rc=$?
  python3 - "$name" "$w" "$WORK/$src" "$prc" "$rc" "$flags" >> "$RESULTS" <<'PY'
import json, os, sys
name, w, src, prc, rc, flags = sys.argv[1:]
def load(p):
    try: return json.load(open(p))
    except Exception: return {}
info, play, orig = load(w + ".info.json"), load(w + ".play.json"), load(src + ".play.json")
v = play.get("verify") or {}
want = "redacted" if "--redact" in flags else "dropped"
m, m0 = (play.get("median_ns") or 0), (orig.get("median_ns") or 0)
ratio = m / m0 if m0 else 0
ok = (prc == "0" and rc == "0" and info.get("reference") == want and v.get("reference") == want
      and v.get("deterministic") is True and v.get("matched") is True and 0.8 <= ratio <= 1.25)
print(json.dumps({"case": name, "kernel": f"{want}: {m/1e3:.1f} us vs {m0/1e3:.1f} us recorded ({ratio:.2f}x)",
    "regions": len(info.get("regions") or []), "bytes": os.path.getsize(w + ".krr") if os.path.exists(w + ".krr") else 0,
    "original_us": m0 / 1e3, "median_us": m / 1e3, "matched": bool(v.get("matched")), "deterministic": v.get("deterministic"),
    "address_mode": play.get("address_mode", "-"), "known": "", "ok": ok,
    "why": "" if ok else (open(w + ".pack.err").read() + open(w + ".play.err").read())[-800:] + f" reference={v.get('reference')} ratio={ratio:.2f}"}))
PY
}
share_case share-redact-gemm torch-gemm --redact
share_case share-redact-elementwise torch-elementwise --redact
share_case share-redact-saxpy cuda-saxpy --redact
share_case share-drop-post cuda-saxpy --drop-post

# The chunk kernels (write set, zero chunks, digests) against the host, on this GPU: the
# kreplay-cuda test binary scripts/dist.sh builds.
if [[ "chunk-kernels" =~ $ONLY ]]; then
  echo "== chunk-kernels"
  if [ -x "$BIN/chunks_gpu" ]; then
    "$BIN/chunks_gpu" --include-ignored --nocapture > "$WORK/chunks.log" 2>&1; crc=$?
  else
    crc=99; echo "no chunks_gpu in $BIN (scripts/dist.sh builds it)" > "$WORK/chunks.log"
  fi
  python3 - "$crc" "$WORK/chunks.log" >> "$RESULTS" <<'PY'
import json, sys
rc, log = sys.argv[1:]
text = open(log).read()
ok = rc == "0" and "1 passed" in text and "skipped" not in text
print(json.dumps({"case": "chunk-kernels", "kernel": "kreplay_chunk_scan/digest vs host", "ok": ok, "known": "",
    "matched": ok, "why": "" if ok else text[-1500:]}))
PY
fi

# The Python package on the GPU: the abi3 wheel from dist/python installed into a folder of
# its own, its CPU tests and its GPU tests (record with the pytest fixture, play in-process,
# counters, the same report as the CLI).
if [[ "python-package" =~ $ONLY ]]; then
  echo "== python-package"
  whl=$(ls "$BIN"/python/kreplay-*.whl 2> /dev/null | head -1)
  PYT="$WORK/pylib"; rm -rf "$PYT"
  if [ -n "$whl" ]; then
    python3 -m pip install -q --no-deps --no-index --target "$PYT" "$whl" "$BIN"/python/deps/*.whl > "$WORK/py-install.log" 2>&1
    (cd "$WORK" && PYTHONPATH="$PYT" KREPLAY_BIN="$KR" KREPLAY_KAPPS="$K" KREPLAY_APPS="$APPS" \
      python3 -m pytest -q -p no:cacheprovider "$HERE/python/tests" "$HERE/python/tests_gpu" > "$WORK/py-test.log" 2>&1); prc=$?
  else
    prc=99; echo "no wheel in $BIN/python (pip install maturin before scripts/dist.sh)" > "$WORK/py-test.log"
  fi
  python3 - "$prc" "$WORK/py-test.log" >> "$RESULTS" <<'PY'
import json, re, sys
rc, log = sys.argv[1:]
text = open(log).read()
m = re.search(r"(\d+) passed", text)
skipped = re.search(r"(\d+) skipped", text)
ok = rc == "0" and m is not None and int(m.group(1)) >= 12 and not re.search(r"\d+ failed", text)
print(json.dumps({"case": "python-package", "kernel": (text.strip().splitlines() or ["-"])[-1][:40], "ok": ok, "known": "",
    "matched": ok, "why": "" if ok else text[-1500:]}))
PY
fi

# Standalone reproducers (extract --repro) of every capture above, built with nvcc alone (in
# parallel), run with 3 passes at the original addresses and 2 relocated: the same verdict as
# play --verify and play --relocate --verify.
# KREPLAY_REPRO=0 leaves it out; KREPLAY_ONLY='^repro$' with the same KREPLAY_WORK runs it
# alone over the captures of an earlier run.
if [ "${KREPLAY_REPRO:-1}" = 1 ] && { [[ "repro" =~ $ONLY ]] || [ "$ONLY" != "." ]; }; then
  echo "== repro: extract --repro, make, run"
  RCASES=()
  for pj in "$WORK"/*.play.json; do
    n=$(basename "$pj" .play.json)
    case "$n" in mpi-r*) continue ;; esac
    [ -f "$WORK/$n.krr" ] || continue
    rm -rf "$WORK/$n.repro"
    "$KR" extract "$WORK/$n.krr" --repro "$WORK/$n.repro" --force > /dev/null 2> "$WORK/$n.rx.err"
    RCASES+=("$n")
  done
  printf '%s\n' "${RCASES[@]}" | xargs -P 16 -I{} sh -c '[ -d "$0/{}.repro" ] && make -s -C "$0/{}.repro" > "$0/{}.rx-make.log" 2>&1' "$WORK"
  for n in "${RCASES[@]}"; do
    d="$WORK/$n.repro"
    rm -f "$WORK/$n.rx.out" "$WORK/$n.rx-reloc.out"
    if [ -x "$d/repro" ]; then
      (cd "$d" && timeout 300 ./repro --passes 3 > "../$n.rx.out" 2>> "../$n.rx.err"; echo $? > "../$n.rx.rc")
      (cd "$d" && timeout 300 ./repro --relocate --passes 2 > "../$n.rx-reloc.out" 2> "../$n.rx-reloc.err"; echo $? > "../$n.rx-reloc.rc")
    fi
    python3 - "$n" "$WORK" >> "$RESULTS" <<'PY'
import json, os, re, sys
n, work = sys.argv[1:]
w = f"{work}/{n}"
def load(p):
    try: return json.load(open(p))
    except Exception: return {}
def read(p):
    try: return open(p).read()
    except Exception: return ""
def verdict(v):
    if (v.get("reference") or "recorded") != "recorded":
        return "deterministic" if v.get("deterministic") else "nondeterministic"
    if v.get("deterministic") is False: return "nondeterministic"
    return "matched" if v.get("matched") else "mismatch"
def repro_verdict(out):
    m = re.search(r"^verdict\s+(\S+)", out, re.M)
    return m.group(1) if m else "none"
play, info = load(w + ".play.json"), load(w + ".info.json")
want = verdict(play.get("verify") or {})
out, err = read(w + ".rx.out"), read(w + ".rx.err")
got = repro_verdict(out)
reloc = load(w + ".reloc.json")
reloc_err = read(w + ".reloc.err")
rout, rerr = read(w + ".rx-reloc.out"), read(w + ".rx-reloc.err")
if reloc:
    want_r, got_r = verdict(reloc.get("verify") or {}), repro_verdict(rout)
elif "cannot be relocated" in reloc_err:
    want_r, got_r = "refused", ("refused" if "cannot be relocated" in rerr else repro_verdict(rout))
else:
    want_r, got_r = "-", "-"
med = re.search(r"median ([0-9.]+) us", out)
addr = re.search(r"^addresses\s+(\S+)", out, re.M)
known = ""
ok = got == want and got_r == want_r
print(json.dumps({"case": "repro:" + n, "kernel": f"play {want}/{want_r}, repro {got}/{got_r}",
    "regions": len(info.get("regions") or []), "bytes": os.path.getsize(w + ".krr") if os.path.exists(w + ".krr") else 0,
    "original_us": (play.get("median_ns") or 0) / 1e3, "median_us": float(med.group(1)) if med else 0,
    "matched": got in ("matched", "deterministic"), "address_mode": addr.group(1) if addr else "-",
    "relocated": "ok" if got_r == want_r and want_r != "-" else ("-" if want_r == "-" else "FAIL"),
    "known": known, "ok": ok,
    "why": "" if ok else (err[-500:] + " | make: " + read(w + ".rx-make.log")[-500:] + " | reloc: " + rerr[-300:])}))
PY
  done
fi

# Two ranks, one capture each, named by rank.
if [[ "mpi-2ranks" =~ $ONLY ]]; then
  echo "== mpi-2ranks"
  two_ranks
  rm -f "$WORK"/mpi-r*.krr
  "${LAUNCH[@]}" "$KR" record -k 'regex:erf_kernel' -o "$WORK/mpi-r%r.krr" -- python3 "$APPS/mpi_app.py" > "$WORK/mpi.out" 2> "$WORK/mpi.err"
  mrc=$?
  for r in 0 1; do
    f="$WORK/mpi-r$r.krr"
    if [ -f "$f" ]; then
      "$KR" info --json "$f" > "$WORK/mpi-r$r.info.json" 2>/dev/null
      "$KR" verify "$f" > /dev/null 2>&1 && "$KR" play "$f" --passes 8 --verify --json > "$WORK/mpi-r$r.play.json" 2> "$WORK/mpi-r$r.play.err"; prc=$?
    else prc=99; fi
    python3 - "$r" "$mrc" "$prc" "$f" "${LAUNCH[0]}" >> "$RESULTS" <<'PY'
import json, os, sys
r, mrc, prc, f, launcher = sys.argv[1:]
def load(p):
    try:
        return json.load(open(p))
    except Exception:
        return {}
play = load(f[:-4] + ".play.json")
info = load(f[:-4] + ".info.json")
rank = (info.get("recorder") or {}).get("rank")
v = play.get("verify") or {}
ok = mrc == "0" and prc == "0" and bool(v.get("matched")) and rank == int(r)
print(json.dumps({"case": f"mpi-rank{r} ({launcher})", "kernel": (info.get("kernel") or {}).get("name", "-"),
    "regions": len(info.get("regions") or []), "relocated": "-", "address_mode": play.get("address_mode", "-"),
    "bytes": os.path.getsize(f) if os.path.exists(f) else 0, "original_us": (play.get("original_ns") or 0) / 1e3,
    "median_us": (play.get("median_ns") or 0) / 1e3, "matched": bool(v.get("matched")), "known": "",
    "ok": ok, "why": "" if ok else open(os.path.dirname(f) + "/mpi.err").read()[-600:]}))
PY
  done
fi

# kreplay profile (in-process replay): the application's output must be bit-identical to a
# plain run, and every row sane. pcase NAME CHECK REPORT -- CMD...: runs the app plain, then
# under `kreplay profile ARGS` (PROFILE_ARGS), and lets python check the rows (JSON lines in
# REPORT) against CHECK.
pcase() {
  local name=$1 check=$2; shift 3
  [[ "$name" =~ $ONLY ]] && ! [[ "$name" =~ $SKIP ]] || return 0
  echo "== $name"
  local w="$WORK/$name"
  "$@" > "$w.plain.out" 2> "$w.plain.err"
  rm -f "$w".prof*.json
  timeout 600 "$KR" profile "${PROFILE_ARGS[@]}" -o "$w.prof.json" -- "$@" > "$w.prof.out" 2> "$w.prof.err"
  local rc=$?
  python3 - "$name" "$w" "$rc" "$check" >> "$RESULTS" <<'PY'
import json, sys
name, w, rc, check = sys.argv[1:]
def read(p):
    try:
        return open(p).read()
    except Exception:
        return ""
rows = [json.loads(l) for l in read(w + ".prof.json").splitlines() if l.strip()]
same = read(w + ".plain.out") == read(w + ".prof.out") and read(w + ".plain.out") != ""
why = []
if rc not in ("0",):
    why.append(f"exit {rc}")
if not same:
    why.append("the application's output differs from a plain run")
prof = [r for r in rows if not r.get("skipped")]
skipped = [r for r in rows if r.get("skipped")]
env = {"rows": rows, "prof": prof, "skipped": skipped, "why": why, "w": w, "read": read}
exec(check, env)
ok = not why
r0 = prof[0] if prof else (rows[0] if rows else {})
print(json.dumps({"case": name, "kernel": r0.get("short_name", "-"), "regions": len(rows),
    "bytes": r0.get("write_set_bytes", 0), "original_us": r0.get("durations_ns", [0])[0] / 1e3 if r0.get("durations_ns") else 0,
    "median_us": r0.get("median_ns", 0) / 1e3, "matched": same, "deterministic": all(r.get("deterministic") for r in prof) if prof else None,
    "address_mode": "in place", "known": "", "ok": ok,
    "why": "" if ok else "; ".join(why) + " | " + read(w + ".prof.err")[-900:]}))
PY
}

# saxpy, three launches: five timed passes each, deterministic, 16 MiB written (y).
PROFILE_ARGS=(-k saxpy --all --passes 5)
pcase profile-saxpy '
if len(prof) != 3: why.append(f"{len(prof)} rows, expected 3")
for r in prof:
    d = r["durations_ns"]
    if len(d) != 5 or r["median_ns"] <= 0: why.append(f"passes {d}")
    if r["deterministic"] is not True: why.append("not deterministic")
    ws = r["write_set_bytes"]
    if ws != 16 << 20: why.append(f"write set {ws}")
    if r["restore_median_ns"] <= 0 or r["pass_overhead_ns"] <= 0: why.append("no restore or overhead time")
' -- "$K" saxpy 3

# Every launch profiled (-k 'regex:.'): only the application's three saxpy launches, none of
# kreplay's own passes, L2 sweeps or chunk kernels (issue 29).
PROFILE_ARGS=(-k 'regex:.' --all --passes 3)
pcase profile-self-match '
if len(rows) != 3: why.append(f"{len(rows)} rows, expected 3: " + ", ".join(r.get("short_name", "?") for r in rows))
for r in rows:
    if r.get("short_name") != "saxpy": why.append("profiled " + str(r.get("short_name")))
' -- "$K" saxpy 3

# Counters of three saxpy launches: each row has counters, and warps launched is exact (grid x
# block / 32). Shared by the counter cases, which add checks inside the loop over rows.
WARPS_EXACT='
if len(prof) != 3: why.append(f"{len(prof)} rows, expected 3")
for r in prof:
    m = {x["name"]: x["value"] for x in r.get("metrics", [])}
    warps = r["grid"][0] * r["block"][0] // 32
    if r.get("metrics_error"): why.append("no counters: " + r["metrics_error"])
    got = m.get("smsp__warps_launched.sum")
    if not r.get("metrics_error") and got != warps: why.append(f"warps {got} != {warps}")'

# Counters (batched, counted at the process's exit): also instructions and DRAM reads.
PROFILE_ARGS=(-k saxpy --all --metrics smsp__warps_launched.sum,smsp__inst_executed.sum,dram__bytes_read.sum)
pcase profile-metrics "$WARPS_EXACT"'
    if not m.get("smsp__inst_executed.sum", 0) > 0: why.append("no instructions")
    if not m.get("dram__bytes_read.sum", 0) > 0: why.append("no DRAM reads")
    if r.get("counter_passes", 0) < 1: why.append("no counter passes")
    if len(r["durations_ns"]) != 1: why.append("--metrics times the application launch alone by default")
' -- "$K" saxpy 3

# Counters wait for a batch (counter_batch.rs): a free of memory a waiting launch reaches
# must have its counters taken first. Buffers allocated and freed around each launch.
PROFILE_ARGS=(-k saxpy --all --metrics smsp__warps_launched.sum,smsp__inst_executed.sum)
pcase profile-metrics-free "$WARPS_EXACT" -- "$K" churn 3

# The example C tool (testdata/tools/example_tool.c) decides the passes: until three agree.
if [[ profile-tool =~ $ONLY ]] && ! [[ profile-tool =~ $SKIP ]]; then
  cc -shared -fPIC -O2 -I"$HERE/engine/include" -o "$WORK/libexample_tool.so" "$HERE/testdata/tools/example_tool.c" || exit 2
fi
PROFILE_ARGS=(-k saxpy --all --tool "$WORK/libexample_tool.so")
pcase profile-tool '
if len(prof) != 3: why.append(f"{len(prof)} rows, expected 3")
said = [l for l in read(w + ".prof.err").splitlines() if l.startswith("example_tool:")]
if len(said) != 3: why.append(f"{len(said)} lines from the tool, expected 3")
for r in prof:
    n = len(r["durations_ns"])
    if not 3 <= n <= 1000: why.append(f"{n} passes")
' -- "$K" saxpy 3

# A PyTorch training step, every GEMM profiled: losses and weights unchanged.
PROFILE_ARGS=(-k 'regex:gemm|xmma|cutlass' --all --passes 3)
pcase profile-train '
if len(prof) < 24: why.append(f"{len(prof)} GEMMs profiled, expected 8 per step")
if skipped:
    first = skipped[0]["skipped"]
    why.append(f"{len(skipped)} skipped: {first}")
for r in prof:
    if r["deterministic"] is not True: why.append(r["short_name"] + " not deterministic")
    if len(r["durations_ns"]) != 3: why.append("passes")
' -- python3 "$APPS/torch_train_app.py" 3

# Graph kernel nodes are not replayed in place yet: each says so in a skipped row.
PROFILE_ARGS=(-k saxpy --all)
pcase profile-graph '
if prof: why.append("a graph node was profiled")
if len(skipped) < 1 or not all("graph" in r["skipped"] for r in skipped): why.append("no skipped graph rows")
' -- "$K" graph

# Two ranks, one report each (-o prof-r%r.json).
if [[ "profile-2ranks" =~ $ONLY ]] && ! [[ "profile-2ranks" =~ $SKIP ]]; then
  echo "== profile-2ranks"
  two_ranks
  rm -f "$WORK"/prof-r*.json
  "${LAUNCH[@]}" python3 "$APPS/mpi_app.py" 2>/dev/null | sort > "$WORK/prof2.plain.out"
  "${LAUNCH[@]}" "$KR" profile -k 'regex:erf' --all --passes 4 -o "$WORK/prof-r%r.json" -- python3 "$APPS/mpi_app.py" 2> "$WORK/prof2.err" | sort > "$WORK/prof2.out"
  python3 - "$WORK" "${LAUNCH[0]}" >> "$RESULTS" <<'PY'
import json, os, sys
w, launcher = sys.argv[1:]
why = []
for r in (0, 1):
    p = f"{w}/prof-r{r}.json"
    rows = [json.loads(l) for l in open(p).read().splitlines() if l.strip()] if os.path.exists(p) else []
    if not rows: why.append(f"no report for rank {r}")
    for x in rows:
        if x.get("rank") != r: why.append(f"rank {x.get('rank')} in the report of rank {r}")
        if x.get("skipped") or x.get("deterministic") is not True or len(x.get("durations_ns", [])) != 4: why.append(f"rank {r}: {x}")
plain, prof = open(w + "/prof2.plain.out").read(), open(w + "/prof2.out").read()
if plain != prof or plain.count("rank") != 2: why.append(f"outputs differ: {plain!r} vs {prof!r}")
print(json.dumps({"case": f"profile-2ranks ({launcher})", "kernel": "erf", "regions": 2, "matched": plain == prof,
    "address_mode": "in place", "known": "", "ok": not why, "why": "; ".join(why) + " | " + open(w + "/prof2.err").read()[-600:]}))
PY
fi

python3 - "$RESULTS" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
print()
print(f"{'case':<22} {'kernel':<40} {'regions':>7} {'capture':>12} {'orig us':>9} {'replay us':>10} {'verified':>9} {'addresses':>9} {'relocate':>8} {'ptx jit':>7}  result")
passed = failed = skipped = 0
for r in rows:
    k = r.get("kernel", "-")
    k = k if len(k) <= 40 else k[:37] + "..."
    verified = "yes" if r.get("matched") else ("nondet" if r.get("deterministic") is False else "no")
    if r["ok"]:
        res = "PASS"; passed += 1
    elif r.get("known"):
        res = "KNOWN LIMITATION: " + r["known"]; skipped += 1
    else:
        res = "FAIL"; failed += 1
    print(f"{r['case']:<22} {k:<40} {r.get('regions', 0):>7} {r.get('bytes', 0):>12} {r.get('original_us', 0):>9.1f} {r.get('median_us', 0):>10.1f} {verified:>9} {r.get('address_mode', '-'):>9} {r.get('relocated', '-'):>8} {r.get('ptx', '-'):>7}  {res}")
    if not r["ok"] and r.get("why"):
        print("    why: " + r["why"].replace("\n", " / ")[:1500])
print()
print(f"{passed} passed, {failed} failed, {skipped} skipped")
sys.exit(1 if failed else 0)
PY
