"""Packaging of the start-up hook; everything else is declared in setup.cfg.

``kvlint.pth`` (and its Python 3.15+ successor ``kvlint.start``, PEP 829) must land at the root of
site-packages for both ``pip install .`` and ``pip install -e .``. setuptools puts ``data_files`` and
package data in the regular wheel only; the editable wheel carries just its own ``__editable__`` files.
So the files are written by ``build_py`` into the regular wheel's root, and added to the editable wheel
by wrapping its strategy (the object that writes the editable wheel's files), which keeps that
wheel's RECORD complete, so ``pip uninstall`` removes them.

Order: Python's ``site`` module executes the ``.pth`` files of a site-packages folder in sorted order of
their names (``site.addsitedir``), and a setuptools editable install puts the project on ``sys.path``
through its own ``__editable__.<name>-<version>.pth`` (setuptools' "Development Mode" documentation, PEP
660). ``_`` sorts before ``k``, so an editable kvlint is importable when the ``kvlint.pth`` line runs. The
line tests ``KVLINT_PROBE`` / ``KVLINT_EMULATE`` itself, so that with both unset no process imports any of
kvlint.
"""

from __future__ import annotations

import os
import re
from typing import Any

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.command.editable_wheel import editable_wheel

START_LINE = (
    'import os; (os.environ.get("KVLINT_PROBE") or os.environ.get("KVLINT_EMULATE")) '
    'and __import__("kvlint._startup")._startup.activate_from_env()\n'
)
"""The ``.pth`` line: ``site`` has imported ``os`` already, and kvlint is imported only when a variable is set."""
START_FILES = {
    "kvlint.pth": START_LINE,
    "kvlint.start": "kvlint._startup:activate_from_env\n",
}


DOCS = "docs"
"""The documentation folder; a wheel carries its pages as ``kvlint/docs`` (``kvlint --explain docs/...`` prints
them, ``kvlint.catalogue.pages.docs_folder``). An editable install reads them from the checkout."""


def _doc_pages() -> list[str]:
    return sorted(os.path.join(root, name) for root, _, names in os.walk(DOCS) for name in names
                  if name.endswith(".md"))


class BuildPyWithStartup(build_py):
    def run(self) -> None:
        super().run()
        if not self.editable_mode:
            for name, content in START_FILES.items():
                with open(os.path.join(self.build_lib, name), "w", encoding="utf-8") as handle:
                    handle.write(content)
            for source in _doc_pages():
                target = os.path.join(self.build_lib, "kvlint", source)
                os.makedirs(os.path.dirname(target), exist_ok=True)
                self.copy_file(source, target)

    def get_outputs(self, include_bytecode: bool = True) -> list[str]:
        if self.editable_mode:
            return super().get_outputs(include_bytecode)
        extra = [os.path.join(self.build_lib, name) for name in START_FILES]
        extra += [os.path.join(self.build_lib, "kvlint", source) for source in _doc_pages()]
        return super().get_outputs(include_bytecode) + extra


class _StrategyWithStartup:
    """An editable-wheel strategy that also writes the start-up files."""

    def __init__(self, strategy: Any) -> None:
        self._strategy = strategy

    def __call__(self, wheel: Any, files: list[str], mapping: dict[str, str]) -> None:
        self._strategy(wheel, files, mapping)
        for name, content in START_FILES.items():
            wheel.writestr(name, content.encode("utf-8"))

    def __enter__(self) -> _StrategyWithStartup:
        self._strategy.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self._strategy.__exit__(*exc)


class EditableWheelWithStartup(editable_wheel):
    def _select_strategy(self, name: str, tag: str, build_lib: Any) -> Any:
        return _StrategyWithStartup(super()._select_strategy(name, tag, build_lib))


_RELATIVE_LINK = re.compile(r"\[([^\]]+)\]\((?!https?://|#|mailto:)([^)\s]+)\)")


def package_index_readme(text: str) -> str:
    """The README as the package index shows it (the long description). Its relative links resolve on the
    repository's own pages only, and the metadata names no repository, so each becomes text that says where the
    reader finds it: a rule page by its code (``kvlint --explain KVL201``), a documentation page by the command
    that prints the copy the wheel ships, anything else (examples, benchmarks) as a path in the source
    distribution."""

    def rewrite(match: re.Match[str]) -> str:
        label, target = match.groups()
        plain = label.strip("`")
        rule = re.fullmatch(r"docs/rules/(KVL\d{3})\.md", target)
        if rule:
            return plain if plain == rule.group(1) else f"{plain} (`kvlint --explain {rule.group(1)}`)"
        if target.startswith(f"{DOCS}/") and target.partition("#")[0].endswith(".md"):
            return f"{label} (`kvlint --explain {target}`)"
        if plain == target:
            return f"`{target}` (in the source distribution)"
        return f"{label} (`{target}` in the source distribution)"

    return _RELATIVE_LINK.sub(rewrite, text)


def _long_description() -> str:
    with open("README.md", encoding="utf-8") as handle:
        return package_index_readme(handle.read())


if __name__ == "__main__":
    setup(cmdclass={"build_py": BuildPyWithStartup, "editable_wheel": EditableWheelWithStartup},
          long_description=_long_description())
