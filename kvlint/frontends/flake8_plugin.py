"""The flake8 plugin (entry point ``KVL`` in the ``flake8.extension`` group).

flake8 hands over the file's lines; the engine parses them with astroid. flake8 itself reports files that
do not parse (E999, and then runs no plugin) and handles ``# noqa``, ``--select``, ``--extend-ignore`` and
``--per-file-ignores``; the plugin's KVL000 reports the files ``ast.parse`` accepts and CPython's compiler
refuses (a call repeating a keyword, ``return`` outside a function).
The plugin adds four options (command line or ``[flake8]`` in setup.cfg / tox.ini / .flake8):
``--kv-len-names``, ``--extra-fa-wrappers`` (``mypkg.ops.fa = npu_fused_infer_attention_score_v2``,
several separated by commas or newlines), and the per-file limits ``--kvlint-file-time-limit`` (default
``60 s``) and ``--kvlint-file-memory-limit`` (``1 GiB``; ``0`` or ``none``: no limit). A file kvlint does not
analyse (past a limit, or nested deeper than its parser can follow) gets one ``KVL001`` at 1:1 naming why, and
flake8 goes on with the next file. ``# kvlint: disable=...`` comments are honoured as in the CLI, and
so is ``# noqa: kvl102`` in lower case (flake8 itself compares codes case-sensitively), unless flake8 runs
with ``--disable-noqa``. A ``# kvlint:`` comment naming no rule is a warning on standard error.

Columns are flake8's: plugins report the parser's column, which counts UTF-8 bytes (the kvlint command
counts characters).

flake8 runs every installed plugin on every file, whatever the selection, and only then drops the messages the
user did not select. When flake8's selection (``select``, ``extend-select``, ``ignore``, ``extend-ignore``,
``enable-extensions``, from the command line or the configuration) reports no KVL code, as in
``flake8 --select E9``, the plugin analyses nothing, and does not even import the engine (astroid).
"""

from __future__ import annotations

import argparse
import ast
import sys
from collections.abc import Callable, Iterator, Sequence

from kvlint import __version__
from kvlint.analysis.settings import (
    DEFAULT_FILE_MEMORY_LIMIT,
    DEFAULT_FILE_TIME_LIMIT,
    DEFAULT_KV_LEN_NAMES,
    DEFAULT_SETTINGS,
    FileLimits,
    Settings,
    format_seconds,
    format_size,
)
from kvlint.catalogue.rules import STATIC_RULES
from kvlint.frontends.config import ConfigError, parse_memory_limit, parse_names, parse_time_limit, parse_wrappers


def _checked(parse: Callable[[str, str], object], option: str) -> Callable[[str], object]:
    """An argparse type: flake8 passes config-file values through it too, so bad values end in a clean
    ``flake8: error: argument --option: ...`` instead of a traceback."""

    def convert(value: str) -> object:
        try:
            return parse(value, f"flake8 option {option}")
        except ConfigError as error:
            raise argparse.ArgumentTypeError(str(error)) from None

    convert.__name__ = option.lstrip("-")
    return convert


def reports_any_kvlint_code(options: argparse.Namespace) -> bool:
    """Whether flake8, with these options, would report any code the plugin gives, as flake8's own
    ``DecisionEngine`` decides (its rules changed between flake8 3 and 6; the engine has the same interface in
    every version kvlint supports). Per-file-ignores can only take codes away, so a file they cover may still
    be analysed for nothing; no KVL finding is ever lost."""
    from flake8.style_guide import Decision, DecisionEngine

    decide = DecisionEngine(options).decision_for
    return any(decide(rule.code) is Decision.Selected for rule in STATIC_RULES)


