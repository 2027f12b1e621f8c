"""The ``kvlint`` command line (also ``python -m kvlint``).

Exit status: 0 no findings, 1 findings (or, with ``--diff``, fixes to apply), 2 usage error, bad
configuration, or a file that could not be read or analysed; 141 when the reader of standard output went away
(``kvlint --list-rules | head -1``).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from dataclasses import replace

from kvlint import __version__
from kvlint.analysis.finding import Finding
from kvlint.analysis.settings import (
    DEFAULT_FILE_MEMORY_LIMIT,
    DEFAULT_FILE_TIME_LIMIT,
    Settings,
    format_seconds,
    format_size,
)
from kvlint.catalogue.rules import FIXABLE
from kvlint.console import quiet_on_broken_pipe
from kvlint.frontends.config import (
    Config,
    ConfigError,
    check_code,
    find_config,
    load_config,
    parse_memory_limit,
    parse_time_limit,
)
from kvlint.frontends.heap import freeze_astroid_bootstrap, one_file
from kvlint.frontends.output import FIXABLE_MARK, FORMATS, SourceLines, format_text, in_characters, render, statistics
from kvlint.frontends.runner import (
    DEFAULT_PATTERNS,
    Exclusion,
    FileResult,
    Pattern,
    decode_source,
    discover,
    lint_bytes,
    lint_file,
    lint_files,
    read_source,
    run,
)

__all__ = ["FileResult", "build_parser", "discover", "format_text", "lint_file", "main", "read_source", "run",
           "selected"]

STDIN = "-"

EXIT_STATUS = """\
exit status:
  0    no findings (or --exit-zero)
  1    findings; with --diff, fixes to apply
  2    usage error, bad configuration, or a file that could not be read, analysed or written
  141  the reader of the output went away (kvlint --list-rules | head -1)"""


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
        problem = check_code(code)
        if problem:
            raise argparse.ArgumentTypeError(problem)
    return codes


def _pattern_list(value: str) -> list[str]:
    return [item.strip() for item in value.split(",") if item.strip()]


def _jobs(value: str) -> int:
    try:
        jobs = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{value}' is not a number of processes") from None
    if jobs < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return jobs


def _limit(parse: Callable[[str, str], object], option: str) -> Callable[[str], object]:
    """An argparse type from a configuration parser: a bad value is a usage error naming the option."""

    def convert(value: str) -> object:
        try:
            return parse(value, option)
        except ConfigError as error:
            raise argparse.ArgumentTypeError(str(error).removeprefix(f"{option}: ")) from None

    convert.__name__ = option.lstrip("-")
    return convert


_UNSET = object()
"""The default of an option whose configured value applies when it is not given."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kvlint",
        description="Find misuse of Ascend torch_npu fused attention and KV-cache operators.",
        epilog=EXIT_STATUS,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("paths", nargs="*", help="files or folders (default: .); '-' reads standard input")
    parser.add_argument("--stdin-filename", metavar="PATH",
                        help="the path to report for standard input (and to match per-file-ignores against)")
    parser.add_argument("--format", choices=FORMATS, default="text",
                        help="output format: text (for people), json, github (Actions annotations), sarif")
    parser.add_argument("-o", "--output", metavar="FILE", help="write the report to FILE instead of stdout")
    selection = parser.add_argument_group("rule selection (codes or prefixes, comma-separated; repeatable)")
    selection.add_argument("--select", type=_code_list, action="append", metavar="CODES",
                           help="report only these (KVL1,KVL201); replaces 'select' of the configuration")
    selection.add_argument("--extend-select", type=_code_list, action="append", default=[], metavar="CODES",
                           help="add these to the selection (when something is selected at all)")
    selection.add_argument("--ignore", type=_code_list, action="append", metavar="CODES",
                           help="do not report these; replaces 'ignore' of the configuration")
    selection.add_argument("--extend-ignore", type=_code_list, action="append", default=[], metavar="CODES",
                           help="do not report these either")
    files = parser.add_argument_group("file selection (glob patterns, comma-separated; repeatable)")
    files.add_argument("--exclude", type=_pattern_list, action="append", metavar="PATTERNS",
                       help="paths a folder search leaves out; replaces the defaults (.git, .venv, build, ...) "
                            "and 'exclude' of the configuration")
    files.add_argument("--extend-exclude", type=_pattern_list, action="append", default=[], metavar="PATTERNS",
                       help="paths to leave out in addition")
    files.add_argument("--force-exclude", action="store_true",
                       help="apply the exclusions to paths named on the command line too (for pre-commit)")
    config = parser.add_mutually_exclusive_group()
    config.add_argument("--config", metavar="FILE",
                        help="read [tool.kvlint] (a .toml file) or [kvlint] (a .cfg/.ini file) from FILE "
                             "instead of searching pyproject.toml / setup.cfg from the current folder up")
    config.add_argument("--isolated", action="store_true", help="ignore every configuration file")
    parser.add_argument("--exit-zero", action="store_true", help="exit 0 even when there are findings")
    parser.add_argument("-j", "--jobs", type=_jobs, default=1, metavar="N", help="lint N files in parallel")
    parser.add_argument("--statistics", action="store_true", help="print the number of findings per code")
    limits = parser.add_argument_group("per-file limits (a file past one is skipped with a warning; 0 or none: "
                                       "no limit)")
    limits.add_argument("--file-time-limit", type=_limit(parse_time_limit, "--file-time-limit"), default=_UNSET,
                        metavar="TIME", help="CPU time analysing one file may take (default: "
                        f"{format_seconds(DEFAULT_FILE_TIME_LIMIT)}; 500ms, 2min)")
    limits.add_argument("--file-memory-limit", type=_limit(parse_memory_limit, "--file-memory-limit"),
                        default=_UNSET, metavar="SIZE",
                        help="resident memory analysing one file may add to the process (default: "
                             f"{format_size(DEFAULT_FILE_MEMORY_LIMIT)}; 512MiB, 2GB)")
    fixing = parser.add_mutually_exclusive_group()
    fixing.add_argument("--fix", action="store_true",
                        help="apply the safe fixes (KVL102, KVL112, KVL301) in place, until nothing changes, then "
                             "report what is left; with '-', print the fixed text")
    fixing.add_argument("--diff", action="store_true",
                        help="print the safe fixes as a unified diff instead of applying them (exit 1 if any)")
    info = parser.add_mutually_exclusive_group()
    info.add_argument("--explain", metavar="RULE",
                      help="print the documentation of a rule (code, symbol or pylint message id), or a page "
                           "the rules cite (docs/operators/fused_infer_attention.md#fia-c13)")
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


