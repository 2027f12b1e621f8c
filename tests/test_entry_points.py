"""The public entry points keep working whatever the layout inside: every declared console script and
plugin loads, the console scripts run, and the documented import paths resolve."""

from __future__ import annotations

import importlib
import importlib.metadata
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kvlint.catalogue.project import DISTRIBUTION as NAME

DISTRIBUTION = importlib.metadata.distribution(NAME)
ENTRY_POINTS = [ep for ep in DISTRIBUTION.entry_points if ep.group in ("console_scripts", "flake8.extension")]
BIN = str(Path(sys.executable).parent)


def test_the_import_package_kvlint_comes_from_the_distribution_kvlint_ascend() -> None:
    """``kvlint`` on the package index is another project; this one is installed as ``kvlint-ascend``."""
    assert NAME == "kvlint-ascend" == DISTRIBUTION.metadata["Name"]
    assert NAME in importlib.metadata.packages_distributions()["kvlint"]
    assert DISTRIBUTION.version == importlib.import_module("kvlint").__version__


def test_the_distribution_declares_the_documented_entry_points() -> None:
    assert {(ep.group, ep.name) for ep in ENTRY_POINTS} == {
        ("console_scripts", "kvlint"), ("console_scripts", "kvlint-budget"), ("flake8.extension", "KVL"),
    }


@pytest.mark.parametrize("entry_point", ENTRY_POINTS, ids=lambda ep: f"{ep.group}:{ep.name}")
def test_every_entry_point_loads(entry_point: importlib.metadata.EntryPoint) -> None:
    assert callable(entry_point.load())


@pytest.mark.parametrize(("script", "args", "expected"), [
    ("kvlint", ["--version"], "kvlint "),
    ("kvlint-budget", ["--layers", "2", "--kv-heads", "1", "--head-dim", "8"], "KV bytes per token"),
])
def test_console_scripts_run(script: str, args: list[str], expected: str) -> None:
    path = shutil.which(script, path=BIN)
    assert path is not None, f"{script} is not installed next to {sys.executable}"
    done = subprocess.run([path, *args], capture_output=True, text=True, check=True)
    assert expected in done.stdout


@pytest.mark.parametrize(("dotted", "needs"), [
    ("kvlint:register", None),
    ("kvlint.reporters:SarifReporter", "pylint"),
    ("kvlint.runtime_probe.emulator:install", "torch"),
    ("kvlint.checkers:register_checkers", "pylint"),
])
def test_documented_import_paths_resolve(dotted: str, needs: str | None) -> None:
    """Each path needs at most the extra that provides its host (pylint, or torch for the probe)."""
    if needs:
        pytest.importorskip(needs, reason=f"the {needs} extra is not installed")
    module, _, attribute = dotted.partition(":")
    assert callable(getattr(importlib.import_module(module), attribute))


@pytest.mark.parametrize("module", ["kvlint", "kvlint.budget", "kvlint.runtime_probe"])
def test_python_dash_m_runs(module: str) -> None:
    done = subprocess.run([sys.executable, "-m", module, "--help"], capture_output=True, text=True)
    assert done.returncode == 0 and "usage" in done.stdout.lower(), done.stderr
