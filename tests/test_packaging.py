"""Packaging: the core needs only the analysis engine (pylint, flake8, libcst and torch are extras), the license
is the real Apache-2.0 text, and the sdist holds what the test suite needs: the installed wheel passes the
front-end tests run from the unpacked sdist."""

from __future__ import annotations

import importlib.metadata
import re
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from kvlint.catalogue.project import DISTRIBUTION
from tests.conftest import ROOT

REQUIREMENTS = [Requirement(text) for text in importlib.metadata.requires(DISTRIBUTION) or []]


def _extra(requirement: Requirement) -> str | None:
    for extra in ("pylint", "flake8", "fix", "probe", "test"):
        if requirement.marker is not None and requirement.marker.evaluate({"extra": extra}) \
                and not requirement.marker.evaluate({"extra": ""}):
            return extra
    return None


def test_the_core_needs_only_the_analysis_engine() -> None:
    core = {r.name for r in REQUIREMENTS if _extra(r) is None}
    assert core == {"astroid", "tomli"}  # tomli only on Python < 3.11
    by_extra = {(r.name, _extra(r)) for r in REQUIREMENTS}
    assert {("pylint", "pylint"), ("flake8", "flake8"), ("libcst", "fix"), ("torch", "probe")} <= by_extra


def test_the_declared_floors_are_the_versions_ci_tests_as_the_oldest() -> None:
    pins = {}
    for line in (ROOT / ".ci" / "oldest-constraints.txt").read_text().splitlines():
        if line and not line.startswith("#"):
            name, _, version = line.partition("==")
            pins[name] = version
    floors = {r.name: str(s.version) for r in REQUIREMENTS for s in r.specifier if s.operator == ">="}
    assert {name: floors[name] for name in pins} == {"astroid": "3.0", "pylint": "3.0", "flake8": "3.8",
                                                     "libcst": "1.1"}
    for name, version in pins.items():
        assert version.startswith(floors[name] + "."), (name, version, floors[name])


def test_the_command_and_the_flake8_plugin_run_without_pylint_installed(tmp_path: Path) -> None:
    (tmp_path / "m.py").write_text("import torch_npu\n\n\ndef f(q, k, v):\n"
                                   "    return torch_npu.npu_fused_infer_attention_score_v2(q, k, v, num_heads=8, "
                                   "softmax_scale=0.1)\n")
    blocker = (
        "import sys\n"
        "class Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] in ('pylint', 'torch', 'torch_npu', 'libcst'):\n"
        "            raise ImportError('blocked: ' + name)\n"
        "sys.meta_path.insert(0, Block())\n"
        "from kvlint.frontends.cli import main\n"
        "import kvlint.frontends.flake8_plugin\n"
        "code = main(['--isolated', *sys.argv[1:], 'm.py'])\n"
        "assert not {'pylint', 'torch', 'libcst'} & set(sys.modules)\n"
        "sys.exit(code)\n"
    )
    done = subprocess.run([sys.executable, "-c", blocker], capture_output=True, text=True, cwd=tmp_path)
    assert done.returncode == 1, done.stderr
    assert "KVL102" in done.stdout and "Traceback" not in done.stderr
    # A plain run (a pre-commit hook's) gets no [*] marker and no install hint it could not act on ...
    assert "libcst" not in done.stderr
    # ... which only --fix and --diff give, where the user asked for what libcst does.
    for option in ("--fix", "--diff"):
        asked = subprocess.run([sys.executable, "-c", blocker, option], capture_output=True, text=True, cwd=tmp_path)
        assert asked.returncode == 2 and "pip install 'kvlint-ascend[fix]'" in asked.stderr, asked.stderr


def test_the_license_is_the_apache_2_0_text_the_metadata_names() -> None:
    text = (ROOT / "LICENSE").read_text(encoding="utf-8")
    assert "Apache License\n                           Version 2.0, January 2004" in text
    assert "TERMS AND CONDITIONS FOR USE, REPRODUCTION, AND DISTRIBUTION" in text
    assert "END OF TERMS AND CONDITIONS" in text and "APPENDIX: How to apply the Apache License" in text
    assert importlib.metadata.metadata(DISTRIBUTION)["License"] == "Apache-2.0"


def _build_sdist(target: Path) -> Path:
    subprocess.run([sys.executable, "-m", "build", "--sdist", "--no-isolation", "--outdir", str(target), str(ROOT)],
                   check=True, capture_output=True, timeout=600)
    [archive] = target.glob("*.tar.gz")
    return archive


