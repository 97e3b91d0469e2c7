"""The guard (paper §4.2): straight-line Python that loads and checks what the run read.

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

Which nodes it loads is the RefGraph's choice (``RefGraph.guard_nodes``); this module only
writes them.
"""
from __future__ import annotations

import collections
import gc
import keyword
import math
import operator
import types
from dataclasses import dataclass

import torch
from torch._C._dynamo.guards import GlobalStateGuard, TensorGuards

from magpy.capture.monitor import bytecode
from magpy.capture.monitor.protocols import NULL, type_lookup
from magpy.capture.refgraph.graph import (
    ARG,
    ATTR,
    CELL,
    CONST,
    DEREF,
    DICT,
    GETATTR,
    ITEM,
    KWARG,
    LEFT,
    REST,
    VAR,
    Kind,
    RefGraph,
    as_found,
    is_immutable,
    items_left,
)
from magpy.errors import CaptureError
from magpy.records.codegen.source import (
    MAKERS,
    empty_like_meta,
    is_literal,
    same_value,
    tensor_meta,
    value_checks,
    var,
)
from magpy.training import backward

_DICT_GETITEM = dict.__dict__["__getitem__"]
_DICT_VERSION = bytecode.DICT_VERSION
# object's attribute lookup, and the builtin containers' (their own slot wrappers of the same
# C function): reading an instance dict through them runs no Python code.
_GENERIC_GETATTRIBUTES = frozenset(t.__dict__["__getattribute__"] for t in (
    object, dict, list, tuple, set, collections.OrderedDict, collections.defaultdict)
    if "__getattribute__" in t.__dict__)
_TYPE_GETATTRIBUTE = type.__dict__["__getattribute__"]
# What guard code refers to by name.
NAMESPACE = {"SAME": same_value, "DICT_VERSION": _DICT_VERSION, "OWN_DICTS": bytecode.OWN_DICTS,
             "LENGTH_HINT": operator.length_hint, "ITEMS_LEFT": items_left,
             "GET_DICT": operator.attrgetter("__dict__"),
             "IS": operator.is_, "CLASS_DICT": None, "_short": None,
             "MATH": math,   # (the shape check's and the mock's floats computed from lifted ints)
             "math": math}   # (torch's sympy PythonPrinter writes floor and ceil as math.floor ...)


