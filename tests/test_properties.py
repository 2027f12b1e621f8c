"""Property-based tests of the engine: on any program it never raises, and every finding points inside the file.

Two sources of programs:

- hypothesmith: syntactically valid Python drawn from the grammar (odd, dense and deep), with ``torch_npu``
  mentioned so that the text gate lets every example through to the parser and the rules;
- operator calls drawn from the catalogue (``kvlint.catalogue.operators.OPERATORS``): every operator, reached through
  each resolution form, with random positional counts and random subsets of keywords (real parameter names,
  the other version's names, other operators' names, made-up names) bound to random values (layouts,
  sparse modes, head counts, scales, names, lists), sometimes through a ``**dict``. These make the rules
  fire; on them the engine must also agree with itself on pylint's tree, and each keyword the operator's
  schema does not have must be reported (KVL101 or KVL102) on that keyword's line.

Examples are derandomised (the same every run, so a red build means a real bug); set
``HYPOTHESIS_PROFILE=explore`` to search with fresh random examples.
"""

from __future__ import annotations

import keyword
import os
import re

import hypothesmith
from astroid import MANAGER
from astroid.builder import AstroidBuilder
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvlint.analysis.finding import Finding
from kvlint.catalogue.operators import LAYOUTS, NAMESPACES, OPERATORS, V1_TO_V2
from kvlint.catalogue.rules import RULES
from kvlint.checks.engine import analyze, lint_source

settings.register_profile(
    "ci", derandomize=True, deadline=None, database=None, print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
)
settings.register_profile(
    "explore", deadline=None, database=None, print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
)
PROFILE = settings.get_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
NEWLINE = re.compile(r"\r\n|\r|\n")


def python_lines(source: str) -> list[str]:
    """The file's lines as Python numbers them (universal newlines; no trailing empty line)."""
    lines = NEWLINE.split(source)
    return lines[:-1] if lines and lines[-1] == "" else lines


def assert_inside(finding: Finding, source: str) -> None:
    """Line within 1..len(lines); columns within their line (ast columns count UTF-8 bytes)."""
    lines = python_lines(source) or [""]
    assert finding.code in RULES, finding
    assert 1 <= finding.line <= len(lines), (finding, len(lines))
    assert finding.line <= finding.end_line <= len(lines), (finding, len(lines))
    assert 0 <= finding.column <= len(lines[finding.line - 1].encode("utf-8")), finding
    assert 0 <= finding.end_column <= len(lines[finding.end_line - 1].encode("utf-8")), finding
    if finding.line == finding.end_line:
        assert finding.column <= finding.end_column, finding


# --- any valid program ------------------------------------------------------------------------------------

@settings(PROFILE, max_examples=60)
@given(program=hypothesmith.from_grammar())
def test_engine_never_raises_on_valid_programs_and_findings_stay_inside(program: str) -> None:
    source = "import torch_npu\n" + program
    for finding in lint_source(source, "generated.py"):
        assert_inside(finding, source)


@settings(PROFILE, max_examples=60)
@given(program=hypothesmith.from_node())
def test_engine_never_raises_on_generated_syntax_trees(program: str) -> None:
    source = program + "\nimport torch_npu\n"
    for finding in lint_source(source, "generated.py"):
        assert_inside(finding, source)


@settings(PROFILE, max_examples=100)
@given(text=st.text(alphabet=st.characters(codec="utf-8"), max_size=300))
def test_engine_never_raises_on_arbitrary_text(text: str) -> None:
    """Not Python at all, or barely: at most one KVL000, inside the file."""
    source = "import torch_npu\n" + text
    findings = lint_source(source, "noise.py")
    for finding in findings:
        assert_inside(finding, source)
    assert [f.code for f in findings if f.code == "KVL000"] in ([], ["KVL000"])


# --- operator calls drawn from the catalogue ----------------------------------------------------------------

FORMS: dict[str, tuple[str, str, str]] = {
    # name: (imports, statement before the call inside the function, callee)
    "module": ("import torch_npu\n", "", "torch_npu.{op}"),
    "module-alias": ("import torch_npu as tnpu\n", "", "tnpu.{op}"),
    "from-import": ("from torch_npu import {op} as the_op\n", "", "the_op"),
    "torch-ops": ("import torch\n", "", "torch.ops.{namespace}.{op}"),
    "torch-ops-overload": ("import torch\n", "", "torch.ops.{namespace}.{op}.{overload}"),
    "torchair": ("import torchair as tng\n", "", "tng.ops.{op}"),
    "local-alias": ("import torch_npu\n", "    fa = torch_npu.{op}\n", "fa"),
    "optional-import": ("try:\n    import torch_npu\n    fa = torch_npu.{op}\nexcept ImportError:\n    fa = None\n",
                        "", "fa"),
}
ALL_PARAMETER_NAMES = sorted({p.name for op in OPERATORS.values() for p in op.params}
                             | set(V1_TO_V2) | set(V1_TO_V2.values()) | {"scale_value", "deq_scale1"})
