"""The ``cache`` section of the probe's report: its JSON shape, the merge of per-rank reports, its text.

Torch-free (``report.py`` and ``--merge`` load it without torch); the figures are measured by
``cache_usage.py``. The JSON shape::

    "cache": {"timing_source": "emulator" | "device", "peak_bytes_per_s": float | null,
              "steps": [{"rank", "step", "phase", "calls", "kv_bytes_read", "tokens_in_use",
                         "tokens_allocated", "blocks_in_use", "blocks_allocated", "seconds",
                         "achieved_bytes_per_s", "floor_seconds"}],
              "unmeasured_steps": int, "dropped_steps": int}

``unmeasured_steps`` counts the steps left out because some of their attention calls were not
value-checked (``KVLINT_PROBE_VALUE_FIRST`` / ``_EVERY``); ``dropped_steps`` the measured steps left out
of a long run's middle (the probe keeps the first and the latest ``cache_usage.KEPT_STEPS``).

``rank`` is the process's ``RANK``/``LOCAL_RANK`` (null in a single process); ``blocks_*`` are null for a
step without paged calls; ``seconds`` and ``achieved_bytes_per_s`` are null when the calls were not timed
(asynchronous device launches); ``floor_seconds`` is null without a peak bandwidth.

Merging concatenates the steps of every rank rather than adding them up: ranks need not run the same
steps (pipeline stages read different layers, data-parallel ranks different batches), so a per-step sum
would mix unrelated work. A step without a rank takes the position of its report in the merged list.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, replace

DECODE, PREFILL = "decode", "prefill"
SHOWN_STEPS = 5
"""Steps shown at each end of a long run in the text summary; the JSON report has every step kept."""


@dataclass
class StepFigures:
    """One step's totals over its attention calls (one call per layer and attention site)."""

    rank: int | None = None
    step: int = 0
    phase: str = DECODE
    calls: int = 0
    kv_bytes_read: int = 0
    tokens_in_use: int = 0
    tokens_allocated: int = 0
    blocks_in_use: int | None = None
    blocks_allocated: int | None = None
    """Summed over the step's paged calls: each layer's cache is its own tensor of blocks."""
    seconds: float | None = 0.0
    achieved_bytes_per_s: float | None = None
    floor_seconds: float | None = None

    def add_call(self, kv_bytes: int, tokens_in_use: int, tokens_allocated: int, decode: bool,
                 blocks: tuple[int, int] | None, seconds: float | None) -> None:
        """Count one call; a prefill call makes the step a prefill step, an untimed one an untimed step."""
        self.calls += 1
        self.kv_bytes_read += kv_bytes
        self.tokens_in_use += tokens_in_use
        self.tokens_allocated += tokens_allocated
        if not decode:
            self.phase = PREFILL
        if blocks is not None:
            self.blocks_in_use = (self.blocks_in_use or 0) + blocks[0]
            self.blocks_allocated = (self.blocks_allocated or 0) + blocks[1]
        self.seconds = None if self.seconds is None or seconds is None else self.seconds + seconds

    def finished(self, floor: Callable[[int], float] | None) -> StepFigures:
        """A copy with the achieved bandwidth and the floor (seconds for ``kv_bytes_read`` at the peak)."""
        achieved = self.kv_bytes_read / self.seconds if self.seconds else None
        return replace(self, achieved_bytes_per_s=achieved,
                       floor_seconds=None if floor is None else floor(self.kv_bytes_read))


@dataclass
class CacheSection:
    timing_source: str
    peak_bytes_per_s: float | None
    steps: list[StepFigures]
    unmeasured_steps: int = 0
    dropped_steps: int = 0

    def as_json(self) -> dict[str, object]:
        return {"timing_source": self.timing_source, "peak_bytes_per_s": self.peak_bytes_per_s,
                "steps": [asdict(step) for step in self.steps], "unmeasured_steps": self.unmeasured_steps,
                "dropped_steps": self.dropped_steps}


def _common(values: list[object], differing: object) -> object:
    distinct = list(dict.fromkeys(values))
    return distinct[0] if len(distinct) == 1 else differing


