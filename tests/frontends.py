"""Run kvlint's three front-ends on files and return what each reports as (path, line, code) triples."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from kvlint.catalogue.rules import STATIC_RULES

Triple = tuple[str, int, str]
_CODE_BY_MSGID = {rule.pylint_msgid: rule.code for rule in STATIC_RULES if rule.pylint_msgid}


def run_cli(paths: Sequence[Path], *extra: str) -> list[Triple]:
    out = subprocess.run(
        [sys.executable, "-m", "kvlint", "--format", "json", *extra, *map(str, paths)],
        capture_output=True, text=True, check=False,
    )
    assert out.returncode in (0, 1), out.stderr
    return [(str(Path(f["path"])), f["line"], f["code"]) for f in json.loads(out.stdout)]


def run_flake8(paths: Sequence[Path]) -> list[Triple]:
    out = subprocess.run(
        [sys.executable, "-m", "flake8", "--select", "KVL", "--format", "%(path)s\t%(row)d\t%(code)s",
         *map(str, paths)],
        capture_output=True, text=True, check=False,
    )
    assert out.returncode in (0, 1), out.stderr
    triples = []
    for line in out.stdout.splitlines():
        path, row, code = line.split("\t")
        triples.append((str(Path(path)), int(row), code))
    return triples


def run_pylint(paths: Sequence[Path]) -> list[Triple]:
    out = subprocess.run(
        [sys.executable, "-m", "pylint", "--load-plugins", "kvlint", "--disable=all", "--enable=kvlint",
         "--output-format=json", "--score=n", *map(str, paths)],
        capture_output=True, text=True, check=False,
    )
    assert out.returncode < 32, out.stderr
    messages = [m for m in json.loads(out.stdout) if m["message-id"] in _CODE_BY_MSGID]
    return [(str(Path(m["path"])), m["line"], _CODE_BY_MSGID[m["message-id"]]) for m in messages]
