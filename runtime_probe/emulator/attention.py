"""The attention operators of the emulator: FIA v1/v2, IFA and PFA, with their ``.out`` overloads.

CPU kernels are the float32 reference's functions, run after the documented constraints
(``kvlint.runtime_probe.reference.constraints``): a call the device refuses raises the device's exception type
(``RuntimeError``) naming the argument, the rule and its page. Fake kernels give the output shapes and dtypes
from the same layout code, so ``torch.compile`` and FakeTensor tracing work.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from kvlint.runtime_probe.reference import constraints
from kvlint.runtime_probe.reference import operators as reference
from kvlint.runtime_probe.reference.attention_call import lse_dtype
from kvlint.runtime_probe.reference.layouts import parse_layout, result_shapes

from kvlint.catalogue import operators

REFERENCES: dict[str, Callable[..., object]] = {
    operators.FIA_V1: reference.fused_infer_attention_score,
    operators.FIA_V2: reference.fused_infer_attention_score_v2,
    operators.IFA: reference.incre_flash_attention,
    operators.PFA: reference.prompt_flash_attention,
}
LSE_FLAG = {operators.FIA_V1: "softmax_lse_flag", operators.FIA_V2: "return_softmax_lse"}


def kernels(op: operators.Operator) -> tuple[Callable[..., object], Callable[..., object]] | None:
    """(CPU kernel, fake kernel) of one attention overload, or None for another operator."""
    reference_function = REFERENCES.get(op.name)
    if reference_function is None:
        return None
    function = _refusing(op.name, reference_function)
    fake = _attention_fake(op.name)
    if op.overload == "out":
        return _out_kernel(function), _out_kernel(fake)
    return function, fake


def _refusing(name: str, function: Callable[..., object]) -> Callable[..., object]:
    """The reference function behind the device's documented refusals."""

    def kernel(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, **keywords: object) -> object:
        constraints.refuse(name, {"query": query, "key": key, "value": value, **reference.bind(name, keywords)})
        return function(query, key, value, **keywords)

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
