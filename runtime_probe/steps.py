"""Steps and layers, found from the calls themselves, per thread.

A **layer** is a KV cache: a tensor that a probed cache write filled, or that an attention call read as
a paged cache, or the same live key tensor read again (a static cache). An out-of-place write's result
takes over its input's identity, since the program uses it as the cache from then on. An attention call
over freshly projected keys (a prefill) belongs to the layer whose cache those keys were written into in the step.

A **step** ends when one of its (call site, layer) pairs comes round again on the same thread: in a
model's forward that is the first layer's write, or its attention call, in the next forward.
(Any pair, not only the first: a warm-up call or a finished request's cache that never comes back must not
hold the step open.) Calls with no layer (an encoder's attention over its own tokens) join the current
step. Each thread has its own steps (threads serving their own requests never share one); step numbers
are unique in the process.

A layer's **cache set** is the step its cache was first written in: the layers of one model are filled
in its first step, a second model's (or a new batch of requests with caches of their own) later.

What a step remembers, for the checks across calls: the caches written and the tensors written into them
(KVL507's evidence), the rows the value-checked writes filled (KVL509, KVL510), the first layer's write
positions and the layers that drifted from them (KVL505). Only identities (``data_ptr``) are read on
every call; nothing here syncs with a device. A step's records are dropped when its thread moves on to the
next step, and past steps are only counted, so memory does not grow with the steps of a run.
"""

from __future__ import annotations

import itertools
import threading
import weakref
from dataclasses import dataclass, field

import torch
from kvlint.runtime_probe.cache_rows import WrittenRows


@dataclass
class Write:
    """One value-checked cache write of the step."""

    op: str
    site: tuple[str, int]
    rows: WrittenRows


@dataclass
class Drift:
    """A layer whose write positions differ from the step's first layer's: KVL505 once its own attention
    call shows that it reads rows nobody filled."""

    op: str
    site: tuple[str, int]
    message: str


@dataclass
class Step:
    number: int
    written: dict[int, tuple[str, tuple[str, int]]] = field(default_factory=dict, init=False)
    """Layer identity of each cache written in the step -> (operator, site) of its first write."""
    sources: dict[int, int] = field(default_factory=dict, init=False)
    """data_ptr of each tensor written into a cache in the step (the new keys themselves) -> that cache's layer."""
    writes: dict[int, list[Write]] = field(default_factory=dict, init=False)
    """Layer identity -> its value-checked writes."""
    first_positions: dict[tuple[object, ...], tuple[int, torch.Tensor]] = field(default_factory=dict, init=False)
    """(write site, cache shape, dtype) -> (layer, positions) of the step's first write there."""
    layers: dict[tuple[object, ...], list[int]] = field(default_factory=dict, init=False)
    drifts: dict[int, Drift] = field(default_factory=dict, init=False)
    attention_calls: int = 0

    def close(self) -> None:
        """The thread has moved on to its next step: what the checks across calls kept for this one is
        dropped (a closed step is only counted, and kept by the cache figures while they show it)."""
        if self.written or self.sources or self.writes or self.first_positions or self.layers or self.drifts:
            for records in (self.written, self.sources, self.writes, self.first_positions, self.layers,
                            self.drifts):  # fmt: skip
                records.clear()


MAX_FOLLOWED_ROWS = 1 << 16
"""Rows of one layer recorded in ``Caches.ever`` (512 KiB of offsets) before the layer stops being followed."""


