"""The analysis engine shared by pylint, flake8 and the CLI.

pylint hands ``analyze`` its own astroid tree; flake8 and the CLI call ``lint_source``, which first applies
a cheap text gate (files that mention no operator and none of the words the rules key on are skipped
before parsing), then parses the file once and hands the ``ast`` tree to astroid, which would otherwise parse
the text a second time (flake8 hands over the tree it parsed; how the tree is built: ``kvlint.checks.building``).
The tree is compiled too, where it holds something CPython's compiler might refuse
(``kvlint.analysis.refusals``): its refusals are KVL000.
"""

from __future__ import annotations

import ast

from astroid import nodes

from kvlint.analysis.callsite import call_site
from kvlint.analysis.finding import Finding, Issue
from kvlint.analysis.memo import forget
from kvlint.analysis.refusals import compiler_may_refuse
from kvlint.analysis.settings import DEFAULT_SETTINGS, Settings, may_have_findings
from kvlint.analysis.walk import nodes_of
from kvlint.checks import CALL_CHECKS, MODULE_CHECKS
from kvlint.checks.building import build_tree
from kvlint.checks.limits import LimitExceeded, Meter
from kvlint.checks.signature import alias_issue


def analyze(module: nodes.Module, path: str, settings: Settings = DEFAULT_SETTINGS,
            meter: Meter | None = None) -> list[Finding]:
    """Every finding in an astroid module, sorted by position. Raises ``Unanalysable`` when the analysis goes
    past ``settings.limits`` (``meter``: the limits already running since the file was read)."""
    meter = meter or Meter(settings.limits)
    try:
        issues: list[Issue] = []
        for call in nodes_of(module, nodes.Call):
            found = call_site(call, settings.extra_fa_wrappers)
            if found is None:
                continue
            meter.check()
            site, alias = found
            if alias:
                issues.append(alias_issue(site))
                continue
            for check in CALL_CHECKS:
                issues.extend(check(site))
        for module_check in MODULE_CHECKS:
            meter.check()
            issues.extend(module_check(module, settings))
        return sorted({issue.at(path) for issue in issues})
    except LimitExceeded as exceeded:
        raise Unanalysable(path, str(exceeded)) from None
    finally:
        forget()


TOO_DEEP = "valid Python nested deeper than kvlint's parser can follow"


class Unanalysable(Exception):
    """Valid Python that kvlint does not analyse: nested deeper than astroid's recursion limit (a generated
    2,500-term sum), or past the per-file time or memory limit (``kvlint.checks.limits``). CPython runs such
    a file, so it is no KVL000: the front-ends skip it with a warning naming the file and why."""

    def __init__(self, path: str, why: str = TOO_DEEP) -> None:
        super().__init__(f"{path}: skipped: {why}")
        self.path = path
        self.why = why

    def finding(self) -> Finding:
        """The KVL001 the flake8 and pylint front-ends report for the file, at 1:1: a report is all their users
        read (the kvlint command says it in its own channels instead)."""
        return Finding(self.path, 1, 0, 1, 0, "KVL001", f"kvlint did not analyse this file: {self.why}")


def cpython_refusal(source: str | bytes, path: str, parsed: ast.Module | None = None) -> Exception | None:
    """Why CPython refuses to compile the file (as ``import`` would), or None when it compiles. ``ast.parse``
    accepts some of what the compiler refuses: a call repeating a keyword, ``return`` outside a function,
    ``nonlocal`` without a binding, ``global`` after a use. ``parsed``: the file's ``ast`` tree, when already
    parsed: only the compiler's own stage then runs (a tree too deep for it is compiled from the text)."""
    if parsed is not None:
        try:
            compile(parsed, path, "exec", dont_inherit=True)
        except (SyntaxError, ValueError) as error:
            return error
        except (RecursionError, MemoryError):
            return cpython_refusal(source, path)
        return None
    try:
        compile(source, path, "exec", dont_inherit=True)
    except (SyntaxError, ValueError, RecursionError, MemoryError) as error:
        return error
    return None


def syntax_error(path: str, line: int, column: int, reason: str) -> Finding:
    line = max(line, 1)
    return Finding(path, line, column, line, column, "KVL000", f"cannot parse the file: {reason}")


def refused(path: str, error: BaseException, context: str = "") -> Finding:
    """The KVL000 of a file CPython refuses, at the line and column CPython names (1:1 when it names none).
    ``context``: what kvlint was doing (``cannot decode the file``)."""
    if isinstance(error, SyntaxError):
        line, column, reason = error.lineno or 1, max((error.offset or 1) - 1, 0), error.msg
    elif isinstance(error, UnicodeDecodeError) and isinstance(error.object, bytes):
        line = error.object.count(b"\n", 0, error.start) + 1
        column, reason = error.start - (error.object.rfind(b"\n", 0, error.start) + 1), str(error)
    else:
        line, column, reason = 1, 0, f"{type(error).__name__}: {error}"
    return syntax_error(path, line, column, f"{context}: {reason}" if context else reason)


def lint_source(source: str, path: str, settings: Settings = DEFAULT_SETTINGS,
                parsed: ast.Module | None = None) -> list[Finding]:
    """Lint one file's text (``parsed``: its ``ast`` tree, when the caller has parsed it). A file that does
    not parse, or that CPython's compiler refuses, gives one KVL000 finding; valid code astroid cannot build
    or kvlint cannot walk, or whose analysis goes past ``settings.limits`` (counted from here: the tree's
    build counts), raises Unanalysable."""
    if not may_have_findings(source, settings):
        return []
    meter = Meter(settings.limits)
    if parsed is None:
        try:
            parsed = ast.parse(source, filename=path)
        except SyntaxError as error:
            line, column = error.lineno or 1, max((error.offset or 1) - 1, 0)
            return [syntax_error(path, line, column, error.msg or str(error) or type(error).__name__)]
        except (RecursionError, MemoryError, ValueError) as error:
            refusal = cpython_refusal(source, path)
            if refusal is None:
                raise Unanalysable(path) from error
            return [refused(path, refusal)]
    try:
        module = build_tree(source, path, parsed)
    except Exception as error:
        refusal = cpython_refusal(source, path, parsed)
        if refusal is not None:
            return [refused(path, refusal)]
        if isinstance(error, (RecursionError, MemoryError, ValueError)):  # valid, too deep for astroid
            raise Unanalysable(path) from error
        raise
    try:
        refusal = cpython_refusal(source, path, parsed) if compiler_may_refuse(module, source) else None
        if refusal is not None:
            return [refused(path, refusal)]
        return analyze(module, path, settings, meter)
    except RecursionError as error:
        raise Unanalysable(path) from error
    finally:
        forget()
