"""The operator catalogue: every operator of ``kvlint.catalogue.schemas`` parsed into parameters and defaults.

The schema strings are parsed once at import. Nothing here imports torch or torch_npu.
Family tables (which operator is FIA v1, which parameter names are renames of which) are facts from
``docs/operators/fused_infer_attention.md#fia-v1-v2`` and ``#fia-family``.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass

from kvlint.catalogue import operator_names
from kvlint.catalogue.schemas import ATB_SCHEMAS, SCHEMAS

NO_DEFAULT = object()
"""Marker for a parameter that the schema declares without a default (required)."""


@dataclass(frozen=True)
class Param:
    name: str
    type: str
    default: object
    kw_only: bool

    @property
    def required(self) -> bool:
        return self.default is NO_DEFAULT

    @property
    def mutated(self) -> bool:
        """True for ``Tensor(a!)`` parameters, which the operator writes in place."""
        return "!" in self.type


@dataclass(frozen=True)
class Operator:
    name: str
    overload: str
    params: tuple[Param, ...]
    returns: tuple[str, ...]
    schema: str
    namespace: str = "npu"
    """The ``torch.library`` namespace the schema is registered in: ``npu``, or ``atb`` for ATB's."""

    @property
    def qualified(self) -> str:
        return self.name if self.overload == "default" else f"{self.name}.{self.overload}"

    @property
    def positional(self) -> tuple[Param, ...]:
        return tuple(p for p in self.params if not p.kw_only)

    def param(self, name: str) -> Param | None:
        return next((p for p in self.params if p.name == name), None)

    @property
    def param_names(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.params)


_SCHEMA = re.compile(r"^(?P<name>\w+)(?:\.(?P<overload>\w+))?\((?P<args>.*)\)\s*->\s*(?P<returns>.*)$")
_PARAM = re.compile(r"^(?P<type>.+?)\s+(?P<name>\w+)\s*(?:=\s*(?P<default>.+))?$")


def _split_top_level(text: str) -> list[str]:
    """Split on commas that are not inside brackets or parentheses (an empty last part dropped). Every schema
    is parsed at import, on every start: a walk over each character was half of that parse."""
    parts, current, depth = [], [], 0
    for piece in text.split(","):
        current.append(piece)
        depth += piece.count("(") + piece.count("[") - piece.count(")") - piece.count("]")
        if depth == 0:
            parts.append(",".join(current).strip())
            current = []
    if current:
        parts.append(",".join(current).strip())
    if parts and not parts[-1]:
        parts.pop()
    return parts


def _parse_default(text: str) -> object:
    if text == "None":
        return None
    if text in ("True", "False"):
        return text == "True"
    value = ast.literal_eval(text)
    return tuple(value) if isinstance(value, list) else value  # ``int[2] x=[]``: operators stay hashable


def parse_schema(schema: str, namespace: str = "npu") -> Operator:
    """Parse one registered schema string (``name.overload(args) -> returns``); ATB's spell optional types
    ``int ? x = 0``, read as ``int? x=0``."""
    match = _SCHEMA.match(schema)
    if match is None:
        raise ValueError(f"not an operator schema: {schema!r}")
    params: list[Param] = []
    kw_only = False
    for item in _split_top_level(match["args"]):
        if item == "*":
            kw_only = True
            continue
        part = _PARAM.match(item)
        if part is None:
            raise ValueError(f"cannot parse parameter {item!r} of {schema!r}")
        default = NO_DEFAULT if part["default"] is None else _parse_default(part["default"])
        params.append(Param(part["name"], re.sub(r"\s+\?", "?", part["type"]), default, kw_only))
    returns = match["returns"].strip()
    if returns.startswith("("):
        returns = returns[1:-1]
    return Operator(
        name=match["name"],
        overload=match["overload"] or "default",
        params=tuple(params),
        returns=tuple(_split_top_level(returns)),
        schema=schema,
        namespace=namespace,
    )


OVERLOADS: dict[tuple[str, str], Operator] = {
    (op.name, op.overload): op
    for op in [parse_schema(s) for s in SCHEMAS] + [parse_schema(s, "atb") for s in ATB_SCHEMAS]
}


