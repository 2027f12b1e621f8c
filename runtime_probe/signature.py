"""The argument signature of a raw operator call: what the signature checks depend on, cheap to compute.

A tensor contributes its type, dtype, shape and device; a list or tuple its type and length (and its
tensors' signatures), not its values, so the KV lengths of successive decode steps share one signature;
any other argument (layout, modes, head counts, scale, block size, None) contributes its value. The
keyword names are part of it. A call site's first call with a signature gets every check
(``checks.SIGNATURE_CHECKS`` and ``checks.VALUE_CHECKS``); later calls with it only the sampled ones.
"""

from __future__ import annotations

from collections.abc import Hashable

import torch

Signature = tuple[Hashable, ...]


_VALUES = frozenset({int, float, str, bool, type(None)})


def _describe(value: object) -> Hashable:
    kind = type(value)
    if kind in _VALUES:
        return value  # type: ignore[return-value]
    if isinstance(value, torch.Tensor):
        return (kind, value.dtype, value.shape, value.device)
    if kind is list or kind is tuple:
        tensors = tuple(_describe(item) for item in value if isinstance(item, torch.Tensor))  # type: ignore[attr-defined]
        return (kind, len(value), tensors)  # type: ignore[arg-type]
    return value  # type: ignore[return-value]


def signature(args: tuple[object, ...], kwargs: dict[str, object]) -> Signature:
    """The call's signature (unhashable when an argument is: such a call is looked up, fails, and is checked)."""
    return (tuple(map(_describe, args)), tuple(kwargs), tuple(map(_describe, kwargs.values())))


def plain(value: object) -> bool:
    """A real tensor with storage: not a subclass such as FakeTensor, not on the meta device."""
    return type(value) in (torch.Tensor, torch.nn.Parameter) and not value.is_meta  # type: ignore[union-attr]
