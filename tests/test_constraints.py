"""The documented operator constraints (``kvlint.runtime_probe.reference.constraints``), one case each: the
emulator refuses a call that breaks it with the device's exception type and a message naming the argument, the
rule and its page (or, where the device computes something undocumented, computes it), the probe reports it
under its code, and a valid neighbouring call passes both."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from kvlint.runtime_probe.checks import SIGNATURE_CHECKS, VALUE_CHECKS
from kvlint.runtime_probe.live_call import LiveCall, bind, is_concrete
from kvlint.runtime_probe.reference import constraints
from kvlint.runtime_probe.reference.call_facts import Facts
from kvlint.runtime_probe.reference.constraints import CONSTRAINTS, Constraint

from kvlint.catalogue.operators import FA, FIA_V1, FIA_V2, IFA, OPERATORS, PFA
from kvlint.catalogue.rule_pages import CONSTRAINT_DOCS
from kvlint.catalogue.rules import ERROR, RULES, WARNING
from tests.probe_fixtures.harness import probe  # noqa: F401

ROOT = Path(__file__).resolve().parent.parent
HALF, BF16 = torch.float16, torch.bfloat16
TEMPLATE = torch.ones(2048, 2048, dtype=torch.bool).triu(1)
Args = tuple[tuple[torch.Tensor, ...], dict[str, object]]


def t(*shape: int, dtype: torch.dtype = HALF, seed: int = 0) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).to(dtype)


def int8(*shape: int) -> torch.Tensor:
    return torch.randint(-8, 8, shape, dtype=torch.int8, generator=torch.Generator().manual_seed(3))


def table(rows: int, blocks: int) -> torch.Tensor:
    return torch.arange(rows * blocks, dtype=torch.int32).view(rows, blocks)


@dataclass(frozen=True)
class Case:
    op: str
    check: Callable[[Facts], str | None]
    bad: Callable[[], Args]
    good: Callable[[], Args]
    note: str = ""
    computed: bool = True
    """False: the neighbour is too large to compute here (4096 batches); the table and the probe judge it."""

    @property
    def row(self) -> Constraint:
        return next(c for c in CONSTRAINTS if c.check is self.check and self.op in c.operators)

    @property
    def name(self) -> str:
        return f"{self.row.id}-{self.check.__name__}-{self.op.removeprefix('npu_')}{self.note}"


# Calls ------------------------------------------------------------------------------------------------


def bnsd(q_seq: int, layout: str = "BNSD", heads: int = 2) -> Args:
    return (t(1, heads, q_seq, 16), t(1, heads, 8, 16), t(1, heads, 8, 16)), {
        "num_heads": heads, "scale": 0.25, "input_layout": layout}  # fmt: skip


def sink_call(dims: tuple[int, int, int] = (64, 64, 64), sink: torch.Tensor | None = None, heads_kv: int = 4,
              **extra: object) -> Args:
    q_dim, k_dim, v_dim = dims
    return (t(7, 4, q_dim), t(12, heads_kv, k_dim), t(12, heads_kv, v_dim)), {
        "num_query_heads": 4, "num_key_value_heads": heads_kv, "softmax_scale": 0.1, "input_layout": "TND",
        "actual_seq_qlen": [3, 7],
        "actual_seq_kvlen": [5, 12], "learnable_sink": t(4, dtype=BF16) if sink is None else sink, **extra}  # fmt: skip


def mla(dim: int, lse: bool = False, **extra: object) -> Args:
    return (t(1, 1, 2, dim), t(1, 4, 1, dim), t(1, 4, 1, dim)), {
        "query_rope": t(1, 1, 2, 64), "key_rope": t(1, 4, 1, 64), "num_heads": 2, "num_key_value_heads": 1,
        "scale": 0.05, "input_layout": "BSND", "softmax_lse_flag": lse, **extra}  # fmt: skip


def separated(q_seq: int, key_mode: int, value_mode: int) -> Args:
    def scale(mode: int) -> torch.Tensor:
        return torch.rand(1, 8) + 0.5 if mode == 1 else torch.rand(32) + 0.5

    return (t(1, q_seq, 32), int8(1, 8, 32), int8(1, 8, 32)), {
        "num_heads": 2, "scale": 0.25, "key_antiquant_scale": scale(key_mode), "key_antiquant_mode": key_mode,
        "value_antiquant_scale": scale(value_mode), "value_antiquant_mode": value_mode}  # fmt: skip


def combined(q_seq: int, mode: int, scale_dtype: torch.dtype = HALF) -> Args:
    return (t(1, q_seq, 32), int8(1, 8, 32), int8(1, 8, 32)), {
        "num_heads": 2, "scale": 0.25, "antiquant_scale": (torch.rand(2, 32) + 0.5).to(scale_dtype),
        "antiquant_mode": mode}  # fmt: skip


def bsh(q_seq: int = 1, heads: int = 2, dim: int = 16, batch: int = 1, **extra: object) -> Args:
    return (t(batch, q_seq, heads * dim), t(batch, 8, heads * dim), t(batch, 8, heads * dim)), {
        "num_heads": heads, "scale": 0.25, **extra}  # fmt: skip


def paged(layout: str, cache: tuple[int, ...], block_size: int, q_seq: int = 1, kv: torch.dtype = HALF,
          **extra: object) -> Args:
    query = t(1, q_seq, 32) if layout == "BSH" else t(1, 2, q_seq, 16)
    k = int8(*cache) if kv == torch.int8 else t(*cache, seed=1)
    return (query, k, k.clone()), {
        "num_heads": 2, "num_key_value_heads": 2, "scale": 0.25, "input_layout": layout,
        "block_table": table(1, 2), "block_size": block_size, "actual_seq_lengths_kv": [min(9, 2 * block_size)],
        **extra}  # fmt: skip


def ifa_paged(layout: str, cache: tuple[int, ...], block_size: int = 16) -> Args:
    (q, k, v), kw = paged(layout, cache, block_size)
    kw["actual_seq_lengths"] = kw.pop("actual_seq_lengths_kv")
    kw["scale_value"] = kw.pop("scale")
    return (q, k, v), kw


def ifa_dim(dim: int) -> Args:
    return (t(1, 1, 1, dim), t(1, 1, 8, dim), t(1, 1, 8, dim)), {"num_heads": 1, "scale_value": 0.04,
                                                                 "input_layout": "BNSD"}


def tnd(dim: int = 128, value_dim: int | None = None, heads: int = 2, kv_heads: int = 1, batches: int = 2,
        **extra: object) -> Args:
    tokens = 3 * batches
    return (t(tokens, heads, dim), t(tokens, kv_heads, dim), t(tokens, kv_heads, value_dim or dim)), {
        "num_heads": heads, "num_key_value_heads": kv_heads, "scale": 0.1, "input_layout": "TND",
        "actual_seq_lengths": [3 * (b + 1) for b in range(batches)],
        "actual_seq_lengths_kv": [3 * (b + 1) for b in range(batches)], **extra}  # fmt: skip


def tnd_paged(block_size: int) -> Args:
    (q, _, _), kw = tnd(heads=2, kv_heads=2)
    cache = t(2, block_size, 256, seed=1)
    kw.update(block_table=table(2, 1), block_size=block_size, actual_seq_lengths_kv=[5, 3])
    return (q, cache, cache.clone()), kw


def mla_paged(block_size: int) -> Args:
    (q, _, _), kw = mla(512)
    cache = t(2, block_size, 512, seed=1)
    kw.update(key_rope=t(2, block_size, 64, seed=2), block_table=table(1, 2), block_size=block_size,
              actual_seq_lengths_kv=[9], input_layout="BSND")  # fmt: skip
    return (q, cache, cache), kw


def mla_bnsd_nbsd_decode() -> Args:
    return (t(1, 2, 1, 512), t(1, 1, 8, 512), t(1, 1, 8, 512)), {
        "query_rope": t(1, 2, 1, 64), "key_rope": t(1, 1, 8, 64), "num_query_heads": 2, "num_key_value_heads": 1,
        "softmax_scale": 0.05, "input_layout": "BNSD_NBSD"}  # fmt: skip


def mla_one_head_cache(layout: str) -> Args:
    (q, _, _), kw = mla(512, input_layout=layout)
    cache, rope = t(2, 1, 16, 512, seed=1), t(2, 1, 16, 64, seed=2)  # (blocks, KV_N = 1, block_size, D)
    kw.update(key_rope=rope, block_table=table(1, 2), block_size=16, actual_seq_lengths_kv=[20])
    return (q, cache, cache), kw


def heads(q_heads: int, kv_heads: int, op: str = FIA_V1) -> Args:
    names = {FIA_V1: ("num_heads", "scale"), PFA: ("num_heads", "scale_value"), IFA: ("num_heads", "scale_value")}
    head_name, scale = names[op]
    q_seq = 1 if op == IFA else 2
    return (t(1, q_heads, q_seq, 16), t(1, kv_heads, 8, 16), t(1, kv_heads, 8, 16)), {
        head_name: q_heads, "num_key_value_heads": kv_heads, scale: 0.25, "input_layout": "BNSD"}  # fmt: skip


def pse(op: str, q_seq: int, q_dtype: torch.dtype, pse_dtype: torch.dtype, dim: int = 16) -> Args:
    scale = "scale" if op == FIA_V1 else "scale_value"
    return (t(1, q_seq, 2 * dim, dtype=q_dtype), t(1, 8, 2 * dim, dtype=q_dtype), t(1, 8, 2 * dim, dtype=q_dtype)), {
        "num_heads": 2, scale: 0.25, "pse_shift": t(1, 2, q_seq, 8, dtype=pse_dtype)}  # fmt: skip


def fa(pre: int, nxt: int) -> Args:
    return (t(1, 4, 2, 16), t(1, 8, 2, 16), t(1, 8, 2, 16), 2, "BSND"), {
        "atten_mask": TEMPLATE, "sparse_mode": 4, "pre_tockens": pre,
        "next_tockens": nxt}  # fmt: skip


def with_(args: Args, **extra: object) -> Args:
    tensors, kw = args
    return tensors, {**kw, **extra}


def v2(args: Args) -> Args:
    """A v1 call spelled for FIA v2."""
    tensors, kw = args
    renamed = {"num_heads": "num_query_heads", "scale": "softmax_scale", "actual_seq_lengths": "actual_seq_qlen",
               "actual_seq_lengths_kv": "actual_seq_kvlen"}  # fmt: skip
    return tensors, {renamed.get(name, name): value for name, value in kw.items()}


C = constraints
CASES = [
    Case(FIA_V1, C.bnsd_bsnd_needs_prefill, lambda: bnsd(1, "BNSD_BSND"), lambda: bnsd(4, "BNSD_BSND")),
    Case(FIA_V2, C.bnsd_bsnd_needs_prefill, lambda: v2(bnsd(1, "BNSD_BSND")), lambda: v2(bnsd(2, "BNSD_BSND"))),
    Case(FIA_V1, C.bnsd_nbsd_query_length, lambda: bnsd(32, "BNSD_NBSD"), lambda: bnsd(16, "BNSD_NBSD")),
    Case(FIA_V2, C.sink_layout, lambda: v2(bsh(learnable_sink=t(2, dtype=BF16))), lambda: sink_call()),
    Case(FIA_V2, C.sink_value_dim, lambda: sink_call((192, 192, 192)), lambda: sink_call((192, 192, 128))),
    Case(FIA_V2, C.sink_dtype_and_shape, lambda: sink_call(sink=t(4, dtype=torch.float32)), lambda: sink_call()),
    Case(FIA_V2, C.sink_dtype_and_shape, lambda: sink_call(sink=t(1, 4, dtype=BF16)), lambda: sink_call(),
         note="-shape"),
    Case(FIA_V2, C.sink_exclusions, lambda: sink_call(pse_shift=t(1, 4, 3, 5)), lambda: sink_call()),
    Case(FIA_V1, C.mla_query_dim, lambda: mla(256), lambda: mla(128)),
    Case(FIA_V1, C.antiquant_modes_equal, lambda: separated(1, 1, 0), lambda: separated(1, 0, 1)),
    Case(FIA_V1, C.antiquant_modes_prefill, lambda: separated(4, 2, 2), lambda: separated(4, 1, 1)),
    Case(FIA_V1, C.combined_antiquant_mode_decode, lambda: combined(1, 2), lambda: combined(1, 0)),
    Case(FIA_V1, C.combined_antiquant_scale_prefill, lambda: combined(4, 0, torch.float32), lambda: combined(4, 0)),
    Case(FIA_V1, C.combined_antiquant_mode_ignored, lambda: combined(4, 1), lambda: combined(4, 0)),
    Case(FIA_V1, C.inner_precise_fia, lambda: bsh(inner_precise=2), lambda: bsh(inner_precise=1)),
    Case(FIA_V1, C.inner_precise_fia, lambda: bsh(4, inner_precise=7), lambda: bsh(4, inner_precise=3), note="-7"),
    Case(IFA, C.inner_precise_ifa, lambda: with_(ifa_paged("BSH", (2, 16, 32)), inner_precise=2),
         lambda: with_(ifa_paged("BSH", (2, 16, 32)), inner_precise=0)),
    Case(FIA_V1, C.mask_dtype, lambda: bsh(4, sparse_mode=3, atten_mask=TEMPLATE.to(HALF)),
         lambda: bsh(4, sparse_mode=3, atten_mask=TEMPLATE)),
    Case(IFA, C.mask_dtype, lambda: with_(ifa_paged("BSH", (2, 16, 32)), atten_mask=torch.zeros(1, 32, dtype=HALF)),
         lambda: with_(ifa_paged("BSH", (2, 16, 32)), atten_mask=torch.zeros(1, 32, dtype=torch.bool))),
    Case(PFA, C.mask_dtype, lambda: with_(heads(2, 2, PFA), atten_mask=torch.zeros(2, 8)),
         lambda: with_(heads(2, 2, PFA), atten_mask=torch.zeros(2, 8, dtype=torch.bool))),
    Case(FIA_V1, C.mask_shape_documented, lambda: bsh(4, batch=2, atten_mask=torch.zeros(2, 4, 8, dtype=torch.bool)),
         lambda: bsh(4, batch=2, atten_mask=torch.zeros(2, 1, 4, 8, dtype=torch.bool))),
    Case(FIA_V1, C.mask_shape_documented, lambda: with_(tnd(), atten_mask=torch.zeros(3, 3, dtype=torch.bool)),
         lambda: with_(tnd(), atten_mask=torch.zeros(1, 3, 3, dtype=torch.bool)), note="-tnd"),
    Case(FIA_V1, C.heads_major_cache_layout, lambda: paged("BSH", (2, 2, 16, 16), 16),
         lambda: paged("BNSD", (2, 2, 16, 16), 16)),
    Case(IFA, C.heads_major_cache_layout, lambda: ifa_paged("BSND", (2, 2, 16, 16)),
         lambda: ifa_paged("BNSD", (2, 2, 16, 16))),
    Case(FIA_V1, C.tokens_major_cache, lambda: paged("BNSD", (2, 16, 2, 16), 16),
         lambda: paged("BNSD", (2, 2, 16, 16), 16)),
    Case(IFA, C.tokens_major_cache, lambda: ifa_paged("BSH", (2, 16, 2, 16)), lambda: ifa_paged("BSH", (2, 16, 32))),
    Case(FIA_V1, C.block_size_prefill, lambda: paged("BSH", (2, 16, 32), 16, q_seq=4),
         lambda: paged("BSH", (2, 128, 32), 128, q_seq=4)),
    Case(FIA_V1, C.block_size_decode, lambda: paged("BSH", (2, 8, 32), 8), lambda: paged("BSH", (2, 16, 32), 16)),
    Case(FIA_V1, C.block_size_decode, lambda: paged("BSH", (2, 16, 32), 16, kv=torch.int8,
                                                    key_antiquant_scale=torch.ones(32),
                                                    value_antiquant_scale=torch.ones(32)),
         lambda: paged("BSH", (2, 32, 32), 32, kv=torch.int8, key_antiquant_scale=torch.ones(32),
                       value_antiquant_scale=torch.ones(32)), note="-int8"),
    Case(FIA_V1, C.block_size_tnd, lambda: tnd_paged(8), lambda: tnd_paged(32)),
    Case(FIA_V1, C.block_size_mla, lambda: mla_paged(24), lambda: mla_paged(32)),
    Case(IFA, C.block_size_ifa, lambda: ifa_paged("BSH", (2, 8, 32), 8), lambda: ifa_paged("BSH", (2, 16, 32), 16)),
    Case(FIA_V1, C.paged_prefill_antiquant,
         lambda: paged("BSH", (2, 128, 32), 128, q_seq=4, kv=torch.int8, key_antiquant_scale=torch.ones(32),
                       value_antiquant_scale=torch.ones(32)),
         lambda: paged("BSH", (2, 128, 32), 128, q_seq=4)),
    Case(FIA_V1, C.tnd_head_dims, lambda: tnd(64), lambda: tnd(128)),
    Case(FIA_V2, C.tnd_head_dims, lambda: v2(tnd(192)), lambda: v2(tnd(192, 128)), note="-gqa192"),
    Case(FIA_V1, C.tnd_batch_limit, lambda: tnd(heads=1, batches=4097), lambda: tnd(heads=1, batches=4096),
         computed=False),
    Case(FIA_V1, C.axis_limits_65536, lambda: heads(300, 300), lambda: heads(256, 256)),
    Case(PFA, C.axis_limits_65536, lambda: heads(300, 300, PFA), lambda: heads(256, 256, PFA)),
    Case(IFA, C.axis_limits_ifa, lambda: ifa_dim(576), lambda: ifa_dim(512)),
    Case(FIA_V1, C.gqa_ratio, lambda: heads(128, 1), lambda: heads(64, 1)),
    Case(IFA, C.gqa_ratio, lambda: heads(128, 1, IFA), lambda: heads(64, 1, IFA)),
    Case(PFA, C.gqa_ratio, lambda: heads(128, 1, PFA), lambda: heads(64, 1, PFA)),
    Case(FIA_V1, C.value_rank, lambda: ((t(1, 4, 32), t(1, 8, 32), t(1, 2, 8, 16)), {"num_heads": 2, "scale": 0.25}),
         lambda: bsh(4)),
    Case(IFA, C.ifa_kv_shapes, lambda: ((t(1, 1, 32), t(1, 8, 32), t(1, 9, 32)), {"num_heads": 2, "scale_value": 0.2}),
         lambda: ((t(1, 1, 32), t(1, 8, 32), t(1, 8, 32)), {"num_heads": 2, "scale_value": 0.2})),
    Case(FIA_V1, C.pse_dtype, lambda: pse(FIA_V1, 1, HALF, BF16), lambda: pse(FIA_V1, 1, HALF, HALF)),
    Case(IFA, C.pse_dtype, lambda: pse(IFA, 1, HALF, torch.float32), lambda: pse(IFA, 1, HALF, HALF)),
    Case(PFA, C.pse_dtype, lambda: pse(PFA, 4, BF16, HALF), lambda: pse(PFA, 4, BF16, BF16)),
    Case(FIA_V1, C.pse_head_dim, lambda: pse(FIA_V1, 1, HALF, HALF, dim=24), lambda: pse(FIA_V1, 4, HALF, HALF, 24)),
    Case(IFA, C.pse_head_dim, lambda: pse(IFA, 1, HALF, HALF, dim=24), lambda: pse(IFA, 1, HALF, HALF, dim=32)),
    Case(FIA_V1, C.pse_layout, lambda: with_(tnd(), pse_shift=t(1, 2, 3, 3)),
         lambda: with_(bsh(3), pse_shift=t(1, 2, 3, 8))),
    Case(FIA_V1, C.pse_layout, lambda: mla(128, pse_shift=t(1, 2, 1, 4)), lambda: mla(128), note="-mla"),
    Case(FIA_V1, C.int8_output_negative_band,
         lambda: bsh(4, sparse_mode=4, atten_mask=TEMPLATE, pre_tokens=-1, next_tokens=3, quant_scale2=torch.ones(1)),
         lambda: bsh(4, sparse_mode=4, atten_mask=TEMPLATE, pre_tokens=-1, next_tokens=3)),
    Case(FA, C.fa_negative_band, lambda: fa(8, -8), lambda: fa(4, -2)),
    Case(FA, C.fa_negative_band, lambda: fa(-2, 1), lambda: fa(-2, 2), note="-pre"),
]


# The test ---------------------------------------------------------------------------------------------


def probe_findings(op: str, args: Args) -> dict[str, str]:
    """The probe's argument checks on the call, bound as a live call (code -> message)."""
    tensors, kw = args
    bound = bind(OPERATORS[op], tensors, kw)
    assert bound is not None
    call = LiveCall(OPERATORS[op], bound, is_concrete(list(bound.values())))
    return {code: message for code, check in {**SIGNATURE_CHECKS, **VALUE_CHECKS}.items() if (message := check(call))}


