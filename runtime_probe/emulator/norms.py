"""RMSNorm operators of the emulator: ``npu_rms_norm`` and ``npu_add_rms_norm``.

CPU kernels are the reference's (``kvlint.runtime_probe.reference.norms``); fake kernels give the meta
kernels' outputs: the input's shape and dtype, and a float32 ``rstd`` (float64 for a float64 input) with the
normalised axes kept as 1s.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from kvlint.runtime_probe.reference import norms

from kvlint.catalogue import operators

Kernels = tuple[Callable[..., Any], Callable[..., Any]]


def _rstd(x: torch.Tensor, gamma: torch.Tensor) -> torch.Tensor:
    kept = x.dim() - gamma.dim()
    dtype = torch.float64 if x.dtype == torch.float64 else torch.float32
    return x.new_empty([*x.shape[:kept], *([1] * gamma.dim())], dtype=dtype)


def _rms_norm_fake(input: torch.Tensor, gamma: torch.Tensor, epsilon: float = 1e-6) -> tuple[torch.Tensor, ...]:
    return torch.empty_like(input), _rstd(input, gamma)


def _add_rms_norm_fake(x1: torch.Tensor, x2: torch.Tensor, gamma: torch.Tensor,
                       epsilon: float = 1e-6) -> tuple[torch.Tensor, ...]:  # fmt: skip
    return torch.empty_like(x1), _rstd(x1, gamma), torch.empty_like(x1)


KERNELS: dict[str, Kernels] = {
    "npu_rms_norm": (norms.rms_norm, _rms_norm_fake),
    "npu_add_rms_norm": (norms.add_rms_norm, _add_rms_norm_fake),
}


def kernels(op: operators.Operator) -> Kernels | None:
    return KERNELS.get(op.name)
