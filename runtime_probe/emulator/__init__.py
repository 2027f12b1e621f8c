"""CPU emulator of torch_npu: the ``npu`` operators registered with ``torch.library``, and a ``torch_npu``
module that exposes them, so NPU model code runs and is tested on machines without an NPU.

The operators are defined from the verbatim schema strings of ``kvlint.catalogue.schemas``, so the dispatcher
accepts and refuses arguments exactly as on the device (e.g. ``num_query_heads`` on FIA v1 raises
``RuntimeError``). Each operator family has its module, with CPU kernels from the float32 reference
(``kvlint.runtime_probe.reference``) and fake kernels that give the output shapes, so ``torch.compile``
and FakeTensor tracing work: ``attention`` (FIA v1/v2, IFA, PFA) and ``kv_cache`` (the cache writes).
Operators without a kernel raise ``NotImplementedError`` naming the operator. ATB's schemas are registered in
their own ``atb`` namespace (``torch.ops.atb.<name>``) and set on the module as ``torch_npu.<name>``, as
torch_npu does once ATB is loaded. A real torch_npu is never shadowed.

Imports: torch, ``kvlint.catalogue`` and the reference. Never the probe.
"""

from __future__ import annotations

import importlib.util
import sys
import types
from collections.abc import Callable

import torch
from kvlint.runtime_probe.emulator import attention, kv_cache

from kvlint.catalogue import operators

NAMESPACE = "npu"
NAMESPACES = ("npu", "atb")
"""The ``torch.library`` namespaces of the catalogue's schemas (``Operator.namespace``)."""
MODULE_NAME = "torch_npu"
MARKER = "__kvlint_emulator__"
"""Attribute set on the emulated ``torch_npu`` module, to tell it from a real one."""

_libraries: dict[str, torch.library.Library] | None = None


def is_installed() -> bool:
    """True once ``install()`` has registered the operators in this process."""
    return _libraries is not None


def install() -> types.ModuleType:
    """Register the operators (once) and make ``import torch_npu`` return the emulated module."""
    global _libraries
    present = sys.modules.get(MODULE_NAME)
    if present is not None and not getattr(present, MARKER, False):
        raise RuntimeError(
            f"torch_npu is already imported from {getattr(present, '__file__', present)!r}; the kvlint "
            "emulator does not shadow a real torch_npu (unset KVLINT_EMULATE)"
        )
    if present is None:
        spec = importlib.util.find_spec(MODULE_NAME)
        if spec is not None:
            raise RuntimeError(
                f"a real torch_npu is installed at {spec.origin!r}; the kvlint emulator does not shadow it "
                "(unset KVLINT_EMULATE)"
            )
    if _libraries is None:
        _libraries = _register()
    if present is None:
        sys.modules[MODULE_NAME] = present = _module()
    return present


def _register() -> dict[str, torch.library.Library]:
    taken = [f"{op.namespace}::{op.name}" for op in operators.OPERATORS.values()
             if hasattr(getattr(torch.ops, op.namespace), op.name)]
    if taken:
        raise RuntimeError(
            f"{taken[0]} is already registered (by torch_npu or another library); "
            "the kvlint emulator does not replace it"
        )
    libraries = {namespace: torch.library.Library(namespace, "DEF") for namespace in NAMESPACES}
    for op in operators.OVERLOADS.values():
        library = libraries[op.namespace]
        library.define(op.schema)
        kernel, fake = _kernels(op)
        library.impl(op.qualified, kernel, "CPU")
        if op.name in kv_cache.FUNCTIONAL_FORM:
            library.impl(op.qualified, kv_cache.decomposed(kv_cache.FUNCTIONAL_FORM[op.name], op.namespace),
                         "CompositeImplicitAutograd")
        else:
            torch.library.register_fake(f"{op.namespace}::{op.qualified}", fake, lib=library)
    return libraries


def _module() -> types.ModuleType:
    """A ``torch_npu`` whose operator attributes are the ``torch.ops.npu`` / ``torch.ops.atb`` packets
    themselves."""
    module = types.ModuleType(MODULE_NAME, "CPU emulation of torch_npu by kvlint (KVLINT_EMULATE=1).")
    setattr(module, MARKER, True)
    for name, op in operators.OPERATORS.items():
        setattr(module, name, getattr(getattr(torch.ops, op.namespace), name))
    return module


def _kernels(op: operators.Operator) -> tuple[Callable[..., object], Callable[..., object]]:
    """(CPU kernel, fake kernel) of one overload, from the family module that implements it."""
    found = attention.kernels(op) or kv_cache.kernels(op)
    if found is None:
        return _unimplemented(op), _unimplemented(op)
    return found


def _unimplemented(op: operators.Operator) -> Callable[..., object]:
    def kernel(*args: object, **kwargs: object) -> object:
        raise NotImplementedError(f"the kvlint emulator has no implementation of torch_npu.{op.qualified}")

    return kernel
