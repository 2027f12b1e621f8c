"""Shapes and axis orders the value follower proves (kvlint.analysis.axes): what Q_S = 1 proofs (KVL202,
KVL203, KVL206, KVL304) and the layout check (KVL114) rest on."""

from __future__ import annotations

import textwrap

import pytest
from astroid import MANAGER, nodes
from astroid.builder import AstroidBuilder

from kvlint.analysis.axes import MORE, roles
from kvlint.analysis.evaluate import values


def _value(body: str):
    source = "import torch\n\n\ndef f(q, x, token, bsz, q_len):\n" + textwrap.indent(textwrap.dedent(body), "    ")
    module = AstroidBuilder(MANAGER, apply_transforms=False).string_build(source)
    ret = list(module.nodes_of_class(nodes.Return))[-1]
    [alt] = values(ret.value)
    return alt.value


@pytest.mark.parametrize("body, shape", [
    ("return q[:, :, 0:1, :]", (None, None, 1, None, MORE)),
    ("return q[:, -1:]", (None, 1, MORE)),
    ("return x.view(bsz, 1, 8, 128).transpose(1, 2)", ("bsz", 8, 1, 128)),
    ("return torch.ones(4, 6, 8)[..., 2:5]", (4, 6, 3)),
    ("return torch.ones(4, 6, 8)[0, :, None]", (6, 1, 8)),
    ("return token.unsqueeze(1)", (None, 1, MORE)),
    ("return x.view(bsz, q_len, 8, 128).permute(0, 2, 1, 3)[:, :, -1:]", ("bsz", 8, 1, 128)),
    ("return q[idx]", None),
])
def test_indexing_and_reordering_keep_what_is_known_of_a_shape(body: str, shape) -> None:
    assert _value(body).shape == shape


@pytest.mark.parametrize("body, axes", [
    ("b, n, s, d = q.shape\nreturn q", ("B", "N", "S", "D")),
    ("batch_size, num_q_heads, seq_len, head_dim = q.shape\nreturn q", ("B", "N", "S", "D")),
    ("return x.view(bsz, q_len, self.num_heads, self.head_dim).transpose(1, 2)", ("B", "N", "S", "D")),
    ("B, H, N, D = q.shape\nreturn q", ("B", "N", "S", "D")),
    ("q = x.transpose(1, 2)\nB, N, C = x.shape\nreturn q", ("B", None, None)),
    ("B, N, C = q.shape\nreturn q", ("B", None, None)),
    ("_, num_kv_heads, block_size, _ = q.shape\nreturn q", (None, "N", None, None)),
])
def test_the_axis_order_the_code_names(body: str, axes) -> None:
    assert _value(body).axes == axes


def test_n_is_tokens_in_vision_code_and_heads_beside_a_sequence_axis() -> None:
    assert roles(["B", "N", "C"]) == ("B", None, None)
    assert roles(["x", "y"]) is None
    assert roles(["b", "n", "s", "d"]) == ("B", "N", "S", "D")
    assert roles(["B", "H", "N", "D"]) == ("B", "N", "S", "D")
