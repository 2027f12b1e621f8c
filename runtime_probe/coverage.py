"""What a layer's attention call reads against what the step's cache writes filled: KVL509, KVL510 and
KVL505's proof.

The pair is the cache write feeding the layer (a value-checked write, in the same step on the same
thread, to the tensor the attention call reads as its key) and the attention call; rows are compared by
their byte offsets in the cache (``cache_rows``).

- **KVL509**: a row the write filled for request b lies outside what the call reads for b: past b's KV
  length on its S axis, its span of T or its block-table row. The request of a row is the write's batch
  row when the write says (per-row starts, per-batch positions); otherwise (slots, coordinates) it is the
  request whose S axis, span or block-table row addresses the row, so a write's token order is never
  assumed to follow the query's. This is the classic decode off-by-one: the new token written at
  ``kv_len`` and ``actual_seq_lengths_kv=kv_len``. A slot outside b's block-table row (padding, a dummy
  block) and a request of KV length 0 (a padded batch row) prove nothing and are left alone.
- **KVL510**: a request that the write served reads a row that no followed write filled, in this step or
  an earlier one (``Caches.ever``), and whose elements are all exactly 0: a zero-initialised cache row no
  write has touched. A computed key row can be exactly zero (a warm-up's dummy tokens), so rows written
  before this step count as written, and a cache that some write filled unread (``Caches.unfollowed``) is
  not judged. Judged only when the call certainly reads every position up to the KV length: no mask,
  bottom-right causal (sparse_mode 3), or a single query token.
- **KVL505** (proof): a layer whose writes drifted from the step's first layer (``drift``) is reported
  when its own attention call reads rows of its own cache that nobody filled: the drift is then not a
  separate request's position but the same sequence written in the wrong place.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from kvlint.runtime_probe.cache_rows import ReadRows, WrittenRows, read_rows, zero_rows
from kvlint.runtime_probe.live_call import LiveCall
from kvlint.runtime_probe.steps import Caches, Drift, Step, Write

BOTTOM_RIGHT_CAUSAL = 3
"""sparse_mode 3 with the 2048x2048 template: the last query row sees every key up to the KV length."""


@dataclass(frozen=True)
class Finding:
    code: str
    message: str
    op: str | None = None
    site: tuple[str, int] | None = None
    """Where to report it, when not at the attention call (KVL505 goes to the drifting write)."""


def _ranges(values: list[int]) -> str:
    """``[3, 4, 5, 9]`` -> ``positions 3-5, 9`` (at most 4 ranges shown); ``[4]`` -> ``position 4``."""
    spans: list[list[int]] = []
    for value in sorted(set(values)):
        if spans and value == spans[-1][1] + 1:
            spans[-1][1] = value
        else:
            spans.append([value, value])
    shown = [f"{a}-{b}" if b > a else str(a) for a, b in spans[:4]]
    noun = "position" if len(spans) == 1 and spans[0][0] == spans[0][1] else "positions"
    return f"{noun} " + ", ".join(shown) + (", ..." if len(spans) > 4 else "")


def _lengths_text(call: LiveCall, lengths: list[int]) -> str:
    shown = lengths if len(lengths) <= 8 else [*lengths[:8], "..."]
    return f"{call.kv_lengths_param}={shown}"


def reads_every_position(call: LiveCall) -> bool:
    """True when each request's last query row attends to every key below its KV length."""
    geo = call.geometry
    if geo is None:
        return False
    mode, masked = call.get("sparse_mode"), call.get("atten_mask") is not None
    if mode == BOTTOM_RIGHT_CAUSAL:
        return True
    return not masked and mode in (0, None)


@dataclass
class _Written:
    """The step's writes into one read tensor, joined, with the request of each row where known."""

    offsets: torch.Tensor
    requests: torch.Tensor | None
    """The request of each row, when every write says (per-row starts, per-batch positions)."""


def _join(writes: list[Write]) -> _Written:
    rows: list[WrittenRows] = [write.rows for write in writes]
    offsets, requests = [r.offsets for r in rows], [r.requests for r in rows]
    known = all(r is not None for r in requests)
    return _Written(torch.cat(offsets), torch.cat(requests) if known else None)  # type: ignore[arg-type]


