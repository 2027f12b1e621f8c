"""The argument signature of a raw operator call: what the signature checks depend on, cheap to compute.

A tensor contributes its type, dtype, shape and device; a list or tuple its type and length (and its
tensors' signatures), not its values, so the KV lengths of successive decode steps share one signature;
any other argument (layout, modes, head counts, scale, block size, None) contributes its value. The
keyword names are part of it. A call site's first call with a signature gets every check
(``checks.SIGNATURE_CHECKS`` and ``checks.VALUE_CHECKS``); later calls with it only the sampled ones.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from operator import attrgetter, itemgetter

import torch

Signature = tuple[Hashable, ...]


_VALUES = frozenset({int, float, str, bool, type(None)})
_TENSOR = attrgetter("dtype", "shape", "device")
"""A tensor's part of a signature after its type (one C call)."""
Picker = Callable[[tuple[object, ...]], tuple[object, ...]]
Plan = tuple[Picker | None, Picker | None, Picker | None]


def _sequence(value: Sequence[object]) -> Hashable:
    """A list or tuple: its length, and its tensors' signatures (none for a list of numbers: one C call)."""
    if _VALUES.issuperset(map(type, value)):
        return len(value)
    return (len(value), tuple((type(item), *_TENSOR(item)) for item in value if isinstance(item, torch.Tensor)))


def _picker(indices: list[int]) -> Picker | None:
    """The values at ``indices``, always as a tuple (``itemgetter`` of one index returns the value itself)."""
    if not indices:
        return None
    return itemgetter(*indices) if len(indices) > 1 else itemgetter(slice(indices[0], indices[0] + 1))


_PLANS: dict[tuple[type, ...], Plan] = {}
"""The argument types of a call -> which of its values are tensors, lists or tuples, and plain values: computed
once per combination of types, so that describing a call is a handful of C calls, not a loop in Python."""
MAX_PLANS = 1024


def _plan(kinds: tuple[type, ...]) -> Plan:
    tensors = [index for index, kind in enumerate(kinds) if issubclass(kind, torch.Tensor)]
    sequences = [index for index, kind in enumerate(kinds) if kind is list or kind is tuple]
    values = [index for index in range(len(kinds)) if index not in tensors and index not in sequences]
    plan = (_picker(values), _picker(tensors), _picker(sequences))
    if len(_PLANS) < MAX_PLANS:
        _PLANS[kinds] = plan
    return plan


def signature(args: tuple[object, ...], kwargs: dict[str, object]) -> Signature:
    """The call's signature (unhashable when an argument is: such a call is looked up, fails, and is checked).
    It runs on every probed call: the types of the values pick the plan, the plan picks the values."""
    values = (*args, *kwargs.values())
    kinds = tuple(map(type, values))
    plan = _PLANS.get(kinds) or _plan(kinds)
    plain, tensors, sequences = plan
    return (len(args), tuple(kwargs), kinds, plain and plain(values),
            tensors and tuple(map(_TENSOR, tensors(values))),
            sequences and tuple(map(_sequence, sequences(values))))


_PLAIN = (torch.Tensor, torch.nn.Parameter)


def plain(value: object) -> bool:
    """A real tensor with storage: not a subclass such as FakeTensor, not on the meta device."""
    return type(value) in _PLAIN and not value.is_meta  # type: ignore[union-attr]
