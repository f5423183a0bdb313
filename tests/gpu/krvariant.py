"""The verdicts of the `kreplay profile --variant` cases (issue 38), as pure functions over what
the commands left (the apps' stdout, the JSON-lines report, exit statuses), so that
test_variant_cpu.py checks them on the CPU: each good input passes, each fault fails.

variant_app (testdata/apps/variant_app.cu) prints, per call site,
`site K n=N grid=G out=0xADDR e7=0xBITS bitsum=S` (S: the sum of the output's float bit
patterns, an exact checksum), optionally `loop N bitsum=S`, and `checksum TOTAL`. The output's
device addresses can move under kreplay (its scratch is allocated between the app's), so the
app's results are compared without them.

The report (README "Is my variant faster and still right?"): one JSON object per dispatch, its
`variant` object {kernel, durations_ns, median_ns, verdict, element, differing_bytes,
differing_elements, max_abs, max_rel, first_difference: {region_address, offset}, wrote_outside,
kept}, `speedup`, `variant_error`; then one line {"summary": {...}}.
"""

from __future__ import annotations

import json
import re
import struct

SITE = re.compile(r"^site (\d+) n=(\d+) grid=(\d+) out=(0x[0-9a-f]+|\(nil\)) e7=0x([0-9a-f]{8}) bitsum=(\d+)$")
CHECKSUM = re.compile(r"^checksum (\d+)$", re.M)
# variant_wrong.cu writes this into element 7 of every output.
WRONG_VALUE = 12345.0
WRONG_ELEMENT = 7


def float_bits(x: float) -> int:
    return struct.unpack("<I", struct.pack("<f", x))[0]


def sites(text: str) -> list:
    """The call sites variant_app printed: [{site, n, grid, out, e7, bitsum}]."""
    out = []
    for line in (text or "").splitlines():
        m = SITE.match(line.strip())
        if m:
            out.append({"site": int(m[1]), "n": int(m[2]), "grid": int(m[3]),
                        "out": int(m[4], 16) if m[4].startswith("0x") else 0,
                        "e7": int(m[5], 16), "bitsum": int(m[6])})
    return out


def checksum(text: str):
    m = CHECKSUM.search(text or "")
    return int(m[1]) if m else None


def results(text: str) -> str:
    """The app's output without the device addresses it prints."""
    return re.sub(r" out=(0x[0-9a-f]+|\(nil\))", "", text or "")


def expected_kept_checksum(plain: str):
    """The checksum variant_app prints when every call site's output keeps variant_wrong's
    element 7: each site's element-7 bits replaced by those of WRONG_VALUE."""
    total = checksum(plain)
    if total is None or not sites(plain):
        return None
    return total + sum(float_bits(WRONG_VALUE) - s["e7"] for s in sites(plain))


def report(text: str) -> tuple:
    """(rows, summary) of a JSON-lines report; unreadable lines are left out."""
    rows, summary = [], None
    for line in (text or "").splitlines():
        try:
            o = json.loads(line)
        except ValueError:
            continue
        if isinstance(o, dict) and "summary" in o:
            summary = o["summary"]
        elif isinstance(o, dict):
            rows.append(o)
    return rows, summary


def _common(rc: int, plain: str, prof: str, rows: list, expect_rc: int = 0) -> list:
    why = []
    if rc != expect_rc:
        why.append(f"profile exits {rc}, {expect_rc} expected")
    if not plain or results(plain) != results(prof):
        why.append("the application's results differ from a plain run")
    return why


def _by_site(plain: str, rows: list) -> list:
    """(site, row) pairs: each call site's row is the one with its grid."""
    pairs = []
    for s in sites(plain):
        r = next((r for r in rows if (r.get("grid") or [0])[0] == s["grid"]), None)
        pairs.append((s, r))
    return pairs


def slow_checks(rc: int, plain: str, prof: str, rows: list, summary) -> list:
    """variant_slow: a row per call site, each `identical` with speedup < 1; the app's results
    as in a plain run."""
    why = _common(rc, plain, prof, rows)
    if len(sites(plain)) != 3:
        why.append(f"{len(sites(plain))} call sites in the plain run, 3 expected")
    for s, r in _by_site(plain, rows):
        v = (r or {}).get("variant") or {}
        if r is None:
            why.append(f"no row for site {s['site']} (grid {s['grid']})")
        elif v.get("verdict") != "identical":
            why.append(f"site {s['site']}: verdict {v.get('verdict')!r}, identical expected ({r.get('variant_error')})")
        elif not isinstance(r.get("speedup"), (int, float)) or r["speedup"] >= 1:
            why.append(f"site {s['site']}: speedup {r.get('speedup')!r}, below 1 expected for the slow variant")
    if not summary or summary.get("compared") != 3 or summary.get("differ") != 0:
        why.append(f"summary {summary!r}: 3 compared, 0 differ expected")
    elif not (summary.get("geomean_speedup") or 1) < 1:
        why.append(f"geometric-mean speedup {summary.get('geomean_speedup')!r}, below 1 expected")
    return why


