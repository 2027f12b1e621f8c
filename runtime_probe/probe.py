"""The runtime probe: validate the live calls of the torch_npu attention and KV-cache operators.

``KVLINT_PROBE=1 python run.py`` activates it at start-up (``kvlint._startup``); ``python -m
kvlint.runtime_probe run.py`` is the fallback. Each wrapped call:

1. is attributed to the user's call site (``callsite``) and counted, and placed in its thread's step
   and layer (``steps``);
2. on the call site's first call with its argument signature (``signature``), is bound to the
   catalogue's schema and gets every check; later calls with that signature get their signature-check
   findings counted again and nothing more, unless they are value-checked (``config.Settings``);
3. when value-checked, gets the checks that read values (``checks.VALUE_CHECKS``), and the checks across
   calls: cache-write drift (``drift``), written vs read rows (``coverage``), decoder evidence for
   KVL507 (``decoder``);
4. runs, with exactly the arguments given; its result (or its exception, which is recorded) is returned
   untouched;
5. when value-checked, has its output checked for NaN/Inf, the first N calls of the site compared with the
   reference, and its cache figures added to its step (``cache_usage``).

Guarantees: nothing raises into user code except ``ProbeError`` in strict mode (a probe failure becomes
KVL599); the probe's own torch work is invisible to the program's dispatch modes and profiler
(``isolation``); calls made while a probed call is running on the same thread (the reference, a stand-in
that calls another operator) pass straight through; counters are shared under a lock; the probe's own
time per call is measured and reported. Activation imports no torch: the torch-using modules load on the
first probed call.

Every process writes its own report (``config``): a forked child starts with empty counters and writes
at its exit, multiprocessing's included. The report is kept current on disk while the program runs, and
written at the signals that end it (``keeper``).

KVL508 waits for the reads (``repeats``): a repeated slot is an error once an attention call reads it,
info at the end otherwise. With ``KVLINT_PROBE_DUMP``, each site's first error-level finding writes a
reproduction (``dump``); the arguments are kept for it only then.
"""

from __future__ import annotations

import atexit
import itertools
import os
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, TextIO

from kvlint.runtime_probe import ProbeError, config, graph_tasks
from kvlint.runtime_probe.callsite import call_site
from kvlint.runtime_probe.config import Settings, from_env
from kvlint.runtime_probe.hooks import Patches, PostImportFinder, after_call
from kvlint.runtime_probe.keeper import WAIT_FOR_WRITER, Keeper, enrol, start_roster
from kvlint.runtime_probe.report import Recorder, Site, check_writable, summary

from kvlint.catalogue.cache_writes import CACHE_WRITES, CacheWrite
from kvlint.catalogue.operators import INFERENCE_ATTENTION, Operator, lookup
from kvlint.catalogue.rules import ERROR, INFO, RULES

if TYPE_CHECKING:
    from kvlint.runtime_probe.live_call import LiveCall
    from kvlint.runtime_probe.repeats import Repeat
    from kvlint.runtime_probe.steps import Step

INTERNAL_ERROR = "KVL599"
JUDGED_BY_READS = frozenset({"KVL508"})
"""Value checks whose finding is an error only once a read shows that it matters (``repeats``)."""
ACROSS_CALLS = frozenset({"KVL505", "KVL508", "KVL509", "KVL510"})
"""Findings an attention call makes about the cache writes before it: their reproduction replays those."""
EMULATOR_MODULE = "kvlint.runtime_probe.emulator"
MAX_SIGNATURES = 4096
"""Signatures remembered (the oldest are forgotten): shapes that change at every call (a cache sliced to
its length) make a new signature each time, and such calls are all checked anyway."""


Where = int | str
"""Where a raw call holds an argument: its positional index, or its keyword name."""


@dataclass(frozen=True)
class _Signature:
    """What a call site's first call with an argument signature established."""

    bound: bool
    """False when the call does not fit the schema (the operator raises; static KVL101/KVL103)."""
    findings: tuple[tuple[str, Any], ...] = ()
    """(code, message) of the signature checks that fired: counted again on every call with it."""
    places: tuple[Where | None, ...] = ()
    """Where this signature holds the arguments that place a call in its step (``_placed``)."""


def _where(operator: Operator, args: tuple[Any, ...], kwargs: dict[str, Any], name: str) -> Where | None:
    """Where a call with this signature passes parameter ``name`` (None when it leaves the default)."""
    for index, param in enumerate(operator.positional):
        if param.name == name and index < len(args):
            return index
    return name if name in kwargs else None


def _placed(operator: Operator) -> tuple[str, ...]:
    """The parameters that place a call of ``operator`` in its step: a write's cache and source, an attention
    call's key and block table."""
    write = CACHE_WRITES.get(operator.name)
    if write is not None:
        return (write.cache, write.source)
    return ("key", "block_table") if operator.name in INFERENCE_ATTENTION else ()


