"""A bare callee stands for an operator only through an import or an assignment, and every such form is
resolved: the engine does not resolve the other bare callees (``len``, the module's own functions and
classes, names imported from elsewhere), so these are the forms that must keep working."""

from __future__ import annotations

import pytest

from kvlint.checks.engine import lint_source

CALL = "(q, k, v, num_heads=8, scale=0.125)"
"""FIA v2 with v1's ``scale``: KVL102 wherever the callee is the operator."""

REACHES_THE_OPERATOR = {
    "from-import under another name": "from torch_npu import npu_fused_infer_attention_score_v2 as fa\n\n\n"
                                      "def decode(q, k, v):\n    return fa" + CALL + "\n",
    "assignment in the function": "import torch_npu\n\n\ndef decode(q, k, v):\n"
                                  "    fa = torch_npu.npu_fused_infer_attention_score_v2\n    return fa" + CALL + "\n",
    "module-level annotated assignment": "import torch_npu\n\n"
                                         "fa: object = torch_npu.npu_fused_infer_attention_score_v2\n\n\n"
                                         "def decode(q, k, v):\n    return fa" + CALL + "\n",
    "global set by another function": "import torch_npu\n\nfa = None\n\n\ndef setup():\n    global fa\n"
                                      "    fa = torch_npu.npu_fused_infer_attention_score_v2\n\n\n"
                                      "def decode(q, k, v):\n    return fa" + CALL + "\n",
    "overload imported by name": "from torch.ops.npu.npu_fused_infer_attention_score_v2 import default as fa\n\n\n"
                                 "def decode(q, k, v):\n    return fa" + CALL + "\n",
}


@pytest.mark.parametrize("form", REACHES_THE_OPERATOR)
def test_a_bare_callee_bound_to_the_operator_is_checked(form: str) -> None:
    source = REACHES_THE_OPERATOR[form]
    assert "KVL102" in {finding.code for finding in lint_source(source, "m.py")}, form


NEVER_THE_OPERATOR = {
    "the module's own function": "import torch_npu\n\n\ndef fa(q, k, v, **kw):\n    return q\n\n\n"
                                 "def decode(q, k, v):\n    return fa" + CALL + "\n",
    "a name imported from elsewhere": "import torch_npu\nfrom mylib.attention import fa\n\n\n"
                                      "def decode(q, k, v):\n    return fa" + CALL + "\n",
    "a parameter": "import torch_npu\n\n\ndef decode(fa, q, k, v):\n    return fa" + CALL + "\n",
}


@pytest.mark.parametrize("form", NEVER_THE_OPERATOR)
def test_a_bare_callee_the_code_does_not_bind_to_the_operator_is_not(form: str) -> None:
    assert lint_source(NEVER_THE_OPERATOR[form], "m.py") == []
