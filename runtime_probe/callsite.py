"""The user's call site of a probed call: the first frame outside torch, torch_npu and kvlint.

Frames are walked from the caller outwards and compared by file path prefix, so a call made through a
helper inside torch_npu (or through kvlint's own wrapper) is attributed to the user's line.
"""

from __future__ import annotations

import os
import sys
from types import ModuleType

_KVLINT_DIRS = tuple(
    os.path.dirname(os.path.abspath(path)) + os.sep
    for path in (__file__, sys.modules["kvlint"].__file__ or "")
)
"""kvlint's package directory and runtime_probe's (a separate directory in an editable install)."""


GENERATED = ("<frozen", "<eval_with_key>")
"""Code without a file that is not the user's: frozen importlib, torch.fx graph modules (a compiled call
is attributed to the line that called the compiled function)."""


def _module_prefix(name: str) -> str | None:
    """The directory of a loaded package, or the file of a loaded single-file module."""
    module: ModuleType | None = sys.modules.get(name)
    filename = getattr(module, "__file__", None)
    if not filename:
        return None
    filename = os.path.abspath(filename)
    if hasattr(module, "__path__"):
        return os.path.dirname(filename) + os.sep
    return filename


_PREFIXES: dict[tuple[object, ...], tuple[str, ...]] = {}


def excluded_prefixes() -> tuple[str, ...]:
    """Path prefixes whose frames are never the user's call site; recomputed only when the loaded torch or
    torch_npu module changes (torch_npu may load, or be replaced, at any time)."""
    modules = (sys.modules.get("torch"), sys.modules.get("torch_npu"))
    key = tuple((id(module), getattr(module, "__file__", None)) for module in modules)
    if key not in _PREFIXES:
        found = (_module_prefix("torch"), _module_prefix("torch_npu"))
        _PREFIXES[key] = _KVLINT_DIRS + tuple(prefix for prefix in found if prefix)
    return _PREFIXES[key]


def relative(path: str, root: str) -> str:
    """``path`` relative to ``root`` when it lies inside it, else absolute: short and stable in reports."""
    path = os.path.abspath(path)
    return os.path.relpath(path, root) if path.startswith(root + os.sep) else path


def call_site(root: str, depth: int = 2) -> tuple[str, int]:
    """(path, line) of the innermost frame outside the excluded prefixes, starting ``depth`` frames up."""
    prefixes = excluded_prefixes()
    frame = sys._getframe(depth)
    while frame is not None:
        filename = frame.f_code.co_filename
        if filename.startswith("<"):  # <string>, <stdin>: user code without a file
            if not filename.startswith(GENERATED):
                return filename, frame.f_lineno
        elif not os.path.abspath(filename).startswith(prefixes):
            return relative(filename, root), frame.f_lineno
        frame = frame.f_back
    return "<unknown>", 0
