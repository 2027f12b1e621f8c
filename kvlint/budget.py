"""kvlint-budget: KV-cache budget diagnostics from a model's cache geometry.

Answers, before a model runs, the numbers that decide whether it fits and how fast decode can be: KV bytes
per token and per sequence, how many sequences fit (contiguous vs paged), per-card bytes under tensor
parallelism, the decode-step latency floor, the arithmetic intensity of single-query attention, and what a
quantised KV cache buys end to end (Amdahl).

Every figure is exact integer/rational arithmetic and is reported with its formula in names and the same
formula in numbers (a Python expression using only + - * / ceil floor), so it can be reproduced by hand.
The formula functions take plain numbers or a :class:`CacheGeometry`, so the runtime probe can call them on
live shapes. This module never imports torch.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
from dataclasses import dataclass, field, replace
from fractions import Fraction
from pathlib import Path
from typing import Any, Callable, Sequence

# --------------------------------------------------------------------------------------------- units

#: Decimal units (SI): what memory vendors and bandwidth figures use (1.6 TB/s = 1.6e12 B/s).
DECIMAL_UNITS = {"B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12}
#: Binary units (IEC): what allocators report (48 GiB = 48 * 2**30 B).
BINARY_UNITS = {"KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40}
_SIZE_UNITS = {"": 1, **DECIMAL_UNITS, **BINARY_UNITS}
_UNIT_NAMES = ", ".join(u for u in _SIZE_UNITS if u)
_QUANTITY = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([A-Za-z]*)\s*")
_DECIMAL = re.compile(r"\s*\d+(?:\.\d+)?\s*")

#: Bytes per cache element. fp8 is any 8-bit float format (e4m3/e5m2): the size is what matters here.
DTYPE_BYTES = {"bf16": 2, "fp16": 2, "int8": 1, "fp8": 1}

#: Paged-cache metadata model: one int32 block-table entry per allocated block (vLLM/FIA ``block_table``
#: is int32), charged to the sequence holding the block; one table serves all layers.
BLOCK_TABLE_ENTRY_BYTES = 4


class BudgetError(ValueError):
    """A bad input; the message names the argument or file and is shown as a one-line error."""


def _quantity(text: str, what: str) -> tuple[Fraction, str]:
    match = _QUANTITY.fullmatch(text)
    if not match:
        raise BudgetError(f"invalid {what} {text!r}: expected a number and a unit, e.g. 48GiB")
    number, unit = match.groups()
    if unit not in _SIZE_UNITS:
        raise BudgetError(f"invalid {what} {text!r}: unit {unit!r} is not one of {_UNIT_NAMES}")
    return Fraction(number) * _SIZE_UNITS[unit], unit


def parse_size(text: str) -> int:
    """Parse ``48GiB`` / ``64GB`` / ``1073741824`` into bytes (GiB binary, GB decimal, bare = bytes)."""
    value, _ = _quantity(text, "size")
    if value.denominator != 1:
        raise BudgetError(f"invalid size {text!r}: not a whole number of bytes")
    return value.numerator


def parse_bandwidth(text: str) -> Fraction:
    """Parse ``1.6TB/s`` (decimal: 1.6e12 B/s) or ``800GiB/s`` into bytes per second."""
    if not text.strip().endswith("/s"):
        raise BudgetError(f"invalid bandwidth {text!r}: expected a size per second, e.g. 1.6TB/s")
    value, _ = _quantity(text.strip()[:-2], "bandwidth")
    if value == 0:
        raise BudgetError(f"invalid bandwidth {text!r}: must be positive")
    return value


def parse_positive_int(text: str) -> int:
    """Parse a strictly positive integer."""
    if not text.strip().isdigit() or int(text) == 0:
        raise BudgetError(f"expected a positive integer, got {text!r}")
    return int(text)


def parse_int_list(text: str) -> tuple[int, ...]:
    """Parse ``1,8,32`` into positive integers."""
    return tuple(parse_positive_int(item) for item in text.split(","))


def parse_share(text: str) -> Fraction:
    """Parse a fraction of step time in (0, 1], e.g. ``0.4``."""
    if not _DECIMAL.fullmatch(text) or not 0 < Fraction(text.strip()) <= 1:
        raise BudgetError(f"expected a decimal in (0, 1], got {text!r}")
    return Fraction(text.strip())


def parse_lengths(text: str) -> tuple[tuple[int, Fraction], ...]:
    """Parse a length mix: ``512,2048,8192`` (equally likely) or ``512:0.5,2048:0.3,8192:0.2`` (weights).

    Weights are relative (normalised by their sum), so ``512:1,8192:3`` means one short per three long.
    """
    mix = []
    for item in text.split(","):
        length, _, weight = item.partition(":")
        if weight and not (_DECIMAL.fullmatch(weight) and Fraction(weight.strip()) > 0):
            raise BudgetError(f"invalid weight {weight!r} in {item!r}: expected a positive decimal")
        mix.append((parse_positive_int(length), Fraction(weight.strip()) if weight else Fraction(1)))
    return tuple(mix)


# ------------------------------------------------------------------------------------------ geometry


@dataclass(frozen=True)
class CacheGeometry:
    """The per-token shape of a model's KV cache.

    Standard/GQA caches hold a K and a V row of ``head_dim`` per KV head per layer; MLA caches (DeepSeek)
    hold one compressed latent row of ``kv_lora_rank`` plus the decoupled rope key of ``rope_dim`` per
    layer, shared by all heads. ``q_heads`` (query heads) is only needed for arithmetic intensity.
    """

    layers: int
    dtype: str
    kv_heads: int | None = None
    head_dim: int | None = None
    kv_lora_rank: int | None = None
    rope_dim: int | None = None
    q_heads: int | None = None

    @property
    def is_mla(self) -> bool:
        return self.kv_lora_rank is not None

    @property
    def dtype_bytes(self) -> int:
        return DTYPE_BYTES[self.dtype]


def _config_int(config: dict[str, Any], key: str, path: Path) -> int | None:
    value = config.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise BudgetError(f"--config {path}: {key} must be a positive integer, got {value!r}")
    return value


def geometry_fields_from_config(path: Path) -> dict[str, int]:
    """Read the cache geometry fields from a Hugging Face ``config.json``.

    MLA is recognised by a non-null ``kv_lora_rank`` (its ``num_key_value_heads`` is then irrelevant).
    Otherwise ``num_key_value_heads`` defaults to ``num_attention_heads`` (the HF convention for MHA) and
    ``head_dim`` to ``hidden_size / num_attention_heads``.
    """
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except OSError as err:
        raise BudgetError(f"--config {path}: cannot read ({err.strerror})") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise BudgetError(f"--config {path}: not valid JSON ({err})") from None
    if not isinstance(config, dict):
        raise BudgetError(f"--config {path}: expected a JSON object")
    layers = _config_int(config, "num_hidden_layers", path)
    if layers is None:
        raise BudgetError(f"--config {path}: no num_hidden_layers")
    fields = {"layers": layers}
    q_heads = _config_int(config, "num_attention_heads", path)
    if q_heads is not None:
        fields["q_heads"] = q_heads
    kv_lora_rank = _config_int(config, "kv_lora_rank", path)
    if kv_lora_rank is not None:
        fields["kv_lora_rank"] = kv_lora_rank
        rope_dim = _config_int(config, "qk_rope_head_dim", path)
        if rope_dim is None:
            raise BudgetError(f"--config {path}: kv_lora_rank is set but qk_rope_head_dim is missing")
        fields["rope_dim"] = rope_dim
        return fields
    kv_heads = _config_int(config, "num_key_value_heads", path) or q_heads
    if kv_heads is not None:
        fields["kv_heads"] = kv_heads
    head_dim = _config_int(config, "head_dim", path)
    hidden = _config_int(config, "hidden_size", path)
    if head_dim is None and hidden is not None and q_heads is not None:
        if hidden % q_heads:
            raise BudgetError(f"--config {path}: hidden_size {hidden} is not divisible by "
                              f"num_attention_heads {q_heads}; give head_dim")
        head_dim = hidden // q_heads
    if head_dim is not None:
        fields["head_dim"] = head_dim
    return fields


_MLA_KEYS = ("kv_lora_rank", "rope_dim")
_STANDARD_KEYS = ("kv_heads", "head_dim")


def resolve_geometry(args: argparse.Namespace) -> CacheGeometry:
    """Merge ``--config`` fields with the geometry flags (flags win) and check the result is complete.

    MLA flags replace a standard config's head fields; head flags on an MLA config are an error, because
    they would silently describe a different cache.
    """
    config = geometry_fields_from_config(args.config) if args.config else {}
    flags = {key: value for key, value in (
        ("layers", args.layers), ("kv_heads", args.kv_heads), ("head_dim", args.head_dim),
        ("q_heads", args.q_heads), ("kv_lora_rank", args.kv_lora_rank), ("rope_dim", args.rope_dim),
    ) if value is not None}
    mla_flags = any(key in flags for key in _MLA_KEYS)
    standard_flags = any(key in flags for key in _STANDARD_KEYS)
    if mla_flags and standard_flags:
        raise BudgetError("--kv-heads/--head-dim and --kv-lora-rank/--rope-dim describe different caches; "
                          "give one pair")
    if standard_flags and "kv_lora_rank" in config:
        raise BudgetError(f"--kv-heads/--head-dim do not apply: --config {args.config} is an MLA model "
                          "(kv_lora_rank)")
    if mla_flags:
        config = {key: value for key, value in config.items() if key not in _STANDARD_KEYS}
    fields = {**config, **flags}
    needed = _MLA_KEYS if any(key in fields for key in _MLA_KEYS) else _STANDARD_KEYS
    for key in ("layers", *needed):
        if key not in fields:
            raise BudgetError(f"missing --{key.replace('_', '-')} (or a --config that has it)")
    if needed == _STANDARD_KEYS and fields.get("q_heads", 0) % fields["kv_heads"]:
        raise BudgetError(f"--q-heads {fields['q_heads']} is not a multiple of --kv-heads "
                          f"{fields['kv_heads']} (GQA groups must be equal)")
    return CacheGeometry(dtype=args.dtype, **fields)


# ------------------------------------------------------------------------------------------ formulas


def kv_bytes_per_token(geom: CacheGeometry) -> int:
    """KV-cache bytes one token occupies over all layers.

    Standard/GQA: ``layers * 2 * kv_heads * head_dim * dtype_bytes`` (2 = one K row and one V row).
    MLA: ``layers * (kv_lora_rank + rope_dim) * dtype_bytes`` (one latent row, no separate V).
    Quantisation scales are per channel (independent of the token count) and are not included.
    """
    if geom.is_mla:
        return geom.layers * (geom.kv_lora_rank + geom.rope_dim) * geom.dtype_bytes
    return geom.layers * 2 * geom.kv_heads * geom.head_dim * geom.dtype_bytes


def kv_heads_per_card(kv_heads: int, tp: int, replication: int | None = None) -> tuple[int, int]:
    """Return ``(KV heads per card, replication)`` for ``tp`` cards; each KV head is held by R cards.

    Default rule (vLLM's): R = 1 when ``tp`` divides ``kv_heads``; R = tp / kv_heads when ``tp`` is a
    multiple of ``kv_heads`` (each card holds one head, replicated). Any other split is rejected, as vLLM
    does. An explicit R needs ``tp % R == 0`` and ``(kv_heads * R) % tp == 0``; heads per card are
    ``kv_heads * R / tp`` in every case.
    """
    if replication is None:
        if tp <= kv_heads and kv_heads % tp == 0:
            replication = 1
        elif tp > kv_heads and tp % kv_heads == 0:
            replication = tp // kv_heads
        else:
            raise BudgetError(f"--tp {tp} neither divides {kv_heads} KV heads nor is a multiple of them; "
                              "vLLM rejects this split (give --kv-replication R)")
    if tp % replication or (kv_heads * replication) % tp:
        raise BudgetError(f"--kv-replication {replication}: needs tp % R == 0 and (kv_heads * R) % tp == 0 "
                          f"(tp {tp}, {kv_heads} KV heads)")
    return kv_heads * replication // tp, replication


def card_geometry(geom: CacheGeometry, tp: int, replication: int | None = None) -> CacheGeometry:
    """The cache one of ``tp`` cards holds and serves: ``kv_heads_per_card`` KV heads, ``q_heads / tp``
    query heads. The MLA latent has no head axis, so every card holds all of it (as vLLM does).
    """
    if geom.q_heads is not None and geom.q_heads % tp:
        raise BudgetError(f"--tp {tp} does not divide {geom.q_heads} query heads")
    q_heads = None if geom.q_heads is None else geom.q_heads // tp
    if geom.is_mla:
        if replication is not None:
            raise BudgetError("--kv-replication does not apply to an MLA cache: the latent has no heads")
        return replace(geom, q_heads=q_heads)
    heads, _ = kv_heads_per_card(geom.kv_heads, tp, replication)
    return replace(geom, kv_heads=heads, q_heads=q_heads)


def sequence_bytes(bytes_per_token: int, tokens: int) -> int:
    """Exact KV bytes of one sequence (no rounding): ``tokens * bytes_per_token``."""
    return tokens * bytes_per_token


def paged_blocks(tokens: int, block_size: int) -> int:
    """Blocks a paged cache allocates for ``tokens``: the tail block is rounded up, ``ceil(tokens / bs)``."""
    return -(-tokens // block_size)


def paged_block_bytes(bytes_per_token: int, block_size: int) -> int:
    """Bytes one paged block costs: its tokens plus its int32 block-table entry."""
    return block_size * bytes_per_token + BLOCK_TABLE_ENTRY_BYTES


def decode_latency_floor(kv_bytes: int | Fraction, bandwidth: Fraction, weights_bytes: int = 0) -> Fraction:
    """Seconds a decode step cannot beat: it reads every KV byte (and the weights) once from memory."""
    return Fraction(weights_bytes + kv_bytes) / bandwidth


def attention_intensity(geom: CacheGeometry, shared: bool) -> Fraction:
    """FLOP per KV byte of single-query (decode) attention, per token and layer (both cancel).

    FLOPs per query head: ``2*D`` for q.k plus ``2*D`` for p*v (standard), or ``2*(r+rope) + 2*r`` for
    absorbed MLA. Bytes: with GQA sharing each KV row is read once for its whole query-head group;
    without sharing it is re-read for every query head. Q, output and softmax traffic are ignored.
    """
    b = geom.dtype_bytes
    if geom.is_mla:
        flops = geom.q_heads * 2 * (2 * geom.kv_lora_rank + geom.rope_dim)
        row_bytes = (geom.kv_lora_rank + geom.rope_dim) * b
        return Fraction(flops, row_bytes * (1 if shared else geom.q_heads))
    flops = geom.q_heads * 4 * geom.head_dim
    readers = geom.kv_heads if shared else geom.q_heads
    return Fraction(flops, readers * 2 * geom.head_dim * b)


def amdahl_speedup(attention_share: Fraction, attention_speedup: Fraction) -> Fraction:
    """End-to-end speed-up when only the attention share ``p`` of a step gets ``s`` times faster."""
    return 1 / ((1 - attention_share) + attention_share / attention_speedup)


def weighted_mean(values: Sequence[int], weights: Sequence[Fraction]) -> Fraction:
    """Mean of ``values`` under relative ``weights``."""
    return sum((w * v for v, w in zip(values, weights)), Fraction(0)) / sum(weights)


# ----------------------------------------------------------------------------------------- the report


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


# ----------------------------------------------------------------------------------------- rendering

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
        text = f"{_num(value) if value.denominator == 1 else f'{float(value):.1f}'} B"
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


# ------------------------------------------------------------------------------------------------ CLI


class _Parser(argparse.ArgumentParser):
    """argparse that reports a usage error as one line naming the argument, exit status 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message}\n")


