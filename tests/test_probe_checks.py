"""Each argument check of the probe fires on a live call, under its rule code, at the user's line.

The calls go through a hand-made ``torch_npu`` stand-in (tests/probe_fixtures/standin_npu); the checks
themselves are also exercised directly on bound calls for the cases a stand-in cannot run.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from kvlint.runtime_probe.checks import SIGNATURE_CHECKS, VALUE_CHECKS, non_causal_prefill
from kvlint.runtime_probe.live_call import LiveCall, bind, is_concrete

from kvlint.catalogue.operators import FIA_V1, FIA_V2, IFA, OPERATORS, PFA
from tests.probe_fixtures import user_calls
from tests.probe_fixtures.harness import codes, emulated, marked_line, probe, standin  # noqa: F401

USER_CALLS = Path(user_calls.__file__)
USER_CALLS_PATH = "tests/probe_fixtures/user_calls.py"


@pytest.mark.parametrize("code", sorted(user_calls.BAD_CALLS))
def test_each_check_reports_its_code_at_the_calling_line(code, probe, standin):
    running = probe(compare=False)
    torch_npu = standin("good")
    user_calls.BAD_CALLS[code](torch_npu)
    running.report()  # KVL508 waits for a read; unread, it is reported at info level at the end
    sites = {(f.path, f.line) for f in running.recorder.findings.values() if f.code == code}
    assert sites == {(USER_CALLS_PATH, marked_line(USER_CALLS, code))}


def test_correct_calls_give_no_finding(probe, standin):
    running = probe(compare=True, sample=None)
    user_calls.clean_calls(standin("good"))
    assert codes(running) == {}
    assert sum(site.validated for site in running.recorder.sites.values()) == 5


def check_codes(name: str, query, key, value, **keywords) -> set[str]:
    """The codes the argument checks report for one call (bound like a live call, not run); "KVL507" when
    KVL507's condition on the call holds (whether it is reported is the decoder evidence's to say)."""
    bound = bind(OPERATORS[name], (query, key, value), keywords)
    assert bound is not None
    call = LiveCall(OPERATORS[name], bound, is_concrete(list(bound.values())))
    codes = {code for code, check in {**SIGNATURE_CHECKS, **VALUE_CHECKS}.items() if check(call)}
    return codes | ({"KVL507"} if non_causal_prefill(call) else set())


Q = torch.zeros(2, 4, 3, 16)
K = torch.zeros(2, 2, 8, 16)
TEMPLATE = torch.ones(2048, 2048, dtype=torch.bool).triu(1)
GOOD = dict(num_heads=4, num_key_value_heads=2, input_layout="BNSD", scale=0.25, sparse_mode=3, atten_mask=TEMPLATE)


@pytest.mark.parametrize(
    ("keywords", "expected"),
    [
        ({}, set()),
        ({"atten_mask": TEMPLATE.to(torch.float16)}, {"KVL201"}),
        ({"atten_mask": TEMPLATE[None, None].to(torch.uint8)}, set()),
        ({"atten_mask": TEMPLATE[:1024, :1024]}, {"KVL202"}),
        ({"sparse_mode": 1, "atten_mask": torch.zeros(3, 7, dtype=torch.bool)}, {"KVL202"}),
        ({"sparse_mode": 1, "atten_mask": torch.zeros(2, 1, 3, 8, dtype=torch.bool)}, set()),
        ({"sparse_mode": 2, "atten_mask": None}, {"KVL203"}),
        ({"num_key_value_heads": 0}, {"KVL506"}),
        ({"num_heads": 8}, {"KVL506"}),
        ({"input_layout": "BSND"}, {"KVL506"}),
        ({"input_layout": "BSH"}, {"KVL106"}),
        ({"input_layout": "bnsd"}, {"KVL106"}),
        ({"key_rope": torch.zeros(2, 2, 8, 64)}, {"KVL108"}),
        ({"actual_seq_lengths": [3, 3, 3]}, {"KVL503"}),
        ({"actual_seq_lengths": [3, 4]}, {"KVL503"}),
        ({"actual_seq_lengths_kv": [8]}, set()),
        ({"actual_seq_lengths_kv": torch.tensor([8, 9])}, {"KVL503"}),
        ({"actual_seq_lengths_kv": [-1, 8]}, {"KVL503"}),
        ({"actual_seq_lengths_kv": [8, 5, 7]}, {"KVL503"}),
        ({"sparse_mode": 0, "atten_mask": None}, {"KVL507"}),
    ],
)
def test_argument_checks_on_bound_calls(keywords, expected):
    assert check_codes(FIA_V1, Q, K, K, **{**GOOD, **keywords}) == expected


def test_decode_ignores_sparse_mode_but_checks_lengths_against_the_single_query_token():
    """FIA ignores sparse_mode for one query token without rope; a KV length list passed as the query
    lengths (the IFA habit) exceeds S=1 (a warning: FIA ignores the query lengths there, FIA-C18)."""
    q = torch.zeros(2, 4, 1, 16)
    assert check_codes(FIA_V1, q, K, K, **{**GOOD, "atten_mask": None}) == set()
    assert check_codes(FIA_V1, q, K, K, **{**GOOD, "actual_seq_lengths": [8, 8]}) == {"KVL503"}


def test_varlen_lengths_must_be_cumulative_and_end_at_t():
    q, k = torch.zeros(10, 4, 128), torch.zeros(10, 2, 128)  # a head dim the TND layouts document (FIA-C55)
    tnd = dict(num_query_heads=4, num_key_value_heads=2, input_layout="TND", softmax_scale=0.25, sparse_mode=3,
               atten_mask=TEMPLATE)
    assert check_codes(FIA_V2, q, k, k, **tnd, actual_seq_qlen=[4, 10], actual_seq_kvlen=[4, 10]) == set()
    assert check_codes(FIA_V2, q, k, k, **tnd, actual_seq_qlen=[4, 6], actual_seq_kvlen=[4, 10]) == {"KVL503"}
    assert check_codes(FIA_V2, q, k, k, **tnd, actual_seq_qlen=[4, 10], actual_seq_kvlen=[6, 4]) == {"KVL503"}


def test_paged_block_table_checks():
    query, cache = torch.zeros(2, 1, 64), torch.zeros(6, 16, 32)
    table = torch.tensor([[0, 1, -1], [2, -1, -1]], dtype=torch.int32)
    paged = dict(num_heads=4, num_key_value_heads=2, scale=0.25, block_size=16, actual_seq_lengths_kv=[20, 16])
    assert check_codes(FIA_V1, query, cache, cache, block_table=table, **paged) == set()
    assert check_codes(FIA_V1, query, cache, cache, block_table=table + 5, **paged) == {"KVL504"}
    assert check_codes(FIA_V1, query, cache, cache, block_table=table[:1], **paged) == {"KVL504"}
    assert check_codes(FIA_V1, query, cache, cache, block_table=table[0], **paged) == {"KVL504"}
    assert check_codes(FIA_V1, query, cache, cache, block_table=table, **{**paged, "block_size": 8}) == {
        "KVL504", "KVL529"}  # too few blocks; and 8 is no multiple of 16 (FIA-C37)
    assert check_codes(FIA_V1, query, cache, cache, block_table=table.long(), **paged) == {"KVL301"}
    four_d = torch.zeros(6, 2, 16, 16)  # [blocks, Nkv, block_size, D], documented with a BNSD query (FIA-C41)
    bnsd = {**paged, "input_layout": "BNSD"}
    query = query.view(2, 1, 4, 16).transpose(1, 2)
    assert check_codes(FIA_V1, query, four_d, four_d, block_table=table, **bnsd) == set()
    one_kv_head = {**bnsd, "num_key_value_heads": 1}
    assert check_codes(FIA_V1, query, four_d, four_d, block_table=table, **one_kv_head) == {"KVL506"}


def test_gqa_ratio_and_head_dims():
    assert check_codes(IFA, torch.zeros(2, 1, 64), torch.zeros(2, 8, 32), torch.zeros(2, 8, 32), num_heads=4,
                       num_key_value_heads=2, scale_value=0.25) == set()
    assert check_codes(IFA, torch.zeros(2, 1, 64), torch.zeros(2, 8, 48), torch.zeros(2, 8, 48), num_heads=4,
                       num_key_value_heads=2, scale_value=0.25) == {"KVL506"}
    assert check_codes(IFA, torch.zeros(2, 1, 130), torch.zeros(2, 8, 2), torch.zeros(2, 8, 2), num_heads=130,
                       num_key_value_heads=2, scale_value=0.25) == {"KVL109"}
    assert check_codes(PFA, Q, K, K, num_heads=4, num_key_value_heads=3, input_layout="BNSD", sparse_mode=3,
                       atten_mask=TEMPLATE) == {"KVL109", "KVL506"}


def test_meta_tensors_skip_value_reads_but_keep_shape_checks():
    meta = dict(device="meta")
    q, k = torch.zeros(2, 4, 3, 16, **meta), torch.zeros(2, 2, 8, 16, **meta)
    lengths = torch.tensor([9, 9], **meta)
    assert check_codes(FIA_V1, q, k, k, **{**GOOD, "actual_seq_lengths_kv": lengths}) == set()
    assert check_codes(FIA_V1, q, k, k, **{**GOOD, "num_heads": 8}) == {"KVL506"}


def test_lengths_of_prompts_packed_into_one_batch_row_are_kvl503(emulated):
    """Two prompts (12 and 13 tokens) packed into one causal sequence of a batch of 1, with a length per
    token: the operator reads only the first entry; the packing needs TND and cumulative lengths."""
    running, torch_npu = emulated(compare=False)
    q, kv = torch.randn(1, 25, 64), torch.randn(1, 25, 32)
    lengths = [*range(1, 13), *range(1, 14)]
    torch_npu.npu_fused_infer_attention_score(q, kv, kv, num_heads=4, num_key_value_heads=2, scale=0.25, input_layout="BSH", sparse_mode=3, atten_mask=TEMPLATE, actual_seq_lengths=lengths, actual_seq_lengths_kv=lengths)  # noqa: E501  # packed
    (finding,) = running.recorder.findings.values()
    assert (finding.code, finding.line) == ("KVL503", marked_line(Path(__file__), "packed"))
    assert finding.message == ("actual_seq_lengths=[1, 2, 3, 4, 5, 6, 7, 8, '...'] has 25 entries for a batch of 1 "
                               "(needs 1); 25 lengths for 1 batch row(s) look like sequences packed into one "
                               "row, which needs the TND layout with cumulative lengths")
    assert finding.severity == "error"  # the device reads the first entry only: not what the list describes


def test_tnd_lengths_are_cumulative_ends_without_a_leading_zero():
    q, k = torch.zeros(10, 4, 128), torch.zeros(10, 2, 128)  # a head dim the TND layouts document (FIA-C55)
    tnd = dict(num_query_heads=4, num_key_value_heads=2, input_layout="TND", softmax_scale=0.088, sparse_mode=3,
               atten_mask=TEMPLATE)
    assert check_codes(FIA_V2, q, k, k, **tnd, actual_seq_qlen=[0, 4, 10], actual_seq_kvlen=[4, 10]) == {"KVL503"}
    assert check_codes(FIA_V2, q, k, k, **tnd, actual_seq_qlen=[4, 10], actual_seq_kvlen=[4, 9]) == {"KVL503"}


def test_an_nz_rope_cache_is_judged_by_its_logical_head_dim():
    """MLA over NZ paged caches: the latent [blocks, 1, 512/16, bs, 16] and the rope [blocks, 1, 64/16, bs,
    16] end in the 16-wide tile; their head dims are 512 and 64."""
    table = torch.tensor([[0, 1], [2, 3]], dtype=torch.int32)
    mla = dict(num_heads=8, num_key_value_heads=1, input_layout="BNSD", scale=0.05, block_table=table,
               block_size=16, actual_seq_lengths_kv=[20, 30], query_rope=torch.zeros(2, 8, 1, 64))
    latent = torch.zeros(4, 1, 32, 16, 16)
    query = torch.zeros(2, 8, 1, 512)
    assert check_codes(FIA_V1, query, latent, latent, key_rope=torch.zeros(4, 1, 4, 16, 16), **mla) == set()
    wrong = check_codes(FIA_V1, query, latent, latent, key_rope=torch.zeros(4, 1, 2, 16, 16), **mla)
    assert wrong == {"KVL506"}
    bound = bind(OPERATORS[FIA_V1], (query, latent, latent), {**mla, "key_rope": torch.zeros(4, 1, 2, 16, 16)})
    message = SIGNATURE_CHECKS["KVL506"](LiveCall(OPERATORS[FIA_V1], bound, True))
    assert message == "key_rope head dim is 32 (NZ [4, 1, 2, 16, 16]), must be 64 in MLA"


def _levels(running) -> dict[str, str]:
    return {f.code: f.severity for f in running.recorder.findings.values()}


def test_query_lengths_the_device_ignores_at_one_query_token_are_a_warning(emulated):
    """torch_npu's graph tests pass actual_seq_lengths=[100] for a query of length 1 and compare the operator
    with itself: FIA ignores the query lengths at Q_S = 1 outside TND (FIA-C18), so no error; the same
    lengths with a query of 2 tokens, where they are read, stay an error."""
    running, torch_npu = emulated()
    k = torch.randn(1, 100, 64, dtype=torch.float16)
    keywords = dict(num_heads=4, input_layout="BSH", scale=0.125, actual_seq_lengths=[100], actual_seq_lengths_kv=[100])
    torch_npu.npu_fused_infer_attention_score(torch.randn(1, 1, 64, dtype=torch.float16), k, k, **keywords)
    assert _levels(running) == {"KVL503": "warning"}
    (finding,) = running.recorder.findings.values()
    assert finding.message.endswith("ignores actual_seq_lengths when the query has one token outside TND "
                                    "(FIA-C18), so this is a warning")
    (site,) = running.recorder.sites.values()
    assert site.compared == 1  # a warning does not keep the call from the comparison
    running.recorder.findings.clear()
    with pytest.raises(RuntimeError, match="must lie within"):  # the emulator refuses the lengths it reads
        torch_npu.npu_fused_infer_attention_score(torch.randn(1, 2, 64, dtype=torch.float16), k, k, **keywords,
                                                  sparse_mode=3, atten_mask=TEMPLATE)  # fmt: skip
    assert _levels(running) == {"KVL503": "error"}


def test_a_kv_length_error_is_not_hidden_by_an_ignored_query_length(emulated):
    running, torch_npu = emulated(compare=False)
    k = torch.randn(1, 8, 64)
    with pytest.raises(RuntimeError, match="must lie within"):
        torch_npu.npu_fused_infer_attention_score(torch.randn(1, 1, 64), k, k, num_heads=4, input_layout="BSH",
                                                  scale=0.125, actual_seq_lengths=[100], actual_seq_lengths_kv=[9])
    (finding,) = running.recorder.findings.values()
    assert finding.severity == "error" and finding.message == "actual_seq_lengths_kv=[9] entry 0 is 9, above S=8"


def test_kv_lengths_passed_as_the_query_lengths_at_one_query_token_stay_an_error(emulated):
    """The IFA habit on FIA: without actual_seq_lengths_kv the device ignores actual_seq_lengths=[5] at Q_S = 1
    and attends over all 8 keys, not the 5 the program meant."""
    running, torch_npu = emulated(compare=False)
    k = torch.randn(1, 8, 64)
    torch_npu.npu_fused_infer_attention_score(torch.randn(1, 1, 64), k, k, num_heads=4, input_layout="BSH",
                                              scale=0.125, actual_seq_lengths=[5])  # the emulator ignores it too
    (finding,) = running.recorder.findings.values()
    assert finding.severity == "error"
    assert finding.message == ("actual_seq_lengths=[5] entry 0 is 5, above S=1; with no actual_seq_lengths_kv the "
                               "device ignores these and attends over all 8 keys (FIA-C18): KV lengths go in "
                               "actual_seq_lengths_kv")
