"""NPU graphs on a CPU: ``torch.npu.NPUGraph``, ``torch.npu.graph(...)`` and the task-group updates of
captured operators, emulated by recording the operators a capture runs and running them again on replay.

A graph captured on the device is a list of kernels bound to fixed memory: ``replay()`` runs them again on
whatever the bound buffers hold now. The emulated tensors are CPU tensors that stay alive as long as the
graph does, so recording each dispatcher call of the capture with its arguments, and on replay calling it
again and writing its fresh result into the tensor the capture produced, gives the same semantics:

- the capture runs the operators (the outputs of the capture are computed, as on the device after a
  warm-up) and records, in order, every operator that writes a tensor (``copy_``, ``index_put_``, the cache
  writers, ``.out`` calls, collectives) and every operator that makes a new tensor (its result is copied
  into the captured one on replay); views are not recorded (the captured view still aliases its base) nor
  are ``empty`` allocations (their contents are undefined). A view is an output that shares memory with an
  input when the capture runs it, not an operator whose schema returns an alias: under inference mode
  ``aten.to``, ``aten.contiguous`` and ``aten.reshape`` reach the recorder and copy;
- Python values are frozen at capture, as on the device: sizes, lists passed as arguments, branches taken;
  an operator whose output shape changes on replay raises;
- ``graph_task_group_begin`` / ``_end`` during a capture delimit a group of recorded operators and return
  its handle; the operators called between ``graph_task_update_begin(stream, handle)`` and
  ``graph_task_update_end`` update the group's tasks, as in CANN's task-update mode: their arguments are
  recorded, nothing is computed until the next replay (a program that reads an output buffer between the
  update and the replay sees the old data, as on the device), and they must match the group's tasks in
  number and type (how vllm-ascend passes each step's sequence lengths to a captured attention call);
- ``NPUGraph.update(cpu_update_input=[{...}, ...])``, on a graph captured with ``auto_dispatch_capture=True``,
  gives the calls of the operators with a graph handler (``graph_handlers``: FIA v1/v2 and their ``.out``,
  ``_npu_paged_attention``, and any a program registers; in capture order, one dict each, or one dict for
  all) new keyword arguments, and the arguments their handler's ``update_args`` sets (the lengths,
  ``docs/operators/dispatcher.md#dsp-c25``); a key that is neither is ignored, as torch_npu ignores it;
  every other argument keeps its captured value; ``graph_dispatch_mode.update_stream`` is one stream shared
  by every graph, as torch_npu's;
- ``torch_npu._C._npu_fused_infer_attention_score_out_graph(stream, handle, event, ...)``: FIA's ``.out``
  issued as the update of a captured task group (``graph_task_update_begin``, the call, ``_end``, then
  ``event.record``);
- ``debug_dump(path)`` writes the recorded calls as JSON, in the emulator's own format (``graph_dump``);
- ``pool()``, ``graph_pool_handle()``, ``capture_error_mode``, streams: accepted;
  memory is never shared.

Operators called on FakeTensors (``torch.compile`` tracing inside a capture) are not recorded.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from kvlint.runtime_probe.emulator import graph_dump
from kvlint.runtime_probe.emulator.graph_handlers import GraphDispatchRecord, handler_of
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten, tree_unflatten

_UNDEFINED_CONTENTS = frozenset({torch.ops.aten.empty.memory_format, torch.ops.aten.empty_strided.default,
                                 torch.ops.aten.empty_like.default, torch.ops.aten.new_empty.default,
                                 torch.ops.aten.new_empty_strided.default})  # fmt: skip
"""Allocations whose contents are undefined: replaying them would copy garbage over garbage."""


@dataclass
class _Call:
    """One recorded dispatcher call: run again on replay, the tensors it made anew (at positions ``fresh`` of
    its flattened result) copied into ``outputs``."""

    func: torch._ops.OpOverload
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    outputs: list[torch.Tensor]
    fresh: tuple[int, ...] = ()
    returned: tuple[tuple[str, Any], ...] = ()
    """What each leaf of the captured result was: ``("fresh", i)`` (``outputs[i]``), ``("input", (name,
    position, tensor))`` (an argument's tensor, returned again), ``("value", value)``."""
    spec: Any = None
    """The structure of the captured result (``tree_flatten``)."""

    def updated(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[_Call, Any]:
        """This task with new arguments, not run, and what the call returns before the replay computes it:
        its argument tensors as they are, new tensors of undefined contents (NaN here) for what it makes."""
        outputs = [_undefined_like(tensor) for tensor in self.outputs]
        leaves = []
        for kind, what in self.returned:
            if kind == "fresh":
                leaves.append(outputs[what])
            elif kind == "input":
                name, position, captured = what
                given = [value for value in tree_flatten(_argument(self.func, args, kwargs, name))[0]
                         if isinstance(value, torch.Tensor)]  # fmt: skip
                leaves.append(given[position] if position < len(given) else captured)
            else:
                leaves.append(what)
        call = _Call(self.func, args, kwargs, outputs, self.fresh, self.returned, self.spec)
        return call, tree_unflatten(leaves, self.spec)

    def replay(self) -> None:
        result = self.func(*self.args, **self.kwargs)
        for value in tree_flatten(result)[0]:  # a collective's Work: the captured call was waited on
            if not isinstance(value, torch.Tensor) and callable(getattr(value, "wait", None)):
                value.wait()
        tensors = _tensors(result)
        for captured, new in zip(self.outputs, (tensors[i] for i in self.fresh)):
            if captured.shape != new.shape:
                raise RuntimeError(f"NPU graph replay: {self.func} produced shape {tuple(new.shape)} where the capture "
                                   f"produced {tuple(captured.shape)}; a captured graph has static shapes")  # fmt: skip
            captured.copy_(new)


@dataclass
class _Group:
    """The operators between ``graph_task_group_begin`` and ``_end``; an update replaces them."""

    calls: list[_Call | _Group] = field(default_factory=list)

    def replay(self) -> None:
        for call in self.calls:
            call.replay()


def _flat(calls: list[_Call | _Group]) -> list[_Call]:
    return [leaf for call in calls for leaf in (_flat(call.calls) if isinstance(call, _Group) else [call])]


def _is_fake(value: Any) -> bool:
    return isinstance(value, torch.Tensor) and (value.is_meta or isinstance(value, torch._subclasses.FakeTensor))


def _tensors(result: Any) -> list[torch.Tensor]:
    return [value for value in tree_flatten(result)[0] if isinstance(value, torch.Tensor)]


def _storage(tensor: torch.Tensor) -> int:
    """The address of the memory ``tensor`` lives in (0 for a tensor without any)."""
    try:
        storage = tensor.untyped_storage()
    except (NotImplementedError, RuntimeError):  # a tensor subclass without storage
        return 0
    return storage.data_ptr() if storage.nbytes() else 0


def _fresh(inputs: list[Any], result: Any) -> tuple[int, ...]:
    """Positions, among the tensors of ``result``, of those the call made anew: they share no memory with an
    input. A run-time fact, not the schema's: under ``torch.inference_mode()`` ``x.float()``, ``x.to(dtype)``,
    ``.contiguous()`` and ``.reshape()`` reach the dispatcher as ``aten.to`` / ``aten.contiguous`` /
    ``aten.reshape``, whose schemas return an alias (``Tensor(a)``), and copy."""
    shared = {_storage(value) for value in inputs if isinstance(value, torch.Tensor)} - {0}
    return tuple(i for i, tensor in enumerate(_tensors(result)) if _storage(tensor) not in shared)


def _recorded(func: torch._ops.OpOverload, args: tuple[Any, ...], kwargs: dict[str, Any], result: Any) -> _Call | None:
    """The call to record for a replay, or None when replaying it would change nothing: a view (every tensor
    it returns shares memory with an input, and the schema says it returns an alias without writing), an
    allocation of undefined contents, a call on fake tensors. An operator that returns its ``out`` tensors
    without an alias annotation (FIA's ``.out``) wrote them, and is recorded."""
    inputs, _ = tree_flatten((args, kwargs))
    if any(_is_fake(value) for value in inputs) or func in _UNDEFINED_CONTENTS:
        return None
    schema = func._schema
    writes = any(argument.alias_info is not None and argument.alias_info.is_write for argument in schema.arguments)
    fresh = _fresh(inputs, result)
    declared_alias = bool(schema.returns) and all(ret.alias_info is not None for ret in schema.returns)
    undeclared_alias = not declared_alias and len(fresh) < len(_tensors(result))
    if not (writes or fresh or undeclared_alias):
        return None
    tensors = _tensors(result)
    return _Call(func, args, kwargs, [tensors[i] for i in fresh], fresh, *_returned(func, args, kwargs, result, fresh))


def _argument(func: torch._ops.OpOverload, args: tuple[Any, ...], kwargs: dict[str, Any], name: str) -> Any:
    """Argument ``name`` of a dispatcher call, wherever it was passed (None when left to its default)."""
    for position, argument in enumerate(func._schema.arguments):
        if argument.name == name:
            return args[position] if position < len(args) else kwargs.get(name)
    return None


def _returned(func: torch._ops.OpOverload, args: tuple[Any, ...], kwargs: dict[str, Any], result: Any,
              fresh: tuple[int, ...]) -> tuple[tuple[tuple[str, Any], ...], Any]:  # fmt: skip
    """``_Call.returned`` and ``_Call.spec`` of a captured result: which leaves are new, which an argument's."""
    leaves, spec = tree_flatten(result)
    given = {argument.name: [value for value in tree_flatten(_argument(func, args, kwargs, argument.name))[0]
                             if isinstance(value, torch.Tensor)] for argument in func._schema.arguments}  # fmt: skip
    returned: list[tuple[str, Any]] = []
    tensor_index = 0
    for leaf in leaves:
        if not isinstance(leaf, torch.Tensor):
            returned.append(("value", leaf))
            continue
        if tensor_index in fresh:
            returned.append(("fresh", fresh.index(tensor_index)))
        else:
            source = next(((name, position, leaf) for name, tensors in given.items()
                           for position, tensor in enumerate(tensors) if _storage(tensor) == _storage(leaf)),
                          None)  # fmt: skip
            returned.append(("value", leaf) if source is None else ("input", source))
        tensor_index += 1
    return tuple(returned), spec


def _undefined_like(tensor: torch.Tensor) -> torch.Tensor:
    """A new tensor like ``tensor`` whose contents are undefined until a replay writes it: NaN where it can
    hold NaN, so that a program reading it early sees that it did."""
    new = torch.empty_like(tensor)
    return new.fill_(float("nan")) if new.is_floating_point() or new.is_complex() else new


def _update(call: _Call, update: dict[str, Any]) -> None:
    """``NPUGraph.update``'s change of one recorded call: a key naming one of its keyword arguments replaces
    it, then its handler's ``update_args`` sets the arguments it updates; other keys are ignored."""
    record = GraphDispatchRecord(call.func, list(call.args), dict(call.kwargs))
    names = [argument.name for argument in call.func._schema.arguments]
    for key, value in update.items():
        if key in record.kwargs:
            record.set_argument(names.index(key), value)
    handler_of(call.func).update_args(record, update)
    call.args, call.kwargs = tuple(record.args), record.kwargs


class _Recorder(TorchDispatchMode):
    """Runs every operator and appends the calls a replay needs to ``self.targets[-1]`` (the graph, or the
    task group being captured)."""

    def __init__(self, target: list[_Call | _Group]) -> None:
        super().__init__()
        self.targets = [target]

    def __torch_dispatch__(self, func: torch._ops.OpOverload, types: Any, args: tuple[Any, ...] = (),
                           kwargs: dict[str, Any] | None = None) -> Any:  # fmt: skip
        kwargs = kwargs or {}
        result = func(*args, **kwargs)
        call = _recorded(func, args, kwargs, result)
        if call is not None:
            self.targets[-1].append(call)
        return result


_capturing: tuple[NPUGraph, _Recorder] | None = None
"""The graph being captured in this process, and its recorder."""


class _PoolHandle:
    """``graph_pool_handle()`` / ``NPUGraph.pool()``: graphs never share memory on the CPU."""


class NPUGraph:
    """``torch.npu.NPUGraph``: ``capture_begin`` / ``capture_end`` (or ``with torch.npu.graph(g):``), then
    ``replay()``."""

    def __init__(self, keep_graph: bool = False) -> None:
        self._calls: list[_Call | _Group] = []
        self._recorder: _Recorder | None = None
        self._pool = _PoolHandle()
        self._auto_dispatch = False

    def capture_begin(self, pool: object = None, capture_error_mode: str = "global",
                      auto_dispatch_capture: bool = False) -> None:  # fmt: skip
        global _capturing
        if _capturing is not None:
            raise RuntimeError("an NPU graph is already being captured in this process")
        self._calls = []
        self._auto_dispatch = auto_dispatch_capture
        self._recorder = _Recorder(self._calls)
        self._recorder.__enter__()
        _capturing = (self, self._recorder)

    def capture_end(self) -> None:
        global _capturing
        if _capturing is None or _capturing[0] is not self or self._recorder is None:
            raise RuntimeError("capture_end() without a capture_begin() of this graph")
        self._recorder.__exit__(None, None, None)
        self._recorder, _capturing = None, None

    def replay(self) -> None:
        with torch.inference_mode():
            for call in self._calls:
                call.replay()

    def update(self, cpu_update_input: list[dict[str, Any]]) -> None:
        """New arguments for the captured calls of operators with a graph handler, one dict per call in
        capture order (a single dict serves them all): see ``_update``."""
        if not self._auto_dispatch:
            raise RuntimeError("NPUGraph.update needs a graph captured with auto_dispatch_capture=True "
                               "(torch.npu.graph(g, auto_dispatch_capture=True))")  # fmt: skip
        calls = [call for call in _flat(self._calls) if handler_of(call.func) is not None]
        updates = list(cpu_update_input)
        if len(updates) == 1:
            updates *= len(calls)
        if len(updates) != len(calls):
            raise RuntimeError(f"NPUGraph.update: {len(cpu_update_input)} updates for the {len(calls)} calls this "
                               "graph recorded for update (one dict each, or one for all)")  # fmt: skip
        for call, update in zip(calls, updates):
            _update(call, update)

    def reset(self) -> None:
        self._calls = []

    def pool(self) -> _PoolHandle:
        return self._pool

    @property
    def graph_dispatch_mode(self) -> GraphDispatchMode:
        return GraphDispatchMode()

    def enable_debug_mode(self) -> None:
        """Accepted: ``debug_dump`` needs nothing more."""

    def debug_dump(self, debug_path: str = "") -> None:
        """The recorded calls as JSON at ``debug_path``, and their aligned copy (``graph_dump``)."""
        graph_dump.dump(_flat(self._calls), debug_path)


class GraphDispatchMode:
    """``NPUGraph.graph_dispatch_mode``: what the auto-dispatch capture of a graph shares with every other,
    the stream its updates are issued on (``update_stream``, one per process, as torch_npu's class-level
    stream)."""

    _update_stream: Any = None

    @property
    def update_stream(self) -> Any:
        if GraphDispatchMode._update_stream is None:
            GraphDispatchMode._update_stream = torch.npu.Stream()  # the emulator's torch.npu (npu.py)
        return GraphDispatchMode._update_stream


class graph:  # noqa: N801 - the name torch.npu.graph has on the device
    """``with torch.npu.graph(npu_graph, pool=None, stream=None, capture_error_mode="global"):`` captures the
    block into ``npu_graph``."""

    def __init__(self, npu_graph: NPUGraph, pool: object = None, stream: object = None,
                 capture_error_mode: str = "global", auto_dispatch_capture: bool = False) -> None:  # fmt: skip
        self.npu_graph = npu_graph
        self.pool = pool
        self.capture_error_mode = capture_error_mode
        self.auto_dispatch_capture = auto_dispatch_capture

    def __enter__(self) -> None:
        self.npu_graph.capture_begin(self.pool, capture_error_mode=self.capture_error_mode,
                                     auto_dispatch_capture=self.auto_dispatch_capture)

    def __exit__(self, *exc: object) -> None:
        self.npu_graph.capture_end()


def graph_pool_handle() -> _PoolHandle:
    return _PoolHandle()


def is_current_stream_capturing() -> bool:
    return _capturing is not None


# -- task groups ------------------------------------------------------------------------------------------
class TaskGroupHandle:
    """``torch_npu._C._NPUTaskGroupHandle``: what ``graph_task_group_end`` returns; it names a group of a
    captured graph (``group`` is None when the group was not captured)."""

    def __init__(self, group: _Group | None = None) -> None:
        self.group = group


class _Updater(TorchDispatchMode):
    """Between ``graph_task_update_begin`` and ``_end``: each call of the group's next operator is a task
    update (CANN's task-update mode): recorded with its new arguments and not run, since the replay computes
    it; it returns what the device leaves there until the replay (``_Call.updated``). Other operators (views,
    host-side preparation of the arguments) run at once; one that computes a tensor and is not the group's
    next task raises, as the device refuses an update whose tasks do not match the group's in number and
    type."""

    def __init__(self, group: _Group) -> None:
        super().__init__()
        self.group = group
        self.pending = _flat(group.calls)
        self.calls: list[_Call | _Group] = []

    def __torch_dispatch__(self, func: torch._ops.OpOverload, types: Any, args: tuple[Any, ...] = (),
                           kwargs: dict[str, Any] | None = None) -> Any:  # fmt: skip
        kwargs = kwargs or {}
        inputs, _ = tree_flatten((args, kwargs))
        if self.pending and func is self.pending[0].func and not any(_is_fake(value) for value in inputs):
            call, result = self.pending.pop(0).updated(args, kwargs)
            self.calls.append(call)
            return result
        result = func(*args, **kwargs)
        if _recorded(func, args, kwargs, result) is not None:
            expected = self.pending[0].func if self.pending else "no further task"
            raise RuntimeError(f"graph_task_update: {func} is not a task of the captured group (its next task is "
                               f"{expected}); the calls between graph_task_update_begin and graph_task_update_end "
                               "must match the group's captured tasks in number and type")  # fmt: skip
        return result


_updating: list[_Updater] = []


def graph_task_group_begin(stream: object = None) -> None:
    """During a capture, the operators until ``graph_task_group_end`` form a group an update can replace."""
    if _capturing is not None:
        recorder = _capturing[1]
        group = _Group()
        recorder.targets[-1].append(group)
        recorder.targets.append(group.calls)


def graph_task_group_end(stream: object = None) -> TaskGroupHandle:
    if _capturing is None or len(_capturing[1].targets) < 2:
        return TaskGroupHandle()
    recorder = _capturing[1]
    calls = recorder.targets.pop()
    group = next(entry for entry in reversed(recorder.targets[-1]) if isinstance(entry, _Group) and entry.calls is calls)
    return TaskGroupHandle(group)


def graph_task_update_begin(stream: object, handle: TaskGroupHandle) -> None:
    """The group's operators issued until ``graph_task_update_end`` update its tasks: their arguments are
    recorded, and the next replay computes them (nothing runs now; see ``_Updater``)."""
    if handle.group is not None:
        updater = _Updater(handle.group)
        updater.__enter__()
        _updating.append(updater)


def graph_task_update_end(stream: object = None) -> None:
    """See ``graph_task_update_begin``: the group replays the updated tasks from now on."""
    if not _updating:
        return
    updater = _updating.pop()
    updater.__exit__(None, None, None)
    if updater.pending:
        missing = ", ".join(str(call.func) for call in updater.pending)
        raise RuntimeError(f"graph_task_update_end: the update issued {len(updater.calls)} of the captured group's "
                           f"{len(updater.calls) + len(updater.pending)} tasks (missing: {missing}); an update must "
                           "match the group's tasks in number and type")  # fmt: skip
    updater.group.calls = updater.calls


def fused_infer_attention_score_out_graph(stream: object, handle: TaskGroupHandle, event: Any, *args: Any,
                                          **kwargs: Any) -> Any:  # fmt: skip
    """``torch_npu._C._npu_fused_infer_attention_score_out_graph``: FIA's ``.out`` call issued as the update of
    the task group ``handle`` names, on ``stream``, then ``event`` recorded there; returns the ``out``
    tensors, which the next replay writes."""
    graph_task_update_begin(stream, handle)
    torch.ops.npu.npu_fused_infer_attention_score.out(*args, **kwargs)
    graph_task_update_end(stream)
    event.record(stream)
    return tuple(kwargs["out"])


def make_graphed_callables(*args: object, **kwargs: object) -> Any:
    raise NotImplementedError("torch.npu.make_graphed_callables is not emulated: capture with torch.npu.graph(...) "
                              "and replay, or call the module eagerly")  # fmt: skip
