"""Unit tests of value following: reaching definitions along paths (kvlint.analysis.flow) and the abstract values
that reach an expression (kvlint.analysis.evaluate)."""

from __future__ import annotations

import textwrap

import pytest

from astroid import MANAGER, nodes
from astroid.builder import AstroidBuilder

from kvlint.analysis import flow
from kvlint.analysis.evaluate import values
from kvlint.analysis.facts import ADDITIVE, CACHE, KV_REPEAT, TRIL, Value
from kvlint.analysis.flow import UNKNOWN, Param, reaching_definitions
from kvlint.checks import engine  # noqa: F401  (the readers of paths register as the engine imports them)
from tests.conftest import ROOT


def _module(source: str) -> nodes.Module:
    return AstroidBuilder(MANAGER, apply_transforms=False).string_build(textwrap.dedent(source))


def _returned(source: str) -> list[nodes.NodeNG]:
    """The elements of the last ``return a, b, ...`` of the module (or its single value)."""
    ret = list(_module(source).nodes_of_class(nodes.Return))[-1]
    return ret.value.elts if isinstance(ret.value, nodes.Tuple) else [ret.value]


def _values(expr: nodes.NodeNG) -> list[Value]:
    return [alt.value for alt in values(expr)]


def test_reaching_definition_is_the_last_one_on_the_path() -> None:
    (use,) = _returned("""
        def f(x):
            mask = 1
            mask = 2
            return mask
    """)
    [(definition, _)] = reaching_definitions("mask", use)
    assert definition.statement().value.value == 2


def test_branches_fork_and_terminating_branches_do_not_reach() -> None:
    (use,) = _returned("""
        def f(c, d, x):
            if c:
                mask = 1
            else:
                mask = 2
            if d:
                return None
            return mask
    """)
    found = reaching_definitions("mask", use)
    assert sorted(d.statement().value.value for d, _ in found) == [1, 2]
    assert all(path.taken(next(iter(path.choices))[0]) is not None for _, path in found)
    assert all(len(path.choices) == 2 for _, path in found), "the `if d: return` branch constrains the path"


def test_correlated_branches_are_one_path() -> None:
    mode, mask = _returned("""
        def f(q_len, template):
            if q_len > 1:
                mode, mask = 3, template
            else:
                mode, mask = 0, None
            if q_len <= 1:
                pass
            return mode, mask
    """)
    pairs = []
    for mode_alt in values(mode):
        for mask_alt in values(mask, mode_alt.path):
            pairs.append((mode_alt.value.const, mask_alt.value.is_none))
    assert sorted(pairs) == [(0, True), (3, False)]


def test_negated_conditions_share_a_key() -> None:
    (mask,) = _returned("""
        def f(is_prefill, template):
            mask = template if is_prefill else None
            if not is_prefill:
                return None
            return mask
    """)
    assert [v.is_none for v in _values(mask)] == [False]


def test_the_guards_between_a_binding_and_its_use_each_constrain_the_path() -> None:
    """Unrolled code puts a guard that returns every few calls: the search passes all the guards between a
    binding and the use in one step, with the same paths as one guard at a time."""
    (mask,) = _returned("""
        def f(is_prefill, done_a, done_b, template):
            mask = template if is_prefill else None
            if done_a:
                return None
            if not is_prefill:
                return None
            if done_b:
                return None
            return mask
    """)
    [(definition, path)] = reaching_definitions("mask", mask)
    assert definition.name == "mask" and len(path.choices) == 3
    assert [v.is_none for v in _values(mask)] == [False]


def test_a_guard_that_leaves_on_the_branch_the_use_is_in_leaves_no_path() -> None:
    module = _module("""
        def f(flag, other, x):
            mask = x
            if flag:
                return None
            if other:
                return None
            if flag:
                return mask
            return None
    """)
    use = next(r.value for r in module.nodes_of_class(nodes.Return) if isinstance(r.value, nodes.Name))
    assert reaching_definitions("mask", use) == []


