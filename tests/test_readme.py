"""The README documents every rule exactly as the rule catalogue defines it."""

from __future__ import annotations

import re
from pathlib import Path

from kvlint.catalogue.rules import DOCUMENTED_RULES, RULES

README = Path(__file__).resolve().parent.parent / "README.md"
_ROW = re.compile(r"^\| \[(KVL\d{3})\]\(docs/rules/KVL\d{3}\.md\) \| ([a-z0-9-]+) \| (error|warning) \|", re.MULTILINE)


def test_rule_table_rows_match_the_catalogue() -> None:
    rows = {code: (symbol, level) for code, symbol, level in _ROW.findall(README.read_text(encoding="utf-8"))}
    for rule in DOCUMENTED_RULES:
        assert rows.get(rule.code) == (rule.symbol, rule.severity), rule.code
    for code, (symbol, level) in rows.items():
        assert (RULES[code].symbol, RULES[code].severity) == (symbol, level)


def test_every_linked_rule_page_exists() -> None:
    links = re.findall(r"\]\((docs/rules/KVL\d{3}\.md)\)", README.read_text(encoding="utf-8"))
    assert links
    missing = [link for link in links if not (README.parent / link).is_file()]
    assert not missing
