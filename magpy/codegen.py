"""Guard and mock generation (paper §4.2, Algorithm 1) as readable Python source.

The guard loads every value the run read from outside, by its RefGraph path, and checks
it: type and value for scalars, metadata for tensors (one ``TensorGuards`` call for all of
them), identity for functions, classes and modules, length/keys for containers whose
structure was read, aliases.  On success it returns the loaded values the mock needs
(graph inputs first) and its *stamp*, else ``None``.  Guards never call the user's code.
A value that cannot be loaded any more (a deleted attribute) makes a miss; a NameError is
the guard's own bug, raised for the cache to fall back on (not a miss forever after).

Big programs read thousands of values (every module of a ResNet, its hooks, its
hyper-parameters), nearly all through dicts that do not change between calls.  So each
guard also has a *fast* form, made from the stamp of the last full guard that passed: it
checks that those dicts still have the same version tags (PEP 509) and then knows every
object read through them without loading or checking it again; only tensors' metadata,
grad mode, list items, cells and arguments are checked each time.  When the fast guard
fails, the full guard decides (and stamps anew).

The mock runs the compiled graph, then reproduces the final program state: pre-existing
objects that changed are updated in place (so aliases held elsewhere see the change), new
objects are built, and the return value has the structure eager returned.  It does so in two
phases: first everything that can fail (the graph, building new objects, which may run a
class's ``__reduce__`` state code), then the in-place updates of pre-existing objects, plain
stores into their dicts, lists and cells.  So a mock that fails has left the program's Python
state as it was, and the cache can run the call eagerly instead (see ``cache.py``).

Values are written into generated source as literals only when ``repr`` gives back the same
value of the same type (ints, strs, bytes, finite floats); everything else (numpy scalars,
enums, NaN, tuples of those ...) is referenced as a named constant of the namespace.
"""
from __future__ import annotations

import collections
import copyreg
import gc
import keyword
import linecache
import math
import numbers
import operator
import types
from dataclasses import dataclass, field

import torch
from torch._C._dynamo.guards import GlobalStateGuard, TensorGuards

from magpy.errors import CaptureError
from magpy.monitor import bytecode, generators
from magpy.monitor.protocols import NULL, type_lookup
from magpy.refgraph.graph import (
    ARG,
    ATTR,
    CELL,
    CONST,
    DEREF,
    DICT,
    ITEM,
    KWARG,
    VAR,
    Kind,
    RefGraph,
    dict_items,
    is_immutable,
)

_LITERAL = (int, str, bool, type(None), bytes, float)
_MAX_LITERAL_BITS = 4096   # repr() refuses ints of more than 4300 digits (sys.set_int_max_str_digits)
_DICT_GETITEM = dict.__dict__["__getitem__"]
_DICT_VERSION = bytecode.DICT_VERSION
_OBJECT_GETATTRIBUTE = object.__dict__["__getattribute__"]
_TYPE_GETATTRIBUTE = type.__dict__["__getattribute__"]


class MockCommitError(Exception):
    """A mock failed while updating pre-existing objects in place, so the program's state is
    partly updated; ``__cause__`` is the error."""


@dataclass
class Generated:
    guard_source: str
    mock_source: str | None
    namespace: dict
    graph_outputs: list = field(default_factory=list)   # tensors, in graph output order
    fast_source: str | None = None   # defines make_fast(*stamp) -> fast guard; None: no fast path
    lone_result: bool = False        # the return value is a new object the final state holds nowhere else


class _Names:
    """Constants referenced by generated code, named K0, K1 ... (identity-unique)."""

    def __init__(self, ns):
        self.ns = ns
        self._ids = {}   # the namespace keeps each constant alive, so ids stay unique

    def const(self, value, hint="K") -> str:
        name = self._ids.get(id(value))
        if name is None:
            name = f"{hint}{len(self._ids)}"
            self._ids[id(value)] = name
            self.ns[name] = value
        return name


