"""``torch.npu`` (also ``torch_npu.npu``) on a CPU: the device runtime API Ascend programs call.

Every NPU tensor is a CPU tensor (``device.py`` says why), so the runtime is trivial and honest about it:

- one kind of memory: ``mem_get_info()`` reports an emulated capacity (``KVLINT_EMULATE_MEMORY``, default
  1 GiB, so that engines that size their KV cache from free memory allocate a small one) with nothing
  allocated, and the allocator statistics are zero;
- every operator runs synchronously on the calling thread, so streams and events order nothing: a stream
  is a handle, ``synchronize()`` returns at once, and an event records the wall-clock time at which it was
  recorded, so ``elapsed_time`` measures the work done between two events;
- ``device_count()`` is ``KVLINT_EMULATE_DEVICES`` (default 1); ``set_device`` accepts any index (one
  process per rank on one machine all share the CPU);
- random numbers come from torch's CPU generator: ``manual_seed`` seeds it;
- NPU graphs (``NPUGraph``, ``graph``, the task-group updates) record the operators of a capture and run
  them again on replay (``graphs.py``); ``NpuGraphOpHandler`` / ``register_npu_graph_handler`` say which
  captured calls an update reaches (``graph_handlers.py``).
"""

from __future__ import annotations

import contextlib
import itertools
import os
import re
import threading
import time
import types
from collections.abc import Iterator
from typing import Any

import torch
from kvlint.runtime_probe.emulator.graphs import (  # noqa: F401 - torch.npu's graph API
    NPUGraph,
    TaskGroupHandle,
    graph,
    graph_pool_handle,
    graph_task_group_begin,
    graph_task_group_end,
    graph_task_update_begin,
    graph_task_update_end,
    is_current_stream_capturing,
    make_graphed_callables,
)
from kvlint.runtime_probe.emulator.graph_handlers import (  # noqa: F401 - torch_npu.npu's graph handler API
    NpuGraphOpHandler,
    register_npu_graph_handler,
)

DEVICE_NAME = "Ascend910B1 (kvlint CPU emulator)"
"""What ``get_device_name`` reports: an Atlas A2 name, so code that checks for ``910B`` takes the A2 path."""
_UNITS = {"": 1, "B": 1, "KIB": 2**10, "MIB": 2**20, "GIB": 2**30, "TIB": 2**40, "KB": 10**3, "MB": 10**6,
          "GB": 10**9, "TB": 10**12}  # fmt: skip


def _capacity(text: str) -> int:
    """``KVLINT_EMULATE_MEMORY``: bytes, or a number with a unit (``512MiB``, ``2GiB``, ``8GB``)."""
    match = re.fullmatch(r"\s*([0-9.]+)\s*([A-Za-z]*)\s*", text)
    if match is None or match[2].upper() not in _UNITS:
        raise ValueError(f"KVLINT_EMULATE_MEMORY={text!r} is not a size such as 1GiB or 512MiB")
    return int(float(match[1]) * _UNITS[match[2].upper()])


def _device_count(text: str) -> int:
    if not text.strip().isdigit() or int(text) < 1:
        raise ValueError(f"KVLINT_EMULATE_DEVICES={text!r} is not a positive number of devices")
    return int(text)


TOTAL_MEMORY = _capacity(os.environ.get("KVLINT_EMULATE_MEMORY", "1GiB"))
DEVICE_COUNT = _device_count(os.environ.get("KVLINT_EMULATE_DEVICES", "1"))
_state = threading.local()


# -- devices --------------------------------------------------------------------------------------------
def _index(device: object) -> int:
    """The device index of ``device`` (an int, ``"npu:1"``, ``torch.device("npu", 1)``, or None = current)."""
    if device is None:
        return current_device()
    if isinstance(device, int):
        return device
    parsed = torch.device(device) if isinstance(device, str) else device
    if not isinstance(parsed, torch.device) or parsed.type not in ("npu", "cpu"):
        raise ValueError(f"expected an NPU device, got {device!r}")
    return current_device() if parsed.index is None else parsed.index


def is_available() -> bool:
    return True


def is_initialized() -> bool:
    return True


