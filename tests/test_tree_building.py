"""The engine builds each file's astroid tree with shortcuts of its own (``kvlint.checks.building``): the tree
it gives must be the one astroid's own rebuilder gives, node for node (class, position, fields, parent,
children, locals, instance attributes), so that every rule reads the same tree in the ``kvlint`` command and
flake8 as in pylint, which builds its own."""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path

import pytest

from kvlint.checks.building import build_tree
from tests.fixture_files import fixture_files
from tests.tree_dump import astroid_own, describe

EVERY_CONTEXT = textwrap.dedent('''\
    """A module docstring."""
    from __future__ import annotations

    import os.path as osp, torch
    from torch_npu import npu_fused_infer_attention_score as fia

    LIMIT: int = 3
    counter = 0
    pair = first, (second, *rest) = [1, (2, 3, 4)]


    class Config:
        """A class docstring."""
        flag = True

        def __init__(self, heads):
            """A method docstring."""
            self.heads = heads
            self.table = {}
            self.table["k"] = heads
            del self.table["k"]


    Config.flag = False
    Config.extra: int = 1
    os.sep_seen = True


    def step(q, k, v, *args, scale=None, **kwargs):
        global counter
        counter += 1
        x = y = q
        x.add_(1)
        y[0] = 2
        y[1] += 3
        del y
        try:
            out = fia(q, k, v, num_heads=args[0], scale=scale or 1.0, **kwargs)
        except (ValueError, KeyError) as error:
            raise RuntimeError(str(error)) from error
        finally:
            pass
        lam = lambda t, *, u=1: t + u
        squares = [i * i for i in range(3) if i % 2]
        table = {key: value for key, value in kwargs.items()}
        total = sum(v for v in range(3))
        if (n := len(squares)) > 1:
            x = f"{n!r:>4} {q.shape[0]}"
        with open(osp.join("a", "b")) as handle, open("c") as other:
            handle.read(), other.read()
        for index, item in enumerate(squares):
            continue
        while False:
            break
        else:
            x = x[1:2, ::3, ...]
        assert x is not None, "x"
        return out[0], lam, table, total, -x, not x, x @ x, x if x else ~x


    async def serve(stream):
        async with stream as s:
            async for chunk in s:
                await chunk
        return [c async for c in stream]


    def generate():
        yield 1
        yield from range(2)


    def handle(command):
        match command:
            case {"go": direction, **others}:
                return direction, others
            case [first, *rest] if rest:
                return first
            case Config(flag=True) | None:
                return None
            case _:
                return command


    @staticmethod
    def decorated(a, /, b: int = 2, *, c: str = "c") -> None:
        nonlocal_free = 1

        def inner():
            nonlocal nonlocal_free
            nonlocal_free = 2

        return inner
''')


def _same_tree(source: str, path: str) -> None:
    parsed = ast.parse(source)
    assert describe(build_tree(source, path, parsed)) == describe(astroid_own(source, path, parsed))


def test_a_module_using_every_kind_of_statement_and_context_builds_as_astroid_builds_it() -> None:
    _same_tree(EVERY_CONTEXT, "every_context.py")


def test_an_attribute_set_on_a_class_of_the_file_is_recorded_on_the_class() -> None:
    module = build_tree(EVERY_CONTEXT, "every_context.py", ast.parse(EVERY_CONTEXT))
    config = module.locals["Config"][0]
    assert [node.lineno for node in config.locals["flag"]] == [14, 24]
    assert [node.lineno for node in config.locals["extra"]] == [25]


def test_a_package_module_builds_as_astroid_builds_it() -> None:
    _same_tree("from .sub import thing\nthing.value = 1\n", "pkg/__init__.py")


def _parsed_fixtures() -> list[Path]:
    """The rule fixtures that parse (KVL000's do not: they have no tree)."""
    found = []
    for path in fixture_files():
        try:
            ast.parse(path.read_bytes().decode("utf-8", "replace"))
        except (SyntaxError, ValueError):
            continue
        found.append(path)
    return found


@pytest.mark.parametrize("path", _parsed_fixtures(), ids=lambda path: f"{path.parent.name}/{path.name}")
def test_every_rule_fixture_builds_as_astroid_builds_it(path: Path) -> None:
    _same_tree(path.read_bytes().decode("utf-8", "replace"), str(path))


def test_the_build_leaves_the_parsed_tree_as_it_was() -> None:
    parsed = ast.parse(EVERY_CONTEXT)
    before = ast.dump(parsed, include_attributes=True)
    build_tree(EVERY_CONTEXT, "every_context.py", parsed)
    assert ast.dump(parsed, include_attributes=True) == before
