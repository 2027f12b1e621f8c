"""Readers of key/value blocks: contiguous tensors, paged caches, a shared prefix, int8 antiquant.

A reader returns the keys [start, stop) of one batch as an (N, stop - start, D) tensor in the compute
dtype, so that only one block is ever converted, gathered or dequantised at a time.
Paged addressing (docs/semantics.md#sem-5): logical position s of batch b lives in block
``block_table[b, s // block_size]`` at offset ``s % block_size``. Antiquant (docs/semantics.md#sem-6-2):
``x = (int8 + offset) * scale``.

NZ caches (``docs/semantics.md#sem-14``): a block of ``block_size`` tokens with H features per token is
stored as ``[H / c0, block_size, c0]``, ``c0`` = 32 bytes of elements (16 for fp16/bf16, 32 for int8):
feature h of the token at offset o is element ``[h // c0, o, h % c0]``. FIA's NZ cache shape
``[blocks, N, D / c0, block_size, c0]`` is exactly that layout with H = N * D; the cache writers address
any NZ cache through its storage (``slot_rows``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

NZ_BYTES = 32
"""Bytes of the innermost NZ axis: c0 = 32 // element size."""


def nz_c0(dtype: torch.dtype) -> int:
    return NZ_BYTES // torch.empty(0, dtype=dtype).element_size()


