"""kvlint.budget formulas, each checked against a case computed by hand (the arithmetic is in the comments)."""

from __future__ import annotations

import json
from dataclasses import replace
from fractions import Fraction
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kvlint.budget.cli import geometry_fields_from_config
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
)
from kvlint.budget.report import BudgetOptions, build_report
from kvlint.budget.units import BudgetError, parse_bandwidth, parse_lengths, parse_size

DATA = Path(__file__).parent / "data" / "budget"
GIB = 2**30

#: The KV-cache literature's worked example (Llama-3-8B-like): 32 layers, 8 KV heads, D = 128, bf16.
LLAMA = CacheGeometry(layers=32, kv_heads=8, head_dim=128, q_heads=32, dtype="bf16")
#: DeepSeek-V3 MLA: 61 layers, latent 512, rope 64, 128 query heads.
DEEPSEEK = CacheGeometry(layers=61, kv_lora_rank=512, rope_dim=64, q_heads=128, dtype="bf16")


def figures(geom: CacheGeometry, opts: BudgetOptions) -> dict[str, Fraction]:
    """``section.figure -> value`` of a report."""
    return {f"{s.key}.{f.key}": f.value for s in build_report(geom, opts) for f in s.figures}


# ----------------------------------------------------------------------------- bytes per token / sequence


def test_gqa_bytes_per_token_is_128_kib() -> None:
    # 32 layers * 2 (K, V) * 8 heads * 128 * 2 B = 131072 B = 128 KiB
    assert kv_bytes_per_token(LLAMA) == 131072 == 128 * 1024


def test_8192_tokens_of_gqa_cache_is_exactly_one_gib() -> None:
    assert sequence_bytes(kv_bytes_per_token(LLAMA), 8192) == GIB


def test_mla_bytes_per_token_is_latent_plus_rope_without_v() -> None:
    # 61 layers * (512 + 64) * 2 B = 61 * 1152 = 70272 B; a K+V cache of 128 heads would be far larger
    assert kv_bytes_per_token(DEEPSEEK) == 70272


@pytest.mark.parametrize(("dtype", "expected"), [("bf16", 131072), ("fp16", 131072), ("int8", 65536),
                                                 ("fp8", 65536)])
def test_dtype_sets_bytes_per_element(dtype: str, expected: int) -> None:
    assert kv_bytes_per_token(replace(LLAMA, dtype=dtype)) == expected


# ----------------------------------------------------------------------------------------- config.json


def test_config_derives_head_dim_from_hidden_size() -> None:
    # llama3_8b_config.json has no head_dim: 4096 / 32 = 128
    assert geometry_fields_from_config(DATA / "llama3_8b_config.json") == {
        "layers": 32, "q_heads": 32, "kv_heads": 8, "head_dim": 128}


def test_config_with_kv_lora_rank_is_mla_and_ignores_kv_heads() -> None:
    fields = geometry_fields_from_config(DATA / "deepseek_v3_config.json")
    assert fields == {"layers": 61, "q_heads": 128, "kv_lora_rank": 512, "rope_dim": 64}
    assert kv_bytes_per_token(CacheGeometry(dtype="bf16", **fields)) == 70272


def test_config_without_num_key_value_heads_is_mha(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"num_hidden_layers": 2, "num_attention_heads": 4, "head_dim": 64}))
    assert geometry_fields_from_config(path)["kv_heads"] == 4


@pytest.mark.parametrize(("config", "message"), [
    ({"num_attention_heads": 32}, "no num_hidden_layers"),
    ({"num_hidden_layers": "32"}, "num_hidden_layers must be a positive integer"),
    ({"num_hidden_layers": 61, "kv_lora_rank": 512}, "qk_rope_head_dim is missing"),
    ({"num_hidden_layers": 2, "num_attention_heads": 3, "hidden_size": 100}, "not divisible"),
    ([1, 2], "expected a JSON object"),
])
def test_bad_config_is_a_budget_error_naming_the_file(tmp_path: Path, config: object, message: str) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    with pytest.raises(BudgetError, match=message) as info:
        geometry_fields_from_config(path)
    assert str(path) in str(info.value)


# ---------------------------------------------------------------------------------- tensor parallelism


@pytest.mark.parametrize(("kv_heads", "tp", "replication", "expected"), [
    (8, 1, None, (8, 1)),
    (8, 4, None, (2, 1)),    # split: 8 / 4
    (8, 16, None, (1, 2)),   # tp > heads: one head per card, each head on 16 / 8 = 2 cards
    (1, 8, None, (1, 8)),    # MQA: the one head on every card
    (8, 8, 2, (2, 2)),       # explicit R = 2: 8 * 2 / 8 = 2 heads per card
])
def test_kv_heads_per_card_follows_the_vllm_rule(kv_heads: int, tp: int, replication: int | None,
                                                 expected: tuple[int, int]) -> None:
    assert kv_heads_per_card(kv_heads, tp, replication) == expected


