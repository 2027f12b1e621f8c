"""Reaching definitions along explicit paths through one function (or module) body.

A *path* is a set of choices ``(condition, taken)`` for the ``if`` statements and conditional expressions the
search passed (``kvlint.analysis.follow`` adds one more kind: which same-module call a parameter's value came from,
a ``Caller``). Conditions are keyed by their frame and source text, with ``not c``, ``a is not b`` and ``a != b``
keyed as the negation of ``c``, ``a is b`` and ``a == b``: two branches on the same condition are one choice, so
correlated branches give one path each, not the product. A branch that ends in ``return``,
``raise``, ``continue`` or ``break`` cannot reach a later statement, which constrains the path too. Passing
such a guard is recorded only where something can read it (``unread_passes``): unrolled code returns under a
new condition every few calls, and a path per guarded section made every section search and evaluate again
what the one before it had.

Arguments travel together: on a path through a caller, a branch of the callee on one of its parameters
(``if not causal:``, ``if mask is None:``) is the same choice as the caller's condition on the argument it
passed (``is_causal``), and a constant argument (``causal=True``, a default) decides the branch. So
``ref(q, k, v, mask if causal else None, causal)`` into ``if causal: ... atten_mask=attn_mask, sparse_mode=3``
has no path on which mode 3 meets the None mask.

The search walks backwards from the use to the nearest statement that binds the name on each path. Where
the code does not say which binding reaches the use (a loop that may not have run, an ``except`` handler,
a ``with ... as``), the definition is ``UNKNOWN`` and the rules stay silent. The number of paths is bounded:
past ``MAX_PATHS`` the answer is ``UNKNOWN``.
"""

from __future__ import annotations

import ast
import bisect
import functools
import weakref
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field

from astroid import nodes

from kvlint.analysis.memo import tree_cache
from kvlint.analysis.walk import nodes_of, nodes_outside

Key = tuple[nodes.NodeNG, str]
"""A branch condition: its frame and its source text."""

MAX_PATHS = 32

_SCOPES = (nodes.FunctionDef, nodes.ClassDef, nodes.Lambda, nodes.ListComp, nodes.SetComp, nodes.DictComp,
           nodes.GeneratorExp)
_TERMINATORS = (nodes.Return, nodes.Raise, nodes.Continue, nodes.Break)
_NEGATED_OPS = {"is not": "is", "!=": "==", "not in": "in"}


_CHOICE_SETS: dict[frozenset[tuple[Key, object]], tuple[frozenset[tuple[Key, object]], dict[Key, object]]] = (
    tree_cache())
"""One set of choices (and its index by key) for all the paths that made the same choices. Past k guards that
return, a path holds k choices; with one shared set, the paths that remembered values and searches are keyed
by compare in one step, not k."""


@dataclass(frozen=True)
class Path:
    """The branch choices one path made."""

    choices: frozenset[tuple[Key, object]] = frozenset()
    _taken: dict[Key, object] = field(init=False, repr=False, compare=False, hash=False)
    """``choices`` by key (a path takes one branch per key): past k guards that return, a path has k choices,
    and a search asks it for a key at every branch it passes."""

    def __post_init__(self) -> None:
        if self.choices not in _CHOICE_SETS:
            _CHOICE_SETS[self.choices] = (self.choices, dict(self.choices))
        choices, taken = _CHOICE_SETS[self.choices]
        object.__setattr__(self, "choices", choices)
        object.__setattr__(self, "_taken", taken)

    def taken(self, key: Key) -> object:
        return self._taken.get(key)

    def choose(self, key: Key, value: object) -> Path | None:
        """This path extended by a choice, or None when it already took the other branch (also through the
        caller a parameter's value came from: see ``Caller``). Passing a guard nothing reads changes nothing
        (``unread_passes``)."""
        if value is unread_passes(key[0]).get(key):
            return self
        previous = self.taken(key)
        if previous is not None:
            return self if previous == value else None
        path: Path | None = Path(self.choices | {(key, value)})
        if isinstance(value, Caller):
            for chosen, taken in self.choices:
                if path is not None and chosen[0] is key[0] and not isinstance(taken, Caller):
                    path = value.correlate(path, chosen, taken)
            return path
        caller = self.taken((key[0], CALLER))
        return caller.correlate(path, key, value) if isinstance(caller, Caller) else path

    def merge(self, other: Path) -> Path | None:
        """The path that makes the choices of both, or None when they contradict."""
        merged: Path | None = self
        for key, value in other.choices:
            if (key, value) in merged.choices:
                continue  # choose would change nothing
            merged = merged.choose(key, value)
            if merged is None:
                return None
        return merged

    def passing(self, choices: Mapping[Key, bool]) -> Path | None:
        """This path extended by several choices at once, or None when it took the other branch of one. Only
        for choices that no caller's arguments decide: the path came through no ``Caller`` of their frame. All
        are recorded: the one caller, ``_Block.pass_guards``, leaves out the guards nothing reads."""
        for key in choices.keys() & self._taken.keys():
            if choices[key] != self._taken[key]:
                return None
        return Path(self.choices.union(choices.items()))


