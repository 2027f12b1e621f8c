"""One attention call in operator-neutral terms, split into batches and run through the online softmax.

The public functions of ``kvlint.runtime_probe.reference.operators`` translate each operator's arguments into an
``AttentionCall``; ``attention`` resolves layouts, lengths, masks and KV readers per batch and runs
``online_softmax.attend`` on each. Semantics: docs/semantics.md#sem-2 to #sem-6.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import torch
from kvlint.runtime_probe.reference import batched_decode
from kvlint.runtime_probe.reference.batched_decode import ContiguousKV, PagedKV
from kvlint.runtime_probe.reference.layouts import (
    Layout,
    batch_lengths,
    cumulative_spans,
    head_dim,
    parse_layout,
    result_shapes,
    split_heads,
)
from kvlint.runtime_probe.reference.masks import (
    UNBOUNDED,
    band,
    check_sparse_mode,
    check_template,
    user_masks,
)
from kvlint.runtime_probe.reference.online_softmax import BatchProblem, attend, attend_differentiable
from kvlint.runtime_probe.reference.paged import (
    Dequant,
    Reader,
    contiguous_reader,
    dequant,
    heads_major_cache,
    paged_reader,
    with_prefix,
)

from kvlint.catalogue import operators


@dataclass(frozen=True)
class AttentionCall:
    """One attention call in operator-neutral terms (FIA v1 vocabulary)."""

    op: str
    layout: str
    heads: int
    kv_heads: int
    scale: float
    q_lengths: list[int] | None
    kv_lengths: list[int] | None
    mask: torch.Tensor | None
    pse: torch.Tensor | None
    sparse_mode: int
    pre_tokens: int
    next_tokens: int
    block_table: torch.Tensor | None
    block_size: int
    query_rope: torch.Tensor | None
    key_rope: torch.Tensor | None
    key_dequant: tuple[torch.Tensor | None, torch.Tensor | None, bool]
    value_dequant: tuple[torch.Tensor | None, torch.Tensor | None, bool]
    """(scale, offset, per_token) of the int8 antiquant."""
    sink: torch.Tensor | None
    shared_prefix: tuple[torch.Tensor | None, torch.Tensor | None, list[int] | None]
    """FIA v1 (key_shared_prefix, value_shared_prefix, actual_shared_prefix_len)."""
    with_lse: bool
    decode_rules: bool
    """FIA only: with one query token (non-varlen, no rope) sparse_mode and pre/next are ignored."""
    mask_per_head: bool = False
    """npu_fusion_attention only: a (B|1, N, S1, S2) atten_mask masks each head apart (BNSS)."""


def compute_dtype(query_dtype: torch.dtype) -> torch.dtype:
    """float64 when the query is float64 (the precise mode), float32 otherwise."""
    return torch.float64 if query_dtype == torch.float64 else torch.float32


def lse_dtype(query_dtype: torch.dtype, with_lse: bool) -> torch.dtype:
    """softmax_lse is float32 (float64 in the precise mode); the empty not-requested one is float32."""
    return compute_dtype(query_dtype) if with_lse else torch.float32


@dataclass(frozen=True)
class _Batches:
    """Per-batch query/output views, lengths and KV readers of one call."""

    queries: list[torch.Tensor]
    rope_queries: list[torch.Tensor] | None
    outputs: list[torch.Tensor]
    lses: list[torch.Tensor] | None
    q_lens: list[int]
    kv_lens: list[int]
    read_key: Reader
    read_value: Reader
    kv: ContiguousKV | PagedKV | None
    """The plain (float, no rope, prefix or antiquant) keys and values themselves, for ``batched_decode``."""


_differentiable = contextvars.ContextVar("differentiable_attention", default=False)


@contextlib.contextmanager
def differentiable() -> Iterator[None]:
    """Within it, ``attention`` records an autograd graph, with each batch's scores computed at once
    (``online_softmax.attend_differentiable``): the emulator's backward recomputes the forward so."""
    token = _differentiable.set(True)
    try:
        with torch.enable_grad():
            yield
    finally:
        _differentiable.reset(token)


