"""The operator catalogue: every operator of ``kvlint.catalogue.schemas`` parsed into parameters and defaults.

The schema strings are parsed once at import. Nothing here imports torch or torch_npu.
Family tables (which operator is FIA v1, which parameter names are renames of which) are facts from
``docs/operators/fused_infer_attention.md#fia-v1-v2`` and ``#fia-family``.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass

from kvlint.catalogue.schemas import SCHEMAS

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
_PARAM = re.compile(r"^(?P<type>.+?)\s+(?P<name>\w+)(?:=(?P<default>.+))?$")


def _split_top_level(text: str) -> list[str]:
    """Split on commas that are not inside brackets or parentheses."""
    parts, depth, current = [], 0, []
    for char in text:
        if char in "([":
            depth += 1
        elif char in ")]":
            depth -= 1
        if char == "," and depth == 0:
            parts.append("".join(current).strip())
            current = []
        else:
            current.append(char)
    if "".join(current).strip():
        parts.append("".join(current).strip())
    return parts


def _parse_default(text: str) -> object:
    if text == "None":
        return None
    if text in ("True", "False"):
        return text == "True"
    return ast.literal_eval(text)


def parse_schema(schema: str) -> Operator:
    """Parse one registered schema string (``name.overload(args) -> returns``)."""
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
        params.append(Param(part["name"], part["type"], default, kw_only))
    returns = match["returns"].strip()
    if returns.startswith("("):
        returns = returns[1:-1]
    return Operator(
        name=match["name"],
        overload=match["overload"] or "default",
        params=tuple(params),
        returns=tuple(_split_top_level(returns)),
        schema=schema,
    )


OVERLOADS: dict[tuple[str, str], Operator] = {
    (op.name, op.overload): op for op in map(parse_schema, SCHEMAS)
}
OPERATORS: dict[str, Operator] = {
    name: op for (name, overload), op in OVERLOADS.items() if overload == "default"
}
"""Operator name -> its ``.default`` overload."""


def lookup(name: str, overload: str = "default") -> Operator | None:
    return OVERLOADS.get((name, overload))


# Families (docs/operators/fused_infer_attention.md#fia-family).
FIA_V1 = "npu_fused_infer_attention_score"
FIA_V2 = "npu_fused_infer_attention_score_v2"
IFA = "npu_incre_flash_attention"
PFA = "npu_prompt_flash_attention"
FA = "npu_fusion_attention"
FIA = frozenset({FIA_V1, FIA_V2})
INFERENCE_ATTENTION = frozenset({FIA_V1, FIA_V2, IFA, PFA})
"""The inference attention operators: three positional parameters, kw-only rest, scale default 1.0."""
OUT_OF_PLACE_SCATTER = frozenset({"scatter_update", "npu_scatter_nd_update"})
KV_RMSNORM_OUTPUTS = {
    "npu_kv_rmsnorm_rope_cache": 4,
    "npu_kv_rmsnorm_rope_cache_v2": 2,
    "npu_kv_rmsnorm_rope_cache_v2_functional": 4,
}

SCALE_PARAM = {FIA_V1: "scale", FIA_V2: "softmax_scale", IFA: "scale_value", PFA: "scale_value"}
NUM_HEADS_PARAM = {FIA_V1: "num_heads", FIA_V2: "num_query_heads", IFA: "num_heads", PFA: "num_heads"}
QUERY_LENGTHS_PARAM = {FIA_V1: "actual_seq_lengths", FIA_V2: "actual_seq_qlen", PFA: "actual_seq_lengths"}
KV_LENGTHS_PARAM = {
    FIA_V1: "actual_seq_lengths_kv",
    FIA_V2: "actual_seq_kvlen",
    IFA: "actual_seq_lengths",
    PFA: "actual_seq_lengths_kv",
}

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
}
ROPE_ONLY_SPARSE_MODES = frozenset({9})
"""FIA's treeMask mode, valid only with query_rope and key_rope (docs/operators/fused_infer_attention.md#fia-c24)."""
MAX_GQA_RATIO = 64
