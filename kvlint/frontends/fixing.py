"""``kvlint --fix`` / ``--diff`` over files: read each file, apply ``kvlint.fix``'s rewrites until nothing
changes, write the file back in its own encoding, and report what is left.

A fix changes only the bytes of the expressions it rewrites. So a file is fixed only when its bytes decode
losslessly (they decode in its encoding, its PEP 263 cookie else UTF-8, and encode back to the same bytes): a
latin-1 byte in a comment of a file without a coding line is read for linting with a replacement character, and
writing that text back would change the byte. Such a file is left as it is, with a warning saying why.

One fix can uncover another: rewriting ``torch.npu_fused_infer_attention_score`` to ``torch_npu.<op>``
makes the call resolvable, and only then is its int64 block table reported. So, as ruff does, each file is
linted and fixed again until a round changes nothing (at most ``MAX_ROUNDS`` rounds): one run settles.

Each file is fixed, or previewed for the ``[*]`` marks, the way it is linted (``kvlint.frontends.heap.one_file``):
the collector waits meanwhile, since the file's trees live until it is done anyway.
"""

from __future__ import annotations

import io
import tokenize
from collections.abc import Callable
from dataclasses import dataclass, field

from kvlint.analysis.finding import Finding
from kvlint.analysis.settings import Settings
from kvlint.catalogue.rules import FIXABLE
from kvlint.fix.rewrite import FixResult, FixUnavailable, fix_source
from kvlint.frontends.heap import one_file
from kvlint.frontends.runner import FileResult, lint_text

MAX_ROUNDS = 10
"""Rounds of lint-and-fix per file before kvlint gives up on reaching a fixed point (and says so)."""


@dataclass
class TextFix:
    """The outcome of fixing one file's text to a fixed point."""

    result: FileResult
    """The findings of the final text."""
    original: str
    fixed: str
    applied: int = 0
    """Findings a rewrite was made for, over all rounds."""
    declined: dict[Finding, str] = field(default_factory=dict)
    """Findings of fixable rules in the final text that got no rewrite, with the reason."""
    settled: bool = True
    """False when the last round still changed the text."""

    @property
    def changed(self) -> bool:
        return self.fixed != self.original


def fix_text(result: FileResult, source: str, keep: Callable[[Finding], bool], settings: Settings) -> TextFix:
    """Fix the kept findings of ``result`` (the findings of ``source``), re-lint, and repeat until a round makes
    no rewrite. Raises ``FixUnavailable`` without libcst."""
    outcome = TextFix(result, source, source)
    for _ in range(MAX_ROUNDS):
        fixable = [f for f in outcome.result.findings if f.code in FIXABLE and keep(f)]
        if not fixable:
            outcome.declined = {}
            return outcome
        round_ = fix_source(outcome.fixed, fixable, result.path, settings.extra_fa_wrappers)
        outcome.declined = round_.declined
        if not round_.changed:
            return outcome
        outcome.fixed = round_.fixed
        outcome.applied += len(round_.applied)
        relinted = lint_text(outcome.fixed, result.path, settings)
        relinted.warnings = result.warnings
        outcome.result = relinted
    outcome.settled = False
    return outcome


class NotLossless(Exception):
    """The file's bytes do not survive decoding and encoding back: a fix would change bytes it does not fix."""


def decode_losslessly(raw: bytes) -> tuple[str, str]:
    """(text, encoding) of a file ``--fix`` may rewrite: its bytes decoded in its own encoding (its PEP 263
    cookie, else UTF-8), which encode back to the same bytes; raises ``NotLossless`` otherwise."""
    encoding, _ = tokenize.detect_encoding(io.BytesIO(raw).readline)
    try:
        text = raw.decode(encoding)
    except UnicodeDecodeError as error:
        line = raw.count(b"\n", 0, error.start) + 1
        raise NotLossless(f"byte 0x{raw[error.start]:02x} on line {line} is not {encoding}, so the fixed file could "
                          f"not keep it; declare the file's encoding with a coding line to fix it") from None
    if text.encode(encoding) != raw:
        raise NotLossless(f"its bytes do not survive decoding as {encoding} and encoding back")
    return text, encoding


