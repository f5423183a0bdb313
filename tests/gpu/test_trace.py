"""`kreplay play --trace` and `profile --trace` on real replays (issue 40): a 3-pass `play
--metrics` of the cuda-saxpy capture, a `--per-step` replay of the range-streams
profiler-range capture and `profile --metrics` of the saxpy app's three launches,
each trace checked by `kreplay verify-trace` (the Rust checker: fields, monotonic times per
track, no overlapping slices, named threads) and by krtrace's verdicts (a slice per kernel or
step per pass, the restore thread, the counter track), then copied to the run folder's
traces/ (and $KREPLAY_ARTIFACTS or $OUT) for Perfetto. With KREPLAY_TRACE_PROCESSOR naming a
trace_processor_shell, scripts/perfetto-check.py loads them in Perfetto's trace processor too."""

from __future__ import annotations

import json
import os
import sys

import pytest

import cases as C
import krsuite as S
import krtrace as T
from prepared import ROOT

pytestmark = pytest.mark.gpu


def _summary(cmd):
    return S.last_json_line(cmd.out)


def _perfetto(case, traces) -> list:
    shell = os.environ.get("KREPLAY_TRACE_PROCESSOR")
    if not shell:
        case.notes.append("perfetto-check skipped: KREPLAY_TRACE_PROCESSOR names no trace_processor_shell")
        return []
    p = case.run([sys.executable, ROOT / "scripts" / "perfetto-check.py", "--shell", shell, *traces],
                 name="perfetto-check", timeout=300)
    return [] if p.rc == 0 else [f"scripts/perfetto-check.py exits {p.rc}"]


def _done(row, why, kernel, play, published):
    row.update(kernel=kernel, median_us=((play or {}).get("median_ns") or 0) / 1e3, why="; ".join(why),
               traces=", ".join(published))
    assert not why, "; ".join(why)


@C.inline("trace-play-metrics")
def test_trace_play_metrics(captures, case, row, kr, run_dir):
    """`play cuda-saxpy.krr --passes 3 --metrics dram__bytes_read.sum --trace t.json`."""
    src = case.capture(captures.krr("cuda-saxpy"))
    t = case.path("play-metrics.trace.json")
    play = case.run([kr, "play", src, "--passes", str(T.TRACE_PASSES), "--metrics", T.TRACE_METRIC, "--json",
                     "--trace", t, "--force"], name="play", timeout=300)
    check = case.run([kr, "verify-trace", t], name="verify-trace")
    why = T.play_trace_checks(play.rc, check.rc, _summary(check))
    why += _perfetto(case, [t])
    _done(row, why, "saxpy", S.load_json(play.out_path), T.publish([t], run_dir))


@C.inline("trace-range-per-step")
def test_trace_range_per_step(captures, case, row, kr, run_dir):
    """`play RANGE.krr --passes 3 --per-step --trace r.json` of the range-streams capture."""
    r = captures.range_capture("range-streams-profiler")
    case.notes.extend(r.get("log", []))
    if not r.get("has_capture"):
        pytest.fail("the range-streams-profiler capture was not recorded", pytrace=False)
    w = case.capture(r["krr"])
    t = case.path("range-per-step.trace.json")
    play = case.run([kr, "play", w, "--passes", str(T.TRACE_PASSES), "--per-step", "--json", "--trace", t,
                     "--force"], name="play", timeout=300)
    check = case.run([kr, "verify-trace", t], name="verify-trace")
    pj = S.load_json(play.out_path)
    why = T.range_trace_checks(play.rc, pj, check.rc, _summary(check))
    why += _perfetto(case, [t])
    _done(row, why, "range-streams profiler-range", pj, T.publish([t], run_dir))


@C.inline("trace-profile")
def test_trace_profile(case, row, kr, app, run_dir):
    """`profile -k saxpy --all --passes 4 --metrics dram__bytes_read.sum --trace p.json` of the
    saxpy app: the application's output as in a plain run, the trace checked."""
    argv = app((C.K, "saxpy", str(T.PROFILE_DISPATCHES)))
    plain = case.run(argv, name="plain", timeout=300)
    t, report = case.path("profile.trace.json"), case.path("prof.json")
    prof = case.run([kr, "profile", "-k", "saxpy", "--all", "--passes", str(T.PROFILE_PASSES), "--metrics",
                     T.TRACE_METRIC, "-o", report, "--trace", t, "--force", "--"] + argv, name="prof", timeout=600)
    check = case.run([kr, "verify-trace", t], name="verify-trace")
    rows = [json.loads(l) for l in S.read(report).splitlines() if l.strip()] if os.path.exists(report) else []
    why = T.profile_trace_checks(prof.rc, rows, check.rc, _summary(check))
    if plain.out != prof.out or not plain.out:
        why.append("the application's output differs from a plain run")
    why += _perfetto(case, [t])
    first = next((r for r in rows if not r.get("skipped")), {})
    _done(row, why, "saxpy", first, T.publish([t], run_dir))
