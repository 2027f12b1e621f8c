"""Rotary position embedding: ``npu_rotary_mul``, ``npu_apply_rotary_pos_emb``, ``npu_interleave_rope``
(``docs/semantics.md#sem-12``).

``out = x * cos + rotate(x) * sin`` in float32 (float64 for float64 inputs), rounded to x's dtype.
``rotate`` is ``half`` (``[-x2, x1]`` of the two halves of the last axis), ``interleave`` (pairs
``(x[2i], x[2i+1]) -> (-x[2i+1], x[2i])``) or a matrix (``x @ rotate``). ``npu_interleave_rope`` first de-interleaves the last axis (even positions, then
odd ones) and then rotates by halves.
"""

from __future__ import annotations

import torch
from kvlint.runtime_probe.reference.dtypes import computed

ROPE_LAYOUTS = ("BSND", "BSH", "SBND", "BNSD", "TND")
"""``npu_apply_rotary_pos_emb``'s layouts; "BSH" is read as BSND, as the C++ does (its LAYOUT_BSND_BSH)."""


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    first, second = x.chunk(2, dim=-1)
    return torch.cat((-second, first), dim=-1)


def rotate_interleaved(x: torch.Tensor) -> torch.Tensor:
    even, odd = x[..., ::2], x[..., 1::2]
    return torch.stack((-odd, even), dim=-1).flatten(-2)


def _rotate(x: torch.Tensor, mode: str, op: str) -> torch.Tensor:
    if mode == "half":
        return rotate_half(x)
    if mode == "interleave":
        return rotate_interleaved(x)
    raise NotImplementedError(f"{op}: rotary_mode={mode!r} is not implemented (half, interleave)")


def _embed(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, rotated: torch.Tensor, op: str) -> torch.Tensor:
    try:
        return x * cos.to(x.dtype) + rotated * sin.to(x.dtype)
    except RuntimeError as error:
        raise ValueError(f"{op}: cos {tuple(cos.shape)} / sin {tuple(sin.shape)} do not broadcast to "
                         f"{tuple(x.shape)}") from error  # fmt: skip


def _check_even(x: torch.Tensor, op: str) -> None:
    if x.shape[-1] % 2:
        raise ValueError(f"{op}: the last axis ({x.shape[-1]}) must be even")


@torch.no_grad()
def rotary_mul(input: torch.Tensor, r1: torch.Tensor, r2: torch.Tensor, rotary_mode: str = "half",
               rotate: torch.Tensor | None = None) -> torch.Tensor:  # fmt: skip
    """``npu_rotary_mul``: ``input * r1 + rotate(input) * r2``."""
    op = "npu_rotary_mul"
    x = computed(input)
    if rotate is not None:
        rotated = x @ rotate.to(x.dtype)
    else:
        _check_even(x, op)
        rotated = _rotate(x, rotary_mode, op)
    return _embed(x, r1, r2, rotated, op).to(input.dtype)


@torch.no_grad()
def apply_rotary_pos_emb(query: torch.Tensor, key: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                         layout: str = "BSND", rotary_mode: str = "half") -> tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
    """``npu_apply_rotary_pos_emb``: rotates query and key **in place** and returns them (the device returns
    the very input tensors, although the schema does not say so)."""
    op = "npu_apply_rotary_pos_emb"
    if layout not in ROPE_LAYOUTS:
        raise ValueError(f"{op}: layout={layout!r} is not one of {ROPE_LAYOUTS}")
    rank = 3 if layout == "TND" else 4
    for name, tensor in (("query", query), ("key", key), ("cos", cos), ("sin", sin)):
        if tensor.dim() != rank:
            raise ValueError(f"{op}: {name} must be {rank}-D for layout {layout}, got {tuple(tensor.shape)}")
    if query.shape[-1] != key.shape[-1] or cos.shape[-1] != query.shape[-1]:
        raise NotImplementedError(f"{op}: cos/sin of head dim {cos.shape[-1]} rotating a head dim of "
                                  f"{query.shape[-1]} (partial rotation) is not implemented")  # fmt: skip
    for tensor in (query, key):
        x = tensor.float()
        _check_even(x, op)
        tensor.copy_(_embed(x, cos, sin, _rotate(x, rotary_mode, op), op))
    return query, key


@torch.no_grad()
def interleave_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """``npu_interleave_rope``: de-interleave the last axis (``reshape(..., D/2, 2).transpose(-1, -2)``), then
    rotate by halves."""
    op = "npu_interleave_rope"
    if x.dim() != 4:
        raise ValueError(f"{op}: x must be 4-D (B, N, S, D), got {tuple(x.shape)}")
    _check_even(x, op)
    q = x.float().unflatten(-1, (-1, 2)).transpose(-1, -2).flatten(-2)
    return _embed(q, cos, sin, rotate_half(q), op).to(x.dtype)
