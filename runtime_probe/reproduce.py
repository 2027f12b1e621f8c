"""Re-running a dumped finding (``dump``): what a ``reproduce.py`` script calls.

``Replay(script).start()`` loads the folder's ``inputs.pt``, picks the operators (a real torch_npu on a
machine with an NPU, the tensors moved there; else kvlint's CPU emulator) and starts the probe with every
call checked and compared with the float32 reference. The script then makes the calls, one per line, and
``finish()`` prints what the probe found, next to the finding that was dumped, and returns the exit status:
1 when the dumped finding's code came back, 0 when it did not (a regression test passes once it is fixed),
2 when the calls cannot be re-run (inputs dropped by the size cap).
"""

from __future__ import annotations

import io
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import torch
from kvlint.runtime_probe import probe as runtime_probe
from kvlint.runtime_probe.config import Settings
from kvlint.runtime_probe.dump import DROPPED, INPUTS, SCRIPT

_SCRIPT_LINE = re.compile(r"\S*" + re.escape(SCRIPT) + r":(\d+)")


@dataclass(frozen=True)
class ReplayedCall:
    args: tuple[Any, ...]
    kwargs: dict[str, Any]


def _real_npu() -> ModuleType | None:
    """A real torch_npu with a device, or None (the emulator is never taken for one)."""
    try:
        import torch_npu  # type: ignore[import-not-found]
    except ImportError:
        return None
    if getattr(torch_npu, "__kvlint_emulator__", False) or not torch.npu.is_available():  # type: ignore[attr-defined]
        return None
    return torch_npu


def _to(value: Any, device: str) -> Any:
    if isinstance(value, torch.Tensor):
        return value.to(device)
    if isinstance(value, (list, tuple)):
        return type(value)(_to(item, device) for item in value)
    if isinstance(value, dict):
        return {key: _to(item, device) for key, item in value.items()}
    return value


def _dropped(value: Any) -> bool:
    if isinstance(value, dict):
        return DROPPED in value or any(_dropped(item) for item in value.values())
    if isinstance(value, (list, tuple)):
        return any(_dropped(item) for item in value)
    return False


class Replay:
    def __init__(self, script: str) -> None:
        self.folder = Path(script).resolve().parent
        saved = torch.load(self.folder / INPUTS, weights_only=True)
        self.finding: dict[str, Any] = saved["finding"]
        self.calls: list[dict[str, Any]] = saved["calls"]
        self.where = "the CPU emulator"
        self._stream = io.StringIO()
        self._probe: runtime_probe.Probe | None = None

    def start(self) -> tuple[ModuleType, list[ReplayedCall]]:
        finding = self.finding
        print(f"dumped: {finding['path']}:{finding['line']}: {finding['code']} {finding['symbol']}: "
              f"{finding['message']} [{finding['op']}]")
        if any(_dropped([call["args"], call["kwargs"]]) for call in self.calls):
            print("cannot re-run: the size cap dropped " + "; ".join(finding["dropped"]) +
                  " (raise KVLINT_PROBE_DUMP_MAX and run the program again)")
            raise SystemExit(2)
        torch_npu = _real_npu()
        calls = [ReplayedCall(tuple(call["args"]), dict(call["kwargs"])) for call in self.calls]
        if torch_npu is None:
            from kvlint.runtime_probe import emulator

            torch_npu = emulator.install()
        else:
            self.where = "the NPU"
            calls = [ReplayedCall(_to(c.args, "npu"), _to(c.kwargs, "npu")) for c in calls]
        self._probe = runtime_probe.activate(Settings(sample=None, value_first=None), stream=self._stream)
        torch_npu = sys.modules.get("torch_npu", torch_npu)
        return torch_npu, calls

    def finish(self) -> int:
        probe = runtime_probe.deactivate() or self._probe
        assert probe is not None
        report = probe.report()
        script = (self.folder / SCRIPT).read_text(encoding="utf-8").splitlines()
        sites = {str(n): text.partition("  # ")[2] for n, text in enumerate(script, 1) if "  # " in text}

        def original(match: re.Match[str]) -> str:  # a line of this script -> the program's line it stands for
            return sites.get(match.group(1)) or match.group(0)

        print(f"re-run on {self.where}:")
        found = [f for f in report["findings"] if f["severity"] != "info"]
        for f in found:
            site = sites.get(str(f["line"])) or f"{f['path']}:{f['line']}"
            message = _SCRIPT_LINE.sub(original, f["message"])
            print(f"  {site}: {f['code']} {f['symbol']}: {message} [{f['op']}]")
        compared = sum(site["compared"] for site in report["sites"])
        worst = max((site["max_abs_err"] for site in report["sites"] if site["max_abs_err"] is not None), default=None)
        print(f"  {compared} attention output(s) compared with the float32 reference" +
              ("" if worst is None else f", max abs error {worst:.3g}") +
              " (a call with an error-level finding is not compared)")
        again = any(f["code"] == self.finding["code"] for f in found)
        print(f"{self.finding['code']} {'reproduced' if again else 'not reproduced'} on {self.where}")
        return 1 if again else 0

