"""The ``kvlint`` command line (also ``python -m kvlint``).

Exit status: 0 no findings, 1 findings, 2 usage error or a file that could not be read or analysed.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tokenize
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field

from kvlint import __version__
from kvlint.engine import DEFAULT_SETTINGS, Settings, lint_source, syntax_error
from kvlint.finding import Finding
from kvlint.ruleset import RULES

SKIPPED_DIRECTORIES = frozenset({
    ".git", ".hg", ".svn", ".tox", ".nox", ".venv", "venv", ".env", "env", "__pycache__", "build", "dist",
    "node_modules", ".eggs", ".mypy_cache", ".pytest_cache", ".ruff_cache", "site-packages",
})
"""Folders never entered when recursing (explicitly named paths are always linted)."""
_CODE_OR_PREFIX = re.compile(r"^KVL\d{0,3}$")


@dataclass
class FileResult:
    path: str
    findings: list[Finding] = field(default_factory=list)
    error: str | None = None
    """A message naming the file when it could not be read or analysed."""


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
    """The file's text, decoded as Python decodes it (PEP 263 coding cookie, else UTF-8)."""
    with open(path, "rb") as handle:
        raw = handle.read()
    encoding, _ = tokenize.detect_encoding(iter(raw.splitlines(keepends=True)).__next__)
    return raw.decode(encoding)


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
        return FileResult(path, lint_source(source, path, settings))
    except Exception as error:  # noqa: BLE001 - one file's internal error must not stop the run
        return FileResult(path, error=f"{path}: internal error: {type(error).__name__}: {error}")


def _matches(code: str, patterns: Sequence[str]) -> bool:
    return any(code.startswith(pattern) for pattern in patterns)


def selected(finding: Finding, select: Sequence[str], ignore: Sequence[str]) -> bool:
    """``--select`` / ``--ignore`` by code or prefix (``KVL2``); KVL000 is always reported."""
    if finding.code == "KVL000":
        return True
    return (not select or _matches(finding.code, select)) and not _matches(finding.code, ignore)


def format_text(finding: Finding) -> str:
    return f"{finding.path}:{finding.line}:{finding.column + 1}: {finding.code} {finding.message} [{finding.symbol}]"


def _code_list(value: str) -> list[str]:
    codes = [item.strip().upper() for item in value.split(",") if item.strip()]
    for code in codes:
        if not _CODE_OR_PREFIX.match(code):
            raise argparse.ArgumentTypeError(f"'{code}' is not a kvlint code or prefix (e.g. KVL201, KVL2)")
    return codes


def _jobs(value: str) -> int:
    try:
        jobs = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{value}' is not a number of processes") from None
    if jobs < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return jobs


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kvlint",
        description="Find misuse of Ascend torch_npu fused attention and KV-cache operators.",
    )
    parser.add_argument("paths", nargs="*", default=["."], help="files or folders (default: .)")
    parser.add_argument("--format", choices=("text", "json"), default="text", help="output format")
    parser.add_argument("--select", type=_code_list, default=[], metavar="CODES",
                        help="report only these codes or prefixes, comma-separated (KVL1,KVL201)")
    parser.add_argument("--ignore", type=_code_list, default=[], metavar="CODES",
                        help="do not report these codes or prefixes")
    parser.add_argument("--exit-zero", action="store_true", help="exit 0 even when there are findings")
    parser.add_argument("-j", "--jobs", type=_jobs, default=1, metavar="N", help="lint N files in parallel")
    parser.add_argument("--statistics", action="store_true", help="print the number of findings per code")
    parser.add_argument("--version", action="version", version=f"kvlint {__version__}")
    return parser


def run(paths: Sequence[str], settings: Settings, jobs: int) -> list[FileResult]:
    files = list(discover(paths))
    if jobs > 1 and len(files) > 1:
        with ProcessPoolExecutor(max_workers=jobs) as pool:
            return list(pool.map(lint_file, files, [settings] * len(files), chunksize=8))
    return [lint_file(path, settings) for path in files]


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    results = run(args.paths, DEFAULT_SETTINGS, args.jobs)
    findings = [f for r in results for f in r.findings if selected(f, args.select, args.ignore)]
    errors = [r.error for r in results if r.error]
    if args.format == "json":
        print(json.dumps([f.to_json() for f in findings], indent=2))
    else:
        for finding in findings:
            print(format_text(finding))
    if args.statistics:
        counts = Counter(f.code for f in findings)
        for code, count in sorted(counts.items()):
            print(f"{count:<6} {code} [{RULES[code].symbol}]", file=sys.stderr if args.format == "json" else sys.stdout)
    for error in errors:
        print(f"kvlint: error: {error}", file=sys.stderr)
    if errors:
        return 2
    return 1 if findings and not args.exit_zero else 0
