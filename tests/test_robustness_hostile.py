"""Hostile inputs: the ``kvlint`` command never crashes, never hangs, and lints the other files.

Each hostile file mentions ``torch_npu``, so the text gate sends it on to the decoder and the parser. A file
kvlint cannot decode or parse gives at most one KVL000 finding; a path it cannot read (gone, a dangling
symlink, under a regular file) gives one ``kvlint: error:`` line naming it and exit status 2. In every case
the files around it are still linted: ``aa_first.py`` and ``zz_last.py`` keep their findings, and nothing
prints a traceback. Each run has a generous timeout, so a hang fails the test instead of stalling the suite.
"""

from __future__ import annotations

import concurrent.futures
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

TIMEOUT = 300
"""Seconds; far above what any of these runs takes, so only a hang or a pathological slowdown reaches it."""
TRIGGER = "import torch_npu\n"
MISSPELLED_CALL = ("out = torch_npu.npu_fused_infer_attention_score(q, k, v, num_heads=8, scale=0.1, "
                   "input_layout='BSND', sofmax_lse_flag=True)\n")
"""One KVL101 finding (``sofmax_lse_flag``), on the line of the call."""
GOOD = TRIGGER + "\n\ndef attend(q, k, v):\n    " + MISSPELLED_CALL.replace("out = ", "return ")
GOOD_LINE = 5

HOSTILE: dict[str, bytes] = {
    "empty.py": b"",
    "comment_only.py": b"# torch_npu\n",
    "binary.py": bytes(range(256)) * 8 + b"torch_npu" + bytes(range(255, -1, -1)) * 8,
    "nul_byte.py": TRIGGER.encode() + b"x = 1\x00\n",
    "latin1_without_cookie.py": TRIGGER.encode() + "name = 'été'\n".encode("latin-1"),
    "lone_surrogate.py": TRIGGER.encode() + b"name = '\xed\xa0\x80'\n",
    "unknown_cookie.py": b"# -*- coding: no-such-codec -*-\n" + TRIGGER.encode(),
    "cookie_lies.py": b"# -*- coding: ascii -*-\n" + TRIGGER.encode() + "name = 'été'\n".encode(),
    "syntax_error.py": (TRIGGER + "def attend(q, k, v:\n    return q\n").encode(),
    "unterminated_string.py": (TRIGGER + 'x = """never closed\n').encode(),
    "tab_error.py": (TRIGGER + "if True:\n        x = 1\n\ty = 2\n").encode(),
    "python2_print.py": (TRIGGER + 'print "hello"\n').encode(),
    "python2_except.py": (TRIGGER + "try:\n    pass\nexcept Exception, error:\n    pass\n").encode(),
    "python2_backticks_and_octal.py": (TRIGGER + "x = `1`\ny = 0777\nexec 'z = 1'\n").encode(),
    "deep_parentheses.py": (TRIGGER + "x = " + "(" * 5000 + "1" + ")" * 5000 + "\n").encode(),
    "deep_brackets.py": (TRIGGER + "x = " + "[" * 5000 + "]" * 5000 + "\n").encode(),
    "deep_binop.py": (TRIGGER + "x = " + " + ".join(["q"] * 5000) + "\n").encode(),
    "deep_unary.py": (TRIGGER + "x = " + "-" * 5000 + "1\n").encode(),
    "deep_not.py": (TRIGGER + "x = " + "not " * 5000 + "q\n").encode(),
    "deep_attribute.py": (TRIGGER + "x = torch_npu" + ".a" * 5000 + "\n").encode(),
    "deep_calls.py": (TRIGGER + "x = f" + "()" * 5000 + "\n").encode(),
    "deep_subscripts.py": (TRIGGER + "x = q" + "[0]" * 5000 + "\n").encode(),
    "deep_lambdas.py": (TRIGGER + "x = " + "lambda: " * 5000 + "1\n").encode(),
    "deep_conditional.py": (TRIGGER + "x = " + "q if k else " * 5000 + "v\n").encode(),
    "deep_operator_argument.py": (TRIGGER + "out = torch_npu.npu_fused_infer_attention_score("
                                  + " + ".join(["q"] * 5000) + ", k, v)\n").encode(),
    "deep_indentation.py": (TRIGGER + "".join("    " * i + "if q:\n" for i in range(120))
                            + "    " * 120 + "x = 1\n").encode(),
    "ten_megabytes.py": (TRIGGER + '"""' + ("padding " * 12 + "\n") * 104_000 + '"""\n').encode(),
}


