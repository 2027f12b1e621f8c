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