def attention(
    query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, call: AttentionCall
) -> tuple[torch.Tensor, torch.Tensor]:
    """(attention_out, softmax_lse) of the call. No autograd graph (an inference reference must not keep
    every score tile alive for a backward pass), except within ``differentiable()``."""
    with torch.set_grad_enabled(_differentiable.get()):
        return _attention(query, key, value, call)


def _attention(
    query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, call: AttentionCall
) -> tuple[torch.Tensor, torch.Tensor]:
    layout = parse_layout(call.layout)
    if call.layout not in operators.LAYOUTS[call.op]:
        raise ValueError(f"{call.op} does not accept input_layout={call.layout!r}")
    heads, kv_heads = call.heads, call.kv_heads or call.heads
    if heads <= 0 or kv_heads <= 0 or heads % kv_heads:
        raise ValueError(f"num_heads={heads} must be a positive multiple of num_key_value_heads={kv_heads}")
    if query.dtype in (torch.int8, torch.uint8) or key.dtype == torch.int32:
        raise NotImplementedError("query: int8 full quantisation and int4 (int32-packed) KV are not implemented")
    if (call.query_rope is None) != (call.key_rope is None):
        raise ValueError("query_rope and key_rope must be given together")
    check_sparse_mode(call.sparse_mode)
    _check_head_dims(query, key, layout, heads, kv_heads, call)
    dtype = compute_dtype(query.dtype)
    paged = call.block_table is not None
    out_shape, lse_shape = result_shapes(query, value, layout, heads, kv_heads, paged, call.with_lse)
    out = torch.zeros(out_shape, dtype=query.dtype, device=query.device)
    if _differentiable.get():  # the per-batch views are written in place: a base with a history takes that
        out = out.requires_grad_().clone()
    lse = torch.full(lse_shape, torch.inf, dtype=lse_dtype(query.dtype, call.with_lse), device=query.device)
    batches = _batches(query, key, value, out, lse if call.with_lse else None, layout, heads, kv_heads, call, dtype)
    single_token = not layout.varlen and split_heads(query, layout.inputs, heads).shape[2] == 1
    sparse_mode, pre_tokens, next_tokens, mask = _geometry(call, single_token)
    masks = _user_masks(mask, sparse_mode, single_token, len(batches.q_lens), heads if call.mask_per_head else None)
    pses = _pse_shift(call.pse, len(batches.q_lens), heads, layout)
    bands = [band(sparse_mode, pre_tokens, next_tokens, q_len, kv_len, masks is not None)
             for q_len, kv_len in zip(batches.q_lens, batches.kv_lens)]  # fmt: skip
    done = set()
    if masks is None and pses is None and call.sink is None and not _differentiable.get():
        done = _decode_all(batches, bands, heads, kv_heads, float(call.scale), dtype)
    for b, (q_len, kv_len) in enumerate(zip(batches.q_lens, batches.kv_lens)):
        if b in done:
            continue
        batch_mask = None if masks is None else masks[b if masks.shape[0] > 1 else 0]
        batch_pse = None if pses is None else pses[b if pses.shape[0] > 1 else 0]
        for name, extra in (("atten_mask", batch_mask), ("pse_shift", batch_pse)):
            if extra is not None and (extra.shape[-2] < q_len or extra.shape[-1] < kv_len):
                raise ValueError(f"{name} of shape {tuple(extra.shape)} does not cover S1={q_len}, S2={kv_len}")
        problem = BatchProblem(
            read_query=_query_reader(batches, b, dtype),
            read_key=_bind_batch(batches.read_key, b),
            read_value=_bind_batch(batches.read_value, b),
            q_len=q_len,
            kv_len=kv_len,
            heads=heads,
            kv_heads=kv_heads,
            scale=float(call.scale),
            band=bands[b],
            mask=batch_mask,
            pse=batch_pse,
            sink=call.sink,
        )
        if _differentiable.get():  # for a backward pass, which needs the output alone
            attend_differentiable(problem, batches.outputs[b], dtype)
        else:
            attend(problem, batches.outputs[b], None if batches.lses is None else batches.lses[b], dtype)
    return out, lse


