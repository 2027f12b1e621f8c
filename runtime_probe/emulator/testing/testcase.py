"""``torch_npu.testing.testcase``: the ``TestCase`` that torch_npu's operator tests derive from, and
``run_tests``.

What a test sees, as on the device:

- ``setUpClass`` selects the test device (``npu_device``, from ``SET_NPU_DEVICE``); ``setUp`` seeds torch's
  and Python's random generators with ``SEED`` (default 666), not numpy's;
- ``assertRtolEqual(x, y, prec, prec16)`` compares through numpy with a tolerance that forgives a small share
  of outliers (the rule is ``_rtol_failure``'s docstring); both sides must have the same dtype;
- ``assertEqual(x, y, prec)`` is the old PyTorch comparison: a maximum absolute difference of ``prec``
  (default ``self.precision``, 1e-5), dtypes checked only with ``exact_dtype``, recursive on containers.

Not emulated: ``PERF_TEST_ENABLE``'s timing against a baseline (CPU timings say nothing about the device),
the expect-file helpers and the sparse-tensor generators.
"""

from __future__ import annotations

import contextlib
import math
import os
import random
import re
import sys
import unittest
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping
from numbers import Number
from typing import Any

import numpy as np
import torch
from kvlint.runtime_probe.emulator.testing.common_utils import iter_indices, set_npu_device

ALLOWED_DTYPES = (np.bool_, np.uint16, np.int16, np.int32, np.float16, np.float32, np.int8, np.uint8, np.int64,
                  np.float64)  # fmt: skip
"""The numpy dtypes ``assertRtolEqual`` compares (complex is refused)."""
FP16_EPS = 6e-8
OTHER_EPS = 1e-9


def run_tests() -> None:
    """Run the test module's tests with ``unittest`` (its command line is ``sys.argv``). With ``IN_CI=1`` the
    results go to JUnit XML files under ``TEST_REPORT_PATH`` (default ``test-reports``), which needs the
    ``unittest-xml-reporting`` package."""
    if os.environ.get("IN_CI") == "1":
        try:
            import xmlrunner
        except ImportError:
            sys.exit("run_tests: IN_CI=1 writes XML reports with the unittest-xml-reporting package, which is not "
                     "installed (pip install unittest-xml-reporting, or unset IN_CI)")  # fmt: skip
        report_path = os.environ.get("TEST_REPORT_PATH", "test-reports")
        unittest.main(argv=sys.argv, testRunner=xmlrunner.XMLTestRunner(output=report_path))
    else:
        unittest.main(argv=sys.argv)


def _rtol_failure(x: np.ndarray, y: np.ndarray, tolerance: float, eps: float) -> str | None:
    """Why ``x`` and ``y`` differ beyond ``tolerance``, or None. NaNs must sit at the same positions; elsewhere
    ``d = |y - x|`` passes absolutely when ``d <= tolerance`` and relatively when
    ``d / (max(|x|, |y|) + eps) <= tolerance``. The comparison fails only when both tests fail somewhere
    *and* each fails for more than ``numel * tolerance`` elements: a few outliers are forgiven."""
    if x.dtype.kind in "iub":
        x, y = x.astype(np.float64), y.astype(np.float64)
    x_nan, y_nan = np.isnan(x), np.isnan(y)
    if not np.array_equal(x_nan, y_nan):
        return "the NaNs are at different positions"
    with np.errstate(invalid="ignore", over="ignore"):
        difference = np.abs(y - x)
        difference[x_nan] = 0
        largest = np.maximum(np.abs(x), np.abs(y))
        relative_ok = difference / (largest + eps) <= tolerance
    absolute_ok = difference <= tolerance
    limit = x.size * tolerance
    relative_bad, absolute_bad = int(np.count_nonzero(~relative_ok)), int(np.count_nonzero(~absolute_ok))
    if relative_bad > limit and absolute_bad > limit:
        worst = float(np.max(difference)) if difference.size else 0.0
        return (f"{relative_bad} of {x.size} elements differ by more than rtol {tolerance} and {absolute_bad} by "
                f"more than atol {tolerance} (at most {math.floor(limit)} may); largest difference {worst}")
    return None