class GuardWriter:
    """Writes the full guard and, from the same per-node lines, the fast guard (see
    :func:`_fast_plan`)."""

    def __init__(self, g, names, needed, entry_state, shapes=None, buffered=None):
        self.g, self.names, self.needed = g, names, needed
        self.entry_state = entry_state   # torch's global state (grad mode ...) where the run began
        self.shapes = shapes             # magpy.graphs.dynamic.Shapes if the run lifted dimensions, else None
        # id of the node of a .grad the mock takes as an accumulation buffer -> the tensor the
        # run had there (backward.buffered_grads): checked by backward.BuffersFit, not the value read.
        self.buffered = buffered or {}
        self.buffers_fit = None

    def checked_tensors(self, nodes) -> list:
        """The tensors whose metadata ``TensorGuards`` checks."""
        return [n for n in nodes if n.kind is Kind.TENSOR and n.read and n.id not in self.buffered]

    def buffers_check(self) -> str | None:
        """``BUFFERS_FIT(v1, v2)`` (``backward.BuffersFit``) of the ``.grad`` the mock takes as
        accumulation buffers: after the checks that tell the records of one program apart
        (the branch a lifted int takes), which are cheaper."""
        if not self.buffered:
            return None
        if self.buffers_fit is None:
            examples = list(self.buffered.values())
            self.buffers_fit = self.names.const(backward.BuffersFit(examples), "BUFFERS_FIT",
                                                ("buffers_fit", [tensor_meta(t) for t in examples]))
        return f"{self.buffers_fit}({', '.join(var(self.g.nodes[i]) for i in self.buffered)})"

    def global_state(self) -> str:
        """The name of the check of torch's global state (grad mode, autocast ...)."""
        state = self.entry_state
        return self.names.const(state, "GLOBAL_STATE", ("global_state", state.__getstate__()))

    def tensor_guards(self, tensors, names) -> str:
        """The name of one check of the tensors' dtype, device, sizes and strides (not the
        lifted sizes)."""
        dims = [self.shapes.sizes_and_strides(n.value) if self.shapes
                else (list(n.value.size()), list(n.value.stride())) for n in tensors]
        found = [as_found(n) for n in tensors]
        recipe = ("tensor_guards", [tensor_meta(t) for t in found], names, [d[0] for d in dims],
                  [d[1] for d in dims])
        return self.names.const(_tensor_guards(found, *recipe[2:]), "TENSORS", recipe)

    def shape_check(self, nodes) -> str | None:
        """``SHAPES(v1, v2)``: the lifted sizes' check, on the tensors holding them (its source
        is written once the graphs are compiled: ``write_shape_check``)."""
        if self.shapes is None or not self.shapes.symbols:
            return None
        by_tensor = {id(n.value): n for n in nodes if n.kind is Kind.TENSOR}
        # A holder is an input tensor, or the RefGraph node of a lifted int argument.
        holders = [var(by_tensor[id(h)]) if isinstance(h, torch.Tensor) else var(h)
                   for h in self.shapes.holders()]
        return f"SHAPES({', '.join(holders)})"

    def write(self, nargs, kwarg_names, env):
        g = self.g
        nodes = g.guard_nodes(self.needed)
        self.needed = {n.id for n in nodes}
        kw = f" or tuple(kwargs) != {tuple(kwarg_names)!r}" if kwarg_names else " or kwargs"
        head = [f"if len(args) != {nargs}{kw}: return None"]
        tensors = self.checked_tensors(nodes)
        tail = []
        if tensors:
            tg = self.tensor_guards(tensors, [var(n) for n in tensors])
            names = ", ".join(var(n) for n in tensors)
            tail.append(f"if not {tg}.check({names}): return None")
        shapes = self.shape_check(nodes)
        if shapes is not None:
            tail.append(f"if not {shapes}: return None")
        buffers = self.buffers_check()
        if buffers is not None:
            tail.append(f"if not {buffers}: return None")
        state = self.global_state()   # grad mode, autocast ...
        tail.append(f"if not {state}.check(): return None")
        ret = f"({', '.join(env)}{',' if len(env) == 1 else ''})"

        body, relations = [], []
        for node in nodes:
            body.append(f"{var(node)} = {self.path(node)}")
            checks = self.checks(node)
            if checks:
                body.append(f"if not ({' and '.join(checks)}): return None")
            relations += self.relations(node)
        if relations:   # aliasing checks: once every node involved is loaded
            body.append(f"if not ({' and '.join(relations)}): return None")
        plan = _fast_plan(g, nodes) if _DICT_VERSION is not None else None
        stamp = "()" if plan is None else f"({''.join(var(n) + ', ' for n in plan.stamped)})"
        full = ["def guard(args, kwargs):", "  try:"]
        full += ["    " + line for line in head + body + tail + [f"return {ret}, {stamp}"]]
        full += ["  except NameError:", "    raise", "  except Exception:", "    return None"]
        fast = None if plan is None else self.write_fast(plan, nodes, head, tail, ret)
        return full, fast

    def write_diagnose(self, nargs, kwarg_names, params) -> list[str]:
        """``diagnose(args, kwargs)``: why the guard fails on a call, in words (the first check
        that fails, with what the record expected and what the call has), else None.  The
        same loads and checks as the guard, in the same order; only run when it failed."""
        nodes = [n for n in self.g.nodes[1:] if n.id in self.needed]
        words = {n.id: path_in_words(n, params) for n in nodes}
        kw = self.names.const(tuple(kwarg_names))
        out = ["def diagnose(args, kwargs):", "  where = 'the arguments'", "  try:",
               f"    if len(args) != {nargs}:",
               f"      return f'{{len(args)}} positional arguments, recorded with {nargs}'",
               f"    if tuple(kwargs) != {kw}:",
               f"      return f'keyword arguments {{tuple(kwargs)}}, recorded with {{{kw}}}'"]
        relations = []
        for node in nodes:
            v, w = var(node), words[node.id]
            out.append(f"    where = {w!r}")
            out.append(f"    {v} = {self.path(node)}")
            checks = self.checks(node)
            if checks:
                expected = _expected_in_words(node)
                why = f"{_brace(w)}: expected {_brace(expected)}, got {{_short({v})}}"
                # (repr: what it names may span lines or hold quotes, a Parameter key's repr)
                out.append(f"    if not ({' and '.join(checks)}): return f{why!r}")
            relations += [(rel, w) for rel in self.relations(node)]
        for rel, w in relations:
            why = f"{w}: no longer the same object as another path to it"
            out.append(f"    if not ({rel}): return {why!r}")
        tensors = self.checked_tensors(nodes)
        if tensors:
            tg = self.tensor_guards(tensors, [words[n.id] for n in tensors])
            loaded = ", ".join(var(n) for n in tensors)
            out.append(f"    why = {tg}.check_verbose({loaded}, "
                       f"tensor_check_names={[words[n.id] for n in tensors]!r})")
            out.append("    if why is not True: return why")
        shapes = self.shape_check(nodes)
        if shapes is not None:
            out.append(f"    if not {shapes}: return 'the lifted sizes break one of: ' + SHAPES.conditions")
        buffers = self.buffers_check()
        if buffers is not None:
            out.append(f"    if not {buffers}: return {_BUFFERS_IN_WORDS!r}")
        state = self.global_state()
        out.append(f"    if not {state}.check(): return 'torch global state: ' + {state}.reason()")
        out += ["    return None", "  except Exception as e:",
                "    return f'{where}: could not be read ({type(e).__name__}: {e})'"]
        return out

    def write_fast(self, plan, nodes, head, tail, ret):
        """The fast guard: a closure over the objects and dict versions the last passing full
        guard saw.  Objects reached from those through unchanged dicts are those objects."""
        def stamped(n):   # known nodes keep their names; pinned ones are loaded into vN
            return var(n) if n.id in plan.known else f"s{n.id}"

        out = [f"def make_fast({', '.join(stamped(n) for n in plan.stamped)}):"]
        body = []
        if plan.versioned:
            owners = [n for n in plan.versioned if _owns_dict(n.value)]
            if owners:
                out.append(f"    OWNERS = ({', '.join(stamped(n) for n in owners)},)")
                if bytecode.OWN_DICTS is not None:   # (before their versions are taken)
                    out.append("    if not OWN_DICTS(OWNERS): return None")
            dicts = ", ".join(_dict_expr(n, stamped(n)) for n in plan.versioned)
            out.append(f"    DICTS = ({dicts},)")
            out.append("    VERSIONS = list(map(DICT_VERSION, DICTS))")
            body.append("if VERSIONS != list(map(DICT_VERSION, DICTS)): return None")
            if owners:
                # An object's __dict__ can be replaced wholesale without touching the old one.
                out.append("    OWNED = tuple(map(GET_DICT, OWNERS))")
                body.append("if not all(map(IS, map(GET_DICT, OWNERS), OWNED)): return None")
        relations = []
        for node in nodes:
            v = var(node)
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
                return [f"tuple({var(node)}) == {self.literal(tuple(node.snapshot))}"]
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
        p = var(parent)
        if rel == ATTR:
            if not _plain_attr(parent.value, key):
                return f"{p}.__dict__[{key!r}]"
            if key.isidentifier() and not keyword.iskeyword(key):
                return f"{p}.{key}"
            return f"getattr({p}, {key!r})"   # setattr() takes any string: "odd name", "class"
        if rel == DICT:
            return f"{p}.__dict__[{key!r}]"
        if rel == ITEM:
            native = _native_getitem(type(parent.value))
            if native is None:
                return f"{p}[{self.literal(key)}]"
            owner = native.__name__ if native in _BUILTIN_CONTAINERS else self.names.const(native)
            return f"{owner}.__getitem__({p}, {self.literal(key)})"
        if rel == CELL:
            return f"{p}.cell_contents"
        if rel == VAR:
            return f"{p}.get()"
        if rel == DEREF:
            return f"{p}()"   # a weakref's call runs no Python code
        if rel == GETATTR:
            return f"getattr({p}, {key!r})"   # torch's __getattr__: no program code
        if rel == LEFT:
            return f"LENGTH_HINT({p}, -1)"   # a native iterator's __length_hint__: no program code
        if rel == REST:
            return f"ITEMS_LEFT({p})"   # (its __reduce__: no program code either)
        raise CaptureError(f"no path step for relation {rel!r}")

    def checks(self, node) -> list[str]:
        if node.id in self.buffered:
            return []   # (buffers_check)
        return self.read_checks(node) + self.shape_checks(node)

    def read_checks(self, node) -> list[str]:
        """What the program saw of the value itself: type and value, or identity."""
        v = var(node)
        k = node.kind
        if not node.read:
            return []
        if k is Kind.VALUE:
            if self.shapes is not None and node.id in self.shapes.free_scalars():
                # A lifted float or int: a graph input; what the record assumes of an int's
                # value is in the shape check, of a float's and a tuple's in value_checks.
                return [f"type({v}) is {type(node.value).__name__}", *self.shapes.value_checks(node, v)]
            return value_checks(self.names, v, node.value)
        if k in (Kind.STATIC, Kind.OPAQUE):
            return [f"{v} is {self.names.const(node.value)}"]
        if k in (Kind.LIST, Kind.TUPLE, Kind.DICT, Kind.SET, Kind.OBJECT, Kind.METHOD):
            return [f"type({v}) is {self.names.const(type(node.value))}"]
        return []

    def shape_checks(self, node) -> list[str]:
        """What the program saw of a container's structure, and the names it found missing."""
        v = var(node)
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
        for rel, key in node.present:   # (the program deletes them: eager raises where one is missing)
            if rel == ATTR:
                out.append(f"{key!r} in {v}.__dict__")
            elif rel == ITEM:
                out.append(f"{self.literal(key)} in {v}")
        return out

    def relations(self, node) -> list[str]:
        v = var(node)
        out = [f"{self._step(parent, rel, key, node.value)} is {v}" for parent, rel, key in node.aliases]
        out += [f"{v} is not {var(other)}" for other in node.distinct if other.id in self.needed]
        return out

    def literal(self, key) -> str:
        if is_literal(key) or (type(key) is tuple and all(is_literal(x) for x in key)):
            return repr(key)
        return self.names.const(key)



