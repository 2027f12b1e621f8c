"""DTensor sharding of ``npu_fusion_attention`` (its strategy, ``register_sharding``) and of its backward
``npu_fusion_attention_grad`` (a DTensor op handler, since DTensor does not redistribute keyword arguments), as
torch_npu registers them, so sharded attention runs on several ranks, forward and backward.

The strategies offered: all-Replicate always; data parallel (q, k, v and the output sharded on the layout's B
axis, softmax_max / softmax_sum on dim 0, a BNSS or B1SS mask on dim 0, any other mask replicated) when the
layout has a B and none of pse, padding_mask, prefix, the actual sequence lengths and sink is given and
keep_prob is 1. torch_npu also offers head (N) sharding, which needs its DTensor op handler to rewrite
``head_num`` to the local head count; the emulator does not offer it, so DTensor redistributes a head-sharded
input to one of the strategies above (the result is the same, the communication is not).

DTensor is imported only by programs that use it (it costs about a second): the registration happens when
``torch.distributed.tensor`` is imported, or at once if it already is.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import types
from typing import Any

import torch

from kvlint.catalogue import operators

DTENSOR = "torch.distributed.tensor"
REPLICATE_ONLY = ("pse", "padding_mask", "prefix", "actual_seq_qlen", "actual_seq_kvlen", "sink")
"""Arguments with which torch_npu offers only the all-Replicate strategy."""
_registered = False


def install() -> None:
    """Register the strategy now if DTensor is imported, else when it is."""
    if DTENSOR in sys.modules:
        _register()
    elif not any(isinstance(finder, _AfterDTensorImport) for finder in sys.meta_path):
        sys.meta_path.insert(0, _AfterDTensorImport())


def _register() -> None:
    global _registered
    if _registered:
        return
    from torch.distributed.tensor.experimental import register_sharding

    register_sharding(torch.ops.npu.npu_fusion_attention.default)(fusion_attention_strategy)
    from torch.distributed.tensor import DTensor

    DTensor._op_dispatcher._custom_op_handlers[torch.ops.npu.npu_fusion_attention_grad.default] = (
        fusion_attention_grad_handler)
    _registered = True


def fusion_attention_strategy(*args: Any, **kwargs: Any) -> list[tuple[list[Any], list[Any]]]:
    """(output placements, input placements) pairs: the 7 outputs, then every argument in the order DTensor
    passes them (positional, then keywords), None for a non-tensor."""
    from torch.distributed.tensor import Replicate, Shard

    ints = [None, None, None]
    bound, inputs = _bind(operators.FA, args, kwargs)
    strategies = [([Replicate()] * 4 + ints, inputs({}))]
    batch = _batch_placements(bound)
    if batch is not None:
        strategies.append(([batch["query"], Shard(0), Shard(0), Replicate(), *ints], inputs(batch)))
    return strategies


def fusion_attention_grad_handler(op_call: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, ...]:
    """DTensor's handler of ``npu_fusion_attention_grad`` (the backward DTensor runs after a sharded forward), as
    torch_npu registers one: DTensor redistributes only positional arguments, and the grad's mask, softmax
    statistics and ``attention_in`` are keyword-only. So the handler places every tensor argument itself:
    data parallel as the forward's when the query is sharded on the layout's B axis of a 1-D mesh and torch_npu
    offers it (``dy`` and ``attention_in`` as the query, softmax_max / softmax_sum on dim 0, the mask as the
    forward's), else everything replicated; it runs the operator on the local tensors and returns dq, dk, dv
    placed as q, k, v, and dpse, dsink replicated."""
    from torch.distributed.tensor import DTensor, Replicate, Shard

    params = operators.lookup("npu_fusion_attention_grad").params
    names = [param.name for param in params]
    bound = {**{param.name: param.default for param in params}, **dict(zip(names, args)), **kwargs}
    query = bound["query"]
    mesh = query.device_mesh
    batch = _batch_placements(bound)
    parallel = batch is not None and mesh.ndim == 1 and tuple(query.placements) == (batch["query"],)
    placements = {**batch, "dy": batch["query"], "attention_in": batch["query"], "softmax_max": Shard(0),
                  "softmax_sum": Shard(0)} if parallel else {}  # fmt: skip

    def local(name: str, value: Any) -> Any:
        if not isinstance(value, torch.Tensor):
            return value
        if not isinstance(value, DTensor):
            value = DTensor.from_local(value, mesh, [Replicate()] * mesh.ndim, run_check=False)
        return value.redistribute(mesh, [placements.get(name, Replicate())] * mesh.ndim).to_local()

    grads = op_call(*(local(name, value) for name, value in zip(names, args)),
                    **{name: local(name, value) for name, value in kwargs.items()})  # fmt: skip
    like = (bound["query"], bound["key"], bound["value"])
    wrapped = []
    for index, grad in enumerate(grads):
        if index < 3:
            where = [placements.get(("query", "key", "value")[index], Replicate())] * mesh.ndim
            wrapped.append(DTensor.from_local(grad, mesh, where, run_check=False, shape=like[index].shape,
                                              stride=like[index].stride()))  # fmt: skip
        else:
            wrapped.append(DTensor.from_local(grad, mesh, [Replicate()] * mesh.ndim, run_check=False))
    return tuple(wrapped)


def _bind(name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[dict[str, Any], Any]:
    """Every argument of a call of ``name`` by name, and the function giving the input placements of a strategy
    (``placement_of[name]``, Replicate for another tensor, None for a non-tensor) in DTensor's order."""
    from torch.distributed.tensor import Replicate
    from torch.distributed.tensor._dtensor_spec import DTensorSpec

    params = operators.lookup(name).params
    names = [param.name for param in params]
    bound = {param.name: param.default for param in params}
    bound.update(zip(names, args))
    bound.update(kwargs)
    order = [*names[: len(args)], *kwargs]

    def inputs(placement_of: dict[str, Any]) -> list[Any]:
        return [placement_of.get(name, Replicate()) if isinstance(bound[name], DTensorSpec) else None
                for name in order]  # fmt: skip

    return bound, inputs


def _batch_placements(bound: dict[str, Any]) -> dict[str, Any] | None:
    """The data-parallel placements of q, k, v and the mask (a BNSS or B1SS mask on dim 0, any other one
    replicated), or None when torch_npu offers no data parallelism for the call (``bound``: every argument,
    its tensors as DTensors or their specs)."""
    from torch.distributed.tensor import Replicate, Shard

    layout = str(bound["input_layout"]).upper()
    sharded_only_as_sdpa = all(bound[name] is None for name in REPLICATE_ONLY) and float(bound["keep_prob"]) == 1.0
    if "B" not in layout or not sharded_only_as_sdpa:
        return None
    batch = Shard(layout.index("B"))
    mask = bound["atten_mask"]
    per_batch = mask is not None and mask.ndim == 4 and mask.shape[0] != 1
    return {"query": batch, "key": batch, "value": batch, "atten_mask": Shard(0) if per_batch else Replicate()}


class _Registering(importlib.abc.Loader):
    """Runs DTensor's own loader, then registers the strategy."""

    def __init__(self, loader: importlib.abc.Loader) -> None:
        self.loader = loader

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType | None:
        return self.loader.create_module(spec)

    def exec_module(self, module: types.ModuleType) -> None:
        self.loader.exec_module(module)
        _register()


class _AfterDTensorImport(importlib.abc.MetaPathFinder):
    """A ``sys.meta_path`` entry that finds nothing itself: it wraps the loader of ``torch.distributed.tensor``
    (found by the finders after it) so that the strategy is registered once DTensor is imported."""

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if fullname != DTENSOR:
            return None
        sys.meta_path.remove(self)
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is not None and spec.loader is not None:
            spec.loader = _Registering(spec.loader)
        return spec
