"""Per-project configuration, and the value parsers the three front-ends share.

The CLI reads ``[tool.kvlint]`` from pyproject.toml or ``[kvlint]`` from setup.cfg, in the current folder or
the nearest folder above it that has one (pyproject.toml wins in one folder), or the file given with
``--config``. flake8 reads the same keys from ``[flake8]`` and pylint from its rc file (see
``kvlint.frontends.flake8_plugin`` and ``kvlint.checkers.families``); all three parse values with the functions here.

Keys: ``select``, ``ignore`` (codes or prefixes of existing rules), ``per-file-ignores`` (glob -> codes),
``exclude`` / ``extend-exclude`` (glob patterns of paths a folder search leaves out: ``exclude`` replaces the
default list, ``extend-exclude`` adds to it), ``kv-len-names`` (replaces the default names of the runner's KV
length variable), ``extra-fa-wrappers`` (dotted name of a user's wrapper -> the operator it stands for),
``file-time-limit`` / ``file-memory-limit`` (how much analysing one file may cost before it is skipped with a
warning: ``10s``, ``1GiB``; ``0`` or ``none`` turns a limit off). Any other key is an error that names the key
and the file.
"""

from __future__ import annotations

import configparser
import difflib
import fnmatch
import keyword
import os
import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from kvlint.analysis.settings import DEFAULT_KV_LEN_NAMES, FileLimits, Settings
from kvlint.budget.units import BudgetError, parse_size
from kvlint.catalogue.operators import OPERATORS
from kvlint.catalogue.rules import RULES

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib

KEYS = ("select", "ignore", "per-file-ignores", "exclude", "extend-exclude", "kv-len-names", "extra-fa-wrappers",
        "file-time-limit", "file-memory-limit")
_CODE_OR_PREFIX = re.compile(r"^KVL\d{0,3}$")
_DURATION = re.compile(r"\s*(\d+(?:\.\d+)?)\s*(ms|s|min)?\s*")
_SECONDS_PER = {"ms": 0.001, "s": 1.0, "min": 60.0, None: 1.0}
_NO_LIMIT = ("0", "none")
_DOTTED = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$")


class ConfigError(Exception):
    """A configuration value or file kvlint cannot use; the message names the file and the key."""


@dataclass(frozen=True)
class Config:
    select: tuple[str, ...] = ()
    ignore: tuple[str, ...] = ()
    per_file_ignores: tuple[tuple[str, tuple[str, ...]], ...] = ()
    exclude: tuple[str, ...] | None = None
    """None: the default folder names (``kvlint.frontends.runner.DEFAULT_EXCLUDE``)."""
    extend_exclude: tuple[str, ...] = ()
    kv_len_names: tuple[str, ...] = DEFAULT_KV_LEN_NAMES
    extra_fa_wrappers: Mapping[str, str] = field(default_factory=dict)
    limits: FileLimits = FileLimits()
    source: str | None = None
    """The file the configuration came from (None: defaults)."""
    root: str = "."
    """The folder per-file-ignores patterns are relative to (the configuration file's folder)."""

    def settings(self) -> Settings:
        return Settings(kv_len_names=self.kv_len_names, extra_fa_wrappers=dict(self.extra_fa_wrappers),
                        limits=self.limits)

    def ignored_for(self, path: str) -> tuple[str, ...]:
        """Codes or prefixes that per-file-ignores turns off for ``path``."""
        return ignored_for(path, self.per_file_ignores, self.root)


# --- value parsers (shared by the CLI, flake8 and pylint) -------------------------------------------------

def _items(value: object, where: str) -> list[str]:
    """A list from a TOML array or a comma/whitespace separated string."""
    if isinstance(value, str):
        return [item for item in re.split(r"[,\s]+", value) if item]
    if isinstance(value, (list, tuple)) and all(isinstance(item, str) for item in value):
        return [item.strip() for item in value if item.strip()]
    raise ConfigError(f"{where}: expected a list of strings or a comma-separated string, got {value!r}")


def check_code(code: str) -> str | None:
    """Why ``code`` is not a code or prefix of an existing rule (``KVL201``, ``KVL2``), or None when it is."""
    if not _CODE_OR_PREFIX.match(code):
        return f"'{code}' is not a kvlint code or prefix (e.g. KVL201, KVL2)"
    if not any(known.startswith(code) for known in RULES):
        close = difflib.get_close_matches(code, RULES, n=1)
        return f"no kvlint rule has the code '{code}'" + (f"; did you mean '{close[0]}'?" if close else "")
    return None


def parse_codes(value: object, where: str) -> tuple[str, ...]:
    codes = tuple(item.upper() for item in _items(value, where))
    for code in codes:
        problem = check_code(code)
        if problem:
            raise ConfigError(f"{where}: {problem}")
    return codes


