"""The package layout is the architecture: a lower layer never imports a higher one, and no modules import
each other in a circle.

Static side:  catalogue <- analysis <- checks <- fix <- frontends (and the pylint checkers) <- kvlint's own
top-level modules; the front-ends also read the budget tool's units (``kvlint.budget.units``, sizes such as
``1GiB`` for the per-file memory limit), which import nothing of kvlint. Runtime side: reference <- emulator <-
probe, which may read the catalogue, the budget formulas and ``kvlint.console`` (the broken-pipe helper, which
imports nothing) but nothing of the linter. The budget tool reads only itself. Every import counts, including
those inside functions (a lazy import is still a dependency).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.conftest import ROOT

SOURCES = {"kvlint": ROOT / "kvlint", "kvlint.checkers": ROOT / "checkers", "kvlint.runtime_probe": ROOT / "runtime_probe"}

STATIC_LAYERS = ("kvlint.catalogue", "kvlint.analysis", "kvlint.checks", "kvlint.fix", "kvlint.frontends")
RUNTIME_LAYERS = ("kvlint.runtime_probe.reference", "kvlint.runtime_probe.emulator", "kvlint.runtime_probe")
RUNTIME_MAY_READ = ("kvlint.catalogue", "kvlint.budget", "kvlint.console")
FRONT_ENDS_MAY_READ = "kvlint.budget.units"


def module_name(package: str, path: Path) -> str:
    relative = path.relative_to(SOURCES[package]).with_suffix("")
    parts = [part for part in relative.parts if part != "__init__"]
    return ".".join([package, *parts])


def project_modules() -> dict[str, Path]:
    found = {}
    for package, folder in SOURCES.items():
        for path in folder.rglob("*.py"):
            found[module_name(package, path)] = path
    return found


MODULES = project_modules()


def imported(name: str, path: Path) -> set[str]:
    """The project modules ``name`` imports, anywhere in its body."""
    is_package = path.name == "__init__.py"
    targets: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            candidates = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = name.split(".") if is_package else name.split(".")[:-1]
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, base]) if base else ".".join(anchor)
            candidates = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in MODULES else base
                          for alias in node.names]
        else:
            continue
        for candidate in candidates:
            while candidate and candidate not in MODULES:
                candidate = candidate.rpartition(".")[0]
            if candidate and candidate != name:
                targets.add(candidate)
    return targets


GRAPH = {name: imported(name, path) for name, path in MODULES.items()}


def within(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


def static_rank(name: str) -> int | None:
    for rank, package in enumerate(STATIC_LAYERS):
        if within(name, package):
            return rank
    if within(name, "kvlint.checkers"):
        return STATIC_LAYERS.index("kvlint.frontends")
    return None


def runtime_rank(name: str) -> int | None:
    for rank, package in enumerate(RUNTIME_LAYERS):
        if within(name, package):
            return rank
    return None


def test_the_layout_is_what_this_test_describes() -> None:
    for package in (*STATIC_LAYERS, *RUNTIME_LAYERS, "kvlint.budget", "kvlint.checkers"):
        assert package in MODULES, f"{package} is not a package any more: update this test and the README"


@pytest.mark.parametrize("name", sorted(n for n in MODULES if static_rank(n) is not None))
def test_a_static_layer_imports_only_itself_and_the_layers_below(name: str) -> None:
    rank = static_rank(name)
    may_read = {FRONT_ENDS_MAY_READ} if rank == STATIC_LAYERS.index("kvlint.frontends") else set()
    above = sorted(target for target in GRAPH[name] - may_read if (static_rank(target) or -1) > rank
                   or within(target, "kvlint.runtime_probe") or within(target, "kvlint.budget"))
    assert not above, f"{name} imports {above}"


@pytest.mark.parametrize("name", sorted(n for n in MODULES if runtime_rank(n) is not None))
def test_a_runtime_layer_imports_only_itself_the_layers_below_and_the_catalogue(name: str) -> None:
    rank = runtime_rank(name)
    wrong = sorted(
        target for target in GRAPH[name]
        if (runtime_rank(target) is not None and runtime_rank(target) > rank)
        or (runtime_rank(target) is None and not any(within(target, p) for p in RUNTIME_MAY_READ)
            and target != "kvlint._startup")
    )
    assert not wrong, f"{name} imports {wrong}"


@pytest.mark.parametrize("name", sorted(n for n in MODULES if within(n, "kvlint.budget")))
def test_the_budget_tool_reads_only_itself(name: str) -> None:
    assert all(within(target, "kvlint.budget") for target in GRAPH[name]), f"{name} imports {GRAPH[name]}"


def test_the_console_helper_imports_nothing_of_kvlint() -> None:
    assert GRAPH["kvlint.console"] == set()


def test_no_modules_import_each_other_in_a_circle() -> None:
    cycles = []
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(name: str) -> None:
        state[name] = 1
        stack.append(name)
        for target in sorted(GRAPH[name]):
            if state.get(target) == 1:
                cycles.append(stack[stack.index(target):] + [target])
            elif target not in state:
                visit(target)
        stack.pop()
        state[name] = 2

    for name in sorted(GRAPH):
        if name not in state:
            visit(name)
    assert not cycles, "import cycles: " + "; ".join(" -> ".join(cycle) for cycle in cycles)


def test_the_layering_test_sees_an_upward_import(tmp_path: Path) -> None:
    path = tmp_path / "names.py"
    path.write_text("def f():\n    from kvlint.frontends.cli import main\n", encoding="utf-8")
    assert "kvlint.frontends.cli" in imported("kvlint.analysis.names", path)
