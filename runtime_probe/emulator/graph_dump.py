"""``NPUGraph.debug_dump(path)`` on a CPU, and ``torch_npu.npu._npugraph_utils.align_trace_json``, which it calls
to write the aligned copy of the dump.

As on the device: the dump of a captured graph is written to ``path``, then aligned into
``<path less .json>.aligned.json``; a failing alignment leaves the dump in place, writes no aligned file and
does not raise; a graph with nothing captured writes nothing (a warning says so). The format is the
emulator's own: the device's dump describes its tasks, which the emulator does not have, so the dump lists
the recorded calls (their operator, and the shapes and dtypes of their tensor arguments) in capture order,
and the aligned copy gives one call a line, its columns aligned.
"""

from __future__ import annotations

import json
import logging
import warnings
from pathlib import Path
from typing import Any

import torch
from torch.utils._pytree import tree_flatten

FORMAT = "kvlint emulator: recorded calls"
logger = logging.getLogger(__name__)


def dump(calls: list[Any], debug_path: str) -> None:
    """Write the recorded ``calls`` (``graphs._Call``) to ``debug_path``, then align it (``align_trace_json``)."""
    if not calls:
        warnings.warn("NPUGraph.debug_dump: the graph has captured nothing; no dump written", stacklevel=3)
        return
    path = debug_path or "npugraph_debug.json"
    tasks = [_task(index, call) for index, call in enumerate(calls)]
    Path(path).write_text(json.dumps({"format": FORMAT, "tasks": tasks}, indent=1) + "\n", encoding="utf-8")
    try:
        align_trace_json(path, None)
    except Exception as error:  # noqa: BLE001 - the dump stays, as on the device, whatever the alignment raised
        logger.warning("NPUGraph.debug_dump: aligning %s failed (%s); the dump is kept", path, error)


def align_trace_json(path: str, output_path: str | None = None) -> str:
    """Write the dump at ``path`` one call a line, its columns aligned, to ``output_path`` (default: ``path``
    with ``.aligned.json`` for its ``.json``); return where it went."""
    source = Path(path)
    tasks = json.loads(source.read_text(encoding="utf-8"))["tasks"]
    stem = source.name[: -len(".json")] if source.name.endswith(".json") else source.name
    target = Path(output_path) if output_path else source.with_name(f"{stem}.aligned.json")
    width = max(len(task["operator"]) for task in tasks)
    lines = [f"{task['index']:>5}  {task['operator']:<{width}}  {json.dumps(task['tensors'])}" for task in tasks]
    target.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return str(target)


def _task(index: int, call: Any) -> dict[str, Any]:
    tensors = [value for value in tree_flatten((call.args, call.kwargs))[0] if isinstance(value, torch.Tensor)]
    described = [[list(tensor.shape), str(tensor.dtype).removeprefix("torch.")] for tensor in tensors]
    return {"index": index, "operator": str(call.func), "tensors": described}
