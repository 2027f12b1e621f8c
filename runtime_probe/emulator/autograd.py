"""Autograd of the emulated operators, as op-plugin registers it (``op_plugin/config/derivatives.yaml`` and
``AutogradErrorFallback.cpp``; docs/semantics.md#sem-9-3).

- ``npu_fusion_attention(_v2)``: an Autograd kernel whose backward calls the device's backward operator,
  ``torch.ops.npu.npu_fusion_attention_grad(_v2)``, with the arguments derivatives.yaml gives it (``dy``, the
  forward's parameters, its results as ``attention_in``, ``softmax_max``, ``softmax_sum``, ``softmax_in``,
  ``seed``, ``offset``, ``numels``), so that DTensor shards the backward through that operator's handler
  (``sharding``) and a program or a fake-tensor test can call it. Its CPU kernel recomputes the forward from
  q, k, v (and pse, sink, the ropes) with autograd on and differentiates it: it does not read the softmax
  statistics nor ``attention_in``, which the device reads (they are what the forward returned for the same
  inputs); its fake kernel gives the inputs' shapes.
- The other operators with a backward (``BACKWARDS``): an Autograd kernel whose backward calls a backward
  operator, ``torch.ops.kvlint_emulator.<name>_backward``, opaque to ``torch.compile`` as torch_npu's
  ``*_backward`` operators are, computed the same way.
- Only the first output's gradient is used (``dy`` of ``npu_fusion_attention_grad``, ``grad`` of
  ``npu_rms_norm_backward``); ``rstd`` is not differentiable.
- Operators op-plugin gives ``autogradNotImplementedFallback`` (``NO_DERIVATIVE``): the forward runs, and a
  backward through its outputs raises ``RuntimeError: derivative for npu::<name> is not implemented``.

The others keep torch's fallback for operators without an autograd kernel, as on the device.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import torch
from kvlint.runtime_probe.reference import moe, norms, rope
from kvlint.runtime_probe.reference import operators as reference
from kvlint.runtime_probe.reference.attention_call import differentiable

from kvlint.catalogue import operators

NAMESPACE = "kvlint_emulator"
"""The backward operators' namespace: they are the emulator's, not torch_npu's public operators."""


def _attention(function: Callable[..., Any]) -> Callable[..., Any]:
    def recompute(**arguments: Any) -> Any:
        with differentiable():
            return function(**arguments)

    return recompute


BACKWARDS: dict[str, tuple[tuple[str, ...], Callable[..., Any]]] = {
    "npu_fusion_attention": (("query", "key", "value", "pse", "sink"), _attention(reference.fusion_attention)),
    "npu_fusion_attention_v2": (("query", "key", "value", "pse", "query_rope", "key_rope", "sink"),
                                _attention(reference.fusion_attention_v2)),
    "npu_rms_norm": (("input", "gamma"), inspect.unwrap(norms.rms_norm)),
    "npu_rotary_mul": (("input", "r1", "r2"), inspect.unwrap(rope.rotary_mul)),
    "npu_swiglu": (("input",), inspect.unwrap(moe.swiglu)),
}  # fmt: skip
"""Operator -> (its differentiable inputs, per derivatives.yaml; the differentiable form of its reference:
the reference functions without their ``no_grad``)."""
GRAD_OPERATORS = {"npu_fusion_attention": "npu_fusion_attention_grad",
                  "npu_fusion_attention_v2": "npu_fusion_attention_grad_v2"}  # fmt: skip
"""Forward -> the device's backward operator derivatives.yaml calls; it returns one gradient per differentiable
input of ``BACKWARDS``, in that order (dq, dk, dv, dpse, [dq_rope, dk_rope,] dsink), an empty tensor for an
input not given."""
FORWARD_RESULTS = {"attention_in": 0, "softmax_max": 1, "softmax_sum": 2, "softmax_in": 3, "seed": 4, "offset": 5,
                   "numels": 6}  # fmt: skip
