"""Every fixture is reported exactly as its markers say, by each of the three front-ends."""

from __future__ import annotations

import os
from collections import defaultdict
from pathlib import Path

import pytest

from kvlint.catalogue.rules import STATIC_RULES
from kvlint.frontends.cli import lint_file
from tests.fixture_files import expected_findings, fixture_files
from tests.frontends import run_cli, run_flake8, run_pylint

FILES = fixture_files()


def _relative(path: Path) -> str:
    return os.path.relpath(path)


@pytest.mark.parametrize("path", FILES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_engine_reports_exactly_the_marked_findings(path: Path) -> None:
    found = {(f.line, f.code) for f in lint_file(str(path)).findings}
    assert found == expected_findings(path)


@pytest.mark.parametrize("path", FILES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_flagged_fixtures_have_markers_and_clean_ones_none(path: Path) -> None:
    assert path.name.startswith(("flagged_", "clean_")), "fixture names say what they show"
    codes = {code for _, code in expected_findings(path)}
    if path.name.startswith("flagged_"):
        assert path.parent.name in codes
    else:
        assert not codes


def test_every_static_rule_has_flagged_and_clean_fixtures() -> None:
    kinds = defaultdict(set)
    for path in FILES:
        kinds[path.parent.name].add(path.name.split("_")[0])
    missing = [rule.code for rule in STATIC_RULES if rule.about_code and kinds[rule.code] != {"flagged", "clean"}]
    assert not missing, f"rules without both flagged_ and clean_ fixtures: {missing}"


@pytest.fixture(scope="module")
def front_end_results() -> dict[str, dict[str, set[tuple[int, str]]]]:
    results: dict[str, dict[str, set[tuple[int, str]]]] = {}
    for name, runner in (("cli", run_cli), ("flake8", run_flake8), ("pylint", run_pylint)):
        per_file: dict[str, set[tuple[int, str]]] = defaultdict(set)
        for path, line, code in runner(FILES):
            per_file[_relative(Path(path))].add((line, code))
        results[name] = per_file
    return results


@pytest.mark.parametrize("path", FILES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_pylint_flake8_and_cli_agree(path: Path, front_end_results) -> None:
    expected = {(line, code) for line, code in expected_findings(path) if code != "KVL000"}
    key = _relative(path)
    cli = {(line, code) for line, code in front_end_results["cli"].get(key, set()) if code != "KVL000"}
    assert cli == expected
    assert front_end_results["flake8"].get(key, set()) == expected
    assert front_end_results["pylint"].get(key, set()) == expected