def _called_overload(name: str) -> Operator | None:
    overloads = [op for (other, _), op in OVERLOADS.items() if other == name]
    default = OVERLOADS.get((name, "default"))
    return default or (overloads[0] if len(overloads) == 1 else None)


OPERATORS: dict[str, Operator] = {
    name: op for name in dict.fromkeys(name for name, _ in OVERLOADS) if (op := _called_overload(name))
}
"""Operator name -> the overload a call of the operator itself reaches: ``.default``, or the only overload
when there is no ``.default`` (``npu_scatter_pa_cache.value``)."""


def lookup(name: str, overload: str = "default") -> Operator | None:
    return OVERLOADS.get((name, overload))


# Where operators are reached (docs/operators/dispatcher.md#dsp-c2, #dsp-c6, #dsp-c8), from the generated
# ``operator_names`` (op-plugin, torch_npu and torchair sources).
NAMESPACES: dict[str, frozenset[str]] = {
    "torch_npu": operator_names.NPU | operator_names.TORCH_NPU_OWN | operator_names.TORCH_NPU_ATB,
    "torch.ops.npu": operator_names.NPU | operator_names.TORCH_NPU_OWN,
    "torch.ops.atb": operator_names.ATB,
    "torchair.ops": operator_names.TORCHAIR_OPS,
}
"""Dotted prefix under which operators are called -> the operator names that exist there: ``torch_npu``
exports every ``npu`` operator and ATB's ``API_LIST``; ``torchair.ops`` has only its own few functions."""


# Families (docs/operators/fused_infer_attention.md#fia-family).
FIA_V1 = "npu_fused_infer_attention_score"
FIA_V2 = "npu_fused_infer_attention_score_v2"
IFA = "npu_incre_flash_attention"
PFA = "npu_prompt_flash_attention"
FA = "npu_fusion_attention"
FIA = frozenset({FIA_V1, FIA_V2})
INFERENCE_ATTENTION = frozenset({FIA_V1, FIA_V2, IFA, PFA})
"""The inference attention operators: three positional parameters, kw-only rest, scale default 1.0."""
IN_PLACE_FORM: dict[str, str] = {
    "scatter_update": "scatter_update_",
    "npu_scatter_nd_update": "npu_scatter_nd_update_",
    "npu_scatter_pa_kv_cache_functional": "npu_scatter_pa_kv_cache",
    "npu_kv_rmsnorm_rope_cache_v2_functional": "npu_kv_rmsnorm_rope_cache_v2",
}
"""Cache writers that return updated copies and leave the cache as it was -> the form that writes in place
(docs/operators/kv_cache_writes.md#kvc-variants)."""
OUT_OF_PLACE_SCATTER = frozenset(IN_PLACE_FORM)
KV_RMSNORM_OUTPUTS = {
    "npu_kv_rmsnorm_rope_cache": 4,
    "npu_kv_rmsnorm_rope_cache_v2": 2,
    "npu_kv_rmsnorm_rope_cache_v2_functional": 4,
}

# The operators real engines call beside them (docs/operators/atb_attention.md, sparse_and_mla.md,
# fused_infer_attention.md#fia-workspace).
FIA_V1_WORKSPACE = "_npu_fused_infer_attention_score_get_max_workspace"
FIA_V2_WORKSPACE = "_npu_fused_infer_attention_score_v2_get_max_workspace"
ATB_PAGED = frozenset({"_npu_paged_attention", "_npu_paged_attention_get_workspace", "_npu_paged_attention_splitfuse",
                       "_npu_paged_attention_splitfuse_v2"})
"""ATB's paged attention: caches read through an int32 ``block_table`` up to ``context_lens``
(docs/operators/atb_attention.md#atb-c2)."""
ATB_FLASH = frozenset({"_npu_flash_attention", "_npu_flash_attention_v3", "_npu_flash_attention_unpad",
                       "_npu_flash_attention_unpad_v2"})
"""ATB's self-attention over concatenated sequences, GQA through ``num_kv_heads``
(docs/operators/atb_attention.md#atb-c9)."""
LIGHTNING_INDEXER = "npu_lightning_indexer"
QUANT_LIGHTNING_INDEXER = "npu_quant_lightning_indexer"
SFA = "npu_sparse_flash_attention"
KV_QUANT_SFA = "npu_kv_quant_sparse_flash_attention"
SPARSE_ATTENTION = frozenset({LIGHTNING_INDEXER, QUANT_LIGHTNING_INDEXER, SFA, KV_QUANT_SFA})
"""The DeepSeek sparse-attention kernels: query/key layouts of their own, int32 length tensors
(docs/operators/sparse_and_mla.md#smla-constraints)."""

