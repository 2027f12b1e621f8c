"""Memory-bounded attention of one batch: query blocks x key blocks with an online softmax.

Live memory is one score tile of ``heads x query_block x key_block`` elements plus the accumulators of
one query block, never the [S1, S2] score matrix. GQA shares each key/value block between the query
heads of its group (query head n reads KV head n // (Nq / Nkv)) without repeating K/V.
Fully masked rows give 0 and lse +inf; rows past the query length are left untouched (the caller
zero-fills them). Algorithm: docs/semantics.md#sem-9.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from kvlint.runtime_probe.reference.masks import Band, tile_allowed

KEY_BLOCK = 1024
TILE_ELEMENTS = 2**22
"""Upper bound on score-tile elements (16 MiB in float32): query block = TILE_ELEMENTS // (Nq * KEY_BLOCK)."""


@dataclass(frozen=True)
class BatchProblem:
    """Everything one batch needs. Readers return (N, stop - start, D) blocks in the compute dtype."""

    read_query: Callable[[int, int], torch.Tensor]
    read_key: Callable[[int, int], torch.Tensor]
    read_value: Callable[[int, int], torch.Tensor]
    q_len: int
    kv_len: int
    heads: int
    kv_heads: int
    scale: float
    band: Band
    mask: torch.Tensor | None
    """Boolean (>= q_len, >= kv_len), True = masked, or None."""
    pse: torch.Tensor | None
    """Additive (heads, >= q_len, >= kv_len) bias, or None."""
    sink: torch.Tensor | None
    """Per-head logit (heads,) that joins the denominator only, or None."""


def attend(problem: BatchProblem, out: torch.Tensor, lse: torch.Tensor | None, dtype: torch.dtype) -> None:
    """Write rows [0, q_len) of ``out`` (heads, S, Dv) and of ``lse`` (heads, S)."""
    key_block = KEY_BLOCK
    query_block = max(1, TILE_ELEMENTS // (problem.heads * key_block))
    for row_start in range(0, problem.q_len, query_block):
        rows = (row_start, min(problem.q_len, row_start + query_block))
        block_out, block_lse = _query_block(problem, rows, key_block, out.shape[-1], dtype)
        out[:, rows[0] : rows[1]] = block_out.to(out.dtype)
        if lse is not None:
            lse[:, rows[0] : rows[1]] = block_lse.to(lse.dtype)


def _query_block(
    p: BatchProblem, rows: tuple[int, int], key_block: int, value_dim: int, dtype: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor]:
    group = p.heads // p.kv_heads
    count = rows[1] - rows[0]
    query = p.read_query(*rows) * p.scale  # scaling the query instead of each score tile saves a pass
    device = query.device
    query = query.reshape(p.kv_heads, group * count, -1)
    running_max = torch.full((p.kv_heads, group, count), -torch.inf, dtype=dtype, device=device)
    denominator = torch.zeros((p.kv_heads, group, count), dtype=dtype, device=device)
    acc = torch.zeros((p.kv_heads, group * count, value_dim), dtype=dtype, device=device)
    key_start, key_stop = p.band.key_range(rows[0], rows[1], p.kv_len)
    for col_start in range(key_start, key_stop, key_block):
        cols = (col_start, min(key_stop, col_start + key_block))
        scores = torch.matmul(query, p.read_key(*cols).transpose(1, 2))
        scores = scores.view(p.kv_heads, group, count, cols[1] - cols[0])
        if p.pse is not None:
            bias = p.pse[:, rows[0] : rows[1], cols[0] : cols[1]].to(dtype)
            scores.add_(bias.reshape(p.kv_heads, group, count, -1))
        allowed = tile_allowed(p.band, rows, cols, p.mask, device)
        if allowed is not None:
            scores.masked_fill_(~allowed, -torch.inf)
        new_max = torch.maximum(running_max, scores.amax(-1))
        shift = torch.where(torch.isinf(new_max), torch.zeros_like(new_max), new_max)
        weights = scores.sub_(shift.unsqueeze(-1)).exp_()
        rescale = torch.exp(running_max - shift)
        denominator = denominator * rescale + weights.sum(-1)
        acc = acc * rescale.reshape(p.kv_heads, -1, 1) + torch.matmul(
            weights.view(p.kv_heads, group * count, -1), p.read_value(*cols)
        )
        running_max = new_max
    return _finish(p, running_max, denominator, acc, count, dtype)


def _finish(
    p: BatchProblem,
    running_max: torch.Tensor,
    denominator: torch.Tensor,
    acc: torch.Tensor,
    count: int,
    dtype: torch.dtype,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Normalise. A learnable sink adds exp(sink) to the denominator and is included in the lse
    (docs/semantics.md#sem-d5 and #sem-d2); a row without any allowed key stays 0 with lse +inf."""
    seen = denominator > 0
    safe = torch.where(seen, denominator, torch.ones_like(denominator))
    lse = torch.where(seen, running_max + torch.log(safe), torch.full_like(running_max, torch.inf))
    weight = torch.where(seen, 1 / safe, torch.zeros_like(safe))
    if p.sink is not None:
        sink = p.sink.to(dtype).view(p.kv_heads, -1, 1)
        with_sink = torch.logaddexp(lse, sink)
        weight = weight * torch.where(seen, torch.exp(lse - with_sink), torch.zeros_like(lse))
        lse = torch.where(seen, with_sink, lse)
    out = acc * weight.reshape(p.kv_heads, -1, 1)
    return out.reshape(p.heads, count, -1), lse.reshape(p.heads, count)
