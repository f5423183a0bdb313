"""`kreplay.verify`, `diff`, `pack` and `extract` against the `kreplay` command's own output
on the same inputs (the binary from KREPLAY_BIN, as scripts/test.sh sets it): one library
function behind both, so the results, the files written and the error text are the same."""

import inspect
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

import kreplay

ROOT = Path(__file__).resolve().parents[2]
CAPTURES = ROOT / "testdata" / "captures"
ALL = sorted(CAPTURES.glob("*.krr"))
SAXPY = CAPTURES / "cuda-saxpy.krr"


def kreplay_bin():
    for p in (os.environ.get("KREPLAY_BIN"), ROOT / "target" / "debug" / "kreplay"):
        if p and Path(p).is_file():
            return str(p)
    b = shutil.which("kreplay")
    assert b, "no kreplay binary: set KREPLAY_BIN (scripts/test.sh does)"
    return b


def cli(*args):
    """`kreplay ARGS`: its exit status, stdout and stderr (no check: 1 is a finding)."""
    return subprocess.run([kreplay_bin(), *map(str, args)], capture_output=True, text=True)


def cli_error(*args):
    """The message of a failing `kreplay ARGS` (exit status 2), without `kreplay: error: `."""
    r = cli(*args)
    assert r.returncode == 2, (args, r.returncode, r.stderr)
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith("kreplay: error: "), last
    return last[len("kreplay: error: "):]


