"""The KV-cache write operators of the emulator: ``scatter_update(_)`` and ``npu_scatter_nd_update(_)``.

The in-place forms keep a direct CPU kernel for eager calls; under tracing they decompose into the
out-of-place twin plus ``copy_`` (``FUNCTIONAL_FORM``), because torch.compile cannot functionalise a custom
operator that returns ``Tensor(a!)``.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from kvlint.runtime_probe.reference import operators as reference

from kvlint.catalogue import operators

REFERENCES: dict[str, Callable[..., object]] = {
    "scatter_update": reference.scatter_update,
    "scatter_update_": reference.scatter_update_,
    "npu_scatter_nd_update": reference.npu_scatter_nd_update,
    "npu_scatter_nd_update_": reference.npu_scatter_nd_update_,
}
FUNCTIONAL_FORM = {"scatter_update_": "scatter_update", "npu_scatter_nd_update_": "npu_scatter_nd_update"}
"""In-place operator -> its out-of-place twin."""


def kernels(op: operators.Operator) -> tuple[Callable[..., object], Callable[..., object]] | None:
    """(CPU kernel, fake kernel) of one cache-write overload, or None for another operator."""
    function = REFERENCES.get(op.name)
    if function is None:
        return None
    return function, lambda input, indices, updates, *axis: torch.empty_like(input)


def decomposed(functional: str, namespace: str) -> Callable[..., torch.Tensor]:
    """The in-place kernel used under tracing: the out-of-place twin, then ``copy_``."""

    def kernel(input: torch.Tensor, *args: object) -> torch.Tensor:
        return input.copy_(getattr(getattr(torch.ops, namespace), functional)(input, *args))

    return kernel
