"""The GPU suite's helpers: running commands (logged for the failure report), the verdicts of
the case kinds as pure functions over what the commands left, and the summary table.

Nothing here needs a GPU: the verdict functions take parsed JSON and text, so that
test_helpers_cpu.py checks them (and the table) on the CPU, against fake rows.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

TAIL_CHARS = 2000


def tail(text: str, n: int = TAIL_CHARS) -> str:
    """The end of `text`, at most `n` characters, marked when cut."""
    text = text or ""
    return text if len(text) <= n else "[...]" + text[-n:]


def read(path) -> str:
    """A file's text, or "" when it is missing, unreadable or not a regular file (callers check
    presence). A device such as /dev/full, where a case points an application's stderr, reads
    as endless zeros: reading it took a pytest worker's memory until the worker died."""
    try:
        p = Path(path)
        if not p.is_file():
            return ""
        return p.read_text(errors="replace")
    except OSError:
        return ""


def load_json(path):
    """A JSON file's value, or None when missing or not JSON."""
    try:
        return json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None


def last_json_line(text: str):
    """The last line of `text` parsed as JSON (list --json prints after the app's output)."""
    lines = [l for l in (text or "").strip().splitlines() if l.strip()]
    if not lines:
        return None
    try:
        return json.loads(lines[-1])
    except ValueError:
        return None


# -- commands ---------------------------------------------------------------------------------


@dataclass
class Cmd:
    """One command the case ran: what, where its output went, how it ended."""

    argv: list
    out_path: Path
    err_path: Path
    rc: Optional[int] = None
    secs: float = 0.0
    timed_out: bool = False
    env: dict = field(default_factory=dict)

    @property
    def out(self) -> str:
        return read(self.out_path)

    @property
    def err(self) -> str:
        return read(self.err_path)

    def describe(self) -> str:
        env = " ".join(f"{k}={shlex.quote(v)}" for k, v in self.env.items())
        head = f"$ {env + ' ' if env else ''}{shlex.join(str(a) for a in self.argv)}"
        how = "timed out" if self.timed_out else f"exit {self.rc}"
        lines = [head, f"  -> {how} after {self.secs:.1f} s"]
        for label, p in (("stdout", self.out_path), ("stderr", self.err_path)):
            t = read(p).rstrip()
            if t:
                lines.append(f"  {label} ({p}):")
                lines.extend("    " + l for l in tail(t).splitlines())
        return "\n".join(lines)


