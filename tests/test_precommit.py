"""The pre-commit hooks, run by the real ``pre-commit try-repo`` against this checkout's HEAD (pre-commit
installs kvlint from it into a fresh environment: the package index must be reachable)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.conftest import ROOT

BAD = '''import torch_npu


def decode(q, k, v):
    return torch_npu.npu_fused_infer_attention_score_v2(q, k, v, num_heads=8, softmax_scale=0.1)
'''
GOOD = BAD.replace("num_heads=8", "num_query_heads=8")


def test_manifest_declares_the_hooks_as_specified() -> None:
    hooks = {hook["id"]: hook for hook in yaml.safe_load((ROOT / ".pre-commit-hooks.yaml").read_text())}
    assert set(hooks) == {"kvlint", "kvlint-pylint", "kvlint-fix"}
    for hook in hooks.values():
        assert hook["language"] == "python" and hook["types_or"] == ["python", "pyi"] and "types" not in hook
    assert hooks["kvlint"]["entry"] == "kvlint --force-exclude"
    assert hooks["kvlint-pylint"]["require_serial"] is True
    assert hooks["kvlint-pylint"]["entry"].split()[:4] == [
        "pylint", "--load-plugins=kvlint", "--disable=all", "--enable=kvlint"]
    assert hooks["kvlint-pylint"]["additional_dependencies"] == ["pylint>=3.0,<5"]  # pylint is an extra
    assert hooks["kvlint-fix"]["entry"] == "kvlint --fix --force-exclude"
    assert hooks["kvlint-fix"]["additional_dependencies"] == ["libcst>=1.1"]


def _git(*args: str, cwd: Path) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


def _try_repo(hook: str, cwd: Path, ref: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PRE_COMMIT_HOME": str(cwd.parent / "pre-commit-home"), "PRE_COMMIT_COLOR": "never"}
    return subprocess.run(
        [sys.executable, "-m", "pre_commit", "try-repo", str(ROOT), hook, "--ref", ref, "--all-files", "--color",
         "never"],
        cwd=cwd, capture_output=True, text=True, env=env, timeout=900,
    )


@pytest.mark.slow
@pytest.mark.parametrize("hook", ["kvlint", "kvlint-pylint"])
def test_hook_fails_naming_the_code_and_passes_once_fixed(tmp_path: Path, hook: str) -> None:
    ref = _git("rev-parse", "HEAD", cwd=ROOT)
    user = tmp_path / "user"
    user.mkdir()
    _git("init", "-q", cwd=user)
    (user / "model.py").write_text(BAD)
    _git("add", "model.py", cwd=user)

    failing = _try_repo(hook, user, ref)
    assert failing.returncode == 1, failing.stdout + failing.stderr
    assert "Failed" in failing.stdout
    assert ("KVL102" if hook == "kvlint" else "E7102") in failing.stdout
    assert "model.py:5:" in failing.stdout

    (user / "model.py").write_text(GOOD)
    _git("add", "model.py", cwd=user)
    passing = _try_repo(hook, user, ref)
    assert passing.returncode == 0, passing.stdout + passing.stderr
    assert "Passed" in passing.stdout


CHAINED = """import torch


def decode(q, k, v, kv_lens):
    tables = torch.arange(64).view(4, 16)
    return torch.npu_fused_infer_attention_score(q, k, v, num_heads=8, scale=0.1, block_table=tables,
                                                 block_size=128, actual_seq_lengths_kv=kv_lens)
"""
"""Only KVL112 is reported at first; its fix makes the call resolvable, and then the int64 block table."""
CHAINED_FIXED = CHAINED.replace("import torch\n", "import torch\nimport torch_npu\n", 1).replace(
    "torch.arange(64)", "torch.arange(64, dtype=torch.int32)").replace("torch.npu_fused", "torch_npu.npu_fused")


@pytest.mark.slow
@pytest.mark.parametrize(("before", "after"), [(BAD, GOOD), (CHAINED, CHAINED_FIXED)],
                         ids=["one-fix", "a-fix-uncovers-another"])
def test_fix_hook_rewrites_the_file_in_one_run_then_passes(tmp_path: Path, before: str, after: str) -> None:
    ref = _git("rev-parse", "HEAD", cwd=ROOT)
    user = tmp_path / "user"
    user.mkdir()
    _git("init", "-q", cwd=user)
    (user / "model.py").write_text(before)
    (user / "stub.pyi").write_text("import torch\ndef f(x: torch.Tensor) -> torch.Tensor: ...\n")
    _git("add", "model.py", "stub.pyi", cwd=user)

    fixing = _try_repo("kvlint-fix", user, ref)
    assert fixing.returncode == 1, fixing.stdout + fixing.stderr
    assert "files were modified by this hook" in fixing.stdout
    assert (user / "model.py").read_text() == after

    _git("add", "model.py", cwd=user)
    second = _try_repo("kvlint-fix", user, ref)
    assert second.returncode == 0, second.stdout + second.stderr