def run_kvlint(*args: str) -> subprocess.CompletedProcess:
    try:
        return subprocess.run([sys.executable, "-m", "kvlint", "--format", "json", *args],
                              capture_output=True, text=True, timeout=TIMEOUT, check=False)
    except subprocess.TimeoutExpired:
        pytest.fail(f"kvlint {' '.join(args)} did not finish within {TIMEOUT} s")


@pytest.fixture(scope="module")
def hostile_tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tree = tmp_path_factory.mktemp("hostile")
    (tree / "aa_first.py").write_text(GOOD, encoding="utf-8")
    (tree / "zz_last.py").write_text(GOOD, encoding="utf-8")
    for name, content in HOSTILE.items():
        (tree / name).write_bytes(content)
    (tree / "dangling_symlink.py").symlink_to(tree / "no_such_target.py")
    (tree / "folder_named_like_a_module.py").mkdir()
    (tree / "folder_named_like_a_module.py" / "inside.py").write_text(GOOD, encoding="utf-8")
    assert len((tree / "ten_megabytes.py").read_bytes()) >= 10_000_000
    return tree


def findings_by_file(stdout: str) -> dict[str, list[dict]]:
    found: dict[str, list[dict]] = {}
    for finding in json.loads(stdout):
        found.setdefault(Path(finding["path"]).name, []).append(finding)
    return found


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_hostile_files_give_at_most_one_kvl000_and_the_run_goes_on(hostile_tree: Path, jobs: str) -> None:
    vanished = hostile_tree / "vanished_after_discovery.py"
    under_a_file = hostile_tree / "aa_first.py" / "child.py"
    out = run_kvlint("-j", jobs, str(hostile_tree), str(vanished), str(under_a_file))

    assert "Traceback" not in out.stderr, out.stderr
    assert out.returncode == 2, (out.returncode, out.stderr)
    found = findings_by_file(out.stdout)
    for name in HOSTILE:
        codes = [f["code"] for f in found.get(name, [])]
        assert codes in ([], ["KVL000"]), (name, found.get(name))
        assert name not in out.stderr, (name, out.stderr)
    for finding in found.get("ten_megabytes.py", []) + [f for name in HOSTILE for f in found.get(name, [])]:
        assert finding["line"] >= 1 and finding["column"] >= 1
    for name in ("aa_first.py", "zz_last.py", "inside.py"):
        assert [(f["line"], f["code"]) for f in found[name]] == [(GOOD_LINE, "KVL101")], name
    errors = [line for line in out.stderr.splitlines() if line.startswith("kvlint: error:")]
    for path in (hostile_tree / "dangling_symlink.py", vanished, under_a_file):
        assert sum(str(path) in line for line in errors) == 1, (path, errors)
    assert len(errors) == 3, errors


def test_files_that_cannot_be_parsed_are_reported_as_kvl000(hostile_tree: Path) -> None:
    """The undecodable and unparsable files say so, with a reason, instead of passing silently."""
    out = run_kvlint(str(hostile_tree))
    found = findings_by_file(out.stdout)
    must_fail = [name for name in HOSTILE
                 if name not in ("empty.py", "comment_only.py", "ten_megabytes.py", "deep_indentation.py")]
    for name in must_fail:
        [finding] = found.get(name, [{}])
        assert finding.get("code") == "KVL000", (name, found.get(name))
        reason = finding["message"].partition("cannot parse the file:")[2].strip()
        assert reason, f"{name}: KVL000 without a reason: {finding['message']!r}"


