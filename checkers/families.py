"""The three kvlint checkers. Each reports one family of the rule catalogue from the shared engine.

The engine analyses a module once; the three checkers visit the same module one after the other, so the
findings of the last analysed module are kept and each checker reports its own family from them.
"""

from __future__ import annotations

from astroid import nodes
from pylint.checkers import BaseChecker
from pylint.constants import WarningScope

from kvlint.engine import DEFAULT_SETTINGS, analyze, may_have_findings
from kvlint.finding import Finding
from kvlint.ruleset import STATIC_RULES

_last_analysis: tuple[nodes.Module | None, list[Finding]] = (None, [])


def module_findings(module: nodes.Module) -> list[Finding]:
    """The engine's findings for ``module``, computed once per module."""
    global _last_analysis
    if _last_analysis[0] is not module:
        source = module.stream().read().decode(module.file_encoding or "utf-8", "replace") if module.file else ""
        if module.file and not may_have_findings(source, DEFAULT_SETTINGS):
            findings: list[Finding] = []
        else:
            findings = analyze(module, module.file or module.name, DEFAULT_SETTINGS)
        _last_analysis = (module, findings)
    return _last_analysis[1]


class _FamilyChecker(BaseChecker):
    name = "kvlint"
    family: int

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        cls.msgs = {
            rule.pylint_msgid: ("%s", rule.symbol, rule.summary, {"scope": WarningScope.LINE})
            for rule in STATIC_RULES
            if rule.family == cls.family
        }

    def visit_module(self, node: nodes.Module) -> None:
        for finding in module_findings(node):
            if finding.rule.family != self.family:
                continue
            self.add_message(
                finding.symbol,
                line=finding.line,
                col_offset=finding.column,
                end_lineno=finding.end_line,
                end_col_offset=finding.end_column,
                args=(finding.message,),
            )


class AttentionCallChecker(_FamilyChecker):
    """KVL1xx: how the fused attention operators are called (keywords, versions, literal arguments)."""

    family = 1


class MaskChecker(_FamilyChecker):
    """KVL2xx: attention masks and sparse modes."""

    family = 2


class KVCacheChecker(_FamilyChecker):
    """KVL3xx: the paged KV cache and the kv_len lifecycle."""

    family = 3
