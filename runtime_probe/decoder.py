"""KVL507: several query tokens, ``sparse_mode=0`` and no mask, reported only where the evidence says decoder.

Without a mask every query attends to every key. That is a decoder's prefill that forgot its causal mask,
or an encoder (a ViT, a DiT, a multimodal encoder), which is bidirectional by design. The call's
arguments alone cannot tell them apart, so the probe looks for the evidence that only a decoder leaves;
any one is enough, and the message names it:

1. in the same step, the call's keys were written to a KV cache (the probe sees the write);
2. the keys are a cache: paged (``block_table``), or a cache that a probed write filled, holding more
   tokens than there are queries (chunked prefill). A key tensor merely reused across calls
   is not enough: a cross-attention reads the same encoder keys at every step;
3. the same call site is called with a single query token (decode), before or after.

A call with none of these (the keys are the query's own tokens and no cache is written) is an encoder's
and stays silent. When only the third kind of evidence can still come, the call is held back and reported
(with its count) once its call site runs a decode step; held-back calls whose site never decodes are
dropped at exit.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

import torch
from kvlint.runtime_probe.checks import non_causal_prefill
from kvlint.runtime_probe.live_call import LiveCall
from kvlint.runtime_probe.steps import Caches, Step

Site = tuple[str, str, int]
"""(operator, path, line)."""


@dataclass
class Pending:
    message: str
    count: int = 1


def _decode(call: LiveCall) -> bool:
    """One query token per sequence."""
    geo = call.geometry
    if geo is None or not call.is_attention:
        return False
    if not geo.varlen:
        return geo.q_seq == 1
    ends = call.lengths(call.query_lengths_param)
    return bool(ends) and ends[-1] == len(ends)


def _evidence(call: LiveCall, step: Step, caches: Caches, q_len: int, kv_len: int) -> str | None:
    key = call.get("key")
    assert isinstance(key, torch.Tensor)
    layer = caches.identity(key)
    if layer is not None and layer in step.written:
        op, (path, line) = step.written[layer]
        return f"the keys are a KV cache written in this step ({op} at {path}:{line})"
    if key.data_ptr() in step.sources:
        return "these keys were written to a KV cache in this step"
    if call.get("block_table") is not None:
        return "the keys are a paged KV cache (block_table)"
    if layer in caches.filled and kv_len > q_len:
        return f"the keys are a KV cache a cache write filled, holding {kv_len} tokens for {q_len} queries (chunked prefill)"
    return None


class DecoderEvidence:
    """Call sites seen decoding, and the KVL507 calls held back until their site decodes."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._decoding: set[Site] = set()
        self._pending: dict[Site, Pending] = {}

    def judge(self, call: LiveCall, site: Site, step: Step, caches: Caches) -> list[tuple[Site, str, int]]:
        """The KVL507 findings this call makes due: (site, message, count) for this call or for held-back
        calls of its site that its decode step now confirms."""
        if _decode(call):
            with self._lock:
                self._decoding.add(site)
                pending = self._pending.pop(site, None)
            if pending is None:
                return []
            return [(site, f"{pending.message}; decoder evidence: this call site also runs decode steps "
                           "(one query token)", pending.count)]
        shape = non_causal_prefill(call)
        if shape is None:
            return []
        q_len, kv_len = shape
        message = (f"{q_len} query tokens over {kv_len} keys with sparse_mode=0 and no atten_mask: every query "
                   "attends to the tokens after it")
        evidence = _evidence(call, step, caches, q_len, kv_len)
        with self._lock:
            if evidence is None and site in self._decoding:
                evidence = "this call site also runs decode steps (one query token)"
            if evidence is None:
                pending = self._pending.setdefault(site, Pending(message, 0))
                pending.count += 1
                return []
        return [(site, f"{message}; decoder evidence: {evidence}", 1)]
