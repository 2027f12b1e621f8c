"""The runtime probe: validate every live call of the torch_npu attention and KV-cache operators.

``KVLINT_PROBE=1 python run.py`` activates it at start-up (``kvlint._startup``); ``python -m
kvlint.runtime_probe run.py`` is the fallback. Each wrapped call:

1. is attributed to the user's call site and counted;
2. has its arguments bound to the catalogue's schema and checked (``checks.ARGUMENT_CHECKS``), and, for
   a cache write, its positions tracked across layers (``drift``);
3. runs, with exactly the arguments given; its result is returned untouched;
4. has its output checked for NaN/Inf and, for the first N calls of the site, compared with the reference;
5. if it is an attention call, has the KV bytes it read, the cache capacity in use and its host time added
   to the current step's figures (``cache_usage``), the ``cache`` section of the report.

Guarantees: nothing raises into user code except ``ProbeError`` in strict mode (a probe failure becomes
KVL599); calls made while a probed call is running on the same thread (the reference, a stand-in that
calls another operator) pass straight through; counters are shared under a lock. Activation imports no
torch: the torch-using modules load on the first probed call.
"""

from __future__ import annotations

import atexit
import os
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, TextIO

from kvlint.runtime_probe import ProbeError
from kvlint.runtime_probe.callsite import call_site
from kvlint.runtime_probe.config import Settings, from_env
from kvlint.runtime_probe.hooks import Patches, PostImportFinder, after_call
from kvlint.runtime_probe.report import Recorder, summary, write_json

from kvlint.catalogue.operators import lookup
from kvlint.catalogue.rules import ERROR, RULES

if TYPE_CHECKING:
    from kvlint.runtime_probe.live_call import LiveCall

INTERNAL_ERROR = "KVL599"
EMULATOR_MODULE = "kvlint.runtime_probe.emulator"


@dataclass
class _Ticket:
    """One probed call on its way through the probe."""

    op: str
    path: str
    line: int
    number: int
    compare: bool
    call: LiveCall | None = None
    seconds: float = 0.0
    """Host time of the operator call itself (the cache figures' step time)."""
    flagged: bool = False
    """An error-level finding was reported: the call is malformed, so its output is not compared."""
    errors: list[ProbeError] = field(default_factory=list)


def _compiling() -> bool:
    torch = sys.modules.get("torch")
    return torch is not None and torch.compiler.is_compiling()


