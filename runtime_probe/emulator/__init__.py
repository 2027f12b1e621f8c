"""CPU emulator of torch_npu: the ``npu`` device, the operators registered with ``torch.library``, a
``torch_npu`` module that exposes them and a ``torchair`` package, so NPU model code runs and is tested on
machines without an NPU.

The operators are defined from the verbatim schema strings of ``kvlint.catalogue.schemas``, so the dispatcher
accepts and refuses arguments exactly as on the device (e.g. ``num_query_heads`` on FIA v1 raises
``RuntimeError``). One module per family, each with CPU kernels from the float32 reference
(``kvlint.runtime_probe.reference``) and fake kernels that give the meta kernels' shapes and dtypes, so
``torch.compile`` and FakeTensor tracing work:

- ``device``: ``npu`` as a device whose tensors live in CPU memory, ``torch.npu`` (``npu``), ``hccl``;
  NPU graph capture and replay (``graphs``), its operator handlers (``graph_handlers``) and its debug dump
  (``graph_dump``);
- ``torchair``: the graph compiler's entry points, compiling on the CPU;
- ``attention`` (FIA v1/v2, IFA, PFA, FA, the ATB attention, workspaces), ``kv_cache`` (the cache
  writes), ``norms``, ``rope``, ``moe`` (routing, grouped matmul, SwiGLU), ``formats`` (internal formats),
  ``mla`` (MLA preprocessing);
- ``sharding``: the DTensor sharding strategy of ``npu_fusion_attention`` (registered when DTensor is imported);
- ``testing``: torch_npu's test harness (``torch_npu.testing.testcase``, ``.common_utils``, ...), imported
  on demand under its ``torch_npu.testing`` names, so torch_npu's own operator tests run unchanged.
- ``autograd``: the backward of the operators op-plugin gives one (``npu_fusion_attention(_v2)`` through
  the device's ``npu_fusion_attention_grad(_v2)``, ``npu_rms_norm``, ``npu_rotary_mul``, ``npu_swiglu``),
  and the "not implemented" error of those it registers none for.

Operators without a kernel (the quantisation operators among them) raise ``NotImplementedError`` naming
the operator. ATB's schemas are registered in their own ``atb`` namespace (``torch.ops.atb.<name>``) and set
on the module as ``torch_npu.<name>``, as torch_npu does once ATB is loaded. A real torch_npu or torchair is
never shadowed.

Imports: torch, ``kvlint.catalogue`` and the reference. Never the probe.
"""

from __future__ import annotations

import functools
import importlib
import importlib.machinery
import importlib.util
import sys
import types
from collections.abc import Callable

import torch
from kvlint.runtime_probe.emulator import (attention, autograd, device, formats, graph_dump, graph_handlers, kv_cache,
                                           mla, moe, norms, npu, rope, sharding, torchair)  # fmt: skip

from kvlint.catalogue import operators

NAMESPACES = ("npu", "atb")
"""The ``torch.library`` namespaces of the catalogue's schemas (``Operator.namespace``)."""
MODULE_NAME = "torch_npu"
MARKER = "__kvlint_emulator__"
"""Attribute set on the emulated ``torch_npu`` module, to tell it from a real one."""
FAMILIES = (attention, kv_cache, norms, rope, moe, formats, mla, autograd)
VERSION = f"{torch.__version__.split('+')[0]}+kvlint.emulator"
"""``torch_npu.__version__``: torch_npu versions follow torch's; the local part says it is emulated."""

_libraries: dict[str, torch.library.Library] | None = None


def is_installed() -> bool:
    """True once ``install()`` has registered the operators in this process."""
    return _libraries is not None


