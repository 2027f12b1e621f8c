"""The operator catalogue is parsed from the verbatim schema strings and agrees with the documented facts."""

from __future__ import annotations

import pytest

from kvlint.catalogue.operators import (
    FIA_V1,
    FIA_V2,
    INFERENCE_ATTENTION,
    NAMESPACES,
    NO_DEFAULT,
    OPERATORS,
    OVERLOADS,
    V1_TO_V2,
    lookup,
    parse_schema,
)
from kvlint.catalogue.rules import RULES, STATIC_RULES
from kvlint.catalogue.schemas import ATB_SCHEMAS, SCHEMAS
from kvlint.checks.engine import lint_source

REQUIRED = [
    ("npu_fused_infer_attention_score", "default"), ("npu_fused_infer_attention_score", "out"),
    ("npu_fused_infer_attention_score_v2", "default"), ("npu_fused_infer_attention_score_v2", "out"),
    ("npu_incre_flash_attention", "default"), ("npu_prompt_flash_attention", "default"),
    ("npu_fusion_attention", "default"), ("scatter_update", "default"), ("scatter_update_", "default"),
    ("npu_scatter_nd_update", "default"), ("npu_scatter_nd_update_", "default"),
    ("npu_kv_rmsnorm_rope_cache", "default"), ("npu_kv_rmsnorm_rope_cache_v2", "default"),
    ("npu_kv_rmsnorm_rope_cache_v2_functional", "default"), ("npu_scatter_pa_kv_cache", "default"),
    ("npu_fusion_attention_grad", "default"), ("npu_fusion_attention_grad_v2", "default"),
    ("npu_fusion_attention_v3", "default"), ("npu_fusion_attention_grad_v3", "default"),
    ("_npu_flash_attention_qlens", "default"),
]


@pytest.mark.parametrize(("name", "overload"), REQUIRED)
def test_issue_operators_are_catalogued(name: str, overload: str) -> None:
    assert lookup(name, overload) is not None


def test_every_operator_is_hashable_with_list_defaults_read_as_tuples() -> None:
    assert len({hash(op) for op in OVERLOADS.values()}) == len(OVERLOADS)
    assert OPERATORS["npu_moe_init_routing_v2"].param("active_expert_range").default == ()


def test_every_schema_string_parses_to_one_overload() -> None:
    assert len(OVERLOADS) == len(SCHEMAS) + len(ATB_SCHEMAS)
    assert {op.namespace for op in OVERLOADS.values() if op.schema in ATB_SCHEMAS} == {"atb"}


@pytest.mark.parametrize("name", sorted(INFERENCE_ATTENTION))
def test_inference_attention_takes_query_key_value_positionally_and_the_rest_by_keyword(name: str) -> None:
    assert [p.name for p in OPERATORS[name].positional] == ["query", "key", "value"]


def test_fia_v1_defaults_are_the_documented_landmines() -> None:
    fia = OPERATORS[FIA_V1]
    assert fia.param("num_heads").default == 1
    assert fia.param("scale").default == 1.0
    assert fia.param("input_layout").default == "BSH"
    assert fia.param("next_tokens").default == 2147483647
    assert fia.param("softmax_lse_flag").default is False
    assert fia.param("atten_mask").default is None


def test_prompt_flash_attention_next_tokens_default_is_zero() -> None:
    assert OPERATORS["npu_prompt_flash_attention"].param("next_tokens").default == 0


def test_out_overload_requires_out_and_adds_workspace() -> None:
    out = lookup(FIA_V1, "out")
    assert out.param("out").default is NO_DEFAULT and out.param("out").kw_only
    assert set(out.param_names) - set(OPERATORS[FIA_V1].param_names) == {"workspace", "out"}


def test_fusion_attention_has_no_keyword_only_marker() -> None:
    fa = OPERATORS["npu_fusion_attention"]
    assert all(not p.kw_only for p in fa.params)
    assert [p.name for p in fa.params[:8]] == [
        "query", "key", "value", "head_num", "input_layout", "pse", "padding_mask", "atten_mask"
    ]


def test_in_place_writes_are_marked_mutated() -> None:
    assert OPERATORS["scatter_update_"].params[0].mutated
    assert not OPERATORS["scatter_update"].params[0].mutated


def test_rename_table_maps_real_parameters_of_each_version() -> None:
    v1, v2 = set(OPERATORS[FIA_V1].param_names), set(OPERATORS[FIA_V2].param_names)
    for old, new in V1_TO_V2.items():
        assert old in v1 and old not in v2, old
        assert new in v2 and new not in v1, new


def test_malformed_schema_is_rejected_with_its_text() -> None:
    with pytest.raises(ValueError, match="not an operator schema"):
        parse_schema("npu_broken(Tensor query")


def test_pylint_ids_are_unique_and_in_kvlint_ranges() -> None:
    ids = [rule.pylint_msgid for rule in STATIC_RULES if rule.pylint_msgid]
    assert len(ids) == len(set(ids))
    assert {msgid[1:3] for msgid in ids} <= {"70", "71", "72", "73"}
    assert RULES["KVL000"].pylint_msgid is None  # pylint reports a file it cannot parse itself
    assert RULES["KVL001"].pylint_msgid == "W7001"
    assert RULES["KVL101"].pylint_msgid == "E7101"
    assert RULES["KVL104"].pylint_msgid == "W7104"


def test_symbols_are_unique() -> None:
    symbols = [rule.symbol for rule in RULES.values()]
    assert len(symbols) == len(set(symbols))


def test_every_catalogued_operator_exists_where_torch_npu_defines_it() -> None:
    for name, op in OPERATORS.items():
        assert name in NAMESPACES["torch_npu"], name
        assert name in NAMESPACES[f"torch.ops.{op.namespace}"], name


def test_atb_operators_are_reached_through_torch_npu_and_torch_ops_atb_only() -> None:
    assert OPERATORS["_npu_paged_attention"].namespace == "atb"
    assert "_npu_paged_attention" not in NAMESPACES["torch.ops.npu"]
    assert "npu_ring_mla" in NAMESPACES["torch.ops.atb"] and "npu_ring_mla" not in NAMESPACES["torch_npu"]


def test_atb_optional_types_are_read_like_the_dispatcher_reads_them() -> None:
    kernel_type = OPERATORS["_npu_flash_attention_unpad_v2"].param("kernel_type")
    assert (kernel_type.type, kernel_type.default, kernel_type.kw_only) == ("int?", 0, True)


def test_an_operator_with_a_single_named_overload_is_called_through_it() -> None:
    assert OPERATORS["npu_scatter_pa_cache"].qualified == "npu_scatter_pa_cache.value"
    assert OPERATORS["npu_scatter_pa_cache"].param("key_cache").required


def test_training_attention_calls_are_checked_against_their_schemas() -> None:
    """The backward kernels that training code calls directly: a misspelled keyword is KVL101, as for the forward."""
    source = ("import torch_npu\n"
              "dq = torch_npu.npu_fusion_attention_grad(q, k, v, dy, 8, 'BNSD', scale=0.1, keep_prob=1.0)\n"
              "ok = torch_npu.npu_fusion_attention_grad(q, k, v, dy, 8, 'BNSD', scale_value=0.1)\n")
    found = [(f.line, f.code, f.message) for f in lint_source(source, "train.py")]
    assert [(line, code) for line, code, _ in found] == [(2, "KVL101")]
    assert "did you mean 'scale_value'?" in found[0][2]
    assert OPERATORS["_npu_flash_attention_qlens"].namespace == "atb"
