"""``torch_npu.testing.common_utils``: the tensors, decorators and helpers torch_npu's operator tests import.

- ``create_common_tensor([numpy_dtype, npu_format, shape], min, max)`` gives ``(cpu_tensor, npu_tensor)``
  from numpy's generator (``np.random.uniform``), the NPU copy cast to ``npu_format`` unless it is -1. The
  emulator keeps the format as the tensor's recorded format (``formats``); the data stay in ND order;
- ``SupportedDevices([...])`` skips a test unless the device's name is in the list. The emulated device is
  an Atlas A2, ``Ascend910B``;
- ``SkipIfNotGteCANNVersion(v)`` skips unless the emulated CANN version (``CANN_VERSION``) is at least ``v``.

Not provided: ``get_cycles_per_ms`` (it times the device's spin kernel, which a CPU does not have) and the
performance baseline (``PerfBaseline``).
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import os
import re
import unittest
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np
import torch
from kvlint.runtime_probe.emulator import npu

CANN_VERSION = "8.5.0"
"""The CANN version the emulator reports to ``SkipIfNotGteCANNVersion``. The emulator follows op-plugin's
current documentation, which names no CANN release, so this is a recent one; a test that needs a newer CANN
is skipped, as on a device with CANN 8.5."""
PERF_TEST_ENABLE = os.getenv("PERF_TEST_ENABLE", "").lower() in ("1", "true", "on")
"""Read as torch_npu does; the emulator's TestCase never times tests against a baseline."""
DEVICE_NAME_PREFIXES = (("Ascend910_", 12), ("Ascend950", 9))
"""How ``SupportedDevices`` shortens the device name: 10 characters, 12 for Ascend910_93-style names and 9
for Ascend950 ones."""


def get_npu_device() -> str:
    """The test device, ``npu:<SET_NPU_DEVICE>`` (default ``npu:0``)."""
    return f"npu:{os.environ.get('SET_NPU_DEVICE', '0')}"


def set_npu_device() -> str:
    """Select the test device and return it."""
    device = get_npu_device()
    npu.set_device(device)
    return device


def _format_cast(tensor: torch.Tensor, npu_format: int) -> torch.Tensor:
    if npu_format == -1:
        return tensor
    return torch.ops.npu.npu_format_cast(tensor, npu_format)


def create_common_tensor(item: Sequence[Any], minValue: float, maxValue: float,  # noqa: N803
                         device: str | None = None) -> tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
    """``(cpu_tensor, npu_tensor)`` of uniform values in [minValue, maxValue) for
    ``item = [numpy_dtype, npu_format, shape]``; the NPU tensor is a copy in ``npu_format`` (-1: unchanged)."""
    dtype, npu_format, shape = item[0], item[1], item[2]
    values = np.random.uniform(minValue, maxValue, shape).astype(dtype)
    cpu_tensor = torch.from_numpy(values)
    npu_tensor = cpu_tensor.to(device or get_npu_device())
    return cpu_tensor, _format_cast(npu_tensor, npu_format)


def create_dtype_tensor(shape: Sequence[int], dtype: torch.dtype, npu_format: int = -1, min_value: int = -5,
                        max_value: int = 5, no_zero: bool = False,
                        device: str | None = None) -> tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
    """``(cpu_tensor, npu_tensor)``: random 0/1 for bool, uniform values for float16 and float32, and int32
    integers in [min_value, max_value] for any other dtype; ``no_zero`` turns zeros into ones. Only the
    floating-point tensors are cast to ``npu_format``."""
    if dtype == torch.bool:
        values = np.random.randint(0, 2, size=shape).astype(np.bool_)
    elif dtype in (torch.half, torch.float):
        numpy_dtype = np.float16 if dtype == torch.half else np.float32
        values = np.random.uniform(min_value, max_value, shape).astype(numpy_dtype)
    else:
        values = np.random.randint(min_value, max_value + 1, size=shape).astype(np.int32)
    if no_zero:
        values[values == 0] = 1
    cpu_tensor = torch.from_numpy(values)
    npu_tensor = cpu_tensor.to(device or get_npu_device())
    if dtype in (torch.half, torch.float):
        npu_tensor = _format_cast(npu_tensor, npu_format)
    return cpu_tensor, npu_tensor


def test_2args_broadcast(fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]) -> list[list[torch.Tensor]]:
    """``[cpu_result, npu_result]`` of ``fn`` on two float32 broadcast cases: (2,3,4,5) with (1,1,1) and
    (2,3,4,5) with (4,5)."""
    results = []
    for first_shape, second_shape in (((2, 3, 4, 5), (1, 1, 1)), ((2, 3, 4, 5), (4, 5))):
        cpu_first = torch.from_numpy(np.random.uniform(-10, 10, first_shape).astype(np.float32))
        cpu_second = torch.from_numpy(np.random.uniform(-10, 10, second_shape).astype(np.float32))
        npu_first, npu_second = cpu_first.to(get_npu_device()), cpu_second.to(get_npu_device())
        results.append([fn(cpu_first, cpu_second), fn(npu_first, npu_second).cpu()])
    return results


test_2args_broadcast.__test__ = False  # a helper named test_*: not a test for pytest to collect


