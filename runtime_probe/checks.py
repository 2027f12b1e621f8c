"""Checks of one live call's arguments, one function per rule code; each returns a message or None.

The static rules that apply to live values keep their codes (KVL1xx-3xx); the runtime-only ones are
KVL503-KVL508. A check that needs a value it cannot read (meta or fake tensors) stays silent.

Two tables, by what a check reads:

- ``SIGNATURE_CHECKS`` read only the call's signature (dtypes, shapes, which optional tensors are given,
  layout, modes, head counts): the probe runs them once per call site and signature and counts their
  findings on every later call with that signature;
- ``VALUE_CHECKS`` read values (lengths, block ids, slots): they run on value-checked calls (the first
  calls of each site, then a sample; ``config.Settings.value_checked``).

A new check is one function and one row. The checks across calls (KVL505, KVL507, KVL509, KVL510) live in
``drift``, ``decoder`` and ``coverage``; ``non_causal_prefill`` is KVL507's condition on the call itself.
Facts: docs/operators/constraints.md (constraints) and docs/operators/kv_cache_writes.md (cache writes).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from kvlint.runtime_probe.live_call import QUERY_FORMS, Geometry, LiveCall

from kvlint.catalogue.cache_writes import CACHE_WRITES, STARTS
from kvlint.catalogue.operators import FIA, FIA_V1, FIA_V2, LAYOUTS, MAX_GQA_RATIO, PFA, SPARSE_MODES

MASK_DTYPES = (torch.bool, torch.int8, torch.uint8)
TEMPLATE_SHAPES = ((2048, 2048), (1, 2048, 2048), (1, 1, 2048, 2048))
TEMPLATE_MODES = frozenset({2, 3, 4})
MLA_ROPE_DIM = 64


def _sparse_mode_applies(call: LiveCall, geo: Geometry) -> bool:
    """sparse_mode is ignored by FIA for a single query token without rope (docs/operators/fused_infer_attention.md#fia-c26)."""
    if call.name not in SPARSE_MODES:
        return False
    single_token = not geo.varlen and geo.q_seq == 1
    return not (call.name in FIA and single_token and call.get("query_rope") is None)


def mask_dtype(call: LiveCall) -> str | None:
    """KVL201: the mask is read as True/1 = masked out; a float (additive) mask is misread."""
    mask = call.get("atten_mask")
    if not call.is_attention or not isinstance(mask, torch.Tensor) or mask.dtype in MASK_DTYPES:
        return None
    return f"atten_mask dtype is {mask.dtype}, must be bool, int8 or uint8 (True/1 = masked out)"


def mask_shape(call: LiveCall) -> str | None:
    """KVL202: modes 2/3/4 take the 2048x2048 template; modes 0/1 a mask covering query x kv."""
    mask, geo = call.get("atten_mask"), call.geometry
    if not isinstance(mask, torch.Tensor) or geo is None or not _sparse_mode_applies(call, geo):
        return None
    mode, shape = call.get("sparse_mode"), tuple(mask.shape)
    if mode in TEMPLATE_MODES:
        if shape in TEMPLATE_SHAPES:
            return None
        return f"sparse_mode={mode} needs the 2048x2048 template mask, got shape {list(shape)}"
    if mode not in (0, 1) or mask.dim() < 2:
        return None
    kv_len = _kv_capacity(call, geo)
    q_len = max(_query_lengths(call, geo) or [geo.q_seq])
    if kv_len is not None and shape[-1] < kv_len:
        return f"atten_mask shape {list(shape)} is narrower than the {kv_len} keys (sparse_mode={mode})"
    if q_len > 1 and shape[-2] < q_len:
        return f"atten_mask shape {list(shape)} has fewer rows than the {q_len} queries (sparse_mode={mode})"
    return None


def mask_missing(call: LiveCall) -> str | None:
    """KVL203: sparse modes 1-4 read atten_mask; without it the device raises or ignores the mode."""
    geo = call.geometry
    if geo is None or call.get("atten_mask") is not None or not _sparse_mode_applies(call, geo):
        return None
    mode = call.get("sparse_mode")
    return f"sparse_mode={mode} with no atten_mask" if mode in (1, 2, 3, 4) else None


def block_table_dtype(call: LiveCall) -> str | None:
    """KVL301: block ids are read as int32."""
    table = call.get("block_table")
    if not isinstance(table, torch.Tensor) or table.dtype == torch.int32:
        return None
    return f"block_table dtype is {table.dtype}, must be int32"


def rope_pair(call: LiveCall) -> str | None:
    """KVL108: MLA needs query_rope and key_rope together."""
    if call.name not in FIA:
        return None
    q_rope, k_rope = call.get("query_rope") is not None, call.get("key_rope") is not None
    if q_rope == k_rope:
        return None
    given, missing = ("query_rope", "key_rope") if q_rope else ("key_rope", "query_rope")
    return f"{given} given without {missing}"


def gqa_heads(call: LiveCall) -> str | None:
    """KVL109: query heads must be a multiple (at most 64x) of the KV heads."""
    if not call.is_attention:
        return None
    heads, kv_heads = call.num_heads, call.num_kv_heads
    if kv_heads <= 0 or heads % kv_heads:
        return f"num_heads={heads} is not divisible by num_key_value_heads={kv_heads}"
    if heads // kv_heads > MAX_GQA_RATIO:
        return f"num_heads / num_key_value_heads = {heads // kv_heads} is above {MAX_GQA_RATIO}"
    return None


def layout(call: LiveCall) -> str | None:
    """KVL106: the layout must be an accepted (case-sensitive) name matching the query's rank."""
    if not call.is_attention:
        return None
    accepted = LAYOUTS[call.name]
    if call.layout not in accepted:
        return f"input_layout {call.layout!r} is not accepted by {call.name} ({', '.join(sorted(accepted))})"
    query = call.get("query")
    rank = QUERY_FORMS[call.layout.partition("_")[0]]
    if isinstance(query, torch.Tensor) and query.dim() != rank:
        return f"input_layout {call.layout!r} needs a {rank}-D query, got shape {list(query.shape)}"
    return None


def _query_lengths(call: LiveCall, geo: Geometry) -> list[int] | None:
    """Per-batch query lengths (differences of the cumulative list for the varlen layouts)."""
    lengths = call.lengths(call.query_lengths_param)
    if lengths is None or not geo.varlen:
        return lengths
    return [b - a for a, b in zip([0, *lengths], lengths)]


def _kv_capacity(call: LiveCall, geo: Geometry) -> int | None:
    """Keys one batch entry can reach: the key S, or blocks per row x block_size when paged."""
    table = call.get("block_table")
    if geo.paged and isinstance(table, torch.Tensor) and table.dim() == 2:
        return table.shape[1] * int(call.get("block_size"))  # type: ignore[call-overload]
    return None if geo.varlen else geo.kv_seq


def _cumulative_problem(lengths: list[int], total: int | None) -> str | None:
    """TND/NTD lengths: the cumulative end of each batch (FIA-C14)."""
    if any(b < a for a, b in zip([0, *lengths], lengths)):
        return "must be cumulative (non-decreasing, no negatives) for a varlen layout"
    if len(lengths) > 1 and lengths[0] == 0:
        return ("starts with 0: varlen lengths are each batch's cumulative end, without the leading 0 of "
                "flash-attn's cu_seqlens")
    if total is not None and lengths and lengths[-1] != total:
        return f"must end at T={total} for a varlen layout, ends at {lengths[-1]}"
    return None


def _per_batch_problem(lengths: list[int], batch: int | None, limit: int | None) -> str | None:
    """One entry per batch row, or one for all (FIA-C13); each at most S."""
    if batch is not None and len(lengths) not in (1, batch):
        packed = (f"; {len(lengths)} lengths for {batch} batch row(s) look like sequences packed into one row, "
                  "which needs the TND layout with cumulative lengths") if len(lengths) > batch else ""
        needs = "1" if batch == 1 else f"1 or {batch}"
        return f"has {len(lengths)} entries for a batch of {batch} (needs {needs}){packed}"
    for index, value in enumerate(lengths):
        if value < 0:
            return f"entry {index} is negative ({value})"
        if limit is not None and value > limit:
            return f"entry {index} is {value}, above S={limit}"
    return None


def seq_lengths(call: LiveCall) -> str | None:
    """KVL503: lengths must fit the tensors: per batch row one entry (or one for all), each <= S; varlen
    (TND/NTD) cumulative ends, non-decreasing, ending at T, as many for the keys as for the queries."""
    geo = call.geometry
    if geo is None:
        return None
    checks = (
        (call.query_lengths_param, geo.q_seq, False),
        (call.kv_lengths_param, None if geo.paged else geo.kv_seq, geo.paged),
    )
    for param, total, per_batch_paged in checks:
        lengths = call.lengths(param)
        if lengths is None:
            continue
        if geo.varlen and not per_batch_paged:
            problem = _cumulative_problem(lengths, total)
        else:
            problem = _per_batch_problem(lengths, geo.batch, total)
        if problem:
            shown = lengths if len(lengths) <= 8 else [*lengths[:8], "..."]
            return f"{param}={shown} {problem}"
    return None


def block_table(call: LiveCall) -> str | None:
    """KVL504: a 2-D table with a row per batch, ids inside the cache, enough blocks for each length."""
    table, geo = call.get("block_table"), call.geometry
    if not isinstance(table, torch.Tensor) or geo is None:
        return None
    if table.dim() != 2:
        return f"block_table has shape {list(table.shape)}, must be 2-D [batch, blocks_per_sequence]"
    if geo.batch is not None and table.shape[0] < geo.batch:
        return f"block_table has {table.shape[0]} rows for a batch of {geo.batch}"
    block_size = int(call.get("block_size"))  # type: ignore[call-overload]
    lengths = call.per_batch_kv_lengths(geo.batch)
    if lengths is None:
        return None
    capacity = table.shape[1] * block_size
    if max(lengths, default=0) > capacity:
        return (f"block_table.shape[1] * block_size = {table.shape[1]} * {block_size} = {capacity} "
                f"< kv length {max(lengths)}")
    if not call.concrete or block_size <= 0:
        return None
    key: torch.Tensor = call.get("key")  # type: ignore[assignment]
    return _block_ids_problem(call.host_block_table, lengths, block_size, num_blocks=key.shape[0])


def _block_ids_problem(host: torch.Tensor, lengths: list[int], block_size: int, num_blocks: int) -> str | None:
    """Only the blocks a sequence uses must be valid ids; the rest of a row is padding (often -1)."""
    needed = torch.tensor([-(-length // block_size) for length in lengths]).unsqueeze(1)
    used = torch.arange(host.shape[1]).unsqueeze(0) < needed
    bad = used & ((host[: len(lengths)] < 0) | (host[: len(lengths)] >= num_blocks))
    if not bool(bad.any()):
        return None
    row, col = (int(i) for i in bad.nonzero()[0])
    return (f"block id {int(host[row, col])} (batch {row}, entry {col}) is outside the cache of "
            f"{num_blocks} blocks")


def head_shapes(call: LiveCall) -> str | None:
    """KVL506: head counts must match the N axes, divide H, and agree on the head dim; MLA rope D=64."""
    geo = call.geometry
    if geo is None:
        return None
    heads, kv_heads = call.num_heads, call.num_kv_heads
    query_hidden = call.get("query").shape[-1]  # type: ignore[union-attr]
    if geo.q_heads_axis is not None and geo.q_heads_axis != heads:
        return f"num_heads={heads} but query ({geo.form}) has {geo.q_heads_axis} heads"
    if geo.form == "BSH" and heads > 0 and query_hidden % heads:
        return f"query H={query_hidden} is not divisible by num_heads={heads}"
    if geo.kv_heads_axis is not None and geo.kv_heads_axis != kv_heads:
        return f"num_key_value_heads={kv_heads} but key has {geo.kv_heads_axis} heads"
    key = call.get("key")
    packed = key.dtype == torch.int32  # type: ignore[union-attr]  # int4 packed 8 per int32
    if geo.kv_hidden is not None and geo.head_dim is not None and not packed:
        if geo.kv_hidden != kv_heads * geo.head_dim:
            return (f"key H={geo.kv_hidden} != num_key_value_heads * head dim = {kv_heads} * "
                    f"{geo.head_dim}")
    if geo.kv_head_dim is not None and geo.head_dim is not None and not packed:
        if geo.kv_head_dim != geo.head_dim:
            return f"query head dim {geo.head_dim} != key head dim {geo.kv_head_dim}"
    for name in ("query_rope", "key_rope"):
        rope = call.get(name)
        if isinstance(rope, torch.Tensor):
            dim = _logical_head_dim(rope, paged=geo.paged and name == "key_rope")
            if dim != MLA_ROPE_DIM:
                shown = f"{dim} (NZ {list(rope.shape)})" if dim != rope.shape[-1] else str(dim)
                return f"{name} head dim is {shown}, must be {MLA_ROPE_DIM} in MLA"
    return None


def _logical_head_dim(tensor: torch.Tensor, paged: bool) -> int:
    """The head dim a tensor stands for: its last dim, or for a paged NZ cache ``[blocks, N, D/16, bs, 16]``
    (int8: ``D/32 ... 32``) the tile count times the tile width (FIA-C41)."""
    if paged and tensor.dim() == 5:
        return tensor.shape[2] * tensor.shape[4]
    return tensor.shape[-1]


def non_causal_prefill(call: LiveCall) -> tuple[int, int] | None:
    """KVL507's condition on the call: several query tokens, sparse_mode 0 and no mask, so every query sees
    every key; (query tokens, keys) when it holds. Whether that is a mistake is the evidence's to say
    (``decoder``): an encoder attends bidirectionally by design."""
    geo = call.geometry
    if geo is None or call.name not in (FIA_V1, FIA_V2, PFA):
        return None
    if call.get("sparse_mode") != 0 or call.get("atten_mask") is not None:
        return None
    q_len = max(_query_lengths(call, geo) or [geo.q_seq]) if geo.varlen else geo.q_seq
    kv_lengths = None if geo.varlen and not geo.paged else call.per_batch_kv_lengths(geo.batch)
    kv_len = max(kv_lengths) if kv_lengths else geo.kv_seq
    if q_len <= 1 or kv_len is None or kv_len < q_len:
        return None
    return q_len, kv_len


def duplicate_slots(call: LiveCall) -> str | None:
    """KVL508: two writes to one cache slot in one call leave an undefined value on the device (KVC-C15,
    KVC-C24). Per-row starts (``scatter_update``) may repeat: two batch rows at one position are fine."""
    write = CACHE_WRITES.get(call.name)
    if write is None or STARTS in {addressing.kind for addressing in write.layouts.values()}:
        return None
    param = write.positions
    indices = call.get(param)
    if not isinstance(indices, torch.Tensor) or not call.concrete or indices.numel() == 0:
        return None
    if call.name.startswith("npu_scatter_nd_update"):
        unique, counts = torch.unique(indices.reshape(-1, indices.shape[-1]), dim=0, return_counts=True)
        groups = [(unique, counts)]
    else:  # slots: per batch row for a 2-D Norm-mode index, else global; negatives are padding
        rows = indices if indices.dim() == 2 else indices.reshape(1, -1)
        groups = [torch.unique(row[row >= 0], return_counts=True) for row in rows]
    for unique, counts in groups:
        if bool((counts > 1).any()):
            repeated = unique[counts > 1][0].tolist()
            return (f"{param} repeats a slot ({repeated} appears {int(counts.max())} times): "
                    "the written value is undefined on the device")
    return None


SIGNATURE_CHECKS: dict[str, Callable[[LiveCall], str | None]] = {
    "KVL106": layout,
    "KVL108": rope_pair,
    "KVL109": gqa_heads,
    "KVL201": mask_dtype,
    "KVL203": mask_missing,
    "KVL301": block_table_dtype,
    "KVL506": head_shapes,
}
"""Checks that read only the call's signature; run once per call site and signature."""
VALUE_CHECKS: dict[str, Callable[[LiveCall], str | None]] = {
    "KVL202": mask_shape,
    "KVL503": seq_lengths,
    "KVL504": block_table,
    "KVL508": duplicate_slots,
}
"""Checks that read lengths, block ids or slots; run on value-checked calls."""
