"""krtrace's verdicts on the CPU, over summaries as `kreplay verify-trace` prints them: a good
trace passes, and each way a real replay's trace could be wrong fails with its reason."""

from __future__ import annotations

import copy

import krtrace as T


def play_summary(passes=3):
    c = f"{T.TRACE_METRIC} [byte]"
    return {"slices": {"replay stream": passes, "restore": passes - 1},
            "slice_names": {"saxpy": passes, "restore": passes - 1},
            "counters": {c: 2 * passes}, "thread_names": ["restore", "replay stream"]}


def range_summary(passes=3, timed=4):
    return {"slices": {"range passes": passes, "restore": passes - 1, "stream 0x10": passes * 3,
                       "stream 0x20": passes * (timed - 3)},
            "slice_names": {"restore": passes - 1, "pass 0": 1},
            "counters": {}, "thread_names": ["restore", "range passes", "stream 0x10", "stream 0x20"]}


def range_play(timed=4, untimed=2):
    return {"steps": [{"median_ns": 1000}] * timed + [{"median_ns": None}] * untimed}


def test_good_traces_pass():
    assert T.play_trace_checks(0, 0, play_summary()) == []
    assert T.range_trace_checks(0, range_play(), 0, range_summary()) == []


def test_a_failed_play_or_check_fails():
    assert any("play --trace exits 1" in w for w in T.play_trace_checks(1, 0, play_summary()))
    assert any("verify-trace exits 1" in w for w in T.play_trace_checks(0, 1, None))
    assert any("verify-trace exits 1" in w for w in T.range_trace_checks(0, range_play(), 1, None))


def test_a_missing_kernel_slice_fails():
    s = play_summary()
    s["slices"]["replay stream"] = 2
    assert any("slices on the replay stream" in w for w in T.play_trace_checks(0, 0, s))


def test_restores_must_be_one_a_pass_after_the_first():
    s = play_summary()
    s["slice_names"]["restore"] = 4
    assert any("restore slices" in w for w in T.play_trace_checks(0, 0, s))
    s = play_summary()
    s["thread_names"] = ["replay stream"]
    assert any("no restore thread" in w for w in T.play_trace_checks(0, 0, s))


def test_the_counter_track_must_be_there_with_two_samples_a_pass():
    s = play_summary()
    s["counters"] = {}
    assert any("no counter track" in w for w in T.play_trace_checks(0, 0, s))
    s = play_summary()
    s["counters"] = {f"{T.TRACE_METRIC} [byte]": 3}
    assert any("counter samples" in w for w in T.play_trace_checks(0, 0, s))


def test_a_range_needs_its_pass_slices_step_slices_and_streams():
    s = range_summary()
    s["slices"]["range passes"] = 2
    assert any("range-pass slices" in w for w in T.range_trace_checks(0, range_play(), 0, s))
    s = range_summary()
    s["slices"]["stream 0x20"] = 0
    assert any("step slices" in w for w in T.range_trace_checks(0, range_play(), 0, s))
    s = copy.deepcopy(range_summary())
    s["thread_names"] = ["restore", "range passes", "stream 0x10"]
    assert any("stream threads" in w for w in T.range_trace_checks(0, range_play(), 0, s))
    # No timed step at all (--per-step lost): fails although the counts agree (0 = 3 x 0).
    s = range_summary()
    s["slices"] = {"range passes": 3, "restore": 2}
    assert any("step slices" in w for w in T.range_trace_checks(0, range_play(timed=0), 0, s))


def test_traces_are_published_to_the_run_folder_and_the_artifacts(tmp_path, monkeypatch):
    t = tmp_path / "a.trace.json"
    t.write_text("{}")
    monkeypatch.setenv("KREPLAY_ARTIFACTS", str(tmp_path / "art"))
    out = T.publish([t, tmp_path / "missing.json"], tmp_path / "run")
    assert out == [str(tmp_path / "run" / "traces" / "a.trace.json"), str(tmp_path / "art" / "traces" / "a.trace.json")]
    assert (tmp_path / "art" / "traces" / "a.trace.json").read_text() == "{}"


def profile_rows(dispatches=T.PROFILE_DISPATCHES, passes=T.PROFILE_PASSES):
    rows = []
    for d in range(dispatches):
        durations = [4000 + p for p in range(passes)]
        rows.append({"launch_index": d + 1, "durations_ns": durations,
                     "timeline": {"passes": [{"pass": p, "start_ns": 1_000_000 * d + 10_000 * p, "dur_ns": n}
                                             for p, n in enumerate(durations)]}})
    return rows


