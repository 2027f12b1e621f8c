"""Where the probe attaches: wrappers around the operator callables, and an import hook.

The catalogue's operators are replaced, by name, on the ``torch_npu`` module and on ``torch.ops.npu``
(real torch_npu binds both names to one ``OpOverloadPacket``; the same wrapper then serves both). A torch
packet is replaced by a probed packet that is still a torch object (``op_wrappers``), with probed
``.default`` / ``.out``; any other callable (a stand-in's function) by a ``ProbedOp``. Nothing here
imports torch: the wrappers only touch modules that are already loaded.

``torch_npu`` imported after activation is wrapped by a ``sys.meta_path`` finder that runs a hook after
the module executes, before user code can bind ``from torch_npu import ...``. The emulator puts its
``torch_npu`` module straight into ``sys.modules`` (no import happens), so its ``install()`` is hooked
too.
"""

from __future__ import annotations

import functools
import importlib.abc
import sys
from collections.abc import Callable
from importlib.machinery import ModuleSpec
from types import ModuleType
from typing import Any, Protocol

from kvlint.catalogue.operators import OPERATORS, lookup


class Runner(Protocol):
    """What a wrapper hands its calls to (``probe.Probe``)."""

    def run(self, target: Callable[..., Any], name: str, overload: str,
            args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """Call ``target(*args, **kwargs)`` under the probe and return its result."""


class ProbedOp:
    """Stands in for an operator callable that is not a torch packet (a stand-in module's function);
    every other attribute is the original's."""

    def __init__(self, target: Callable[..., Any], name: str, runner: Runner) -> None:
        self._kvlint_original = target
        self._kvlint_name = name
        self._kvlint_runner = runner

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        overload = "out" if "out" in kwargs and lookup(self._kvlint_name, "out") else "default"
        return self._kvlint_runner.run(self._kvlint_original, self._kvlint_name, overload, args, kwargs)

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("_kvlint_"):  # not yet set (copy, pickle): never recurse
            raise AttributeError(attr)
        return getattr(self._kvlint_original, attr)

    def __repr__(self) -> str:
        return repr(self._kvlint_original)


def _original(value: object) -> object:
    """The operator behind a wrapper (of any probe, active or stale)."""
    return getattr(value, "_kvlint_original", value)


def _loaded_owners() -> list[object]:
    """``torch_npu`` and ``torch.ops.npu`` if loaded (torch itself is never imported here)."""
    owners: list[object] = []
    module = sys.modules.get("torch_npu")
    if module is not None:
        owners.append(module)
    ops = getattr(sys.modules.get("torch"), "ops", None)
    if ops is not None:
        owners.append(ops.npu)
    return owners


def _get(owner: object, name: str) -> object:
    try:
        return getattr(owner, name)
    except (AttributeError, RuntimeError):  # torch.ops.npu raises for unregistered ops
        return None


class Patches:
    """The attributes replaced so far, so that deactivation restores exactly those."""

    def __init__(self, runner: Runner) -> None:
        self._runner = runner
        self._applied: list[tuple[object, str, object]] = []
        self._wrappers: dict[int, object] = {}

    def _wrapper(self, original: Any, name: str) -> object | None:
        """One wrapper per operator object, so ``torch_npu.X is torch.ops.npu.X`` stays true."""
        if id(original) not in self._wrappers:
            if type(original).__module__ == "torch._ops":  # must stay a torch object for torch's sake
                from kvlint.runtime_probe import op_wrappers

                if not op_wrappers.wrappable(original):
                    return None
                self._wrappers[id(original)] = op_wrappers.probed_packet(original, name, self._runner)
            else:
                self._wrappers[id(original)] = ProbedOp(original, name, self._runner)
        return self._wrappers[id(original)]

    def wrap(self, owner: object) -> None:
        """Replace the catalogue's operators present on ``owner`` (a stale probe's wrappers too)."""
        for name in OPERATORS:
            current = _get(owner, name)
            if current is None or not callable(current) or getattr(current, "_kvlint_runner", None) is self._runner:
                continue
            wrapper = self._wrapper(_original(current), name)
            if wrapper is not None:
                setattr(owner, name, wrapper)

    def replace(self, owner: object, name: str, value: Any) -> None:
        """Replace one attribute with ``value`` (restored by :meth:`restore`)."""
        self._applied.append((owner, name, getattr(owner, name)))
        setattr(owner, name, value)

    def wrap_loaded(self) -> None:
        for owner in _loaded_owners():
            self.wrap(owner)

    def restore(self) -> None:
        """Put back every original: the replaced attributes, and this probe's wrappers wherever they are
        (the emulator copies wrapped packets from ``torch.ops.npu`` into its module)."""
        for owner, name, original in reversed(self._applied):
            setattr(owner, name, original)
        self._applied.clear()
        for owner in _loaded_owners():
            for name in OPERATORS:
                current = _get(owner, name)
                if getattr(current, "_kvlint_runner", None) is self._runner:
                    setattr(owner, name, _original(current))
        self._wrappers.clear()


class _HookedLoader(importlib.abc.Loader):
    """Delegates to the real loader and runs a hook once the module has executed."""

    def __init__(self, loader: importlib.abc.Loader, hook: Callable[[ModuleType], None]) -> None:
        self._loader = loader
        self._hook = hook

    def create_module(self, spec: ModuleSpec) -> ModuleType | None:
        return self._loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        module.__loader__ = self._loader  # the module sees its own loader, not this one
        if module.__spec__ is not None:
            module.__spec__.loader = self._loader
        self._loader.exec_module(module)
        self._hook(module)

    def __getattr__(self, attr: str) -> Any:
        return getattr(self._loader, attr)


class PostImportFinder(importlib.abc.MetaPathFinder):
    """A ``sys.meta_path`` entry that finds nothing itself: it asks the finders after it and, for the
    watched module names, wraps the loader so that a hook runs after the module executes."""

    def __init__(self, hooks: dict[str, Callable[[ModuleType], None]]) -> None:
        self._hooks = hooks

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> ModuleSpec | None:
        hook = self._hooks.get(fullname)
        if hook is None:
            return None
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None)
            if finder is self or find is None:
                continue
            spec = find(fullname, path, target)
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = _HookedLoader(spec.loader, hook)
                return spec
        return None


def after_call(function: Callable[..., Any], hook: Callable[[], None]) -> Callable[..., Any]:
    """``function`` followed by ``hook()`` (used on the emulator's ``install``)."""

    @functools.wraps(function)
    def wrapped(*args: Any, **kwargs: Any) -> Any:
        result = function(*args, **kwargs)
        hook()
        return result

    wrapped.__kvlint_hooked__ = True  # type: ignore[attr-defined]
    return wrapped
