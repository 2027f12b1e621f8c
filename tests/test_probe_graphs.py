"""The probe on NPU graphs: calls issued between ``graph_task_update_begin`` and ``_end`` are argument updates,
validated where they are issued and judged at the replay, where they run (KVL509/KVL510 with the update's
lengths on the buffers the replay wrote); KVL550 for a replay whose task group no update refreshed.

The program is ``tests/probe_fixtures/graph_decode.py`` (vllm-ascend's decode graph) on the emulated torch_npu.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tests.probe_fixtures import graph_decode
from tests.probe_fixtures.harness import codes, emulated, marked_line, probe  # noqa: F401

PATH = "tests/probe_fixtures/graph_decode.py"


def line(what: str) -> int:
    return marked_line(Path(graph_decode.__file__), f"graph {what}")


def sites(running, code: str) -> set[int]:
    return {f.line for f in running.recorder.findings.values() if f.code == code and f.path == PATH}


def test_lengths_updated_before_each_replay_give_no_finding(emulated):
    """The update counts the token the replay is about to write: judged at the update, that row is still
    empty (a false KVL510), and the output buffer still holds the previous step's (a false KVL501)."""
    running, torch_npu = emulated(sample=None)
    graph_decode.decode_graph(torch_npu)
    assert codes(running) == {}
    update = next(site for site in running.recorder.sites.values() if site.line == line("update"))
    assert update.calls == update.validated == 3 and update.compared == 0


@pytest.mark.parametrize(("extra", "code"), [(1, "KVL510"), (-1, "KVL509")])
def test_the_replay_is_judged_with_the_updates_lengths(emulated, extra, code):
    running, torch_npu = emulated(compare=False)
    graph_decode.decode_graph(torch_npu, extra=extra)
    assert codes(running) == {code: 3}
    assert sites(running, code) == {line("update")}


def test_replays_are_judged_when_the_capture_and_the_updates_are_past_the_value_checked_calls(emulated):
    """A graph captured after its warm-up (the same signature, not value-checked again) is still judged at
    its first replays, with the lengths of the updates whose values were read."""
    running, torch_npu = emulated(compare=False, value_first=1, value_every=0)
    graph_decode.decode_graph(torch_npu, extra=1)
    assert codes(running) == {"KVL510": 1}  # replay 1: its update was value-checked; the later ones were not


def test_an_update_validates_its_arguments(emulated):
    running, torch_npu = emulated(compare=False)
    with pytest.raises(RuntimeError, match="must lie within"):  # the replay runs them, and the kernel refuses
        graph_decode.decode_graph(torch_npu, extra=30)  # lengths past the two blocks of the block table
    assert sites(running, "KVL504") == {line("update")}


def test_a_replay_no_update_refreshed_is_kvl550_at_the_replay(emulated):
    running, torch_npu = emulated(compare=False)
    graph_decode.decode_graph(torch_npu, steps=5, skip=(3,))
    assert codes(running) == {"KVL550": 1, "KVL509": 1}
    (stale,) = (f for f in running.recorder.findings.values() if f.code == "KVL550")
    assert stale.line == line("replay") and stale.severity == "warning"
    assert stale.message.startswith(f"replay 3 of this NPU graph runs npu_fused_infer_attention_score (captured at "
                                    f"{PATH}:{line('attention')}) with an earlier update's arguments")
    assert sites(running, "KVL509") == {line("update")}  # the stale lengths leave this step's token out


def test_replays_before_the_first_update_are_reported_once_the_program_updates(emulated):
    running, torch_npu = emulated(compare=False)
    graph_decode.decode_graph(torch_npu, skip=(1,))
    (stale,) = (f for f in running.recorder.findings.values() if f.code == "KVL550")
    assert "replay 1" in stale.message and "with the capture's arguments" in stale.message
    assert sites(running, "KVL509") == {line("attention")}  # the replay ran the captured call's lengths


def test_replays_after_npugraph_update_are_not_judged_with_the_captured_lengths(emulated):
    """NPUGraph.update(cpu_update_input=...) gives new lengths the probe does not follow: judging the
    replays with the captured ones would report this step's token as not attended (KVL509)."""
    running, torch_npu = emulated(compare=False)
    graph_decode.decode_graph(torch_npu, graph_update=True)
    assert codes(running) == {}


def test_a_graph_never_updated_is_not_kvl550(emulated):
    running, torch_npu = emulated(compare=False)
    graph_decode.decode_graph(torch_npu, steps=3, skip=(1, 2))
    assert "KVL550" not in codes(running)


def test_the_graph_api_is_restored_at_deactivation(emulated):
    from kvlint.runtime_probe import probe as runtime_probe

    _, torch_npu = emulated()
    assert getattr(torch.npu.graph_task_update_begin, "__kvlint_graph__", False)
    assert getattr(torch.npu.NPUGraph.replay, "__kvlint_graph__", False)
    runtime_probe.deactivate()
    assert not getattr(torch.npu.graph_task_update_begin, "__kvlint_graph__", False)
    assert not getattr(torch.npu.NPUGraph.replay, "__kvlint_graph__", False)
