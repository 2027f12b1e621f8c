"""The reference agrees with the naive float64 model (tests/naive_attention.py) on randomised cases.

Each case builds canonical per-batch data, packs it into the operator's layout (padding with noise that
must be ignored), calls the reference with the operator's own argument spelling and compares with the
naive model: max |error| < 1e-5 on outputs and finite lse, and identical +inf positions of the lse.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass, field

import pytest
import torch
from kvlint.runtime_probe.reference import online_softmax
from kvlint.runtime_probe.reference import operators as reference

from kvlint.catalogue import operators
from tests.naive_attention import BIG, allowed_matrix, naive_attention, pack, pack_lse, paged_cache

TOLERANCE = 1e-5


@pytest.fixture(autouse=True)
def small_tiles(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tiny tiles, so that every case runs many query and key blocks: the online rescaling, the band's
    block skipping and paged gathers across block boundaries all take part. (The default tile sizes run
    in the caching and memory tests.)"""
    monkeypatch.setattr(online_softmax, "KEY_BLOCK", 5)
    monkeypatch.setattr(online_softmax, "TILE_ELEMENTS", 96)
OPS = {
    "v1": reference.fused_infer_attention_score,
    "v2": reference.fused_infer_attention_score_v2,
    "ifa": reference.incre_flash_attention,
    "pfa": reference.prompt_flash_attention,
}


@dataclass
class Case:
    """One call. Lengths are per batch; ``paged`` names a cache layout of ``naive_attention.paged_cache``."""

    layout: str = "BSH"
    heads: int = 4
    ratio: int = 1
    dim: int = 16
    value_dim: int = 16
    q_lens: list[int] = field(default_factory=lambda: [5, 3])
    kv_lens: list[int] = field(default_factory=lambda: [7, 9])
    q_pad: int = 0
    kv_pad: int = 0
    sparse_mode: int = 0
    pre: int = BIG
    nxt: int = BIG
    user_mask: bool = False
    pse: bool = False
    paged: str | None = None
    block_size: int = 16
    rope_dim: int = 0
    lse: bool = True
    sink: bool = False
    antiquant: str | None = None
    """None, "split" (v1 key/value_antiquant_*, v2 dequant_*) or "combined" (v1/IFA antiquant_*)."""
    per_token: bool = False
    """Antiquant mode 1: one scale and offset per (batch, KV position) instead of per channel."""
    prefix: int = 0
    """Length of a v1 shared prefix (0: none)."""
    prefix_used: int | None = None
    """``actual_shared_prefix_len`` (None: not passed, the whole prefix is used)."""
    op: str = "v1"
    seed: int = 0
    dtype: torch.dtype = torch.float32


def random_lengths(rng: random.Random, batch: int, low: int, high: int) -> list[int]:
    return [rng.randint(low, high) for _ in range(batch)]


