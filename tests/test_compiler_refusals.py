"""KVL000 for what CPython's compiler refuses, without compiling every file.

``ast.parse`` accepts programs the compiler refuses. The engine compiles a module only when its tree holds a
construct the compiler has a rule about (``kvlint.analysis.refusals``): these tests hold one refused program
per rule, each of which must still be one KVL000 with the compiler's message; programs built at random from
those constructs, none of which may be let through when the compiler refuses it; and the common code that must
not be sent to the compiler at all.
"""

from __future__ import annotations

import ast

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvlint.analysis.refusals import compiler_may_refuse
from kvlint.checks.building import build_tree
from kvlint.checks.engine import lint_source
from tests.test_properties import PROFILE


def _nested(opening: str, depth: int) -> str:
    """``depth`` statements, each inside the one before (``opening`` formatted with its level)."""
    return "".join("    " * i + opening.format(i=i) + "\n" for i in range(depth)) + "    " * depth + "pass\n"


def _nested_try(depth: int) -> str:
    finally_clauses = "".join("    " * i + "finally:\n" + "    " * (i + 1) + "pass\n" for i in reversed(range(depth)))
    return _nested("try:", depth) + finally_clauses


REFUSED = {
    "return at module level": "return 1\n",
    "return in a class body": "class A:\n    return 1\n",
    "yield at module level": "yield 1\n",
    "yield in a class body": "class A:\n    x = yield\n",
    "yield in a comprehension": "def f(y):\n    return [(yield x) for x in y]\n",
    "yield from in async def": "async def f():\n    yield from g()\n",
    "return value in an async generator": "async def f():\n    yield 1\n    return 2\n",
    "yield in a lambda default": "f = lambda x=(yield): 0\n",
    "await at module level": "await x\n",
    "await in def": "def f():\n    await x\n",
    "await in a lambda in async def": "async def f():\n    return lambda: await x\n",
    "async for in def": "def f():\n    async for x in y:\n        pass\n",
    "async with in def": "def f():\n    async with x:\n        pass\n",
    "async comprehension in def": "def f():\n    return [x async for x in y]\n",
    "break at module level": "break\n",
    "continue in a function": "def f():\n    continue\n",
    "break in a loop's else": "for x in y:\n    pass\nelse:\n    break\n",
    "break in a function in a loop": "for x in y:\n    def f():\n        break\n",
    "repeated keyword": "f(a=1, a=2)\n",
    "repeated class keyword": "class A(x=1, x=2):\n    pass\n",
    "repeated metaclass": "class A(metaclass=M, metaclass=N):\n    pass\n",
    "duplicate parameter": "def f(a, b, a):\n    pass\n",
    "duplicate lambda parameter": "f = lambda a, *, a: 0\n",
    "duplicate star parameter": "def f(a, *a):\n    pass\n",
    "nonlocal at module level": "nonlocal x\n",
    "nonlocal without binding": "def f():\n    nonlocal x\n",
    "global after assignment": "def f():\n    x = 1\n    global x\n",
    "parameter declared global": "def f(x):\n    global x\n",
    "star import in a function": "def f():\n    from os import *\n",
    "late __future__ import": "import os\nfrom __future__ import annotations\n",
    "unknown __future__ feature": "from __future__ import no_such_feature\n",
    "__future__ braces": "from __future__ import braces\n",
    "__future__ import after a second string": '"""The module."""\n"""More."""\nfrom __future__ import annotations\n',
    "__future__ import in a function": "def f():\n    from __future__ import annotations\n",
    "bare except before another": "try:\n    pass\nexcept:\n    pass\nexcept ValueError:\n    pass\n",
    "lone starred target": "*a = b\n",
    "two starred targets": "a, *b, *c = d\n",
    "starred return value": "def f():\n    return *a\n",
    "walrus rebinding the iteration variable": "[x := 1 for x in y]\n",
    "walrus in the comprehension iterable": "[x for x in (y := z)]\n",
    "walrus in a comprehension in a class": "class A:\n    [(y := x) for x in z]\n",
    "assigning __debug__": "__debug__ = 1\n",
    "__debug__ keyword": "f(__debug__=1)\n",
    "__debug__ parameter": "def f(__debug__):\n    pass\n",
    "unreachable match case": "match x:\n    case a:\n        pass\n    case b:\n        pass\n",
    "break in except*": "for x in y:\n    try:\n        pass\n    except* ValueError:\n        break\n",
    "21 nested loops": _nested("for x{i} in y:", 21),
    "21 with items": "with " + ", ".join(f"a{i}" for i in range(21)) + ":\n    pass\n",
    "21 nested try/finally": _nested_try(21),
}


@pytest.mark.parametrize("name", REFUSED)
def test_a_program_the_compiler_refuses_is_one_kvl000_with_its_message(name: str) -> None:
    """Whichever stage refuses it on this interpreter (the parser for ``except*`` before 3.11), the file is one
    KVL000, with CPython's own message."""
    source = "import torch_npu\n" + REFUSED[name] if "__future__" not in name else REFUSED[name] + "import torch_npu\n"
    with pytest.raises(SyntaxError) as refusal:
        compile(source, "refused.py", "exec", dont_inherit=True)
    [finding] = lint_source(source, "refused.py")
    assert finding.code == "KVL000"
    assert refusal.value.msg in finding.message


