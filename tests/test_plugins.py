"""pylint and flake8 load kvlint the way their users expect."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

BAD = '''import torch_npu


def decode(q, k, v):
    return torch_npu.npu_fused_infer_attention_score_v2(q, k, v, num_heads=8)
'''


def run(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", *args], capture_output=True, text=True, cwd=cwd, check=False)


@pytest.fixture
def bad(tmp_path: Path) -> Path:
    (tmp_path / "bad.py").write_text(BAD)
    return tmp_path


def test_pylint_enables_every_kvlint_message_next_to_its_own(bad: Path) -> None:
    result = run("pylint", "--load-plugins", "kvlint", "--score=n", "bad.py", cwd=bad)
    assert "bad.py:5:65: E7102: 'num_heads' is the v1 name" in result.stdout
    assert "W7104" in result.stdout and "(fa-default-scale)" in result.stdout
    assert "missing-module-docstring" in result.stdout


def test_pylint_enable_kvlint_alone(bad: Path) -> None:
    result = run("pylint", "--load-plugins", "kvlint", "--disable=all", "--enable=kvlint", "--score=n", "bad.py",
                 cwd=bad)
    ids = sorted(line.split(": ")[1] for line in result.stdout.splitlines() if line.startswith("bad.py"))
    assert ids == ["E7102", "W7104"]


def test_pylint_disable_comment_silences_by_symbol(bad: Path) -> None:
    source = BAD.replace("num_heads=8)", "num_heads=8)  # pylint: disable=fa-version-mix")
    (bad / "bad.py").write_text(source)
    result = run("pylint", "--load-plugins", "kvlint", "--disable=all", "--enable=kvlint", "--score=n", "bad.py",
                 cwd=bad)
    assert "E7102" not in result.stdout and "W7104" in result.stdout


def test_pylint_lists_kvlint_messages(bad: Path) -> None:
    result = run("pylint", "--load-plugins", "kvlint", "--list-msgs-enabled", cwd=bad)
    assert "fa-version-mix (E7102)" in result.stdout


def test_flake8_reports_codes_with_one_based_columns(bad: Path) -> None:
    result = run("flake8", "--select", "KVL", "bad.py", cwd=bad)
    assert result.stdout.splitlines() == [
        "bad.py:5:12: KVL104 npu_fused_infer_attention_score_v2 called without 'softmax_scale': the default is "
        "1.0, not 1/sqrt(head_dim); pass softmax_scale=1.0 / math.sqrt(head_dim)",
        "bad.py:5:66: KVL102 'num_heads' is the v1 name; npu_fused_infer_attention_score_v2 takes "
        "'num_query_heads'",
    ]
    assert result.returncode == 1


def test_flake8_noqa_with_code(bad: Path) -> None:
    (bad / "bad.py").write_text(BAD.replace("num_heads=8)", "num_heads=8)  # noqa: KVL102"))
    result = run("flake8", "--select", "KVL", "bad.py", cwd=bad)
    assert "KVL102" not in result.stdout and "KVL104" in result.stdout


def test_flake8_version_names_the_plugin(bad: Path) -> None:
    assert "kvlint" in run("flake8", "--version", cwd=bad).stdout