"""The grad operator's arguments that derivatives.yaml fills with the forward's results (by position)."""
GRAD_SCALE = ("scale_value", "scale")
"""The grad operator's name of the forward's ``scale``."""
NON_DIFFERENTIABLE_OUTPUTS = {"npu_rms_norm": (1,)}
"""derivatives.yaml's ``output_differentiability: [true, false]``: rstd."""
NO_DERIVATIVE = frozenset({"npu_add_rms_norm", "npu_interleave_rope", "npu_moe_gating_top_k_softmax",
                           "npu_apply_rotary_pos_emb"})  # fmt: skip
"""The operators ``AutogradErrorFallback.cpp`` registers ``autogradNotImplementedFallback`` for."""
IN_PLACE_RESULTS = {"npu_apply_rotary_pos_emb": ("query", "key")}
"""Operators returning their inputs, rotated in place (``rope.IN_PLACE``)."""


def register(libraries: dict[str, torch.library.Library]) -> torch.library.Library:
    """Register the Autograd kernels of ``BACKWARDS`` and ``NO_DERIVATIVE`` in the ``npu`` library, and the
    backward operators in a library of their own (returned, to be kept alive)."""
    backwards = torch.library.Library(NAMESPACE, "DEF")
    for name, (inputs, formula) in BACKWARDS.items():
        op = operators.lookup(name)
        if name in GRAD_OPERATORS:
            libraries[op.namespace].impl(name, _device_backward_kernel(op, inputs), "Autograd", with_keyset=True)
            continue
        backwards.define(_backward_schema(op))
        backwards.impl(f"{name}_backward", _backward_kernel(op, inputs, formula), "CPU")
        torch.library.register_fake(f"{NAMESPACE}::{name}_backward", _backward_fake(op, inputs), lib=backwards)
        libraries[op.namespace].impl(name, _differentiable_kernel(op, inputs), "Autograd", with_keyset=True)
    for name in NO_DERIVATIVE:
        op = operators.lookup(name)
        # AutogradCPU, not the Autograd alias: the dispatcher prefers an aten composition (rope.IN_PLACE's) to
        # the alias, but not to a kernel of the key itself (NPU tensors are CPU tensors)
        libraries[op.namespace].impl(name, _not_implemented_kernel(op), "AutogradCPU", with_keyset=True)
    return backwards


def _backward_schema(op: operators.Operator) -> str:
    """``<name>_backward(Tensor grad, <the forward's parameters>) -> Tensor[]``: one gradient per
    differentiable input (empty for an input not given)."""
    parameters = op.schema[op.schema.index("(") + 1 : op.schema.rindex(") ->")]
    return f"{op.name}_backward(Tensor grad, {parameters}) -> Tensor[]"


def _bind(op: operators.Operator, args: tuple[Any, ...], keywords: dict[str, Any]) -> dict[str, Any]:
    """Every parameter by name: the positional ones in schema order, the keywords, the schema defaults."""
    bound = {p.name: p.default for p in op.params}
    bound.update(zip((p.name for p in op.params), args))
    bound.update(keywords)
    return bound


def _backward_kernel(op: operators.Operator, inputs: tuple[str, ...],
                     formula: Callable[..., Any]) -> Callable[..., list[torch.Tensor]]:  # fmt: skip
    def kernel(grad: torch.Tensor, *args: Any, **keywords: Any) -> list[torch.Tensor]:
        return _gradients(inputs, formula, grad, _bind(op, args, keywords))

    return kernel


def _gradients(inputs: tuple[str, ...], formula: Callable[..., Any], grad: torch.Tensor,
               bound: dict[str, Any]) -> list[torch.Tensor]:  # fmt: skip
    """The gradient of the first output of ``formula(**bound)`` along ``grad``, for each of ``inputs``
    (zeros for an input it does not reach, an empty tensor for one not given)."""
    leaves = {name: bound[name].detach().requires_grad_() for name in inputs if bound[name] is not None}
    with torch.enable_grad(), _autograd_dispatch():
        result = formula(**{**bound, **leaves})
        output = result[0] if isinstance(result, (tuple, list)) else result
        grads = torch.autograd.grad(output, list(leaves.values()), grad, allow_unused=True)
    found = dict(zip(leaves, grads))
    return [_gradient(found.get(name), bound[name], grad) for name in inputs]


