"""Linear cost in the size of one function (issue 25): the work done per call site does not grow with the
number of call sites, counted structurally (how often the expensive steps run), not timed."""

from __future__ import annotations

import pytest
from astroid import nodes

from kvlint.analysis import flow
from kvlint.analysis.memo import forget
from kvlint.analysis.walk import nodes_of
from kvlint.checks.engine import build_tree, lint_source


def _uses_after_statements(count: int) -> str:
    """One function: ``count`` statements that do not bind ``q``, each followed by a read of ``q``."""
    lines = ["def forward(q):"]
    for i in range(count):
        lines += [f"    a_{i} = {i}", "    use(q)"]
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("count", [50, 200])
def test_reaching_definitions_look_only_at_the_statements_that_bind_the_name(monkeypatch, count):
    """Before, every read of a parameter searched every statement before it: n(n+1)/2 statements."""
    seen = []
    search = flow._search_statement
    monkeypatch.setattr(flow, "_search_statement", lambda *a: seen.append(a[1]) or search(*a))
    module = build_tree(_uses_after_statements(count), "f.py")
    try:
        reads = [n for n in nodes_of(module, nodes.Name) if n.name == "q"]
        answers = [flow.reaching_definitions("q", read) for read in reads]
    finally:
        forget()
    assert len(reads) == count
    assert all(isinstance(answer[0][0], flow.Param) for answer in answers)
    assert len(seen) <= 2 * count


def _renames(count: int) -> str:
    """``count`` FIA _v2 calls keeping v1's ``scale`` (KVL102, fixable) in one function."""
    lines = ["import torch_npu", "", "", "def forward(q, k, v):"]
    lines += [f"    o_{i} = torch_npu.npu_fused_infer_attention_score_v2(q, k, v, num_query_heads=8, scale=0.1)"
              for i in range(count)]
    return "\n".join(lines + ["    return q"]) + "\n"


@pytest.mark.parametrize("count", [10, 40])
def test_the_fix_planner_resolves_each_call_site_once(monkeypatch, count):
    """The ``[*]`` marks: each KVL102 finding used to resolve every call site of the module again."""
    pytest.importorskip("libcst")
    from kvlint.fix import planner
    from kvlint.fix.rewrite import fix_source

    source = _renames(count)
    findings = [f for f in lint_source(source, "f.py") if f.code == "KVL102"]
    resolved = []
    call_site = planner.call_site
    monkeypatch.setattr(planner, "call_site", lambda *a: resolved.append(a[0]) or call_site(*a))
    result = fix_source(source, findings, "f.py")
    assert len(findings) == count and len(result.applied) == count
    assert len(resolved) == count


def _module_of_functions(functions: int, fixable_in: int) -> str:
    """``functions`` functions of two operator calls; only function ``fixable_in`` keeps v1's ``scale``
    (KVL102, fixable), the others pass a dict of keywords (not fixable) or the right names."""
    lines = ["import torch", "import torch_npu", ""]
    for index in range(functions):
        keyword = "scale" if index == fixable_in else "softmax_scale"
        lines += ["", "@torch.no_grad()", f"def layer_{index}(q, k, v):", f'    """Layer {index}."""',
                  "    out, _ = torch_npu.npu_fused_infer_attention_score_v2(q, k, v, num_query_heads=8, "
                  f"{keyword}=0.1)",
                  "    table = torch.arange(16).view(1, 16)",
                  "    return torch_npu.npu_incre_flash_attention(out, k, v, num_heads=8, block_table=table,",
                  "                                               block_size=128, actual_seq_lengths=[1])"]
    return "\n".join(lines) + "\n"


def test_the_fix_marks_resolve_only_the_functions_that_hold_a_finding(monkeypatch):
    """The ``[*]`` marks of one finding in a module of 30 functions: the call sites of its function are
    resolved, libcst reads the other functions as one-line bindings of their names, and the marks are those of the full
    planner (the KVL301 tables of every function are marked too: each is a finding of its own function)."""
    pytest.importorskip("libcst")
    from kvlint.fix import planner
    from kvlint.fix.rewrite import fix_source

    source = _module_of_functions(30, fixable_in=17)
    findings = lint_source(source, "f.py")
    assert [f.code for f in findings].count("KVL102") == 1 and [f.code for f in findings].count("KVL301") == 30
    full = fix_source(source, findings, "f.py")
    one = [f for f in findings if f.code == "KVL102"]
    resolved = []
    call_site = planner.call_site
    monkeypatch.setattr(planner, "call_site", lambda *a: resolved.append(a[0]) or call_site(*a))
    preview = fix_source(source, one, "f.py", preview=True)
    assert preview.applied == one and preview.fixed == source
    decorator = source.splitlines().index("def layer_17(q, k, v):")  # the line before the def, counted from 1
    assert resolved and {call.lineno for call in resolved} <= set(range(decorator, decorator + 7))
    assert fix_source(source, findings, "f.py", preview=True).applied == full.applied
    assert len(full.applied) == 31


def test_an_outline_keeps_the_statements_that_hold_findings_and_binds_the_other_names():
    """libcst reads, for the ``[*]`` marks, the module's imports and other statements word for word, the
    function that holds the finding (its decorator included) and the one that declares a global, and a
    one-line binding for each other function; the finding's lines are mapped to where they went."""
    from kvlint.checks.engine import build_tree
    from kvlint.fix.planner import outline

    source = _module_of_functions(4, fixable_in=2) + "\n\ndef setter():\n    global torch\n    torch = None\n"
    findings = [f for f in lint_source(source, "f.py") if f.code == "KVL102"]
    shown = outline(source, build_tree(source, "f.py"), findings)
    lines, kept = source.splitlines(), shown.text.splitlines()
    layer_2 = lines.index("def layer_2(q, k, v):")
    assert kept[:2] == ["import torch", "import torch_npu"]
    assert kept[2:4] == ["layer_0 = None", "layer_1 = None"]
    assert kept[4:11] == lines[layer_2 - 1:layer_2 + 6]
    assert kept[11:] == ["layer_3 = None", *lines[-3:]]
    finding = findings[0]
    line, column = shown.position((finding.line, finding.column))
    assert kept[line - 1] == lines[finding.line - 1] and column == finding.column
    assert shown.position((lines.index("def layer_0(q, k, v):") + 1, 0)) is None