def _get(args: tuple[Any, ...], kwargs: dict[str, Any], where: Where | None) -> Any:
    if where is None:
        return None
    return args[where] if isinstance(where, int) else kwargs[where]


class _Ticket:
    """One probed call on its way through the probe. Every attribute after ``compare`` starts as the class's
    default (all immutable) and is set on the calls that need it: a ticket is made on every call."""

    op: str
    path: str
    line: int
    number: int
    checked: bool
    """Value-checked: every check runs (a new signature, or a sampled call)."""
    compare: bool
    site: Site | None = None
    """The recorder's counters of the call's site (None for a call a graph replay judges)."""
    call: LiveCall | None = None
    validated: bool = False
    step: Step | None = None
    write: CacheWrite | None = None
    cache: Any = None
    """The cache tensor a write targets (followed through out-of-place writes)."""
    seconds: float = 0.0
    """Host time of the operator call itself (the cache figures' step time)."""
    flagged: bool = False
    """An error-level finding was reported: the call is malformed, so its output is not compared."""
    update: bool = False
    """Issued during an NPU graph task update: it rewrites a captured task's arguments, reads and writes
    nothing (``graph_tasks``)."""
    errors: list[ProbeError] | None = None
    """The errors strict mode raises from this call (None: none so far)."""
    overload: str = "default"
    raw: tuple[tuple[Any, ...], dict[str, Any]] | None = None
    """The call's own arguments, kept only when findings are dumped (``KVLINT_PROBE_DUMP``)."""
    companions: list[Any] | None = None
    """``dump.Call`` of the earlier calls a finding across calls at this call needs to be reproduced."""

    def __init__(self, op: str, path: str, line: int, number: int, checked: bool, compare: bool,
                 site: Site | None = None, update: bool = False) -> None:  # fmt: skip
        self.op, self.path, self.line, self.number, self.checked, self.compare = op, path, line, number, checked, compare
        self.site, self.update = site, update


class _Modules:
    """The torch-using modules, imported at the first probed call (activation imports no torch)."""

    def __init__(self) -> None:
        from kvlint.runtime_probe import (
            cache_rows, checks, compare, coverage, drift, isolation, live_call, repeats, signature, steps,
        )
        from kvlint.runtime_probe.cache_usage import CacheUsage
        from kvlint.runtime_probe.decoder import DecoderEvidence

        import torch

        self.cache_rows, self.checks, self.compare, self.coverage = cache_rows, checks, compare, coverage
        self.drift, self.live_call, self.signature = drift, live_call, signature
        self.Invisible, self.unseen = isolation.Invisible, isolation.unseen
        self.compiling = torch.compiler.is_compiling
        self.clock = steps.Clock()
        self.cache_usage = CacheUsage()
        self.decoder = DecoderEvidence()
        self.repeats = repeats.RepeatedSlots()


