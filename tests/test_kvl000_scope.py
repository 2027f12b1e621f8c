"""KVL000 only where CPython itself refuses the file.

Two kinds of files CPython runs used to get an unsuppressible KVL000:
- a file that declares UTF-8 (or nothing) and holds GBK bytes in a comment: CPython's compiler does not
  decode comments, so ``import`` and ``python file.py`` (with the cookie) run it; kvlint lints it;
- valid code nested deeper than astroid's recursion limit (a generated 2,500-term sum): CPython compiles
  it; kvlint skips it with a warning naming the file.
A file CPython refuses (GBK bytes in a string literal, a 5,000-term sum) keeps its KVL000.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from kvlint.frontends.runner import lint_file
from tests.frontends import run_cli, run_flake8

CALL = "    return torch_npu.npu_fused_infer_attention_score(q, k, v, num_heads=8, scale=0.1, input_layuot='BSND')\n"
"""One KVL101 (``input_layuot``), on the last line of the files below."""


def _gbk_comment_file() -> bytes:
    return (b"# coding=utf-8\n" + "# 计算注意力 (GBK comment)\n".encode("gbk") + b"import torch_npu\n\n\n"
            + b"def attend(q, k, v):  # " + "返回".encode("gbk") + b"\n" + CALL.encode())


def _deep_sum_file(terms: int) -> bytes:
    return ("import torch_npu\n\nTABLE = " + " + ".join(["1"] * terms) + "\n\n\ndef attend(q, k, v):\n"
            + CALL).encode()


def _last_line(path: Path) -> int:
    return path.read_bytes().count(b"\n")


@pytest.fixture
def files(tmp_path: Path) -> dict[str, Path]:
    contents = {
        "gbk_comment.py": _gbk_comment_file(),
        "gbk_comment_no_cookie.py": _gbk_comment_file().split(b"\n", 1)[1],
        "gbk_string.py": b"# coding=utf-8\nimport torch_npu\n\nNAME = '" + "注意力".encode("gbk") + b"'\n",
        "deep_sum.py": _deep_sum_file(2500),
        "too_deep_for_cpython.py": _deep_sum_file(5000),
    }
    paths = {}
    for name, content in contents.items():
        paths[name] = tmp_path / name
        paths[name].write_bytes(content)
    return paths


def test_cpython_runs_the_files_kvlint_must_lint(files: dict[str, Path]) -> None:
    """The premise, checked on this interpreter: CPython compiles the GBK-comment and 2,500-term files and
    refuses the GBK string and the 5,000-term sum."""
    for name in ("gbk_comment.py", "gbk_comment_no_cookie.py", "deep_sum.py"):
        compile(files[name].read_bytes(), name, "exec", dont_inherit=True)
    for name in ("gbk_string.py", "too_deep_for_cpython.py"):
        with pytest.raises((SyntaxError, RecursionError)):
            compile(files[name].read_bytes(), name, "exec", dont_inherit=True)
    ran = subprocess.run([sys.executable, "-c", "import gbk_comment"], cwd=files["gbk_comment.py"].parent,
                         capture_output=True, text=True, check=False)
    assert "SyntaxError" not in ran.stderr, ran.stderr


def test_gbk_bytes_in_a_comment_are_linted(files: dict[str, Path]) -> None:
    for name in ("gbk_comment.py", "gbk_comment_no_cookie.py"):
        result = lint_file(str(files[name]))
        assert result.error is None
        assert [(f.line, f.code) for f in result.findings] == [(_last_line(files[name]), "KVL101")], name


def test_the_cli_and_flake8_lint_a_gbk_comment_file(files: dict[str, Path]) -> None:
    """(pylint reads files itself and reports its own parse-error on them before any plugin runs.)"""
    path = files["gbk_comment.py"]
    assert run_cli([path]) == [(str(path), _last_line(path), "KVL101")]
    assert run_flake8([path]) == [(str(path), _last_line(path), "KVL101")]


def test_files_cpython_refuses_keep_their_kvl000(files: dict[str, Path]) -> None:
    for name in ("gbk_string.py", "too_deep_for_cpython.py"):
        [finding] = lint_file(str(files[name])).findings
        assert finding.code == "KVL000", name


def test_a_deep_valid_file_is_skipped_with_a_warning_naming_it(files: dict[str, Path]) -> None:
    path = files["deep_sum.py"]
    result = lint_file(str(path))
    assert result.findings == [] and result.error is None
    assert result.skipped == f"{path}: skipped: valid Python nested deeper than kvlint's parser can follow"
    assert result.warnings == []
    out = subprocess.run([sys.executable, "-m", "kvlint", "--isolated", str(path)],
                         capture_output=True, text=True, check=False)
    assert (out.returncode, out.stdout) == (0, "")
    assert f"kvlint: warning: {path}: skipped" in out.stderr and "Traceback" not in out.stderr


def test_flake8_skips_a_deep_valid_file_with_a_kvl001_naming_why(files: dict[str, Path]) -> None:
    """The plugin's own report, in-process: flake8 itself drops every result of such a file, since pyflakes fails
    on it (and says so, naming the file). Under pylint, astroid fails before any plugin runs and pylint reports its
    own astroid-error."""
    from kvlint.frontends.flake8_plugin import Plugin

    path = files["deep_sum.py"]
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    assert [(line, column, text) for line, column, text, _ in Plugin(None, lines, str(path)).run()] == [
        (1, 0, "KVL001 kvlint did not analyse this file: valid Python nested deeper than kvlint's parser can follow")]


def test_pylint_front_end_skips_a_module_it_cannot_walk_with_a_kvl001(monkeypatch: pytest.MonkeyPatch) -> None:
    """pylint hands over a tree astroid built; if walking it exceeds the recursion limit, the kvlint checker
    reports only KVL001 (W7001) at line 1, naming why, instead of crashing pylint's run."""
    from astroid import MANAGER
    from astroid.builder import AstroidBuilder

    from checkers import families

    def too_deep(module, path, settings):
        raise RecursionError("maximum recursion depth exceeded")

    monkeypatch.setattr(families, "analyze", too_deep)
    module = AstroidBuilder(MANAGER).string_build("import torch_npu\n", modname="deep", path="deep_module.py")
    [finding] = families.module_findings(module)
    assert (finding.code, finding.line, finding.path.endswith("deep_module.py")) == ("KVL001", 1, True)
    assert finding.message == ("kvlint did not analyse this file: valid Python nested deeper than kvlint's parser "
                               "can follow")


