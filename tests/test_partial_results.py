"""A file kvlint reads but does not analyse (valid code nested deeper than its parser can follow) makes the
results partial, and every format of the ``kvlint`` command says so, naming the file and why; the other
files are reported as usual and the exit status is that of their findings."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest

from tests.conftest import ROOT

SCHEMA = json.loads((ROOT / "tests" / "data" / "sarif" / "sarif-schema-2.1.0.json").read_text(encoding="utf-8"))
CALL = "    return torch_npu.npu_fused_infer_attention_score(q, k, v, num_heads=8, scale=0.1, input_layuot='BSND')\n"
"""One KVL101 (``input_layuot``)."""
WHY = "deep.py: skipped: valid Python nested deeper than kvlint's parser can follow"
INCOMPLETE = "kvlint: warning: incomplete results: 1 of 2 file(s) not analysed (named above)"


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """``deep.py``, which CPython runs and kvlint cannot parse (a 2,500-term sum), and ``bad.py``, one KVL101."""
    (tmp_path / "deep.py").write_text("import torch_npu\n\nTABLE = " + " + ".join(["1"] * 2500) + "\n")
    (tmp_path / "bad.py").write_text("import torch_npu\n\n\ndef attend(q, k, v):\n" + CALL)
    return tmp_path


def kvlint(tree: Path, *args: str, paths: tuple[str, ...] = ("bad.py", "deep.py")) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kvlint", "--isolated", *args, *paths],
                          capture_output=True, text=True, cwd=tree, check=False)


def test_text_names_the_file_and_says_the_results_are_incomplete(tree: Path) -> None:
    out = kvlint(tree)
    assert out.returncode == 1
    assert [line.split(": ")[1].split()[0] for line in out.stdout.splitlines()] == ["KVL101"]
    assert out.stderr.splitlines()[0] == f"kvlint: warning: {WHY}"
    assert out.stderr.splitlines()[-1] == INCOMPLETE


def test_the_same_with_parallel_jobs(tree: Path) -> None:
    out = kvlint(tree, "-j", "2")
    assert out.returncode == 1
    assert f"kvlint: warning: {WHY}" in out.stderr.splitlines()
    assert out.stderr.splitlines()[-1] == INCOMPLETE


def test_json_keeps_its_array_and_says_it_on_standard_error(tree: Path) -> None:
    out = kvlint(tree, "--format", "json")
    assert out.returncode == 1
    assert [(f["path"], f["code"]) for f in json.loads(out.stdout)] == [("bad.py", "KVL101")]
    assert f"kvlint: warning: {WHY}" in out.stderr.splitlines()
    assert out.stderr.splitlines()[-1] == INCOMPLETE


def test_github_annotates_the_file(tree: Path) -> None:
    out = kvlint(tree, "--format", "github")
    lines = out.stdout.splitlines()
    assert lines[0].startswith("::error file=bad.py,") and "title=KVL101" in lines[0]
    assert lines[1:] == [f"::warning file=deep.py,title=kvlint did not analyse this file::{WHY}"]
    assert out.stderr.splitlines()[-1] == INCOMPLETE


def test_sarif_marks_the_run_incomplete_with_a_notification_on_the_file(tree: Path) -> None:
    out = kvlint(tree, "--format", "sarif")
    assert out.returncode == 1
    log = json.loads(out.stdout)
    jsonschema.Draft4Validator(SCHEMA).validate(log)
    [run] = log["runs"]
    assert [r["ruleId"] for r in run["results"]] == ["KVL101"]
    [invocation] = run["invocations"]
    assert invocation["executionSuccessful"] is False
    assert invocation["toolExecutionNotifications"] == [{
        "level": "warning",
        "message": {"text": WHY},
        "locations": [{"physicalLocation": {"artifactLocation": {"uri": "deep.py", "uriBaseId": "%SRCROOT%"}}}],
    }]


def test_a_complete_run_says_nothing_of_the_kind(tree: Path) -> None:
    out = kvlint(tree, "--format", "sarif", paths=("bad.py",))
    [invocation] = json.loads(out.stdout)["runs"][0]["invocations"]
    assert invocation == {"executionSuccessful": True}
    assert "incomplete" not in out.stderr
