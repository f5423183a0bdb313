#!/usr/bin/env python3
"""Load `kreplay play --trace` files with Perfetto's own trace processor and say what it saw.

    scripts/perfetto-check.py [--shell PATH] TRACE.json...

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
    """Prints what Perfetto made of `path`; returns its problems."""
    problems = []
    with open_trace(path, shell) as tp:
        errors = rows(
            tp,
            "select name, idx, severity, source, value from stats "
            "where severity in ('error', 'data_loss') and value > 0",
        )
        slices = rows(
            tp,
            "select thread.name as thread, count(*) as n, "
            "round(sum(slice.dur) / 1e3, 3) as total_us from slice "
            "join thread_track on slice.track_id = thread_track.id "
            "join thread using (utid) group by slice.track_id order by thread.tid",
        )
        threads = rows(tp, "select tid, name from thread where name is not null order by tid")
        counters = rows(
            tp,
            "select track.name as name, count(*) as n from counter "
            "join track on counter.track_id = track.id group by track.id order by track.name",
        )
        processes = rows(tp, "select pid, name from process where name is not null")
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


def main():
    args = sys.argv[1:]
    shell = os.environ.get("KREPLAY_TRACE_PROCESSOR")
    if args[:1] == ["--shell"] and len(args) >= 2:
        shell, args = args[1], args[2:]
    if not args:
        sys.exit("usage: scripts/perfetto-check.py [--shell PATH] TRACE.json...")
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