def expected_text(case: Case, args: Args) -> str:
    """This row's violation, as the emulator and the probe word it."""
    tensors, kw = args
    bound = bind(OPERATORS[case.op], tensors, kw)
    problem = case.check(Facts(case.op, bound))
    assert problem, f"the bad call does not break {case.row.id}"
    return str(constraints.Violation(case.row, problem))


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.name)
def test_the_emulator_refuses_the_probe_reports_and_the_neighbour_passes(case: Case, torch_npu) -> None:
    bad, good = case.bad(), case.good()
    text = expected_text(case, bad)
    assert case.row.doc in text and case.row.id in text
    findings = probe_findings(case.op, bad)
    assert case.row.code in findings
    if case.row.code.startswith("KVL52") or case.row.code.startswith("KVL53"):
        assert findings[case.row.code] == text
    operator = getattr(torch_npu, case.op)
    if case.row.raises is not None:
        with pytest.raises(case.row.raises, match=re.escape(text)):
            operator(*bad[0], **bad[1])
    else:
        operator(*bad[0], **bad[1])  # the device computes it: so does the emulator, and the probe warns
    assert case.row.code not in probe_findings(case.op, good)
    assert case.check(Facts(case.op, bind(OPERATORS[case.op], *good))) is None
    if case.computed:
        operator(*good[0], **good[1])


