"""What linting many files leaves behind: the engine's caches of facts about a tree live as long as that
tree's analysis (``kvlint.analysis.memo``), and the one walk per module answers exactly what astroid's
``nodes_of_class`` would (``kvlint.analysis.walk``).

Before, caches keyed weakly by nodes held nodes of the same tree in their values, so every tree linted stayed
in memory; on 1,390 operator files the process grew to twice its size and the garbage collector walked the
dead trees again at every full collection (benchmarks/RESULTS.md, issue 17).
"""

from __future__ import annotations

import gc

import pytest
from astroid import nodes

from kvlint.analysis.walk import nodes_of, nodes_outside
from kvlint.checks.building import build_tree
from kvlint.checks.engine import lint_source
from tests.fixture_files import fixture_files

FLAGGED = [path for path in fixture_files() if path.name.startswith("flagged_") and path.parent.name != "KVL000"]


def _trees_alive(prefix: str) -> int:
    return sum(1 for o in gc.get_objects() if type(o) is nodes.Module and (o.file or "").startswith(prefix))


def test_linting_more_files_keeps_no_more_trees() -> None:
    """The fixtures linted three times over under new names: the trees alive afterwards are the few astroid
    itself keeps (its class-level object models remember the last node they described), as many after the
    third round as after the first, and fewer than one round's files (before: 20, 33, 46 of 46)."""
    sources = [path.read_bytes().decode("utf-8", "replace") for path in FLAGGED]
    alive = []
    for round_ in range(3):
        for index, source in enumerate(sources):
            lint_source(source, f"/kvlint-footprint/{round_}/{index}.py")
        gc.collect()
        alive.append(_trees_alive("/kvlint-footprint/"))
    assert alive[2] <= alive[0] < len(sources) / 4


@pytest.mark.parametrize("path", FLAGGED[::4], ids=lambda p: f"{p.parent.name}/{p.name}")
def test_the_walk_answers_what_astroid_does(path) -> None:
    """Same nodes, same order, for the whole module and for every function and class below it, with and
    without the classes a walk must not enter, for one class, several, and classes with subclasses; so do the
    questions answered without a scan (``nodes_outside``), nested skipped classes included."""
    module = build_tree(path.read_bytes().decode("utf-8", "replace"), str(path))
    questions = [(nodes.Call, None), ((nodes.Name, nodes.Attribute), None), (nodes.Assign, None),
                 (nodes.FunctionDef, None), (nodes.LocalsDictNodeNG, None),  # classes with subclasses
                 (nodes.Return, (nodes.FunctionDef, nodes.Lambda)), ((nodes.If, nodes.IfExp), (nodes.ClassDef,)),
                 ((nodes.AssignName, nodes.Expr), (nodes.FunctionDef, nodes.Lambda, nodes.ListComp, nodes.If)),
                 ((nodes.FunctionDef, nodes.Call), (nodes.FunctionDef,))]  # a skipped node is not counted
    for root in [module, *module.nodes_of_class((nodes.FunctionDef, nodes.ClassDef, nodes.If))]:
        for classes, skip in questions:
            expected = [id(n) for n in root.nodes_of_class(classes, skip)]
            assert [id(n) for n in nodes_of(root, classes, skip)] == expected
            if skip is not None:
                assert [id(n) for n in nodes_outside(root, classes, skip)] == expected


def test_the_front_ends_let_astroid_forget_each_file(tmp_path) -> None:
    """In a process the front-end owns, astroid's own caches (the last 128 lookups, the inference cache)
    let go of each file's tree once it is linted: without that, up to 128 dead trees stay reachable and every
    full collection walks them again (a third of the CLI's time on the 1,390 public operator files). So does
    the object model of astroid's ``ClassDef``, which keeps the last class it described: that tree outlived
    the file's young collection and piled up in the older generations (4 s of collections on those files)."""
    from kvlint.analysis.settings import DEFAULT_SETTINGS
    from kvlint.frontends.cli import _lint_own_process

    paths = []
    for index, path in enumerate(FLAGGED):
        copy = tmp_path / f"{index}.py"
        copy.write_bytes(path.read_bytes())
        paths.append(copy)
    for path in paths:
        _lint_own_process(str(path), DEFAULT_SETTINGS)
    assert _trees_alive(str(tmp_path)) == 0  # freed by each file's young collection: no full one needed


