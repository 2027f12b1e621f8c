"""Tensor layouts and sequence lengths of the fused-attention operators.

Every layout is reduced to views, never copies: a non-varlen tensor becomes a (B, N, S, D) view and a
varlen one (TND/NTD) an (N, T, D) view, from which each batch reads its (N, S_b, D) slice. Output tensors
are allocated in their own layout and written through the same kind of view.
Facts: docs/semantics.md#sem-2, #sem-3 and #sem-4-3; docs/operators/fused_infer_attention.md#fia-c1,
#fia-c41 and #fia-returns.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from kvlint.catalogue.operators import FIA_LAYOUTS

VARLEN_FORMS = frozenset({"TND", "NTD"})


@dataclass(frozen=True)
class Layout:
    """An ``input_layout`` split into the form of query/key/value and the form of the output."""

    inputs: str
    output: str

    @property
    def varlen(self) -> bool:
        """True when the batch is packed into one token axis and lengths are cumulative."""
        return self.inputs in VARLEN_FORMS


def parse_layout(name: str) -> Layout:
    """Split ``"BNSD_BSND"`` into inputs ``BNSD`` and output ``BSND``; a plain name is both."""
    if name not in FIA_LAYOUTS:
        raise ValueError(f"input_layout {name!r} is not one of {sorted(FIA_LAYOUTS)}")
    inputs, _, output = name.partition("_")
    return Layout(inputs, output or inputs)


def split_heads(x: torch.Tensor, form: str, heads: int) -> torch.Tensor:
    """View ``x`` as (B, N, S, D), or as (N, T, D) for the varlen forms. BSH splits H head-major."""
    expected_rank = {"BSH": 3, "NSD": 3, "TND": 3, "NTD": 3, "BSND": 4, "BNSD": 4, "NBSD": 4}[form]
    if x.dim() != expected_rank:
        raise ValueError(f"a {form} tensor must have {expected_rank} dims, got shape {tuple(x.shape)}")
    if form == "BSH":
        if x.shape[-1] % heads:
            raise ValueError(f"H={x.shape[-1]} of a BSH tensor is not divisible by {heads} heads")
        return x.unflatten(-1, (heads, x.shape[-1] // heads)).transpose(1, 2)
    views = {
        "BSND": lambda: x.transpose(1, 2),
        "BNSD": lambda: x,
        "NBSD": lambda: x.transpose(0, 1),
        "NSD": lambda: x.unsqueeze(0),
        "TND": lambda: x.transpose(0, 1),
        "NTD": lambda: x,
    }
    view = views[form]()
    head_axis = 0 if form in VARLEN_FORMS else 1
    if view.shape[head_axis] != heads:
        raise ValueError(f"the {form} tensor has {view.shape[head_axis]} heads, the call says {heads}")
    return view


def output_shape(form: str, batch: int, seq: int, heads: int, dim: int) -> tuple[int, ...]:
    """Shape of an output in ``form``; for the varlen forms ``seq`` is the token count T."""
    return {
        "BSH": (batch, seq, heads * dim),
        "BSND": (batch, seq, heads, dim),
        "BNSD": (batch, heads, seq, dim),
        "NBSD": (heads, batch, seq, dim),
        "NSD": (heads, seq, dim),
        "TND": (seq, heads, dim),
        "NTD": (heads, seq, dim),
    }[form]


def query_extent(query: torch.Tensor, layout: Layout, heads: int) -> tuple[int, int]:
    """(batch, S) of a non-varlen query, or (1, T) of a varlen one (its batch comes from the lengths)."""
    view = split_heads(query, layout.inputs, heads)
    return (1, view.shape[1]) if layout.varlen else (view.shape[0], view.shape[2])


def head_dim(x: torch.Tensor, form: str, kv_heads: int, paged: bool) -> int:
    """Head dim of a key or value tensor. Paged caches are (blocks, bs, N*D) or 4-D with D last."""
    if paged:
        if x.dim() == 3:
            return x.shape[-1] // kv_heads
        if x.dim() == 4:
            return x.shape[-1]
        if x.dim() == 5:  # NZ: (blocks, N, D / c0, block_size, c0)
            return x.shape[2] * x.shape[4]
        raise ValueError(f"a paged cache must be 3-D, 4-D or 5-D (NZ), got {tuple(x.shape)}")
    return split_heads(x, form, kv_heads).shape[-1]


def result_shapes(
    query: torch.Tensor,
    value: torch.Tensor,
    layout: Layout,
    heads: int,
    kv_heads: int,
    paged: bool,
    with_lse: bool,
) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Shapes of (attention_out, softmax_lse); without lse the operator returns an empty [0] tensor."""
    batch, seq = query_extent(query, layout, heads)
    dim = head_dim(value, layout.inputs, kv_heads, paged)
    out = output_shape(layout.output, batch, seq, heads, dim)
    if not with_lse:
        return out, (0,)
    return out, ((seq, heads, 1) if layout.varlen else (batch, heads, seq, 1))


def batch_lengths(lengths: list[int] | None, batch: int, full: int, name: str) -> list[int]:
    """Per-batch valid lengths: None = full, one entry broadcasts, >= batch entries are truncated."""
    if lengths is None:
        return [full] * batch
    if len(lengths) == 1:
        lengths = list(lengths) * batch
    if len(lengths) < batch:
        raise ValueError(f"{name} has {len(lengths)} entries; it needs 1 or at least batch={batch}")
    lengths = [int(n) for n in lengths[:batch]]
    if any(n < 0 or n > full for n in lengths):
        raise ValueError(f"{name}={lengths} must lie within [0, {full}]")
    return lengths


def cumulative_spans(lengths: list[int] | None, total: int, name: str) -> list[tuple[int, int]]:
    """(start, stop) token ranges of each batch from cumulative lengths (varlen layouts)."""
    if lengths is None:
        raise ValueError(f"{name} is required with a TND/NTD layout (cumulative lengths)")
    ends = [int(n) for n in lengths]
    starts = [0, *ends[:-1]]
    if any(stop < start for start, stop in zip(starts, ends)) or (ends and ends[-1] > total):
        raise ValueError(f"{name}={ends} must be non-decreasing cumulative sums no larger than T={total}")
    return list(zip(starts, ends))
