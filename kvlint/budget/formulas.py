"""The kvlint-budget formulas: plain functions of a cache geometry or of plain numbers.

KV bytes per token and per sequence, paged blocks and their cost, KV heads per card under tensor
parallelism, the decode-step latency floor, the arithmetic intensity of single-query attention and the
Amdahl bound. They return exact ``int`` or ``Fraction`` values, so the runtime probe can call them on live
shapes. This module never imports torch.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from fractions import Fraction

from kvlint.budget.units import BudgetError

#: Bytes per cache element. fp8 is any 8-bit float format (e4m3/e5m2): the size is what matters here.
DTYPE_BYTES = {"bf16": 2, "fp16": 2, "int8": 1, "fp8": 1}

#: Paged-cache metadata model: one int32 block-table entry per allocated block (vLLM/FIA ``block_table``
#: is int32), charged to the sequence holding the block; one table serves all layers.
BLOCK_TABLE_ENTRY_BYTES = 4


@dataclass(frozen=True)
class CacheGeometry:
    """The per-token shape of a model's KV cache.

    Standard/GQA caches hold a K and a V row of ``head_dim`` per KV head per layer; MLA caches (DeepSeek)
    hold one compressed latent row of ``kv_lora_rank`` plus the decoupled rope key of ``rope_dim`` per
    layer, shared by all heads. ``q_heads`` (query heads) is only needed for arithmetic intensity.
    """

    layers: int
    dtype: str
    kv_heads: int | None = None
    head_dim: int | None = None
    kv_lora_rank: int | None = None
    rope_dim: int | None = None
    q_heads: int | None = None

    @property
    def is_mla(self) -> bool:
        return self.kv_lora_rank is not None

    @property
    def dtype_bytes(self) -> int:
        return DTYPE_BYTES[self.dtype]


def kv_bytes_per_token(geom: CacheGeometry) -> int:
    """KV-cache bytes one token occupies over all layers.

    Standard/GQA: ``layers * 2 * kv_heads * head_dim * dtype_bytes`` (2 = one K row and one V row).
    MLA: ``layers * (kv_lora_rank + rope_dim) * dtype_bytes`` (one latent row, no separate V).
    Quantisation scales are per channel (independent of the token count) and are not included.
    """
    if geom.is_mla:
        return geom.layers * (geom.kv_lora_rank + geom.rope_dim) * geom.dtype_bytes
    return geom.layers * 2 * geom.kv_heads * geom.head_dim * geom.dtype_bytes


def kv_heads_per_card(kv_heads: int, tp: int, replication: int | None = None) -> tuple[int, int]:
    """Return ``(KV heads per card, replication)`` for ``tp`` cards; each KV head is held by R cards.

    Default rule (vLLM's): R = 1 when ``tp`` divides ``kv_heads``; R = tp / kv_heads when ``tp`` is a
    multiple of ``kv_heads`` (each card holds one head, replicated). Any other split is rejected, as vLLM
    does. An explicit R needs ``tp % R == 0`` and ``(kv_heads * R) % tp == 0``; heads per card are
    ``kv_heads * R / tp`` in every case.
    """
    if replication is None:
        if tp <= kv_heads and kv_heads % tp == 0:
            replication = 1
        elif tp > kv_heads and tp % kv_heads == 0:
            replication = tp // kv_heads
        else:
            raise BudgetError(f"--tp {tp} neither divides {kv_heads} KV heads nor is a multiple of them; "
                              "vLLM rejects this split (give --kv-replication R)")
    if tp % replication or (kv_heads * replication) % tp:
        raise BudgetError(f"--kv-replication {replication}: needs tp % R == 0 and (kv_heads * R) % tp == 0 "
                          f"(tp {tp}, {kv_heads} KV heads)")
    return kv_heads * replication // tp, replication


def card_geometry(geom: CacheGeometry, tp: int, replication: int | None = None) -> CacheGeometry:
    """The cache one of ``tp`` cards holds and serves: ``kv_heads_per_card`` KV heads, ``q_heads / tp``
    query heads. The MLA latent has no head axis, so every card holds all of it (as vLLM does).
    """
    if geom.q_heads is not None and geom.q_heads % tp:
        raise BudgetError(f"--tp {tp} does not divide {geom.q_heads} query heads")
    q_heads = None if geom.q_heads is None else geom.q_heads // tp
    if geom.is_mla:
        if replication is not None:
            raise BudgetError("--kv-replication does not apply to an MLA cache: the latent has no heads")
        return replace(geom, q_heads=q_heads)
    heads, _ = kv_heads_per_card(geom.kv_heads, tp, replication)
    return replace(geom, kv_heads=heads, q_heads=q_heads)


def sequence_bytes(bytes_per_token: int, tokens: int) -> int:
    """Exact KV bytes of one sequence (no rounding): ``tokens * bytes_per_token``."""
    return tokens * bytes_per_token


def paged_blocks(tokens: int, block_size: int) -> int:
    """Blocks a paged cache allocates for ``tokens``: the tail block is rounded up, ``ceil(tokens / bs)``."""
    return -(-tokens // block_size)


def paged_block_bytes(bytes_per_token: int, block_size: int) -> int:
    """Bytes one paged block costs: its tokens plus its int32 block-table entry."""
    return block_size * bytes_per_token + BLOCK_TABLE_ENTRY_BYTES


def decode_latency_floor(kv_bytes: int | Fraction, bandwidth: Fraction, weights_bytes: int = 0) -> Fraction:
    """Seconds a decode step cannot beat: it reads every KV byte (and the weights) once from memory."""
    return Fraction(weights_bytes + kv_bytes) / bandwidth


def attention_intensity(geom: CacheGeometry, shared: bool) -> Fraction:
    """FLOP per KV byte of single-query (decode) attention, per token and layer (both cancel).

    FLOPs per query head: ``2*D`` for q.k plus ``2*D`` for p*v (standard), or ``2*(r+rope) + 2*r`` for
    absorbed MLA. Bytes: with GQA sharing each KV row is read once for its whole query-head group;
    without sharing it is re-read for every query head. Q, output and softmax traffic are ignored.
    """
    b = geom.dtype_bytes
    if geom.is_mla:
        flops = geom.q_heads * 2 * (2 * geom.kv_lora_rank + geom.rope_dim)
        row_bytes = (geom.kv_lora_rank + geom.rope_dim) * b
        return Fraction(flops, row_bytes * (1 if shared else geom.q_heads))
    flops = geom.q_heads * 4 * geom.head_dim
    readers = geom.kv_heads if shared else geom.q_heads
    return Fraction(flops, readers * 2 * geom.head_dim * b)


def amdahl_speedup(attention_share: Fraction, attention_speedup: Fraction) -> Fraction:
    """End-to-end speed-up when only the attention share ``p`` of a step gets ``s`` times faster."""
    return 1 / ((1 - attention_share) + attention_share / attention_speedup)


def weighted_mean(values: Sequence[int], weights: Sequence[Fraction]) -> Fraction:
    """Mean of ``values`` under relative ``weights``."""
    return sum((w * v for v, w in zip(values, weights)), Fraction(0)) / sum(weights)