EMPTY = Path()

_READERS: list[Callable[[Key], bool]] = []


def reads_choices(reader: Callable[[Key], bool]) -> Callable[[Key], bool]:
    """Registers a module's reader of paths: a predicate true of the conditions whose choices the module reads
    back from ``Path.choices`` (a query length, a causality flag, ``x is None``). A guard's choice that no
    reader wants may go unrecorded (``unread_passes``): a module that reads choices without registering would
    not see it."""
    _READERS.append(reader)
    return reader


_UNREAD: dict[nodes.NodeNG, dict[Key, bool]] = tree_cache()


def unread_passes(frame: nodes.NodeNG) -> dict[Key, bool]:
    """The guards of ``frame`` whose passing nothing reads, each with the choice that passes it. Such a guard
    is an ``if`` that leaves on one branch only, whose condition no other branch of the frame tests, that no
    call of the frame passes on as an argument (which a callee's branch could test: ``Caller.correlate``),
    and that no reader of paths understands (``reads_choices``). Every path that goes on past it made the same
    choice there, and nothing tells that choice apart: recorded, it only gave each of k guarded sections of a
    function its own paths, so that nothing searched or evaluated in one section served the next. The branch
    that leaves is still recorded: a path from a ``return`` inside it cannot also be one past the guard."""
    if frame not in _UNREAD:
        _UNREAD[frame] = _unread_passes(frame)
    return _UNREAD[frame]


def _unread_passes(frame: nodes.NodeNG) -> dict[Key, bool]:
    branches: dict[Key, list[nodes.NodeNG]] = {}
    for branch in nodes_of(frame, (nodes.If, nodes.IfExp)):
        branches.setdefault(condition(branch.test)[0], []).append(branch)
    passed_on = {_shape(argument) for call in nodes_of(frame, nodes.Call)
                 for argument in [*call.args, *(keyword.value for keyword in call.keywords or ())]}
    unread = {}
    for key, tested in branches.items():
        guard = tested[0]
        if (key[0] is not frame or len(tested) != 1 or not isinstance(guard, nodes.If)
                or terminates(guard.body) == terminates(guard.orelse)):
            continue
        if _shape(guard.test) in passed_on or any(reader(key) for reader in _READERS):
            continue
        unread[key] = _guard_pass(guard)[1]
    return unread


def _shape(expression: nodes.NodeNG) -> tuple[str, ...]:
    """A coarse summary of an expression, the same for any two with one condition key (``condition``):
    ``not x.done`` and ``x.done`` are ("attribute", "done"); ``m is None`` and ``m is not None`` are
    ("compare", "name", "m")."""
    while isinstance(expression, nodes.UnaryOp) and expression.op == "not":
        expression = expression.operand
    if isinstance(expression, nodes.Name):
        return ("name", expression.name)
    if isinstance(expression, nodes.Attribute):
        return ("attribute", expression.attrname)
    if isinstance(expression, nodes.Compare):
        return ("compare", *_shape(expression.left))
    return (type(expression).__name__,)


CALLER = "<caller>"
"""The text of the key under which a path records the ``Caller`` of a function."""