def test_every_constraint_has_a_case() -> None:
    covered = {(case.row.id, case.check) for case in CASES}
    missing = [f"{row.id} {row.check.__name__}" for row in CONSTRAINTS if (row.id, row.check) not in covered]
    assert not missing


def test_probe_codes_say_whether_the_device_raises() -> None:
    for row in CONSTRAINTS:
        assert RULES[row.code].severity == (ERROR if row.raises is not None else WARNING), row.id
        assert row.raises in (None, RuntimeError), "every device check surfaces as RuntimeError (DSP-C15, DSP-C24)"


def test_every_constraint_names_an_anchor_of_its_page() -> None:
    for row in CONSTRAINTS:
        page, anchor = row.page.split("#")
        assert f'<a id="{anchor}"></a>' in (ROOT / "docs" / "operators" / page).read_text(encoding="utf-8"), row.id


def test_each_constraint_code_has_its_page_text_linking_existing_anchors() -> None:
    codes = {row.code for row in CONSTRAINTS if row.code >= "KVL520"} | {"KVL536", "KVL537"}
    assert set(CONSTRAINT_DOCS) == codes
    for code, doc in CONSTRAINT_DOCS.items():
        assert doc.what and doc.why and doc.bad and doc.good and doc.no_fix, code
        for reference in doc.references:
            page, anchor = reference.doc.removeprefix("docs/operators/").split("#")
            assert f'<a id="{anchor}"></a>' in (ROOT / "docs" / "operators" / page).read_text(encoding="utf-8"), code


