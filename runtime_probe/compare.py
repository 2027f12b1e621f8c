"""Output checks of one attention call: non-finite values (KVL502) and the reference comparison (KVL501).

Compared: the inference attention operators (FIA v1/v2, IFA, PFA), ``npu_fusion_attention`` and its
``_v2`` (their first output), and the ATB attention operators (the ``out`` tensor they write), each against
the float32 reference of ``kvlint.runtime_probe.reference`` on the call's own arguments.

Tolerance per element, by output dtype: ``|out - ref| <= max(|ref|, 1) * eps`` with eps 2^-7 (fp16),
2^-6 (bf16), 1e-4 (fp32) (the ATB "single benchmark" rule, docs/semantics.md#sem-7). Rows the
reference leaves at exactly 0 are fully masked (or past the valid length); the device output there is
unspecified unless ``inner_precise`` has its row-correction bit (2), so such rows are left out.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
from kvlint.runtime_probe.live_call import LiveCall

from kvlint.catalogue.operators import ATB_FLASH, ATB_PAGED, FA, FIA_V1, FIA_V2, IFA, PFA, Operator

FA_V2 = "npu_fusion_attention_v2"
FUSION = frozenset({FA, FA_V2})
ATB_ATTENTION = (ATB_PAGED | ATB_FLASH) - {"_npu_paged_attention_get_workspace"}
"""The ATB attention operators: they write their result into ``out`` and return nothing."""
FUSION_LEADING = ("query", "key", "value", "head_num", "input_layout")

EPSILON = {torch.float16: 2.0**-7, torch.bfloat16: 2.0**-6, torch.float32: 1e-4, torch.float64: 1e-4}
ROW_CORRECTION = 2
NOT_PASSED = frozenset({"query", "key", "value", "out", "workspace"})


@dataclass(frozen=True)
class Comparison:
    max_abs_err: float
    max_rel_err: float
    """max of |out - ref| / max(|ref|, 1), the quantity held against eps."""
    tolerance: float
    worst: tuple[int, int, int] | None
    """(batch, head, token) of the largest relative error."""
    shape_problem: str | None = None

    @property
    def mismatch(self) -> bool:
        return self.shape_problem is not None or not self.max_rel_err <= self.tolerance

    def message(self, dtype: torch.dtype) -> str:
        if self.shape_problem:
            return self.shape_problem
        where = "" if self.worst is None else " at (batch {}, head {}, token {})".format(*self.worst)
        return (f"output differs from the reference: max abs error {self.max_abs_err:.3g}, max rel error "
                f"{self.max_rel_err:.3g} > {self.tolerance:.3g} ({dtype}){where}")


def compared(call: LiveCall) -> bool:
    """The operator's output is checked (KVL502) and compared with the reference (KVL501)."""
    return call.is_attention or call.name in FUSION or call.name in ATB_ATTENTION


def attention_output(result: object, call: LiveCall | None = None) -> torch.Tensor | None:
    """The attention output of an operator result: FIA returns (out, lse), npu_fusion_attention a tuple
    whose first item is the output, IFA/PFA the tensor; an ATB operator writes its ``out`` argument."""
    if call is not None and call.name in ATB_ATTENTION:
        result = call.get("out")
    if isinstance(result, (tuple, list)):
        result = result[0] if result else None
    return result if isinstance(result, torch.Tensor) else None


def nonfinite(output: torch.Tensor) -> str | None:
    """KVL502 message when the output holds NaN or Inf.

    One reduction and one scalar read per call: max |x| is NaN or Inf exactly when an element is (amax
    propagates NaN); on CPU it is also the fastest full pass over half-precision data. Elements are
    counted only once that says something is wrong.
    """
    if not output.is_floating_point() or output.numel() == 0 or math.isfinite(float(output.abs().amax())):
        return None
    nan, inf = int(torch.isnan(output).sum()), int(torch.isinf(output).sum())
    return f"output has {nan} NaN and {inf} Inf value(s) out of {output.numel()}"


