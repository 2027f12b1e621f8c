"""The README's Quickstart works on a fresh clone: its two commands, run as a newcomer runs them.

The first command (the main job) runs as written in a ``git clone`` of this repository's HEAD in a
temporary folder: it creates the clone's ``.venv``, lints the buggy examples and runs the examples under
the probe. The second (the test command) would run this very test again, so it is checked in its two
parts instead, on the same clone: its environment set-up is idempotent (a second run succeeds, quickly),
and the environment it leaves collects the whole suite.
"""

from __future__ import annotations

import os
import re
import subprocess
import time
from pathlib import Path

import pytest

from tests.test_examples import BUGGY_EXAMPLES

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
MAIN_JOB, TEST_COMMAND = "scripts/demo", "scripts/test"
SETUP_AGAIN_SECONDS = 180
"""A second set-up only checks what is installed (pip's 'already satisfied'); the first one downloads and
installs torch, so this bound tells the two apart even on a loaded machine."""


def quickstart_commands() -> list[str]:
    """The commands of the README's Quickstart: the lines of its first code block, comments stripped."""
    text = README.read_text(encoding="utf-8")
    section = re.search(r"^## Quickstart\n(.*?)(?=^## )", text, re.MULTILINE | re.DOTALL)
    assert section, "README.md has no '## Quickstart' section"
    block = re.search(r"```(?:bash|sh|console)?\n(.*?)```", section.group(1), re.DOTALL)
    assert block, "the Quickstart has no code block"
    lines = (line.split("#", 1)[0].strip() for line in block.group(1).splitlines())
    return [line for line in lines if line]


def _environment() -> dict[str, str]:
    """This environment without the probe's settings and without this test run's virtualenv."""
    return {
        key: value for key, value in os.environ.items()
        if not key.startswith(("KVLINT_", "PYTEST_")) and key not in ("VIRTUAL_ENV", "PYTHONPATH")
    }


def _shell(command: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", "-c", command], cwd=cwd, env=_environment(), capture_output=True, text=True, timeout=3600
    )


@pytest.fixture(scope="module")
def clone(tmp_path_factory: pytest.TempPathFactory) -> Path:
    target = tmp_path_factory.mktemp("quickstart") / "kvlint"
    subprocess.run(["git", "clone", "--quiet", str(ROOT), str(target)], check=True, timeout=600)
    return target


@pytest.fixture(scope="module")
def main_job(clone: Path) -> subprocess.CompletedProcess[str]:
    """The Quickstart's first command, as written, in the fresh clone."""
    return _shell(quickstart_commands()[0], clone)


def test_the_quickstart_is_the_main_job_and_the_test_command() -> None:
    assert quickstart_commands() == [MAIN_JOB, TEST_COMMAND]
    assert TEST_COMMAND in (ROOT / ".ci" / "run").read_text(encoding="utf-8")


def test_the_main_job_shows_each_buggy_examples_findings(main_job: subprocess.CompletedProcess[str]) -> None:
    assert main_job.returncode == 0, main_job.stdout[-4000:] + main_job.stderr[-4000:]
    for name, expected in BUGGY_EXAMPLES.items():
        for code in expected.static:
            assert re.search(rf"^examples/buggy/{re.escape(name)}:\d+:\d+: {code} ", main_job.stdout, re.MULTILINE)


def test_the_main_job_runs_the_examples_under_the_probe(main_job: subprocess.CompletedProcess[str]) -> None:
    assert main_job.stdout.count("PASS incremental decode == full causal forward") == 1  # run.py
    assert main_job.stdout.count("FAIL incremental decode == full causal forward") == 1  # the buggy one
    assert main_job.stderr.count("kvlint probe summary") == 2
    assert "0 finding(s)" in main_job.stderr  # run.py
    assert "KVL505 probe-cache-write-drift" in main_job.stderr  # kv_len advanced inside a layer


def test_the_test_commands_setup_is_idempotent(clone: Path, main_job: subprocess.CompletedProcess[str]) -> None:
    assert (clone / ".venv" / "bin" / "python").exists(), main_job.stderr[-4000:]
    started = time.monotonic()
    again = _shell("scripts/setup-env", clone)
    assert again.returncode == 0, again.stderr[-4000:]
    assert time.monotonic() - started < SETUP_AGAIN_SECONDS


def test_the_test_commands_environment_collects_the_suite(
    clone: Path, main_job: subprocess.CompletedProcess[str]
) -> None:
    collected = _shell(".venv/bin/python -m pytest --collect-only -q -p no:cacheprovider", clone)
    assert collected.returncode == 0, collected.stdout[-4000:] + collected.stderr[-4000:]
    assert re.search(r"^\d+ tests collected", collected.stdout, re.MULTILINE)
    for test_file in sorted((clone / "tests").glob("test_*.py")):
        assert f"tests/{test_file.name}::" in collected.stdout