def write_shape_check(shapes) -> str:
    """The source of ``SHAPES``: the lifted sizes loaded from their tensors, then every
    condition the record assumed of them (ranges, relations, specialisations, strides)."""
    holders = shapes.holders()
    params = [f"t{i}" for i in range(len(holders))]
    loads, conds = shapes.conditions({id(t): p for t, p in zip(holders, params)})
    lines = [f"def shapes({', '.join(params)}) -> bool:"] + [f"    {line}" for line in loads]
    lines.append(f"    return {' and '.join(conds) or 'True'}")
    return "\n".join(lines)


def _plain_attr(obj, name) -> bool:
    """``obj.name`` reads the instance ``__dict__`` without running Python code."""
    tp = type(obj)
    if isinstance(obj, types.ModuleType):
        return True
    if isinstance(obj, type):
        # type.__getattribute__ reads the class's MRO dicts and the metaclass's C getsets
        # (``__name__``, ``__qualname__``); the rules guard Python descriptors of those apart.
        return type_lookup(tp, "__getattribute__") is _TYPE_GETATTRIBUTE
    if type_lookup(tp, "__getattribute__") not in _GENERIC_GETATTRIBUTES:
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
        if (n.id in known or n.id in pinned) and (n.struct or n.absent or n.present) and _versionable(n):
            versioned[n.id] = n
    anchored = known | pinned
    for n in nodes:
        for parent, rel, key in n.aliases:
            if n.id in anchored and parent.id in anchored and _stable_step(parent, rel, key) == "versioned":
                versioned[parent.id] = parent
    return _FastPlan(known, pinned, sorted(versioned.values(), key=lambda n: n.id),
                     [n for n in nodes if n.id in anchored])


