"""kvlint on public Ascend inference code: the repositories and commits of ``realcode_recognition_manifest.json``.

    python benchmarks/realcode.py --repos DIR [--update-results] [--json OUT]
    python benchmarks/realcode.py --repos DIR --scan     # rewrite the manifest's file lists

``DIR`` holds one folder per repository, named ``<owner>+<name>``: either a checkout of the manifest's commit
or a folder with a bare clone in ``repo/`` (what the project's fetch tool leaves in ``/work/.mirror``). Files
are read at the manifest's commit; nothing of these repositories is committed here, only their names, commits
and the paths of the files that name an operator.

Measurements (one function each, listed in ``MEASUREMENTS``; ``--measure NAME`` runs some):

- ``recognition``: every call whose callee's last name is an operator of kvlint's catalogue (the
  operator-named calls), classified: *resolved* (kvlint's call site reaches the operator), *the project's own
  code* (a function, method or class of the project that shares the name, or a name imported from another
  module of the project or another library), *namespace without it* (``torch.ops.npu.<atb op>``: an
  AttributeError, KVL113's business) and *missed* (kvlint cannot tell, with the reason). Recognition is
  resolved / (resolved + missed): the share of operator-named calls outside the project's own wrappers that
  kvlint resolves (issue 13: >= 99 %).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from astroid import nodes
from astroid.exceptions import AstroidSyntaxError

sys.path.insert(0, str(Path(__file__).resolve().parent))

import harness  # noqa: E402

from kvlint.analysis.callsite import call_site  # noqa: E402
from kvlint.analysis.names import NONE, enclosing_class, is_self, qualified_names  # noqa: E402
from kvlint.catalogue.operators import NAMESPACES, OPERATORS  # noqa: E402
from kvlint.checks.engine import build_tree  # noqa: E402

MANIFEST = Path(__file__).resolve().parent / "realcode_recognition_manifest.json"
OPERATOR_NAME = re.compile(r"\b(" + "|".join(sorted(map(re.escape, OPERATORS), key=len, reverse=True)) + r")\b")
OVERLOAD_ATTRIBUTES = frozenset(op.overload for op in OPERATORS.values()) | {"default", "out"}


# Reading the repositories ------------------------------------------------------------------------------


@dataclass
class Repository:
    """One manifest entry and where its files are read from."""

    name: str
    commit: str
    paths: list[str]
    folder: Path
    bare: bool = field(init=False)

    def __post_init__(self) -> None:
        self.bare = (self.folder / "repo").is_dir()

    def read(self, paths: list[str]) -> Iterator[tuple[str, str]]:
        """(path, text) of each file at the manifest's commit."""
        if not self.bare:
            for path in paths:
                yield path, (self.folder / path).read_bytes().decode("utf-8", "replace")
            return
        for path, raw in harness.blobs_at(self.folder / "repo", self.commit, paths):
            yield path, raw.decode("utf-8", "replace")

    def python_files(self) -> list[str]:
        if not self.bare:
            return sorted(str(p.relative_to(self.folder)) for p in self.folder.rglob("*.py"))
        listed = harness.git(self.folder / "repo", "ls-tree", "-r", "--name-only", self.commit).decode().split("\n")
        return sorted(path for path in listed if path.endswith(".py"))


def repositories(manifest: Path, folder: Path) -> list[Repository]:
    entries = json.loads(manifest.read_text(encoding="utf-8"))["repositories"]
    found = []
    for entry in entries:
        where = folder / entry["repository"].replace("/", "+")
        if not where.is_dir():
            raise SystemExit(f"realcode.py: {entry['repository']} is not in {folder} (expected {where})")
        found.append(Repository(entry["repository"], entry["commit"], entry["paths"], where))
    return found


def parse(text: str, path: str) -> nodes.Module | None:
    try:
        return build_tree(text, path)
    except (AstroidSyntaxError, RecursionError, ValueError):
        return None


# Recognition ----------------------------------------------------------------------------------------------


