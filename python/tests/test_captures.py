"""The Python package on the real H200 captures in testdata (no GPU needed): captures open as
objects, regions are NumPy arrays over decoded memory (no copy), the recorded output is the
kernel's math, and what needs a GPU or the kreplay command says so."""

import inspect
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

import kreplay

ROOT = Path(__file__).resolve().parents[2]
CAPTURES = ROOT / "testdata" / "captures"
ALL = sorted(CAPTURES.glob("*.krr"))


def kreplay_bin():
    for p in (os.environ.get("KREPLAY_BIN"), ROOT / "target" / "debug" / "kreplay", ROOT / "target" / "release" / "kreplay"):
        if p and Path(p).is_file():
            return str(p)
    return shutil.which("kreplay")


def test_every_capture_opens_with_its_regions():
    assert len(ALL) >= 10
    for path in ALL:
        cap = kreplay.open(path)
        assert cap.kernel["name"], path
        assert len(cap.launch["grid"]) == 3
        assert cap.reference == "recorded"
        for r in cap.regions:
            a = r.array(np.uint8)
            assert a.nbytes == r.size, (path, r.id)
            assert not a.flags.writeable


def test_saxpy_output_is_the_kernels_math():
    cap = kreplay.open(CAPTURES / "cuda-saxpy.krr")
    n = int(cap.params[0]["value"])
    a = float(cap.params[1]["value"])
    x = cap.region(cap.params[2]["region"]).array(np.float32)[:n]
    y = cap.region(cap.params[3]["region"])
    assert y.written
    before, after = y.array("float32")[:n], y.array("float32", post=True)[:n]
    assert not np.array_equal(before, after)
    np.testing.assert_allclose(after, a * x + before, rtol=1e-6, atol=1e-6)
    # The input is not written: its post state is its pre state.
    xr = cap.region(cap.params[2]["region"])
    assert np.array_equal(xr.array(np.float32, post=True), xr.array(np.float32))