_BUILTIN_CONTAINERS = (dict, list, tuple)


def _native_getitem(cls: type) -> type | None:
    """The class whose native ``__getitem__`` an item read of a ``cls`` was, where ``cls``
    overrides it in Python (``transformers``' ``ACT2FN``, a dict whose ``__getitem__`` makes a
    new object per read, reads its entries with ``super().__getitem__``): the guard reads the
    item as the program did, not through the override.  None where ``cls[key]`` is native."""
    if not isinstance(type_lookup(cls, "__getitem__"), types.FunctionType):
        return None
    return next((base for base in cls.__mro__ if "__getitem__" in base.__dict__
                 and not isinstance(base.__dict__["__getitem__"], types.FunctionType)), None)


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



def _short(v) -> str:
    """A value as a diagnosis shows it."""
    if isinstance(v, torch.Tensor):
        return f"a Tensor {str(v.dtype).replace('torch.', '')} {list(v.shape)}"
    try:
        text = repr(v) if type(v).__repr__ is not object.__repr__ else f"another {type(v).__qualname__}"
    except Exception:  # noqa: BLE001 - a value whose repr fails (an int of 5000 digits)
        text = f"a {type(v).__qualname__}"
    return text if len(text) < 60 else text[:57] + "..."


def _global_state(state: str) -> GlobalStateGuard:
    guard = GlobalStateGuard()
    guard.__setstate__(state)
    return guard


