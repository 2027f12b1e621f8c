"""The kvlint-budget report: sections of figures, each with its formula in names and in numbers.

The formula in numbers is a Python expression using only + - * / ceil floor, so every figure can be
reproduced by hand.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from fractions import Fraction

from kvlint.budget.formulas import (
    BLOCK_TABLE_ENTRY_BYTES,
    CacheGeometry,
    amdahl_speedup,
    attention_intensity,
    card_geometry,
    decode_latency_floor,
    kv_bytes_per_token,
    kv_heads_per_card,
    paged_block_bytes,
    paged_blocks,
    sequence_bytes,
    weighted_mean,
)
from kvlint.budget.units import BudgetError


@dataclass(frozen=True)
class Figure:
    """One reported number with its formula in names and the same formula in numbers."""

    key: str
    label: str
    value: Fraction
    unit: str
    formula: str
    expression: str


@dataclass
class Section:
    key: str
    title: str
    figures: list[Figure] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def add(self, key: str, label: str, value: int | Fraction, unit: str, formula: str,
            expression: str) -> Figure:
        figure = Figure(key, label, Fraction(value), unit, formula, expression)
        self.figures.append(figure)
        return figure


@dataclass(frozen=True)
class BudgetOptions:
    """The workload and machine side of the question (everything but the geometry)."""

    lengths: tuple[tuple[int, Fraction], ...] = ()
    memory: int | None = None
    reserve: int = 0
    block_size: int = 128
    tp: int = 1
    kv_replication: int | None = None
    bandwidth: Fraction | None = None
    weights_bytes: int | None = None
    batch_sizes: tuple[int, ...] = (1, 8, 32, 128)
    kv_quant: str | None = None
    attention_share: Fraction | None = None


def _num(value: int | Fraction) -> str:
    """An exact literal of a non-negative number: an integer, a terminating decimal, or ``(p/q)``."""
    value = Fraction(value)
    if value.denominator == 1:
        return str(value.numerator)
    for digits in range(1, 40):
        scaled = value * 10**digits
        if scaled.denominator == 1:
            text = str(scaled.numerator).rjust(digits + 1, "0")
            return f"{text[:-digits]}.{text[-digits:]}"
    return f"({value.numerator}/{value.denominator})"


def _mean_expr(terms: Sequence[str], weights: Sequence[Fraction]) -> str:
    """The expression of a weighted mean, parenthesised; a plain average when the weights are equal."""
    if len(terms) == 1:
        return terms[0]
    if len(set(weights)) == 1:
        return f"(({' + '.join(terms)}) / {len(terms)})"
    weighted = " + ".join(f"{_num(w)} * {t}" for t, w in zip(terms, weights))
    return f"(({weighted}) / ({' + '.join(_num(w) for w in weights)}))"


@dataclass(frozen=True)
class _Workload:
    """The length mix and its mean, as numbers and as an expression."""

    lengths: tuple[int, ...]
    weights: tuple[Fraction, ...]

    @property
    def mean_tokens(self) -> Fraction:
        return weighted_mean(self.lengths, self.weights)

    @property
    def mean_tokens_expr(self) -> str:
        return _mean_expr([str(n) for n in self.lengths], self.weights)


def per_token_section(geom: CacheGeometry, lengths: Sequence[int], tag: str) -> Section:
    section = Section("per_token", f"Per token and per sequence{tag}")
    b = geom.dtype_bytes
    if geom.is_mla:
        section.add("bytes_per_token", "KV bytes per token (all layers, latent + rope)",
                    kv_bytes_per_token(geom), "B", "layers * (kv_lora_rank + rope_dim) * dtype_bytes",
                    f"{geom.layers} * ({geom.kv_lora_rank} + {geom.rope_dim}) * {b}")
    else:
        section.add("bytes_per_token", "KV bytes per token (all layers, K and V)",
                    kv_bytes_per_token(geom), "B", "layers * 2 * kv_heads * head_dim * dtype_bytes",
                    f"{geom.layers} * 2 * {geom.kv_heads} * {geom.head_dim} * {b}")
    bpt = kv_bytes_per_token(geom)
    for tokens in sorted(set(lengths)):
        section.add(f"bytes_per_sequence_{tokens}", f"KV bytes per sequence of {tokens} tokens",
                    sequence_bytes(bpt, tokens), "B", "tokens * bytes_per_token", f"{tokens} * {bpt}")
    return section


def tensor_parallel_section(geom: CacheGeometry, card: CacheGeometry, tp: int, replication: int | None,
                            tag: str) -> Section:
    section = Section("tensor_parallel", f"Tensor parallel: {tp} cards{tag}")
    card_bpt = kv_bytes_per_token(card)
    if geom.is_mla:
        section.add("card_bytes_per_token", "KV bytes per token on each card", card_bpt, "B",
                    "bytes_per_token (MLA latent: every card holds all of it)", f"{kv_bytes_per_token(geom)}")
        section.add("all_cards_bytes_per_token", "KV bytes per token over all cards", tp * card_bpt, "B",
                    "tp * card_bytes_per_token", f"{tp} * {card_bpt}")
        return section
    heads, r = kv_heads_per_card(geom.kv_heads, tp, replication)
    if replication is not None:
        r_formula, r_expr = "given by --kv-replication", str(replication)
    elif tp > geom.kv_heads:
        r_formula, r_expr = "tp / kv_heads (tp > kv_heads: one head per card)", f"{tp} / {geom.kv_heads}"
    else:
        r_formula, r_expr = "1 (tp divides kv_heads)", "1"
    section.add("replication", "cards holding each KV head (R)", r, "cards", r_formula, r_expr)
    section.add("kv_heads_per_card", "KV heads per card", heads, "heads", "kv_heads * R / tp",
                f"{geom.kv_heads} * {r} / {tp}")
    section.add("card_bytes_per_token", "KV bytes per token on each card", card_bpt, "B",
                "layers * 2 * kv_heads_per_card * head_dim * dtype_bytes",
                f"{geom.layers} * 2 * {heads} * {geom.head_dim} * {geom.dtype_bytes}")
    section.add("all_cards_bytes_per_token", "KV bytes per token over all cards", tp * card_bpt, "B",
                "tp * card_bytes_per_token (= R * bytes_per_token)", f"{tp} * {card_bpt}")
    return section


def capacity_section(bpt: int, bpt_name: str, work: _Workload, opts: BudgetOptions,
                     tag: str) -> tuple[Section, Fraction]:
    """How many sequences fit; returns the section and the paged count."""
    section = Section("capacity", f"Capacity in --memory{tag}")
    memory, reserve, bs = opts.memory, opts.reserve, opts.block_size
    if reserve >= memory:
        raise BudgetError(f"--reserve {reserve} B leaves nothing of --memory {memory} B")
    available = section.add("available", "bytes available for the KV cache", memory - reserve, "B",
                            "memory - reserve", f"{memory} - {reserve}").value
    longest = max(work.lengths)
    slot = section.add("contiguous_slot_bytes", f"contiguous slot (sized for {longest} tokens)",
                       sequence_bytes(bpt, longest), "B", f"max_length * {bpt_name}", f"{longest} * {bpt}")
    section.add("contiguous_sequences", "sequences that fit, contiguous", available // slot.value,
                "sequences", "floor(available / contiguous_slot_bytes)", f"floor({available} / {slot.value})")
    block = section.add("block_bytes", f"bytes per paged block of {bs} tokens (+ int32 table entry)",
                        paged_block_bytes(bpt, bs), "B", f"block_size * {bpt_name} + 4",
                        f"{bs} * {bpt} + {BLOCK_TABLE_ENTRY_BYTES}")
    pool = section.add("pool_blocks", "blocks in the pool", available // block.value, "blocks",
                       "floor(available / block_bytes)", f"floor({available} / {block.value})")
    for tokens in sorted(set(work.lengths)):
        blocks = paged_blocks(tokens, bs)
        section.add(f"blocks_per_sequence_{tokens}",
                    f"blocks for {tokens} tokens ({blocks * bs - tokens} tail slots unused)", blocks,
                    "blocks", "ceil(tokens / block_size)", f"ceil({tokens} / {bs})")
    blocks_expr = _mean_expr([f"ceil({n} / {bs})" for n in work.lengths], work.weights)
    mean_blocks = weighted_mean([paged_blocks(n, bs) for n in work.lengths], work.weights)
    if len(work.lengths) > 1:
        section.add("mean_blocks_per_sequence", "mean blocks per sequence of the length mix", mean_blocks,
                    "blocks", "sum(weight * ceil(tokens / block_size)) / sum(weight)", blocks_expr)
    paged = section.add("paged_sequences", "sequences that fit, paged", math.floor(pool.value / mean_blocks),
                        "sequences", "floor(pool_blocks / mean_blocks_per_sequence)",
                        f"floor({pool.value} / {blocks_expr})")
    exact = work.mean_tokens * bpt
    section.add("exact_sequences", "sequences that fit with exact-length allocation (upper bound)",
                math.floor(available / exact), "sequences",
                f"floor(available / (mean_tokens * {bpt_name}))",
                f"floor({available} / ({work.mean_tokens_expr} * {bpt}))")
    section.notes.append("contiguous: every sequence reserves a slot for the longest length (a static "
                         "cache); paged: the tail block is rounded up and each block costs one int32 "
                         "block-table entry; with --tp, counts are per tensor-parallel group")
    return section, paged.value


def decode_floor_section(bpt: int, bpt_name: str, work: _Workload, opts: BudgetOptions,
                         fits: Fraction | None, tag: str) -> Section:
    section = Section("decode_floor", f"Decode-step latency floor at --bandwidth{tag}")
    bw, weights, tok = _num(opts.bandwidth), opts.weights_bytes or 0, work.mean_tokens_expr
    for batch in opts.batch_sizes:
        kv = batch * work.mean_tokens * bpt
        section.add(f"kv_read_batch_{batch}", f"KV bytes read per step, batch {batch}", kv, "B",
                    f"batch * mean_tokens * {bpt_name}", f"{batch} * {tok} * {bpt}")
        floor = decode_latency_floor(kv, opts.bandwidth, weights)
        section.add(f"floor_batch_{batch}", f"step latency floor, batch {batch}", floor, "s",
                    "(weights_bytes + kv_read) / bandwidth", f"({weights} + {batch} * {tok} * {bpt}) / {bw}")
        section.add(f"tokens_per_s_batch_{batch}", f"decode tokens/s ceiling, batch {batch}", batch / floor,
                    "tokens/s", "batch / floor", f"{batch} * {bw} / ({weights} + {batch} * {tok} * {bpt})")
        if fits is not None and batch > fits:
            section.notes.append(f"batch {batch} exceeds the {fits} sequences that fit (paged)")
    section.notes.append("bandwidth is per card (decimal: 1 TB/s = 10^12 B/s); weights_bytes is what one "
                         "card reads per step")
    return section


def intensity_section(geom: CacheGeometry, tag: str) -> Section:
    section = Section("intensity", f"Arithmetic intensity of single-query attention{tag}")
    q, b = geom.q_heads, geom.dtype_bytes
    if geom.is_mla:
        r, rope = geom.kv_lora_rank, geom.rope_dim
        flops, flops_expr = "q_heads * 2 * (2 * kv_lora_rank + rope_dim)", f"{q} * 2 * (2 * {r} + {rope})"
        row, row_expr = "(kv_lora_rank + rope_dim) * dtype_bytes", f"({r} + {rope}) * {b}"
        shared_readers, shared_expr = "1", "1"
    else:
        d = geom.head_dim
        flops, flops_expr = "q_heads * 4 * head_dim", f"{q} * 4 * {d}"
        row, row_expr = "2 * head_dim * dtype_bytes", f"2 * {d} * {b}"
        shared_readers, shared_expr = "kv_heads", str(geom.kv_heads)
        section.add("gqa_group", "query heads per KV head", Fraction(q, geom.kv_heads), "heads",
                    "q_heads / kv_heads", f"{q} / {geom.kv_heads}")
    section.add("shared", "FLOP per KV byte, KV row read once per group (GQA/MLA sharing)",
                attention_intensity(geom, shared=True), "FLOP/B",
                f"({flops}) / ({shared_readers} * {row})", f"({flops_expr}) / ({shared_expr} * {row_expr})")
    section.add("unshared", "FLOP per KV byte, KV row re-read per query head (no sharing)",
                attention_intensity(geom, shared=False), "FLOP/B",
                f"({flops}) / (q_heads * {row})", f"({flops_expr}) / ({q} * {row_expr})")
    section.notes.append("per token and layer (both cancel); Q, output and softmax traffic ignored")
    return section


def speedup_section(base_bpt: int, quant_bpt: int, work: _Workload | None,
                    opts: BudgetOptions) -> Section:
    section = Section("kv_quant_speedup", f"End-to-end bound of --kv-quant {opts.kv_quant} (Amdahl)")
    s = section.add("attention_speedup", "attention speed-up s (bytes read before / after)",
                    Fraction(base_bpt, quant_bpt), "x", "bytes_per_token / quant_bytes_per_token",
                    f"{base_bpt} / {quant_bpt}").value
    s_expr = f"({base_bpt} / {quant_bpt})"
    formula = "1 / ((1 - p) + p / s)"
    if opts.attention_share is not None:
        p = _num(opts.attention_share)
        section.add("end_to_end", f"end-to-end speed-up bound, attention share p = {p}",
                    amdahl_speedup(opts.attention_share, s), "x", formula, f"1 / ((1 - {p}) + {p} / {s_expr})")
    elif opts.weights_bytes is not None and work is not None:
        weights, tok = opts.weights_bytes, work.mean_tokens_expr
        for batch in opts.batch_sizes:
            kv = batch * work.mean_tokens * base_bpt
            p = section.add(f"attention_share_batch_{batch}", f"attention share p of the step, batch {batch}",
                            kv / (weights + kv), "", "kv_read / (weights_bytes + kv_read)",
                            f"({batch} * {tok} * {base_bpt}) / ({weights} + {batch} * {tok} * {base_bpt})").value
            section.add(f"end_to_end_batch_{batch}", f"end-to-end speed-up bound, batch {batch}",
                        amdahl_speedup(p, s), "x", formula, f"1 / ((1 - {_num(p)}) + {_num(p)} / {s_expr})")
    else:
        section.notes.append("give --attention-share (or --weights-bytes with --tokens/--lengths) for the "
                             "end-to-end bound; s is its limit when attention is the whole step")
    section.notes.append("p = share of the decode step spent reading the KV cache; quantisation scales "
                         "and dequantisation cost are not counted")
    return section


def _geometry_sections(geom: CacheGeometry, work: _Workload | None, opts: BudgetOptions,
                       tag: str) -> tuple[list[Section], int]:
    """Every section that depends on the geometry; returns them and the per-card bytes per token."""
    sections = [per_token_section(geom, work.lengths if work else (), tag)]
    card, bpt_name = geom, "bytes_per_token"
    if opts.tp > 1 or opts.kv_replication is not None:
        card, bpt_name = card_geometry(geom, opts.tp, opts.kv_replication), "card_bytes_per_token"
        sections.append(tensor_parallel_section(geom, card, opts.tp, opts.kv_replication, tag))
    bpt = kv_bytes_per_token(card)
    fits = None
    if opts.memory is not None:
        section, fits = capacity_section(bpt, bpt_name, work, opts, tag)
        sections.append(section)
    if opts.bandwidth is not None:
        sections.append(decode_floor_section(bpt, bpt_name, work, opts, fits, tag))
    if geom.q_heads is not None:
        sections.append(intensity_section(card, tag))
        if card is not geom:
            sections[-1].notes.append("per card: q_heads = q_heads / tp, kv_heads = kv_heads_per_card")
    return sections, bpt


def build_report(geom: CacheGeometry, opts: BudgetOptions) -> list[Section]:
    """All sections for the geometry, then (with --kv-quant) the same after compression and the bound."""
    for flag, value in (("--memory", opts.memory), ("--bandwidth", opts.bandwidth)):
        if value is not None and not opts.lengths:
            raise BudgetError(f"{flag} needs --tokens or --lengths")
    work = _Workload(tuple(n for n, _ in opts.lengths), tuple(w for _, w in opts.lengths)) \
        if opts.lengths else None
    sections, base_bpt = _geometry_sections(geom, work, opts, "")
    if opts.kv_quant is None:
        return sections
    quant = replace(geom, dtype=opts.kv_quant)
    quant_sections, quant_bpt = _geometry_sections(quant, work, opts, f" [KV in {opts.kv_quant}]")
    for section in quant_sections:
        section.key = f"kv_quant_{section.key}"
    return sections + quant_sections + [speedup_section(base_bpt, quant_bpt, work, opts)]
