"""Memory-bounded attention of one batch: query blocks x key blocks with an online softmax.

Live memory is one score tile of ``heads x query_block x key_block`` elements plus the accumulators of
one query block, never the [S1, S2] score matrix. GQA shares each key/value block between the query
heads of its group (query head n reads KV head n // (Nq / Nkv)) without repeating K/V.
Fully masked rows give 0 and lse +inf; rows past the query length are left untouched (the caller
zero-fills them). Algorithm: docs/semantics.md#sem-9.

NaN and Inf propagate as softmax propagates them (docs/semantics.md#sem-9-2): a row is NaN when its query,
a key or value it sees, or its ``pse`` at a position it sees is NaN; positions a row does not see (masked,
outside the band, past the KV length) never reach it.

In float32 the tiles go through torch's fused CPU attention kernel, which keeps its own score blocks in
cache and returns each row's log-sum-exp (docs/semantics.md#sem-9-1): per query block and key block,
the band, the user mask and ``pse`` become one additive bias (only where the block is not entirely
allowed), and the blocks are combined through their log-sum-exps. A batch without mask and pse whose band has
no lower edge (a causal prefill, or rows that see every key) and whose K/V are small enough takes one or two
calls over all its rows instead, with the kernel's own causal mask (``_attend_whole``); a decode of many
batches is done at the call level, all batches at once (``batched_decode``). The same formula as the loop below, which
float64 (the precise mode) uses, and any torch without that kernel. That kernel gives a row whose scores are all
NaN 0 (pytorch issue 141128) and lets masked NaN through its additive bias, so a query block whose query or
fused results are not finite is recomputed by the loop.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from kvlint.runtime_probe.reference.masks import Band, tile_allowed

KEY_BLOCK = 1024
TILE_ELEMENTS = 2**22
"""Upper bound on score-tile elements (16 MiB in float32): query block = TILE_ELEMENTS // (Nq * KEY_BLOCK)."""
FUSED = getattr(torch.ops.aten, "_scaled_dot_product_flash_attention_for_cpu", None)
"""torch's fused CPU attention: (output, logsumexp) of q, k, v with an optional additive bias."""
FUSED_QUERY_BLOCK = 128
"""Query rows per fused call: small enough that a causal band skips most of the keys above the diagonal."""
FUSED_KEY_BLOCK = 4096
"""Keys per fused call: what one call converts (to float32) or gathers (from a paged cache)."""
WHOLE_ELEMENTS = 2**22
"""A batch without mask and pse whose band has no lower edge (causal, or every key), and whose value holds at
most this many elements (16 MiB in float32), takes one or two fused calls over all its rows with the kernel's
own causal mask (``_attend_whole``) instead of a call per block of rows: a prefill is one kernel, as SDPA's."""


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
    """Boolean (>= q_len, >= kv_len) or, a mask per head, (heads, >= q_len, >= kv_len); True = masked, or None."""
    pse: torch.Tensor | None
    """Additive (heads, >= q_len, >= kv_len) bias, or None."""
    sink: torch.Tensor | None
    """Per-head logit (heads,) that joins the denominator only, or None."""


