"""examples/moe_recipe.py, the model written as the public Ascend recipes write theirs, runs unchanged under
``KVLINT_EMULATE=1`` (eagerly and compiled through torchair) and matches its plain-PyTorch twin; kvlint finds
nothing to report in it."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.conftest import ROOT

EXAMPLE = ROOT / "examples" / "moe_recipe.py"


def run(*args: str, emulate: bool = True) -> subprocess.CompletedProcess[str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("KVLINT_")}
    if emulate:
        env["KVLINT_EMULATE"] = "1"
    return subprocess.run([sys.executable, str(EXAMPLE), *args], capture_output=True, text=True, cwd=ROOT,
                          env=env, timeout=900)  # fmt: skip


def test_eager_prefill_and_decode_match_plain_pytorch() -> None:
    done = run()
    assert done.returncode == 0, done.stdout + done.stderr
    assert "PASS prefill + 3 decode steps == plain PyTorch forward" in done.stdout
    assert "kvlint CPU emulator" in done.stdout


@pytest.mark.slow
def test_compiled_through_torchair_matches_plain_pytorch() -> None:
    done = run("--graph")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "graph (torchair)" in done.stdout and "PASS prefill + 3 decode steps" in done.stdout


def test_without_torch_npu_it_says_how_to_run() -> None:
    done = run(emulate=False)
    assert done.returncode != 0 and "KVLINT_EMULATE=1" in done.stderr


def test_the_linter_has_nothing_to_report() -> None:
    done = subprocess.run([sys.executable, "-m", "kvlint", str(EXAMPLE)], capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 0 and done.stdout == ""
