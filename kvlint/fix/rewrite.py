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
is left alone. libcst is imported only here, and only when a fix is asked for: install ``kvlint-ascend[fix]``.
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from kvlint.analysis.finding import Finding
from kvlint.analysis.source_lines import code_point_column, numbered_line, physical_lines
from kvlint.catalogue.rules import FIXABLE


class FixUnavailable(Exception):
    """libcst is not installed."""


@dataclass
class FixResult:
    path: str
    original: str
    fixed: str
    applied: list[Finding] = field(default_factory=list)
    """The findings a rewrite was made for."""
    declined: dict[Finding, str] = field(default_factory=dict)
    """Findings of fixable rules that got no rewrite, with the reason."""

    @property
    def changed(self) -> bool:
        return self.fixed != self.original

    def diff(self) -> str:
        """A unified diff ``git apply`` takes from the current folder: ``a/`` and ``b/`` before the path relative
        to it (a path outside the current folder keeps its own form, for ``patch -p0``)."""
        relative = os.path.relpath(os.path.abspath(self.path)).replace(os.sep, "/")
        if relative.startswith("../") or relative == "..":
            old = new = self.path
        else:
            old, new = f"a/{relative}", f"b/{relative}"
        return "".join(difflib.unified_diff(
            physical_lines(self.original, keepends=True), physical_lines(self.fixed, keepends=True), fromfile=old, tofile=new,
        ))


def _import_libcst():
    try:
        import libcst
    except ImportError:
        raise FixUnavailable("--fix and --diff need libcst: pip install 'kvlint-ascend[fix]'") from None
    return libcst


def fix_source(source: str, findings: Sequence[Finding], path: str = "<string>",
               wrappers: dict[str, str] | None = None, preview: bool = False) -> FixResult:
    """Apply the certain fixes for ``findings`` (found by the engine in ``source``).

    ``preview``: only which findings get a rewrite matters (the ``[*]`` marks), not the fixed text. libcst
    then reads the module with the top-level functions and classes that hold no such finding left out
    (``kvlint.fix.planner.outline``): the same decisions, at the cost of the code they are about, where the
    whole module cost a minute on a generated 50,000-line file. The text is then left as it is, and the
    edits are not applied: what they change is each one node, rewritten to code that parses on its own."""
    wanted = [f for f in findings if f.code in FIXABLE]
    if not wanted:
        return FixResult(path, source, source)
    _import_libcst()
    from kvlint.checks.engine import build_tree
    from kvlint.fix.planner import NOT_FOUND, Planner, outline

    module = build_tree(source, path)
    shown = outline(source, module, wanted) if preview else None
    planner = Planner(source, path, wrappers or {}, wanted, module, shown)
    lines = physical_lines(source)
    applied, declined = [], {}
    for finding in wanted:
        start = (finding.line, code_point_column(numbered_line(lines, finding.line), finding.column))
        end = (finding.end_line, code_point_column(numbered_line(lines, finding.end_line), finding.end_column))
        if shown is not None:
            start, end = shown.position(start), shown.position(end)
            if start is None or end is None:  # pragma: no cover - the outline keeps every finding's statement
                declined[finding] = NOT_FOUND
                continue
        handler: Callable[[Finding, tuple[int, int], tuple[int, int]], str | None] = {
            "KVL102": planner.plan_rename,
            "KVL112": planner.plan_alias,
            "KVL301": planner.plan_block_table,
        }[finding.code]
        reason = handler(finding, start, end)
        if reason is None:
            applied.append(finding)
        else:
            declined[finding] = reason
    if preview:
        return FixResult(path, source, source, applied, declined)
    fixed = planner.apply() if applied else planner.rewritten
    try:
        compile(fixed, path, "exec")
    except SyntaxError:  # pragma: no cover - a rewrite never breaks syntax; refuse rather than write it
        return FixResult(path, source, source, declined={f: "the rewrite would not compile" for f in wanted})
    return FixResult(path, source, fixed, applied, declined)