def _flat(lists: Sequence[Sequence[str]] | None) -> list[str] | None:
    return None if lists is None else [item for items in lists for item in items]


def _exclusion(args: argparse.Namespace, config: Config) -> Exclusion:
    """``--exclude`` replaces the configured ``exclude``, which replaces the defaults; the ``extend-exclude``
    patterns are added to whichever applies."""
    if args.exclude is not None:
        patterns = tuple(Pattern(glob) for glob in _flat(args.exclude))
    elif config.exclude is not None:
        patterns = tuple(Pattern(glob, config.root) for glob in config.exclude)
    else:
        patterns = DEFAULT_PATTERNS
    patterns += tuple(Pattern(glob, config.root) for glob in config.extend_exclude)
    patterns += tuple(Pattern(glob) for glob in _flat(args.extend_exclude))
    return Exclusion(patterns)


def _write(text: str, output: str | None) -> None:
    if output is None:
        sys.stdout.write(text)
        return
    with open(output, "w", encoding="utf-8") as handle:
        handle.write(text)


def _info(args: argparse.Namespace) -> int:
    from kvlint.catalogue.pages import explain, is_page_name, rules_table

    if args.list_rules:
        print(rules_table())
        return 0
    try:
        print(explain(args.explain), end="")
    except KeyError:
        if is_page_name(args.explain):
            return _error(f"'{args.explain}' is not a page of kvlint's documentation")
        return _error(f"'{args.explain}' is not a kvlint rule code, symbol or pylint message id "
                      "(see kvlint --list-rules)")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    return quiet_on_broken_pipe(lambda: _main(argv))


