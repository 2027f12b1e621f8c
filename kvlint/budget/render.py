"""Rendering a kvlint-budget report as text (figure, formula, numbers) or as a JSON document."""

from __future__ import annotations

import json
from collections.abc import Sequence
from fractions import Fraction

from kvlint.budget.formulas import CacheGeometry
from kvlint.budget.report import BudgetOptions, Section
from kvlint.budget.units import BINARY_UNITS, DECIMAL_UNITS

UNITS_LINE = ("units: KiB/MiB/GiB/TiB = 2^10/2^20/2^30/2^40 B (binary); KB/MB/GB/TB = 10^3/10^6/10^9/10^12 B "
              "and TB/s = 10^12 B/s (decimal); JSON times in seconds")


def _geometry_line(geom: CacheGeometry, source: str) -> str:
    shape = (f"MLA latent {geom.kv_lora_rank} + rope {geom.rope_dim}" if geom.is_mla
             else f"{geom.kv_heads} KV heads x head_dim {geom.head_dim}")
    q = f", {geom.q_heads} query heads" if geom.q_heads is not None else ""
    return (f"geometry: {geom.layers} layers, {shape}, {geom.dtype} ({geom.dtype_bytes} B/element){q}"
            f" [from {source}]")


def _human(value: Fraction, unit: str) -> str:
    if unit == "B":
        text = f"{value.numerator if value.denominator == 1 else f'{float(value):.1f}'} B"
        for name, size in reversed(BINARY_UNITS.items()):
            if value >= size:
                return f"{text} ({float(value / size):.3f} {name})"
        return text
    if unit == "s":
        for name, scale in (("s", 1), ("ms", 10**3), ("us", 10**6)):
            if value * scale >= 1 or name == "us":
                return f"{float(value * scale):.3f} {name}"
    text = str(value.numerator) if value.denominator == 1 else f"{float(value):.3f}"
    return f"{text} {unit}".rstrip()


def render_text(sections: Sequence[Section], geom: CacheGeometry, source: str) -> str:
    lines = ["kvlint-budget: KV-cache budget", UNITS_LINE, _geometry_line(geom, source)]
    for section in sections:
        lines += ["", section.title]
        for fig in section.figures:
            lines.append(f"  {fig.label}: {_human(fig.value, fig.unit)}")
            lines.append(f"      = {fig.formula} = {fig.expression}")
        lines += [f"  note: {note}" for note in section.notes]
    return "\n".join(lines) + "\n"


def _json_value(value: Fraction) -> int | float:
    return value.numerator if value.denominator == 1 else float(value)


def render_json(sections: Sequence[Section], geom: CacheGeometry, opts: BudgetOptions, source: str) -> str:
    optional = (lambda value: None if value is None else _json_value(Fraction(value)))
    document = {
        "units": {"binary": BINARY_UNITS, "decimal": DECIMAL_UNITS, "bandwidth": "B/s (1 TB/s = 10^12 B/s)",
                  "time": "s"},
        "inputs": {"lengths": [{"tokens": n, "weight": _json_value(w)} for n, w in opts.lengths],
                   "memory": opts.memory, "reserve": opts.reserve, "block_size": opts.block_size,
                   "tp": opts.tp, "kv_replication": opts.kv_replication,
                   "bandwidth": optional(opts.bandwidth), "weights_bytes": opts.weights_bytes,
                   "batch_sizes": list(opts.batch_sizes), "kv_quant": opts.kv_quant,
                   "attention_share": optional(opts.attention_share)},
        "geometry": {"source": source, "layers": geom.layers, "kv_heads": geom.kv_heads,
                     "head_dim": geom.head_dim, "kv_lora_rank": geom.kv_lora_rank, "rope_dim": geom.rope_dim,
                     "q_heads": geom.q_heads, "dtype": geom.dtype, "dtype_bytes": geom.dtype_bytes},
        "sections": {
            section.key: {
                "title": section.title,
                "figures": {fig.key: {"label": fig.label, "value": _json_value(fig.value), "unit": fig.unit,
                                      "formula": fig.formula, "expression": fig.expression}
                            for fig in section.figures},
                "notes": section.notes,
            } for section in sections
        },
    }
    return json.dumps(document, indent=2) + "\n"