def generate(refgraph: RefGraph, recorder, result, nargs: int, kwarg_names: tuple, broken: bool,
             new_functions: set) -> Generated:
    """Guard source (and, unless the run broke, mock source) for one monitor run."""
    ns = {"__builtins__": __builtins__, "SAME": same_value, "DICT_VERSION": _DICT_VERSION,
          "GET_DICT": operator.attrgetter("__dict__"), "IS": operator.is_, "CLASS_DICT": _class_dict,
          "FUNCTION": types.FunctionType, "CELL": types.CellType, "COMMIT_FAILED": MockCommitError}
    names = _Names(ns)
    mock_lines = []
    refs = set()
    outputs = []
    lone = False
    if not broken:
        writer = _MockWriter(refgraph, recorder, names, refs, outputs, new_functions)
        mock_lines = writer.write(result)
        lone = writer.lone(result)
    inputs = [sn for sn, _ in recorder.inputs] if not broken else []
    env = [_var(sn) for sn in inputs]
    env += [_var(refgraph.nodes[i]) for i in sorted(refs) if _var(refgraph.nodes[i]) not in env]
    needed = refs | {sn.id for sn in inputs}
    guard_lines, fast_lines = _GuardWriter(refgraph, names, needed).write(nargs, kwarg_names, env)
    guard_src = "\n".join(guard_lines)
    fast_src = None if fast_lines is None else "\n".join(fast_lines)
    mock_src = None
    if not broken:
        head = [f"def mock({', '.join(['env'])}):"]
        if env:
            head.append(f"    {', '.join(env)}{',' if len(env) == 1 else ''} = env")
        if recorder.op_count and outputs:
            ins = ", ".join(_var(sn) for sn in inputs)
            head.append(f"    out = GRAPH({ins})")
        elif recorder.op_count:
            head.append(f"    GRAPH({', '.join(_var(sn) for sn in inputs)})")
        mock_src = "\n".join(head + mock_lines)
    return Generated(guard_src, mock_src, ns, outputs, fast_src, lone)


def compile_source(src: str, ns: dict, name: str, tag: str):
    """Define the function ``name`` from generated ``src`` (kept in linecache for tracebacks)."""
    filename = f"<magpy {tag}>"
    linecache.cache[filename] = (len(src), None, src.splitlines(True), filename)
    exec(compile(src, filename, "exec"), ns)
    return ns[name]


def _var(sn) -> str:
    return f"v{sn.id}"