@dataclass(frozen=True)
class Caller:
    """The same-module call a function's parameters came from on a path, with what each parameter received
    there (the default when the call omits it; None when the call does not show it). Two Callers are the
    same choice when they are the same call."""

    call: nodes.Call
    arguments: Mapping[str, nodes.NodeNG | None] = field(compare=False, hash=False)

    def correlate(self, path: Path, key: Key, taken: object) -> Path | None:
        """``path`` with the caller's side of the callee's choice ``(key, taken)``, or None when the caller's
        arguments rule that branch out. A condition on something other than one parameter adds nothing."""
        form = _parameter_test(key[1])
        argument = self.arguments.get(form[0]) if form is not None else None
        if argument is None or not isinstance(taken, bool):
            return path
        name, compared = form
        if isinstance(argument, nodes.Const):
            truth = bool(argument.value) if compared is _BARE else argument.value is compared or (
                compared is not None and argument.value == compared)
            return path if truth == taken else None
        if compared is not _BARE:
            return path
        caller_key, polarity = condition(argument)
        return path.choose(caller_key, taken == polarity)


_BARE = object()
"""``_parameter_test`` of a bare name: the condition is the name's truth."""


@functools.lru_cache(maxsize=4096)
def _parameter_test(text: str) -> tuple[str, object] | None:
    """The name a condition tests, and what it is compared to: ``causal`` -> ("causal", _BARE);
    ``mask is None`` -> ("mask", None); ``mode == 3`` -> ("mode", 3); anything else None."""
    try:
        test = ast.parse(text, mode="eval").body
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    if isinstance(test, ast.Name):
        return test.id, _BARE
    if (isinstance(test, ast.Compare) and isinstance(test.left, ast.Name) and len(test.ops) == 1
            and isinstance(test.ops[0], (ast.Is, ast.Eq)) and isinstance(test.comparators[0], ast.Constant)):
        return test.left.id, test.comparators[0].value
    return None


@reads_choices
def _decided_by_callers(key: Key) -> bool:
    """A branch on one parameter, which the argument of the caller a path came through may decide."""
    return _parameter_test(key[1]) is not None


@dataclass(frozen=True)
class Param:
    """The name is a parameter of ``function`` and no statement before the use rebinds it."""

    function: nodes.FunctionDef
    name: str


class _Marker:
    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name


UNKNOWN = _Marker("UNKNOWN")
"""Some binding reaches the use, but the code does not say which."""
OUTER = _Marker("OUTER")
"""Nothing in the frame binds the name before the use: it comes from an enclosing scope or builtins."""
_NOT_FOUND = _Marker("NOT_FOUND")

Definition = nodes.NodeNG | Param | _Marker
"""An ``AssignName``, an ``AugAssign``, an import, a ``def``/``class``, a statement that changes the value in
place (``mutated_name``); or Param, UNKNOWN, OUTER."""


_CONDITIONS: dict[nodes.NodeNG, tuple[Key, bool]] = tree_cache()
"""Every search that passes a branch asks for its key: the source text is written once per test."""


def condition(test: nodes.NodeNG) -> tuple[Key, bool]:
    """The key of a branch condition and whether ``test`` is that key or its negation."""
    if test not in _CONDITIONS:
        _CONDITIONS[test] = _condition(test)
    return _CONDITIONS[test]


def _condition(test: nodes.NodeNG) -> tuple[Key, bool]:
    if isinstance(test, nodes.UnaryOp) and test.op == "not":
        key, value = condition(test.operand)
        return key, not value
    if isinstance(test, nodes.Compare) and len(test.ops) == 1 and test.ops[0][0] in _NEGATED_OPS:
        op, right = test.ops[0]
        text = f"{test.left.as_string()} {_NEGATED_OPS[op]} {right.as_string()}"
        return (test.frame(), text), False
    return (test.frame(), test.as_string()), True


Found = tuple[tuple[Definition, Path], ...]
"""Definitions with their paths; ``_NOT_FOUND`` for the paths on which nothing in the searched statements binds."""


class _Overflow(Exception):
    """More than MAX_PATHS paths: the answer is UNKNOWN."""


_REACHING: dict[tuple[str, nodes.NodeNG, Path], Found] = tree_cache()
"""The rules and the value follower ask for the same name at the same statement many times over (every
call site of a function, every argument that reads ``self.scale``); the search from a statement backwards
is also the tail of the search from every later statement, so every statement searched is remembered."""
_OVERFLOWED: dict[tuple[str, nodes.NodeNG, Path], bool] = tree_cache()
"""The searches that found more than MAX_PATHS paths."""


def reaching_definitions(name: str, use: nodes.NodeNG, path: Path = EMPTY) -> list[tuple[Definition, Path]]:
    """The definitions of ``name`` that reach ``use``, each with the path on which it does."""
    statement = use.statement()
    key = (name, statement, path)
    if key in _OVERFLOWED:
        return [(UNKNOWN, path)]
    try:
        return list(_before(name, statement, path))
    except _Overflow:
        _OVERFLOWED[key] = True
        return [(UNKNOWN, path)]


