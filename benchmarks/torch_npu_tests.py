"""torch_npu's own tests on the emulator: the in-scope test files of ``torch_npu_tests_manifest.json`` (attention,
KV cache, NPU graphs, fake tensors), run unchanged with ``KVLINT_EMULATE=1``, importing the emulator's
``torch_npu.testing``.

    python benchmarks/torch_npu_tests.py --repos DIR [--workdir SCRATCH] [--json OUT] [--only PATH ...] [--verbose]

``DIR`` holds ``Ascend+pytorch``: a checkout of the manifest's commit, or a folder with a bare clone in
``repo/`` (what the project's fetch tool leaves in ``/work/.mirror``). The files are written at the manifest's
commit into ``SCRATCH`` (default: a temporary folder), outside this repository: nothing of torch_npu is
committed here, only the paths, the commit and the results. Each file runs in its own process
(``python FILE -v [TEST ...]``, in its folder, ``timeout`` seconds at most, with the manifest's environment);
each test's verdict is compared with the one the manifest records, and every failure recorded there names
its cause. The exit status is 1 when a verdict differs from the manifest's.

``--update`` writes the verdicts of a run of every file into the manifest (a test that passes loses its
cause; one that no longer passes keeps the cause recorded, or gets "not diagnosed", which the run prints) and
regenerates the section ``torch-npu-tests`` of ``RESULTS.md`` from the manifest: the run's dates, torch, load,
the pass rate, a table of the files with each failure's cause, the manifest's ``history`` and
``fp16_goldens``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from collections import Counter
from datetime import datetime, timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import harness  # noqa: E402

MANIFEST = Path(__file__).resolve().parent / "torch_npu_tests_manifest.json"
RESULTS = Path(__file__).resolve().parent / "RESULTS.md"
SECTION = "torch-npu-tests"
UNDIAGNOSED = "not diagnosed"
VERDICT = re.compile(r"^(test\w*) \((?:__main__\.)?([\w.]+)\) \.\.\. (?:[^\n]*\n)*?[^\n]*?\b(ok|FAIL|ERROR|skipped)\b",
                     re.MULTILINE)  # fmt: skip
"""A verdict line of ``unittest -v``: ``name (__main__.Class.name) ... ok``, the test known as ``Class.name``;
other output (a profiler, a warning) may come between a test's name and its verdict."""


def source_folder(repos: Path, repository: str) -> Path:
    where = repos / repository.replace("/", "+")
    if not where.is_dir():
        raise SystemExit(f"torch_npu_tests.py: {repository} is not in {repos} (expected {where})")
    return where


def write_files(where: Path, commit: str, paths: list[str], scratch: Path) -> None:
    """The test files at ``commit``, written under ``scratch`` with their repository paths."""
    bare = where / "repo"
    contents = (harness.blobs_at(bare, commit, paths) if bare.is_dir()
                else ((path, (where / path).read_bytes()) for path in paths))  # fmt: skip
    for path, data in contents:
        if not data:
            raise SystemExit(f"torch_npu_tests.py: {path} is not in {where} at {commit}")
        target = scratch / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)


def run_file(scratch: Path, entry: dict, environment: dict[str, str]) -> tuple[dict[str, str], str]:
    """{Class.test: verdict} of one file, and the tail of its output. A file that stops before running its tests
    gives each expected test the verdict ``ERROR``."""
    path = scratch / entry["path"]
    command = [sys.executable, path.name, "-v", *entry.get("tests", [])]
    env = {key: value for key, value in os.environ.items() if not key.startswith("KVLINT_")}
    env.update({"KVLINT_EMULATE": "1", **environment, **entry.get("environment", {})})
    try:
        done = subprocess.run(command, cwd=path.parent, env=env, capture_output=True, text=True,
                              timeout=entry.get("timeout", 900))  # fmt: skip
        output = done.stdout + done.stderr
    except subprocess.TimeoutExpired as timeout:
        output = f"{timeout.stdout or ''}{timeout.stderr or ''}\ntimed out after {timeout.timeout} s"
    verdicts = {test: verdict for _, test, verdict in VERDICT.findall(output)}
    for test in entry.get("expected", {}):
        verdicts.setdefault(test, "ERROR")
    return verdicts, output[-3000:]