# --- what ast.parse accepts and CPython's compiler refuses, and where ---------------------------------------

COMPILER_REFUSALS = {
    "repeated_keyword.py": ("import torch_npu\n\n\ndef attend(q, k, v):\n"
                            "    return torch_npu.npu_fused_infer_attention_score(q, k, v, num_heads=8,\n"
                            "                                                     scale=0.1, num_heads=9)\n",
                            6, 65, "keyword argument repeated: num_heads"),
    "nonlocal_without_binding.py": ("import torch_npu\n\n\ndef outer():\n    def inner():\n        nonlocal heads\n"
                                    "        heads = 8\n    return torch_npu.npu_fused_infer_attention_score\n",
                                    6, 9, "no binding for nonlocal 'heads' found"),
    "return_outside_function.py": ("import torch_npu\n\nheads = 8\nreturn heads\n", 4, 1, "'return' outside function"),
    "global_after_use.py": ("import torch_npu\n\n\ndef attend():\n    heads = 8\n    global heads\n"
                            "    return torch_npu.npu_fused_infer_attention_score\n",
                            6, 5, "name 'heads' is assigned to before global declaration"),
}


def _refusals(tmp_path: Path) -> dict[str, Path]:
    paths = {}
    for name, (text, *_) in COMPILER_REFUSALS.items():
        paths[name] = tmp_path / name
        paths[name].write_text(text, encoding="utf-8")
    return paths


def test_the_premise_ast_parse_accepts_what_the_compiler_refuses() -> None:
    import ast

    for name, (text, line, column, reason) in COMPILER_REFUSALS.items():
        ast.parse(text)
        with pytest.raises(SyntaxError) as refused:
            compile(text, name, "exec", dont_inherit=True)
        assert (refused.value.msg, refused.value.lineno, refused.value.offset) == (reason, line, column), name


def test_a_file_the_compiler_refuses_is_one_kvl000_at_the_offending_position(tmp_path: Path) -> None:
    paths = _refusals(tmp_path)
    for name, path in paths.items():
        _, line, column, reason = COMPILER_REFUSALS[name]
        [finding] = lint_file(str(path)).findings
        assert (finding.code, finding.line, finding.column + 1) == ("KVL000", line, column), name
        assert reason in finding.message
    out = subprocess.run([sys.executable, "-m", "kvlint", "--isolated", *map(str, paths.values())],
                         capture_output=True, text=True, check=False)
    assert out.returncode == 1
    for name, path in paths.items():
        _, line, column, reason = COMPILER_REFUSALS[name]
        assert f"{path}:{line}:{column}: KVL000 cannot parse the file: {reason}" in out.stdout


def test_flake8_reports_the_compilers_refusal_it_does_not_report_itself(tmp_path: Path) -> None:
    """flake8 reports E999 only where ast.parse fails (and then runs no plugin)."""
    paths = _refusals(tmp_path)
    out = subprocess.run([sys.executable, "-m", "flake8", "--select", "KVL,E999", "--format",
                          "%(path)s:%(row)d:%(col)d:%(code)s", *map(str, paths.values())],
                         capture_output=True, text=True, check=False)
    assert sorted(out.stdout.split()) == sorted(
        f"{path}:{COMPILER_REFUSALS[name][1]}:{COMPILER_REFUSALS[name][2]}:KVL000" for name, path in paths.items())


def test_an_undecodable_file_is_kvl000_at_the_byte_cpython_names(files: dict[str, Path]) -> None:
    """GBK bytes in a string literal of a UTF-8 file: line 4, not 1:1."""
    [finding] = lint_file(str(files["gbk_string.py"])).findings
    assert (finding.code, finding.line) == ("KVL000", 4)
    assert "cannot decode the file" in finding.message and "'utf-8' codec can't decode byte" in finding.message
    out = subprocess.run([sys.executable, "-m", "kvlint", "--isolated", "-"], input=files["gbk_string.py"].read_bytes(),
                         capture_output=True, check=False)
    assert out.stdout.startswith(b"-:4:") and b"KVL000 cannot parse the file: cannot decode the input" in out.stdout
