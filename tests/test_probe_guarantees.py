"""The probe's guarantees: transparency, strict mode, no exception into user code, thread safety,
re-entrancy, quiet fake tensors, and wrapping whether torch_npu is imported before or after activation."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest
import torch
from kvlint.runtime_probe import ProbeError, checks
from kvlint.runtime_probe.hooks import ProbedOp
from kvlint.runtime_probe.report import summary
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import FlopCounterMode

from tests.probe_fixtures import user_calls
from tests.probe_fixtures.harness import codes, emulated, in_threads, marked_line, probe, standin  # noqa: F401

TEMPLATE = torch.ones(2048, 2048, dtype=torch.bool).triu(1)
THIS = "tests/test_probe_guarantees.py"


def outputs_of_a_small_program(torch_npu) -> list[torch.Tensor]:
    """Attention (prefill, decode, paged) and cache writes; every tensor the program ends up with."""
    q, k, v = user_calls.qkv()
    prefill, lse = torch_npu.npu_fused_infer_attention_score(q, k, v, **user_calls.causal())
    decode = torch_npu.npu_incre_flash_attention(q[:, :, :1].transpose(1, 2).flatten(-2), k.transpose(1, 2).flatten(-2),
                                                 v.transpose(1, 2).flatten(-2), num_heads=4, num_key_value_heads=2,
                                                 scale_value=0.25, actual_seq_lengths=[8, 5])
    cache = torch.zeros(2, 2, 16, 16)
    written = torch_npu.scatter_update_(cache, torch.tensor([3, 4]), k[:, :, :2], -2)
    copied = torch_npu.scatter_update(cache, torch.tensor([0, 1]), k[:, :, :1], -2)
    return [prefill, lse, decode, written, copied, cache, q, k, v]


@pytest.mark.parametrize("settings", [{}, {"compare": False}, {"sample": None}])
def test_outputs_are_bitwise_equal_with_the_probe_on_and_off(settings, probe, standin):
    unprobed = outputs_of_a_small_program(standin("good"))
    running = probe(**settings)
    probed = outputs_of_a_small_program(standin("good"))
    assert isinstance(sys.modules["torch_npu"].npu_fused_infer_attention_score, ProbedOp)
    assert sum(site.validated for site in running.recorder.sites.values()) == 4
    for before, after in zip(unprobed, probed, strict=True):
        assert before.dtype == after.dtype and before.shape == after.shape
        assert torch.equal(before.view(torch.uint8) if before.numel() else before,
                           after.view(torch.uint8) if after.numel() else after)


def test_the_operator_result_object_is_returned_itself(probe, standin):
    probe()
    torch_npu = standin("good")
    cache = torch.zeros(2, 2, 16, 16)
    assert torch_npu.scatter_update_(cache, torch.tensor([0, 1]), torch.ones(2, 2, 1, 16), -2) is cache


def test_strict_mode_raises_at_the_first_error_with_the_call_site(probe, standin):
    probe(strict=True)
    torch_npu = standin("good")
    with pytest.raises(ProbeError) as raised:
        user_calls.bad_mask_missing(torch_npu)
    line = marked_line(Path(user_calls.__file__), "KVL203")
    where = (raised.value.code, raised.value.path, raised.value.line)
    assert where == ("KVL203", "tests/probe_fixtures/user_calls.py", line)
    assert f"user_calls.py:{line}: KVL203" in str(raised.value)


def test_strict_mode_raises_on_output_mismatch_but_not_on_warnings(probe, standin):
    running = probe(strict=True)
    user_calls.bad_non_causal_prefill(standin("good"))  # KVL507 is a warning
    assert codes(running) == {"KVL507": 1}
    q, k, v = user_calls.qkv()
    with pytest.raises(ProbeError, match="KVL501"):
        standin("no_scale").npu_fused_infer_attention_score(q, k, v, **user_calls.causal())


def test_a_failing_check_becomes_kvl599_and_the_call_returns_normally(probe, standin, monkeypatch):
    def broken(call):
        raise ZeroDivisionError("boom")

    q, k, v = user_calls.qkv()
    expected, _ = standin("good").npu_fused_infer_attention_score(q, k, v, **user_calls.causal())
    monkeypatch.setitem(checks.SIGNATURE_CHECKS, "KVL506", broken)
    running = probe(strict=True)
    out, _ = sys.modules["torch_npu"].npu_fused_infer_attention_score(q, k, v, **user_calls.causal())
    assert torch.equal(out, expected)
    (finding,) = running.recorder.findings.values()
    assert finding.code == "KVL599" and "KVL506" in finding.message and "ZeroDivisionError: boom" in finding.message


def test_calls_that_do_not_fit_the_schema_are_counted_and_passed_through(probe, standin):
    running = probe()
    torch_npu = standin("good")
    q, k, v = user_calls.qkv()
    torch_npu.npu_fused_infer_attention_score(q, k, v, **user_calls.causal(num_query_heads=4))
    (site,) = running.recorder.sites.values()
    assert (site.calls, site.validated) == (1, 0)
    assert codes(running) == {}


def test_threads_share_consistent_counts(probe, standin):
    running = probe(sample=3)
    torch_npu = standin("no_scale")
    q, k, v = user_calls.qkv()

    def worker() -> None:
        for _ in range(10):
            torch_npu.npu_fused_infer_attention_score(q, k, v, **user_calls.causal(sparse_mode=0, atten_mask=None))

    assert in_threads(worker, 8) == []
    (site,) = running.recorder.sites.values()
    assert (site.calls, site.validated, site.compared) == (80, 80, 3)
    assert codes(running) == {"KVL501": 3}  # no mask over keys nobody wrote to a cache: an encoder's call


def test_calls_made_inside_a_probed_call_are_not_probed_again(probe, standin):
    running = probe(sample=None)
    torch_npu = standin("nested")
    q, k, v = user_calls.qkv()
    torch_npu.npu_fused_infer_attention_score(q, k, v, num_heads=4, num_key_value_heads=2, input_layout="BNSD",
                                              scale=0.25)
    assert [(site.op, site.calls, site.compared) for site in running.recorder.sites.values()] == [
        ("npu_fused_infer_attention_score", 1, 1)
    ]


def test_a_call_through_a_torch_npu_helper_is_attributed_to_the_user_line(probe, standin):
    running = probe()
    torch_npu = standin("good")
    q, k, v = user_calls.qkv()
    torch_npu.attention_helper(q, k, v, **user_calls.causal(atten_mask=None))  # helper call
    (site,) = running.recorder.sites.values()
    assert (site.path, site.line) == (THIS, marked_line(Path(__file__), "helper call"))


def test_fake_tensors_are_traced_quietly(probe, standin):
    running = probe(sample=None)
    torch_npu = standin("good")
    with FakeTensorMode():
        q, k, v = torch.randn(2, 4, 3, 16), torch.randn(2, 2, 8, 16), torch.randn(2, 2, 8, 16)
        out, _ = torch_npu.npu_fused_infer_attention_score(
            q, k, v, **user_calls.causal(actual_seq_lengths_kv=[8, 6])
        )
    assert isinstance(out, FakeTensor)
    (site,) = running.recorder.sites.values()
    assert (site.calls, site.validated, site.compared) == (1, 1, 0)
    assert codes(running) == {}


def test_torch_npu_imported_before_activation_is_wrapped_and_restored(probe, standin):
    torch_npu = standin("good")
    original = torch_npu.npu_fused_infer_attention_score
    running = probe()
    assert isinstance(torch_npu.npu_fused_infer_attention_score, ProbedOp)
    user_calls.bad_mask_missing(torch_npu)
    assert codes(running) == {"KVL203": 1}
    from kvlint.runtime_probe import probe as runtime_probe

    runtime_probe.deactivate()
    assert torch_npu.npu_fused_infer_attention_score is original


def test_torch_npu_imported_after_activation_is_wrapped_before_user_code_binds_names(probe, standin):
    running = probe()
    standin("good")
    module = importlib.import_module("torch_npu")
    from torch_npu import npu_fused_infer_attention_score  # noqa: PLC0415 - the point of the test

    assert isinstance(npu_fused_infer_attention_score, ProbedOp)
    assert module.__loader__.__class__.__name__ != "_HookedLoader"
    user_calls.bad_mask_missing(module)
    assert codes(running) == {"KVL203": 1}


def test_a_call_whose_operator_raises_is_recorded_and_the_exception_reaches_the_program(emulated):
    running, torch_npu = emulated(compare=False)
    q, k, v = user_calls.qkv()
    for _ in range(2):
        with pytest.raises(ValueError, match="num_heads=3 must be a positive multiple"):
            torch_npu.npu_fused_infer_attention_score(q, k, v, **user_calls.causal(num_heads=3))  # raises
    torch_npu.npu_fused_infer_attention_score(q, k, v, **user_calls.causal())
    site = next(s for s in running.recorder.sites.values() if s.line == marked_line(Path(__file__), "raises"))
    assert (site.calls, site.raised) == (2, 2)
    assert site.first_raise == "ValueError: num_heads=3 must be a positive multiple of num_key_value_heads=2"
    report = running.report()
    assert [s["raised"] for s in report["sites"]] == [2, 0]
    assert (f"{THIS}:{site.line}: 2 call(s) of npu_fused_infer_attention_score raised; first: ValueError: "
            "num_heads=3") in summary(report)


def test_the_summary_prints_the_probes_own_time_per_call(probe, standin):
    running = probe(compare=False)
    user_calls.clean_calls(standin("good"))
    lines = summary(running.report()).splitlines()
    assert lines[1].split("  ")[-1].strip() == "probe us/call"
    per_call = next(line for line in lines if line.startswith("probe time: "))
    assert float(per_call.split()[2]) > 0 and per_call.endswith("us per call over 5 call(s)")


def test_a_seen_signature_is_bound_once_and_its_signature_findings_still_counted(probe, standin, monkeypatch):
    from kvlint.runtime_probe import live_call

    bound = []
    original = live_call.bind
    monkeypatch.setattr(live_call, "bind", lambda *args: bound.append(1) or original(*args))
    running = probe(compare=False, value_first=2, value_every=4)
    torch_npu = standin("good")
    for _ in range(10):
        user_calls.bad_mask_dtype(torch_npu)
    assert len(bound) == 4  # calls 1 and 2, then 4 and 8
    assert codes(running) == {"KVL201": 10}
    (site,) = running.recorder.sites.values()
    assert (site.calls, site.validated) == (10, 10)
    q, k, v = user_calls.qkv(sq=5)  # a new signature at the same site gets every check
    torch_npu.npu_fused_infer_attention_score(q, k, v, **user_calls.causal())
    assert len(bound) == 5


def test_value_checks_run_only_on_sampled_calls(probe, standin):
    running = probe(compare=False, value_first=1, value_every=0)
    torch_npu = standin("good")
    for _ in range(5):
        user_calls.bad_seq_lengths(torch_npu)
    assert codes(running) == {"KVL503": 1}


class CountingMode(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.ops: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops.append(str(func))
        return func(*args, **(kwargs or {}))


class CountingFunctions(TorchFunctionMode):
    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        self.calls += 1
        return func(*args, **(kwargs or {}))


def what_the_program_sees(torch_npu) -> tuple[object, ...]:
    """A probed FIA call (compared with the reference) inside the program's own modes, memory tracker and
    profiler."""
    from torch.distributed._tools.mem_tracker import MemTracker

    q, k, v = user_calls.qkv()
    with MemTracker() as memory:
        torch_npu.npu_fused_infer_attention_score(q, k, v, **user_calls.causal())
    with CountingMode() as ops:
        torch_npu.npu_fused_infer_attention_score(q, k, v, **user_calls.causal())
    with FlopCounterMode(display=False) as flops:
        torch_npu.npu_fused_infer_attention_score(q, k, v, **user_calls.causal())
    with CountingFunctions() as functions:
        torch_npu.npu_fused_infer_attention_score(q, k, v, **user_calls.causal())
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as profiler:
        torch_npu.npu_fused_infer_attention_score(q, k, v, **user_calls.causal())
    return (ops.ops, flops.get_total_flops(), functions.calls, sorted(e.name for e in profiler.events()),
            memory.get_tracker_snapshot("peak"))


def test_the_probe_is_invisible_to_the_programs_dispatch_modes_and_profiler(emulated):
    running, torch_npu = emulated(sample=None)
    probed = what_the_program_sees(torch_npu)
    assert sum(site.compared for site in running.recorder.sites.values()) == 5
    from kvlint.runtime_probe import probe as runtime_probe

    runtime_probe.deactivate()
    assert probed == what_the_program_sees(torch_npu)
    assert probed[0] == ["npu.npu_fused_infer_attention_score.default"] and probed[1] == 0
