"""Rules on the sequence-length arguments of the attention operators (KVL309).

Facts: docs/operators/fused_infer_attention.md#fia-c13 .. #fia-c18 and
docs/operators/incre_prompt_flash_attention.md#pfa-c8, #pfa-c9: TND layouts take cumulative lengths, the
other layouts one length per batch.
"""

from __future__ import annotations

from collections.abc import Iterator

from astroid import nodes

from kvlint.analysis.callsite import CallSite
from kvlint.analysis.facts import CUMULATIVE, Value
from kvlint.analysis.finding import Issue
from kvlint.analysis.query_length import ONE, query_lengths
from kvlint.catalogue.operators import KV_LENGTHS_PARAM, QUERY_LENGTHS_PARAM

CUMULATIVE_LAYOUTS = frozenset({"TND", "NTD"})
"""Query parts of the layouts whose length arguments are cumulative (TND, TND_NTD, NTD, NTD_TND)."""


def check_cumulative_lengths_non_tnd(site: CallSite) -> Iterator[Issue]:
    """KVL309: TND layouts take cumulative lengths (running totals); every other layout one length per
    batch. Cumulative lengths there (``cu_seqlens``, ``torch.cumsum(...)``) are read as the lengths of each
    batch: every batch after the first attends over the lengths of all the ones before it, past its own
    end (padding or the next sequence), or the call raises. Query lengths for a query of length 1 are
    ignored outside TND (#fia-c18)."""
    query_param = QUERY_LENGTHS_PARAM.get(site.name)
    for param in (query_param, KV_LENGTHS_PARAM.get(site.name)):
        expr = site.argument(param) if param else None
        if expr is None:
            continue
        for alt in site.values(param):
            if not alt.value.has(CUMULATIVE):
                continue
            for layout in site.values("input_layout", alt.path):
                text = layout.value.const
                if not isinstance(text, str) or text.upper().split("_")[0] in CUMULATIVE_LAYOUTS:
                    continue
                if param == query_param and all(length == ONE for length, _ in query_lengths(site, layout.path)):
                    continue
                spelled = expr.as_string()
                spelled = spelled if len(spelled) <= 40 else spelled[:37] + "..."
                built = _line_of(alt.value, expr.lineno, " built at line {}")
                layout_at = _layout_origin(site, text, expr.lineno)
                yield Issue("KVL309", site.anchor(param),
                            f"{param} receives cumulative lengths ({spelled}{built}), but input_layout '{text}'"
                            f"{layout_at} takes one length per batch: later batches would run past their own end; "
                            "pass the per-batch lengths (cu[1:] - cu[:-1]) or use the TND layout")
                return


def _layout_origin(site: CallSite, text: str, call_line: int | None) -> str:
    """Where the layout string the rule judged was set: the operator's default, or the one assignment of that
    string to the name or ``self`` attribute the call passes (in its function, module or class)."""
    argument = site.argument("input_layout")
    if argument is None:
        return " (the operator's default)"
    lines = sorted({line for line in _assignments_of(argument, text) if line != call_line})
    return f" (set at line {lines[0]})" if len(lines) == 1 else ""


def _assignments_of(expr: nodes.NodeNG, text: str) -> Iterator[int]:
    """Lines that assign the string ``text`` to the name or ``self.<attr>`` that ``expr`` reads."""
    if isinstance(expr, nodes.Name):
        scopes, wanted = [expr.frame(), expr.root()], (nodes.AssignName, expr.name)
    elif isinstance(expr, nodes.Attribute) and isinstance(expr.expr, nodes.Name) and expr.expr.name == "self":
        klass = next((s for s in expr.node_ancestors() if isinstance(s, nodes.ClassDef)), None)
        scopes, wanted = ([klass] if klass else []), (nodes.AssignAttr, expr.attrname)
    else:
        return
    kind, name = wanted
    for scope in scopes:
        for assign in scope.nodes_of_class(nodes.Assign):
            if not (isinstance(assign.value, nodes.Const) and assign.value.value == text):
                continue
            for target in assign.targets:
                if isinstance(target, kind) and (target.name if kind is nodes.AssignName else target.attrname) == name:
                    yield assign.lineno


def _line_of(value: Value, call_line: int | None, template: str) -> str:
    """Where the judged value came from (``template`` with its line), when that is not the call's own line."""
    origin = value.origin
    if origin is None or origin.lineno is None or origin.lineno == call_line:
        return ""
    return template.format(origin.lineno)