def summarise(results: dict[str, dict[str, str]]) -> Counter:
    return Counter(verdict for verdicts in results.values() for verdict in verdicts.values())


def update_manifest(manifest: dict, results: dict[str, dict[str, str]]) -> list[str]:
    """Record ``results`` as the manifest's verdicts; return the tests that fail without a recorded cause."""
    undiagnosed = []
    for entry in manifest["files"]:
        verdicts = results[entry["path"]]
        expected = entry.setdefault("expected", {})
        for test, verdict in sorted(verdicts.items()):
            recorded = expected.get(test, {})
            if verdict == "ok":
                expected[test] = {"verdict": "ok"}
                continue
            cause = recorded.get("cause") if recorded.get("verdict") not in (None, "ok") else None
            if cause is None:
                undiagnosed.append(f"{entry['path']}::{test}")
            expected[test] = {**recorded, "verdict": verdict, "cause": cause or UNDIAGNOSED}
        counts = Counter(verdicts.values())
        entry["result"] = ", ".join(f"{counts[v]} {v}" for v in ("ok", "FAIL", "ERROR", "skipped") if counts[v])
    total = summarise(results)
    manifest["result"] = (f"{total['ok']} of {sum(total.values())} pass; {total['FAIL']} FAIL, {total['ERROR']} ERROR, "
                          f"{total['skipped']} skipped")  # fmt: skip
    return undiagnosed


def section(manifest: dict, run: dict[str, str]) -> str:
    """The ``torch-npu-tests`` section of RESULTS.md, from the manifest and the run's circumstances."""
    files = manifest["files"]
    verdicts = [recorded["verdict"] for entry in files for recorded in entry["expected"].values()]
    passed, count = verdicts.count("ok"), len(verdicts)
    lines = [f"<!-- begin {SECTION} -->", "## torch_npu's own tests on the emulator (issue 27)", "",
             f"`python benchmarks/torch_npu_tests.py --repos /work/.mirror --update` ({manifest['repository']} at "
             f"{manifest['commit'][:8]}, the files and the scope in `torch_npu_tests_manifest.json`, fixed before the "
             f"first run), run from {run['start']} to {run['end']}, torch {run['torch']}, load average {run['load']} "
             "(the machine is shared; the verdicts do not depend on it). Each file ran unchanged with "
             "`KVLINT_EMULATE=1`, importing the emulator's `torch_npu.testing`; the DTensor file with "
             "`KVLINT_EMULATE_DEVICES=2` (two gloo processes per test).", "",
             f"**{passed} of {count} in-scope tests pass ({100 * passed / max(count, 1):.1f} %)** (target >= 90 %).",
             "",
             "| file | pass | not passing, by cause |", "|---|---|---|"]  # fmt: skip
    for entry in files:
        tests = entry["expected"]
        ok = sum(recorded["verdict"] == "ok" for recorded in tests.values())
        failing = "; ".join(f"`{test}` {recorded['verdict']}: {recorded['cause']}"
                            for test, recorded in tests.items() if recorded["verdict"] != "ok")  # fmt: skip
        lines.append(f"| {entry['path']} | {ok} / {len(tests)} | {failing} |")
    lines += ["", *(f"- {line}" for line in manifest.get("history", [])), "",
              f"fp16 goldens: {manifest['fp16_goldens']}", f"<!-- end {SECTION} -->"]
    return "\n".join(lines)


