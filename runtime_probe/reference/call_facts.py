"""What the documented constraints read from one bound attention call: its metadata, never its numbers.

``Facts(op, args)`` takes an operator name and every parameter bound to a value (the schema defaults filled
in), as the emulator's kernels and the probe's ``LiveCall`` have them, and derives the layout form, the query
length, head counts, head dims, dtypes and the form of a paged cache. It reads only which tensors are given,
their shapes and dtypes, the scalar (int / str / bool) arguments and the lengths of list arguments — never a
tensor's values — so everything here is a pure function of the call's signature and can be cached per
signature. What cannot be read (a layout the operator does not accept, a rank that does not fit it, a scalar
passed as a tensor) is None, and the constraints that need it stay silent: the reference's own checks or
another rule report the call.
Layout forms: ``docs/semantics.md`` section 2; paged caches: ``docs/operators/fused_infer_attention.md#fia-c41``.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

from kvlint.catalogue.operators import (
    FIA_V2,
    LAYOUTS,
    NUM_HEADS_PARAM,
    QUERY_LENGTHS_PARAM,
    V1_TO_V2,
)

FORM_AXES = {"BSH": "BSH", "BSND": "BSND", "BNSD": "BNSD", "NSD": "NSD", "TND": "TND", "NTD": "NTD"}
"""The axes of query/key/value for each input form (the part of ``input_layout`` before ``_``)."""
VARLEN_FORMS = frozenset({"TND", "NTD"})
"""Forms that pack the batch into one token axis; their per-batch query length is in the length values."""
BLOCKS_TOKENS_HIDDEN = "(blocks, block_size, H)"
HEADS_MAJOR = "(blocks, KV_N, block_size, D)"
TOKENS_MAJOR = "(blocks, block_size, KV_N, D)"
EITHER_4D = "(blocks, N, block_size, D) with N == block_size"
ONE_HEAD_4D = "(blocks, 1, block_size, D) or (blocks, block_size, 1, D)"
"""One KV head (MLA): both 4-D forms hold the bytes of (blocks, block_size, D)."""
NZ = "NZ (5-D)"


def axes(shape: torch.Size, form: str) -> dict[str, int] | None:
    """``{"B": .., "S": .., "H": ..}`` for a BSH shape, etc.; None when the rank does not fit the form."""
    return dict(zip(form, shape)) if len(shape) == len(form) else None


class Facts:
    """The metadata of one bound call of an attention operator (FIA v1/v2, IFA, PFA; FA by name only).
    Computed once, eagerly: a handful of dict lookups, cheaper than lazy properties for one call's checks."""

    def __init__(self, op: str, args: Mapping[str, object]) -> None:
        self.op = op
        self.args = args
        self.tensors = {name: value for name, value in args.items() if isinstance(value, torch.Tensor)}
        layout = args.get("input_layout")
        self.layout = layout if isinstance(layout, str) and layout in LAYOUTS.get(op, ()) else None
        self.form = None if self.layout is None else self.layout.partition("_")[0]
        """The form of query/key/value: ``BNSD`` for ``BNSD_BSND``."""
        self.varlen = self.form in VARLEN_FORMS
        heads = self.integer(NUM_HEADS_PARAM.get(op, "head_num"))
        self.heads = heads if heads is not None and heads > 0 else None
        kv_heads = self.integer("num_key_value_heads")
        self.kv_heads = None if kv_heads is None or kv_heads < 0 else kv_heads or self.heads
        self.paged = "block_table" in self.tensors
        self.rope = "query_rope" in self.tensors
        self.block_size = self.integer("block_size")
        query = self.tensors.get("query")
        self.query = None if query is None or self.form is None else axes(query.shape, FORM_AXES[self.form])
        """The query's axes in its form."""
        self.q_seq = None if self.query is None or self.varlen else self.query["S"]
        """The query length Q_S of a non-varlen call (None for TND/NTD, whose lengths are values)."""
        self.batch = self._batch()
        self.q_heads = None if self.query is None else self.query.get("N", self.heads)
        self.q_dim = None
        """The query's head dim D (the nope part with MLA)."""
        if self.query is not None:
            self.q_dim = self.query["D"] if "D" in self.query else _split(self.query["H"], self.heads)

    def _batch(self) -> int | None:
        """B: the query's batch axis, or the element count of the query lengths of a varlen call."""
        if self.query is None:
            return None
        if not self.varlen:
            return self.query.get("B", 1)
        return _length_count(self.args.get(QUERY_LENGTHS_PARAM.get(self.op, "")))

    def name(self, v1_name: str) -> str:
        """The operator's own spelling of a FIA v1 parameter (``num_heads`` -> ``num_query_heads`` on v2)."""
        return V1_TO_V2.get(v1_name, v1_name) if self.op == FIA_V2 else v1_name

    def tensor(self, name: str) -> torch.Tensor | None:
        return self.tensors.get(name)

    def given(self, *names: str) -> list[str]:
        """Those of ``names`` that the call passes a tensor for."""
        return [name for name in names if name in self.tensors]

    def integer(self, name: str) -> int | None:
        """An int argument (a bool counts, as the dispatcher takes it); None when it is anything else."""
        value = self.args.get(name)
        return int(value) if isinstance(value, int) else None

    def dtype(self, name: str) -> torch.dtype | None:
        tensor = self.tensors.get(name)
        return None if tensor is None else tensor.dtype

    def cache_form(self, name: str) -> str | None:
        """Which paged-cache form the ``key`` / ``value`` tensor has (None when it is not paged or unreadable)."""
        cache = self.tensors.get(name)
        if cache is None or not self.paged:
            return None
        if cache.dim() == 3:
            return BLOCKS_TOKENS_HIDDEN
        if cache.dim() == 5:
            return NZ
        if cache.dim() != 4 or self.kv_heads is None:
            return None
        middle, pair = tuple(cache.shape[1:3]), (self.kv_heads, self.block_size)
        if self.kv_heads == 1 and self.block_size in middle:
            return ONE_HEAD_4D
        if middle == pair and pair[0] == pair[1]:
            return EITHER_4D
        if middle == pair:
            return HEADS_MAJOR
        if middle == pair[::-1]:
            return TOKENS_MAJOR
        return None

    def head_dim(self, name: str) -> int | None:
        """D of ``key`` or ``value``: from its form, or from the paged cache's last axes."""
        tensor = self.tensors.get(name)
        if tensor is None:
            return None
        if self.paged:
            form = self.cache_form(name)
            if form == BLOCKS_TOKENS_HIDDEN:
                return _split(tensor.shape[2], self.kv_heads)
            if form == NZ:
                return tensor.shape[2] * tensor.shape[4]
            return tensor.shape[3] if form is not None else None
        if self.form is None:
            return None
        found = axes(tensor.shape, FORM_AXES[self.form])
        if found is None:
            return None
        return found["D"] if "D" in found else _split(found["H"], self.kv_heads)


def _split(hidden: int, heads: int | None) -> int | None:
    """H / N, when N divides H."""
    if heads is None or hidden % heads:
        return None
    return hidden // heads


def _length_count(lengths: object) -> int | None:
    """How many entries a length argument has (a list, or a 1-D tensor by its shape)."""
    if isinstance(lengths, torch.Tensor):
        return lengths.numel()
    if isinstance(lengths, (list, tuple)):
        return len(lengths)
    return None
