"""dtype arguments given as integers: a schema's ``int? out_dtype`` receives the ``c10::ScalarType`` number
of the ``torch.dtype`` the caller passed (``torch.bfloat16`` arrives as 15); the compute dtype of the
element-wise references."""

from __future__ import annotations

import torch

SCALAR_TYPES: dict[int, torch.dtype] = {
    0: torch.uint8, 1: torch.int8, 2: torch.int16, 3: torch.int32, 4: torch.int64, 5: torch.float16,
    6: torch.float32, 7: torch.float64, 11: torch.bool, 15: torch.bfloat16, 23: torch.float8_e5m2,
    24: torch.float8_e4m3fn,
}  # fmt: skip
"""The ``c10::ScalarType`` numbers of the dtypes an inference operator can return."""


def dtype_of(value: int | torch.dtype | None, name: str) -> torch.dtype | None:
    """The dtype an ``int?`` dtype argument names, or None."""
    if value is None or isinstance(value, torch.dtype):
        return value
    if value not in SCALAR_TYPES:
        raise NotImplementedError(f"{name}={value} is not a dtype the kvlint reference produces")
    return SCALAR_TYPES[value]


def computed(x: torch.Tensor) -> torch.Tensor:
    """``x`` in the references' compute dtype: float32, float64 for a float64 input (the precise mode, in
    which gradients are checked)."""
    return x.double() if x.dtype == torch.float64 else x.float()