def _autograd_dispatch() -> torch._C._ForceDispatchKeyGuard:
    """Autograd back on in the dispatcher: a kernel runs with the keys above it excluded when a tensor
    subclass dispatched it (DTensor runs the local grad operator so), and the recomputation must record."""
    exclude = torch._C._dispatch_tls_local_exclude_set()
    for key in (torch._C.DispatchKey.AutogradFunctionality, torch._C.DispatchKey.ADInplaceOrView):
        exclude = exclude.remove(key)
    return torch._C._ForceDispatchKeyGuard(torch._C._dispatch_tls_local_include_set(), exclude)


def kernels(op: operators.Operator) -> tuple[Callable[..., Any], Callable[..., Any]] | None:
    """(CPU kernel, fake kernel) of a device backward operator (``GRAD_OPERATORS``), or None for another."""
    forward = next((name for name, grad in GRAD_OPERATORS.items() if grad == op.name), None)
    if forward is None:
        return None
    inputs, formula = BACKWARDS[forward]
    forward_op = operators.lookup(forward)
    forward_names = {p.name for p in forward_op.params}

    def arguments(args: tuple[Any, ...], keywords: dict[str, Any]) -> tuple[torch.Tensor, dict[str, Any]]:
        """``dy`` and the forward's arguments of a grad call."""
        bound = _bind(op, args, keywords)
        given = {name: value for name, value in bound.items() if name in forward_names}
        given[GRAD_SCALE[1]] = bound[GRAD_SCALE[0]]
        return bound["dy"], _bind(forward_op, (), given)

    def kernel(*args: Any, **keywords: Any) -> tuple[torch.Tensor, ...]:
        dy, bound = arguments(args, keywords)
        return tuple(_gradients(inputs, formula, dy, bound))

    def fake(*args: Any, **keywords: Any) -> tuple[torch.Tensor, ...]:
        dy, bound = arguments(args, keywords)
        return tuple(dy.new_empty(0) if bound[name] is None else torch.empty_like(bound[name]) for name in inputs)

    return kernel, fake


def _gradient(grad: torch.Tensor | None, tensor: torch.Tensor | None, like: torch.Tensor) -> torch.Tensor:
    if tensor is None:
        return like.new_empty(0)
    return torch.zeros_like(tensor) if grad is None else grad.to(tensor.dtype)


def _backward_fake(op: operators.Operator, inputs: tuple[str, ...]) -> Callable[..., list[torch.Tensor]]:
    def fake(grad: torch.Tensor, *args: Any, **keywords: Any) -> list[torch.Tensor]:
        bound = _bind(op, args, keywords)
        return [grad.new_empty(0) if bound[name] is None else torch.empty_like(bound[name]) for name in inputs]

    return fake


def _redispatch(op: operators.Operator, keyset: torch._C.DispatchKeySet, args: tuple[Any, ...],
                keywords: dict[str, Any]) -> Any:  # fmt: skip
    """The operator's kernel below autograd."""
    overload = getattr(getattr(torch.ops, op.namespace), op.name).default
    with torch._C._AutoDispatchBelowAutograd():
        return overload.redispatch(keyset & torch._C._after_autograd_keyset, *args, **keywords)