LEAVES = (
    "pass", "return", "return x", "yield x", "yield from x", "await x", "break", "continue", "global x",
    "nonlocal x", "x = 1", "(y := x)", "y = [(y := i) for i in x]", "a, *b = x", "*a, b, *c = x", "f(*x, k=1)",
    "f(k=1, k=2)", "from os import *", "from __future__ import annotations", "y = [i async for i in x]",
    "y = [await i for i in x]", "y = [(yield i) for i in x]", "y = lambda: (yield)", "y = lambda: await x",
    "def h(a, a): pass", "def h(x=(yield)): pass", "def h(x: (y := 1)): pass", "y: (yield) = 1",
    "return *x", "x = y", "import os", "y = {*x}",
)
HEADERS = ("def f(x):", "async def g(x):", "class C:", "for i in x:", "async for i in x:", "while x:", "if x:",
           "with x as y:", "async with x:", "try:")


@st.composite
def _block(draw: st.DrawFn, depth: int) -> list[str]:
    """One to three statements: leaves, or compound statements with blocks of their own."""
    lines: list[str] = []
    for _ in range(draw(st.integers(1, 3))):
        if depth == 0 or draw(st.booleans()):
            lines.append(draw(st.sampled_from(LEAVES)))
            continue
        header = draw(st.sampled_from(HEADERS))
        lines += [header, *("    " + line for line in draw(_block(depth - 1)))]
        if header == "try:":
            clauses = draw(st.sampled_from(
                (["except E:"], ["except:", "except E:"], ["finally:"], ["except E:", "else:", "finally:"])))
        elif header.endswith(" in x:") or header == "while x:":
            clauses = draw(st.sampled_from(([], ["else:"])))
        else:
            clauses = []
        for clause in clauses:
            lines += [clause, *("    " + line for line in draw(_block(depth - 1)))]
    return lines


@settings(PROFILE, max_examples=400)
@given(lines=_block(3))
def test_no_program_the_compiler_refuses_is_let_through(lines: list[str]) -> None:
    """Programs built from the constructs the compiler has rules about, in random places: at the top level,
    in functions, async functions, classes, loops and their ``else``, handlers. About half of them are
    refused; every one of those must be sent to the compiler."""
    program = "\n".join(lines) + "\n"
    tree = ast.parse(program)
    module = build_tree(program, "generated.py", tree)
    try:
        compile(tree, "generated.py", "exec", dont_inherit=True)
    except SyntaxError:
        assert compiler_may_refuse(module, program)


COMPILES = {
    "return and yield in functions": "def f(x):\n    if x:\n        return 1\n    yield x\n",
    "await, async for and async with in async def": (
        "async def f(y):\n    async with y:\n        async for x in y:\n            await x\n"
        "    return [x for x in y]\n"),
    "calls with *args and **kwargs": "def f(*args, **kwargs):\n    return g(1, *args, key=2, **kwargs)\n",
    "unpacking": "a, *b = c\nfor x, *y in z:\n    pass\nd = [*a, *b]\ne = {*a}\nf = (*a, 1)\n",
    "break and continue in loops": (
        "for x in y:\n    if x:\n        break\n    try:\n        continue\n    finally:\n        pass\n"
        "while True:\n    break\nelse:\n    pass\n"),
    "__future__ after the docstring": '"""Doc."""\nfrom __future__ import annotations\nimport os\n',
    "walrus outside comprehensions": "if (n := len(a)) > 1:\n    pass\n",
    "try with handlers": "try:\n    pass\nexcept ValueError:\n    pass\nexcept:\n    pass\nelse:\n    pass\n",
    "a class with one metaclass": "class A(B, metaclass=M):\n    x: int = 1\n",
    "lambdas and decorators": "@decorate(1)\ndef f(a, b=lambda c: c, *, d=2):\n    return a\n",
    "eight nested blocks": _nested("with open(p{i}) as f{i}:", 4) + _nested("for x{i} in y:", 4),
}


@pytest.mark.parametrize("name", COMPILES)
def test_common_code_is_not_sent_to_the_compiler(name: str) -> None:
    source = COMPILES[name]
    tree = ast.parse(source)
    compile(tree, "clean.py", "exec", dont_inherit=True)
    assert not compiler_may_refuse(build_tree(source, "clean.py", tree), source)


def test_the_callers_tree_keeps_its_docstrings_and_a_docstring_only_body_compiles() -> None:
    """flake8 hands the plugin its own ``ast`` tree, which its other plugins read afterwards, and the engine
    compiles that tree after astroid's build when the module holds a ``global``: astroid's build must not
    take the docstrings out of it (a function whose body is its docstring would then be refused)."""
    source = ('"""The module."""\nimport torch_npu\n\nHEADS = 8\n\n\n'
              'def configure():\n    """Only a docstring."""\n\n\n'
              'def set_heads(n):\n    global HEADS\n    HEADS = n\n')
    tree = ast.parse(source)
    before = ast.dump(tree)
    assert lint_source(source, "docstrings.py", parsed=tree) == []
    assert ast.dump(tree) == before
