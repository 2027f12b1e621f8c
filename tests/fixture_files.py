"""The functional fixtures: Python files under tests/fixtures/<CODE>/ whose expected findings are marked
inline with ``# expect: KVL102`` (several codes: ``# expect: KVL102, KVL104``) on the reported line.

``flagged_*.py`` files show code that must be reported; ``clean_*.py`` files show look-alikes that must not
(they carry no marker). A fixture may hold bytes that are not UTF-8 inside comments, as CPython allows.
"""

from __future__ import annotations

import re
from pathlib import Path

FIXTURES = Path(__file__).parent / "fixtures"
_MARKER = re.compile(r"#\s*expect:\s*(KVL\d{3}(?:\s*,\s*KVL\d{3})*)")


def fixture_files() -> list[Path]:
    return sorted(FIXTURES.glob("KVL*/*.py"))


def expected_findings(path: Path) -> set[tuple[int, str]]:
    """(line, code) pairs marked in the fixture."""
    expected = set()
    for number, line in enumerate(path.read_bytes().decode("utf-8", "replace").splitlines(), start=1):
        match = _MARKER.search(line)
        if match:
            expected.update((number, code.strip()) for code in match.group(1).split(","))
    return expected
