"""A file's lines as Python's tokenizer counts them.

``str.splitlines()`` also ends a line at a form feed, a vertical tab, U+001C-U+001E, U+0085 (NEL), U+2028 and
U+2029. Python's tokenizer, ast, astroid, flake8 and editors' line numbers do not: only ``\\n``, ``\\r\\n``
and ``\\r`` end a line. One of those characters in a comment would shift every later line by one, so a finding's
columns would be read from the wrong line and ``--fix`` would not find its expression. Every part of kvlint that
reads a line by its number reads it from here.
"""

from __future__ import annotations

import re

_LINE_BREAK = re.compile(r"\r\n|\r|\n")


def physical_lines(text: str, keepends: bool = False) -> list[str]:
    """``text`` split where Python's tokenizer ends a line (``\\n``, ``\\r\\n``, ``\\r``), like
    ``str.splitlines`` otherwise: no empty last line after a final line break."""
    lines: list[str] = []
    start = 0
    for match in _LINE_BREAK.finditer(text):
        lines.append(text[start:match.end() if keepends else match.start()])
        start = match.end()
    if start < len(text):
        lines.append(text[start:])
    return lines


def numbered_line(lines: list[str], number: int) -> str | None:
    """Line ``number`` (from 1) of ``lines``, or None past either end."""
    return lines[number - 1] if 0 < number <= len(lines) else None


def code_point_column(line: str | None, byte_column: int) -> int:
    """ast and astroid count a column in UTF-8 bytes; libcst, the CLI's formats and SARIF in code points
    (``line``: None when the line is not known, and the column is kept)."""
    if line is None:
        return byte_column
    return len(line.encode("utf-8")[:byte_column].decode("utf-8", "ignore"))


def byte_column(line: str, code_point_column: int) -> int:
    """The other way: a column of ``line`` in code points, counted in UTF-8 bytes."""
    return len(line[:code_point_column].encode("utf-8"))
