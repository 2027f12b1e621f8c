"""Lines are counted as Python's tokenizer counts them: a form feed, U+2028, U+0085 (and the other characters
``str.splitlines()`` also breaks at) in a comment end no line, so the columns of every later finding, and the
expression ``--fix`` rewrites, are read from the right line in every front-end and format."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

from kvlint.analysis.source_lines import physical_lines
from tests.conftest import ROOT

CALL = "    return torch_npu.npu_fused_infer_attention_score_v2(q, k, v, num_heads=8, softmax_scale=0.1)\n"
COLUMN = CALL.index("num_heads") + 1
"""KVL102 (``num_heads`` is the v1 name) on line 5, at this 1-based column."""

BREAKS = {"form feed": "\x0c", "vertical tab": "\x0b", "NEL": "\x85", "line separator": "\u2028",
          "paragraph separator": "\u2029", "file separator": "\x1c"}


def source(character: str) -> str:
    return f"import torch_npu\n# a{character} b {character} c\n\ndef attend(q, k, v):\n{CALL}"


def run(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, cwd=cwd, check=False)


def test_the_premise_python_counts_five_lines() -> None:
    for character in BREAKS.values():
        assert ast.parse(source(character)).body[-1].body[0].lineno == 5
        assert len(physical_lines(source(character))) == 5
        assert len(source(character).splitlines()) > 5


@pytest.mark.parametrize("name", BREAKS)
def test_columns_after_a_character_splitlines_breaks_at_are_the_tokenizers(tmp_path: Path, name: str) -> None:
    (tmp_path / "m.py").write_text(source(BREAKS[name]), encoding="utf-8")
    found = json.loads(run("-m", "kvlint", "--isolated", "--format", "json", "m.py", cwd=tmp_path).stdout)
    assert [(f["line"], f["column"], f["code"]) for f in found] == [(5, COLUMN, "KVL102")]
    text = run("-m", "kvlint", "--isolated", "m.py", cwd=tmp_path).stdout
    assert text.startswith(f"m.py:5:{COLUMN}: KVL102")
    github = run("-m", "kvlint", "--isolated", "--format", "github", "m.py", cwd=tmp_path).stdout
    assert f"line=5,endLine=5,col={COLUMN}," in github
    sarif = json.loads(run("-m", "kvlint", "--isolated", "--format", "sarif", "m.py", cwd=tmp_path).stdout)
    region = sarif["runs"][0]["results"][0]["locations"][0]["physicalLocation"]["region"]
    assert (region["startLine"], region["startColumn"]) == (5, COLUMN)
    flake8 = run("-m", "flake8", "--select", "KVL", "--format", "%(row)d:%(col)d:%(code)s", "m.py", cwd=tmp_path)
    assert flake8.stdout.split() == [f"5:{COLUMN}:KVL102"]


@pytest.mark.parametrize("name", ["form feed", "NEL", "line separator"])
def test_fix_and_diff_find_the_expression_after_such_a_character(tmp_path: Path, name: str) -> None:
    original = source(BREAKS[name])
    (tmp_path / "m.py").write_text(original, encoding="utf-8")
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    diff = run("-m", "kvlint", "--isolated", "--diff", "m.py", cwd=tmp_path)
    assert diff.returncode == 1 and "+" + CALL.replace("num_heads", "num_query_heads") in diff.stdout
    (tmp_path / "fix.patch").write_text(diff.stdout, encoding="utf-8", newline="")
    subprocess.run(["git", "apply", "--check", "fix.patch"], cwd=tmp_path, check=True, capture_output=True)
    fixed = run("-m", "kvlint", "--isolated", "--fix", "m.py", cwd=tmp_path)
    assert "fixed 1 finding(s)" in fixed.stderr
    assert (tmp_path / "m.py").read_bytes() == original.replace("num_heads", "num_query_heads").encode("utf-8")


def test_no_module_of_the_linter_splits_text_with_splitlines() -> None:
    """``str.splitlines()`` is the bug above; lines come from ``physical_lines``."""
    offenders = []
    for package in ("kvlint/analysis", "kvlint/checks", "kvlint/fix", "kvlint/frontends", "checkers"):
        for path in (ROOT / package).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.Attribute) and node.attr == "splitlines":
                    offenders.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert offenders == []
