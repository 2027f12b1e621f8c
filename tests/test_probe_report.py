"""The probe's settings, its JSON report (exact shape), per-rank report files and ``--merge``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from kvlint.runtime_probe.__main__ import main
from kvlint.runtime_probe.config import DEFAULT_SAMPLE, Settings, from_env
from kvlint.runtime_probe.report import merge, summary

from tests.probe_fixtures import user_calls
from tests.probe_fixtures.harness import STANDIN_PATH, probe, standin  # noqa: F401

FINDING_KEYS = ["code", "symbol", "severity", "message", "op", "path", "line", "count"]
SITE_KEYS = ["op", "path", "line", "calls", "validated", "compared", "max_abs_err", "max_rel_err", "raised",
             "first_raise", "probe_seconds"]
PROCESS_KEYS = ["pid", "parent_pid", "rank", "world_size", "operator_calls"]
ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        ({}, None),
        ({"KVLINT_PROBE": "0"}, None),
        ({"KVLINT_PROBE": "off"}, None),
        ({"KVLINT_PROBE": "1"}, Settings()),
        ({"KVLINT_PROBE": "on", "KVLINT_PROBE_SAMPLE": "all"}, Settings(sample=None)),
        ({"KVLINT_PROBE": "validate"}, Settings(compare=False)),
        ({"KVLINT_PROBE": "strict", "KVLINT_PROBE_SAMPLE": "7"}, Settings(strict=True, sample=7)),
        ({"KVLINT_PROBE": "1", "KVLINT_PROBE_REPORT": "out/r.json"}, Settings(report_path=Path("out/r.json"))),
        ({"KVLINT_PROBE": "1", "KVLINT_PROBE_REPORT": "r.json", "RANK": "3"},
         Settings(report_path=Path("r.rank3.json"))),
        ({"KVLINT_PROBE": "1", "KVLINT_PROBE_REPORT": "r.json", "LOCAL_RANK": "1"},
         Settings(report_path=Path("r.rank1.json"))),
    ],
)
def test_settings_from_the_environment(environ, expected):
    assert from_env(environ) == expected


def test_values_not_understood_are_announced_and_safe(capsys):
    assert from_env({"KVLINT_PROBE": "maybe"}) is None
    assert from_env({"KVLINT_PROBE": "1", "KVLINT_PROBE_SAMPLE": "many"}) == Settings(sample=DEFAULT_SAMPLE)
    assert capsys.readouterr().err.count("kvlint:") == 2


def test_json_report_has_exactly_the_documented_shape(probe, standin, tmp_path):
    running = probe(report_path=tmp_path / "report.json")
    torch_npu = standin("top_left")
    user_calls.bad_mask_missing(torch_npu)
    user_calls.bad_mask_missing(torch_npu)
    user_calls.clean_calls(torch_npu)
    running.finish()
    report = json.loads((tmp_path / "report.json").read_text())
    assert list(report) == ["findings", "sites", "cache", "process", "complete", "interrupted"]
    assert (report["complete"], report["interrupted"]) == (True, None)
    assert all(list(entry) == FINDING_KEYS for entry in report["findings"])
    assert all(list(entry) == SITE_KEYS for entry in report["sites"])
    assert list(report["process"]) == PROCESS_KEYS and report["process"]["pid"] == os.getpid()
    assert report["process"]["operator_calls"] == sum(site["calls"] for site in report["sites"]) == 7
    assert all(site["probe_seconds"] > 0 and site["raised"] == 0 for site in report["sites"])
    missing = next(f for f in report["findings"] if f["code"] == "KVL203")
    assert missing == {**missing, "symbol": "sparse-mode-needs-mask", "severity": "error", "count": 2,
                       "op": "npu_fused_infer_attention_score", "path": "tests/probe_fixtures/user_calls.py"}
    compared = [s for s in report["sites"] if s["compared"]]
    assert compared and all(isinstance(s["max_abs_err"], float) for s in compared)
    assert {s["max_abs_err"] for s in report["sites"] if not s["compared"]} == {None}


def test_a_relative_report_path_is_taken_from_where_the_program_started(probe, standin, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    running = probe(report_path=Path("reports/probe.json"))
    user_calls.bad_mask_missing(standin("good"))
    monkeypatch.chdir(ROOT)
    running.finish()
    assert [f["code"] for f in json.loads((tmp_path / "reports/probe.json").read_text())["findings"]] == ["KVL203"]


def test_merge_adds_counts_and_keeps_the_largest_error():
    site = dict(op="op", path="run.py", line=3, calls=2, validated=2, compared=1, max_abs_err=0.5, max_rel_err=0.25)
    finding = dict(code="KVL501", symbol="probe-output-mismatch", severity="error", message="m", op="op",
                   path="run.py", line=3, count=1)
    rank0 = {"findings": [finding], "sites": [site]}
    rank1 = {"findings": [{**finding, "count": 2}],
             "sites": [{**site, "calls": 5, "max_abs_err": 0.75, "max_rel_err": None}]}
    merged = merge([rank0, rank1])
    assert merged["findings"] == [{**finding, "count": 3}]
    assert merged["sites"] == [{**site, "calls": 7, "validated": 4, "compared": 2, "max_abs_err": 0.75, "raised": 0,
                                "first_raise": None, "probe_seconds": 0.0}]
    table = summary(merged)
    assert "run.py:3" in table and "KVL501x3" in table and "0.75" in table


RANK_SCRIPT = """
import torch_npu
from tests.probe_fixtures import user_calls
user_calls.bad_mask_missing(torch_npu)
user_calls.clean_calls(torch_npu)
"""


def test_each_rank_writes_its_own_report_and_merge_sums_them(tmp_path, capsys):
    script = tmp_path / "run.py"
    script.write_text(RANK_SCRIPT)
    environ = {**os.environ, "PYTHONPATH": os.pathsep.join([STANDIN_PATH, str(ROOT)]),
               "KVLINT_PROBE_REPORT": str(tmp_path / "report.json"), "KVLINT_PROBE_SAMPLE": "all"}
    environ.pop("KVLINT_PROBE", None)
    for rank in ("0", "1"):
        done = subprocess.run([sys.executable, "-m", "kvlint.runtime_probe", str(script)], cwd=ROOT,
                              env={**environ, "RANK": rank}, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        assert "KVL203 sparse-mode-needs-mask" in done.stderr and "kvlint probe summary" in done.stderr
    reports = sorted(tmp_path.glob("report*.json"))
    assert [p.name for p in reports] == ["report.rank0.json", "report.rank1.json"]
    assert main(["--merge", *map(str, reports), "-o", str(tmp_path / "merged.json")]) == 1
    merged = json.loads((tmp_path / "merged.json").read_text())
    assert [(f["code"], f["count"]) for f in merged["findings"]] == [("KVL203", 2)]
    assert sum(s["calls"] for s in merged["sites"]) == 2 * 6
    assert "KVL203x2" in capsys.readouterr().out


def run_probed(tmp_path: Path, script: str, *args: str, **environ: str) -> subprocess.CompletedProcess[str]:
    """``script`` under ``python -m kvlint.runtime_probe``, the stand-in torch_npu on the path, the report
    asked for as ``report.json`` in ``tmp_path``."""
    path = tmp_path / "run.py"
    path.write_text(script)
    base = {**os.environ, "PYTHONPATH": os.pathsep.join([STANDIN_PATH, str(ROOT)]),
            "KVLINT_PROBE_REPORT": str(tmp_path / "report.json"),
            "OMP_NUM_THREADS": "1"}  # torch's OpenMP pool does not survive a fork; one thread never starts it
    for variable in ("KVLINT_PROBE", "RANK", "LOCAL_RANK", "WORLD_SIZE", "KVLINT_PROBE_PARENT"):
        base.pop(variable, None)
    return subprocess.run([sys.executable, "-m", "kvlint.runtime_probe", str(path), *args], cwd=ROOT,
                          env={**base, **environ}, capture_output=True, text=True, timeout=300)


def test_a_program_without_operator_calls_still_writes_its_report(tmp_path):
    done = run_probed(tmp_path, "print('no NPU work here')\n")
    assert done.returncode == 0, done.stderr
    assert "kvlint probe summary: no operator call" in done.stderr
    report = json.loads((tmp_path / "report.json").read_text())
    assert (report["findings"], report["sites"], report["process"]["operator_calls"]) == ([], [], 0)


WORKERS = """
import multiprocessing as mp
import os
import sys
import torch_npu
from tests.probe_fixtures import user_calls

