"""The touched-pages verdicts (krtouched) on made-up reports: each test names the broken
capture or replay it must catch."""

import krtouched as T

MIB = 1 << 20
POOL = 256 * MIB


def info(pool_present=655 * 4096, extents=True):
    pool = {"id": 0, "size": POOL, "present_bytes": pool_present,
            "extents": {"page_size": 4096, "present": [[0, pool_present]]} if extents else None}
    return {"regions": [pool, {"id": 1, "size": 2620, "present_bytes": 2620, "extents": None},
                        {"id": 2, "size": 655 * 4096, "present_bytes": 655 * 4096, "extents": None}]}


def play(matched=True, mismatched=0, deterministic=True, passes=8, absent=POOL - 655 * 4096, regions=(2,),
         found=(0xFF, 0xFF, 0xFF, 0x7F)):
    first = [{"region_id": r, "offset": i, "found": f} for r in regions for i, f in enumerate(found)]
    return {"passes": passes, "absent_bytes": absent,
            "verify": {"matched": matched, "mismatched_bytes": mismatched, "deterministic": deterministic,
                       "first_mismatches": first if mismatched else []}}


def test_the_pool_is_the_one_region_of_its_size():
    assert T.pool_region(info(), POOL) == 0
    assert T.pool_region(info(), 123) is None
    two = info()
    two["regions"][1]["size"] = POOL
    assert T.pool_region(two, POOL) is None, "ambiguous"


def test_extents_of_the_pool_only():
    assert T.extents_checks(info(), 0, 655, POOL) == []
    # Catches: the crafted capture holding the whole pool, or the wrong number of pages.
    assert T.extents_checks(info(extents=False, pool_present=POOL), 0, 655, POOL)
    assert T.extents_checks(info(pool_present=654 * 4096), 0, 655, POOL)
    # Catches: another region captured by touched pages.
    bad = info()
    bad["regions"][2]["present_bytes"] = 4096
    assert any("region 2" in w for w in T.extents_checks(bad, 0, 655, POOL))
    assert T.extents_checks({}, 0, 655, POOL)


def test_a_faithful_replay_is_bit_exact_deterministic_and_says_what_was_absent():
    assert T.replay_checks(0, play(), 8, POOL - 655 * 4096) == []
    assert T.replay_checks(1, play(), 8, POOL - 655 * 4096)
    assert T.replay_checks(0, play(matched=False, mismatched=4), 8, POOL - 655 * 4096)
    assert T.replay_checks(0, play(deterministic=False), 8, POOL - 655 * 4096)
    assert T.replay_checks(0, play(passes=1), 8, POOL - 655 * 4096)
    # Catches: the absent bytes not reported (or the report of a whole capture).
    assert T.replay_checks(0, play(absent=0), 8, POOL - 655 * 4096)


def test_a_missing_page_must_show_in_the_output():
    assert T.missing_page_checks(1, play(matched=False, mismatched=4096), 2) == []
    # Catches: verification that skips the difference, a zero exit, a mismatch in the input.
    assert T.missing_page_checks(1, play(), 2)
    assert T.missing_page_checks(0, play(matched=False, mismatched=4096), 2)
    assert T.missing_page_checks(1, play(matched=False, mismatched=4096, regions=(0,)), 2)
    # Catches: no output region found (the check skipped), and an output computed on zeros
    # (1.0 = 00 00 80 3f) rather than on the fill.
    assert T.missing_page_checks(1, play(matched=False, mismatched=4096), None)
    assert T.missing_page_checks(1, play(matched=False, mismatched=4096, found=(0, 0, 0x80, 0x3F)), 2)


def test_size_is_bounded_by_the_bytes_touched():
    assert T.size_checks(6 * MIB, 260 * MIB, 5 * MIB, 64 << 10) == []
    assert T.size_checks(11 * MIB, 260 * MIB, 5 * MIB, 64 << 10)
    assert T.size_checks(260 * MIB, 260 * MIB, 200 * MIB, 64 << 10)


def test_the_instrumented_runs_cost_is_the_touched_phase_of_the_first_capture():
    j = {"captures": [{"stall_phases": [{"phase": "walk", "ms": 1.0}, {"phase": "touched", "ms": 2.5}]}]}
    assert T.touched_phase_ms(j) == 2.5
    assert T.touched_phase_ms({"captures": [{"stall_phases": [{"phase": "walk", "ms": 1.0}]}]}) is None
    assert T.touched_phase_ms({}) is None


def test_a_suite_row_fails_when_touched_loses_what_whole_replays():
    whole = {"rc": 0, "out": ["ok"], "bytes": 1000, "matched": True}
    good = {"rc": 0, "out": ["ok"], "bytes": 100, "matched": True}
    assert T.suite_row_checks("x", whole, good) == []
    assert T.suite_row_checks("x", whole, {**good, "matched": False, "said": ["fell back"]})
    assert T.suite_row_checks("x", whole, {**good, "out": ["changed"]})
    assert T.suite_row_checks("x", whole, {**good, "bytes": 10 ** 6})
    # What does not replay whole is not asked of touched.
    assert T.suite_row_checks("x", {**whole, "matched": False}, {**good, "matched": False}) == []


def test_the_recorders_notes_are_its_annotations():
    info = {"annotations": [["recorder", "--memory touched: the dispatch touched 3 of 9"], ["other", "x"]]}
    assert T.recorder_notes(info) == ["--memory touched: the dispatch touched 3 of 9"]
    assert T.recorder_notes({}) == [] and T.recorder_notes(None) == []


def test_a_touched_capture_may_exceed_the_whole_by_its_note_only():
    assert T.no_bigger(277991, 277784)
    assert T.no_bigger(100, 200)
    assert not T.no_bigger(277784 + 5000, 277784)