def test_the_catalogue_says_what_enforces_each_constraint() -> None:
    """docs/operators/constraints.md: each enforced id's row names its probe code in "enforced by"."""
    text = (ROOT / "docs" / "operators" / "constraints.md").read_text(encoding="utf-8")
    for row in CONSTRAINTS:
        lines = [line for line in text.splitlines() if line.startswith(f"| [{row.id}](")]
        assert lines, f"{row.id} has no row in the catalogue"
        assert any(row.code in line.rsplit("|", 2)[1] for line in lines), f"{row.id}: 'enforced by' lacks {row.code}"


@pytest.mark.parametrize(
    ("op", "args"),
    [
        (FIA_V2, lambda: mla_bnsd_nbsd_decode()),  # vllm-ascend's MLA decode: BNSD_NBSD at Q_S = 1
        (FIA_V1, lambda: mla(512, lse=True)),  # vllm-ascend's context-parallel MLA: v1 with the lse at D = 512
        (FIA_V1, lambda: mla_one_head_cache("BSND")),  # one KV head: both 4-D cache forms are (blocks, bs, D)
        (FIA_V2, lambda: sink_call()),  # the sink where the documentation puts it
    ],
    ids=["mla-bnsd-nbsd-decode", "mla-512-lse", "one-head-4d-cache", "sink-tnd"],
)
def test_patterns_of_public_code_are_not_refused(op: str, args: Callable[[], Args], torch_npu) -> None:
    tensors, kw = args()
    assert constraints.violations(op, bind(OPERATORS[op], tensors, kw)) == []
    getattr(torch_npu, op)(*tensors, **kw)


