"""pylint reporters: ``pylint --load-plugins kvlint --output-format=kvlint.reporters.SarifReporter``.

The SARIF log is built by ``kvlint.frontends.output.SarifLog``, as for ``kvlint --format sarif``, so kvlint's
results are the same from both. pylint's own messages (when they are enabled) become results too, with
rule descriptors built from pylint's message definitions. A module kvlint did not analyse (``W7001
file-not-analysed``) is no result: as in ``kvlint --format sarif``, it is a warning notification on the file, and
the run's invocation is marked unsuccessful. Combine with another format as pylint allows:
``--output-format=text,kvlint.reporters.SarifReporter:kvlint.sarif``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pylint.reporters.base_reporter import BaseReporter

from kvlint.catalogue.rules import RULES, STATIC_RULES
from kvlint.frontends.output import RuleDescriptor, SarifLog

if TYPE_CHECKING:
    from pylint.message import Message
    from pylint.reporters.ureports.nodes import Section

_RULE_BY_MSGID = {rule.pylint_msgid: rule for rule in STATIC_RULES if rule.pylint_msgid}
_NOT_ANALYSED = RULES["KVL001"].pylint_msgid
_PYLINT_LEVEL = {"F": "error", "E": "error", "W": "warning"}


class SarifReporter(BaseReporter):
    """SARIF 2.1.0, written when pylint displays its messages (at the end of the run)."""

    name = "kvlint-sarif"
    extension = "sarif"

    def __init__(self, output=None) -> None:
        super().__init__(output)
        self.log = SarifLog()
        self._pylint_rules: set[str] = set()

    def handle_message(self, msg: Message) -> None:
        path = msg.abspath or msg.path
        end_line = msg.end_line if msg.end_line is not None else msg.line
        end_column = msg.end_column if msg.end_column is not None else msg.column
        if msg.msg_id == _NOT_ANALYSED:
            self.log.skipped.append((path, f"{msg.path}: {msg.msg}"))
            return
        rule = _RULE_BY_MSGID.get(msg.msg_id)
        if rule is not None:
            level = "error" if rule.severity == "error" else "warning"
            self.log.add(path, msg.line, msg.column, end_line, end_column, rule.code,
                         f"{msg.msg} [{rule.symbol}]", level)
            return
        level = _PYLINT_LEVEL.get(msg.msg_id[:1], "note")
        if msg.msg_id not in self._pylint_rules:
            self._pylint_rules.add(msg.msg_id)
            self.log.extra_rules.append(self._descriptor(msg, level))
        self.log.add(path, msg.line, msg.column, end_line, end_column, msg.msg_id,
                     f"{msg.msg} [{msg.symbol}]", level)

    def _descriptor(self, msg: Message, level: str) -> RuleDescriptor:
        description = msg.symbol
        try:
            definitions = self.linter.msgs_store.get_message_definitions(msg.msg_id)
            description = definitions[0].description.strip() or msg.symbol
        except (AttributeError, LookupError, IndexError):  # no linter attached, or an unknown message id
            pass
        return RuleDescriptor(id=msg.msg_id, name=msg.symbol, short=description.partition("\n")[0],
                              full=description, help_text=description, level=level, tags=("pylint",))

    def display_messages(self, layout: Section | None) -> None:
        self.out.write(self.log.render())

    def display_reports(self, layout: Section) -> None:
        """kvlint's SARIF has no pylint reports section."""

    def _display(self, layout: Section) -> None:
        """Nothing: the SARIF log is the whole output."""
