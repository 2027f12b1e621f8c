"""Suppression comments: ``# noqa`` (CLI, flake8), ``# kvlint: disable=`` / ``disable-file`` (all three
front-ends), ``# pylint: disable=`` (pylint)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from kvlint.frontends.runner import lint_text
from kvlint.frontends.suppression import read_suppressions

CALL = "torch_npu.npu_fused_infer_attention_score(q, k, v, num_heads=8, input_layout='bnsd')"
"""Reported twice on its line: KVL104 (no scale) and KVL106 (lower-case layout)."""


def source(comment: str = "", header: str = "") -> str:
    return f"{header}import torch_npu\n\n\ndef decode(q, k, v):\n    return {CALL}{comment}\n"


def codes(text: str) -> set[str]:
    return {f.code for f in lint_text(text, "m.py").findings}


@pytest.mark.parametrize(("comment", "left"), [
    ("", {"KVL104", "KVL106"}),
    ("  # noqa", set()),
    ("  # NOQA", set()),
    ("  # noqa: KVL104", {"KVL106"}),
    ("  # noqa:KVL104,KVL106", set()),
    ("  # noqa: E501", {"KVL104", "KVL106"}),
    ("  # kvlint: disable=fa-default-scale", {"KVL106"}),
    ("  # kvlint: disable=KVL106", {"KVL104"}),
    ("  # kvlint: disable=fa-default-scale, fa-invalid-layout", set()),
    ("  # kvlint: disable=KVL1", set()),
    ("  # kvlint: disable=all", set()),
    ("  # pylint: disable=fa-default-scale", {"KVL104", "KVL106"}),
])
def test_comment_on_the_reported_line(comment: str, left: set[str]) -> None:
    assert codes(source(comment)) == left


def test_comment_on_another_line_does_not_suppress() -> None:
    text = f"import torch_npu  # noqa\n\n\ndef decode(q, k, v):  # kvlint: disable=all\n    return {CALL}\n"
    assert codes(text) == {"KVL104", "KVL106"}


def test_noqa_after_a_multiline_string_covers_every_line_of_the_string() -> None:
    suppressions = read_suppressions('x = """\na\nb\n"""  # noqa: KVL101\ny = 1\n')
    assert {line: codes for line, codes in suppressions.noqa.items()} == {
        1: frozenset({"KVL101"}), 2: frozenset({"KVL101"}), 3: frozenset({"KVL101"}), 4: frozenset({"KVL101"})}


def test_disable_file_anywhere_suppresses_everything() -> None:
    assert codes(source(header="# kvlint: disable-file\n")) == set()
    assert codes(source() + "# kvlint: disable-file\n") == set()


def test_a_comment_inside_a_string_is_not_a_pragma() -> None:
    assert codes(source(header='NOTE = "# kvlint: disable-file"\n')) == {"KVL104", "KVL106"}


def test_syntax_errors_cannot_be_suppressed() -> None:
    text = "import torch_npu  # kvlint: disable-file\n\ndef f(:  # noqa\n    torch_npu.npu_x()\n"
    assert codes(text) == {"KVL000"}


def test_unknown_names_in_a_pragma_are_warnings_naming_file_and_line() -> None:
    result = lint_text(source("  # kvlint: disable=fa-default-scal"), "m.py")
    assert {f.code for f in result.findings} == {"KVL104", "KVL106"}
    assert result.warnings == ["m.py:5: 'fa-default-scal' in '# kvlint: disable=' is not a kvlint rule code or symbol"]


def test_cli_prints_pragma_warnings_on_stderr_and_keeps_the_exit_status(tmp_path: Path) -> None:
    path = tmp_path / "m.py"
    path.write_text(source("  # kvlint: disable=KVL104,nonsense"))
    out = subprocess.run([sys.executable, "-m", "kvlint", "--isolated", str(path)], capture_output=True, text=True)
    assert out.returncode == 1
    assert [line.split(": KVL")[1][:3] for line in out.stdout.splitlines()] == ["106"]
    assert f"kvlint: warning: {path}:5: 'nonsense' in '# kvlint: disable=' is not a kvlint rule" in out.stderr


# --- the plugins -------------------------------------------------------------------------------------------

def flake8(path: Path) -> list[str]:
    out = subprocess.run([sys.executable, "-m", "flake8", "--select", "KVL", "--format", "%(code)s", str(path)],
                         capture_output=True, text=True)
    assert out.returncode in (0, 1), out.stderr
    return sorted(out.stdout.split())


def pylint(path: Path) -> list[str]:
    out = subprocess.run([sys.executable, "-m", "pylint", "--load-plugins", "kvlint", "--disable=all",
                          "--enable=kvlint", "--output-format=json", "--score=n", str(path)],
                         capture_output=True, text=True)
    assert out.returncode < 32, out.stderr
    return sorted(m["symbol"] for m in json.loads(out.stdout))


@pytest.mark.parametrize(("comment", "left"), [
    ("", ["KVL104", "KVL106"]),
    ("  # noqa: KVL104", ["KVL106"]),
    ("  # kvlint: disable=fa-invalid-layout", ["KVL104"]),
])
def test_flake8_honours_noqa_and_kvlint_pragmas(tmp_path: Path, comment: str, left: list[str]) -> None:
    path = tmp_path / "m.py"
    path.write_text(source(comment))
    assert flake8(path) == left


@pytest.mark.parametrize(("comment", "header", "left"), [
    ("", "", ["fa-default-scale", "fa-invalid-layout"]),
    ("  # pylint: disable=fa-default-scale", "", ["fa-invalid-layout"]),
    ("  # pylint: disable=W7104", "", ["fa-invalid-layout"]),
    ("", "# pylint: disable=fa-invalid-layout\n", ["fa-default-scale"]),
    ("  # kvlint: disable=KVL104", "", ["fa-invalid-layout"]),
    ("", "# kvlint: disable-file\n", []),
])
def test_pylint_honours_its_own_pragmas_and_kvlint_pragmas(tmp_path: Path, comment, header, left) -> None:
    path = tmp_path / "m.py"
    path.write_text(source(comment, header))
    assert pylint(path) == left


def test_pylint_disable_next_and_block_scope(tmp_path: Path) -> None:
    path = tmp_path / "m.py"
    path.write_text(textwrap.dedent(f'''\
        import torch_npu


        def decode(q, k, v):
            # pylint: disable-next=fa-invalid-layout
            a = {CALL}
            return a


        def prefill(q, k, v):
            # pylint: disable=fa-default-scale
            a = {CALL}
            return a
    '''))
    assert pylint(path) == ["fa-default-scale", "fa-invalid-layout"]