def gpt_oss_sliding_prefill() -> Args:
    """cann-recipes-infer's GPT-OSS prefill: FIA v2 TND, GQA, head dim 64, a bf16 sink, a sliding window
    (sparse_mode 4, pre_tokens = window, next_tokens 0)."""
    (q, k, v), kw = sink_call(heads_kv=2)
    kw.update(sparse_mode=4, pre_tokens=4, next_tokens=0, atten_mask=TEMPLATE)
    return (q, k, v), kw


def qwen3_paged_tnd_decode() -> Args:
    """cann-recipes-infer's Qwen3 decode: FIA v2 TND, one token per request, a (blocks, 128, KV_N * D) cache."""
    cache = t(3, 128, 128, seed=1, dtype=BF16)
    return (t(2, 2, 128, dtype=BF16), cache, cache.clone()), {
        "num_query_heads": 2, "num_key_value_heads": 1, "softmax_scale": 0.09, "input_layout": "TND",
        "sparse_mode": 3, "atten_mask": TEMPLATE, "actual_seq_qlen": [1, 2], "actual_seq_kvlen": [65, 65],
        "block_table": table(2, 1), "block_size": 128}  # fmt: skip


def deepseek_mla_tnd_ntd_decode() -> Args:
    """cann-recipes-infer's DeepSeek absorbed MLA decode: FIA v2 TND_NTD, D = 512 with a 64-wide rope part,
    one KV head, (blocks, 1, 128, D) caches."""
    cache, rope = t(3, 1, 128, 512, seed=1, dtype=BF16), t(3, 1, 128, 64, seed=2, dtype=BF16)
    return (t(2, 2, 512, dtype=BF16), cache, cache), {
        "query_rope": t(2, 2, 64, dtype=BF16), "key_rope": rope, "num_query_heads": 2, "num_key_value_heads": 1,
        "softmax_scale": 0.04, "input_layout": "TND_NTD", "sparse_mode": 0, "actual_seq_qlen": [1, 2],
        "actual_seq_kvlen": [65, 65], "block_table": table(2, 1), "block_size": 128}  # fmt: skip