def _differentiable_kernel(op: operators.Operator, inputs: tuple[str, ...]) -> Callable[..., Any]:
    backward_op = getattr(getattr(torch.ops, NAMESPACE), f"{op.name}_backward")
    not_differentiable = NON_DIFFERENTIABLE_OUTPUTS.get(op.name, ())

    class Differentiable(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, call: tuple[Any, ...], *tensors: torch.Tensor | None) -> Any:
            keyset, args, keywords = call
            result = _redispatch(op, keyset, args, keywords)
            ctx.call = (args, keywords)
            if not_differentiable:
                ctx.mark_non_differentiable(*(result[i] for i in not_differentiable))
            return result

        @staticmethod
        def backward(ctx: Any, grad: torch.Tensor | None, *unused: Any) -> tuple[torch.Tensor | None, ...]:
            if grad is None:  # only an output whose gradient the device's backward ignores was used
                return (None,) * (1 + len(inputs))
            args, keywords = ctx.call
            grads = backward_op(grad, *args, **keywords)
            return (None, *(g if needed else None for g, needed in zip(grads, ctx.needs_input_grad[1:])))

    def kernel(keyset: torch._C.DispatchKeySet, *args: Any, **keywords: Any) -> Any:
        bound = _bind(op, args, keywords)
        return Differentiable.apply((keyset, args, keywords), *(bound[name] for name in inputs))

    return kernel


def _device_backward_kernel(op: operators.Operator, inputs: tuple[str, ...]) -> Callable[..., Any]:
    """The Autograd kernel of a forward in ``GRAD_OPERATORS``: its backward calls the device's grad operator as
    derivatives.yaml does."""
    grad_op = operators.lookup(GRAD_OPERATORS[op.name])
    overload = getattr(torch.ops.npu, grad_op.name).default
    positional = [p.name for p in grad_op.positional]
    keyword_names = [p.name for p in grad_op.params if p.kw_only]

    class Differentiable(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, call: tuple[Any, ...], *tensors: torch.Tensor | None) -> Any:
            keyset, args, keywords = call
            result = _redispatch(op, keyset, args, keywords)
            ctx.call = (args, keywords)
            ctx.save_for_backward(*result[:4])
            ctx.numbers = tuple(result[4:])
            return result

        @staticmethod
        def backward(ctx: Any, grad: torch.Tensor | None, *unused: Any) -> tuple[torch.Tensor | None, ...]:
            if grad is None:  # only an output whose gradient the device's backward ignores was used
                return (None,) * (1 + len(inputs))
            bound = _bind(op, *ctx.call)
            results = (*ctx.saved_tensors, *ctx.numbers)
            bound.update({"dy": grad, GRAD_SCALE[0]: bound[GRAD_SCALE[1]]},
                         **{name: results[position] for name, position in FORWARD_RESULTS.items()})  # fmt: skip
            grads = overload(*(bound[name] for name in positional),
                             **{name: bound[name] for name in keyword_names if name in bound})  # fmt: skip
            return (None, *(g if needed else None for g, needed in zip(grads, ctx.needs_input_grad[1:])))

    def kernel(keyset: torch._C.DispatchKeySet, *args: Any, **keywords: Any) -> Any:
        bound = _bind(op, args, keywords)
        return Differentiable.apply((keyset, args, keywords), *(bound[name] for name in inputs))

    return kernel


def _not_implemented_kernel(op: operators.Operator) -> Callable[..., Any]:
    message = f"derivative for {op.namespace}::{op.name} is not implemented"
    in_place = IN_PLACE_RESULTS.get(op.name, ())
    tensor_params = [p.name for p in op.params if p.type.startswith("Tensor")]

    class NotImplementedBackward(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, call: tuple[Any, ...], *tensors: torch.Tensor | None) -> Any:
            keyset, args, keywords = call
            result = _redispatch(op, keyset, args, keywords)
            bound = _bind(op, args, keywords)
            if in_place:
                ctx.mark_dirty(*(bound[name] for name in in_place))
            return result

        @staticmethod
        def backward(ctx: Any, *grads: Any) -> Any:
            raise RuntimeError(message)

    def kernel(keyset: torch._C.DispatchKeySet, *args: Any, **keywords: Any) -> Any:
        bound = _bind(op, args, keywords)
        tensors = [bound[name] for name in tensor_params if isinstance(bound[name], torch.Tensor)]
        return NotImplementedBackward.apply((keyset, args, keywords), *tensors)

    return kernel