@pytest.mark.parametrize(("kv_heads", "tp", "replication"), [
    (8, 3, None),    # neither divides the other
    (8, 12, None),
    (8, 16, 1),      # R = 1 would leave half a head per card
    (8, 4, 3),       # 4 cards cannot form groups of 3
])
def test_uneven_head_splits_are_rejected(kv_heads: int, tp: int, replication: int | None) -> None:
    with pytest.raises(BudgetError, match="--tp|--kv-replication"):
        kv_heads_per_card(kv_heads, tp, replication)


def test_card_bytes_with_replicated_heads() -> None:
    # tp 16 over 8 heads: 1 head per card -> 32 * 2 * 1 * 128 * 2 = 16384 B; 16 cards hold 2 copies
    card = card_geometry(LLAMA, tp=16)
    assert kv_bytes_per_token(card) == 16384
    assert 16 * kv_bytes_per_token(card) == 2 * kv_bytes_per_token(LLAMA)
    assert card.q_heads == 2


def test_mla_latent_is_whole_on_every_card() -> None:
    assert kv_bytes_per_token(card_geometry(DEEPSEEK, tp=8)) == 70272
    with pytest.raises(BudgetError, match="--kv-replication"):
        card_geometry(DEEPSEEK, tp=8, replication=2)


# ----------------------------------------------------------------------------------- paging / capacity


def test_tail_block_is_rounded_up() -> None:
    assert [paged_blocks(n, 128) for n in (1, 128, 129, 8192, 8193)] == [1, 1, 2, 64, 65]


def test_block_costs_its_tokens_plus_an_int32_table_entry() -> None:
    assert BLOCK_TABLE_ENTRY_BYTES == 4
    assert paged_block_bytes(131072, 128) == 128 * 131072 + 4 == 16777220


def test_capacity_uniform_8192_tokens_in_48_gib_minus_16_gib() -> None:
    got = figures(LLAMA, BudgetOptions(lengths=((8192, Fraction(1)),), memory=48 * GIB, reserve=16 * GIB))
    assert got["capacity.available"] == 32 * GIB
    assert got["capacity.contiguous_sequences"] == 32          # 32 GiB / 1 GiB
    # 2048 blocks would need 2048 * (2**24 + 4) = 2**35 + 8192 B > 32 GiB, so the pool has 2047
    assert got["capacity.pool_blocks"] == 2047
    assert got["capacity.paged_sequences"] == 31                # floor(2047 / 64)
    assert got["capacity.exact_sequences"] == 32


def test_capacity_of_a_length_mix_with_tail_waste() -> None:
    # block 96: 512 -> 6 blocks, 2048 -> 22, 8192 -> 86 (each wastes 64 slots); mean (6 + 22 + 86) / 3 = 38
    # pool floor(2**35 / (96 * 131072 + 4)) = 2730; paged floor(2730 / 38) = 71
    # contiguous slots are sized for 8192 tokens: 32; exact: floor(2**35 / (3584 * 131072)) = 73
    opts = BudgetOptions(lengths=parse_lengths("512,2048,8192"), memory=48 * GIB, reserve=16 * GIB,
                         block_size=96)
    got = figures(LLAMA, opts)
    assert got["capacity.blocks_per_sequence_512"] == 6
    assert got["capacity.mean_blocks_per_sequence"] == 38
    assert got["capacity.pool_blocks"] == 2730
    assert (got["capacity.contiguous_sequences"], got["capacity.paged_sequences"],
            got["capacity.exact_sequences"]) == (32, 71, 73)


def test_weighted_length_mix() -> None:
    # 3 short (512 -> 4 blocks) per long (8192 -> 64 blocks): mean blocks (3 * 4 + 1 * 64) / 4 = 19
    opts = BudgetOptions(lengths=parse_lengths("512:3,8192:1"), memory=48 * GIB, reserve=16 * GIB)
    assert figures(LLAMA, opts)["capacity.mean_blocks_per_sequence"] == 19
    assert figures(LLAMA, opts)["capacity.paged_sequences"] == 107      # floor(2047 / 19)


def test_reserve_larger_than_memory_is_an_error() -> None:
    with pytest.raises(BudgetError, match="--reserve"):
        build_report(LLAMA, BudgetOptions(lengths=((1, Fraction(1)),), memory=GIB, reserve=2 * GIB))


@given(tokens=st.integers(1, 10**6), block=st.integers(1, 1024), bpt=st.integers(1, 10**6))
def test_paged_sequence_never_smaller_than_exact_and_within_one_block(tokens: int, block: int,
                                                                      bpt: int) -> None:
    paged = paged_blocks(tokens, block) * paged_block_bytes(bpt, block)
    exact = sequence_bytes(bpt, tokens)
    assert exact < paged <= exact + block * bpt + paged_blocks(tokens, block) * BLOCK_TABLE_ENTRY_BYTES


# --------------------------------------------------------------------------------- decode latency floor


def test_floor_reading_one_gib_at_1_6_tb_per_s() -> None:
    # 2**30 B / 1.6e12 B/s = 671.08864 us, exactly
    assert decode_latency_floor(GIB, parse_bandwidth("1.6TB/s")) == Fraction(67108864, 10**11)


