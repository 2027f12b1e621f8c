"""``torchair``, the graph compiler most Ascend recipes import, on a CPU: ``import torchair`` (and
``import torchair as tng``) gives a package whose entry points compile with torch on the CPU.

- ``get_npu_backend(compiler_config=...)`` is a ``torch.compile`` backend: AOTAutograd with the
  program's ``custom_decompositions``, then the captured graph runs eagerly on the CPU (the emulated
  operators run their CPU kernels; their fake kernels give the shapes while tracing). Like torchair's, it
  is a ``functools.partial`` whose ``keywords`` hold the configuration. ``get_compiler`` is the same
  compiler without Dynamo, ``inference.cache_compile`` compiles with it (nothing is cached on disk).
- ``CompilerConfig`` accepts the nested options programs set (``config.experimental_config.
  frozen_parameter = True``, ``config.mode = "reduce-overhead"``) and records them; no option changes
  what runs on the CPU.
- ``ops.npu_fused_infer_attention_score[_v2]`` are torchair's own operators, ``air::`` in torch
  (``docs/operators/dispatcher.md#dsp-c6``): the ``npu::`` schema with the length arguments as
  ``Tensor?``. On the device they run only inside a GE graph; here they run everywhere, with the same CPU
  kernel as ``torch_npu``'s operator, and stay in the graph under ``torch.compile``.
- ``scope`` (``npu_stream_switch``, ``super_kernel``, ``limit_core_num``), ``ops``' tagged events and
  ``npu_wait_tensor`` order or place device work: on a CPU they do nothing (``npu_wait_tensor`` returns its
  tensor).
- ``patch_for_hcom``, ``use_internal_format_weight``, ``register_fx_node_ge_converter`` (a decorator that
  keeps the converter unregistered: there is no GE graph) and ``logger`` exist so the recipes' set-up runs.
- torch_npu's own backend, ``torch.compile(..., backend="npugraph_ex", options=...)`` and
  ``torch.npu.npugraph_ex.inference.cache_compile``, is the same CPU compiler (registered with the
  emulated torch_npu, whether or not torchair is emulated).

Never installed where a real torchair can be imported.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.machinery
import logging
import sys
import types
from collections.abc import Callable
from typing import Any

import torch
from kvlint.runtime_probe.emulator import attention

from kvlint.catalogue import operators

NAME = "torchair"
logger = logging.getLogger(NAME)
LENGTH_PARAMS = ("actual_seq_lengths", "actual_seq_lengths_kv", "actual_shared_prefix_len", "actual_seq_qlen",
                 "actual_seq_kvlen")  # fmt: skip
"""The length arguments that torchair's ``air::`` attention takes as ``Tensor?`` instead of ``SymInt[]?``."""
_library: torch.library.Library | None = None


def available() -> bool:
    """True when no real torchair is imported or importable."""
    present = sys.modules.get(NAME)
    if present is not None:
        return getattr(present, "__kvlint_emulator__", False)
    return importlib.machinery.PathFinder.find_spec(NAME) is None


def install() -> types.ModuleType | None:
    """Register ``air::`` attention and put the ``torchair`` package in ``sys.modules`` (once)."""
    global _library
    if not available():
        return None
    if NAME in sys.modules:
        return sys.modules[NAME]
    if _library is None:
        _library = _air_operators()
    root = _package(NAME, {
        "get_npu_backend": get_npu_backend, "get_compiler": get_compiler, "CompilerConfig": CompilerConfig,
        "patch_for_hcom": patch_for_hcom, "use_internal_format_weight": use_internal_format_weight,
        "register_fx_node_ge_converter": register_fx_node_ge_converter, "logger": logger,
    })  # fmt: skip
    root.__kvlint_emulator__ = True
    _package(f"{NAME}.configs")
    _package(f"{NAME}.configs.compiler_config", {"CompilerConfig": CompilerConfig})
    _package(f"{NAME}.core")
    _package(f"{NAME}.core.utils", {"logger": logger})
    _package(f"{NAME}.npu_fx_compiler", {"get_npu_backend": get_npu_backend, "get_compiler": get_compiler})
    _package(f"{NAME}.inference", {"cache_compile": cache_compile, "set_dim_gears": set_dim_gears})
    _package(f"{NAME}.scope", {
        "npu_stream_switch": npu_stream_switch, "super_kernel": super_kernel, "limit_core_num": limit_core_num,
        "npu_wait_tensor": npu_wait_tensor,
    })  # fmt: skip
    _package(f"{NAME}.ops", {
        operators.FIA_V1: torch.ops.air.npu_fused_infer_attention_score,
        operators.FIA_V2: torch.ops.air.npu_fused_infer_attention_score_v2,
        "npu_create_tagged_event": npu_create_tagged_event, "npu_tagged_event_record": npu_tagged_event_record,
        "npu_tagged_event_wait": npu_tagged_event_wait, "npu_record_tagged_stream": npu_record_tagged_stream,
        "npu_wait_tensor": npu_wait_tensor,
    })  # fmt: skip
    for name in ("ge_concrete_graph", "ge_concrete_graph.ge_converter", "ge_concrete_graph.ge_converter.experimental",
                 "ge_concrete_graph.ge_converter.experimental.patch_for_hcom_allreduce"):  # fmt: skip
        _package(f"{NAME}.{name}")  # imported for their side effects on the device's collectives
    return root


