"""Linear cost in the size of one function (issue 25): the work done per call site does not grow with the
number of call sites, counted structurally (how often the expensive steps run), not timed."""

from __future__ import annotations

import pytest
from astroid import nodes

from kvlint.analysis import flow
from kvlint.analysis.memo import forget
from kvlint.analysis.walk import nodes_of
from kvlint.checks.building import build_tree
from kvlint.checks.engine import lint_source


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


def _guarded_sections(count: int) -> str:
    """One function of ``count`` sections, as unrolled code writes them: a branch that rebinds ``q`` on a
    condition every section tests, a read of ``q``, and a guard that returns on a condition of its own."""
    lines = ["def forward(q, meta):"]
    for i in range(count):
        lines += ["    if meta.is_prefill:", "        q = q + 1", "    use(q)", f"    if meta.done_{i}:",
                  "        return None"]
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("count", [20, 80])
def test_a_read_after_many_guards_searches_what_the_read_before_them_searched_once(monkeypatch, count):
    """On the path that skips every rebinding, the search for ``q`` goes back to the parameter. Each section's
    guard, recorded on that path, made it a new path for every section: every read searched all the sections
    before it again, count * count / 2 statements."""
    seen = []
    search = flow._search_statement
    monkeypatch.setattr(flow, "_search_statement", lambda *a: seen.append(a[1]) or search(*a))
    module = build_tree(_guarded_sections(count), "f.py")
    try:
        reads = [n for n in nodes_of(module, nodes.Name) if n.name == "q" and isinstance(n.parent, nodes.Call)]
        answers = [flow.reaching_definitions("q", read) for read in reads]
    finally:
        forget()
    assert len(reads) == count
    assert all(any(isinstance(definition, flow.Param) for definition, _ in answer) for answer in answers)
    assert len(seen) <= 4 * count


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
    from kvlint.checks.building import build_tree
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


def _layers_importing_torch_npu(count: int) -> str:
    """``count`` modules one after the other, as generated code concatenates them: each imports ``torch_npu``
    in ``try`` (``None`` in its ``except``) and ``field``, and defines a dataclass and a layer calling FIA
    ``_v2`` with v1's ``scale`` (KVL102)."""
    lines = []
    for i in range(count):
        lines += ["try:", "    import torch_npu", "except ImportError:", "    torch_npu = None",
                  "from dataclasses import dataclass, field", "",
                  "@dataclass", f"class Config{i}:", "    heads: int = field(default=8)", "",
                  f"def layer_{i}(q, k, v):",
                  "    return torch_npu.npu_fused_infer_attention_score_v2(q, k, v, num_query_heads=8, scale=0.1)",
                  ""]
    return "\n".join(lines)


@pytest.mark.parametrize("count", [10, 40])
def test_a_name_the_module_binds_at_every_layer_is_resolved_through_its_bindings_once(monkeypatch, count):
    """Each use of ``torch_npu`` went through all of the module's ``count`` imports and ``None``s again:
    3 * count * count bindings resolved for ``count`` uses."""
    from kvlint.analysis import names

    resolved = []
    binding_names = names._binding_names
    monkeypatch.setattr(names, "_binding_names", lambda *a: resolved.append(a[0]) or binding_names(*a))
    findings = lint_source(_layers_importing_torch_npu(count), "f.py")
    assert [f.code for f in findings] == ["KVL102"] * count
    assert len(resolved) <= 4 * count


def test_a_name_bound_none_and_by_an_assignment_stands_for_both():
    """The bindings that need no resolving are shared; an assignment of another value is still resolved
    at the use, and a binding the code does not prove still leaves the name unresolved."""
    from kvlint.analysis.names import qualified_names

    source = ("import torch\n"
              "try:\n    import torch_npu as ops\nexcept ImportError:\n    ops = None\n"
              "if FAST:\n    ops = fast_ops\n"
              "def f():\n    return ops\n"
              "alias = torch.nn\n"
              "def g():\n    return alias\n")
    module = build_tree(source, "f.py")
    try:
        returned = [n.value for n in nodes_of(module, nodes.Return)]
        assert qualified_names(returned[0]) is None  # fast_ops is bound nowhere
        assert qualified_names(returned[1]) == {"torch.nn"}
    finally:
        forget()
    module = build_tree(source.replace("fast_ops", "torch.ops.npu"), "f.py")
    try:
        assert qualified_names(nodes_of(module, nodes.Return)[0].value) == {"torch_npu", "None", "torch.ops.npu"}
    finally:
        forget()


@pytest.mark.parametrize("count", [10, 40])
def test_a_call_of_a_name_no_scope_defines_with_def_makes_no_lookup(monkeypatch, count):
    """``field(default=8)`` in a class body: astroid compared every earlier ``from dataclasses import field``
    of the module with the class's line, for each class."""
    from kvlint.analysis import names

    looked_up = []
    lookup = names.lookup
    monkeypatch.setattr(names, "lookup", lambda node: looked_up.append(node.name) or lookup(node))
    lint_source(_layers_importing_torch_npu(count), "f.py")
    assert "field" not in looked_up


def test_a_call_reaches_the_function_the_module_defines_and_not_a_builtin_or_an_import():
    from kvlint.analysis.names import called_function

    source = ("from dataclasses import field\n"
              "def helper():\n    return 1\n"
              "class C:\n    a = helper()\n    b = field(default=1)\n    c = len([])\n"
              "    def m(self):\n        def helper():\n            return 2\n        return helper()\n")
    module = build_tree(source, "f.py")
    try:
        class_level, field_call, len_call, nested = nodes_of(module, nodes.Call)
        assert called_function(class_level).lineno == 2
        assert called_function(nested).lineno == 9
        assert called_function(field_call) is None
        assert called_function(len_call) is None
    finally:
        forget()