def test_two_guards_on_one_condition_are_passed_one_by_one() -> None:
    (mask,) = _returned("""
        def f(c, d, x):
            mask = x
            if c:
                return None
            if d:
                return None
            if not c:
                pass
            else:
                return None
            return mask
    """)
    [(definition, path)] = reaching_definitions("mask", mask)
    assert definition.name == "mask" and len(path.choices) == 2


def test_passing_a_guard_nothing_reads_leaves_the_path_as_it_was() -> None:
    """Unrolled code returns under a new condition every few calls (``if meta.done_3: return out``). Every
    path that goes on past such a guard passed it the same way, and nothing reads that choice, so the search
    and the values from after the guard are those from before it, not a new set per guarded section."""
    module = _module("""
        def f(meta, q):
            mask = q
            before = mask
            if meta.done_1:
                return None
            if meta.done_2:
                return None
            after = mask
            return before, after
    """)
    before, after = (s.value for s in module.body[0].body if isinstance(s, nodes.Assign) and s.value.name == "mask")
    assert reaching_definitions("mask", before) == reaching_definitions("mask", after)
    [(_, path)] = reaching_definitions("mask", after)
    assert path.choices == frozenset()


@pytest.mark.parametrize("guard, why", [
    ("if q_len > 1:", "a query length: the decode rules read it"),
    ("if not self.is_causal:", "a causality flag: the causal rules read it"),
    ("if mask is None:", "a None test: it narrows the mask"),
    ("if mask.dtype != torch.bool:", "a dtype test: it narrows the mask"),
    ("if done:", "a parameter: a caller's argument may decide it"),
    ("if meta.done:", "tested again below"),
    ("if meta.ready:", "passed on to a callee: a branch of the callee on it is the same choice"),
])
def test_a_guard_something_reads_stays_on_the_path(guard: str, why: str) -> None:
    (mask,) = _returned(f"""
        import torch
        def f(self, meta, q_len, done, mask):
            x = mask
            {guard}
                return None
            y = 1 if meta.done else 2
            helper(meta.ready)
            return x
    """)
    [(_, path)] = reaching_definitions("x", mask)
    assert len(path.choices) == 1, why


def test_a_branch_tested_once_that_leaves_on_neither_side_stays_one_choice() -> None:
    """Only a guard's passing goes unrecorded: an ``if`` whose two branches both go on binds its names together."""
    mode, mask = _returned("""
        def f(meta, template):
            if meta.wide:
                mode = 3
                mask = template
            else:
                mode = 0
                mask = None
            return mode, mask
    """)
    assert _pairs(mode, mask) == [(0, True), (3, False)]


def test_a_guard_whose_condition_a_call_passes_on_still_rules_out_the_callees_other_branch() -> None:
    """The callee's ``masked`` is the caller's ``meta.masked``, false past the guard: mode 3 never meets the
    None mask. Had the guard gone unrecorded, that path would reach the mask's None (and a rule on mode 3 with
    no mask would speak)."""
    mode, mask = _returned("""
        def caller(meta):
            mask = None
            if meta.masked:
                return None
            return helper(mask, meta.masked)

        def helper(attn_mask, masked):
            mode = 3 if masked else 0
            return mode, attn_mask
    """)
    assert (3, True) not in _pairs(mode, mask)
    assert (0, True) in _pairs(mode, mask)


_ONE_PAIR_PER_RETURN = {
    "guard returns the pair": """
        def helper(n, causal, wide):
            if causal:
                return torch.triu(torch.ones(n, n, dtype=torch.bool), diagonal=1), 2
            return None, 0
    """,
    "guard returns no mask": """
        def helper(n, causal, wide):
            if not causal:
                return None, 0
            mask = torch.triu(torch.ones(n, n, dtype=torch.bool), diagonal=1)
            return mask, 2
    """,
    "guard inside a branch": """
        def helper(n, causal, wide):
            if wide:
                if not causal:
                    return None, 0
                return torch.triu(torch.ones(n, n, dtype=torch.bool), diagonal=1), 2
            return None, 0
    """,
}