KEYWORD_HABITS: dict[str, dict[str, str]] = {"_npu_reshape_and_cache": {"slot_mapping": "slot_indices"}}
"""Operator -> a keyword carried over from its neighbours -> the operator's own name for it: ATB's cache
write calls its slots ``slot_indices`` where every other writer says ``slot_mapping``
(docs/operators/kv_cache_writes.md#kvc-c30)."""

ARGUMENTS_OF: dict[str, str] = {FIA_V1_WORKSPACE: FIA_V1, FIA_V2_WORKSPACE: FIA_V2}
"""Operators that take another operator's arguments and validate them the same way: the workspace helpers
take exactly FIA's (docs/operators/fused_infer_attention.md#fia-workspace). The rules on which arguments
exist and which values are accepted (KVL102, KVL106-KVL109, KVL111) judge them as that operator."""

SCALE_PARAM = {FIA_V1: "scale", FIA_V2: "softmax_scale", IFA: "scale_value", PFA: "scale_value"}
NUM_HEADS_PARAM = {FIA_V1: "num_heads", FIA_V2: "num_query_heads", IFA: "num_heads", PFA: "num_heads"}
NUM_HEADS_PARAM.update(dict.fromkeys(ATB_PAGED | ATB_FLASH, "num_heads"))
KV_HEADS_PARAM = dict.fromkeys(INFERENCE_ATTENTION, "num_key_value_heads")
KV_HEADS_PARAM.update(dict.fromkeys(ATB_PAGED | ATB_FLASH, "num_kv_heads"))
"""Operators that take fewer KV heads than query heads (GQA), and the parameter that says how many."""
QUERY_LENGTHS_PARAM = {FIA_V1: "actual_seq_lengths", FIA_V2: "actual_seq_qlen", PFA: "actual_seq_lengths"}
KV_LENGTHS_PARAM = {
    FIA_V1: "actual_seq_lengths_kv",
    FIA_V2: "actual_seq_kvlen",
    IFA: "actual_seq_lengths",
    PFA: "actual_seq_lengths_kv",
}
KV_LENGTHS_PARAM.update(dict.fromkeys(ATB_PAGED, "context_lens"))
KV_LENGTHS_PARAM.update({LIGHTNING_INDEXER: "actual_seq_lengths_key", QUANT_LIGHTNING_INDEXER: "actual_seq_lengths_key",
                         SFA: "actual_seq_lengths_kv", KV_QUANT_SFA: "actual_seq_lengths_kv"})
"""Where each operator takes the per-batch KV lengths; ATB's paged attention calls them ``context_lens``."""
FA_LENGTHS = ("actual_seq_qlen", "actual_seq_kvlen")
"""Where FA takes its query and KV lengths: cumulative, and read only with the TND layout
(docs/operators/fusion_attention.md#fa-c5), hence apart from the per-batch tables above."""
QUERY_LENGTHS_PARAM.update(dict.fromkeys(SPARSE_ATTENTION, "actual_seq_lengths_query"))
PAGED_OPERATORS = FIA | {IFA} | ATB_PAGED | SPARSE_ATTENTION
"""Operators that read the KV cache through an int32 ``block_table`` (docs/operators/fused_infer_attention.md#fia-c34,
docs/operators/atb_attention.md#atb-c2, docs/operators/sparse_and_mla.md#smla-c16, #smla-c32; op-plugin's qli md:56,
kqsfa md:55)."""

QUERY_LAYOUT_PARAM = dict.fromkeys(SPARSE_ATTENTION, "layout_query")
KV_LAYOUT_PARAM = {LIGHTNING_INDEXER: "layout_key", QUANT_LIGHTNING_INDEXER: "layout_key", SFA: "layout_kv",
                   KV_QUANT_SFA: "layout_kv"}
