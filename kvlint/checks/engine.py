"""The analysis engine shared by pylint, flake8 and the CLI.

pylint hands ``analyze`` its own astroid tree; flake8 and the CLI call ``lint_source``, which first applies
a cheap text gate (files that mention no operator and none of the words the rules key on are skipped
before parsing), then parses the file once and hands the ``ast`` tree to astroid, which would otherwise parse
the text a second time (flake8 hands over the tree it parsed). The tree is compiled too, where it holds
something CPython's compiler might refuse (``kvlint.analysis.refusals``): its refusals are KVL000.
"""

from __future__ import annotations

import ast
import copy
import os
from typing import TypeVar

from astroid import MANAGER, nodes
from astroid.builder import AstroidBuilder
from astroid.rebuilder import TreeRebuilder

from kvlint.analysis.callsite import call_site
from kvlint.analysis.finding import Finding, Issue
from kvlint.analysis.memo import forget
from kvlint.analysis.refusals import compiler_may_refuse
from kvlint.analysis.settings import DEFAULT_SETTINGS, Settings, may_have_findings
from kvlint.analysis.walk import nodes_of
from kvlint.checks import CALL_CHECKS, MODULE_CHECKS
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


_Documented = TypeVar("_Documented", ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)


class _CallersTreeRebuilder(TreeRebuilder):
    """astroid's rebuilder, leaving the ``ast`` tree it reads as it was. astroid takes each docstring out of
    its node's body, and here the tree is the caller's: flake8's, which its other plugins read after kvlint,
    and the engine's own, which it compiles after the build (a function whose body is its docstring would
    then have none: ``ValueError: empty body on FunctionDef``)."""

    def _get_doc(self, node: _Documented) -> tuple[_Documented, ast.Constant | None]:
        """astroid's own (a private method, the same in astroid 3.0 to 4.x), on a copy of the node."""
        return super()._get_doc(copy.copy(node))


class _OwnTextBuilder(AstroidBuilder):
    """Builds a file's tree from the file alone, from its ``ast`` tree when it is already parsed.

    After parsing, astroid infers the object of every attribute assignment (``config.flag = 1``) to record
    the attribute on it, and inferring an imported name builds that module from disk, then its imports:
    seconds per file in a tree like torch's. The engine resolves names from the file's text, so only
    attributes set on the file's own classes are recorded (as in the tree pylint hands to ``analyze``).
    """

    def __init__(self, parsed: ast.Module | None) -> None:
        super().__init__(MANAGER, apply_transforms=False)
        self.parsed = parsed

    def _data_build(self, data: str, modname: str, path: str | None,
                    **options: bool | None) -> tuple[nodes.Module, TreeRebuilder]:
        """astroid's own steps after its ``ast.parse``, from the tree already parsed. ``options``: what this
        astroid's ``string_build`` passes on: from astroid 4.4, ``is_stub`` (None: a ``.pyi`` path), which its
        rebuilder takes too; older versions pass nothing and their rebuilder takes no such argument."""
        if self.parsed is None:
            return super()._data_build(data, modname, path, **options)
        package = path is not None and os.path.splitext(os.path.basename(path))[0] == "__init__"
        if "is_stub" in options and options["is_stub"] is None:
            options["is_stub"] = path is not None and path.endswith(".pyi")
        builder = _CallersTreeRebuilder(self._manager, data=data, **options)
        return builder.visit_module(self.parsed, modname, os.path.abspath(path) if path else "<?>", package), builder

    def delayed_assattr(self, node: nodes.AssignAttr) -> None:
        if isinstance(node.expr, nodes.Name):
            _, bindings = node.expr.lookup(node.expr.name)
            if bindings and all(isinstance(binding, nodes.ClassDef) for binding in bindings):
                super().delayed_assattr(node)


def build_tree(source: str, path: str, parsed: ast.Module | None = None) -> nodes.Module:
    """The file's astroid tree as the engine builds it, from the file alone (raises astroid's
    ``AstroidSyntaxError`` on a file that does not parse).
    ``parsed``: ``ast.parse(source)``, when the caller has it (astroid then does not parse the text again)."""
    return _OwnTextBuilder(parsed).string_build(source, path=path)


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