# --------------------------------------------------------------------------- guard
class _GuardWriter:
    """Writes the full guard and, from the same per-node lines, the fast guard (see
    :func:`_fast_plan`)."""

    def __init__(self, g, names, needed):
        self.g, self.names, self.needed = g, names, needed

    def write(self, nargs, kwarg_names, env):
        g = self.g
        for node in g.nodes[1:]:
            if node.read or node.absent or node.struct:
                self.needed.add(node.id)
            for parent, _, _ in node.aliases:
                self.needed.add(parent.id)
                self.needed.add(node.id)
        # Every needed node needs its ancestors loaded first.
        for nid in sorted(self.needed):
            p = g.nodes[nid].parent
            while p is not None and p.id and p.id not in self.needed:
                self.needed.add(p.id)
                p = p.parent
        nodes = [n for n in g.nodes[1:] if n.id in self.needed]
        kw = f" or tuple(kwargs) != {tuple(kwarg_names)!r}" if kwarg_names else " or kwargs"
        head = [f"if len(args) != {nargs}{kw}: return None"]
        tensors = [n for n in nodes if n.kind is Kind.TENSOR and n.read]
        tail = []
        if tensors:
            tg = TensorGuards(*[n.value for n in tensors], tensor_check_names=[_var(n) for n in tensors],
                              dynamic_dims_sizes=[list(n.value.size()) for n in tensors],
                              dynamic_dims_strides=[list(n.value.stride()) for n in tensors])
            names = ", ".join(_var(n) for n in tensors)
            tail.append(f"if not {self.names.const(tg, 'TENSORS')}.check({names}): return None")
        state = self.names.const(GlobalStateGuard(), "GLOBAL_STATE")   # grad mode, autocast ...
        tail.append(f"if not {state}.check(): return None")
        ret = f"({', '.join(env)}{',' if len(env) == 1 else ''})"

        body, relations = [], []
        for node in nodes:
            body.append(f"{_var(node)} = {self.path(node)}")
            checks = self.checks(node)
            if checks:
                body.append(f"if not ({' and '.join(checks)}): return None")
            relations += self.relations(node)
        if relations:   # aliasing checks: once every node involved is loaded
            body.append(f"if not ({' and '.join(relations)}): return None")
        plan = _fast_plan(g, nodes) if _DICT_VERSION is not None else None
        stamp = "()" if plan is None else f"({''.join(_var(n) + ', ' for n in plan.stamped)})"
        full = ["def guard(args, kwargs):", "  try:"]
        full += ["    " + line for line in head + body + tail + [f"return {ret}, {stamp}"]]
        full += ["  except NameError:", "    raise", "  except Exception:", "    return None"]
        fast = None if plan is None else self.write_fast(plan, nodes, head, tail, ret)
        return full, fast

    def write_fast(self, plan, nodes, head, tail, ret):
        """The fast guard: a closure over the objects and dict versions the last passing full
        guard saw.  Objects reached from those through unchanged dicts are those objects."""
        def stamped(n):   # known nodes keep their names; pinned ones are loaded into vN
            return _var(n) if n.id in plan.known else f"s{n.id}"

        out = [f"def make_fast({', '.join(stamped(n) for n in plan.stamped)}):"]
        body = []
        if plan.versioned:
            dicts = ", ".join(_dict_expr(n, stamped(n)) for n in plan.versioned)
            out.append(f"    DICTS = ({dicts},)")
            out.append("    VERSIONS = list(map(DICT_VERSION, DICTS))")
            body.append("if VERSIONS != list(map(DICT_VERSION, DICTS)): return None")
            owners = [n for n in plan.versioned if _owns_dict(n.value)]
            if owners:
                # An object's __dict__ can be replaced wholesale without touching the old one.
                out.append(f"    OWNERS = ({', '.join(stamped(n) for n in owners)},)")
                out.append("    OWNED = tuple(map(GET_DICT, OWNERS))")
                body.append("if not all(map(IS, map(GET_DICT, OWNERS), OWNED)): return None")
        relations = []
        for node in nodes:
            v = _var(node)
            if node.id in plan.known:
                checks = self.kept_checks(node, plan)
            else:
                body.append(f"{v} = {self.path(node)}")
                checks = ([f"{v} is s{node.id}"] + self.kept_checks(node, plan) if node.id in plan.pinned
                          else self.checks(node))
            if checks:
                body.append(f"if not ({' and '.join(checks)}): return None")
            relations += [r for r, holds in zip(self.relations(node), self.relations_held(node, plan))
                          if not holds]
        if relations:
            body.append(f"if not ({' and '.join(relations)}): return None")
        out.append("    def fast(args, kwargs):")
        out.append("      try:")
        out += ["        " + line for line in head + body + tail + [f"return {ret}"]]
        out += ["      except NameError:", "        raise", "      except Exception:", "        return None",
                "    return fast"]
        return out

    def kept_checks(self, node, plan) -> list[str]:
        """Checks on a known object that its identity and unchanged dicts do not imply."""
        if node.kind is Kind.OBJECT and node.read:
            # ``obj.__class__ = Other`` changes neither the object nor its dict.
            return self.read_checks(node) + self._kept_shape_checks(node, plan)
        return self._kept_shape_checks(node, plan)

    def _kept_shape_checks(self, node, plan) -> list[str]:
        if node.id in plan.versioned_ids:
            value = node.value
            if isinstance(value, collections.OrderedDict) and node.struct and len(node.snapshot) > 1:
                # move_to_end reorders an OrderedDict without a new dict version.
                return [f"tuple({_var(node)}) == {self.literal(tuple(node.snapshot))}"]
            return []
        return self.shape_checks(node)

    def relations_held(self, node, plan) -> list[bool]:
        """For each of ``relations(node)``: whether the fast guard's premises imply it."""
        a = plan.anchored
        held = [node.id in a and parent.id in a and _stable_step(parent, rel, key) is not None
                for parent, rel, key in node.aliases]
        held += [node.id in a and other.id in a for other in node.distinct if other.id in self.needed]
        return held

    def path(self, node) -> str:
        return self._step(node.parent, node.rel, node.key, node.value)

    def _step(self, parent, rel, key, value) -> str:
        if rel == ARG:
            return f"args[{key}]"
        if rel == KWARG:
            return f"kwargs[{key!r}]"
        if rel == CONST:
            return self.names.const(value)
        p = _var(parent)
        if rel == ATTR:
            if not _plain_attr(parent.value, key):
                return f"{p}.__dict__[{key!r}]"
            if key.isidentifier() and not keyword.iskeyword(key):
                return f"{p}.{key}"
            return f"getattr({p}, {key!r})"   # setattr() takes any string: "odd name", "class"
        if rel == DICT:
            return f"{p}.__dict__[{key!r}]"
        if rel == ITEM:
            return f"{p}[{self.literal(key)}]"
        if rel == CELL:
            return f"{p}.cell_contents"
        if rel == VAR:
            return f"{p}.get()"
        if rel == DEREF:
            return f"{p}()"   # a weakref's call runs no Python code
        raise CaptureError(f"no path step for relation {rel!r}")

    def checks(self, node) -> list[str]:
        return self.read_checks(node) + self.shape_checks(node)

    def read_checks(self, node) -> list[str]:
        """What the program saw of the value itself: type and value, or identity."""
        v = _var(node)
        k = node.kind
        if not node.read:
            return []
        if k is Kind.VALUE:
            return self.value_check(v, node.value)
        if k in (Kind.STATIC, Kind.OPAQUE):
            return [f"{v} is {self.names.const(node.value)}"]
        if k in (Kind.LIST, Kind.TUPLE, Kind.DICT, Kind.SET, Kind.OBJECT):
            return [f"type({v}) is {self.names.const(type(node.value))}"]
        return []

    def shape_checks(self, node) -> list[str]:
        """What the program saw of a container's structure, and the names it found missing."""
        v = _var(node)
        out = []
        if node.struct:
            snap = node.snapshot
            k = node.kind
            if k in (Kind.LIST, Kind.TUPLE):
                out.append(f"len({v}) == {len(snap)}")
            elif k is Kind.DICT:
                out.append(f"tuple({v}) == {self.literal(tuple(snap))}")
            elif k is Kind.OBJECT:
                out.append(f"tuple({v}.__dict__) == {self.literal(tuple(snap))}")
            elif k is Kind.SET and all(is_immutable(x) for x in snap):
                out.append(f"{v} == {self.names.const(frozenset(snap))}")
            elif k is Kind.SET:
                # Members hashed by identity: the same objects (kept alive by the constant, so
                # their ids stay theirs) in the same iteration order, compared without __eq__.
                out.append(f"len({v}) == {len(snap)} and all(map(IS, {v}, {self.names.const(tuple(snap))}))")
        for rel, key in node.absent:
            if rel == ATTR:
                out.append(f"{key!r} not in {v}.__dict__")
            else:
                out.append(f"{self.literal(key)} not in {v}")
        return out

    def relations(self, node) -> list[str]:
        v = _var(node)
        out = [f"{self._step(parent, rel, key, node.value)} is {v}" for parent, rel, key in node.aliases]
        out += [f"{v} is not {_var(other)}" for other in node.distinct if other.id in self.needed]
        return out

    def value_check(self, v, value) -> list[str]:
        t = type(value)
        if value is None or t is bool or value is Ellipsis:
            return [f"{v} is {value!r}"]
        if t is float and math.isnan(value):
            return [f"type({v}) is float", f"{v} != {v}"]
        if _is_literal(value) and not (t is float and value == 0):   # -0.0 == 0.0: SAME tells them apart
            return [f"type({v}) is {t.__name__}", f"{v} == {value!r}"]
        if t is torch.device:
            return [f"{v} == {self.names.const(value)}"]
        if t in (torch.dtype, torch.layout, torch.memory_format):
            return [f"{v} is {self.names.const(value)}"]
        c = self.names.const(value)
        return [f"({v} is {c} or SAME({v}, {c}))"]   # the same tuple object is the common case

    def literal(self, key) -> str:
        if _is_literal(key) or (type(key) is tuple and all(_is_literal(x) for x in key)):
            return repr(key)
        return self.names.const(key)