@pytest.mark.slow
def test_the_sdist_carries_every_file_of_the_repository(tmp_path: Path) -> None:
    """Fixtures, conftest, data, probe fixtures, tests/frontends.py, docs/, examples/, the hooks, the license."""
    archive = _build_sdist(tmp_path)
    with tarfile.open(archive) as sdist:
        members = {name.split("/", 1)[1] for name in sdist.getnames() if "/" in name}
    for needed in ("tests/conftest.py", "tests/frontends.py", "tests/fixtures/KVL201/flagged_float_masks.py",
                   "tests/data/sarif/sarif-schema-2.1.0.json", "tests/probe_fixtures/standin.py",
                   "docs/operators/fused_infer_attention.md", "docs/semantics.md", "docs/rules/KVL201.md",
                   "examples/run.py", ".pre-commit-hooks.yaml", "LICENSE", ".ci/oldest-constraints.txt"):
        assert needed in members, needed
    if shutil.which("git") and (ROOT / ".git").exists():
        tracked = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True)
        missing = {path for path in tracked.stdout.splitlines() if path != ".gitignore"} - members
        assert not missing


@pytest.mark.slow
def test_the_installed_wheel_passes_the_front_end_tests_run_from_the_sdist() -> None:
    """scripts/test-installed with the newest versions, on the tests that read the sdist's data (fixtures, rule
    pages, SARIF schema) and the wheel's entry points; CI runs all its front-end tests with the oldest versions
    (.ci/run)."""
    tests = ["tests/test_fixtures.py", "tests/test_docs.py", "tests/test_sarif.py", "tests/test_entry_points.py"]
    done = subprocess.run([str(ROOT / "scripts" / "test-installed"), "", *tests], capture_output=True, text=True,
                          timeout=1800)
    assert done.returncode == 0, done.stdout[-5000:] + done.stderr[-5000:]
    assert " passed" in done.stdout and " failed" not in done.stdout


# --- references that resolve where the user reads them ---------------------------------------------------

@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    target = tmp_path_factory.mktemp("wheel")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w",
                    str(target), str(ROOT)], check=True, capture_output=True, timeout=600)
    [built] = target.glob("*.whl")
    return built


def test_every_page_explain_cites_is_in_the_wheel_and_explain_prints_it(wheel: Path, tmp_path: Path) -> None:
    """Installed from the wheel and run away from any checkout, every ``kvlint --explain docs/...`` that a rule
    page names prints that page (the pages said 'in its source tree', which the wheel did not contain)."""
    installed = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(installed), str(wheel)],
                   check=True, capture_output=True, timeout=600)
    script = (
        "import re, sys\n"
        "from pathlib import Path\n"
        "from kvlint.catalogue import pages\n"
        "from kvlint.catalogue.rules import DOCUMENTED_RULES\n"
        "assert Path(pages.docs_folder()).is_relative_to(Path(sys.argv[1]).resolve()), pages.docs_folder()\n"
        "cited = {name for entry in DOCUMENTED_RULES\n"
        "         for name in re.findall(r'`kvlint --explain (docs/[^`]+)`', pages.explain(entry.code))}\n"
        "assert cited and all(' in its source tree' not in pages.explain(e.code) for e in DOCUMENTED_RULES)\n"
        "for name in sorted(cited):\n"
        "    text = pages.explain(name)\n"
        "    anchor = name.partition('#')[2]\n"
        "    assert f'<a id=\"{anchor}\"></a>' in text, name\n"
        "print(len(cited))\n"
    )
    env = {"PYTHONPATH": str(installed), "PATH": "/usr/bin:/bin"}
    done = subprocess.run([sys.executable, "-c", script, str(installed)], capture_output=True, text=True,
                          cwd=tmp_path, env=env, check=False)
    assert done.returncode == 0, done.stderr
    assert int(done.stdout) >= 10
    out = subprocess.run([sys.executable, "-m", "kvlint", "--explain", "docs/semantics.md"], capture_output=True,
                         text=True, cwd=tmp_path, env=env, check=False)
    assert out.returncode == 0 and out.stdout.startswith("# Reference semantics")


def test_the_package_index_page_has_no_relative_link(wheel: Path) -> None:
    """The README's docs/rules/ links broke on the package index page: its long description says where each
    page is instead (the metadata names no repository to make them absolute against)."""
    import zipfile

    with zipfile.ZipFile(wheel) as archive:
        [name] = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
        metadata = archive.read(name).decode("utf-8")
    description = metadata.split("\n\n", 1)[1]
    assert "## Rules" in description and "| KVL201 |" in description
    assert "](docs/rules/KVL201.md)" in (ROOT / "README.md").read_text(encoding="utf-8")  # as GitHub shows it
    links = re.findall(r"\]\(([^)\s]+)\)", description)
    assert all(link.startswith(("https://", "http://", "#")) for link in links), links
    assert "`kvlint --explain docs/semantics.md#sem-d15`" in description
    assert "`benchmarks/RESULTS.md` (in the source distribution)" in description
