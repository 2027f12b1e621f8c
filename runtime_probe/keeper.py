"""Keeping each process's report on disk while it runs, so that every way a process ends leaves one.

- **While the program runs**, the report is rewritten (atomically: ``report.write_json``) after a probed
  call once ``KVLINT_PROBE_REPORT_EVERY`` seconds (``config``; default 5, ``0``: after every call) have passed since
  the last write: after the first call of a new step, or after any call once twice that time has passed
  (a program whose calls have no step boundaries). These reports say ``"complete": false``.
- **At a normal exit** (``atexit``; a multiprocessing worker's finalizers) the report is written a last
  time with ``"complete": true``.
- **SIGTERM, SIGHUP**: where the program left the default action (the process would die without running
  any exit handler), the probe's handler writes the report (``"interrupted": "SIGTERM"``, still incomplete)
  and prints the summary, then restores the default action and sends the signal again, so the process ends
  exactly as it would have (status -15). Where a Python handler was already installed, the probe's writes
  the report, then calls it. An ignored signal stays ignored; a handler the program installs later replaces
  the probe's (a handler that calls ``sys.exit`` then reaches the exit write).
- **SIGINT**: where Python's own handler (``KeyboardInterrupt``) is in place, the probe notes the signal,
  then calls it; the report written at exit says ``"interrupted": "SIGINT"``.
- **os._exit, SIGKILL**: the last periodic write remains, incomplete.

A signal that arrives while the probe itself is at work on the main thread (a probed call in progress,
locks held) must not wait for it: the handler then rewrites the last report it wrote, marked with the
signal, instead of taking a new one. A signal that interrupts a write is handled once the write is done
(a pool worker's final write, say, when ``terminate`` comes as it leaves), even when the write fails.

CPython runs a Python handler on the main thread, between two bytecodes. A signal that lands as the main
thread enters a blocking C call which does not return on it (a pool worker taking its queue's lock just as
``terminate`` comes; a collective that never completes) would wait there for ever, where the default action
ends the process at once. So where the probe's handler replaced the default action, a thread of the probe,
woken through the signal module's wake-up file (``signal.set_wakeup_fd``, where the program uses none),
ends the process itself when the main thread has not started the handler within ``SIGNAL_GRACE`` seconds:
it writes the report marked with the signal, then restores the default action and sends the signal again.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

from kvlint.runtime_probe.report import WriteError, summary, write_json

ENDING_SIGNALS = ("SIGTERM", "SIGHUP")
WAIT_FOR_WRITER = 2.0
"""Seconds a signal handler, or the exit, waits for another thread's write to finish."""
SIGNAL_GRACE = 1.0
"""Seconds the main thread has to start the handler of an ending signal before the probe's watcher ends the
process in its stead."""

Snapshot = Callable[[bool], dict[str, Any]]
"""The process's report so far (``True``: taken at the normal exit)."""


def start_roster(roster: Path) -> None:
    """Empty the roster of a run starting now (a previous run's names would be expected again)."""
    try:
        roster.unlink(missing_ok=True)
    except OSError as exc:
        print(f"kvlint: probe could not reset {roster} ({exc.strerror or exc})", file=sys.stderr)


