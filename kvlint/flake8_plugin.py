"""The flake8 plugin (entry point ``KVL`` in the ``flake8.extension`` group).

flake8 hands over the file's lines; the engine parses them with astroid. flake8 itself reports files that
do not parse (E999) and handles ``# noqa``, ``--select`` and ``--extend-ignore``.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator, Sequence

from kvlint import __version__
from kvlint.engine import DEFAULT_SETTINGS, lint_source


class Plugin:
    name = "kvlint"
    version = __version__

    def __init__(self, tree: ast.AST, lines: Sequence[str], filename: str) -> None:
        self.lines = lines
        self.filename = filename

    def run(self) -> Iterator[tuple[int, int, str, type]]:
        for finding in lint_source("".join(self.lines), self.filename, DEFAULT_SETTINGS):
            if finding.code != "KVL000":
                yield finding.line, finding.column, f"{finding.code} {finding.message}", type(self)