def deepseek_mla_ntd_tnd_prefill() -> Args:
    """cann-recipes-infer's DeepSeek MLA prefill: FIA v1 NTD_TND with rope, D = 128, causal template."""
    return (t(2, 24, 128, dtype=BF16), t(2, 24, 128, dtype=BF16), t(2, 24, 128, dtype=BF16)), {
        "query_rope": t(2, 24, 64, dtype=BF16), "key_rope": t(2, 24, 64, dtype=BF16), "num_heads": 2,
        "num_key_value_heads": 2, "input_layout": "NTD_TND", "atten_mask": TEMPLATE, "sparse_mode": 3,
        "actual_seq_lengths": [10, 24], "actual_seq_lengths_kv": [10, 24], "scale": 0.07, "antiquant_mode": 0,
        "antiquant_scale": None, "next_tokens": 0}  # fmt: skip


def nano_vllm_bnsd_paged_decode() -> Args:
    """nano-vllm-ascend's decode: FIA v1 BNSD query over a (blocks, 128, KV_N * D) cache, padded batch rows of
    KV length 0, inner_precise 1."""
    cache = t(8, 128, 256, seed=1, dtype=BF16)
    return (t(4, 4, 1, 128, dtype=BF16), cache, cache.clone()), {
        "num_heads": 4, "num_key_value_heads": 2, "scale": 0.09, "input_layout": "BNSD",
        "actual_seq_lengths_kv": [34, 38, 0, 0], "block_table": table(4, 2), "block_size": 128,
        "inner_precise": 1}  # fmt: skip


def ifa_heads_major_decode() -> Args:
    """Nano-vLLM-Ascend's decode: IFA BNSD over a heads-major (blocks, KV_N, 256, D) cache."""
    cache = t(2, 2, 256, 128, seed=1, dtype=BF16)
    return (t(2, 4, 1, 128, dtype=BF16), cache, cache.clone()), {
        "num_heads": 4, "num_key_value_heads": 2, "scale_value": 0.09, "input_layout": "BNSD",
        "actual_seq_lengths": [13, 8], "block_table": table(2, 1), "block_size": 256}  # fmt: skip


def bsh_decode_contiguous_cache() -> Args:
    """cann-recipes-infer's older Qwen3-MoE decode: FIA v1 BSH over a contiguous cache, KV lengths as a list,
    antiquant_mode 0 without a scale."""
    return (t(2, 1, 256, dtype=BF16), t(2, 36, 128, dtype=BF16), t(2, 36, 128, dtype=BF16)), {
        "num_heads": 2, "num_key_value_heads": 1, "input_layout": "BSH", "scale": 0.09,
        "actual_seq_lengths_kv": [33, 33], "antiquant_mode": 0, "antiquant_scale": None}  # fmt: skip


