"""Shared pytest configuration: tests run from the repository root so fixture paths are relative."""

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(autouse=True, scope="session")
def _run_from_repository_root() -> None:
    os.chdir(ROOT)
