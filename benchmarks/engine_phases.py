"""Where the engine's time goes on operator-dense code, and how much an ``ast``-level pre-pass could save: the
evidence behind issue 17's CLI target.

    python benchmarks/engine_phases.py [--files LISTING | --corpus DIR] [--runs N] [--update-results]

``--files`` names a file with one path per line (for instance the public operator files of
``realcode_manifest.json``, extracted as ``realcode_findings.py`` does); without it the files are those of
``operator_corpus.py``'s corpus. Only the files the text gate lets through are measured.

**Phases**, in one process (astroid's bootstrap built and frozen first, as the CLI does), CPU time summed
per phase, the median of ``--runs`` rounds; each round:

- ``ast.parse``: every file parsed, nothing kept (the floor of issue 17's targets);
- then file by file, ``astroid tree`` (``engine.build_tree``: astroid's parse and its ``TreeRebuilder``) and
  ``analysis`` (``engine.analyze`` over that tree, every rule). The garbage collector's work on the trees
  alive is charged to the phase it interrupts, as in the CLI.

**Pruning ceiling**: an ``ast`` pre-pass could hand astroid only the functions that matter. It counts the
``ast`` nodes of the functions and methods (outside other functions) whose source has no gate word, which
is what a pre-pass could leave out if value following never left the functions that have one; then what
is left out once the functions those reach by name are kept too (callees and callers by name, methods
that set an attribute a kept function reads), which findings that stay the same require.
"""

from __future__ import annotations

import argparse
import ast
import statistics
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import cli_vs_parse  # noqa: E402
import harness  # noqa: E402
import operator_corpus  # noqa: E402

from kvlint.analysis.settings import DEFAULT_SETTINGS, may_have_findings  # noqa: E402
from kvlint.checks import engine  # noqa: E402
from kvlint.frontends import heap  # noqa: E402

PHASES = ("ast.parse", "astroid tree", "analysis")


@dataclass
class Phases:
    files: int = 0
    lines: int = 0
    rounds: dict[str, list[float]] = field(default_factory=lambda: {phase: [] for phase in PHASES})
    nodes: int = 0
    without_gate_word: int = 0
    unreached_by_name: int = 0

    def median(self, phase: str) -> float:
        return statistics.median(self.rounds[phase])


def _sources(paths: list[str]) -> list[tuple[str, str]]:
    found = []
    for path in paths:
        text = Path(path).read_bytes().decode("utf-8", "replace")
        if not may_have_findings(text):
            continue
        try:
            ast.parse(text)
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            continue
        found.append((path, text))
    return found


def measure_phases(sources: list[tuple[str, str]], runs: int, result: Phases) -> None:
    engine.build_tree("x = 1\n", "warm.py")
    heap.freeze_astroid_bootstrap()
    for _ in range(runs):
        start = time.process_time()
        for _, text in sources:
            ast.parse(text)
        result.rounds["ast.parse"].append(time.process_time() - start)
        built = analysed = 0.0
        for path, text in sources:
            start = time.process_time()
            module = engine.build_tree(text, path)
            middle = time.process_time()
            engine.analyze(module, path)
            built, analysed = built + middle - start, analysed + time.process_time() - middle
        result.rounds["astroid tree"].append(built)
        result.rounds["analysis"].append(analysed)


# Pruning ceiling ----------------------------------------------------------------------------------------


@dataclass
class _Unit:
    """A function or method outside any other function: what a pre-pass could leave out whole."""

    node: ast.FunctionDef | ast.AsyncFunctionDef
    has_gate_word: bool
    mentions: set[str]
    """Names, attribute names and identifier-like strings it uses."""
    sets: set[str]
    """Attribute names it assigns, and the globals it declares."""
    size: int


def _functions(body: list[ast.stmt]) -> Iterator[ast.FunctionDef | ast.AsyncFunctionDef]:
    for statement in body:
        if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield statement
        elif isinstance(statement, (ast.ClassDef, ast.If, ast.Try, ast.With)):
            for block in ("body", "orelse", "finalbody"):
                yield from _functions(getattr(statement, block, []))
            for handler in getattr(statement, "handlers", []):
                yield from _functions(handler.body)


