"""Start-up activation: the guarded hook, and the ``.pth`` line of an installed copy of kvlint.

The installed-copy tests build throw-away environments: a venv without pip whose site-packages points
(through a path-only ``.pth``, which runs no code) at the dev venv's for torch, setuptools and pip; a
copy of the sources installed into it with ``pip install .`` or ``pip install -e .``.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
from kvlint.runtime_probe import probe as runtime_probe

from kvlint import _startup
from tests.probe_fixtures.harness import STANDIN_PATH

ROOT = Path(__file__).resolve().parent.parent
SOURCES = ("kvlint", "checkers", "runtime_probe", "setup.py", "setup.cfg", "pyproject.toml", "README.md")
PROBED_SCRIPT = """
import sys
import torch_npu
from tests.probe_fixtures import user_calls
user_calls.bad_mask_missing(torch_npu)
"""
LOADED = "import sys; print(sorted(m for m in ('torch', 'kvlint.runtime_probe.probe') if m in sys.modules))"


@pytest.fixture
def fresh_startup(monkeypatch):
    monkeypatch.setattr(_startup, "_started", set())
    monkeypatch.delenv("KVLINT_PROBE", raising=False)
    monkeypatch.delenv("KVLINT_EMULATE", raising=False)
    yield monkeypatch
    runtime_probe.deactivate()


def test_unset_variables_activate_nothing(fresh_startup):
    activations = []
    fresh_startup.setattr(runtime_probe, "activate_from_env", lambda: activations.append(1))
    fresh_startup.setenv("KVLINT_PROBE", "0")
    _startup.activate_from_env()
    assert activations == [] and _startup._started == set()


def test_activation_runs_once_however_often_the_hook_runs(fresh_startup):
    activations = []
    fresh_startup.setattr(runtime_probe, "activate_from_env", lambda: activations.append(1))
    fresh_startup.setenv("KVLINT_PROBE", "1")
    _startup.activate_from_env()
    _startup.activate_from_env()
    assert activations == [1]


def test_failures_at_start_up_are_one_line_on_stderr_never_an_exception(fresh_startup, capsys):
    def broken():
        raise OSError("disk on fire")

    from kvlint.runtime_probe import emulator

    fresh_startup.setattr(emulator, "install", broken)
    fresh_startup.setattr(runtime_probe, "activate_from_env", broken)
    fresh_startup.setenv("KVLINT_PROBE", "1")
    fresh_startup.setenv("KVLINT_EMULATE", "1")
    fresh_startup.setattr(sys, "meta_path", list(sys.meta_path))
    _startup.activate_from_env()
    assert capsys.readouterr().err.splitlines() == ["kvlint: KVLINT_PROBE ignored: OSError: disk on fire"]
    fresh_startup.delitem(sys.modules, "torch_npu", raising=False)
    with pytest.raises(ModuleNotFoundError):  # the emulator could not stand in, and there is no torch_npu
        importlib.import_module("torch_npu")
    assert capsys.readouterr().err.splitlines() == ["kvlint: KVLINT_EMULATE ignored: OSError: disk on fire"]


def python_c(code: str, **environ: str) -> subprocess.CompletedProcess[str]:
    """``python -c code`` in this environment (its ``kvlint.pth`` runs), with only ``environ`` set."""
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env={"PATH": "/usr/bin:/bin", **environ})


@pytest.mark.slow
def test_kvlint_emulate_acts_only_in_a_process_that_imports_torch_npu():
    idle = python_c("import sys; print(sorted(m for m in ('torch', 'kvlint.runtime_probe.emulator') if m in sys.modules))",
                    KVLINT_EMULATE="1")
    assert idle.stdout.strip() == "[]", idle.stderr
    used = python_c("import torch_npu; print(torch_npu.__kvlint_emulator__, torch_npu.npu_fused_infer_attention_score)",
                    KVLINT_EMULATE="1")
    assert used.stdout.startswith("True npu.npu_fused_infer_attention_score"), used.stderr
    for first in ("torch_npu", "torchair"):  # either import installs the whole emulator, every operator on it
        both = python_c(f"import {first}; import torch_npu, torchair; "
                        "print(torch_npu.npu_format_cast, torchair.get_npu_backend.__name__)", KVLINT_EMULATE="1")
        assert both.stdout.split() == ["npu.npu_format_cast", "get_npu_backend"], both.stderr


@pytest.mark.slow
def test_kvlint_emulate_leaves_a_real_torch_npu_alone():
    done = python_c("import torch_npu; print(torch_npu.__file__)", KVLINT_EMULATE="1",
                    PYTHONPATH=f"{STANDIN_PATH}:{ROOT}")
    assert done.stdout.strip() == f"{STANDIN_PATH}/torch_npu/__init__.py"
    (said,) = [line for line in done.stderr.splitlines() if line.startswith("kvlint:")]
    assert said.startswith("kvlint: KVLINT_EMULATE ignored: RuntimeError: a real torch_npu is installed at "
                           f"'{STANDIN_PATH}/torch_npu/__init__.py'")


def test_the_hook_imports_nothing_heavy_when_unset():
    code = f"import kvlint._startup as s; s.activate_from_env(); {LOADED}"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                          env={"PATH": "/usr/bin:/bin"})
    assert done.stdout.strip() == "[]", done.stderr


def _isolation() -> list[str]:
    """Build with this environment's setuptools when it can build wheels by itself (setuptools >= 70.1,
    or with ``wheel``); otherwise let pip fetch the build requirements into an isolated environment."""
    try:
        version = tuple(int(part) for part in importlib.metadata.version("setuptools").split(".")[:2])
    except importlib.metadata.PackageNotFoundError:
        return []
    return ["--no-build-isolation"] if version >= (70, 1) or importlib.util.find_spec("wheel") else []


def _environment(tmp_path: Path, editable: bool) -> Path:
    """A venv with a copy of kvlint installed (regular or editable); returns its python."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=60)
    python = venv / "bin" / "python"
    purelib = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             capture_output=True, text=True, check=True).stdout.strip()
    Path(purelib, "zz_dev_packages.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    source = tmp_path / "src"
    source.mkdir()
    for name in SOURCES:
        copy = shutil.copytree if (ROOT / name).is_dir() else shutil.copy
        copy(ROOT / name, source / name)
    command = [str(python), "-m", "pip", "install", "-q", "--no-deps", *_isolation()]
    subprocess.run([*command, *(["-e"] if editable else []), str(source)], check=True, timeout=300,
                   capture_output=True)
    line = Path(purelib, "kvlint.pth").read_text()
    assert line.startswith('import os; (os.environ.get("KVLINT_PROBE") or os.environ.get("KVLINT_EMULATE")) and')
    return python


@pytest.mark.slow
@pytest.mark.parametrize("editable", [False, True], ids=["pip-install", "pip-install-e"])
def test_installed_pth_activates_the_probe_only_when_asked(editable, tmp_path):
    python = _environment(tmp_path, editable)
    script = tmp_path / "run.py"
    script.write_text(PROBED_SCRIPT)
    fixtures = tmp_path / "fixtures"  # the tests package alone: kvlint must come from the installed copy
    fixtures.mkdir()
    (fixtures / "tests").symlink_to(ROOT / "tests")
    base = {"PATH": "/usr/bin:/bin", "PYTHONPATH": f"{STANDIN_PATH}:{fixtures}"}

    def run(*args: str, **environ: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(python), *args], cwd=tmp_path, env={**base, **environ}, capture_output=True,
                              text=True, timeout=120)

    installed = run("-c", "import kvlint.runtime_probe as m; print(m.__file__)").stdout
    assert installed.startswith(str(tmp_path / ("src" if editable else "venv")))
    assert run("-c", LOADED).stdout.strip() == "[]"
    timed = run("-X", "importtime", "-c", "pass").stderr
    modules = {line.split("|")[-1].strip() for line in timed.splitlines() if line.startswith("import time:")}
    assert not {m for m in modules if m.startswith("kvlint")}, sorted(modules)
    if not editable:  # setuptools' editable finder imports modules of its own in every process
        assert not modules & {"typing", "__future__", "collections", "re"}, sorted(modules)
    assert run("-c", LOADED, KVLINT_PROBE="1").stdout.strip() == "['kvlint.runtime_probe.probe']"
    quiet = run(str(script))
    assert quiet.returncode == 0 and "kvlint" not in quiet.stderr
    probed = run(str(script), KVLINT_PROBE="1")
    assert probed.returncode == 0, probed.stderr
    assert "fixtures/tests/probe_fixtures/user_calls.py:" in probed.stderr
    assert "KVL203 sparse-mode-needs-mask" in probed.stderr and "kvlint probe summary" in probed.stderr
    strict = run(str(script), KVLINT_PROBE="strict")
    assert strict.returncode == 1 and "kvlint.runtime_probe.ProbeError" in strict.stderr