def _read(path: str) -> bytes:
    with open(path, "rb") as handle:
        return handle.read()


def _write(path: str, data: bytes) -> None:
    with open(path, "wb") as handle:
        handle.write(data)


@dataclass
class FixReport:
    results: list[FileResult]
    """Per file: the findings left (re-linted where the text changed)."""
    diffs: list[str] = field(default_factory=list)
    fixed_count: int = 0
    """Fixes made: written to their files, or (``--diff``, standard input) shown."""
    unwritten_count: int = 0
    """Fixes made in files that could not be written back (each such file has an error)."""
    declined: dict[Finding, str] = field(default_factory=dict)
    """Findings of fixable rules left unfixed, with the reason."""
    fixed_sources: dict[str, bytes] = field(default_factory=dict)
    """The fixed bytes of each input given in ``sources`` (standard input) that changed."""


def apply_fixes(results: list[FileResult], keep: Callable[[Finding], bool], settings: Settings,
                write: bool, sources: dict[str, bytes] | None = None) -> FixReport:
    """Fix the kept findings of each file: write the files (``write``) or only preview. ``sources`` gives the
    bytes of results that are not files (standard input). A file kvlint cannot rewrite (or not losslessly) keeps
    its findings and gets a warning; one it cannot write gets an error."""
    report = FixReport([])
    for result in results:
        if not any(f.code in FIXABLE and keep(f) for f in result.findings):
            report.results.append(result)
            continue
        try:
            raw = sources[result.path] if sources and result.path in sources else _read(result.path)
            source, encoding = decode_losslessly(raw)
            with one_file():
                outcome = fix_text(result, source, keep, settings)
        except FixUnavailable:
            raise
        except NotLossless as error:
            result.warnings.append(f"{result.path}: not fixed: {error}")
            report.results.append(result)
            continue
        except Exception as error:  # noqa: BLE001 - a file kvlint cannot rewrite is reported, not fatal
            result.warnings.append(f"{result.path}: cannot fix: {type(error).__name__}: {error}")
            report.results.append(result)
            continue
        report.declined.update(outcome.declined)
        if not outcome.settled:
            outcome.result.warnings.append(f"{result.path}: the fixes did not settle after {MAX_ROUNDS} rounds")
        if not outcome.changed:
            report.results.append(outcome.result)
            continue
        report.diffs.append(FixResult(result.path, outcome.original, outcome.fixed).diff())
        if not write:
            report.fixed_count += outcome.applied
            report.results.append(result)
            continue
        if sources and result.path in sources:
            report.fixed_sources[result.path] = outcome.fixed.encode(encoding)
        else:
            try:
                _write(result.path, outcome.fixed.encode(encoding))
            except OSError as error:
                result.error = f"{result.path}: cannot write the fixes: {error.strerror or error}"
                report.unwritten_count += outcome.applied
                report.results.append(result)
                continue
        report.fixed_count += outcome.applied
        report.results.append(outcome.result)
    return report


def fixable_findings(results: list[FileResult], keep: Callable[[Finding], bool], settings: Settings,
                     sources: dict[str, bytes] | None = None) -> set[Finding]:
    """The kept findings ``--fix`` would fix in its first round (the ``[*]`` marker): a dry run. Raises
    ``FixUnavailable`` without libcst."""
    fixable: set[Finding] = set()
    for result in results:
        wanted = [f for f in result.findings if f.code in FIXABLE and keep(f)]
        if not wanted:
            continue
        try:
            source, _ = decode_losslessly(sources[result.path] if sources and result.path in sources
                                          else _read(result.path))
            with one_file():
                preview = fix_source(source, wanted, result.path, settings.extra_fa_wrappers, preview=True)
            fixable.update(preview.applied)
        except FixUnavailable:
            raise
        except Exception:  # noqa: BLE001 - no marker for a file kvlint cannot rewrite; --fix will say why
            continue
    return fixable
