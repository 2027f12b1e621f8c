"""kvlint-budget: KV-cache budget diagnostics from a model's cache geometry.

Answers, before a model runs, the numbers that decide whether it fits and how fast decode can be: KV bytes
per token and per sequence, how many sequences fit (contiguous vs paged), per-card bytes under tensor
parallelism, the decode-step latency floor, the arithmetic intensity of single-query attention, and what a
quantised KV cache buys end to end (Amdahl).

Every figure is exact integer/rational arithmetic and is reported with its formula in names and the same
formula in numbers (a Python expression using only + - * / ceil floor), so it can be reproduced by hand.
This module is the command line (flags, ``config.json``, errors); the formulas the runtime probe calls on
live shapes are in :mod:`kvlint.budget.formulas`, units and value parsing in :mod:`kvlint.budget.units`,
the report's sections in :mod:`kvlint.budget.report` and its text/JSON rendering in
:mod:`kvlint.budget.render`. None of them imports torch.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from fractions import Fraction
from pathlib import Path
from typing import Any

from kvlint.budget.formulas import DTYPE_BYTES, CacheGeometry
from kvlint.budget.render import render_json, render_text
from kvlint.budget.report import BudgetOptions, build_report
from kvlint.budget.units import (
    BudgetError,
    parse_bandwidth,
    parse_int_list,
    parse_lengths,
    parse_positive_int,
    parse_share,
    parse_size,
)

# -------------------------------------------------------------------- geometry: config.json and flags


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