class Runner:
    """Runs commands with their output in files of the case's folder, each under a timeout
    that ends the whole process group; keeps the log the failure report prints."""

    def __init__(self, folder: Path, env: Optional[dict] = None):
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        self.env = dict(env or {})
        self.log: list[Cmd] = []
        self.captures: list[Path] = []
        self.notes: list[str] = []
        self._n = 0

    def path(self, name: str) -> Path:
        return self.folder / name

    def _files(self, name, out, err):
        self._n += 1
        stem = name or f"cmd{self._n:02d}"
        out = Path(out) if out is not None else self.folder / f"{stem}.out"
        err = Path(err) if err is not None else self.folder / f"{stem}.err"
        return out, err

    def start(self, argv, name=None, out=None, err=None, env=None, cwd=None):
        """Starts a command in its own process group (for robust-sigterm); `finish` waits."""
        argv = [str(a) for a in argv]
        out, err = self._files(name, out, err)
        extra = dict(env or {})
        cmd = Cmd(argv, out, err, env=extra)
        self.log.append(cmd)
        # The suite's own pytest variables stay out of the apps (python-package runs pytest).
        full = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
        full.update(self.env, **extra)
        fo, fe = open(out, "wb"), open(err, "wb")
        try:
            p = subprocess.Popen(argv, stdout=fo, stderr=fe, stdin=subprocess.DEVNULL, env=full,
                                 cwd=cwd, start_new_session=True)
        except OSError as e:
            fo.close()
            fe.write(f"cannot start: {e}\n".encode())
            fe.close()
            cmd.rc = 127
            return cmd, None
        fo.close()
        fe.close()
        cmd._t0 = time.monotonic()
        return cmd, p

    def finish(self, cmd: Cmd, p, timeout: float = 300) -> Cmd:
        if p is None:
            return cmd
        try:
            cmd.rc = p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            cmd.timed_out = True
            kill_group(p)
            cmd.rc = p.wait()
        except BaseException:
            # pytest-timeout or ^C: never leave the application running.
            kill_group(p)
            p.wait()
            raise
        finally:
            cmd.secs = time.monotonic() - cmd._t0
        if cmd.rc is not None and cmd.rc < 0:
            cmd.rc = 128 - cmd.rc  # killed by a signal: as a shell says it (SIGTERM: 143)
        return cmd

    def run(self, argv, name=None, out=None, err=None, env=None, cwd=None, timeout: float = 300) -> Cmd:
        """Runs `argv` to its end (or `timeout`, then the process group is killed)."""
        cmd, p = self.start(argv, name=name, out=out, err=err, env=env, cwd=cwd)
        return self.finish(cmd, p, timeout)

    def capture(self, path) -> Path:
        """Names a capture whose `kreplay info` the failure report shows."""
        p = Path(path)
        if p not in self.captures:
            self.captures.append(p)
        return p

    def report(self, info: Optional[Callable[[Path], str]] = None) -> str:
        parts = [c.describe() for c in self.log]
        parts += self.notes
        if info:
            for c in self.captures:
                parts.append(f"kreplay info {c}:\n" + ("  " + info(c).replace("\n", "\n  ") if c.exists()
                                                       else "  (no such file)"))
        return "\n\n".join(parts)


