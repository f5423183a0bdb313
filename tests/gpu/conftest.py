"""Fixtures and reporting of the GPU suite (see CONTRIBUTING.md, "Testing on a GPU").

Options (or their environment variables):
  --kreplay-bin DIR  (KREPLAY_BIN_DIR)  kreplay, libkreplay_record.so and the helpers; default dist/
  --gpu-work DIR     (KREPLAY_WORK)     the run folder: apps, captures, one folder per case,
                                        results.jsonl; default a new /tmp/kreplay-gpu-*. Give the
                                        same folder to a second invocation to reuse its apps and
                                        captures (the serial half of a parallel run).
  --arch SM          (KREPLAY_ARCH)     nvcc's target, default sm_90
  --gpus N           (KREPLAY_GPUS)     with xdist: worker gwK sees GPU K % N only

Nothing here touches a GPU at collection: `pytest tests/gpu --collect-only` works anywhere,
and the GPU fixtures fail at setup with what is missing.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import cases as C  # noqa: E402
import krsuite  # noqa: E402
from prepared import Apps, Captures, ROOT  # noqa: E402

RUN_ENV = "KREPLAY_GPU_RUN"  # the run folder, handed from the controller to xdist workers
CHILD_ENV = {"PYTHONUNBUFFERED": "1", "XLA_PYTHON_CLIENT_PREALLOCATE": "false"}
DEFAULT_TIMEOUT = 900


def pytest_addoption(parser):
    g = parser.getgroup("kreplay GPU suite")
    g.addoption("--kreplay-bin", default=os.environ.get("KREPLAY_BIN_DIR", str(ROOT / "dist")),
                help="folder holding kreplay, libkreplay_record.so, craft_hostile, chunks_gpu (default dist/)")
    g.addoption("--gpu-work", default=os.environ.get("KREPLAY_WORK"), help="run folder (default: a new one in /tmp)")
    g.addoption("--arch", default=os.environ.get("KREPLAY_ARCH", "sm_90"), help="nvcc -arch (default sm_90)")
    g.addoption("--gpus", type=int, default=int(os.environ.get("KREPLAY_GPUS", "0") or 0),
                help="with -n: each worker sees one GPU (CUDA_VISIBLE_DEVICES = worker index %% N)")


_CONFIG: dict = {}


def _is_worker(config) -> bool:
    return hasattr(config, "workerinput")


def pytest_configure(config):
    for m in ("gpu: needs a CUDA GPU and the suite's binaries",
              "mpi: two ranks (mpirun or torchrun)",
              "multigpu: needs more than one GPU (no case today)",
              "timed: measures time: runs alone (not under -n)",
              "counters: takes GPU performance counters (ncu, CUPTI profiling): runs alone",
              "bench: a benchmark: runs alone",
              "serial: timed, counters or bench: skipped under xdist, run these without -n"):
        config.addinivalue_line("markers", m)
    _CONFIG["config"] = config
    if not config.pluginmanager.hasplugin("timeout"):
        config.addinivalue_line("markers", "timeout(seconds): pytest-timeout's (not installed here)")
    if _is_worker(config):
        n = config.getoption("--gpus")
        wid = os.environ.get("PYTEST_XDIST_WORKER", "")
        if n > 0 and wid.startswith("gw"):
            os.environ["CUDA_VISIBLE_DEVICES"] = str(int(wid[2:]) % n)
        return
    if RUN_ENV not in os.environ:
        work = config.getoption("--gpu-work")
        if work:
            folder = Path(work)
        else:
            folder = Path(tempfile.gettempdir()) / f"kreplay-gpu-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}"
        os.environ[RUN_ENV] = str(folder.resolve())
    config._kreplay_rows = []


def pytest_collection_modifyitems(config, items):
    for item in items:
        names = {m.name for m in item.iter_markers()}
        if names & set(C.SERIAL_MARKS):
            item.add_marker(pytest.mark.serial)
        if "timeout" not in names:
            item.add_marker(pytest.mark.timeout(DEFAULT_TIMEOUT))


def pytest_runtest_setup(item):
    if item.get_closest_marker("serial") and os.environ.get("PYTEST_XDIST_WORKER"):
        why = sorted({m.name for m in item.iter_markers()} & set(C.SERIAL_MARKS))
        pytest.skip(f"serial case ({', '.join(why)}): run it without -n, e.g. pytest tests/gpu -m serial")


# -- fixtures -----------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def run_dir() -> Path:
    d = Path(os.environ.get(RUN_ENV) or tempfile.mkdtemp(prefix="kreplay-gpu-"))
    d.mkdir(parents=True, exist_ok=True)
    return d


@pytest.fixture(scope="session")
def bins(pytestconfig) -> Path:
    d = Path(pytestconfig.getoption("--kreplay-bin")).resolve()
    missing = [f for f in ("kreplay", "libkreplay_record.so") if not (d / f).is_file()]
    if missing:
        pytest.fail(f"{', '.join(missing)} not in {d}: run scripts/dist.sh on the build machine and copy dist/, "
                    "or pass --kreplay-bin DIR (KREPLAY_BIN_DIR)", pytrace=False)
    return d


@pytest.fixture(scope="session")
def kr(bins) -> Path:
    return bins / "kreplay"


@pytest.fixture(scope="session")
def child_env() -> dict:
    return dict(CHILD_ENV)


@pytest.fixture(scope="session")
def apps(run_dir, pytestconfig) -> Apps:
    if not shutil.which("nvcc"):
        pytest.fail("nvcc not on PATH (the test apps are built with it): export PATH=/usr/local/cuda/bin:$PATH",
                    pytrace=False)
    return Apps(run_dir / "apps", pytestconfig.getoption("--arch"), os.environ.get("CUDA_HOME", "/usr/local/cuda"))


@pytest.fixture(scope="session")
def captures(run_dir, kr, apps, child_env) -> Captures:
    return Captures(run_dir / "rec", kr, apps, child_env)


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name).strip("_")[:120]


@pytest.fixture
def case(request, run_dir, child_env) -> krsuite.Runner:
    """The case's command runner, in a folder of its own (run/cases/NAME)."""
    r = krsuite.Runner(run_dir / "cases" / _safe(request.node.name), env=child_env)
    request.node._kreplay_runner = r
    return r