def run(case: Case) -> tuple[float, float]:
    """Run the reference and the naive model on ``case``; return (max |d out|, max |d lse|)."""
    gen = torch.Generator().manual_seed(case.seed)
    kv_heads = case.heads // case.ratio
    inputs, _, outputs = case.layout.partition("_")
    outputs = outputs or inputs
    varlen = inputs in ("TND", "NTD")
    batch = len(case.q_lens)
    q_pad = max(case.q_lens) + case.q_pad
    kv_pad = max(case.kv_lens) + case.kv_pad

    def randn(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=gen).to(case.dtype)

    queries = [randn(case.heads, s, case.dim) for s in case.q_lens]
    keys = [randn(kv_heads, s, case.dim) for s in case.kv_lens]
    values = [randn(kv_heads, s, case.value_dim) for s in case.kv_lens]
    q_ropes = [randn(case.heads, s, case.rope_dim) for s in case.q_lens]
    k_ropes = [randn(kv_heads, s, case.rope_dim) for s in case.kv_lens]
    kw: dict[str, object] = {"num_heads": case.heads, "scale": 1 / math.sqrt(case.dim), "input_layout": case.layout}
    if case.ratio > 1:
        kw["num_key_value_heads"] = kv_heads
    naive_keys, naive_values = keys, values
    if case.antiquant:
        keys, values, naive_keys, naive_values = _int8_kv(case, keys, values, randn, kw, kv_pad)

    prefix_used = case.prefix if case.prefix_used is None else case.prefix_used
    if case.prefix:
        key_prefix, value_prefix = randn(kv_heads, case.prefix, case.dim), randn(kv_heads, case.prefix, case.value_dim)
        kw["key_shared_prefix"] = pack([key_prefix], inputs, case.prefix)
        kw["value_shared_prefix"] = pack([value_prefix], inputs, case.prefix)
        if case.prefix_used is not None:
            kw["actual_shared_prefix_len"] = [case.prefix_used]
        naive_keys = [torch.cat([key_prefix[:, :prefix_used], k], dim=1) for k in naive_keys]
        naive_values = [torch.cat([value_prefix[:, :prefix_used], v], dim=1) for v in naive_values]

    if varlen:
        kw["actual_seq_lengths"] = cumulative(case.q_lens)
    elif case.op != "ifa":
        kw["actual_seq_lengths"] = case.q_lens
    kw["query"] = pack(queries, inputs, q_pad)
    if case.rope_dim:
        kw["query_rope"] = pack(q_ropes, inputs, q_pad)
    if case.paged:
        table_width = math.ceil(kv_pad / case.block_size) + 1
        kw["key"], table = paged_cache(keys, case.block_size, case.paged, table_width, gen)
        kw["value"] = _same_table(values, case, table, kw["key"].shape[0])
        if case.rope_dim:
            kw["key_rope"] = _same_table(k_ropes, case, table, kw["key"].shape[0])
        kw.update(block_table=table, block_size=case.block_size, actual_seq_lengths_kv=case.kv_lens)
        kv_pad = table_width * case.block_size
    else:
        kw["key"], kw["value"] = pack(keys, inputs, kv_pad), pack(values, inputs, kv_pad)
        if case.rope_dim:
            kw["key_rope"] = pack(k_ropes, inputs, kv_pad)
        kw["actual_seq_lengths_kv"] = cumulative(case.kv_lens) if varlen else case.kv_lens

    user_mask = None
    if case.sparse_mode in (2, 3, 4):
        kw["atten_mask"] = torch.ones(2048, 2048, dtype=torch.bool).triu(1)
    elif case.user_mask:
        user_mask = torch.rand(batch, q_pad, prefix_used + kv_pad, generator=gen) < 0.3
        kw["atten_mask"] = user_mask.unsqueeze(1).to(torch.int8)
    pse = randn(batch, case.heads, q_pad, prefix_used + kv_pad) if case.pse else None
    if pse is not None:
        kw["pse_shift"] = pse
    kw.update(sparse_mode=case.sparse_mode, pre_tokens=case.pre, next_tokens=case.nxt, softmax_lse_flag=case.lse)
    sink = randn(case.heads) if case.sink else None
    if sink is not None:
        kw["learnable_sink"] = sink

    spans = [(s1, prefix_used + s2) for s1, s2 in zip(case.q_lens, case.kv_lens)]
    decode_rules = not varlen and q_pad == 1 and case.rope_dim == 0 and case.op in ("v1", "v2")
    allowed = [_allowed(case, s1, s2, None if user_mask is None else user_mask[b, :s1, :s2], decode_rules)
               for b, (s1, s2) in enumerate(spans)]  # fmt: skip
    if case.rope_dim:  # MLA: the scores see concat(nope, rope)
        queries = [torch.cat([q, r], -1) for q, r in zip(queries, q_ropes)]
        naive_keys = [torch.cat([k.double(), r.double()], -1) for k, r in zip(naive_keys, k_ropes)]
    want_out, want_lse = naive_attention(
        queries, naive_keys, naive_values, kw["scale"], allowed, sink,
        None if pse is None else [pse[b, :, :s1, :s2] for b, (s1, s2) in enumerate(spans)],
    )  # fmt: skip
    got_out, got_lse = _call(case, kw)
    return _errors(case, got_out, got_lse, pack(want_out, outputs, q_pad, fill="zeros"),
                   pack_lse(want_lse, varlen, q_pad))  # fmt: skip


