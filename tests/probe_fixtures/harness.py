"""Fixtures shared by the probe tests: an activated probe with its own stream, and the stand-in loader.

Import the fixtures into a test module (``from tests.probe_fixtures.harness import probe, standin``).
"""

from __future__ import annotations

import importlib
import io
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType

import pytest
from kvlint.runtime_probe import emulator
from kvlint.runtime_probe import probe as runtime_probe
from kvlint.runtime_probe.config import Settings

FIXTURES = Path(__file__).resolve().parent
STANDIN_PATH = str(FIXTURES / "standin_npu")


def marked_line(path: Path, marker: str) -> int:
    """The 1-based number of the only line of ``path`` that ends with the comment ``# marker``."""
    lines = [n for n, text in enumerate(path.read_text().splitlines(), 1) if text.rstrip().endswith(f"# {marker}")]
    assert len(lines) == 1, f"{marker} marks {len(lines)} lines of {path}"
    return lines[0]


def codes(probe: runtime_probe.Probe) -> dict[str, int]:
    """Finding code -> total count."""
    totals: dict[str, int] = {}
    for finding in probe.recorder.findings.values():
        totals[finding.code] = totals.get(finding.code, 0) + finding.count
    return totals


def in_threads(work: Callable[[], object], threads: int) -> list[BaseException]:
    """Run ``work`` on ``threads`` threads at once; what any of them raised."""
    errors: list[BaseException] = []

    def run() -> None:
        try:
            work()
        except BaseException as exc:  # surfaced to the caller
            errors.append(exc)

    started = [threading.Thread(target=run) for _ in range(threads)]
    for thread in started:
        thread.start()
    for thread in started:
        thread.join()
    return errors


@pytest.fixture
def probe() -> Iterator[Callable[..., runtime_probe.Probe]]:
    """``probe(**settings)`` activates a probe writing to a private stream; deactivated afterwards."""

    def start(**settings: object) -> runtime_probe.Probe:
        return runtime_probe.activate(Settings(**settings), stream=io.StringIO())  # type: ignore[arg-type]

    yield start
    runtime_probe.deactivate()


@pytest.fixture
def standin(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[str], ModuleType]]:
    """``standin(variant)`` imports a fresh stand-in ``torch_npu`` (through the normal import system);
    whatever ``torch_npu`` was loaded before (the emulator's) is put back afterwards."""
    previous = sys.modules.get("torch_npu")

    def load(variant: str = "good") -> ModuleType:
        monkeypatch.setenv("KVLINT_TEST_STANDIN", variant)
        sys.modules.pop("torch_npu", None)
        return importlib.import_module("torch_npu")

    monkeypatch.syspath_prepend(STANDIN_PATH)
    yield load
    sys.modules.pop("torch_npu", None)
    if previous is not None:
        sys.modules["torch_npu"] = previous


@pytest.fixture
def emulated(probe, monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., tuple[runtime_probe.Probe, ModuleType]]]:
    """``emulated(standins={name: function}, **settings)``: the emulated torch_npu, with stand-ins for
    operators the emulator does not implement set on it, under an active probe (which wraps them too)."""
    previous = sys.modules.pop("torch_npu", None)

    def start(standins: dict[str, Callable[..., object]] | None = None, **settings: object):
        module = emulator.install()
        for name, function in (standins or {}).items():
            monkeypatch.setattr(module, name, function)
        return probe(**settings), module

    yield start
    runtime_probe.deactivate()
    sys.modules.pop("torch_npu", None)
    if previous is not None:
        sys.modules["torch_npu"] = previous


def run_example(source: str) -> tuple[str, Exception | None]:
    """What the probe prints for a page's example program, run as ``example.py`` (the working directory
    is the repository's root) under default settings on a fresh emulated torch_npu, and what the program
    raised (the operator may reject a bad example after the probe reported it)."""
    previous = sys.modules.pop("torch_npu", None)
    stream = io.StringIO()
    raised = None
    try:
        emulator.install()
        runtime_probe.activate(Settings(), stream=stream)
        try:
            exec(compile(source, "example.py", "exec"), {"__name__": "__main__"})  # noqa: S102 - the page's example
        except Exception as error:
            raised = error
    finally:
        runtime_probe.deactivate()
        sys.modules.pop("torch_npu", None)
        if previous is not None:
            sys.modules["torch_npu"] = previous
    return stream.getvalue(), raised
