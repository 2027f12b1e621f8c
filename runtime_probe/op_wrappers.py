"""Probed stand-ins for ``torch.ops`` packets and overloads that are still genuine torch objects.

torch itself looks operators up through ``torch.ops.<ns>.<name>.<overload>`` (the dispatcher hands that
object to ``__torch_dispatch__``, FakeTensor checks ``isinstance(func, OpOverload)``, torch.library looks
kernels up by it). A plain wrapper there breaks FakeTensor tracing and torch.compile, so a wrapper here is
an instance of a subclass of the original's class sharing the original's state (the same ``__dict__``
contents: schema, handles, kernel tables), whose only difference is ``__call__``. Imported only once
torch is loaded.

Wrappers are never freed: the first time the Python dispatcher needs an operator's Python object (a
``TorchDispatchMode`` is active, say), torch looks it up as ``torch.ops.<ns>.<name>.<overload>`` and keeps
a pointer to what it finds, which may be a wrapper; after the probe is deactivated that wrapper passes
calls straight through.
"""

from __future__ import annotations

from typing import Any

from torch._ops import OpOverload, OpOverloadPacket

from kvlint.catalogue.operators import lookup


class ProbedOverload(OpOverload):
    """An ``OpOverload`` whose calls go through the probe."""

    _kvlint_original: OpOverload
    _kvlint_name: str
    _kvlint_runner: Any

    def __call__(self, /, *args: Any, **kwargs: Any) -> Any:
        return self._kvlint_runner.run(self._kvlint_original, self._kvlint_name, self._overloadname, args, kwargs)


class ProbedPacket(OpOverloadPacket):
    """An ``OpOverloadPacket`` whose calls, and whose ``.default`` / ``.out`` calls, go through the probe."""

    _kvlint_original: OpOverloadPacket
    _kvlint_name: str
    _kvlint_runner: Any

    def __call__(self, /, *args: Any, **kwargs: Any) -> Any:
        overload = "out" if "out" in kwargs and lookup(self._kvlint_name, "out") else "default"
        return self._kvlint_runner.run(self._kvlint_original, self._kvlint_name, overload, args, kwargs)


_KEPT: list[object] = []
"""Every wrapper made (see the module docstring): torch may hold a pointer to any of them."""


def _clone_as(cls: type, original: object, name: str, runner: Any) -> Any:
    wrapper = cls.__new__(cls)
    _KEPT.append(wrapper)
    wrapper.__dict__.update(vars(original))
    wrapper._kvlint_original = original
    wrapper._kvlint_name = name
    wrapper._kvlint_runner = runner
    return wrapper


def probed_packet(packet: OpOverloadPacket, name: str, runner: Any) -> ProbedPacket:
    wrapper = _clone_as(ProbedPacket, packet, name, runner)
    for overload in ("default", "out"):
        if lookup(name, overload) is not None:
            original = getattr(packet, overload)
            setattr(wrapper, overload, _clone_as(ProbedOverload, original, name, runner))
    return wrapper


def is_probed(value: object) -> bool:
    return isinstance(value, (ProbedPacket, ProbedOverload))


def wrappable(value: object) -> bool:
    """A torch packet this module can stand in for (TorchBind overloads are left alone)."""
    return type(value) is OpOverloadPacket