class Caches:
    """The tensors known to be KV caches, by ``data_ptr``, each mapped to its layer identity.

    A known pointer counts only while it still belongs to the same storage (a weak reference to it): a
    cache freed after a warm-up and a new one allocated at its address are two layers."""

    def __init__(self) -> None:
        self._identity: dict[int, int] = {}
        self._storages: dict[int, weakref.ref[torch.UntypedStorage]] = {}
        self._keys: weakref.WeakValueDictionary[int, torch.Tensor] = weakref.WeakValueDictionary()
        """Keys read once, by pointer, while they live (a key read again is a static cache)."""
        self._layers = itertools.count(1)
        self.filled: dict[int, int] = {}
        """Layer that a probed cache write filled (not merely read twice, or paged) -> its cache set."""
        self.ever: dict[int, torch.Tensor] = {}
        """Layer -> byte offsets (sorted, unique) of every row a followed write filled, over all steps."""
        self.unfollowed: set[int] = set()
        """Layers some write filled without the probe reading its rows (a call not value-checked, a traced
        call): for them ``ever`` may miss rows, so it proves nothing was never written."""
        self._lock = threading.Lock()

    def identity(self, tensor: torch.Tensor) -> int | None:
        pointer = tensor.data_ptr()
        layer = self._identity.get(pointer)
        if layer is None:
            return None
        storage = self._storages.get(pointer)
        if storage is not None and storage() is tensor.untyped_storage():
            return layer
        self._identity.pop(pointer, None)  # dict operations only: threads may race here
        self._storages.pop(pointer, None)
        return None

    def _remember(self, tensor: torch.Tensor, layer: int) -> int:
        self._storages[tensor.data_ptr()] = weakref.ref(tensor.untyped_storage())
        self._identity[tensor.data_ptr()] = layer
        return layer

    def written(self, tensor: torch.Tensor, step: int = 0) -> int:
        layer = self.identity(tensor)
        if layer is None:
            layer = self._remember(tensor, next(self._layers))
        self.filled.setdefault(layer, step)
        return layer

    def followed(self, layer: int, offsets: torch.Tensor) -> None:
        """A followed write filled the rows at ``offsets`` of ``layer``; past MAX_FOLLOWED_ROWS rows the
        layer counts as unfollowed (its record would cost more memory than the check is worth)."""
        with self._lock:
            if layer in self.unfollowed:
                return
            known = self.ever.get(layer)
            merged = torch.unique(offsets if known is None else torch.cat((known, offsets)))
            if merged.numel() > MAX_FOLLOWED_ROWS:
                self._give_up(layer)
            else:
                self.ever[layer] = merged

    def unfollowed_write(self, tensor: torch.Tensor) -> None:
        """A write filled ``tensor`` without the probe reading which rows (every unchecked write: dict
        lookups only, once the layer is given up)."""
        layer = self.identity(tensor)
        if layer is not None and layer in self.unfollowed:
            return
        with self._lock:
            self._give_up(layer or self._remember(tensor, next(self._layers)))

    def unfollowed_layer(self, layer: int) -> None:
        """A write filled ``layer`` in rows the probe could not place."""
        with self._lock:
            self._give_up(layer)

    def _give_up(self, layer: int) -> None:
        self.unfollowed.add(layer)
        self.ever.pop(layer, None)

    def follow(self, old: torch.Tensor, new: torch.Tensor) -> None:
        """An out-of-place write returned ``new`` in place of the cache ``old``."""
        if new.data_ptr() != old.data_ptr():
            self._remember(new, self.identity(old) or next(self._layers))

    def read(self, key: torch.Tensor, paged: bool) -> int | None:
        """The layer of an attention call's key: a known cache, a paged one, or a key read before that is
        still the same tensor object."""
        known = self.identity(key)
        if known is not None:
            return known
        pointer = key.data_ptr()
        if paged or self._keys.get(pointer) is key:
            return self._remember(key, next(self._layers))
        self._keys[pointer] = key
        return None


class Clock:
    """The current step of each thread."""

    def __init__(self) -> None:
        self.caches = Caches()
        self._local = threading.local()
        self._numbers = itertools.count(1)
        self._lock = threading.Lock()
        self.attention_steps = 0
        """Steps with at least one attention call (the cache figures count those they did not measure)."""

    def _new_step(self) -> Step:
        return Step(next(self._numbers))  # one call of a C iterator: atomic under the GIL, no lock needed

    def current(self) -> Step:
        step = getattr(self._local, "step", None)
        if step is None:
            step = self._local.step = self._new_step()
            self._local.seen = set()
        return step

    def observe(self, site: tuple[str, int], layer: int | None) -> Step:
        """The step a call at ``site`` on ``layer`` belongs to, starting the next one when the pair comes
        round again."""
        step = self.current()
        if layer is None:
            return step
        local = self._local
        pair = (site, layer)
        if pair in local.seen:
            step.close()
            step = local.step = self._new_step()
            local.seen = {pair}
        else:
            local.seen.add(pair)
        return step

    def write(self, op: str, site: tuple[str, int], cache: torch.Tensor, source: object) -> Step:
        """A cache write (any call, checked or not)."""
        layer = self.caches.written(cache, self.current().number)
        step = self.observe(site, layer)
        step.written.setdefault(layer, (op, site))
        if isinstance(source, torch.Tensor):
            step.sources[source.data_ptr()] = layer
        return step

    def attention(self, site: tuple[str, int], key: torch.Tensor, paged: bool) -> tuple[Step, int | None]:
        """An attention call: its step, and its layer (the key's cache, or the cache the key was just written
        into)."""
        layer = self.caches.read(key, paged)
        if layer is None:
            layer = self.current().sources.get(key.data_ptr())
        step = self.observe(site, layer)
        step.attention_calls += 1
        if step.attention_calls == 1:
            with self._lock:
                self.attention_steps += 1
        return step, layer