def install() -> types.ModuleType:
    """Register the operators (once) and make ``import torch_npu`` (and ``import torchair``) give the
    emulated modules."""
    global _libraries
    present = sys.modules.get(MODULE_NAME)
    if present is not None and not getattr(present, MARKER, False):
        raise RuntimeError(
            f"torch_npu is already imported from {getattr(present, '__file__', present)!r}; the kvlint "
            "emulator does not shadow a real torch_npu (unset KVLINT_EMULATE)"
        )
    if present is None:
        spec = importlib.machinery.PathFinder.find_spec(MODULE_NAME)
        if spec is not None:
            raise RuntimeError(_found_on_path(spec))
    if _libraries is None:
        device.install()
        _libraries = _register()
        npu.npugraph_ex = torchair.npugraph_ex_namespace()
        sharding.install()
    if present is None:
        present = _module()
        sys.modules[MODULE_NAME] = present
        sys.modules[f"{MODULE_NAME}.npu"] = npu
        sys.modules.update(_graph_modules())
        if not any(isinstance(finder, TestingFinder) for finder in sys.meta_path):
            sys.meta_path.insert(0, TestingFinder())
    torchair.install()
    return present


def _graph_modules() -> dict[str, types.ModuleType]:
    """torch_npu's graph helper modules that programs and tests import or patch by name:
    ``torch_npu.npu._npugraph_handlers.npugraph_handler`` (the handler registry, ``graph_handlers``) and
    ``torch_npu.npu._npugraph_utils`` (the dump's alignment, ``graph_dump``)."""
    name = f"{MODULE_NAME}.npu._npugraph_handlers"
    package = types.ModuleType(name, "torch_npu's NPU-graph operator handlers (kvlint emulator: graph_handlers)")
    package.__path__ = []
    package.npugraph_handler = graph_handlers
    npu._npugraph_handlers = package
    npu._npugraph_utils = graph_dump
    return {name: package, f"{name}.npugraph_handler": graph_handlers, f"{MODULE_NAME}.npu._npugraph_utils": graph_dump}


def _found_on_path(spec: importlib.machinery.ModuleSpec) -> str:
    """Why ``import torch_npu`` would not give the emulator: a real torch_npu, or a folder of that name."""
    if spec.origin is None:  # a namespace package: a directory named torch_npu without __init__.py
        folder = next(iter(spec.submodule_search_locations or []), "?")
        return (f"a folder named torch_npu at {folder!r} shadows the import of torch_npu (it is on sys.path, "
                "so `import torch_npu` would import that folder); rename it, or run from another directory, "
                "to use the kvlint emulator")  # fmt: skip
    return (f"a real torch_npu is installed at {spec.origin!r}; the kvlint emulator does not shadow it "
            "(unset KVLINT_EMULATE)")  # fmt: skip


TESTING = f"{MODULE_NAME}.testing"
"""The emulated module's test harness: ``torch_npu.testing[.x]`` is the emulator's ``testing[.x]``."""


class TestingFinder:
    """A ``sys.meta_path`` entry that imports ``torch_npu.testing`` and its submodules as the emulator's
    ``testing`` package (on demand: a program that never imports the harness never loads it). It comes first,
    so that no path finder loads a second copy of a submodule from the package's folder."""

    def find_spec(self, fullname: str, path: object = None,
                  target: object = None) -> importlib.machinery.ModuleSpec | None:  # fmt: skip
        if fullname != TESTING and not fullname.startswith(TESTING + "."):
            return None
        if not getattr(sys.modules.get(MODULE_NAME), MARKER, False):
            return None
        own = __name__ + fullname[len(MODULE_NAME):]
        found = importlib.util.find_spec(own)
        if found is None:
            return None
        package = found.submodule_search_locations is not None
        return importlib.machinery.ModuleSpec(fullname, _Alias(own), is_package=package)


class _Alias:
    """Loader that gives the emulator's module of that name (imported once, under its own name)."""

    def __init__(self, name: str) -> None:
        self.name = name

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        return importlib.import_module(self.name)

    def exec_module(self, module: types.ModuleType) -> None:
        """Nothing to run: importing it ran it."""