def init() -> None:
    """Nothing to initialise."""


def _lazy_init() -> None:
    """Nothing to initialise."""


def _is_in_bad_fork() -> bool:
    return False


def device_count() -> int:
    return DEVICE_COUNT


def current_device() -> int:
    return getattr(_state, "device", 0)


def set_device(device: object) -> None:
    _state.device = _index(device)


class device:  # noqa: N801 - the name torch.npu.device has on the device
    """``with torch.npu.device(1):`` selects a device for the block."""

    def __init__(self, device: object) -> None:
        self.index = _index(device)
        self.previous = 0

    def __enter__(self) -> device:
        self.previous = current_device()
        set_device(self.index)
        return self

    def __exit__(self, *exc: object) -> None:
        set_device(self.previous)


def synchronize(device: object = None) -> None:
    """Operators run synchronously: nothing is pending."""


def get_device_name(device: object = None) -> str:
    return DEVICE_NAME


def get_device_properties(device: object = None) -> types.SimpleNamespace:
    return types.SimpleNamespace(name=DEVICE_NAME, total_memory=TOTAL_MEMORY, cube_core_num=1, vector_core_num=1,
                                 L2_cache_size=0)  # fmt: skip


def get_device_capability(device: object = None) -> None:
    """torch_npu reports no CUDA-style capability."""
    return None


def is_bf16_supported() -> bool:
    return True


def set_compile_mode(jit_compile: bool = False) -> None:
    """Kernel compilation mode of the device: nothing to choose on a CPU."""


def set_option(option: dict[str, Any]) -> None:
    """Device options (``ACL_*``): accepted and ignored."""


def utilization(device: object = None) -> int:
    return 0


config = types.SimpleNamespace(allow_internal_format=False)
"""``torch.npu.config.allow_internal_format``: programs set it; internal formats are tracked either way."""


# -- memory ---------------------------------------------------------------------------------------------
def mem_get_info(device: object = None) -> tuple[int, int]:
    """(free, total) bytes of the emulated device memory; nothing is counted as allocated."""
    return TOTAL_MEMORY, TOTAL_MEMORY


def memory_allocated(device: object = None) -> int:
    return 0


def max_memory_allocated(device: object = None) -> int:
    return 0


def memory_reserved(device: object = None) -> int:
    return 0


def max_memory_reserved(device: object = None) -> int:
    return 0


def memory_stats(device: object = None) -> dict[str, int]:
    """The allocator statistics keys programs read, all zero (CPU memory is not tracked per device)."""
    return {f"{kind}_bytes.all.{when}": 0 for kind in ("allocated", "reserved", "active", "inactive_split")
            for when in ("current", "peak", "allocated", "freed")}  # fmt: skip


def memory_summary(device: object = None, abbreviated: bool = False) -> str:
    return f"kvlint CPU emulator: {TOTAL_MEMORY} bytes of emulated NPU memory, allocations not tracked"


def reset_peak_memory_stats(device: object = None) -> None:
    """Nothing is tracked."""


def reset_max_memory_allocated(device: object = None) -> None:
    """Nothing is tracked."""


def empty_cache() -> None:
    """No caching allocator: nothing to release."""


# -- random numbers -------------------------------------------------------------------------------------
def manual_seed(seed: int) -> None:
    """Seed torch's CPU generator, which draws every NPU tensor's random numbers. (Not ``torch.manual_seed``:
    that calls this module's ``manual_seed_all`` in turn.)"""
    torch.default_generator.manual_seed(int(seed))


def manual_seed_all(seed: int) -> None:
    manual_seed(seed)


def seed() -> None:
    torch.default_generator.seed()


def seed_all() -> None:
    seed()


def initial_seed() -> int:
    return torch.default_generator.initial_seed()


def get_rng_state(device: object = None) -> torch.Tensor:
    return torch.default_generator.get_state()


def set_rng_state(new_state: torch.Tensor, device: object = None) -> None:
    torch.default_generator.set_state(new_state)


# -- streams and events ---------------------------------------------------------------------------------
_stream_ids = itertools.count(1)
_DEVICE_TYPE = int(torch._C._autograd.DeviceType.PrivateUse1)


