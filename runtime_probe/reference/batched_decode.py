"""Every batch at once when each query row sees all the keys of its batch (decode): a few fused kernel calls.

``online_softmax.attend`` runs one batch at a time: at a decode step a kernel call per batch, and with a paged
cache a gather of the batch's blocks per batch. Each of those kernels pays OpenMP's fork and barrier, which on
a loaded machine costs more than the attention. Here the keys of all batches are split into pieces, each one
call of torch's fused CPU kernel over many batches, and the pieces' results combine per batch by log-sum-exp
(the formula of docs/semantics.md#sem-9-1):

- contiguous K/V: batches of one KV length in one call (a view of the K/V tensors), otherwise a call per batch;
- a paged cache: each run of at least ``MIN_RUN`` consecutive block ids that hold full blocks is a view of
  the cache, its blocks the kernel's batch and each block's query its owner's, so that nothing is gathered;
  the other full blocks are gathered at once; the partly filled last blocks are gathered with the positions
  past the length zeroed and masked, so that what lies there (an uninitialised cache may hold NaN) never
  reaches a row.

float32 compute only; KV head n's query heads are folded into its rows, as in ``online_softmax``, so every
key is read once per KV head. Non-float32 K/V are converted in pieces of at most ``READ_ELEMENTS`` elements.
The kernel does not propagate NaN as softmax does (pytorch issue 141128): a query or a result that is not
finite gives None, and the caller runs the per-batch path, which does.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from kvlint.runtime_probe.reference.online_softmax import FUSED

READ_ELEMENTS = 2**22
"""Upper bound on the elements of one converted or gathered key (or value) piece: 16 MiB in float32."""
MIN_RUN = 4
"""A run of fewer consecutive full blocks is gathered with the other scattered blocks instead of getting a
kernel call of its own."""


@dataclass(frozen=True)
class ContiguousKV:
    """Per-batch (N, S_b, D) keys and values, and the (B, N, S, D) tensors they are the batches of (None for a
    TND/NTD layout, whose batches are spans of one sequence axis)."""

    keys: list[torch.Tensor]
    values: list[torch.Tensor]
    stacked: tuple[torch.Tensor, torch.Tensor] | None


@dataclass(frozen=True)
class PagedKV:
    """(blocks, N, block_size, D) views of the caches; batch b's position s lives in block
    ``table[b, s // block_size]``."""

    key_cache: torch.Tensor
    value_cache: torch.Tensor
    table: torch.Tensor
    block_size: int


@dataclass(frozen=True)
class _Piece:
    """One kernel call's results: (n, N, R, Dv) outputs and (n, N, R) log-sum-exps of the keys it covered,
    kernel batch i belonging to batch ``owners[i]``."""

    owners: torch.Tensor
    out: torch.Tensor
    lse: torch.Tensor


def available(query: torch.Tensor, dtype: torch.dtype) -> bool:
    return dtype == torch.float32 and FUSED is not None and query.device.type == "cpu"


def attend(query: torch.Tensor, kv: ContiguousKV | PagedKV, kv_lens: list[int],
           scale: float) -> tuple[torch.Tensor, torch.Tensor] | None:  # fmt: skip
    """(out (B, N, R, Dv), lse (B, N, R)) of the float32 ``query`` (B, N, R, D), whose R rows per KV head all see
    the batch's ``kv_lens[b]`` (> 0) keys; None when the query or a result is not finite, or a block id is out
    of the cache."""
    if isinstance(kv, ContiguousKV):
        pieces = _contiguous_pieces(query, kv, kv_lens, scale)
    else:
        pieces = _paged_pieces(query, kv, kv_lens, scale)
        if pieces is None:
            return None
    # A row whose scores are all NaN gets the kernel's lse 0 and output 0: the reciprocals catch that.
    checks = [query.sum()] + [piece.lse.sum() + piece.lse.reciprocal().sum() for piece in pieces]
    out, lse = _combine(pieces, query.shape[0])
    if not bool(torch.isfinite(sum(checks) + out.sum())):
        return None
    return out, lse


def _call(query: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, scale: float,
          bias: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
    out, lse = FUSED(query, keys.float(), values.float(), 0.0, False, attn_mask=bias, scale=scale)
    return out, lse


def _per_call(per_item: int, dtype: torch.dtype, copies: bool) -> int:
    """Items (batches, keys or blocks) of ``per_item`` elements one call may convert or gather."""
    if dtype == torch.float32 and not copies:
        return 2**62  # a view: nothing is copied
    return max(1, READ_ELEMENTS // max(per_item, 1))


def _contiguous_pieces(query: torch.Tensor, kv: ContiguousKV, kv_lens: list[int], scale: float) -> list[_Piece]:
    """Batches of one length at once (a view of the K/V tensors), otherwise one call per batch: each row then
    gets the numbers the per-batch path gives it."""
    heads, dim = kv.keys[0].shape[0], kv.keys[0].shape[-1]
    dtype = kv.keys[0].dtype
    pieces = []
    if kv.stacked is not None and len(set(kv_lens)) == 1:
        keys, values = (t[:, :, : kv_lens[0]] for t in kv.stacked)
        step = _per_call(heads * kv_lens[0] * dim, dtype, False)
        for first in range(0, len(kv_lens), step):
            rows = slice(first, first + step)
            out, lse = _call(query[rows], keys[rows], values[rows], scale)
            pieces.append(_Piece(torch.arange(first, first + out.shape[0]), out, lse))
        return pieces
    for b, length in enumerate(kv_lens):
        step = _per_call(heads * dim, dtype, False)
        for start in range(0, length, step):
            stop = min(length, start + step)
            keys, values = kv.keys[b][None, :, start:stop], kv.values[b][None, :, start:stop]
            out, lse = _call(query[b : b + 1], keys, values, scale)
            pieces.append(_Piece(torch.tensor([b]), out, lse))
    return pieces


def _paged_pieces(query: torch.Tensor, kv: PagedKV, kv_lens: list[int], scale: float) -> list[_Piece] | None:
    size, blocks = kv.block_size, kv.key_cache.shape[0]
    table = kv.table[: len(kv_lens)].tolist()
    full: list[tuple[int, int]] = []  # (block id, owner)
    tails: list[tuple[int, int, int]] = []  # (block id, owner, positions used)
    for b, length in enumerate(kv_lens):
        whole, rest = divmod(length, size)
        full.extend((table[b][j], b) for j in range(whole))
        if rest:
            tails.append((table[b][whole], b, rest))
    if any(not 0 <= block < blocks for block, *_ in full + tails):
        return None  # the per-batch path raises the index error
    runs, scattered = _runs(full)
    pieces = []
    per_block = kv.key_cache[0].numel()
    dtype = kv.key_cache.dtype
    for run in runs:  # consecutive blocks: views of the caches
        step = _per_call(per_block, dtype, False)
        for first in range(0, len(run), step):
            part = run[first : first + step]
            lo, hi = part[0][0], part[-1][0] + 1
            owners = torch.tensor([owner for _, owner in part])
            out, lse = _call(torch.index_select(query, 0, owners), kv.key_cache[lo:hi], kv.value_cache[lo:hi], scale)
            pieces.append(_Piece(owners, out, lse))
    for group, used in ((scattered, None), (tails, [rest for *_, rest in tails])):
        step = _per_call(per_block, dtype, True)
        for first in range(0, len(group), step):
            part = group[first : first + step]
            ids = torch.tensor([entry[0] for entry in part], device=kv.key_cache.device)
            owners = torch.tensor([entry[1] for entry in part])
            keys, values = (torch.index_select(cache, 0, ids).float() for cache in (kv.key_cache, kv.value_cache))
            bias = None
            if used is not None:  # positions past the length: zeroed, then masked
                seen = torch.arange(size).unsqueeze(0) < torch.tensor(used[first : first + step]).unsqueeze(1)
                keys.masked_fill_(~seen[:, None, :, None], 0)
                values.masked_fill_(~seen[:, None, :, None], 0)
                bias = torch.zeros(seen.shape, dtype=torch.float32).masked_fill_(~seen, -torch.inf)[:, None, None]
            out, lse = _call(torch.index_select(query, 0, owners), keys, values, scale, bias)
            pieces.append(_Piece(owners, out, lse))
    return pieces


def _runs(full: list[tuple[int, int]]) -> tuple[list[list[tuple[int, int]]], list[tuple[int, int]]]:
    """Runs of at least MIN_RUN consecutive distinct block ids, and the other (block, owner) entries: blocks
    outside a run, and a block's second use (a block table may name a block twice)."""
    ordered = sorted(full)
    runs: list[list[tuple[int, int]]] = []
    scattered: list[tuple[int, int]] = []
    current: list[tuple[int, int]] = []
    for entry in ordered:
        if current and entry[0] == current[-1][0]:
            scattered.append(entry)
            continue
        if current and entry[0] != current[-1][0] + 1:
            (runs.append if len(current) >= MIN_RUN else scattered.extend)(current)
            current = []
        current.append(entry)
    if current:
        (runs.append if len(current) >= MIN_RUN else scattered.extend)(current)
    return runs, scattered


def _combine(pieces: list[_Piece], batch: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Per batch: the log-sum-exp of its pieces' lse, and their outputs weighted by exp(lse - total). The
    entries are laid out as a (batch, most entries of a batch) grid, padded when batches have different
    counts with an entry of lse -inf and output 0, so that the sums are dense ones (an index_add over the
    entries is many times slower)."""
    first = pieces[0]
    if len(pieces) == 1 and torch.equal(first.owners, torch.arange(batch)):
        return first.out, first.lse
    owners = torch.cat([piece.owners for piece in pieces])
    counts = torch.bincount(owners, minlength=batch)
    padded = bool((counts != counts[0]).any())
    outs, lses = [piece.out for piece in pieces], [piece.lse for piece in pieces]
    if padded:
        outs.append(torch.zeros_like(first.out[:1]))
        lses.append(torch.full_like(first.lse[:1], -torch.inf))
    out = torch.cat(outs) if len(outs) > 1 else outs[0]  # (entries, N, R, Dv)
    lse = torch.cat(lses) if len(lses) > 1 else lses[0]
    order = torch.argsort(owners, stable=True)
    grouped = owners[order]
    slot = torch.arange(len(owners)) - (torch.cumsum(counts, 0) - counts)[grouped]
    grid = torch.full((batch, int(counts.max())), len(owners), dtype=torch.long)
    grid[grouped, slot] = order
    grid = grid.to(out.device)
    scores = lse[grid]  # (B, n, N, R)
    top = scores.amax(1)
    top = torch.where(torch.isinf(top), 0.0, top)
    weights = torch.exp(scores - top.unsqueeze(1))
    denominator = weights.sum(1)
    values = torch.index_select(out, 0, grid.flatten()).view(*grid.shape, *out.shape[1:])
    total = torch.einsum("bnkr,bnkrd->bkrd", weights, values)
    seen = denominator != 0  # a row whose every score is -inf: 0 and lse +inf, as online_softmax gives it
    safe = torch.where(seen, denominator, 1.0)
    result = torch.where(seen.unsqueeze(-1), total / safe.unsqueeze(-1), 0.0)
    return result, torch.where(seen, top + torch.log(safe), torch.inf)