def kill_group(p) -> None:
    try:
        os.killpg(p.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def children_of(pid: int) -> list[int]:
    """Every live descendant of `pid` (from /proc)."""
    parent = {}
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            stat = (d / "stat").read_text()
        except OSError:
            continue
        # pid (comm) state ppid ...: comm may hold spaces and parentheses.
        rest = stat[stat.rfind(")") + 2:].split()
        parent[int(d.name)] = int(rest[1])
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        kids = [c for c, pp in parent.items() if pp == p]
        out += kids
        todo += kids
    return out


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return state[state.rfind(")") + 2:].split()[0] != "Z"


# -- verdicts ---------------------------------------------------------------------------------

RELOCATE_REFUSED = "the capture cannot be moved to other addresses"  # play --relocate (engine/src/error.rs)
REPRO_RELOCATE_REFUSED = "the capture cannot be relocated"  # the reproducer (engine/src/repro.cpp)


def ptx_verdict(info: dict, ptx: Optional[dict], play_deterministic: bool) -> str:
    """The `ptx jit` column: "none" (no PTX in the capture), "ok", "nondet" or "FAIL".

    Issue 39 item 5: "nondet" passed whatever the captured code did; now a nondeterministic
    PTX replay is accepted only where the captured code's replay was nondeterministic too
    (else the JIT-compiled code changed the kernel's behaviour: FAIL).
    """
    if not any(m.get("kind") == "ptx" for m in info.get("modules") or []):
        return "none"
    if not ptx or ptx.get("code") != "ptx-jit":
        return "FAIL"
    v = ptx.get("verify") or {}
    if v.get("matched") is True:
        return "ok"
    if v.get("deterministic") is False and not play_deterministic:
        return "nondet"
    return "FAIL"


def relocate_verdict(reloc: Optional[dict], reloc_rc: Optional[int], reloc_err: str) -> str:
    """The `relocate` column: "ok" (relocated replay matched), "refused" (play said the capture
    cannot be moved, exit 2) or "FAIL".

    Issue 39 item 5: the refusal was looked for as "cannot be relocated", which play --relocate
    never prints (it says "the capture cannot be moved to other addresses"): a legitimate
    refusal was a false FAIL. Now the real message and exit status 2.
    """
    if reloc and (reloc.get("verify") or {}).get("matched") is True:
        return "ok"
    if not reloc and reloc_rc == 2 and RELOCATE_REFUSED in reloc_err:
        return "refused"
    return "FAIL"


RANGE_KERNELS = ("range_first", "range_second", "range_third")


def range_checks(rec_rc: int, base_out: str, rec_out: str, info, play_rc: int, play, pack_rc: int,
                 pack_err: str, packed_play=None) -> list[str]:
    """range-launch: `record --launch-range 1:3` of range_app's three dependent kernels (issue
    32). Why it failed (empty: passed): the record exits 0 with the app's output as a plain
    run's; `info --json` lists the three steps in order with their geometry and in-app time;
    `play --passes 8 --verify` times 8 passes of the whole range, matched bit for bit and
    deterministic; `pack` either refuses the capture with its message (a pack that does not
    know ranges yet) or packs it into a capture whose replay (`packed_play`) matches."""
    why = []
    if rec_rc != 0:
        why.append(f"kreplay record exits {rec_rc}")
    if base_out != rec_out or not base_out:
        why.append("the application's stdout under record differs from the plain run's")
    steps = (info or {}).get("steps") or []
    names = [((s.get("kernel") or {}).get("name") or "").split("(")[0] for s in steps]
    if names != list(RANGE_KERNELS):
        why.append(f"info lists steps {names}, want {list(RANGE_KERNELS)}")
    for s in steps:
        if s.get("grid") != [4096, 1, 1] or s.get("block") != [256, 1, 1]:
            why.append(f"step {s.get('index')}: grid {s.get('grid')} block {s.get('block')}")
        if not (s.get("original_ns") or 0) > 0:
            why.append(f"step {s.get('index')}: no in-app time")
    if play_rc != 0:
        why.append(f"kreplay play --verify exits {play_rc}")
    play = play or {}
    v = play.get("verify") or {}
    if len(play.get("durations_ns") or []) != 8:
        why.append(f"{len(play.get('durations_ns') or [])} passes timed, 8 asked")
    if v.get("matched") is not True:
        why.append(f"the end state does not match the recorded one ({v.get('mismatched_bytes')} bytes)")
    if v.get("deterministic") is not True:
        why.append("the 8 passes are not identical")
    if pack_rc == 0:
        if ((packed_play or {}).get("verify") or {}).get("matched") is not True:
            why.append("pack of a range capture exits 0 but the packed capture does not replay matched")
    elif "range captures are not supported" not in (pack_err or ""):
        why.append(f"pack of a range capture exits {pack_rc} without saying range captures are not supported")
    return why


def run_case_checks(r: dict) -> list[str]:
    """Why a record-and-play case failed (empty: passed). `r` is what `record_and_play` kept:
    exit statuses, the parsed JSON of info/play/--relocate/--ptx, the outputs' equality."""
    why = []
    if r["base_rc"] != 0:
        why.append(f"the application exits {r['base_rc']} run plain")
    if r["record_rc"] != 0:
        why.append(f"kreplay record exits {r['record_rc']}")
    if not r["output_same"]:
        why.append("the application's stdout under record differs from the plain run's")
    if r.get("record_panics"):
        why.append("the recorder panicked (caught, but its message reached the application's stderr): "
                   + " | ".join(r["record_panics"][:3]))
    if not r["has_capture"]:
        why.append("no capture written")
        return why
    if r["verify_rc"] != 0:
        why.append(f"kreplay verify exits {r['verify_rc']}")
    if r["play_rc"] != 0:
        why.append(f"kreplay play --verify exits {r['play_rc']}")
    play = r.get("play") or {}
    if not play:
        why.append("play --json wrote no JSON")
    v = play.get("verify") or {}
    if len(play.get("durations_ns") or []) != 8:
        why.append(f"{len(play.get('durations_ns') or [])} passes timed, 8 asked")
    if v.get("deterministic") is not True:
        why.append(f"the 8 passes are not identical (deterministic {v.get('deterministic')})")
    if not (v.get("matched") is True or v.get("deterministic") is False):
        why.append("the replay does not match the recorded output")
    if r["relocated"] == "FAIL":
        why.append("play --relocate neither matched nor refused with its message")
    if r["ptx"] == "FAIL":
        why.append("the PTX replay (--ptx) did not match")
    return why


def recorder_panics(err: str) -> list[str]:
    """The lines of a recorded application's stderr that show a panic inside the recorder: the
    entry points catch it, but Rust's panic message still reaches the application's stderr (seen
    on the H200: NVTX pops from an exit handler after the thread-locals were gone)."""
    marks = ("panicked at", "kreplay: internal error in the recorder")
    return [line.strip() for line in (err or "").splitlines() if any(m in line for m in marks)]


def runner_panics(log) -> list[str]:
    """`recorder_panics` of every `kreplay record` and `kreplay profile` a case ran (its
    commands, `Cmd`s): what the recorder printed into an application's stderr."""
    found = []
    for cmd in log:
        argv = [str(a) for a in cmd.argv]
        if len(argv) > 1 and argv[0].endswith("kreplay") and argv[1] in ("record", "profile"):
            found += recorder_panics(cmd.err)
    return found


def play_verdict(v: dict) -> str:
    """One replay's verdict in the reproducer's words (engine/src/repro.cpp)."""
    if (v.get("reference") or "recorded") != "recorded":
        return "deterministic" if v.get("deterministic") else "nondeterministic"
    if v.get("deterministic") is False:
        return "nondeterministic"
    return "matched" if v.get("matched") else "mismatch"


def repro_verdict(out: str) -> str:
    m = re.search(r"^verdict\s+(\S+)", out or "", re.M)
    return m.group(1) if m else "none"


def good_verdict(verdict: str, reference: str) -> bool:
    """What a passing replay says: matched, or (no recorded output) deterministic."""
    return verdict == ("matched" if reference == "recorded" else "deterministic")


def repro_checks(play: Optional[dict], reloc: Optional[dict], reloc_rc: Optional[int], reloc_err: str,
                 rx_rc: Optional[int], rx_out: str, rxr_rc: Optional[int], rxr_out: str, rxr_err: str) -> tuple:
    """The reproducer against play: (want, want_r, got, got_r, why).

    Issue 39 item 4: the relocation refusal is play's real message ("cannot be moved to other
    addresses") and the reproducer's own ("cannot be relocated", exit 2); a play that wrote no
    JSON is a FAIL, never "-" == "-"; both sides saying mismatch or nondeterministic is a FAIL:
    the verdict must be matched (deterministic for a capture without recorded output).
    """
    why = []
    if not play:
        return "-", "-", repro_verdict(rx_out), "-", ["play --json of the capture wrote no JSON"]
    v = play.get("verify") or {}
    ref = v.get("reference") or "recorded"
    want, got = play_verdict(v), repro_verdict(rx_out)
    if not good_verdict(want, ref):
        why.append(f"play says {want}: nothing to reproduce")
    if got != want:
        why.append(f"repro says {got}, play {want}")
    if rx_rc != 0:
        why.append(f"repro exits {rx_rc}")
    if reloc:
        want_r, got_r = play_verdict(reloc.get("verify") or {}), repro_verdict(rxr_out)
        if not good_verdict(want_r, ref):
            why.append(f"play --relocate says {want_r}")
        if got_r != want_r:
            why.append(f"repro --relocate says {got_r}, play --relocate {want_r}")
        if rxr_rc != 0:
            why.append(f"repro --relocate exits {rxr_rc}")
    elif reloc_rc == 2 and RELOCATE_REFUSED in (reloc_err or ""):
        want_r = "refused"
        got_r = "refused" if rxr_rc == 2 and REPRO_RELOCATE_REFUSED in (rxr_err or "") else repro_verdict(rxr_out)
        if got_r != want_r:
            why.append(f"play --relocate refused, repro --relocate says {got_r} (exit {rxr_rc})")
    else:
        want_r, got_r = "-", repro_verdict(rxr_out)
        why.append(f"play --relocate wrote no JSON and did not refuse (exit {reloc_rc})")
    return want, want_r, got, got_r, why


def list_table_rows(text: str) -> list[dict]:
    """The rows of `kreplay list`'s text table (count, in graph, first, grid, block, kernel)."""
    rows = []
    for line in (text or "").splitlines():
        m = re.match(r"^\s*(\d+)\s+(\d+)\s+(\d+)\s+(\(\S+\))\s+(\(\S+\))\s+(.*)$", line)
        if m:
            rows.append({"count": int(m.group(1)), "in_graphs": int(m.group(2)), "first": int(m.group(3)),
                         "grid": m.group(4), "block": m.group(5), "kernel": m.group(6).strip()})
    return rows


LIST_HEADER = re.compile(r"^\s*count\s+in graph\s+first\s+grid\s+block\s+.*kernel\s*$")


def list_output_checks(base_out: str, list_out: str, kernel: str, count: int) -> list[str]:
    """robust-list (issue 39 item 2): `kreplay list`'s stdout is the application's own stdout,
    unchanged, then the table, which has the kernel's row with its count. (It was `"saxpy" in
    out`, which the application's own line satisfies.)"""
    why = []
    if not base_out:
        why.append("the plain run printed nothing to compare with")
    if not list_out.startswith(base_out):
        why.append("the application's output under list differs from the plain run's")
    table = list_out[len(base_out):] if list_out.startswith(base_out) else list_out
    lines = table.splitlines()
    if not lines or not LIST_HEADER.match(lines[0]):
        why.append("no table header right after the application's output")
    got = [r for r in list_table_rows(table) if r["kernel"] == kernel]
    if [r["count"] for r in got] != [count]:
        why.append(f"table rows for {kernel}: {got}, want one with count {count}")
    return why


def tool_checks(rows: list[dict], tool_lines: list[str]) -> list[str]:
    """profile-tool (issue 39 item 10): the example tool stops when three consecutive passes
    agree within 5 %; each row's pass count must be the tool's own, the tool must have stopped
    the loop (not the cap), and the last three durations must agree as the tool requires."""
    why = []
    said = {}
    for l in tool_lines:
        m = re.match(r"^example_tool: .* launch (\d+): (\d+) passes", l)
        if m:
            said[int(m.group(1))] = int(m.group(2))
    if len(said) != len(tool_lines):
        why.append(f"unparsed tool lines: {tool_lines}")
    for r in rows:
        d = r.get("durations_ns") or []
        li = r.get("launch_index")
        if said.get(li) != len(d):
            why.append(f"launch {li}: {len(d)} passes, the tool said {said.get(li)}")
        if r.get("stopped_by_tool") is not True or r.get("capped"):
            why.append(f"launch {li}: not stopped by the tool (capped {r.get('capped')})")
        if len(d) < 3:
            why.append(f"launch {li}: {len(d)} passes, three must agree")
            continue
        last = d[-3:]
        lo, hi = min(last), max(last)
        if (hi - lo) * 20 > lo:
            why.append(f"launch {li}: last three passes {last} differ by more than 5 %")
    return why


# The GPU tests of the chunk kernels' binary (cuda/tests/chunks_gpu.rs): the write-set scan
# and digests, the scans over many pieces (in pages too), the walk's pointer scan and lookup.
# A CPU test holds it to the file's own count.
CHUNK_GPU_TESTS = 7


def rust_tests_ran(rc: int, text: str, want: int = CHUNK_GPU_TESTS) -> bool:
    """A Rust test binary run with --ignored ran all `want` tests and every one passed (a test
    that returned early or was left out is not a pass)."""
    m = re.search(r"test result: ok\. (\d+) passed; 0 failed; 0 ignored", text or "")
    return rc == 0 and m is not None and int(m.group(1)) == want and "skipped" not in text


def junit_counts(path) -> Optional[dict]:
    """tests/failures/errors/skipped/passed of a pytest --junitxml file (None: unreadable)."""
    import xml.etree.ElementTree as ET

    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError):
        return None
    suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
    c = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    for s in suites:
        for k in c:
            c[k] += int(s.get(k, 0))
    c["passed"] = c["tests"] - c["failures"] - c["errors"] - c["skipped"]
    return c