def _before(name: str, statement: nodes.NodeNG, path: Path) -> Found:
    """Search the statements before ``statement`` in its block, then the blocks around it."""
    key = (name, statement, path)
    if key not in _REACHING:
        owner, fields, index = _position(statement)
        found = _scan(name, owner, fields, index, path) if owner is not None else ((_NOT_FOUND, path),)
        results = [(d, p) for d, p in found if d is not _NOT_FOUND]
        for _, remaining in (item for item in found if item[0] is _NOT_FOUND):
            results.extend(_climb(name, statement, remaining))
        if len(results) > MAX_PATHS:
            raise _Overflow
        _REACHING[key] = tuple(results)
    return _REACHING[key]


@dataclass
class _Block:
    """A statement sequence, and where in it each name is bound."""

    statements: list[nodes.NodeNG]
    binders: dict[str, list[int]]
    """Name -> the positions of the statements that bind it, ascending."""
    guards: list[int]
    """Positions of the ``if`` statements with a branch that always leaves (they constrain every path)."""
    passes: list[tuple[Key, bool]] | None
    """The choice a path makes to get past each guard (the branch that does not leave), in the order of
    ``guards``; None when a path must pass the guards one by one: a guard leaves on both branches, two guards
    test one condition, or a guard's condition belongs to another frame."""
    frame: nodes.NodeNG | None
    """The frame of the guards' conditions."""
    recorded: list[int] = field(default_factory=list)
    """Indices in ``guards`` of the guards whose passing a path records (``unread_passes``: not the others),
    ascending; with ``passes`` only."""

    def previous(self, name: str, end: int) -> int | None:
        """The last position before ``end`` whose statement the search for ``name`` has to look at."""
        candidates = []
        for positions in (self.binders.get(name, ()), self.guards):
            before = bisect.bisect_left(positions, end)
            if before:
                candidates.append(positions[before - 1])
        return max(candidates, default=None)

    def pass_guards(self, name: str, end: int, path: Path) -> tuple[int | None, Path | None] | None:
        """Past every guard between ``end`` and the last statement before it that binds ``name``, in one step:
        that statement's position (None: nothing before ``end`` binds the name) and ``path`` with the guards'
        choices (None when a guard leaves on the branch the path took). A search from each of k guarded
        sections of a function passed the guards before it one at a time: k * k / 2 steps in all.
        None when the guards must be passed one by one (``passes``), or when the path came through a caller
        of this frame, whose arguments may decide a guard (``Caller.correlate``)."""
        positions = self.binders.get(name, ())
        before = bisect.bisect_left(positions, end)
        binder = positions[before - 1] if before else None
        low = 0 if binder is None else bisect.bisect_right(self.guards, binder)
        high = bisect.bisect_left(self.guards, end)
        if low == high:
            return binder, path
        if self.passes is None or isinstance(path.taken((self.frame, CALLER)), Caller):
            return None
        first, last = bisect.bisect_left(self.recorded, low), bisect.bisect_left(self.recorded, high)
        if first == last:
            return binder, path
        return binder, path.passing(dict(self.passes[i] for i in self.recorded[first:last]))


_BLOCKS: dict[tuple[nodes.NodeNG, tuple[str, ...]], _Block] = tree_cache()
_POSITIONS: dict[nodes.NodeNG, dict[int, tuple[str, int]]] = tree_cache()
_SCANS: dict[tuple[str, nodes.NodeNG, tuple[str, ...], int, Path], Found] = tree_cache()
_BLOCK_FIELDS = ("body", "orelse", "handlers", "finalbody")


def _block(owner: nodes.NodeNG, fields: tuple[str, ...]) -> _Block:
    """The statements of ``owner``'s ``fields``, one after the other, indexed once."""
    key = (owner, fields)
    if key not in _BLOCKS:
        statements = [s for f in fields for s in getattr(owner, f, None) or ()]
        binders: dict[str, list[int]] = {}
        guards = []
        for position, statement in enumerate(statements):
            for bound in bound_names(statement):
                binders.setdefault(bound, []).append(position)
            if isinstance(statement, nodes.If) and (terminates(statement.body) or terminates(statement.orelse)):
                guards.append(position)
        passes = [_guard_pass(statements[position]) for position in guards]
        frames = {choice[0][0] for choice in passes if choice is not None}
        one_by_one = None in passes or len(frames) > 1 or len({choice[0] for choice in passes}) < len(passes)
        frame = frames.pop() if len(frames) == 1 else None
        unread = unread_passes(frame) if frame is not None and not one_by_one else {}
        recorded = [i for i, choice in enumerate(passes)
                    if choice is not None and unread.get(choice[0]) is not choice[1]]
        _BLOCKS[key] = _Block(statements, binders, guards, None if one_by_one else passes, frame, recorded)
    return _BLOCKS[key]


