"""Which (query row i, key column j) pairs of a batch take part: sparse_mode geometry and user masks.

Every mode is a band ``lower <= j - i <= upper`` (with i, j local to the batch and computed from the
actual lengths S1, S2), intersected with the user mask in modes 0 and 1. The band lets the kernel skip key
blocks and build a tile's mask from two aranges instead of materialising [S1, S2].
Polarity: True/1 in ``atten_mask`` means masked out. Facts: docs/semantics.md#sem-4.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import torch

UNBOUNDED = 2**62
"""Larger than any sequence: a band edge that never excludes anything."""
TEMPLATE_SIZE = 2048
"""Side of the compressed causal mask that sparse modes 2, 3 and 4 require."""


@dataclass(frozen=True)
class Band:
    """Allowed iff ``lower <= j - i <= upper``."""

    lower: int
    upper: int

    def key_range(self, row_start: int, row_stop: int, kv_len: int) -> tuple[int, int]:
        """The keys [start, stop) that any of the rows [row_start, row_stop) may see."""
        start = max(0, row_start + self.lower)
        stop = min(kv_len, row_stop - 1 + self.upper + 1)
        return start, max(start, stop)

    def covers(self, rows: tuple[int, int], cols: tuple[int, int]) -> bool:
        """True when every pair of the tile lies inside the band."""
        return cols[0] - (rows[1] - 1) >= self.lower and (cols[1] - 1) - rows[0] <= self.upper


def check_sparse_mode(sparse_mode: int) -> None:
    """Modes 0-4 are implemented; 9 (tree mask) is not; 5-8 exist only in npu_fusion_attention."""
    if sparse_mode == 9:
        raise NotImplementedError("sparse_mode=9 (tree mask) is not implemented")
    if sparse_mode not in range(5):
        raise ValueError(f"sparse_mode={sparse_mode} is not supported by the inference attention operators (0-4)")


def band(sparse_mode: int, pre_tokens: int, next_tokens: int, q_len: int, kv_len: int, has_mask: bool) -> Band:
    """Band of one batch (mode already checked). Modes 3 and 4 are anchored at the bottom-right corner.

    Mode 0 without a mask ignores pre/next; with a mask the band is ANDed with it (docs/semantics.md#sem-d3).
    Mode 4 with ``pre_tokens=W, next_tokens=0`` admits W + 1 keys, as the CANN golden does
    (docs/semantics.md#sem-d1).
    """
    shift = kv_len - q_len
    if sparse_mode == 0:
        return Band(-pre_tokens, next_tokens) if has_mask else Band(-UNBOUNDED, UNBOUNDED)
    if sparse_mode == 1:
        return Band(-UNBOUNDED, UNBOUNDED)
    if sparse_mode == 2:
        return Band(-UNBOUNDED, 0)
    if sparse_mode == 3:
        return Band(-UNBOUNDED, shift)
    return Band(shift - pre_tokens, shift + next_tokens)


def user_masks(mask: torch.Tensor, single_token: bool, heads: int | None = None) -> torch.Tensor:
    """Normalise an ``atten_mask`` of modes 0/1 to a boolean (B or 1, S1, S2) view, True = masked.

    Accepted: (S1,S2), (B|1,S1,S2), (B|1,1,S1,S2); with a single query token also (B,S2), (B,1,S2). With
    ``heads`` (npu_fusion_attention's BNSS mask) also (B|1, heads, S1, S2), kept as a mask per head.
    """
    if mask.dtype not in (torch.bool, torch.int8, torch.uint8):
        raise ValueError(f"atten_mask must be bool, int8 or uint8, got {mask.dtype}")
    mask = mask != 0
    if mask.dim() == 2:
        return mask.unsqueeze(1) if single_token else mask.unsqueeze(0)
    if mask.dim() == 3:
        return mask
    if mask.dim() == 4 and mask.shape[1] == 1:
        return mask.squeeze(1)
    if mask.dim() == 4 and heads is not None and mask.shape[1] == heads:
        return mask
    raise ValueError(f"atten_mask of shape {tuple(mask.shape)} is not an accepted mask shape")


_verified_template: tuple[object, ...] | None = None
"""Identity (address, version, dtype, device, strides) of the last template found correct: a model passes
the same template to every layer and step, and comparing 4M elements each time would dominate decode."""


def check_template(mask: torch.Tensor | None, sparse_mode: int) -> None:
    """Modes 2-4 need the 2048x2048 ``triu(ones, 1)`` template; its content is never indexed."""
    if mask is None:
        raise ValueError(f"sparse_mode={sparse_mode} requires the 2048x2048 atten_mask template")
    leading_ones = mask.dim() in (3, 4) and all(size == 1 for size in mask.shape[:-2])
    square = mask.reshape(mask.shape[-2:]) if leading_ones else mask
    if square.shape != (TEMPLATE_SIZE, TEMPLATE_SIZE):
        raise ValueError(
            f"sparse_mode={sparse_mode} requires an atten_mask of shape (2048, 2048), (1, 2048, 2048) "
            f"or (1, 1, 2048, 2048), got {tuple(mask.shape)}"
        )
    global _verified_template
    version = -1 if square.is_inference() else square._version  # inference tensors have no version counter
    identity = (square.data_ptr(), version, square.dtype, square.device, square.stride())
    if identity == _verified_template:
        return
    expected = torch.ones(TEMPLATE_SIZE, TEMPLATE_SIZE, dtype=torch.bool, device=mask.device).triu(1)
    if torch.equal(square != 0, expected):
        _verified_template = identity
    else:
        warnings.warn(
            f"sparse_mode={sparse_mode}: atten_mask is not triu(ones(2048, 2048), diagonal=1); the device "
            "expects that template and the geometry is computed from the lengths",
            stacklevel=4,
        )


def tile_allowed(
    band_: Band, rows: tuple[int, int], cols: tuple[int, int], mask: torch.Tensor | None, device: torch.device
) -> torch.Tensor | None:
    """Boolean (rows, cols) tile of allowed pairs ((heads, rows, cols) for a mask per head), or None when the
    whole tile is allowed."""
    if mask is None and band_.covers(rows, cols):
        return None
    i = torch.arange(rows[0], rows[1], device=device).unsqueeze(1)
    j = torch.arange(cols[0], cols[1], device=device).unsqueeze(0)
    allowed = ((j - i) >= band_.lower) & ((j - i) <= band_.upper)
    if mask is not None:
        allowed = allowed & ~mask[..., rows[0] : rows[1], cols[0] : cols[1]].to(device)
    return allowed