def _is_literal(v) -> bool:
    """Is ``repr(v)`` Python source giving back ``v``, of its own type?  (Not for NaN,
    infinities, numpy scalars, enums: those are named constants of the namespace.)"""
    t = type(v)
    if t is float:
        return math.isfinite(v)
    if t is int:
        return v.bit_length() <= _MAX_LITERAL_BITS
    return t in _LITERAL


def _plain_attr(obj, name) -> bool:
    """``obj.name`` reads the instance ``__dict__`` without running Python code."""
    tp = type(obj)
    if isinstance(obj, types.ModuleType):
        return True
    if isinstance(obj, type):
        # type.__getattribute__ reads the class's MRO dicts and the metaclass's C getsets
        # (``__name__``, ``__qualname__``); the rules guard Python descriptors of those apart.
        return type_lookup(tp, "__getattribute__") is _TYPE_GETATTRIBUTE
    if type_lookup(tp, "__getattribute__") is not _OBJECT_GETATTRIBUTE:
        return False
    raw = type_lookup(tp, name)
    # C getset/member descriptors (``fn.__defaults__``, slots) run no Python code.
    return raw is NULL or type_lookup(type(raw), "__set__") is NULL \
        or type(raw) in (types.GetSetDescriptorType, types.MemberDescriptorType)