_PAST: dict[tuple[nodes.NodeNG, tuple[str, ...], int, Path], Path | None] = tree_cache()


def past_guards(statement: nodes.NodeNG, path: Path) -> Path | None:
    """``path`` extended by the choices that get past the guards before ``statement`` in its block (an ``if``
    that leaves on one branch: reaching ``statement`` took the other), recorded as the search records them
    (``_Block.pass_guards``); None when ``path`` took a guard's leaving branch, or a guard leaves on both.
    A guard whose condition reads a name bound again before ``statement`` says nothing there (conditions are
    keyed by their text). Remembered per block position and path: a helper's returns are asked for once per
    value wanted."""
    owner, fields, position = _position(statement)
    if owner is None:
        return path
    block = _block(owner, fields)
    passed = bisect.bisect_left(block.guards, position)
    if not passed:
        return path
    key = (owner, fields, position, path)
    if key not in _PAST:
        _PAST[key] = _past_guards(block, passed, position, path)
    return _PAST[key]


def _past_guards(block: _Block, passed: int, end: int, path: Path) -> Path | None:
    unread_left_out = block.passes is not None and not isinstance(path.taken((block.frame, CALLER)), Caller)
    recorded = frozenset(block.recorded) if unread_left_out else None
    choices: dict[Key, bool] = {}
    for index, position in enumerate(block.guards[:passed]):
        guard = block.statements[position]
        choice = _guard_pass(guard)
        if choice is None:
            return None  # both branches leave: nothing after the guard is reached
        if (recorded is not None and index not in recorded) or _rebound(block, guard, position, end):
            continue
        if choices.setdefault(*choice) != choice[1]:
            return None  # two guards on one condition leave on opposite branches
    if not any(isinstance(path.taken((frame, CALLER)), Caller) for frame in {key[0] for key in choices}):
        return path.passing(choices)
    for key, taken in choices.items():  # one by one: a caller's arguments may decide a guard
        extended = path.choose(key, taken)
        if extended is None:
            return None
        path = extended
    return path


def _rebound(block: _Block, guard: nodes.If, position: int, end: int) -> bool:
    """A name the guard's condition reads is bound again between the guard and position ``end``."""
    for name in nodes_of(guard.test, nodes.Name):
        bound = block.binders.get(name.name, ())
        if bisect.bisect_right(bound, position) < bisect.bisect_left(bound, end):
            return True
    return False


def _guard_pass(guard: nodes.If) -> tuple[Key, bool] | None:
    """The choice of the branch of a guard that does not leave; None when both branches leave."""
    if terminates(guard.body) and terminates(guard.orelse):
        return None
    key, polarity = condition(guard.test)
    return key, (not polarity) if terminates(guard.body) else polarity


def _position(statement: nodes.NodeNG) -> tuple[nodes.NodeNG | None, tuple[str, ...], int]:
    """The block (owner and field) that holds ``statement``, and its position there."""
    parent = statement.parent
    if parent not in _POSITIONS:
        _POSITIONS[parent] = {
            id(s): (f, i) for f in _BLOCK_FIELDS if isinstance(getattr(parent, f, None), list)
            for i, s in enumerate(getattr(parent, f))
        }
    where = _POSITIONS[parent].get(id(statement))
    return (None, (), 0) if where is None else (parent, (where[0],), where[1])


def _bound_in(owner: nodes.NodeNG, field: str) -> dict[str, list[int]]:
    """The names bound by the statements of ``owner``'s ``field`` (as keys)."""
    return _block(owner, (field,)).binders