def work(name):
    import torch_npu
    getattr(user_calls, name)(torch_npu)

if __name__ == "__main__":
    context = mp.get_context(sys.argv[1])
    user_calls.bad_mask_dtype(torch_npu)
    workers = [context.Process(target=work, args=(name,)) for name in ("bad_mask_missing", "bad_mask_shape")]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert all(worker.exitcode == 0 for worker in workers)
    idle = context.Process(target=print, args=("a worker without operator calls",))
    idle.start()
    idle.join()
    pid = os.fork()
    if pid == 0:
        user_calls.bad_layout(torch_npu)
        sys.exit(0)
    os.waitpid(pid, 0)
"""


@pytest.mark.slow
@pytest.mark.parametrize("start_method", ["spawn", "fork"])
def test_every_process_writes_its_own_report_and_merge_takes_the_set(start_method, tmp_path, capsys):
    """The parent, two multiprocessing workers and a plain os.fork child each write a report (the workers
    and the child with their pid); a worker without operator calls writes none; ``--merge report.json``
    merges the whole set and loses no finding."""
    done = run_probed(tmp_path, WORKERS, start_method)
    assert done.returncode == 0, done.stderr
    parent = tmp_path / "report.json"
    workers = sorted(tmp_path.glob("report.pid*.json"))
    assert parent.exists() and len(workers) == 3, sorted(p.name for p in tmp_path.iterdir())
    parent_pid = json.loads(parent.read_text())["process"]["pid"]
    worker_pids = {json.loads(path.read_text())["process"]["pid"] for path in workers}
    assert parent_pid not in worker_pids and {p.name for p in workers} == {f"report.pid{n}.json" for n in worker_pids}
    assert {json.loads(path.read_text())["process"]["parent_pid"] for path in workers} == {parent_pid}
    assert main(["--merge", str(parent)]) == 1
    out = capsys.readouterr().out
    for code in ("KVL201x1", "KVL203x1", "KVL202x1", "KVL106x1"):
        assert code in out
    assert "4 call site(s), 4 finding(s)" in out


def _report_file(path: Path, rank: int | None = None, world_size: int | None = None, calls: int = 2) -> Path:
    site = dict(op="op", path="run.py", line=3, calls=calls, validated=calls, compared=0, max_abs_err=None,
                max_rel_err=None)
    finding = dict(code="KVL203", symbol="sparse-mode-needs-mask", severity="error", message="m", op="op",
                   path="run.py", line=3, count=1)
    process = dict(pid=100 + (rank or 0), parent_pid=None, rank=rank, world_size=world_size, operator_calls=calls)
    path.write_text(json.dumps({"findings": [finding], "sites": [site], "process": process}))
    return path


def test_merge_names_each_unreadable_report_merges_the_rest_and_exits_3(tmp_path, capsys):
    good = _report_file(tmp_path / "good.json")
    (tmp_path / "empty.json").write_text("{}")
    (tmp_path / "broken.json").write_text("{'findings': ")
    missing = tmp_path / "missing.json"
    assert main(["--merge", str(good), str(tmp_path / "empty.json"), str(tmp_path / "broken.json"),
                 str(missing)]) == 3
    captured = capsys.readouterr()
    assert "run.py:3" in captured.out and "KVL203x1" in captured.out
    errors = captured.err.splitlines()
    assert errors[0] == f"kvlint-probe: error: {tmp_path / 'empty.json'}: not a kvlint probe report (no 'findings' and 'sites' lists)"
    assert errors[1].startswith(f"kvlint-probe: error: {tmp_path / 'broken.json'}: not JSON (")
    assert errors[2].startswith(f"kvlint-probe: error: {missing}: cannot read it (")
    assert "Traceback" not in captured.err


def test_a_rank_that_wrote_no_report_is_named_and_does_not_hide_the_others(tmp_path, capsys):
    reports = [_report_file(tmp_path / f"report.rank{rank}.json", rank, world_size=3) for rank in (0, 2)]
    assert main(["--merge", str(tmp_path / "report.json"), "-o", str(tmp_path / "merged.json")]) == 3
    captured = capsys.readouterr()
    assert captured.err.strip() == ("kvlint-probe: error: no report from rank 1 (WORLD_SIZE=3): it did not write "
                                    "one (did it exit early?)")
    merged = json.loads((tmp_path / "merged.json").read_text())
    assert [f["count"] for f in merged["findings"]] == [2]
    assert [p["rank"] for p in merged["processes"]] == [0, 2] and len(reports) == 2


def test_a_report_path_stands_for_its_whole_set(tmp_path):
    from kvlint.runtime_probe.__main__ import report_set

    names = ["report.json", "report.rank0.json", "report.rank1.pid7.json", "report.pid42.json", "other.json",
             "report.backup.json"]
    for name in names:
        (tmp_path / name).write_text("{}")
    assert [p.name for p in report_set(tmp_path / "report.json")] == [
        "report.json", "report.pid42.json", "report.rank0.json", "report.rank1.pid7.json"]
    assert [p.name for p in report_set(tmp_path / "report.rank0.json")] == ["report.rank0.json"]
    assert len(report_set(tmp_path)) == len(names)


def test_merge_into_a_reader_that_stops_early_exits_quietly(tmp_path):
    """A summary of 3000 sites is more than a pipe holds: ``head -1`` exits and the next write fails."""
    sites = [dict(op="op", path="run.py", line=line, calls=1, validated=1, compared=0, max_abs_err=None,
                  max_rel_err=None) for line in range(1, 3001)]
    process = dict(pid=1, parent_pid=None, rank=None, world_size=None, operator_calls=3000)
    (tmp_path / "report.json").write_text(json.dumps({"findings": [], "sites": sites, "process": process}))
    done = subprocess.run(f"{sys.executable} -m kvlint.runtime_probe --merge report.json | head -1; "
                          "echo status=${PIPESTATUS[0]}", shell=True, capture_output=True, text=True, cwd=tmp_path,
                          executable="/bin/bash")
    assert done.stdout.splitlines() == ["kvlint probe summary", "status=141"]
    assert done.stderr == ""