@dataclass(frozen=True)
class SlotRows:
    """A paged cache addressed by slot: ``slots`` tokens of ``features`` elements, ND or NZ."""

    view: torch.Tensor
    """ND: ``[slots, features]``; NZ: ``[blocks, features / c0, block_size, c0]``."""
    block_size: int
    features: int
    nz: bool

    @property
    def slots(self) -> int:
        return self.view.shape[0] if not self.nz else self.view.shape[0] * self.block_size

    @property
    def dtype(self) -> torch.dtype:
        return self.view.dtype

    def write(self, slots: torch.Tensor, tokens: torch.Tensor) -> None:
        """``tokens [len(slots), features]`` into their slots."""
        if not self.nz:
            self.view[slots] = tokens
            return
        self.view[slots // self.block_size, :, slots % self.block_size] = tokens.view(len(slots), -1, self.view.shape[-1])

    def read(self, slots: torch.Tensor) -> torch.Tensor:
        """``[len(slots), features]``."""
        if not self.nz:
            return self.view[slots]
        return self.view[slots // self.block_size, :, slots % self.block_size].reshape(len(slots), self.features)


def slot_rows(cache: torch.Tensor, features: int, *, nz: bool, name: str) -> SlotRows:
    """Address ``cache`` (``blocks`` = its first axis, any trailing shape) by slot. Its storage holds
    ``blocks * block_size * features`` elements, which gives the block size."""
    if not cache.is_contiguous():
        raise ValueError(f"{name} must be contiguous (paged caches are written through their storage)")
    blocks = cache.shape[0]
    per_block = cache.numel() // max(blocks, 1)
    if blocks == 0 or per_block % features:
        raise ValueError(f"{name} {tuple(cache.shape)} does not hold whole tokens of {features} features per block")
    block_size = per_block // features
    if not nz:
        return SlotRows(cache.view(blocks * block_size, features), block_size, features, False)
    c0 = nz_c0(cache.dtype)
    if features % c0:
        raise ValueError(f"{name}: an NZ cache needs the {features} features per token to be a multiple of {c0}")
    return SlotRows(cache.view(blocks, features // c0, block_size, c0), block_size, features, True)


Reader = Callable[[int, int, int], torch.Tensor]
"""(batch, start, stop) -> (N, stop - start, D) in the compute dtype."""


@dataclass(frozen=True)
class Dequant:
    """Antiquant parameters: per-tensor/per-channel, broadcastable to (N, S, D), or per-token (B, S)."""

    scale: torch.Tensor
    offset: torch.Tensor | None
    per_token: bool

    def apply(self, x: torch.Tensor, batch: int, start: int, stop: int) -> torch.Tensor:
        """Dequantise the keys [start, stop) of one batch."""
        scale, offset = self.scale, self.offset
        if self.per_token:
            scale = scale[batch, start:stop].view(1, -1, 1)
            offset = None if offset is None else offset[batch, start:stop].view(1, -1, 1)
        return (x + offset) * scale if offset is not None else x * scale


def dequant(
    scale: torch.Tensor | None,
    offset: torch.Tensor | None,
    channels: tuple[int, int],
    tokens: tuple[int, int] | None,
    name: str,
    dtype: torch.dtype,
) -> Dequant | None:
    """Per-tensor (one element) or per-channel (N*D elements) parameters, or per-token ones (B*S
    elements) when ``tokens`` = (B, S) is given; other granularities raise."""
    if scale is None:
        if offset is not None:
            raise ValueError(f"{name} offset given without its scale")
        return None

    def shaped(t: torch.Tensor, what: str) -> torch.Tensor:
        if tokens is not None and t.numel() == tokens[0] * tokens[1]:
            return t.reshape(tokens).to(dtype)
        if tokens is None and t.numel() == 1:
            return t.reshape(1, 1, 1).to(dtype)
        if tokens is None and t.numel() == channels[0] * channels[1]:
            return t.reshape(channels[0], 1, channels[1]).to(dtype)
        granularity = "per-token (B*S)" if tokens is not None else "per-tensor or per-channel (N*D)"
        raise NotImplementedError(f"{what} of shape {tuple(t.shape)}: expected {granularity} elements")

    return Dequant(
        shaped(scale, f"{name} scale"), None if offset is None else shaped(offset, f"{name} offset"), tokens is not None
    )


def _convert(x: torch.Tensor, dtype: torch.dtype, params: Dequant | None, batch: int, start: int) -> torch.Tensor:
    x = x.to(dtype)
    return params.apply(x, batch, start, start + x.shape[1]) if params is not None else x


def contiguous_reader(batches: list[torch.Tensor], dtype: torch.dtype, params: Dequant | None) -> Reader:
    """Reader over per-batch (N, S_b, D) views of an ordinary key or value tensor."""

    def read(batch: int, start: int, stop: int) -> torch.Tensor:
        return _convert(batches[batch][:, start:stop], dtype, params, batch, start)

    return read


def heads_major_cache(cache: torch.Tensor, block_size: int, heads: int, prefer_heads_major: bool) -> torch.Tensor:
    """View a paged cache as (blocks, N, block_size, D).

    Accepted: (blocks, bs, N*D), (blocks, bs, N, D) and (blocks, N, bs, D); when N == block_size the
    4-D form is ambiguous and follows the query layout (BNSD/TND queries use the heads-major cache). The NZ
    cache (blocks, N, D / c0, bs, c0) becomes the 5-D view (blocks, N, bs, D / c0, c0), whose last two axes
    the reader merges after gathering the blocks it needs.
    """
    if cache.dim() == 5:
        if cache.shape[1] != heads or cache.shape[3] != block_size:
            raise ValueError(f"NZ paged cache {tuple(cache.shape)} is not (blocks, {heads}, D/c0, {block_size}, c0)")
        return cache.transpose(2, 3)
    if cache.dim() == 3:
        if cache.shape[1] != block_size or cache.shape[2] % heads:
            raise ValueError(f"paged cache {tuple(cache.shape)} is not (blocks, {block_size}, {heads}*D)")
        return cache.unflatten(-1, (heads, cache.shape[2] // heads)).transpose(1, 2)
    if cache.dim() != 4:
        raise ValueError(f"a paged cache must be 3-D, 4-D or 5-D (NZ), got {tuple(cache.shape)}")
    tokens_major = cache.shape[1:3] == (block_size, heads)
    heads_major = cache.shape[1:3] == (heads, block_size)
    if not (tokens_major or heads_major):
        raise ValueError(
            f"paged cache {tuple(cache.shape)} is neither (blocks, {block_size}, {heads}, D) "
            f"nor (blocks, {heads}, {block_size}, D)"
        )
    if heads_major and (prefer_heads_major or not tokens_major):
        return cache
    return cache.transpose(1, 2)


def paged_reader(
    cache: torch.Tensor,
    block_table: torch.Tensor,
    block_size: int,
    dtype: torch.dtype,
    params: Dequant | None,
) -> Reader:
    """Reader that gathers only the blocks covering [start, stop) of a (blocks, N, bs, D) cache view (or the
    (blocks, N, bs, D / c0, c0) view of an NZ cache)."""


    def read(batch: int, start: int, stop: int) -> torch.Tensor:
        first, last = start // block_size, (stop - 1) // block_size
        ids = block_table[batch, first : last + 1].to(device=cache.device, dtype=torch.long)
        blocks = cache.new_empty((cache.shape[1], len(ids), *cache.shape[2:]))
        torch.index_select(cache, 0, ids, out=blocks.transpose(0, 1))  # one copy, heads first
        if blocks.dim() == 5:
            blocks = blocks.flatten(-2)
        blocks = blocks.flatten(1, 2)
        offset = first * block_size
        return _convert(blocks[:, start - offset : stop - offset], dtype, params, batch, start)

    return read


def with_prefix(read: Reader, prefix: torch.Tensor, dtype: torch.dtype, params: Dequant | None) -> Reader:
    """Positions [0, P) come from a shared prefix (N, P, D), later ones from ``read`` shifted by P."""
    length = prefix.shape[1]

    def read_all(batch: int, start: int, stop: int) -> torch.Tensor:
        parts = []
        if start < length:
            parts.append(_convert(prefix[:, start : min(stop, length)], dtype, params, batch, start))
        if stop > length:
            parts.append(read(batch, max(start, length) - length, stop - length))
        return torch.cat(parts, dim=1)

    return read_all
