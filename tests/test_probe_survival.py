"""Probe reports that survive: atomic writes, a report folder checked at start-up, the report kept current
on disk while the program runs, and a report from every way a process ends (signals, ``os._exit``, the
workers of a multiprocessing pool)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from kvlint.runtime_probe.__main__ import main
from kvlint.runtime_probe.report import summary

from tests.probe_fixtures.harness import STANDIN_PATH, probe  # noqa: F401

ROOT = Path(__file__).resolve().parent.parent


def environment(tmp_path: Path, **environ: str) -> dict[str, str]:
    """The stand-in torch_npu on the path, the report asked for as ``report.json`` in ``tmp_path``."""
    base = {**os.environ, "PYTHONPATH": os.pathsep.join([STANDIN_PATH, str(ROOT)]),
            "KVLINT_PROBE_REPORT": str(tmp_path / "report.json"),
            "OMP_NUM_THREADS": "1"}  # torch's OpenMP pool does not survive a fork; one thread never starts it
    for variable in ("KVLINT_PROBE", "RANK", "LOCAL_RANK", "WORLD_SIZE", "KVLINT_PROBE_PARENT"):
        base.pop(variable, None)
    return {**base, **environ}


def run_probed(tmp_path: Path, script: str, *args: str, **environ: str) -> subprocess.CompletedProcess[str]:
    """``script`` under ``python -m kvlint.runtime_probe`` (see ``environment``)."""
    path = tmp_path / "run.py"
    path.write_text(script)
    # Under nohup the suite ignores SIGHUP, and run as a background job of a shell without job control it
    # ignores SIGINT: the program would inherit both (and the probe then rightly leaves them be).
    hangup = signal.signal(signal.SIGHUP, signal.SIG_DFL)
    interrupt = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        return subprocess.run([sys.executable, "-m", "kvlint.runtime_probe", str(path), *args], cwd=ROOT,
                              env=environment(tmp_path, **environ), capture_output=True, text=True, timeout=300)
    finally:
        signal.signal(signal.SIGHUP, hangup)
        signal.signal(signal.SIGINT, interrupt)


FULL_DISK = """
import resource, signal, sys
from pathlib import Path
from kvlint.runtime_probe.report import write_json
path = Path(sys.argv[1])
write_json({"findings": [], "sites": []}, path)
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG, as on a full disk
resource.setrlimit(resource.RLIMIT_FSIZE, (64, 64))
try:
    write_json({"findings": [], "sites": [{"line": n} for n in range(100)]}, path)
except OSError as error:
    print(error)
"""


def test_a_write_that_fails_leaves_the_previous_report_whole(tmp_path):
    path = tmp_path / "report.json"
    done = subprocess.run([sys.executable, "-c", FULL_DISK, str(path)], cwd=ROOT, env=environment(tmp_path),
                          capture_output=True, text=True, timeout=60)
    assert done.stderr == ""
    assert done.stdout.startswith(f"{path}: cannot write the report (")
    assert json.loads(path.read_text()) == {"findings": [], "sites": []}
    assert [p.name for p in tmp_path.iterdir()] == ["report.json"]  # no temporary file left behind


def test_an_unwritable_report_folder_is_named_at_start_up_and_at_exit(tmp_path):
    (tmp_path / "taken").write_text("a file, not a folder")
    report = tmp_path / "taken" / "report.json"
    done = run_probed(tmp_path, "print('the program runs')\n", KVLINT_PROBE_REPORT=str(report))
    assert done.returncode == 0 and done.stdout == "the program runs\n"
    lines = done.stderr.splitlines()
    assert lines[0].startswith(f"kvlint: KVLINT_PROBE_REPORT: cannot write in {report.parent} (")
    assert any(line.startswith(f"kvlint: probe could not write its report: {report}: cannot write the report (")
               for line in lines)
    assert "Traceback" not in done.stderr


def test_merge_into_an_unwritable_output_names_it_and_exits_2(tmp_path, capsys):
    (tmp_path / "report.json").write_text(json.dumps({"findings": [], "sites": []}))
    (tmp_path / "taken").write_text("a file, not a folder")
    output = tmp_path / "taken" / "merged.json"
    assert main(["--merge", str(tmp_path / "report.json"), "-o", str(output)]) == 2
    assert capsys.readouterr().err.startswith(f"kvlint-probe: error: {output}: cannot write the report (")


def report_of(tmp_path: Path, name: str = "report.json") -> dict[str, object]:
    return json.loads((tmp_path / name).read_text())


ENDED_BY = """
import os, signal, sys, time
import torch_npu
from tests.probe_fixtures import user_calls
for _ in range(3):
    user_calls.bad_mask_missing(torch_npu)