@pytest.mark.parametrize("helper", list(_ONE_PAIR_PER_RETURN.values()), ids=list(_ONE_PAIR_PER_RETURN))
def test_names_unpacked_from_one_call_take_their_values_from_one_return(helper: str) -> None:
    """A helper returns the mask and the mode together, one pair after a guard that returns the other: the
    return past the guard is reached only when the guard's condition is false, so mode 2 never meets the None
    mask (before, the pair (2, None) reached the call, and KVL203 reported mode 2 without a mask)."""
    mask, mode = _returned("import torch\n" + textwrap.dedent(helper) + textwrap.dedent("""
        def caller(n, causal, wide):
            mask, mode = helper(n, causal, wide)
            return mask, mode
    """))
    assert _pairs(mode, mask) == [(0, True), (2, False)]


def test_a_guard_on_a_name_bound_again_says_nothing_past_the_binding() -> None:
    """``if not causal: return None``, then ``causal = n > 1``: conditions are keyed by their text, so the two
    guards on ``causal`` would rule the last return out (and a float mask returned there went unseen)."""
    (mask,) = _returned("""
        import torch

        def build(n, causal):
            if not causal:
                return None
            causal = n > 1
            if causal:
                return torch.triu(torch.ones(n, n, dtype=torch.bool), diagonal=1)
            return torch.zeros(n, n, dtype=torch.float16)

        def caller(n, causal):
            return build(n, causal)
    """)
    assert {v.dtype for v in _values(mask) if not v.is_none} == {"bool", "float16"}


def test_a_helper_with_more_returns_than_paths_is_not_walked(monkeypatch) -> None:
    """A dispatch table of returns is an unknown, found without walking it: each return's path holds every
    guard before it, so a helper of k guarded returns cost k * k steps, again for every value wanted (a
    generated helper of 1,600 returns took 6.4 s). A helper of a few returns is followed as before."""
    from kvlint.analysis import follow

    walked: list[nodes.NodeNG] = []
    branch_path = follow.branch_path

    def counting(node, frame, path):
        if isinstance(node, nodes.Return):
            walked.append(node)
        return branch_path(node, frame, path)

    monkeypatch.setattr(follow, "branch_path", counting)
    cases = "".join(f"    if op == 'k{i}':\n        return {i}\n" for i in range(flow.MAX_PATHS + 1))
    (few,) = _returned("def pick(op):\n" + cases.split("    if op == 'k3':")[0] + "    return -1\n"
                       "\ndef caller(op):\n    return pick(op)\n")
    assert sorted(v.const for v in _values(few)) == [-1, 0, 1, 2] and len(walked) == 4
    walked.clear()
    (many,) = _returned("def pick(op):\n" + cases + "    return -1\n\ndef caller(op):\n    return pick(op)\n")
    assert not any(v.known for v in _values(many)) and walked == []


def test_every_module_that_reads_the_choices_of_paths_has_registered_when_the_engine_runs() -> None:
    """flow leaves unrecorded the guards nothing reads: a module that read ``Path.choices`` without
    registering what it reads (``flow.reads_choices``), or that the engine did not import, would miss them."""
    readers = {path.relative_to(ROOT).with_suffix("").as_posix().replace("/", ".")
               for path in (ROOT / "kvlint").rglob("*.py") if ".choices" in path.read_text(encoding="utf-8")}
    assert readers == {reader.__module__ for reader in flow._READERS}
    assert readers >= {"kvlint.analysis.flow", "kvlint.analysis.follow", "kvlint.analysis.intent",
                       "kvlint.analysis.query_length"}


