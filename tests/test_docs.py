"""The rule pages under docs/rules/: one per rule, identical to what the catalogue renders, and their
examples do what the pages say: for a static rule the bad one is reported with exactly the rule's code, the
fixed one is clean, and an autofix turns the one into the other. The probe rules' examples need torch and
are run by ``tests/test_probe_pages.py`` (this module runs from the sdist without torch)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from kvlint.catalogue.pages import explain, render_page
from kvlint.catalogue.project import docs_url
from kvlint.catalogue.rule_pages import DOCS, LEVEL_RULE, LEVELS
from kvlint.catalogue.rules import DOCUMENTED_RULES, FIXABLE, PROBE_RULES, STATIC_RULES, Rule
from kvlint.checks.engine import lint_source
from kvlint.fix.rewrite import fix_source
from tests.conftest import ROOT

PAGES = ROOT / "docs" / "rules"
SECTIONS = ["## What it does", "## Why is this bad?", "## Example", "Use instead:", "## Autofix",
            "## Suppression", "## References"]


def ids(entry: Rule) -> str:
    return entry.code


def test_one_page_per_rule_and_no_other() -> None:
    assert sorted(p.name for p in PAGES.glob("*.md")) == sorted(f"{r.code}.md" for r in DOCUMENTED_RULES)
    assert set(DOCS) == {r.code for r in DOCUMENTED_RULES}
    assert {r.code for r in PROBE_RULES} >= {f"KVL5{n:02d}" for n in range(1, 11)} | {"KVL599"}


@pytest.mark.parametrize("entry", DOCUMENTED_RULES, ids=ids)
def test_page_on_disk_is_what_the_catalogue_renders(entry: Rule) -> None:
    """Regenerate with: python -m kvlint.catalogue.pages docs/rules"""
    assert (ROOT / entry.doc_path).read_text(encoding="utf-8") == render_page(entry)


@pytest.mark.parametrize("entry", DOCUMENTED_RULES, ids=ids)
def test_page_has_every_section_in_order_and_names_the_rule(entry: Rule) -> None:
    page = explain(entry.code)
    sections = [s for s in SECTIONS if s != "Use instead:" or DOCS[entry.code].bad]
    positions = [page.index(section) for section in sections]
    assert positions == sorted(positions)
    assert page.splitlines()[0] == f"# {entry.code} `{entry.symbol}`"
    assert f"| {entry.severity} |" in page


@pytest.mark.parametrize("entry", DOCUMENTED_RULES, ids=ids)
def test_autofix_section_agrees_with_the_fixer(entry: Rule) -> None:
    autofix = explain(entry.code).split("## Autofix\n\n")[1].split("\n")[0]
    doc = DOCS[entry.code]
    if entry.code in FIXABLE:
        assert autofix.startswith("Yes. ") and doc.fix and not doc.no_fix
    else:
        assert autofix.startswith("No. ") and doc.no_fix and not doc.fix


@pytest.mark.parametrize("entry", [r for r in DOCUMENTED_RULES if r.family != 0], ids=ids)
def test_references_link_into_the_operator_contract_and_to_public_reports(entry: Rule) -> None:
    """On disk every rule cites a constraint page of docs/operators/ or docs/semantics.md by its anchor (the
    anchors themselves are checked by tests/test_references.py); other links are public issues or PRs."""
    references = render_page(entry).split("## References\n\n")[1]
    targets = re.findall(r"\]\((\S+)\)", references)
    contract = [t for t in targets if not t.startswith("https://")]
    assert contract and all(re.fullmatch(r"\.\./(operators/\w+|semantics)\.md#[a-z0-9-]+", t) for t in contract)
    for url in set(targets) - set(contract):
        assert re.fullmatch(r"https://github\.com/[\w.-]+/[\w.-]+/(pull|issues)/\d+", url)


@pytest.mark.parametrize("entry", [r for r in DOCUMENTED_RULES if r.family != 0], ids=ids)
def test_explained_references_give_the_command_that_prints_the_contract_page(entry: Rule) -> None:
    """Outside docs/rules/ a relative link leads nowhere, and an installed kvlint has no source tree: ``--explain``
    names the command that prints the page the wheel ships (or the published URL), and that command prints it."""
    references = explain(entry.code).split("## References\n\n")[1]
    if docs_url() is None:
        cited = re.findall(r"kvlint's operator contract; `kvlint --explain (docs/(?:operators/\w+|semantics)\.md"
                           r"#([a-z0-9-]+))` prints it", references)
        assert cited
        for name, anchor in cited:
            assert f'<a id="{anchor}"></a>' in explain(name)
    assert "](../" not in references and "source tree" not in references


def _example(page: str, marker: str) -> str:
    return page.split(marker, 1)[1].split("```python\n", 1)[1].split("\n```", 1)[0] + "\n"


@pytest.mark.parametrize("entry", [r for r in DOCUMENTED_RULES if DOCS[r.code].bad], ids=ids)
def test_page_examples_are_the_linted_examples(entry: Rule) -> None:
    page = explain(entry.code)
    assert _example(page, "## Example") == DOCS[entry.code].bad
    assert _example(page, "Use instead:") == DOCS[entry.code].good


@pytest.mark.parametrize("entry", [r for r in STATIC_RULES if r.about_code], ids=ids)
def test_bad_example_is_reported_with_exactly_its_code_and_good_example_is_clean(entry: Rule) -> None:
    bad = {f.code for f in lint_source(DOCS[entry.code].bad, f"{entry.code}_bad.py")}
    good = {f.code for f in lint_source(DOCS[entry.code].good, f"{entry.code}_good.py")}
    assert bad == {entry.code}
    assert good == set()


@pytest.mark.parametrize("entry", [r for r in STATIC_RULES if r.code in FIXABLE], ids=ids)
def test_autofix_turns_the_bad_example_into_the_fixed_one(entry: Rule) -> None:
    bad = DOCS[entry.code].bad
    findings = [f for f in lint_source(bad, "example.py") if f.code == entry.code]
    assert fix_source(bad, findings, "example.py").fixed == DOCS[entry.code].good


def test_pages_link_nowhere_inside_the_repository_that_does_not_exist() -> None:
    for page in PAGES.glob("*.md"):
        for target in re.findall(r"\]\(([^)#]+)\)", page.read_text(encoding="utf-8")):
            if not target.startswith("https://"):
                assert (page.parent / target).exists(), f"{page.name}: {target}"


def test_regenerating_writes_the_same_files(tmp_path: Path) -> None:
    from kvlint.catalogue.pages import main

    assert main([str(tmp_path)]) == 0
    for page in PAGES.glob("*.md"):
        assert (tmp_path / page.name).read_bytes() == page.read_bytes()


def test_a_rule_about_the_run_says_it_has_no_example_and_how_to_silence_it() -> None:
    page = explain("KVL001")
    assert "None: the finding is about kvlint's run on the file" in page.split("## Example")[1]
    assert "--file-time-limit" in page and "extend-ignore = KVL001" in page and "--disable=file-not-analysed" in page


def test_kvl507s_page_shows_the_unmasked_chunked_prefill_and_the_vit_encoder_that_needs_no_mask() -> None:
    page = explain("KVL507")
    assert "chunk" in DOCS["KVL507"].bad and "block_table" in DOCS["KVL507"].bad
    assert "ViT" in DOCS["KVL507"].silent_note and DOCS["KVL507"].silent in page
    assert page.index("Use instead:") < page.index("Not reported: a ViT encoder layer")


@pytest.mark.parametrize("entry", PROBE_RULES, ids=ids)
def test_a_probe_page_gives_its_level_and_the_reason(entry: Rule) -> None:
    """Issue 24: every probe code's page says at which level it reports and why, starting with the level of
    its catalogue row."""
    level = explain(entry.code).split("**Level:** ")[1].split("\n")[0]
    assert level.startswith(f"{entry.severity}") and level == f"{LEVELS[entry.code]} {LEVEL_RULE}"
