"""Suppression comments, read from the file's tokens.

- ``# noqa`` and ``# noqa: KVL201,KVL202`` on the reported line (the CLI and the flake8 plugin; codes in any
  case). As in flake8, a comment on any line of a multi-line string token covers every line of that token.
- ``# kvlint: disable=atten-mask-dtype,KVL202`` on the reported line (every front-end): symbols, codes or
  code prefixes (``KVL2``), or ``all``.
- ``# kvlint: disable-next=...`` on its own line: the same, for the line after it.
- ``# kvlint: disable-file=KVL102`` anywhere: those rules are not reported anywhere in the file;
  ``# kvlint: disable-file`` without names: nothing in the file is reported (every front-end).

A name that is not a kvlint rule, or a directive kvlint does not have, is a warning naming the line (every
front-end prints it), never an error.

KVL000 (the file does not parse) cannot be suppressed: the comments of such a file cannot be trusted.
"""

from __future__ import annotations

import io
import re
import tokenize
from collections.abc import Iterable
from dataclasses import dataclass, field

from kvlint.analysis.finding import Finding
from kvlint.catalogue.rules import BY_SYMBOL, RULES

# flake8's NOQA_INLINE_REGEXP, restricted to what kvlint needs: codes are letters followed by digits.
_NOQA = re.compile(r"#\s*noqa(?::[\s]?(?P<codes>[A-Z]+[0-9]+(?:[,\s]+[A-Z]+[0-9]+)*))?", re.IGNORECASE)
_PRAGMA = re.compile(r"#\s*kvlint:\s*(?P<directive>[\w-]*)\s*(?:=\s*(?P<names>[\w\-,\s]*))?", re.IGNORECASE)
DIRECTIVES = ("disable", "disable-next", "disable-file")
_CODE_PREFIX = re.compile(r"^KVL\d{0,3}$", re.IGNORECASE)
ALL = "all"


@dataclass
class Suppressions:
    """Which findings of one file the comments suppress, and what in those comments made no sense."""

    noqa: dict[int, frozenset[str] | None] = field(default_factory=dict)
    """line -> codes named by ``# noqa: ...`` on it, or None for a bare ``# noqa`` (everything)."""
    disabled: dict[int, frozenset[str]] = field(default_factory=dict)
    """line -> codes, code prefixes or ``all`` named by ``# kvlint: disable=...`` (or ``disable-next`` above)."""
    whole_file: frozenset[str] = frozenset()
    """Codes, prefixes or ``all`` named by ``# kvlint: disable-file``."""
    problems: list[tuple[int, str]] = field(default_factory=list)
    """(line, message) for pragma names that are not kvlint rules: reported as warnings, never fatal."""

    def suppresses(self, finding: Finding, *, honour_noqa: bool = True) -> bool:
        if finding.code == "KVL000":
            return False
        if ALL in self.whole_file or finding.code.startswith(tuple(self.whole_file)):
            return True
        if honour_noqa and finding.line in self.noqa:
            codes = self.noqa[finding.line]
            if codes is None or finding.code.startswith(tuple(codes)):  # flake8 matches prefixes too
                return True
        names = self.disabled.get(finding.line, frozenset())
        return ALL in names or any(finding.code.startswith(name) for name in names)

    def filter(self, findings: Iterable[Finding], *, honour_noqa: bool = True) -> list[Finding]:
        return [f for f in findings if not self.suppresses(f, honour_noqa=honour_noqa)]


def _comments(source: str) -> Iterable[tuple[int, int, str]]:
    """(first line, last line, text) of every comment; the line span of a multi-line token holds the
    comment that ends it (flake8's rule for ``# noqa`` after a triple-quoted string)."""
    first = None
    try:
        for token in tokenize.generate_tokens(io.StringIO(source).readline):
            kind, text, (start, _), (end, _), _ = token
            if kind in (tokenize.ENDMARKER, tokenize.DEDENT):
                continue
            first = start if first is None else min(first, start)
            if kind == tokenize.COMMENT:
                yield first, end, text
            if kind in (tokenize.NL, tokenize.NEWLINE):
                first = None
    except (tokenize.TokenError, SyntaxError, IndentationError):
        return


def _pragma_names(raw: str, directive: str, line: int, problems: list[tuple[int, str]]) -> frozenset[str]:
    names = set()
    for name in filter(None, (part.strip() for part in re.split(r"[,\s]+", raw))):
        if name.lower() == ALL:
            names.add(ALL)
        elif _CODE_PREFIX.match(name) and any(code.startswith(name.upper()) for code in RULES):
            names.add(name.upper())
        elif name.lower() in BY_SYMBOL:
            names.add(BY_SYMBOL[name.lower()].code)
        else:
            problems.append((line, f"'{name}' in '# kvlint: {directive}=' is not a kvlint rule code or symbol"))
    return frozenset(names)


def warn_about(path: str, suppressions: Suppressions) -> list[str]:
    """The warnings every front-end prints (``kvlint: warning: <this>``) for comments that name no rule."""
    return [f"{path}:{line}: {message}" for line, message in suppressions.problems]


def read_suppressions(source: str) -> Suppressions:
    """The suppression comments of ``source`` (a file that does not tokenize has none)."""
    result = Suppressions()
    if "noqa" not in source.lower() and "kvlint" not in source.lower():
        return result
    for first, last, text in _comments(source):
        noqa = _NOQA.search(text)
        if noqa:
            codes = noqa.group("codes")
            value = None if codes is None else frozenset(c.upper() for c in re.split(r"[,\s]+", codes) if c)
            for line in range(first, last + 1):
                previous = result.noqa.get(line, frozenset())
                result.noqa[line] = None if value is None or previous is None else previous | value
        pragma = _PRAGMA.search(text)
        if pragma:
            _read_pragma(pragma, first, last, result)
    return result


def _read_pragma(pragma: re.Match[str], first: int, last: int, result: Suppressions) -> None:
    directive = pragma.group("directive").lower()
    raw = pragma.group("names")
    if directive not in DIRECTIVES:
        result.problems.append((last, f"'{pragma.group('directive')}' in '# kvlint:' is not a kvlint directive "
                                      f"({', '.join(DIRECTIVES)})"))
        return
    if directive == "disable-file" and raw is None:
        result.whole_file = frozenset({ALL})
        return
    if not raw or not raw.strip():
        result.problems.append((last, f"'# kvlint: {directive}' needs '=' and rule codes or symbols"
                                      + (" (or use '# kvlint: disable-file')" if directive == "disable" else "")))
        return
    names = _pragma_names(raw, directive, last, result.problems)
    if directive == "disable-file":
        result.whole_file |= names
        return
    lines = range(last + 1, last + 2) if directive == "disable-next" else range(first, last + 1)
    for line in lines:
        result.disabled[line] = result.disabled.get(line, frozenset()) | names
