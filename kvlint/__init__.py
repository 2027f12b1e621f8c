"""kvlint: lint PyTorch inference code that calls Ascend torch_npu fused attention and KV-cache operators.

``pylint --load-plugins kvlint`` loads this module and calls :func:`register`.
Importing kvlint never imports torch or torch_npu.

The packages are the layers; each imports only those before it:

- static linter: ``catalogue`` (schemas, operators, rules, rule pages) <- ``analysis`` (names, call sites,
  reaching definitions, the value follower) <- ``checks`` (one function per rule, and the engine that runs
  them) <- ``fix`` (certain rewrites) <- ``frontends`` (CLI, renderers, flake8, pylint reporters,
  configuration, suppression) and ``checkers`` (pylint);
- runtime: ``runtime_probe.reference`` (the float32 semantics) <- ``runtime_probe.emulator`` <- the probe
  (``runtime_probe``), which may read the catalogue and the budget formulas but nothing of the linter;
- ``budget``: the KV-cache budget tool, on its own;
- ``console``: the broken-pipe helper of the command lines, which imports nothing of kvlint (any layer may use it).

``tests/test_layers.py`` fails when an import goes the wrong way.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pylint.lint import PyLinter

__version__ = "0.1.0"


def register(linter: PyLinter) -> None:
    """pylint plugin entry point: register kvlint's checkers."""
    from kvlint.checkers import register_checkers

    register_checkers(linter)