how = sys.argv[1]
if how == "os._exit":
    os._exit(0)
os.kill(os.getpid(), getattr(signal, how))
time.sleep(60)
"""


@pytest.mark.parametrize("name", ["SIGTERM", "SIGHUP"])
def test_a_process_ended_by_a_signal_leaves_its_report_marked_incomplete(tmp_path, name):
    """The handler writes the report and the summary, then the signal ends the process as it would have."""
    done = run_probed(tmp_path, ENDED_BY, name, KVLINT_PROBE_REPORT_EVERY="60")
    assert done.returncode == -getattr(signal, name), done.stderr
    report = report_of(tmp_path)
    assert (report["complete"], report["interrupted"], report["process"]["operator_calls"]) == (False, name, 3)
    assert [(f["code"], f["count"]) for f in report["findings"]] == [("KVL203", 3)]
    assert "kvlint probe summary" in done.stderr and f"stopped by {name}" in done.stderr


def test_after_os_exit_the_last_write_remains(tmp_path):
    done = run_probed(tmp_path, ENDED_BY, "os._exit", KVLINT_PROBE_REPORT_EVERY="0")
    assert done.returncode == 0, done.stderr
    report = report_of(tmp_path)
    assert (report["complete"], report["interrupted"], report["process"]["operator_calls"]) == (False, None, 3)


def test_an_interrupt_is_marked_in_the_report_written_at_exit(tmp_path):
    done = run_probed(tmp_path, ENDED_BY, "SIGINT")
    assert done.returncode == -signal.SIGINT and "KeyboardInterrupt" in done.stderr
    report = report_of(tmp_path)
    assert (report["complete"], report["interrupted"], report["process"]["operator_calls"]) == (True, "SIGINT", 3)


STOPPED_IN_A_CALL = """
import os, signal, time
import torch_npu
from kvlint.runtime_probe import probe as runtime_probe
from kvlint.runtime_probe.hooks import ProbedOp
from kvlint.catalogue.operators import FIA_V1
from tests.probe_fixtures import user_calls

def stopped(*args, **kwargs):
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(60)

for _ in range(3):
    user_calls.bad_mask_missing(torch_npu)
