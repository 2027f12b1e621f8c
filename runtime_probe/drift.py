"""KVL505: cache writes of one step that land at different positions in different layers.

In a decoder step every layer writes its new K/V at the same positions. When the runner's ``kv_len`` is
advanced inside a layer, layer l writes at ``pos + l``: a silent corruption no single call reveals.

How steps and layers are recognised, without knowing the model: writes from one call site to caches of
one shape are grouped; each distinct cache written is a layer, and writing a cache already seen starts
the next step. The positions of every layer are compared with those of the step's first layer. An
out-of-place write (``scatter_update``) returns a new tensor that replaces the cache, so the result
inherits the input's identity.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

import torch
from kvlint.runtime_probe.live_call import LiveCall

WRITES = {
    "scatter_update": ("input", "indices"),
    "scatter_update_": ("input", "indices"),
    "npu_scatter_nd_update": ("input", "indices"),
    "npu_scatter_nd_update_": ("input", "indices"),
    "npu_scatter_pa_kv_cache": ("key_cache", "slot_mapping"),
    "npu_scatter_pa_kv_cache_functional": ("key_cache", "slot_mapping"),
    "npu_kv_rmsnorm_rope_cache": ("k_cache", "index"),
    "npu_kv_rmsnorm_rope_cache_v2": ("k_cache", "index"),
    "npu_kv_rmsnorm_rope_cache_v2_functional": ("k_cache", "index"),
}
"""Cache write -> (the cache it writes, the positions it writes at)."""
OUT_OF_PLACE = frozenset({"scatter_update", "npu_scatter_nd_update"})


@dataclass
class _Step:
    positions: torch.Tensor
    """Positions written by the step's first layer."""
    layers: set[int] = field(default_factory=set)
    reported: bool = False


def _summary(positions: torch.Tensor) -> str:
    values = positions.reshape(-1).tolist()
    return str(values if len(values) <= 6 else [*values[:6], "..."])


class DriftTracker:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._steps: dict[tuple[object, ...], _Step] = {}
        self._identity: dict[int, int] = {}
        """data_ptr of a cache -> the data_ptr it was first seen with (follows out-of-place writes)."""

    def observe(self, call: LiveCall, site: tuple[str, int], call_number: int) -> str | None:
        """Record one cache write; a message for the first layer of a step that drifted."""
        cache_param, positions_param = WRITES[call.name]
        cache, positions = call.get(cache_param), call.get(positions_param)
        if not isinstance(cache, torch.Tensor) or not isinstance(positions, torch.Tensor) or not call.concrete:
            return None
        key = (site, tuple(cache.shape), cache.dtype)
        with self._lock:
            identity = self._identity.get(cache.data_ptr(), cache.data_ptr())
            step = self._steps.get(key)
            if step is None or identity in step.layers:
                self._steps[key] = _Step(positions.detach().clone(), {identity})
                return None
            layer = len(step.layers)
            step.layers.add(identity)
            same = positions.shape == step.positions.shape and torch.equal(positions, step.positions)
            if same or step.reported:
                return None
            step.reported = True
            first = step.positions
        return (f"layer {layer} of this step (call {call_number} here) writes {positions_param} "
                f"{_summary(positions)} but the step's first layer wrote {_summary(first)}: "
                "kv_len advanced inside a layer?")

    def follow(self, call: LiveCall, result: object) -> None:
        """After an out-of-place write, the returned tensor is the same cache for step tracking."""
        if call.name not in OUT_OF_PLACE:
            return
        cache = call.get(WRITES[call.name][0])
        if not isinstance(cache, torch.Tensor):
            return
        if isinstance(result, torch.Tensor) and call.concrete:
            with self._lock:
                identity = self._identity.pop(cache.data_ptr(), cache.data_ptr())
                self._identity[result.data_ptr()] = identity