def _tensor_guards(tensors: list, names: list, sizes: list, strides: list) -> TensorGuards:
    return TensorGuards(*tensors, tensor_check_names=names, dynamic_dims_sizes=sizes,
                        dynamic_dims_strides=strides)


MAKERS["tensor_guards"] = lambda metas, *rest: _tensor_guards([empty_like_meta(m) for m in metas], *rest)
MAKERS["global_state"] = _global_state
MAKERS["buffers_fit"] = lambda metas: backward.BuffersFit([empty_like_meta(m) for m in metas])
NAMESPACE["CLASS_DICT"] = _class_dict
NAMESPACE["_short"] = _short


def inputs_in_words(g: RefGraph, names: list[str], shapes=None) -> list[str]:
    """The guard's checks on the call's arguments, and on the compiled module's own flags
    (``training``), in words: ``x: Tensor float32 [s0, 16], contiguous, requires_grad=False``.
    ``names``: the positional parameters' names; ``shapes``: the run's lifted sizes and floats
    (``magpy.graphs.dynamic.Shapes``), if any."""
    out = []
    training: dict[bool, int] = {}
    for node in g.nodes[1:]:
        if node.rel in (ARG, KWARG) and node.parent is g.sn0:
            name = names[node.key] if node.rel == ARG and node.key < len(names) else str(node.key)
            if node.read or node.struct:
                out.append(f"{name}: {_value_in_words(node, shapes)}")
        if isinstance(node.value, torch.nn.Module):
            flag = node.children.get((ATTR, "training"))
            if flag is not None and flag.read and flag.kind is Kind.VALUE:
                training[flag.value] = training.get(flag.value, 0) + 1
    for value, count in sorted(training.items()):
        out.append(f"training is {value} ({count} module{'s' * (count != 1)} read it)")
    return out


