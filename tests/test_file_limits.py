"""A file whose analysis goes past the per-file time or memory limit is skipped with a warning naming it and the
limit, in each of the three front-ends, and the run goes on: the other files keep their findings. The kvlint
command says it in every format (SARIF: ``executionSuccessful`` false and a notification on the file) and keeps
the exit status of the findings; flake8 and pylint report ``KVL001`` / ``W7001`` at line 1, and pylint's SARIF
reporter turns that into the same notification. Bad limits are errors naming the option or the key."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest

from tests.conftest import ROOT

SCHEMA = json.loads((ROOT / "tests" / "data" / "sarif" / "sarif-schema-2.1.0.json").read_text(encoding="utf-8"))
CALL = "torch_npu.npu_fused_infer_attention_score(q, k, v, num_heads=8, scale=0.1, input_layuot='BSND')"
"""One KVL101 (``input_layuot``)."""
SLOW_CALLS = 3000
"""Calls in ``slow.py``: several seconds of CPU to analyse, where ``fast.py`` takes a few hundredths (plus
astroid's bootstrap, at most about 0.2 s, in whichever file a process analyses first)."""
LIMIT = "1s"
OVER_TIME = "slow.py: skipped: its analysis took more than the per-file time limit of 1 s of CPU"
NOT_ANALYSED = "kvlint did not analyse this file: its analysis took more than the per-file time limit of 1 s of CPU"


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``fast.py`` (one KVL101) and ``slow.py`` (a function of ``SLOW_CALLS`` such calls)."""
    folder = tmp_path_factory.mktemp("limits")
    (folder / "fast.py").write_text(f"import torch_npu\n\n\ndef attend(q, k, v):\n    return {CALL}\n")
    body = "".join(f"    out{i} = {CALL}\n" for i in range(SLOW_CALLS))
    (folder / "slow.py").write_text(f"import torch_npu\n\n\ndef attend(q, k, v):\n{body}    return out0\n")
    return folder


def run(tree: Path, *command: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", *command], capture_output=True, text=True, cwd=tree, check=False)


def kvlint(tree: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return run(tree, "kvlint", "--isolated", *args)


def test_the_cli_skips_the_slow_file_with_a_warning_and_reports_the_others(tree: Path) -> None:
    out = kvlint(tree, "--file-time-limit", LIMIT, "fast.py", "slow.py")
    assert out.returncode == 1  # the exit status of fast.py's finding: a skip is not one
    assert [line.split(":")[:2] + [line.split()[1]] for line in out.stdout.splitlines()] == [["fast.py", "5", "KVL101"]]
    assert out.stderr.splitlines()[0].startswith(f"kvlint: warning: {OVER_TIME} (file-time-limit")
    assert out.stderr.splitlines()[-1] == "kvlint: warning: incomplete results: 1 of 2 file(s) not analysed (named above)"


def test_json_holds_the_other_files_findings_and_standard_error_names_the_skip(tree: Path) -> None:
    out = kvlint(tree, "--file-time-limit", LIMIT, "--format", "json", "fast.py", "slow.py")
    assert out.returncode == 1
    assert [(f["path"], f["code"]) for f in json.loads(out.stdout)] == [("fast.py", "KVL101")]
    assert f"kvlint: warning: {OVER_TIME}" in out.stderr
    assert "incomplete results: 1 of 2 file(s)" in out.stderr


def test_sarif_marks_the_run_incomplete_with_a_notification_naming_the_file_and_the_limit(tree: Path) -> None:
    out = kvlint(tree, "--file-time-limit", LIMIT, "--format", "sarif", "fast.py", "slow.py")
    log = json.loads(out.stdout)
    jsonschema.Draft4Validator(SCHEMA).validate(log)
    [run_] = log["runs"]
    assert [r["ruleId"] for r in run_["results"]] == ["KVL101"]
    [invocation] = run_["invocations"]
    assert invocation["executionSuccessful"] is False
    [notification] = invocation["toolExecutionNotifications"]
    assert notification["level"] == "warning" and notification["message"]["text"].startswith(OVER_TIME)
    assert notification["locations"][0]["physicalLocation"]["artifactLocation"]["uri"].endswith("slow.py")


def test_the_configured_limit_applies_and_the_command_line_replaces_it(tree: Path, tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text('[tool.kvlint]\nfile-time-limit = "1ms"\n')
    (tmp_path / "fast.py").write_text((tree / "fast.py").read_text())
    configured = run(tmp_path, "kvlint", "fast.py")
    assert (configured.returncode, configured.stdout) == (0, "")
    assert "fast.py: skipped: its analysis took more than the per-file time limit of 0.001 s" in configured.stderr
    off = run(tmp_path, "kvlint", "--file-time-limit", "none", "fast.py")
    assert off.returncode == 1 and "KVL101" in off.stdout and "skipped" not in off.stderr


def test_a_memory_limit_skips_the_file_naming_the_limit(tree: Path) -> None:
    """The first file of a process builds astroid's own trees too: its analysis grows the process by megabytes."""
    out = kvlint(tree, "--file-memory-limit", "1KiB", "fast.py")
    assert (out.returncode, out.stdout) == (0, "")
    assert ("fast.py: skipped: its analysis grew the process's resident memory by more than the per-file memory "
            "limit of 1 KiB") in out.stderr


def test_flake8_reports_kvl001_on_the_slow_file_and_goes_on(tree: Path) -> None:
    out = run(tree, "flake8", "--select", "KVL", "--kvlint-file-time-limit", LIMIT, "fast.py", "slow.py")
    assert out.returncode == 1
    lines = out.stdout.splitlines()
    assert [line.split(": ")[1].split()[0] for line in lines] == ["KVL101", "KVL001"]
    assert lines[1].startswith(f"slow.py:1:1: KVL001 {NOT_ANALYSED}")


def test_pylint_reports_w7001_on_the_slow_module_and_goes_on(tree: Path) -> None:
    out = run(tree, "pylint", "--load-plugins", "kvlint", "--disable=all", "--enable=kvlint", "--score=n",
              "--output-format=json", f"--kvlint-file-time-limit={LIMIT}", "fast.py", "slow.py")
    messages = [(m["path"], m["line"], m["message-id"], m["symbol"]) for m in json.loads(out.stdout)]
    assert messages == [("fast.py", 5, "E7101", "fa-unknown-keyword"), ("slow.py", 1, "W7001", "file-not-analysed")]
    assert json.loads(out.stdout)[1]["message"].startswith(NOT_ANALYSED)


def test_pylints_sarif_reporter_marks_the_run_incomplete(tree: Path) -> None:
    out = run(tree, "pylint", "--load-plugins", "kvlint", "--disable=all", "--enable=kvlint", "--score=n",
              "--output-format=kvlint.reporters.SarifReporter", f"--kvlint-file-time-limit={LIMIT}",
              "fast.py", "slow.py")
    log = json.loads(out.stdout)
    jsonschema.Draft4Validator(SCHEMA).validate(log)
    [run_] = log["runs"]
    assert [r["ruleId"] for r in run_["results"]] == ["KVL101"]
    [invocation] = run_["invocations"]
    assert invocation["executionSuccessful"] is False
    [notification] = invocation["toolExecutionNotifications"]
    assert notification["message"]["text"] == f"slow.py: {NOT_ANALYSED} (file-time-limit; 0 turns it off)"
    assert notification["locations"][0]["physicalLocation"]["artifactLocation"]["uri"].endswith("slow.py")


@pytest.mark.parametrize(("option", "value", "says"), [
    ("--file-time-limit", "5h", "invalid time limit '5h'"),
    ("--file-time-limit", "-1s", "invalid time limit '-1s'"),
    ("--file-memory-limit", "1gb", "invalid size '1gb': unit 'gb' is not one of"),
    ("--file-memory-limit", "lots", "invalid size 'lots'"),
])
def test_a_bad_limit_on_the_command_line_is_a_usage_error_naming_the_option(tree: Path, option: str, value: str,
                                                                            says: str) -> None:
    out = kvlint(tree, f"{option}={value}", "fast.py")
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert f"kvlint: error: argument {option}: {says}" in out.stderr


def test_a_bad_configured_limit_names_the_file_and_the_key(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text("[tool.kvlint]\nfile-memory-limit = true\n")
    out = run(tmp_path, "kvlint", ".")
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert "pyproject.toml: [tool.kvlint] file-memory-limit: invalid memory limit True" in out.stderr


def test_flake8_and_pylint_name_their_option_for_a_bad_limit(tree: Path) -> None:
    flake8 = run(tree, "flake8", "--select", "KVL", "--kvlint-file-time-limit", "soon", "fast.py")
    assert flake8.returncode != 0 and "Traceback" not in flake8.stderr
    assert "argument --kvlint-file-time-limit: flake8 option --kvlint-file-time-limit: invalid time limit" in flake8.stderr
    pylint = run(tree, "pylint", "--load-plugins", "kvlint", "--kvlint-file-memory-limit=big", "fast.py")
    assert pylint.returncode == 32 and "Traceback" not in pylint.stderr
    assert "kvlint: error: pylint option --kvlint-file-memory-limit: invalid size 'big'" in pylint.stderr