PUBLIC_CALLS = [
    (FIA_V2, gpt_oss_sliding_prefill, {"KVL531"}),  # D = 64 with GQA: not in FIA-C55's list, run on devices
    (FIA_V2, qwen3_paged_tnd_decode, set()),
    (FIA_V2, deepseek_mla_tnd_ntd_decode, set()),
    (FIA_V1, deepseek_mla_ntd_tnd_prefill, set()),
    (FIA_V1, nano_vllm_bnsd_paged_decode, set()),
    (IFA, ifa_heads_major_decode, set()),
    (FIA_V1, bsh_decode_contiguous_cache, set()),
]


@pytest.mark.parametrize(("op", "args", "warned"), PUBLIC_CALLS, ids=[c[1].__name__ for c in PUBLIC_CALLS])
def test_the_calls_public_programs_make_are_computed(op: str, args: Callable[[], Args], warned: set[str],
                                                      torch_npu) -> None:
    """The attention calls of public programs run under the emulator (issue 14's drivers recorded their
    signatures; shapes here at the models' real head dims): the table refuses none of them."""
    tensors, kw = args()
    found = constraints.violations(op, bind(OPERATORS[op], tensors, kw))
    assert {v.constraint.code for v in found} == warned
    assert all(v.constraint.raises is None for v in found)
    getattr(torch_npu, op)(*tensors, **kw)


def test_head_dims_public_code_runs_are_warned_about_not_refused(torch_npu) -> None:
    """FIA-C55 lists few TND head dims, but vllm-ascend (GPT-OSS: D = 64, GQA, a sink) and cann-recipes-infer
    (Gemma 4: D = 256) run others on devices: the probe warns, the emulator computes."""
    for tensors, kw in (sink_call(heads_kv=2), v2(tnd(256))):
        assert [v.constraint.code for v in constraints.violations(FIA_V2, bind(OPERATORS[FIA_V2], tensors, kw))] == [
            "KVL531"]
        torch_npu.npu_fused_infer_attention_score_v2(*tensors, **kw)


def test_quantised_query_modes_are_not_judged_as_antiquant() -> None:
    """MindIE-SD's Ascend950 fp8 path passes query/key/value_quant_mode=7 with fp8 tensors: not KV antiquant."""
    fp8 = torch.float8_e4m3fn
    tensors = (t(1, 2, 4, 16).to(fp8), t(1, 2, 8, 16).to(fp8), t(1, 2, 8, 16).to(fp8))
    kw = {"input_layout": "BNSD", "num_query_heads": 2, "softmax_scale": 0.25, "query_quant_mode": 7,
          "key_quant_mode": 7, "value_quant_mode": 7, "dequant_scale_query": torch.ones(1),
          "dequant_scale_key": torch.ones(1), "dequant_scale_value": torch.ones(1), "out_dtype": 1}  # fmt: skip
    assert constraints.violations(FIA_V2, bind(OPERATORS[FIA_V2], tensors, kw)) == []


def test_gqa_antiquant_with_an_nz_cache_takes_a_few_query_tokens() -> None:
    """FIA-C68: int8 NZ caches [blocks, KV_N, D/32, block_size, 32] with 1 <= Q_S <= 16 (speculative decoding),
    which the general paged-prefill rule (FIA-C43) would refuse."""
    nz = int8(4, 1, 4, 128, 32)
    tensors = (t(1, 4, 4, 128, dtype=BF16), nz, nz.clone())
    kw = {"num_heads": 4, "num_key_value_heads": 1, "scale": 0.1, "input_layout": "BNSD", "block_table": table(1, 4),
          "block_size": 128, "actual_seq_lengths_kv": [300], "key_antiquant_scale": t(1, 1, 128, dtype=BF16),
          "value_antiquant_scale": t(1, 1, 128, dtype=BF16), "sparse_mode": 3, "atten_mask": TEMPLATE}  # fmt: skip
    assert constraints.violations(FIA_V1, bind(OPERATORS[FIA_V1], tensors, kw)) == []


def test_the_combined_mode_the_device_ignores_is_ignored_by_the_emulator(torch_npu) -> None:
    """FIA-C64: with Q_S > 1 the emulator, like the device, dequantises per channel whatever antiquant_mode."""
    (q, k, v), kw = combined(4, 1)
    ignored, _ = torch_npu.npu_fused_infer_attention_score(q, k, v, **kw)
    per_channel, _ = torch_npu.npu_fused_infer_attention_score(q, k, v, **{**kw, "antiquant_mode": 0})
    assert torch.equal(ignored, per_channel)