def _unread(rows: ReadRows, written: _Written, span: int, paged: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """(bool per written row: written for a request that does not read it; the requests the writes served).

    With the requests known, a row outside its request's read range is unread; in a paged cache only if the
    request's block-table row addresses it at all (a slot in no row of the table is padding or a dummy
    block). Without them, a row is unread when some request addresses it and none reads it. Rows of a
    request whose KV length is 0 (a padded batch row) are left alone."""
    lengths = torch.tensor(rows.lengths, dtype=torch.int64)
    live = lengths[rows.requests] > 0  # a request of length 0 is padding (or empty): its rows prove nothing
    if written.requests is not None:
        keys = written.requests * span + written.offsets
        addressed = rows.requests * span + rows.offsets
        in_call = written.requests < len(lengths)  # cache rows beyond the call's batch are not its requests
        served = torch.where(in_call, written.requests, 0)
        unread = ~torch.isin(keys, addressed[rows.read]) & in_call & (lengths[served] > 0)
        if paged:
            unread &= torch.isin(keys, addressed)
        return unread, torch.unique(written.requests[in_call])
    hit = torch.isin(rows.offsets, written.offsets) & live
    unread = torch.isin(written.offsets, rows.offsets[live]) & ~torch.isin(written.offsets, rows.offsets[rows.read])
    return unread, torch.unique(rows.requests[hit])


def _unfilled(rows: ReadRows, written: _Written, served: torch.Tensor, ever: torch.Tensor | None) -> torch.Tensor:
    """bool per read row: read by a served request, written neither in the step nor by any write followed
    before it (a warm-up's dummy keys may be exactly zero), and all zero."""
    candidates = rows.read & torch.isin(rows.requests, served) & ~torch.isin(rows.offsets, written.offsets)
    if ever is not None:
        candidates &= ~torch.isin(rows.offsets, ever)
    unfilled = torch.zeros_like(candidates)
    chosen = candidates.nonzero().reshape(-1)
    if chosen.numel():
        unfilled[chosen] = zero_rows(rows, chosen)
    return unfilled


def _first_request(rows: ReadRows, chosen: torch.Tensor) -> tuple[int, list[int]]:
    request = int(rows.requests[chosen][0])
    return request, rows.positions[chosen & (rows.requests == request)].tolist()


def _unread_message(call: LiveCall, rows: ReadRows, written: _Written, unread: torch.Tensor, where: str) -> str:
    first = int(unread.nonzero()[0])
    offset = int(written.offsets[first])
    owners = (rows.offsets == offset).nonzero().reshape(-1)
    if written.requests is not None:
        request = int(written.requests[first])
        same = owners[rows.requests[owners] == request]
        at = (f"position {int(rows.positions[same[0]])}" if same.numel() else
              f"a row outside its span (read as batch {int(rows.requests[owners[0]])} position "
              f"{int(rows.positions[owners[0]])})" if owners.numel() else "a row no request reads")
    else:
        request, at = int(rows.requests[owners[0]]), f"position {int(rows.positions[owners[0]])}"
    return (f"batch {request}'s token was written at {at} in this step ({where}) but this call reads "
            f"{_first_positions(rows.lengths[request])} of batch {request} ({_lengths_text(call, rows.lengths)}): "
            "the token just written is not attended; the KV length must count it (kv_len + new tokens)")


def _first_positions(count: int) -> str:
    return "no position" if count <= 0 else "only position 0" if count == 1 else f"only positions 0-{count - 1}"


def _where(write: Write) -> str:
    return f"{write.op} at {write.site[0]}:{write.site[1]}"


def check(call: LiveCall, step: Step, identities: dict[str, int | None], caches: Caches) -> list[Finding]:
    """KVL509 / KVL510 for the key the call reads, KVL505 for a drifted key or value cache."""
    findings: list[Finding] = []
    every_position = reads_every_position(call)
    for name in ("key", "value"):
        tensor, layer = call.get(name), identities.get(name)
        writes = step.writes.get(layer, []) if layer is not None else []
        drift: Drift | None = step.drifts.pop(layer, None) if layer is not None else None
        if not isinstance(tensor, torch.Tensor) or not writes:
            continue
        if name == "value" and call.get("value") is call.get("key"):
            continue
        rows = read_rows(call, tensor)
        if rows is None:
            continue
        span = tensor.untyped_storage().nbytes() + 1
        written = _join(writes)
        unread, served = _unread(rows, written, span, call.get("block_table") is not None)
        if name == "key" and bool(unread.any()):
            findings.append(Finding("KVL509", _unread_message(call, rows, written, unread, _where(writes[0]))))
        if not every_position or not served.numel() or layer in caches.unfollowed:
            continue
        unfilled = _unfilled(rows, written, served, caches.ever.get(layer))
        if not bool(unfilled.any()):
            continue
        request, positions = _first_request(rows, unfilled)
        evidence = (f"batch {request} reads {_ranges(positions)} of its {name} cache, whose rows are all "
                    "zero and were not written in this step")
        if drift is not None:
            findings.append(Finding("KVL505", f"{drift.message}; evidence: this layer's attention call reads rows "
                                    f"nobody filled ({evidence})", drift.op, drift.site))
        if name == "key":
            findings.append(Finding("KVL510", (
                f"{evidence}: never written since the cache was allocated; {_lengths_text(call, rows.lengths)} "
                "counts tokens that are not in the cache")))
    return findings

