"""The CLI's output formats, rule listing and documentation, and its exit statuses."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from kvlint.catalogue.pages import standalone_page
from kvlint.catalogue.rules import DOCUMENTED_RULES, rule

BAD = '''import torch_npu


def decode(q, k, v):
    return torch_npu.npu_fused_infer_attention_score_v2(q, k, v, num_heads=8, softmax_scale=0.1)
'''
MULTILINE = '''import torch_npu


def decode(q, k, v):
    return torch_npu.npu_fused_infer_attention_score(q, k, v, num_heads=8, scale=0.1, input_layout=(
        "bnsd"
    ))
'''


def kvlint(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kvlint", "--isolated", *args], capture_output=True, text=True,
                          cwd=cwd, check=False)


@pytest.fixture
def bad_file(tmp_path: Path) -> Path:
    path = tmp_path / "bad.py"
    path.write_text(BAD)
    return path


def test_text_lines_read_path_line_column_code_message_symbol(bad_file: Path) -> None:
    out = kvlint(str(bad_file))
    assert out.returncode == 1
    assert out.stdout == (f"{bad_file}:5:66: KVL102 [*] 'num_heads' is the v1 name; "
                          "npu_fused_infer_attention_score_v2 takes 'num_query_heads' [fa-version-mix]\n")
    assert "kvlint: 1 finding(s) marked [*] can be fixed with --fix" in out.stderr


def test_json_has_exactly_the_contract_keys_with_one_based_columns(bad_file: Path) -> None:
    out = kvlint("--format", "json", str(bad_file))
    [finding] = json.loads(out.stdout)
    assert finding == {
        "path": str(bad_file), "line": 5, "column": 66, "end_line": 5, "end_column": 77, "code": "KVL102",
        "symbol": "fa-version-mix", "severity": "error",
        "message": "'num_heads' is the v1 name; npu_fused_infer_attention_score_v2 takes 'num_query_heads'",
        "fixable": True,
    }


def test_github_annotations_give_camel_case_positions_and_the_code_as_title(bad_file: Path) -> None:
    out = kvlint("--format", "github", str(bad_file))
    assert out.returncode == 1
    assert out.stdout == (
        f"::error file={bad_file},line=5,endLine=5,col=66,endColumn=77,title=KVL102::'num_heads' is the v1 "
        "name; npu_fused_infer_attention_score_v2 takes 'num_query_heads' [fa-version-mix]\n"
    )


def test_github_annotation_of_a_multiline_finding_has_no_columns(tmp_path: Path) -> None:
    path = tmp_path / "multi.py"
    path.write_text(MULTILINE)
    out = kvlint("--format", "github", str(path))
    [line] = out.stdout.splitlines()
    assert line.startswith(f"::error file={path},line=5,endLine=7,title=KVL106::")
    assert "col=" not in line


def test_github_escapes_commas_and_colons_in_properties(tmp_path: Path) -> None:
    folder = tmp_path / "a,b:c"
    folder.mkdir()
    path = folder / "bad.py"
    path.write_text(BAD)
    out = kvlint("--format", "github", str(path))
    assert out.stdout.startswith(f"::error file={str(path).replace(':', '%3A').replace(',', '%2C')},line=5,")


def test_output_file_receives_the_report_and_stdout_stays_empty(bad_file: Path, tmp_path: Path) -> None:
    report = tmp_path / "report.json"
    out = kvlint("--format", "json", "-o", str(report), str(bad_file))
    assert out.returncode == 1 and out.stdout == ""
    assert [f["code"] for f in json.loads(report.read_text())] == ["KVL102"]


def test_unwritable_output_file_is_a_clear_error(bad_file: Path, tmp_path: Path) -> None:
    out = kvlint("-o", str(tmp_path / "missing" / "report.txt"), str(bad_file))
    assert out.returncode == 2
    assert "report.txt: cannot write" in out.stderr and "Traceback" not in out.stderr


def test_clean_file_exits_zero_and_findings_exit_one_unless_exit_zero(bad_file: Path, tmp_path: Path) -> None:
    clean = tmp_path / "clean.py"
    clean.write_text("print('hello')\n")
    assert kvlint(str(clean)).returncode == 0
    assert kvlint(str(bad_file)).returncode == 1
    assert kvlint("--exit-zero", str(bad_file)).returncode == 0


def test_list_rules_prints_one_row_per_rule_with_fix_column() -> None:
    out = kvlint("--list-rules")
    assert out.returncode == 0
    rows = out.stdout.splitlines()
    assert rows[0].split()[:4] == ["code", "symbol", "severity", "fix"]
    assert [row.split()[0] for row in rows[1:]] == [r.code for r in DOCUMENTED_RULES]
    kvl102 = next(row for row in rows if row.startswith("KVL102"))
    assert kvl102.split()[1:4] == ["fa-version-mix", "error", "yes"]
    kvl509 = next(row for row in rows if row.startswith("KVL509"))
    assert kvl509.split()[1:4] == ["probe-written-slot-not-read", "error", "(probe)"]


@pytest.mark.parametrize("name", ["KVL201", "kvl201", "atten-mask-dtype"])
def test_explain_prints_the_rule_page_by_code_or_symbol(name: str) -> None:
    out = kvlint("--explain", name)
    assert out.returncode == 0
    assert out.stdout == standalone_page(rule("KVL201"))
    assert out.stdout.startswith("# KVL201 `atten-mask-dtype`\n")
    on_disk = Path("docs/rules/KVL201.md").read_text(encoding="utf-8")
    assert on_disk.startswith("<!-- Generated by") and "<!--" not in out.stdout
    generated_comment, page = on_disk.split("\n\n", 1)
    assert out.stdout.split("## References")[0] == page.split("## References")[0]


@pytest.mark.parametrize(("name", "code"), [("KVL505", "KVL505"), ("probe-written-slot-not-read", "KVL509"),
                                          ("kvl599", "KVL599")])
def test_explain_prints_a_probe_rules_page_by_code_or_symbol(name: str, code: str) -> None:
    out = kvlint("--explain", name)
    assert out.returncode == 0
    assert out.stdout == standalone_page(rule(code))
    assert out.stdout.startswith(f"# {code} `{rule(code).symbol}`\n")


@pytest.mark.parametrize("name", ["KVL999", "no-such-rule", "KVL511"])
def test_explain_of_an_unknown_rule_is_a_usage_error(name: str) -> None:
    out = kvlint("--explain", name)
    assert out.returncode == 2
    assert f"'{name}' is not a kvlint rule code, symbol or pylint message id" in out.stderr
    assert "Traceback" not in out.stderr


def test_statistics_count_findings_per_code(bad_file: Path) -> None:
    out = kvlint("--statistics", str(bad_file))
    assert out.stdout.splitlines()[-1].split() == ["1", "KVL102", "[fa-version-mix]"]


# --- columns count characters ------------------------------------------------------------------------------

WIDE = '''import torch_npu


def decode(q, k, v):
    s = "注意力"; return torch_npu.npu_fused_infer_attention_score_v2(q, k, v, num_heads=8, softmax_scale=0.1)
'''
"""The keyword starts at character 77 (1-based) of line 5, byte 83: each of the three characters is 3 bytes."""


def test_every_cli_format_counts_characters_not_bytes(tmp_path: Path) -> None:
    path = tmp_path / "wide.py"
    path.write_text(WIDE, encoding="utf-8")
    line = WIDE.splitlines()[4]
    column = line.index("num_heads") + 1
    assert column == 77 and len(line[:column - 1].encode("utf-8")) + 1 == 83
    assert kvlint("wide.py", cwd=tmp_path).stdout.startswith(f"wide.py:5:{column}: KVL102")
    [finding] = json.loads(kvlint("--format", "json", "wide.py", cwd=tmp_path).stdout)
    assert (finding["column"], finding["end_column"]) == (column, column + len("num_heads=8"))
    assert f"col={column},endColumn={column + len('num_heads=8')}," in kvlint("--format", "github", "wide.py",
                                                                             cwd=tmp_path).stdout
    sarif = json.loads(kvlint("--format", "sarif", "wide.py", cwd=tmp_path).stdout)
    region = sarif["runs"][0]["results"][0]["locations"][0]["physicalLocation"]["region"]
    assert (region["startColumn"], region["endColumn"]) == (column, column + len("num_heads=8"))


def test_flake8_and_pylint_keep_their_hosts_byte_columns(tmp_path: Path) -> None:
    """Documented difference: plugins report the parser's column (UTF-8 bytes), as every AST plugin does."""
    path = tmp_path / "wide.py"
    path.write_text(WIDE, encoding="utf-8")
    flake8 = subprocess.run([sys.executable, "-m", "flake8", "--select", "KVL", "wide.py"], capture_output=True,
                            text=True, cwd=tmp_path)
    assert flake8.stdout.startswith("wide.py:5:83: KVL102")
    pylint = subprocess.run([sys.executable, "-m", "pylint", "--load-plugins", "kvlint", "--disable=all",
                             "--enable=kvlint", "--output-format=json", "--score=n", "wide.py"],
                            capture_output=True, text=True, cwd=tmp_path)
    assert json.loads(pylint.stdout)[0]["column"] == 82  # pylint's columns are 0-based


def test_a_line_break_from_a_string_literal_stays_inside_its_text_finding(tmp_path: Path) -> None:
    """One finding, one line: the layout literal's newline is written as \\n (json keeps the message's text)."""
    (tmp_path / "m.py").write_text('import torch_npu\n\n\ndef attend(q, k, v):\n    return torch_npu.'
                                   'npu_fused_infer_attention_score(q, k, v, num_heads=8, scale=0.1, '
                                   'input_layout="BS\\nND")\n')
    out = subprocess.run([sys.executable, "-m", "kvlint", "--isolated", "m.py"], capture_output=True, text=True,
                         cwd=tmp_path, check=False)
    assert out.stdout.count("\n") == 1 and "input_layout 'BS\\nND' is not accepted" in out.stdout
    out = subprocess.run([sys.executable, "-m", "kvlint", "--isolated", "--format", "json", "m.py"],
                         capture_output=True, text=True, cwd=tmp_path, check=False)
    assert "'BS\nND'" in json.loads(out.stdout)[0]["message"]