def _register() -> dict[str, torch.library.Library]:
    taken = [f"{op.namespace}::{op.name}" for op in operators.OPERATORS.values()
             if hasattr(getattr(torch.ops, op.namespace), op.name)]  # fmt: skip
    if taken:
        raise RuntimeError(f"{taken[0]} is already registered (by torch_npu or another library); the kvlint "
                           "emulator does not replace it")  # fmt: skip
    libraries = {namespace: torch.library.Library(namespace, "DEF") for namespace in NAMESPACES}
    for op in operators.OVERLOADS.values():
        library = libraries[op.namespace]
        library.define(op.schema)
        in_place = rope.IN_PLACE.get(op.name)
        if in_place is not None:
            library.impl(op.qualified, device_errors(in_place, op.name), "CompositeImplicitAutograd")
            continue
        kernel, fake = _kernels(op)
        library.impl(op.qualified, device_errors(kernel, op.name), "CPU")
        functional = kv_cache.FUNCTIONAL_FORM.get(op.name) or formats.FUNCTIONAL_FORM.get(op.name)
        if functional is not None:
            library.impl(op.qualified, device_errors(kv_cache.decomposed(functional, op.namespace), op.name),
                         "CompositeImplicitAutograd")  # fmt: skip
        else:
            torch.library.register_fake(f"{op.namespace}::{op.qualified}", device_errors(fake, op.name), lib=library)
    libraries[autograd.NAMESPACE] = autograd.register(libraries)
    return libraries


def device_errors(kernel: Callable[..., object], operator: str) -> Callable[..., object]:
    """``kernel`` raising the device's exception type for its refusals: torch_npu's operators check their
    arguments in C++ (``TORCH_CHECK``), which Python sees as ``RuntimeError``. The reference raises
    ``ValueError`` (and ``IndexError`` for a slot or row outside a cache), as a Python library does and as the
    probe reads it; at the operator boundary they become ``RuntimeError`` with the same message, led by the
    operator's name when the message does not already start with it (a test's traceback then says which call
    of several was refused).
    ``NotImplementedError`` (what the emulator does not compute) and the dispatcher's own binding errors pass
    unchanged."""

    @functools.wraps(kernel)
    def refusing(*args: object, **kwargs: object) -> object:
        try:
            return kernel(*args, **kwargs)
        except (ValueError, IndexError) as error:
            message = str(error)
            if not message.startswith(f"{operator}:") and not message.startswith(f"{operator}."):
                message = f"{operator}: {message}"
            raise RuntimeError(message) from error

    return refusing


def _module() -> types.ModuleType:
    """A ``torch_npu`` whose operator attributes are the ``torch.ops.npu`` / ``torch.ops.atb`` packets
    themselves, with the device module as ``torch_npu.npu``."""
    module = types.ModuleType(MODULE_NAME, "CPU emulation of torch_npu by kvlint (KVLINT_EMULATE=1).")
    module.__spec__ = importlib.machinery.ModuleSpec(MODULE_NAME, None, origin=__file__, is_package=True)
    module.__path__ = []
    module.__version__ = VERSION
    setattr(module, MARKER, True)
    module.npu = npu
    module.Format = formats.Format
    module._C = device.c_module()
    for name, op in operators.OPERATORS.items():
        setattr(module, name, getattr(getattr(torch.ops, op.namespace), name))
    return module


def _kernels(op: operators.Operator) -> tuple[Callable[..., object], Callable[..., object]]:
    """(CPU kernel, fake kernel) of one overload, from the family module that implements it."""
    for family in FAMILIES:
        found = family.kernels(op)
        if found is not None:
            return found
    return _unimplemented(op), _unimplemented(op)


QUANTISATION = frozenset({"npu_dynamic_quant", "npu_quant_matmul", "npu_weight_quant_batchmatmul",
                          "npu_dequant_swiglu_quant", "npu_add_rms_norm_quant"})  # fmt: skip
"""Quantisation operators: registered (the dispatcher checks their calls) but not computed."""


def _unimplemented(op: operators.Operator) -> Callable[..., object]:
    if op.name in QUANTISATION:
        quantised = op.params[0].name
        message = (f"torch_npu.{op.qualified}: quantising {quantised!r} is not implemented by the kvlint emulator "
                   "(quantisation operators are not emulated; run the unquantised model)")  # fmt: skip
    else:
        message = f"the kvlint emulator has no implementation of torch_npu.{op.qualified}"

    def kernel(*args: object, **kwargs: object) -> object:
        raise NotImplementedError(message)

    return kernel