def python_package_checks(cpu: Optional[dict], gpu: Optional[dict]) -> list[str]:
    """python-package (issue 39 item 9): the GPU tests' own count, every one passed, none
    skipped (was: `>= 12 passed` over CPU and GPU tests together, the skip count unused)."""
    why = []
    if cpu is None:
        why.append("no JUnit report from python/tests")
    elif cpu["failures"] or cpu["errors"] or cpu["passed"] < 1:
        why.append(f"python/tests: {cpu}")
    if gpu is None:
        why.append("no JUnit report from python/tests_gpu")
    elif gpu["tests"] < 1 or gpu["passed"] != gpu["tests"]:
        why.append(f"python/tests_gpu: {gpu} (every GPU test must pass, none skipped)")
    return why


# The figures of a play report measured in time: two replays never time alike, so they are
# left out when two front ends' reports are compared (durations_ns is compared by its length,
# the pass count). `address_mode` too: whether a fresh process can map the capture at its
# recorded addresses depends on where that process's own mappings happened to land, not on the
# front end (measured on the H200: 0, 3 and 1 of the suite's plays relocated in three runs of
# the same binaries' suite, each time in different cases).
PLAY_TIMING_FIELDS = frozenset({"durations_ns", "min_ns", "median_ns", "max_ns", "restore_median_ns", "setup_ms",
                                "address_mode"})


