"""DTensor sharding of ``npu_fusion_attention``, registered as torch_npu registers it
(``torch.distributed.tensor.experimental.register_sharding``), so sharded attention runs on several ranks.

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
    _registered = True


def fusion_attention_strategy(*args: Any, **kwargs: Any) -> list[tuple[list[Any], list[Any]]]:
    """(output placements, input placements) pairs: the 7 outputs, then every argument in the order DTensor
    passes them (positional, then keywords), None for a non-tensor."""
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor._dtensor_spec import DTensorSpec

    names = [param.name for param in operators.lookup(operators.FA).params]
    bound = {param.name: param.default for param in operators.lookup(operators.FA).params}
    bound.update(zip(names, args))
    bound.update(kwargs)
    order = [*names[: len(args)], *kwargs]

    def inputs(placement_of: dict[str, Any]) -> list[Any]:
        return [placement_of.get(name, Replicate()) if isinstance(bound[name], DTensorSpec) else None
                for name in order]  # fmt: skip

    ints = [None, None, None]
    strategies = [([Replicate()] * 4 + ints, inputs({}))]
    layout = str(bound["input_layout"]).upper()
    sharded_only_as_sdpa = all(bound[name] is None for name in REPLICATE_ONLY) and float(bound["keep_prob"]) == 1.0
    if "B" in layout and layout != "TND" and sharded_only_as_sdpa:
        batch = Shard(layout.index("B"))
        mask = bound["atten_mask"]
        per_batch = isinstance(mask, DTensorSpec) and mask.ndim == 4 and mask.shape[0] != 1
        mask_placement = Shard(0) if per_batch else Replicate()
        placements = {"query": batch, "key": batch, "value": batch, "atten_mask": mask_placement}
        strategies.append(([batch, Shard(0), Shard(0), Replicate(), *ints], inputs(placements)))
    return strategies


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
