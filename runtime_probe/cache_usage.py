"""What the attention calls read from the KV cache, per step: bytes, capacity in use, time and bandwidth.

Figures of one call, from its live tensors and the lengths the checks already read (no pass over the
cache itself):

- **bytes read**: the tokens attended (the KV lengths; the full key length when none are given), times
  the cache's bytes per token. Bytes per token come from the storage of each distinct tensor the call
  reads (key, value, key_rope): ``element_size * numel / tokens the tensor holds``, so every layout
  (BSH, BNSD, TND, 3-D/4-D/NZ paged caches, int8, int4 packed in int32) is covered by one rule. A value
  that *is* the key (MLA's latent, or a test passing one cache twice) is counted once, as the budget's
  MLA formula does. The tail block's unused slots, antiquant scales and a shared prefix are not counted.
- **capacity**: tokens in use (the lengths) vs tokens the tensors hold; for paged calls also the
  distinct block ids the block table references within the lengths vs the blocks of the cache tensor.
  The block ids come from the host copy of the table that KVL504 reads (``LiveCall.host_block_table``),
  so the call still has a single device-to-host read, and are counted once per step for a given
  (table, lengths): every layer of a step shares them.

A **step** is the probe's (``steps``): it starts when the first layer's call site comes round again on
the thread. Figures are measured on value-checked calls, and a step is shown only when every attention
call in it was measured (the first steps of a run, and every step with ``KVLINT_PROBE_VALUE_FIRST=all``);
the others are counted as unmeasured. A step is a ``decode`` step when every call has one query token per
sequence, else a ``prefill`` step.

**Time**: host timestamps around each attention call (``Probe.run``), only when they measure the work:
on the emulator and on CPU tensors the call is synchronous; on the device only with
``ASCEND_LAUNCH_BLOCKING=1``, since otherwise the call returns once the kernel is queued. A step's time
is the sum of its calls' times, known only when every call's is. The achieved bandwidth is bytes / time
and the floor is ``decode_latency_floor(bytes, peak)`` of ``kvlint-budget``, with the peak from
``KVLINT_PROBE_BANDWIDTH`` (e.g. ``1.6TB/s``, same syntax as ``--bandwidth``).
"""

from __future__ import annotations

import os
import sys
import threading
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field
from fractions import Fraction

import torch
from kvlint.runtime_probe.cache_summary import CacheSection, StepFigures
from kvlint.runtime_probe.live_call import Geometry, LiveCall
from kvlint.runtime_probe.steps import Step

from kvlint.budget.formulas import decode_latency_floor, paged_blocks
from kvlint.budget.units import BudgetError, parse_bandwidth

BANDWIDTH_VARIABLE = "KVLINT_PROBE_BANDWIDTH"
KEPT_STEPS = 512
"""Measured steps kept at each end of a run (the first ones, and a window of the latest): a day-long run's
figures stay within 2 * KEPT_STEPS steps; the steps in between are counted as ``dropped_steps``."""
EMULATOR_MODULE = "kvlint.runtime_probe.emulator"


@dataclass(frozen=True)
class CallReads:
    """The cache figures of one attention call."""

    kv_bytes: int
    tokens_in_use: int
    tokens_allocated: int
    decode: bool
    blocks: tuple[int, int] | None
    """(distinct blocks referenced within the lengths, blocks in the cache tensor) of a paged call."""


def _bytes_per_token(tensors: list[torch.Tensor], tokens_held: int) -> int:
    """Bytes one token occupies over the distinct tensors read (the same tensor twice counts once)."""
    distinct = {t.data_ptr(): t for t in tensors}
    return sum(t.element_size() * t.numel() for t in distinct.values()) // tokens_held


def _cache_tensors(call: LiveCall) -> list[torch.Tensor]:
    return [t for t in (call.get("key"), call.get("value"), call.get("key_rope")) if isinstance(t, torch.Tensor)]


def _is_decode(geo: Geometry) -> bool:
    """One query token per sequence: T == batch for the varlen forms, S == 1 otherwise."""
    return geo.q_seq == geo.batch if geo.varlen else geo.q_seq == 1


def distinct_blocks(host_table: torch.Tensor, lengths: list[int], block_size: int, num_blocks: int) -> int:
    """Distinct valid block ids in the first ``ceil(length / block_size)`` entries of each row.

    Counted in Python over the needed columns only: a per-step set of a few thousand ids costs tens of
    microseconds, where ``torch.unique`` on the host costs milliseconds (measured, B=64 x 64 blocks)."""
    needed = [paged_blocks(n, block_size) for n in lengths]
    rows = host_table[: len(lengths), : max(needed, default=0)].tolist()
    return len({i for row, count in zip(rows, needed) for i in row[:count] if 0 <= i < num_blocks})


def _paged_reads(call: LiveCall, geo: Geometry, memo: dict[tuple[object, ...], int]) -> CallReads | None:
    """Per-batch KV lengths (clipped to what a table row can address) over a [blocks, ...] cache."""
    table, key = call.get("block_table"), call.get("key")
    block_size = int(call.get("block_size"))  # type: ignore[call-overload]
    lengths = call.per_batch_kv_lengths(geo.batch)
    if not isinstance(table, torch.Tensor) or table.dim() != 2 or block_size <= 0 or lengths is None:
        return None
    assert isinstance(key, torch.Tensor)
    if key.shape[0] == 0:
        return None
    lengths = [min(max(n, 0), table.shape[1] * block_size) for n in lengths]
    num_blocks = key.shape[0]
    tokens_held = num_blocks * block_size
    per_token = _bytes_per_token(_cache_tensors(call), tokens_held)
    memo_key = (table.data_ptr(), tuple(table.shape), tuple(lengths), block_size, num_blocks)
    if memo_key not in memo:
        memo[memo_key] = distinct_blocks(call.host_block_table, lengths, block_size, num_blocks)
    return CallReads(sum(lengths) * per_token, sum(lengths), tokens_held, _is_decode(geo),
                     (memo[memo_key], num_blocks))