def cut(tmp_path, name="cut.krr"):
    """saxpy cut in half: an incomplete capture (what a recorder killed mid-write leaves)."""
    data = SAXPY.read_bytes()
    p = tmp_path / name
    p.write_bytes(data[: len(data) // 2])
    return p


def tree(d: Path) -> dict:
    """Every file under `d` by relative name: its bytes and its mode."""
    return {str(p.relative_to(d)): (p.read_bytes(), p.stat().st_mode) for p in sorted(d.rglob("*")) if p.is_file()}


# --- verify ---


def test_verify_is_what_kreplay_verify_json_prints():
    for path in ALL:
        r = cli("verify", "--json", path)
        assert r.returncode == 0, r.stderr
        assert kreplay.verify(str(path)) == json.loads(r.stdout), path


def test_a_damaged_capture_is_a_verdict_with_the_offset_of_the_damage(tmp_path):
    bad = cut(tmp_path)
    r = cli("verify", "--json", bad)
    assert r.returncode == 1
    v = kreplay.verify(bad)
    assert v == json.loads(r.stdout)
    assert v["intact"] is False and v["error"] and isinstance(v["offset"], int), v
    # One bit flipped inside the file: a checksum, at the offset of the event it broke.
    flipped = tmp_path / "flipped.krr"
    data = bytearray(SAXPY.read_bytes())
    data[len(data) // 3] ^= 0x10
    flipped.write_bytes(bytes(data))
    v = kreplay.verify(flipped)
    assert v == json.loads(cli("verify", "--json", flipped).stdout)
    assert not v["intact"] and v["offset"] is not None and v["offset"] <= len(data) // 3


def test_verify_salvages_as_kreplay_verify_salvage_does(tmp_path):
    bad = cut(tmp_path)
    ours, theirs = tmp_path / "ours.krr", tmp_path / "theirs.krr"
    v = kreplay.verify(bad, salvage=ours)
    assert cli("verify", bad, "--salvage", theirs).returncode == 1
    assert ours.read_bytes() == theirs.read_bytes(), "the same salvaged capture"
    s = v.pop("salvaged")
    assert v == json.loads(cli("verify", "--json", bad).stdout)
    assert 0 < s["kept_events"] <= s["intact_events"], s
    assert kreplay.verify(ours)["intact"]
    # Never over an existing file without force, never over the capture itself.
    with pytest.raises(FileExistsError, match="already exists"):
        kreplay.verify(bad, salvage=ours)
    kreplay.verify(bad, salvage=ours, force=True)
    with pytest.raises(ValueError, match="that is the damaged capture itself; salvage into another file"):
        kreplay.verify(bad, salvage=bad, force=True)
    with pytest.warns(RuntimeWarning, match="is intact; nothing to salvage"):
        assert kreplay.verify(SAXPY, salvage=tmp_path / "never.krr")["intact"]
    assert not (tmp_path / "never.krr").exists()


# --- diff ---


def test_diff_is_what_kreplay_diff_json_prints():
    pairs = [(SAXPY, SAXPY), (SAXPY, CAPTURES / "cuda-globals.krr"), (CAPTURES / "cuda-pointers.krr", SAXPY)]
    for a, b in pairs:
        for state in ("post", "pre"):
            for as_ in ("f32", "bf16", "u8"):
                r = cli("diff", "--json", a, b, "--state", state, "--as", as_)
                assert r.returncode in (0, 1), r.stderr
                d = kreplay.diff(str(a), str(b), state=state, as_=as_)
                assert d == json.loads(r.stdout), (a, b, state, as_)
                assert d["identical"] == (r.returncode == 0)


def test_diff_of_a_capture_without_output_says_to_compare_the_inputs(tmp_path):
    dropped = tmp_path / "dropped.krr"
    kreplay.pack(SAXPY, dropped, level=3, drop_post=True)
    with pytest.raises(ValueError) as e:
        kreplay.diff(SAXPY, dropped)
    assert str(e.value) == cli_error("diff", SAXPY, dropped)
    assert "--state pre" in str(e.value)
    assert kreplay.diff(SAXPY, dropped, state="pre")["identical"]
    with pytest.raises(ValueError, match="pre.*post"):
        kreplay.diff(SAXPY, SAXPY, state="after")
    with pytest.raises(ValueError, match="f32, f16, bf16, i32, u8"):
        kreplay.diff(SAXPY, SAXPY, as_="float32")


# --- pack ---


@pytest.mark.parametrize("flags", [dict(level=3), dict(level=3, redact=True), dict(level=1, drop_post=True), dict()])
def test_pack_writes_the_file_kreplay_pack_writes(tmp_path, flags):
    ours, theirs = tmp_path / "ours.krr", tmp_path / "theirs.krr"
    report = kreplay.pack(SAXPY, ours, **flags)
    args = ["pack", SAXPY, "-o", theirs]
    if "level" in flags:
        args += ["--level", flags["level"]]
    args += ["--redact"] * flags.get("redact", False) + ["--drop-post"] * flags.get("drop_post", False)
    r = cli(*args)
    assert r.returncode == 0, r.stderr
    assert ours.read_bytes() == theirs.read_bytes()
    assert report["size"] == ours.stat().st_size
    assert f"zstd level {report['level']}," in r.stderr
    assert report["level"] == flags.get("level", 19)
    assert report["reference"] == ("redacted" if flags.get("redact") else "dropped" if flags.get("drop_post") else "recorded")
    assert kreplay.open(ours).reference == report["reference"]
    assert oct(ours.stat().st_mode & 0o777) == oct(theirs.stat().st_mode & 0o777)


def test_pack_refuses_as_kreplay_pack_does(tmp_path):
    out = tmp_path / "out.krr"
    kreplay.pack(SAXPY, out, level=3)
    with pytest.raises(FileExistsError, match="already exists: pass --force to replace it"):
        kreplay.pack(SAXPY, out, level=3)
    kreplay.pack(SAXPY, out, level=1, force=True)
    assert kreplay.verify(out)["intact"]
    with pytest.raises(ValueError) as e:
        kreplay.pack(out, out, force=True)
    assert str(e.value) == "dst=" + cli_error("pack", out, "-o", out, "--force").removeprefix("-o ")
    with pytest.raises(ValueError, match="1-22"):
        kreplay.pack(SAXPY, tmp_path / "x.krr", level=23)
    bad = cut(tmp_path)
    with pytest.raises(ValueError) as e:
        kreplay.pack(bad, tmp_path / "y.krr")
    assert str(e.value) == cli_error("pack", bad, "-o", tmp_path / "z.krr")
    assert re.search(r"\d", str(e.value)), "the message says where"
    assert not (tmp_path / "y.krr").exists()


# --- extract ---


def test_extract_writes_the_files_kreplay_extract_writes(tmp_path):
    for path in ALL:
        ours, theirs = tmp_path / path.stem / "ours", tmp_path / path.stem / "theirs"
        done = kreplay.extract(str(path), ours)
        r = cli("extract", path, "-o", theirs)
        assert r.returncode == 0, r.stderr
        assert tree(ours) == tree(theirs), path
        assert f"extracted {done['modules']} module(s), args.bin and {done['regions']} region(s)" in r.stderr
        assert done["repro"] is None and done["repro_files"] is None


def test_extract_writes_the_reproducer_kreplay_extract_repro_writes(tmp_path):
    ours, theirs = tmp_path / "ours", tmp_path / "theirs"
    done = kreplay.extract(SAXPY, repro=ours)
    r = cli("extract", SAXPY, "--repro", theirs)
    assert r.returncode == 0, r.stderr
    assert tree(ours) == tree(theirs)
    assert f"({done['repro_files']} files)" in r.stderr
    assert done["output"] is None and done["modules"] is None
    assert "Makefile" in tree(ours)


def test_extract_refuses_as_kreplay_extract_does(tmp_path):
    full = tmp_path / "full"
    kreplay.extract(SAXPY, full)
    with pytest.raises(ValueError) as e:
        kreplay.extract(SAXPY, full)
    assert str(e.value) == cli_error("extract", SAXPY, "-o", full)
    kreplay.extract(SAXPY, full, force=True)
    with pytest.raises(ValueError, match="out_dir.*repro"):
        kreplay.extract(SAXPY)
    bad = cut(tmp_path)
    with pytest.raises(ValueError) as e:
        kreplay.extract(bad, tmp_path / "never")
    assert str(e.value) == cli_error("extract", bad, "-o", tmp_path / "never")
    assert re.search(r"\d", str(e.value)), "the message says where"
    assert not (tmp_path / "never").exists()
    with pytest.raises(OSError) as e:
        kreplay.extract(tmp_path / "missing.krr", tmp_path / "x")
    assert str(e.value) == cli_error("extract", tmp_path / "missing.krr", "-o", tmp_path / "x")


# --- range captures ---

# A 1.3 range: saxpy's kernel twice among copies, a fill and event steps on two streams
# (format/tests/range_golden.rs builds it).
RANGE_OPS = ROOT / "testdata" / "golden" / "range-ops.krr"
RANGE_SAXPY = ROOT / "testdata" / "golden" / "range-saxpy.krr"


@pytest.mark.parametrize("flags", [dict(level=3), dict(level=3, redact=True), dict(level=3, drop_post=True)])
def test_pack_of_a_range_is_the_file_kreplay_pack_writes(tmp_path, flags):
    ours, theirs = tmp_path / "ours.krr", tmp_path / "theirs.krr"
    kreplay.pack(RANGE_OPS, ours, **flags)
    args = ["pack", RANGE_OPS, "-o", theirs, "--level", "3"]
    args += ["--redact"] * flags.get("redact", False) + ["--drop-post"] * flags.get("drop_post", False)
    r = cli(*args)
    assert r.returncode == 0, r.stderr
    assert ours.read_bytes() == theirs.read_bytes()
    packed = kreplay.open(ours)
    assert [s.kind for s in packed.steps] == [s.kind for s in kreplay.open(RANGE_OPS).steps]
    if flags.get("redact"):
        fields = {f["field"]: f for f in packed.info["redaction"]}
        assert not fields["step 0 host bytes (copy-htod)"]["kept"]


def test_extract_of_a_range_writes_its_steps_and_no_reproducer_yet(tmp_path):
    ours, theirs = tmp_path / "ours", tmp_path / "theirs"
    done = kreplay.extract(RANGE_OPS, ours)
    r = cli("extract", RANGE_OPS, "-o", theirs)
    assert r.returncode == 0, r.stderr
    assert tree(ours) == tree(theirs)
    assert "step-6-args.bin" in tree(ours) and "args.bin" not in tree(ours)
    assert done["regions"] == len(kreplay.open(RANGE_OPS).regions)
    with pytest.raises(ValueError) as e:
        kreplay.extract(RANGE_OPS, repro=tmp_path / "repro")
    assert str(e.value) == cli_error("extract", RANGE_OPS, "--repro", tmp_path / "repro2")
    assert "comes later" in str(e.value)


def test_diff_of_ranges_is_what_kreplay_diff_json_prints():
    for a, b in [(RANGE_OPS, RANGE_OPS), (RANGE_OPS, RANGE_SAXPY), (RANGE_SAXPY, SAXPY)]:
        r = cli("diff", "--json", "--state", "pre", a, b)
        assert r.returncode in (0, 1), r.stderr
        d = kreplay.diff(a, b, state="pre")
        assert d == json.loads(r.stdout), (a, b)
        assert "steps" in d
    d = kreplay.diff(RANGE_OPS, RANGE_SAXPY, state="pre")
    assert (d["steps"]["steps_a"], d["steps"]["steps_b"]) == (9, 3)
    assert not d["identical"]
    assert "steps" not in kreplay.diff(SAXPY, SAXPY)


# --- one set of defaults, and help() ---


def cli_defaults(command: str) -> dict:
    """`kreplay COMMAND --help`'s options by long name: the default it shows, None for an
    option without one, False for a plain flag."""
    text = cli(command, "--help").stdout
    found, name = {}, None
    # clap puts an option's help after it on the same line when every option's help is short,
    # and on the lines below otherwise: both layouts are read.
    for line in text.splitlines():
        m = re.match(r"^\s+(?:-\w, )?--([\w-]+)( <[^>]+>)?(?:\s*$|\s{2,})", line)
        if m:
            name = m.group(1)
            found[name] = None if m.group(2) else False
        d = re.search(r"\[default: ([^\]]*)\]", line)
        if d and name:
            found[name] = d.group(1)
    found.pop("help", None)
    found.pop("color", None)
    return found


def python_defaults(fn, rename=()) -> dict:
    """`fn`'s keyword defaults by the CLI's option names (`as_` is `--as`, ...)."""
    names = dict(rename)
    return {
        names.get(k, k).replace("_", "-"): p.default
        for k, p in inspect.signature(fn).parameters.items()
        if p.default is not inspect.Parameter.empty
    }


def test_the_commands_have_the_defaults_of_the_cli():
    """One set of defaults: Python's keywords are the CLI's flags' (`--json` aside: Python
    always gets the JSON's fields; pack's `-o` is the positional `dst`)."""
    # The many-capture flags of `kreplay verify DIR|FILE...` (the farm) have no Python form:
    # `kreplay.verify` takes one capture.
    many = {"json", "jobs", "json-lines", "resume", "shard", "html"}

    def without_json(d):
        return {k: v for k, v in d.items() if k not in many}

    assert python_defaults(kreplay.verify) == without_json(cli_defaults("verify"))
    assert python_defaults(kreplay.diff, {"as_": "as"}) == without_json(cli_defaults("diff"))
    pack = cli_defaults("pack")
    assert pack.pop("output") is None, "-o OUT has no default: Python's dst is required"
    assert python_defaults(kreplay.pack) == pack
    assert python_defaults(kreplay.extract, {"out_dir": "output"}) == cli_defaults("extract")
    # And the native layer's (the player's `Default`s, which the CLI's flags name too).
    sig = inspect.signature(kreplay.diff).parameters
    assert {k: sig[k].default for k in ("state", "as_")} == kreplay._native.diff_defaults()


def test_the_defaults_parser_reads_values_flags_and_unset_options():
    assert cli_defaults("diff") == {"state": "post", "as": "f32", "json": False}


def test_help_explains_each_command():
    for fn, cmd in ((kreplay.verify, "kreplay verify"), (kreplay.diff, "kreplay diff"),
                    (kreplay.pack, "kreplay pack"), (kreplay.extract, "kreplay extract")):
        assert fn.__doc__ and cmd in fn.__doc__, fn
        assert fn.__name__ in kreplay.__all__