def profile_summary(dispatches=T.PROFILE_DISPATCHES, passes=T.PROFILE_PASSES):
    c = f"{T.TRACE_METRIC} [byte]"
    return {"slices": {"stream 0 (legacy default) (application)": dispatches,
                       "kreplay passes (its own stream)": dispatches * (passes - 1),
                       "restore": dispatches * (2 * passes - 1)},
            "slice_names": {"saxpy": dispatches * passes, "restore": dispatches * (passes - 1),
                            "L2 flush": dispatches * passes},
            "counters": {c: 2 * passes * dispatches},
            "thread_names": ["restore", "kreplay passes (its own stream)",
                             "stream 0 (legacy default) (application)"]}


def test_a_good_profile_trace_passes():
    assert T.profile_trace_checks(0, profile_rows(), 0, profile_summary()) == []


def test_a_profile_trace_missing_its_parts_fails():
    s = profile_summary()
    s["slices"]["stream 0 (legacy default) (application)"] -= 1
    assert any("application's stream" in w for w in T.profile_trace_checks(0, profile_rows(), 0, s))
    s = profile_summary()
    s["slices"]["kreplay passes (its own stream)"] += 1
    assert any("kreplay's passes" in w for w in T.profile_trace_checks(0, profile_rows(), 0, s))
    s = profile_summary()
    s["slice_names"]["L2 flush"] = 0
    assert any("L2 flush" in w for w in T.profile_trace_checks(0, profile_rows(), 0, s))
    s = profile_summary()
    s["counters"] = {}
    assert any("counter samples" in w for w in T.profile_trace_checks(0, profile_rows(), 0, s))
    assert any("verify-trace exits 1" in w for w in T.profile_trace_checks(0, profile_rows(), 1, None))
    assert any("exits 2" in w for w in T.profile_trace_checks(2, profile_rows(), 0, profile_summary()))


def test_spans_out_of_the_gpus_order_fail():
    rows = profile_rows()
    for r in rows:
        for p in r["timeline"]["passes"]:
            p["start_ns"] += 5000
            p["flush"] = [p["start_ns"] - 3000, 2000]
    assert T.timeline_order_checks(rows) == []
    late = copy.deepcopy(rows)
    late[0]["timeline"]["passes"][1]["flush"] = [late[0]["timeline"]["passes"][1]["start_ns"] - 500, 2000]
    assert any("before the previous one ended" in w for w in T.timeline_order_checks(late))
    back = copy.deepcopy(rows)
    back[2]["timeline"]["passes"][0]["start_ns"] = 1_000_000 + 20_000
    assert any("launch 3 pass 0" in w for w in T.timeline_order_checks(back))


def test_a_timeline_that_is_not_the_rows_passes_fails():
    rows = profile_rows()
    rows[1]["timeline"]["passes"][2]["dur_ns"] += 1
    assert any("not its durations" in w for w in T.profile_trace_checks(0, rows, 0, profile_summary()))
    rows = profile_rows()
    rows[0]["timeline"]["passes"][3]["start_ns"] = 0
    assert any("not increasing" in w for w in T.profile_trace_checks(0, rows, 0, profile_summary()))
    assert any("profiled rows" in w for w in T.profile_trace_checks(0, profile_rows()[:2], 0, profile_summary()))


def variant_rows():
    return [{"durations_ns": [5, 5, 5], "variant": {"durations_ns": [9, 9, 9]}}] * 2


def test_a_variant_trace_counts_both_kernels():
    good = {"slice_names": {"scale_add": 6, "scale_add (variant)": 6, "restore": 10, "L2 flush": 12}}
    assert T.variant_trace_checks(variant_rows(), 0, good) == []
    bad = copy.deepcopy(good)
    bad["slice_names"]["scale_add (variant)"] = 5
    assert any("variant slices" in w for w in T.variant_trace_checks(variant_rows(), 0, bad))
    bad = copy.deepcopy(good)
    bad["slice_names"]["scale_add"] = 12
    assert any("original-pass slices" in w for w in T.variant_trace_checks(variant_rows(), 0, bad))
    assert T.variant_trace_checks(variant_rows(), 1, None)
