"""Finding the files to lint, reading them as Python does, and linting them (in parallel when asked).

A file's result has its findings after its own suppression comments (``kvlint.frontends.suppression``); selection
(``--select``, ``--ignore``, per-file-ignores) is the caller's business.
"""

from __future__ import annotations

import io
import os
import stat
import tokenize
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field

from kvlint.analysis.finding import Finding
from kvlint.analysis.settings import DEFAULT_SETTINGS, Settings
from kvlint.checks.engine import Unanalysable, cpython_refusal, lint_source, syntax_error
from kvlint.frontends.suppression import read_suppressions

SKIPPED_DIRECTORIES = frozenset({
    ".git", ".hg", ".svn", ".tox", ".nox", ".venv", "venv", ".env", "env", "__pycache__", "build", "dist",
    "node_modules", ".eggs", ".mypy_cache", ".pytest_cache", ".ruff_cache", "site-packages",
})
"""Folders never entered when recursing (explicitly named paths are always linted)."""


@dataclass
class FileResult:
    path: str
    findings: list[Finding] = field(default_factory=list)
    error: str | None = None
    """A message naming the file when it could not be read or analysed."""
    warnings: list[str] = field(default_factory=list)
    """Messages naming the file and line of suppression comments that name no kvlint rule."""


def discover(paths: Iterable[str]) -> Iterator[str]:
    """Python files under ``paths``, in a stable order, skipping VCS folders and virtualenvs."""
    for path in paths:
        if not os.path.isdir(path):
            yield path
            continue
        for root, dirs, files in os.walk(path):
            dirs[:] = sorted(
                d for d in dirs
                if d not in SKIPPED_DIRECTORIES and not d.endswith(".egg-info")
                and not os.path.exists(os.path.join(root, d, "pyvenv.cfg"))
            )
            for name in sorted(files):
                if name.endswith((".py", ".pyi")):
                    yield os.path.join(root, name)


def read_source(path: str) -> str:
    """The file's text, decoded as Python decodes it (PEP 263 coding cookie, else UTF-8).

    CPython's compiler does not decode comments: a file that declares UTF-8 (or nothing) and holds GBK
    bytes in a comment imports and runs. When the strict decoding fails and CPython still compiles the
    bytes, the undecodable bytes (inside comments, then) are replaced and the file is linted; otherwise
    the decoding error is raised.
    """
    mode = os.stat(path).st_mode
    if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
        raise OSError("not a regular file")  # a FIFO or a device would block, or never end
    with open(path, "rb") as handle:
        raw = handle.read()
    encoding = "utf-8"
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(raw).readline)  # reads at most two lines
        return raw.decode(encoding)
    except (SyntaxError, UnicodeDecodeError):
        if cpython_refusal(raw, path) is not None:
            raise
    return raw.decode(encoding, errors="replace")


def lint_text(source: str, path: str, settings: Settings = DEFAULT_SETTINGS) -> FileResult:
    """Lint one file's text and apply its suppression comments."""
    findings = lint_source(source, path, settings)
    if not findings:
        return FileResult(path)
    suppressions = read_suppressions(source)
    warnings = [f"{path}:{line}: {message}" for line, message in suppressions.problems]
    return FileResult(path, suppressions.filter(findings), warnings=warnings)


def lint_file(path: str, settings: Settings = DEFAULT_SETTINGS) -> FileResult:
    """Lint one file; never raises."""
    try:
        source = read_source(path)
    except FileNotFoundError:
        return FileResult(path, error=f"{path}: no such file")
    except IsADirectoryError:
        return FileResult(path, error=f"{path}: is a directory")
    except OSError as error:
        return FileResult(path, error=f"{path}: cannot read: {error.strerror or error}")
    except (SyntaxError, UnicodeDecodeError, LookupError) as error:
        return FileResult(path, [syntax_error(path, 1, 0, f"cannot decode the file: {error}")])
    try:
        return lint_text(source, path, settings)
    except Unanalysable as skipped:
        return FileResult(path, warnings=[str(skipped)])
    except Exception as error:  # noqa: BLE001 - one file's internal error must not stop the run
        return FileResult(path, error=f"{path}: internal error: {type(error).__name__}: {error}")


def run(paths: Sequence[str], settings: Settings = DEFAULT_SETTINGS, jobs: int = 1) -> list[FileResult]:
    files = list(discover(paths))
    if jobs > 1 and len(files) > 1:
        with ProcessPoolExecutor(max_workers=jobs) as pool:
            return list(pool.map(lint_file, files, [settings] * len(files), chunksize=8))
    return [lint_file(path, settings) for path in files]
