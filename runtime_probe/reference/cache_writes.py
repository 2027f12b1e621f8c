"""Reference of the KV-cache write operators ``scatter_update(_)`` and ``npu_scatter_nd_update(_)``.

The out-of-place variants return a modified copy and leave ``input`` untouched (the device clones it);
the ``_`` variants write ``input`` in place and return it. Indices are not range-checked on the device;
here torch's indexing raises on out-of-range indices. Facts: docs/operators/kv_cache_writes.md#kvc-c1 to #kvc-c10.
"""

from __future__ import annotations

import torch


def scatter_update_(input: torch.Tensor, indices: torch.Tensor, updates: torch.Tensor, axis: int) -> torch.Tensor:
    """For each batch i (dim 0), write ``updates[i]`` along ``axis`` starting at position ``indices[i]``.

    E.g. axis=-2: ``input[i][j][indices[i] + k][l] = updates[i][j][k][l]``. Only 1-D indices of length
    ``input.shape[0]`` are documented; other index shapes raise NotImplementedError.
    """
    if indices.dim() != 1 or indices.shape[0] != input.shape[0]:
        raise NotImplementedError(
            f"scatter_update: indices of shape {tuple(indices.shape)} (only 1-D indices with one start "
            f"position per batch, length {input.shape[0]}, are implemented)"
        )
    dim = axis % input.dim()
    if dim == 0 or updates.dim() != input.dim():
        raise ValueError(
            f"scatter_update: axis={axis} must not be the batch axis and updates must have rank {input.dim()}"
        )
    length = updates.shape[dim]
    for batch, start in enumerate(indices.tolist()):
        if start < 0 or start + length > input.shape[dim]:
            raise IndexError(f"scatter_update: indices[{batch}]={start} + {length} exceeds size {input.shape[dim]}")
        input[batch].narrow(dim - 1, start, length).copy_(updates[batch])
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
