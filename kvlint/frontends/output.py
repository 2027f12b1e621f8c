"""Renderers of findings: ``text`` (for people), ``json``, ``github`` (Actions annotations) and ``sarif``
(SARIF 2.1.0 as GitHub code scanning reads it).

``text`` is not a stable surface; ``json``, ``github`` and ``sarif`` are. The SARIF log is shared by the
CLI and by the pylint reporter (``kvlint.reporters.SarifReporter``), so both give the same results.

Columns: findings carry the parser's columns, which count UTF-8 bytes (as pylint and flake8 report them).
Every CLI format counts characters (code points) instead, 1-based, as editors and SARIF's
``unicodeCodePoints`` do, so ``s = "注意力"; ...`` does not shift a finding by two columns per character.

A file kvlint read but did not analyse (``skipped``: (path, why) pairs) makes the results partial. The formats
that have a place for it say so in the report: ``github`` annotates the file with a warning, ``sarif`` marks the
run's invocation unsuccessful with a notification naming the file. ``text`` and ``json`` have none (the json
array holds findings only); the command says it on standard error for every format.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from kvlint import __version__
from kvlint.analysis.finding import Finding
from kvlint.analysis.source_lines import code_point_column, numbered_line, physical_lines
from kvlint.catalogue.project import home_url
from kvlint.catalogue.rules import RULES, STATIC_RULES, Rule

FORMATS = ("text", "json", "github", "sarif")
SARIF_SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
SRCROOT = "%SRCROOT%"
FIXABLE_MARK = "[*]"
"""Marks a text finding that ``kvlint --fix`` would fix, as ruff does."""
SKIPPED_TITLE = "kvlint did not analyse this file"


def one_line(text: str) -> str:
    """``text`` with the line breaks a string literal can bring into a message written as ``\\n`` / ``\\r``,
    so that one finding stays one line of the text report."""
    return text.replace("\r", "\\r").replace("\n", "\\n")


def format_text(finding: Finding, fixable: bool = False) -> str:
    mark = f"{FIXABLE_MARK} " if fixable else ""
    message = one_line(finding.message)
    return f"{finding.path}:{finding.line}:{finding.column + 1}: {finding.code} {mark}{message} [{finding.symbol}]"


def render_text(findings: Iterable[Finding], fixable: Collection[Finding] = ()) -> str:
    return "".join(format_text(f, f in fixable) + "\n" for f in findings)


def render_json(findings: Iterable[Finding], fixable: Collection[Finding] = ()) -> str:
    return json.dumps([{**f.to_json(), "fixable": f in fixable} for f in findings], indent=2) + "\n"


# --- GitHub Actions workflow commands ---------------------------------------------------------------------

def _escape_data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _escape_property(text: str) -> str:
    return _escape_data(text).replace(":", "%3A").replace(",", "%2C")


def format_github(finding: Finding) -> str:
    """``::error file=...,line=...,endLine=...,col=...,endColumn=...,title=KVL201::message``; columns only
    when the finding starts and ends on one line (GitHub ignores them otherwise)."""
    level = "error" if finding.severity == "error" else "warning"
    props = [f"file={_escape_property(finding.path)}", f"line={finding.line}", f"endLine={finding.end_line}"]
    if finding.line == finding.end_line:
        props += [f"col={finding.column + 1}", f"endColumn={finding.end_column + 1}"]
    props.append(f"title={finding.code}")
    return f"::{level} {','.join(props)}::{_escape_data(f'{finding.message} [{finding.symbol}]')}"


def format_github_skipped(path: str, why: str) -> str:
    """A warning annotation on a file kvlint did not analyse (no line: GitHub shows it on the file)."""
    return f"::warning file={_escape_property(path)},title={_escape_property(SKIPPED_TITLE)}::{_escape_data(why)}"


def render_github(findings: Iterable[Finding], skipped: Sequence[tuple[str, str]] = ()) -> str:
    return "".join(format_github(f) + "\n" for f in findings) + "".join(
        format_github_skipped(path, why) + "\n" for path, why in skipped)


# --- SARIF 2.1.0 ------------------------------------------------------------------------------------------

def repository_root(start: str = ".") -> Path:
    """The top of the git work tree containing ``start``, else ``start`` itself (resolved)."""
    here = Path(start).resolve()
    for folder in (here, *here.parents):
        if (folder / ".git").exists():
            return folder
    return here


def artifact_uri(path: str, root: Path) -> tuple[str, bool]:
    """(uri, relative?): the path relative to ``root`` with forward slashes, or a file URI outside it."""
    resolved = Path(os.path.realpath(path))
    try:
        return resolved.relative_to(root).as_posix(), True
    except ValueError:
        return resolved.as_uri(), False


class SourceLines:
    """Lines of the linted files, read once, for fingerprints and column conversion."""

    def __init__(self) -> None:
        self._cache: dict[str, list[str]] = {}

    def remember(self, path: str, text: str) -> None:
        """The text of ``path`` when it is not a file on disk (standard input)."""
        self._cache[path] = physical_lines(text)

    def line(self, path: str, number: int) -> str | None:
        if path not in self._cache:
            try:
                from kvlint.frontends.runner import read_source

                self._cache[path] = physical_lines(read_source(path))
            except (OSError, SyntaxError, UnicodeDecodeError, LookupError):
                self._cache[path] = []
        lines = self._cache[path]
        return numbered_line(lines, number)


def in_characters(finding: Finding, lines: SourceLines) -> Finding:
    """``finding`` with its columns counted in characters of its lines."""
    start = lines.line(finding.path, finding.line)
    end = start if finding.end_line == finding.line else lines.line(finding.path, finding.end_line)
    return replace(finding, column=code_point_column(start, finding.column),
                   end_column=code_point_column(end, finding.end_column))


@dataclass(frozen=True)
class RuleDescriptor:
    """A SARIF ``reportingDescriptor``: kvlint's rules come from the catalogue; the pylint reporter adds
    descriptors for pylint's own messages."""

    id: str
    name: str
    short: str
    full: str
    help_text: str
    level: str
    help_markdown: str = ""
    help_uri: str | None = None
    tags: tuple[str, ...] = ()

    def to_sarif(self) -> dict:
        descriptor: dict = {
            "id": self.id,
            "name": self.name,
            "shortDescription": {"text": self.short[:1024]},
            "fullDescription": {"text": self.full},
            "help": {"text": self.help_text},
            "defaultConfiguration": {"level": self.level},
            "properties": {
                "tags": list(self.tags),
                "precision": "high",
                "problem.severity": {"error": "error", "warning": "warning"}.get(self.level, "recommendation"),
            },
        }
        if self.help_markdown:
            descriptor["help"]["markdown"] = self.help_markdown
        if self.help_uri:
            descriptor["helpUri"] = self.help_uri
        return descriptor


