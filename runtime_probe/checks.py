"""Checks of one live call's arguments, one function per rule code; each returns a message or None.

The static rules that apply to live values keep their codes (KVL1xx-3xx); the runtime-only ones are
KVL503-KVL508, the documented operator constraints KVL520-KVL535 (one code per rule of the table in
``kvlint.runtime_probe.reference.constraints``, which the emulator enforces too) and the scalars passed as
tensors KVL536/KVL537. A check that needs a value it cannot read (meta or fake tensors) stays silent.

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
from dataclasses import dataclass

import torch
from kvlint.runtime_probe.compare import EPSILON
from kvlint.runtime_probe.live_call import QUERY_FORMS, Geometry, LiveCall

from kvlint.catalogue.cache_writes import CACHE_WRITES, STARTS, CacheWrite
from kvlint.catalogue.operators import FIA, FIA_V1, FIA_V2, LAYOUTS, MAX_GQA_RATIO, PFA, SPARSE_MODES
from kvlint.catalogue.rules import WARNING

MASK_DTYPES = (torch.bool, torch.int8, torch.uint8)


@dataclass(frozen=True)
class Leveled:
    """A check's finding at a lower level than its rule's: the documentation calls the value out of range,
    but the device is known to ignore or clamp it (the message says so)."""

    message: str
    severity: str


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


def _ignored_query_lengths(call: LiveCall, geo: Geometry, param: str | None, lengths: list[int]) -> str | None:
    """FIA at Q_S = 1 outside TND ignores the query lengths (FIA-C18): None when that does not apply; else
    "harmless" when the output cannot depend on them (the KV lengths are given, or every entry covers the
    key's S), or what the device does instead (the IFA habit: KV lengths passed as the query lengths)."""
    if call.name not in FIA or param != call.query_lengths_param or geo.varlen or geo.q_seq != 1:
        return None
    if call.get(call.kv_lengths_param) is not None or geo.kv_seq is None or min(lengths) >= geo.kv_seq:
        return "harmless"
    return (f"; with no {call.kv_lengths_param} the device ignores these and attends over all {geo.kv_seq} "
            f"keys (FIA-C18): KV lengths go in {call.kv_lengths_param}")


def seq_lengths(call: LiveCall) -> str | Leveled | None:
    """KVL503: lengths must fit the tensors: per batch row one entry (or one for all), each <= S; varlen
    (TND/NTD) cumulative ends, non-decreasing, ending at T, as many for the keys as for the queries. A warning
    where the device ignores the out-of-range lengths, so the output cannot depend on them: FIA's query
    lengths at Q_S = 1 outside TND (FIA-C18; torch_npu's own graph tests pass [100] there). More entries
    than batch rows stay an error: the device reads the first B (FIA-C13), so the output is not what the
    list describes (prompts packed into one row)."""
    geo = call.geometry
    if geo is None:
        return None
    checks = (
        (call.query_lengths_param, geo.q_seq, False),
        (call.kv_lengths_param, None if geo.paged else geo.kv_seq, geo.paged),
    )
    warning: Leveled | None = None
    for param, total, per_batch_paged in checks:
        lengths = call.lengths(param)
        if lengths is None:
            continue
        if geo.varlen and not per_batch_paged:
            problem = _cumulative_problem(lengths, total)
        else:
            problem = _per_batch_problem(lengths, geo.batch, total)
        if not problem:
            continue
        shown = lengths if len(lengths) <= 8 else [*lengths[:8], "..."]
        message = f"{param}={shown} {problem}"
        ignored = _ignored_query_lengths(call, geo, param, lengths)
        if ignored != "harmless":
            return message + (ignored or "")
        warning = Leveled(f"{message}; {call.name} ignores {param} when the query has one token outside TND "
                          "(FIA-C18), so this is a warning", WARNING)
    return warning


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


@dataclass(frozen=True)
class Repeat:
    """A slot that one cache write's tokens write more than once with different rows."""

    message: str
    tokens: torch.Tensor
    """Flattened indices (into the positions argument, one per coordinate row for coordinates) of the
    tokens that write it."""


def repeated_slot(call: LiveCall) -> Repeat | None:
    """KVL508's condition on the call: two writes to one cache slot in one call leave an undefined value on
    the device (KVC-C15, KVC-C24): which of the two lands is not said. Per-row starts (``scatter_update``)
    may repeat: two batch rows at one position are fine. So do writes of the same row, to the output
    comparison's tolerance (``compare.EPSILON``): whichever lands, the cache holds the same numbers. Whether
    the undefined row matters is for the reads to say (``repeats``): the dummy requests of a warm-up, all
    sent to a reserved block that nothing reads, leave it undefined harmlessly."""
    write = CACHE_WRITES.get(call.name)
    if write is None or STARTS in {addressing.kind for addressing in write.layouts.values()}:
        return None
    param = write.positions
    indices = call.get(param)
    if not isinstance(indices, torch.Tensor) or not call.concrete or indices.numel() == 0:
        return None
    if call.name.startswith("npu_scatter_nd_update"):
        coordinates = indices.reshape(-1, indices.shape[-1])
        everyone = torch.ones(len(coordinates), dtype=torch.bool)
        groups = [(0, coordinates, everyone, _token_rows(call, write, indices.shape[:-1]))]
    elif indices.dim() == 2:  # slots per batch row (a 2-D Norm-mode index); negatives are padding
        groups = [(number * indices.shape[1], row, row >= 0, []) for number, row in enumerate(indices)]
    else:
        slots = indices.reshape(-1)
        groups = [(0, slots, slots >= 0, _token_rows(call, write, indices.shape))]
    message, writers = None, []
    for first, slots, kept, rows in groups:
        for slot, times, tokens in _differing_repeats(slots, kept, rows):
            message = message or (f"{param} repeats a slot ({slot} appears {times} times) with different values: "
                                  "the written value is undefined on the device")
            writers.append(tokens + first)
    return None if message is None else Repeat(message, torch.cat(writers))


def duplicate_slots(call: LiveCall) -> str | None:
    """KVL508: a slot written twice with different rows in one call (``repeated_slot``); the probe reports it
    as an error once an attention call reads the slot."""
    repeat = repeated_slot(call)
    return None if repeat is None else repeat.message


def _token_rows(call: LiveCall, write: CacheWrite, leading: torch.Size) -> list[torch.Tensor]:
    """What each token writes, one row per index: the call's tensors that start with the indices' shape
    (the keys, the values, the updates), the written caches and the indices aside; none for a writer that
    computes its rows (``CacheWrite.computed``)."""
    count = leading.numel()
    if write.computed or not count:
        return []
    aside = {param.name for param in call.op.params if param.mutated} | {write.cache, write.positions}
    return [value.reshape(count, -1) for name, value in call.args.items()
            if name not in aside and isinstance(value, torch.Tensor) and value.dim() >= len(leading)
            and value.shape[:len(leading)] == leading]  # fmt: skip


def _same_rows(rows: torch.Tensor) -> bool:
    """Every row equals the first to the comparison tolerance of their dtype (relative, floored at 1)."""
    first, rest = rows[:1].float(), rows[1:].float()
    error = (rest - first).abs().nan_to_num(nan=float("inf"))
    return bool((error <= EPSILON.get(rows.dtype, 0.0) * first.abs().clamp_min(1.0)).all())


def _differing_repeats(slots: torch.Tensor, kept: torch.Tensor,
                       rows: list[torch.Tensor]) -> list[tuple[object, int, torch.Tensor]]:
    """Each slot (or coordinate row) that the ``kept`` tokens write twice with different rows: the slot, how
    many times it is written, and by which tokens; without the rows every repeat counts."""
    positions = kept.nonzero().flatten()
    if positions.numel() == 0:
        return []
    unique, inverse, counts = torch.unique(slots[positions], dim=0, return_inverse=True, return_counts=True)
    found = []
    for group in (counts > 1).nonzero().flatten().tolist():
        writers = positions[inverse == group]
        if rows and all(_same_rows(tensor[writers]) for tensor in rows):
            continue
        found.append((unique[group].tolist(), int(counts[group]), writers))
    return found


# The documented constraints (kvlint.runtime_probe.reference.constraints), one code each. Each reads only
# the call's metadata (dtypes, shapes, keyword set, scalar ints and strings): a pure function of its
# signature, so its result may be cached per signature.


def _constraint(call: LiveCall, code: str) -> str | None:
    violation = call.constraint_violations.get(code)
    return None if violation is None else str(violation)


def layout_query_length(call: LiveCall) -> str | None:
    """KVL520: BNSD_BSND needs Q_S > 1, BNSD_NBSD 1 < Q_S <= 16 (FIA-C2, FIA-C3)."""
    return _constraint(call, "KVL520")


def learnable_sink(call: LiveCall) -> str | None:
    """KVL521: the sink only with TND/NTD_TND, value D <= 128, bf16 (Q_N,), no pse or quantisation (FIA-C70)."""
    return _constraint(call, "KVL521")


def mla_head_dim(call: LiveCall) -> str | None:
    """KVL522: the MLA query head dim is 128 or 512 (FIA-C48)."""
    return _constraint(call, "KVL522")


def antiquant_mode(call: LiveCall) -> str | None:
    """KVL523: equal K/V modes except (0, 1), only 0/1 for Q_S > 1 (FIA-C61); combined mode 0/1 at Q_S = 1,
    a float16 combined scale for Q_S > 1 (FIA-C64)."""
    return _constraint(call, "KVL523")


def antiquant_mode_ignored(call: LiveCall) -> str | None:
    """KVL524 (warning): the combined antiquant_mode has no effect with Q_S > 1 (FIA-C64)."""
    return _constraint(call, "KVL524")


def inner_precise(call: LiveCall) -> str | None:
    """KVL525: inner_precise 0-3, only 0/1 at Q_S = 1 (FIA-C56); IFA 0/1 (IFA-C15)."""
    return _constraint(call, "KVL525")


def mask_shape_undocumented(call: LiveCall) -> str | None:
    """KVL526 (warning): an atten_mask shape FIA does not document for modes 0/1 (FIA-C21)."""
    return _constraint(call, "KVL526")


def paged_cache_layout(call: LiveCall) -> str | None:
    """KVL527: the heads-major cache only with a BNSD/TND query (FIA-C41; IFA-C10: BNSD)."""
    return _constraint(call, "KVL527")


def paged_cache_undocumented(call: LiveCall) -> str | None:
    """KVL528 (warning): a tokens-major 4-D cache, which no FIA/IFA page documents (FIA-C41, IFA-C10)."""
    return _constraint(call, "KVL528")


def block_size(call: LiveCall) -> str | None:
    """KVL529: block_size by query length, layout, MLA and KV dtype (FIA-C36 to FIA-C39, IFA-C12)."""
    return _constraint(call, "KVL529")


def paged_prefill_antiquant(call: LiveCall) -> str | None:
    """KVL530: paged attention with Q_S > 1 takes no int8 cache or antiquant (FIA-C43)."""
    return _constraint(call, "KVL530")


def tnd_head_dims(call: LiveCall) -> str | None:
    """KVL531 (warning): head dims outside the (Q_D, K_D, V_D) combinations the TND layouts document (FIA-C55)."""
    return _constraint(call, "KVL531")


def axis_limit(call: LiveCall) -> str | None:
    """KVL532: batch, head count and head dim limits (FIA-C9, FIA-C15, IFA-C5, PFA-C12)."""
    return _constraint(call, "KVL532")


def kv_rank(call: LiveCall) -> str | None:
    """KVL533: value rank as the eager FIA code checks it (FIA-C8); IFA ranks and K/V shapes (IFA-C4)."""
    return _constraint(call, "KVL533")


def pse_shift(call: LiveCall) -> str | None:
    """KVL534: pse_shift dtype, decode head dim and layouts (FIA-C30 to FIA-C32, IFA-C8, PFA-C11)."""
    return _constraint(call, "KVL534")


def negative_band(call: LiveCall) -> str | None:
    """KVL535: negative pre/next tokens with an int8 output (FIA-C27), npu_fusion_attention's edges (FA-C14)."""
    return _constraint(call, "KVL535")


# Scalars passed as tensors (docs/operators/dispatcher.md#dsp-t3, #dsp-t4).

SCALAR_TYPES = {"int": "int", "SymInt": "int", "float": "float", "bool": "bool"}
"""Schema scalar types (also optional, ``int?``) and the Python type to pass instead."""
_SCALAR_PARAMS: dict[tuple[str, str], dict[str, str]] = {}


def _scalar_params(call: LiveCall) -> dict[str, str]:
    """Parameter name -> Python type of the scalar parameters of the call's overload; built once per overload."""
    key = (call.op.name, call.op.overload)
    if key not in _SCALAR_PARAMS:
        _SCALAR_PARAMS[key] = {p.name: SCALAR_TYPES[p.type.rstrip("?")] for p in call.op.params
                               if p.type.rstrip("?") in SCALAR_TYPES}  # fmt: skip
    return _SCALAR_PARAMS[key]


def _scalar_tensors(call: LiveCall) -> list[tuple[str, str, torch.Tensor]]:
    """(name, Python type, tensor) of every one-element tensor passed for a scalar parameter (the dispatcher
    converts those; a larger tensor raises)."""
    return [(name, kind, value) for name, kind in _scalar_params(call).items()
            if isinstance(value := call.args.get(name), torch.Tensor) and value.numel() == 1]  # fmt: skip


def _truncated(kind: str, tensor: torch.Tensor, concrete: bool) -> float | None:
    """The value of a float tensor passed for an int parameter when truncating it changes it (one host read)."""
    if kind != "int" or not tensor.is_floating_point() or not concrete:
        return None
    value = float(tensor.reshape(()).item())
    return value if value != int(value) else None


def tensor_scalar_argument(call: LiveCall) -> str | None:
    """KVL536 (warning): a tensor for an int/float/bool parameter is converted on the host on every call (a
    device->host synchronisation on the NPU, frozen into a captured graph), a float one truncated for an int.
    Metadata only; the one-element value is read only by KVL537."""
    for name, kind, tensor in _scalar_tensors(call):
        if _truncated(kind, tensor, call.concrete) is None:
            truncates = kind == "int" and tensor.is_floating_point()
            return (f"{name} is {'an' if kind == 'int' else 'a'} {kind} parameter but got a {tensor.dtype} tensor: "
                    f"the dispatcher reads it on the host on every call (a device->host sync on the NPU; a "
                    f"captured NPUGraph keeps the first value){', truncating a float toward zero' if truncates else ''}"
                    f"; pass a Python {kind} (docs/operators/dispatcher.md#dsp-t4)")
    return None


def truncated_int_argument(call: LiveCall) -> str | None:
    """KVL537: a non-integral float tensor for an int parameter runs with the value truncated toward zero
    (``num_heads=torch.tensor(3.9)`` runs with 3 heads). Reads that one value on the host; the parameter and
    tensor checks before it are metadata."""
    for name, kind, tensor in _scalar_tensors(call):
        value = _truncated(kind, tensor, call.concrete)
        if value is not None:
            return (f"{name}={value:g} (a {tensor.dtype} tensor) runs as {name}={int(value)}: the dispatcher "
                    f"truncates a float tensor toward zero for an int parameter; pass a Python int "
                    "(docs/operators/dispatcher.md#dsp-t4)")
    return None


SIGNATURE_CHECKS: dict[str, Callable[[LiveCall], str | None]] = {
    "KVL106": layout,
    "KVL108": rope_pair,
    "KVL109": gqa_heads,
    "KVL201": mask_dtype,
    "KVL203": mask_missing,
    "KVL301": block_table_dtype,
    "KVL506": head_shapes,
    "KVL520": layout_query_length,
    "KVL521": learnable_sink,
    "KVL522": mla_head_dim,
    "KVL523": antiquant_mode,
    "KVL524": antiquant_mode_ignored,
    "KVL525": inner_precise,
    "KVL526": mask_shape_undocumented,
    "KVL527": paged_cache_layout,
    "KVL528": paged_cache_undocumented,
    "KVL529": block_size,
    "KVL530": paged_prefill_antiquant,
    "KVL531": tnd_head_dims,
    "KVL532": axis_limit,
    "KVL533": kv_rank,
    "KVL534": pse_shift,
    "KVL535": negative_band,
    "KVL536": tensor_scalar_argument,
}
"""Checks that read only the call's signature; run once per call site and signature."""
VALUE_CHECKS: dict[str, Callable[[LiveCall], str | Leveled | None]] = {
    "KVL202": mask_shape,
    "KVL503": seq_lengths,
    "KVL504": block_table,
    "KVL508": duplicate_slots,
    "KVL537": truncated_int_argument,
}
"""Checks that read lengths, block ids or slots; run on value-checked calls."""