def _value_in_words(node, shapes) -> str:
    v = node.value
    if node.kind is Kind.TENSOR:
        sizes = shapes.size_words(v) if shapes is not None else list(v.shape)
        parts = [f"Tensor {str(v.dtype).replace('torch.', '')} [{', '.join(map(str, sizes))}]"]
        if v.device.type != "cpu":
            parts.append(str(v.device))
        parts.append("contiguous" if v.is_contiguous() else f"strides {list(v.stride())}")
        parts.append(f"requires_grad={v.requires_grad}")
        return ", ".join(parts)
    if node.kind is Kind.VALUE:
        if shapes is not None and node.id in shapes.free_scalars():
            return f"{type(v).__name__} (any value: a graph input)"
        if not is_literal(v) and type(v) is int:   # (repr() refuses ints of over 4300 digits)
            return f"int of {v.bit_length()} bits, checked by value"
        return f"{type(v).__name__} == {v!r}"
    if node.kind in (Kind.LIST, Kind.TUPLE, Kind.DICT) and node.struct:
        return f"{type(v).__name__} of {len(v)}"
    if node.kind is Kind.STATIC:
        return f"is {getattr(v, '__qualname__', type(v).__qualname__)}"
    return type(v).__qualname__


def _brace(text: str) -> str:
    """``text`` inside an f-string of generated code (written with repr), taken literally."""
    return text.replace("{", "{{").replace("}", "}}")


def path_in_words(node, params) -> str:
    """How the program reached ``node``: ``x``, ``self.layer.weight``, ``THRESHOLD`` (a global)."""
    p, rel, key = node.parent, node.rel, node.key
    if rel == ARG:
        return params[key] if key < len(params) else f"args[{key}]"
    if rel == KWARG:
        return key
    if rel == CONST:
        v = node.value
        if isinstance(v, dict) and "__name__" in v:
            return ""                                  # a globals dict: its items are globals
        if isinstance(v, dict) and "__build_class__" in v:
            return "builtins"
        if isinstance(v, torch.nn.Module):
            return "self"
        return getattr(v, "__qualname__", None) or f"<{type(v).__qualname__}>"
    base = path_in_words(p, params)
    if rel == ITEM:
        if base == "":
            return str(key)   # a global's name
        return f"{base}[{key!r}]" if is_immutable(key) else f"{base}[<{_short(key)}>]"   # state[param]
    if rel in (ATTR, GETATTR):
        return f"{base}.{key}"
    if rel == DICT:
        return f"{base}.__dict__[{key!r}]"
    if rel == CELL:
        return f"{base} (closure cell)"
    return f"{base}.{rel}"


_BUFFERS_IN_WORDS = ("a parameter's .grad is neither None nor a tensor laid out as the graph adding into it "
                     "was compiled for, or two parameters have one tensor as their .grad")


def _expected_in_words(node) -> str:
    v = node.value
    if node.kind is Kind.VALUE:
        text = repr(v) if not (type(v) is int and v.bit_length() > 200) else ""
        return text if 0 < len(text) < 60 else f"a {type(v).__name__}"
    if node.kind in (Kind.STATIC, Kind.OPAQUE):
        return f"the recorded {getattr(v, '__qualname__', type(v).__qualname__)}"
    if node.struct and node.kind in (Kind.LIST, Kind.TUPLE, Kind.DICT):
        return f"a {type(v).__name__} of {len(node.snapshot)}"
    missing = " without " + ", ".join(_short(k) for _, k in node.absent) if node.absent else ""
    return f"a {type(v).__qualname__}{missing}"
