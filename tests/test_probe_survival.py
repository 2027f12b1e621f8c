"""Probe reports that survive: atomic writes, a report folder checked at start-up, the report kept current
on disk while the program runs, and a report from every way a process ends (signals, ``os._exit``, the
workers of a multiprocessing pool)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from kvlint.runtime_probe.__main__ import main

from tests.probe_fixtures.harness import STANDIN_PATH

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
    return subprocess.run([sys.executable, "-m", "kvlint.runtime_probe", str(path), *args], cwd=ROOT,
                          env=environment(tmp_path, **environ), capture_output=True, text=True, timeout=300)


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
