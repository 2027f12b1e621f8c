"""The NPU as a device on a CPU: ``torch.device("npu:0")``, ``device="npu"``, ``.npu()``, ``.to("npu")``,
``pin_memory``, ``torch.npu`` and the ``hccl`` process-group backend.

**NPU tensors are CPU tensors, and say so**: ``x.device`` is ``cpu`` for every tensor, including those
created with ``device="npu"``. The alternative, tensors that report ``npu:0``, needs a tensor subclass
that routes every aten operator through Python (each small operator several times slower, ``.numpy()``,
``data_ptr`` and C++ kernels broken): programs would run unchanged, but slowly and not all of them. With
CPU tensors every torch operator and every emulated kernel runs as it does on CPU. What this means for a
program:

- ``torch.device("npu:0")`` parses (PrivateUse1 is renamed ``npu``), and ``device="npu"`` on any factory,
  ``x.to("npu")``, ``x.npu()``, ``module.npu()`` and ``torch.set_default_device("npu")`` allocate on
  the CPU: the allocation kernels of the PrivateUse1 key return CPU tensors. Moving a tensor to ``npu``
  always copies it (as a host-to-device transfer does), even one created with ``device="npu"``;
- code that branches on ``x.device.type == "npu"`` or ``x.is_npu`` takes its non-NPU branch, and
  ``x.device == torch.device("npu:0")`` is False;
- ``torch.Generator(device="npu")`` is a CPU generator;
- ``pin_memory=True`` and ``x.pin_memory()`` work: host memory counts as pinned, ``pin_memory()``
  returns the tensor itself and ``is_pinned()`` is True;
- under ``torch.compile`` (fake tensors) a tensor created with ``device="npu"`` is a CPU tensor too, so
  graphs mix them with their inputs as eager code does;
- ``torch.matmul`` / ``mm`` / ``bmm`` / ``@`` of two floating-point tensors of different dtypes (a bf16
  activation times an fp32 router weight) compute in the promoted dtype, as the NPU accepts them; CPU aten
  would refuse them.

``torch.npu`` is the module ``npu.py`` (registered as the device module, also ``torch_npu.npu``). The
``hccl`` backend of ``torch.distributed`` is gloo, for several processes on one machine: its groups are
gloo groups that also name their communicator (``get_hccl_comm_name``, added to gloo's groups), and
``torch_npu._C._distributed_c10d.ProcessGroupHCCL.Options`` is accepted (and ignored).
"""

from __future__ import annotations

import functools
import types
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.distributed
from kvlint.runtime_probe.emulator import graphs, npu

NAME = "npu"
_KEYS = {"cpu": "CPU", NAME: "CPU", "meta": "Meta", "cuda": "CUDA", "xpu": "XPU", "mps": "MPS", "hpu": "HPU",
         "xla": "XLA", "lazy": "Lazy", "mtia": "MTIA"}  # fmt: skip
"""Device type -> the dispatch key its allocations go to (``npu`` allocations are CPU allocations)."""
_installed = False
_library: torch.library.Library | None = None
"""The aten kernels registered here: kept alive for the life of the process."""


def install() -> None:
    """Make ``npu`` a device whose tensors live in CPU memory (once per process)."""
    global _installed, _library
    if _installed:
        return
    backend = torch._C._get_privateuse1_backend_name()
    if backend not in ("privateuseone", NAME):
        raise RuntimeError(f"the PrivateUse1 device is already the {backend!r} backend; the kvlint emulator "
                           "needs it for 'npu'")  # fmt: skip
    if backend == "privateuseone":
        torch.utils.rename_privateuse1_backend(NAME)
        torch.utils.generate_methods_for_privateuse1_backend()
    if getattr(torch, NAME, None) is None:
        torch._register_device_module(NAME, npu)
    torch._C._acc.register_python_privateuseone_hook(_Hooks())
    torch._C._acc.register_python_privateuseone_device_guard(_Guard())
    with warnings.catch_warnings():  # "overriding a previously registered kernel": that is the point
        warnings.simplefilter("ignore")
        _library = _allocation_kernels()
    _generators_on_cpu()
    _fake_tensors_on_cpu()
    _mixed_float_matmuls()
    _hccl_is_gloo()
    _installed = True


