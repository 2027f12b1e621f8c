"""``kvlint --fix`` / ``--diff`` over files: read each file, apply ``kvlint.fix``'s rewrites, write the
file back in its own encoding, and lint it again so that what is reported is what is left."""

from __future__ import annotations

import tokenize
from collections.abc import Callable

from kvlint.analysis.finding import Finding
from kvlint.analysis.settings import Settings
from kvlint.catalogue.rules import FIXABLE
from kvlint.fix.rewrite import FixUnavailable, fix_source
from kvlint.frontends.runner import FileResult, lint_text, read_source


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
