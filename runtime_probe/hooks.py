"""Where the probe attaches: wrappers around the operator callables, and an import hook.

The catalogue's operators are replaced, by name, on the ``torch_npu`` module and on ``torch.ops.npu``
(real torch_npu binds both names to one ``OpOverloadPacket``; the same wrapper then serves both). A
wrapper keeps the packet's ``.default`` / ``.out`` overloads reachable, wrapped too, and forwards every
other attribute. Nothing here imports torch: the wrappers only touch modules that are already loaded.

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

from kvlint.catalogue import OPERATORS, lookup

OVERLOADS = ("default", "out")


class Runner(Protocol):
    def run(self, target: Callable[..., Any], name: str, overload: str,
            args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any: ...


class ProbedOp:
    """Stands in for an operator callable: a packet, one of its overloads, or a stand-in's function."""

    def __init__(self, target: Callable[..., Any], name: str, overload: str | None, runner: Runner) -> None:
        self._kvlint_target = target
        self._kvlint_name = name
        self._kvlint_overload = overload
        self._kvlint_runner = runner
        self._kvlint_overloads: dict[str, ProbedOp] = {}

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        overload = self._kvlint_overload
        if overload is None:  # a packet picks its overload from the arguments: ``out=`` selects .out
            overload = "out" if "out" in kwargs and lookup(self._kvlint_name, "out") else "default"
        return self._kvlint_runner.run(self._kvlint_target, self._kvlint_name, overload, args, kwargs)

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("_kvlint_"):  # not yet set (copy, pickle): never recurse
            raise AttributeError(attr)
        value = getattr(self._kvlint_target, attr)
        if attr in OVERLOADS and self._kvlint_overload is None and lookup(self._kvlint_name, attr):
            if attr not in self._kvlint_overloads:
                self._kvlint_overloads[attr] = ProbedOp(value, self._kvlint_name, attr, self._kvlint_runner)
            return self._kvlint_overloads[attr]
        return value

    def __repr__(self) -> str:
        return repr(self._kvlint_target)


class Patches:
    """The attributes replaced so far, so that deactivation restores exactly those."""

    def __init__(self, runner: Runner) -> None:
        self._runner = runner
        self._applied: list[tuple[object, str, object, object]] = []
        self._wrappers: dict[int, ProbedOp] = {}

    def wrap(self, owner: object) -> int:
        """Replace the catalogue's operators present on ``owner``; returns how many were wrapped."""
        count = 0
        for name in OPERATORS:
            try:
                original = getattr(owner, name)
            except (AttributeError, RuntimeError):  # torch.ops.npu raises for unregistered ops
                continue
            if isinstance(original, ProbedOp) or not callable(original):
                continue
            wrapper = self._wrappers.get(id(original))
            if wrapper is None:
                wrapper = self._wrappers[id(original)] = ProbedOp(original, name, None, self._runner)
            setattr(owner, name, wrapper)
            self._applied.append((owner, name, original, wrapper))
            count += 1
        return count

    def replace(self, owner: object, name: str, value: Any) -> None:
        """Replace one attribute with ``value`` (restored by :meth:`restore`)."""
        original = getattr(owner, name)
        setattr(owner, name, value)
        self._applied.append((owner, name, original, value))

    def wrap_loaded(self) -> None:
        """Wrap ``torch_npu`` and ``torch.ops.npu`` if loaded (torch itself is never imported here)."""
        module = sys.modules.get("torch_npu")
        if module is not None:
            self.wrap(module)
        torch = sys.modules.get("torch")
        ops = getattr(torch, "ops", None)
        if ops is not None:
            self.wrap(ops.npu)

    def restore(self) -> None:
        for owner, name, original, wrapper in reversed(self._applied):
            if getattr(owner, name, None) is wrapper:
                setattr(owner, name, original)
        self._applied.clear()
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
