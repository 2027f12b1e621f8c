"""KVLINT_PROBE_DUMP: each call site's first error-level finding writes a reproduction that runs anywhere
(issue 24): the inputs, the arguments, the finding and a script that re-runs the calls on the emulator (on
a device, the NPU) and prints the finding again."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from kvlint.runtime_probe import config
from kvlint.runtime_probe.dump import SCRIPT

from tests.probe_fixtures.harness import emulated, marked_line, probe  # noqa: F401

ROOT = Path(__file__).resolve().parent.parent
BUGGY = "examples/buggy/kv_len_advanced_in_layer.py"


def _environment(**extra: str) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("KVLINT_")}
    return {**env, "PYTHONWARNINGS": "ignore", **extra}


def _folders(root: Path) -> dict[str, Path]:
    """Dumped folder -> its path, by the site and code part of its name."""
    return {path.name.rsplit(".pid", 1)[0]: path for path in root.iterdir()}


def _bad_lengths(torch_npu) -> None:
    k = torch.randn(1, 8, 64)
    try:
        torch_npu.npu_fused_infer_attention_score(torch.randn(1, 2, 64), k, k, num_heads=4, input_layout="BSH", scale=0.125, actual_seq_lengths_kv=[9])  # noqa: E501  # KVL503
    except RuntimeError:  # the emulator refuses lengths above S too, as the device does
        pass


def test_the_demos_buggy_model_dumps_a_script_that_reproduces_its_kvl509_in_a_fresh_process(tmp_path):
    dump = tmp_path / "dump"
    program = subprocess.run([sys.executable, BUGGY], cwd=ROOT, capture_output=True, text=True, timeout=600,
                             env=_environment(KVLINT_PROBE="1", KVLINT_PROBE_DUMP=str(dump)))
    assert "KVL509" in program.stderr, program.stderr[-3000:]
    folders = _folders(dump)
    assert set(folders) == {f"examples_buggy_kv_len_advanced_in_layer.py-{line}.{code}"
                            for line, code in ((50, "KVL505"), (51, "KVL505"), (58, "KVL509"), (74, "KVL510"))}
    folder = folders["examples_buggy_kv_len_advanced_in_layer.py-58.KVL509"]
    assert folder.name.endswith(f".pid{json.loads((folder / 'finding.json').read_text())['process']['pid']}")
    assert sorted(p.name for p in folder.iterdir()) == ["arguments.json", "finding.json", "inputs.pt", SCRIPT]
    arguments = json.loads((folder / "arguments.json").read_text())
    assert [call["op"] for call in arguments] == ["npu_scatter_nd_update_", "npu_scatter_nd_update_",
                                                  "npu_fused_infer_attention_score"]
    assert arguments[2]["kwargs"]["block_size"] == 128 and arguments[2]["args"][0]["tensor"] == "float16"
    elsewhere = tmp_path / "elsewhere"  # a fresh process, outside the repository, no probe variable set
    elsewhere.mkdir()
    replay = subprocess.run([sys.executable, str(folder / SCRIPT)], cwd=elsewhere, capture_output=True,
                            text=True, timeout=600, env=_environment())
    assert replay.returncode == 1, replay.stdout + replay.stderr[-3000:]
    finding = json.loads((folder / "finding.json").read_text())
    assert f"  {BUGGY}:58: KVL509 probe-written-slot-not-read: {finding['message']}" in replay.stdout
    assert replay.stdout.rstrip().endswith("KVL509 reproduced on the CPU emulator")


def test_a_single_call_finding_is_dumped_once_per_site(emulated, tmp_path):
    running, torch_npu = emulated(dump_dir=tmp_path)
    _bad_lengths(torch_npu)
    _bad_lengths(torch_npu)
    (folder,) = tmp_path.iterdir()
    assert folder.name == f"tests_test_probe_dump.py-{marked_line(Path(__file__), 'KVL503')}.KVL503.pid{os.getpid()}"
    finding = json.loads((folder / "finding.json").read_text())
    assert (finding["code"], finding["severity"], finding["message"]) == (
        "KVL503", "error", "actual_seq_lengths_kv=[9] entry 0 is 9, above S=8")
    assert finding["dropped"] == [] and finding["max_bytes"] == config.DEFAULT_DUMP_MAX
    saved = torch.load(folder / "inputs.pt", weights_only=True)
    (call,) = saved["calls"]
    assert call["kwargs"]["actual_seq_lengths_kv"] == [9] and call["args"][1].shape == (1, 8, 64)


def test_the_size_cap_drops_the_largest_tensors_and_says_so(emulated, tmp_path, capsys):
    running, torch_npu = emulated(dump_dir=tmp_path, dump_max=1024)  # the query (512 bytes) fits, the keys do not
    _bad_lengths(torch_npu)
    (folder,) = tmp_path.iterdir()
    dropped = json.loads((folder / "finding.json").read_text())["dropped"]
    assert dropped == [f"npu_fused_infer_attention_score args[{i}]: torch.float32 [1, 8, 64] (2048 bytes)" for i in (1, 2)]
    assert "over KVLINT_PROBE_DUMP_MAX=1024 bytes, dropped npu_fused_infer_attention_score args[1]" in (
        capsys.readouterr().err)
    replay = subprocess.run([sys.executable, str(folder / SCRIPT)], capture_output=True, text=True, timeout=600,
                            env=_environment())
    assert replay.returncode == 2
    assert "cannot re-run: the size cap dropped npu_fused_infer_attention_score args[1]" in replay.stdout


@pytest.mark.parametrize(("inherited", "dumps"), [("same", False), ("other", True), ("none", True)])
def test_a_worker_dumps_only_when_its_folder_was_set_for_it(inherited, dumps, emulated, tmp_path, monkeypatch):
    """A worker (started by a probed process: it inherits KVLINT_PROBE_PARENT) that inherited its parent's
    folder writes nothing; one whose folder was set for it does."""
    monkeypatch.setenv(config.PARENT_VARIABLE, str(os.getpid() + 1))
    monkeypatch.delenv("RANK", raising=False)
    monkeypatch.delenv("LOCAL_RANK", raising=False)
    mine = tmp_path / "worker"
    if inherited == "none":  # the parent dumped nowhere
        monkeypatch.delenv(config.DUMP_PARENT_VARIABLE, raising=False)
    else:
        monkeypatch.setenv(config.DUMP_PARENT_VARIABLE, str(mine if inherited == "same" else tmp_path / "parent"))
    running, torch_npu = emulated(dump_dir=mine)
    _bad_lengths(torch_npu)
    assert [f.code for f in running.recorder.findings.values()] == ["KVL503"]
    assert mine.exists() == dumps


def test_a_rank_names_its_folder_by_rank_and_pid(emulated, tmp_path, monkeypatch):
    monkeypatch.setenv("RANK", "3")
    running, torch_npu = emulated(dump_dir=tmp_path)
    _bad_lengths(torch_npu)
    (folder,) = tmp_path.iterdir()
    assert folder.name.endswith(f".KVL503.rank3.pid{os.getpid()}")


def test_without_the_dump_the_probe_keeps_no_arguments(emulated, tmp_path):
    running, torch_npu = emulated()
    _bad_lengths(torch_npu)
    assert running._recent_writes == {} and running._dumped == set()


def test_the_dump_settings_are_read_from_the_environment(tmp_path):
    settings = config.from_env({"KVLINT_PROBE": "1", "KVLINT_PROBE_DUMP": str(tmp_path),
                                "KVLINT_PROBE_DUMP_MAX": "8MiB"})
    assert settings is not None and (settings.dump_dir, settings.dump_max) == (tmp_path, 8 << 20)
    assert config.from_env({"KVLINT_PROBE": "1"}).dump_dir is None
