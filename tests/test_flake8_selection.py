"""flake8 runs every installed plugin on every file, whatever the user selected: the KVL plugin analyses
nothing when flake8's selection (command line or configuration) reports no KVL code, and analyses as before
when it reports any, by default included.

flake8 runs in this process (``--jobs=1``) so that the engine's calls can be counted."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from flake8.main.application import Application

import kvlint.checks.engine
from kvlint.frontends.flake8_plugin import Plugin

BAD = '''import torch_npu


def decode(q, k, v):
    return torch_npu.npu_fused_infer_attention_score_v2(q, k, v, num_heads=8)
'''
"""KVL102 (``num_heads``, the v1 name) and KVL104 (no ``softmax_scale``) on line 5."""


@pytest.fixture
def flake8(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture):
    """Run flake8 on ``bad.py`` in ``tmp_path``: returns (the engine's calls, the codes reported)."""
    (tmp_path / "bad.py").write_text(BAD)
    monkeypatch.chdir(tmp_path)
    for attribute in ("settings", "honour_noqa", "analyses"):  # parse_options sets them on the class
        monkeypatch.setattr(Plugin, attribute, getattr(Plugin, attribute))
    calls: list[str] = []
    real = kvlint.checks.engine.lint_source

    def counting(source: str, path: str, *args):
        calls.append(path)
        return real(source, path, *args)

    monkeypatch.setattr(kvlint.checks.engine, "lint_source", counting)

    def run(*args: str) -> tuple[list[str], list[str]]:
        calls.clear()
        capsys.readouterr()
        Application().run(["--jobs=1", "--format=%(code)s", *args, "bad.py"])
        return list(calls), capsys.readouterr().out.split()

    return run


@pytest.mark.parametrize("args", [("--select", "E9"), ("--extend-ignore", "KVL"), ("--ignore", "KVL,E,W")],
                         ids=["select E9", "extend-ignore KVL", "ignore KVL"])
def test_no_analysis_when_the_command_line_selects_no_kvl_code(flake8, args: tuple[str, ...]) -> None:
    calls, codes = flake8("--isolated", *args)
    assert calls == []
    assert not any(code.startswith("KVL") for code in codes)


@pytest.mark.parametrize("section", ["extend-ignore = KVL", "select = E9,F"])
def test_no_analysis_when_the_configuration_selects_no_kvl_code(flake8, tmp_path: Path, section: str) -> None:
    (tmp_path / ".flake8").write_text(f"[flake8]\n{section}\n")
    calls, codes = flake8()
    assert calls == []
    assert not any(code.startswith("KVL") for code in codes)


@pytest.mark.parametrize("args, expected", [
    ((), ["KVL102", "KVL104"]),
    (("--select", "KVL"), ["KVL102", "KVL104"]),
    (("--select", "E,KVL102"), ["KVL102"]),
    (("--extend-ignore", "KVL104"), ["KVL102"]),
], ids=["default", "select KVL", "select E,KVL102", "extend-ignore KVL104"])
def test_analysis_when_any_kvl_code_is_selected(flake8, args: tuple[str, ...], expected: list[str]) -> None:
    calls, codes = flake8("--isolated", *args)
    assert calls == ["bad.py"]
    assert sorted(code for code in codes if code.startswith("KVL")) == expected


def test_analysis_when_the_configuration_selects_a_kvl_code(flake8, tmp_path: Path) -> None:
    (tmp_path / ".flake8").write_text("[flake8]\nselect = E9,KVL1\n")
    calls, codes = flake8()
    assert calls == ["bad.py"]
    assert sorted(codes) == ["KVL102", "KVL104"]


def test_loading_the_plugin_imports_no_analysis() -> None:
    """flake8 loads every installed plugin, in every run and every worker: loading this one does not import
    astroid (about 0.09 s) or the engine before a file is to be analysed."""
    loaded = subprocess.run(
        [sys.executable, "-c", "import sys, kvlint.frontends.flake8_plugin; "
         "print(sorted(m for m in ('astroid', 'kvlint.checks.engine', 'kvlint.analysis.flow') if m in sys.modules))"],
        capture_output=True, text=True, check=True).stdout
    assert loaded.strip() == "[]"