@pytest.mark.parametrize("enabled", [True, False], ids=["collector on", "collector off"])
def test_a_file_is_linted_with_the_collector_paused_and_its_tree_freed_after(tmp_path, enabled) -> None:
    """The front-ends lint each file with the garbage collector paused (each collection in between walked
    the growing tree again), then a young collection frees the tree without a full one. The program's own
    setting comes back: a program that turned the collector off keeps it off."""
    from kvlint.analysis.settings import DEFAULT_SETTINGS
    from kvlint.frontends.cli import _lint_own_process

    first, copy = tmp_path / "first.py", tmp_path / "layer.py"
    for path in (first, copy):
        path.write_bytes(FLAGGED[0].read_bytes())
    _lint_own_process(str(first), DEFAULT_SETTINGS)  # the process's first file also freezes astroid's bootstrap
    seen = []
    gc.collect()
    gc.callbacks.append(lambda phase, info: seen.append(info["generation"]) if phase == "start" else None)
    was = gc.isenabled()
    (gc.enable if enabled else gc.disable)()
    try:
        _lint_own_process(str(copy), DEFAULT_SETTINGS)
        assert gc.isenabled() is enabled
    finally:
        gc.callbacks.pop()
        (gc.enable if was else gc.disable)()
    assert seen == ([0] if enabled else [])
    if enabled:
        assert _trees_alive(str(copy)) == 0


@pytest.mark.parametrize("enabled", [True, False], ids=["collector on", "collector off"])
def test_the_pylint_checkers_analyse_pylints_tree_with_the_collector_paused(tmp_path, monkeypatch, enabled) -> None:
    """Inside pylint the analysis runs on the tree pylint built, with pylint's heap around it: every collection
    during the analysis walked that heap and the growing facts again (kvlint's share of pylint's run on a
    50,000-line module grew 1.27x faster than the module, a fifth of it collections). The checkers pause the
    collector while they analyse and give the program its own setting back."""
    from astroid import MANAGER

    from kvlint.checkers import families

    path = tmp_path / "layer.py"
    path.write_bytes(FLAGGED[0].read_bytes())
    module = MANAGER.ast_from_file(str(path), modname="layer")
    collector_during_analysis = []
    analyze = families.analyze

    def analysing(*args, **kwargs):
        collector_during_analysis.append(gc.isenabled())
        return analyze(*args, **kwargs)

    monkeypatch.setattr(families, "analyze", analysing)
    was = gc.isenabled()
    (gc.enable if enabled else gc.disable)()
    try:
        findings = families.module_findings(module)
        assert gc.isenabled() is enabled
    finally:
        (gc.enable if was else gc.disable)()
    assert findings and collector_during_analysis == [False]


_BUILT_INS_AFTER_ONE_FILE = """
import json, sys
from astroid import MANAGER, nodes, raw_building
astroids_own = raw_building._add_dunder_class
if sys.argv[1] == "cli":
    from kvlint.frontends.cli import main
    main(["--isolated", "--exit-zero", sys.argv[2]])
elif sys.argv[1] == "cli, standard input":
    from kvlint.frontends.cli import main
    main(["--isolated", "--exit-zero", "--stdin-filename", sys.argv[2], "-"])
else:
    from flake8.main.cli import main
    try:
        main(["--isolated", "--select", "KVL", "-j", "1", sys.argv[2]])
    except SystemExit:
        pass
functions = list(MANAGER.builtins_module.nodes_of_class(nodes.FunctionDef))
print(json.dumps({"functions": len(functions),
                  "with a class node": sum("__class__" in f.instance_attrs for f in functions),
                  "astroid's own function back": raw_building._add_dunder_class is astroids_own}))
"""


@pytest.mark.parametrize("front_end", ["cli", "cli, standard input", "flake8"])
def test_the_front_ends_build_astroids_builtins_without_a_class_per_built_in_function(front_end) -> None:
    """astroid gives each of the 2,730 built-in functions and methods of its ``builtins`` a class node of its
    own (``len.__class__``): half the bootstrap's objects, 40 % of its time, a quarter of the ``kvlint``
    command's CPU on one small file. No rule asks for them, so the processes the front-ends own build
    ``builtins`` without them; astroid's own step is back after each file (the ``builtins`` built meanwhile
    stays as built). This fails if astroid stops naming the step ``raw_building._add_dunder_class``."""
    import json
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", _BUILT_INS_AFTER_ONE_FILE, front_end, str(FLAGGED[0])],
                         input=FLAGGED[0].read_text(encoding="utf-8"), capture_output=True, text=True, check=True)
    built = json.loads(out.stdout.splitlines()[-1])
    assert built["functions"] > 1000
    assert built["with a class node"] == 0
    assert built["astroid's own function back"]
