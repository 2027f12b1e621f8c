"""torch_npu's NPU-graph operator handlers: ``torch_npu.npu.NpuGraphOpHandler``, ``register_npu_graph_handler``
and their registry (``torch_npu.npu._npugraph_handlers.npugraph_handler._NPU_GRAPH_OP_HANDLERS``), which say
which captured calls ``NPUGraph.update(cpu_update_input=...)`` updates, and which of their arguments
(docs/operators/dispatcher.md#dsp-c25).

A handler is a class whose hooks are class methods (the registry holds classes, never instances), registered
under operator names: the packet (``"npu_fused_infer_attention_score"``) or an overload (``"….default"``,
``"….out"``). Its ``UPDATE_SPECS`` maps an operator name to ``("arg", position, key)`` triples: the argument
at that position of the schema takes ``update_input[key]``. The built-in handlers are torch_npu's: FIA v1
(``actual_seq_lengths``, ``actual_seq_lengths_kv``), FIA v2 (``actual_seq_qlen``, ``actual_seq_kvlen``),
``_npu_paged_attention`` and ``npu_multi_head_latent_attention.out`` (``context_lens``). A program registers
its own for an operator of its own.

The emulator's capture records every call (``graphs``); the handlers decide only which recorded calls an
update reaches and how. ``prepare_capture`` and ``postprocess_result`` are accepted for a program's handler and
not called: the emulated capture runs each call as issued.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import torch

_NPU_GRAPH_OP_HANDLERS: dict[str, type[NpuGraphOpHandler]] = {}
"""Operator name -> its handler class (torch_npu's name for the registry, which its tests read)."""


@dataclass
class GraphDispatchRecord:
    """A captured call an update reaches: its operator and its arguments, as the dispatcher passed them (the
    positional ones in ``args``, the keyword-only ones in ``kwargs``)."""

    op_cache_entry: torch._ops.OpOverload
    args: list[Any]
    kwargs: dict[str, Any]

    def set_argument(self, position: int, value: Any) -> None:
        """The argument at ``position`` of the schema takes ``value``, wherever the dispatcher put it; an int
        list given as a tensor becomes a list, as the dispatcher converts it."""
        argument = self.op_cache_entry._schema.arguments[position]
        kind = argument.type
        kind = kind.getElementType() if isinstance(kind, torch.OptionalType) else kind
        if isinstance(kind, torch.ListType) and value is not None:
            value = value.tolist() if isinstance(value, torch.Tensor) else list(value)
        if position < len(self.args):
            self.args[position] = value
        else:
            self.kwargs[argument.name] = value


class NpuGraphOpHandler:
    """Base class of the handlers: spec-driven updates, no capture-time change."""

    UPDATE_SPECS: dict[str, list[tuple[str, int, str]]] = {}

    @classmethod
    def get_update_specs(cls, op_name: str) -> list[tuple[str, int, str]]:
        """The ``("arg", position, key)`` triples of ``op_name`` (none for an operator it does not list)."""
        return list(cls.UPDATE_SPECS.get(op_name, []))

    @classmethod
    def update_args(cls, record: GraphDispatchRecord, update_input: dict[str, Any]) -> None:
        """Write ``update_input[key]`` into the argument at ``position`` of each spec whose key is given."""
        for kind, position, key in cls.get_update_specs(record.op_cache_entry.__name__):
            if kind == "arg" and key in update_input:
                record.set_argument(position, update_input[key])

    @classmethod
    def prepare_capture(cls, func: Any, args: Any, kwargs: Any) -> tuple[Any, Any, Any]:
        """A program's handler may override it; the emulated capture does not call it."""
        return func, args, kwargs

    @classmethod
    def postprocess_result(cls, result: Any, kwargs: Any) -> Any:
        """A program's handler may override it; the emulated capture does not call it."""
        return result


Handler = type[NpuGraphOpHandler]


def register_npu_graph_handler(names: str | Iterable[str]) -> Callable[[Handler], Handler]:
    """Class decorator: register the handler under one operator name or several."""
    listed = [names] if isinstance(names, str) else list(names)

    def register(handler: Handler) -> Handler:
        for name in listed:
            _NPU_GRAPH_OP_HANDLERS[name] = handler
        return handler

    return register


def handler_of(func: torch._ops.OpOverload) -> type[NpuGraphOpHandler] | None:
    """The handler of a captured call: its overload's (``name.overload``), else its packet's."""
    overload = func.__name__
    return _NPU_GRAPH_OP_HANDLERS.get(overload) or _NPU_GRAPH_OP_HANDLERS.get(overload.split(".")[0])


def _specs(name: str, lengths: tuple[tuple[int, str], ...], overloads: tuple[str, ...]) -> dict[str, list]:
    return {f"{name}{overload}": [("arg", position, key) for position, key in lengths] for overload in overloads}


_FIA = ("", ".default", ".out")


@register_npu_graph_handler([f"npu_fused_infer_attention_score{overload}" for overload in _FIA])
class _FusedInferAttentionHandler(NpuGraphOpHandler):
    """FIA v1: the query and KV lengths."""

    UPDATE_SPECS = _specs("npu_fused_infer_attention_score", ((5, "actual_seq_lengths"), (6, "actual_seq_lengths_kv")),
                          _FIA)  # fmt: skip


@register_npu_graph_handler([f"npu_fused_infer_attention_score_v2{overload}" for overload in _FIA])
class _FusedInferAttentionV2Handler(NpuGraphOpHandler):
    """FIA v2: the query and KV lengths."""

    UPDATE_SPECS = _specs("npu_fused_infer_attention_score_v2", ((7, "actual_seq_qlen"), (8, "actual_seq_kvlen")), _FIA)


@register_npu_graph_handler(["_npu_paged_attention.default", "npu_multi_head_latent_attention.out"])
class _ContextLengthsHandler(NpuGraphOpHandler):
    """ATB's paged attention and MLA: the context lengths."""

    UPDATE_SPECS = {"_npu_paged_attention.default": [("arg", 7, "context_lens")],
                    "npu_multi_head_latent_attention.out": [("arg", 5, "context_lens")]}  # fmt: skip