"""The sparse-attention kernels give the query and the key their own layout parameter; a TND side needs its
(cumulative) length argument (docs/operators/sparse_and_mla.md#smla-c15, #smla-c32; op-plugin's qli md:52-54,
kqsfa md:57-59)."""
SPARSE_ATTENTION_LAYOUTS: dict[str, frozenset[str]] = {
    "layout_query": frozenset({"BSND", "TND"}),
    "layout_key": frozenset({"BSND", "TND", "PA_BSND"}),
    "layout_kv": frozenset({"BSND", "TND", "PA_BSND"}),
}
"""Accepted values of those layout parameters (docs/operators/sparse_and_mla.md#smla-c17, #smla-c31; op-plugin's
qli md:58-60, kqsfa md:63-65)."""
V1_TO_V2: dict[str, str] = {
    "actual_seq_lengths": "actual_seq_qlen",
    "actual_seq_lengths_kv": "actual_seq_kvlen",
    "quant_scale1": "quant_scale_p",
    "quant_scale2": "quant_scale_out",
    "quant_offset2": "quant_offset_out",
    "key_antiquant_scale": "dequant_scale_key",
    "key_antiquant_offset": "dequant_offset_key",
    "value_antiquant_scale": "dequant_scale_value",
    "value_antiquant_offset": "dequant_offset_value",
    "key_rope_antiquant_scale": "dequant_scale_key_rope",
    "num_heads": "num_query_heads",
    "scale": "softmax_scale",
    "key_antiquant_mode": "key_quant_mode",
    "value_antiquant_mode": "value_quant_mode",
    "softmax_lse_flag": "return_softmax_lse",
}
"""FIA v1 keyword -> its FIA v2 spelling (docs/operators/fused_infer_attention.md#fia-v1-v2)."""
V2_TO_V1: dict[str, str] = {v2: v1 for v1, v2 in V1_TO_V2.items()}

IFA_PFA_SPELLINGS: dict[str, dict[str, str | None]] = {
    "scale_value": {FIA_V1: "scale", FIA_V2: "softmax_scale"},
    "deq_scale1": {FIA_V1: "dequant_scale1", FIA_V2: None},
    "deq_scale2": {FIA_V1: "dequant_scale2", FIA_V2: None},
}
"""IFA/PFA keyword -> the FIA v1 / v2 spelling (None: the concept does not exist in that version)."""

FIA_LAYOUTS = frozenset(
    "BSH BSND BNSD TND NTD BNSD_BSND BSH_BNSD BSND_BNSD NTD_TND BSH_NBSD BSND_NBSD BNSD_NBSD TND_NTD NSD".split()
)
LAYOUTS: dict[str, frozenset[str]] = {
    FIA_V1: FIA_LAYOUTS,
    FIA_V2: FIA_LAYOUTS,
    IFA: frozenset({"BSH", "BSND", "BNSD"}),
    PFA: frozenset({"BSH", "BSND", "BNSD", "BNSD_BSND", "TND"}),
}
"""Accepted ``input_layout`` values, case-sensitive (docs/operators/fused_infer_attention.md#fia-c1;
incre_prompt_flash_attention.md#ifa-c1 and #pfa-c1)."""
FA_LAYOUTS = frozenset({"BSH", "SBH", "BNSD", "BSND", "TND"})
"""npu_fusion_attention layouts; that operator upper-cases its argument first
(docs/operators/fusion_attention.md#fa-c1)."""
LENGTH_LAYOUTS = frozenset({"TND", "NTD", "TND_NTD", "NTD_TND"})
"""Layouts that need both the query and the KV length arguments."""

SPARSE_MODES: dict[str, frozenset[int]] = {
    FIA_V1: frozenset(range(5)),
    FIA_V2: frozenset(range(5)),
    PFA: frozenset(range(5)),
    **dict.fromkeys(SPARSE_ATTENTION, frozenset({0, 3})),
}
"""Accepted ``sparse_mode`` values: FIA and PFA 0-4 (docs/operators/fused_infer_attention.md#fia-c23), the
sparse-attention kernels 0 (no causal limit) and 3 (bottom-right causal) (docs/operators/sparse_and_mla.md#smla-c18,
#smla-c21, #smla-c27; op-plugin's kqsfa md:67-69)."""
ROPE_ONLY_SPARSE_MODES = frozenset({9})
"""FIA's treeMask mode, valid only with query_rope and key_rope (docs/operators/fused_infer_attention.md#fia-c24)."""
MAX_GQA_RATIO = 64
