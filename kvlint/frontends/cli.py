"""The ``kvlint`` command line (also ``python -m kvlint``).

Exit status: 0 no findings, 1 findings (or, with ``--diff``, fixes to apply), 2 usage error, bad
configuration, or a file that could not be read or analysed.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Sequence

from kvlint import __version__
from kvlint.analysis.finding import Finding
from kvlint.frontends.config import Config, ConfigError, find_config, load_config
from kvlint.frontends.output import FORMATS, format_text, render, statistics
from kvlint.frontends.runner import SKIPPED_DIRECTORIES, FileResult, discover, lint_file, read_source, run

__all__ = ["FileResult", "SKIPPED_DIRECTORIES", "build_parser", "discover", "format_text", "lint_file", "main",
           "read_source", "run", "selected"]

_CODE_OR_PREFIX = re.compile(r"^KVL\d{0,3}$")


def _matches(code: str, patterns: Sequence[str]) -> bool:
    return any(code.startswith(pattern) for pattern in patterns)


def selected(finding: Finding, select: Sequence[str], ignore: Sequence[str]) -> bool:
    """``--select`` / ``--ignore`` by code or prefix (``KVL2``); KVL000 is always reported."""
    if finding.code == "KVL000":
        return True
    return (not select or _matches(finding.code, select)) and not _matches(finding.code, ignore)


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
    parser.add_argument("--format", choices=FORMATS, default="text",
                        help="output format: text (for people), json, github (Actions annotations), sarif")
    parser.add_argument("-o", "--output", metavar="FILE", help="write the report to FILE instead of stdout")
    parser.add_argument("--select", type=_code_list, default=None, metavar="CODES",
                        help="report only these codes or prefixes, comma-separated (KVL1,KVL201); "
                             "replaces 'select' of the configuration")
    parser.add_argument("--ignore", type=_code_list, default=None, metavar="CODES",
                        help="do not report these codes or prefixes; replaces 'ignore' of the configuration")
    config = parser.add_mutually_exclusive_group()
    config.add_argument("--config", metavar="FILE",
                        help="read [tool.kvlint] (a .toml file) or [kvlint] (a .cfg/.ini file) from FILE "
                             "instead of searching pyproject.toml / setup.cfg from the current folder up")
    config.add_argument("--isolated", action="store_true", help="ignore every configuration file")
    parser.add_argument("--exit-zero", action="store_true", help="exit 0 even when there are findings")
    parser.add_argument("-j", "--jobs", type=_jobs, default=1, metavar="N", help="lint N files in parallel")
    parser.add_argument("--statistics", action="store_true", help="print the number of findings per code")
    fixing = parser.add_mutually_exclusive_group()
    fixing.add_argument("--fix", action="store_true",
                        help="apply the safe fixes (KVL102, KVL112, KVL301) in place, then report what is left")
    fixing.add_argument("--diff", action="store_true",
                        help="print the safe fixes as a unified diff instead of applying them (exit 1 if any)")
    info = parser.add_mutually_exclusive_group()
    info.add_argument("--explain", metavar="RULE", help="print the documentation of a rule (code or symbol)")
    info.add_argument("--list-rules", action="store_true", help="print the table of rules")
    parser.add_argument("--version", action="version", version=f"kvlint {__version__}")
    return parser


def _error(message: str) -> int:
    print(f"kvlint: error: {message}", file=sys.stderr)
    return 2


def _configuration(args: argparse.Namespace) -> Config:
    if args.config:
        return load_config(args.config)
    if args.isolated:
        return Config()
    return find_config()


def _write(text: str, output: str | None) -> None:
    if output is None:
        sys.stdout.write(text)
        return
    with open(output, "w", encoding="utf-8") as handle:
        handle.write(text)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.list_rules:
        from kvlint.catalogue.pages import rules_table

        print(rules_table())
        return 0
    if args.explain:
        from kvlint.catalogue.pages import explain

        try:
            print(explain(args.explain), end="")
        except KeyError:
            return _error(f"'{args.explain}' is not a kvlint rule code or symbol (see kvlint --list-rules)")
        return 0
    try:
        config = _configuration(args)
    except ConfigError as error:
        return _error(str(error))
    select = config.select if args.select is None else args.select
    ignore = config.ignore if args.ignore is None else args.ignore
    settings = config.settings()

    def keep(finding: Finding) -> bool:
        if finding.code == "KVL000":
            return True
        return selected(finding, select, ignore) and not _matches(finding.code, config.ignored_for(finding.path))

    results = run(args.paths, settings, args.jobs)
    fixed_count = 0
    if args.fix or args.diff:
        from kvlint.fix.rewrite import FixUnavailable
        from kvlint.frontends.fixing import apply_fixes

        try:
            results, diffs, fixed_count = apply_fixes(results, keep, settings, write=args.fix)
        except FixUnavailable as error:
            return _error(str(error))
        if args.diff:
            _write("".join(diffs), args.output)
            for result in results:
                for warning in result.warnings:
                    print(f"kvlint: warning: {warning}", file=sys.stderr)
            return 1 if diffs else 0
    findings = [f for r in results for f in r.findings if keep(f)]
    errors = [r.error for r in results if r.error]
    try:
        _write(render(args.format, findings, errors), args.output)
    except OSError as error:
        return _error(f"{args.output}: cannot write: {error.strerror or error}")
    if args.statistics:
        to_stdout = args.format == "text" and not args.output
        print(statistics(findings), end="", file=sys.stdout if to_stdout else sys.stderr)
    if args.fix:
        print(f"kvlint: fixed {fixed_count} finding(s)", file=sys.stderr)
    for result in results:
        for warning in result.warnings:
            print(f"kvlint: warning: {warning}", file=sys.stderr)
    for error in errors:
        print(f"kvlint: error: {error}", file=sys.stderr)
    if errors:
        return 2
    return 1 if findings and not args.exit_zero else 0