def enrol(roster: Path, report: Path) -> None:
    """Add ``report`` to the roster: one append of one line, which concurrent processes do not interleave."""
    try:
        handle = os.open(roster, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
        try:
            os.write(handle, f"{report.name}\n".encode())
        finally:
            os.close(handle)
    except OSError as exc:
        print(f"kvlint: probe could not add its report to {roster} ({exc.strerror or exc})", file=sys.stderr)


class Keeper:
    """When the report of one process is written, and the handlers that write it at a signal."""

    def __init__(self, snapshot: Snapshot, target: Callable[[], Path | None], wanted: Callable[[dict[str, Any]], bool],
                 busy: Callable[[], bool], every: float) -> None:
        self._snapshot = snapshot
        self._target = target
        """The report file of this process (None: no report asked for)."""
        self._wanted = wanted
        """Whether a report with these sites is written at all (a worker without calls writes none)."""
        self._busy = busy
        """The current thread is inside a probed call (a signal handler must not take a snapshot)."""
        self.every = every
        self._previous: dict[int, Any] = {}
        self._wakeup: tuple[int, int] | None = None
        """The pipe the signal module writes each signal's number to, read by the watcher thread."""
        self.reset()

    def reset(self) -> None:
        """A fresh start: in a forked child, which reports its own calls."""
        self.interrupted: str | None = None
        self._final = False
        self._written_at = time.monotonic() - self.every  # the first call that begins a step is written
        self._step: int | None = None
        self._last: dict[str, Any] | None = None
        self._lock = threading.Lock()
        self._writer: int | None = None
        """The thread writing now."""
        self._pending: tuple[int, FrameType | None] | None = None
        """A signal that arrived during this thread's write, handled once the write is done."""
        self._failed: WriteError | None = None
        """The last write failed (a full disk): the next failures are not announced again."""
        self._handling = threading.Event()
        """The main thread has started the handler of an ending signal."""

    def after_fork_in_child(self) -> None:
        """A forked child: a fresh start, and a watcher of its own (the parent's thread is not in the child,
        and the child must not share the parent's wake-up pipe)."""
        self.reset()
        if self._wakeup is not None:
            signal.set_wakeup_fd(-1)
            for end in self._wakeup:
                os.close(end)
            self._wakeup = None
            self._start_watcher()

    # -- while the program runs -------------------------------------------------------------------------
    def after_call(self, step: int | None) -> None:
        """A probed call ended (``step``: its step number); rewrite the report when it is due."""
        previous, self._step = self._step, step
        waited = time.monotonic() - self._written_at
        if waited >= self.every and (step != previous or waited >= 2 * self.every):
            try:
                self.write(final=False, wait=None)
            except Exception as exc:  # noqa: BLE001 - never into the program's call
                print(f"kvlint: probe could not write its report: {exc!r}", file=sys.stderr)

    def write(self, final: bool, wait: float | None) -> dict[str, Any] | None:
        """Take the report and write it (a failure is one line on stderr naming the path: at the final write
        always, while running only the first of a series); returns it. None when another thread's write
        held the writer for ``wait`` seconds (``None``: as long as it takes), or the final report is written."""
        if self._writer == threading.get_ident():  # a signal handler interrupted this thread's own write
            return None
        if not self._lock.acquire(timeout=-1 if wait is None else wait):
            return None
        try:
            if self._final:
                return None
            self._writer = threading.get_ident()
            self._written_at = time.monotonic()
            report = self._snapshot(final)
            self._final = final
            path = self._target()
            if path is not None and self._wanted(report):
                self._deliver(report, path, announce=final or self._failed is None)
        finally:
            self._writer = None
            self._lock.release()
            pending, self._pending = self._pending, None
            if pending is not None:  # a signal arrived during the write: it takes its course now, even if
                self._on_ending_signal(*pending)  # the write failed
        return report

    def _deliver(self, report: dict[str, Any], path: Path, announce: bool) -> None:
        try:
            write_json(report, path)
        except WriteError as exc:
            if announce:
                print(f"kvlint: probe could not write its report: {exc}", file=sys.stderr)
            self._failed = exc
            return
        self._failed = None
        self._last = report

    # -- signals -------------------------------------------------------------------------------------------
    def install_handlers(self) -> None:
        """Handle SIGTERM/SIGHUP where they have the default action or a Python handler, SIGINT where Python's
        ``KeyboardInterrupt`` handler is in place (main thread only: elsewhere signals cannot be set)."""
        if threading.current_thread() is not threading.main_thread():
            return
        for name in (*ENDING_SIGNALS, "SIGINT"):
            number = getattr(signal, name, None)
            if number is None:
                continue
            previous = signal.getsignal(number)
            if name == "SIGINT":
                if previous is not signal.default_int_handler:
                    continue
                handler: Callable[[int, FrameType | None], Any] = self._on_interrupt
            elif previous is signal.SIG_DFL or (callable(previous) and previous is not signal.default_int_handler):
                handler = self._on_ending_signal
            else:  # ignored (SIG_IGN), or set outside Python (None): left as it is
                continue
            self._previous[number] = previous
            signal.signal(number, handler)
        ending = [getattr(signal, name) for name in ENDING_SIGNALS if hasattr(signal, name)]
        if self._wakeup is None and any(self._previous.get(number) is signal.SIG_DFL for number in ending):
            self._start_watcher()

    def _start_watcher(self) -> None:
        """The thread that ends the process at an ending signal the main thread cannot handle (see the module's
        docstring); not started where the program already has a wake-up file (asyncio's signal handlers)."""
        read, write = os.pipe()
        os.set_blocking(write, False)
        try:
            previous = signal.set_wakeup_fd(write, warn_on_full_buffer=False)
        except (ValueError, OSError):
            previous = None
        if previous != -1:
            if previous is not None:
                signal.set_wakeup_fd(previous)
            os.close(read)
            os.close(write)
            return
        self._wakeup = (read, write)
        threading.Thread(target=self._watch, args=(read,), name="kvlint-probe-signals", daemon=True).start()

    def _watch(self, read: int) -> None:
        """Read the numbers of the signals received; at an ending signal whose default action the probe's
        handler replaced, give the main thread ``SIGNAL_GRACE`` seconds to start that handler."""
        while True:
            try:
                received = os.read(read, 64)
            except OSError:
                return
            if not received:
                return
            for number in received:
                if (self._previous.get(number) is signal.SIG_DFL and signal.getsignal(number) == self._on_ending_signal
                        and not self._handling.wait(SIGNAL_GRACE)):
                    self._end_in_place_of_the_main_thread(number)

    def _end_in_place_of_the_main_thread(self, number: int) -> None:
        name = signal.Signals(number).name
        self.interrupted = name
        try:
            try:
                report = self.write(final=False, wait=WAIT_FOR_WRITER)
            except Exception:  # noqa: BLE001 - the main thread may be changing the state: the last report
                report = self._rewrite_last(name)
            self._announce(report, name)
        except Exception as exc:  # noqa: BLE001 - the signal must still take its course
            print(f"kvlint: probe could not write its report at {name}: {exc!r}", file=sys.stderr)
        _end_by_default_action(number)

    def _on_interrupt(self, number: int, frame: FrameType | None) -> Any:
        self.interrupted = signal.Signals(number).name
        return self._previous[number](number, frame)

    def _on_ending_signal(self, number: int, frame: FrameType | None) -> Any:
        self._handling.set()
        if self._writer == threading.get_ident():  # this thread's write was interrupted: let it finish first
            self._pending = (number, frame)
            return None
        name = signal.Signals(number).name
        self.interrupted = name
        try:
            self._write_at_signal(name)
        except Exception as exc:  # noqa: BLE001 - the signal must still take its course
            print(f"kvlint: probe could not write its report at {name}: {exc!r}", file=sys.stderr)
        previous = self._previous.get(number, signal.SIG_DFL)
        if callable(previous):
            return previous(number, frame)
        signal.signal(number, signal.SIG_DFL)
        os.kill(os.getpid(), number)
        return None

    def _write_at_signal(self, name: str) -> None:
        """The report as it stands, or, when this thread is inside the probe, the last one written, marked."""
        report = self._rewrite_last(name) if self._busy() else self.write(final=False, wait=WAIT_FOR_WRITER)
        self._announce(report, name)

    def _announce(self, report: dict[str, Any] | None, name: str) -> None:
        """The summary of the report written at signal ``name``, on stderr."""
        if report is not None and (report["sites"] or self._target() is not None):
            print(summary(report), file=sys.stderr)
            print(f"kvlint probe: stopped by {name}; the report holds the calls up to then and is marked "
                  "incomplete", file=sys.stderr)

    def _rewrite_last(self, name: str) -> dict[str, Any] | None:
        last, path = self._last, self._target()
        if last is None or path is None or self._final or not self._lock.acquire(timeout=WAIT_FOR_WRITER):
            return None
        try:
            self._writer = threading.get_ident()
            report = {**last, "interrupted": name}
            self._deliver(report, path, announce=True)
            return report
        finally:
            self._writer = None
            self._lock.release()


def _end_by_default_action(number: int) -> None:
    """End the process by signal ``number``'s default action, from a thread other than the main one, where
    ``signal.signal`` cannot be called: libc's ``signal`` can. SIGKILL if that fails."""
    try:
        import ctypes

        ctypes.CDLL(None).signal(number, 0)  # SIG_DFL
        os.kill(os.getpid(), number)
        time.sleep(WAIT_FOR_WRITER)  # the signal is delivered to a thread that does not block it
    except Exception:  # noqa: BLE001 - the process must end all the same
        pass
    os.kill(os.getpid(), signal.SIGKILL)