class _Hooks(torch._C._acc.PrivateUse1Hooks):
    def is_available(self) -> bool:
        return True

    def has_primary_context(self, device_index: int) -> bool:
        return True

    def is_built(self) -> bool:
        return True


class _Guard(torch._C._acc.DeviceGuard):
    def type_(self) -> torch._C._autograd.DeviceType:
        return torch._C._autograd.DeviceType.PrivateUse1


def _target(device: torch.device | None) -> tuple[torch._C.DispatchKeySet, torch.device | None]:
    """Where an allocation for ``device`` goes: the backend's key, and the device to ask it for."""
    kind = "cpu" if device is None else device.type
    if kind not in _KEYS:
        raise RuntimeError(f"the kvlint emulator cannot allocate on device {device}")
    target = torch.device("cpu") if kind == NAME else device
    return torch._C.DispatchKeySet(getattr(torch._C.DispatchKey, _KEYS[kind])), target


def _empty(size: Sequence[int], dtype: torch.dtype | None = None, layout: torch.layout | None = None,
           device: torch.device | None = None, pin_memory: bool | None = None,
           memory_format: torch.memory_format | None = None) -> torch.Tensor:  # fmt: skip
    """``aten::empty.memory_format``: ``npu`` is CPU memory, and pinned memory is ordinary host memory."""
    keys, target = _target(device)
    return torch.ops.aten.empty.memory_format.redispatch(keys, size, dtype=dtype, layout=layout, device=target,
                                                         memory_format=memory_format)  # fmt: skip


def _empty_strided(size: Sequence[int], stride: Sequence[int], dtype: torch.dtype | None = None,
                   layout: torch.layout | None = None, device: torch.device | None = None,
                   pin_memory: bool | None = None) -> torch.Tensor:  # fmt: skip
    """``aten::empty_strided``: as :func:`_empty`."""
    keys, target = _target(device)
    return torch.ops.aten.empty_strided.default.redispatch(keys, size, stride, dtype=dtype, layout=layout, device=target)


def _allocation_kernels() -> torch.library.Library:
    """Allocation for the ``npu`` key returns CPU memory, and ``pin_memory`` needs no pinned allocator.

    Factories without a tensor argument pass through BackendSelect, which picks the key from ``device``:
    the two allocation primitives are served there for ``cpu`` and ``npu`` (dropping ``pin_memory``), and
    under the PrivateUse1 key for allocations that reach it directly. Every other factory (``zeros``,
    ``arange``, ``randn``, ``tensor(...)``, ``to``) allocates through them. ``record_stream`` of a (CPU)
    tensor does nothing.
    """
    library = torch.library.Library("aten", "IMPL")
    for key in ("BackendSelect", "PrivateUse1"):
        library.impl("empty.memory_format", _empty, key)
        library.impl("empty_strided", _empty_strided, key)
    library.impl("is_pinned", lambda input, device=None: input.device.type == "cpu", "CompositeExplicitAutograd")
    library.impl("_pin_memory", lambda input, device=None: input, "CompositeExplicitAutograd")
    # record_stream keeps a block from reuse until a stream's pending work ends; the CPU has none pending.
    library.impl("record_stream", lambda input, stream: None, "CPU")
    return library


class _GeneratorType(type(torch._C.Generator)):
    def __instancecheck__(cls, instance: object) -> bool:
        return isinstance(instance, torch._C.Generator)

    def __subclasscheck__(cls, subclass: type) -> bool:
        return issubclass(subclass, torch._C.Generator)


class _Generator(torch._C.Generator, metaclass=_GeneratorType):
    """``torch.Generator(device="npu")`` is a CPU generator, as the tensors it fills are CPU tensors."""

    def __new__(cls, device: object = "cpu") -> torch._C.Generator:  # type: ignore[misc]
        kind = device.type if isinstance(device, torch.device) else str(device).split(":")[0]
        return torch._C.Generator("cpu" if kind == NAME else device)


