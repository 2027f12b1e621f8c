"""Finding the files to lint, reading them as Python does, and linting them (in parallel when asked).

A file's result has its findings after its own suppression comments (``kvlint.frontends.suppression``); selection
(``--select``, ``--ignore``, per-file-ignores) is the caller's business.
"""

from __future__ import annotations

import fnmatch
import io
import os
import stat
import tokenize
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field

from kvlint.analysis.finding import Finding
from kvlint.analysis.settings import DEFAULT_SETTINGS, Settings
from kvlint.checks.engine import Unanalysable, cpython_refusal, lint_source, refused
from kvlint.frontends.suppression import read_suppressions, warn_about

DEFAULT_EXCLUDE: tuple[str, ...] = (
    ".git", ".hg", ".svn", ".bzr", ".tox", ".nox", ".venv", "venv", ".env", "env", "__pycache__", "build", "dist",
    "node_modules", ".eggs", "*.egg-info", ".mypy_cache", ".pytest_cache", ".ruff_cache", "site-packages",
)
"""Folders not entered when searching a folder (``exclude`` replaces them, ``extend-exclude`` adds to them). A
folder that is a Python package (it has an ``__init__.py``) is entered even when its name is on this list, so
``mypkg/env/`` and ``mypkg/build/`` are linted; a top-level ``build/`` output folder is not."""


@dataclass
class FileResult:
    path: str
    findings: list[Finding] = field(default_factory=list)
    error: str | None = None
    """A message naming the file when it could not be read or analysed."""
    warnings: list[str] = field(default_factory=list)
    """Messages naming the file and line of suppression comments that name no kvlint rule."""
    skipped: str | None = None
    """A message naming the file and why, when kvlint read it but did not analyse it: the run's results do not
    cover it (each output format says so)."""


@dataclass(frozen=True)
class Pattern:
    """One exclusion pattern. Without ``/`` it is matched against a path's name (``build``, ``*_pb2.py``); with
    ``/`` against the path relative to ``root`` (the configuration file's folder, or the current folder for
    the command line)."""

    glob: str
    root: str = "."
    spares_packages: bool = False
    """The default names leave Python packages (folders with an ``__init__.py``) alone."""

    def matches(self, path: str, name: str, is_package: bool) -> bool:
        """``name``: the last component of ``path``."""
        if is_package and self.spares_packages:
            return False
        glob = self.glob.replace(os.sep, "/").removeprefix("./").rstrip("/")
        if "/" not in glob:
            return fnmatch.fnmatchcase(name, glob)
        relative = os.path.relpath(os.path.abspath(path), os.path.abspath(self.root)).replace(os.sep, "/")
        return fnmatch.fnmatchcase(relative, glob) or fnmatch.fnmatchcase(relative, glob + "/*")


DEFAULT_PATTERNS = tuple(Pattern(name, spares_packages=True) for name in DEFAULT_EXCLUDE)


@dataclass(frozen=True)
class Exclusion:
    """Which paths a folder search leaves out."""

    patterns: tuple[Pattern, ...] = DEFAULT_PATTERNS

    def excludes(self, path: str, is_package: bool = False) -> bool:
        """Whether the walk leaves out ``path``, a folder or file it found (its parents were entered)."""
        name = os.path.basename(os.path.normpath(path))
        return any(pattern.matches(path, name, is_package) for pattern in self.patterns)

    def excludes_any_part(self, path: str) -> bool:
        """Whether ``path``, named on the command line, or any folder above it is excluded (``--force-exclude``)."""
        parts = os.path.normpath(path).split(os.sep)
        for end in range(1, len(parts) + 1):
            prefix = os.sep.join(parts[:end]) or os.sep
            if self.excludes(prefix, os.path.isfile(os.path.join(prefix, "__init__.py"))):
                return True
        return False


def _is_virtualenv(folder: str) -> bool:
    return os.path.exists(os.path.join(folder, "pyvenv.cfg")) or os.path.isdir(os.path.join(folder, "conda-meta"))


def _is_lock_file(name: str) -> bool:
    """Editor lock files (Emacs's ``.#module.py``, a symlink to nowhere) are not Python files."""
    return name.startswith(".#")