def _lint_own_process(path: str, settings: Settings) -> FileResult:
    """``lint_file`` in a process the command owns (itself or a ``-j`` worker): the collector waits while the
    file is linted, astroid's caches let go of its tree after it, and astroid's bootstrap is frozen out of the
    garbage collector once built (``kvlint.frontends.heap``)."""
    with one_file():
        result = lint_file(path, settings)
    freeze_astroid_bootstrap()
    return result


def _main(argv: Sequence[str] | None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.explain == "":
        parser.error("argument --explain: expected a rule code, symbol or pylint message id, got ''")
    if args.stdin_filename is not None and args.paths and STDIN not in args.paths:
        parser.error(f"--stdin-filename names standard input, which is linted only when '{STDIN}' is among the "
                     f"paths (or no path is given): add '{STDIN}' or drop --stdin-filename")
    if args.list_rules or args.explain is not None:
        return _info(args)
    try:
        config = _configuration(args)
    except ConfigError as error:
        return _error(str(error))
    select = [*(config.select if args.select is None else _flat(args.select))]
    if select:
        select += _flat(args.extend_select)
    # The command line wins, as in ruff: --select starts the selection afresh (the configured select and ignore
    # no longer apply), and a code --extend-select names is kept unless a more specific configured ignore drops it.
    ignore = [*(_flat(args.ignore) or []), *_flat(args.extend_ignore)]
    configured_ignore = list(config.ignore) if args.select is None and args.ignore is None else []
    extended = _flat(args.extend_select)
    asked = [*(_flat(args.select) or []), *extended]
    settings = _with_limits(config.settings(), args)
    overruled: dict[str, str] = {}

    def keep(finding: Finding) -> bool:
        if finding.code == "KVL000":
            return True
        if not selected(finding, select, ignore):
            return False
        if _specificity(finding.code, configured_ignore) > _specificity(finding.code, extended):
            return False
        if not _matches(finding.code, config.ignored_for(finding.path)):
            return True
        if _matches(finding.code, asked):
            overruled.setdefault(finding.code, finding.path)
        return False

    paths = args.paths or ([STDIN] if args.stdin_filename else ["."])
    exclusion = _exclusion(args, config)
    lines = SourceLines()
    sources: dict[str, bytes] = {}
    results = _lint_stdin(args, settings, exclusion, lines, sources) if STDIN in paths else []
    files = list(discover([p for p in paths if p != STDIN], exclusion, args.force_exclude))
    if not files and STDIN not in paths:
        print("kvlint: warning: no Python files found", file=sys.stderr)
    results += lint_files(files, settings, args.jobs, _lint_own_process)
    status = _report(args, results, keep, settings, lines, sources)
    for code, path in sorted(overruled.items()):
        print(f"kvlint: warning: {code} is selected on the command line, but per-file-ignores of {config.source} "
              f"turn it off for {path} (and any other file they match)", file=sys.stderr)
    return status


def _with_limits(settings: Settings, args: argparse.Namespace) -> Settings:
    """The configured per-file limits, replaced by those the command line gives."""
    limits = settings.limits
    if args.file_time_limit is not _UNSET:
        limits = replace(limits, seconds=args.file_time_limit)
    if args.file_memory_limit is not _UNSET:
        limits = replace(limits, memory=args.file_memory_limit)
    return replace(settings, limits=limits)


def _specificity(code: str, patterns: Sequence[str]) -> int:
    """The length of the longest of ``patterns`` that ``code`` starts with (0: none)."""
    return max((len(pattern) for pattern in patterns if code.startswith(pattern)), default=0)


def _lint_stdin(args: argparse.Namespace, settings: Settings, exclusion: Exclusion, lines: SourceLines,
                sources: dict[str, bytes]) -> list[FileResult]:
    """Standard input, reported as ``--stdin-filename`` (or ``-``), linted as a file is
    (``_lint_own_process``); with ``--force-exclude``, an excluded name is not linted."""
    path = args.stdin_filename or STDIN
    raw = sys.stdin.buffer.read()
    if args.stdin_filename and args.force_exclude and exclusion.excludes_any_part(path):
        if args.fix:
            sys.stdout.buffer.write(raw)
        return []
    with one_file():
        result, text = lint_bytes(raw, path, settings)
    freeze_astroid_bootstrap()
    if text is not None:
        lines.remember(path, text)
        sources[path] = raw
    return [result]


def _report(args: argparse.Namespace, results: list[FileResult], keep, settings: Settings, lines: SourceLines,
            sources: dict[str, bytes]) -> int:
    fixed_count = unwritten_count = 0
    fixable: set[Finding] = set()
    declined: dict[Finding, str] = {}
    stdin_fix = args.fix and any(r.path in sources for r in results)
    if args.fix or args.diff:
        from kvlint.fix.rewrite import FixUnavailable
        from kvlint.frontends.fixing import apply_fixes

        try:
            report = apply_fixes(results, keep, settings, write=args.fix, sources=sources)
        except FixUnavailable as error:
            return _error(str(error))
        results, fixed_count, declined = report.results, report.fixed_count, report.declined
        unwritten_count = report.unwritten_count
        for path, data in report.fixed_sources.items():
            lines.remember(path, decode_source(data, path))
        if stdin_fix:  # the fixed bytes on standard output; the report goes to standard error
            sys.stdout.flush()
            for path, data in sources.items():
                sys.stdout.buffer.write(report.fixed_sources.get(path, data))
            sys.stdout.buffer.flush()
        if args.diff:
            _write("".join(report.diffs), args.output)
            _print_notes(results, {}, lines)
            return 1 if report.diffs else 0
    findings = [f for r in results for f in r.findings if keep(f)]
    if not args.fix:
        fixable = _fixable(findings, results, keep, settings, sources, args.format)
    errors = [r.error for r in results if r.error]
    skipped = [(r.path, r.skipped) for r in results if r.skipped]
    try:
        report_text = render(args.format, findings, errors, lines, fixable, skipped)
        if stdin_fix:
            sys.stderr.write(report_text)
        else:
            _write(report_text, args.output)
    except OSError as error:
        return _error(f"{args.output}: cannot write: {error.strerror or error}")
    if args.statistics:
        to_stdout = args.format == "text" and not args.output and not stdin_fix
        print(statistics(findings), end="", file=sys.stdout if to_stdout else sys.stderr)
    if args.fix:
        unwritten = f"; {unwritten_count} more could not be written (see the errors below)" if unwritten_count else ""
        print(f"kvlint: fixed {fixed_count} finding(s){unwritten}", file=sys.stderr)
    elif fixable and args.format == "text":
        print(f"kvlint: {len(fixable)} finding(s) marked {FIXABLE_MARK} can be fixed with --fix", file=sys.stderr)
    _print_notes(results, {f: why for f, why in declined.items() if f in set(findings)}, lines)
    for error in errors:
        print(f"kvlint: error: {error}", file=sys.stderr)
    if errors:
        return 2
    return 1 if findings and not args.exit_zero else 0


def _fixable(findings: list[Finding], results: list[FileResult], keep, settings: Settings,
             sources: dict[str, bytes], fmt: str) -> set[Finding]:
    """The findings ``--fix`` would fix (a dry run), for the marker of the text and json formats."""
    if fmt not in ("text", "json") or not any(f.code in FIXABLE for f in findings):
        return set()
    from kvlint.fix.rewrite import FixUnavailable
    from kvlint.frontends.fixing import fixable_findings

    try:
        return fixable_findings(results, keep, settings, sources)
    except FixUnavailable:  # no marker; --fix and --diff say what to install, a plain run does not nag
        return set()


def _print_notes(results: list[FileResult], declined: dict[Finding, str], lines: SourceLines) -> None:
    """Warnings of the files (a file read but not analysed first), then, for each finding of a fixable rule
    that ``--fix`` left, why; last, when files were not analysed, that the results are incomplete."""
    for result in results:
        if result.skipped:
            print(f"kvlint: warning: {result.skipped}", file=sys.stderr)
        for warning in result.warnings:
            print(f"kvlint: warning: {warning}", file=sys.stderr)
    for finding, why in sorted(declined.items()):
        shown = in_characters(finding, lines)
        print(f"kvlint: note: {shown.path}:{shown.line}:{shown.column + 1}: {finding.code} was not fixed: {why}",
              file=sys.stderr)
    skipped = sum(1 for result in results if result.skipped)
    if skipped:
        print(f"kvlint: warning: incomplete results: {skipped} of {len(results)} file(s) not analysed (named above)",
              file=sys.stderr)