def _generators_on_cpu() -> None:
    if torch.Generator is torch._C.Generator:
        torch.Generator = _Generator  # type: ignore[misc]


def _fake_tensors_on_cpu() -> None:
    """FakeTensors (``torch.compile``) of ``device="npu"`` are CPU tensors, as the real tensors are."""
    from torch._subclasses.fake_tensor import FakeTensor

    original = FakeTensor._normalize_fake_device
    if getattr(original, "__kvlint_emulator__", False):
        return

    def normalize(device: torch.device) -> torch.device:
        return torch.device("cpu") if device.type == NAME else original(device)

    normalize.__kvlint_emulator__ = True  # type: ignore[attr-defined]
    FakeTensor._normalize_fake_device = staticmethod(normalize)


def _promoting(function: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(function)
    def call(input: Any, other: Any, *args: Any, **kwargs: Any) -> Any:
        if (isinstance(input, torch.Tensor) and isinstance(other, torch.Tensor) and input.dtype != other.dtype
                and input.is_floating_point() and other.is_floating_point()):  # fmt: skip
            dtype = torch.promote_types(input.dtype, other.dtype)
            input, other = input.to(dtype), other.to(dtype)
        return function(input, other, *args, **kwargs)

    call.__kvlint_emulator__ = True  # type: ignore[attr-defined]
    return call


def _mixed_float_matmuls() -> None:
    """Matrix products of mixed floating-point dtypes compute in the promoted dtype (the NPU accepts them)."""
    for owner, name in ((torch, "matmul"), (torch, "mm"), (torch, "bmm"), (torch.Tensor, "matmul"),
                        (torch.Tensor, "__matmul__"), (torch.Tensor, "mm"), (torch.Tensor, "bmm")):  # fmt: skip
        function = getattr(owner, name)
        if not getattr(function, "__kvlint_emulator__", False):
            setattr(owner, name, _promoting(function))


class HcclOptions:
    """``torch_npu._C._distributed_c10d.ProcessGroupHCCL.Options``: programs fill ``hccl_config``; gloo ignores it."""

    def __init__(self) -> None:
        self.hccl_config: dict[str, object] = {}
        self.global_ranks_in_group: list[int] = []
        self.group_id = ""


def _hccl_comm_name(self: object, rank: int, init_comm: bool = True) -> str:
    """``get_hccl_comm_name`` of a group's backend (the name the MoE dispatch/combine operators take)."""
    return f"kvlint-gloo-{self.size()}"  # type: ignore[attr-defined]


def _process_group_hccl() -> type:
    """The ``hccl`` backend: gloo, whose groups also answer ``get_hccl_comm_name`` and accept HCCL options."""
    gloo = torch.distributed.ProcessGroupGloo
    if not hasattr(gloo, "get_hccl_comm_name"):
        gloo.get_hccl_comm_name = _hccl_comm_name
    return gloo


def c_module() -> types.ModuleType:
    """``torch_npu._C``, what programs reach of torch_npu's C extension: ``_distributed_c10d.ProcessGroupHCCL``
    (and its ``Options``), the graph task-group handle type, FIA's ``.out`` graph-update entry point and
    ``_weak_ref_tensor``."""
    module = types.ModuleType("torch_npu._C", "torch_npu's C extension, as far as programs use it (kvlint emulator)")
    module._distributed_c10d = types.ModuleType("torch_npu._C._distributed_c10d", "HCCL process groups (gloo)")
    module._distributed_c10d.ProcessGroupHCCL = types.SimpleNamespace(Options=HcclOptions)
    module._NPUTaskGroupHandle = npu.TaskGroupHandle
    module._npu_fused_infer_attention_score_out_graph = graphs.fused_infer_attention_score_out_graph
    module._weak_ref_tensor = lambda tensor: tensor
    return module


def _hccl_is_gloo() -> None:
    """``init_process_group("hccl")`` creates a gloo group (CPU tensors, processes on one machine)."""
    if not torch.distributed.is_available() or "hccl" in torch.distributed.Backend.backend_list:
        return
    torch.distributed.Backend.register_backend("hccl", _process_group_hccl(), devices=["cpu", NAME])
