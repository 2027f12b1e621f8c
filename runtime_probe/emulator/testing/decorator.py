"""``torch_npu.testing.decorator``: tests parametrised by dtype and format.

``@Dtypes(torch.float16, torch.float32)`` and ``@Formats(0, 2)`` tag a test method; ``@instantiate_tests`` on
the class replaces each tagged method by one method per combination, named ``<name>_<format>_<dtype>`` (the
dtype's short name, ``float16``), which passes the values to the parameters whose names contain ``format``
and ``dtype`` (and ``device="npu"`` to a ``device`` parameter).
"""

from __future__ import annotations

import functools
import inspect
import itertools
from collections.abc import Callable
from typing import Any, TypeVar

import torch

Test = TypeVar("Test", bound=type)


def Dtypes(*dtypes: torch.dtype) -> Callable[[Callable[..., Any]], Callable[..., Any]]:  # noqa: N802
    """Run the test once per dtype."""
    if not dtypes or not all(isinstance(dtype, torch.dtype) for dtype in dtypes):
        raise RuntimeError(f"Dtypes takes one or more torch.dtype, got {dtypes!r}")

    def decorator(function: Callable[..., Any]) -> Callable[..., Any]:
        function.dtypes = dtypes  # type: ignore[attr-defined]
        return function

    return decorator


def Formats(*formats: int) -> Callable[[Callable[..., Any]], Callable[..., Any]]:  # noqa: N802
    """Run the test once per NPU format id."""
    if not formats or not all(isinstance(npu_format, int) for npu_format in formats):
        raise RuntimeError(f"Formats takes one or more int format ids, got {formats!r}")

    def decorator(function: Callable[..., Any]) -> Callable[..., Any]:
        function.formats = formats  # type: ignore[attr-defined]
        return function

    return decorator


def _parameter(function: Callable[..., Any], part: str) -> str | None:
    return next((name for name in inspect.signature(function).parameters if part in name), None)


def _instance(function: Callable[..., Any], npu_format: int | None, dtype: torch.dtype | None) -> Callable[..., Any]:
    keywords: dict[str, Any] = {}
    if npu_format is not None:
        keywords[_parameter(function, "format") or "npu_format"] = npu_format
    if dtype is not None:
        keywords[_parameter(function, "dtype") or "dtype"] = dtype
    if "device" in inspect.signature(function).parameters:
        keywords["device"] = "npu"

    @functools.wraps(function)
    def test(self: object) -> Any:
        return function(self, **keywords)

    return test


def instantiate_tests(cls: Test) -> Test:
    """Replace each method tagged by ``Dtypes`` / ``Formats`` by one test per combination."""
    for name, function in list(vars(cls).items()):
        dtypes, formats = getattr(function, "dtypes", None), getattr(function, "formats", None)
        if not callable(function) or (dtypes is None and formats is None):
            continue
        for npu_format, dtype in itertools.product(formats or [None], dtypes or [None]):
            suffix = "".join(f"_{part}" for part in (npu_format, str(dtype).split(".")[-1] if dtype else None)
                             if part is not None)  # fmt: skip
            instance = _instance(function, npu_format, dtype)
            instance.__name__ = name + suffix
            setattr(cls, name + suffix, instance)
        delattr(cls, name)
    return cls
