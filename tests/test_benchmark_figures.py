"""The README quotes only what the benchmarks measured: every figure of its Benchmarks section and of the probe's
cost is a number of a section of benchmarks/RESULTS.md that a script writes (``--update-results``, between
``<!-- begin NAME -->`` and ``<!-- end NAME -->``), and each such section says when, at what load and with which
command it was measured. The figures are read from both files, so re-running a benchmark and updating the
README keeps this test meaningful."""

from __future__ import annotations

import re

from tests.conftest import ROOT

README = (ROOT / "README.md").read_text(encoding="utf-8")
RESULTS = (ROOT / "benchmarks" / "RESULTS.md").read_text(encoding="utf-8")
SECTIONS = dict(re.findall(r"<!-- begin ([\w-]+) -->\n(.*?)<!-- end \1 -->", RESULTS, re.DOTALL))
NUMBER = re.compile(r"(?<![\w.])\d+(?:\.\d+)?")
FIGURE = re.compile(r"(?<![\w.])(\d+(?:\.\d+)?)(?:\*\*)?\s?(?:x\b|µs| / \d)")
"""A ratio (``6.91x``), a time (``29.7 µs``) or a count (``487 / 487``) as the README writes it."""


def _benchmarks_section() -> str:
    return README.split("\n## Benchmarks\n", 1)[1].split("\n## ", 1)[0]


def _probe_cost_sentence() -> str:
    return README.split("What a call costs:", 1)[1].split("\n\n", 1)[0]


def _measured(figure: str) -> list[str]:
    """The script-written sections holding a number that ``figure`` rounds (``6.91`` for 6.913)."""
    decimals = len(figure.partition(".")[2])
    return [name for name, body in SECTIONS.items()
            if any(round(float(number), decimals) == float(figure) for number in NUMBER.findall(body))]


def test_every_script_written_section_says_when_at_what_load_and_how() -> None:
    assert len(SECTIONS) >= 10
    for name, body in SECTIONS.items():
        assert re.search(r"\d{4}-\d\d-\d\d \d\d:\d\d UTC", body), f"{name}: no date"
        assert "load average" in body, f"{name}: no machine load"
        assert re.search(r"python benchmarks/\w+\.py", body), f"{name}: no command"


def test_every_figure_the_readme_quotes_is_a_measured_one() -> None:
    quoted = FIGURE.findall(_benchmarks_section()) + FIGURE.findall(_probe_cost_sentence())
    assert len(quoted) >= 10
    unmeasured = [figure for figure in quoted if not _measured(figure)]
    assert unmeasured == [], f"README figures no script-written section of RESULTS.md holds: {unmeasured}"


def test_the_sections_the_readme_names_are_script_written() -> None:
    named = re.findall(r"`([\w-]+)`(?: section|\))", _benchmarks_section() + _probe_cost_sentence())
    assert named and all(name in SECTIONS for name in named), named


def test_the_recognition_figure_says_what_was_set_aside() -> None:
    """'100 % of the operator-named calls' left out the 16 of 503 kvlint's resolver set aside."""
    text = " ".join(_benchmarks_section().split())
    assert "100 %" not in text
    total, aside = re.search(r"\*\*all\*\* \| (\d+) \| \d+ \| (\d+) \|", SECTIONS["realcode_recognition"]).groups()
    assert f"Of the {total} operator-named calls" in text and f"set {aside} aside" in text


def test_the_probe_cost_is_not_called_a_few_microseconds() -> None:
    assert "a few microseconds" not in README