class Plugin:
    name = "kvlint"
    version = __version__
    settings: Settings = DEFAULT_SETTINGS
    honour_noqa = True
    analyses = True
    """False when flake8's selection reports no KVL code: ``run`` then does nothing."""

    def __init__(self, tree: ast.AST, lines: Sequence[str], filename: str) -> None:
        self.tree = tree if isinstance(tree, ast.Module) else None
        self.lines = lines
        self.filename = filename

    @classmethod
    def add_options(cls, parser) -> None:
        parser.add_option(
            "--kv-len-names", parse_from_config=True, type=_checked(parse_names, "--kv-len-names"),
            default=",".join(DEFAULT_KV_LEN_NAMES), metavar="NAMES",
            help="names of the runner's KV length variable (KVL305), comma-separated; replaces the defaults",
        )
        parser.add_option(
            "--extra-fa-wrappers", parse_from_config=True, type=_checked(parse_wrappers, "--extra-fa-wrappers"),
            default="", metavar="WRAPPERS",
            help="your own wrappers to treat as an operator: 'mypkg.ops.fa = npu_fused_infer_attention_score_v2'",
        )
        parser.add_option(
            "--kvlint-file-time-limit", parse_from_config=True,
            type=_checked(parse_time_limit, "--kvlint-file-time-limit"),
            default=format_seconds(DEFAULT_FILE_TIME_LIMIT), metavar="TIME",
            help="CPU time kvlint's analysis of one file may take before the file is skipped with a warning "
                 "(500ms, 2min; 0 or none: no limit)",
        )
        parser.add_option(
            "--kvlint-file-memory-limit", parse_from_config=True,
            type=_checked(parse_memory_limit, "--kvlint-file-memory-limit"),
            default=format_size(DEFAULT_FILE_MEMORY_LIMIT), metavar="SIZE",
            help="resident memory kvlint's analysis of one file may add before the file is skipped with a "
                 "warning (512MiB, 2GB; 0 or none: no limit)",
        )

    @classmethod
    def parse_options(cls, options: argparse.Namespace) -> None:
        names = options.kv_len_names
        wrappers = options.extra_fa_wrappers
        seconds = options.kvlint_file_time_limit
        memory = options.kvlint_file_memory_limit
        cls.settings = Settings(
            kv_len_names=tuple(names) if not isinstance(names, str) else parse_names(names, "--kv-len-names"),
            extra_fa_wrappers=dict(wrappers) if not isinstance(wrappers, str) else parse_wrappers(wrappers, ""),
            limits=FileLimits(
                seconds=parse_time_limit(seconds, "--kvlint-file-time-limit") if isinstance(seconds, str) else seconds,
                memory=parse_memory_limit(memory, "--kvlint-file-memory-limit") if isinstance(memory, str) else memory,
            ),
        )
        cls.honour_noqa = not getattr(options, "disable_noqa", False)
        cls.analyses = reports_any_kvlint_code(options)
        if cls.analyses:  # before flake8 starts its workers, so that they share the engine and astroid's bootstrap
            from kvlint.checks.building import build_tree
            from kvlint.frontends.heap import freeze_astroid_bootstrap, one_file

            with one_file():
                build_tree("", "bootstrap.py")
            freeze_astroid_bootstrap()

    def run(self) -> Iterator[tuple[int, int, str, type]]:
        if not self.analyses:
            return
        from kvlint.checks.engine import Unanalysable, lint_source
        from kvlint.frontends.heap import freeze_astroid_bootstrap, one_file
        from kvlint.frontends.suppression import read_suppressions, warn_about

        source = "".join(self.lines)
        try:
            with one_file():
                findings = lint_source(source, self.filename, self.settings, self.tree)
        except Unanalysable as skipped:
            finding = skipped.finding()
            yield finding.line, finding.column, f"{finding.code} {finding.message}", type(self)
            return
        freeze_astroid_bootstrap()
        if findings or "kvlint:" in source.lower():
            suppressions = read_suppressions(source)
            for warning in warn_about(self.filename, suppressions):
                print(f"kvlint: warning: {warning}", file=sys.stderr)
            findings = suppressions.filter(findings, honour_noqa=self.honour_noqa)
        for finding in findings:  # flake8 reports E999 and runs no plugin where ast.parse fails: a KVL000
            yield finding.line, finding.column, f"{finding.code} {finding.message}", type(self)  # is the compiler's