def test_a_float_tensor_for_an_int_parameter_is_truncated_as_on_the_device(torch_npu) -> None:
    """DSP-T4: the emulator goes through the same dispatcher, which truncates toward zero; the probe says so."""
    (q, k, v), kw = bsh(1, heads=3)
    truncated, _ = torch_npu.npu_fused_infer_attention_score(q, k, v, **{**kw, "num_heads": torch.tensor(3.9)})
    three, _ = torch_npu.npu_fused_infer_attention_score(q, k, v, **kw)
    assert torch.equal(truncated, three)
    findings = probe_findings(FIA_V1, ((q, k, v), {**kw, "num_heads": torch.tensor(3.9)}))
    assert "runs as num_heads=3" in findings["KVL537"] and "KVL536" not in findings
    with pytest.raises(RuntimeError, match="num_heads"):  # several elements: the dispatcher refuses
        torch_npu.npu_fused_infer_attention_score(q, k, v, **{**kw, "num_heads": torch.ones(2)})


@pytest.mark.parametrize(
    ("keywords", "expected"),
    [
        ({"key_antiquant_mode": torch.ones(1)}, {"KVL536"}),
        ({"num_heads": torch.tensor(2, dtype=torch.int32)}, {"KVL536"}),
        ({"scale": torch.tensor(0.25)}, {"KVL536"}),
        ({"softmax_lse_flag": torch.tensor(True)}, {"KVL536"}),
        ({"num_heads": torch.tensor(2.5)}, {"KVL537"}),
        ({"num_heads": torch.tensor(-2.5)}, {"KVL537"}),
        ({"num_heads": 2, "scale": 0.25}, set()),
        ({"actual_seq_lengths_kv": torch.tensor([8])}, set()),
    ],
)
def test_scalars_passed_as_tensors(keywords: dict, expected: set) -> None:
    (q, k, v), kw = bsh(1)
    found = set(probe_findings(FIA_V1, ((q, k, v), {**kw, **keywords}))) & {"KVL536", "KVL537"}
    assert found == expected



@pytest.mark.parametrize(
    ("value", "says_truncates"),
    [(torch.tensor(2, dtype=torch.int32), False), (torch.tensor(2.0), True)],
    ids=["int-tensor", "integral-float-tensor"],
)
def test_the_scalar_tensor_message_mentions_truncation_only_for_a_float(value: torch.Tensor,
                                                                         says_truncates: bool) -> None:
    (q, k, v), kw = bsh(1)
    message = probe_findings(FIA_V1, ((q, k, v), {**kw, "num_heads": value}))["KVL536"]
    assert message.startswith(f"num_heads is an int parameter but got a {value.dtype} tensor")
    assert ("truncating a float toward zero" in message) == says_truncates

PROBED_REFUSALS = [
    (FIA_V1, lambda: bnsd(1, "BNSD_BSND"), "KVL520", "FIA-C2"),
    (FIA_V2, lambda: v2(with_(bsh(), learnable_sink=t(2, dtype=BF16))), "KVL521", "FIA-C70"),
    (IFA, lambda: with_(ifa_paged("BSH", (2, 16, 32)), inner_precise=2), "KVL525", "IFA-C15"),
    (PFA, lambda: heads(128, 1, PFA), "KVL109", "PFA-C14"),
]


@pytest.mark.parametrize(("op", "args", "code", "rule"), PROBED_REFUSALS, ids=[c[3] for c in PROBED_REFUSALS])
def test_the_probe_reports_a_refused_call_at_the_user_line_and_the_error_reaches_the_user(
        op: str, args: Callable[[], Args], code: str, rule: str, probe, torch_npu) -> None:
    running = probe(compare=False)
    tensors, kw = args()
    with pytest.raises(RuntimeError, match=rule):
        getattr(torch_npu, op)(*tensors, **kw)  # refused here
    found = {(f.code, f.path, f.line) for f in running.recorder.findings.values()}
    line = next(n for n, text in enumerate(Path(__file__).read_text().splitlines(), 1) if text.endswith("# refused here"))
    assert (code, "tests/test_constraints.py", line) in found



def test_the_out_overload_refuses_as_the_default_one_and_leaves_out_untouched(torch_npu) -> None:
    """``npu_fused_infer_attention_score.out`` (vllm-ascend's graph-captured decode calls it) runs the same table
    before writing: a refused call raises and the output buffers keep their contents."""
    (q, k, v), kw = bnsd(1, "BNSD_BSND")
    attention_out, lse = torch.full((1, 1, 2, 16), 7.0, dtype=HALF), torch.zeros(1)
    with pytest.raises(RuntimeError, match=re.escape("(FIA-C2, docs/operators/fused_infer_attention.md#fia-c2)")):
        torch.ops.npu.npu_fused_infer_attention_score.out(q, k, v, **kw, out=[attention_out, lse])
    assert torch.equal(attention_out, torch.full((1, 1, 2, 16), 7.0, dtype=HALF))
    (q, k, v), kw = bnsd(1, "BNSD")
    attention_out = torch.empty(1, 2, 1, 16, dtype=HALF)
    torch.ops.npu.npu_fused_infer_attention_score.out(q, k, v, **kw, out=[attention_out, lse])
    expected, _ = torch_npu.npu_fused_infer_attention_score(q, k, v, **kw)
    assert torch.equal(attention_out, expected)
