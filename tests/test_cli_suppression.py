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
    ("  # noqa: kvl104", ["KVL106"]),  # flake8 itself compares codes case-sensitively; the plugin does not
    ("  # kvlint: disable=fa-invalid-layout", ["KVL104"]),
    ("  # kvlint: disable-file=KVL104", ["KVL106"]),
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


# --- directives, case and warnings in every front-end -----------------------------------------------------

def test_disable_file_with_names_silences_only_those_rules() -> None:
    assert codes(source(header="# kvlint: disable-file=KVL106\n")) == {"KVL104"}
    assert codes(source() + "# kvlint: disable-file=fa-default-scale, KVL106\n") == set()


def test_disable_next_silences_the_line_after_it_only() -> None:
    text = f"import torch_npu\n\n\ndef decode(q, k, v):\n    # kvlint: disable-next=KVL104\n    a = {CALL}\n" \
           f"    return {CALL}\n"
    assert sorted((f.line, f.code) for f in lint_text(text, "m.py").findings) == [
        (6, "KVL106"), (7, "KVL104"), (7, "KVL106")]


@pytest.mark.parametrize(("comment", "left"), [
    ("  # noqa: kvl104", {"KVL106"}), ("  # NOQA:Kvl104", {"KVL106"}), ("  # noqa: kvl1", set()),
    ("  # noqa: KVL10", set()),
])
def test_noqa_codes_are_case_insensitive_and_prefixes_as_in_flake8(comment: str, left: set[str]) -> None:
    assert codes(source(comment)) == left


@pytest.mark.parametrize("comment", ["  # kvlint: disable=KVL999", "  # kvlint: disable-file=nonsense",
                                     "  # kvlint: enable=KVL104"])
def test_a_pragma_naming_no_rule_or_directive_is_a_warning(comment: str) -> None:
    result = lint_text(source(comment), "m.py")
    assert {f.code for f in result.findings} == {"KVL104", "KVL106"}
    [warning] = result.warnings
    assert warning.startswith("m.py:5: '") and ("kvlint rule code or symbol" in warning or "directive" in warning)


def test_a_pragma_warning_is_printed_even_when_the_file_has_no_finding(tmp_path: Path) -> None:
    path = tmp_path / "m.py"
    path.write_text("x = 1  # kvlint: disable=fa-default-scal\n")
    out = subprocess.run([sys.executable, "-m", "kvlint", "--isolated", str(path)], capture_output=True, text=True)
    assert out.returncode == 0
    assert f"kvlint: warning: {path}:1: 'fa-default-scal' in '# kvlint: disable=' is not a kvlint rule" in out.stderr


def test_every_front_end_warns_about_a_pragma_naming_no_rule(tmp_path: Path) -> None:
    path = tmp_path / "m.py"
    path.write_text(source("  # kvlint: disable=KVL106,no-such-rule"))
    warning = "5: 'no-such-rule' in '# kvlint: disable=' is not a kvlint rule code or symbol"
    runs = {
        "kvlint": [sys.executable, "-m", "kvlint", "--isolated", "m.py"],
        "flake8": [sys.executable, "-m", "flake8", "--select", "KVL", "m.py"],
        "pylint": [sys.executable, "-m", "pylint", "--load-plugins", "kvlint", "--disable=all", "--enable=kvlint",
                   "--score=n", "m.py"],
    }
    for tool, command in runs.items():
        out = subprocess.run(command, capture_output=True, text=True, cwd=tmp_path)
        assert out.stderr.count(f"kvlint: warning: m.py:{warning}") == 1, (tool, out.stderr)
        assert "KVL104" in out.stdout or "W7104" in out.stdout, (tool, out.stdout)
        assert "KVL106" not in out.stdout and "E7106" not in out.stdout, (tool, out.stdout)


def test_flake8_disable_noqa_still_reports(tmp_path: Path) -> None:
    path = tmp_path / "m.py"
    path.write_text(source("  # noqa: kvl104"))
    out = subprocess.run([sys.executable, "-m", "flake8", "--disable-noqa", "--select", "KVL", "--format",
                          "%(code)s", str(path)], capture_output=True, text=True)
    assert sorted(out.stdout.split()) == ["KVL104", "KVL106"]


@pytest.mark.parametrize(("comment", "header", "left"), [
    ("", "# kvlint: disable-file=KVL104\n", ["fa-invalid-layout"]),
    ("", "", ["fa-default-scale", "fa-invalid-layout"]),
])
def test_pylint_honours_disable_file_names(tmp_path: Path, comment: str, header: str, left: list[str]) -> None:
    path = tmp_path / "m.py"
    path.write_text(source(comment, header))
    assert pylint(path) == left


def test_pylint_honours_kvlint_disable_next(tmp_path: Path) -> None:
    path = tmp_path / "m.py"
    path.write_text(f"import torch_npu\n\n\ndef decode(q, k, v):\n    # kvlint: disable-next=fa-invalid-layout\n"
                    f"    return {CALL}\n")
    assert pylint(path) == ["fa-default-scale"]
