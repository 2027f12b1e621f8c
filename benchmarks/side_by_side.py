"""The ``kvlint`` command of other commits against this checkout's, on the same files, next to the floor.

    python benchmarks/side_by_side.py FILES [--rev REV ...] [--runs 11]

``FILES`` lists one Python file per line. Each ``--rev`` (a git revision of this repository) is exported
(``git archive REV kvlint``) into a temporary folder and run from there (``PYTHONPATH``); the checkout's own
``kvlint`` runs as installed. Every round runs the floor (reading and ``ast.parse``-ing every file, as
``realcode_findings.py`` does), then ``kvlint --isolated --format json --exit-zero -j 1`` of each source,
alternating the order; the figures are medians of CPU seconds, and each source's ratio to the floor.

What it is for: changes to the fixed cost of a run (start-up, astroid's bootstrap), which a ratio measured on
a few files shows and one measured on thousands hides. Short sets need many rounds: a run takes tenths of a
second there.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import harness  # noqa: E402
from realcode_findings import PARSE  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


def export(revision: str, folder: Path) -> Path:
    """The ``kvlint`` package at ``revision``, written under ``folder``; the folder to put on ``PYTHONPATH``."""
    archive = subprocess.run(["git", "archive", revision, "kvlint"], cwd=ROOT, capture_output=True, check=False)
    if archive.returncode != 0:
        raise SystemExit(f"side_by_side.py: --rev {revision}: {archive.stderr.decode(errors='replace').strip()}")
    folder.mkdir(parents=True)
    subprocess.run(["tar", "-x", "-C", str(folder)], input=archive.stdout, check=True)
    return folder


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", type=Path, help="a file listing the Python files, one per line")
    parser.add_argument("--rev", action="append", default=[], help="a revision to run next to the checkout")
    parser.add_argument("--runs", type=int, default=11, help="rounds (default 11)")
    args = parser.parse_args(argv)
    try:
        listed = [line for line in args.files.read_text(encoding="utf-8").splitlines() if line.strip()]
    except OSError as error:
        raise SystemExit(f"side_by_side.py: cannot read {args.files}: {error.strerror}") from None
    files = [str(Path(line).resolve()) for line in listed]  # the commands run from a scratch folder
    missing = [line for line, path in zip(listed, files) if not Path(path).is_file()]
    if not files or missing:
        raise SystemExit(f"side_by_side.py: {args.files} lists no file" if not files else
                         f"side_by_side.py: {args.files} lists {len(missing)} missing file(s), e.g. {missing[0]}")
    lint = [harness.python(), "-m", "kvlint", "--isolated", "--format", "json", "--exit-zero", "-j", "1",
            "-o", "/dev/null", *files]
    with tempfile.TemporaryDirectory() as scratch:
        listing = Path(scratch) / "files.txt"
        listing.write_text("\n".join(files), encoding="utf-8")
        commands = {"read + ast.parse": [harness.python(), "-c", PARSE, str(listing)]}
        for revision in args.rev:
            source = export(revision, Path(scratch) / revision.replace("/", "_"))
            commands[f"kvlint at {revision}"] = ["env", f"PYTHONPATH={source}", *lint]
        commands["kvlint, this checkout"] = lint
        where = harness.machine()
        series = harness.compare(commands, args.runs, cwd=scratch, check_codes=(0,))
    print(f"{len(files)} files; {args.runs} rounds; {where}\n")
    print(harness.series_table(series, "read + ast.parse"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
