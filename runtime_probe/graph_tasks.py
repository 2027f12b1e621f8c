"""NPU graphs as the probe sees them: captures, task groups, task updates and replays.

On the device a replay runs the captured kernels without any Python call, and the calls issued between
``graph_task_update_begin`` and ``graph_task_update_end`` rewrite the arguments of a captured task group
(CANN's task-update mode): they compute nothing, read nothing and write nothing. So:

- a call captured in a graph is bound to its schema and remembered with the group it belongs to: its
  arguments are the graph's static buffers, read again at each replay;
- a call issued during an update is an argument update: its arguments are validated (the signature and
  value checks), but it is placed in no step and its output (not computed yet) is not checked; it becomes
  the arguments its task runs with from the next replay on;
- a replay has the graph's captured cache writes and attention calls judged in capture order, each with
  its group's latest arguments, on the buffers as they are at the replay (KVL505, KVL507, KVL509, KVL510);
  not after ``NPUGraph.update(cpu_update_input=...)``, whose new arguments the probe does not follow;
- KVL550: a replay runs a group that no update refreshed since the capture or the previous replay, while
  the program updates that group before other replays.

Graphs and handles are remembered by identity while they live here (a graph is captured once and replayed
for the life of the program). Nothing here imports torch: the hooks are installed when torch_npu loads.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kvlint.runtime_probe.live_call import LiveCall

STALE = "KVL550"
TASK_API = ("graph_task_group_begin", "graph_task_group_end", "graph_task_update_begin", "graph_task_update_end")
GRAPH_METHODS = ("capture_begin", "capture_end", "replay", "update")


@dataclass
class Task:
    """One probed call captured in a graph, or issued in an update of its group."""

    op: str
    path: str
    line: int
    call: LiveCall | None
    """The bound call (None when it was not value-checked: its arguments are unknown)."""


@dataclass
class Group:
    """A task group of a captured graph (``graph_task_group_begin`` / ``_end``)."""

    tasks: list[Task] = field(default_factory=list)
    latest: list[Task] | None = None
    """The calls of the latest update: the arguments the group's tasks run with (None: the capture's; a
    task's ``call`` is None where the update was not value-checked)."""
    refreshed: bool = False
    """An update refreshed the group since the capture or the previous replay."""
    updates: int = 0
    unrefreshed: list[tuple[str, int, int]] = field(default_factory=list)
    """(path, line, replay number) of the replays that ran the group unrefreshed before its first update."""

    def running(self) -> list[Task]:
        """The tasks as a replay runs them: the capture's calls until an update, then the latest update's
        (a task whose update the probe did not read, or that matches no captured call, has unknown arguments)."""
        latest = self.latest
        if latest is None:
            return self.tasks
        if len(latest) != len(self.tasks):
            return [Task(old.op, old.path, old.line, None) for old in self.tasks]
        return [new if new.op == old.op else Task(old.op, old.path, old.line, None)
                for old, new in zip(self.tasks, latest)]  # fmt: skip


@dataclass
class Graph:
    """What the probe saw of one captured graph."""

    tasks: list[tuple[Task, Group | None]] = field(default_factory=list)
    groups: list[Group] = field(default_factory=list)
    replays: int = 0
    opaque: bool = False
    """``NPUGraph.update(cpu_update_input=...)`` changed arguments the probe does not see: replays are not judged."""


@dataclass(frozen=True)
class Stale:
    """A KVL550 finding: a replay (at ``path:line``) ran ``group`` with arguments no update refreshed."""

    op: str
    path: str
    line: int
    message: str
    count: int = 1


class _Thread(threading.local):
    """A thread's capture and update in progress (class defaults: reading them raises nothing)."""

    capture: Graph | None = None
    groups: list[Group] = []
    """The groups being captured; replaced by each capture, so this default is never appended to."""
    update: Group | None = None
    update_calls: list[Task] | None = None


