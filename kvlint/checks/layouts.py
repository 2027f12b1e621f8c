"""The layout an operator call names against the axis order the code proves (KVL114).

Facts: docs/operators/fused_infer_attention.md#fia-c1 (the layouts and the query rank) and the
``kvlint.analysis.axes`` axis orders.
"""

from __future__ import annotations

from collections.abc import Iterator

from kvlint.analysis.axes import split
from kvlint.analysis.callsite import CallSite
from kvlint.analysis.facts import RESHAPED
from kvlint.analysis.finding import Issue
from kvlint.catalogue.operators import FA, INFERENCE_ATTENTION

ROLE_NAMES = {"B": "batch", "S": "sequence", "N": "heads", "D": "head dim"}
NAMED_ORDERS = frozenset({"BSND", "BNSD"})
"""Axis orders that are a layout of their own, proposed as the fix."""


def check_layout_axes(site: CallSite) -> Iterator[Issue]:
    """KVL114: ``input_layout`` says in which order the query's axes come (BSND: batch, sequence, heads, head
    dim). A query the code unpacked or built in another order (``B, N, S, D = q.shape``;
    ``x.view(b, s, n, d).transpose(1, 2)`` is BNSD) is read with heads and sequence swapped: the call raises on
    the head count, or attends along the wrong axis when the two sizes agree. Key and value are judged too,
    except in paged attention (``block_table``), whose cache has a layout of its own."""
    if site.name not in INFERENCE_ATTENTION and site.name != FA:
        return
    tensors = ("query",) if site.argument("block_table") is not None else ("query", "key", "value")
    for layout in site.values("input_layout"):
        text = layout.value.const
        if not isinstance(text, str):
            continue
        letters = text.upper().split("_")[0]
        for name in tensors:
            for alt in site.values(name, layout.path):
                axes = alt.value.axes
                if axes is None or len(axes) != len(letters):
                    continue
                swapped = [i for i, (role, letter) in enumerate(zip(axes, letters))
                           if role in ("S", "N") and letter in ("S", "N") and role != letter]
                if not swapped:
                    continue
                axis = swapped[0]
                order = "".join(role or "?" for role in axes)
                fix = f"pass input_layout='{order}'" if order in NAMED_ORDERS else "transpose it to the layout's order"
                yield Issue("KVL114", site.anchor("input_layout"),
                            f"input_layout '{text}' reads axis {axis} of the {name} as the "
                            f"{ROLE_NAMES[letters[axis]]}, but the code gives the {name} the axis order "
                            f"({', '.join(role or '?' for role in axes)}), axis {axis} the "
                            f"{ROLE_NAMES[axes[axis]]}: heads and sequence are swapped; {fix}")
                return


def check_layout_rank(site: CallSite) -> Iterator[Issue]:
    """KVL114 (rank): each layout names as many query axes as its letters (BNSD and BSND four, BSH, SBH and
    TND three). On a path where the code proves another rank for the query (``q.view(T, N, D)``,
    ``reshape`` with explicit sizes), the call raises (docs/operators/fused_infer_attention.md#fia-c1,
    docs/operators/fusion_attention.md#fa-c1): typically a sibling branch that still passes the old layout
    after another branch packed the tensors. Judged where the call names its layout (a default layout
    proves no intent)."""
    if site.name not in INFERENCE_ATTENTION and site.name != FA or site.argument("input_layout") is None:
        return
    for layout in site.values("input_layout"):
        text = layout.value.const
        if not isinstance(text, str) or not text:
            continue
        letters = text.upper().split("_")[0]
        for alt in site.values("query", layout.path):
            if not (alt.value.tensor and alt.value.has(RESHAPED)):
                continue  # only a view / reshape with explicit sizes states the rank
            known, rank = split(alt.value.shape)
            if rank is None or rank == len(letters):
                continue
            shape = ", ".join("?" if d is None else str(d) for d in known)
            where = f" built at line {alt.value.origin.lineno}" if alt.value.origin is not None and (
                alt.value.origin.lineno not in (None, site.call.lineno)) else ""
            yield Issue("KVL114", site.anchor("input_layout"),
                        f"input_layout '{text}' takes a {len(letters)}-D query, but on this path the query{where} is "
                        f"{rank}-D ({shape}): the call raises; pass the layout of the tensor this path builds "
                        f"(or reshape it back)")
            return
