"""The user's call site of a probed call: the first frame outside torch, torch_npu and kvlint.

Frames are walked from the caller outwards and judged by file path prefix, so a call made through a
helper inside torch_npu (or through kvlint's own wrapper) is attributed to the user's line. The verdict
on a code object is cached, so the walk costs a dictionary lookup per frame.

Compiled code is mapped back to the line that made the call:

- a torch.fx graph (``torch.compile(backend="eager")``, ``<eval_with_key>`` frames) through the graph
  module's line map to the node that called the operator and the node's recorded stack trace;
- inductor's generated module (a file under the temporary folder) through inductor's own line map
  (``PyCodeCache.stack_frames_for_code``), which holds the same stack traces.

Without a recorded trace, the frame that called the compiled function is the site, as before.
"""

from __future__ import annotations

import os
import re
import sys
import weakref
from types import CodeType, FrameType, ModuleType

_KVLINT_DIRS = tuple(
    os.path.dirname(os.path.abspath(path)) + os.sep
    for path in (__file__, sys.modules["kvlint"].__file__ or "")
)
"""kvlint's package directory and runtime_probe's (a separate directory in an editable install)."""

FX_GRAPH = "<eval_with_key>"
GENERATED = ("<frozen", FX_GRAPH)
"""Code without a file that is not the user's: frozen importlib, torch.fx graph modules."""
_TRACE_LINE = re.compile(r'File "(.+)", line (\d+), in ')

USER, SKIPPED, GRAPH, INDUCTOR = "user", "skipped", "graph", "inductor"


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


_PREFIXES: dict[tuple[int, int], tuple[tuple[object, object], tuple[str, ...], dict[int, str]]] = {}
"""(id of torch, id of torch_npu) -> (those modules, the excluded prefixes, the kinds of code judged with them)."""
_JUDGED: list[CodeType] = []
"""Every code object judged: kept alive, so that the id a verdict is filed under stays its own."""


def _excluded() -> tuple[tuple[str, ...], dict[int, str]]:
    """Path prefixes whose frames are never the user's call site, and the verdicts on code made with them;
    recomputed only when the loaded torch or torch_npu module changes (torch_npu may load, or be replaced, at
    any time)."""
    modules = sys.modules
    torch, torch_npu = modules.get("torch"), modules.get("torch_npu")
    known = _PREFIXES.get((id(torch), id(torch_npu)))
    if known is None:
        found = (_module_prefix("torch"), _module_prefix("torch_npu"))
        # the entry keeps the modules alive: a replaced torch_npu freed, a new one could reuse its id and get
        # the old prefixes and verdicts
        known = _PREFIXES[(id(torch), id(torch_npu))] = (
            (torch, torch_npu), _KVLINT_DIRS + tuple(prefix for prefix in found if prefix), {})
    return known[1], known[2]


def excluded_prefixes() -> tuple[str, ...]:
    """Path prefixes whose frames are never the user's call site (see ``_excluded``)."""
    return _excluded()[0]


_RELATIVE: dict[tuple[str, str], str] = {}


def relative(path: str, root: str) -> str:
    """``path`` relative to ``root`` when it lies inside it, else absolute: short and stable in reports."""
    key = (path, root)
    if key not in _RELATIVE:
        absolute = os.path.abspath(path)
        _RELATIVE[key] = os.path.relpath(absolute, root) if absolute.startswith(root + os.sep) else absolute
    return _RELATIVE[key]


_GRAPH_LINES: weakref.WeakKeyDictionary[object, dict[int, tuple[str, int] | None]] = weakref.WeakKeyDictionary()
"""torch.fx graph module -> line of its generated code -> the user's (file, line) it was traced from."""
_GENERATED_LINES: dict[tuple[str, int], tuple[str, int] | None] = {}
"""(inductor's generated file, line) -> the user's (file, line) it was compiled from."""