def check_operators_in_prof(expected_operators: list[str], prof: Any,
                            unexpected_operators: list[str] | None = None) -> bool | None:  # fmt: skip
    """Whether the profile shows every expected operator and none of the unexpected ones (keys lose a
    ``cached_`` prefix). Expected operators are removed from the list as they are found; an empty profile
    gives None."""
    unexpected = set(unexpected_operators or [])
    events = prof.key_averages()
    if not events:
        print("check_operators_in_prof: the profile is empty")
        return None
    for event in events:
        key = event.key[len("cached_"):] if event.key.startswith("cached_") else event.key
        if key in unexpected:
            print(f"check_operators_in_prof: unexpected operator {key} in the profile")
            return False
        if key in expected_operators:
            expected_operators.remove(key)
        if not expected_operators:
            return True
    return False


@contextlib.contextmanager
def freeze_rng_state() -> Iterator[None]:
    """Restore torch's CPU generator state after the block."""
    state = torch.get_rng_state()
    try:
        yield
    finally:
        torch.set_rng_state(state)


def iter_indices(tensor: torch.Tensor) -> Iterator[tuple[int, ...]] | range:
    """Every index of ``tensor``: a ``range`` for a 1-D tensor, index tuples otherwise (one empty tuple for a
    0-d tensor)."""
    if tensor.dim() == 1:
        return range(tensor.size(0))
    return itertools.product(*(range(size) for size in tensor.size()))


def is_iterable(obj: object) -> bool:
    try:
        iter(obj)  # type: ignore[call-overload]
    except TypeError:
        return False
    return True


def _short_device_name() -> str:
    name = npu.get_device_name(0)
    for prefix, length in DEVICE_NAME_PREFIXES:
        if name.startswith(prefix):
            return name[:length]
    return name[:10]


def SupportedDevices(devices: Sequence[str]) -> Callable[[Callable[..., Any]], Callable[..., Any]]:  # noqa: N802
    """Run the test only on the listed devices (``['Ascend910B', 'Ascend910_93']``); skip it elsewhere."""

    def decorator(function: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(function)
        def test(*args: Any, **kwargs: Any) -> Any:
            device = _short_device_name()
            if device not in devices:
                raise unittest.SkipTest(f"the device {device} is not one of {list(devices)}")
            return function(*args, **kwargs)

        return test

    return decorator


def _version_key(version: str) -> tuple[tuple[int, int], ...]:
    """A comparable key of a CANN version such as ``8.3.RC1``, ``8.5.0`` or ``9.0.0.alpha001``: each part a
    number, an RCn (below the release of the same number: 8.3.RC1 < 8.3.0) or another word (below both)."""
    key = []
    for part in version.split("."):
        if part.isdigit():
            key.append((2, int(part)))
        elif re.fullmatch(r"RC\d+", part, re.IGNORECASE):
            key.append((1, int(part[2:])))
        else:
            key.append((0, 0))
    return tuple(key)


def is_gte_cann_version(version: str, module: str = "CANN") -> bool:
    """Whether the emulated CANN (every module has its version) is at least ``version``."""
    return _version_key(CANN_VERSION) >= _version_key(version)


def SkipIfNotGteCANNVersion(base_version: str, module: str = "CANN") -> Callable[[Callable[..., Any]], Callable[..., Any]]:  # noqa: N802,E501
    """Skip the test unless CANN (``module``) is at least ``base_version``."""

    def decorator(function: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(function)
        def test(*args: Any, **kwargs: Any) -> Any:
            if not is_gte_cann_version(base_version, module):
                raise unittest.SkipTest(f"needs {module} >= {base_version}; the kvlint emulator reports "
                                        f"{CANN_VERSION}")  # fmt: skip
            return function(*args, **kwargs)

        return test

    return decorator


def SkipIfNoLapack(function: Callable[..., Any]) -> Callable[..., Any]:  # noqa: N802
    """Skip the test when torch was built without LAPACK."""

    @functools.wraps(function)
    def test(*args: Any, **kwargs: Any) -> Any:
        if not torch._C.has_lapack:
            raise unittest.SkipTest("PyTorch was compiled without LAPACK")
        return function(*args, **kwargs)

    return test


def _create_scaling_models_optimizers(device: str = "npu", optimizer_ctor: type = torch.optim.SGD,
                                      optimizer_kwargs: dict[str, Any] | None = None) -> tuple[Any, ...]:  # fmt: skip
    """Two identical models (two Linear(8, 8)) on ``device`` and an optimizer for each, lr 1.0: one for the
    scaled run, one for the control run."""
    control = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Linear(8, 8)).to(device)
    scaling = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Linear(8, 8)).to(device)
    with torch.no_grad():
        for copy, original in zip(scaling.parameters(), control.parameters()):
            copy.copy_(original)
    kwargs = {"lr": 1.0, **(optimizer_kwargs or {})}
    control_optimizer = optimizer_ctor(control.parameters(), **kwargs)
    return control, control_optimizer, scaling, optimizer_ctor(scaling.parameters(), **kwargs)


def _create_scaling_case(device: str = "npu", dtype: torch.dtype = torch.float,
                         optimizer_ctor: type = torch.optim.SGD,
                         optimizer_kwargs: dict[str, Any] | None = None) -> tuple[Any, ...]:  # fmt: skip
    """The two models and optimizers, four (8, 8) input/target pairs, an MSE loss and the iteration to skip
    (2)."""
    data = [(torch.randn((8, 8), dtype=dtype, device=device), torch.randn((8, 8), dtype=dtype, device=device))
            for _ in range(4)]  # fmt: skip
    loss_fn = torch.nn.MSELoss().to(device)
    skip_iter = 2
    return (*_create_scaling_models_optimizers(device, optimizer_ctor, optimizer_kwargs), data, loss_fn, skip_iter)
