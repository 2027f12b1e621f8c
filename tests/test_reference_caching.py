"""KV caching consistency: one causal forward == prefill + paged decode == chunked prefill [1, 3, 2, 5].

The caches are written with the reference cache-write operators, the way model code writes them on the
device. Two classic bugs must show up as mismatches: a chunk written at position offset 0 instead of its
absolute position, and a top-left (sparse_mode=2) mask on a chunk whose keys include cached tokens.
"""

from __future__ import annotations

import math

import pytest
import torch
from kvlint.runtime_probe.reference import online_softmax
from kvlint.runtime_probe.reference.operators import (
    fused_infer_attention_score,
    npu_scatter_nd_update_,
    scatter_update_,
)

BATCH, HEADS, KV_HEADS, DIM, BLOCK = 2, 4, 2, 16, 4
CHUNKS = [1, 3, 2, 5]
LENGTH = sum(CHUNKS)
TEMPLATE = torch.ones(2048, 2048, dtype=torch.bool).triu(1)
MATCH, MISMATCH = 1e-5, 1e-2


@pytest.fixture(autouse=True, params=["default tiles", "tiny tiles"])
def tiles(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every proof runs with the default tile sizes and with tiles of a few rows and keys."""
    if request.param == "tiny tiles":
        monkeypatch.setattr(online_softmax, "KEY_BLOCK", 3)
        monkeypatch.setattr(online_softmax, "TILE_ELEMENTS", 24)


def sequence(seed: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Query, key and value of the whole sequence, BSH."""
    gen = torch.Generator().manual_seed(seed)
    return (
        torch.randn(BATCH, LENGTH, HEADS * DIM, generator=gen),
        torch.randn(BATCH, LENGTH, KV_HEADS * DIM, generator=gen),
        torch.randn(BATCH, LENGTH, KV_HEADS * DIM, generator=gen),
    )


def attend(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, **kw: object) -> torch.Tensor:
    out, _ = fused_infer_attention_score(
        query, key, value, num_heads=HEADS, num_key_value_heads=KV_HEADS, scale=1 / math.sqrt(DIM),
        input_layout="BSH", **kw,
    )  # fmt: skip
    return out


def full_causal() -> torch.Tensor:
    query, key, value = sequence()
    return attend(query, key, value, sparse_mode=3, atten_mask=TEMPLATE)


class PagedCache:
    """(blocks, block_size, Nkv*D) key/value caches with a shuffled block table, written per token."""

    def __init__(self) -> None:
        blocks_per_seq = math.ceil(LENGTH / BLOCK)
        order = torch.randperm(BATCH * blocks_per_seq + 3, generator=torch.Generator().manual_seed(7))
        self.table = order[: BATCH * blocks_per_seq].view(BATCH, blocks_per_seq).to(torch.int32)
        self.key = torch.randn(len(order), BLOCK, KV_HEADS * DIM)
        self.value = torch.randn(len(order), BLOCK, KV_HEADS * DIM)

    def write(self, start: int, key: torch.Tensor, value: torch.Tensor) -> None:
        """Write tokens [start, start + T) of every batch through ``npu_scatter_nd_update_``."""
        positions = torch.arange(start, start + key.shape[1])
        slots = torch.stack(
            [torch.stack([self.table[b, positions // BLOCK].long(), positions % BLOCK], dim=-1) for b in range(BATCH)]
        )
        npu_scatter_nd_update_(self.key, slots, key)
        npu_scatter_nd_update_(self.value, slots, value)

    def attend(self, query: torch.Tensor, kv_len: int, **kw: object) -> torch.Tensor:
        return attend(query, self.key, self.value, block_table=self.table, block_size=BLOCK,
                      actual_seq_lengths_kv=[kv_len] * BATCH, **kw)  # fmt: skip


def error(got: torch.Tensor, want: torch.Tensor) -> float:
    return (got - want).abs().max().item()


def test_prefill_then_token_by_token_paged_decode_equals_full_causal() -> None:
    want = full_causal()
    query, key, value = sequence()
    cache, prefill = PagedCache(), 4
    cache.write(0, key[:, :prefill], value[:, :prefill])
    got = [cache.attend(query[:, :prefill], prefill, sparse_mode=3, atten_mask=TEMPLATE)]
    for pos in range(prefill, LENGTH):
        cache.write(pos, key[:, pos : pos + 1], value[:, pos : pos + 1])
        got.append(cache.attend(query[:, pos : pos + 1], pos + 1))
    assert error(torch.cat(got, dim=1), want) < MATCH


def chunked_prefill(sparse_mode: int, wrong_offset: bool) -> torch.Tensor:
    """Prefill in CHUNKS into a contiguous BSH cache written with ``scatter_update_`` (axis -2)."""
    query, key, value = sequence()
    key_cache, value_cache = torch.zeros_like(key), torch.zeros_like(value)
    got, start = [], 0
    for size in CHUNKS:
        at = torch.full((BATCH,), 0 if wrong_offset else start, dtype=torch.long)
        scatter_update_(key_cache, at, key[:, start : start + size], -2)
        scatter_update_(value_cache, at, value[:, start : start + size], -2)
        got.append(attend(query[:, start : start + size], key_cache, value_cache, sparse_mode=sparse_mode,
                          atten_mask=TEMPLATE, actual_seq_lengths_kv=[start + size] * BATCH))  # fmt: skip
        start += size
    return torch.cat(got, dim=1)


def test_chunked_prefill_equals_full_causal() -> None:
    assert error(chunked_prefill(sparse_mode=3, wrong_offset=False), full_causal()) < MATCH


def test_chunked_prefill_through_a_paged_cache_equals_full_causal() -> None:
    query, key, value = sequence()
    cache, got, start = PagedCache(), [], 0
    for size in CHUNKS:
        cache.write(start, key[:, start : start + size], value[:, start : start + size])
        got.append(cache.attend(query[:, start : start + size], start + size, sparse_mode=3, atten_mask=TEMPLATE))
        start += size
    assert error(torch.cat(got, dim=1), full_causal()) < MATCH


def test_chunk_written_at_offset_zero_is_a_mismatch() -> None:
    assert error(chunked_prefill(sparse_mode=3, wrong_offset=True), full_causal()) > MISMATCH


def test_top_left_mask_on_chunks_is_a_mismatch() -> None:
    assert error(chunked_prefill(sparse_mode=2, wrong_offset=False), full_causal()) > MISMATCH