q, k, v = user_calls.qkv()
ProbedOp(stopped, FIA_V1, runtime_probe.active())(q, k, v, **user_calls.causal())
"""


def test_a_signal_inside_a_probed_call_leaves_the_report_of_the_last_write(tmp_path):
    """The probe may hold its locks when the signal interrupts the call: the handler does not wait for them,
    it marks the last report written (here after every call) instead."""
    done = run_probed(tmp_path, STOPPED_IN_A_CALL, KVLINT_PROBE_REPORT_EVERY="0")
    assert done.returncode == -signal.SIGTERM, done.stderr
    report = report_of(tmp_path)
    assert (report["complete"], report["interrupted"], report["process"]["operator_calls"]) == (False, "SIGTERM", 3)


STUCK_IN_A_C_CALL = """
import signal, threading
import torch_npu
from tests.probe_fixtures import user_calls
user_calls.bad_mask_missing(torch_npu)
# What a pool worker meets when terminate() comes as it starts waiting for its queue's lock: the signal is
# received, but the main thread is in a C call it does not interrupt, and never runs the handler.
signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
print("waiting", flush=True)
threading.Event().wait()
"""


def main_thread_waits(pid: int) -> None:
    """Return once the process's main thread sleeps (Linux's /proc), in the wait the script ends with: a signal
    sent before, while it still runs bytecode, would be handled by it."""
    for _ in range(1000):
        if Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] == "S":
            return
        time.sleep(0.01)
    raise AssertionError(f"process {pid}'s main thread never waited")


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads whether a thread sleeps in /proc")
def test_a_signal_the_main_thread_cannot_handle_still_ends_the_process_with_its_report(tmp_path):
    """Without the probe, SIGTERM's default action would end the process at once; with it, the process ends
    too (status -15), within the probe's grace, and its report says so."""
    path = tmp_path / "run.py"
    path.write_text(STUCK_IN_A_C_CALL)
    process = subprocess.Popen([sys.executable, "-m", "kvlint.runtime_probe", str(path)], cwd=ROOT,
                               env=environment(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert process.stdout.readline() == "waiting\n"
        main_thread_waits(process.pid)
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=60)
    finally:
        process.kill()
    assert process.returncode == -signal.SIGTERM, stderr
    assert "stopped by SIGTERM" in stderr
    report = report_of(tmp_path)
    assert (report["complete"], report["interrupted"], report["process"]["operator_calls"]) == (False, "SIGTERM", 1)


CHAINED = """
import signal, sys
import torch_npu
from kvlint.runtime_probe import probe as runtime_probe
from tests.probe_fixtures import user_calls

def graceful(number, frame):
    print("the program's handler ran")
    sys.exit(7)

signal.signal(signal.SIGTERM, graceful)
runtime_probe.active().keeper.install_handlers()  # as when the probe starts after the program set its handler
user_calls.bad_mask_missing(torch_npu)
signal.raise_signal(signal.SIGTERM)
"""


def test_a_handler_the_program_had_is_called_after_the_report_is_written(tmp_path):
    done = run_probed(tmp_path, CHAINED)
    assert done.returncode == 7 and done.stdout == "the program's handler ran\n", done.stderr
    assert "stopped by SIGTERM" in done.stderr
    report = report_of(tmp_path)
    assert (report["complete"], report["interrupted"], report["process"]["operator_calls"]) == (True, "SIGTERM", 1)


def test_an_ignored_signal_stays_ignored(tmp_path):
    """``nohup`` ignores SIGHUP: the probe installs no handler there (the process would die of it)."""
    script = "import signal\nsignal.raise_signal(signal.SIGHUP)\nprint(signal.getsignal(signal.SIGHUP) is signal.SIG_IGN)\n"
    path = tmp_path / "run.py"
    path.write_text(script)
    done = subprocess.run(["nohup", sys.executable, "-m", "kvlint.runtime_probe", str(path)], cwd=ROOT,
                          env=environment(tmp_path), capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout == "True\n", done.stderr


POOL = """
import multiprocessing as mp
import os
import sys
import torch_npu
from tests.probe_fixtures import user_calls

def work(task):
    import torch_npu
    user_calls.bad_mask_missing(torch_npu)
    return os.getpid()

if __name__ == "__main__":
    context, ending = mp.get_context(sys.argv[1]), sys.argv[2]
    if ending == "with":  # Pool.__exit__ terminates its workers: no exit handler runs in them
        with context.Pool(2) as pool:
            pids = pool.map(work, range(4))
    else:
        pool = context.Pool(2)
        pids = pool.map(work, range(4))
        if ending == "close":
            pool.close()
        else:
            pool.terminate()
        pool.join()
    print(len(set(pids)))
"""


def pool_case(start_method: str, ending: str):
    return pytest.param(start_method, ending, marks=[pytest.mark.slow] if start_method != "fork" or
                        ending != "with" else [], id=f"{start_method}-{ending}")


@pytest.mark.parametrize(("start_method", "ending"), [
    pool_case(method, ending) for method in ("fork", "spawn", "forkserver") for ending in ("with", "close", "terminate")
])
def test_every_pool_worker_reports_its_calls_and_merge_counts_the_processes(start_method, ending, tmp_path, capsys):
    done = run_probed(tmp_path, POOL, start_method, ending)
    assert done.returncode == 0, done.stderr
    workers = int(done.stdout)
    reports = sorted(tmp_path.glob("report.pid*.json"))
    assert len(reports) == workers, (done.stderr, sorted(p.name for p in tmp_path.iterdir()))
    assert sum(json.loads(path.read_text())["process"]["operator_calls"] for path in reports) == 4
    assert main(["--merge", str(tmp_path / "report.json")]) == 1  # KVL203, and nothing missing
    out = capsys.readouterr().out
    assert "KVL203x4" in out
    # the parent made no call of its own; a terminated worker may have left before or after its SIGTERM
    assert f"processes: {workers + 1} reported of {workers + 1} expected" in out


def test_a_killed_worker_leaves_its_last_write_and_merge_exits_3(tmp_path, capsys):
    """SIGKILL runs no handler: the worker's report is the one written after its first call."""
    script = """
import os, signal
import torch_npu
from tests.probe_fixtures import user_calls
user_calls.bad_mask_missing(torch_npu)
pid = os.fork()
if pid == 0:
    user_calls.bad_mask_missing(torch_npu)
    os.kill(os.getpid(), signal.SIGKILL)
os.waitpid(pid, 0)
print(pid)
"""
    done = run_probed(tmp_path, script)
    assert done.returncode == 0, done.stderr
    child = tmp_path / f"report.pid{int(done.stdout)}.json"
    assert json.loads(child.read_text())["process"]["operator_calls"] == 1
    assert main(["--merge", str(tmp_path / "report.json")]) == 3
    captured = capsys.readouterr()
    assert "processes: 2 reported of 2 expected" in captured.out and "KVL203x2" in captured.out
    assert captured.err == (f"kvlint-probe: error: {child}: incomplete: the process ended without its final report "
                            "(os._exit, SIGKILL, a crash); calls after its last periodic write are missing\n")


def test_merge_names_a_listed_process_that_wrote_no_report_and_exits_3(tmp_path, capsys):
    (tmp_path / "report.json").write_text(json.dumps({"findings": [], "sites": [], "complete": True}))
    (tmp_path / "report.processes").write_text("report.json\nreport.pid77.json\n")
    assert main(["--merge", str(tmp_path / "report.json")]) == 3
    captured = capsys.readouterr()
    assert "processes: 1 reported of 2 expected" in captured.out
    assert captured.err.startswith(f"kvlint-probe: error: {tmp_path / 'report.pid77.json'}: no report, though "
                                   "report.processes lists it")


def test_merge_of_a_report_left_by_os_exit_says_calls_may_be_missing_and_exits_3(tmp_path, capsys):
    done = run_probed(tmp_path, ENDED_BY, "os._exit", KVLINT_PROBE_REPORT_EVERY="0")
    assert done.returncode == 0, done.stderr
    assert main(["--merge", str(tmp_path / "report.json")]) == 3
    assert capsys.readouterr().err.startswith(
        f"kvlint-probe: error: {tmp_path / 'report.json'}: incomplete: the process ended without its final report")


def paged_decode_call() -> tuple[tuple[object, ...], dict[str, object], object]:
    """A paged decode (one signature), the output a no-op operator returns for it."""
    import torch

    batch, blocks_per_row, block_size, heads, kv_heads, dim = 2, 4, 16, 4, 2, 16
    query = torch.randn(batch, 1, heads * dim)
    cache = torch.randn(batch * blocks_per_row, block_size, kv_heads * dim)
    table = torch.arange(batch * blocks_per_row, dtype=torch.int32).reshape(batch, blocks_per_row)
    keywords = dict(num_heads=heads, num_key_value_heads=kv_heads, scale=dim**-0.5, input_layout="BSH",
                    block_table=table, block_size=block_size, actual_seq_lengths_kv=[blocks_per_row * block_size] * batch)
    return (query, cache, cache), keywords, (torch.zeros(batch, 1, heads * dim), torch.zeros(1))


def test_probe_memory_stays_flat_over_a_long_run(probe):
    """10,000 calls on one signature (each a step of its own: the paged cache comes round again): the traced
    memory grows by less than 64 KiB from call 2,000 to call 10,000."""
    import gc
    import tracemalloc

    from kvlint.runtime_probe.hooks import ProbedOp

    from kvlint.catalogue.operators import FIA_V1

    args, keywords, output = paged_decode_call()
    running = probe(compare=False)
    operator = ProbedOp(lambda *args, **keywords: output, FIA_V1, running)

    def calls(count: int) -> None:  # one call site
        for _ in range(count):
            operator(*args, **keywords)

    calls(2000)
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        calls(8000)
        gc.collect()
        growth = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert not running.recorder.findings and running.recorder.sites.popitem()[1].calls == 10000
    assert growth < 64 * 1024, f"{growth} bytes"


def test_a_long_run_keeps_the_cache_figures_of_its_first_and_latest_steps(probe, monkeypatch):
    from kvlint.runtime_probe import cache_usage
    from kvlint.runtime_probe.hooks import ProbedOp

    from kvlint.catalogue.operators import FIA_V1

    monkeypatch.setattr(cache_usage, "KEPT_STEPS", 3)
    args, keywords, output = paged_decode_call()
    running = probe(compare=False, value_first=None)
    operator = ProbedOp(lambda *args, **keywords: output, FIA_V1, running)
    for _ in range(20):
        operator(*args, **keywords)
    cache = running.report()["cache"]
    assert [step["step"] for step in cache["steps"]] == [1, 2, 3, 18, 19, 20]
    assert (cache["dropped_steps"], cache["unmeasured_steps"]) == (14, 0)
    assert "14 measured step(s) in the middle of the run not kept" in summary(running.report())
