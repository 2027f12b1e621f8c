"""KVL508's evidence: the cache rows a write left undefined, held until an attention call reads one.

A cache write whose tokens repeat a slot with different rows leaves that slot's value undefined on the
device (``checks.repeated_slot``). That is a defect when something reads the slot: the attention call then
attends to whichever token won. A serving engine's warm-up sends dummy requests that all land in a reserved
block (the pool's null block 0) and never reads it; there the undefined row is harmless.

So a repeat is held per layer (a KV cache, ``steps.Caches``), by the byte offsets of the repeated rows
(``cache_rows``), and judged by the reads that follow: an attention call reading one of those rows within
its KV length makes it an error (reported at the write); a later followed write that fills the row again
defines it, and the repeat no longer concerns that row. What no read reached by the end of the run is an
info-level finding that says so. A write into the layer that the probe could not follow (a call past the
value-checked ones) may have filled the rows again, so the layer's repeats stop being judged (info too).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

import torch

MAX_PENDING = 64
"""Repeats held per layer; older ones are settled as not read."""


@dataclass
class Repeat:
    """One write's repeated slots, not yet read."""

    op: str
    site: tuple[str, int]
    message: str
    offsets: torch.Tensor
    """Byte offsets (unique) of the repeated rows in the layer's cache that no write has filled again."""
    unjudged: str = ""
    """Why no read can be judged any more (empty while the reads are followed)."""
    call: Any = None
    """The write as ``dump.Call`` when findings are dumped (its reproduction replays it)."""


@dataclass(frozen=True)
class Read:
    """A repeated row that an attention call reads: the write it came from and where the call reads it."""

    repeat: Repeat
    request: int
    position: int


class RepeatedSlots:
    """The repeats of every layer (shared by threads: a lock guards the dict)."""

    def __init__(self) -> None:
        self.pending: dict[int, list[Repeat]] = {}
        self.unjudged: list[Repeat] = []
        """Repeats that no read can reach any more (or never could): the info findings."""
        self._lock = threading.Lock()

    def written(self, layer: int, filled: torch.Tensor, repeat: Repeat | None) -> None:
        """A followed write filled the rows at ``filled`` of ``layer``: those rows are defined again, except
        the ones this write repeated itself (``repeat``)."""
        with self._lock:
            kept = []
            for held in self.pending.get(layer, []):
                held.offsets = held.offsets[~torch.isin(held.offsets, filled)]
                if held.offsets.numel():
                    kept.append(held)
            if repeat is not None:
                kept.append(repeat)
            while len(kept) > MAX_PENDING:
                self._give_up(kept.pop(0), f"more than {MAX_PENDING} writes into this cache left rows undefined")
            if kept:
                self.pending[layer] = kept
            else:
                self.pending.pop(layer, None)

    def unfollowed(self, layer: int | None) -> None:
        """A write filled ``layer`` in rows the probe did not read: its repeats cannot be judged any more."""
        if layer is None or layer not in self.pending:
            return
        with self._lock:
            for repeat in self.pending.pop(layer, []):
                self._give_up(repeat, "a later write into this cache went unread by the probe")

    def not_followed(self, repeat: Repeat, reason: str) -> None:
        """A repeat in a cache whose reads the probe cannot follow."""
        with self._lock:
            self._give_up(repeat, reason)

    def _give_up(self, repeat: Repeat, reason: str) -> None:
        repeat.unjudged = reason
        self.unjudged.append(repeat)

    def read(self, layer: int, offsets: torch.Tensor, requests: torch.Tensor, positions: torch.Tensor) -> list[Read]:
        """The repeats whose rows an attention call reads (``offsets`` of its read rows, with their request
        and position); each is reported once, so it leaves the pending ones."""
        with self._lock:
            held = self.pending.get(layer)
            if not held:
                return []
            reads, kept = [], []
            for repeat in held:
                hit = torch.isin(offsets, repeat.offsets).nonzero().flatten()
                if hit.numel():
                    first = int(hit[0])
                    reads.append(Read(repeat, int(requests[first]), int(positions[first])))
                else:
                    kept.append(repeat)
            if kept:
                self.pending[layer] = kept
            else:
                self.pending.pop(layer, None)
            return reads

    def settle(self) -> list[Repeat]:
        """Every repeat no read reached so far (the pending and the unjudged), removed."""
        with self._lock:
            settled = self.unjudged + [repeat for held in self.pending.values() for repeat in held]
            self.unjudged, self.pending = [], {}
            return settled
