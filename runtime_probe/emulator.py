"""CPU emulator of torch_npu: the ``npu`` operators registered with ``torch.library``, and a ``torch_npu``
module that exposes them, so NPU model code runs and is tested on machines without an NPU.

The operators are defined from the verbatim schema strings of ``kvlint.catalogue.schemas``, so the dispatcher
accepts and refuses arguments exactly as on the device (e.g. ``num_query_heads`` on FIA v1 raises
``RuntimeError``). CPU kernels come from ``kvlint.runtime_probe.reference.operators``; fake kernels give the output
shapes so ``torch.compile`` and FakeTensor tracing work. Operators without a reference raise
``NotImplementedError`` naming the operator. A real torch_npu is never shadowed.
"""

from __future__ import annotations

import importlib.util
import sys
import types
from collections.abc import Callable

import torch

from kvlint.catalogue import operators
from kvlint.runtime_probe.reference import operators as reference
from kvlint.runtime_probe.reference.attention_call import lse_dtype
from kvlint.runtime_probe.reference.layouts import parse_layout, result_shapes

NAMESPACE = "npu"
MODULE_NAME = "torch_npu"
MARKER = "__kvlint_emulator__"
"""Attribute set on the emulated ``torch_npu`` module, to tell it from a real one."""

REFERENCES: dict[str, Callable[..., object]] = {
    operators.FIA_V1: reference.fused_infer_attention_score,
    operators.FIA_V2: reference.fused_infer_attention_score_v2,
    operators.IFA: reference.incre_flash_attention,
    operators.PFA: reference.prompt_flash_attention,
    "scatter_update": reference.scatter_update,
    "scatter_update_": reference.scatter_update_,
    "npu_scatter_nd_update": reference.npu_scatter_nd_update,
    "npu_scatter_nd_update_": reference.npu_scatter_nd_update_,
}
LSE_FLAG = {operators.FIA_V1: "softmax_lse_flag", operators.FIA_V2: "return_softmax_lse"}
FUNCTIONAL_FORM = {"scatter_update_": "scatter_update", "npu_scatter_nd_update_": "npu_scatter_nd_update"}
"""In-place operator -> its out-of-place twin. torch.compile cannot functionalise a custom operator that
returns ``Tensor(a!)``, so tracing decomposes the in-place one into the twin plus ``copy_``; eager CPU calls
keep the direct in-place kernel."""

_library: torch.library.Library | None = None


def is_installed() -> bool:
    """True once ``install()`` has registered the operators in this process."""
    return _library is not None


def install() -> types.ModuleType:
    """Register the operators (once) and make ``import torch_npu`` return the emulated module."""
    global _library
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
    if _library is None:
        _library = _register()
    if present is None:
        sys.modules[MODULE_NAME] = present = _module()
    return present


def _register() -> torch.library.Library:
    taken = [name for name in operators.OPERATORS if hasattr(getattr(torch.ops, NAMESPACE), name)]
    if taken:
        raise RuntimeError(
            f"{NAMESPACE}::{taken[0]} is already registered (by torch_npu or another library); "
            "the kvlint emulator does not replace it"
        )
    library = torch.library.Library(NAMESPACE, "DEF")
    for op in operators.OVERLOADS.values():
        library.define(op.schema)
        kernel, fake = _kernels(op)
        library.impl(op.qualified, kernel, "CPU")
        if op.name in FUNCTIONAL_FORM:
            library.impl(op.qualified, _decomposed(FUNCTIONAL_FORM[op.name]), "CompositeImplicitAutograd")
        else:
            torch.library.register_fake(f"{NAMESPACE}::{op.qualified}", fake, lib=library)
    return library


def _module() -> types.ModuleType:
    """A ``torch_npu`` whose operator attributes are the ``torch.ops.npu`` packets themselves."""
    module = types.ModuleType(MODULE_NAME, "CPU emulation of torch_npu by kvlint (KVLINT_EMULATE=1).")
    setattr(module, MARKER, True)
    for name in operators.OPERATORS:
        setattr(module, name, getattr(getattr(torch.ops, NAMESPACE), name))
    return module


def _kernels(op: operators.Operator) -> tuple[Callable[..., object], Callable[..., object]]:
    """(CPU kernel, fake kernel) of one overload."""
    function = REFERENCES.get(op.name)
    if function is None:
        return _unimplemented(op), _unimplemented(op)
    if op.name in LSE_FLAG or op.name in (operators.IFA, operators.PFA):
        fake = _attention_fake(op.name)
        if op.overload == "out":
            return _out_kernel(function), _out_kernel(fake)
        return function, fake
    return function, lambda input, indices, updates, *axis: torch.empty_like(input)


def _decomposed(functional: str) -> Callable[..., torch.Tensor]:
    def kernel(input: torch.Tensor, *args: object) -> torch.Tensor:
        return input.copy_(getattr(getattr(torch.ops, NAMESPACE), functional)(input, *args))

    return kernel


def _unimplemented(op: operators.Operator) -> Callable[..., object]:
    def kernel(*args: object, **kwargs: object) -> object:
        raise NotImplementedError(f"the kvlint emulator has no implementation of torch_npu.{op.qualified}")

    return kernel


def _out_kernel(function: Callable[..., object]) -> Callable[..., object]:
    """The ``.out`` overload: compute, then write into ``out=[attention_out, softmax_lse]``."""

    def kernel(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, *, out: list[torch.Tensor],
               workspace: torch.Tensor | None = None, **keywords: object) -> tuple[torch.Tensor, ...]:  # fmt: skip
        for target, result in zip(out, function(query, key, value, **keywords)):
            target.resize_(result.shape).copy_(result)
        return tuple(out)

    return kernel


def _attention_fake(name: str) -> Callable[..., object]:
    """Shapes and dtypes of the attention outputs, from the same layout code as the reference."""

    def fake(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, **keywords: object) -> object:
        args = reference.bind(name, keywords)
        heads = args[operators.NUM_HEADS_PARAM[name]]
        kv_heads = args["num_key_value_heads"] or heads
        with_lse = bool(args.get(LSE_FLAG.get(name), False))
        paged = args.get("block_table") is not None
        out_shape, lse_shape = result_shapes(
            query, value, parse_layout(args["input_layout"]), heads, kv_heads, paged, with_lse
        )
        out = query.new_empty(out_shape)
        if name not in LSE_FLAG:
            return out
        return out, query.new_empty(lse_shape, dtype=lse_dtype(query.dtype, with_lse))

    return fake