@dataclass
class _FastPlan:
    known: set        # ids of nodes the fast guard does not load: the stamped objects
    pinned: set       # ids of nodes it loads and checks to be the stamped objects
    versioned: list   # nodes whose dict's version it checks
    stamped: list     # known and pinned nodes, in load order: the full guard's stamp

    def __post_init__(self):
        # Asked once per guard node while writing: computed once.
        self.anchored = self.known | self.pinned
        self.versioned_ids = {n.id for n in self.versioned}


def _fast_plan(g: RefGraph, nodes: list) -> _FastPlan:
    """Which guard nodes a dict-version check makes known.

    A node read through an unchanged dict (an object's ``__dict__``, a dict, a class's
    dict) of a known object is the object read last time; so is a tuple's item.  Other
    steps (list items, cells, ``fn.__defaults__``, a module's globals, which scripts write
    all the time) are loaded again; what they give is pinned by identity when it can have
    children, else checked in full.  Nothing under an argument that is not itself pinned
    is known: arguments are new objects on every call.
    """
    known, pinned, versioned = set(), set(), {}
    for n in nodes:
        p = n.parent
        if n.rel == CONST:
            known.add(n.id)
        elif n.rel in (ARG, KWARG):
            if n.kind in (Kind.STATIC, Kind.OBJECT):
                pinned.add(n.id)
        elif p.id in known or p.id in pinned:
            step = _stable_step(p, n.rel, n.key)
            if step is not None:
                known.add(n.id)
                if step == "versioned":
                    versioned[p.id] = p
            elif not is_immutable(n.value) and n.kind is not Kind.TENSOR:
                pinned.add(n.id)
        if (n.id in known or n.id in pinned) and (n.struct or n.absent) and _versionable(n):
            versioned[n.id] = n
    anchored = known | pinned
    for n in nodes:
        for parent, rel, key in n.aliases:
            if n.id in anchored and parent.id in anchored and _stable_step(parent, rel, key) == "versioned":
                versioned[parent.id] = parent
    return _FastPlan(known, pinned, sorted(versioned.values(), key=lambda n: n.id),
                     [n for n in nodes if n.id in anchored])


def _stable_step(parent, rel, key) -> str | None:
    """"fixed" if the step from a known parent gives the same object while the parent is the
    same, "versioned" if it does while the parent's dict is unchanged, else None."""
    pv = parent.value
    if rel == ITEM:
        if parent.kind is Kind.TUPLE or (parent.kind is Kind.VALUE and type(pv) is tuple):
            return "fixed"
        return "versioned" if parent.kind is Kind.DICT and _versionable(parent) else None
    if rel == DICT:
        return "versioned" if isinstance(pv, type) else None
    if rel == ATTR and _owns_dict(pv):
        raw = type_lookup(type(pv), key)   # an instance-dict read, not a data descriptor
        return "versioned" if raw is NULL or type_lookup(type(raw), "__set__") is NULL else None
    return None


def _versionable(node) -> bool:
    v = node.value
    if node.kind is Kind.DICT:
        # Globals dicts (CONST) are written by every top-level statement of a script.
        return node.rel != CONST and type_lookup(type(v), "__getitem__") is _DICT_GETITEM
    return isinstance(v, type) or _owns_dict(v)