def _int8_kv(
    case: Case, keys: list[torch.Tensor], values: list[torch.Tensor], randn: Callable[..., torch.Tensor], kw: dict,
    kv_pad: int,
) -> tuple[list[torch.Tensor], ...]:
    """Quantise K/V to int8 with a scale and offset per channel (N*D) or, with ``per_token``, per (batch,
    position) of the padded KV; the naive model gets (x + offset) * scale."""
    kv_heads = case.heads // case.ratio
    keys = [(k * 40).round().clamp(-128, 127).to(torch.int8) for k in keys]
    values = [(v * 40).round().clamp(-128, 127).to(torch.int8) for v in values]
    batch = len(keys)
    shapes = [(batch, kv_pad)] * 2 if case.per_token else [(kv_heads * case.dim,), (kv_heads * case.value_dim,)]
    scale_k, scale_v = (randn(*shape).abs() / 40 + 0.01 for shape in shapes)
    off_k, off_v = (randn(*shape).round() for shape in shapes)

    def dequantised(xs: list[torch.Tensor], offset: torch.Tensor, scale: torch.Tensor) -> list[torch.Tensor]:
        if case.per_token:
            return [(x.double() + offset[b, : x.shape[1]].double().view(1, -1, 1))
                    * scale[b, : x.shape[1]].double().view(1, -1, 1) for b, x in enumerate(xs)]  # fmt: skip
        return [(x.double() + offset.double().view(kv_heads, 1, -1)) * scale.double().view(kv_heads, 1, -1) for x in xs]

    mode = int(case.per_token)
    if case.antiquant == "split":
        kw.update(key_antiquant_scale=scale_k, key_antiquant_offset=off_k, key_antiquant_mode=mode,
                  value_antiquant_scale=scale_v, value_antiquant_offset=off_v, value_antiquant_mode=mode)  # fmt: skip
    else:
        assert case.dim == case.value_dim
        stacked = (2, batch, kv_pad) if case.per_token else (2, kv_heads, 1, case.dim)
        kw.update(antiquant_scale=torch.stack([scale_k, scale_v]).view(stacked),
                  antiquant_offset=torch.stack([off_k, off_v]).view(stacked))  # fmt: skip
        if case.per_token:
            kw["antiquant_mode"] = 1
    return keys, values, dequantised(keys, off_k, scale_k), dequantised(values, off_v, scale_v)


def _allowed(case: Case, s1: int, s2: int, user_mask: torch.Tensor | None, decode_rules: bool) -> torch.Tensor:
    """The naive allowed matrix; FIA with one query token ignores sparse_mode 2-4 and pre/next."""
    if not decode_rules:
        return allowed_matrix(case.sparse_mode, case.pre, case.nxt, s1, s2, user_mask)
    if case.sparse_mode in (0, 1):
        return allowed_matrix(case.sparse_mode, BIG, BIG, s1, s2, user_mask)
    return torch.ones(s1, s2, dtype=torch.bool)


def _errors(
    case: Case, got_out: torch.Tensor, got_lse: torch.Tensor | None, want_out: torch.Tensor, want_lse: torch.Tensor
) -> tuple[float, float]:
    assert got_out.shape == want_out.shape, (got_out.shape, want_out.shape)
    out_err = (got_out.double() - want_out).abs().max().item() if want_out.numel() else 0.0
    if got_lse is None:
        return out_err, 0.0
    if not case.lse:
        assert got_lse.shape == (0,)
        return out_err, 0.0
    assert got_lse.shape == want_lse.shape, (got_lse.shape, want_lse.shape)
    assert torch.equal(torch.isinf(got_lse), torch.isinf(want_lse)), "empty rows must have lse +inf"
    finite = torch.isfinite(want_lse)
    return out_err, (got_lse.double()[finite] - want_lse[finite]).abs().max().item() if finite.any() else 0.0


def cumulative(lengths: list[int]) -> list[int]:
    """Cumulative sums, as TND layouts take them."""
    total, out = 0, []
    for n in lengths:
        total += n
        out.append(total)
    return out


