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
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import harness  # noqa: E402

MANIFEST = Path(__file__).resolve().parent / "torch_npu_tests_manifest.json"
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repos", type=Path, required=True, help="folder with Ascend+pytorch (checkout or repo/)")
    parser.add_argument("--workdir", type=Path, help="where to write the test files (default: a temporary folder)")
    parser.add_argument("--json", type=Path, help="write every verdict to this file")
    parser.add_argument("--only", nargs="*", default=None, help="run only these manifest paths")
    parser.add_argument("--manifest", type=Path, default=MANIFEST, help="the manifest (default: %(default)s)")
    parser.add_argument("--verbose", action="store_true", help="print the output tail of files with failures")
    args = parser.parse_args(argv)
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
    total = summarise(results)
    count = sum(total.values())
    print(f"\n{total['ok']} of {count} tests pass ({100 * total['ok'] / max(count, 1):.1f} %): {total['FAIL']} fail, "
          f"{total['ERROR']} errors, {total['skipped']} skipped")  # fmt: skip
    for line in differences:
        print(f"differs from the manifest: {line}")
    if args.json:
        args.json.write_text(json.dumps(results, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    return 1 if differences else 0


if __name__ == "__main__":
    sys.exit(main())
