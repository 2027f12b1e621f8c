"""Interpreter start-up hook, run by the ``kvlint.pth`` line in site-packages on every Python start.

It runs in every process of the environment (pip, pytest, editor helpers), so with ``KVLINT_PROBE`` and
``KVLINT_EMULATE`` unset it returns after two environment lookups, importing nothing (not torch). It
never raises: a failure is one line on stderr and the program runs unprobed. It may run twice in one
start (a venv's site-packages is processed twice), hence a guard per variable: ``python -m
kvlint.runtime_probe`` calls this again after setting ``KVLINT_PROBE``, which must still take effect.
"""

from __future__ import annotations

import os
import sys

OFF = frozenset({"", "0", "off", "false", "no"})
_started: set[str] = set()
"""The variables already acted on in this process."""


def _wanted(variable: str) -> bool:
    return variable not in _started and os.environ.get(variable, "").strip().lower() not in OFF


def activate_from_env() -> None:
    """``KVLINT_EMULATE=1``: install the CPU emulator of torch_npu; ``KVLINT_PROBE=...``: start the probe."""
    if _wanted("KVLINT_EMULATE"):
        _started.add("KVLINT_EMULATE")
        try:
            from kvlint.runtime_probe import emulator

            emulator.install()
        except Exception as exc:  # noqa: BLE001 - start-up must never break the user's program
            print(f"kvlint: KVLINT_EMULATE ignored: {type(exc).__name__}: {exc}", file=sys.stderr)
    if _wanted("KVLINT_PROBE"):
        _started.add("KVLINT_PROBE")
        try:
            from kvlint.runtime_probe import probe as runtime_probe

            runtime_probe.activate_from_env()
        except Exception as exc:  # noqa: BLE001
            print(f"kvlint: KVLINT_PROBE ignored: {type(exc).__name__}: {exc}", file=sys.stderr)