def _same_table(batches: list[torch.Tensor], case: Case, table: torch.Tensor, blocks: int) -> torch.Tensor:
    """A second cache (value or key_rope) addressed through the same block table as the key cache."""
    n, d = batches[0].shape[0], batches[0].shape[-1]
    tokens = torch.randn(blocks, case.block_size, n, d).to(batches[0].dtype)
    for b, x in enumerate(batches):
        for pos in range(x.shape[1]):
            tokens[int(table[b, pos // case.block_size]), pos % case.block_size] = x[:, pos]
    if case.paged == "BnBsH":
        return tokens.reshape(blocks, case.block_size, n * d)
    if case.paged == "BnBsND":
        return tokens
    return tokens.permute(0, 2, 1, 3).contiguous()


def _call(case: Case, kw: dict[str, object]) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Call the operator of ``case`` with its own spelling of the arguments."""
    q, k, v = kw.pop("query"), kw.pop("key"), kw.pop("value")
    if case.op == "v1":
        return OPS["v1"](q, k, v, **kw)
    if case.op == "v2":
        renamed = {operators.V1_TO_V2.get(name, name): value for name, value in kw.items()}
        return OPS["v2"](q, k, v, **renamed)
    if case.op == "ifa":
        ifa_names = {"scale": "scale_value", "actual_seq_lengths_kv": "actual_seq_lengths"}
        dropped = ("sparse_mode", "pre_tokens", "next_tokens", "softmax_lse_flag")
        kw = {ifa_names.get(n, n): x for n, x in kw.items() if n not in dropped}
        return OPS["ifa"](q, k, v, **kw), None
    kw = {("scale_value" if n == "scale" else n): x for n, x in kw.items() if n != "softmax_lse_flag"}
    return OPS["pfa"](q, k, v, **kw), None


def assert_agrees(case: Case) -> None:
    out_err, lse_err = run(case)
    tolerance = 1e-12 if case.dtype == torch.float64 else TOLERANCE
    assert out_err < tolerance and lse_err < tolerance, (case, out_err, lse_err)


@pytest.mark.parametrize("ratio", [1, 2, 4, 8])
@pytest.mark.parametrize("layout", sorted(operators.FIA_LAYOUTS))
def test_every_layout_and_gqa_ratio(layout: str, ratio: int) -> None:
    rng = random.Random(f"{layout}/{ratio}")
    batch = 1 if layout.startswith("NSD") else 3
    for sparse_mode in (0, 3):
        assert_agrees(
            Case(
                layout=layout, heads=8, ratio=ratio, value_dim=rng.choice([8, 16, 24]),
                q_lens=random_lengths(rng, batch, 2, 9), kv_lens=random_lengths(rng, batch, 0, 14),
                q_pad=rng.randint(0, 3), kv_pad=rng.randint(0, 3), sparse_mode=sparse_mode, seed=rng.randint(0, 10**6),
            )
        )  # fmt: skip


@pytest.mark.parametrize("sparse_mode", [0, 1, 2, 3, 4])
def test_every_sparse_mode_with_random_lengths_and_band(sparse_mode: int) -> None:
    rng = random.Random(sparse_mode)
    for _ in range(16):
        batch = rng.randint(1, 3)
        band_value = lambda: rng.choice([BIG, rng.randint(-3, 16)])  # noqa: E731
        assert_agrees(
            Case(
                layout=rng.choice(["BSH", "BNSD", "BSND_NBSD", "TND", "NTD_TND"]), heads=4, ratio=rng.choice([1, 2, 4]),
                q_lens=random_lengths(rng, batch, 1, 14), kv_lens=random_lengths(rng, batch, 0, 20),
                q_pad=rng.randint(0, 2), kv_pad=rng.randint(0, 2), sparse_mode=sparse_mode,
                pre=band_value(), nxt=band_value(), user_mask=sparse_mode == 1 or rng.random() < 0.7,
                seed=rng.randint(0, 10**6),
            )
        )  # fmt: skip


@pytest.mark.parametrize("cache_layout", ["BnBsH", "BnBsND", "BnNBsD"])
@pytest.mark.parametrize("layout", ["BSH", "BSND", "BNSD", "TND"])
def test_paged_caches_with_shuffled_block_tables(layout: str, cache_layout: str) -> None:
    rng = random.Random(f"{layout}/{cache_layout}")
    for decode in (True, False):
        batch = rng.randint(1, 3)
        q_lens = [1] * batch if decode else random_lengths(rng, batch, 1, 9)
        assert_agrees(
            Case(
                layout=layout, heads=8, ratio=rng.choice([1, 2, 8]), q_lens=q_lens,
                kv_lens=[rng.randint(max(q, 1), 70) for q in q_lens], paged=cache_layout, block_size=16,
                sparse_mode=0 if decode else 3, user_mask=decode and rng.random() < 0.5, seed=rng.randint(0, 10**6),
            )
        )  # fmt: skip


@pytest.mark.parametrize("paged", [None, "BnBsH", "BnNBsD"])
def test_mla_rope_is_concatenated_for_scores_only(paged: str | None) -> None:
    rng = random.Random(str(paged))
    for q_lens, sparse_mode in (([1, 1], 0), ([4, 2], 3), ([3, 5], 4)):
        assert_agrees(
            Case(
                layout=rng.choice(["BSH", "BNSD"]) if paged != "BnNBsD" else "BNSD", heads=8, ratio=8, dim=32,
                value_dim=rng.choice([32, 16]), rope_dim=8, q_lens=q_lens, kv_lens=[rng.randint(5, 40) for _ in q_lens],
                paged=paged, sparse_mode=sparse_mode, pre=3, nxt=0, seed=rng.randint(0, 10**6),
            )
        )  # fmt: skip


@pytest.mark.parametrize("lse", [True, False])
def test_softmax_lse_requested_or_empty(lse: bool) -> None:
    for op in ("v1", "v2"):
        assert_agrees(Case(op=op, lse=lse, q_lens=[4, 0, 6], kv_lens=[0, 3, 8], sparse_mode=3))


def test_learnable_sink_joins_the_denominator() -> None:
    rng = random.Random(5)
    for layout in ("BSH", "TND", "BNSD"):
        assert_agrees(
            Case(op="v2", layout=layout, sink=True, heads=4, ratio=2, q_lens=random_lengths(rng, 2, 1, 8),
                 kv_lens=random_lengths(rng, 2, 0, 12), sparse_mode=rng.choice([0, 3, 4]), pre=4, nxt=0,
                 seed=rng.randint(0, 10**6))
        )  # fmt: skip


@pytest.mark.parametrize(
    ("op", "antiquant"), [("v1", "split"), ("v1", "combined"), ("v2", "split"), ("ifa", "combined")]
)
def test_int8_antiquant_per_channel(op: str, antiquant: str) -> None:
    for paged in (None, "BnBsH"):
        q_lens = [1, 1] if op == "ifa" else [3, 2]
        assert_agrees(Case(op=op, antiquant=antiquant, heads=4, ratio=2, q_lens=q_lens, kv_lens=[9, 20], paged=paged))


@pytest.mark.parametrize(("op", "antiquant"), [("v1", "split"), ("v1", "combined"), ("v2", "split")])
def test_int8_antiquant_per_token(op: str, antiquant: str) -> None:
    shapes = (("BSH", [1, 1]), ("BNSD", [3, 2]), ("BSND", [4, 1]))
    for layout, q_lens in shapes[:1] if antiquant == "combined" else shapes:  # combined per token: decode only
        assert_agrees(Case(op=op, layout=layout, antiquant=antiquant, per_token=True, heads=4, ratio=2,
                           q_lens=q_lens, kv_lens=[9, 20], kv_pad=3, sparse_mode=3))  # fmt: skip


@pytest.mark.parametrize("layout", ["BSH", "BSND", "BNSD"])
def test_incre_flash_attention_reads_kv_lengths(layout: str) -> None:
    for paged, mask in ((None, True), ("BnBsH", False)):
        assert_agrees(Case(op="ifa", layout=layout, heads=8, ratio=4, q_lens=[1, 1, 1], kv_lens=[3, 17, 30],
                           kv_pad=2, paged=paged, user_mask=mask, lse=False))  # fmt: skip


@pytest.mark.parametrize("sparse_mode", [0, 1, 2, 3, 4])
def test_prompt_flash_attention(sparse_mode: int) -> None:
    for layout in ("BSH", "BNSD_BSND", "TND"):
        assert_agrees(Case(op="pfa", layout=layout, sparse_mode=sparse_mode, user_mask=sparse_mode < 2,
                           q_lens=[6, 9], kv_lens=[11, 9], pre=5, nxt=1, lse=False))  # fmt: skip


def test_float64_inputs_compute_in_float64() -> None:
    assert_agrees(Case(dtype=torch.float64, layout="BNSD", heads=4, ratio=2, sparse_mode=4, pre=2, nxt=1))


def test_pse_shift_is_added_to_the_scaled_scores() -> None:
    rng = random.Random(11)
    for layout, sparse_mode in (("BSH", 0), ("BNSD", 3), ("BSND", 4)):
        assert_agrees(Case(layout=layout, pse=True, heads=4, ratio=2, q_lens=random_lengths(rng, 2, 1, 7),
                           kv_lens=random_lengths(rng, 2, 1, 12), kv_pad=2, sparse_mode=sparse_mode, pre=3, nxt=1,
                           user_mask=sparse_mode == 0))  # fmt: skip


def test_shared_prefix_is_prepended_to_every_batch() -> None:
    rng = random.Random(13)
    for layout, prefix_used, sparse_mode in (("BSH", None, 3), ("BNSD", 5, 0), ("BSND", 0, 4), ("BSH", 7, 1)):
        assert_agrees(
            Case(layout=layout, heads=4, ratio=2, prefix=7, prefix_used=prefix_used, sparse_mode=sparse_mode,
                 user_mask=sparse_mode < 2, pre=4, nxt=2, q_lens=random_lengths(rng, 2, 1, 6),
                 kv_lens=random_lengths(rng, 2, 0, 9), kv_pad=1, seed=rng.randint(0, 10**6))
        )  # fmt: skip


def random_case(rng: random.Random) -> Case:
    """A random FIA v1/v2 call mixing every feature that the operators allow together. The block size never
    equals the KV head count, where a 4-D cache's layout would be ambiguous."""
    op = rng.choice(["v1", "v2"])
    layout = rng.choice(sorted(operators.FIA_LAYOUTS - {"NSD"}))
    varlen = layout.partition("_")[0] in ("TND", "NTD")
    batch = rng.randint(1, 3)
    decode = not varlen and rng.random() < 0.3
    q_lens = [1] * batch if decode else random_lengths(rng, batch, 1, 10)
    paged = rng.choice([None, "BnBsH", "BnBsND", "BnNBsD"])
    ratio = rng.choice([1, 2, 4, 8])
    rope = rng.random() < 0.25
    mode = rng.choice([0, 1, 2, 3, 4])
    antiquant = not rope and rng.random() < 0.2
    prefix = op == "v1" and not (varlen or paged or rope or antiquant) and rng.random() < 0.3
    return Case(
        op=op, layout=layout, heads=8, ratio=ratio, dim=16, value_dim=rng.choice([8, 16]), q_lens=q_lens,
        kv_lens=random_lengths(rng, batch, 0, 40), q_pad=0 if decode else rng.randint(0, 2), kv_pad=rng.randint(0, 3),
        sparse_mode=mode, pre=rng.choice([BIG, rng.randint(-2, 12)]), nxt=rng.choice([BIG, rng.randint(-2, 12)]),
        user_mask=mode == 1 or (mode == 0 and rng.random() < 0.6), pse=not varlen and not rope and rng.random() < 0.3,
        paged=paged, block_size=rng.choice([b for b in (8, 16) if b != 8 // ratio]), rope_dim=8 if rope else 0,
        lse=rng.random() < 0.7, sink=op == "v2" and rng.random() < 0.5,
        antiquant="split" if antiquant else None, per_token=antiquant and not (paged or varlen) and rng.random() < 0.5,
        prefix=7 if prefix else 0,
        seed=rng.randint(0, 10**6),
    )  # fmt: skip


@pytest.mark.parametrize("seed", range(4))
def test_random_feature_combinations(seed: int) -> None:
    rng = random.Random(f"combinations/{seed}")
    for _ in range(12):
        assert_agrees(random_case(rng))