def _package(name: str, attributes: dict[str, Any] | None = None) -> types.ModuleType:
    """A package in ``sys.modules`` (with a spec, so ``importlib.util.find_spec`` answers), set on its parent."""
    module = types.ModuleType(name, f"{name} on a CPU (kvlint emulator)")
    module.__spec__ = importlib.machinery.ModuleSpec(name, None, is_package=True)
    module.__path__ = []
    module.__dict__.update(attributes or {})
    sys.modules[name] = module
    parent, _, child = name.rpartition(".")
    if parent:
        setattr(sys.modules[parent], child, module)
    return module


# -- torchair.ops: air:: attention -----------------------------------------------------------------------
def _air_schema(op: operators.Operator) -> str:
    """torchair's schema: the ``npu::`` one with every length argument ``Tensor?`` (dsp-c6)."""
    schema = op.schema
    for name in LENGTH_PARAMS:
        schema = schema.replace(f"SymInt[]? {name}=None", f"Tensor? {name}=None")
    return schema


def _lengths_as_lists(keywords: dict[str, Any]) -> dict[str, Any]:
    return {name: value.tolist() if name in LENGTH_PARAMS and isinstance(value, torch.Tensor) else value
            for name, value in keywords.items()}  # fmt: skip


def _air_kernels(name: str) -> tuple[Callable[..., Any], Callable[..., Any]]:
    npu_operator = getattr(torch.ops.npu, name).default
    fake = attention.fake_kernel(name)

    def kernel(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, **keywords: Any) -> Any:
        return npu_operator(query, key, value, **_lengths_as_lists(keywords))

    def fake_kernel(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, **keywords: Any) -> Any:
        return fake(query, key, value, **{k: v for k, v in keywords.items() if k not in LENGTH_PARAMS})

    return kernel, fake_kernel


def _air_operators() -> torch.library.Library:
    library = torch.library.Library("air", "DEF")
    for name in (operators.FIA_V1, operators.FIA_V2):
        library.define(_air_schema(operators.OPERATORS[name]))
        kernel, fake = _air_kernels(name)
        library.impl(name, kernel, "CPU")
        torch.library.register_fake(f"air::{name}", fake, lib=library)
    return library


# -- compiling --------------------------------------------------------------------------------------------
class CompilerConfig:
    """torchair's configuration tree: any nested option can be set and read back."""

    def __init__(self, path: str = "CompilerConfig") -> None:
        object.__setattr__(self, "_path", path)
        object.__setattr__(self, "_options", {})

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        options = object.__getattribute__(self, "_options")
        if name not in options:
            options[name] = CompilerConfig(f"{self._path}.{name}")
        return options[name]

    def __setattr__(self, name: str, value: Any) -> None:
        self._options[name] = value

    def __repr__(self) -> str:
        return f"<{self._path} (kvlint emulator)>"


def _compile(graph: torch.fx.GraphModule, example_inputs: list[Any], *, compiler_config: CompilerConfig | None = None,
             custom_decompositions: dict[Any, Any] | None = None) -> Callable[..., Any]:  # fmt: skip
    """AOTAutograd (functionalised, fake kernels for the shapes), then the graph runs eagerly on the CPU."""
    from torch._dynamo.backends.common import aot_autograd
    from torch._dynamo.backends.debugging import boxed_nop

    backend = aot_autograd(fw_compiler=boxed_nop, decompositions=dict(custom_decompositions or {}),
                           keep_inference_input_mutations=True)  # fmt: skip
    return backend(graph, example_inputs)


