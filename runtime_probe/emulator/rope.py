"""Rotary-embedding operators of the emulator: ``npu_rotary_mul``, ``npu_apply_rotary_pos_emb`` (which
rotates its query and key in place and returns them, as the device does) and ``npu_interleave_rope``.

Fake kernels give the meta kernels' outputs: tensors like the inputs.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from kvlint.runtime_probe.reference import rope

from kvlint.catalogue import operators

Kernels = tuple[Callable[..., Any], Callable[..., Any]]
KERNELS: dict[str, Kernels] = {
    "npu_rotary_mul": (rope.rotary_mul, lambda input, *args, **kwargs: torch.empty_like(input)),
    "npu_apply_rotary_pos_emb": (
        rope.apply_rotary_pos_emb,
        lambda query, key, *args, **kwargs: (torch.empty_like(query), torch.empty_like(key)),
    ),
    "npu_interleave_rope": (rope.interleave_rope, lambda x, *args, **kwargs: torch.empty_like(x)),
}


def kernels(op: operators.Operator) -> Kernels | None:
    return KERNELS.get(op.name)