class Graphs:
    """The probe's record of the graphs of this process; captures and updates are per thread. ``open``
    counts the captures and updates in progress on any thread, so that a probed call asks its thread only
    while there is one (the cost of every call outside graphs is one attribute read)."""

    def __init__(self) -> None:
        self._local = _Thread()
        self.open = 0
        self._graphs: dict[int, tuple[object, Graph]] = {}
        self._handles: dict[int, tuple[object, Group]] = {}
        self._lock = threading.Lock()

    # -- the program's graph calls --------------------------------------------------------------------
    def capture_begin(self, graph: object) -> None:
        record = Graph()
        with self._lock:
            self._graphs[id(graph)] = (graph, record)  # a graph captured again starts afresh
        with self._lock:
            self.open += self._local.capture is None
        self._local.capture, self._local.groups = record, []

    def capture_end(self) -> None:
        with self._lock:
            self.open -= self._local.capture is not None
        self._local.capture, self._local.groups = None, []

    def graph_updated(self, graph: object) -> None:
        """``NPUGraph.update``: new arguments, given as dicts the probe does not follow."""
        known = self._graphs.get(id(graph))
        if known is not None and known[0] is graph:
            known[1].opaque = True

    def group_begin(self) -> None:
        capture = self.capturing()
        if capture is not None:
            group = Group()
            capture.groups.append(group)
            self._local.groups.append(group)

    def group_end(self, handle: object) -> None:
        groups = self._local.groups
        if groups:
            with self._lock:
                self._handles[id(handle)] = (handle, groups.pop())

    def update_begin(self, handle: object) -> None:
        known = self._handles.get(id(handle))
        with self._lock:
            self.open += self._local.update is None
        self._local.update = Group() if known is None or known[0] is not handle else known[1]
        self._local.update_calls = []

    def update_end(self) -> list[Stale]:
        """The group now runs the update's calls; the replays that ran it unrefreshed before this first
        update are stale (the program does update it)."""
        group = self._local.update
        if group is None:
            return []
        with self._lock:
            self.open -= 1
        self._local.update = None
        stale = [_stale(group, path, line, number) for path, line, number in group.unrefreshed]
        group.unrefreshed.clear()
        group.latest = self._local.update_calls or []
        group.refreshed = True
        group.updates += 1
        return stale

    def replayed(self, graph: object, path: str, line: int) -> tuple[Graph | None, list[Stale]]:
        """A replay of ``graph`` from ``path:line``: its record, and the groups it ran stale."""
        known = self._graphs.get(id(graph))
        if known is None or known[0] is not graph:
            return None, []
        record = known[1]
        record.replays += 1
        stale = []
        for group in record.groups:
            if group.tasks and not group.refreshed:
                if group.updates:
                    stale.append(_stale(group, path, line, record.replays))
                else:
                    group.unrefreshed.append((path, line, record.replays))
            group.refreshed = False
        return record, stale

    # -- the probed calls -----------------------------------------------------------------------------
    def capturing(self) -> Graph | None:
        return self._local.capture if self.open else None

    def updating(self) -> bool:
        return bool(self.open) and self._local.update is not None

    def captured(self, task: Task) -> None:
        capture = self.capturing()
        if capture is None:
            return
        groups = self._local.groups
        group = groups[-1] if groups else None
        capture.tasks.append((task, group))
        if group is not None:
            group.tasks.append(task)

    def updated(self, task: Task) -> None:
        calls = self._local.update_calls
        if calls is not None:
            calls.append(task)


def running(record: Graph) -> list[Task]:
    """The graph's tasks in capture order, as its next replay runs them."""
    by_group = {id(group): iter(group.running()) for group in record.groups}
    return [task if group is None else next(by_group[id(group)]) for task, group in record.tasks]


def _stale(group: Group, path: str, line: int, number: int) -> Stale:
    """KVL550 for replay ``number`` (at ``path:line``), which ran ``group`` as its last update (or the
    capture, before any update) left it."""
    task = group.tasks[0]
    since, arguments = (("the previous replay", "an earlier update's arguments") if group.updates else
                        ("the capture", "the capture's arguments"))  # fmt: skip
    return Stale(task.op, path, line, (
        f"replay {number} of this NPU graph runs {task.op} (captured at {task.path}:{task.line}) with {arguments}: "
        f"no graph_task_update_begin/_end refreshed its task group since {since}, though the program updates that "
        "group before other replays; its lengths are those of an earlier step (update the group before every "
        "replay)"))


def wrap(patches: Any, module: object, probe: Any) -> None:
    """Hook the graph API of ``module`` (``torch.npu`` / ``torch_npu.npu``, real or emulated): the task-group
    functions and ``NPUGraph``'s capture and replay, each reporting to ``probe``. Idempotent."""
    for name in TASK_API:
        original = getattr(module, name, None)
        if callable(original) and not getattr(original, "__kvlint_graph__", False):
            patches.replace(module, name, _hooked(original, name, probe))
    graph_class = getattr(module, "NPUGraph", None)
    if isinstance(graph_class, type):
        for name in GRAPH_METHODS:
            original = getattr(graph_class, name, None)
            if callable(original) and not getattr(original, "__kvlint_graph__", False):
                patches.replace(graph_class, name, _hooked(original, name, probe))


def _hooked(original: Any, name: str, probe: Any) -> Any:
    def hooked(*args: Any, **kwargs: Any) -> Any:
        return probe.graph_event(original, name, args, kwargs)

    hooked.__kvlint_graph__ = True  # type: ignore[attr-defined]
    hooked.__name__ = getattr(original, "__name__", name)
    hooked.__doc__ = getattr(original, "__doc__", None)
    return hooked
