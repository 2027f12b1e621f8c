"""Interpreter start-up hook, run by the ``kvlint.pth`` line in site-packages on every Python start.

It runs in every process of the environment (pip, pytest, editor helpers, torchrun ranks). The ``.pth``
line itself tests the two variables and imports this module only when one of them is set, so with
``KVLINT_PROBE`` and ``KVLINT_EMULATE`` unset start-up imports nothing of kvlint. This module imports only
``os`` and ``sys`` until a variable asks for more, and it never raises: a failure is one line on stderr and
the program runs unprobed. It may run twice in one start (a venv's site-packages is processed twice), hence
a guard per variable: ``python -m kvlint.runtime_probe`` calls it again after setting ``KVLINT_PROBE``,
which must still take effect.

``KVLINT_EMULATE=1`` does not import torch at start-up: it adds a ``sys.meta_path`` entry that installs
the emulator when the program first imports ``torch_npu`` (or ``torchair``), so the processes that never
do (pip, compile workers, tools) pay nothing. A real torch_npu, when there is one, is imported as usual (the emulator never
shadows it) and the variable is announced as ignored.
"""

import os
import sys

OFF = frozenset({"", "0", "off", "false", "no"})
_started: set[str] = set()
"""The variables already acted on in this process."""


def _wanted(variable: str) -> bool:
    return variable not in _started and os.environ.get(variable, "").strip().lower() not in OFF


class _Installed:
    """Loader of a module that ``emulator.install()`` has already put in ``sys.modules``."""

    def __init__(self, module: object) -> None:
        self._module = module

    def create_module(self, spec: object) -> object:
        return self._module

    def exec_module(self, module: object) -> None:
        """Nothing to run: the emulator built the module."""


EMULATED = ("torch_npu", "torchair")
"""The modules the emulator provides; importing either first installs it."""


class EmulatorOnImport:
    """A ``sys.meta_path`` entry that installs the CPU emulator the first time ``torch_npu`` (or ``torchair``)
    is imported."""

    def find_spec(self, fullname: str, path: object = None, target: object = None) -> object:
        if fullname not in EMULATED:
            return None
        if self in sys.meta_path:  # once: from now on the ordinary import system decides
            sys.meta_path.remove(self)
        try:
            from importlib.machinery import ModuleSpec

            from kvlint.runtime_probe import emulator

            emulator.install()
            module = sys.modules.get(fullname)
            if module is None:  # torchair without the parts of torch it needs: the ordinary import decides
                return None
            # The import system returns the spec of a module already in sys.modules; the emulator's spec has
            # no loader (a namespace package to the import system, which would replace the module by an empty
            # one), so it gets one that hands back the module itself.
            spec = getattr(module, "__spec__", None) or ModuleSpec(fullname, None)
            spec.loader = _Installed(module)
            return spec
        except Exception as exc:  # noqa: BLE001 - an import hook must never break the program's import
            print(f"kvlint: KVLINT_EMULATE ignored: {type(exc).__name__}: {exc}", file=sys.stderr)
            return None


def activate_from_env() -> None:
    """``KVLINT_EMULATE=1``: install the CPU emulator of torch_npu when torch_npu is first imported;
    ``KVLINT_PROBE=...``: start the probe."""
    if _wanted("KVLINT_EMULATE"):
        _started.add("KVLINT_EMULATE")
        sys.meta_path.insert(0, EmulatorOnImport())
    if _wanted("KVLINT_PROBE"):
        _started.add("KVLINT_PROBE")
        try:
            from kvlint.runtime_probe import probe as runtime_probe

            runtime_probe.activate_from_env()
        except Exception as exc:  # noqa: BLE001
            print(f"kvlint: KVLINT_PROBE ignored: {type(exc).__name__}: {exc}", file=sys.stderr)