def _as_numpy(value: Any) -> np.ndarray:
    if isinstance(value, torch.Tensor):
        return value.detach().cpu().numpy()
    return np.asarray(value)


class TestCase(unittest.TestCase):
    """Base class of torch_npu's operator tests."""

    _precision = 1e-5
    maxDiff = None
    exact_dtype = False
    npu_device = "npu:0"

    @property
    def precision(self) -> float:
        return self._precision

    @precision.setter
    def precision(self, prec: float) -> None:
        self._precision = prec

    @classmethod
    def setUpClass(cls) -> None:
        cls.npu_device = set_npu_device()

    def setUp(self) -> None:
        seed = int(os.getenv("SEED", "666"))
        torch.manual_seed(seed)
        random.seed(seed)

    # -- assertRtolEqual ----------------------------------------------------------------------------------
    def assertRtolEqual(self, x: Any, y: Any, prec: float = 1.0e-4, prec16: float = 1.0e-3,  # noqa: N802
                        auto_trans_dtype: bool = False, message: str | None = None) -> None:  # fmt: skip
        """``x`` and ``y`` are equal to ``prec`` (``prec16`` for float16 and bfloat16), up to a few outliers.
        Lists and tuples are compared element by element; a list against a tensor becomes a tensor of the
        tensor's dtype. ``auto_trans_dtype`` casts ``x`` to ``y``'s dtype first."""
        if isinstance(x, (list, tuple)) and isinstance(y, (list, tuple)):
            self.assertEqual(len(x), len(y), message or "the sequences have different lengths")
            for first, second in zip(x, y):
                self.assertRtolEqual(first, second, prec, prec16, auto_trans_dtype, message)
            return
        if isinstance(x, torch.Tensor) and isinstance(y, (list, tuple)):
            y = torch.tensor(y, dtype=x.dtype, device=x.device)
        elif isinstance(y, torch.Tensor) and isinstance(x, (list, tuple)):
            x = torch.tensor(x, dtype=y.dtype, device=y.device)
        if auto_trans_dtype and isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor):
            x = x.to(y.dtype)
        prefix = f"{message}: " if message else ""
        both_tensors = isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor)
        if both_tensors and x.dtype == torch.bfloat16 and y.dtype == torch.bfloat16:
            if x.shape != y.shape:
                self.fail(f"{prefix}shapes differ: {tuple(x.shape)} and {tuple(y.shape)}")
            close = torch.allclose(x.detach().cpu(), y.detach().cpu(), rtol=prec16, atol=prec16)
            self.assertTrue(close, f"{prefix}the bfloat16 tensors differ beyond rtol=atol={prec16}")
            return
        first, second = _as_numpy(x), _as_numpy(y)
        if first.shape != second.shape:
            self.fail(f"{prefix}shapes differ: {first.shape} and {second.shape}")
        if first.dtype != second.dtype:
            self.fail(f"{prefix}dtypes differ: {first.dtype} and {second.dtype}")
        if first.dtype.type not in ALLOWED_DTYPES:
            self.fail(f"{prefix}assertRtolEqual does not compare {first.dtype} arrays")
        if first.dtype == np.bool_:
            if not np.array_equal(first, second):
                self.fail(f"{prefix}the boolean arrays differ at {int(np.count_nonzero(first != second))} positions")
            return
        if first.dtype == np.float16:
            failure = _rtol_failure(first, second, prec16, FP16_EPS)
        else:
            failure = _rtol_failure(first, second, prec, OTHER_EPS)
        if failure is not None:
            self.fail(prefix + failure)

    # -- assertEqual (old PyTorch style) ------------------------------------------------------------------
    def assertEqual(self, x: Any, y: Any, prec: float | str | None = None, message: str = "",  # noqa: N802
                    allow_inf: bool = False, exact_dtype: bool | None = None) -> None:  # fmt: skip
        """Equal to within ``prec`` (the maximum absolute difference). A string in ``prec``'s place is the
        message. Tensors must have equal sizes, NaNs at the same places, and with ``allow_inf`` infinities of
        the same sign; numbers must be finite unless ``allow_inf``; containers are compared element by
        element."""
        if isinstance(prec, str) and not message:
            message, prec = prec, None
        if prec is None:
            prec = self.precision
        if exact_dtype is None:
            exact_dtype = self.exact_dtype
        if isinstance(x, torch.Tensor) and isinstance(y, Number):
            self.assertEqual(x.item(), y, prec, message, allow_inf, exact_dtype)
        elif isinstance(y, torch.Tensor) and isinstance(x, Number):
            self.assertEqual(x, y.item(), prec, message, allow_inf, exact_dtype)
        elif isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor):
            self._assert_tensors_equal(x, y, prec, message, allow_inf, exact_dtype)
        elif isinstance(x, (str, bytes)) or isinstance(y, (str, bytes)):
            super().assertEqual(x, y, message)
        elif isinstance(x, Mapping) and isinstance(y, Mapping):
            self.assertEqual(set(x), set(y), prec, message, allow_inf, exact_dtype)
            for key in x:
                self.assertEqual(x[key], y[key], prec, message, allow_inf, exact_dtype)
        elif isinstance(x, (set, frozenset)) and isinstance(y, (set, frozenset)):
            super().assertEqual(x, y, message)
        elif isinstance(x, Number) and isinstance(y, Number):
            if math.isinf(x) or math.isinf(y):
                if not allow_inf:
                    self.fail(f"Expected finite numeric values - x={x}, y={y}")
                super().assertEqual(x, y, message)
                return
            super().assertLessEqual(abs(x - y), prec, message)
        elif _is_sequence(x) and _is_sequence(y):
            x, y = list(x), list(y)
            super().assertEqual(len(x), len(y), message)
            for first, second in zip(x, y):
                self.assertEqual(first, second, prec, message, allow_inf, exact_dtype)
        else:
            super().assertEqual(x, y, message)

    def _assert_tensors_equal(self, x: torch.Tensor, y: torch.Tensor, prec: float, message: str, allow_inf: bool,
                              exact_dtype: bool) -> None:  # fmt: skip
        super().assertEqual(x.is_sparse, y.is_sparse, message)
        if x.is_sparse:
            x, y = x.coalesce(), y.coalesce()
            self._assert_tensors_equal(x._indices(), y._indices(), prec, message, allow_inf, exact_dtype)
            self._assert_tensors_equal(x._values(), y._values(), prec, message, allow_inf, exact_dtype)
            return
        if x.is_quantized and y.is_quantized:
            super().assertEqual(x.qscheme(), y.qscheme(), message)
            if x.qscheme() == torch.per_tensor_affine:
                self.assertEqual(x.q_scale(), y.q_scale(), prec, message)
                super().assertEqual(x.q_zero_point(), y.q_zero_point(), message)
            self._assert_tensors_equal(x.int_repr(), y.int_repr(), prec, message, allow_inf, exact_dtype)
            return
        super().assertEqual(x.size(), y.size(), message)
        if exact_dtype:
            super().assertEqual(x.dtype, y.dtype, message)
        if x.numel() == 0:
            return
        x, y = x.detach(), y.detach()
        if x.device.type == "cpu" and x.dtype in (torch.float16, torch.bfloat16):
            x = x.float()
        if y.device.type == "cpu" and y.dtype in (torch.float16, torch.bfloat16):
            y = y.float()
        y = y.to(x)
        if x.dtype == torch.bool:
            super().assertEqual(int((x ^ y).sum()), 0, message)
            return
        difference = x - y
        if x.is_floating_point() or x.is_complex():
            nan = torch.isnan(x)
            self.assertTrue(torch.equal(nan, torch.isnan(y)), message or "the NaNs are at different positions")
            difference[nan] = 0
            if allow_inf:
                infinite = torch.isinf(x)
                same_signs = torch.equal(infinite * x.sign(), torch.isinf(y) * y.sign())
                self.assertTrue(same_signs, message or "the infinities differ")
                difference[infinite] = 0
        if difference.is_signed() and difference.dtype != torch.int8:
            difference = difference.abs()
        largest = difference.max().item()
        super().assertLessEqual(largest, prec, message or f"largest difference {largest} exceeds {prec}")

    def assertAlmostEqual(self, x: Any, y: Any, places: int | None = None, msg: str = "",  # noqa: N802
                          delta: float | None = None) -> None:  # fmt: skip
        """``assertEqual`` with ``prec = 10**-places`` or ``delta``."""
        if places is not None and delta is not None:
            raise TypeError("specify delta or places, not both")
        prec = delta if delta is not None else (10 ** -places if places is not None else None)
        self.assertEqual(x, y, prec, msg)

    def assertNotEqual(self, x: Any, y: Any, prec: float | str | None = None, message: str = "") -> None:  # noqa: N802
        """Tensors of different sizes, or whose largest difference is at least ``prec``; other values unequal."""
        if isinstance(prec, str) and not message:
            message, prec = prec, None
        if prec is None:
            prec = self.precision
        if isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor):
            if x.size() != y.size():
                return
            x, y = x.detach(), y.detach().to(x)
            self.assertGreaterEqual((x.double() - y.double()).abs().max().item(), prec, message)
        elif isinstance(x, Number) and isinstance(y, Number):
            self.assertGreaterEqual(abs(x - y), prec, message)
        else:
            super().assertNotEqual(x, y, message)

    def assertTensorsSlowEqual(self, x: torch.Tensor, y: torch.Tensor, prec: float | None = None,  # noqa: N802
                               message: str = "") -> None:  # fmt: skip
        """Element by element: the largest absolute difference is at most ``prec``."""
        self.assertEqual(x.size(), y.size())
        largest = 0.0
        for index in iter_indices(x):
            largest = max(largest, abs(float(x[index]) - float(y[index])))
        self.assertLessEqual(largest, self.precision if prec is None else prec, message)

    def assertObjectIn(self, obj: object, iterable: Iterable[object]) -> None:  # noqa: N802
        """``obj`` is one of the items (by identity)."""
        for item in iterable:
            if item is obj:
                return
        raise AssertionError("object not found in iterable")

    def assertNotWarn(self, callable: Callable[[], object], msg: str = "") -> None:  # noqa: N802
        """Calling ``callable`` issues no warning."""
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            callable()
        self.assertTrue(len(caught) == 0, msg or f"unexpected warnings: {[str(w.message) for w in caught]}")

    def assertWarns(self, callable: Callable[[], object], msg: str = "") -> None:  # noqa: N802
        """Calling ``callable`` issues at least one warning (torch_npu's signature, not unittest's)."""
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            callable()
        self.assertTrue(len(caught) > 0, msg or "no warning was issued")

    @contextlib.contextmanager
    def maybeWarnsRegex(self, category: type[Warning], regex: str = "") -> Iterator[None]:  # noqa: N802
        """The block may issue warnings of ``category`` matching ``regex`` (allowed, not required); any other
        warning fails the test."""
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            yield
        unexpected = [str(w.message) for w in caught
                      if not (issubclass(w.category, category) and re.search(regex, str(w.message)))]  # fmt: skip
        self.assertFalse(unexpected, f"unexpected warnings: {unexpected}")


def _is_sequence(value: Any) -> bool:
    return isinstance(value, Iterable) and not isinstance(value, (str, bytes, Mapping, torch.Tensor))
