"""The command-line habits a ruff or flake8 user brings: standard input for editors, selection that adds up
and refuses codes that do not exist, exclusion patterns, a folder walk that skips what is not the user's code
(and only that), pipes that close early, and ``--explain`` by any of a rule's names."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.test_kvlint_command import BAD, CLEAN, MISSING_SCALE

TWO = BAD.replace("softmax_scale=0.1)", "softmax_scale=0.1)\n\n\ndef prefill(q, k, v):\n"
                  "    return torch_npu.npu_incre_flash_attention(q, k, v, num_heads=8)")
"""KVL102 on line 5, KVL104 on line 9."""


def kvlint(*args: str, cwd: Path, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kvlint", "--isolated", *args], capture_output=True, text=True,
                          cwd=cwd, input=stdin, check=False)


def json_findings(*args: str, cwd: Path, stdin: str | None = None) -> list[tuple[str, int, str]]:
    out = kvlint("--format", "json", *args, cwd=cwd, stdin=stdin)
    assert out.returncode in (0, 1), out.stderr
    return [(f["path"], f["line"], f["code"]) for f in json.loads(out.stdout)]


# --- standard input -----------------------------------------------------------------------------------------

def test_stdin_is_linted_and_reported_under_the_stdin_filename(tmp_path: Path) -> None:
    assert json_findings("-", "--stdin-filename", "pkg/model.py", cwd=tmp_path, stdin=BAD) == [
        ("pkg/model.py", 5, "KVL102")]
    assert json_findings("-", cwd=tmp_path, stdin=BAD) == [("-", 5, "KVL102")]
    assert json_findings("--stdin-filename", "m.py", cwd=tmp_path, stdin=BAD) == [("m.py", 5, "KVL102")]


def test_stdin_filename_is_matched_against_per_file_ignores_and_force_exclude(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text('[tool.kvlint]\nper-file-ignores = {"tests/*" = ["KVL102"]}\n')
    out = subprocess.run([sys.executable, "-m", "kvlint", "-", "--stdin-filename", "tests/t.py"], input=BAD,
                         capture_output=True, text=True, cwd=tmp_path)
    assert out.returncode == 0 and out.stdout == ""
    out = kvlint("-", "--stdin-filename", "gen/m.py", "--extend-exclude", "gen", "--force-exclude", cwd=tmp_path,
                 stdin=BAD)
    assert out.returncode == 0 and out.stdout == ""


def test_stdin_fix_prints_the_fixed_text_and_the_report_on_stderr(tmp_path: Path) -> None:
    out = kvlint("-", "--stdin-filename", "m.py", "--fix", cwd=tmp_path, stdin=TWO)
    assert out.stdout == TWO.replace("num_heads=8, softmax_scale", "num_query_heads=8, softmax_scale")
    assert "m.py:9:12: KVL104" in out.stderr and "KVL102" not in out.stderr
    assert out.returncode == 1
    assert not (tmp_path / "m.py").exists()


def test_stdin_that_cannot_be_decoded_is_kvl000(tmp_path: Path) -> None:
    out = subprocess.run([sys.executable, "-m", "kvlint", "--isolated", "-"], input=b"# coding: nope\nx = 1\n",
                         capture_output=True, cwd=tmp_path)
    assert out.returncode == 1 and b"KVL000" in out.stdout and b"Traceback" not in out.stderr


# --- selection ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("args", "expected"), [
    (["--select", "KVL102", "--select", "KVL104"], {"KVL102", "KVL104"}),
    (["--select", "KVL102", "--extend-select", "KVL104"], {"KVL102", "KVL104"}),
    (["--extend-select", "KVL102"], {"KVL102", "KVL104"}),
    (["--ignore", "KVL102", "--ignore", "KVL104"], set()),
    (["--ignore", "KVL102", "--extend-ignore", "KVL104"], set()),
    (["--extend-ignore", "KVL1"], set()),
])
def test_repeated_and_extended_selection_adds_up(tmp_path: Path, args: list[str], expected: set[str]) -> None:
    (tmp_path / "m.py").write_text(TWO)
    assert {code for _, _, code in json_findings(*args, "m.py", cwd=tmp_path)} == expected


def test_extend_ignore_adds_to_the_configured_ignore(tmp_path: Path) -> None:
    (tmp_path / "m.py").write_text(TWO)
    (tmp_path / "pyproject.toml").write_text('[tool.kvlint]\nignore = ["KVL102"]\n')
    out = subprocess.run([sys.executable, "-m", "kvlint", "--format", "json", "m.py"], capture_output=True,
                         text=True, cwd=tmp_path)
    assert [f["code"] for f in json.loads(out.stdout)] == ["KVL104"]
    out = subprocess.run([sys.executable, "-m", "kvlint", "--extend-ignore", "KVL104", "m.py"], capture_output=True,
                         text=True, cwd=tmp_path)
    assert out.returncode == 0 and out.stdout == ""


@pytest.mark.parametrize("option", ["--select", "--extend-select", "--ignore", "--extend-ignore"])
@pytest.mark.parametrize("code", ["KVL999", "KVL4", "KVL1999"])
def test_a_code_no_rule_has_is_a_usage_error(tmp_path: Path, option: str, code: str) -> None:
    (tmp_path / "m.py").write_text(BAD)
    out = kvlint(option, code, "m.py", cwd=tmp_path)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert f"argument {option}:" in out.stderr and code in out.stderr


def test_a_configured_code_no_rule_has_is_an_error_naming_the_file(tmp_path: Path) -> None:
    (tmp_path / "m.py").write_text(BAD)
    (tmp_path / "pyproject.toml").write_text('[tool.kvlint]\nselect = ["KVL999"]\n')
    out = subprocess.run([sys.executable, "-m", "kvlint", "m.py"], capture_output=True, text=True, cwd=tmp_path)
    assert out.returncode == 2
    assert "pyproject.toml: [tool.kvlint] select: no kvlint rule has the code 'KVL999'" in out.stderr


# --- exclusion and the folder walk --------------------------------------------------------------------------

def walk_tree(tmp_path: Path) -> Path:
    files = {
        "bad.py": BAD,
        "build/generated.py": BAD,  # setuptools output: not a package
        "venv/lib/bad.py": BAD,
        "pkg/__init__.py": "",
        "pkg/env/__init__.py": "",
        "pkg/env/runner.py": BAD,  # a package named env, deep in the tree
        "pkg/build/__init__.py": "",
        "pkg/build/graph.py": MISSING_SCALE,  # a package named build
        "pkg/models/llama.py": BAD,
        "pkg/models/llama_pb2.py": BAD,
        "tools/.venv-2/pyvenv.cfg": "home = /usr\n",  # a virtualenv under any name
        "tools/.venv-2/lib/bad.py": BAD,
        "tools/clean.py": CLEAN,
    }
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    (tmp_path / "pkg" / ".#llama.py").symlink_to("user@host.1234")  # an Emacs lock file
    return tmp_path


def linted_paths(*args: str, cwd: Path) -> list[str]:
    return sorted({path for path, _, _ in json_findings(*args, cwd=cwd)})


def test_the_walk_skips_build_output_and_virtualenvs_but_not_packages_with_those_names(tmp_path: Path) -> None:
    out = kvlint(".", cwd=walk_tree(tmp_path))
    assert out.returncode == 1 and "Traceback" not in out.stderr and "error" not in out.stderr, out.stderr
    assert linted_paths(".", cwd=tmp_path) == [
        "./bad.py", "./pkg/build/graph.py", "./pkg/env/runner.py", "./pkg/models/llama.py",
        "./pkg/models/llama_pb2.py"]


def test_exclude_replaces_the_defaults_and_extend_exclude_adds(tmp_path: Path) -> None:
    walk_tree(tmp_path)
    assert linted_paths(".", "--extend-exclude", "*_pb2.py", cwd=tmp_path) == [
        "./bad.py", "./pkg/build/graph.py", "./pkg/env/runner.py", "./pkg/models/llama.py"]
    assert linted_paths(".", "--extend-exclude", "pkg/models,pkg/env", cwd=tmp_path) == [
        "./bad.py", "./pkg/build/graph.py"]
    assert "./build/generated.py" in linted_paths(".", "--exclude", "*_pb2.py", cwd=tmp_path)
    assert "./venv/lib/bad.py" in linted_paths(".", "--exclude", "*_pb2.py", cwd=tmp_path)
    assert "./tools/.venv-2/lib/bad.py" not in linted_paths(".", "--exclude", "*_pb2.py", cwd=tmp_path)


def test_exclude_keys_of_the_configuration_are_relative_to_its_folder(tmp_path: Path) -> None:
    walk_tree(tmp_path)
    (tmp_path / "pyproject.toml").write_text('[tool.kvlint]\nextend-exclude = ["pkg/models/*_pb2.py", "pkg/env"]\n')
    out = subprocess.run([sys.executable, "-m", "kvlint", "--format", "json", "."], capture_output=True,
                         text=True, cwd=tmp_path / "pkg")
    assert sorted({f["path"] for f in json.loads(out.stdout)}) == ["./build/graph.py", "./models/llama.py"]
    (tmp_path / "pyproject.toml").write_text('[tool.kvlint]\nexclude = ["pkg"]\n')
    out = subprocess.run([sys.executable, "-m", "kvlint", "--format", "json", "."], capture_output=True,
                         text=True, cwd=tmp_path)
    assert sorted({f["path"] for f in json.loads(out.stdout)}) == ["./bad.py", "./build/generated.py",
                                                                   "./venv/lib/bad.py"]


def test_a_file_named_on_the_command_line_is_linted_unless_force_exclude(tmp_path: Path) -> None:
    walk_tree(tmp_path)
    assert linted_paths("build/generated.py", cwd=tmp_path) == ["build/generated.py"]
    out = kvlint("--force-exclude", "build/generated.py", "pkg/models/llama.py", cwd=tmp_path)
    assert [line.split(":")[0] for line in out.stdout.splitlines()] == ["pkg/models/llama.py"]


def test_a_path_given_twice_is_linted_once(tmp_path: Path) -> None:
    (tmp_path / "m.py").write_text(BAD)
    out = kvlint("m.py", "./m.py", str(tmp_path / "m.py"), ".", cwd=tmp_path)
    assert len(out.stdout.splitlines()) == 1


def test_no_python_files_is_a_warning_not_an_error(tmp_path: Path) -> None:
    (tmp_path / "README.md").write_text("# nothing to lint\n")
    out = kvlint(".", cwd=tmp_path)
    assert out.returncode == 0 and out.stdout == ""
    assert out.stderr == "kvlint: warning: no Python files found\n"


# --- pipes and --explain ------------------------------------------------------------------------------------

@pytest.mark.parametrize(("args", "reader"), [
    (["--list-rules"], "true"),  # exits before kvlint has started, so every write meets a closed pipe
    (["--explain", "KVL201"], "true"),
    (["--list-rules"], "head -1"),
    (["--format", "json", "."], "head -1"),  # ~200 KB: more than a pipe holds, so a write fails once head exits
])
def test_a_reader_that_stops_early_gets_no_traceback(tmp_path: Path, args: list[str], reader: str) -> None:
    if "." in args:
        for index in range(600):
            (tmp_path / f"m{index:03}.py").write_text(BAD)
    done = subprocess.run(f"{sys.executable} -m kvlint --isolated {' '.join(args)} | {reader}", shell=True,
                          capture_output=True, text=True, cwd=tmp_path, executable="/bin/bash")
    assert done.stdout.count("\n") == (0 if reader == "true" else 1)
    assert "Traceback" not in done.stderr and "BrokenPipeError" not in done.stderr, done.stderr


def test_the_broken_pipe_helper_returns_141_and_silences_the_final_flush(tmp_path: Path) -> None:
    script = ("import sys\nfrom kvlint.console import quiet_on_broken_pipe\n"
              "def main():\n    for _ in range(100000):\n        print('x' * 80)\n    return 0\n"
              "sys.exit(quiet_on_broken_pipe(main))\n")
    done = subprocess.run(f"{sys.executable} -c \"$SCRIPT\" | head -1; echo \"status=${{PIPESTATUS[0]}}\"",
                          shell=True, capture_output=True, text=True, executable="/bin/bash",
                          env={"SCRIPT": script, "PATH": "/usr/bin:/bin"})
    assert done.stdout.splitlines()[-1] == "status=141"
    assert done.stderr == ""


@pytest.mark.parametrize("name", ["E7201", "e7201", "KVL201", "atten-mask-dtype"])
def test_explain_takes_a_code_a_symbol_or_a_pylint_message_id(tmp_path: Path, name: str) -> None:
    out = kvlint("--explain", name, cwd=tmp_path)
    assert out.returncode == 0 and out.stdout.startswith("# KVL201 `atten-mask-dtype`\n")


def test_explain_of_the_wrong_pylint_letter_is_a_usage_error(tmp_path: Path) -> None:
    out = kvlint("--explain", "W7201", cwd=tmp_path)
    assert out.returncode == 2 and "'W7201' is not a kvlint rule code, symbol or pylint message id" in out.stderr


# --- small edges: an empty --explain, a --stdin-filename without '-', the exit codes in --help -------------

def test_an_empty_explain_is_a_usage_error_not_a_run_over_the_current_folder(tmp_path: Path) -> None:
    (tmp_path / "m.py").write_text(BAD)
    out = kvlint("--explain", "", cwd=tmp_path)
    assert out.returncode == 2 and out.stdout == ""
    assert "--explain: expected a rule code" in out.stderr and "KVL102" not in out.stderr


def test_a_stdin_filename_without_the_dash_is_a_usage_error(tmp_path: Path) -> None:
    """Editors that pass a path as well as --stdin-filename would otherwise get the saved file's findings for
    the unsaved buffer they sent."""
    (tmp_path / "m.py").write_text(CLEAN)
    out = kvlint("--stdin-filename", "x.py", "m.py", cwd=tmp_path, stdin=BAD)
    assert out.returncode == 2 and out.stdout == ""
    assert "--stdin-filename names standard input" in out.stderr and "add '-'" in out.stderr
    assert json_findings("--stdin-filename", "x.py", "-", "m.py", cwd=tmp_path, stdin=BAD) == [("x.py", 5, "KVL102")]


def test_help_lists_the_exit_codes(tmp_path: Path) -> None:
    out = kvlint("--help", cwd=tmp_path)
    assert out.returncode == 0
    listed = out.stdout.split("exit status:\n", 1)[1]
    assert [line.split()[0] for line in listed.splitlines() if line.strip()] == ["0", "1", "2", "141"]


# --- the command line wins over the configuration ----------------------------------------------------------

def test_a_code_selected_on_the_command_line_is_reported_though_the_configuration_ignores_it(tmp_path: Path) -> None:
    """As in ruff: --select starts the selection afresh; --extend-select wins over an ignore no more specific."""
    (tmp_path / "m.py").write_text(BAD)
    (tmp_path / "pyproject.toml").write_text('[tool.kvlint]\nignore = ["KVL102"]\n')
    plain = subprocess.run([sys.executable, "-m", "kvlint", "--format", "json", "m.py"], capture_output=True,
                           text=True, cwd=tmp_path, check=False)
    assert plain.returncode == 0 and json.loads(plain.stdout) == []
    for option in ("--select", "--extend-select"):
        for chosen in ("KVL102", "KVL1"):
            out = subprocess.run([sys.executable, "-m", "kvlint", "--format", "json", option, chosen, "m.py"],
                                 capture_output=True, text=True, cwd=tmp_path, check=False)
            found = [(f["line"], f["code"]) for f in json.loads(out.stdout)]
            wins = option == "--select" or chosen == "KVL102"  # --extend-select KVL1 is less specific than KVL102
            assert found == ([(5, "KVL102")] if wins else []), (option, chosen)


def test_per_file_ignores_that_turn_off_a_code_the_command_line_selects_say_so(tmp_path: Path) -> None:
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "m.py").write_text(BAD)
    (tmp_path / "pyproject.toml").write_text('[tool.kvlint]\nper-file-ignores = {"tests/*" = ["KVL102"]}\n')
    out = subprocess.run([sys.executable, "-m", "kvlint", "--select", "KVL102", "tests"], capture_output=True,
                         text=True, cwd=tmp_path, check=False)
    assert out.returncode == 0 and out.stdout == ""
    assert "warning: KVL102 is selected on the command line, but per-file-ignores of" in out.stderr
    assert "pyproject.toml turn it off for tests/m.py" in out.stderr
