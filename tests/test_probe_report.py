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
    assert list(report) == ["findings", "sites", "cache", "process"]
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
