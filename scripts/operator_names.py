#!/usr/bin/env python3
"""Regenerate kvlint/catalogue/operator_names.py: the names of the operators torch_npu, its ATB library and
torchair define, read from their public sources (no name is typed by hand).

    python scripts/operator_names.py --op-plugin DIR[@REV] --pytorch DIR[@REV] --torchair DIR[@REV]
    python scripts/operator_names.py ... --check    # also say where each catalogued schema comes from

Each DIR is a git repository (a checkout or a bare clone) of github.com/Ascend/op-plugin, Ascend/pytorch and
Ascend/torchair; REV defaults to HEAD. Read from them:

- op-plugin ``op_plugin/config/op_plugin_functions.yaml``, sections ``custom`` and ``symint``: the operators
  registered in the ``npu`` namespace (``torch.ops.npu.<name>``, exported as ``torch_npu.<name>``);
- pytorch ``torch_npu/csrc/aten/npu_native_functions.yaml``, the same sections: torch_npu's own ``npu``
  operators (``npu_format_cast``, ``get_npu_format``, ...);
- op-plugin ``op_plugin/ops/atb/*.cpp``: the ``m.def`` schemas of ``TORCH_LIBRARY_FRAGMENT(atb, m)``
  (``torch.ops.atb.<name>``), and ``op_plugin/python/atb/_atb_ops.py``: ``API_LIST`` (set on ``torch_npu``)
  and ``ATB_API_LIST`` (set on ``torch_npu.atb``);
- op-plugin ``codegen/templates/_op_plugin_docs.py``: the names torch_npu documents (``_add_torch_npu_docstr``);
- torchair ``python/torchair/ops/__init__.py``: the functions of ``torchair.ops``.

``--check`` prints, for every schema of ``kvlint.catalogue.schemas``, the file and line it occurs at verbatim
(or says it does not), and exits 1 when one is missing that is not a registered rewrite (docs/operators/
dispatcher.md#dsp-c11).
"""

from __future__ import annotations

import argparse
import ast
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUTPUT = ROOT / "kvlint" / "catalogue" / "operator_names.py"
OP_PLUGIN_YAML = "op_plugin/config/op_plugin_functions.yaml"
PYTORCH_YAML = "torch_npu/csrc/aten/npu_native_functions.yaml"
ATB_SOURCES = "op_plugin/ops/atb"
ATB_PYTHON = "op_plugin/python/atb/_atb_ops.py"
DOCS = "codegen/templates/_op_plugin_docs.py"
TORCHAIR_OPS = "python/torchair/ops/__init__.py"
NPU_SECTIONS = ("custom", "symint")

_SECTION = re.compile(r"^(\w+):")
_FUNC = re.compile(r"^\s*-\s*func:\s*(?P<schema>(?P<name>\w+)(?:\.\w+)?\(.*)$")
_M_DEF = re.compile(r'm\.def\(\s*((?:"(?:[^"\\]|\\.)*"\s*)+)')
_DOCSTR = re.compile(r'_add_torch_npu_docstr\(\s*"(\w+)"')


@dataclass(frozen=True)
class Repository:
    """A git repository at one revision."""

    path: str
    rev: str

    @classmethod
    def parse(cls, text: str) -> Repository:
        path, _, rev = text.partition("@")
        return cls(path, rev or "HEAD")

    def _git(self, *args: str) -> str:
        try:
            return subprocess.run(["git", "-C", self.path, *args], check=True, capture_output=True,
                                  text=True, encoding="utf-8").stdout
        except (OSError, subprocess.CalledProcessError) as error:
            detail = getattr(error, "stderr", "") or error
            raise SystemExit(f"operator_names.py: cannot read {self.path}@{self.rev}: {detail}".strip()) from None

    @property
    def commit(self) -> str:
        return self._git("rev-parse", f"{self.rev}^{{commit}}").strip()

    def read(self, path: str) -> str:
        return self._git("show", f"{self.rev}:{path}").lstrip("\ufeff")

    def files(self, folder: str, suffix: str) -> list[str]:
        listed = self._git("ls-tree", "-r", "--name-only", self.rev, "--", folder).split()
        return sorted(name for name in listed if name.endswith(suffix))


def yaml_functions(text: str, sections: tuple[str, ...]) -> dict[str, tuple[str, int]]:
    """Schema -> (operator name, line) of the ``- func:`` entries in the given top-level sections."""
    found: dict[str, tuple[str, int]] = {}
    section = None
    for number, line in enumerate(text.splitlines(), start=1):
        heading = _SECTION.match(line)
        if heading:
            section = heading.group(1)
            continue
        entry = _FUNC.match(line)
        if entry and section in sections:
            found.setdefault(entry["schema"].strip(), (entry["name"], number))
    return found


def atb_definitions(repo: Repository) -> dict[str, tuple[str, str]]:
    """Schema -> (operator name, ``file:line``) of every ``m.def`` under op_plugin/ops/atb/."""
    found: dict[str, tuple[str, str]] = {}
    for path in repo.files(ATB_SOURCES, ".cpp"):
        text = repo.read(path)
        for match in _M_DEF.finditer(text):
            schema = "".join(ast.literal_eval(part) for part in re.findall(r'"(?:[^"\\]|\\.)*"', match.group(1)))
            line = text.count("\n", 0, match.start()) + 1
            found.setdefault(schema, (re.match(r"\w+", schema).group(0), f"{Path(path).name}:{line}"))
    return found


