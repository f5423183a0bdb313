"""Every ```python block of the README runs (issue 36: the README cannot drift), in order, in
one namespace (a later block uses what an earlier one made), from the repository's root so
the testdata paths are the README's own. A block whose first line is `# needs a GPU` or
`# needs PyTorch` runs too: where that is missing it must fail the way the README says
(RuntimeError naming the GPU or driver; ImportError naming `pip install torch`)."""

import importlib.util
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
FENCE = re.compile(r"^```python[^\n]*\n(.*?)^```", re.M | re.S)


def python_blocks(text: str) -> list[tuple[int, str]]:
    """Each ```python block of a Markdown text: (line of its first code line, code)."""
    return [(text.count("\n", 0, m.start(1)) + 1, m.group(1)) for m in FENCE.finditer(text)]


def has_gpu() -> bool:
    return Path("/dev/nvidiactl").exists()


def has_torch() -> bool:
    return importlib.util.find_spec("torch") is not None


# What a block needs, by its first line, and how it must fail where that is missing.
NEEDS = {
    "# needs a GPU": (has_gpu, RuntimeError, r"(?i)cuda|gpu|driver"),
    "# needs PyTorch": (has_torch, ImportError, r"pip install torch"),
}


def run_block(line: int, code: str, namespace: dict) -> None:
    """Runs one block; its tracebacks name README.md and the README's own line numbers."""
    compiled = compile("\n" * (line - 1) + code, str(README), "exec")
    need = NEEDS.get(code.splitlines()[0].strip()) if code.strip() else None
    if need is None or need[0]():
        exec(compiled, namespace)
        return
    _, error, message = need
    with pytest.raises(error, match=message):
        exec(compiled, namespace)


def test_every_python_example_of_the_readme_runs(monkeypatch):
    blocks = python_blocks(README.read_text())
    assert len(blocks) >= 4, "the README's Python section lost its examples"
    monkeypatch.chdir(ROOT)
    namespace: dict = {"__name__": "readme"}
    for line, code in blocks:
        run_block(line, code, namespace)


def test_blocks_are_found_with_their_lines_and_only_python_ones():
    text = "intro\n```python\nx = 1\n```\n```\nnot = python\n```\n```python title\ny = x + 1\nz = 2\n```\n"
    assert python_blocks(text) == [(3, "x = 1\n"), (9, "y = x + 1\nz = 2\n")]


def test_a_failing_block_fails_the_test_naming_the_readme_line():
    with pytest.raises(ZeroDivisionError) as e:
        run_block(40, "x = 1\n1 / 0\n", {})
    assert e.traceback[-1].lineno + 1 == 41 and str(README) in str(e.traceback[-1].path)


def test_a_block_needing_what_is_missing_must_fail_as_the_readme_says(monkeypatch):
    monkeypatch.setitem(NEEDS, "# needs a GPU", (lambda: False, RuntimeError, "no GPU"))
    run_block(1, "# needs a GPU\nraise RuntimeError('no GPU')\n", {})
    with pytest.raises(pytest.fail.Exception):
        run_block(1, "# needs a GPU\nx = 1\n", {})  # ran without the error the README promised
