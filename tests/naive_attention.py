"""A deliberately naive float64 attention and the packing of test data into operator layouts.

This is the independent specification the reference is checked against: explicit loops over batch
and head, an explicit (S1, S2) allowed-matrix built pair by pair from the sparse_mode table of
docs/semantics.md#sem-4-2, a plain softmax, and layouts written as explicit permutes of a
canonical per-batch form. It shares no code with ``kvlint.runtime_probe``.

Canonical form: per batch, query (Nq, S1_b, D), key (Nkv, S2_b, D), value (Nkv, S2_b, Dv), holding only
the valid rows.
"""

from __future__ import annotations

import math

import torch

BIG = 2147483647


def allowed_matrix(
    sparse_mode: int, pre: int, nxt: int, s1: int, s2: int, user_mask: torch.Tensor | None
) -> torch.Tensor:
    """(s1, s2) bool matrix, True = the pair takes part. ``user_mask`` is True = masked out."""
    allowed = torch.zeros(s1, s2, dtype=torch.bool)
    for i in range(s1):
        for j in range(s2):
            if sparse_mode == 0:
                ok = user_mask is None or (not user_mask[i, j] and -pre <= j - i <= nxt)
            elif sparse_mode == 1:
                ok = not user_mask[i, j]
            elif sparse_mode == 2:
                ok = j <= i
            elif sparse_mode == 3:
                ok = j <= i + (s2 - s1)
            else:
                ok = (s2 - s1) - pre <= j - i <= (s2 - s1) + nxt
            allowed[i, j] = ok
    return allowed


def naive_attention(
    queries: list[torch.Tensor],
    keys: list[torch.Tensor],
    values: list[torch.Tensor],
    scale: float,
    allowed: list[torch.Tensor],
    sink: torch.Tensor | None = None,
    pse: list[torch.Tensor] | None = None,
) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """Per batch: output (Nq, S1_b, Dv) and lse (Nq, S1_b) in float64. Empty rows: 0 and +inf."""
    outs, lses = [], []
    for b, (q, k, v) in enumerate(zip(queries, keys, values)):
        nq, s1, nkv = q.shape[0], q.shape[1], k.shape[0]
        out = torch.zeros(nq, s1, v.shape[-1], dtype=torch.float64)
        lse = torch.full((nq, s1), math.inf, dtype=torch.float64)
        for n in range(nq):
            g = n // (nq // nkv)
            scores = (q[n].double() @ k[g].double().T) * scale
            if pse is not None:
                scores = scores + pse[b][n].double()
            for i in range(s1):
                row = scores[i][allowed[b][i]]
                if row.numel() == 0:
                    continue
                logits = row if sink is None else torch.cat([row, sink[n].double().reshape(1)])
                top = logits.max()
                total = torch.exp(logits - top).sum()
                weights = torch.exp(row - top) / total
                out[n, i] = weights @ v[g].double()[allowed[b][i]]
                lse[n, i] = top + torch.log(total)
        outs.append(out)
        lses.append(lse)
    return outs, lses


def pad_batches(batches: list[torch.Tensor], length: int, fill: str) -> torch.Tensor:
    """Stack (N, S_b, D) into (B, N, length, D); padding rows are random noise or zeros."""
    n, d = batches[0].shape[0], batches[0].shape[-1]
    make = torch.randn if fill == "noise" else torch.zeros
    out = make(len(batches), n, length, d).to(batches[0].dtype)
    for b, x in enumerate(batches):
        out[b, :, : x.shape[1]] = x
    return out


def pack(batches: list[torch.Tensor], form: str, length: int, fill: str = "noise") -> torch.Tensor:
    """Canonical per-batch tensors in a layout form; non-varlen forms are padded to ``length``."""
    if form == "TND":
        return torch.cat([x.permute(1, 0, 2) for x in batches], dim=0).contiguous()
    if form == "NTD":
        return torch.cat(batches, dim=1).contiguous()
    bnsd = pad_batches(batches, length, fill)
    b, n, s, d = bnsd.shape
    if form == "BSH":
        return bnsd.permute(0, 2, 1, 3).reshape(b, s, n * d).contiguous()
    if form == "BSND":
        return bnsd.permute(0, 2, 1, 3).contiguous()
    if form == "BNSD":
        return bnsd
    if form == "NBSD":
        return bnsd.permute(1, 0, 2, 3).contiguous()
    if form == "NSD":
        assert b == 1
        return bnsd[0]
    raise AssertionError(form)


def pack_lse(lses: list[torch.Tensor], varlen: bool, length: int) -> torch.Tensor:
    """(B, N, S, 1) with +inf padding, or (T, N, 1) for varlen layouts."""
    if varlen:
        return torch.cat([x.T for x in lses], dim=0).unsqueeze(-1)
    n = lses[0].shape[0]
    out = torch.full((len(lses), n, length, 1), math.inf, dtype=torch.float64)
    for b, x in enumerate(lses):
        out[b, :, : x.shape[1], 0] = x
    return out


def paged_cache(
    batches: list[torch.Tensor], block_size: int, cache_layout: str, table_width: int, generator: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor]:
    """Scatter per-batch (N, S_b, D) into a noise-filled paged cache with a shuffled block table.

    Cache layouts: "BnBsH" (blocks, bs, N*D), "BnBsND" (blocks, bs, N, D), "BnNBsD" (blocks, N, bs, D).
    Unused table entries point at a spare noise block.
    """
    n, d = batches[0].shape[0], batches[0].shape[-1]
    needed = [math.ceil(x.shape[1] / block_size) for x in batches]
    total = sum(needed) + 2
    order = torch.randperm(total, generator=generator).tolist()
    spare = order.pop()
    tokens = torch.randn(total, block_size, n, d, generator=generator).to(batches[0].dtype)
    table = torch.full((len(batches), table_width), spare, dtype=torch.int32)
    for b, x in enumerate(batches):
        for blk in range(needed[b]):
            block_id = order.pop()
            table[b, blk] = block_id
            chunk = x[:, blk * block_size : (blk + 1) * block_size]
            tokens[block_id, : chunk.shape[1]] = chunk.permute(1, 0, 2)
    if cache_layout == "BnBsH":
        return tokens.reshape(total, block_size, n * d), table
    if cache_layout == "BnBsND":
        return tokens, table
    if cache_layout == "BnNBsD":
        return tokens.permute(0, 2, 1, 3).contiguous(), table
    raise AssertionError(cache_layout)
