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


class BuildPyWithStartup(build_py):
    def run(self) -> None:
        super().run()
        if not self.editable_mode:
            for name, content in START_FILES.items():
                with open(os.path.join(self.build_lib, name), "w", encoding="utf-8") as handle:
                    handle.write(content)

    def get_outputs(self, include_bytecode: bool = True) -> list[str]:
        extra = [] if self.editable_mode else [os.path.join(self.build_lib, name) for name in START_FILES]
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


setup(cmdclass={"build_py": BuildPyWithStartup, "editable_wheel": EditableWheelWithStartup})