def _decode_all(batches: _Batches, bands: list, heads: int, kv_heads: int, scale: float,
                dtype: torch.dtype) -> set[int]:  # fmt: skip
    """The batches whose query rows see every key of the batch, all at once (``batched_decode``, float32): the
    indices of those written. Every batch written has the same query length and some keys; the others (and all
    of them when a result is not finite) are left to the per-batch path."""
    if batches.kv is None or not batched_decode.available(batches.queries[0], dtype):
        return set()
    chosen = [b for b, (q_len, kv_len, geometry) in enumerate(zip(batches.q_lens, batches.kv_lens, bands))
              if q_len and kv_len and geometry.covers((0, q_len), (0, kv_len))]  # fmt: skip
    q_len = batches.q_lens[chosen[0]] if chosen else 0
    if not chosen or any(batches.q_lens[b] != q_len for b in chosen):
        return set()
    kv = batches.kv
    if isinstance(kv, ContiguousKV):
        stacked = kv.stacked if len(chosen) == len(batches.q_lens) else None
        kv = ContiguousKV([kv.keys[b] for b in chosen], [kv.values[b] for b in chosen], stacked)
    else:
        kv = PagedKV(kv.key_cache, kv.value_cache, kv.table[chosen], kv.block_size)
    if kv.keys[0].shape[-1] != kv.values[0].shape[-1] if isinstance(kv, ContiguousKV) else \
            kv.key_cache.shape[-1] != kv.value_cache.shape[-1]:  # fmt: skip
        return set()  # the kernel needs one head size: the per-batch path pads
    query = torch.stack([batches.queries[b][:, :q_len] for b in chosen]).to(dtype)
    query = query.view(len(chosen), kv_heads, (heads // kv_heads) * q_len, -1)
    result = batched_decode.attend(query, kv, [batches.kv_lens[b] for b in chosen], scale)
    if result is None:
        return set()
    out, lse = result
    for i, b in enumerate(chosen):
        batches.outputs[b][:, :q_len] = out[i].reshape(heads, q_len, -1).to(batches.outputs[b].dtype)
        if batches.lses is not None:
            batches.lses[b][:, :q_len] = lse[i].reshape(heads, q_len).to(batches.lses[b].dtype)
    return set(chosen)


def _geometry(call: AttentionCall, single_token: bool) -> tuple[int, int, int, torch.Tensor | None]:
    """(sparse_mode, pre_tokens, next_tokens, atten_mask) in effect. FIA with one query token and no rope
    ignores sparse_mode and pre/next (docs/semantics.md#sem-4-2), so the 2048 template of modes
    2-4 is not applied either: decode attends to every key below the KV length."""
    if call.decode_rules and single_token and call.query_rope is None:
        if call.sparse_mode in (2, 3, 4):
            return 0, UNBOUNDED, UNBOUNDED, None
        return call.sparse_mode, UNBOUNDED, UNBOUNDED, call.mask
    return call.sparse_mode, call.pre_tokens, call.next_tokens, call.mask


def _check_head_dims(
    query: torch.Tensor, key: torch.Tensor, layout: Layout, heads: int, kv_heads: int, call: AttentionCall
) -> None:
    """Query D (+ rope D) must equal key D (+ rope D); value D may differ (it sets the output D)."""
    paged = call.block_table is not None
    q_dim = split_heads(query, layout.inputs, heads).shape[-1]
    k_dim = head_dim(key, layout.inputs, kv_heads, paged)
    if call.query_rope is not None:
        q_dim += split_heads(call.query_rope, layout.inputs, heads).shape[-1]
        k_dim += head_dim(call.key_rope, layout.inputs, kv_heads, paged)
    if q_dim != k_dim:
        raise ValueError(f"query head dim {q_dim} differs from key head dim {k_dim} (rope included)")


def _bind_batch(read: Reader, batch: int) -> Callable[[int, int], torch.Tensor]:
    return lambda start, stop: read(batch, start, stop)


def _query_reader(batches: _Batches, b: int, dtype: torch.dtype) -> Callable[[int, int], torch.Tensor]:
    """Query rows [start, stop) of batch b; with MLA the rope part is concatenated to the nope part."""

    def read(start: int, stop: int) -> torch.Tensor:
        rows = batches.queries[b][:, start:stop].to(dtype)
        if batches.rope_queries is None:
            return rows
        return torch.cat([rows, batches.rope_queries[b][:, start:stop].to(dtype)], dim=-1)

    return read


def _user_masks(mask: torch.Tensor | None, sparse_mode: int, single_token: bool, batch: int,
                heads: int | None) -> torch.Tensor | None:  # fmt: skip
    """The (B|1, S1, S2) user mask of modes 0/1 (with ``heads``, also (B|1, heads, S1, S2)); modes 2-4 only
    check the template."""
    if sparse_mode in (2, 3, 4):
        check_template(mask, sparse_mode)
        return None
    if mask is None:
        if sparse_mode == 1:
            raise ValueError("sparse_mode=1 requires a full atten_mask")
        return None
    masks = user_masks(mask, single_token, heads)
    if masks.shape[0] not in (1, batch):
        raise ValueError(f"atten_mask of shape {tuple(mask.shape)} does not match batch={batch}")
    return masks


def _pse_shift(pse: torch.Tensor | None, batch: int, heads: int, layout: Layout) -> torch.Tensor | None:
    """``pse_shift`` as (B|1, Nq, S1, S2), added to the scaled scores."""
    if pse is None:
        return None
    if layout.varlen:
        raise NotImplementedError("pse_shift with a TND/NTD layout is not implemented")
    if pse.dim() != 4 or pse.shape[0] not in (1, batch) or pse.shape[1] != heads:
        raise ValueError(f"pse_shift must be (B or 1, {heads}, S1, S2), got {tuple(pse.shape)}")
    return pse


def _batches(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    out: torch.Tensor,
    lse: torch.Tensor | None,
    layout: Layout,
    heads: int,
    kv_heads: int,
    call: AttentionCall,
    dtype: torch.dtype,
) -> _Batches:
    """Split the call into batches: query/output views and lengths, then the KV readers and lengths."""
    form = layout.inputs
    q_view = split_heads(query, form, heads)
    rope_view = None if call.query_rope is None else split_heads(call.query_rope, form, heads)
    out_view = split_heads(out, layout.output, heads)
    q_name = operators.QUERY_LENGTHS_PARAM.get(call.op, "actual_seq_lengths")
    if layout.varlen:
        spans = cumulative_spans(call.q_lengths, q_view.shape[1], q_name)
        queries = [q_view[:, start:stop] for start, stop in spans]
        rope_queries = None if rope_view is None else [rope_view[:, start:stop] for start, stop in spans]
        outputs = [out_view[:, start:stop] for start, stop in spans]
        lses = None if lse is None else [lse[start:stop, :, 0].transpose(0, 1) for start, stop in spans]
        q_lens = [stop - start for start, stop in spans]
    else:
        batch, q_seq = q_view.shape[0], q_view.shape[2]
        queries = list(q_view.unbind(0))
        rope_queries = None if rope_view is None else list(rope_view.unbind(0))
        outputs = [out_view[b] for b in range(batch)]  # one view each: written in place, also under autograd
        lses = None if lse is None else list(lse[..., 0].unbind(0))
        single_token_ignores_lengths = call.decode_rules and q_seq == 1
        q_lens = batch_lengths(None if single_token_ignores_lengths else call.q_lengths, batch, q_seq, q_name)
    key_params, value_params = _dequant_params(key, value, call, layout, kv_heads, dtype)
    readers = _paged_readers if call.block_table is not None else _contiguous_readers
    kv_lens, read_key, read_value, kv = readers(
        key, value, call, layout, len(q_lens), kv_heads, dtype, key_params, value_params
    )
    if key_params is not None or value_params is not None or call.key_rope is not None:
        kv = None
    prefix = _shared_prefix(key, call, layout, kv_heads)
    if prefix is not None:
        kv = None  # the batch's KV is concat(prefix, own KV); the geometry uses S2 = P + Skv_b
        key_prefix, value_prefix = prefix
        kv_lens = [key_prefix.shape[1] + n for n in kv_lens]
        read_key = with_prefix(read_key, key_prefix, dtype, key_params)
        read_value = with_prefix(read_value, value_prefix, dtype, value_params)
    return _Batches(queries, rope_queries, outputs, lses, q_lens, kv_lens, read_key, read_value, kv)


def _shared_prefix(
    key: torch.Tensor, call: AttentionCall, layout: Layout, kv_heads: int
) -> tuple[torch.Tensor, torch.Tensor] | None:
    """The (N, P_act, D) key and value prefix shared by every batch (docs/semantics.md#sem-3-6)."""
    key_prefix, value_prefix, lengths = call.shared_prefix
    if key_prefix is None and value_prefix is None:
        return None
    if key_prefix is None or value_prefix is None:
        raise ValueError("key_shared_prefix and value_shared_prefix must be given together")
    if layout.varlen or call.block_table is not None or call.query_rope is not None:
        raise NotImplementedError("key_shared_prefix with a TND/NTD layout, a block_table or MLA is not implemented")
    keys = split_heads(key_prefix, layout.inputs, kv_heads)
    values = split_heads(value_prefix, layout.inputs, kv_heads)
    if keys.shape[0] != 1 or keys.shape[:-1] != values.shape[:-1]:
        raise ValueError(f"shared prefixes {tuple(key_prefix.shape)}, {tuple(value_prefix.shape)} need batch 1")
    if keys.shape[-1] != head_dim(key, layout.inputs, kv_heads, False) or key_prefix.dtype != key.dtype:
        raise ValueError("key_shared_prefix and key differ in head dim or dtype")
    length = batch_lengths(lengths, 1, keys.shape[2], "actual_shared_prefix_len")[0]
    return keys[0, :, :length], values[0, :, :length]


def _dequant_params(
    key: torch.Tensor, value: torch.Tensor, call: AttentionCall, layout: Layout, kv_heads: int, dtype: torch.dtype
) -> tuple[Dequant | None, Dequant | None]:
    """Antiquant parameters of an int8 key and value; they must not come with floating-point KV.
    Per-token scales are (B, S) over the padded KV of a non-varlen, non-paged call."""
    params = []
    paged = call.block_table is not None
    for name, tensor, (scale, offset, per_token) in (
        ("key", key, call.key_dequant),
        ("value", value, call.value_dequant),
    ):
        if tensor.dtype != torch.int8:
            if scale is not None or offset is not None:
                raise ValueError(f"{name} antiquant parameters given, but {name} is {tensor.dtype}, not int8")
            params.append(None)
            continue
        if scale is None:
            raise ValueError(f"an int8 {name} needs its antiquant scale")
        tokens = None
        if per_token:
            if paged or layout.varlen or call.shared_prefix[0] is not None:
                raise NotImplementedError(
                    f"per-token {name} antiquant with a block_table, a TND/NTD layout or a shared prefix"
                )
            view = split_heads(tensor, layout.inputs, kv_heads)
            tokens = (view.shape[0], view.shape[2])
        channels = (kv_heads, head_dim(tensor, layout.inputs, kv_heads, paged))
        params.append(dequant(scale, offset, channels, tokens, f"{name} antiquant", dtype))
    return params[0], params[1]


def _with_rope(read_key: Reader, read_rope: Reader) -> Reader:
    """MLA: the scores use concat(key, key_rope); the value stays the nope/latent part."""
    return lambda batch, start, stop: torch.cat([read_key(batch, start, stop), read_rope(batch, start, stop)], dim=-1)


def _contiguous_readers(
    key: torch.Tensor,
    value: torch.Tensor,
    call: AttentionCall,
    layout: Layout,
    batch: int,
    kv_heads: int,
    dtype: torch.dtype,
    key_params: Dequant | None,
    value_params: Dequant | None,
) -> tuple[list[int], Reader, Reader, ContiguousKV]:
    """KV lengths and readers of ordinary key/value tensors (cumulative lengths for TND/NTD)."""
    form, name = layout.inputs, operators.KV_LENGTHS_PARAM[call.op]
    key_view, value_view = split_heads(key, form, kv_heads), split_heads(value, form, kv_heads)
    if key_view.shape[:-1] != value_view.shape[:-1]:
        raise ValueError(f"key {tuple(key.shape)} and value {tuple(value.shape)} differ in more than D")
    if layout.varlen:
        spans = cumulative_spans(call.kv_lengths, key_view.shape[1], name)
        if len(spans) != batch:
            raise ValueError(f"{name} has {len(spans)} entries, the query lengths {batch}")
        kv_lens = [stop - start for start, stop in spans]

        def per_batch(view: torch.Tensor) -> list[torch.Tensor]:
            return [view[:, start:stop] for start, stop in spans]

    else:
        if key_view.shape[0] != batch:
            raise ValueError(f"key batch {key_view.shape[0]} differs from query batch {batch}")
        kv_lens = batch_lengths(call.kv_lengths, batch, key_view.shape[2], name)

        def per_batch(view: torch.Tensor) -> list[torch.Tensor]:
            return list(view.unbind(0))

    keys, values = per_batch(key_view), per_batch(value_view)
    read_key = contiguous_reader(keys, dtype, key_params)
    if call.key_rope is not None:
        rope = contiguous_reader(per_batch(split_heads(call.key_rope, form, kv_heads)), dtype, None)
        read_key = _with_rope(read_key, rope)
    plain = ContiguousKV(keys, values, None if layout.varlen else (key_view, value_view))
    return kv_lens, read_key, contiguous_reader(values, dtype, value_params), plain


def _paged_readers(
    key: torch.Tensor,
    value: torch.Tensor,
    call: AttentionCall,
    layout: Layout,
    batch: int,
    kv_heads: int,
    dtype: torch.dtype,
    key_params: Dequant | None,
    value_params: Dequant | None,
) -> tuple[list[int], Reader, Reader, PagedKV | None]:
    """KV lengths and readers of paged caches. The KV lengths are per batch, also with TND queries
    (docs/semantics.md#sem-3-3 and #sem-d4: the vllm-ascend convention)."""
    name, table, block_size = operators.KV_LENGTHS_PARAM[call.op], call.block_table, call.block_size
    if block_size <= 0:
        raise ValueError(f"block_size={block_size} must be positive with a block_table")
    if call.kv_lengths is None:
        raise ValueError(f"{name} is required with a block_table (paged attention)")
    if table.dim() != 2 or table.shape[0] < batch:
        raise ValueError(f"block_table must be 2-D [batch, blocks] with batch >= {batch}, got {tuple(table.shape)}")
    kv_lens = batch_lengths(call.kv_lengths, batch, table.shape[1] * block_size, name)
    prefer_heads_major = layout.inputs in ("BNSD", "NSD", "TND", "NTD")

    key_view, value_view = (heads_major_cache(c, block_size, kv_heads, prefer_heads_major) for c in (key, value))
    read_key = paged_reader(key_view, table, block_size, dtype, key_params)
    if call.key_rope is not None:
        rope_view = heads_major_cache(call.key_rope, block_size, kv_heads, prefer_heads_major)
        read_key = _with_rope(read_key, paged_reader(rope_view, table, block_size, dtype, None))
    plain = PagedKV(key_view, value_view, table, block_size) if key_view.dim() == 4 else None  # not NZ
    return kv_lens, read_key, paged_reader(value_view, table, block_size, dtype, value_params), plain
