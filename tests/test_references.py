"""Every reference the project makes resolves inside the project: a file it names exists, an anchor it names
is defined on that page, and nothing sends the reader to material users do not have.

Checked everywhere a reader meets a reference: the code (docstrings, comments, messages), the rule pages on
disk and as ``kvlint --explain`` prints them, the README and every markdown page.
"""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

import pytest

from kvlint.catalogue.pages import explain
from kvlint.catalogue.rules import STATIC_RULES
from tests.conftest import ROOT

SKIPPED = {".git", ".venv", "build", "dist", "__pycache__", ".hypothesis", ".pytest_cache", "node_modules"}
TEXT_SUFFIXES = {".py", ".pyi", ".md", ".cfg", ".toml", ".yaml", ".yml", ".txt", ".ini", ""}
RELATIVE_PATH = re.compile(r"(?<![\w/.-])((?:\.\./)+[\w-][\w./-]*)")
"""A path relative to the file that names it (``../rules/KVL201.md``): it must stay inside the project."""
ANCHOR_PREFIXES = "fia|ifa|pfa|fa|kvc|dsp|sem|atb|smla|gap"
DOCS_PATH = re.compile(r"(?<![\w/.-])(docs/[\w/.-]+\.md)(?:#([\w-]+))?")
BARE_ANCHOR = re.compile(rf"(?<![\w/.#-])#((?:{ANCHOR_PREFIXES})-[a-z0-9-]+)\b")
MD_NAME = re.compile(r"(?<![\w/.-])([\w-]+\.md)\b")
MD_LINK = re.compile(r"\]\(([^)\s]+)\)")
UPSTREAM_DOCS = ("docs/zh/", "docs/en/", "docs/context/")
"""Folders of Ascend/op-plugin's repository that the contract cites as its public sources, not kvlint's."""


def _files() -> list[Path]:
    found = []
    for path in sorted(ROOT.rglob("*")):
        relative = path.relative_to(ROOT)
        if any(part in SKIPPED or part.endswith(".egg-info") for part in relative.parts):
            continue
        if path.is_file() and path.suffix in TEXT_SUFFIXES and path.name != "sarif-schema-2.1.0.json":
            found.append(path)
    return found