def _arg(parse: Callable[[str], Any]) -> Callable[[str], Any]:
    """Adapt a parser so argparse shows its BudgetError message as the argument's error."""
    def convert(text: str) -> Any:
        try:
            return parse(text)
        except BudgetError as err:
            raise argparse.ArgumentTypeError(str(err)) from None
    return convert


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="kvlint-budget",
                     description="KV-cache budget: bytes per token and sequence, capacity (contiguous vs "
                                 "paged), per-card bytes under TP, decode latency floor, attention "
                                 "intensity, quantised-KV speed-up bound.",
                     epilog="Every figure is printed with its formula; see docs/budget.md.")
    geo = parser.add_argument_group("cache geometry (flags override --config)")
    geo.add_argument("--config", type=Path, help="Hugging Face config.json")
    count = _arg(parse_positive_int)
    geo.add_argument("--layers", type=count, help="decoder layers (num_hidden_layers)")
    geo.add_argument("--kv-heads", type=count, help="KV heads (num_key_value_heads)")
    geo.add_argument("--head-dim", type=count, help="head dimension D (head_dim)")
    geo.add_argument("--q-heads", type=count, help="query heads, for intensity (num_attention_heads)")
    geo.add_argument("--kv-lora-rank", type=count, help="MLA latent width (kv_lora_rank)")
    geo.add_argument("--rope-dim", type=count, help="MLA rope key width (qk_rope_head_dim)")
    geo.add_argument("--dtype", choices=tuple(DTYPE_BYTES), default="bf16", help="cache dtype (bf16)")
    work = parser.add_mutually_exclusive_group()
    work.add_argument("--tokens", type=count, help="tokens per sequence")
    work.add_argument("--lengths", type=_arg(parse_lengths), help="length mix: 512,2048 or 512:0.7,8192:0.3")
    cap = parser.add_argument_group("capacity")
    cap.add_argument("--memory", type=_arg(parse_size), help="memory per card, e.g. 48GiB or 64GB")
    cap.add_argument("--reserve", type=_arg(parse_size), help="of it, kept for weights/activations")
    cap.add_argument("--block-size", type=count, default=128, help="paged block size in tokens (128)")
    par = parser.add_argument_group("tensor parallelism")
    par.add_argument("--tp", type=count, default=1, help="tensor-parallel cards (1)")
    par.add_argument("--kv-replication", type=count, help="cards holding each KV head (default: vLLM rule)")
    speed = parser.add_argument_group("decode speed")
    speed.add_argument("--bandwidth", type=_arg(parse_bandwidth), help="memory bandwidth per card, e.g. 1.6TB/s")
    speed.add_argument("--weights-bytes", type=_arg(parse_size), help="weight bytes one card reads per step")
    speed.add_argument("--batch-sizes", type=_arg(parse_int_list), default=(1, 8, 32, 128),
                       help="batch sizes for the floor (1,8,32,128)")
    speed.add_argument("--kv-quant", choices=("int8", "fp8"), help="also report a quantised KV cache")
    speed.add_argument("--attention-share", type=_arg(parse_share),
                       help="share of decode step time spent in attention, for the Amdahl bound")
    parser.add_argument("--format", choices=("text", "json"), default="text")
    return parser