def test_floor_adds_the_weights() -> None:
    # (16e9 + 2**30) / 1.6e12 = 10.67108864 ms
    assert decode_latency_floor(GIB, Fraction(16 * 10**11), 16 * 10**9) == Fraction(1067108864, 10**11)


def test_floor_per_batch_size_in_the_report() -> None:
    opts = BudgetOptions(lengths=((8192, Fraction(1)),), bandwidth=Fraction(16 * 10**11), batch_sizes=(1, 8))
    got = figures(LLAMA, opts)
    assert got["decode_floor.kv_read_batch_8"] == 8 * GIB
    assert got["decode_floor.floor_batch_8"] == Fraction(8 * 67108864, 10**11)
    assert got["decode_floor.tokens_per_s_batch_1"] == Fraction(10**11, 67108864)


# --------------------------------------------------------------------------------- arithmetic intensity


def test_gqa_sharing_multiplies_intensity_by_the_group_size() -> None:
    # per query head 4 * 128 FLOP; K+V row 2 * 128 * 2 B. Shared by 4 heads: 32*512 / (8*512) = 4
    assert attention_intensity(LLAMA, shared=True) == 4
    assert attention_intensity(LLAMA, shared=False) == 1
    assert attention_intensity(replace(LLAMA, dtype="int8"), shared=True) == 8


def test_mla_intensity_with_all_heads_sharing_the_latent() -> None:
    # 128 heads * 2 * (2 * 512 + 64) = 278528 FLOP over (512 + 64) * 2 = 1152 B -> 2176 / 9 ~ 241.8
    assert attention_intensity(DEEPSEEK, shared=True) == Fraction(2176, 9)
    assert attention_intensity(DEEPSEEK, shared=False) == Fraction(17, 9)


def test_intensity_per_card_drops_when_kv_heads_are_replicated() -> None:
    # tp 16: 2 query heads and 1 KV head per card -> group 2 -> 2 FLOP/B in bf16
    assert attention_intensity(card_geometry(LLAMA, tp=16), shared=True) == 2


# ---------------------------------------------------------------------------------------- KV quant / Amdahl


def test_amdahl_bound_hand_case() -> None:
    # p = 0.4, s = 2: 1 / (0.6 + 0.2) = 1.25
    assert amdahl_speedup(Fraction(2, 5), Fraction(2)) == Fraction(5, 4)


def test_amdahl_reaches_s_only_when_attention_is_everything() -> None:
    assert amdahl_speedup(Fraction(1), Fraction(2)) == 2


def test_modeled_bound_equals_the_ratio_of_the_step_floors() -> None:
    opts = BudgetOptions(lengths=((8192, Fraction(1)),), bandwidth=Fraction(16 * 10**11),
                         weights_bytes=16 * 10**9, batch_sizes=(32,), kv_quant="int8")
    got = figures(LLAMA, opts)
    ratio = got["decode_floor.floor_batch_32"] / got["kv_quant_decode_floor.floor_batch_32"]
    assert got["kv_quant_speedup.attention_speedup"] == 2
    assert got["kv_quant_speedup.end_to_end_batch_32"] == ratio
    assert 1 < ratio < 2


def test_given_attention_share_gives_one_bound() -> None:
    opts = BudgetOptions(kv_quant="int8", attention_share=Fraction(2, 5))
    assert figures(LLAMA, opts)["kv_quant_speedup.end_to_end"] == Fraction(5, 4)


@given(p=st.fractions(Fraction(1, 1000), 1), s=st.fractions(1, 16))
def test_amdahl_bound_lies_between_one_and_s(p: Fraction, s: Fraction) -> None:
    assert 1 <= amdahl_speedup(p, s) <= s


# ------------------------------------------------------------------------------------------------ units


@pytest.mark.parametrize(("text", "expected"), [
    ("48GiB", 48 * 2**30), ("64GB", 64 * 10**9), ("1.5KiB", 1536), ("512 MiB", 512 * 2**20),
    ("1TiB", 2**40), ("1TB", 10**12), ("4096", 4096), ("10B", 10),
])
def test_sizes_binary_and_decimal(text: str, expected: int) -> None:
    assert parse_size(text) == expected


@pytest.mark.parametrize("text", ["48XB", "48gib", "GiB", "-1GiB", "0.5B", "1e9", ""])
def test_bad_sizes(text: str) -> None:
    with pytest.raises(BudgetError, match="invalid size"):
        parse_size(text)


def test_bandwidth_is_decimal_unless_binary_unit() -> None:
    assert parse_bandwidth("1.6TB/s") == 1_600_000_000_000
    assert parse_bandwidth("800GiB/s") == 800 * 2**30
    with pytest.raises(BudgetError, match="per second"):
        parse_bandwidth("1.6TB")


def test_lengths_with_and_without_weights() -> None:
    assert parse_lengths("512,2048") == ((512, 1), (2048, 1))
    assert parse_lengths("512:0.7,8192:0.3") == ((512, Fraction(7, 10)), (8192, Fraction(3, 10)))
    with pytest.raises(BudgetError):
        parse_lengths("512:0")