class Probe:
    def __init__(self, settings: Settings, stream: TextIO | None = None) -> None:
        self.settings = settings
        self.recorder = Recorder(stream)
        self._root = os.getcwd()
        self._local = threading.local()
        self._patches = Patches(self)
        self._finder = PostImportFinder({"torch_npu": self._on_torch_npu, EMULATOR_MODULE: self._on_emulator})
        self._drift: Any = None
        self._cache: Any = None
        self._lock = threading.Lock()
        self._attached = False
        """False after detach: wrappers left behind (in an FX graph, say) then pass calls through."""

    # -- activation ---------------------------------------------------------------------------------
    def attach(self) -> None:
        """Wrap what is loaded now, and hook what loads later."""
        self._attached = True
        self._patches.wrap_loaded()
        emulator = sys.modules.get(EMULATOR_MODULE)
        if emulator is not None:
            self._on_emulator(emulator)
        sys.meta_path.insert(0, self._finder)

    def detach(self) -> None:
        self._attached = False
        if self._finder in sys.meta_path:
            sys.meta_path.remove(self._finder)
        self._patches.restore()

    def _on_torch_npu(self, module: ModuleType) -> None:
        try:
            self._patches.wrap(module)
            self._patches.wrap_loaded()
        except Exception as exc:  # an import hook must never break the user's import
            print(f"kvlint: probe could not wrap torch_npu: {exc!r}", file=sys.stderr)

    def _on_emulator(self, module: ModuleType) -> None:
        install = getattr(module, "install", None)
        if callable(install) and not getattr(install, "__kvlint_hooked__", False):
            self._patches.replace(module, "install", after_call(install, self._patches.wrap_loaded))

    def finish(self) -> None:
        """At exit: the summary on stderr and the JSON report, when any operator call was seen."""
        try:
            report: dict[str, Any] = self.recorder.as_json()
            if not report["sites"]:
                return
            report["cache"] = self._cache_usage().section().as_json()
            print(summary(report), file=sys.stderr)
            if self.settings.report_path is not None:  # relative to where the program started
                write_json(report, Path(self._root, self.settings.report_path))
        except Exception as exc:
            print(f"kvlint: probe could not write its report: {exc!r}", file=sys.stderr)

    # -- one call -----------------------------------------------------------------------------------
    def run(self, target: Callable[..., Any], name: str, overload: str,
            args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        if _compiling() or not self._attached or getattr(self._local, "busy", False):
            return target(*args, **kwargs)
        self._local.busy = True
        try:
            ticket = self._before(name, overload, args, kwargs)
            self._raise_if_strict(ticket)
            started = time.perf_counter()
            result = target(*args, **kwargs)
            ticket.seconds = time.perf_counter() - started
            self._after(ticket, result)
            self._raise_if_strict(ticket)
            return result
        finally:
            self._local.busy = False

    def _before(self, name: str, overload: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> _Ticket:
        try:
            path, line = call_site(self._root)
        except Exception:  # an exotic frame: the call is still probed, under an unknown site
            path, line = "<unknown>", 0
        number = self.recorder.start_call(name, path, line)
        sample = self.settings.sample
        ticket = _Ticket(name, path, line, number, self.settings.compare and (sample is None or number <= sample))
        try:
            from kvlint.runtime_probe import checks, drift, live_call  # torch is loaded by now

            operator = lookup(name, overload)
            bound = None if operator is None else live_call.bind(operator, args, kwargs)
            if operator is None or bound is None:
                return ticket
            ticket.call = live_call.LiveCall(operator, bound, live_call.is_concrete(list(bound.values())))
            for code, check in checks.ARGUMENT_CHECKS.items():
                self._run_check(ticket, code, check)
            if name in drift.WRITES:
                tracker = self._drift_tracker()
                self._run_check(ticket, "KVL505", lambda c: tracker.observe(c, (path, line), number))
            self.recorder.validated(name, path, line)
        except Exception as exc:
            self._internal(ticket, "binding the call", exc)
        return ticket

    def _drift_tracker(self) -> Any:
        from kvlint.runtime_probe.drift import DriftTracker

        with self._lock:
            if self._drift is None:
                self._drift = DriftTracker()
            return self._drift

    def _cache_usage(self) -> Any:
        from kvlint.runtime_probe.cache_usage import CacheUsage

        with self._lock:
            if self._cache is None:
                self._cache = CacheUsage()
            return self._cache

    def _after(self, ticket: _Ticket, result: Any) -> None:
        call = ticket.call
        if call is None or not call.concrete:
            return
        if call.is_attention:
            try:
                self._cache_usage().record(call, ticket.seconds)
            except Exception as exc:
                self._internal(ticket, "measuring the cache reads", exc)
        try:
            from kvlint.runtime_probe import compare

            if self._drift is not None:
                self._drift.follow(call, result)
            if not call.is_attention:
                return
            output = compare.attention_output(result)
            message = None if output is None else compare.nonfinite(output)
            if message:
                self._report(ticket, "KVL502", message)
            if ticket.compare and not ticket.flagged and compare.comparable(call, output):
                self._compare(ticket, call, output)
        except Exception as exc:
            self._internal(ticket, "checking the output", exc)

    def _compare(self, ticket: _Ticket, call: LiveCall, output: Any) -> None:
        from kvlint.runtime_probe import compare

        try:
            expected = compare.reference_output(call)
        except NotImplementedError:  # an option the reference does not cover: not compared
            return
        result = compare.compare(call, output, expected)
        self.recorder.compared(ticket.op, ticket.path, ticket.line, result.max_abs_err, result.max_rel_err)
        if result.mismatch:
            self._report(ticket, "KVL501", result.message(output.dtype))

    # -- findings -----------------------------------------------------------------------------------
    def _run_check(self, ticket: _Ticket, code: str, check: Callable[[LiveCall], str | None]) -> None:
        assert ticket.call is not None
        try:
            message = check(ticket.call)
        except Exception as exc:
            self._internal(ticket, f"check {code}", exc)
            return
        if message:
            self._report(ticket, code, message)

    def _report(self, ticket: _Ticket, code: str, message: str) -> None:
        self.recorder.add(code, message, ticket.op, ticket.path, ticket.line)
        if RULES[code].severity != ERROR:
            return
        ticket.flagged = True
        if self.settings.strict:
            ticket.errors.append(ProbeError(code, ticket.path, ticket.line, f"{RULES[code].symbol}: {message}"))

    def _internal(self, ticket: _Ticket, stage: str, exc: Exception) -> None:
        """KVL599, except on fake/meta calls, where failing to read values is expected and kept quiet."""
        if ticket.call is not None and not ticket.call.concrete:
            return
        self._report(ticket, INTERNAL_ERROR, f"{stage} failed: {type(exc).__name__}: {exc}")

    @staticmethod
    def _raise_if_strict(ticket: _Ticket) -> None:
        if ticket.errors:
            error = ticket.errors[0]
            ticket.errors.clear()
            raise error


_ACTIVE: Probe | None = None
_LOCK = threading.Lock()


def active() -> Probe | None:
    return _ACTIVE


def activate(settings: Settings, stream: TextIO | None = None) -> Probe:
    """Start probing in this process (idempotent: a second call returns the running probe)."""
    global _ACTIVE
    with _LOCK:
        if _ACTIVE is None:
            probe = Probe(settings, stream)
            probe.attach()
            _ACTIVE = probe
        return _ACTIVE


def deactivate() -> Probe | None:
    """Stop probing and restore every wrapped attribute; returns the probe with what it recorded."""
    global _ACTIVE
    with _LOCK:
        probe, _ACTIVE = _ACTIVE, None
    if probe is not None:
        probe.detach()
    return probe


def activate_from_env() -> Probe | None:
    """Start-up entry: activate per ``KVLINT_PROBE*`` and report at exit."""
    settings = from_env()
    if settings is None:
        return None
    probe = activate(settings)
    atexit.register(probe.finish)
    return probe
