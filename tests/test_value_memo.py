"""The value follower remembers what it found for an expression (``kvlint.analysis.context.values``) and gives
it again to the next argument or call site that reaches the same expression. A remembered answer must be
the one a fresh evaluation gives: for every argument of every operator call, the values found after the
module's other arguments were evaluated (the memory full) are those found with the memory empty; in the
rule fixtures, and in a module whose arguments share long chains of assignments and helpers, evaluated in
both orders under the default limits and under limits that cut the longer chains short (where a remembered
answer must not be used deeper than the depth left, nor stand for steps a fresh evaluation would not have
left). And it is used: what every call site reaches is evaluated once."""

from __future__ import annotations

import ast
import textwrap
from dataclasses import replace
from pathlib import Path

import pytest
from astroid import nodes

from kvlint.analysis import context, tensor_semantics
from kvlint.analysis.callsite import call_site
from kvlint.analysis.context import Context
from kvlint.analysis.evaluate import values
from kvlint.analysis.expressions import HANDLERS
from kvlint.analysis.facts import Alt
from kvlint.analysis.memo import forget
from kvlint.analysis.walk import nodes_of
from kvlint.checks.building import build_tree
from tests.fixture_files import fixture_files

FIXTURES = [path for path in fixture_files() if path.parent.name != "KVL000"]


def _shown(alts: list[Alt]) -> list[tuple[object, ...]]:
    """Alternatives compared as values: a tuple's elements by their expressions (each carries the context it
    was found in, which a fresh evaluation builds anew)."""
    return [(replace(alt.value, items=None), tuple(e for e, _ in alt.value.items or ()), alt.path) for alt in alts]


def _arguments(module: nodes.Module) -> list[nodes.NodeNG]:
    found = []
    for call in nodes_of(module, nodes.Call):
        site = call_site(call)
        if site is not None:
            found += [arg for param in site[0].operator.params if (arg := site[0].argument(param.name)) is not None]
    return found


Shown = list[list[tuple[object, ...]]]


def _limit(monkeypatch: pytest.MonkeyPatch, steps: int, depth: int) -> None:
    """The steps and the depth one evaluation may take."""
    monkeypatch.setattr(context, "MAX_STEPS", steps)
    monkeypatch.setattr(context, "MAX_DEPTH", depth)
    monkeypatch.setattr(tensor_semantics, "MAX_DEPTH", depth)


def _remembered_and_fresh(source: str, path: str, backwards: bool = False) -> tuple[Shown, Shown]:
    module = build_tree(source, path, ast.parse(source))
    try:
        arguments = _arguments(module)[::-1 if backwards else 1]
        remembered = [_shown(values(argument)) for argument in arguments]
        fresh = []
        for argument in arguments:
            forget()
            fresh.append(_shown(values(argument)))
        return remembered, fresh
    finally:
        forget()


@pytest.mark.parametrize("path", FIXTURES, ids=lambda path: f"{path.parent.name}/{path.name}")
@pytest.mark.parametrize("steps, depth", [(context.MAX_STEPS, context.MAX_DEPTH), (12, 5)])
def test_a_remembered_value_is_the_value_a_fresh_evaluation_finds(
        path: Path, steps: int, depth: int, monkeypatch: pytest.MonkeyPatch) -> None:
    _limit(monkeypatch, steps, depth)
    remembered, fresh = _remembered_and_fresh(path.read_bytes().decode("utf-8", "replace"), str(path))
    assert remembered == fresh


SHARED_CHAINS = textwrap.dedent("""\
    import torch
    import torch_npu


    def helper(t, c):
        return t.transpose(1, 2) if c else t.contiguous()


    class Attention:
        def __init__(self, heads, dim, causal):
            self.heads = heads
            self.dim = dim
            self.width = self.dim * self.heads
            self.scale = self.dim ** -0.5
            self.causal = causal

        def forward(self, q, k, v, mask, b, s, c1, c2, c3):
            a0 = q.view(b, s, self.heads, self.dim)
            a1 = helper(a0, c1)
            a2 = a1.contiguous() if c2 else a1.float()
            a3 = helper(a2, c3)
            a4 = a3.view(b, self.heads, s, self.dim)
            a5 = a4.contiguous() if c1 else a4.half()
            a6 = helper(a5, c2)
            a7 = a6.contiguous() if c3 else a6.float()
            m0 = mask if self.causal else None
            m1 = m0.bool() if c1 else m0
            first = torch_npu.npu_fused_infer_attention_score(a7, k, v, num_heads=self.heads, scale=self.scale,
                                                              atten_mask=m1, input_layout="BNSD")
            second = torch_npu.npu_fused_infer_attention_score(a3, a5, a7, num_heads=self.width, scale=self.scale,
                                                               atten_mask=m0, input_layout="BSND")
            third = torch_npu.npu_fused_infer_attention_score(a0, a1, a2, num_heads=self.heads, atten_mask=mask)
            b0 = q.view(b, s, self.heads, self.dim).to(torch.float16)
            b1 = b0.contiguous()
            b2 = b1.contiguous()
            b3 = b2.contiguous()
            b4 = b3.contiguous()
            fourth = torch_npu.npu_fused_infer_attention_score(b4, k, v, num_heads=self.heads, scale=self.scale)
            fifth = torch_npu.npu_fused_infer_attention_score(b4.contiguous().contiguous().contiguous(), k, v,
                                                              num_heads=self.heads)
            sixth = torch_npu.npu_fused_infer_attention_score(b4 + a7, k, v, num_heads=self.heads)
            return first, second, third, fourth, fifth, sixth
""")