def _owns_dict(v) -> bool:
    return not isinstance(v, (type, types.ModuleType)) and type(getattr(v, "__dict__", None)) is dict


def _dict_expr(node, name: str) -> str:
    if node.kind is Kind.DICT:
        return name
    if isinstance(node.value, type):
        return f"CLASS_DICT({name})"
    return f"{name}.__dict__"


def _class_dict(cls) -> dict:
    return gc.get_referents(cls.__dict__)[0]   # the dict behind the mappingproxy


_BY_EQUALITY = frozenset({int, str, bytes, bool, type(None)})


def same_value(a, b) -> bool:
    """Equal values of identical types, all the way down (``(1,) != (1.0,)`` here); NaN is
    the same as NaN, and ``-0.0`` is not ``0.0`` (``1 / x`` tells them apart)."""
    t = type(a)
    if t is not type(b):
        return False
    if t in _BY_EQUALITY:
        return a == b
    if t is float:
        return _same_float(a, b)
    if isinstance(a, (tuple, frozenset)) and not isinstance(a, torch.Size):
        if len(a) != len(b):
            return False
        if isinstance(a, frozenset):
            return a == b
        return all(same_value(x, y) for x, y in zip(a, b))
    if t is slice:
        return same_value((a.start, a.stop, a.step), (b.start, b.stop, b.step))
    if isinstance(a, numbers.Complex) and not isinstance(a, numbers.Integral):
        # floats, complex numbers and numpy's: compare the parts, signs of zeros included
        ca, cb = complex(a), complex(b)
        return _same_float(ca.real, cb.real) and _same_float(ca.imag, cb.imag) and bool(a == b or a != a)
    return a == b


def _same_float(x: float, y: float) -> bool:
    if x != x:
        return y != y
    return x == y and math.copysign(1.0, x) == math.copysign(1.0, y)


