"""The probe rules' pages: the bad program of each, run under the probe on the emulator, prints exactly the
output the page shows, and the fixed one (and the look-alike) nothing. (The rest of the pages' contract is in
``tests/test_docs.py``, which runs without torch.)"""

from __future__ import annotations

import pytest

from kvlint.catalogue.pages import explain
from kvlint.catalogue.rule_pages import DOCS
from kvlint.catalogue.rules import PROBE_RULES, Rule
from tests.probe_fixtures.harness import run_example


def ids(entry: Rule) -> str:
    return entry.code


RUNNABLE = [r for r in PROBE_RULES if DOCS[r.code].runnable]


def test_only_the_findings_the_emulator_cannot_produce_have_examples_that_are_not_run() -> None:
    assert {r.code for r in PROBE_RULES if not DOCS[r.code].runnable} == {"KVL501", "KVL599"}


@pytest.mark.parametrize("entry", RUNNABLE, ids=ids)
def test_a_probe_pages_bad_program_prints_the_output_the_page_shows(entry: Rule) -> None:
    doc = DOCS[entry.code]
    printed, _ = run_example(doc.bad)
    assert printed == doc.output
    assert f": {entry.code} {entry.symbol}: " in doc.output
    assert doc.output in explain(entry.code)


@pytest.mark.parametrize("entry", RUNNABLE, ids=ids)
def test_a_probe_pages_fixed_program_and_look_alike_run_clean(entry: Rule) -> None:
    doc = DOCS[entry.code]
    for program in filter(None, (doc.good, doc.silent)):
        assert run_example(program) == ("", None)