@pytest.mark.parametrize("backwards", [False, True], ids=["in order", "backwards"])
@pytest.mark.parametrize("steps, depth", [(context.MAX_STEPS, context.MAX_DEPTH), (45, 12), (101, 16)])
def test_arguments_sharing_long_chains_find_what_they_find_alone_within_any_limits(
        steps: int, depth: int, backwards: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    _limit(monkeypatch, steps, depth)
    remembered, fresh = _remembered_and_fresh(SHARED_CHAINS, "shared_chains.py", backwards)
    assert remembered == fresh


def _remembered(steps: int = 10, depth: int = 2, deepest: int = 6, visited: frozenset[int] = frozenset({1, 2})
                ) -> context._Remembered:
    return context._Remembered(alts=(), bindings=(), steps=steps, depth=depth, deepest=deepest, visited=visited)


def test_a_remembered_value_stands_for_its_steps_only_where_the_evaluation_has_them_left() -> None:
    at_root = Context(HANDLERS)
    assert _remembered(steps=10).holds_in(at_root, steps_before=context.MAX_STEPS - 10)
    assert not _remembered(steps=10).holds_in(at_root, steps_before=context.MAX_STEPS - 9)


def test_a_remembered_value_is_not_used_deeper_than_its_deepest_expression_allows() -> None:
    room = context.MAX_DEPTH - 6
    assert _remembered(depth=2, deepest=6).holds_in(Context(HANDLERS, depth=2 + room), steps_before=0)
    assert not _remembered(depth=2, deepest=6).holds_in(Context(HANDLERS, depth=3 + room), steps_before=0)
    assert _remembered(depth=2, deepest=6).holds_in(Context(HANDLERS, depth=0), steps_before=0)


def test_a_remembered_value_is_not_used_inside_the_evaluation_of_an_expression_it_reached() -> None:
    """A fresh evaluation would stop at that expression (a cycle) where the remembered one went on."""
    assert _remembered(visited=frozenset({1, 2})).holds_in(Context(HANDLERS, active=frozenset({3})), steps_before=0)
    assert not _remembered(visited=frozenset({1, 2})).holds_in(Context(HANDLERS, active=frozenset({2})),
                                                               steps_before=0)


def test_a_remembered_value_is_used_only_with_the_arguments_it_was_found_with() -> None:
    bound = ((None, {}),)
    assert not _remembered().holds_in(Context(HANDLERS, bindings=bound), steps_before=0)


def _calls_reading_one_mask(calls: int) -> str:
    lines = ["import torch", "import torch_npu", "", "", "def forward(q, k, v):",
             "    mask = torch.ones(2048, 2048, dtype=torch.bool)", "    mask = mask.triu(1)"]
    lines += [f"    o{i} = torch_npu.npu_fused_infer_attention_score(q, k, v, num_heads=8, atten_mask=mask, "
              "sparse_mode=3, input_layout='BNSD')" for i in range(calls)]
    return "\n".join([*lines, "    return q"]) + "\n"


@pytest.mark.parametrize("calls", [5, 20])
def test_what_every_call_site_reaches_is_evaluated_once(monkeypatch: pytest.MonkeyPatch, calls: int) -> None:
    """The memory is used, not only right: the mask that every call reads through the same chain is built
    once, not once per call (its answers would be the same either way; only the cost tells them apart)."""
    built = []
    call = HANDLERS[nodes.Call]

    def counted(expr: nodes.Call, path: object, within: Context) -> list[Alt]:
        if isinstance(expr.func, nodes.Attribute) and expr.func.attrname == "ones":
            built.append(expr)
        return call(expr, path, within)

    monkeypatch.setitem(HANDLERS, nodes.Call, counted)
    module = build_tree(_calls_reading_one_mask(calls), "f.py")
    try:
        sites = [found[0] for found in map(call_site, nodes_of(module, nodes.Call)) if found is not None]
        masks = [site.values("atten_mask") for site in sites]
    finally:
        forget()
    assert len(masks) == calls and all(m and m[0].value.dtype == "bool" for m in masks)
    assert len(built) == 1