def test_a_named_pipe_does_not_hang_the_run(tmp_path: Path) -> None:
    """A FIFO named like a module (left by a tool, or a test harness) would block ``open().read()``
    forever waiting for a writer; kvlint must name it and go on."""
    (tmp_path / "aa_first.py").write_text(GOOD, encoding="utf-8")
    (tmp_path / "zz_last.py").write_text(GOOD, encoding="utf-8")
    pipe = tmp_path / "pipe.py"
    os.mkfifo(pipe)
    try:
        out = subprocess.run([sys.executable, "-m", "kvlint", "--format", "json", str(tmp_path)],
                             capture_output=True, text=True, timeout=60, check=False)
    except subprocess.TimeoutExpired:
        pytest.fail("kvlint blocked on a named pipe (pipe.py) for 60 s")
    finally:
        _release_blocked_readers(pipe)
    assert "Traceback" not in out.stderr, out.stderr
    found = findings_by_file(out.stdout)
    assert sorted(found) == ["aa_first.py", "zz_last.py"]
    assert "pipe.py" in out.stderr


def _release_blocked_readers(pipe: Path) -> None:
    """Open the FIFO for writing once, so that a reader still blocked in ``open`` sees end-of-file."""
    try:
        os.close(os.open(pipe, os.O_WRONLY | os.O_NONBLOCK))
    except OSError:
        pass


@pytest.mark.slow
def test_ten_megabytes_of_code_is_linted_to_the_last_line(tmp_path: Path) -> None:
    """95,000 statements (10 MB), then one misspelled keyword: found at its line, in bounded time."""
    lines = [TRIGGER]
    index = 0
    while sum(map(len, lines)) < 10_000_000:
        lines.append(f"value_{index} = compute({index}, scale={index % 7})  # " + "padding " * 8 + "\n")
        index += 1
    lines.append(MISSPELLED_CALL)
    (tmp_path / "generated.py").write_text("".join(lines), encoding="utf-8")
    out = run_kvlint(str(tmp_path))
    assert "Traceback" not in out.stderr, out.stderr
    assert [(f["line"], f["code"]) for f in json.loads(out.stdout)] == [(len(lines), "KVL101")]


def test_files_that_change_between_discovery_and_reading(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Discovery lists the files, then, before they are read, one is deleted, one is replaced by a folder and
    one by a named pipe: each gives one error naming it, and the other files are linted."""
    from kvlint.frontends import runner

    for name in ("aa_first.py", "vanishes.py", "becomes_folder.py", "becomes_pipe.py", "zz_last.py"):
        (tmp_path / name).write_text(GOOD, encoding="utf-8")
    discover = runner.discover

    def discover_then_change(paths, *options):
        yield from discover(paths, *options)
        (tmp_path / "vanishes.py").unlink()
        (tmp_path / "becomes_folder.py").unlink()
        (tmp_path / "becomes_folder.py").mkdir()
        (tmp_path / "becomes_pipe.py").unlink()
        os.mkfifo(tmp_path / "becomes_pipe.py")

    monkeypatch.setattr(runner, "discover", discover_then_change)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        future = pool.submit(runner.run, [str(tmp_path)])
        try:
            results = {Path(r.path).name: r for r in future.result(timeout=60)}
        except concurrent.futures.TimeoutError:
            _release_blocked_readers(tmp_path / "becomes_pipe.py")
            pytest.fail("the run blocked on becomes_pipe.py for 60 s")
    assert sorted(results) == ["aa_first.py", "becomes_folder.py", "becomes_pipe.py", "vanishes.py", "zz_last.py"]
    for name in ("vanishes.py", "becomes_folder.py", "becomes_pipe.py"):
        assert results[name].findings == [] and name in (results[name].error or ""), results[name]
    for name in ("aa_first.py", "zz_last.py"):
        assert results[name].error is None
        assert [(f.line, f.code) for f in results[name].findings] == [(GOOD_LINE, "KVL101")]
