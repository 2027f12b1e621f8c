"""A reproduction for every finding: with ``KVLINT_PROBE_DUMP=DIR``, each call site's first error-level
finding (a reference mismatch, KVL501, is one) writes a folder under DIR:

- ``inputs.pt``: the calls to re-run, ``torch.save``'d on the CPU: the call itself and, for a finding across
  calls (KVL505, KVL508, KVL509, KVL510), the cache writes of this step (or the repeating write) that feed
  it, in their order. Tensors are saved with their views: a cache and the view a write targets stay one
  storage, as in the program;
- ``arguments.json``: each call's operator, site and arguments, tensors described by shape and dtype;
- ``finding.json``: the finding (code, symbol, severity, message, site, operator), the process (pid, rank)
  and what the size cap dropped;
- ``reproduce.py``: a script of a few lines that re-runs the calls under the probe, on the NPU when the
  machine has one (a real torch_npu), else on kvlint's CPU emulator, comparing each attention output with
  the float32 reference, and prints the findings again (``runtime_probe.reproduce``).

The folder is named by the site, the code, the rank and the process id, so ranks and workers never write
over each other. ``KVLINT_PROBE_DUMP_MAX`` caps a site's tensor bytes (default 64 MiB): the largest
tensors are dropped until the rest fits, and the folder (and stderr) says which. Nothing here runs unless
the dump is asked for.
"""

from __future__ import annotations

import json
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

SCRIPT = "reproduce.py"
INPUTS = "inputs.pt"
FINDING = "finding.json"
ARGUMENTS = "arguments.json"
DROPPED = "kvlint_dropped"
"""Key of the marker that stands in for a tensor the size cap dropped."""


@dataclass(frozen=True)
class Call:
    """One operator call as the program made it (references, not copies, until it is dumped)."""

    op: str
    overload: str
    path: str
    line: int
    args: tuple[Any, ...]
    kwargs: dict[str, Any]


