"""Internal formats: ``npu_format_cast(_)`` and ``get_npu_format`` (``docs/operators/format.md``).

On the device a format is how a tensor's storage is laid out (ND, or FRACTAL_NZ for matmul weights and
paged caches); a tensor's values do not change with it. On the CPU the data is never moved: a cast records
the format of the tensor's storage, ``get_npu_format`` reports it, and the operators that read a cache
differently when it is NZ (``_npu_reshape_and_cache``, the ATB paged attention) ask here. The cast itself
returns a copy (``npu_format_cast``) or
the tensor (``npu_format_cast_``). A storage that is freed and reallocated does not keep the format.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Callable
from typing import Any

import torch
from kvlint.runtime_probe.reference.paged import nz_c0
from torch.multiprocessing.reductions import StorageWeakRef

from kvlint.catalogue import operators

Kernels = tuple[Callable[..., Any], Callable[..., Any]]


class Format(enum.IntEnum):
    """``torch_npu.Format``: the ACL format numbers programs pass to ``npu_format_cast``."""

    UNDEFINED = -1
    NCHW = 0
    NHWC = 1
    ND = 2
    NC1HWC0 = 3
    FRACTAL_Z = 4
    NC1HWC0_C04 = 12
    HWCN = 16
    NDHWC = 27
    FRACTAL_NZ = 29
    NCDHW = 30
    NDC1HWC0 = 32
    FRACTAL_Z_3D = 33
    NC = 35
    NCL = 47


_formats: dict[int, tuple[StorageWeakRef, int]] = {}
"""Storage address -> (a weak reference to that storage, its format)."""
FUNCTIONAL_FORM = {"npu_format_cast_": "npu_format_cast"}
"""The in-place cast, under tracing: the out-of-place cast, then ``copy_``."""


def recorded(tensor: torch.Tensor) -> int | None:
    """The format recorded for ``tensor``'s storage, or None when no cast recorded one."""
    storage = tensor.untyped_storage()
    entry = _formats.get(storage.data_ptr())
    if entry is None or entry[0].expired() or entry[0].cdata != StorageWeakRef(storage).cdata:
        return None
    return entry[1]


def format_of(tensor: torch.Tensor) -> int:
    """The recorded format of ``tensor``'s storage; ND when none was recorded."""
    found = recorded(tensor)
    return int(Format.ND) if found is None else found


def _record(tensor: torch.Tensor, acl_format: int) -> None:
    if acl_format not in Format._value2member_map_:
        raise ValueError(f"npu_format_cast: acl_format={acl_format} is not a torch_npu.Format value")
    storage = tensor.untyped_storage()
    _formats[storage.data_ptr()] = (StorageWeakRef(storage), int(acl_format))
    for address in [a for a, (ref, _) in _formats.items() if ref.expired()]:
        del _formats[address]


def cache_is_nz(cache: torch.Tensor, features: int) -> bool:
    """Whether a paged cache of ``features`` elements per token is NZ: its recorded format, or, when none is
    recorded, its shape. Under ``torch.compile`` an operator that writes a cache receives a copy whose format
    is not recorded; ``[blocks, features / c0, block_size, c0]`` is then NZ, unless the shape also reads as the
    ND ``[blocks, block_size, heads, head_dim]``."""
    found = recorded(cache)
    if found is not None:
        return found == Format.FRACTAL_NZ
    c0 = nz_c0(cache.dtype)
    nz_shaped = cache.dim() == 4 and cache.shape[-1] == c0 and cache.shape[1] * c0 == features
    nd_shaped = cache.dim() >= 3 and math.prod(cache.shape[2:]) == features
    return nz_shaped and not nd_shaped


def both_nz(key_cache: torch.Tensor, value_cache: torch.Tensor, key_features: int, value_features: int) -> bool:
    """True when both caches are FRACTAL_NZ (the ATB operators use their NZ configuration only then)."""
    return cache_is_nz(key_cache, key_features) and cache_is_nz(value_cache, value_features)


def _check_dtypes(customize_dtype: int | None, input_dtype: int | None) -> None:
    for name, value in (("customize_dtype", customize_dtype), ("input_dtype", input_dtype)):
        if value is not None:
            raise NotImplementedError(f"npu_format_cast: argument {name!r} is not implemented by the kvlint emulator")


def npu_format_cast(input: torch.Tensor, acl_format: int, *, customize_dtype: int | None = None,
                    input_dtype: int | None = None) -> torch.Tensor:  # fmt: skip
    _check_dtypes(customize_dtype, input_dtype)
    result = input.clone(memory_format=torch.contiguous_format)
    _record(result, acl_format)
    return result


def npu_format_cast_tensor(input: torch.Tensor, dst: torch.Tensor, *, customize_dtype: int | None = None,
                           input_dtype: int | None = None) -> torch.Tensor:  # fmt: skip
    """``npu_format_cast.Tensor``: cast to ``dst``'s format."""
    return npu_format_cast(input, format_of(dst), customize_dtype=customize_dtype, input_dtype=input_dtype)


def npu_format_cast_(input: torch.Tensor, src: torch.Tensor, *, customize_dtype: int | None = None,
                     input_dtype: int | None = None) -> torch.Tensor:  # fmt: skip
    """``npu_format_cast_``: give ``input`` ``src``'s format, in place."""
    _check_dtypes(customize_dtype, input_dtype)
    _record(input, format_of(src))
    return input


def npu_format_cast_acl(input: torch.Tensor, acl_format: int, *, customize_dtype: int | None = None,
                        input_dtype: int | None = None) -> torch.Tensor:  # fmt: skip
    """``npu_format_cast_.acl_format``: give ``input`` the format ``acl_format``, in place."""
    _check_dtypes(customize_dtype, input_dtype)
    _record(input, acl_format)
    return input


def get_npu_format(input: torch.Tensor) -> int:
    return format_of(input)


def _fake_get_npu_format(input: torch.Tensor) -> Any:
    """Under tracing the format is a value known only at run time."""
    return torch.library.get_ctx().new_dynamic_size()


KERNELS: dict[tuple[str, str], Kernels] = {
    ("npu_format_cast", "default"): (npu_format_cast, lambda input, acl_format, **kw: torch.empty_like(input)),
    ("npu_format_cast", "Tensor"): (npu_format_cast_tensor, lambda input, dst, **kw: torch.empty_like(input)),
    ("npu_format_cast_", "default"): (npu_format_cast_, lambda input, src, **kw: input),
    ("npu_format_cast_", "acl_format"): (npu_format_cast_acl, lambda input, acl_format, **kw: input),
    ("get_npu_format", "default"): (get_npu_format, _fake_get_npu_format),
}


def kernels(op: operators.Operator) -> Kernels | None:
    return KERNELS.get((op.name, op.overload))