FILES = _files()
MARKDOWN = [p for p in FILES if p.suffix == ".md"]
CODE = [p for p in FILES if p.suffix != ".md" and p != Path(__file__)]


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower-case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[`*_]", "", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


@cache
def anchors(page: Path) -> frozenset[str]:
    text = page.read_text(encoding="utf-8")
    explicit = set(re.findall(r"<a\s+(?:id|name)=\"([^\"]+)\"", text))
    headings = {_slug(h) for h in re.findall(r"^#{1,6}\s+(.+)$", text, flags=re.MULTILINE)}
    return frozenset(explicit | headings)


ALL_DOC_ANCHORS = frozenset().union(*(anchors(p) for p in MARKDOWN if p.is_relative_to(ROOT / "docs")))


def _text(path: Path) -> str:
    return path.read_text(encoding="utf-8", errors="replace")


def _problems_of_docs_paths(where: str, text: str) -> list[str]:
    problems = []
    for path, anchor in DOCS_PATH.findall(text):
        if path.startswith(UPSTREAM_DOCS):
            continue
        page = ROOT / path
        if not page.is_file():
            problems.append(f"{where}: {path} does not exist")
        elif anchor and anchor not in anchors(page):
            problems.append(f"{where}: {path} defines no anchor #{anchor}")
    return problems


def test_the_check_sees_the_places_that_cite() -> None:
    names = {str(p.relative_to(ROOT)) for p in FILES}
    assert {"README.md", "kvlint/catalogue/rule_pages.py", "docs/rules/KVL201.md", "setup.py",
            "runtime_probe/reference/masks.py", "docs/operators/constraints.md"} <= names
    assert len(ALL_DOC_ANCHORS) > 400
    assert not any((ROOT / folder).exists() for folder in UPSTREAM_DOCS)


def _problems_outside_the_project(where: str, text: str, folder: Path, names_pages: bool = True) -> list[str]:
    """Markdown names the repository has no page of (not judged in the contract's own pages, which name the
    upstream documentation files they quote) and relative paths that leave it or lead nowhere: the material
    a user or a new contributor does not have."""
    markdown_names = {p.name for p in MARKDOWN}
    problems = [f"{where}: names {name}, which the repository does not have"
                for name in MD_NAME.findall(text) if names_pages and name not in markdown_names]
    for relative in RELATIVE_PATH.findall(text):
        # code describes links from the pages it renders (docs/rules/) as well as its own folder
        targets = [(base / relative.rstrip(".")).resolve() for base in (folder, ROOT / "docs" / "rules")]
        if not any(t.is_relative_to(ROOT) and t.exists() for t in targets):
            problems.append(f"{where}: {relative} is not a file of the repository")
    return problems


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_nothing_cites_material_outside_the_project(path: Path) -> None:
    if path == Path(__file__):
        return
    assert not _problems_outside_the_project(str(path.relative_to(ROOT)), _text(path), path.parent,
                                             names_pages=path.suffix != ".md")


@pytest.mark.parametrize("path", CODE, ids=lambda p: str(p.relative_to(ROOT)))
def test_docs_paths_and_anchors_in_code_exist(path: Path) -> None:
    text = _text(path)
    where = str(path.relative_to(ROOT))
    problems = _problems_of_docs_paths(where, text)
    problems += [f"{where}: no docs page defines #{a}" for a in BARE_ANCHOR.findall(text) if a not in ALL_DOC_ANCHORS]
    assert not problems


@pytest.mark.parametrize("path", MARKDOWN, ids=lambda p: str(p.relative_to(ROOT)))
def test_markdown_links_lead_to_files_and_anchors_that_exist(path: Path) -> None:
    problems = []
    for target in MD_LINK.findall(_text(path)):
        if re.match(r"[a-z]+:", target):
            continue
        file, _, anchor = target.partition("#")
        page = (path.parent / file).resolve() if file else path
        if not page.exists():
            problems.append(f"{target}: no such file")
        elif anchor and page.suffix == ".md" and anchor not in anchors(page):
            problems.append(f"{target}: {page.name} defines no anchor #{anchor}")
    problems += _problems_of_docs_paths("text", _text(path))
    assert not problems, f"{path.relative_to(ROOT)}: {problems}"


@pytest.mark.parametrize("entry", STATIC_RULES, ids=lambda r: r.code)
def test_explained_pages_name_paths_and_anchors_that_exist(entry) -> None:
    page = explain(entry.code)
    assert not _problems_outside_the_project(f"kvlint --explain {entry.code}", page, ROOT / "docs" / "rules")
    assert not _problems_of_docs_paths(f"kvlint --explain {entry.code}", page)


def test_the_check_catches_a_missing_file_and_a_missing_anchor() -> None:
    text = ("see docs/operators/fused_infer_attention.md#fia-c20, docs/operators/fused_infer_attention.md#fia-c999 "
            "and docs/operators/no_such_page.md")
    assert _problems_of_docs_paths("t", text) == [
        "t: docs/operators/fused_infer_attention.md defines no anchor #fia-c999",
        "t: docs/operators/no_such_page.md does not exist",
    ]
    assert BARE_ANCHOR.findall("(#fia-c20 and #sem-d2; not x#fia-c1)") == ["fia-c20", "sem-d2"]


def test_the_check_catches_material_outside_the_project() -> None:
    text = "see ../rules/KVL201.md, ../../../notes/private.md and team_notes.md"
    assert _problems_outside_the_project("t", text, ROOT / "docs" / "operators") == [
        "t: names team_notes.md, which the repository does not have",
        "t: ../../../notes/private.md is not a file of the repository",
    ]
