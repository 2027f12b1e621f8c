"""The emulator's ``torch_npu.testing``: a test file written like torch_npu's operator tests runs unchanged
with ``KVLINT_EMULATE=1``, and each harness name behaves as torch_npu documents it. The file runs once, in a
subprocess, and every test method's outcome is checked (some are meant to fail: the harness must fail them)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

OPERATOR_TEST = textwrap.dedent('''
    import sys
    import unittest
    import numpy as np
    import torch

    import torch_npu
    from torch_npu.testing.testcase import TestCase, run_tests
    from torch_npu.testing.common_utils import (SupportedDevices, SkipIfNotGteCANNVersion, check_operators_in_prof,
                                                create_common_tensor, create_dtype_tensor, freeze_rng_state)
    from torch_npu.testing.decorator import Dtypes, Formats, instantiate_tests
    from torch_npu.testing.common_distributed import skipIfUnsupportMultiNPU


    @instantiate_tests
    class TestHarness(TestCase):
        def test_common_tensor_is_a_numpy_draw_copied_to_the_device_in_its_format(self):
            np.random.seed(7)
            cpu_input, npu_input = create_common_tensor([np.float16, 29, (4, 16)], -2, 2)
            np.random.seed(7)
            again, _ = create_common_tensor([np.float16, -1, (4, 16)], -2, 2)
            self.assertEqual(cpu_input.dtype, torch.float16)
            self.assertTrue(bool((cpu_input >= -2).all() and (cpu_input < 2).all()))
            self.assertRtolEqual(cpu_input, npu_input.cpu())
            self.assertRtolEqual(cpu_input, again)
            self.assertEqual(torch_npu.get_npu_format(npu_input), 29)

        def test_dtype_tensor_gives_int32_for_other_dtypes_and_no_zeros(self):
            cpu_input, npu_input = create_dtype_tensor((64,), torch.int64, min_value=-1, max_value=1, no_zero=True)
            self.assertEqual(cpu_input.dtype, torch.int32)
            self.assertFalse(bool((cpu_input == 0).any()))
            self.assertRtolEqual(cpu_input, npu_input.cpu())

        def test_setup_seeds_torch_with_666(self):
            drawn = torch.rand(3)
            torch.manual_seed(666)
            self.assertEqual(drawn, torch.rand(3), prec=0)

        def test_rtol_forgives_a_few_outliers(self):
            golden = torch.ones(100000)
            output = golden.clone()
            output[:5] = 2.0
            self.assertRtolEqual(golden, output)

        def test_rtol_fails_many_differences(self):
            golden = torch.ones(100)
            self.assertRtolEqual(golden, golden * 1.01)

        def test_rtol_uses_prec16_for_half(self):
            golden = torch.ones(100, dtype=torch.float16)
            self.assertRtolEqual(golden, golden + 0.0005)

        def test_rtol_fails_a_dtype_mismatch(self):
            self.assertRtolEqual(torch.ones(4), torch.ones(4, dtype=torch.float16))

        def test_rtol_compares_a_tensor_with_a_list(self):
            self.assertRtolEqual(torch.tensor([1, 2, 3], dtype=torch.int32), [1, 2, 3])

        def test_equal_passes_within_prec(self):
            self.assertEqual(torch.zeros(8), torch.full((8,), 1e-3), prec=1e-2)

        def test_equal_fails_beyond_the_default_precision(self):
            self.assertEqual(torch.zeros(8), torch.full((8,), 1e-3))

        def test_equal_recurses_into_tuples_and_numbers(self):
            self.assertEqual((torch.ones(2), 3, [1.0, 2.0]), (torch.ones(2), 3, [1.0, 2.0 + 1e-7]))

        @SupportedDevices(['Ascend910B'])
        def test_runs_on_an_atlas_a2(self):
            pass

        @SupportedDevices(['Ascend910A', 'Ascend910P'])
        def test_skipped_on_an_atlas_a2(self):
            pass

        @SkipIfNotGteCANNVersion("8.3.RC1")
        def test_runs_with_an_older_cann_requirement(self):
            pass

        @SkipIfNotGteCANNVersion("9.0.0")
        def test_skipped_with_a_newer_cann_requirement(self):
            pass

        @skipIfUnsupportMultiNPU(2)
        def test_skipped_without_two_devices(self):
            pass

        @Formats(0, 2)
        @Dtypes(torch.float16, torch.float32)
        def test_formats_and_dtypes(self, npu_format, dtype, device=None):
            self.assertIn(npu_format, (0, 2))
            self.assertIn(dtype, (torch.float16, torch.float32))
            self.assertEqual(device, "npu")

        def test_freeze_rng_state_restores_the_generator(self):
            with freeze_rng_state():
                first = torch.rand(2)
            self.assertEqual(first, torch.rand(2), prec=0)

        def test_operators_in_profile(self):
            with torch.profiler.profile() as prof:
                torch.add(torch.ones(2).npu(), 1)
            self.assertTrue(check_operators_in_prof(["aten::add"], prof))
            self.assertFalse(check_operators_in_prof(["aten::add"], prof, unexpected_operators=["aten::add"]))


    if __name__ == "__main__":
        run_tests()
''')

EXPECTED = {
    "test_common_tensor_is_a_numpy_draw_copied_to_the_device_in_its_format": "ok",
    "test_dtype_tensor_gives_int32_for_other_dtypes_and_no_zeros": "ok",
    "test_setup_seeds_torch_with_666": "ok",
    "test_rtol_forgives_a_few_outliers": "ok",
    "test_rtol_fails_many_differences": "FAIL",
    "test_rtol_uses_prec16_for_half": "ok",
    "test_rtol_fails_a_dtype_mismatch": "FAIL",
    "test_rtol_compares_a_tensor_with_a_list": "ok",
    "test_equal_passes_within_prec": "ok",
    "test_equal_fails_beyond_the_default_precision": "FAIL",
    "test_equal_recurses_into_tuples_and_numbers": "ok",
    "test_runs_on_an_atlas_a2": "ok",
    "test_skipped_on_an_atlas_a2": "skipped",
    "test_runs_with_an_older_cann_requirement": "ok",
    "test_skipped_with_a_newer_cann_requirement": "skipped",
    "test_skipped_without_two_devices": "skipped",
    "test_formats_and_dtypes_0_float16": "ok",
    "test_formats_and_dtypes_0_float32": "ok",
    "test_formats_and_dtypes_2_float16": "ok",
    "test_formats_and_dtypes_2_float32": "ok",
    "test_freeze_rng_state_restores_the_generator": "ok",
    "test_operators_in_profile": "ok",
}


def run_emulated(path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    environ = {key: value for key, value in os.environ.items() if not key.startswith("KVLINT_")}
    return subprocess.run([sys.executable, str(path), "-v", *args], capture_output=True, text=True, timeout=300,
                          env={**environ, "KVLINT_EMULATE": "1"}, cwd=path.parent)  # fmt: skip


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, str], subprocess.CompletedProcess[str]]:
    path = tmp_path_factory.mktemp("operator_test") / "test_harness.py"
    path.write_text(OPERATOR_TEST, encoding="utf-8")
    done = run_emulated(path)
    # a test's status ends its line; the profiler may print lines between the test's name and its status
    verdicts = r"^(test_\w+) \(.*?\) \.\.\. (?:[^\n]*\n)*?[^\n]*?\b(ok|FAIL|ERROR|skipped)\b[^\n]*$"
    found = dict(re.findall(verdicts, done.stderr, re.MULTILINE))
    return found, done


def test_an_operator_test_file_runs_unchanged_and_each_harness_name_behaves_as_documented(outcomes):
    found, done = outcomes
    assert found == EXPECTED, done.stderr


def test_run_tests_exits_non_zero_when_a_test_fails(outcomes):
    _, done = outcomes
    assert done.returncode == 1 and "FAILED (failures=3, skipped=3)" in done.stderr


def test_failures_say_why(outcomes):
    _, done = outcomes
    assert "100 of 100 elements differ by more than rtol 0.0001" in done.stderr
    assert "dtypes differ: float32 and float16" in done.stderr


def test_the_harness_is_loaded_only_when_imported(tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text(textwrap.dedent('''
        import sys
        import torch_npu
        print("kvlint.runtime_probe.emulator.testing" in sys.modules)
        import torch_npu.testing.testcase
        from torch_npu.testing import testcase
        emulated = sys.modules["kvlint.runtime_probe.emulator.testing.testcase"]
        print(sys.modules["torch_npu.testing.testcase"] is emulated, testcase is torch_npu.testing.testcase)
    '''), encoding="utf-8")
    done = subprocess.run([sys.executable, str(probe)], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "KVLINT_EMULATE": "1"})  # fmt: skip
    assert done.stdout.split() == ["False", "True", "True"], done.stderr