def _scan(name: str, owner: nodes.NodeNG, fields: tuple[str, ...], end: int, path: Path) -> Found:
    """Search the statements before position ``end`` of a block backwards, looking only at those that bind
    ``name`` or may leave; ``_NOT_FOUND`` for the paths on which nothing binds. Every state of the search
    (a position and the one path still searched) is remembered with what the rest of the search found."""
    block = _block(owner, fields)
    found: list[tuple[Definition, Path]] = []
    states: list[tuple[tuple[str, nodes.NodeNG, tuple[str, ...], int, Path], int]] = []
    current, position = path, end
    while True:
        key = (name, owner, fields, position, current)
        if key in _SCANS:
            found.extend(_SCANS[key])
            break
        states.append((key, len(found)))
        passed = block.pass_guards(name, position, current)
        if passed is None:
            position = block.previous(name, position)
        else:
            position, after_guards = passed
            if after_guards is None:
                break
            current = after_guards
        if position is None:
            found.append((_NOT_FOUND, current))
            break
        pending = []
        for definition, extended in _search_statement(name, block.statements[position], current):
            if definition is _NOT_FOUND:
                pending.append(extended)
            else:
                found.append((definition, extended))
        if len(found) + len(pending) > MAX_PATHS:
            raise _Overflow
        if len(pending) != 1:
            for branch in pending:
                found.extend(_scan(name, owner, fields, position, branch))
            break
        current = pending[0]
    if len(found) > MAX_PATHS:
        raise _Overflow
    for key, already in states:
        _SCANS[key] = tuple(found[already:])
    return _SCANS[states[0][0]] if states else tuple(found)


def _search_statement(name: str, statement: nodes.NodeNG, path: Path) -> Found:
    if isinstance(statement, nodes.If):
        return _search_if(name, statement, path)
    if name not in bound_names(statement):
        return ((_NOT_FOUND, path),)
    if isinstance(statement, (nodes.FunctionDef, nodes.ClassDef, nodes.Import, nodes.ImportFrom, nodes.AugAssign)):
        return ((statement, path),)
    if mutated_name(statement) == name:
        return ((statement, path),)
    if isinstance(statement, (nodes.Assign, nodes.AnnAssign)):
        targets = [n for n in nodes_of(statement, (nodes.AssignName, nodes.AssignAttr)) if target_name(n) == name]
        assigned = [t for t in targets if t.parent is statement or isinstance(t.parent, (nodes.Tuple, nodes.List))]
        return ((assigned[-1] if len(assigned) == len(targets) else UNKNOWN, path),)
    if isinstance(statement, nodes.With) and not any(
        name in _names_in(target) for _, target in statement.items if target is not None
    ):
        return _scan(name, statement, ("body",), len(statement.body), path)
    if isinstance(statement, nodes.Try) and not any(name in bound_names(h) for h in statement.handlers):
        fields = ("body", "orelse", "finalbody")
        return _scan(name, statement, fields, len(_block(statement, fields).statements), path)
    return ((UNKNOWN, path),)


def _search_if(name: str, statement: nodes.If, path: Path) -> Found:
    binds = name in bound_names(statement)
    if not binds and not terminates(statement.body) and not terminates(statement.orelse):
        return ((_NOT_FOUND, path),)
    key, polarity = condition(statement.test)
    results: list[tuple[Definition, Path]] = []
    for taken, branch in ((True, "body"), (False, "orelse")):
        block = getattr(statement, branch)
        extended = path.choose(key, taken == polarity)
        if extended is None or terminates(block):
            continue
        if binds and name in _bound_in(statement, branch):
            results.extend(_scan(name, statement, (branch,), len(block), extended))
        else:
            results.append((_NOT_FOUND, extended))
    return tuple(results)


