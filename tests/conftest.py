"""Shared pytest configuration: tests run from the repository root so fixture paths are relative; the
emulator's tests share the ``torch_npu`` fixture."""

import os
import sys
import types
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

os.environ.setdefault("TORCHINDUCTOR_ERROR_ON_CUSTOM_OP_ALIASING", "1")
"""torch.compile raises on a custom operator whose output aliases its input, as it does wherever ``CI`` is
set, instead of warning: the tests (and the programs they start) behave on a laptop as in CI."""


@pytest.fixture(autouse=True, scope="session")
def _run_from_repository_root() -> None:
    os.chdir(ROOT)


@pytest.fixture(scope="module")
def torch_npu() -> Iterator[types.ModuleType]:
    """The emulator's ``torch_npu``, installed for one test module and removed after it (imported here, not at
    the top, so the linter's tests never import torch)."""
    from kvlint.runtime_probe import emulator

    module = emulator.install()
    yield module
    if sys.modules.get("torch_npu") is module:
        del sys.modules["torch_npu"]