def _kind(code: CodeType, prefixes: tuple[str, ...], kinds: dict[int, str]) -> str:
    """The verdict on ``code``, kept in ``kinds`` by the code's id: hashing a code object hashes its bytecode and
    constants (microseconds a frame); ``_JUDGED`` keeps the code alive."""
    filename = code.co_filename
    if filename.startswith(FX_GRAPH):
        kind = GRAPH
    elif filename.startswith("<"):  # <string>, <stdin>: user code without a file
        kind = SKIPPED if filename.startswith(GENERATED) else USER
    elif os.path.abspath(filename).startswith(prefixes):
        kind = SKIPPED
    elif _inductor_module(filename):
        kind = INDUCTOR
    elif _inductor_cache(filename):  # generated, but without a line map: the caller is the site
        kind = SKIPPED
    else:
        kind = USER
    _JUDGED.append(code)
    kinds[id(code)] = kind
    return kind


def _inductor_module(filename: str) -> bool:
    codecache = sys.modules.get("torch._inductor.codecache")
    return codecache is not None and filename in getattr(codecache.PyCodeCache, "linemaps", {})


def _inductor_cache(filename: str) -> bool:
    cache_dirs = sys.modules.get("torch._inductor.runtime.cache_dir_utils")
    return cache_dirs is not None and os.path.abspath(filename).startswith(cache_dirs.cache_dir() + os.sep)


def _innermost_user(frames: list[tuple[str, int]], prefixes: tuple[str, ...]) -> tuple[str, int] | None:
    for filename, line in frames:
        if not filename.startswith("<") and not os.path.abspath(filename).startswith(prefixes):
            return filename, line
    return None


def _graph_site(frame: FrameType, prefixes: tuple[str, ...]) -> tuple[str, int] | None:
    """The user line behind the current line of a torch.fx graph module's ``forward``."""
    module = frame.f_locals.get("self")
    try:
        lines = _GRAPH_LINES.setdefault(module, {})
    except TypeError:  # not a module (a graph called in some other way)
        return None
    if frame.f_lineno not in lines:
        site = None
        line_map = getattr(module, "_lineno_map", None)
        graph = getattr(module, "graph", None)
        if line_map and graph is not None:
            index = line_map.get(frame.f_lineno - getattr(module, "_prologue_start", 0))
            nodes = list(graph.nodes)
            trace = nodes[index].meta.get("stack_trace") if index is not None and index < len(nodes) else None
            if trace:
                matches = [(f, int(n)) for f, n in _TRACE_LINE.findall(trace)]
                site = _innermost_user(list(reversed(matches)), prefixes)
        lines[frame.f_lineno] = site
    return lines[frame.f_lineno]


def _inductor_site(frame: FrameType, prefixes: tuple[str, ...]) -> tuple[str, int] | None:
    """The user line behind the current line of an inductor-generated module."""
    key = (frame.f_code.co_filename, frame.f_lineno)
    if key not in _GENERATED_LINES:
        codecache = sys.modules["torch._inductor.codecache"]
        frames = codecache.PyCodeCache.stack_frames_for_code(*key) or []
        _GENERATED_LINES[key] = _innermost_user([(f["filename"], int(f["line"])) for f in frames], prefixes)
    return _GENERATED_LINES[key]


def call_site(root: str, depth: int = 2) -> tuple[str, int]:
    """(path, line) of the innermost user frame, starting ``depth`` frames up; a compiled graph's frame
    stands for the line it was compiled from."""
    prefixes, kinds = _excluded()
    frame: FrameType | None = sys._getframe(depth)
    while frame is not None:
        code = frame.f_code
        kind = kinds.get(id(code)) or _kind(code, prefixes, kinds)
        if kind is not SKIPPED:
            if kind is USER:
                filename = code.co_filename
                return (filename if filename.startswith("<") else relative(filename, root)), frame.f_lineno
            site = _graph_site(frame, prefixes) if kind is GRAPH else _inductor_site(frame, prefixes)
            if site is not None:
                return relative(site[0], root), site[1]
        frame = frame.f_back
    return "<unknown>", 0