def _contiguous_reads(call: LiveCall, geo: Geometry) -> CallReads | None:
    """Per-batch KV lengths over a [B, S, ...] key, or cumulative ones over a varlen [T, ...] key."""
    key = call.get("key")
    if geo.kv_seq is None or not isinstance(key, torch.Tensor):
        return None
    if geo.varlen:  # cumulative lengths: the last one is the tokens of the whole batch
        lengths = call.lengths(call.kv_lengths_param)
        in_use, held = min(lengths[-1] if lengths else geo.kv_seq, geo.kv_seq), geo.kv_seq
    else:
        batches = key.shape[0] if geo.form.startswith("B") else 1
        lengths = call.per_batch_kv_lengths(geo.batch) or [geo.kv_seq] * batches
        in_use, held = sum(min(max(n, 0), geo.kv_seq) for n in lengths), batches * geo.kv_seq
    if held <= 0:
        return None
    return CallReads(in_use * _bytes_per_token(_cache_tensors(call), held), in_use, held, _is_decode(geo), None)


def call_reads(call: LiveCall, memo: dict[tuple[object, ...], int]) -> CallReads | None:
    """The cache figures of an attention call; None when its geometry or lengths are not understood."""
    geo = call.geometry
    if geo is None:
        return None
    return _paged_reads(call, geo, memo) if geo.paged else _contiguous_reads(call, geo)


def synchronous(call: LiveCall, launch_blocking: bool) -> bool:
    """True when host timestamps around the call measure its work (see the module docstring)."""
    query = call.get("query")
    return launch_blocking or (isinstance(query, torch.Tensor) and query.device.type == "cpu")


def peak_bandwidth(environ: Mapping[str, str] = os.environ) -> Fraction | None:
    """Bytes per second from ``KVLINT_PROBE_BANDWIDTH``; None (announced when malformed) otherwise."""
    text = environ.get(BANDWIDTH_VARIABLE, "").strip()
    if not text:
        return None
    try:
        return parse_bandwidth(text)
    except BudgetError as exc:
        print(f"kvlint: {BANDWIDTH_VARIABLE}={text!r} ignored: {exc}", file=sys.stderr)
        return None


def _emulated() -> bool:
    """The emulator is installed (looked up, not imported: importing it would not install it)."""
    module = sys.modules.get(EMULATOR_MODULE)
    return module is not None and bool(module.is_installed())


def _rank(environ: Mapping[str, str]) -> int | None:
    """This process's rank, by the rule that names the per-rank report file (``config.py``)."""
    rank = environ.get("RANK", "").strip() or environ.get("LOCAL_RANK", "").strip()
    return int(rank) if rank.isdigit() else None


@dataclass
class _Step:
    figures: StepFigures
    step: Step
    """The probe's step (its attention calls: the step is shown when every one was measured)."""
    memo: dict[tuple[object, ...], int] = field(default_factory=dict)
    """(table, lengths, ...) -> distinct blocks, computed once per step."""


class CacheUsage:
    """Thread-safe per-step totals of the attention calls' cache figures."""

    def __init__(self, environ: Mapping[str, str] = os.environ) -> None:
        self._lock = threading.Lock()
        self._first: dict[int, _Step] = {}
        """Step number -> figures, of the first KEPT_STEPS steps recorded."""
        self._latest: OrderedDict[int, _Step] = OrderedDict()
        """The same, of the latest KEPT_STEPS after them."""
        self._dropped = 0
        """Measured steps dropped from the middle of the run (an unmeasured one is counted as such anyway)."""
        self.peak = peak_bandwidth(environ)
        self._launch_blocking = environ.get("ASCEND_LAUNCH_BLOCKING", "").strip() == "1"
        self._rank = _rank(environ)

    def record(self, call: LiveCall, seconds: float, step: Step) -> None:
        """Add one attention call (``seconds``: host time around it) to ``step``."""
        if not isinstance(call.get("key"), torch.Tensor):
            return
        with self._lock:
            current = self._first.get(step.number) or self._latest.get(step.number)
            memo = {} if current is None else current.memo
            reads = call_reads(call, memo)
            if reads is None:
                return
            if current is None:
                figures = StepFigures(rank=self._rank, step=step.number)
                current = _Step(figures, step, memo)
                if len(self._first) < KEPT_STEPS:
                    self._first[step.number] = current
                else:
                    self._latest[step.number] = current
                    if len(self._latest) > KEPT_STEPS:
                        _, dropped = self._latest.popitem(last=False)
                        self._dropped += dropped.figures.calls == dropped.step.attention_calls
            current.figures.add_call(reads.kv_bytes, reads.tokens_in_use, reads.tokens_allocated, reads.decode,
                                     reads.blocks, seconds if synchronous(call, self._launch_blocking) else None)

    def section(self, attention_steps: int) -> CacheSection:
        """The report's ``cache`` section: the steps whose every attention call was measured, with the
        achieved bandwidth and the floor of each (``attention_steps``: the steps with attention calls)."""
        with self._lock:
            kept = sorted({**self._first, **self._latest}.items())
            measured = [s.figures for _, s in kept if s.figures.calls == s.step.attention_calls]
            dropped = self._dropped
        floor = None if self.peak is None else (lambda n: float(decode_latency_floor(n, self.peak)))
        timing = "emulator" if _emulated() else "device"
        unmeasured = attention_steps - len(measured) - dropped
        return CacheSection(timing, None if self.peak is None else float(self.peak),
                            [s.finished(floor) for s in measured], unmeasured, dropped)
