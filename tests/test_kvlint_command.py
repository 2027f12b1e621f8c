"""The ``kvlint`` command: output formats, selection, exit status, recursion and bad input."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from kvlint.frontends.cli import main

BAD = '''import torch_npu


def decode(q, k, v):
    return torch_npu.npu_fused_infer_attention_score_v2(q, k, v, num_heads=8, softmax_scale=0.1)
'''
MISSING_SCALE = '''import torch_npu


def decode(q, k, v):
    return torch_npu.npu_incre_flash_attention(q, k, v, num_heads=8)
'''
CLEAN = '''import torch_npu


def decode(q, k, v):
    return torch_npu.npu_fused_infer_attention_score(q, k, v, num_heads=8, scale=0.1)
'''


def kvlint(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kvlint", *args], capture_output=True, text=True, cwd=cwd,
                          check=False)


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    (tmp_path / "bad.py").write_text(BAD)
    (tmp_path / "clean.py").write_text(CLEAN)
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "missing_scale.py").write_text(MISSING_SCALE)
    for skipped in (".git", "venv", "build", "__pycache__"):
        (tmp_path / skipped).mkdir()
        (tmp_path / skipped / "bad.py").write_text(BAD)
    (tmp_path / "myenv").mkdir()
    (tmp_path / "myenv" / "pyvenv.cfg").write_text("home = /usr\n")
    (tmp_path / "myenv" / "bad.py").write_text(BAD)
    return tmp_path


def test_text_line_names_path_position_code_message_and_symbol(tree: Path) -> None:
    result = kvlint("bad.py", cwd=tree)
    assert result.returncode == 1
    assert result.stdout.splitlines() == [
        "bad.py:5:66: KVL102 [*] 'num_heads' is the v1 name; npu_fused_infer_attention_score_v2 takes "
        "'num_query_heads' [fa-version-mix]"
    ]


def test_json_objects_have_exactly_the_documented_keys(tree: Path) -> None:
    result = kvlint("--format", "json", "bad.py", cwd=tree)
    [finding] = json.loads(result.stdout)
    assert finding == {
        "path": "bad.py", "line": 5, "column": 66, "end_line": 5, "end_column": 77, "code": "KVL102",
        "symbol": "fa-version-mix", "severity": "error",
        "message": "'num_heads' is the v1 name; npu_fused_infer_attention_score_v2 takes 'num_query_heads'",
        "fixable": True,
    }


def test_folders_are_recursed_skipping_vcs_build_and_virtualenvs(tree: Path) -> None:
    result = kvlint("--format", "json", ".", cwd=tree)
    paths = sorted({f["path"] for f in json.loads(result.stdout)})
    assert paths == ["./bad.py", "./pkg/missing_scale.py"]


def test_exit_status_is_zero_without_findings(tree: Path) -> None:
    assert kvlint("clean.py", cwd=tree).returncode == 0


def test_exit_zero_reports_but_succeeds(tree: Path) -> None:
    result = kvlint("--exit-zero", "bad.py", cwd=tree)
    assert result.returncode == 0 and "KVL102" in result.stdout


@pytest.mark.parametrize(("option", "expected"), [
    (["--select", "KVL1"], {"KVL102", "KVL104"}),
    (["--select", "KVL104"], {"KVL104"}),
    (["--ignore", "KVL104"], {"KVL102"}),
    (["--select", "KVL1", "--ignore", "KVL10"], set()),
])
def test_select_and_ignore_take_codes_and_prefixes(tree: Path, option: list[str], expected: set[str]) -> None:
    result = kvlint("--format", "json", *option, ".", cwd=tree)
    assert {f["code"] for f in json.loads(result.stdout)} == expected


def test_parallel_jobs_give_the_same_findings(tree: Path) -> None:
    assert kvlint("-j", "2", ".", cwd=tree).stdout == kvlint(".", cwd=tree).stdout


def test_statistics_count_findings_per_code(tree: Path) -> None:
    result = kvlint("--statistics", ".", cwd=tree)
    assert "1      KVL102 [fa-version-mix]" in result.stdout.splitlines()
    assert "1      KVL104 [fa-default-scale]" in result.stdout.splitlines()


def test_unparsable_file_gives_kvl000_and_the_run_goes_on(tree: Path) -> None:
    (tree / "broken.py").write_text("import torch_npu\ndef f(:\n")
    result = kvlint("--format", "json", "broken.py", "bad.py", cwd=tree)
    assert result.returncode == 1
    codes = {(f["path"], f["code"]) for f in json.loads(result.stdout)}
    assert codes == {("broken.py", "KVL000"), ("bad.py", "KVL102")}


@pytest.mark.parametrize("content", [b"\x00\x01torch_npu\xff\xfe", b"npu_ = '\xe9'\n", b""])
def test_binary_undecodable_and_empty_files_never_give_a_traceback(tree: Path, content: bytes) -> None:
    (tree / "odd.py").write_bytes(content)
    result = kvlint("odd.py", cwd=tree)
    assert "Traceback" not in result.stderr
    assert result.returncode in (0, 1)


def test_missing_path_is_named_and_exits_2(tree: Path) -> None:
    result = kvlint("nope.py", "bad.py", cwd=tree)
    assert result.returncode == 2
    assert "nope.py" in result.stderr and "Traceback" not in result.stderr
    assert "KVL102" in result.stdout


@pytest.mark.parametrize("args", [["--select", "E501"], ["-j", "0"], ["--format", "xml"], ["--no-such-flag"]])
def test_usage_errors_name_the_argument_and_exit_2(tree: Path, args: list[str]) -> None:
    result = kvlint(*args, "bad.py", cwd=tree)
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert args[0] in result.stderr


def test_main_returns_the_exit_status(tree: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    monkeypatch.chdir(tree)
    assert main(["bad.py"]) == 1
    assert "KVL102" in capsys.readouterr().out


def test_the_linter_works_without_torch_installed(tree: Path) -> None:
    blocker = (
        "import sys\n"
        "class Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] in ('torch', 'torch_npu'):\n"
        "            raise ImportError('blocked: ' + name)\n"
        "sys.meta_path.insert(0, Block())\n"
        "from kvlint.frontends.cli import main\n"
        "import kvlint.checkers, kvlint.frontends.flake8_plugin\n"
        "code = main(['bad.py'])\n"
        "assert 'torch' not in sys.modules\n"
        "sys.exit(code)\n"
    )
    result = subprocess.run([sys.executable, "-c", blocker], capture_output=True, text=True, cwd=tree, check=False)
    assert result.returncode == 1, result.stderr
    assert "KVL102" in result.stdout
