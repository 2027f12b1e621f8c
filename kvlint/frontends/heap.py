"""The heap of a process a front-end owns (a flake8 run, the ``kvlint`` command and its ``-j`` workers).

astroid's bootstrap, done at the first file the text gate lets through, builds its ``builtins`` module: about
90,000 long-lived objects (46,000 as the front-ends have it built, below). Left in the garbage collector's
generations, every full collection walks them again: most of the flake8 plugin's overhead (flake8
1.09-1.11x without this, 1.03x with it), and a quarter of the CLI's time on operator-dense code
(benchmarks/RESULTS.md). Done by the front-ends in their own processes, not by the engine, so that a program
using kvlint as a library keeps its heap as it is.

For the same reason the front-ends empty astroid's own caches after each file. ``LookupMixIn.lookup`` keeps
its last 128 answers, and each answer holds nodes, so the trees of the files linted before stayed alive (24
of the first 400 public operator files), and every full collection walked them again: the CLI's collector
time on those 1,390 files went from about 10 s to 4 s without them.

While a file is linted, the collector waits. Its tree and the analysis's facts stay alive until the analysis
ends anyway, and every collection in between walked the growing tree again (a fifth of the CLI's time on the
public operator files). After the file, one collection of the youngest generation, where all of the file's
objects still are, frees the tree. It can only if nothing older holds a node: astroid's ``ClassDef`` object
model, one per process, keeps the last class it described, so it is emptied with the caches. Before, that
tree outlived its young collection and the middle generation piled up dead trees (collector time on the
1,390 files: 4.4 s before this paragraph's two changes, 1.0 s after).

astroid gives each built-in function and method of a module it builds from a living one (``builtins``, at
the bootstrap) a class node of its own, for ``len.__class__`` (``builtin_function_or_method``): 2,730 classes,
half of the bootstrap's objects and 40 % of its time, and with them a fifth of the ``kvlint`` command's CPU on
one small operator file (0.22 against 0.18 s, side by side). No rule asks a built-in function for its class,
so while a process a front-end owns lints a file, astroid builds without them
(``raw_building._add_dunder_class``, the same function from astroid 3.0 to 4.x, does nothing meanwhile, and
is astroid's own again after the file). The ``builtins`` built meanwhile stays so for the rest of the
process: anything else running astroid in a flake8 process does not infer ``len.__class__``. The pylint
checkers run on pylint's own ``builtins``; ``tests/test_fixtures.py`` runs the three front-ends in processes
of their own, and they agree finding for finding.

The pylint checkers run in pylint's process, on the tree pylint built: they pause the collector during the
analysis too, since every collection in between walks pylint's heap and the facts growing with the module
(a fifth of kvlint's share on a 50,000-line module, and what made its cost grow faster than the module). They
neither freeze pylint's heap nor empty astroid's caches, which are pylint's.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

from astroid import MANAGER, context, nodes, raw_building

_frozen = False
_MODELLED = (nodes.ClassDef, nodes.FunctionDef, nodes.Lambda, nodes.Module)


def freeze_astroid_bootstrap() -> None:
    """Once per process, after astroid has built its ``builtins`` module, take the objects alive now out of
    the garbage collector's generations, after a collection of the youngest one. Not after a full collection:
    it walked the bootstrap's objects (then 114,000) again, 3 % of the instructions of a one-file run (callgrind), to
    find no garbage where the command calls this (after a file's young collection) and 28 objects in flake8's
    set-up, which stay frozen, once per process."""
    global _frozen
    if not _frozen and "builtins" in MANAGER.astroid_cache:
        gc.collect(0)
        gc.freeze()
        _frozen = True


def release_astroid_caches() -> None:
    """After a file: drop astroid's lookup and inference caches, whose entries hold the file's nodes (and so
    its whole tree) past its analysis. The next file does not ask them about this one's nodes."""
    nodes.Name.lookup.cache_clear()  # LookupMixIn's lru_cache, shared by every node class (astroid 3.0 to 4.x)
    context._invalidate_cache()  # what MANAGER.clear_cache calls for the inference cache
    # Each of these classes has one object model, which keeps the last node it described (``ObjectModel``'s
    # ``_instance``, astroid 3.0 to 4.x), and so that node's tree, past the young collection after its file.
    for kind in _MODELLED:
        model = getattr(kind, "special_attributes", None)
        if hasattr(model, "_instance"):
            model._instance = None


@contextmanager
def collector_paused() -> Iterator[None]:
    """The collector waits while the body runs (unless the program had it off already, in which case it stays
    off), then the youngest generation, where everything the body allocated still is, is collected once.
    The pylint checkers analyse pylint's tree inside this, and leave pylint's heap and caches as they are."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
            gc.collect(0)


def _no_class_node(*arguments: object) -> None:
    """Stands in for ``raw_building._add_dunder_class`` while a front-end's process lints a file."""


_ASTROIDS_OWN = getattr(raw_building, "_add_dunder_class", None)
"""astroid's function, as imported: what each file's end puts back, however the files' uses interleave."""


@contextmanager
def built_ins_without_class_nodes() -> Iterator[None]:
    """Inside, astroid builds modules from living ones (its bootstrap's ``builtins``) without a class node for
    each built-in function (the module docstring). What is built inside stays so: astroid keeps ``builtins``
    for the process, and in it ``len.__class__`` is not inferred, for anything else that runs astroid in the
    process afterwards. A no-op on an astroid without that function: then the front-ends' test of it fails
    (``tests/test_engine_footprint.py``), not a user's run."""
    if _ASTROIDS_OWN is None:
        yield
        return
    raw_building._add_dunder_class = _no_class_node
    try:
        yield
    finally:
        raw_building._add_dunder_class = _ASTROIDS_OWN


@contextmanager
def one_file() -> Iterator[None]:
    """Lint one file inside, in a process the front-end owns: the collector is paused meanwhile
    (``collector_paused``), astroid builds ``builtins`` (at the first file the text gate lets through) without
    a class node per built-in function (``built_ins_without_class_nodes``), and astroid's caches let go of the
    file before the young collection. The per-file memory limit still applies: it reads the process's
    resident memory."""
    with collector_paused(), built_ins_without_class_nodes():
        try:
            yield
        finally:
            release_astroid_caches()