def _climb(name: str, statement: nodes.NodeNG, path: Path) -> Found:
    """Nothing binds ``name`` before ``statement`` in its block: continue in the enclosing statement."""
    parent = statement.parent
    if isinstance(parent, nodes.FunctionDef):
        arguments = parent.args
        if name in {a.name for a in arguments.posonlyargs + arguments.args + arguments.kwonlyargs}:
            return ((Param(parent, name), path),)
        if name in (arguments.vararg, arguments.kwarg):
            return ((UNKNOWN, path),)
        return ((OUTER, path),)
    if isinstance(parent, (nodes.Module, nodes.ClassDef)) or parent is None:
        return ((OUTER, path),)
    _, fields, _ = _position(statement)
    if isinstance(parent, nodes.If):
        key, polarity = condition(parent.test)
        extended = path.choose(key, (fields == ("body",)) == polarity)
        return () if extended is None else _before(name, parent, extended)
    if isinstance(parent, (nodes.For, nodes.While)):
        loop_binds = name in _bound_in(parent, "body") or (
            isinstance(parent, nodes.For) and name in _names_in(parent.target)
        )
        return ((UNKNOWN, path),) if loop_binds else _before(name, parent, path)
    if isinstance(parent, nodes.ExceptHandler):
        if parent.name is not None and parent.name.name == name:
            return ((UNKNOWN, path),)
        try_statement = parent.parent
        if name in _bound_in(try_statement, "body"):
            return ((UNKNOWN, path),)
        return _before(name, try_statement, path)
    if isinstance(parent, nodes.Try):
        if fields == ("orelse",):
            found = _scan(name, parent, ("body",), len(parent.body), path)
            results = [(d, p) for d, p in found if d is not _NOT_FOUND]
            for _, remaining in (item for item in found if item[0] is _NOT_FOUND):
                results.extend(_before(name, parent, remaining))
            return tuple(results)
        if fields == ("finalbody",) and (
            name in _bound_in(parent, "body") or any(name in bound_names(h) for h in parent.handlers)
        ):
            return ((UNKNOWN, path),)
        return _before(name, parent, path)
    if isinstance(parent, nodes.With):
        return _before(name, parent, path)
    return ((UNKNOWN, path),)


def terminates(block: list[nodes.NodeNG]) -> bool:
    """True when the block always leaves: its last statement returns, raises, continues or breaks."""
    return bool(block) and isinstance(block[-1], _TERMINATORS)


_BOUND: weakref.WeakKeyDictionary[nodes.NodeNG, frozenset[str]] = weakref.WeakKeyDictionary()


def bound_names(statement: nodes.NodeNG) -> frozenset[str]:
    """The names a statement binds in its own scope (nested functions, classes and comprehensions aside),
    attributes of plain names included (``self.mask``)."""
    cached = _BOUND.get(statement)
    if cached is None:
        cached = frozenset(_walk_bindings(statement))
        _BOUND[statement] = cached
    return cached


def mutated_name(statement: nodes.NodeNG) -> str | None:
    """The local name a statement changes in place: ``x.masked_fill_(...)``, ``x[i] = v``, ``x[i] += v``."""
    target = None
    if isinstance(statement, nodes.Expr) and isinstance(statement.value, nodes.Call):
        func = statement.value.func
        if isinstance(func, nodes.Attribute) and func.attrname.endswith("_") and not func.attrname.startswith("_"):
            target = func.expr
    elif isinstance(statement, nodes.Assign) and len(statement.targets) == 1:
        target = statement.targets[0].value if isinstance(statement.targets[0], nodes.Subscript) else None
    elif isinstance(statement, nodes.AugAssign) and isinstance(statement.target, nodes.Subscript):
        target = statement.target.value
    return target.name if isinstance(target, nodes.Name) else None


def target_name(target: nodes.NodeNG) -> str | None:
    """The name an assignment target binds: ``x``, or ``self.x`` for an attribute of a plain name."""
    if isinstance(target, nodes.AssignName):
        return target.name
    if isinstance(target, nodes.AssignAttr) and isinstance(target.expr, nodes.Name):
        return f"{target.expr.name}.{target.attrname}"
    return None


_BINDERS = (nodes.AssignName, nodes.AssignAttr, nodes.Import, nodes.ImportFrom, nodes.Expr, nodes.Assign,
            nodes.AugAssign)
"""The nodes that may bind a name in their scope: targets, imports, and the statements ``mutated_name`` reads."""


def _walk_bindings(statement: nodes.NodeNG) -> Iterator[str]:
    if isinstance(statement, (nodes.FunctionDef, nodes.ClassDef)):
        yield statement.name
        return
    for node in nodes_outside(statement, _BINDERS, _SCOPES):
        mutated = mutated_name(node)
        if mutated is not None:
            yield mutated
        if isinstance(node, (nodes.Import, nodes.ImportFrom)):
            for imported, alias in node.names:
                yield (alias or imported).split(".")[0]
        elif isinstance(node, (nodes.AssignName, nodes.AssignAttr)) and target_name(node) is not None:
            yield target_name(node)


def _names_in(target: nodes.NodeNG) -> frozenset[str]:
    return frozenset(n.name for n in nodes_of(target, nodes.AssignName))