class Event(torch.Event):
    """An event records when it was recorded; operators are synchronous, so it is complete at once.

    A ``torch.Event`` of the ``npu`` device, so that ``torch.compile`` captures its use (Dynamo keeps
    ``record`` and ``wait`` of ``torch.Event`` instances in the graph)."""

    def __new__(cls, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False) -> Event:
        return super().__new__(cls, device="npu", enable_timing=enable_timing, blocking=blocking,
                               interprocess=interprocess)  # fmt: skip

    def __init__(self, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False) -> None:
        self.enable_timing = enable_timing
        self.time: float | None = None

    def record(self, stream: torch.Stream | None = None) -> None:
        self.time = time.perf_counter()

    def recorded_time(self) -> float | None:
        return self.time

    def wait(self, stream: torch.Stream | None = None) -> None:
        """Nothing is pending."""

    def query(self) -> bool:
        return True

    def synchronize(self) -> None:
        """Nothing is pending."""

    def elapsed_time(self, end_event: torch.Event) -> float:
        """Milliseconds between this event's record and ``end_event``'s."""
        end = getattr(end_event, "time", None)
        if self.time is None or end is None:
            raise RuntimeError("elapsed_time needs both events to have been recorded")
        return (end - self.time) * 1000.0


class ExternalEvent(Event):
    """``torch.npu.ExternalEvent`` (recorded and waited on across graph captures): an ``Event`` that can be reset."""

    def reset(self, stream: torch.Stream | None = None) -> None:
        self.time = None


class Stream(torch.Stream):
    """A stream handle; work submitted to it has already run.

    A ``torch.Stream`` of the ``npu`` device with its own id, so ``tensor.record_stream(s)`` accepts it and
    ``torch.compile`` captures it; ``record_stream`` on the (CPU) tensors does nothing (``device.py``)."""

    def __new__(cls, device: object = None, priority: int = 0, **kwargs: object) -> Stream:
        return super().__new__(cls, stream_id=next(_stream_ids), device_index=_index(device),
                               device_type=_DEVICE_TYPE)  # fmt: skip

    def __init__(self, device: object = None, priority: int = 0, **kwargs: object) -> None:
        self.stream_priority = priority

    def wait_stream(self, stream: torch.Stream) -> None:
        """Nothing is pending."""

    def wait_event(self, event: torch.Event) -> None:
        """Nothing is pending."""

    def record_event(self, event: torch.Event | None = None) -> torch.Event:
        event = event if event is not None else Event()
        event.record(self)
        return event

    def query(self) -> bool:
        return True

    def synchronize(self) -> None:
        """Nothing is pending."""

    def __enter__(self) -> Stream:
        self._context = stream(self)
        self._context.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self._context.__exit__(*exc)


_default_stream = Stream()
"""Made at import, so that code compiled with ``torch.compile`` never makes it (Dynamo cannot build a
stream inside a graph)."""


def default_stream(device: object = None) -> Stream:
    return _default_stream


def current_stream(device: object = None) -> Stream:
    return getattr(_state, "stream", None) or default_stream()


def set_stream(stream: Stream) -> None:
    _state.stream = stream


@contextlib.contextmanager
def stream(stream: Stream | None) -> Iterator[Stream | None]:
    """``with torch.npu.stream(s):`` makes ``s`` the current stream for the block."""
    previous = current_stream()
    if stream is not None:
        set_stream(stream)
    try:
        yield stream
    finally:
        set_stream(previous)


# -- mixed precision --------------------------------------------------------------------------------------
def _autocast(enabled: bool = True, dtype: torch.dtype = torch.float16, cache_enabled: bool = True) -> torch.autocast:
    """``torch.npu.amp.autocast(...)``: CPU autocast, since the tensors are CPU tensors."""
    return torch.autocast("cpu", dtype=dtype, enabled=enabled, cache_enabled=cache_enabled)


amp = types.SimpleNamespace(autocast=_autocast)
npugraph_ex: types.SimpleNamespace | None = None
"""torch_npu's ``torch.compile`` backend and its ``inference.cache_compile`` (``torchair.npugraph_ex_namespace``,
set by ``emulator.install()``)."""