def _reference_function(op: Operator) -> Callable[..., object]:
    from kvlint.runtime_probe.reference import operators as reference

    return {
        FIA_V1: reference.fused_infer_attention_score,
        FIA_V2: reference.fused_infer_attention_score_v2,
        IFA: reference.incre_flash_attention,
        PFA: reference.prompt_flash_attention,
    }[op.name]


def comparable(call: LiveCall, output: torch.Tensor | None) -> bool:
    return (
        compared(call) and call.concrete and output is not None and output.dtype in EPSILON
        and (call.geometry is not None or not call.is_attention)
    )  # fmt: skip


def reference_output(call: LiveCall) -> torch.Tensor:
    """The reference's attention output for the call's own arguments (only the non-default keywords)."""
    if call.name in FUSION:
        return _fusion_reference(call)
    if call.name in ATB_ATTENTION:
        return _atb_reference(call)
    keywords = {
        param.name: call.args[param.name]
        for param in call.op.params
        if param.name not in NOT_PASSED and _differs(call.args[param.name], param.default)
    }
    with torch.no_grad():
        result = _reference_function(call.op)(call.get("query"), call.get("key"), call.get("value"), **keywords)
    output = attention_output(result)
    if output is None:
        raise TypeError(f"the reference returned {type(result).__name__}, not a tensor")
    return output


def _fusion_reference(call: LiveCall) -> torch.Tensor:
    """npu_fusion_attention(_v2)'s reference output (its first result)."""
    from kvlint.runtime_probe.reference import operators as reference

    function = reference.fusion_attention if call.name == FA else reference.fusion_attention_v2
    keywords = {param.name: call.args[param.name] for param in call.op.params
                if param.name not in FUSION_LEADING and _differs(call.args[param.name], param.default)}  # fmt: skip
    with torch.no_grad():
        result = function(*(call.get(name) for name in FUSION_LEADING), **keywords)
    return result[0]


def _atb_reference(call: LiveCall) -> torch.Tensor:
    """An ATB operator's reference output: its CPU kernel (the reference, with the cache format read as the
    emulator reads it) run on the call's arguments, writing a fresh ``out``."""
    from kvlint.runtime_probe.emulator.attention import ATB

    out = call.get("out")
    assert isinstance(out, torch.Tensor)
    fresh = torch.zeros_like(out)
    positional = [param.name for param in call.op.positional]
    keywords = {param.name: call.args[param.name] for param in call.op.params
                if param.name not in positional and param.name != "out"}  # fmt: skip
    arguments = [fresh if name == "out" else call.get(name) for name in positional]
    if "out" not in positional:
        keywords["out"] = fresh
    with torch.no_grad():
        ATB[call.name][0](*arguments, **keywords)
    return fresh


def _differs(value: object, default: object) -> bool:
    if default is None or isinstance(value, torch.Tensor):
        return value is not None
    return type(value) is not type(default) or value != default