def wrong_checks(rc: int, plain: str, prof: str, rows: list, summary, keep: bool) -> list:
    """variant_wrong: every call site `differs`, first differing byte at element 7 of its output
    (region + offset = the output's address + 28, the addresses of the profiled run); the app's
    results unchanged, or with `keep` (--keep variant) its checksum moved by exactly element
    7's change at every site."""
    why = []
    if rc != 0:
        why.append(f"profile exits {rc}")
    if keep:
        want = expected_kept_checksum(plain)
        if want is None or checksum(prof) != want:
            why.append(f"checksum {checksum(prof)} with --keep variant, {want} expected")
    elif not plain or results(plain) != results(prof):
        why.append("the application's results differ from a plain run")
    at = {s["site"]: s["out"] for s in sites(prof)}
    for s, r in _by_site(plain, rows):
        v = (r or {}).get("variant") or {}
        first = v.get("first_difference") or {}
        if r is None:
            why.append(f"no row for site {s['site']}")
            continue
        if v.get("verdict") != "differs":
            why.append(f"site {s['site']}: verdict {v.get('verdict')!r}, differs expected")
        where = (first.get("region_address") or 0) + (first.get("offset") or 0)
        if where != at.get(s["site"], -1) + 4 * WRONG_ELEMENT:
            why.append(f"site {s['site']}: first difference {first}, the output's element {WRONG_ELEMENT} expected "
                       f"({at.get(s['site'], 0):#x} + {4 * WRONG_ELEMENT})")
        if v.get("differing_elements") != 1:
            why.append(f"site {s['site']}: {v.get('differing_elements')} differing elements, 1 expected")
        if v.get("kept") is not keep:
            why.append(f"site {s['site']}: kept {v.get('kept')!r}, {keep} expected")
    if not summary or summary.get("differ") != 3:
        why.append(f"summary {summary!r}: 3 differ expected")
    return why


def layout_checks(rc: int, plain: str, prof: str, err: str, rows: list) -> list:
    """variant_layout (n as 64 bits): refused before any variant launch at every call site,
    naming parameter 3; profile exits 3 (the variant ran nowhere); the app's results unchanged."""
    why = _common(rc, plain, prof, rows, expect_rc=3)
    if len(rows) != 3:
        why.append(f"{len(rows)} rows, 3 expected (the original is still profiled)")
    for r in rows:
        if r.get("variant") is not None:
            why.append(f"launch {r.get('launch_index')}: the variant ran ({r.get('variant')})")
        if "parameter 3 differs" not in (r.get("variant_error") or ""):
            why.append(f"launch {r.get('launch_index')}: variant_error {r.get('variant_error')!r}")
    if "parameter 3 differs" not in (err or ""):
        why.append("stderr does not name parameter 3")
    return why


def graph_checks(rc: int, plain: str, prof: str, rows: list, summary, graphs: int) -> list:
    """variant_app `graph N` against variant_slow: the three call sites compared (`identical`);
    the kernel node of the CUDA graph, launched N times, skipped at each launch with a reason
    that names the graph, in the rows and in the summary's skipped list; the app's results (its
    graph's output included) as in a plain run."""
    why = _common(rc, plain, prof, rows)
    ran = [r for r in rows if not r.get("skipped")]
    skipped = [r for r in rows if r.get("skipped")]
    if len(ran) != 3:
        why.append(f"{len(ran)} rows run, 3 expected (the call sites outside the graph)")
    for r in ran:
        v = r.get("variant") or {}
        if v.get("verdict") != "identical":
            why.append(f"launch {r.get('launch_index')}: verdict {v.get('verdict')!r} ({r.get('variant_error')})")
    if len(skipped) != graphs:
        why.append(f"{len(skipped)} skipped rows, {graphs} expected (one per graph launch)")
    why += [f"launch {r.get('launch_index')}: skipped for {r['skipped']!r}, not the graph"
            for r in skipped if "graph" not in r["skipped"]]
    told = sum(n for reason, n in ((summary or {}).get("skipped") or []) if "graph" in reason)
    if told != graphs:
        why.append(f"the summary's skipped list {(summary or {}).get('skipped')!r}: {graphs} graph dispatches expected")
    if not re.search(rf"^graph {graphs} bitsum=\d+$", plain or "", re.M):
        why.append("the plain run printed no graph line")
    return why