def play_report_differences(a, b) -> list[str]:
    """python-cli-same-report (issue 30): the fields, as dotted names, in which two
    `play --json` reports differ (a field one of them lacks counts), timing figures left out
    (PLAY_TIMING_FIELDS) but the number of durations kept."""
    if not isinstance(a, dict) or not isinstance(b, dict):
        return ["(not a JSON object)"]
    why: list[str] = []

    def walk(x, y, at):
        if isinstance(x, dict) and isinstance(y, dict):
            for k in sorted(set(x) | set(y)):
                name = f"{at}.{k}" if at else k
                if k not in x or k not in y:
                    why.append(name)
                elif not at and k == "durations_ns":
                    if len(x[k] or []) != len(y[k] or []):
                        why.append(f"{name} (count)")
                elif not at and k in PLAY_TIMING_FIELDS:
                    continue
                else:
                    walk(x[k], y[k], name)
        elif x != y:
            why.append(at)

    walk(a, b, "")
    return why


def durations_agree(durations: list, within: float = 0.05) -> bool:
    if not durations:
        return False
    lo, hi = min(durations), max(durations)
    return (hi - lo) <= within * lo


# -- the summary table ------------------------------------------------------------------------

COLUMNS = ("case", "kernel", "regions", "bytes", "original_us", "median_us", "verified", "address_mode",
           "relocated", "ptx", "result")


