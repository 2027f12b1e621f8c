"""kvlint: lint PyTorch inference code that calls Ascend torch_npu fused attention and KV-cache operators.

``pylint --load-plugins kvlint`` loads this module and calls :func:`register`.
Importing kvlint never imports torch or torch_npu.
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
