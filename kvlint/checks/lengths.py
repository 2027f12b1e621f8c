"""Rules on the sequence-length arguments of the attention operators (KVL309).

Facts: docs/operators/fused_infer_attention.md#fia-c13 .. #fia-c18 and
docs/operators/incre_prompt_flash_attention.md#pfa-c8, #pfa-c9: TND layouts take cumulative lengths, the
other layouts one length per batch.
"""

from __future__ import annotations

from collections.abc import Iterator

from kvlint.analysis.callsite import CallSite
from kvlint.analysis.facts import CUMULATIVE
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
                yield Issue("KVL309", site.anchor(param),
                            f"{param} receives cumulative lengths ({spelled}), but input_layout '{text}' takes one "
                            "length per batch: later batches would run past their own end; pass the per-batch "
                            "lengths (cu[1:] - cu[:-1]) or use the TND layout")
                return