def verified(row: dict) -> str:
    if row.get("matched"):
        return "yes"
    return "nondet" if row.get("deterministic") is False else "no"


def table_row(row: dict) -> dict:
    """A result row with every column filled (what the JSON Lines file holds)."""
    return {
        "case": str(row.get("case", "-")),
        "kernel": str(row.get("kernel", "-")),
        "regions": int(row.get("regions") or 0),
        "bytes": int(row.get("bytes") or 0),
        "original_us": float(row.get("original_us") or 0),
        "median_us": float(row.get("median_us") or 0),
        "verified": verified(row),
        "address_mode": str(row.get("address_mode", "-")),
        "relocated": str(row.get("relocated", "-")),
        "ptx": str(row.get("ptx", "-")),
        "result": str(row.get("result", "-")),
        **({"why": row["why"]} if row.get("why") else {}),
        **({"figures": str(row["figures"])} if row.get("figures") else {}),
    }


def format_table(rows: list[dict]) -> list[str]:
    """The suite's table, as scripts/gpu-test.sh prints it, one line per case."""
    lines = [f"{'case':<28} {'kernel':<40} {'regions':>7} {'capture':>12} {'orig us':>9} {'replay us':>10} "
             f"{'verified':>9} {'addresses':>9} {'relocate':>8} {'ptx jit':>7}  result"]
    for r in map(table_row, rows):
        k = r["kernel"] if len(r["kernel"]) <= 40 else r["kernel"][:37] + "..."
        lines.append(f"{r['case']:<28} {k:<40} {r['regions']:>7} {r['bytes']:>12} {r['original_us']:>9.1f} "
                     f"{r['median_us']:>10.1f} {r['verified']:>9} {r['address_mode']:>9} {r['relocated']:>8} "
                     f"{r['ptx']:>7}  {r['result']}")
        # A case's measured figures (bench and timing cases) are shown whether it passed or not.
        if r.get("figures"):
            lines.append("    figures: " + r["figures"].replace("\n", " / ")[:1500])
        if r["result"] not in ("PASS", "XFAIL") and r.get("why"):
            lines.append("    why: " + r["why"].replace("\n", " / ")[:1500])
    return lines