def options_from_args(args: argparse.Namespace) -> BudgetOptions:
    """Check the option combinations and collect the non-geometry inputs."""
    if args.reserve is not None and args.memory is None:
        raise BudgetError("--reserve needs --memory")
    if args.attention_share is not None and args.kv_quant is None:
        raise BudgetError("--attention-share needs --kv-quant")
    if args.weights_bytes is not None and args.bandwidth is None and args.kv_quant is None:
        raise BudgetError("--weights-bytes needs --bandwidth or --kv-quant")
    lengths = args.lengths or (((args.tokens, Fraction(1)),) if args.tokens else ())
    return BudgetOptions(lengths=lengths, memory=args.memory, reserve=args.reserve or 0,
                         block_size=args.block_size, tp=args.tp, kv_replication=args.kv_replication,
                         bandwidth=args.bandwidth, weights_bytes=args.weights_bytes,
                         batch_sizes=args.batch_sizes, kv_quant=args.kv_quant,
                         attention_share=args.attention_share)


def main(argv: Sequence[str] | None = None) -> int:
    """Console entry point (``kvlint-budget`` and ``python -m kvlint.budget``)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        geom = resolve_geometry(args)
        opts = options_from_args(args)
        sections = build_report(geom, opts)
    except BudgetError as err:
        parser.error(str(err))
    source = str(args.config) if args.config else "flags"
    if args.format == "json":
        sys.stdout.write(render_json(sections, geom, opts, source))
    else:
        sys.stdout.write(render_text(sections, geom, source))
    return 0


if __name__ == "__main__":
    sys.exit(main())