def _canonical(x: torch.Tensor, form: str, heads: int) -> torch.Tensor | None:
    """(B, N, S, D) view of an output in ``form`` (varlen forms give B = 1 and S = T)."""
    if form == "BSH":
        if x.dim() != 3 or heads <= 0 or x.shape[-1] % heads:
            return None
        return x.unflatten(-1, (heads, x.shape[-1] // heads)).transpose(1, 2)
    permutations = {"BSND": (0, 2, 1, 3), "BNSD": (0, 1, 2, 3), "NBSD": (1, 0, 2, 3)}
    if form in permutations:
        return x.permute(permutations[form]) if x.dim() == 4 else None
    if form == "TND":
        return x.transpose(0, 1).unsqueeze(0) if x.dim() == 3 else None
    if form in ("NTD", "NSD"):
        return x.unsqueeze(0) if x.dim() == 3 else None
    return None


def compare(call: LiveCall, output: torch.Tensor, expected: torch.Tensor) -> Comparison:
    """Element-wise comparison of the operator's output with the reference's, per the tolerance rule."""
    tolerance = EPSILON[output.dtype]
    if output.shape != expected.shape:
        problem = f"output shape {list(output.shape)} differs from the reference's {list(expected.shape)}"
        return Comparison(float("inf"), float("inf"), tolerance, None, problem)
    form, heads = _form(call, output)
    # float32 is exact enough for tolerances >= 1e-4 and, unlike float64, supported on every device
    actual = _canonical(_as_form(output.detach().float(), call), form, heads)
    reference = _canonical(_as_form(expected.detach().float(), call), form, heads)
    if actual is None or reference is None:
        actual, reference = output.detach().float().reshape(1, 1, -1, 1), expected.float().reshape(1, 1, -1, 1)
    error = (actual - reference).abs().nan_to_num(nan=float("inf"))
    relative = error / reference.abs().clamp_min(1.0)
    corrected = int(call.get("inner_precise") or 0) & ROW_CORRECTION  # type: ignore[call-overload]
    if not corrected:
        kept = (reference != 0).any(dim=-1, keepdim=True)
        error, relative = torch.where(kept, error, 0.0), torch.where(kept, relative, 0.0)
    if error.numel() == 0:
        return Comparison(0.0, 0.0, tolerance, None)
    worst = torch.unravel_index(relative.argmax(), relative.shape)
    batch, head, token = (int(i) for i in worst[:3])
    if form in ("TND", "NTD"):
        batch, token = _varlen_batch(call, token), token
    return Comparison(float(error.max()), float(relative.max()), tolerance, (batch, head, token))


def _form(call: LiveCall, output: torch.Tensor) -> tuple[str, int]:
    """The output's form (the axes' letters) and head count: the input layout's output part; for
    npu_fusion_attention its layout (SBH read as BSH); ATB's outputs are token-major ``[T, N, D]``
    (``[T, N * D]`` read as that)."""
    if call.name in ATB_ATTENTION:
        return "TND", int(call.get("num_heads"))  # type: ignore[call-overload]
    if call.name in FUSION:
        layout = str(call.get("input_layout")).upper()
        return ("BSH" if layout == "SBH" else layout), int(call.get("head_num"))  # type: ignore[call-overload]
    layout = call.layout
    return layout.partition("_")[2] or layout.partition("_")[0], call.num_heads


def _as_form(x: torch.Tensor, call: LiveCall) -> torch.Tensor:
    """An SBH output as BSH; a 2-D ATB output ``[T, N * D]`` as ``[T, N, D]``."""
    if call.name in FUSION and str(call.get("input_layout")).upper() == "SBH" and x.dim() == 3:
        return x.transpose(0, 1)
    if call.name in ATB_ATTENTION and x.dim() == 2:
        heads = int(call.get("num_heads"))  # type: ignore[call-overload]
        if heads > 0 and x.shape[1] % heads == 0:
            return x.unflatten(1, (heads, x.shape[1] // heads))
    return x


def _varlen_batch(call: LiveCall, token: int) -> int:
    """The batch entry of a packed token: from the cumulative query lengths (npu_fusion_attention's
    ``actual_seq_qlen`` too); an ATB paged decode has one token per sequence, its flash and split-fuse
    operators per-sequence ``seq_len``."""
    if call.name in ATB_ATTENTION:
        seq_len = call.get("seq_len")
        if not isinstance(seq_len, torch.Tensor):
            return token
        cumulative = seq_len.reshape(-1).to("cpu", torch.int64).cumsum(0).tolist()
    else:
        param = "actual_seq_qlen" if call.name in FUSION else call.query_lengths_param
        cumulative = call.lengths(param) or []
    return next((index for index, end in enumerate(cumulative) if token < end), 0)
