"""The README documents every rule exactly as the rule catalogue defines it."""

from __future__ import annotations

import re
from pathlib import Path

from kvlint.catalogue.rules import DOCUMENTED_RULES, RULES

README = Path(__file__).resolve().parent.parent / "README.md"
ROOT = README.parent
_ROW = re.compile(r"^\| \[(KVL\d{3})\]\(docs/rules/KVL\d{3}\.md\) \| ([a-z0-9-]+) \| (error|warning) \|", re.MULTILINE)


def test_rule_table_rows_match_the_catalogue() -> None:
    rows = {code: (symbol, level) for code, symbol, level in _ROW.findall(README.read_text(encoding="utf-8"))}
    for rule in DOCUMENTED_RULES:
        assert rows.get(rule.code) == (rule.symbol, rule.severity), rule.code
    for code, (symbol, level) in rows.items():
        assert (RULES[code].symbol, RULES[code].severity) == (symbol, level)


def test_every_linked_rule_page_exists() -> None:
    links = re.findall(r"\]\((docs/rules/KVL\d{3}\.md)\)", README.read_text(encoding="utf-8"))
    assert links
    missing = [link for link in links if not (README.parent / link).is_file()]
    assert not missing


def _install_section() -> str:
    text = README.read_text(encoding="utf-8")
    match = re.search(r"^## Install\n(.*?)(?=^## )", text, re.MULTILINE | re.DOTALL)
    assert match, "README.md has no '## Install' section"
    return match.group(1)


def test_install_commands_name_the_distribution_and_not_the_other_projects_name() -> None:
    """``kvlint`` on the package index is another project; every install command in the README's code blocks
    names ``kvlint-ascend``."""
    blocks = re.findall(r"^```(\w*)\n(.*?)^```$", README.read_text(encoding="utf-8"), re.MULTILINE | re.DOTALL)
    shell = "\n".join(body for language, body in blocks if language in ("bash", "sh", "console", "yaml"))
    commands = re.findall(r"pip install [^\n#]*", shell)
    assert commands
    for command in commands:
        targets = [word.strip("\"'") for word in command.split()[2:] if not word.startswith("-")]
        assert all(t == "." or t.startswith("kvlint-ascend") or not t.startswith("kvlint") for t in targets), command


def test_install_section_states_the_name_collision() -> None:
    section = _install_section()
    for fact in ("`pip install kvlint`", "prefix-cache", "0.1.1", '`pip install "kvlint[probe]"`', "silently drops",
                 "`pip install -U kvlint`", "`pip uninstall kvlint`", "--force-reinstall kvlint-ascend"):
        assert fact in section, fact


def test_the_probe_extra_comes_with_the_cpu_index_command_and_the_scripts_install_the_cpu_build() -> None:
    """``pip install "kvlint-ascend[probe]"`` alone resolves torch's CUDA build on Linux (several GB, for a CPU
    emulator). The install section gives PyTorch's CPU index command before the extra, in one code block, and
    scripts/setup-env pins the ``+cpu`` build, which only that index has."""
    text = README.read_text(encoding="utf-8")
    install = text.split("## Install", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"^```bash\n(.*?)^```$", install, re.MULTILINE | re.DOTALL)
    cpu = "pip install torch --index-url https://download.pytorch.org/whl/cpu\n"
    assert any(cpu in block and block.index(cpu) < block.find('pip install "kvlint-ascend[probe]"') for block in blocks)
    torch_installs = [line for path in (ROOT / "scripts").iterdir() if path.is_file()
                      for line in path.read_text(encoding="utf-8").splitlines()
                      if "pip install" in line and "torch" in line]
    assert torch_installs
    for line in torch_installs:
        assert "torch==2.13.0+cpu" in line, line
    assert any("TORCH_CPU_INDEX" in line for line in torch_installs)
    assert 'TORCH_CPU_INDEX="${TORCH_CPU_INDEX:-https://download.pytorch.org/whl/cpu}"' in (
        ROOT / "scripts" / "setup-env").read_text(encoding="utf-8")
