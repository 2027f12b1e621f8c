"""``torch_npu.testing.common_distributed``: multi-device test helpers.

``with_comms`` runs a test of a multi-process test case inside a process group: ``hccl`` when there are
enough NPUs for ``world_size``, ``gloo`` otherwise (on the emulator ``hccl`` is gloo too, ``device.py``).
``skipIfUnsupportMultiNPU(n)`` skips unless ``n`` NPUs are visible (``KVLINT_EMULATE_DEVICES``).
"""

from __future__ import annotations

import functools
import os
import unittest
from collections.abc import Callable
from typing import Any, NamedTuple

import torch.distributed as dist
from kvlint.runtime_probe.emulator import npu


class TestSkip(NamedTuple):
    exit_code: int
    message: str


TEST_SKIPS = {
    **{f"multi-npu-{count}": TestSkip(75, f"Need at least {count} NPU devices") for count in range(1, 9)},
    "hccl": TestSkip(76, "c10d not compiled with HCCL support"),
    "known_issues": TestSkip(77, "Test skipped due to known issues"),
}
"""The exit codes a test process uses to report a skip."""
DYNAMO_MASTER_PORT = "6789"


def skipIfUnsupportMultiNPU(count: int) -> Callable[[Callable[..., Any]], Callable[..., Any]]:  # noqa: N802
    """Skip the test unless at least ``count`` NPUs are available."""

    def decorator(function: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(function)
        def test(*args: Any, **kwargs: Any) -> Any:
            if not npu.is_available() or npu.device_count() < count:
                raise unittest.SkipTest(f"{TEST_SKIPS[f'multi-npu-{count}'].message} (the emulator has "
                                        f"{npu.device_count()}; set KVLINT_EMULATE_DEVICES)")  # fmt: skip
            return function(*args, **kwargs)

        return test

    return decorator


def init_pg(backend: str = "hccl", world_size: int = 1, rank: int = 0, file_name: str = "") -> None:
    """Join the process group (``file://`` rendezvous on ``file_name``); ``hccl`` also selects the rank's
    device."""
    if backend not in ("hccl", "gloo"):
        raise RuntimeError(f"init_pg: backend {backend!r} is not supported (hccl or gloo)")
    if backend == "hccl":
        npu.set_device(rank % npu.device_count())
    dist.init_process_group(backend=backend, world_size=world_size, rank=rank, init_method=f"file://{file_name}")


def with_comms(function: Callable[..., Any]) -> Callable[..., Any]:
    """Run the test of a multi-process test case (``self.world_size``, ``self.rank``, ``self.file_name``,
    ``self.destroy_pg``) inside a process group."""

    @functools.wraps(function)
    def test(self: Any, *args: Any, **kwargs: Any) -> Any:
        enough = npu.is_available() and npu.device_count() >= self.world_size
        init_pg("hccl" if enough else "gloo", self.world_size, self.rank, self.file_name)
        npu.manual_seed(0)
        try:
            return function(self, *args, **kwargs)
        finally:
            self.destroy_pg()

    return test


def _dynamo_dist_per_rank_init(rank: int, world_size: int, init_pg_: bool = True) -> Any:
    """The context of one rank of a Dynamo distributed test: its device, an hccl group on localhost:6789,
    and Dynamo's state reset around it."""
    import contextlib

    import torch._dynamo

    @contextlib.contextmanager
    def context() -> Any:
        npu.set_device(rank % npu.device_count())
        os.environ.setdefault("MASTER_ADDR", "localhost")
        os.environ.setdefault("MASTER_PORT", DYNAMO_MASTER_PORT)
        if init_pg_:
            dist.init_process_group("hccl", rank=rank, world_size=world_size)
        torch._dynamo.reset()
        try:
            yield
        finally:
            torch._dynamo.reset()
            if init_pg_:
                dist.destroy_process_group()

    return context()
