"""The token rows a cache write fills and the token rows an attention call reads, in one coordinate system.

A *token row* is one token's keys in a cache (all heads). Both sides name a row by its byte offset from
the cache tensor's first byte, computed from each tensor's own strides, so a write through a view (the
flattened ``cache.view(-1, H)`` of a paged cache, a per-layer slice) and the attention call reading the
cache tensor itself agree on every row without knowing how the views relate.

- The write side follows the catalogue's addressing (``kvlint.catalogue.cache_writes``): per-row starts
  (``scatter_update``), leading-axis coordinates (``npu_scatter_nd_update``), slots of a paged cache
  (``npu_scatter_pa_kv_cache``...), per-batch positions.
- The read side covers every row a request of the call can address: the key's S positions (BSH, BSND,
  BNSD), the request's span of the packed T axis (TND, NTD, from the cumulative KV lengths), or its
  block-table row (paged caches: ``[blocks, block_size, H]``, ``[blocks, N, block_size, D]``,
  ``[blocks, block_size, N, D]``, NZ ``[blocks, N, D/16, block_size, 16]``), each row marked read when
  its position is inside the request's KV length.

Every function reads positions to the host once; they run on value-checked calls only.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from kvlint.runtime_probe.live_call import Geometry, LiveCall

from kvlint.catalogue.cache_writes import COORDINATES, ROW_OFFSETS, SLOTS, STARTS, Addressing, CacheWrite


@dataclass
class WrittenRows:
    """The rows one write call filled in one cache."""

    cache: torch.Tensor
    offsets: torch.Tensor
    """int64 [n]: byte offset of each written row from the cache's first byte, in the write's token order."""
    requests: torch.Tensor | None
    """int64 [n]: the batch row each token was written for, when the addressing says (starts, per-batch
    positions); None for slots and coordinates."""


@dataclass
class ReadRows:
    """Every row the requests of one attention call can address, and whether the call reads it."""

    view: torch.Tensor
    """The read tensor with its token axes first, so that ``view[index]`` gathers the rows."""
    index: tuple[torch.Tensor, ...]
    offsets: torch.Tensor
    requests: torch.Tensor
    positions: torch.Tensor
    """The row's position in its request's sequence."""
    read: torch.Tensor
    """bool: the position is inside the request's KV length."""
    lengths: list[int]


def _host(value: torch.Tensor) -> torch.Tensor:
    return value.detach().to("cpu", torch.int64)


def _axis(axis: int, rank: int) -> int:
    return axis + rank if axis < 0 else axis


def written_rows(call: LiveCall, write: CacheWrite) -> WrittenRows | None:
    """The rows ``call`` (a cache write) fills in ``write.cache``; None when the addressing is not modelled."""
    cache, positions = call.get(write.cache), call.get(write.positions)
    if not isinstance(cache, torch.Tensor) or not isinstance(positions, torch.Tensor) or cache.dim() < 2:
        return None
    addressing = write.layouts.get(call.get(write.mode) if write.mode else None)
    if addressing is None:
        return None
    index = _host(positions)
    if addressing.kind == STARTS:
        size, strides = cache.element_size(), cache.stride()
        axis = _axis(int(call.get("axis")), cache.dim())  # type: ignore[call-overload]
        source = call.get(write.source)
        if index.dim() != 1 or not isinstance(source, torch.Tensor) or axis == 0 or axis >= source.dim():
            return None
        steps = torch.arange(source.shape[axis])
        rows = torch.arange(index.shape[0]).repeat_interleave(len(steps))
        places = (index[:, None] + steps[None, :]).reshape(-1)
        return WrittenRows(cache, (rows * strides[0] + places * strides[axis]) * size, rows)
    entries = _entries(cache, index, addressing)
    if entries is None:
        return None
    offsets, kept, requests = entries
    return WrittenRows(cache, offsets[kept], None if requests is None else requests[kept])


def entry_offsets(call: LiveCall, write: CacheWrite) -> torch.Tensor | None:
    """The byte offset of the row each entry of the positions argument addresses (each coordinate row, for
    coordinates), in the argument's flattened order; None for per-row starts or an unmodelled addressing.
    The offsets of padding entries (negative slots) are meaningless."""
    cache, positions = call.get(write.cache), call.get(write.positions)
    addressing = write.layouts.get(call.get(write.mode) if write.mode else None)
    if not isinstance(cache, torch.Tensor) or not isinstance(positions, torch.Tensor) or cache.dim() < 2 \
            or addressing is None:
        return None
    entries = _entries(cache, _host(positions), addressing)
    return None if entries is None else entries[0]