def operator_named_calls(module: nodes.Module) -> Iterator[tuple[nodes.Call, str]]:
    """Each call whose callee's last name (an overload attribute aside) is a catalogued operator."""
    for call in module.nodes_of_class(nodes.Call):
        func = call.func
        if isinstance(func, nodes.Attribute) and func.attrname in OVERLOAD_ATTRIBUTES and isinstance(
                func.expr, (nodes.Attribute, nodes.Name)):
            func = func.expr
        name = func.name if isinstance(func, nodes.Name) else getattr(func, "attrname", None)
        if name in OPERATORS:
            yield call, name


def _own_binding(binding: nodes.NodeNG) -> bool:
    """A definition of the project's own: a function, a class, or a relative import."""
    return isinstance(binding, (nodes.FunctionDef, nodes.ClassDef)) or (
        isinstance(binding, nodes.ImportFrom) and bool(binding.level))


def classify(call: nodes.Call) -> tuple[str, str]:
    """(category, detail): resolved, own, namespace-without-it or missed."""
    found = call_site(call)
    if found is not None:
        return "resolved", found[0].qualname
    names = qualified_names(call.func)
    real = sorted(names - {NONE}) if names is not None else []
    if not real:
        return _why_unresolved(call.func)
    prefixes = sorted({_namespace(name) for name in real})
    if all(prefix in NAMESPACES for prefix in prefixes):
        return "namespace-without-it", ", ".join(real)
    if not any(prefix in NAMESPACES or prefix.startswith(("torch_npu", "torchair")) for prefix in prefixes):
        return "own", "from " + ", ".join(prefixes)
    return "missed", "alternatives: " + ", ".join(sorted(names))


def _namespace(qualname: str) -> str:
    """The prefix an operator name is looked up in (an overload attribute aside)."""
    prefix, _, last = qualname.rpartition(".")
    return prefix.rpartition(".")[0] if last in OVERLOAD_ATTRIBUTES else prefix


def _why_unresolved(func: nodes.NodeNG) -> tuple[str, str]:
    if isinstance(func, nodes.Attribute) and func.attrname in OVERLOAD_ATTRIBUTES:
        func = func.expr
    if isinstance(func, nodes.Name):
        _, bindings = func.lookup(func.name)
        if any(_own_binding(b) for b in bindings):
            return "own", f"{func.name} is defined in the file"
        if any(isinstance(b, nodes.AssignName) and isinstance(b.parent, nodes.Arguments) for b in bindings):
            return "missed", "a parameter"
        return "missed", f"name {func.name}"
    if not isinstance(func, nodes.Attribute):
        return "missed", type(func).__name__
    base = func.expr
    if is_self(base):
        cls = enclosing_class(func)
        defined = cls.locals.get(func.attrname, []) if cls is not None else []
        if any(isinstance(d, nodes.FunctionDef) for d in defined):
            return "own", f"self.{func.attrname} is a method of {cls.name}"
        return "missed", f"self.{func.attrname} (set outside the class, or not plainly)"
    if isinstance(base, nodes.Name):
        _, bindings = base.lookup(base.name)
        if bindings and all(_own_binding(b) for b in bindings):
            return "own", f"{base.name} is defined in the file"
        if any(isinstance(b, nodes.AssignName) and isinstance(b.parent, nodes.Arguments) for b in bindings):
            return "missed", f"{base.name}.{func.attrname}: {base.name} is a parameter"
        return "missed", f"{base.as_string()}.{func.attrname}"
    receiver = base.as_string()
    return "missed", f"{receiver if len(receiver) < 60 else receiver[:57] + '...'}.{func.attrname}"


@dataclass
class Recognition:
    counts: dict[str, Counter] = field(default_factory=dict)
    """Repository -> category -> calls."""
    listed: list[tuple[str, str, str, str, str]] = field(default_factory=list)
    """(repository, path:line, operator, category, detail) for every call not resolved."""
    unparsed: list[str] = field(default_factory=list)


def measure_recognition(repos: list[Repository]) -> Recognition:
    result = Recognition()
    for repo in repos:
        counts = result.counts.setdefault(repo.name, Counter())
        for path, text in repo.read(repo.paths):
            module = parse(text, path)
            if module is None:
                result.unparsed.append(f"{repo.name}/{path}")
                continue
            for call, name in operator_named_calls(module):
                category, detail = classify(call)
                counts[category] += 1
                if category != "resolved":
                    result.listed.append((repo.name, f"{path}:{call.lineno}", name, category, detail))
    return result


