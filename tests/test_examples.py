"""examples/: the model runs and checks itself; the linter and the probe catch each buggy variant.

The examples run as a user runs them, in a subprocess from the repository root: ``python examples/...``,
``KVLINT_PROBE=1`` for the probe (activated by the start-up hook that installing kvlint adds), and
``python -m kvlint --format json`` for the linter.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
BUGGY = EXAMPLES / "buggy"

STATIC_FINDINGS = {
    "v1_names_in_v2_kwargs.py": {"KVL102": 2},
    "float16_additive_mask.py": {"KVL201": 1},
    "square_mask_sparse3.py": {"KVL202": 1},
    "int64_block_table.py": {"KVL301": 2},
    "kv_len_advanced_in_layer.py": {"KVL305": 1},
    "top_left_causal_over_cache.py": {"KVL206": 1},
}
"""Each buggy file -> the codes kvlint reports in it, with their counts (one per faulty call or line)."""

PROBE_FINDINGS = {
    "kv_len_advanced_in_layer.py": {"KVL505"},
    "int64_block_table.py": {"KVL301"},
    "float16_additive_mask.py": {"KVL201"},
}
"""Buggy files that run to the end on the emulator -> the codes of the probe's JSON report."""


def _environment(**extra: str) -> dict[str, str]:
    """The current environment without any KVLINT_* setting, plus ``extra``."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("KVLINT_")}
    return {**env, **extra}


def _run(args: list[str], **extra_env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *args], cwd=ROOT, env=_environment(**extra_env), capture_output=True, text=True,
        timeout=300,
    )


@pytest.fixture(scope="module")
def lint_findings() -> dict[str, Counter[str]]:
    """kvlint over examples/: relative path -> Counter of codes (files without findings absent)."""
    result = _run(["-m", "kvlint", "--format", "json", "examples"])
    assert result.returncode in (0, 1), result.stderr
    found: dict[str, Counter[str]] = {}
    for finding in json.loads(result.stdout):
        found.setdefault(Path(finding["path"]).as_posix(), Counter())[finding["code"]] += 1
    return found


def _probe_report(script: str, tmp_path: Path) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    """Run ``script`` with KVLINT_PROBE=1; the process and the sorted codes of its JSON report."""
    report = tmp_path / "probe.json"
    result = _run([script], KVLINT_PROBE="1", KVLINT_PROBE_REPORT=str(report))
    assert report.exists(), f"no probe report (is kvlint installed with its start-up hook?)\n{result.stderr}"
    return result, sorted({finding["code"] for finding in json.loads(report.read_text())["findings"]})


def test_run_py_generates_and_passes_its_checks() -> None:
    result = _run(["examples/run.py"])
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert "PASS incremental decode == full causal forward" in result.stdout
    assert "PASS chunked prefill == one-shot prefill" in result.stdout
    assert not [line for line in lines if line.startswith("FAIL")]
    if importlib.util.find_spec("torch_npu") is None:
        assert "torch_npu is not installed: using kvlint's CPU emulator" in result.stdout
    assert "KV cache: 512 bytes per token" in result.stdout  # 2 layers x (K, V) x 2 heads x 32 x fp16
    assert "KV cache for this run:" in result.stdout


def test_every_buggy_example_has_its_expected_findings_listed() -> None:
    assert sorted(path.name for path in BUGGY.glob("*.py")) == sorted(STATIC_FINDINGS)


def test_run_py_and_the_shared_model_are_clean(lint_findings: dict[str, Counter[str]]) -> None:
    assert lint_findings.get("examples/run.py") is None
    assert lint_findings.get("examples/model.py") is None


@pytest.mark.parametrize("name", sorted(STATIC_FINDINGS))
def test_kvlint_reports_exactly_the_mistake_of_each_buggy_example(
    name: str, lint_findings: dict[str, Counter[str]]
) -> None:
    assert lint_findings.get(f"examples/buggy/{name}") == Counter(STATIC_FINDINGS[name])


def test_run_py_is_clean_under_the_probe(tmp_path: Path) -> None:
    result, codes = _probe_report("examples/run.py", tmp_path)
    assert result.returncode == 0, result.stderr
    assert codes == []
    assert "kvlint probe summary" in result.stderr


@pytest.mark.parametrize("name", sorted(PROBE_FINDINGS))
def test_the_probe_reports_the_mistake_of_a_running_buggy_example(name: str, tmp_path: Path) -> None:
    result, codes = _probe_report(f"examples/buggy/{name}", tmp_path)
    assert "done in" in result.stdout, result.stderr  # ran to the end
    assert codes == sorted(PROBE_FINDINGS[name])


def test_kv_len_in_a_layer_also_fails_the_examples_own_checks() -> None:
    result = _run(["examples/buggy/kv_len_advanced_in_layer.py"])
    assert result.returncode == 1
    assert "FAIL incremental decode == full causal forward" in result.stdout
    assert "FAIL chunked prefill == one-shot prefill" in result.stdout


def test_top_left_causal_mask_breaks_only_chunked_prefill() -> None:
    result = _run(["examples/buggy/top_left_causal_over_cache.py"])
    assert result.returncode == 1
    assert "PASS incremental decode == full causal forward" in result.stdout
    assert "FAIL chunked prefill == one-shot prefill" in result.stdout


@pytest.mark.parametrize(
    ("name", "error"),
    [("v1_names_in_v2_kwargs.py", "RuntimeError"), ("square_mask_sparse3.py", "ValueError")],
)
def test_buggy_examples_the_operator_refuses_stop_at_the_first_call(name: str, error: str) -> None:
    result = _run([f"examples/buggy/{name}"])
    assert result.returncode == 1
    assert f"{error}:" in result.stderr
    assert "done in" not in result.stdout