def test_loops_and_parameters() -> None:
    (a, b) = _returned("""
        def f(items, p):
            a = 0
            for item in items:
                a = item
            return a, p
    """)
    assert [d for d, _ in reaching_definitions("a", a)] == [UNKNOWN]
    [(definition, _)] = reaching_definitions("p", b)
    assert isinstance(definition, Param)


def test_factory_dtypes_and_shapes() -> None:
    elts = _returned("""
        import torch
        N = 2048
        def f(seq_len, fill):
            return (torch.ones(N, N), torch.arange(16).view(2, 8), torch.tensor([[0, 1], [2, 3]]),
                    torch.full((4, 4), True), torch.full((4, 4), fill), torch.zeros(1, seq_len, dtype=torch.int8),
                    torch.tensor([0.5, 1]))
    """)
    found = [_values(e)[0] for e in elts]
    assert [(v.dtype, v.shape) for v in found] == [
        ("float32", (2048, 2048)), ("int64", (2, 8)), ("int64", None), ("bool", (4, 4)), (None, (4, 4)),
        ("int8", (1, "seq_len")), ("float32", None),
    ]


def test_conversions_and_shape_methods() -> None:
    elts = _returned("""
        import torch
        def f(x, device, dtype):
            t = torch.ones(2048, 2048)
            return (t.bool(), t.to(torch.int32), t.to(device), t.to(dtype), t.to(dtype=torch.int8),
                    t.type(torch.long), t[None], t.unsqueeze(0).unsqueeze(0), t.view(torch.int32), x.int())
    """)
    found = [_values(e)[0] for e in elts]
    assert [v.dtype for v in found] == [
        "bool", "int32", "float32", None, "int8", "int64", "float32", "float32", "int32", "int32",
    ]
    assert found[6].shape == (1, 2048, 2048)
    assert found[7].shape == (1, 1, 2048, 2048)


def test_mask_traits() -> None:
    elts = _returned("""
        import torch
        def f(allowed, pad, past_key, key, n):
            tril = torch.tril(torch.ones(n, n, dtype=torch.bool))
            additive = torch.zeros(2, 8).masked_fill(pad, float("-inf"))
            hf = (1.0 - allowed) * torch.finfo(torch.float16).min
            cached = torch.cat([past_key, key], dim=2)
            repeated = key[:, :, None].expand(2, 2, 4, 8, 64).reshape(2, 8, 8, 64)
            where = torch.where(allowed, 0.0, float("-inf"))
            return tril, ~tril, tril == 0, 1 - tril.int(), additive, additive < 0, hf, cached, repeated, where
    """)
    found = [_values(e)[0] for e in elts]
    assert (found[9].dtype, ADDITIVE in found[9].traits) == ("float32", True)
    assert [TRIL in v.traits for v in found[:4]] == [True, False, False, False]
    assert [ADDITIVE in v.traits for v in found[4:7]] == [True, False, True]
    assert found[5].dtype == "bool"
    assert CACHE in found[7].traits
    assert KV_REPEAT in found[8].traits


def test_in_place_changes() -> None:
    inverted, filled = _returned("""
        import torch
        def f():
            mask = torch.tril(torch.ones(8, 8, dtype=torch.bool))
            mask.logical_not_()
            bias = torch.zeros(8, 8)
            bias[:, 4:] = float("-inf")
            return mask, bias
    """)
    assert TRIL not in _values(inverted)[0].traits
    assert ADDITIVE in _values(filled)[0].traits


def test_self_attributes_helpers_and_callers() -> None:
    elts = _returned("""
        import torch

        def build(n, dtype=torch.bool):
            return torch.triu(torch.ones(n, n, dtype=dtype), diagonal=1)

        def use(mask):
            return mask

        def caller():
            return use(torch.ones(4, dtype=torch.float16))

        class Layer(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.register_buffer("mask", build(2048))
                self.placeholder = None
                self.table = torch.arange(8).int()

            def forward(self, mask):
                return self.mask, self.placeholder, self.table, use.__name__, mask
    """)
    layer_mask, placeholder, table = (_values(e)[0] for e in elts[:3])
    assert (layer_mask.dtype, layer_mask.shape) == ("bool", (2048, 2048))
    assert not placeholder.known, "a None placeholder says nothing about the real value"
    assert table.dtype == "int32"
    module = elts[0].root()
    use_return = next(r for r in module.nodes_of_class(nodes.Return) if r.frame().name == "use")
    assert [v.dtype for v in _values(use_return.value)] == ["float16"]


