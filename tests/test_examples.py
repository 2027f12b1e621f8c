"""examples/: the model runs and checks itself; the linter and the probe catch each buggy variant.

The examples run as a user runs them, in a subprocess from the repository root: ``python examples/...``,
``KVLINT_PROBE=1`` for the probe (activated by the start-up hook that installing kvlint adds), and
``python -m kvlint --format json`` for the linter. The probe never changes what a program computes, so a
buggy example's own PASS/FAIL lines are read from its probed run.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import subprocess
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BUGGY = ROOT / "examples" / "buggy"
DECODE_CHECK = "incremental decode == full causal forward"
CHUNKED_CHECK = "chunked prefill == one-shot prefill"


@dataclass(frozen=True)
class Expected:
    """What each front-end shows for one buggy example."""

    static: dict[str, int]
    """kvlint's codes in the file, with their counts (one per faulty call or line)."""
    probe: frozenset[str]
    """The codes of the probe's JSON report."""
    failing: tuple[str, ...] = ()
    """The example's own checks that print FAIL (the others print PASS)."""
    raises: str | None = None
    """The exception the first attention call raises, on the emulator as on the device."""


BUGGY_EXAMPLES = {
    "v1_names_in_v2_kwargs.py": Expected({"KVL102": 2}, frozenset(), raises="RuntimeError"),
    "float16_additive_mask.py": Expected({"KVL201": 1}, frozenset({"KVL201"}), raises="RuntimeError"),
    "square_mask_sparse3.py": Expected({"KVL202": 1}, frozenset({"KVL202"}), raises="RuntimeError"),
    "int64_block_table.py": Expected({"KVL301": 2}, frozenset({"KVL301"})),
    "kv_len_advanced_in_layer.py": Expected(
        {"KVL305": 1}, frozenset({"KVL505", "KVL509", "KVL510"}), failing=(DECODE_CHECK, CHUNKED_CHECK)
    ),
    "top_left_causal_over_cache.py": Expected({"KVL206": 1}, frozenset(), failing=(CHUNKED_CHECK,)),
}
"""The float16 mask raises at the first prefill, as on the device (FIA-C20: the 2048 template too must be
bool/int8/uint8); the int64 block table gives right numbers on the emulator (it indexes with any integer
dtype); the top-left causal mask is a valid call that only the model's own chunked-prefill check exposes.
With kv_len advanced inside the layer, layer 1 writes past what it reads (KVL509) and reads what nobody
wrote (KVL510), which proves the drift (KVL505)."""


def _environment(**extra: str) -> dict[str, str]:
    """The current environment without any KVLINT_* setting, plus ``extra``."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("KVLINT_")}
    return {**env, **extra}


def _run(args: list[str], **extra_env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *args], cwd=ROOT, env=_environment(**extra_env), capture_output=True, text=True,
        timeout=600,
    )


def _probed(script: str, tmp_path: Path) -> tuple[subprocess.CompletedProcess[str], set[str]]:
    """Run ``script`` with KVLINT_PROBE=1; the process and the codes of its JSON report."""
    report = tmp_path / "probe.json"
    result = _run([script], KVLINT_PROBE="1", KVLINT_PROBE_REPORT=str(report))
    assert report.exists(), f"no probe report (is kvlint installed with its start-up hook?)\n{result.stderr}"
    return result, {finding["code"] for finding in json.loads(report.read_text())["findings"]}


@pytest.fixture(scope="module")
def lint_findings() -> dict[str, Counter[str]]:
    """kvlint over examples/: path -> Counter of codes (files without findings are absent)."""
    result = _run(["-m", "kvlint", "--format", "json", "examples"])
    assert result.returncode in (0, 1), result.stderr
    found: dict[str, Counter[str]] = {}
    for finding in json.loads(result.stdout):
        found.setdefault(Path(finding["path"]).as_posix(), Counter())[finding["code"]] += 1
    return found


def _real_torch_npu_installed() -> bool:
    """Asked of the installed distributions, not of sys.modules (other tests install the emulator there)."""
    try:
        importlib.metadata.distribution("torch_npu")
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


def test_run_py_generates_passes_its_checks_and_prints_the_kv_budget() -> None:
    result = _run(["examples/run.py"])
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"PASS {DECODE_CHECK}" in result.stdout
    assert f"PASS {CHUNKED_CHECK}" in result.stdout
    assert "FAIL" not in result.stdout
    assert result.stdout.count("generated [") == 3  # a batch of three prompts of different lengths
    assert "KV cache: 512 bytes per token" in result.stdout  # 2 layers x (K, V) x 2 heads x 32 x fp16
    assert "KV cache for this run: 39 tokens in 3 sequences = 19968 bytes" in result.stdout
    if not _real_torch_npu_installed():
        assert "torch_npu is not installed: using kvlint's CPU emulator" in result.stdout


def test_run_py_is_clean_under_the_probe(tmp_path: Path) -> None:
    result, codes = _probed("examples/run.py", tmp_path)
    assert result.returncode == 0, result.stderr
    assert codes == set()
    assert "kvlint probe summary" in result.stderr


def test_run_py_and_the_shared_model_are_clean_under_kvlint(lint_findings: dict[str, Counter[str]]) -> None:
    assert "examples/run.py" not in lint_findings
    assert "examples/model.py" not in lint_findings


def test_every_buggy_example_has_its_expectations_listed() -> None:
    assert sorted(path.name for path in BUGGY.glob("*.py")) == sorted(BUGGY_EXAMPLES)


@pytest.mark.parametrize("name", sorted(BUGGY_EXAMPLES))
def test_kvlint_reports_exactly_the_mistake_of_each_buggy_example(
    name: str, lint_findings: dict[str, Counter[str]]
) -> None:
    assert lint_findings.get(f"examples/buggy/{name}") == Counter(BUGGY_EXAMPLES[name].static)


@pytest.mark.parametrize("name", sorted(BUGGY_EXAMPLES))
def test_each_buggy_example_under_the_probe(name: str, tmp_path: Path) -> None:
    expected = BUGGY_EXAMPLES[name]
    result, codes = _probed(f"examples/buggy/{name}", tmp_path)
    assert codes == expected.probe
    if expected.raises:
        assert result.returncode == 1
        assert f"{expected.raises}:" in result.stderr
        assert "PASS" not in result.stdout and "FAIL" not in result.stdout
        return
    assert result.returncode == (1 if expected.failing else 0), result.stderr
    for check in (DECODE_CHECK, CHUNKED_CHECK):
        assert f"{'FAIL' if check in expected.failing else 'PASS'} {check}" in result.stdout
