"""The probe over the CPU emulator: real ``torch.library`` operators reached as ``torch_npu.X``,
``torch.ops.npu.X``, ``.default`` and ``.out``, installed before or after activation."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from kvlint.runtime_probe import emulator
from kvlint.runtime_probe import probe as runtime_probe
from kvlint.runtime_probe.op_wrappers import ProbedOverload, ProbedPacket
from torch._ops import OpOverload, OpOverloadPacket
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode

from tests.probe_fixtures import toy_model, user_calls
from tests.probe_fixtures.harness import codes, marked_line, probe  # noqa: F401

ROOT = Path(__file__).resolve().parent.parent
THIS = "tests/test_probe_emulator.py"
KEYWORDS = user_calls.causal()


@pytest.fixture
def emulated(probe):
    """An active probe (compare every call) and the emulated torch_npu, installed after activation."""
    previous = sys.modules.pop("torch_npu", None)
    running = probe(sample=None)
    torch_npu = emulator.install()
    yield running, torch_npu
    runtime_probe.deactivate()
    if previous is not None:
        sys.modules["torch_npu"] = previous
    else:
        sys.modules.pop("torch_npu", None)


def test_every_access_path_is_probed_and_agrees_with_the_reference(emulated):
    running, torch_npu = emulated
    assert torch_npu.npu_fused_infer_attention_score is torch.ops.npu.npu_fused_infer_attention_score
    packet = torch.ops.npu.npu_fused_infer_attention_score
    assert isinstance(packet, ProbedPacket) and isinstance(packet, OpOverloadPacket)
    assert isinstance(packet.default, ProbedOverload) and isinstance(packet.default, OpOverload)
    q, k, v = user_calls.qkv()
    out = [torch.empty(0), torch.empty(0)]
    results = [
        torch_npu.npu_fused_infer_attention_score(q, k, v, **KEYWORDS)[0],
        torch.ops.npu.npu_fused_infer_attention_score(q, k, v, **KEYWORDS)[0],
        torch.ops.npu.npu_fused_infer_attention_score.default(q, k, v, **KEYWORDS)[0],
        torch.ops.npu.npu_fused_infer_attention_score(q, k, v, out=out, **KEYWORDS)[0],
        torch.ops.npu.npu_fused_infer_attention_score.out(q, k, v, out=out, **KEYWORDS)[0],
    ]
    assert results[-1] is out[0]
    assert all(torch.equal(result, results[0]) for result in results)
    sites = running.recorder.sites.values()
    assert [(s.calls, s.validated, s.compared) for s in sites] == [(1, 1, 1)] * 5
    assert codes(running) == {}
    assert max(s.max_abs_err for s in sites) == 0.0


def test_argument_findings_through_the_dispatcher(emulated):
    running, torch_npu = emulated
    user_calls.bad_non_causal_prefill(torch_npu)
    user_calls.bad_duplicate_slots_nd(torch_npu)
    assert codes(running) == {"KVL507": 1}
    assert {f["code"]: f["severity"] for f in running.report()["findings"]} == {"KVL507": "warning", "KVL508": "info"}


def test_schema_errors_reach_the_user_unchanged(emulated):
    _, torch_npu = emulated
    q, k, v = user_calls.qkv()
    with pytest.raises(RuntimeError) as probed:
        torch_npu.npu_fused_infer_attention_score(q, k, v, num_query_heads=4)
    runtime_probe.deactivate()
    with pytest.raises(RuntimeError) as unprobed:
        torch_npu.npu_fused_infer_attention_score(q, k, v, num_query_heads=4)
    assert str(probed.value) == str(unprobed.value)


@pytest.mark.parametrize("advance_inside", [False, True])
def test_toy_model_on_the_emulator(advance_inside, emulated):
    running, torch_npu = emulated
    torch.manual_seed(0)
    probed = toy_model.generate(toy_model.Model(torch_npu, advance_inside=advance_inside))
    runtime_probe.deactivate()
    torch.manual_seed(0)
    unprobed = toy_model.generate(toy_model.Model(torch_npu, advance_inside=advance_inside))
    assert torch.equal(probed, unprobed)
    # with kv_len advanced inside the layers, layers 1 and 2 write their K and V (2 sites) at drifted
    # positions in each of the 4 steps, and every layer but the very first reads rows nobody filled
    assert codes(running) == ({"KVL505": 2 * 2 * 4, "KVL510": 3 * 4 - 1} if advance_inside else {})


def test_fake_tensor_tracing_through_the_emulator_is_quiet(emulated):
    running, torch_npu = emulated
    with FakeTensorMode():
        q, k, v = user_calls.qkv()
        mask = torch.ones(2048, 2048, dtype=torch.bool).triu(1)
        out, _ = torch_npu.npu_fused_infer_attention_score(
            q, k, v, **user_calls.causal(atten_mask=mask, actual_seq_lengths_kv=[8, 6])
        )
    assert isinstance(out, FakeTensor)
    assert codes(running) == {}


EMULATED_SCRIPT = """
import torch_npu
from tests.probe_fixtures import user_calls
user_calls.bad_non_causal_prefill(torch_npu)
"""


def test_kvlint_emulate_and_probe_from_the_runner(tmp_path):
    script = tmp_path / "run.py"
    script.write_text(EMULATED_SCRIPT)
    environ = {**os.environ, "PYTHONPATH": str(ROOT), "KVLINT_EMULATE": "1"}
    environ.pop("KVLINT_PROBE", None)
    done = subprocess.run([sys.executable, "-m", "kvlint.runtime_probe", str(script)], cwd=ROOT, env=environ,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "tests/probe_fixtures/user_calls.py" in done.stderr and "KVL507" in done.stderr


@pytest.mark.parametrize("backend", ["eager", pytest.param("inductor", marks=pytest.mark.slow)])
def test_compiled_calls_are_probed_at_run_time_and_attributed_to_the_users_line(backend, emulated, monkeypatch,
                                                                               tmp_path):
    """No graph break (fullgraph); at run time the compiled call is probed and attributed to the line that
    calls the operator, not to the ``def`` line of the compiled function, torch.fx's generated code or
    inductor's generated module. (A fresh inductor cache: a graph cached by another checkout of the same
    code keeps that checkout's paths.)"""
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path))
    running, torch_npu = emulated
    q, k, v = user_calls.qkv()

    def attention(q, k, v):
        return torch_npu.npu_fused_infer_attention_score(q * 2, k, v, **KEYWORDS)[0] * 2  # the call

    compiled = torch.compile(attention, backend=backend, fullgraph=True)
    assert torch.allclose(compiled(q, k, v), attention(q, k, v))
    sites = {(s.path, s.line): s.calls for s in running.recorder.sites.values()}
    assert sites == {(THIS, marked_line(Path(__file__), "the call")): 2}
    assert codes(running) == {}