def merge_sections(sections: Iterable[dict[str, object] | None]) -> dict[str, object]:
    """One ``cache`` section from per-rank ones (a report written before the section existed has none)."""
    sources: list[object] = []
    peaks: list[object] = []
    steps: list[dict[str, object]] = []
    unmeasured = dropped = 0
    for position, section in enumerate(sections):
        if not section:
            continue
        sources.append(section["timing_source"])
        peaks.append(section["peak_bytes_per_s"])
        unmeasured += int(section.get("unmeasured_steps", 0))  # type: ignore[call-overload]
        dropped += int(section.get("dropped_steps", 0))  # type: ignore[call-overload]
        for step in section["steps"]:  # type: ignore[attr-defined]
            steps.append({**step, "rank": position if step["rank"] is None else step["rank"]})
    return {"timing_source": _common(sources, "mixed") if sources else "device",
            "peak_bytes_per_s": _common(peaks, None) if peaks else None, "steps": steps,
            "unmeasured_steps": unmeasured, "dropped_steps": dropped}


def _number(value: object) -> str:
    return "-" if value is None else f"{value:.3g}" if isinstance(value, float) else str(value)


def _ratio(used: object, held: object) -> str:
    return "-" if used is None else f"{used}/{held}"


def _totals(steps: list[dict[str, object]], phase: str) -> str | None:
    chosen = [s for s in steps if s["phase"] == phase]
    if not chosen:
        return None
    total = sum(int(s["kv_bytes_read"]) for s in chosen)  # type: ignore[call-overload]
    line = f"{phase}: {len(chosen)} step(s), {total} bytes read"
    times = [s["seconds"] for s in chosen]
    if all(isinstance(t, float) for t in times) and sum(times) > 0:  # type: ignore[arg-type]
        seconds = sum(times)  # type: ignore[arg-type]
        line += f" in {seconds:.3g} s = {total / seconds:.3g} B/s"
    floors = [s["floor_seconds"] for s in chosen]
    if all(isinstance(f, float) for f in floors):
        line += f"; floor {sum(floors):.3g} s"  # type: ignore[arg-type]
    return line


def section_lines(section: dict[str, object] | None) -> list[str]:
    """The cache section of the exit summary; no lines when no attention call was understood."""
    if not section or not section["steps"]:
        return []
    unmeasured = int(section.get("unmeasured_steps", 0))  # type: ignore[call-overload]
    steps: list[dict[str, object]] = section["steps"]  # type: ignore[assignment]
    peak = section["peak_bytes_per_s"]
    timed = any(s["seconds"] is not None for s in steps)
    timing = f"{section['timing_source']} timings" if timed else "untimed: asynchronous device launches"
    floor = f"floor at {peak:.3g} B/s" if isinstance(peak, float) else "no floor: KVLINT_PROBE_BANDWIDTH unset"
    ranked = any(s["rank"] is not None for s in steps)
    header = ("rank",) * ranked + ("step", "phase", "calls", "KV bytes read", "tokens in use", "blocks in use",
                                   "seconds", "achieved B/s", "floor s")
    rows = [header]
    shown = steps if len(steps) <= 2 * SHOWN_STEPS + 1 else [*steps[:SHOWN_STEPS], None, *steps[-SHOWN_STEPS:]]
    for s in shown:
        if s is None:
            rows.append(("...",) * ranked + (f"({len(steps) - 2 * SHOWN_STEPS} more steps in the JSON report)",))
            continue
        rows.append((str(s["rank"]),) * ranked + (
            str(s["step"]), str(s["phase"]), str(s["calls"]), str(s["kv_bytes_read"]),
            _ratio(s["tokens_in_use"], s["tokens_allocated"]), _ratio(s["blocks_in_use"], s["blocks_allocated"]),
            _number(s["seconds"]), _number(s["achieved_bytes_per_s"]), _number(s["floor_seconds"]),
        ))
    widths = [max(len(row[i]) for row in rows if len(row) == len(header)) for i in range(len(header))]
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip() for row in rows]
    totals = [line for line in (_totals(steps, DECODE), _totals(steps, PREFILL)) if line]
    dropped = int(section.get("dropped_steps", 0))  # type: ignore[call-overload]
    if dropped:
        totals.append(f"{dropped} measured step(s) in the middle of the run not kept (the totals above leave them out)")
    if unmeasured:
        totals.append(f"{unmeasured} later step(s) not measured: their calls were not all value-checked "
                      "(KVLINT_PROBE_VALUE_FIRST=all measures every step)")
    return [f"KV cache reads per step ({timing}; {floor})", *lines, *totals]