def count_line(rows: list[dict]) -> str:
    res = [table_row(r)["result"] for r in rows]
    passed = res.count("PASS")
    failed = sum(r in ("FAIL", "ERROR", "XPASS") for r in res)
    skipped = sum(r.startswith("SKIP") or r == "XFAIL" for r in res)
    return f"{passed} passed, {failed} failed, {skipped} skipped"


# table-check (#34): the walk's answers from the recorder's allocation table, each also asked of
# the driver (KREPLAY_DEBUG_TABLE=check), as the walk's debug line (KREPLAY_DEBUG_STALL=1)
# counts them.
WALK_TABLE_LINE = re.compile(r"kreplay: walk: (\d+) regions in [\d.]+ ms: (\d+) answered by the table"
                             r"(?: \((\d+) of them answered otherwise by the driver\))?")


def table_checks(err: str, at_least: int) -> list:
    """Why a recording's walks (its stderr `err`) do not show the allocation table answering at
    least `at_least` words with no disagreement from the driver; [] when they do."""
    walks = [m.groups() for m in WALK_TABLE_LINE.finditer(err)]
    if not walks:
        return ["no walk line on stderr (KREPLAY_DEBUG_STALL=1)"]
    why = []
    if any(checked is None for _, _, checked in walks):
        why.append("a walk line without the driver's check (KREPLAY_DEBUG_TABLE=check)")
    answered = sum(int(a) for _, a, _ in walks)
    disagreed = sum(int(c or 0) for _, _, c in walks)
    if answered < at_least:
        why.append(f"the table answered {answered} words, fewer than {at_least}")
    if disagreed:
        why.append(f"the driver answered {disagreed} of the table's {answered} answers otherwise")
    return why


# capture-times-bench (#34, "nothing else gets slower"): the suite's run cases recorded with the
# library under test and with an older one (KREPLAY_OLD_RECORD_LIB), one after the other.
# Each case's stall may be at most 1.5 x the old one's + 2 ms (one run each: a small
# capture's stall varies by a millisecond or two from run to run), and all of them together at
# most 5 % more than before.
CAPTURE_TIME_CASE_SLACK = (1.5, 2.0)
CAPTURE_TIME_TOTAL_SLACK = 1.05


def first_stall_ms(text: str):
    """The first capture's stall (ms) of a `kreplay record --json` output, or None."""
    j = last_json_line(text)
    caps = (j or {}).get("captures") if isinstance(j, dict) else None
    if not caps or not isinstance(caps, list):
        return None
    first = min(caps, key=lambda c: c.get("match_index", 0) if isinstance(c, dict) else 0)
    v = first.get("stall_ms") if isinstance(first, dict) else None
    return float(v) if isinstance(v, (int, float)) else None