def kvlint_descriptor(entry: Rule) -> RuleDescriptor:
    from kvlint.catalogue.pages import doc_url, full_description, help_text, standalone_page  # SARIF's only

    return RuleDescriptor(
        id=entry.code,
        name=entry.symbol,
        short=entry.summary,
        full=full_description(entry),
        help_text=help_text(entry),
        help_markdown=standalone_page(entry),
        help_uri=doc_url(entry),
        level="error" if entry.severity == "error" else "warning",
        tags=("kvlint", "torch_npu", f"family-{entry.family}"),
    )


@dataclass
class SarifLog:
    """Builds one SARIF run. ``add`` takes positions as kvlint findings have them (1-based lines, 0-based
    byte columns, exclusive end column)."""

    root: Path = field(default_factory=repository_root)
    extra_rules: list[RuleDescriptor] = field(default_factory=list)
    results: list[dict] = field(default_factory=list)
    notifications: list[str] = field(default_factory=list)
    """Errors: files that could not be read or analysed."""
    skipped: list[tuple[str, str]] = field(default_factory=list)
    """(path, why) of the files read but not analysed: the run is incomplete, each a warning notification."""
    _lines: SourceLines = field(default_factory=SourceLines)
    _seen: Counter = field(default_factory=Counter)

    _descriptors: list[RuleDescriptor] | None = None

    def descriptors(self) -> list[RuleDescriptor]:
        if self._descriptors is None or len(self._descriptors) != len(STATIC_RULES) + len(self.extra_rules):
            self._descriptors = [kvlint_descriptor(r) for r in STATIC_RULES] + self.extra_rules
        return self._descriptors

    def _artifact_location(self, path: str) -> dict:
        uri, relative = artifact_uri(path, self.root)
        return {"uri": uri, "uriBaseId": SRCROOT} if relative else {"uri": uri}

    def add(self, path: str, line: int, column: int, end_line: int, end_column: int, code: str,
            message: str, level: str) -> None:
        from hashlib import sha256  # SARIF's fingerprints only: 3 ms of every start otherwise

        location = self._artifact_location(path)
        uri = location["uri"]
        start_text = self._lines.line(path, line)
        end_text = start_text if end_line == line else self._lines.line(path, end_line)
        key = (uri, code, (start_text or "").strip())
        self._seen[key] += 1
        digest = sha256("\0".join(key[1:]).encode("utf-8")).hexdigest()[:16]
        self.results.append({
            "ruleId": code,
            "ruleIndex": self._rule_index(code),
            "level": level,
            "message": {"text": message},
            "locations": [{"physicalLocation": {
                "artifactLocation": location,
                "region": {
                    "startLine": line,
                    "startColumn": code_point_column(start_text, column) + 1,
                    "endLine": end_line,
                    "endColumn": code_point_column(end_text, end_column) + 1,
                },
            }}],
            "partialFingerprints": {"primaryLocationLineHash": f"{digest}:{self._seen[key]}"},
        })

    def add_finding(self, finding: Finding) -> None:
        self.add(finding.path, finding.line, finding.column, finding.end_line, finding.end_column,
                 finding.code, f"{finding.message} [{finding.symbol}]",
                 "error" if finding.severity == "error" else "warning")

    def _rule_index(self, code: str) -> int:
        return next(i for i, descriptor in enumerate(self.descriptors()) if descriptor.id == code)

    def _skipped_notification(self, path: str, why: str) -> dict:
        return {"level": "warning", "message": {"text": why},
                "locations": [{"physicalLocation": {"artifactLocation": self._artifact_location(path)}}]}

    def to_dict(self) -> dict:
        invocation: dict = {"executionSuccessful": not self.notifications and not self.skipped}
        notifications = [{"level": "error", "message": {"text": text}} for text in self.notifications]
        notifications += [self._skipped_notification(path, why) for path, why in self.skipped]
        if notifications:
            invocation["toolExecutionNotifications"] = notifications
        driver: dict = {"name": "kvlint", "version": __version__, "semanticVersion": __version__}
        home = home_url()
        if home:
            driver["informationUri"] = home
        driver["rules"] = [d.to_sarif() for d in self.descriptors()]
        return {
            "$schema": SARIF_SCHEMA,
            "version": "2.1.0",
            "runs": [{
                "tool": {"driver": driver},
                "originalUriBaseIds": {SRCROOT: {"uri": self.root.as_uri() + "/"}},
                "invocations": [invocation],
                "columnKind": "unicodeCodePoints",
                "results": self.results,
            }],
        }

    def render(self) -> str:
        return json.dumps(self.to_dict(), indent=2) + "\n"