@pytest.fixture
def row(request) -> dict:
    """The case's row of the summary table, filled by the test."""
    r = {"case": case_name(request.node)}
    request.node._kreplay_row = r
    return r


@pytest.fixture
def app(apps):
    """`app(argv)`: argv with its placeholders resolved; a failed build fails this case."""
    from prepared import AppBuildError

    def resolve(argv):
        try:
            return apps.resolve(argv)
        except AppBuildError as e:
            pytest.fail(str(e), pytrace=False)

    return resolve


def case_name(item) -> str:
    fn = getattr(item, "function", None)
    name = getattr(fn, "case_name", None)
    if name:
        return name
    cs = getattr(item, "callspec", None)
    return getattr(fn, "case_prefix", "") + cs.id if cs else item.name


# -- reporting ----------------------------------------------------------------------------------


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    runner = getattr(item, "_kreplay_runner", None)
    if rep.when == "call" and rep.passed and runner is not None:
        panics = krsuite.runner_panics(runner.log)
        if panics:
            # Every case: a `kreplay record`/`profile` whose application's stderr shows a
            # recorder panic fails it (caught in the recorder, but the message is the app's).
            rep.outcome = "failed"
            rep.longrepr = "the recorder panicked (caught, its message on the application's stderr): " + " | ".join(panics[:3])
            row = getattr(item, "_kreplay_row", None)
            if row is not None and not row.get("why"):
                row["why"] = rep.longrepr
    if rep.failed and runner is not None and (runner.log or runner.notes):
        kr = item.config.getoption("--kreplay-bin") + "/kreplay"

        def info(p):
            import subprocess

            try:
                return subprocess.run([kr, "info", str(p)], capture_output=True, text=True, timeout=60).stdout[-3000:]
            except Exception as e:  # the report must not fail the report
                return f"(kreplay info failed: {e})"

        rep.sections.append(("kreplay: commands, exit status, output tails", runner.report(info)))
    is_case = hasattr(item, "_kreplay_row") or item.get_closest_marker("gpu") is not None
    if is_case and (rep.when == "call" or (rep.when == "setup" and not rep.passed)):
        r = dict(getattr(item, "_kreplay_row", None) or {"case": case_name(item)})
        if rep.failed and not r.get("why"):
            r["why"] = krsuite.tail(str(rep.longrepr), 600) if rep.longrepr else ""
        rep.user_properties = list(rep.user_properties) + [("kreplay_row", json.dumps(r, default=str))]


def _result(rep) -> str:
    xf = getattr(rep, "wasxfail", None)
    if rep.when == "setup":
        if rep.skipped:
            return "XFAIL" if xf is not None else "SKIP: " + _skip_reason(rep)
        return "ERROR"
    if rep.passed:
        return "XPASS" if xf is not None else "PASS"
    if rep.skipped:
        return "XFAIL" if xf is not None else "SKIP: " + _skip_reason(rep)
    return "FAIL"


def _skip_reason(rep) -> str:
    lr = rep.longrepr
    if isinstance(lr, tuple) and len(lr) == 3:
        return str(lr[2]).replace("Skipped: ", "")
    return str(lr)[:200]


def pytest_runtest_logreport(report):
    config = _CONFIG.get("config")
    if config is None or _is_worker(config):
        return
    for k, v in report.user_properties:
        if k == "kreplay_row":
            r = json.loads(v)
            r["result"] = _result(report)
            config._kreplay_rows.append(r)


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    rows = getattr(config, "_kreplay_rows", None)
    if _is_worker(config) or not rows:
        return
    rows.sort(key=lambda r: r.get("case", ""))
    tr = terminalreporter
    tr.section("kreplay GPU suite")
    for line in krsuite.format_table(rows):
        tr.write_line(line)
    folder = Path(os.environ[RUN_ENV])
    folder.mkdir(parents=True, exist_ok=True)
    out = folder / "results.jsonl"
    with open(out, "a") as f:
        for r in rows:
            f.write(json.dumps(krsuite.table_row(r)) + "\n")
    tr.write_line("")
    tr.write_line(f"rows appended to {out}; work files under {folder}")
    tr.write_line(krsuite.count_line(rows))