def _slug(path: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", path.strip("/<>")) or "site"


def folder_name(path: str, line: int, code: str, rank: str, pid: int) -> str:
    """``examples_buggy_model.py-58.KVL509.rank0.pid4242`` (no rank part outside a distributed run)."""
    return f"{_slug(path)}-{line}.{code}." + (f"rank{rank}." if rank else "") + f"pid{pid}"


class _Host:
    """Moves a structure of call arguments to the CPU once per storage, so that views keep sharing it."""

    def __init__(self) -> None:
        self._storages: dict[tuple[str, int], torch.UntypedStorage] = {}

    def tensor(self, value: torch.Tensor) -> torch.Tensor:
        value = value.detach()
        if value.device.type == "cpu":
            return value
        storage = value.untyped_storage()
        key = (str(value.device), storage.data_ptr())
        if key not in self._storages:
            self._storages[key] = storage.cpu()
        host = torch.empty(0, dtype=value.dtype)
        return host.set_(self._storages[key], value.storage_offset(), value.shape, value.stride())

    def __call__(self, value: Any) -> Any:
        if isinstance(value, torch.Tensor):
            return self.tensor(value)
        if isinstance(value, (list, tuple)):
            return type(value)(self(item) for item in value)
        if isinstance(value, dict):
            return {key: self(item) for key, item in value.items()}
        return value


def _tensors(value: Any) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [t for item in value for t in _tensors(item)]
    if isinstance(value, dict):
        return [t for item in value.values() for t in _tensors(item)]
    return []


def _storage_key(tensor: torch.Tensor) -> int:
    return tensor.untyped_storage().data_ptr()


def _cap(calls: list[dict[str, Any]], limit: int) -> list[str]:
    """Drop the largest storages until the rest fits ``limit`` bytes; what was dropped, as text."""
    sizes: dict[int, int] = {}
    for call in calls:
        for tensor in _tensors([call["args"], call["kwargs"]]):
            sizes[_storage_key(tensor)] = tensor.untyped_storage().nbytes()
    dropped_keys: set[int] = set()
    total = sum(sizes.values())
    for key, size in sorted(sizes.items(), key=lambda item: -item[1]):
        if total <= limit:
            break
        dropped_keys.add(key)
        total -= size
    dropped: list[str] = []

    def replace(value: Any, where: str) -> Any:
        if isinstance(value, torch.Tensor) and _storage_key(value) in dropped_keys:
            dropped.append(f"{where}: {value.dtype} {list(value.shape)} ({value.untyped_storage().nbytes()} bytes)")
            return {DROPPED: f"{value.dtype} {list(value.shape)}"}
        if isinstance(value, (list, tuple)):
            return type(value)(replace(item, f"{where}[{i}]") for i, item in enumerate(value))
        if isinstance(value, dict):
            return {key: replace(item, f"{where}.{key}") for key, item in value.items()}
        return value

    for call in calls:
        call["args"] = replace(call["args"], f"{call['op']} args")
        call["kwargs"] = replace(call["kwargs"], f"{call['op']} kwargs")
    return dropped


def _described(value: Any) -> Any:
    """A JSON-able view of an argument: tensors by dtype, shape and device, the rest as they are (or repr)."""
    if isinstance(value, torch.Tensor):
        return {"tensor": str(value.dtype).removeprefix("torch."), "shape": list(value.shape),
                "device": str(value.device)}
    if isinstance(value, (list, tuple)):
        return [_described(item) for item in value]
    if isinstance(value, dict):
        return {str(key): _described(item) for key, item in value.items()}
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return repr(value)


def _script(finding: dict[str, Any], calls: list[dict[str, Any]]) -> str:
    """The reproduction script: one line per call, so that the probe places each at its own line."""
    lines = [
        f'"""kvlint reproduction: {finding["code"]} at {finding["path"]}:{finding["line"]} '
        f'(pid {finding["process"]["pid"]}).',
        "",
        "python reproduce.py re-runs the calls below under the kvlint probe, on the NPU when this machine has one",
        "(a real torch_npu), else on kvlint's CPU emulator, compares each attention output with the float32",
        "reference and prints the findings; exit status 1 when the finding comes back, 0 when it does not.",
        '"""',
        "from kvlint.runtime_probe.reproduce import Replay",
        "",
        "replay = Replay(__file__)",
        "torch_npu, calls = replay.start()",
    ]
    for index, call in enumerate(calls):
        overload = "" if call["overload"] == "default" else f".{call['overload']}"
        target = f"torch_npu.{call['op']}" if not overload else f"torch.ops.{call['namespace']}.{call['op']}{overload}"
        lines.append(f"{target}(*calls[{index}].args, **calls[{index}].kwargs)  # {call['path']}:{call['line']}")
    lines.append("raise SystemExit(replay.finish())")
    if any(call["overload"] != "default" for call in calls):
        lines.insert(lines.index("from kvlint.runtime_probe.reproduce import Replay"), "import torch")
    return "\n".join(lines) + "\n"


def write(folder: Path, finding: dict[str, Any], calls: list[Call], limit: int) -> list[str]:
    """Write one site's reproduction into ``folder``; returns what the cap dropped."""
    from kvlint.catalogue.operators import lookup

    host = _Host()
    saved = []
    for call in calls:
        operator = lookup(call.op, call.overload)
        saved.append({"op": call.op, "overload": call.overload, "path": call.path, "line": call.line,
                      "namespace": operator.namespace if operator is not None else "npu",
                      "args": host(call.args), "kwargs": host(call.kwargs)})
    dropped = _cap(saved, limit)
    folder.mkdir(parents=True, exist_ok=True)
    record = {**finding, "dropped": dropped, "max_bytes": limit}
    torch.save({"finding": record, "calls": saved}, folder / INPUTS)
    (folder / ARGUMENTS).write_text(json.dumps(
        [{"op": c["op"], "overload": c["overload"], "site": f"{c['path']}:{c['line']}",
          "args": _described(c["args"]), "kwargs": _described(c["kwargs"])} for c in saved], indent=2) + "\n",
        encoding="utf-8")  # fmt: skip
    (folder / FINDING).write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    (folder / SCRIPT).write_text(_script(record, saved), encoding="utf-8")
    if dropped:
        print(f"kvlint: probe dump {folder}: over KVLINT_PROBE_DUMP_MAX={limit} bytes, dropped {'; '.join(dropped)}"
              " (the script cannot re-run the calls without them)", file=sys.stderr)
    return dropped


def process() -> dict[str, Any]:
    from kvlint.runtime_probe import config

    rank = config.rank()
    return {"pid": os.getpid(), "rank": int(rank) if rank.isdigit() else None}