LAYOUT_STRINGS = sorted(set().union(*LAYOUTS.values()) | {"bsnd", "BNSD ", "SBH", "TND", "NTD", "XYZ", ""})
MADE_UP = st.from_regex(r"[a-z][a-z0-9_]{0,14}", fullmatch=True).filter(lambda name: not keyword.iskeyword(name))
VALUES = st.one_of(
    st.integers(-3, 130).map(repr),
    st.floats(-4, 4, allow_nan=False, allow_infinity=False).map(repr),
    st.sampled_from(LAYOUT_STRINGS).map(repr),
    st.sampled_from(["None", "True", "False", "q", "k", "v", "mask", "lengths", "kv_len", "seq_lens",
                     "1 / math.sqrt(128)", "self_scale", "[1, 2, 3]", "(8, 8)", "[]", "-1"]),
    st.lists(st.integers(0, 4096), max_size=4).map(repr),
)


@st.composite
def operator_calls(draw: st.DrawFn) -> tuple[str, str, list[tuple[str, int]], bool]:
    """(source, operator, [(keyword, line)] passed directly, whether other arguments are hidden)."""
    op_name = draw(st.sampled_from(sorted(OPERATORS)))
    op = OPERATORS[op_name]
    forms = [form for form in sorted(FORMS) if form != "torchair" or op_name in NAMESPACES["torchair.ops"]]
    imports, setup, callee = FORMS[draw(st.sampled_from(forms))]
    callee = callee.replace("{namespace}", op.namespace).replace("{overload}", op.overload)
    positional = draw(st.integers(0, len(op.positional) + 2))
    names = draw(st.lists(st.one_of(st.sampled_from([p.name for p in op.params]),
                                    st.sampled_from(ALL_PARAMETER_NAMES), MADE_UP),
                          unique=True, max_size=8))
    values = [draw(VALUES) for _ in names]
    starred = draw(st.sampled_from(["", "*extra_args", "**extra_kwargs", "**dict_kwargs"]))
    lines = ["import math\n", imports.format(op=op_name), "\n", "\n",
             "def attend(q, k, v, mask, lengths, *extra_args, **extra_kwargs):\n"]
    lines.append(setup.format(op=op_name))
    if starred == "**dict_kwargs":
        lines.append("    dict_kwargs = dict(\n")
        hidden = draw(st.lists(MADE_UP.filter(lambda name: name not in names), unique=True, max_size=3))
        lines += [f"        {name}={draw(VALUES)},\n" for name in hidden]
        lines.append("    )\n")
    lines.append(f"    out = {callee.format(op=op_name)}(\n")
    lines += [f"        {['q', 'k', 'v', 'mask', 'lengths'][i % 5]},\n" for i in range(positional)]
    direct: list[tuple[str, int]] = []
    for name, value in zip(names, values):
        lines.append(f"        {name}={value},\n")
        direct.append((name, sum(line.count("\n") for line in lines)))
    if starred:
        lines.append(f"        {starred},\n")
    lines += ["    )\n", "    return out\n"]
    return "".join(lines), op_name, direct, bool(starred)


@settings(PROFILE, max_examples=300)
@given(call=operator_calls())
def test_operator_calls_never_raise_and_findings_stay_inside(call: tuple[str, str, list, bool]) -> None:
    source = call[0]
    for finding in lint_source(source, "model.py"):
        assert_inside(finding, source)


@settings(PROFILE, max_examples=150)
@given(call=operator_calls())
def test_operator_calls_give_the_same_findings_on_pylints_tree(call: tuple[str, str, list, bool]) -> None:
    source = call[0]
    pylint_tree = AstroidBuilder(MANAGER).string_build(source, path="model.py")
    assert lint_source(source, "model.py") == analyze(pylint_tree, "model.py")


@settings(PROFILE, max_examples=300)
@given(call=operator_calls())
def test_every_keyword_the_schema_lacks_is_reported_on_its_line(call: tuple[str, str, list, bool]) -> None:
    source, op_name, direct, _ = call
    schema = set(OPERATORS[op_name].param_names)
    reported = {(f.line, f.code) for f in lint_source(source, "model.py")}
    for name, line in direct:
        flagged = {(line, "KVL101"), (line, "KVL102")} & reported
        if name in schema:
            assert not flagged, (name, op_name, sorted(reported))
        else:
            assert flagged, (name, op_name, sorted(reported))
