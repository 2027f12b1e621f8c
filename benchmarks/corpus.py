"""Build the benchmark corpus: a package of ordinary Python modules in which a few percent call the operators.

    python benchmarks/corpus.py [DEST] [--modules N] [--seed S]

Without DEST the corpus goes to a new temporary folder, whose path is printed. The corpus is deterministic
for a given seed and checkout, and is one package (``kvcorpus/``) so that pylint resolves the imports between
its modules as it would in a real project. It holds:

- ``--modules`` ordinary modules (default 300) of about 220 lines each, generated from a fixed seed: classes,
  dataclasses, properties, loops, comprehensions, ``try``/``with``, f-strings, imports of the standard library
  and of earlier modules of the corpus. None of them mentions an operator; three in a hundred use a
  variable named like a KV length (``seq_lens``, ``kv_len``), so kvlint's text gate lets them through to the
  parser, as it would for the bookkeeping code of an inference server;
- the project's flagged KVL1xx fixtures (``tests/fixtures/KVL1*/flagged_*.py``): real operator calls through
  every resolution form, each with findings.

The summary line (files, lines, files that call the operators, files the gate lets through) is printed and
also written to ``kvcorpus/CORPUS.txt``.
"""

from __future__ import annotations

import argparse
import ast
import random
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures"
PACKAGE = "kvcorpus"
PACKAGES = 10
"""Ordinary modules are spread over this many subpackages."""
GATE_WORD_EVERY = 33
"""One ordinary module in this many uses a KV-length variable name (a gate word), about 3 %."""

_NOUNS = ("request", "batch", "token", "record", "buffer", "shard", "worker", "queue", "window", "segment",
          "entry", "chunk", "route", "span", "frame", "slot", "ticket", "bucket", "epoch", "sample")
_VERBS = ("load", "parse", "merge", "split", "resolve", "collect", "render", "update", "score", "filter",
          "encode", "decode", "pack", "flush", "schedule", "normalize", "validate", "trim", "group", "rank")
_STDLIB = ("import os", "import re", "import json", "import math", "import logging", "import itertools",
           "import functools", "import collections", "from pathlib import Path",
           "from dataclasses import dataclass, field", "from typing import Any, Iterable, Iterator",
           "from collections import defaultdict, OrderedDict")


_ADJECTIVES = ("raw", "last", "next", "prev", "total", "local", "remote", "pending", "stale", "fresh", "base",
               "extra", "max", "min", "mean", "peak", "head", "tail", "inner", "outer", "spare", "live", "cold",
               "warm", "left", "right", "upper", "lower", "first", "final")


def _words(identifier: str) -> str:
    return identifier.replace("_", " ")