def discover(paths: Iterable[str], exclusion: Exclusion = Exclusion(), force_exclude: bool = False) -> Iterator[str]:
    """Python files under ``paths``, in a stable order, each once (however it was named), leaving out excluded
    folders and files, virtualenvs (by their ``pyvenv.cfg``) and editor lock files. A file named on the command
    line is linted even when excluded, unless ``force_exclude``."""
    seen: set[str] = set()

    def first_time(path: str) -> bool:
        key = os.path.realpath(path)
        if key in seen:
            return False
        seen.add(key)
        return True

    for path in paths:
        if force_exclude and exclusion.excludes_any_part(path):
            continue
        if not os.path.isdir(path):
            if first_time(path):
                yield path
            continue
        for root, dirs, files in os.walk(path):
            dirs[:] = sorted(
                d for d in dirs
                if not _is_virtualenv(os.path.join(root, d))
                and not exclusion.excludes(os.path.join(root, d), os.path.isfile(os.path.join(root, d, "__init__.py")))
            )
            for name in sorted(files):
                full = os.path.join(root, name)
                if (name.endswith((".py", ".pyi")) and not _is_lock_file(name) and not exclusion.excludes(full)
                        and first_time(full)):
                    yield full


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
        return decode_source(handle.read(), path)


def lint_text(source: str, path: str, settings: Settings = DEFAULT_SETTINGS) -> FileResult:
    """Lint one file's text and apply its suppression comments (a ``# kvlint:`` comment naming no rule is a
    warning even when the file has no finding)."""
    findings = lint_source(source, path, settings)
    if not findings and "kvlint:" not in source.lower():
        return FileResult(path)
    suppressions = read_suppressions(source)
    return FileResult(path, suppressions.filter(findings), warnings=warn_about(path, suppressions))


def decode_source(raw: bytes, path: str) -> str:
    """Bytes decoded as Python decodes a module (PEP 263 coding cookie, else UTF-8); undecodable bytes that
    CPython's compiler accepts (they are in comments) are replaced, otherwise CPython's own error (a
    ``SyntaxError`` naming the line) is raised."""
    encoding = "utf-8"
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(raw).readline)  # reads at most two lines
        return raw.decode(encoding)
    except (SyntaxError, UnicodeDecodeError) as error:
        refusal = cpython_refusal(raw, path)
        if refusal is not None:
            raise (refusal if isinstance(refusal, SyntaxError) else error) from None
    return raw.decode(encoding, errors="replace")


def lint_bytes(raw: bytes, path: str, settings: Settings = DEFAULT_SETTINGS) -> tuple[FileResult, str | None]:
    """Lint text that is not read from ``path`` (standard input shown as ``path``); returns the result and the
    decoded text (None when it cannot be decoded)."""
    try:
        source = decode_source(raw, path)
    except (SyntaxError, UnicodeDecodeError, LookupError) as error:
        return FileResult(path, [refused(path, error, "cannot decode the input")]), None
    try:
        return lint_text(source, path, settings), source
    except Unanalysable as skipped:
        return FileResult(path, skipped=str(skipped)), source
    except Exception as error:  # noqa: BLE001 - an internal error is reported, never a traceback
        return FileResult(path, error=f"{path}: internal error: {type(error).__name__}: {error}"), source


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
        return FileResult(path, [refused(path, error, "cannot decode the file")])
    try:
        return lint_text(source, path, settings)
    except Unanalysable as skipped:
        return FileResult(path, skipped=str(skipped))
    except Exception as error:  # noqa: BLE001 - one file's internal error must not stop the run
        return FileResult(path, error=f"{path}: internal error: {type(error).__name__}: {error}")


def run(paths: Sequence[str], settings: Settings = DEFAULT_SETTINGS, jobs: int = 1,
        exclusion: Exclusion = Exclusion(), force_exclude: bool = False) -> list[FileResult]:
    files = list(discover(paths, exclusion, force_exclude))
    return lint_files(files, settings, jobs)


def lint_files(files: Sequence[str], settings: Settings = DEFAULT_SETTINGS, jobs: int = 1,
               lint: Callable[[str, Settings], FileResult] = lint_file) -> list[FileResult]:
    """``lint`` (``lint_file`` or a front-end's wrapper of it, a module-level function for the ``-j``
    workers) over the files, in order."""
    if jobs > 1 and len(files) > 1:
        from concurrent.futures import ProcessPoolExecutor  # here: with multiprocessing, 10 ms of every start

        with ProcessPoolExecutor(max_workers=jobs) as pool:
            return list(pool.map(lint, files, [settings] * len(files), chunksize=8))
    return [lint(path, settings) for path in files]