def test_unknowns_stay_unknown() -> None:
    elts = _returned("""
        import torch
        from config import MAX
        def f(mask, meta):
            x = meta.attn_mask
            y = mask.to(meta.dtype)
            return x, y, torch.ones(MAX, MAX)
    """)
    x, y, ones = (_values(e)[0] for e in elts)
    assert not x.known
    assert y.dtype is None
    assert ones.shape == (None, None), "an imported constant is not a size computed at run time"


def test_callers_are_paths_and_self_attributes_follow_the_method() -> None:
    causal, key, table = _returned("""
        import torch

        def attend(k, causal):
            return causal, k

        def without_cache(k):
            return attend(k, True)

        def with_cache(past, k):
            return attend(torch.cat([past, k]), False)

        class Layer(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.table = torch.arange(8)

            def forward(self):
                self.table = self.table.int()
                causal, k = attend(None, None)
                return causal, k, self.table
    """)
    module = causal.root()
    attend_return = next(r for r in module.nodes_of_class(nodes.Return) if r.frame().name == "attend")
    flag, k = attend_return.value.elts
    pairs = {(alt.value.const, CACHE in k_alt.value.traits)
             for alt in values(flag) for k_alt in values(k, alt.path)}
    assert pairs == {(True, False), (False, True), (None, False)}, "the callers are not mixed"
    assert {v.dtype for v in _values(table)} == {"int32"}


def test_a_dtype_branch_refines_earlier_definitions_only() -> None:
    skipped, recast = _returned("""
        import torch
        def f(n):
            table = torch.arange(n)
            if table.dtype != torch.int32:
                table = table.int()
            other = torch.arange(n, dtype=torch.int32)
            if other.dtype == torch.int32:
                other = other.long()
            return table, other
    """)
    assert {v.dtype for v in _values(skipped)} == {"int32"}
    assert {v.dtype for v in _values(recast)} == {"int64"}, "an int32 table cannot skip that branch"


def _pairs(mode: nodes.NodeNG, mask: nodes.NodeNG) -> list[tuple[object, bool]]:
    """(mode constant, mask is None) for every path on which both hold."""
    return sorted({(m.value.const, k.value.is_none) for m in values(mode) for k in values(mask, m.path)},
                  key=repr)


def test_a_callers_condition_decides_the_callees_branch_on_the_parameter_it_passed() -> None:
    mode, mask = _returned("""
        def caller(template, is_causal):
            return helper(template if is_causal else None, is_causal)

        def helper(attn_mask, causal):
            if not causal:
                mode = 0
            else:
                mode = 3
            return mode, attn_mask
    """)
    assert _pairs(mode, mask) == [(0, True), (3, False)]


def test_a_constant_argument_or_default_decides_the_callees_branch() -> None:
    mode, mask = _returned("""
        def helper(attn_mask, causal=False):
            mode = 3 if causal else 0
            return mode, attn_mask

        def caller(template):
            a = helper(None)
            b = helper(template, causal=True)
    """)
    assert _pairs(mode, mask) == [(0, True), (3, False)]


def test_a_branch_on_is_none_says_what_the_parameter_is() -> None:
    mode, mask = _returned("""
        import torch

        def caller(flag):
            mask = torch.ones(2048, 2048, dtype=torch.bool) if flag else None
            return helper(mask)

        def helper(attn_mask):
            mode = 0 if attn_mask is None else 3
            return mode, attn_mask
    """)
    assert _pairs(mode, mask) == [(0, True), (3, False)]