def attend(problem: BatchProblem, out: torch.Tensor, lse: torch.Tensor | None, dtype: torch.dtype) -> None:
    """Write rows [0, q_len) of ``out`` (heads, S, Dv) and of ``lse`` (heads, S)."""
    if dtype == torch.float32 and FUSED is not None and out.device.type == "cpu":
        _attend_fused(problem, out, lse)
        return
    key_block = KEY_BLOCK
    query_block = max(1, TILE_ELEMENTS // (problem.heads * key_block))
    for row_start in range(0, problem.q_len, query_block):
        rows = (row_start, min(problem.q_len, row_start + query_block))
        block_out, block_lse = _query_block(problem, rows, key_block, out.shape[-1], dtype)
        out[:, rows[0] : rows[1]] = block_out.to(out.dtype)
        if lse is not None:
            lse[:, rows[0] : rows[1]] = block_lse.to(lse.dtype)


def attend_differentiable(problem: BatchProblem, out: torch.Tensor, dtype: torch.dtype) -> None:
    """Rows [0, q_len) of ``out`` as ``attend`` writes them, in operations autograd differentiates (for a
    backward pass): the batch's (heads, S1, S2) scores at once, out of place; fully masked rows give 0."""
    p = problem
    if p.q_len == 0 or p.kv_len == 0:
        return
    group = p.heads // p.kv_heads
    shape = (p.kv_heads, group, p.q_len, p.kv_len)
    query = p.read_query(0, p.q_len).reshape(p.kv_heads, group * p.q_len, -1)
    scores = (torch.matmul(query, p.read_key(0, p.kv_len).transpose(1, 2)) * p.scale).view(shape)
    if p.pse is not None:
        scores = scores + p.pse[:, : p.q_len, : p.kv_len].to(dtype).view(shape)
    allowed = tile_allowed(p.band, (0, p.q_len), (0, p.kv_len), p.mask, scores.device)
    if allowed is not None:
        if allowed.dim() == 3:  # a mask per head: (heads, S1, S2), heads grouped as the scores
            allowed = allowed.view(shape)
        scores = scores.masked_fill(~allowed, -torch.inf)
    sink = None if p.sink is None else p.sink.to(dtype).view(p.kv_heads, group, 1, 1)
    top = scores.detach().amax(-1, keepdim=True)  # a shift only: the gradient does not depend on it
    if sink is not None:
        top = torch.maximum(top, sink.detach())
    top = torch.where(top == -torch.inf, 0.0, top)
    weights = torch.exp(scores - top)
    denominator = weights.sum(-1, keepdim=True)
    total = denominator if sink is None else denominator + torch.exp(sink - top)
    safe = torch.where(denominator != 0, total, 1.0)
    result = torch.matmul((weights / safe).view(p.kv_heads, group * p.q_len, -1), p.read_value(0, p.kv_len))
    out[:, : p.q_len] = result.view(p.heads, p.q_len, -1).to(out.dtype)


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
            if allowed.dim() == 3:  # a mask per head
                allowed = allowed.view(p.kv_heads, group, count, -1)
            scores.masked_fill_(~allowed, -torch.inf)
        new_max = torch.maximum(running_max, scores.amax(-1))
        shift = torch.where(torch.isinf(new_max), torch.zeros_like(new_max), new_max)
        weights = scores.sub_(shift.unsqueeze(-1)).exp_()
        rescale = torch.exp(running_max - shift)
        denominator = denominator * rescale + weights.sum(-1)
        values = _weighted_values(weights.view(p.kv_heads, group * count, -1), p.read_value(*cols), allowed, group)
        acc = acc * rescale.reshape(p.kv_heads, -1, 1) + values
        running_max = new_max
    return _finish(p, running_max, denominator, acc, count, dtype)


def _weighted_values(weights: torch.Tensor, values: torch.Tensor, allowed: torch.Tensor | None,
                     group: int) -> torch.Tensor:  # fmt: skip
    """``weights @ values`` in which a row reads only the values it sees: a masked weight is 0, and 0 times a
    NaN or Inf value would be NaN. ``weights`` (kv_heads, group * rows, keys), ``allowed`` (rows, keys)."""
    if allowed is None or bool(torch.isfinite(values).all()):
        return torch.matmul(weights, values)
    finite = torch.isfinite(values)
    result = torch.matmul(weights, values.masked_fill(~finite, 0))
    keys = (~finite).any(-1).any(0).nonzero().squeeze(1)  # the few keys holding a non-finite value
    odd = values[:, keys].masked_fill(finite[:, keys], 0)  # (kv_heads, k, Dv): only the non-finite entries
    seen = allowed[:, keys].repeat(group, 1)  # (group * rows, k), rows ordered as in ``weights``
    terms = weights[..., keys].unsqueeze(-1) * odd.unsqueeze(1)  # (kv_heads, group * rows, k, Dv)
    return result + torch.where(seen[None, :, :, None], terms, 0).sum(2)


def _finish(
    p: BatchProblem,
    running_max: torch.Tensor,
    denominator: torch.Tensor,
    acc: torch.Tensor,
    count: int,
    dtype: torch.dtype,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Normalise. A learnable sink adds exp(sink) to the denominator and is included in the lse
    (docs/semantics.md#sem-d5 and #sem-d2); a row without any allowed key stays 0 with lse +inf, a NaN
    denominator stays NaN."""
    seen = denominator != 0
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


def _attend_fused(p: BatchProblem, out: torch.Tensor, lse: torch.Tensor | None) -> None:
    """The float32 path: fused kernel calls per (query block, key block), combined by log-sum-exp. Each KV
    head's query group is folded into its rows (as in the loop path), so every key is read once per KV head."""
    if _attend_whole(p, out, lse):
        return
    group = p.heads // p.kv_heads
    block = min(FUSED_QUERY_BLOCK, max(1, TILE_ELEMENTS // (group * FUSED_KEY_BLOCK)))
    for row_start in range(0, p.q_len, block):
        rows = (row_start, min(p.q_len, row_start + block))
        count = rows[1] - rows[0]
        query = p.read_query(*rows).reshape(p.kv_heads, group * count, -1)
        key_start, key_stop = p.band.key_range(rows[0], rows[1], p.kv_len)
        parts = [_fused_block(p, query, rows, (col, min(key_stop, col + FUSED_KEY_BLOCK)))
                 for col in range(key_start, key_stop, FUSED_KEY_BLOCK)]  # fmt: skip
        if _trusted(query, parts):
            block_out, block_lse = _combine(p, parts, group * count, out.shape[-1], query.device)
        else:  # a non-finite input reached this block: the loop propagates it as softmax does
            block_out, block_lse = _query_block(p, rows, KEY_BLOCK, out.shape[-1], torch.float32)
        out[:, rows[0] : rows[1]] = block_out.reshape(p.heads, count, -1).to(out.dtype)
        if lse is not None:
            lse[:, rows[0] : rows[1]] = block_lse.reshape(p.heads, count).to(lse.dtype)


def _attend_whole(p: BatchProblem, out: torch.Tensor, lse: torch.Tensor | None) -> bool:
    """Row i sees keys j <= i + upper (band.upper): the keys [0, upper) every row sees in one call without mask,
    the others in one call with the kernel's top-left causal mask over rows [-upper, S1) (when upper < 0)
    and keys [upper, S2) (when upper > 0); rows [0, -upper) see nothing. False (nothing written) when the
    batch does not qualify (``WHOLE_ELEMENTS``) or a result is not finite."""
    q_len, kv_len, value_dim = p.q_len, p.kv_len, out.shape[-1]
    if p.mask is not None or p.pse is not None or not q_len or not kv_len or p.band.lower > 1 - q_len:
        return False
    upper = min(p.band.upper, kv_len)
    first_row, first_key = max(0, -upper), max(0, upper)
    if first_row >= q_len or kv_len * p.kv_heads * value_dim > WHOLE_ELEMENTS:
        return False
    group, rows = p.heads // p.kv_heads, q_len - first_row
    query, keys, values = p.read_query(0, q_len), p.read_key(0, kv_len), p.read_value(0, kv_len)
    width = max(query.shape[-1], value_dim)
    query, keys, values = (_pad(t, width) for t in (query, keys, values))  # the kernel needs one head size
    parts = []
    for causal, q, k, v in ((False, query, keys[:, :first_key], values[:, :first_key]),
                            (True, query[:, first_row:], keys[:, first_key:], values[:, first_key:])):  # fmt: skip
        if k.shape[1]:
            if not causal:  # each KV head's query group folded into its rows, as elsewhere
                q = q.reshape(p.kv_heads, 1, group * q_len, -1).transpose(0, 1)
            part_out, part_lse = FUSED(q.unsqueeze(0) if causal else q, k.unsqueeze(0), v.unsqueeze(0), 0.0, causal,
                                       scale=p.scale)  # fmt: skip
            part_out, part_lse = part_out[0, ..., :value_dim], part_lse[0]  # (heads or kv_heads, rows, Dv)
            finite = bool(torch.isfinite(part_out.sum() + part_lse.sum() + part_lse.reciprocal().sum()))
            parts.append((part_out, part_lse, finite))
    if not _trusted(query, parts):
        return False
    if len(parts) == 1 and p.sink is None:  # every row sees a key: the kernel's result as it is
        block_out, block_lse = parts[0][0], parts[0][1]
    else:
        folded = [(o.reshape(p.kv_heads, group * rows, -1), e.reshape(p.kv_heads, -1), f) for o, e, f in parts]
        block_out, block_lse = _combine(p, folded, group * rows, value_dim, query.device)
    out[:, first_row:q_len] = block_out.reshape(p.heads, rows, -1).to(out.dtype)
    out[:, :first_row] = 0
    if lse is not None:
        lse[:, first_row:q_len] = block_lse.reshape(p.heads, rows).to(lse.dtype)
        lse[:, :first_row] = torch.inf
    return True


def _trusted(query: torch.Tensor, parts: list[tuple[torch.Tensor, torch.Tensor, bool]]) -> bool:
    """Whether the fused results of one query block are what softmax gives: its query is finite (one sum: a
    NaN or Inf makes it non-finite, and an overflowing sum of finite values only sends the block to the loop,
    which gives the same numbers) and so is every part (``_fused_block``)."""
    return all(finite for _, _, finite in parts) and bool(torch.isfinite(query.sum()))


def _fused_block(p: BatchProblem, query: torch.Tensor, rows: tuple[int, int],
                 cols: tuple[int, int]) -> tuple[torch.Tensor, torch.Tensor, bool]:  # fmt: skip
    """(out (kv_heads, group * rows, Dv), lse (kv_heads, group * rows), finite): lse is -inf for a row that
    sees no key of the block. ``finite`` says that the output and the kernel's lse are finite and that no row
    that sees a key got the kernel's lse of exactly 0, which is what it gives a row whose scores are all NaN
    (a NaN in every key; a finite lse of exactly 0 is rare and merely sends the block to the loop): one sum
    of each and of the lse's reciprocals. ``query`` is (kv_heads, group * rows, D)."""
    keys, values = p.read_key(*cols), p.read_value(*cols)
    value_dim = values.shape[-1]
    width = max(query.shape[-1], value_dim)
    query, keys, values = (_pad(t, width) for t in (query, keys, values))  # the kernel needs one head size
    group, count = p.heads // p.kv_heads, rows[1] - rows[0]
    allowed = tile_allowed(p.band, rows, cols, p.mask, query.device)
    bias = None
    if allowed is not None:  # (rows, keys), the same for every head of the group, or (heads, rows, keys)
        bias = torch.zeros(allowed.shape, dtype=torch.float32, device=query.device).masked_fill_(~allowed, -torch.inf)
        if allowed.dim() == 3:
            bias = bias.reshape(p.kv_heads, group * count, -1)
        else:
            bias = bias.expand(group, -1, -1).reshape(1, group * count, -1)
    if p.pse is not None:
        pse = p.pse[:, rows[0] : rows[1], cols[0] : cols[1]].to(torch.float32).reshape(p.kv_heads, group * count, -1)
        bias = pse if bias is None else pse + bias
    out, lse = FUSED(query.unsqueeze(0), keys.unsqueeze(0), values.unsqueeze(0), 0.0, False,
                     attn_mask=None if bias is None else bias.unsqueeze(0), scale=p.scale)  # fmt: skip
    out, lse = out[0, ..., :value_dim], lse[0]
    check = out.sum() + lse.sum()
    if bias is None:
        return out, lse, bool(torch.isfinite(check + lse.reciprocal().sum()))
    sees = torch.isfinite(bias).any(-1).expand_as(lse)  # the kernel gives lse 0 for a row that sees nothing
    finite = bool(torch.isfinite(check + lse.masked_fill(~sees, 1).reciprocal().sum()))
    return out, lse.masked_fill(~sees, -torch.inf), finite


def _pad(x: torch.Tensor, width: int) -> torch.Tensor:
    return x if x.shape[-1] == width else torch.nn.functional.pad(x, (0, width - x.shape[-1]))


def _combine(p: BatchProblem, parts: list[tuple[torch.Tensor, torch.Tensor, bool]], rows: int,
             value_dim: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
    """One row block's (out, lse) over (kv_heads, group * rows) from its key blocks' results; a row without any
    key: 0 and +inf."""
    if not parts:
        return (torch.zeros((p.kv_heads, rows, value_dim), device=device),
                torch.full((p.kv_heads, rows), torch.inf, device=device))  # fmt: skip
    if len(parts) == 1:
        out, total, _ = parts[0]
    else:
        lses = torch.stack([lse for _, lse, _ in parts])
        total = torch.logsumexp(lses, dim=0)
        weights = torch.exp(lses - torch.where(torch.isinf(total), 0.0, total)).unsqueeze(-1)
        out = sum(part * weight for (part, _, _), weight in zip(parts, weights))
    seen = torch.isfinite(total)
    if p.sink is not None:  # per query head: (kv_heads, group, 1) over the group's rows
        sink = p.sink.to(torch.float32).view(p.kv_heads, -1, 1)
        with_sink = torch.logaddexp(total.view(p.kv_heads, sink.shape[1], -1), sink).view_as(total)
        out = out * torch.exp(total - with_sink).unsqueeze(-1)
        total = torch.where(seen, with_sink, total)
    out = torch.where(seen.unsqueeze(-1), out, 0.0)
    return out, torch.where(seen, total, torch.inf)
