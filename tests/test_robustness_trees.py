"""The ``kvlint`` command over large real trees: the installed standard library and torch's Python sources.

Neither tree calls the torch_npu operators, so the expectation is near silence: no traceback, no file kvlint
cannot read, a KVL000 only where Python itself cannot compile the file (the standard library ships a few
deliberately broken test files), and no rule finding that is not defended in ``DEFENDED`` below (a true
finding, with the reason). Anything else is a false positive to fix in the rules. The time is bounded by a
generous subprocess timeout; the figures are recorded in ``benchmarks/RESULTS.md``.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import sysconfig
from collections import Counter
from pathlib import Path

import pytest

TIMEOUT = 900
DEFENDED: dict[tuple[str, int, str], str] = {}
"""(path relative to the tree, line, code) -> why the finding is true. Empty: none so far."""


def kvlint_json(tree: Path, *args: str) -> list[dict]:
    try:
        out = subprocess.run([sys.executable, "-m", "kvlint", "--format", "json", *args, str(tree)],
                             capture_output=True, text=True, timeout=TIMEOUT, check=False)
    except subprocess.TimeoutExpired:
        pytest.fail(f"kvlint over {tree} did not finish within {TIMEOUT} s")
    assert "Traceback" not in out.stderr, out.stderr[-5000:]
    assert "kvlint: error:" not in out.stderr, out.stderr[-5000:]
    assert out.returncode in (0, 1), (out.returncode, out.stderr[-5000:])
    return json.loads(out.stdout)


def python_rejects(path: str) -> bool:
    """True when Python itself cannot compile the file."""
    try:
        compile(Path(path).read_bytes(), path, "exec", dont_inherit=True)
    except (SyntaxError, ValueError):
        return True
    return False


def check_tree(tree: Path, findings: list[dict]) -> Counter:
    for finding in findings:
        if finding["code"] == "KVL000":
            assert python_rejects(finding["path"]), f"KVL000 on a file Python compiles: {finding}"
    undefended = [f for f in findings if f["code"] != "KVL000"
                  and (str(Path(f["path"]).relative_to(tree)), f["line"], f["code"]) not in DEFENDED]
    assert not undefended, "false positives (or true findings to defend in DEFENDED):\n" + "\n".join(
        f"{f['path']}:{f['line']}: {f['code']} {f['message']}" for f in undefended)
    return Counter(f["code"] for f in findings)


def test_standard_library() -> None:
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    assert (stdlib / "os.py").is_file()
    check_tree(stdlib, kvlint_json(stdlib))


def test_torch_python_sources_in_parallel() -> None:
    spec = importlib.util.find_spec("torch")
    if spec is None or spec.origin is None:
        pytest.skip("torch is not installed (it is in the probe extra)")
    torch_tree = Path(spec.origin).parent
    check_tree(torch_tree, kvlint_json(torch_tree, "-j", "2"))
