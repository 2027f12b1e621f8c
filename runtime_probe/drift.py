"""KVL505: cache writes of one step that land at different positions in different layers.

In a decoder step every layer writes its new K/V at the same positions. When the runner's ``kv_len`` is
advanced inside a layer, layer l writes at ``pos + l``: a silent corruption no single call reveals.

Within one step of one thread (``steps``), the writes from one call site to caches of one shape, dtype
and cache set (the step the caches were first written in: one model's layers) are compared with the
step's first layer's. A difference alone proves nothing: two requests (or
two models, or two beams) served from the same call site, each with its own cache, also write at
different positions. So a drifted layer is only remembered here; it is reported (``coverage``) when the
same layer's attention call then reads rows of its own cache that no write filled, which separate
sequences never do.
"""

from __future__ import annotations

import torch
from kvlint.runtime_probe.live_call import LiveCall
from kvlint.runtime_probe.steps import Drift, Step

from kvlint.catalogue.cache_writes import CacheWrite


def _summary(positions: torch.Tensor) -> str:
    values = positions.reshape(-1).tolist()
    return str(values if len(values) <= 6 else [*values[:6], "..."])


def observe(call: LiveCall, write: CacheWrite, step: Step, layer: int, cache_set: int, site: tuple[str, int],
            number: int) -> None:
    """Record one value-checked cache write; remember the layer when it drifted from the first layer."""
    cache, positions = call.get(write.cache), call.get(write.positions)
    if not isinstance(cache, torch.Tensor) or not isinstance(positions, torch.Tensor) or not call.concrete:
        return
    key = (site, tuple(cache.shape), cache.dtype, cache_set)
    first = step.first_positions.get(key)
    if first is None:
        step.first_positions[key] = (layer, positions.detach().to("cpu", copy=True))
        step.layers[key] = [layer]
        return
    layers = step.layers[key]
    if layer in layers:
        return
    layers.append(layer)
    host = positions.detach().to("cpu")
    if host.shape == first[1].shape and torch.equal(host, first[1]):
        return
    step.drifts[layer] = Drift(call.name, site, (
        f"layer {len(layers) - 1} of this step (call {number} here) writes {write.positions} {_summary(host)} "
        f"but the step's first layer wrote {_summary(first[1])}: kv_len advanced inside a layer?"))
