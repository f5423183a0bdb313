"""The verdicts of the range-capture cases (issue 32), as pure functions over what the
commands left (parsed `info --json`, `play --json`, `list --json`, `diff --json`, stdout), so
that test_helpers_cpu.py checks them on the CPU: each good input passes, each fault fails.

The JSON fields are those of the range contract (docs/FORMAT.md "range captures"): `info
--json` has `steps[]` ({index, kind, kernel, grid, block, bytes, event, stream, original_ns})
and `range` ({origin, launches, kernel_steps, streams, original_ns, step_digests}); `play
--json` of a range adds `steps[]` ({index, kind, kernel, median_ns}) and
`first_divergent_step`. The one part that reads files, compare_windows (with region_file and
window_digest), reads what `kreplay extract` wrote.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path
from typing import Optional

# -- testdata/apps/range_streams.cu --------------------------------------------------------------

STREAMS_KERNELS = ("streams_produce", "streams_middle", "streams_finish")
STREAMS_ELEMENTS = 1 << 20
STREAMS_BYTES = STREAMS_ELEMENTS * 4
STREAMS_GRID, STREAMS_BLOCK = [STREAMS_ELEMENTS // 256, 1, 1], [256, 1, 1]
STREAMS_RANGES = 3  # the app's default: one warm-up pass, then three ranged passes
# From streams_produce's launch to streams_finish's (a --launch-range of one pass).
STREAMS_LAUNCH_KINDS = ("kernel", "event-record", "event-wait", "copy-dtod", "kernel", "fill", "event-record",
                        "event-wait", "kernel")
# The whole pass, inside cudaProfilerStart/Stop or nvtxRangePushA("streams").
STREAMS_FULL_KINDS = STREAMS_LAUNCH_KINDS + ("copy-dtoh",)
STREAMS_MIDDLE_STEP = STREAMS_LAUNCH_KINDS.index("copy-dtod") + 1
# Steps the verdicts do not count: a range that ends with the application's
# cudaStreamSynchronize holds it as a host wait, one that ends before does not.
UNCOUNTED_KINDS = ("host-wait",)
OP_BYTES_KINDS = ("copy-dtod", "copy-htod", "copy-dtoh", "fill")


def base_name(kernel: Optional[dict]) -> str:
    """A step's kernel as a function name ("streams_middle" of "streams_middle" or of a
    C++ signature), "" for an op step."""
    name = (kernel or {}).get("name") or ""
    return name.split("(")[0].split("<")[0].strip()


def list_kernels(listed) -> list:
    """The kernels of `list --json` (an array of kernels, or an object holding `kernels`)."""
    if isinstance(listed, list):
        return listed
    if isinstance(listed, dict):
        return listed.get("kernels") or []
    return []


def listed_streams_range(run, kr, argv, nth: int = 2, name: str = "list"):
    """range_streams' `nth` ranged pass as `streams_launch_range` finds it in `kreplay list
    --json -- argv`, run by `run` (a case's `run`): ((I, J), None), or (None, why not)."""
    import krsuite as S
    ls = run([kr, "list", "--json", "--"] + list(argv), name=name)
    try:
        return streams_launch_range(S.last_json_line(ls.out), nth), None
    except ValueError as e:
        return None, f"list (exit {ls.rc}): {e}"


def streams_launch_range(listed, nth: int) -> tuple:
    """(I, J): the process launch indices of range_streams' `nth` ranged pass (1-based; the
    warm-up pass before the ranges is pass 0), from `list --json`. Raises ValueError saying
    why the listing does not show the app's launches as expected."""
    ks = list_kernels(listed)
    found = {}
    for name in STREAMS_KERNELS:
        rows = [k for k in ks if base_name({"name": k.get("demangled") or k.get("name")}) == name]
        if len(rows) != 1:
            raise ValueError(f"list shows {len(rows)} rows for {name}, want 1")
        found[name] = rows[0]
    counts = {n: k.get("count") for n, k in found.items()}
    firsts = [found[n].get("first_launch") for n in STREAMS_KERNELS]
    if len(set(counts.values())) != 1 or not isinstance(firsts[0], int):
        raise ValueError(f"counts {counts}, first launches {firsts}: not one launch of each per pass")
    if firsts != [firsts[0], firsts[0] + 1, firsts[0] + 2]:
        raise ValueError(f"first launches {firsts}: the three kernels are not consecutive")
    if not 1 <= nth < counts[STREAMS_KERNELS[0]]:
        raise ValueError(f"pass {nth} asked, the app ran {counts[STREAMS_KERNELS[0]]} passes (warm-up included)")
    first = firsts[0] + 3 * nth
    return first, first + 2


def counted_steps(steps) -> list:
    return [s for s in steps or [] if s.get("kind") not in UNCOUNTED_KINDS]


def streams_steps_checks(info, kinds, origin: str, launches: Optional[tuple] = None) -> list[str]:
    """A range_streams capture's `info --json`: its steps in issue order have `kinds` (host
    waits aside), the three kernels in order with their geometry and in-app time on the right
    streams (produce and finish on one, the copy, middle and fill on the other), copies and the
    fill of the buffer's size, event steps naming events (each wait the event recorded just
    before it); the range says its origin (and launches), three kernel steps, two streams, an
    in-app time and a digest per step."""
    info = info or {}
    why = []
    steps = counted_steps(info.get("steps"))
    got = tuple(s.get("kind") for s in steps)
    if got != tuple(kinds):
        why.append(f"info lists step kinds {list(got)}, want {list(kinds)}")
        return why
    kernels = [s for s in steps if s.get("kind") == "kernel"]
    names = [base_name(s.get("kernel")) for s in kernels]
    if names != list(STREAMS_KERNELS):
        why.append(f"kernel steps {names}, want {list(STREAMS_KERNELS)}")
    for s in kernels:
        if s.get("grid") != STREAMS_GRID or s.get("block") != STREAMS_BLOCK:
            why.append(f"step {s.get('index')}: grid {s.get('grid')} block {s.get('block')}")
        if not (s.get("original_ns") or 0) > 0:
            why.append(f"step {s.get('index')}: no in-app time")
    for s in steps:
        if s.get("kind") in OP_BYTES_KINDS and s.get("bytes") != STREAMS_BYTES:
            why.append(f"step {s.get('index')} ({s.get('kind')}): {s.get('bytes')} bytes, want {STREAMS_BYTES}")
        if s.get("kind", "").startswith("event-") and s.get("event") is None:
            why.append(f"step {s.get('index')} ({s.get('kind')}) names no event")
    for rec, wait in zip(steps, steps[1:]):
        if wait.get("kind") == "event-wait" and rec.get("kind") == "event-record" and rec.get("event") != wait.get("event"):
            why.append(f"step {wait.get('index')} waits for event {wait.get('event')}, step {rec.get('index')} "
                       f"recorded {rec.get('event')}")
    why += _streams_of(steps)
    why += range_desc_checks(info.get("range"), origin, 3, 2, launches)
    return why


def _streams_of(steps) -> list[str]:
    """s1: produce, record ev1, wait ev2, finish (and the copy to the host); s2: wait ev1,
    the device copy, middle, the fill, record ev2. The two events are different."""
    why = []
    s1 = {steps[i].get("stream") for i in (0, 1, 7, 8, *range(9, len(steps)))}
    s2 = {steps[i].get("stream") for i in (2, 3, 4, 5, 6)}
    if len(s1) != 1 or len(s2) != 1 or s1 == s2:
        why.append(f"streams of the steps {[s.get('stream') for s in steps]}: want two, as the app issued them")
    if steps[1].get("event") == steps[6].get("event"):
        why.append(f"steps 1 and 6 record the same event {steps[1].get('event')}: the app records two")
    return why


def range_desc_checks(rng, origin: str, kernel_steps: int, streams: int, launches: Optional[tuple] = None) -> list:
    """info's `range` object: origin, kernel step count, stream count, in-app time, digests."""
    rng = rng or {}
    why = []
    if rng.get("origin") != origin:
        why.append(f"range origin {rng.get('origin')!r}, want {origin!r}")
    if rng.get("kernel_steps") != kernel_steps:
        why.append(f"range.kernel_steps {rng.get('kernel_steps')}, want {kernel_steps}")
    if rng.get("streams") != streams:
        why.append(f"range.streams {rng.get('streams')}, want {streams}")
    if not (rng.get("original_ns") or 0) > 0:
        why.append("range.original_ns: no in-app time of the range")
    if rng.get("step_digests") is not True:
        why.append("range.step_digests is not true: a diverging replay could not name its step")
    if launches is not None and list(rng.get("launches") or []) != list(launches):
        why.append(f"range.launches {rng.get('launches')}, want {list(launches)}")
    return why


def range_play_checks(play_rc: int, play, passes: int, info) -> list[str]:
    """`play --passes N --verify --json` of a range: exit 0, N passes timed, the end state
    matched bit for bit and the passes identical, `first_divergent_step` there and null, and
    the report's steps are info's (same count, kinds and kernels, in order)."""
    play = play or {}
    v = play.get("verify") or {}
    why = []
    if play_rc != 0:
        why.append(f"kreplay play --verify exits {play_rc}")
    if len(play.get("durations_ns") or []) != passes:
        why.append(f"{len(play.get('durations_ns') or [])} passes timed, {passes} asked")
    if v.get("matched") is not True:
        why.append(f"the end state does not match the recorded one ({v.get('mismatched_bytes')} bytes)")
    if v.get("deterministic") is not True:
        why.append(f"the {passes} passes are not identical")
    if "first_divergent_step" not in play and "first_divergent_step" not in v:
        why.append("the report has no first_divergent_step (null when nothing diverged)")
    elif first_divergent_step(play) is not None:
        why.append(f"first_divergent_step {first_divergent_step(play)} on a matched replay")
    want = [(s.get("kind"), base_name(s.get("kernel"))) for s in (info or {}).get("steps") or []]
    got = [(s.get("kind"), base_name(s.get("kernel"))) for s in play.get("steps") or []]
    if got != want:
        why.append(f"play's steps {got[:12]} are not info's {want[:12]}")
    return why


def per_step_checks(play) -> list[str]:
    """`play --per-step`: every kernel step of the report has its own median time."""
    steps = [s for s in (play or {}).get("steps") or [] if s.get("kind") == "kernel"]
    if not steps:
        return ["play --per-step reports no kernel step"]
    return [f"step {s.get('index')}: no per-step median" for s in steps if not (s.get("median_ns") or 0) > 0]


def first_divergent_step(play):
    """`first_divergent_step` of a play report (top level; inside `verify` is accepted too)."""
    play = play or {}
    if "first_divergent_step" in play:
        return play["first_divergent_step"]
    return (play.get("verify") or {}).get("first_divergent_step")


def streams_case_checks(rec_rc: int, base_out: str, rec_out: str, info, play_rc: int, play, kinds, origin: str,
                        launches: Optional[tuple] = None) -> list[str]:
    """range-streams-launch / -profiler / -nvtx: the record exits 0 with the app's output as a
    plain run's, info lists the steps (streams_steps_checks), 8 passes replay bit-exact."""
    why = []
    if rec_rc != 0:
        why.append(f"kreplay record exits {rec_rc}")
    if base_out != rec_out or not base_out:
        why.append("the application's stdout under record differs from the plain run's")
    return why + streams_steps_checks(info, kinds, origin, launches) + range_play_checks(play_rc, play, 8, info)


def middle_step(info) -> Optional[int]:
    """The step index of streams_middle in a range_streams capture (None: not there once)."""
    idx = [s.get("index") for s in (info or {}).get("steps") or [] if base_name(s.get("kernel")) == "streams_middle"]
    return idx[0] if len(idx) == 1 else None


# range-metrics: `play --metrics` of the range: one metric the player sums over the kernel steps
# (a `.sum`/`.avg` counter rollup, kreplay_engine::range_counters::is_additive), one it does not
# (`.max`: per step only), and DRAM bytes (additive, may be 0 where L2 held the data).
RANGE_METRICS_POSITIVE = "sm__cycles_elapsed.avg"
RANGE_METRICS_ADDITIVE = (RANGE_METRICS_POSITIVE, "dram__bytes_read.sum")
RANGE_METRICS_PER_STEP = ("sm__cycles_elapsed.max",)
RANGE_METRICS = RANGE_METRICS_ADDITIVE + RANGE_METRICS_PER_STEP


def _number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and v == v and abs(v) != float("inf")


def range_metrics_checks(play_rc: int, play, info, kernel_steps: int) -> list[str]:
    """range-metrics: `play --metrics M --json` of a range exits 0; every kernel step of the
    report (as many as info's) has a finite value of every metric, positive for
    RANGE_METRICS_POSITIVE; op steps have none; `range_metrics` holds each additive metric as the
    sum of the steps' values and no per-step-only one."""
    play = play or {}
    why = []
    if play_rc != 0:
        why.append(f"kreplay play --metrics exits {play_rc}")
    steps = play.get("steps") or []
    kernels = [s for s in steps if s.get("kind") == "kernel"]
    info_kernels = [s for s in (info or {}).get("steps") or [] if s.get("kind") == "kernel"]
    if len(kernels) != kernel_steps or len(info_kernels) != kernel_steps:
        why.append(f"{len(kernels)} kernel steps in play's report, {len(info_kernels)} in info's, want {kernel_steps}")
    for s in steps:
        m = s.get("metrics")
        if s.get("kind") != "kernel":
            if m:
                why.append(f"step {s.get('index')} ({s.get('kind')}) has counters")
            continue
        m = m or {}
        for name in RANGE_METRICS:
            if not _number(m.get(name)):
                why.append(f"step {s.get('index')} ({base_name(s.get('kernel'))}): no value of {name}")
        if _number(m.get(RANGE_METRICS_POSITIVE)) and not m[RANGE_METRICS_POSITIVE] > 0:
            why.append(f"step {s.get('index')}: {RANGE_METRICS_POSITIVE} is {m[RANGE_METRICS_POSITIVE]}")
    totals = play.get("range_metrics")
    if not isinstance(totals, dict):
        return why + ["the report has no range_metrics"]
    for name in RANGE_METRICS_ADDITIVE:
        want = sum((s.get("metrics") or {}).get(name) or 0 for s in kernels)
        got = totals.get(name)
        if not _number(got):
            why.append(f"range_metrics has no {name}")
        elif abs(got - want) > 1e-6 * max(1.0, abs(want)):
            why.append(f"range_metrics {name} = {got}, the steps sum to {want}")
    for name in RANGE_METRICS_PER_STEP:
        if name in totals:
            why.append(f"range_metrics holds {name}, which does not add up over steps")
    return why


SLOWER_AT_LEAST = 1.2


def module_checks(base_play, slow_rc: int, slow_play) -> list[str]:
    """range-module: the range replayed with the slow variant of its middle kernel
    (`--module`) matches the recorded end state bit for bit, deterministically, and its median
    is at least SLOWER_AT_LEAST times the captured code's (the variant writes its output 256
    times: several times slower, so noise cannot pass or fail this)."""
    why = []
    bv, sv = (base_play or {}).get("verify") or {}, (slow_play or {}).get("verify") or {}
    if bv.get("matched") is not True:
        why.append("the captured code's replay does not match")
    if slow_rc != 0:
        why.append(f"play --module exits {slow_rc}")
    if sv.get("matched") is not True or sv.get("deterministic") is not True:
        why.append(f"the variant's replay: matched {sv.get('matched')}, deterministic {sv.get('deterministic')}")
    b, s = (base_play or {}).get("median_ns") or 0, (slow_play or {}).get("median_ns") or 0
    if not (b > 0 and s >= b * SLOWER_AT_LEAST):
        why.append(f"median {s / 1e3:.1f} us with the variant, {b / 1e3:.1f} us without: not {SLOWER_AT_LEAST}x slower")
    return why


def divergent_checks(rc: int, play, middle: Optional[int]) -> list[str]:
    """range-divergent: with a variant middle kernel that writes other values, `play
    --verify` exits 1 (verification failed), the end state does not match, the passes agree
    (the variant is deterministic), and the first divergent step is the middle kernel's."""
    play = play or {}
    v = play.get("verify") or {}
    why = []
    if middle is None:
        why.append("info shows no single streams_middle step")
    if rc != 1:
        why.append(f"play --module --verify exits {rc}, want 1 (verification failed)")
    if v.get("matched") is not False:
        why.append(f"verify.matched {v.get('matched')}: the divergent kernel's output was not caught")
    if v.get("deterministic") is not True:
        why.append("the divergent replay's passes differ")
    got = first_divergent_step(play)
    if got is None or got != middle:
        note = play.get("divergence_note")
        why.append(f"first_divergent_step {got}, want {middle} (streams_middle)" + (f": {note}" if note else ""))
    return why


# -- timing figures ------------------------------------------------------------------------------

TIME_WITHIN = 0.05  # the target: replay within ±5 % of the in-app range time


def pct(value_ns, original_ns) -> float:
    """How far `value_ns` is from `original_ns`, in percent (+: slower)."""
    return (value_ns / original_ns - 1) * 100 if original_ns else float("nan")


def within(value_ns, original_ns, tolerance: float = TIME_WITHIN) -> bool:
    return bool(original_ns) and bool(value_ns) and abs(value_ns - original_ns) <= tolerance * original_ns


def nvtx_torch_checks(rec_rc: int, base_out: str, rec_out: str, info, play_rc: int, play, flush) -> tuple:
    """range-nvtx-torch: (why, figures). The record exits 0 with the app's output unchanged,
    the capture is layer.2 of the second iteration (origin `nvtx-range layer.2 #2`) with a
    layer's kernels as steps and an in-app time; 8 passes replay bit-exact; the replay time
    against the in-app range time (`range.original_ns`): the first pass of `play --cache flush`
    and the median of the same run, each within ±5 % (the issue's target: a stated check). The
    figures are returned whether or not the check passes, for the case's row."""
    info = info or {}
    rng = info.get("range") or {}
    why = []
    if rec_rc != 0:
        why.append(f"kreplay record exits {rec_rc}")
    if base_out != rec_out or not base_out:
        why.append("the application's stdout under record differs from the plain run's")
    kernels = [s for s in info.get("steps") or [] if s.get("kind") == "kernel"]
    if len(kernels) < 10:
        why.append(f"{len(kernels)} kernel steps: a layer launches more than 10 kernels")
    # The layers run on PyTorch's current stream: one.
    why += range_desc_checks(rng, "nvtx-range layer.2 #2", len(kernels), 1)
    why += range_play_checks(play_rc, play, 8, info)
    original = rng.get("original_ns") or 0
    d = (flush or {}).get("durations_ns") or []
    first, median = (d[0] if d else 0), ((flush or {}).get("median_ns") or 0)
    warm = (play or {}).get("median_ns") or 0
    figures = (f"in-app {original / 1e3:.1f} us; replay with --cache flush: first pass {first / 1e3:.1f} us "
               f"({pct(first, original):+.1f} %), median {median / 1e3:.1f} us ({pct(median, original):+.1f} %); "
               f"warm median {warm / 1e3:.1f} us ({pct(warm, original):+.1f} %); target ±5 %")
    if not within(first, original):
        why.append(f"first flushed pass {first / 1e3:.1f} us not within ±5 % of in-app {original / 1e3:.1f} us")
    if not within(median, original):
        why.append(f"flushed median {median / 1e3:.1f} us not within ±5 % of in-app {original / 1e3:.1f} us")
    return why, figures


# -- testdata/apps/torch_block_app.py and --save-step ---------------------------------------------

TORCH_LAYERS, TORCH_ITERATIONS = 4, 3  # the app's defaults
TORCH_LAYER, TORCH_NTH = 2, 2  # --nvtx-range layer.2 --nth 2


def save_step_choice(info, listed) -> Optional[tuple]:
    """(K, mangled name, nth) for range-save-step: the first kernel step of the layer.2 capture
    whose kernel runs exactly once in that layer and exactly once per layer in the whole
    process (list's count is LAYERS x ITERATIONS), so its instance number is known without
    per-launch data: (iteration - 1) x LAYERS + layer + 1. None: no such kernel."""
    steps = [s for s in (info or {}).get("steps") or [] if s.get("kind") == "kernel"]
    counts = {}
    for s in steps:
        m = (s.get("kernel") or {}).get("mangled")
        counts[m] = counts.get(m, 0) + 1
    total = {k.get("name"): k.get("count") for k in list_kernels(listed)}
    # A kernel with pointer parameters first: their memory is what the comparison reads (on
    # the H200 the first such kernel was cutlass's sgemm, whose pointers sit inside a
    # by-value Params struct: nothing to compare).
    def has_pointers(s) -> bool:
        return "*" in ((s.get("kernel") or {}).get("name") or "")
    for s in sorted(steps, key=lambda s: not has_pointers(s)):
        m = (s.get("kernel") or {}).get("mangled")
        if m and counts[m] == 1 and total.get(m) == TORCH_LAYERS * TORCH_ITERATIONS:
            return s.get("index"), m, (TORCH_NTH - 1) * TORCH_LAYERS + TORCH_LAYER + 1
    return None


def identity(info) -> dict:
    """What makes two single-dispatch captures the same dispatch, addresses aside: the kernel,
    the launch geometry, and the bytes of every argument that is not a device pointer."""
    info = info or {}
    launch = info.get("launch") or {}
    params = info.get("params") or []
    return {
        "kernel": (info.get("kernel") or {}).get("mangled") or (info.get("kernel") or {}).get("name"),
        "grid": launch.get("grid"),
        "block": launch.get("block"),
        "dynamic_shared_bytes": launch.get("dynamic_shared_bytes"),
        "params": [(p.get("size"), p.get("pointer"), None if p.get("pointer") else p.get("value_hex")) for p in params],
    }


def param_windows(saved_info, direct_info) -> tuple:
    """(windows, why): the memory each pointer argument points at, paired between the saved
    step and the direct capture by the argument (not by address or region id, which a fresh
    process and another footprint may change): for argument i, region and offset in each, and
    the bytes both hold from there on. An argument pointing into no captured region in both
    (a null pointer) is left out; into one only, a fault."""
    windows, why = [], []
    regions = [{r.get("id"): r for r in (x or {}).get("regions") or []} for x in (saved_info, direct_info)]
    pairs = zip((saved_info or {}).get("params") or [], (direct_info or {}).get("params") or [])
    for i, (a, b) in enumerate(pairs):
        if not (a.get("pointer") and b.get("pointer")):
            continue
        if a.get("region") is None and b.get("region") is None:
            continue
        ra, rb = regions[0].get(a.get("region")), regions[1].get(b.get("region"))
        if ra is None or rb is None:
            why.append(f"argument {i} points into a captured region in one capture only")
            continue
        oa, ob = a.get("region_offset") or 0, b.get("region_offset") or 0
        length = min(ra["size"] - oa, rb["size"] - ob)
        windows.append({"param": i, "a": (ra["id"], ra["address"], oa), "b": (rb["id"], rb["address"], ob),
                        "length": length})
    if not windows and not why:
        why.append("no pointer argument into a captured region to compare")
    return windows, why


def region_file(folder, region_id: int, address: int, post: bool):
    """The file `kreplay extract` wrote for a region (`region-ID-ADDR.bin`; its state after
    the kernel in `.post.bin`, where the kernel wrote)."""
    base = Path(folder) / f"region-{region_id}-{address:#x}"
    p = Path(str(base) + ".post.bin")
    return p if post and p.exists() else Path(str(base) + ".bin")


def window_digest(path, offset: int, length: int) -> Optional[str]:
    """sha256 of `length` bytes of a file from `offset` (None: missing or short)."""
    h = hashlib.sha256()
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            left = length
            while left > 0:
                block = f.read(min(left, 8 << 20))
                if not block:
                    return None
                h.update(block)
                left -= len(block)
    except OSError:
        return None
    return h.hexdigest()


def compare_windows(windows, saved_dir, direct_dir) -> list[dict]:
    """Each window's bytes before and after the kernel, from the two extractions: {param,
    pre_same, post_same}; a window whose files are missing or short is not the same."""
    out = []
    for w in windows:
        same = {}
        for state, post in (("pre", False), ("post", True)):
            da = window_digest(region_file(saved_dir, w["a"][0], w["a"][1], post), w["a"][2], w["length"])
            db = window_digest(region_file(direct_dir, w["b"][0], w["b"][1], post), w["b"][2], w["length"])
            same[state] = da is not None and da == db
        out.append({"param": w["param"], "pre_same": same["pre"], "post_same": same["post"]})
    return out


def save_step_checks(save_rc: int, saved_info, saved_play, direct_rc: int, direct_info, direct_play,
                     compared: list, windows_why: list) -> list:
    """range-save-step: step K saved from the range (`play --save-step K`) and the same
    dispatch recorded directly (`record -k MANGLED --nth N`) are the same dispatch: the same
    identity (kernel, geometry, non-pointer argument bytes; pointer values may differ, since a
    fresh process may map its allocations elsewhere); both replay bit-exact; and the memory
    each pointer argument points at holds the same bytes before and after the kernel in both
    (`compared`, from param_windows/compare_windows over `kreplay extract` of each: paired by
    argument, so neither address moves nor a different footprint, the range's against the
    reachable walk's, can pair the wrong regions as `kreplay diff`'s id/address/size pairing
    could)."""
    why = []
    if save_rc != 0:
        why.append(f"play --save-step exits {save_rc}")
    if direct_rc != 0:
        why.append(f"record -k --nth exits {direct_rc}")
    if not saved_info or not direct_info:
        return why + ["no info of the saved step or of the direct capture"]
    if saved_info.get("steps"):
        why.append("the saved step is a range capture, not a single dispatch")
    a, b = identity(saved_info), identity(direct_info)
    for k in a:
        if a[k] != b[k]:
            why.append(f"{k}: saved {a[k]}, direct {b[k]}")
    for what, p in (("saved step", saved_play), ("direct capture", direct_play)):
        v = (p or {}).get("verify") or {}
        if v.get("matched") is not True or v.get("deterministic") is not True:
            why.append(f"the {what} does not replay bit-exact ({v})")
    why += windows_why
    if not compared and not windows_why:
        why.append("no argument's memory compared")
    for c in compared:
        for state in ("pre", "post"):
            if not c.get(f"{state}_same"):
                why.append(f"argument {c.get('param')}: memory {state}-kernel differs")
    return why


# -- range-bench ------------------------------------------------------------------------------------

BENCH_KERNELS = 30
OVERHEAD_US = 2.0  # the target per step
FIGURE = re.compile(r"^figures (in-app range|baseline): ([0-9.]+) us", re.M)


def stable_output(text: str) -> str:
    """The application's output without its timing lines (`figures ...`), which no two runs
    print alike."""
    return "".join(l for l in (text or "").splitlines(keepends=True) if not l.startswith("figures "))


def bench_figures(text: str) -> dict:
    """The `figures` lines of `range_streams bench`: {"in-app range": us, "baseline": us}."""
    return {m.group(1): float(m.group(2)) for m in FIGURE.finditer(text or "")}


BENCH_ROUNDS = 3  # record + play rounds of range-bench, judged on the median one


def median_round(pairs: list) -> Optional[int]:
    """The index of the round whose replay/in-app ratio is the median of `pairs` [(in-app ns,
    replay median ns)]: the GPU's clocks differ from one process to the next by a few percent
    (the app's own loop took 102.9 us in one run and 115.6 us in another), so one record and
    one play are paired in time, and the middle pair is the figure. Rounds missing a figure
    count as the worst. None without rounds."""
    if not pairs:
        return None

    def ratio(p):
        original, median = p
        return median / original if original and median else float("inf")

    order = sorted(range(len(pairs)), key=lambda i: ratio(pairs[i]))
    return order[len(order) // 2]


def launch_bound(baseline_us, best_ns) -> bool:
    """Whether the plain run's own C++ loop, launching the same 30 kernels back to back (best of
    its rounds), took more than 5 % longer than the replay's best pass: the application then
    cannot launch as fast as the GPU runs them (a host with slow launches: 4.1 us a launch
    against 3.4 us a kernel on one H100 host, session 24), and its in-app range time is its
    launch rate, which a replay does not reproduce. False without both figures."""
    return bool(baseline_us) and bool(best_ns) and baseline_us * 1e3 > best_ns * (1 + TIME_WITHIN)


def bench_checks(base_out: str, rec_rc: int, rec_out: str, info, play_rc: int, play, passes: int) -> tuple:
    """range-bench: (why, figures). The record exits 0 with the app's output (timings aside)
    unchanged; the capture holds the 30 kernels; they replay bit-exact; the replay median is
    within ±5 % of the in-app range time (`range.original_ns`), or at most 5 % slower where the
    app is launch-bound (`launch_bound`: its in-app time is then its launch rate); and kreplay's
    launch overhead per step, (replay best pass - baseline best round) / 30, is at most 2 us.
    The baseline is
    the plain run's own loop (best of its rounds: best against best)."""
    info = info or {}
    play = play or {}
    why = []
    if rec_rc != 0:
        why.append(f"kreplay record exits {rec_rc}")
    if stable_output(base_out) != stable_output(rec_out) or not stable_output(base_out):
        why.append("the application's stdout under record differs from the plain run's")
    kernels = [s for s in info.get("steps") or [] if s.get("kind") == "kernel"]
    if len(kernels) != BENCH_KERNELS:
        why.append(f"{len(kernels)} kernel steps, want {BENCH_KERNELS}")
    why += range_play_checks(play_rc, play, passes, info)
    original = (info.get("range") or {}).get("original_ns") or 0
    median = play.get("median_ns") or 0
    d = play.get("durations_ns") or []
    best = min(d) if d else 0
    fig = bench_figures(base_out)
    baseline = fig.get("baseline")
    if baseline is None:
        why.append("the plain run printed no baseline figure")
    overhead = (best / 1e3 - baseline) / BENCH_KERNELS if baseline is not None and best else float("nan")
    app_range = fig.get("in-app range")
    figures = (f"{BENCH_KERNELS} kernels: replay median {median / 1e3:.1f} us, best {best / 1e3:.1f} us; in-app range "
               f"{original / 1e3:.1f} us ({pct(median, original):+.1f} %, target ±5 %; the app's own events: "
               f"{app_range} us); baseline C++ loop {baseline} us best: {overhead:+.3f} us per step (target <= 2 us)")
    bound = launch_bound(baseline, best)
    if bound:
        figures += (f"; the app's own loop ({baseline} us) is slower than the replay's best pass: its launches, "
                    f"not the GPU, set the in-app time on this host, so only a slower replay is judged")
    not_slower = bool(median) and bool(original) and median <= original * (1 + TIME_WITHIN)
    if not (within(median, original) or (bound and not_slower)):
        why.append(f"replay median {median / 1e3:.1f} us not within ±5 % of in-app {original / 1e3:.1f} us")
    if not overhead <= OVERHEAD_US:
        why.append(f"launch overhead {overhead:.3f} us per step (target <= {OVERHEAD_US} us)")
    return why, figures


# -- record -k K --graph-launch (torch_graph_app.py) ---------------------------------------------

GRAPH_LAUNCH_STEP_KINDS = ("kernel", "fill", "copy-dtod", "copy-htod", "copy-dtoh")
# What picks the graph's kernel in each mode of torch_graph_app.py (a part of its demangled name).
GRAPH_LAUNCH_KERNEL = {"cudagraph": "gelu", "compile": "triton_"}


def graph_launch_choice(listed, part: str) -> Optional[tuple]:
    """(mangled name, nth) for `record -k ^NAME$ --graph-launch --nth N`: the most frequent
    kernel whose demangled name holds `part` (case-insensitively) and that ran inside a CUDA
    graph, at its last execution (eager warm-ups come first, so the last one is a graph
    node's); None when `list --json` shows none."""
    ks = [k for k in list_kernels(listed)
          if part.lower() in (k.get("demangled") or k.get("name") or "").lower() and (k.get("in_graphs") or 0) > 0]
    if not ks:
        return None
    k = max(ks, key=lambda k: k.get("count") or 0)
    return k.get("name"), k.get("count")


def graph_launch_checks(rec_rc: int, base_out: str, rec_out: str, info, play_rc: int, play, mangled: str,
                        passes: int = 8) -> list[str]:
    """range-graph-launch: the record exits 0 with the application's output as a plain run's;
    info lists the graph's enabled nodes as steps (kernels, fills and 1D copies only, more than
    one kernel, the matched kernel among them, all on the launch's one stream), and the range
    says it is a graph launch (origin `graph-launch NAME #N (graph launch G)`), with a kernel
    step count matching the steps, in-app time and a digest per step; `play --passes 8
    --verify` matches bit for bit."""
    info = info or {}
    why = []
    if rec_rc != 0:
        why.append(f"kreplay record exits {rec_rc}")
    if base_out != rec_out or not base_out:
        why.append("the application's output differs under record (or is empty)")
    steps = info.get("steps") or []
    kinds = [s.get("kind") for s in steps]
    odd = sorted({k for k in kinds if k not in GRAPH_LAUNCH_STEP_KINDS}, key=str)
    if odd:
        why.append(f"steps of kinds {odd}: a graph launch holds kernels, fills and copies")
    kernels = [s for s in steps if s.get("kind") == "kernel"]
    if len(kernels) < 2:
        why.append(f"{len(kernels)} kernel step(s): the whole graph, not one node, was wanted")
    if not any((s.get("kernel") or {}).get("mangled") == mangled or (s.get("kernel") or {}).get("name") == mangled
               for s in kernels):
        why.append(f"the matched kernel {mangled[:60]} is not among the kernel steps")
    if len({s.get("stream") for s in steps}) > 1:
        why.append(f"steps on streams {sorted({str(s.get('stream')) for s in steps})}: one launch, one stream")
    rng = info.get("range") or {}
    origin = rng.get("origin") or ""
    if not re.fullmatch(r"graph-launch \S.* #\d+ \(graph launch \d+\)", origin):
        why.append(f"range origin {origin!r} does not say `graph-launch NAME #N (graph launch G)`")
    why += [w for w in range_desc_checks(rng, origin, len(kernels), 1) if "origin" not in w]
    why += range_play_checks(play_rc, play, passes, info)
    return why


# -- range-stall-bench ------------------------------------------------------------------------------

STALL_RE = re.compile(r"stalled the app ([0-9.]+) ms")
# range_streams bench warms up with two rounds of its 30 kernels before the range.
BENCH_FIRST_IN_RANGE = 2 * BENCH_KERNELS + 1


def stall_ms(err: str) -> Optional[float]:
    """The stall the recorder's summary line reports (`stalled the app 56.8 ms`), if any."""
    m = STALL_RE.search(err or "")
    return float(m.group(1)) if m else None


def stall_checks(range_rc: int, range_err: str, singles: list) -> tuple:
    """range-stall-bench: (why, figures). `singles`: (rc, stderr) of `record -k bench_step
    --nth N` for each of the range's kernels. The range's capture stall is at most the sum of
    the stalls of capturing its kernels one by one (the issue's target)."""
    why = []
    whole = stall_ms(range_err) if range_rc == 0 else None
    if whole is None:
        why.append(f"the range record (exit {range_rc}) reported no stall")
    each = []
    for i, (rc, err) in enumerate(singles):
        s = stall_ms(err) if rc == 0 else None
        if s is None:
            why.append(f"single capture {i + 1} (exit {rc}) reported no stall")
        else:
            each.append(s)
    if len(singles) != BENCH_KERNELS:
        why.append(f"{len(singles)} single captures, want {BENCH_KERNELS}")
    total = sum(each)
    figures = (f"capture stall of the {BENCH_KERNELS}-kernel range: {whole} ms; its kernels captured one by one: "
               f"{total:.1f} ms in all ({len(each)} captures, {max(each, default=0):.1f} ms the largest); target: range <= sum")
    if whole is not None and len(each) == BENCH_KERNELS and not whole <= total:
        why.append(f"the range stalled the app {whole} ms, more than the {total:.1f} ms of its kernels one by one")
    return why, figures