def parse_names(value: object, where: str) -> tuple[str, ...]:
    """Names of the runner's KV length variable: Python identifiers that are not keywords, at least one."""
    names = tuple(_items(value, where))
    for name in names:
        if not name.isidentifier() or keyword.iskeyword(name):
            raise ConfigError(f"{where}: '{name}' is not a Python identifier")
    if not names:
        raise ConfigError(f"{where}: give at least one name")
    return names


def parse_patterns(value: object, where: str) -> tuple[str, ...]:
    """Glob patterns of paths (``exclude``): a list, or a comma-separated string."""
    return tuple(_items(value, where))


def parse_per_file_ignores(value: object, where: str) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """``{"tests/*" = ["KVL104"]}`` (TOML) or flake8's ``tests/*: KVL104,KVL105`` text."""
    if isinstance(value, Mapping):
        return tuple((str(pattern), parse_codes(codes, f"{where} '{pattern}'")) for pattern, codes in value.items())
    if isinstance(value, (list, tuple)):
        value = "\n".join(map(str, value))
    if not isinstance(value, str):
        raise ConfigError(f"{where}: expected a table of glob = codes or 'glob: codes' lines, got {value!r}")
    entries: list[tuple[str, list[str]]] = []
    tokens = [t for t in re.split(r"[,\s]+", value.replace(":", " : ")) if t]
    index = 0
    while index < len(tokens):
        token = tokens[index]
        if index + 1 < len(tokens) and tokens[index + 1] == ":":
            entries.append((token, []))
            index += 2
            continue
        if token == ":" or not entries:
            raise ConfigError(f"{where}: expected 'glob: codes', got {value.strip()!r}")
        entries[-1][1].append(token)
        index += 1
    result = []
    for pattern, codes in entries:
        if not codes:
            raise ConfigError(f"{where}: no codes after '{pattern}:'")
        result.append((pattern, parse_codes(codes, f"{where} '{pattern}'")))
    return tuple(result)


def parse_wrappers(value: object, where: str) -> dict[str, str]:
    """``{"mypkg.ops.fa" = "npu_fused_infer_attention_score_v2"}`` (TOML) or ``name = operator`` entries
    separated by newlines or commas."""
    if isinstance(value, Mapping):
        pairs = [(str(k), v) for k, v in value.items()]
    else:
        if isinstance(value, (list, tuple)):
            value = "\n".join(map(str, value))
        if not isinstance(value, str):
            raise ConfigError(f"{where}: expected a table of wrapper = operator, got {value!r}")
        pairs = []
        for entry in filter(None, (part.strip() for part in re.split(r"[,\n]", value))):
            name, sep, operator = entry.partition("=")
            if not sep:
                raise ConfigError(f"{where}: expected 'dotted.wrapper.name = operator', got {entry!r}")
            pairs.append((name.strip(), operator.strip()))
    wrappers = {}
    for name, operator in pairs:
        if not _DOTTED.match(name):
            raise ConfigError(f"{where}: '{name}' is not a dotted Python name (mypkg.ops.fa)")
        if not isinstance(operator, str) or operator not in OPERATORS:
            close = difflib.get_close_matches(str(operator), OPERATORS, n=1)
            hint = f"; did you mean '{close[0]}'?" if close else f" (known: {', '.join(sorted(OPERATORS))})"
            raise ConfigError(f"{where}: '{operator}' (for '{name}') is not an operator kvlint knows{hint}")
        wrappers[name] = operator
    return wrappers