# --------------------------------------------------------------------------- mock
class _MockWriter:
    def __init__(self, g: RefGraph, recorder, names: _Names, refs: set, outputs: list, new_functions):
        self.g, self.rec, self.names, self.refs, self.outputs = g, recorder, names, refs, outputs
        self.new_functions = new_functions
        self.lines = []        # phase 1: graph outputs, new objects
        self.commits = []      # phase 2: in-place updates of pre-existing objects
        self._built = {}       # id(new object) -> variable
        self.shared = set()    # ids of new objects referenced more than once
        self._cells = []       # (variable, new cell) whose contents are still to be set
        self._out_index = {}
        self._keep = []

    def write(self, result):
        for node in self.g.mock_nodes():
            self.update(node)
        ret = self.expr(result)
        self.fill_cells()
        commits = []
        if self.commits:
            commits = (["    try:"] + ["    " + line for line in self.commits]
                       + ["    except Exception as e:", "        raise COMMIT_FAILED from e"])
        return self.lines + commits + [f"    return {ret}"]

    def lone(self, v) -> bool:
        """Is ``v`` a new object the final state refers to once (the return value itself)?"""
        return id(v) in self._built and id(v) not in self.shared

    def commit(self, line: str) -> None:
        """An in-place update: written after everything that can fail (module docstring)."""
        self.commits.append(line)

    def load(self, node) -> str:
        self.refs.add(node.id)
        return _var(node)

    # ------------------------------------------------------------------ in-place updates
    def update(self, node):
        v = self.load(node)
        k = node.kind
        snap = node.snapshot
        if k is Kind.LIST:
            now = list(node.value)
            if len(now) >= len(snap) and all(a is b for a, b in zip(now, snap)):
                added = now[len(snap):]
                self.commit(f"    {v}.extend([{', '.join(self.expr(x) for x in added)}])")
            else:
                self.read_all(node)
                self.commit(f"    {v}[:] = [{', '.join(self.expr(x) for x in now)}]")
        elif k is Kind.DICT:
            self.dict_update(node, v, dict_items(node.value), snap, mapping=v)
        elif k is Kind.OBJECT or isinstance(node.value, torch.nn.Module):
            self.commit(f"    d{node.id} = {v}.__dict__")
            self.dict_update(node, v, dict(node.value.__dict__), snap, mapping=f"d{node.id}")
        elif k is Kind.CELL:
            try:
                self.commit(f"    {v}.cell_contents = {self.expr(node.value.cell_contents)}")
            except ValueError:
                self.commit(f"    del {v}.cell_contents")
        elif k is Kind.CONTEXTVAR:
            self.commit(f"    {v}.set({self.expr(node.value.get(None))})")
        elif k is Kind.SET:
            self.read_all(node)
            self.commit(f"    {v}.clear(); {v}.update([{', '.join(self.expr(x) for x in node.value)}])")
        else:
            raise CaptureError(f"cannot reproduce the in-place change of a {type(node.value).__qualname__}")

    def dict_update(self, node, v, now, snap, mapping):
        kept = [key for key in snap if key in now]
        expected = kept + [key for key in now if key not in snap]
        if list(now) == expected:
            for key in snap:
                if key not in now:
                    self.commit(f"    del {mapping}[{self.key(key)}]")
            for key, val in now.items():
                if key not in snap or snap[key] is not val:
                    self.commit(f"    {mapping}[{self.key(key)}] = {self.expr(val)}")
        else:
            self.read_all(node)
            items = ", ".join(f"{self.key(key)}: {self.expr(val)}" for key, val in now.items())
            self.commit(f"    {mapping}.clear(); {mapping}.update({{{items}}})")

    def read_all(self, node):
        # The mock rewrites the whole container, so every initial element must be guarded.
        node.struct = True
        if node.kind is Kind.SET:
            return   # a set's shape check fixes its members themselves
        items = node.snapshot.items() if type(node.snapshot) is dict else enumerate(node.snapshot)
        for key, val in items:
            self.g.child(node, ITEM, key, val)

    def key(self, key) -> str:
        if _is_literal(key):
            return repr(key)
        return self.expr(key)

    # ------------------------------------------------------------------ values
    def expr(self, v) -> str:
        if is_immutable(v):
            return repr(v) if _is_literal(v) else self.names.const(v)
        node = self.g.node_of(v)
        if node is not None:
            return self.load(node)
        if isinstance(v, torch.Tensor):
            return self.tensor(v)
        built = self._built.get(id(v))
        if built is not None:
            self.shared.add(id(v))
            return built
        return self.build(v)

    def tensor(self, t) -> str:
        i = self._out_index.get(id(t))
        if i is None:
            if self.rec.produced(t) is None:
                raise CaptureError("the call leaves behind a tensor of unknown origin "
                                   f"(shape {tuple(t.shape)})")
            i = self._out_index[id(t)] = len(self.outputs)
            self.outputs.append(t)
        return f"out[{i}]"

    def build(self, v) -> str:
        t = type(v)
        if isinstance(v, (types.FunctionType, types.BuiltinFunctionType, type, types.ModuleType,
                          types.MethodDescriptorType, types.WrapperDescriptorType)):
            if isinstance(v, types.FunctionType) and id(v) in self.new_functions:
                return self.function(v)
            return self.names.const(v)
        if t is types.CellType:
            return self.cell(v)
        if generators.is_monitored(v):
            return self.generator(v)
        if isinstance(v, torch.nn.Module):
            raise CaptureError(f"the call leaves behind an nn.Module it created ({t.__qualname__})")
        if t is list:
            return self.bind(v, f"[{', '.join(self.expr(x) for x in v)}]")
        if t is tuple:
            items = ", ".join(self.expr(x) for x in v)
            return f"({items}{',' if len(v) == 1 else ''})"
        if t is dict:
            return self.bind(v, "{" + ", ".join(f"{self.key(k)}: {self.expr(x)}" for k, x in v.items()) + "}")
        if t is set:
            return self.bind(v, f"{{{', '.join(self.expr(x) for x in v)}}}" if v else "set()")
        if isinstance(v, tuple) and hasattr(t, "_fields") and hasattr(t, "_make"):
            return f"{self.names.const(t)}._make(({', '.join(self.expr(x) for x in v)},))"
        if isinstance(v, tuple) and t.__module__ == "torch.return_types":
            return f"{self.names.const(t)}(({', '.join(self.expr(x) for x in v)},))"
        if t is collections.OrderedDict:
            items = ", ".join(f"({self.key(k)}, {self.expr(x)})" for k, x in v.items())
            return self.bind(v, f"{self.names.const(t)}([{items}])")
        return self.reduce(v)

    def function(self, fn) -> str:
        """A function the call created (a closure, a lambda, a generator expression's body),
        made anew from its code, over this call's defaults and closure cells."""
        cells = fn.__closure__
        closure = f"({''.join(self.expr(c) + ', ' for c in cells)})" if cells else "None"
        code = fn.__code__
        name = self.bind(fn, f"FUNCTION({self.names.const(code)}, {self.names.const(fn.__globals__)}, "
                             f"{fn.__name__!r}, {self.expr(fn.__defaults__)}, {closure})")
        extras = {"__kwdefaults__": fn.__kwdefaults__, "__annotations__": fn.__annotations__,
                  "__dict__": fn.__dict__,
                  "__qualname__": fn.__qualname__ if fn.__qualname__ != code.co_qualname else None}
        for attr, value in extras.items():
            if value:
                self.lines.append(f"    {name}.{attr} = {self.expr(value)}")
        return name

    def cell(self, c) -> str:
        """A closure cell the call created.  Its contents are filled in once every new
        object is built: a closure may hold itself (a recursive inner function)."""
        name = self.bind(c, "CELL()")
        self._cells.append((name, c))
        return name

    def fill_cells(self) -> None:
        while self._cells:
            name, c = self._cells.pop()
            try:
                contents = c.cell_contents
            except ValueError:
                continue   # an empty cell (a variable not assigned yet)
            self.lines.append(f"    {name}.cell_contents = {self.expr(contents)}")

    def generator(self, gen) -> str:
        """A generator, coroutine or async generator the call created and returned (or
        stored) before running it: a native one, made by calling its function natively with
        the same arguments, as the program did.  One already started cannot be remade."""
        call = generators.native_call(gen)
        if call is None:
            raise CaptureError(f"the call leaves behind a {gen.kind} it already started "
                               f"({gen.__qualname__}); a running frame cannot be rebuilt")
        fn, args, kwargs = call
        items = [self.expr(a) for a in args]
        if kwargs:
            items.append("**{" + ", ".join(f"{k!r}: {self.expr(x)}" for k, x in kwargs.items()) + "}")
        return self.bind(gen, f"{self.expr(fn)}({', '.join(items)})")

    def bind(self, v, source) -> str:
        name = f"n{len(self._built)}"
        self._built[id(v)] = name
        self._keep.append(v)
        self.lines.append(f"    {name} = {source}")
        return name

    def reduce(self, v) -> str:
        """Build an object of a Python class the way pickle/copy would (``__reduce_ex__``)."""
        try:
            rv = v.__reduce_ex__(4)
        except Exception as e:  # noqa: BLE001 - anything unpicklable
            raise CaptureError(f"cannot rebuild a {type(v).__qualname__} the call created: {e}") from e
        if isinstance(rv, str) or len(rv) < 2:
            return self.names.const(v)
        fn, args = rv[0], rv[1]
        state = rv[2] if len(rv) > 2 else None
        listitems = rv[3] if len(rv) > 3 else None
        dictitems = rv[4] if len(rv) > 4 else None
        if fn is copyreg.__newobj__:
            cls, *rest = args
            k = self.names.const(cls)
            call = f"{k}.__new__({k}{''.join(', ' + self.expr(a) for a in rest)})"
        else:
            call = f"{self.names.const(fn)}({', '.join(self.expr(a) for a in args)})"
        name = self.bind(v, call)
        if state is not None:
            if hasattr(v, "__setstate__"):
                self.lines.append(f"    {name}.__setstate__({self.expr(state)})")
            else:
                # pickle's default: a __dict__ state, or (__dict__ state, __slots__ state).
                dstate, sstate = state if type(state) is tuple else (state, None)
                if dstate:
                    items = ", ".join(f"{self.key(k)}: {self.expr(x)}" for k, x in dstate.items())
                    self.lines.append(f"    {name}.__dict__.update({{{items}}})")
                for k, x in (sstate or {}).items():
                    self.lines.append(f"    setattr({name}, {k!r}, {self.expr(x)})")
        if listitems is not None:
            self.lines.append(f"    {name}.extend([{', '.join(self.expr(x) for x in listitems)}])")
        if dictitems is not None:
            for k, x in dictitems:
                self.lines.append(f"    {name}[{self.key(k)}] = {self.expr(x)}")
        return name