def test_any_dtype_and_shape_views_the_same_bytes():
    cap = kreplay.open(CAPTURES / "cuda-saxpy.krr")
    r = cap.regions[1]
    f = r.array("float32")
    assert np.array_equal(r.array(np.uint8).view(np.float32), f)
    assert r.array("float64").nbytes == r.size
    assert r.array("float32", shape=(-1, 1024)).shape == (r.size // 4096, 1024)
    with pytest.raises(ValueError):
        f[0] = 1.0
    mv = r.bytes()
    assert mv.readonly and len(mv) == r.size


def test_regions_are_found_by_address_and_globals_by_name():
    cap = kreplay.open(CAPTURES / "cuda-globals.krr")
    globals_ = {r.global_name: r for r in cap.regions if r.global_name}
    assert globals_, cap.regions
    for r in cap.regions:
        if r.address:
            assert cap.region(r.address + r.size - 1).id == r.id
    with pytest.raises(KeyError):
        cap.region(0xDEAD)


def test_pointer_words_read_as_addresses_of_regions():
    # gather_sum(Batch): the argument points at a table of 5 pointers, each to a buffer
    # the recorder followed and captured.
    cap = kreplay.open(CAPTURES / "cuda-pointers.krr")
    assert cap.info["pointer_slots"] == 5
    table = next(r for r in cap.regions if r.size == 40)
    targets = {cap.region(int(p)).id for p in table.array("uint64")}
    assert len(targets) == 5 and table.id not in targets


def test_damaged_and_missing_files_raise_clear_errors(tmp_path):
    with pytest.raises(OSError):
        kreplay.open(tmp_path / "missing.krr")
    bad = tmp_path / "bad.krr"
    data = bytearray((CAPTURES / "cuda-saxpy.krr").read_bytes())
    bad.write_bytes(bytes(data[: len(data) // 2]))
    with pytest.raises(ValueError, match="incomplete|truncated|offset"):
        kreplay.open(bad)


def test_a_redacted_capture_has_no_output_to_read(tmp_path):
    b = kreplay_bin()
    if b is None:
        pytest.skip("the kreplay command is not built (cargo build) and not on PATH")
    out = tmp_path / "red.krr"
    subprocess.run([b, "pack", str(CAPTURES / "cuda-saxpy.krr"), "-o", str(out), "--redact", "--level", "3"], check=True, capture_output=True)
    cap = kreplay.open(out)
    assert cap.reference == "redacted"
    orig = kreplay.open(CAPTURES / "cuda-saxpy.krr")
    assert not np.array_equal(cap.regions[0].array(np.uint8), orig.regions[0].array(np.uint8))
    assert np.array_equal(cap.regions[2].array(np.uint8), orig.regions[2].array(np.uint8)), "module globals kept"
    with pytest.raises(ValueError, match="no recorded output"):
        cap.regions[1].array(post=True)


def test_play_without_a_gpu_says_why():
    if Path("/dev/nvidiactl").exists():
        pytest.skip("a GPU is present: play is proven by the GPU suite (python-package case)")
    with pytest.raises(RuntimeError, match="(?i)cuda|gpu|driver"):
        kreplay.play(CAPTURES / "cuda-saxpy.krr", passes=2)


def test_record_says_what_is_missing(monkeypatch, kreplay_record):
    b = kreplay_bin()
    monkeypatch.setenv("KREPLAY_BIN", "")
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(kreplay.RecordError, match="KREPLAY_BIN"):
        kreplay.record(["true"], kernel="saxpy")
    if b is None:
        pytest.skip("the kreplay command is not built")
    monkeypatch.setenv("KREPLAY_BIN", b)
    # A command that never initialises CUDA captures nothing: the fixture raises, saying so.
    with pytest.raises(kreplay.RecordError) as e:
        kreplay_record(["/bin/true"], kernel="saxpy")
    assert "kreplay record -k saxpy" in str(e.value)


def _two_captures(tmp_path):
    """`a.krr` (saxpy) and `b.krr` (another capture whose region 1 holds other bytes)."""
    a = tmp_path / "a.krr"
    shutil.copyfile(CAPTURES / "cuda-saxpy.krr", a)
    saxpy = kreplay.open(a)
    for other in ALL:
        o = kreplay.open(other)
        if len(o.regions) > 1 and o.regions[1].size != saxpy.regions[1].size:
            b = tmp_path / "b.krr"
            shutil.copyfile(other, b)
            return a, b
    pytest.fail("no second capture with a region 1 of another size")


def test_a_handle_reads_its_own_file_after_the_name_is_replaced_by_rename(tmp_path):
    a, b = _two_captures(tmp_path)
    cap = kreplay.open(a)
    before = np.array(cap.regions[1].array(np.uint8))
    other = np.array(kreplay.open(b).regions[1].array(np.uint8))
    os.replace(b, a)  # a new file under the old name (what `kreplay pack -o a.krr --force` does)
    after = cap.regions[1].array(np.uint8)
    assert after.nbytes == cap.regions[1].size
    assert np.array_equal(after, before), "the handle reads the file it was opened on"
    assert not np.array_equal(np.resize(after, other.shape), other)
    assert cap.regions[1].bytes().nbytes == cap.regions[1].size
    # A fresh open reads the new file.
    assert kreplay.open(a).regions[1].size == other.nbytes


def test_a_file_written_over_in_place_raises_instead_of_returning_other_bytes(tmp_path):
    a, b = _two_captures(tmp_path)
    cap = kreplay.open(a)
    kept = cap.regions[1].array(np.uint8)  # decoded before: stays as it was
    copy = np.array(kept)
    shutil.copyfile(b, a)  # the same file (inode), other bytes: `cp b.krr a.krr`
    with pytest.raises(kreplay.CaptureChanged, match="written over since it was opened"):
        cap.regions[1].array(np.uint8)
    with pytest.raises(OSError):
        cap.regions[0].bytes(post=True)
    assert np.array_equal(kept, copy)
    # Opened again, it is the new capture.
    assert kreplay.open(a).regions[1].size == kreplay.open(b).regions[1].size


def test_record_with_count_needs_a_match_index_in_the_name(tmp_path):
    with pytest.raises(kreplay.RecordError, match="%n") as e:
        kreplay.record(["sh", "-c", "touch ran"], kernel="saxpy", count=2, cwd=tmp_path)
    assert "capture-%n.krr" in str(e.value)
    assert not (tmp_path / "ran").exists(), "refused before the command ran"


def cli_json(*args):
    """What `kreplay ARGS` prints on stdout, as JSON (the binary from KREPLAY_BIN, as
    scripts/test.sh sets it)."""
    b = kreplay_bin()
    assert b, "no kreplay binary: set KREPLAY_BIN (scripts/test.sh does)"
    r = subprocess.run([b, *map(str, args)], capture_output=True, text=True, check=True)
    return json.loads(r.stdout)


def test_info_is_what_kreplay_info_json_prints():
    """Python's `info` and `kreplay info --json` are one function's output, field for field:
    one capture at a time (an object) and all at once (a list)."""
    for path in ALL:
        assert kreplay.open(str(path)).info == cli_json("info", "--json", path), path
    assert [kreplay.open(str(p)).info for p in ALL] == cli_json("info", "--json", *ALL)


def cli_play_defaults(help_text: str) -> dict:
    """`kreplay play`'s defaults from its --help, by Python keyword: an option with a value
    shows `[default: N]`; a plain flag is off; an option without a default is unset."""
    blocks = {}
    name = None
    for line in help_text.splitlines():
        m = re.match(r"^\s+(?:-\w, )?--([\w-]+)( <[^>]+>)?\s*$", line)
        if m:
            name = m.group(1)
            blocks[name] = {"takes_value": bool(m.group(2)), "default": None}
            continue
        d = re.search(r"\[default: ([^\]]*)\]", line)
        if d and name:
            blocks[name]["default"] = d.group(1)

    def value(flag):
        b = blocks[flag]
        if not b["takes_value"]:
            return False
        return None if b["default"] is None else int(b["default"])

    return {
        "passes": value("passes"),
        "verify": value("verify"),
        "metrics": [] if value("metrics") is None else value("metrics"),
        "warmup": value("warmup"),
        "device": value("device"),
        "relocate": value("relocate"),
        "ptx": value("ptx"),
        "flush_cache": value("cache"),
    }


def test_the_help_parser_reads_values_flags_and_unset_options():
    text = """Options:
      --passes <PASSES>
          Timed passes

          [default: 1]

      --verify
          Compare
  -q, --quiet
          Quiet
      --cache <CACHE>
          L2 handling
      --metrics <METRIC,...>
          Counters
      --warmup <WARMUP>
          [default: 0]
      --device <DEVICE>
          [default: 2]
      --relocate
          Move
      --ptx
          JIT
"""
    assert cli_play_defaults(text) == {"passes": 1, "verify": False, "metrics": [], "warmup": 0, "device": 2,
                                       "relocate": False, "ptx": False, "flush_cache": None}


def test_play_has_the_defaults_of_the_player_and_of_kreplay_play():
    """One set of defaults (the player's PlayOptions::default()): Python's keywords, the
    native layer's, and the CLI's flags."""
    sig = inspect.signature(kreplay.play).parameters
    python = {k: (list(p.default) if k == "metrics" else p.default) for k, p in sig.items() if k != "path"}
    native = kreplay._native.play_defaults()
    assert python == native
    filled = kreplay._play_args()
    assert filled == native, "Capture.play fills in other defaults than kreplay.play"
    b = kreplay_bin()
    assert b, "no kreplay binary: set KREPLAY_BIN (scripts/test.sh does)"
    help_text = subprocess.run([b, "play", "--help"], capture_output=True, text=True, check=True).stdout
    assert cli_play_defaults(help_text) == native


# A range capture: cuda-saxpy's dispatch as three steps, the second with grid (7,1,1) and an
# in-app duration of 1500 ns (tools/tests/range_cli.rs builds it with the format crate's
# writer and checks this file is those bytes; KREPLAY_BLESS=1 rewrites it).
RANGE = ROOT / "testdata" / "golden" / "range-saxpy.krr"
# A 1.3 range of nine steps on two streams, beginning with a copy (format/tests/range_golden.rs).
RANGE_OPS = ROOT / "testdata" / "golden" / "range-ops.krr"


def step_as_json(s) -> dict:
    """A `Step` back as its entry of `kreplay info --json`'s `steps`."""
    kernel = None if s.name is None else {"name": s.name, "mangled": s.mangled}
    return {
        "index": s.index,
        "kind": s.kind,
        "kernel": kernel,
        "grid": None if s.grid is None else list(s.grid),
        "block": None if s.block is None else list(s.block),
        "bytes": s.bytes,
        "event": s.event,
        "stream": s.stream,
        "original_ns": s.original_ns,
    }


def test_a_range_captures_steps_are_kreplay_info_jsons():
    cap = kreplay.open(RANGE)
    assert cap.is_range
    cli = cli_json("info", "--json", RANGE)["steps"]
    assert [s.info for s in cap.steps] == cli
    assert [step_as_json(s) for s in cap.steps] == cli
    assert [s.index for s in cap.steps] == [0, 1, 2]
    second = cap.steps[1]
    assert second.kind == "kernel" and second.is_kernel
    assert second.grid == (7, 1, 1) and second.block == (256, 1, 1)
    assert second.original_ns == 1500
    assert second.mangled == "_Z5saxpyifPKfPf" and second.name.startswith("saxpy(")
    assert "steps=3" in repr(cap)


def test_a_range_of_ops_lists_every_kind_of_step_and_the_range():
    cap = kreplay.open(RANGE_OPS)
    info = cli_json("info", "--json", RANGE_OPS)
    assert [step_as_json(s) for s in cap.steps] == info["steps"]
    assert [s.kind for s in cap.steps] == [
        "copy-htod", "kernel", "event-record", "event-wait", "fill", "copy-dtod", "kernel", "copy-dtoh", "host-wait",
    ]
    copy, fill, record, wait = cap.steps[0], cap.steps[4], cap.steps[2], cap.steps[3]
    assert (copy.bytes, copy.name, copy.grid, copy.is_kernel) == (256, None, None, False)
    assert fill.bytes == 4096
    assert record.event == wait.event and record.event is not None
    assert record.stream != wait.stream, "two streams"
    r = cap.range
    assert r.info == info["range"]
    assert (r.origin, r.launches, r.kernel_steps, r.streams) == ("launch-range 2:3", (2, 3), 2, 2)
    assert r.step_digests and r.original_ns == 31_000
    assert cap.kernel["mangled"] == cap.steps[1].mangled, "the first kernel step"


def test_a_single_dispatch_capture_has_no_steps():
    for path in ALL:
        cap = kreplay.open(path)
        assert cap.steps == [] and not cap.is_range and cap.range is None, path
        assert "steps=" not in repr(cap)