# graph-bench's targets, in % of the plain run: what the recorder adds over CUPTI attached with
# no callback enabled (its own work: the callbacks, the bookkeeping per launch), and how much
# slower than the library before (KREPLAY_OLD_RECORD_LIB) a recorded run may be.
GRAPH_OWN_MOST_PCT = 2.0
GRAPH_BEFORE_SLACK_PCT = 1.0


def graph_bench_checks(plain, rec, floor, old=None):
    """graph-bench's verdict from the best times (ms) of the plain run, the recorded one, CUPTI
    attached alone (`KREPLAY_DEBUG_SUBSCRIBE=none`) and the old library's (None: not run). The
    recorder is judged over CUPTI's floor: the attachment alone costs 2.5-2.7 % on the H100
    hosts (session 22), which no change of the recorder's takes away; the total is shown.
    (why, text)."""
    if plain is None or rec is None or floor is None:
        missing = [n for n, v in (("plain", plain), ("recorded", rec), ("CUPTI alone", floor)) if v is None]
        return [f"not measured: {', '.join(missing)}"], f"not measured: {', '.join(missing)}"
    pct = lambda v: (v / plain - 1) * 100
    own = (rec - floor) / plain * 100
    text = (f"10,000 launches x 20 nodes, best of each: plain {plain:.3f} ms, recorded {rec:.3f} ms ({pct(rec):+.2f} %), "
            f"CUPTI attached alone {floor:.3f} ms ({pct(floor):+.2f} %): the recorder's own {own:+.2f} % "
            f"(target <= {GRAPH_OWN_MOST_PCT:g} %)")
    why = []
    if own > GRAPH_OWN_MOST_PCT:
        why.append(f"the recorder adds {own:+.2f} % over CUPTI attached alone (target <= {GRAPH_OWN_MOST_PCT:g} %)")
    if old is not None:
        change = (rec - old) / plain * 100
        text += f"; before (KREPLAY_OLD_RECORD_LIB) {old:.3f} ms ({pct(old):+.2f} %), change {change:+.2f} %"
        if change > GRAPH_BEFORE_SLACK_PCT:
            why.append(f"recorded {rec:.3f} ms against {old:.3f} ms before: {change:+.2f} % of the plain run "
                       f"(over +{GRAPH_BEFORE_SLACK_PCT:g} %)")
    return why, text


def capture_time_checks(rows):
    """rows: (case, new stall ms or None, old stall ms or None). (why, table lines)."""
    why, lines = [], []
    a, b = CAPTURE_TIME_CASE_SLACK
    new_sum = old_sum = 0.0
    for name, new, old in rows:
        if new is None or old is None:
            why.append(f"{name}: no stall measured ({'new' if new is None else 'old'} library)")
            lines.append(f"{name:28s} {'-' if new is None else f'{new:9.2f}'} ms  {'-' if old is None else f'{old:9.2f}'} ms")
            continue
        new_sum += new
        old_sum += old
        bad = new > old * a + b
        if bad:
            why.append(f"{name}: stall {new:.2f} ms against {old:.2f} ms before (over {a} x + {b} ms)")
        lines.append(f"{name:28s} {new:9.2f} ms {old:9.2f} ms {(new - old):+9.2f} ms{'  SLOWER' if bad else ''}")
    if not rows:
        why.append("no case measured")
    elif old_sum > 0:
        pct = (new_sum / old_sum - 1) * 100
        lines.append(f"{'all cases':28s} {new_sum:9.2f} ms {old_sum:9.2f} ms {pct:+8.1f} %")
        if new_sum > old_sum * CAPTURE_TIME_TOTAL_SLACK:
            why.append(f"all cases: {new_sum:.1f} ms against {old_sum:.1f} ms before ({pct:+.1f} %, over +5 %)")
    return why, lines
