"""The three kvlint checkers. Each reports one family of the rule catalogue from the shared engine.

The engine analyses a module once; the three checkers visit the same module one after the other, so the
findings of the last analysed module are kept and each checker reports its own family from them.

Options (rc file ``[kvlint]`` section, ``[tool.pylint.kvlint]`` in pyproject.toml, or the command line):
``kv-len-names``, ``extra-fa-wrappers`` (``mypkg.ops.fa = npu_fused_infer_attention_score_v2``, several
separated by commas), ``kvlint-select``, ``kvlint-ignore`` and ``kvlint-per-file-ignores`` (pylint's own
``ignore`` option names files, so the selection options carry the prefix; pylint's ``--disable`` works too),
``kvlint-file-time-limit`` and ``kvlint-file-memory-limit`` (defaults ``60 s``, ``1 GiB``; ``0`` or ``none``: no
limit). A module kvlint does not analyse (past a limit, or too deep to walk) gets one ``W7001 file-not-analysed``
at line 1 naming why; the SARIF reporter makes it a notification and marks the run incomplete.
``# kvlint: disable=...`` comments are honoured as in the CLI (a name that is no rule is a warning on standard
error, once per module); ``# pylint: disable=<symbol>`` as usual. Columns are pylint's: the parser's column,
which counts UTF-8 bytes (the kvlint command counts characters).
"""

from __future__ import annotations

import os
import sys

from astroid import nodes
from pylint.checkers import BaseChecker
from pylint.constants import WarningScope

from kvlint.analysis.finding import Finding
from kvlint.analysis.settings import (
    DEFAULT_FILE_MEMORY_LIMIT,
    DEFAULT_FILE_TIME_LIMIT,
    DEFAULT_KV_LEN_NAMES,
    DEFAULT_SETTINGS,
    FileLimits,
    Settings,
    format_seconds,
    format_size,
    may_have_findings,
)
from kvlint.catalogue.rules import STATIC_RULES
from kvlint.checks.engine import Unanalysable, analyze
from kvlint.frontends.config import (
    ConfigError,
    ignored_for,
    parse_codes,
    parse_memory_limit,
    parse_names,
    parse_per_file_ignores,
    parse_time_limit,
    parse_wrappers,
)
from kvlint.frontends.heap import collector_paused
from kvlint.frontends.suppression import read_suppressions, warn_about


def _shown_path(module: nodes.Module) -> str:
    """The module's path as pylint shows it: relative to the current folder when it is inside it."""
    if not module.file:
        return module.name
    relative = os.path.relpath(module.file)
    return module.file if relative.startswith(os.pardir) else relative


_last_analysis: tuple[nodes.Module | None, Settings | None, list[Finding]] = (None, None, [])


def module_findings(module: nodes.Module, settings: Settings = DEFAULT_SETTINGS) -> list[Finding]:
    """The engine's findings for ``module`` after its ``# kvlint:`` comments, computed once per module."""
    global _last_analysis
    if _last_analysis[0] is not module or _last_analysis[1] != settings:
        source = module.stream().read().decode(module.file_encoding or "utf-8", "replace") if module.file else ""
        if module.file and not may_have_findings(source, settings):
            findings: list[Finding] = []
        else:
            try:
                with collector_paused():
                    findings = analyze(module, module.file or module.name, settings)
            except RecursionError:
                findings = [Unanalysable(module.file or module.name).finding()]
            except Unanalysable as skipped:
                findings = [skipped.finding()]
        if source and (findings or "kvlint:" in source.lower()):
            suppressions = read_suppressions(source)
            for warning in warn_about(_shown_path(module), suppressions):
                print(f"kvlint: warning: {warning}", file=sys.stderr)
            findings = suppressions.filter(findings, honour_noqa=False)
        _last_analysis = (module, settings, findings)
    return _last_analysis[2]


