"""RMSNorm: ``npu_rms_norm`` and ``npu_add_rms_norm`` (``docs/semantics.md#sem-11``).

``y = x / sqrt(mean(x**2) + epsilon) * gamma`` over the trailing ``gamma.dim()`` axes, computed in float32
(float64 for float64 inputs). ``rstd`` (the reciprocal RMS) is float32 (float64) with the normalised axes kept
as 1s.
"""

from __future__ import annotations

import torch
from kvlint.runtime_probe.reference.dtypes import computed


def _normalised_axes(x: torch.Tensor, gamma: torch.Tensor, op: str) -> tuple[int, ...]:
    if gamma.dim() > x.dim() or x.shape[x.dim() - gamma.dim() :] != gamma.shape:
        raise ValueError(f"{op}: gamma {tuple(gamma.shape)} must match the trailing axes of {tuple(x.shape)}")
    return tuple(range(x.dim() - gamma.dim(), x.dim()))


def _rms(x: torch.Tensor, gamma: torch.Tensor, epsilon: float, op: str) -> tuple[torch.Tensor, torch.Tensor]:
    """(normalised x times gamma, rstd), both in x's (compute) dtype."""
    axes = _normalised_axes(x, gamma, op)
    rstd = torch.rsqrt(x.pow(2).mean(dim=axes, keepdim=True) + epsilon)
    return x * rstd * gamma.to(x.dtype), rstd


@torch.no_grad()
def rms_norm(input: torch.Tensor, gamma: torch.Tensor, epsilon: float = 1e-6) -> tuple[torch.Tensor, torch.Tensor]:
    """``npu_rms_norm`` -> (y in the input's dtype, rstd float32)."""
    y, rstd = _rms(computed(input), gamma, epsilon, "npu_rms_norm")
    return y.to(input.dtype), rstd


@torch.no_grad()
def add_rms_norm(x1: torch.Tensor, x2: torch.Tensor, gamma: torch.Tensor,
                 epsilon: float = 1e-6) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:  # fmt: skip
    """``npu_add_rms_norm`` -> (RMSNorm(x1 + x2), rstd, x1 + x2): the sum is formed in float32 and normalised
    before it is rounded to x1's dtype (``docs/semantics.md#sem-d11``)."""
    if x1.shape != x2.shape:
        raise ValueError(f"npu_add_rms_norm: x1 {tuple(x1.shape)} and x2 {tuple(x2.shape)} differ")
    total = x1.float() + x2.float()
    y, rstd = _rms(total, gamma, epsilon, "npu_add_rms_norm")
    return y.to(x1.dtype), rstd, total.to(x1.dtype)