class _Module:
    """Source text of one generated ordinary module.

    Every identifier, constant and message is drawn afresh for each use, so that two modules share no run
    of four identical lines (pylint's duplicate-code check would otherwise dominate the measurement).
    """

    def __init__(self, rng: random.Random, index: int, earlier: list[tuple[str, str]], gate_word: bool) -> None:
        self.rng = rng
        self.index = index
        self.earlier = earlier
        self.gate_word = gate_word
        self.lines: list[str] = []
        self.functions: list[str] = []
        self.used: set[str] = set()

    def fresh(self, suffix: str = "") -> str:
        """A new snake_case identifier, unique in this module."""
        while True:
            name = f"{self.rng.choice(_ADJECTIVES)}_{self.rng.choice(_NOUNS)}{suffix}"
            if name not in self.used:
                self.used.add(name)
                return name

    def fresh_class(self, kind: str) -> str:
        return "".join(part.capitalize() for part in self.fresh().split("_")) + kind

    def number(self) -> int:
        return self.rng.randrange(2, 5000)

    def emit(self, text: str = "", indent: int = 0) -> None:
        self.lines.append("    " * indent + text if text else "")

    def build(self) -> str:
        rng = self.rng
        noun = rng.choice(_NOUNS)
        self.emit(f'"""Helpers for {noun} handling (generated module {self.index})."""')
        self.emit()
        self.emit("from __future__ import annotations")
        self.emit()
        always = {"import logging", "from dataclasses import dataclass, field",
                  "from typing import Any, Iterable, Iterator"}
        for line in sorted(set(rng.sample(_STDLIB, 5)) | always):
            self.emit(line)
        if self.earlier:
            module, function = rng.choice(self.earlier)
            self.emit(f"from {module} import {function}")
            self.functions.append(function)
        self.emit()
        self.emit("LOG = logging.getLogger(__name__)")
        self.emit(f"{self.fresh().upper()} = {self.number()}")
        self.emit(f'{self.fresh().upper()} = "{noun}-{self.index}"')
        self.emit()
        for _ in range(rng.randint(2, 3)):
            self.dataclass()
            self.plain_class()
        for _ in range(rng.randint(5, 7)):
            self.function()
        if self.gate_word:
            self.kv_bookkeeping()
        text = "\n".join(self.lines) + "\n"
        ast.parse(text)
        return text

    def dataclass(self) -> None:
        cls = self.fresh_class("Info")
        name, size, tags, weight, label, other = (self.fresh() for _ in range(6))
        self.emit()
        self.emit()
        self.emit("@dataclass")
        self.emit(f"class {cls}:")
        self.emit(f'"""A {_words(name)} as the scheduler sees it."""', 1)
        self.emit()
        self.emit(f"{name}: str", 1)
        self.emit(f"{size}: int = {self.number()}", 1)
        self.emit(f"{tags}: list[str] = field(default_factory=list)", 1)
        self.emit(f"{weight}: float = {self.number() / 100}", 1)
        self.emit()
        self.emit("@property", 1)
        self.emit(f"def {label}(self) -> str:", 1)
        self.emit(f'return f"{{self.{name}}}:{{self.{size}}}/{self.number()}"', 2)
        self.emit()
        self.emit(f"def merged_{label}(self, {other}: {cls}) -> {cls}:", 1)
        self.emit(f"{tags}_all = sorted(set(self.{tags}) | set({other}.{tags}))", 2)
        self.emit(f"return {cls}(self.{name}, self.{size} + {other}.{size}, {tags}_all)", 2)

    def plain_class(self) -> None:
        cls = self.fresh_class("Store")
        limit, items, hits, misses, key, default, value, oldest, total = (self.fresh() for _ in range(9))
        get, put, rate = self.fresh("_get"), self.fresh("_put"), self.fresh("_rate")
        self.emit()
        self.emit()
        self.emit(f"class {cls}:")
        self.emit(f'"""Keeps {_words(items)} by key and evicts the oldest past {limit}."""', 1)
        self.emit()
        self.emit(f"def __init__(self, {limit}: int = {self.number()}) -> None:", 1)
        self.emit(f"self.{limit} = {limit}", 2)
        self.emit(f"self.{items}: dict[str, Any] = {{}}", 2)
        self.emit(f"self.{hits} = {self.number() % 3}", 2)
        self.emit(f"self.{misses} = {self.number() % 5}", 2)
        self.emit()
        self.emit(f"def {get}(self, {key}: str, {default}: Any = None) -> Any:", 1)
        self.emit(f"if {key} in self.{items}:", 2)
        self.emit(f"self.{hits} += {self.number() % 3 + 1}", 3)
        self.emit(f"return self.{items}[{key}]", 3)
        self.emit(f"self.{misses} += {self.number() % 3 + 1}", 2)
        self.emit(f"return {default}", 2)
        self.emit()
        self.emit(f"def {put}(self, {key}: str, {value}: Any) -> None:", 1)
        self.emit(f"self.{items}[{key}] = {value}", 2)
        self.emit(f"while len(self.{items}) > self.{limit}:", 2)
        self.emit(f"{oldest} = next(iter(self.{items}))", 3)
        self.emit(f'LOG.debug("evicting %s from {cls}", {oldest})', 3)
        self.emit(f"del self.{items}[{oldest}]", 3)
        self.emit()
        self.emit("def __len__(self) -> int:", 1)
        self.emit(f"return len(self.{items})", 2)
        self.emit()
        self.emit("def __iter__(self) -> Iterator[str]:", 1)
        self.emit(f"yield from sorted(self.{items})", 2)
        self.emit()
        self.emit("@property", 1)
        self.emit(f"def {rate}(self) -> float:", 1)
        self.emit(f"{total} = self.{hits} + self.{misses}", 2)
        self.emit(f"return self.{hits} / {total} if {total} else {self.number() / 1000}", 2)

    def function(self) -> None:
        rng = self.rng
        name = self.fresh(f"_{rng.choice(_VERBS)}")
        a, b, c, d, e = (self.fresh() for _ in range(5))
        kind = rng.randrange(4)
        self.emit()
        self.emit()
        if kind == 0:
            self.emit(f"def {name}({a}: Iterable[int], {b}: int = {self.number()}) -> list[int]:")
            self.emit(f'"""Values of {_words(a)} above {_words(b)}, squared, in order."""', 1)
            self.emit(f"{c} = []", 1)
            self.emit(f"for {d}, {e} in enumerate({a}):", 1)
            self.emit(f"if {e} <= {b}:", 2)
            self.emit("continue", 3)
            self.emit(f"if {d} % {self.number()} == {self.number() % 7}:", 2)
            self.emit(f'LOG.debug("{name}: %d at %d", {e}, {d})', 3)
            self.emit(f"{c}.append({e} * {e} + {self.number()})", 2)
            self.emit(f"return {c}", 1)
        elif kind == 1:
            sep = rng.choice([",", ";", "|", ":", "/"])
            self.emit(f'def {name}({a}: str, {b}: str = "{sep}") -> dict[str, int]:')
            self.emit(f'"""Count the non-empty fields of {_words(a)}."""', 1)
            self.emit(f"{c}: dict[str, int] = {{}}", 1)
            self.emit(f"for {d} in {a}.split({b}):", 1)
            self.emit(f"{e} = {d}.strip().{rng.choice(['lower', 'upper', 'casefold', 'title'])}()", 2)
            self.emit(f"if not {e}:", 2)
            self.emit("continue", 3)
            self.emit(f"{c}[{e}] = {c}.get({e}, 0) + {self.number() % 4 + 1}", 2)
            self.emit(f"return {{k: n for k, n in sorted({c}.items()) if n > {self.number() % 3}}}", 1)
        elif kind == 2:
            self.emit(f"def {name}({a}: str, {b}: int = {self.number() % 9 + 1}) -> str | None:")
            self.emit(f'"""Read {_words(a)}, retrying on transient errors."""', 1)
            self.emit(f"for {c} in range({b}):", 1)
            self.emit("try:", 2)
            self.emit(f'with open({a}, encoding="utf-8") as {d}:', 3)
            self.emit(f"return {d}.read()[:{self.number()}]", 4)
            self.emit("except FileNotFoundError:", 2)
            self.emit("return None", 3)
            self.emit(f"except OSError as {e}:", 2)
            self.emit(f'LOG.warning("{name}: attempt %d failed: %s", {c}, {e})', 3)
            self.emit("return None", 1)
        else:
            helper = self.functions[-1] if self.functions else None
            self.emit(f'def {name}({a}: list[dict[str, Any]], {b}: str = "{self.fresh()}") -> list[tuple[Any, int]]:')
            self.emit(f'"""Group {_words(a)} by a key and count each group, largest first."""', 1)
            self.emit(f"{c}: dict[Any, int] = {{}}", 1)
            self.emit(f"for {d} in {a}:", 1)
            self.emit(f"{e} = {d}.get({b})", 2)
            self.emit(f"if {e} is None:", 2)
            self.emit("continue", 3)
            self.emit(f"{c}[{e}] = {c}.get({e}, 0) + {self.number() % 4 + 1}", 2)
            self.emit(f"{d}_ranked = sorted({c}.items(), key=lambda item: (-item[1], str(item[0])))", 1)
            if helper:
                self.emit(f"if not {d}_ranked and callable({helper}):", 1)
                self.emit(f'LOG.debug("nothing to rank; helper %s", {helper}.__name__)', 2)
            self.emit(f'LOG.info("{name}: %d groups from %d rows", len({d}_ranked), len({a}))', 1)
            self.emit(f"return {d}_ranked", 1)
        self.functions.append(name)

    def kv_bookkeeping(self) -> None:
        """Scheduler code that names KV lengths but calls no operator (the gate lets it through)."""
        block = self.fresh()
        self.emit()
        self.emit()
        self.emit(f"def plan_decode_step(seq_lens: list[int], {block}: int = {self.number()}) -> dict[str, Any]:")
        self.emit('"""Blocks each running sequence needs after one more decode step."""', 1)
        self.emit("kv_len = [length + 1 for length in seq_lens]", 1)
        self.emit(f"blocks = [(length + {block} - 1) // {block} for length in kv_len]", 1)
        self.emit('return {"kv_len": kv_len, "blocks": blocks, "total": sum(blocks)}', 1)


