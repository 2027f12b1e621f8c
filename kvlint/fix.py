"""``kvlint --fix`` / ``--diff``: rewrites whose correctness is certain, applied with libcst so that the
rest of the file (formatting, comments) stays byte-identical.

- KVL102: rename a keyword to the operator's own spelling when the rename is one to one and the new name
  is not already passed; also the key of a ``**kwargs`` dict that only this call uses.
- KVL112: ``torch.<op>`` / ``torch_npu.npu.<op>`` -> ``torch_npu.<op>`` (the module's own alias of
  torch_npu, or ``import torch_npu`` added after the torch import).
- KVL301: ``dtype=torch.int32`` on the factory call that builds the block table (an int64 ``dtype=`` is
  replaced), or ``.long()`` -> ``.int()``; only where the finding points at that expression, or at a name
  assigned once from it in the same function and read nowhere else.

Every fix starts from a finding the engine reported and its position; anything the code does not prove
is left alone. libcst is imported only here, and only when a fix is asked for: install ``kvlint[fix]``.
"""

from __future__ import annotations

import difflib
import tokenize
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from kvlint.analysis.finding import Finding
from kvlint.catalogue.rules import FIXABLE

if TYPE_CHECKING:
    from kvlint.analysis.settings import Settings
    from kvlint.frontends.runner import FileResult

SHAPE_METHODS = frozenset({"reshape", "view", "unsqueeze", "squeeze", "expand", "contiguous", "flatten", "clone"})
"""Tensor methods that keep the dtype: a fix looks through them to the factory that sets it."""
INT_FACTORIES = frozenset({"arange", "tensor", "as_tensor", "zeros", "ones", "full", "empty", "randint"})
INT64_NAMES = frozenset({"int64", "long"})


class FixUnavailable(Exception):
    """libcst is not installed."""


@dataclass
class FixResult:
    path: str
    original: str
    fixed: str
    applied: list[Finding] = field(default_factory=list)
    """The findings a rewrite was made for."""

    @property
    def changed(self) -> bool:
        return self.fixed != self.original

    def diff(self) -> str:
        relative = not self.path.startswith(("/", "\\")) and ":" not in self.path[:3]
        old, new = (f"a/{self.path}", f"b/{self.path}") if relative else (self.path, self.path)
        return "".join(difflib.unified_diff(
            self.original.splitlines(keepends=True), self.fixed.splitlines(keepends=True), fromfile=old, tofile=new,
        ))


def _import_libcst():
    try:
        import libcst
    except ImportError:
        raise FixUnavailable("--fix and --diff need libcst: pip install 'kvlint[fix]'") from None
    return libcst


def _char_column(lines: Sequence[str], line: int, byte_column: int) -> int:
    if not 0 < line <= len(lines):
        return byte_column
    return len(lines[line - 1].encode("utf-8")[:byte_column].decode("utf-8", "ignore"))


def fix_source(source: str, findings: Sequence[Finding], path: str = "<string>",
               wrappers: dict[str, str] | None = None) -> FixResult:
    """Apply the certain fixes for ``findings`` (found by the engine in ``source``)."""
    wanted = [f for f in findings if f.code in FIXABLE]
    if not wanted:
        return FixResult(path, source, source)
    _import_libcst()
    from kvlint._fix_edits import Planner

    planner = Planner(source, path, wrappers or {})
    lines = source.splitlines()
    applied = []
    for finding in wanted:
        start = (finding.line, _char_column(lines, finding.line, finding.column))
        end = (finding.end_line, _char_column(lines, finding.end_line, finding.end_column))
        handler: Callable[[Finding, tuple[int, int], tuple[int, int]], bool] = {
            "KVL102": planner.plan_rename,
            "KVL112": planner.plan_alias,
            "KVL301": planner.plan_block_table,
        }[finding.code]
        if handler(finding, start, end):
            applied.append(finding)
    fixed = planner.apply() if applied else source
    try:
        compile(fixed, path, "exec")
    except SyntaxError:  # pragma: no cover - a rewrite never breaks syntax; refuse rather than write it
        return FixResult(path, source, source)
    return FixResult(path, source, fixed, applied)


def _write(path: str, text: str) -> None:
    """Write ``text`` in the file's own encoding (its PEP 263 cookie, else UTF-8)."""
    with open(path, "rb") as handle:
        raw = handle.read()
    encoding, _ = tokenize.detect_encoding(iter(raw.splitlines(keepends=True)).__next__)
    with open(path, "wb") as handle:
        handle.write(text.encode(encoding))


def apply_fixes(results: list[FileResult], keep: Callable[[Finding], bool], settings: Settings,
                write: bool) -> tuple[list[FileResult], list[str], int]:
    """Fix the kept findings of each file: write the files (``write``) or only preview. Returns the results
    (re-linted where a file was rewritten), the unified diffs and the number of findings fixed. A file
    kvlint cannot rewrite keeps its findings and gets a warning; one it cannot write gets an error."""
    from kvlint.frontends.runner import lint_text, read_source

    diffs, fixed_count, new_results = [], 0, []
    for result in results:
        fixable = [f for f in result.findings if f.code in FIXABLE and keep(f)]
        if not fixable:
            new_results.append(result)
            continue
        try:
            outcome = fix_source(read_source(result.path), fixable, result.path, settings.extra_fa_wrappers)
        except FixUnavailable:
            raise
        except Exception as error:  # noqa: BLE001 - a file kvlint cannot rewrite is reported, not fatal
            result.warnings.append(f"{result.path}: cannot fix: {type(error).__name__}: {error}")
            new_results.append(result)
            continue
        if not outcome.changed:
            new_results.append(result)
            continue
        diffs.append(outcome.diff())
        fixed_count += len(outcome.applied)
        if not write:
            new_results.append(result)
            continue
        try:
            _write(result.path, outcome.fixed)
        except OSError as error:
            result.error = f"{result.path}: cannot write the fixes: {error.strerror or error}"
            new_results.append(result)
            continue
        relinted = lint_text(outcome.fixed, result.path, settings)
        relinted.warnings = result.warnings
        new_results.append(relinted)
    return new_results, diffs, fixed_count