def render_sarif(findings: Iterable[Finding], errors: Sequence[str] = (), root: Path | None = None,
                 lines: SourceLines | None = None, skipped: Sequence[tuple[str, str]] = ()) -> str:
    log = SarifLog(root=root or repository_root(), _lines=lines or SourceLines())
    for finding in findings:
        log.add_finding(finding)
    log.notifications.extend(errors)
    log.skipped.extend(skipped)
    return log.render()


def render(fmt: str, findings: Sequence[Finding], errors: Sequence[str] = (), lines: SourceLines | None = None,
           fixable: Collection[Finding] = (), skipped: Sequence[tuple[str, str]] = ()) -> str:
    """The report in ``fmt``. ``lines`` reads the linted files' lines for the character columns (pre-filled for
    text that is not a file); ``fixable``: the findings ``--fix`` would fix; ``skipped``: (path, why) of the
    files read but not analysed."""
    lines = lines or SourceLines()
    if fmt == "sarif":
        return render_sarif(findings, errors, lines=lines, skipped=skipped)
    fixable = set(fixable)
    shown = [in_characters(f, lines) for f in findings]
    marked = {character for character, finding in zip(shown, findings) if finding in fixable}
    if fmt == "json":
        return render_json(shown, marked)
    if fmt == "github":
        return render_github(shown, skipped)
    return render_text(shown, marked)


def statistics(findings: Iterable[Finding]) -> str:
    counts = Counter(f.code for f in findings)
    return "".join(f"{count:<6} {code} [{RULES[code].symbol}]\n" for code, count in sorted(counts.items()))
