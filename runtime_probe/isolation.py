"""Keep the probe's own torch work out of the program's view.

Inside the user's ``TorchDispatchMode`` (``FlopCounterMode``, memory trackers built on it), a
``TorchFunctionMode`` or a profiler, the probe's checks and its reference computation would otherwise show
up as the program's operators, FLOPs and events. ``Invisible`` pops the dispatch modes, disables the
torch-function modes and turns off profiler op events on this thread for the probe's work, and restores
them before the program's operator runs, which the program's modes see as usual. Even reading a tensor's
shape shows in a torch-function mode, so every step of the probe runs inside it (never nested: the
profiler flag would be restored too early). With nothing active it costs three flag reads; ``unseen`` then
runs the work without entering anything (the probe's path on every call).
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any, TypeVar

import torch
from torch.utils._python_dispatch import _disable_current_modes

T = TypeVar("T")
_dispatch_modes = torch._C._len_torch_dispatch_stack
_function_modes = torch._C._len_torch_function_stack
_profiling = torch._C._autograd._profiler_enabled


def unseen(work: Callable[..., T], *args: Any) -> T:
    """``work(*args)`` unseen by the program's modes and profiler: inside ``Invisible`` when one is active."""
    if _dispatch_modes() or _function_modes() or _profiling():
        with Invisible():
            return work(*args)
    return work(*args)


class Invisible:
    """``with Invisible():`` the probe's work, unseen by the program's modes and profiler."""

    __slots__ = ("_modes", "_functions", "_events")

    def __enter__(self) -> None:
        self._modes: AbstractContextManager[object] | None = None
        self._functions: AbstractContextManager[object] | None = None
        self._events = False
        if _dispatch_modes():
            self._modes = _disable_current_modes()
            self._modes.__enter__()
        if _function_modes():
            self._functions = torch._C.DisableTorchFunction()
            self._functions.__enter__()
        if _profiling():
            torch._C._autograd._enable_record_function(False)
            self._events = True

    def __exit__(self, *exc: object) -> None:
        if self._events:
            torch._C._autograd._enable_record_function(True)
        if self._functions is not None:
            self._functions.__exit__(*exc)
        if self._modes is not None:
            self._modes.__exit__(*exc)