class Probe:
    def __init__(self, settings: Settings, stream: TextIO | None = None) -> None:
        self.settings = settings
        self.recorder = Recorder(stream)
        self._stream = stream
        self._root = os.getcwd()
        self._local = threading.local()
        self._patches = Patches(self)
        self._finder = PostImportFinder({"torch_npu": self._on_torch_npu, EMULATOR_MODULE: self._on_emulator})
        self._modules: _Modules | None = None
        self._signatures: dict[object, _Signature] = {}
        self._graphs = graph_tasks.Graphs()
        self._lock = threading.Lock()
        self._attached = False
        """False after detach: wrappers left behind (in an FX graph, say) then pass calls through."""
        self.forked = False
        """This process is a fork of the one that activated the probe."""
        self._finished: int | None = None
        """The pid that wrote the report (an inherited atexit handler must not write it twice)."""
        self.keeper = Keeper(self._kept_report, self.report_file, self._wanted, self._busy, settings.report_every)
        self._keeping = settings.report_path is not None
        """The report is rewritten while the program runs."""
        self._dumped: set[tuple[str, int]] = set()
        """Sites whose reproduction is written (``KVLINT_PROBE_DUMP``)."""
        self._recent_writes: dict[tuple[int, tuple[str, int]], tuple[int, Any]] = {}
        """(layer, write site) -> (order, ``dump.Call``) of the last followed write there, when dumping."""
        self._order = itertools.count()

    # -- activation ---------------------------------------------------------------------------------
    def attach(self) -> None:
        """Wrap what is loaded now, and hook what loads later."""
        self._attached = True
        self._wrap_loaded()
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
            self._wrap_loaded()
        except Exception as exc:  # an import hook must never break the user's import
            print(f"kvlint: probe could not wrap torch_npu: {exc!r}", file=sys.stderr)

    def _on_emulator(self, module: ModuleType) -> None:
        install = getattr(module, "install", None)
        if callable(install) and not getattr(install, "__kvlint_hooked__", False):
            self._patches.replace(module, "install", after_call(install, self._wrap_loaded))

    def _wrap_loaded(self) -> None:
        """Wrap the operators loaded now, and the NPU graph API of ``torch_npu.npu`` (``graph_tasks``)."""
        self._patches.wrap_loaded()
        torch_npu = sys.modules.get("torch_npu")
        for module in {id(m): m for m in (sys.modules.get("torch_npu.npu"), getattr(torch_npu, "npu", None))
                       if m is not None}.values():  # fmt: skip
            graph_tasks.wrap(self._patches, module, self)

    def after_fork_in_child(self) -> None:
        """A forked child reports its own calls: fresh counters and state, its own report file."""
        self.forked = True
        self.recorder = Recorder(self._stream)
        self._modules = None
        self._signatures = {}
        self._graphs = graph_tasks.Graphs()
        self._lock = threading.Lock()
        self._local = threading.local()
        self._finished = None
        self.keeper.after_fork_in_child()
        self._dumped, self._recent_writes = set(), {}
        multiprocessing_util = sys.modules.get("multiprocessing.util")
        if multiprocessing_util is not None:  # a multiprocessing child leaves through os._exit, not atexit
            multiprocessing_util.register_after_fork(self, Probe._finish_with_multiprocessing)

    def _finish_with_multiprocessing(self) -> None:
        """Run by multiprocessing in its child once it has cleared the parent's finalizers."""
        sys.modules["multiprocessing.util"].Finalize(self, self.finish, exitpriority=10)

    # -- the report ---------------------------------------------------------------------------------
    def report(self, complete: bool = False, settle: bool = True) -> dict[str, Any]:
        """The JSON report of what this process saw so far (``complete``: taken at its normal exit). ``settle``:
        the repeated slots no attention call has read become KVL508 info; the keeper's running reports leave
        them pending instead, since a later read makes them errors."""
        modules = self._modules
        if modules is not None and settle:
            self._settle_repeats(modules)
        report: dict[str, Any] = self.recorder.as_json()
        if modules is not None:
            report["cache"] = modules.cache_usage.section(modules.clock.attention_steps).as_json()
        else:
            report["cache"] = {"timing_source": "device", "peak_bytes_per_s": None, "steps": [],
                               "unmeasured_steps": 0, "dropped_steps": 0}
        rank = config.rank()
        world = os.environ.get("WORLD_SIZE", "").strip()
        parent = os.environ.get(config.PARENT_VARIABLE, "")
        report["process"] = {
            "pid": os.getpid(), "parent_pid": int(parent) if parent.isdigit() and int(parent) != os.getpid() else None,
            "rank": int(rank) if rank.isdigit() else None, "world_size": int(world) if world.isdigit() else None,
            "operator_calls": sum(site["calls"] for site in report["sites"]),  # type: ignore[misc]
        }
        report["complete"] = complete
        report["interrupted"] = self.keeper.interrupted
        return report

    def _wanted(self, report: dict[str, Any]) -> bool:
        """A worker writes a report only when it made calls."""
        return bool(report["sites"]) or not self.worker()

    def _busy(self) -> bool:
        return getattr(self._local, "busy", False)
    def _kept_report(self, final: bool) -> dict[str, Any]:
        """The report the keeper writes: settled only at the final write."""
        return self.report(complete=final, settle=final)

    def _settle_repeats(self, modules: _Modules) -> None:
        """KVL508 at info level for the repeated slots no attention call has read (so far)."""
        for repeat in modules.repeats.settle():
            why = repeat.unjudged or "no attention call read the slot afterwards"
            message = (f"{repeat.message}; {why}, so nothing is known to have used the undefined row (an error "
                       "once an attention call reads it; a warm-up's dummy requests in a reserved block do this)")
            self.recorder.add("KVL508", message, repeat.op, *repeat.site, severity=INFO)

    def worker(self) -> bool:
        """A process started by another probed process (and not a rank of its own): a pid-suffixed report."""
        if self.forked:
            return True
        parent = os.environ.get(config.PARENT_VARIABLE, "")
        return not config.rank() and parent not in ("", str(os.getpid()))

    def report_file(self) -> Path | None:
        path = self.settings.report_path
        if path is None:
            return None
        path = Path(self._root, path)  # relative to where the program started
        return config.worker_path(path, os.getpid()) if self.worker() else path

    def roster_file(self) -> Path:
        """The roster of this process's report set (``config.roster_path``)."""
        assert self.settings.report_path is not None
        return config.roster_path(Path(self._root, self.settings.report_path))

    def finish(self) -> None:
        """At exit: the summary on stderr and the JSON report. The process that started the probe, and every
        rank, always write the report asked for (``no operator call`` when there was none); a worker only
        when it made calls. Without calls and without a report to write, nothing is printed (a tool run
        with ``KVLINT_PROBE`` exported stays quiet)."""
        if self._finished == os.getpid():
            return
        self._finished = os.getpid()
        try:
            report = self.keeper.write(final=True, wait=WAIT_FOR_WRITER)
            if report is None or not report["sites"] and (self.worker() or self.report_file() is None):
                return
            print(summary(report), file=sys.stderr)
        except Exception as exc:
            print(f"kvlint: probe could not write its report: {exc!r}", file=sys.stderr)

    # -- one call -----------------------------------------------------------------------------------
    def run(self, target: Callable[..., Any], name: str, overload: str,
            args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        local = self._local
        if not self._attached or getattr(local, "busy", False):
            return target(*args, **kwargs)
        modules = self._modules or self._load()
        if modules.compiling():
            return target(*args, **kwargs)
        local.busy = True
        started = time.perf_counter()
        ticket: _Ticket | None = None
        try:
            ticket = modules.unseen(self._before, modules, name, overload, args, kwargs)
            if ticket.errors:
                self._raise_if_strict(ticket)
            begun = time.perf_counter()
            try:
                result = target(*args, **kwargs)
            except Exception as error:
                ticket.seconds = time.perf_counter() - begun
                self.recorder.raised(name, ticket.path, ticket.line, error)
                raise
            ticket.seconds = time.perf_counter() - begun
            if not ticket.update and (ticket.write is not None or ticket.call is not None):
                modules.unseen(self._after, modules, ticket, result)
                if ticket.errors:
                    self._raise_if_strict(ticket)
            return result
        finally:
            if ticket is not None:
                seconds = time.perf_counter() - started - ticket.seconds
                self.recorder.finish_call(ticket.site, ticket.validated, seconds)
                if self._keeping:
                    self.keeper.after_call(None if ticket.step is None else ticket.step.number)
            local.busy = False

    def _load(self) -> _Modules:
        """At the process's first probed call: the torch-using modules, and the process on the roster."""
        with self._lock:
            if self._modules is None:
                self._modules = _Modules()
                path = self.report_file()
                if path is not None:
                    enrol(self.roster_file(), path)
            return self._modules

    def _before(self, modules: _Modules, name: str, overload: str, args: tuple[Any, ...],
                kwargs: dict[str, Any]) -> _Ticket:
        """The call's site, number and step; every check on a checked call, the seen signature's findings
        on any other."""
        try:
            path, line = call_site(self._root, depth=3)  # the walk starts at run(), which called unseen(_before)
        except Exception:  # an exotic frame: the call is still probed, under an unknown site
            path, line = "<unknown>", 0
        site, number = self.recorder.start_call(name, path, line)
        settings = self.settings
        compare = settings.compare and (settings.sample is None or number <= settings.sample)
        key: object = (name, overload, path, line, modules.signature.signature(args, kwargs))
        try:
            known = self._signatures.get(key)
        except TypeError:  # an unhashable argument: no signature, every call is checked
            key, known = None, None
        checked = known is None or compare or settings.value_checked(number)
        graphs = self._graphs
        ticket = _Ticket(name, path, line, number, checked, compare, site,
                         update=graphs.open > 0 and graphs.updating())
        if settings.dump_dir is not None:
            ticket.overload, ticket.raw = overload, (args, kwargs)
        try:
            if checked:
                self._check(modules, ticket, key, overload, args, kwargs)
            elif known is not None and known.bound:
                ticket.validated = True
                for code, message in known.findings:
                    self._report(ticket, code, message)
                captured = False
                if graphs.open:  # a capture or an update is in progress (on some thread)
                    if ticket.update:  # arguments not read: the group's replays are not judged until the next
                        graphs.updated(graph_tasks.Task(name, path, line, None))
                        return ticket
                    captured = graphs.capturing() is not None
                    if captured:
                        self._capture(modules, ticket, overload, args, kwargs)
                if known.places:
                    first, second = known.places
                    self._place(modules, ticket, _get(args, kwargs, first), _get(args, kwargs, second))
                if ticket.write is not None and not captured:  # a captured write is followed at its replays
                    self._unfollowed_write(modules, ticket.cache)
        except Exception as exc:
            self._internal(ticket, "checking the call", exc)
        return ticket

    def _capture(self, modules: _Modules, ticket: _Ticket, overload: str, args: tuple[Any, ...],
                 kwargs: dict[str, Any]) -> None:  # fmt: skip
        """A call captured in an NPU graph, not value-checked: bound (no value is read) and remembered, to be
        judged at each replay."""
        live_call = modules.live_call
        operator = lookup(ticket.op, overload)
        bound = None if operator is None else live_call.bind(operator, args, kwargs)
        if operator is not None and bound is not None:
            call = live_call.LiveCall(operator, bound, live_call.is_concrete(list(bound.values())))
            self._graphs.captured(graph_tasks.Task(ticket.op, ticket.path, ticket.line, call))

    def _remember(self, key: object, signature: _Signature) -> None:
        signatures = self._signatures
        if len(signatures) >= MAX_SIGNATURES:
            signatures.pop(next(iter(signatures)), None)
        signatures[key] = signature

    def _place(self, modules: _Modules, ticket: _Ticket, first: Any = None, second: Any = None) -> None:
        """Put the call in its thread's step and layer (every call: identities only, no device read).
        ``first, second``: a write's cache and source, an attention call's key and block table."""
        site = (ticket.path, ticket.line)
        write = CACHE_WRITES.get(ticket.op)
        if write is not None:
            if modules.signature.plain(first):
                ticket.write, ticket.cache = write, first
                ticket.step = modules.clock.write(ticket.op, site, first, second)
        elif ticket.op in INFERENCE_ATTENTION and modules.signature.plain(first):
            ticket.step, _ = modules.clock.attention(site, first, second is not None)

    def _check(self, modules: _Modules, ticket: _Ticket, key: object, overload: str,
               args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        """Every check: bind the call, run both tables and the checks across calls."""
        live_call = modules.live_call
        operator = lookup(ticket.op, overload)
        bound = None if operator is None else live_call.bind(operator, args, kwargs)
        if operator is None or bound is None:
            if key is not None:
                self._remember(key, _Signature(False))
            return
        call = ticket.call = live_call.LiveCall(operator, bound, live_call.is_concrete(list(bound.values())))
        ticket.validated = True
        found = []
        for code, check in modules.checks.SIGNATURE_CHECKS.items():
            message = self._run_check(ticket, code, check)
            if message:
                found.append((code, message))
        placed = _placed(operator)
        if key is not None:
            places = tuple(_where(operator, args, kwargs, param) for param in placed)
            self._remember(key, _Signature(True, tuple(found), places))
        if ticket.update:  # an argument update: validated; judged where it runs, at the replay
            for code, check in modules.checks.VALUE_CHECKS.items():
                if code not in JUDGED_BY_READS:
                    self._run_check(ticket, code, check)
            self._graphs.updated(graph_tasks.Task(ticket.op, ticket.path, ticket.line, call))
            return
        self._graphs.captured(graph_tasks.Task(ticket.op, ticket.path, ticket.line, call))
        self._place(modules, ticket, *(call.get(param) for param in placed))
        for code, check in modules.checks.VALUE_CHECKS.items():
            if code not in JUDGED_BY_READS:
                self._run_check(ticket, code, check)
        self._judge_across_calls(modules, ticket, call)

    def _judge_across_calls(self, modules: _Modules, ticket: _Ticket, call: LiveCall) -> None:
        """A placed call's checks across calls: a write's rows and repeated slots, an attention call's reads."""
        repeat = self._repeat(modules, ticket, call) if ticket.write is not None else None
        if not call.concrete or ticket.step is None:
            if ticket.write is not None and ticket.cache is not None:
                self._unfollowed_write(modules, ticket.cache)
            if repeat is not None:
                modules.repeats.not_followed(repeat, "the probe does not follow this cache")
            return
        site = (ticket.path, ticket.line)
        if ticket.write is not None:
            self._follow_write(modules, ticket, call, site, repeat)
        elif call.is_attention:
            self._judge_attention(modules, ticket, call)

    @staticmethod
    def _unfollowed_write(modules: _Modules, cache: Any) -> None:
        """A write into ``cache`` whose rows the probe does not read (KVL510's and KVL508's records of the
        cache stop proving anything)."""
        caches = modules.clock.caches
        caches.unfollowed_write(cache)
        if modules.repeats.pending:
            modules.repeats.unfollowed(caches.identity(cache))

    def _repeat(self, modules: _Modules, ticket: _Ticket, call: LiveCall) -> Repeat | None:
        """KVL508's condition on a write (slots repeated with different rows), held for the reads to judge."""
        from kvlint.runtime_probe.repeats import Repeat

        assert ticket.write is not None
        try:
            found = modules.checks.repeated_slot(call)
            if found is None:
                return None
            offsets = modules.cache_rows.entry_offsets(call, ticket.write)
            held = offsets[found.tokens].unique() if offsets is not None else found.tokens.new_empty(0)
            return Repeat(ticket.op, (ticket.path, ticket.line), found.message, held,
                          call=None if ticket.raw is None else self._call(ticket))
        except Exception as exc:
            self._internal(ticket, "check KVL508", exc)
            return None

    def _follow_write(self, modules: _Modules, ticket: _Ticket, call: LiveCall, site: tuple[str, int],
                      repeat: Repeat | None) -> None:
        """A value-checked write: its rows for KVL509/KVL510, its positions for KVL505, its repeated slots
        for KVL508."""
        from kvlint.runtime_probe.steps import Write

        assert ticket.write is not None and ticket.step is not None
        caches, repeats = modules.clock.caches, modules.repeats
        layer = caches.written(ticket.cache)
        try:
            rows = modules.cache_rows.written_rows(call, ticket.write)
            if rows is None:
                caches.unfollowed_layer(layer)
                repeats.unfollowed(layer)
                if repeat is not None:
                    repeats.not_followed(repeat, "the probe does not model where this write's rows land")
            else:
                ticket.step.writes.setdefault(layer, []).append(Write(ticket.op, site, rows))
                caches.followed(layer, rows.offsets)
                repeats.written(layer, rows.offsets, repeat)
                if ticket.raw is not None:
                    self._recent_writes[(layer, site)] = (next(self._order), self._call(ticket))
            modules.drift.observe(call, ticket.write, ticket.step, layer, caches.filled[layer], site, ticket.number)
        except Exception as exc:
            caches.unfollowed_layer(layer)
            repeats.unfollowed(layer)
            self._internal(ticket, "following the cache write", exc)

    def _judge_attention(self, modules: _Modules, ticket: _Ticket, call: LiveCall) -> None:
        """KVL507 on the decoder evidence; KVL509, KVL510 and KVL505 on the rows the step wrote."""
        assert ticket.step is not None
        caches = modules.clock.caches
        try:
            for (op, path, line), message, count in modules.decoder.judge(
                    call, (ticket.op, ticket.path, ticket.line), ticket.step, caches):
                self._report_at(ticket, "KVL507", message, op, path, line, count)
            identities = {name: caches.identity(call.get(name)) for name in ("key", "value")
                          if modules.signature.plain(call.get(name))}
            if ticket.raw is not None:
                ticket.companions = self._feeding_writes(ticket.step, identities)
            for finding in modules.coverage.check(call, ticket.step, identities, caches):
                op = finding.op or ticket.op
                path, line = finding.site or (ticket.path, ticket.line)
                self._report_at(ticket, finding.code, finding.message, op, path, line)
            if modules.repeats.pending:
                self._judge_repeats(modules, ticket, call, identities)
        except Exception as exc:
            self._internal(ticket, "comparing the cache writes with the reads", exc)

    def _judge_repeats(self, modules: _Modules, ticket: _Ticket, call: LiveCall,
                       identities: dict[str, int | None]) -> None:
        """KVL508 at the write whose repeated slot this attention call reads."""
        for name, layer in identities.items():
            if layer is None or layer not in modules.repeats.pending:
                continue
            rows = modules.cache_rows.read_rows(call, call.get(name))
            if rows is None:
                continue
            read = rows.read
            for hit in modules.repeats.read(layer, rows.offsets[read], rows.requests[read], rows.positions[read]):
                repeat = hit.repeat
                if repeat.call is not None:
                    ticket.companions = [repeat.call]
                message = (f"{repeat.message}; {ticket.op} at {ticket.path}:{ticket.line} reads that slot (batch "
                           f"{hit.request}, position {hit.position} of its {name} cache), so the attention uses "
                           "the undefined row: give each token its own slot")
                self._report_at(ticket, "KVL508", message, repeat.op, *repeat.site)

    def _after(self, modules: _Modules, ticket: _Ticket, result: Any) -> None:
        if ticket.update:  # nothing was computed: the replay computes it
            return
        write = ticket.write
        if write is not None and write.result is not None:  # every call: the returned tensor is the cache now
            returned = result[write.result] if isinstance(result, (tuple, list)) else result
            if modules.signature.plain(returned):
                modules.clock.caches.follow(ticket.cache, returned)
        call = ticket.call
        if call is not None and call.concrete and ticket.checked and modules.compare.compared(call):
            self._check_output(modules, ticket, call, result)

    def _check_output(self, modules: _Modules, ticket: _Ticket, call: LiveCall, result: Any) -> None:
        compare = modules.compare
        try:
            if ticket.step is not None:
                modules.cache_usage.record(call, ticket.seconds, ticket.step)
        except Exception as exc:
            self._internal(ticket, "measuring the cache reads", exc)
        try:
            output = compare.attention_output(result, call)
            message = None if output is None else compare.nonfinite(output)
            if message:
                self._report(ticket, "KVL502", message)
            if ticket.compare and not ticket.flagged and compare.comparable(call, output):
                self._compare(modules, ticket, call, output)
        except Exception as exc:
            self._internal(ticket, "checking the output", exc)

    def _compare(self, modules: _Modules, ticket: _Ticket, call: LiveCall, output: Any) -> None:
        compare = modules.compare
        try:
            expected = compare.reference_output(call)
        except NotImplementedError:  # an option the reference does not cover: not compared
            return
        result = compare.compare(call, output, expected)
        self.recorder.compared(ticket.op, ticket.path, ticket.line, result.max_abs_err, result.max_rel_err)
        if result.mismatch:
            self._report(ticket, "KVL501", result.message(output.dtype))

    # -- NPU graphs ---------------------------------------------------------------------------------
    def graph_event(self, original: Callable[..., Any], name: str, args: tuple[Any, ...],
                    kwargs: dict[str, Any]) -> Any:  # fmt: skip
        """A call of the NPU graph API (``graph_tasks.wrap``): run it, and keep the probe's record. The calls
        a replay makes (the emulator's kernels) pass through; the replay's tasks are judged after it."""
        local = self._local
        if not self._attached or getattr(local, "busy", False):
            return original(*args, **kwargs)
        if name == "replay":
            local.busy = True
            try:
                result = original(*args, **kwargs)
            finally:
                local.busy = False
            try:
                self._replayed(args[0])
            except ProbeError:
                raise
            except Exception as exc:
                self._graph_failure(name, exc)
            return result
        result = original(*args, **kwargs)
        try:
            self._graph_call(name, args, kwargs, result)
        except Exception as exc:
            self._graph_failure(name, exc)
        return result

    def _graph_call(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any], result: Any) -> None:
        graphs = self._graphs
        if name == "capture_begin":
            graphs.capture_begin(args[0])
        elif name == "capture_end":
            graphs.capture_end()
        elif name == "update":
            graphs.graph_updated(args[0])
        elif name == "graph_task_group_begin":
            graphs.group_begin()
        elif name == "graph_task_group_end":
            graphs.group_end(result)
        elif name == "graph_task_update_begin":
            graphs.update_begin(args[1] if len(args) > 1 else kwargs.get("handle"))
        elif name == "graph_task_update_end":
            for stale in graphs.update_end():
                self.recorder.add(graph_tasks.STALE, stale.message, stale.op, stale.path, stale.line, stale.count)

    def _graph_failure(self, name: str, exc: Exception) -> None:
        """KVL599 at the program's graph call: the probe's record of the graph failed, the program did not."""
        try:
            path, line = call_site(self._root)
        except Exception:
            path, line = "<unknown>", 0
        self.recorder.add(INTERNAL_ERROR, f"following the NPU graph ({name}) failed: {type(exc).__name__}: {exc}",
                          name, path, line)  # fmt: skip

    def _replayed(self, graph: object) -> None:
        """After a replay: KVL550 for the groups it ran stale; the graph's writes and attention calls judged
        in capture order with their latest arguments, on the buffers as the replay left them."""
        try:
            path, line = call_site(self._root)
        except Exception:
            path, line = "<unknown>", 0
        record, stale = self._graphs.replayed(graph, path, line)
        for finding in stale:
            self.recorder.add(graph_tasks.STALE, finding.message, finding.op, finding.path, finding.line)
        modules = self._modules
        if record is None or record.opaque or modules is None or not self.settings.value_checked(record.replays):
            return
        tickets = []
        with modules.Invisible():
            for task in graph_tasks.running(record):
                if task.call is None:
                    continue
                ticket = _Ticket(task.op, task.path, task.line, record.replays, True, False)
                try:
                    call = ticket.call = modules.live_call.LiveCall(task.call.op, task.call.args, task.call.concrete)
                    self._place(modules, ticket, *(call.get(param) for param in _placed(call.op)))
                    self._judge_across_calls(modules, ticket, call)
                except Exception as exc:
                    self._internal(ticket, "judging the NPU graph replay", exc)
                tickets.append(ticket)
        for ticket in tickets:
            self._raise_if_strict(ticket)

    # -- findings -----------------------------------------------------------------------------------
    def _run_check(self, ticket: _Ticket, code: str, check: Callable[[LiveCall], Any]) -> Any:
        assert ticket.call is not None
        try:
            message = check(ticket.call)
        except Exception as exc:
            self._internal(ticket, f"check {code}", exc)
            return None
        if message:
            self._report(ticket, code, message)
        return message

    def _report(self, ticket: _Ticket, code: str, message: Any) -> None:
        """A finding at the current call: ``message`` is a check's text, or a ``checks.Leveled`` one."""
        if isinstance(message, str):
            self._report_at(ticket, code, message, ticket.op, ticket.path, ticket.line)
        else:
            self._report_at(ticket, code, message.message, ticket.op, ticket.path, ticket.line,
                            severity=message.severity)

    def _report_at(self, ticket: _Ticket, code: str, message: str, op: str, path: str, line: int,
                   count: int = 1, severity: str | None = None) -> None:
        """A finding at a site (the current call's, or the earlier call it concerns), at the rule's level
        unless ``severity`` says; strict mode raises an error from the current call."""
        self.recorder.add(code, message, op, path, line, count, severity)
        if (severity or RULES[code].severity) != ERROR:
            return
        if ticket.raw is not None and (path, line) not in self._dumped:
            self._dump(ticket, code, message, op, path, line)
        ticket.flagged = True
        if self.settings.strict:
            error = ProbeError(code, path, line, f"{RULES[code].symbol}: {message}")
            if ticket.errors is None:
                ticket.errors = [error]
            else:
                ticket.errors.append(error)

    # -- reproductions ------------------------------------------------------------------------------
    @staticmethod
    def _call(ticket: _Ticket) -> Any:
        from kvlint.runtime_probe.dump import Call

        assert ticket.raw is not None
        return Call(ticket.op, ticket.overload, ticket.path, ticket.line, *ticket.raw)

    def _feeding_writes(self, step: Step | None, identities: dict[str, int | None]) -> list[Any]:
        """The followed writes of this step into the caches an attention call reads, in their order."""
        if step is None:
            return []
        found = [self._recent_writes.get((layer, write.site)) for layer in set(identities.values())
                 if layer is not None for write in step.writes.get(layer, [])]
        return [call for _, call in sorted({id(f[1]): f for f in found if f is not None}.values(),
                                           key=lambda f: f[0])]

    def _dumps_here(self) -> bool:
        """Dump in this process: the one that started the probe or a rank, or a worker whose folder was set
        for it (not the one inherited from its probed parent); never a forked child."""
        if not self.worker():
            return True
        return not self.forked and os.environ.get(config.DUMP_PARENT_VARIABLE) != str(self.settings.dump_dir)

    def _dump(self, ticket: _Ticket, code: str, message: str, op: str, path: str, line: int) -> None:
        """The site's first error-level finding: its reproduction under ``KVLINT_PROBE_DUMP`` (``dump``)."""
        from kvlint.runtime_probe import dump

        self._dumped.add((path, line))
        if not self._dumps_here():
            return
        rule = RULES[code]
        process = dump.process()
        finding = {"code": code, "symbol": rule.symbol, "severity": ERROR, "message": message, "op": op,
                   "path": path, "line": line, "process": process}
        calls = [*((ticket.companions or []) if code in ACROSS_CALLS else []), self._call(ticket)]
        rank = "" if process["rank"] is None else str(process["rank"])
        assert self.settings.dump_dir is not None
        folder = Path(self._root, self.settings.dump_dir, dump.folder_name(path, line, code, rank, os.getpid()))
        try:
            dump.write(folder, finding, calls, self.settings.dump_max)
        except Exception as exc:  # a failed dump never breaks the program
            print(f"kvlint: probe could not dump {path}:{line} {code} to {folder}: {exc!r}", file=sys.stderr)

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
_FORK_HOOKED = False
_EXPORTED = False
"""This process set ``KVLINT_PROBE_PARENT`` (and removes it again at deactivation)."""


def active() -> Probe | None:
    return _ACTIVE


def _after_fork_in_child() -> None:
    probe = _ACTIVE
    if probe is not None:
        probe.after_fork_in_child()


def activate(settings: Settings, stream: TextIO | None = None) -> Probe:
    """Start probing in this process (idempotent: a second call returns the running probe)."""
    global _ACTIVE, _FORK_HOOKED
    with _LOCK:
        if _ACTIVE is None:
            probe = Probe(settings, stream)
            probe.attach()
            _ACTIVE = probe
        if not _FORK_HOOKED and hasattr(os, "register_at_fork"):
            os.register_at_fork(after_in_child=_after_fork_in_child)
            _FORK_HOOKED = True
        return _ACTIVE


def deactivate() -> Probe | None:
    """Stop probing and restore every wrapped attribute; returns the probe with what it recorded."""
    global _ACTIVE, _EXPORTED
    with _LOCK:
        probe, _ACTIVE = _ACTIVE, None
        if _EXPORTED:
            os.environ.pop(config.PARENT_VARIABLE, None)
            os.environ.pop(config.DUMP_PARENT_VARIABLE, None)
            _EXPORTED = False
    if probe is not None:
        probe.detach()
    return probe


def activate_from_env() -> Probe | None:
    """Start-up entry: activate per ``KVLINT_PROBE*`` and report at exit. The first probed process
    exports its pid, so that the processes it starts know that they are its workers."""
    global _EXPORTED
    settings = from_env()
    if settings is None:
        return None
    if config.PARENT_VARIABLE not in os.environ:
        os.environ[config.PARENT_VARIABLE] = str(os.getpid())
        if settings.dump_dir is not None:
            os.environ[config.DUMP_PARENT_VARIABLE] = str(settings.dump_dir)
        _EXPORTED = True
    probe = activate(settings)
    path = probe.report_file()
    problem = None if path is None else check_writable(path.parent)
    if problem is not None:
        print(f"kvlint: KVLINT_PROBE_REPORT: cannot write in {path.parent} ({problem}): the probe runs, but its "
              f"report {path} will be lost unless the folder becomes writable", file=sys.stderr)
    elif path is not None and not probe.worker():
        start_roster(probe.roster_file())
    probe.keeper.install_handlers()
    atexit.register(probe.finish)
    return probe