def build(dest: Path, modules: int = 300, seed: int = 20261129) -> dict[str, int]:
    """Write the corpus under ``dest/kvcorpus`` (replacing it) and return its summary."""
    rng = random.Random(seed)
    package = dest / PACKAGE
    if package.exists():
        shutil.rmtree(package)
    package.mkdir(parents=True)
    (package / "__init__.py").write_text('"""Benchmark corpus (generated by benchmarks/corpus.py)."""\n')
    earlier: list[tuple[str, str]] = []
    gate_words = 0
    for index in range(modules):
        sub = package / f"pkg_{index % PACKAGES:02d}"
        if not sub.exists():
            sub.mkdir()
            (sub / "__init__.py").write_text("")
        gate_word = index % GATE_WORD_EVERY == GATE_WORD_EVERY - 1
        gate_words += gate_word
        module = _Module(rng, index, earlier, gate_word)
        (sub / f"mod_{index:04d}.py").write_text(module.build(), encoding="utf-8")
        if module.functions:
            earlier.append((f"{PACKAGE}.{sub.name}.mod_{index:04d}", module.functions[0]))
    operators = package / "attention"
    operators.mkdir()
    (operators / "__init__.py").write_text("")
    fixtures = sorted(FIXTURES.glob("KVL1*/flagged_*.py"))
    for fixture in fixtures:
        shutil.copyfile(fixture, operators / f"{fixture.parent.name.lower()}_{fixture.name}")
    files = sorted(package.rglob("*.py"))
    summary = {
        "files": len(files),
        "lines": sum(path.read_text(encoding="utf-8").count("\n") for path in files),
        "operator_files": len(fixtures),
        "gate_word_files": gate_words,
    }
    (package / "CORPUS.txt").write_text(describe(summary) + "\n")
    return summary


def describe(summary: dict[str, int]) -> str:
    share = 100 * summary["operator_files"] / summary["files"]
    passed = summary["operator_files"] + summary["gate_word_files"]
    return (f"{summary['files']} files, {summary['lines']} lines; {summary['operator_files']} call the operators "
            f"({share:.1f} %); the text gate lets {passed} through ({100 * passed / summary['files']:.1f} %)")


def ensure(dest: str | None) -> tuple[Path, dict[str, int]]:
    """The corpus package path, building it in ``dest`` (or a new temporary folder)."""
    root = Path(dest) if dest else Path(tempfile.mkdtemp(prefix="kvlint-corpus-"))
    summary = build(root)
    return root / PACKAGE, summary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dest", nargs="?", help="folder to build the corpus in (default: a new temporary folder)")
    parser.add_argument("--modules", type=int, default=300, help="number of ordinary modules (default 300)")
    parser.add_argument("--seed", type=int, default=20261129)
    args = parser.parse_args(argv)
    root = Path(args.dest) if args.dest else Path(tempfile.mkdtemp(prefix="kvlint-corpus-"))
    summary = build(root, args.modules, args.seed)
    print(root / PACKAGE)
    print(describe(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