def parse_time_limit(value: object, where: str) -> float | None:
    """A per-file time limit in seconds: ``10s``, ``500ms``, ``2min``, a bare number of seconds (``10``, also
    a TOML number); ``0`` or ``none``: no limit (None)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        seconds = float(value)
    else:
        match = _DURATION.fullmatch(value) if isinstance(value, str) else None
        if isinstance(value, str) and value.strip().lower() in _NO_LIMIT:
            return None
        if match is None:
            raise ConfigError(f"{where}: invalid time limit {value!r}: expected a duration such as 10s, 500ms or "
                              "2min, or 0 / none for no limit")
        seconds = float(match.group(1)) * _SECONDS_PER[match.group(2)]
    if not 0 <= seconds < float("inf"):
        raise ConfigError(f"{where}: invalid time limit {value!r}: expected a duration of 0 s or more")
    return seconds or None


def parse_memory_limit(value: object, where: str) -> int | None:
    """A per-file memory limit in bytes: ``1GiB``, ``512MiB``, ``2GB`` (binary and decimal units, as
    ``kvlint-budget`` reads sizes; a bare number is bytes, also a TOML integer); ``0`` or ``none``: no limit
    (None)."""
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value or None
    if isinstance(value, str) and value.strip().lower() in _NO_LIMIT:
        return None
    if not isinstance(value, str):
        raise ConfigError(f"{where}: invalid memory limit {value!r}: expected a size such as 1GiB or 512MiB, "
                          "or 0 / none for no limit")
    try:
        return parse_size(value) or None
    except BudgetError as error:
        raise ConfigError(f"{where}: {error} (or 0 / none for no limit)") from None


def ignored_for(path: str, per_file_ignores: Sequence[tuple[str, Sequence[str]]], root: str) -> tuple[str, ...]:
    """flake8's matching: a pattern matches the file's base name or its path relative to ``root``."""
    if not per_file_ignores:
        return ()
    absolute = os.path.abspath(path)
    relative = os.path.relpath(absolute, os.path.abspath(root)).replace(os.sep, "/")
    base = os.path.basename(absolute)
    codes: list[str] = []
    for pattern, pattern_codes in per_file_ignores:
        normalized = pattern.replace(os.sep, "/").removeprefix("./").rstrip("/")
        if (fnmatch.fnmatch(base, normalized) or fnmatch.fnmatch(relative, normalized)
                or fnmatch.fnmatch(relative, normalized + "/*")):
            codes.extend(pattern_codes)
    return tuple(codes)


# --- the CLI's configuration files ------------------------------------------------------------------------

def _build(table: Mapping[str, object], source: Path, section: str) -> Config:
    values: dict[str, object] = {}
    limits: dict[str, float | int | None] = {}
    for key, value in table.items():
        where = f"{source}: [{section}] {key}"
        if key not in KEYS:
            close = difflib.get_close_matches(key.replace("_", "-"), KEYS, n=1)
            hint = f"; did you mean '{close[0]}'?" if close else f" (known keys: {', '.join(KEYS)})"
            raise ConfigError(f"{source}: unknown key '{key}' in [{section}]{hint}")
        if key in ("select", "ignore"):
            values[key] = parse_codes(value, where)
        elif key == "per-file-ignores":
            values["per_file_ignores"] = parse_per_file_ignores(value, where)
        elif key in ("exclude", "extend-exclude"):
            values[key.replace("-", "_")] = parse_patterns(value, where)
        elif key == "kv-len-names":
            values["kv_len_names"] = parse_names(value, where)
        elif key == "extra-fa-wrappers":
            values["extra_fa_wrappers"] = parse_wrappers(value, where)
        elif key == "file-time-limit":
            limits["seconds"] = parse_time_limit(value, where)
        else:
            limits["memory"] = parse_memory_limit(value, where)
    return Config(**values, limits=FileLimits(**limits), source=str(source), root=str(source.parent))


def _read_toml(path: Path) -> dict:
    try:
        with open(path, "rb") as handle:
            return tomllib.load(handle)
    except tomllib.TOMLDecodeError as error:
        raise ConfigError(f"{path}: not valid TOML: {error}") from None
    except OSError as error:
        raise ConfigError(f"{path}: cannot read: {error.strerror or error}") from None


def _read_cfg(path: Path) -> configparser.ConfigParser:
    parser = configparser.ConfigParser(interpolation=None)
    try:
        with open(path, encoding="utf-8") as handle:
            parser.read_file(handle)
    except configparser.Error as error:
        raise ConfigError(f"{path}: not a valid .cfg/.ini file: {error.message}") from None
    except (OSError, UnicodeDecodeError) as error:
        raise ConfigError(f"{path}: cannot read: {getattr(error, 'strerror', None) or error}") from None
    return parser


def _from_pyproject(path: Path) -> Config | None:
    tool = _read_toml(path).get("tool", {})
    table = tool.get("kvlint") if isinstance(tool, dict) else None
    if table is None:
        return None
    if not isinstance(table, dict):
        raise ConfigError(f"{path}: [tool.kvlint] must be a table")
    return _build(table, path, "tool.kvlint")


def _from_cfg(path: Path) -> Config | None:
    parser = _read_cfg(path)
    if not parser.has_section("kvlint"):
        return None
    return _build(dict(parser.items("kvlint")), path, "kvlint")


def load_config(path: str) -> Config:
    """The configuration in ``path`` (``--config``): a pyproject.toml-style TOML file or a .cfg/.ini file."""
    file = Path(path)
    if not file.is_file():
        raise ConfigError(f"{path}: no such configuration file")
    if file.suffix == ".toml":
        config = _from_pyproject(file)
        section = "[tool.kvlint]"
    else:
        config = _from_cfg(file)
        section = "[kvlint]"
    if config is None:
        raise ConfigError(f"{path}: no {section} section")
    return config


def find_config(start: str = ".") -> Config:
    """The configuration of the nearest folder, from ``start`` upwards, that has one; defaults otherwise."""
    folder = Path(start).resolve()
    for candidate in (folder, *folder.parents):
        pyproject = candidate / "pyproject.toml"
        if pyproject.is_file():
            config = _from_pyproject(pyproject)
            if config is not None:
                return config
        setup_cfg = candidate / "setup.cfg"
        if setup_cfg.is_file():
            config = _from_cfg(setup_cfg)
            if config is not None:
                return config
    return Config()
