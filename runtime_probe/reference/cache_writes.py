"""Reference of the KV-cache write operators: ``scatter_update(_)``, ``npu_scatter_nd_update(_)``, the paged
writers ``_npu_reshape_and_cache`` and ``npu_scatter_pa_kv_cache``, the MLA writer
``npu_kv_rmsnorm_rope_cache`` and the paged reader ``npu_gather_pa_kv_cache``
(``docs/operators/kv_cache_writes.md``, ``docs/semantics.md#sem-14``).

The out-of-place variants return a modified copy and leave ``input`` untouched (the device clones it);
the ``_`` variants write ``input`` in place and return it. Indices are not range-checked on the device;
here torch's indexing raises on out-of-range indices (docs/operators/kv_cache_writes.md#kvc-c1 to #kvc-c10).
The paged writers address a token by its slot (``slot = block * block_size + offset``) in a cache stored ND
or NZ (``paged.slot_rows``).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from kvlint.runtime_probe.reference.norms import rms_norm
from kvlint.runtime_probe.reference.paged import SlotRows, slot_rows
from kvlint.runtime_probe.reference.rope import interleave_rope


def scatter_update_(input: torch.Tensor, indices: torch.Tensor, updates: torch.Tensor, axis: int) -> torch.Tensor:
    """For each batch i (dim 0), write ``updates[i]`` along ``axis`` starting at position ``indices[i]``.

    E.g. axis=-2: ``input[i][j][indices[i] + k][l] = updates[i][j][k][l]``. 2-D indices ``[B, 2]`` name the
    row of ``input`` and the start position for each ``updates[i]``: ``input[indices[i, 0]]`` from
    ``indices[i, 1]`` on (``docs/semantics.md#sem-d12``, the paged-cache decode write).
    """
    one_per_batch = indices.dim() == 1 and indices.shape[0] == input.shape[0]
    pairs = indices.dim() == 2 and indices.shape[1] == 2 and indices.shape[0] == updates.shape[0]
    if not (one_per_batch or pairs):
        raise NotImplementedError(
            f"scatter_update: indices of shape {tuple(indices.shape)} (implemented: 1-D with one start position "
            f"per batch, length {input.shape[0]}, or [B, 2] (row, start) pairs with B = updates.shape[0])"
        )
    dim = axis % input.dim()
    if dim == 0 or updates.dim() != input.dim():
        raise ValueError(
            f"scatter_update: axis={axis} must not be the batch axis and updates must have rank {input.dim()}"
        )
    length = updates.shape[dim]
    targets = indices.tolist() if pairs else list(enumerate(indices.tolist()))
    for batch, (row, start) in enumerate(targets):
        if start < 0 or start + length > input.shape[dim] or not 0 <= row < input.shape[0]:
            raise IndexError(f"scatter_update: row {row}, start {start} + {length} is outside {tuple(input.shape)}")
        input[row].narrow(dim - 1, start, length).copy_(updates[batch])
    return input


def scatter_update(input: torch.Tensor, indices: torch.Tensor, updates: torch.Tensor, axis: int) -> torch.Tensor:
    """Out-of-place ``scatter_update_``: the returned copy holds the update, ``input`` is unchanged."""
    return scatter_update_(input.clone(), indices, updates, axis)


def npu_scatter_nd_update_(input: torch.Tensor, indices: torch.Tensor, updates: torch.Tensor) -> torch.Tensor:
    """``input[tuple(indices[..., k])] = updates`` with ``updates.shape == indices.shape[:-1] + input.shape[a:]``."""
    if indices.dim() < 2 or indices.shape[-1] > input.dim():
        raise ValueError(
            f"npu_scatter_nd_update: indices {tuple(indices.shape)} must be >= 2-D with last dim <= {input.dim()}"
        )
    expected = indices.shape[:-1] + input.shape[indices.shape[-1] :]
    if updates.shape != expected:
        raise ValueError(f"npu_scatter_nd_update: updates {tuple(updates.shape)} must be {tuple(expected)}")
    input[tuple(indices.long().unbind(-1))] = updates.to(input.dtype)
    return input


def npu_scatter_nd_update(input: torch.Tensor, indices: torch.Tensor, updates: torch.Tensor) -> torch.Tensor:
    """Out-of-place ``npu_scatter_nd_update_``."""
    return npu_scatter_nd_update_(input.clone(), indices, updates)


def _tokens(values: torch.Tensor, rows: SlotRows, name: str) -> torch.Tensor:
    """``values`` as (tokens, features) in the cache's dtype."""
    tokens = values.reshape(-1, rows.features) if values.numel() % rows.features == 0 else None
    if tokens is None:
        raise ValueError(f"{name} {tuple(values.shape)} does not have the cache's {rows.features} features per token")
    return tokens.to(rows.dtype)


def _write(rows: SlotRows, slots: torch.Tensor, values: torch.Tensor, name: str) -> None:
    """Write token rows at their slots; a negative slot is skipped (``docs/operators/kv_cache_writes.md#kvc-c32``)."""
    slots = slots.reshape(-1).long()
    tokens = _tokens(values, rows, name)
    if slots.numel() != tokens.shape[0]:
        raise ValueError(f"{name}: {tokens.shape[0]} tokens but {slots.numel()} slots")
    keep = slots >= 0
    if not bool(keep.all()):
        slots, tokens = slots[keep], tokens[keep]
    if slots.numel() and int(slots.max()) >= rows.slots:
        raise IndexError(f"{name}: slot {int(slots.max())} is outside the cache's {rows.slots} slots")
    rows.write(slots, tokens)


@torch.no_grad()
def reshape_and_cache(key: torch.Tensor, value: torch.Tensor, key_cache: torch.Tensor, value_cache: torch.Tensor,
                      slot_indices: torch.Tensor, *, nz: bool = False) -> None:  # fmt: skip
    """ATB ``_npu_reshape_and_cache``: token i of ``key``/``value`` (``[T, N, D]``) goes to slot
    ``slot_indices[i]`` of the caches, ND (``[blocks, block_size, N, D]``) or NZ when both caches are NZ."""
    for name, tokens, cache in (("key", key, key_cache), ("value", value, value_cache)):
        _write(slot_rows(cache, tokens.shape[-2] * tokens.shape[-1] if tokens.dim() >= 2 else tokens.shape[-1],
                         nz=nz, name=f"{name}_cache"), slot_indices, tokens, name)  # fmt: skip


@torch.no_grad()
def scatter_pa_kv_cache(key: torch.Tensor, value: torch.Tensor, key_cache: torch.Tensor, value_cache: torch.Tensor,
                        slot_mapping: torch.Tensor, *, compress_lens: torch.Tensor | None = None,
                        compress_seq_offsets: torch.Tensor | None = None, seq_lens: torch.Tensor | None = None,
                        cache_mode: str | None = "PA_NZ") -> None:  # fmt: skip
    """``npu_scatter_pa_kv_cache`` (scenario 1): key/value ``[T, N, D]`` to slots ``slot_mapping [T]``; the
    caches are NZ for ``'PA_NZ'`` (the default) and ND for ``'Norm'`` / None."""
    if compress_lens is not None or compress_seq_offsets is not None or seq_lens is not None or key.dim() == 4:
        raise NotImplementedError("npu_scatter_pa_kv_cache: scenario 2 (compress_lens, compress_seq_offsets, "
                                  "seq_lens, 4-D key/value) is not implemented")  # fmt: skip
    if cache_mode not in (None, "Norm", "PA_NZ"):
        raise ValueError(f"npu_scatter_pa_kv_cache: cache_mode={cache_mode!r} is not 'PA_NZ', 'Norm' or None")
    if key.dim() != 3 or value.dim() != 3 or key.shape[:2] != value.shape[:2]:
        raise ValueError(f"npu_scatter_pa_kv_cache: key {tuple(key.shape)} and value {tuple(value.shape)} must be "
                         "[tokens, heads, head_size] with the same tokens and heads")  # fmt: skip
    nz = cache_mode == "PA_NZ"
    for name, tokens, cache in (("key", key, key_cache), ("value", value, value_cache)):
        _write(slot_rows(cache, tokens.shape[1] * tokens.shape[2], nz=nz, name=f"{name}_cache"), slot_mapping,
               tokens, name)  # fmt: skip


KV_RMSNORM_CACHE_MODES = ("Norm", "PA", "PA_BNSD", "PA_NZ", "PA_BLK_BNSD", "PA_BLK_NZ")


def _kv_slots(index: torch.Tensor, cache_mode: str, batch: int, seq: int, block_size: int) -> torch.Tensor:
    """The slot of every (batch, position) token, in batch-major order."""
    if cache_mode.startswith("PA_BLK"):
        blocks = -(-seq // block_size)
        starts = index.reshape(batch, blocks).long()
        positions = torch.arange(seq, device=index.device)
        return (starts[:, positions // block_size] + positions % block_size).reshape(-1)
    return index.reshape(-1).long()


@torch.no_grad()
def kv_rmsnorm_rope_cache(kv: torch.Tensor, gamma: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                          index: torch.Tensor, k_cache: torch.Tensor, ckv_cache: torch.Tensor, *,
                          epsilon: float = 1e-5, cache_mode: str = "Norm") -> tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
    """``npu_kv_rmsnorm_rope_cache`` (unquantised): ``kv [B, 1, S, Dc + Dr]`` splits into the latent part
    (RMSNorm with ``gamma``) and the rope part (``npu_interleave_rope``); both are written to their caches
    and returned as ``(k_rope [B, 1, S, Dr], c_kv [B, 1, S, Dc])``.

    ``'Norm'``: caches ``[B, 1, cache_len, D]``, ``index [B, S]`` = positions. Paged modes: slot per token
    (``'PA_BLK_*'``: start slot per block); ``'PA_NZ'`` / ``'PA_BLK_NZ'`` store the caches NZ.
    """
    op = "npu_kv_rmsnorm_rope_cache"
    if cache_mode not in KV_RMSNORM_CACHE_MODES:
        raise ValueError(f"{op}: cache_mode={cache_mode!r} is not one of {KV_RMSNORM_CACHE_MODES}")
    if kv.dim() != 4 or gamma.dim() != 1 or cos.dim() != 4:
        raise ValueError(f"{op}: kv {tuple(kv.shape)} and cos {tuple(cos.shape)} must be 4-D and gamma 1-D")
    latent = gamma.shape[0]
    rope = kv.shape[-1] - latent
    batch, heads, seq = kv.shape[:3]
    c_kv, _ = rms_norm(kv[..., :latent], gamma, epsilon)
    k_rope = interleave_rope(kv[..., latent:].contiguous(), cos.reshape(batch, 1, seq, rope),
                             sin.reshape(batch, 1, seq, rope))  # fmt: skip
    if cache_mode == "Norm":
        positions = index.reshape(batch, seq).long()
        for b in range(batch):
            k_cache[b, :, positions[b]] = k_rope[b].to(k_cache.dtype)
            ckv_cache[b, :, positions[b]] = c_kv[b].to(ckv_cache.dtype)
        return k_rope, c_kv
    nz = cache_mode.endswith("NZ")
    for cache, values, name in ((k_cache, k_rope, "k_cache"), (ckv_cache, c_kv, "ckv_cache")):
        rows = slot_rows(cache, heads * values.shape[-1], nz=nz, name=name)
        slots = _kv_slots(index, cache_mode, batch, seq, rows.block_size)
        _write(rows, slots, values.transpose(1, 2), name)
    return k_rope, c_kv


@torch.no_grad()
def gather_pa_kv_cache(key_cache: torch.Tensor, value_cache: torch.Tensor, block_tables: torch.Tensor,
                       seq_lens: torch.Tensor, key: torch.Tensor, value: torch.Tensor, *,
                       seq_offset: torch.Tensor | None = None, is_seq_lens_cumsum: bool = False) -> None:  # fmt: skip
    """``npu_gather_pa_kv_cache``: the tokens ``[seq_offset[b], seq_offset[b] + len_b)`` of each sequence,
    read through ``block_tables[b]`` from ND caches, concatenated into ``key`` and ``value`` in place
    (``docs/semantics.md#sem-d13``)."""
    lengths: Sequence[int] = seq_lens.reshape(-1).tolist()
    if is_seq_lens_cumsum:
        lengths = [end - start for start, end in zip([0, *lengths[:-1]], lengths)]
    offsets = [0] * len(lengths) if seq_offset is None else seq_offset.reshape(-1).tolist()
    for cache, out, name in ((key_cache, key, "key_cache"), (value_cache, value, "value_cache")):
        features = out[0].numel() if out.dim() > 1 else 1
        rows = slot_rows(cache, features, nz=False, name=name)
        slots = []
        for b, (length, start) in enumerate(zip(lengths, offsets)):
            positions = torch.arange(int(start), int(start) + int(length))
            blocks = block_tables[b].long()[positions // rows.block_size]
            slots.append(blocks * rows.block_size + positions % rows.block_size)
        flat = torch.cat(slots) if slots else torch.zeros(0, dtype=torch.long)
        if flat.numel() > out.shape[0]:
            raise ValueError(f"npu_gather_pa_kv_cache: {flat.numel()} tokens do not fit {name}'s output of "
                             f"{out.shape[0]} rows")  # fmt: skip
        out[: flat.numel()] = rows.read(flat).view(flat.numel(), *out.shape[1:]).to(out.dtype)
