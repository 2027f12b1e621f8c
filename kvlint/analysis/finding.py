"""A finding: one rule violation at one place in one file, as every front-end reports it."""

from __future__ import annotations

from dataclasses import dataclass

from astroid import nodes

from kvlint.catalogue.rules import RULES, Rule


@dataclass(frozen=True, order=True)
class Finding:
    """Positions follow the ast convention: 1-based lines, 0-based columns, exclusive end column."""

    path: str
    line: int
    column: int
    end_line: int
    end_column: int
    code: str
    message: str

    @property
    def rule(self) -> Rule:
        return RULES[self.code]

    @property
    def symbol(self) -> str:
        return self.rule.symbol

    @property
    def severity(self) -> str:
        return self.rule.severity

    def to_json(self) -> dict[str, object]:
        """The CLI's JSON object (1-based columns, as editors show them)."""
        return {
            "path": self.path,
            "line": self.line,
            "column": self.column + 1,
            "end_line": self.end_line,
            "end_column": self.end_column + 1,
            "code": self.code,
            "symbol": self.symbol,
            "severity": self.severity,
            "message": self.message,
        }


@dataclass(frozen=True)
class Issue:
    """What a check reports: a code, the node to point at and the message (without the code)."""

    code: str
    node: nodes.NodeNG
    message: str

    def at(self, path: str) -> Finding:
        line = self.node.lineno or 1
        column = self.node.col_offset or 0
        end_line = self.node.end_lineno or line
        end_column = self.node.end_col_offset if self.node.end_col_offset is not None else column
        return Finding(path, line, column, end_line, end_column, self.code, self.message)