def write_section(results_md: Path, text: str) -> None:
    content = results_md.read_text(encoding="utf-8")
    begin, end = f"<!-- begin {SECTION} -->", f"<!-- end {SECTION} -->"
    if begin not in content or end not in content:
        raise SystemExit(f"torch_npu_tests.py: {results_md} has no section {SECTION} ({begin} ... {end})")
    head, rest = content.split(begin, 1)
    results_md.write_text(head + text + rest.split(end, 1)[1], encoding="utf-8")


def _load() -> str:
    return " ".join(f"{value:.1f}" for value in os.getloadavg())


def _now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repos", type=Path, required=True, help="folder with Ascend+pytorch (checkout or repo/)")
    parser.add_argument("--workdir", type=Path, help="where to write the test files (default: a temporary folder)")
    parser.add_argument("--json", type=Path, help="write every verdict to this file")
    parser.add_argument("--only", nargs="*", default=None, help="run only these manifest paths")
    parser.add_argument("--manifest", type=Path, default=MANIFEST, help="the manifest (default: %(default)s)")
    parser.add_argument("--verbose", action="store_true", help="print the output tail of files with failures")
    parser.add_argument("--update", action="store_true", help="write the verdicts into the manifest and the section "
                        "of RESULTS.md (a run of every file only)")  # fmt: skip
    parser.add_argument("--results", type=Path, default=RESULTS, help="RESULTS.md (default: %(default)s)")
    args = parser.parse_args(argv)
    if args.update and args.only is not None:
        raise SystemExit("torch_npu_tests.py: --update records a run of every file; drop --only")
    run = {"start": _now(), "loads": [_load()]}
    manifest = json.loads(args.manifest.read_text(encoding="utf-8"))
    entries = [entry for entry in manifest["files"] if args.only is None or entry["path"] in args.only]
    where = source_folder(args.repos, manifest["repository"])
    with tempfile.TemporaryDirectory(prefix="torch_npu_tests_") as temporary:
        scratch = args.workdir or Path(temporary)
        write_files(where, manifest["commit"], [entry["path"] for entry in entries], scratch)
        results, differences = {}, []
        for entry in entries:
            verdicts, tail = run_file(scratch, entry, manifest.get("environment", {}))
            results[entry["path"]] = verdicts
            expected = {test: recorded["verdict"] for test, recorded in entry.get("expected", {}).items()}
            changed = {test: (expected.get(test), verdict) for test, verdict in verdicts.items()
                       if expected.get(test) != verdict}  # fmt: skip
            counts = Counter(verdicts.values())
            print(f"{entry['path']}: " + ", ".join(f"{counts[v]} {v}" for v in ("ok", "FAIL", "ERROR", "skipped")))
            for test, (before, now) in sorted(changed.items()):
                differences.append(f"{entry['path']}::{test}: manifest {before}, now {now}")
            if args.verbose and (counts["FAIL"] or counts["ERROR"]):
                print(tail)
            run["loads"].append(_load())
    total = summarise(results)
    count = sum(total.values())
    print(f"\n{total['ok']} of {count} tests pass ({100 * total['ok'] / max(count, 1):.1f} %): {total['FAIL']} fail, "
          f"{total['ERROR']} errors, {total['skipped']} skipped")  # fmt: skip
    for line in differences:
        print(f"differs from the manifest: {line}")
    if args.json:
        args.json.write_text(json.dumps(results, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    if args.update:
        for test in update_manifest(manifest, results):
            print(f"fails without a recorded cause (the manifest says {UNDIAGNOSED!r}): {test}")
        args.manifest.write_text(json.dumps(manifest, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
        import torch

        loads = sorted(float(value) for load in run["loads"] for value in load.split())
        circumstances = {"start": run["start"], "end": _now(), "torch": torch.__version__,
                         "load": f"{loads[0]:.1f}-{loads[-1]:.1f}"}  # fmt: skip
        write_section(args.results, section(manifest, circumstances))
        return 0
    return 1 if differences else 0


if __name__ == "__main__":
    sys.exit(main())