def get_npu_backend(*, compiler_config: CompilerConfig | None = None,
                    custom_decompositions: dict[Any, Any] | None = None) -> functools.partial:  # fmt: skip
    """The ``torch.compile`` backend: ``torch.compile(model, backend=torchair.get_npu_backend(...))``."""
    return functools.partial(_compile, compiler_config=compiler_config or CompilerConfig(),
                             custom_decompositions=custom_decompositions or {})  # fmt: skip


def get_compiler(compiler_config: CompilerConfig | None = None) -> functools.partial:
    return get_npu_backend(compiler_config=compiler_config)


def cache_compile(func: Callable[..., Any], *, config: CompilerConfig | None = None, backend: Any = None,
                  dynamic: bool = True, **kwargs: Any) -> Callable[..., Any]:  # fmt: skip
    """Compile ``func`` with the NPU backend (torchair would also cache the compiled graph on disk)."""
    return torch.compile(func, backend=backend or get_npu_backend(compiler_config=config), dynamic=dynamic)


# -- torch_npu's own torch.compile backend ----------------------------------------------------------------
NPUGRAPH_EX = "npugraph_ex"


def npugraph_ex(graph: torch.fx.GraphModule, example_inputs: list[Any], options: dict[str, Any] | None = None,
                **kwargs: Any) -> Callable[..., Any]:  # fmt: skip
    """``torch.compile(f, backend="npugraph_ex", options={...})``: torch_npu's backend (FX fusions, then an
    ACL graph). On the CPU: the same compiler as ``get_npu_backend``; no option changes what runs."""
    return _compile(graph, example_inputs)


def npugraph_ex_namespace() -> types.SimpleNamespace:
    """``torch.npu.npugraph_ex``, registering the backend with Dynamo (once)."""
    import torch._dynamo

    if NPUGRAPH_EX not in torch._dynamo.list_backends(exclude_tags=()):
        torch._dynamo.register_backend(name=NPUGRAPH_EX)(npugraph_ex)

    def cache_compile(func: Callable[..., Any], *, cache_dir: str | None = None, dynamic: bool = True,
                      options: dict[str, Any] | None = None, **kwargs: Any) -> Callable[..., Any]:  # fmt: skip
        """Compile ``func`` with ``npugraph_ex`` (nothing is cached on disk)."""
        return torch.compile(func, backend=NPUGRAPH_EX, dynamic=dynamic, fullgraph=True, options=options or {})

    return types.SimpleNamespace(inference=types.SimpleNamespace(cache_compile=cache_compile))


def set_dim_gears(tensor: torch.Tensor, dim_gears: dict[int, list[int]]) -> None:
    """Shape gears of GE graphs: the CPU graph is dynamic anyway."""


def patch_for_hcom() -> None:
    """Collectives inside torchair graphs: nothing to patch on a CPU."""


def use_internal_format_weight(model: torch.nn.Module) -> None:
    """Internal weight formats: the weights stay as they are (formats do not change values)."""


def register_fx_node_ge_converter(aten_op: Any) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """GE converters convert FX nodes to GE graph nodes; there is no GE graph: the converter is kept as is."""
    return lambda converter: converter


# -- device placement and ordering: nothing to do on a CPU ------------------------------------------------
def npu_stream_switch(stream_tag: str, stream_priority: int = 0,
                      enable_inner_parallel: bool = True) -> contextlib.nullcontext[None]:  # fmt: skip
    return contextlib.nullcontext()


def super_kernel(scope: str | None, options: str = "") -> contextlib.nullcontext[None]:
    return contextlib.nullcontext()


def limit_core_num(op_aicore_num: int, op_vectorcore_num: int) -> contextlib.nullcontext[None]:
    return contextlib.nullcontext()


def npu_wait_tensor(self: torch.Tensor, dependency: torch.Tensor) -> torch.Tensor:
    return self


def npu_create_tagged_event(tag: str) -> types.SimpleNamespace:
    return types.SimpleNamespace(tag=tag)


def npu_tagged_event_record(event: object) -> None:
    """Operators are synchronous: an event needs no record."""


def npu_tagged_event_wait(event: object) -> None:
    """Operators are synchronous: nothing to wait for."""


def npu_record_tagged_stream(input: torch.Tensor, tagged_stream: str) -> None:
    """Streams order nothing on a CPU."""