def _entries(cache: torch.Tensor, index: torch.Tensor,
             addressing: Addressing) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None] | None:
    """(byte offset per entry, whether the entry writes, its batch row where the addressing says) for the
    coordinates, slots and row offsets addressings."""
    size, strides = cache.element_size(), cache.stride()
    if addressing.kind == COORDINATES:
        if index.dim() < 2 or index.shape[-1] > cache.dim():
            return None
        coordinates = index.reshape(-1, index.shape[-1])
        step = torch.tensor(strides[: coordinates.shape[1]], dtype=torch.int64)
        offsets = (coordinates * step).sum(1) * size
        return offsets, torch.ones(len(offsets), dtype=torch.bool), None
    axis = addressing.token_axis
    if axis is None:
        return None
    if addressing.kind == SLOTS:
        slots = index.reshape(-1)
        block_size = cache.shape[axis]
        offsets = (slots // block_size) * strides[0] + (slots % block_size) * strides[axis]
        return offsets * size, slots >= 0, None  # negative slots are padding
    if addressing.kind == ROW_OFFSETS and index.dim() == 2:
        rows = torch.arange(index.shape[0]).repeat_interleave(index.shape[1])
        places = index.reshape(-1)
        return (rows * strides[0] + places * strides[axis]) * size, places >= 0, rows
    return None


def paged_token_axis(cache: torch.Tensor, block_size: int) -> int | None:
    """The block-offset axis of a paged cache (the layouts of FIA-C41 and the tokens-major one)."""
    if cache.dim() == 3:
        return 1
    if cache.dim() == 4:
        return 1 if cache.shape[1] == block_size else 2 if cache.shape[2] == block_size else None
    if cache.dim() == 5 and cache.shape[3] == block_size:
        return 3
    return None


def read_rows(call: LiveCall, tensor: torch.Tensor) -> ReadRows | None:
    """Every row of ``tensor`` (the call's key or value) its requests address; None when not understood."""
    geo = call.geometry
    if geo is None or geo.batch is None:
        return None
    if geo.paged:
        return _paged_rows(call, geo, tensor)
    if geo.varlen:
        return _packed_rows(call, geo, tensor)
    return _batched_rows(call, geo, tensor)


def _rows(view: torch.Tensor, index: tuple[torch.Tensor, ...], requests: torch.Tensor, positions: torch.Tensor,
          lengths: list[int], element_size: int) -> ReadRows:
    offsets = sum((i * view.stride(axis) for axis, i in enumerate(index)), torch.zeros_like(requests)) * element_size
    read = positions < torch.tensor(lengths, dtype=torch.int64)[requests]
    return ReadRows(view, index, offsets, requests, positions, read, lengths)


def _batched_rows(call: LiveCall, geo: Geometry, tensor: torch.Tensor) -> ReadRows | None:
    """BSH, BSND, BNSD: request b addresses ``tensor[b]`` along S."""
    seq_axis = geo.form.find("S")
    if geo.form[0] != "B" or seq_axis < 0 or tensor.dim() != len(geo.form) or tensor.shape[0] < geo.batch:
        return None
    capacity = tensor.shape[seq_axis]
    lengths = call.per_batch_kv_lengths(geo.batch) or [capacity] * geo.batch  # type: ignore[operator]
    view = tensor.movedim(seq_axis, 1)
    requests = torch.arange(geo.batch).repeat_interleave(capacity)  # type: ignore[arg-type]
    positions = torch.arange(capacity).repeat(geo.batch)  # type: ignore[arg-type]
    return _rows(view, (requests, positions), requests, positions, lengths, tensor.element_size())


def _packed_rows(call: LiveCall, geo: Geometry, tensor: torch.Tensor) -> ReadRows | None:
    """TND, NTD: request b reads its span ``[ends[b-1], ends[b])`` of the packed T axis."""
    token_axis = geo.form.find("T")
    ends = call.lengths(call.kv_lengths_param)
    if token_axis < 0 or not ends or tensor.dim() != len(geo.form) or ends[-1] > tensor.shape[token_axis]:
        return None
    starts = [0, *ends[:-1]]
    lengths = [end - start for start, end in zip(starts, ends)]
    if min(lengths) < 0:
        return None
    requests = torch.arange(len(ends)).repeat_interleave(torch.tensor(lengths))
    tokens = torch.arange(ends[-1])
    positions = tokens - torch.tensor(starts)[requests]
    view = tensor.movedim(token_axis, 0)
    return _rows(view, (tokens,), requests, positions, lengths, tensor.element_size())


def _paged_rows(call: LiveCall, geo: Geometry, tensor: torch.Tensor) -> ReadRows | None:
    """A block-table row per request: position p is block ``table[b, p // block_size]``, offset p % bs."""
    table, block_size = call.get("block_table"), int(call.get("block_size"))  # type: ignore[call-overload]
    lengths = call.per_batch_kv_lengths(geo.batch)
    axis = paged_token_axis(tensor, block_size) if block_size > 0 else None
    if not isinstance(table, torch.Tensor) or table.dim() != 2 or lengths is None or axis is None:
        return None
    host = call.host_block_table[: geo.batch].to(torch.int64)
    capacity = host.shape[1] * block_size
    requests = torch.arange(host.shape[0]).repeat_interleave(capacity)
    positions = torch.arange(capacity).repeat(host.shape[0])
    blocks = host[requests, positions // block_size]
    kept = (blocks >= 0) & (blocks < tensor.shape[0])  # padding entries of a row address nothing
    view = tensor.movedim(axis, 1)
    index = (blocks[kept], (positions % block_size)[kept])
    return _rows(view, index, requests[kept], positions[kept], lengths, tensor.element_size())


def zero_rows(rows: ReadRows, chosen: torch.Tensor) -> torch.Tensor:
    """bool per chosen row: every element of the row is exactly 0 (a zero-initialised row never written)."""
    index = tuple(i[chosen] for i in rows.index)
    gathered = rows.view[index]
    return gathered.reshape(gathered.shape[0], -1).eq(0).all(1)