def _unit(node: ast.FunctionDef | ast.AsyncFunctionDef, lines: list[str]) -> _Unit:
    first = min([decorator.lineno for decorator in node.decorator_list] + [node.lineno])
    text = "\n".join(lines[first - 1:node.end_lineno])
    mentions, sets, size = set(), set(), 0
    for child in ast.walk(node):
        size += 1
        if isinstance(child, ast.Name):
            mentions.add(child.id)
        elif isinstance(child, ast.Attribute):
            (sets if isinstance(child.ctx, ast.Store) else mentions).add(child.attr)
        elif isinstance(child, ast.Constant) and isinstance(child.value, str) and child.value.isidentifier():
            mentions.add(child.value)
        elif isinstance(child, (ast.Global, ast.Nonlocal)):
            sets.update(child.names)
    gate = any(word in text for word in DEFAULT_SETTINGS.gate_words())
    return _Unit(node, gate, mentions, sets, size)


def _reached_by_name(units: list[_Unit]) -> list[_Unit]:
    """The units with a gate word, and every unit they reach by name, to a fixed point."""
    kept = [unit for unit in units if unit.has_gate_word]
    rest = [unit for unit in units if not unit.has_gate_word]
    grew = True
    while grew:
        mentioned = set().union(*(unit.mentions for unit in kept))
        names = {unit.node.name for unit in kept if not unit.node.name.startswith("__")}
        reached = [unit for unit in rest
                   if unit.node.name in mentioned or unit.sets & mentioned or unit.mentions & names]  # fmt: skip
        rest = [unit for unit in rest if unit not in reached]
        kept += reached
        grew = bool(reached)
    return kept


def measure_pruning(sources: list[tuple[str, str]], result: Phases) -> None:
    for _, text in sources:
        tree = ast.parse(text)
        lines = text.splitlines()
        units = [_unit(node, lines) for node in _functions(tree.body)]
        result.nodes += sum(1 for _ in ast.walk(tree))
        result.without_gate_word += sum(unit.size for unit in units if not unit.has_gate_word)
        kept = _reached_by_name(units)
        result.unreached_by_name += sum(unit.size for unit in units if unit not in kept)


def render(result: Phases, origin: str, runs: int) -> str:
    floor = result.median("ast.parse")
    rows = ["| phase | median CPU s | x ast.parse |", "|---|---|---|"]
    for phase in PHASES:
        rows.append(f"| {phase} | {result.median(phase):.2f} | {result.median(phase) / floor:.2f} |")
    total = sum(result.median(phase) for phase in PHASES[1:])
    rows.append(f"| astroid tree + analysis | {total:.2f} | {total / floor:.2f} |")
    return "\n".join([
        "## Engine phases and the pruning ceiling (issue 17)",
        "",
        f"Measured by `python benchmarks/engine_phases.py {origin} --runs {runs}`, {harness.machine()}",
        "",
        f"{result.files} files that pass the text gate ({result.lines:,} lines), one process, medians of {runs} "
        "rounds:",
        "",
        *rows,
        "",
        f"Of their {result.nodes:,} `ast` nodes, {result.without_gate_word / result.nodes:.1%} are in functions "
        f"with no gate word, and {result.unreached_by_name / result.nodes:.1%} in functions that those with one "
        "do not reach by name either: what an `ast` pre-pass could keep astroid from building without "
        "changing what value following sees.",
    ])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--files", help="file listing one path per line (default: the operator-dense corpus)")
    source.add_argument("--corpus", help="folder to build the operator-dense corpus in")
    parser.add_argument("--runs", type=int, default=3, help="rounds (default 3)")
    parser.add_argument("--update-results", action="store_true", help="write the section of benchmarks/RESULTS.md")
    args = parser.parse_args(argv)
    if args.files:
        try:
            paths = Path(args.files).read_text(encoding="utf-8").splitlines()
        except OSError as error:
            parser.error(f"--files {args.files}: {error.strerror}")
        origin = f"--files {Path(args.files).name}"
    else:
        package, _ = operator_corpus.ensure(args.corpus)
        paths = [str(path) for path in cli_vs_parse.discover(package)]
        origin = "(the operator-dense corpus)"
    sources = _sources([path for path in paths if path])
    result = Phases(files=len(sources), lines=sum(text.count("\n") for _, text in sources))
    measure_phases(sources, args.runs, result)
    measure_pruning(sources, result)
    body = render(result, origin, args.runs)
    print(body)
    if args.update_results:
        harness.update_results("engine-phases", body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