def list_assignment(text: str, name: str) -> list[str]:
    """The literal list a module assigns to ``name``."""
    for statement in ast.parse(text).body:
        if isinstance(statement, ast.Assign) and any(
                isinstance(target, ast.Name) and target.id == name for target in statement.targets):
            return list(ast.literal_eval(statement.value))
    raise SystemExit(f"operator_names.py: {ATB_PYTHON} no longer assigns {name}")


def module_functions(text: str) -> list[str]:
    return [s.name for s in ast.parse(text).body if isinstance(s, ast.FunctionDef) and not s.name.startswith("_")]


def render(groups: dict[str, tuple[str, list[str]]], sources: dict[str, str], command: str) -> str:
    lines = [
        '"""The operator names torch_npu, its ATB library and torchair define: generated, do not edit.',
        "",
        "Regenerate with ``python scripts/operator_names.py`` (see its docstring):",
        f"``{command}``.",
        "",
        "Sources (github.com/<repository> at <commit>):",
        "",
    ]
    lines += [f"- {repository} {commit}" for repository, commit in sources.items()]
    lines += ['"""', "", "SOURCES: dict[str, str] = {"]
    lines += [f'    "{repository}": "{commit}",' for repository, commit in sources.items()]
    lines += ["}", ""]
    for name, (doc, values) in groups.items():
        lines.append(f"{name}: frozenset[str] = frozenset({{")
        lines += [f'    "{value}",' for value in sorted(set(values))]
        lines.append("})")
        lines.append(f'"""{doc}"""')
        lines.append("")
    return "\n".join(lines)


def check_schemas(yaml: dict[str, tuple[str, int]], atb: dict[str, tuple[str, str]]) -> int:
    """Print where each catalogued schema occurs; 1 when one occurs nowhere and is not a registered rewrite."""
    sys.path.insert(0, str(ROOT))
    from kvlint.catalogue import schemas

    missing = 0
    for schema in schemas.SCHEMAS:
        declared = schema.replace("(Tensor input,", "(Tensor self,").replace("(Tensor(a!) input,", "(Tensor(a!) self,")
        if schema in yaml:
            where = f"yaml:{yaml[schema][1]}"
        elif declared in yaml:
            where = f"yaml:{yaml[declared][1]} (registered with self -> input)"
        elif ".out(" in schema and "Tensor[] out" in schema:
            where = "registered .out rewrite (docs/operators/dispatcher.md#dsp-c11), not verbatim in the yaml"
        else:
            where, missing = "NOT FOUND", missing + 1
        print(f"{schema.split('(')[0]}: {where}")
    for schema in schemas.ATB_SCHEMAS:
        where = atb[schema][1] if schema in atb else "NOT FOUND"
        missing += where == "NOT FOUND"
        print(f"atb::{schema.split('(')[0]}: {where}")
    return 1 if missing else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--op-plugin", required=True, type=Repository.parse, metavar="DIR[@REV]")
    parser.add_argument("--pytorch", required=True, type=Repository.parse, metavar="DIR[@REV]")
    parser.add_argument("--torchair", required=True, type=Repository.parse, metavar="DIR[@REV]")
    parser.add_argument("-o", "--output", type=Path, default=OUTPUT)
    parser.add_argument("--check", action="store_true", help="also locate every catalogued schema")
    args = parser.parse_args(argv)
    plugin, pytorch, torchair = args.op_plugin, args.pytorch, args.torchair

    yaml = yaml_functions(plugin.read(OP_PLUGIN_YAML), NPU_SECTIONS)
    own = yaml_functions(pytorch.read(PYTORCH_YAML), NPU_SECTIONS)
    atb = atb_definitions(plugin)
    atb_python = plugin.read(ATB_PYTHON)
    groups = {
        "NPU": ("Operators of the ``npu`` namespace declared by op-plugin (torch.ops.npu.<name>, exported as "
                "torch_npu.<name>).", [name for name, _ in yaml.values()]),
        "TORCH_NPU_OWN": ("torch_npu's own ``npu`` operators (its npu_native_functions.yaml).",
                          [name for name, _ in own.values()]),
        "ATB": ("Operators of the ``atb`` namespace (torch.ops.atb.<name>), from the ATB ``m.def`` schemas.",
                [name for name, _ in atb.values()]),
        "TORCH_NPU_ATB": ("ATB operators torch_npu also sets as torch_npu.<name> (``API_LIST``).",
                          list_assignment(atb_python, "API_LIST")),
        "TORCH_NPU_ATB_MODULE": ("ATB operators set on the module torch_npu.atb instead (``ATB_API_LIST``).",
                                 list_assignment(atb_python, "ATB_API_LIST")),
        "DOCUMENTED": ("Names torch_npu documents as torch_npu.<name> (op-plugin's docstring table).",
                       _DOCSTR.findall(plugin.read(DOCS))),
        "TORCHAIR_OPS": ("The functions of torchair.ops.", module_functions(torchair.read(TORCHAIR_OPS))),
    }
    sources = {"Ascend/op-plugin": plugin.commit, "Ascend/pytorch": pytorch.commit,
               "Ascend/torchair": torchair.commit}
    command = ("python scripts/operator_names.py --op-plugin <op-plugin>@{0:.8} --pytorch <pytorch>@{1:.8} "
               "--torchair <torchair>@{2:.8}").format(*sources.values())
    args.output.write_text(render(groups, sources, command) + "\n", encoding="utf-8")
    print(f"wrote {args.output} ({sum(len(set(v)) for _, v in groups.values())} names)")
    return check_schemas(yaml, atb) if args.check else 0


if __name__ == "__main__":
    sys.exit(main())
