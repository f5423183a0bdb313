"""`play --trace` in the GPU suite (issue 40): the verdicts over what `kreplay verify-trace`
(the Rust checker, hidden subcommand) says of a real replay's trace, as pure functions that
test_trace_cpu.py checks on the CPU, and where the traces are left for a person to open in
Perfetto afterwards."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

# A counter the suite already collects (range-metrics; also valid on one dispatch).
TRACE_METRIC = "dram__bytes_read.sum"
TRACE_PASSES = 3


def _common(play_rc, verify_rc, summary, passes) -> list:
    why = []
    if play_rc != 0:
        why.append(f"kreplay play --trace exits {play_rc}")
    if verify_rc != 0 or not isinstance(summary, dict):
        why.append(f"kreplay verify-trace exits {verify_rc} (see its stderr for the defects)")
        return why
    names = summary.get("slice_names") or {}
    if "restore" not in (summary.get("thread_names") or []):
        why.append("no restore thread")
    # No warm-up: pass 0 runs on the uploaded input (restored first only if something ran
    # before it), every later pass restores first.
    if not passes - 1 <= names.get("restore", 0) <= passes:
        why.append(f"{names.get('restore', 0)} restore slices for {passes} passes (want {passes - 1})")
    return why


def play_trace_checks(play_rc, verify_rc, summary, passes=TRACE_PASSES, metric=TRACE_METRIC) -> list:
    """`play CAPTURE --passes N --metrics M --trace`: one kernel slice per pass on the replay
    stream, the restores on their own thread, and M as a counter track (a sample at each
    timed window's start and end)."""
    why = _common(play_rc, verify_rc, summary, passes)
    if why and verify_rc != 0:
        return why
    slices = summary.get("slices") or {}
    if slices.get("replay stream") != passes:
        why.append(f"{slices.get('replay stream', 0)} slices on the replay stream for {passes} passes")
    counters = {k: v for k, v in (summary.get("counters") or {}).items() if k.split(" [")[0] == metric}
    if not counters:
        why.append(f"no counter track for {metric}: {sorted(summary.get('counters') or {})}")
    elif any(n != 2 * passes for n in counters.values()):
        why.append(f"counter samples {counters}, want {2 * passes} (start and end of each pass)")
    return why


def range_trace_checks(play_rc, play, verify_rc, summary, passes=TRACE_PASSES, streams=2) -> list:
    """`play RANGE --per-step --trace`: one whole-pass slice per pass, one slice per timed step
    per pass on the stream threads (at least `streams` of them), the restores apart."""
    why = _common(play_rc, verify_rc, summary, passes)
    if why and verify_rc != 0:
        return why
    slices = summary.get("slices") or {}
    if slices.get("range passes") != passes:
        why.append(f"{slices.get('range passes', 0)} range-pass slices for {passes} passes")
    timed = [s for s in ((play or {}).get("steps") or []) if s.get("median_ns") is not None]
    on_streams = sum(n for t, n in slices.items() if t.startswith("stream "))
    if not timed or on_streams != passes * len(timed):
        why.append(f"{on_streams} step slices on the stream threads, want {passes} x {len(timed)} timed steps")
    threads = [t for t in (summary.get("thread_names") or []) if t.startswith("stream ")]
    if len(threads) < streams:
        why.append(f"stream threads {threads}, want at least {streams}")
    return why


# `profile --trace` over the saxpy app's three launches.
PROFILE_DISPATCHES = 3
PROFILE_PASSES = 4


def profile_trace_checks(prof_rc, rows, verify_rc, summary, dispatches=PROFILE_DISPATCHES,
                         passes=PROFILE_PASSES, metric=TRACE_METRIC) -> list:
    """`profile -k K --all --passes N --metrics M --trace` (L2 flushed before each pass): per
    dispatch, pass 0 (the application's launch) on the application's stream thread and N-1
    passes on kreplay's; N-1 restores and N flushes on the restore thread; M as a counter
    track over every timed pass. Each row's timeline is its passes, lengths its durations."""
    why = []
    if prof_rc != 0:
        why.append(f"kreplay profile --trace exits {prof_rc}")
    prof = [r for r in rows or [] if not r.get("skipped")]
    if len(prof) != dispatches:
        why.append(f"{len(prof)} profiled rows, want {dispatches}")
    for r in prof:
        t = r.get("timeline") or {}
        got = [p.get("dur_ns") for p in t.get("passes") or []]
        if got != r.get("durations_ns"):
            why.append(f"launch {r.get('launch_index')}: timeline lengths {got} are not its durations "
                       f"{r.get('durations_ns')}")
        starts = [p.get("start_ns", 0) for p in t.get("passes") or []]
        if starts != sorted(starts) or len(set(starts)) != len(starts):
            why.append(f"launch {r.get('launch_index')}: pass starts {starts} not increasing")
    why += timeline_order_checks(prof)
    if verify_rc != 0 or not isinstance(summary, dict):
        why.append(f"kreplay verify-trace exits {verify_rc} (see its stderr for the defects)")
        return why
    slices = summary.get("slices") or {}
    app = {k: v for k, v in slices.items() if k.endswith("(application)")}
    if sum(app.values()) != dispatches:
        why.append(f"pass-0 slices on the application's stream {app}, want {dispatches}")
    own = slices.get("kreplay passes (its own stream)", 0)
    if own != dispatches * (passes - 1):
        why.append(f"{own} slices on kreplay's passes thread, want {dispatches * (passes - 1)}")
    names = summary.get("slice_names") or {}
    if names.get("restore", 0) != dispatches * (passes - 1):
        why.append(f"{names.get('restore', 0)} restore slices, want {dispatches * (passes - 1)}")
    if names.get("L2 flush", 0) != dispatches * passes:
        why.append(f"{names.get('L2 flush', 0)} L2 flush slices, want {dispatches * passes}")
    counters = {k: v for k, v in (summary.get("counters") or {}).items() if k.split(" [")[0] == metric}
    if list(counters.values()) != [2 * passes * dispatches]:
        why.append(f"counter samples {counters}, want {2 * passes * dispatches} for {metric}")
    return why


def timeline_order_checks(rows, tol_ns=1000) -> list:
    """The GPU's own order in each row's timeline (within `tol_ns`, cuEventElapsedTime's
    resolution and then some): a pass's restore ends before its flush starts, the flush ends
    before the pass starts; each pass starts after the previous one ended; each dispatch of a
    context starts after the previous dispatch's last pass ended."""
    why = []
    last_end = {}
    for r in sorted(rows or [], key=lambda r: r.get("launch_index", 0)):
        t = r.get("timeline") or {}
        key = (r.get("pid"), t.get("context"))
        at = last_end.get(key, 0)
        for p in t.get("passes") or []:
            spans = [s for s in (p.get("restore"), p.get("flush")) if s]
            spans.append((p.get("start_ns", 0), p.get("dur_ns", 0)))
            for start, dur in spans:
                if start + tol_ns < at:
                    why.append(f"launch {r.get('launch_index')} pass {p.get('pass')}: a span starts at "
                               f"{start} ns, before the previous one ended at {at} ns")
                at = max(at, start + dur)
        last_end[key] = at
    return why


def variant_trace_checks(rows, verify_rc, summary) -> list:
    """`profile --variant V --trace`: a valid trace with one "(variant)" slice per variant pass
    the rows report, and the original's passes beside them."""
    if verify_rc != 0 or not isinstance(summary, dict):
        return [f"kreplay verify-trace exits {verify_rc} (see its stderr for the defects)"]
    names = summary.get("slice_names") or {}
    variant = sum(n for k, n in names.items() if k.endswith("(variant)"))
    want = sum(len((r.get("variant") or {}).get("durations_ns") or []) for r in rows or [])
    why = []
    if want == 0 or variant != want:
        why.append(f"{variant} variant slices in the trace, the rows report {want} variant passes")
    original = sum(len(r.get("durations_ns") or []) for r in rows or [])
    timed = sum(n for k, n in names.items() if k not in ("restore", "L2 flush") and not k.endswith("(variant)"))
    if timed != original:
        why.append(f"{timed} original-pass slices in the trace, the rows report {original}")
    return why


def publish(traces, run_dir) -> list:
    """Copies the traces into the run folder's traces/ (and $KREPLAY_ARTIFACTS/traces, or
    $OUT/traces, when set) for Perfetto afterwards; returns where they went."""
    dests = [Path(run_dir) / "traces"]
    extra = os.environ.get("KREPLAY_ARTIFACTS") or os.environ.get("OUT")
    if extra:
        dests.append(Path(extra) / "traces")
    out = []
    for d in dests:
        d.mkdir(parents=True, exist_ok=True)
        for t in traces:
            if Path(t).exists():
                shutil.copy2(t, d / Path(t).name)
                out.append(str(d / Path(t).name))
    return out
