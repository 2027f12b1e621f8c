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
    "npu_interleave_rope": (rope.interleave_rope, lambda x, *args, **kwargs: torch.empty_like(x)),
}

IN_PLACE: dict[str, Callable[..., Any]] = {"npu_apply_rotary_pos_emb": rope.apply_rotary_pos_emb}
"""Operators that write their inputs and return them although the schema does not say so. They are
registered as aten compositions only (``CompositeImplicitAutograd``, no CPU or fake kernel): eagerly the
call returns the very inputs, as on the device, and torch.compile sees the ``copy_`` into query and key.
With a kernel of their own, compiled graphs would call a custom operator returning its inputs, which
torch forbids (an error when ``CI`` is set)."""


def kernels(op: operators.Operator) -> Kernels | None:
    return KERNELS.get(op.name)
