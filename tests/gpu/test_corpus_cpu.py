"""CPU self-tests of the corpus case's verdicts (krcorpus.py): each good input passes, each
fault fails."""

from __future__ import annotations

import copy

import krcorpus as K


def _cap(file, mangled, sha="ab" * 32, size=100):
    return {"file": file, "kernel": mangled.strip("_Z0123456789"), "mangled": mangled, "grid": [1, 1, 1],
            "block": [32, 1, 1], "launch_index": 1, "nvtx": None, "graph": False, "bytes_stored": size,
            "in_app_us": 3.5, "sha256": sha}


GOOD = {"version": 1, "device": {"name": "H200"}, "driver": "13.0", "host": "h", "command": ["python3", "a.py"],
        "captures": [_cap("1-a-1-7.krr", "_Z1av"), _cap("2-b-1-7.krr", "_Z1bv")], "left_out": []}
LISTED = [{"name": "_Z1av", "count": 3}, {"name": "_Z1bv", "count": 1}]
SUMS = {"1-a-1-7.krr": "ab" * 32, "2-b-1-7.krr": "ab" * 32}
PLAYS = {f: {"verify": {"matched": True}} for f in SUMS}


def test_a_complete_corpus_passes():
    assert K.corpus_checks(0, "sum 1\n", "sum 1\n", GOOD, LISTED, SUMS, PLAYS) == []


def test_each_fault_of_a_corpus_fails():
    faults = []
    m = copy.deepcopy(GOOD)
    m["captures"].pop()
    faults.append(("a kernel missing", (0, "x", "x", m, LISTED, SUMS, PLAYS)))
    m = copy.deepcopy(GOOD)
    m["captures"].append(_cap("3-a-2-7.krr", "_Z1av"))
    faults.append(("a kernel twice", (0, "x", "x", m, LISTED, {**SUMS, "3-a-2-7.krr": "ab" * 32}, PLAYS)))
    faults.append(("record failed", (3, "x", "x", GOOD, LISTED, SUMS, PLAYS)))
    faults.append(("output changed", (0, "x", "y", GOOD, LISTED, SUMS, PLAYS)))
    faults.append(("a file gone", (0, "x", "x", GOOD, LISTED, {"1-a-1-7.krr": "ab" * 32}, PLAYS)))
    faults.append(("a wrong sum", (0, "x", "x", GOOD, LISTED, {**SUMS, "2-b-1-7.krr": "cd" * 32}, PLAYS)))
    faults.append(("a mismatch", (0, "x", "x", GOOD, LISTED, SUMS, {**PLAYS, "2-b-1-7.krr": {"verify": {"matched": False}}})))
    m = copy.deepcopy(GOOD)
    del m["captures"][0]["sha256"]
    faults.append(("a field missing", (0, "x", "x", m, LISTED, SUMS, PLAYS)))
    m = copy.deepcopy(GOOD)
    m["left_out"] = [{"kernel": "c", "why": "?"}]
    faults.append(("left out unbounded", (0, "x", "x", m, LISTED, SUMS, PLAYS)))
    faults.append(("no manifest", (0, "x", "x", None, LISTED, SUMS, PLAYS)))
    faults.append(("nothing listed", (0, "x", "x", GOOD, [], SUMS, PLAYS)))
    for what, args in faults:
        assert K.corpus_checks(*args), what


def test_a_bounded_corpus_passes_and_its_faults_fail():
    m = copy.deepcopy(GOOD)
    m["left_out"] = [{"kernel": "c", "mangled": "_Z1cv", "why": "its capture would pass --max-bytes"}]
    assert K.bounded_checks(0, "x", "x", m, 200, SUMS) == []
    assert K.bounded_checks(0, "x", "x", m, 199, SUMS), "over the bound"
    assert K.bounded_checks(0, "x", "x", GOOD, 200, SUMS), "nothing left out"
    assert K.bounded_checks(0, "x", "y", m, 200, SUMS), "output changed"
    assert K.bounded_checks(0, "x", "x", m, 200, {}), "files gone"
    empty = copy.deepcopy(m)
    empty["captures"] = []
    assert K.bounded_checks(0, "x", "x", empty, 200, SUMS), "nothing kept"
    no_why = copy.deepcopy(m)
    no_why["left_out"][0]["why"] = ""
    assert K.bounded_checks(0, "x", "x", no_why, 200, SUMS), "no reason"


def test_the_bound_keeps_the_largest_capture_and_not_all(tmp_path):
    assert K.max_bytes_for([10, 10, 10, 10]) == 12
    assert K.max_bytes_for([100, 10, 10]) is None, "the largest alone is half the corpus"
    assert K.max_bytes_for([10, 10]) is None
    f = tmp_path / "abc"
    f.write_bytes(b"abc")
    assert K.sha256_of(f) == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
    assert K.sha256_of(tmp_path / "none") is None


def _spec_manifest():
    caps = []
    for g, grid in enumerate((256, 512, 1024)):
        for e in (1, 2):
            c = _cap(f"{g + 1}-row_softmax-{e}-9.krr", "row_softmax")
            c["grid"] = [grid, 1, 1]
            caps.append(c)
    return {**copy.deepcopy(GOOD), "captures": caps}


def test_specializations_each_with_its_own_module_pass():
    m = _spec_manifest()
    modules = {c["file"]: [10256 + 1000 * (c["grid"][0] // 512)] for c in m["captures"]}
    plays = {c["file"]: {"verify": {"matched": True}} for c in m["captures"]}
    assert K.specialization_checks(0, "t 1", "t 1", m, modules, plays, 3, 2) == []


def test_a_capture_with_another_specializations_module_fails():
    m = _spec_manifest()
    modules = {c["file"]: [10256 + 1000 * (c["grid"][0] // 512)] for c in m["captures"]}
    plays = {c["file"]: {"verify": {"matched": True}} for c in m["captures"]}
    # What the recorder did before: the second execution of the first grid kept the latest module.
    modules["1-row_softmax-2-9.krr"] = [10256 + 2000]
    assert K.specialization_checks(0, "t 1", "t 1", m, modules, plays, 3, 2)
    modules = {c["file"]: [13072] for c in m["captures"]}
    assert K.specialization_checks(0, "t 1", "t 1", m, modules, plays, 3, 2)
    bad_play = {**plays, "1-row_softmax-2-9.krr": {"verify": {"matched": False}}}
    ok_modules = {c["file"]: [10256 + 1000 * (c["grid"][0] // 512)] for c in m["captures"]}
    assert K.specialization_checks(0, "t 1", "t 1", m, ok_modules, bad_play, 3, 2)
    assert K.specialization_checks(0, "t 1", "t 2", m, ok_modules, plays, 3, 2)