OPTIONS = (
    ("kv-len-names", {
        "default": ",".join(DEFAULT_KV_LEN_NAMES), "type": "string", "metavar": "<names>",
        "help": "Names of the runner's KV length variable (KVL305), comma-separated; replaces the defaults.",
    }),
    ("extra-fa-wrappers", {
        "default": "", "type": "string", "metavar": "<wrapper = operator,...>",
        "help": "Your own wrappers to treat as an operator: 'mypkg.ops.fa = npu_fused_infer_attention_score_v2', "
                "several separated by commas.",
    }),
    ("kvlint-select", {
        "default": "", "type": "string", "metavar": "<codes>",
        "help": "Report only these kvlint codes or prefixes (KVL1,KVL201).",
    }),
    ("kvlint-ignore", {
        "default": "", "type": "string", "metavar": "<codes>",
        "help": "Do not report these kvlint codes or prefixes.",
    }),
    ("kvlint-per-file-ignores", {
        "default": "", "type": "string", "metavar": "<glob: codes ...>",
        "help": "kvlint codes to ignore per file, flake8 style: 'tests/*: KVL104,KVL105 legacy.py: KVL1'.",
    }),
    ("kvlint-file-time-limit", {
        "default": format_seconds(DEFAULT_FILE_TIME_LIMIT), "type": "string", "metavar": "<time>",
        "help": "CPU time kvlint's analysis of one module may take before it is skipped with W7001 "
                "(500ms, 2min; 0 or none: no limit).",
    }),
    ("kvlint-file-memory-limit", {
        "default": format_size(DEFAULT_FILE_MEMORY_LIMIT), "type": "string", "metavar": "<size>",
        "help": "Resident memory kvlint's analysis of one module may add before it is skipped with W7001 "
                "(512MiB, 2GB; 0 or none: no limit).",
    }),
)


class _Configured:
    """The options parsed once per run (pylint calls ``open`` on every checker before checking)."""

    def __init__(self, config: object) -> None:
        def get(name: str) -> str:
            return getattr(config, name.replace("-", "_"), "") or ""

        where = "pylint option --{}"
        self.settings = Settings(
            kv_len_names=parse_names(get("kv-len-names"), where.format("kv-len-names")),
            extra_fa_wrappers=parse_wrappers(get("extra-fa-wrappers"), where.format("extra-fa-wrappers")),
            limits=FileLimits(
                seconds=parse_time_limit(get("kvlint-file-time-limit") or format_seconds(DEFAULT_FILE_TIME_LIMIT),
                                         where.format("kvlint-file-time-limit")),
                memory=parse_memory_limit(get("kvlint-file-memory-limit") or format_size(DEFAULT_FILE_MEMORY_LIMIT),
                                          where.format("kvlint-file-memory-limit")),
            ),
        )
        self.select = parse_codes(get("kvlint-select"), where.format("kvlint-select"))
        self.ignore = parse_codes(get("kvlint-ignore"), where.format("kvlint-ignore"))
        self.per_file = parse_per_file_ignores(get("kvlint-per-file-ignores"), where.format("kvlint-per-file-ignores"))

    def reports(self, finding: Finding) -> bool:
        ignored = self.ignore + ignored_for(finding.path, self.per_file, ".")
        return ((not self.select or finding.code.startswith(self.select))
                and not finding.code.startswith(ignored))


class _FamilyChecker(BaseChecker):
    name = "kvlint"
    family: int
    _configured: _Configured | None = None

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        cls.msgs = {
            rule.pylint_msgid: ("%s", rule.symbol, rule.summary, {"scope": WarningScope.LINE})
            for rule in STATIC_RULES
            if rule.family == cls.family and rule.pylint_msgid
        }

    def open(self) -> None:
        try:
            self._configured = _Configured(self.linter.config)
        except ConfigError as error:
            print(f"kvlint: error: {error}", file=sys.stderr)
            sys.exit(32)

    def visit_module(self, node: nodes.Module) -> None:
        if self._configured is None:
            self.open()
        configured = self._configured
        for finding in module_findings(node, configured.settings):
            if finding.rule.family != self.family or not configured.reports(finding):
                continue
            self.add_message(
                finding.symbol,
                line=finding.line,
                col_offset=finding.column,
                end_lineno=finding.end_line,
                end_col_offset=finding.end_column,
                args=(finding.message,),
            )


class FileChecker(_FamilyChecker):
    """KVL0xx: what kvlint could not do with the module (W7001: it did not analyse it)."""

    family = 0


class AttentionCallChecker(_FamilyChecker):
    """KVL1xx: how the fused attention operators are called (keywords, versions, literal arguments)."""

    family = 1
    options = OPTIONS


class MaskChecker(_FamilyChecker):
    """KVL2xx: attention masks and sparse modes."""

    family = 2


class KVCacheChecker(_FamilyChecker):
    """KVL3xx: the paged KV cache and the kv_len lifecycle."""

    family = 3