def _rate(counts: Counter) -> str:
    judged = counts["resolved"] + counts["missed"]
    return f"{100 * counts['resolved'] / judged:.1f} %" if judged else "-"


def render_recognition(result: Recognition, machine: str) -> str:
    total = sum(result.counts.values(), Counter())
    rows = ["| repository | operator-named calls | resolved | project's own code | namespace without it | missed "
            "| recognition |", "|---|---|---|---|---|---|---|"]
    for name, counts in [*result.counts.items(), ("**all**", total)]:
        rows.append(f"| {name} | {sum(counts.values())} | {counts['resolved']} | {counts['own']} | "
                    f"{counts['namespace-without-it']} | {counts['missed']} | {_rate(counts)} |")
    listed = [f"| {repo} | `{where}` | {op} | {category} | {detail} |"
              for repo, where, op, category, detail in sorted(result.listed, key=lambda row: (row[3], row))]
    return "\n".join([
        "### Call-site recognition on public Ascend code",
        "",
        f"Measured {machine}",
        "",
        f"`python benchmarks/realcode.py --repos DIR --measure recognition`: the files of "
        f"`benchmarks/realcode_recognition_manifest.json` that name an operator, at the listed commits. "
        "An operator-named "
        f"call is a call whose callee's last name is one of the {len(OPERATORS)} catalogued operators; "
        "recognition = resolved / (resolved + missed) (target >= 99 %).",
        "",
        *rows,
        "",
        "Every call not resolved, and why:" if listed else "Every operator-named call is resolved.",
        "",
        *(["| repository | call | operator | category | detail |", "|---|---|---|---|---|", *listed] if listed else []),
        *([""] + [f"- not parsed: `{path}`" for path in result.unparsed] if result.unparsed else []),
    ])


# Main ---------------------------------------------------------------------------------------------------

MEASUREMENTS: dict[str, tuple[Callable[[list[Repository]], object], Callable[[object, str], str]]] = {
    "recognition": (measure_recognition, render_recognition),
}
"""Measurement name -> (measure over the repositories, render its RESULTS.md section)."""


def scan(manifest: Path, repos: list[Repository]) -> None:
    """Rewrite the manifest's paths: every Python file at the commit whose text names an operator."""
    data = json.loads(manifest.read_text(encoding="utf-8"))
    by_name = {repo.name: repo for repo in repos}
    for entry in data["repositories"]:
        repo = by_name[entry["repository"]]
        entry["paths"] = [path for path, text in repo.read(repo.python_files()) if OPERATOR_NAME.search(text)]
        print(f"{repo.name}: {len(entry['paths'])} files", file=sys.stderr)
    manifest.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repos", type=Path, required=True, help="folder with one <owner>+<name> per repository")
    parser.add_argument("--manifest", type=Path, default=MANIFEST)
    parser.add_argument("--measure", action="append", choices=sorted(MEASUREMENTS),
                        help="run only these measurements (repeatable; default: all)")
    parser.add_argument("--scan", action="store_true", help="rewrite the manifest's file lists and stop")
    parser.add_argument("--json", type=Path, help="also write the raw results there")
    parser.add_argument("--update-results", action="store_true", help="write the sections of benchmarks/RESULTS.md")
    args = parser.parse_args(argv)
    repos = repositories(args.manifest, args.repos)
    if args.scan:
        scan(args.manifest, repos)
        return 0
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))
    machine = harness.machine()
    raw = {}
    for name in args.measure or sorted(MEASUREMENTS):
        measure, render = MEASUREMENTS[name]
        result = measure(repos)
        raw[name] = result
        body = render(result, machine)
        print(body)
        if args.update_results:
            harness.update_results(f"realcode_{name}", body)
    if args.json:
        args.json.write_text(json.dumps({k: v.__dict__ for k, v in raw.items()}, indent=1, default=str),
                             encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
