"""benchmarks/torch_npu_tests.py runs the manifest's test files on the emulator and checks each test's verdict
against the one the manifest records."""

from __future__ import annotations

import importlib.util
import json
import sys
import textwrap
from pathlib import Path

from tests.conftest import ROOT

SPEC = importlib.util.spec_from_file_location("torch_npu_tests", ROOT / "benchmarks" / "torch_npu_tests.py")
torch_npu_tests = importlib.util.module_from_spec(SPEC)
sys.modules[SPEC.name] = torch_npu_tests
SPEC.loader.exec_module(torch_npu_tests)

OPERATOR_TEST = textwrap.dedent('''
    import torch
    import torch_npu
    from torch_npu.testing.testcase import TestCase, run_tests
    from torch_npu.testing.common_utils import SupportedDevices


    class TestRmsNorm(TestCase):
        @SupportedDevices(['Ascend910B'])
        def test_npu_rms_norm(self):
            x = torch.randn(4, 8).npu()
            out = torch_npu.npu_rms_norm(x, torch.ones(8).npu())[0]
            self.assertRtolEqual(out.cpu(), x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6))

        def test_an_operator_the_emulator_lacks(self):
            torch_npu.npu_fused_attention_score_fwd(*[torch.ones(1, 1, 2, 2)] * 4, 1.0, 1.0)


    if __name__ == "__main__":
        run_tests()
''')


def manifest(tmp_path: Path, lacking: str) -> Path:
    repos = tmp_path / "repos"
    (repos / "Ascend+pytorch" / "test").mkdir(parents=True)
    (repos / "Ascend+pytorch" / "test" / "test_norm.py").write_text(OPERATOR_TEST, encoding="utf-8")
    path = tmp_path / "manifest.json"
    path.write_text(json.dumps({"repository": "Ascend/pytorch", "commit": "0" * 40, "files": [{
        "path": "test/test_norm.py", "expected": {
            "TestRmsNorm.test_npu_rms_norm": {"verdict": "ok"},
            "TestRmsNorm.test_an_operator_the_emulator_lacks": {"verdict": lacking, "cause": "missing operator"},
        }}]}), encoding="utf-8")  # fmt: skip
    return path


def test_verdicts_equal_to_the_manifest_exit_0_with_the_pass_rate(tmp_path, capsys):
    path = manifest(tmp_path, "ERROR")
    code = torch_npu_tests.main(["--repos", str(tmp_path / "repos"), "--manifest", str(path),
                                 "--json", str(tmp_path / "out.json")])  # fmt: skip
    printed = capsys.readouterr().out
    assert code == 0, printed
    assert "test/test_norm.py: 1 ok, 0 FAIL, 1 ERROR, 0 skipped" in printed
    assert "1 of 2 tests pass (50.0 %)" in printed
    assert json.loads((tmp_path / "out.json").read_text())["test/test_norm.py"] == {
        "TestRmsNorm.test_npu_rms_norm": "ok", "TestRmsNorm.test_an_operator_the_emulator_lacks": "ERROR"}


def test_a_verdict_that_changed_is_named_and_exits_1(tmp_path, capsys, monkeypatch):
    path = manifest(tmp_path, "ok")
    ran = {"TestRmsNorm.test_npu_rms_norm": "ok", "TestRmsNorm.test_an_operator_the_emulator_lacks": "ERROR"}
    monkeypatch.setattr(torch_npu_tests, "run_file", lambda scratch, entry, environment: (ran, ""))
    code = torch_npu_tests.main(["--repos", str(tmp_path / "repos"), "--manifest", str(path)])
    assert code == 1
    assert ("differs from the manifest: test/test_norm.py::TestRmsNorm.test_an_operator_the_emulator_lacks: "
            "manifest ok, now ERROR") in capsys.readouterr().out


def test_a_missing_repository_is_named(tmp_path):
    path = manifest(tmp_path, "ERROR")
    try:
        torch_npu_tests.main(["--repos", str(tmp_path), "--manifest", str(path)])
    except SystemExit as stop:
        assert "Ascend/pytorch is not in" in str(stop)
    else:
        raise AssertionError("no error for a folder without Ascend+pytorch")


def test_update_records_the_verdicts_and_regenerates_the_results_section(tmp_path, capsys, monkeypatch):
    """A test that now passes loses its cause, one that now fails without a recorded cause is named and marked
    not diagnosed; RESULTS.md's section is rewritten from the manifest, the rest of the file kept."""
    path = manifest(tmp_path, "ERROR")
    recorded = json.loads(path.read_text())
    recorded.update(fp16_goldens="none here.", history=["an earlier run: 1 of 2."])
    path.write_text(json.dumps(recorded))
    results = tmp_path / "RESULTS.md"
    results.write_text("before\n<!-- begin torch-npu-tests -->\nold\n<!-- end torch-npu-tests -->\nafter\n")
    ran = {"TestRmsNorm.test_npu_rms_norm": "FAIL", "TestRmsNorm.test_an_operator_the_emulator_lacks": "ok"}
    monkeypatch.setattr(torch_npu_tests, "run_file", lambda scratch, entry, environment: (ran, ""))
    code = torch_npu_tests.main(["--repos", str(tmp_path / "repos"), "--manifest", str(path), "--update",
                                 "--results", str(results)])  # fmt: skip
    assert code == 0
    assert "fails without a recorded cause" in capsys.readouterr().out
    expected = json.loads(path.read_text())["files"][0]["expected"]
    assert expected["TestRmsNorm.test_an_operator_the_emulator_lacks"] == {"verdict": "ok"}
    assert expected["TestRmsNorm.test_npu_rms_norm"] == {"verdict": "FAIL", "cause": "not diagnosed"}
    text = results.read_text()
    assert text.startswith("before\n<!-- begin torch-npu-tests -->")
    assert text.endswith("<!-- end torch-npu-tests -->\nafter\n")
    assert "**1 of 2 in-scope tests pass (50.0 %)**" in text and "\nold\n" not in text
    assert "| test/test_norm.py | 1 / 2 | `TestRmsNorm.test_npu_rms_norm` FAIL: not diagnosed |" in text
    assert "- an earlier run: 1 of 2." in text and "fp16 goldens: none here." in text