def triton_checks(rc: int, plain: str, prof: str, rows: list, summary) -> list:
    """The Triton variant (another BLOCK, same launch): a row per call site with a speedup,
    `identical` or `within tolerance`; the app's output as in a plain run."""
    why = _common(rc, plain, prof, rows)
    if len(rows) != 3:
        why.append(f"{len(rows)} rows, 3 expected (three call sites)")
    for r in rows:
        v = r.get("variant") or {}
        if v.get("verdict") not in ("identical", "within tolerance"):
            why.append(f"launch {r.get('launch_index')}: verdict {v.get('verdict')!r} ({r.get('variant_error')})")
        if not isinstance(r.get("speedup"), (int, float)) or r["speedup"] <= 0:
            why.append(f"launch {r.get('launch_index')}: speedup {r.get('speedup')!r}")
    if not summary or not summary.get("geomean_speedup"):
        why.append(f"summary {summary!r}: no geometric-mean speedup")
    return why


def kernel_listing(stdout: str) -> list:
    """The kernels `kreplay list --json` printed: its JSON array, on a line of its own among the
    application's own output (the same stdout); [] when there is none."""
    for line in reversed((stdout or "").splitlines()):
        if line.startswith("["):
            try:
                found = json.loads(line)
            except ValueError:
                continue
            if isinstance(found, list):
                return found
    return []


def train_loop_s(stderr: str):
    """The seconds torch_train_app.py's loop took (its `train loop X s` line on stderr: every
    step but the first, without Python's, torch's and kreplay's start), or None."""
    m = re.search(r"^train loop ([\d.]+) s$", stderr or "", re.M)
    return float(m[1]) if m else None


def train_bench_kernel(listing: list, steps: int, dispatches: int, regex: str):
    """The training step's benchmark kernel from `kreplay list --json` of STEPS steps: the most
    frequent kernel whose mangled or demangled name `regex` finds (the first of equals), as
    (mangled name, launches per step, steps that make `dispatches` launches after the first
    step with two to spare); None when none runs at least once a step."""
    found = [k for k in listing if re.search(regex, k.get("name", "")) or re.search(regex, k.get("demangled", ""))]
    best = max(found, key=lambda k: k.get("count", 0), default=None)
    per_step = (best or {}).get("count", 0) // max(steps, 1)
    if per_step < 1:
        return None
    return best["name"], per_step, -(-dispatches // per_step) + 3


def pass_ns(rows: list, variant: bool) -> int:
    """The GPU time of the passes kreplay added, in ns: the original's beyond the application's
    own launch, and (with `variant`) every variant pass."""
    total = 0
    for r in rows:
        total += sum((r.get("durations_ns") or [])[1:])
        if variant:
            total += sum(((r.get("variant") or {}).get("durations_ns")) or [])
    return total


def pass_overhead_ms(rows: list) -> float:
    """The median over `rows` of each row's `pass_overhead_ns` (an extra pass's wall time beyond
    its kernel: restore, L2 flush, launch, wait, output check), in ms."""
    v = sorted(r.get("pass_overhead_ns") or 0 for r in rows)
    return v[len(v) // 2] / 1e6 if v else 0.0


def median_run(runs: list):
    """The run (a tuple whose first item has `secs`) of median wall time among `runs`."""
    ordered = sorted(runs, key=lambda r: r[0].secs)
    return ordered[len(ordered) // 2]


def bench_figures(plain_s: float, prof_s: float, prof_rows: list, var_s: float, var_rows: list, n: int) -> tuple:
    """(why, figures) of the overhead benchmark: per dispatch, wall time beyond the plain run and
    beyond the passes themselves, for `profile` (its fixed cost, the baseline) and for `profile
    --variant`, in ms. Target (issue 38): what --variant adds beyond its passes <= profile's
    fixed cost; the figures shown either way."""
    why = []
    if len(prof_rows) < n or len(var_rows) < n:
        why.append(f"{len(prof_rows)} profile rows and {len(var_rows)} variant rows, {n} expected each")
        return why, ""
    fixed = ((prof_s - plain_s) * 1e3 - pass_ns(prof_rows, False) / 1e6) / n
    total = ((var_s - plain_s) * 1e3 - pass_ns(var_rows, True) / 1e6) / n
    added = total - fixed
    figures = (f"{n} dispatches: --variant adds {added:.3f} ms per dispatch beyond its passes "
               f"({total:.3f} ms in all); profile's own fixed cost {fixed:.3f} ms per dispatch (baseline); "
               f"wall time of an extra pass beyond its kernel, median: {pass_overhead_ms(prof_rows):.3f} ms "
               f"(profile), {pass_overhead_ms(var_rows):.3f} ms (--variant)")
    # Issue 38's target: what the variant adds (its comparison, the scan for writes outside
    # the write set, the module's one load) no more than profile's fixed cost.
    if added > max(fixed, 0.05):
        why.append(f"--variant adds {added:.3f} ms > profile's fixed cost {fixed:.3f} ms per dispatch")
    return why, figures
