"""The reference graph (paper §4.1, Figure 8): ShadowNodes, ShadowVersions, reference edges.

A ShadowNode stands for one runtime value the program reached from the outside world;
SN #0 is that outside world (arguments, globals, closure cells, the compiled callable's
own objects).  Nodes are created lazily, when the program reads a value, with an edge
``(relation, key)`` from the node it was read from.  Version 0 of a node is its state when
the program first reached it (a shallow snapshot); the last version is its state when the
call returned.  Algorithm 1 searches these edges for the guard and mock nodes.

Values are matched to nodes by identity for everything that has identity worth keeping
(tensors, containers, objects, functions); immutable values (numbers, strings, dtypes,
tuples of those) are guarded by value where they are read and need no node afterwards,
since everything computed from them is determined by the guard.
"""
from __future__ import annotations

import collections
import contextvars
import enum
import operator
import sys
import types

import torch

from magpy.capture.annotations import is_pybind

# Relations of an edge (how the child is reached from its parent).
ARG, KWARG, CONST = "arg", "kwarg", "const"   # from SN #0
ATTR = "attr"       # parent.name, read from the instance __dict__ (or a module's dicts)
DICT = "dict"       # parent.__dict__[name]: a class attribute read raw
ITEM = "item"       # parent[key] of a list, tuple or dict
CELL = "cell"       # parent.cell_contents
VAR = "var"         # parent.get(): the value of a contextvars.ContextVar
DEREF = "deref"     # parent(): the object a weak reference refers to (or None)
GETATTR = "getattr"  # getattr(parent, name) through a natively run __getattr__ (a ScriptModule's)
LEFT = "left"       # operator.length_hint(parent, -1): the items an iterator has left
REST = "rest"       # items_left(parent): what a native iterator has left to give


_MODULE_DICTS = ("_parameters", "_buffers", "_modules")
UNSET = object()   # a ContextVar without a value


class Kind(enum.Enum):
    """How a node is guarded and snapshotted."""

    VALUE = "value"      # immutable: type and value
    TENSOR = "tensor"    # metadata: type, dtype, device, shape, stride, requires_grad
    STATIC = "static"    # identity: functions, classes, modules, nn.Modules
    LIST = "list"
    TUPLE = "tuple"
    DICT = "dict"
    SET = "set"
    OBJECT = "object"    # an instance of a Python class: type, then its attributes
    CELL = "cell"
    CONTEXTVAR = "contextvar"
    METHOD = "method"    # a bound method: its type, then its function and its object
    OPAQUE = "opaque"    # something else (a C object): identity


_SCALARS = (int, float, bool, complex, str, bytes, type(None), type(Ellipsis), type(NotImplemented),
            torch.dtype, torch.device, torch.layout, torch.memory_format, range)
_STATIC = (types.FunctionType, types.BuiltinFunctionType, types.MethodDescriptorType,
           types.WrapperDescriptorType, types.ModuleType, type, torch.nn.Module,
           types.MethodWrapperType, types.ClassMethodDescriptorType, types.GetSetDescriptorType,
           staticmethod, classmethod, property)


def is_immutable(v) -> bool:
    """Values equal by value for every purpose: guarded by value, rebuilt as constants."""
    if isinstance(v, _SCALARS):
        return True
    tv = type(v)
    if tv is tuple or tv is frozenset or tv is torch.Size:
        return all(is_immutable(x) for x in v)
    if tv is slice:
        return is_immutable(v.start) and is_immutable(v.stop) and is_immutable(v.step)
    return isinstance(v, enum.Enum) or _numpy_scalar(v)


# Library bookkeeping objects a record refers to as themselves, never rebuilding them (they
# live as long as the modules the guard fixes and hold none of the program's state: FSDP2's
# per-module states, magpy.training.fsdp); :func:`keep_by_identity` adds to it.
_BY_IDENTITY: list[type] = []


def keep_by_identity(tp: type) -> None:
    """Records (mocks, resume points) refer to instances of ``tp`` as themselves."""
    _BY_IDENTITY.append(tp)


def held_by_identity(v) -> bool:
    """Is ``v`` an object records refer to as itself (:func:`keep_by_identity`)?"""
    return bool(_BY_IDENTITY) and isinstance(v, tuple(_BY_IDENTITY))


def _numpy_scalar(v) -> bool:
    # np.float32(2.0), np.int64(3), np.bool_(True) ... (not np.void, a view into a record).
    # numpy is looked up, not imported: without it loaded there is no numpy scalar.
    np = sys.modules.get("numpy")
    return np is not None and isinstance(v, np.generic) and not isinstance(v, np.void)


_BUILTIN_METHODS = (types.BuiltinMethodType, types.MethodWrapperType)


def is_bound_builtin(v) -> bool:
    """A C method bound to an object (``items.append``, ``t.add``, ``x.__add__``): not a
    module's function, a class's (``dict.fromkeys``) nor a pybind11 function, bound to its
    own function record."""
    if type(v) not in _BUILTIN_METHODS:
        return False
    owner = v.__self__
    return owner is not None and not isinstance(owner, (types.ModuleType, type)) and not is_pybind(owner)


def is_iterator(v) -> bool:
    """A native iterator (not a generator: the monitor runs those)."""
    return hasattr(type(v), "__next__") and not isinstance(v, types.GeneratorType)


def items_left(it):
    """What native iterator ``it`` has left to give, without advancing it: a tuple of the items
    (a range for a range's iterator) of an iterator over a list, tuple, str, range or dict view,
    ``reversed`` of a sequence, and ``enumerate`` and ``zip`` of such iterators (their
    ``__reduce__`` gives the sequence and the position, running no program code); else None."""
    try:
        r = it.__reduce__()
    except Exception:  # noqa: BLE001 - not reducible: None
        return None
    if type(r) is not tuple or len(r) < 2 or type(r[1]) is not tuple:
        return None
    make, parts, at = r[0], r[1], (r[2] if len(r) > 2 else None)
    if make is iter and len(parts) == 1 and type(parts[0]) in _SEQUENCES:
        rest = parts[0][at or 0:]
    elif make is reversed and len(parts) == 1 and type(parts[0]) in _SEQUENCES and type(at) is int:
        rest = parts[0][at::-1] if at >= 0 else ()
    elif make is enumerate and len(parts) == 2:
        inner = items_left(parts[0])
        rest = None if inner is None else tuple(enumerate(inner, parts[1]))
    elif make is zip:
        inners = [items_left(p) for p in parts]
        rest = None if None in inners else tuple(zip(*inners))
    else:
        return None
    return rest if rest is None or type(rest) in (tuple, range) else tuple(rest)


_SEQUENCES = (list, tuple, str, range)


def kind_of(v) -> Kind:
    if is_immutable(v):
        return Kind.VALUE
    if isinstance(v, torch.Tensor):
        return Kind.TENSOR
    tv = type(v)
    if isinstance(v, _STATIC) or tv.__module__ == "typing":
        # (typing's special forms and aliases, ``List``, ``List[Tensor]``: annotations, made
        # once and never changed; ``torch.jit.annotate(List[Tensor], [])`` reads them)
        return Kind.STATIC
    if isinstance(v, list):
        return Kind.LIST
    if isinstance(v, tuple):
        return Kind.TUPLE
    if isinstance(v, dict):
        return Kind.DICT
    if isinstance(v, (set, frozenset)):
        return Kind.SET
    if tv is types.CellType:
        return Kind.CELL
    if tv is types.MethodType:
        return Kind.METHOD   # (not an OBJECT: its ``__dict__`` is its function's)
    if tv is contextvars.ContextVar:
        return Kind.CONTEXTVAR
    if hasattr(v, "__dict__") and type(getattr(v, "__dict__", None)) is dict:
        return Kind.OBJECT
    return Kind.OPAQUE


# The warnings module's memory of the warnings it showed, kept in the globals of the
# warning's module: state of the warnings machinery (as its filters are), not the program's.
# The mock's warnings update it as eager's do (magpy.capture.callees.warnings_logging); it never writes it
# back.
_WARNING_REGISTRY = "__warningregistry__"


def state_of(v, kind: Kind):
    """A shallow snapshot: what the object holds, compared by identity later."""
    if kind is Kind.LIST or kind is Kind.TUPLE or kind is Kind.SET:
        return tuple(v)
    if kind is Kind.DICT:
        items = dict_items(v)
        if _WARNING_REGISTRY in items and "__name__" in items:
            del items[_WARNING_REGISTRY]
        return items
    if kind is Kind.CELL:
        try:
            return (v.cell_contents,)
        except ValueError:
            return ()
    if kind is Kind.CONTEXTVAR:
        return (v.get(UNSET),)
    if kind is Kind.OBJECT or (kind is Kind.STATIC and isinstance(v, torch.nn.Module)):
        return dict(v.__dict__)
    if kind is Kind.TENSOR:
        return tensor_state(v)
    return None


def tensor_state(t) -> dict | None:
    """What of a tensor the program may change besides its data: a leaf's ``.grad``, which
    ``backward()`` and optimizers' ``zero_grad`` write (None for a non-leaf, whose ``.grad``
    is not kept).  Read past torch function modes, as :func:`tensor_version`."""
    with torch._C.DisableTorchFunction():
        return {"grad": t.grad} if t.is_leaf else None


def tensor_version(t) -> int | None:
    """``t._version``, or None for tensors without a version counter (inference tensors).
    Read past torch function modes: the operator recorder would take it for a data read."""
    with torch._C.DisableTorchFunction():
        try:
            return t._version
        except RuntimeError:
            return None


def is_namespace(v) -> bool:
    """A module, a class or a function: its attributes are stores the program makes
    (``config.STEP = n``, ``Klass.count += 1``, ``step.calls += 1``), not snapshotted whole
    (their dicts are big and mostly functions; a function's is mostly empty, and functions
    are everywhere)."""
    return isinstance(v, (types.ModuleType, type, types.FunctionType))


def namespace_twin(v):
    """The other name of a module's namespace: the globals dict of module ``v``, or the module
    whose globals dict ``v`` is (found in ``sys.modules`` by its ``__name__``), else None.
    ``mod.N = n`` and a global ``N`` that ``mod``'s functions read are one slot."""
    if isinstance(v, types.ModuleType):
        return v.__dict__
    name = v.get("__name__") if type(v) is dict else None
    module = sys.modules.get(name) if type(name) is str else None
    return module if isinstance(module, types.ModuleType) and module.__dict__ is v else None


def slot_of(v, name):
    """The ``__slots__`` member descriptor through which ``v.name`` is stored, else None."""
    for klass in type(v).__mro__:
        raw = klass.__dict__.get(name)
        if raw is not None:
            return raw if type(raw) is types.MemberDescriptorType else None
    return None


def stored_attributes(node) -> dict:
    """The attributes of a node without a snapshot of its ``__dict__`` (a module, a class, an
    object's ``__slots__``) that the program stored into, as they are now (those it deleted
    are missing)."""
    v = node.value
    out = {}
    for _, key in node.written:
        slot = None if is_namespace(v) else slot_of(v, key)
        if slot is None and key in v.__dict__:
            out[key] = v.__dict__[key]
        elif slot is not None:
            try:
                out[key] = slot.__get__(v)   # (a member descriptor runs no program code)
            except AttributeError:
                pass
    return out


def tensor_requires_grad(t) -> bool:
    """``t.requires_grad``, read past torch function modes (as :func:`tensor_version`)."""
    with torch._C.DisableTorchFunction():
        return t.requires_grad


def as_found(node):
    """A tensor node's value with the metadata the guard checks as the program found it: the
    tensor itself, or (where the call changed its ``requires_grad``) a detached alias with
    the flag it had."""
    t = node.value
    if tensor_requires_grad(t) == node.requires_grad:
        return t
    with torch._C.DisableTorchFunction():
        return t.detach().requires_grad_(node.requires_grad)


def dict_items(d) -> dict:
    """A dict's entries in its iteration order, without running Python overrides of ``items``
    (an OrderedDict's order is its own, not that of the dict underneath)."""
    items = collections.OrderedDict.items if isinstance(d, collections.OrderedDict) else dict.items
    return dict(items(d))


def same_state(a, b) -> bool:
    if a is None or b is None:
        return a is b
    if len(a) != len(b):
        return False
    if type(a) is dict:
        return all(same_key(k1, k2) and v1 is v2 for (k1, v1), (k2, v2) in zip(a.items(), b.items()))
    return all(x is y for x, y in zip(a, b))


def same_key(a, b) -> bool:
    """Are ``a`` and ``b`` one dict key?  Keys with identity (an optimizer's state is keyed by
    parameters) are the same object; never compared with ``==`` (a tensor's is elementwise)."""
    return a is b or (is_immutable(a) and a == b)


class ShadowVersion:
    """One state of a node: the references it holds, ``(relation, key) -> node id``."""

    __slots__ = ("refs",)

    def __init__(self, refs=None):
        self.refs = dict(refs) if refs else {}


class ShadowNode:
    """A runtime value the program reached from outside, with its update history."""

    __slots__ = ("id", "value", "kind", "parent", "rel", "key", "versions", "children", "read",
                 "struct", "snapshot", "aliases", "absent", "distinct", "changed", "tensor_version",
                 "written", "whole", "cleared", "present", "requires_grad")

    def __init__(self, nid, value, parent, rel, key):
        self.id = nid
        self.value = value
        self.kind = kind_of(value) if nid else Kind.OPAQUE
        self.parent, self.rel, self.key = parent, rel, key
        self.versions = [ShadowVersion()]
        self.children = {}        # (rel, key) -> node: every edge, read or not
        self.read = False         # read by the program (so its value is guarded)
        self.struct = False       # its length / keys were read
        self.snapshot = state_of(value, self.kind)
        self.aliases = []         # other (parent, rel, key) paths that reached this object
        self.absent = {}          # (rel, key) the program found missing, as an ordered set
        self.distinct = []        # nodes the program saw to be different objects (``is``)
        self.changed = False      # its final state differs from version 0
        # A tensor's version counter when the program reached it: in-place updates bump it.
        self.tensor_version = tensor_version(value) if self.kind is Kind.TENSOR else None
        # ... and whether it required grad (an in-place update with one that does changes it)
        self.requires_grad = tensor_requires_grad(value) if self.kind is Kind.TENSOR else None
        # The program's own stores into it, which the mock replays even where they left the
        # slot as they found it (a caller may change it before the next call):
        self.written = {}         # (rel, key) stored or deleted -> deleted at some point
        self.whole = False        # a native changed it in place, slots unknown: rewritten whole
        self.cleared = False      # its first change emptied it (what it held before is not kept)
        self.present = {}         # (rel, key) deleted as found: must be there, as an ordered set

    def mark_absent(self, rel: str, key) -> None:
        self.absent[(rel, key)] = None

    def stored(self, rel: str, key, deleted: bool = False, must_exist: bool = False) -> None:
        """The program stored into (``deleted``: deleted) slot ``(rel, key)`` of this node;
        ``must_exist``: a deletion that raises where the slot is empty (``del d[k]``)."""
        slot = (rel, key)
        if must_exist and slot not in self.written and not self.whole:
            self.present[slot] = None
        self.written[slot] = self.written.get(slot, False) or deleted

    def rewritten_in_place(self, cleared: bool = False) -> None:
        """A native changed it in place in ways the mock cannot tell slot by slot
        (``cleared``: it emptied it)."""
        if not self.written and not self.whole:
            self.cleared = cleared
        self.whole = True

    @property
    def stores(self) -> bool:
        """Did the program store into it (whatever it left there)?"""
        return bool(self.written) or self.whole

    def __repr__(self):
        return f"SN#{self.id}<{self.kind.value} {type(self.value).__name__}>"


class RefGraph:
    """All ShadowNodes of one monitor run; SN #0 is the external world."""

    def __init__(self):
        self.nodes = [ShadowNode(0, None, None, None, None)]
        self.by_id = {}           # id(value) -> node, for values with identity
        # ids of the iterators a continuation's frames hold: made anew by the mock on each
        # call, positioned where the check failed (not objects from outside the call)
        self.frame_iterators: set[int] = set()
        # ids of the bound methods a continuation's frames hold, made anew on each call (a
        # ``with`` block's ``__exit__``): their objects are the call's own, not state
        self.frame_methods: set[int] = set()

    @property
    def sn0(self) -> ShadowNode:
        return self.nodes[0]

    def get_node_by_id(self, nid: int) -> ShadowNode:
        return self.nodes[nid]

    def node_of(self, value) -> ShadowNode | None:
        """The node of a value with identity, if the program reached it from outside."""
        return self.by_id.get(id(value))

    def child(self, parent: ShadowNode, rel: str, key, value, *, read: bool = True) -> ShadowNode | None:
        """The node of ``value`` reached from ``parent`` by ``(rel, key)``, made if new."""
        edge = (rel, key)
        node = parent.children.get(edge)
        if node is None:
            known = None if is_immutable(value) else self.by_id.get(id(value))
            if known is not None:
                # A second path to one object: the guard checks both reach the same one.
                if known.parent is not parent or (known.rel, known.key) != edge:
                    known.aliases.append((parent, rel, key))
                parent.children[edge] = known
                node = known
            else:
                node = ShadowNode(len(self.nodes), value, parent, rel, key)
                self.nodes.append(node)
                parent.children[edge] = node
                if node.kind is not Kind.VALUE:
                    self.by_id[id(value)] = node
                if isinstance(value, torch.nn.Module):
                    # Module.__setattr__ writes these natively: snapshot them now.  (A
                    # ScriptModule keeps them in its C++ module, not in its __dict__.)
                    d = value.__dict__
                    for name in _MODULE_DICTS:
                        if name in d:
                            self.child(node, ATTR, name, d[name], read=False)
        if read:
            parent.versions[0].refs[edge] = node.id
            if node.kind is Kind.METHOD and not node.read:
                self._method_parts(node)
            elif not node.read and is_bound_builtin(value):
                # ``items.append`` held in state: its identity, which the guard fixes, fixes
                # its object; what a call does to it or reads of it is the object's node's.
                self.child(node, GETATTR, "__self__", value.__self__, read=False)
            node.read = True
        return node

    def _method_parts(self, node: ShadowNode) -> None:
        """A bound method the program read steers a call by its function (fixed by identity)
        and its object, whose own node guards it as any object's (type, or identity for a
        module, then what the call reads of it; a second path to it, that it is the same
        object), so another object's method or another method of the object is another call.
        A method a continuation's frame holds is made anew on each call, its object with it
        (a ``with`` block's ``__exit__``): the object is reached, not checked.  (Both are C
        members: reading them runs no program code.)"""
        m = node.value
        self.child(node, GETATTR, "__func__", m.__func__)
        self.child(node, GETATTR, "__self__", m.__self__, read=node.id not in self.frame_methods)

    def root(self, rel: str, key, value, *, read: bool = False, anew: bool = False) -> ShadowNode:
        """A node reached directly from SN #0 (an argument, or an object of the callable's).
        ``anew``: the caller makes the value anew on every call (a continuation's frame value),
        so a bound method is known by its function and object, not by its identity."""
        node = self.child(self.sn0, rel, key, value, read=False)
        if anew and node.kind is Kind.METHOD:
            self.frame_methods.add(node.id)
        if anew and node.kind is Kind.OPAQUE and is_iterator(value):
            # What the rest of the call does depends on where it is: the guard checks the
            # items it has left, where the iterator tells (a list's, a tuple's, a dict's ...),
            # and their values where they are plain values (the floats eager steps gave, a
            # list comprehension resumed at its check of one: its next items are the rest of
            # the call's input as much as the one it resumed with).
            self.frame_iterators.add(node.id)
            self.child(node, LEFT, None, operator.length_hint(value, -1))
            rest = items_left(value)
            if rest is not None and is_immutable(rest):
                self.child(node, REST, None, rest)
        return self.child(self.sn0, rel, key, value, read=read)

    def const(self, value) -> ShadowNode:
        """The node of an object the record refers to by identity (a globals dict, a cell)."""
        node = self.by_id.get(id(value))
        if node is None or node.parent is not self.sn0 or node.rel != CONST:
            node = self.child(self.sn0, CONST, id(value), value, read=False)
        return node

    def read_builtin(self, globals_: dict, builtins: dict, name: str, value) -> None:
        """A frame with globals ``globals_`` loaded ``name`` from ``builtins`` (``value``): the
        guard requires the module not to define it and the builtin to be the same."""
        self.const(globals_).mark_absent(ITEM, name)
        self.child(self.const(builtins), ITEM, name, value)

    def overwritten(self, node: ShadowNode, rel: str, key) -> bool:
        """Has the call stored into (or deleted) slot ``(rel, key)`` of ``node`` so far, by
        either name of a module's namespace?  A read of it gives the call's own value then,
        not state the call found (even an equal object: a small int, a float passed again)."""
        if (rel, key) in node.written:
            return True
        twin = namespace_twin(node.value)
        twin_node = self.node_of(twin) if twin is not None else None
        return twin_node is not None and (ITEM if rel == ATTR else ATTR, key) in twin_node.written

    # ------------------------------------------------------------------ final state
    def changes(self):
        """``(node, state now)`` for every node whose state is no longer its first one, or
        that the program stored into: a store that left the slot as it found it is replayed
        all the same, since a later call may find the slot changed."""
        for node in self.nodes[1:]:
            if node.snapshot is None:
                if node.stores:   # a module's, class's or __slots__' attributes: those it stored
                    yield node, stored_attributes(node)
                continue
            now = state_of(node.value, node.kind)
            if node.stores or not same_state(now, node.snapshot):
                yield node, now

    def finish(self) -> None:
        """Add a last version to every node whose state changed (paper: InPlace)."""
        for node, now in self.changes():
            node.changed = True
            node.versions.append(ShadowVersion(self._refs_of(node, now)))

    def rewritten(self, node: ShadowNode, now) -> None:
        """The mock rewrites ``node``'s contents whole, as ``now`` (``state_of``'s form).  The
        initial elements it still holds are read from outside (loaded by their path and
        guarded: an immutable one is written as its value); the others need nothing."""
        if node.kind is Kind.SET:
            node.struct = True   # the guard fixes a set's members themselves
            return
        # What it held decides what the program left in it (``L.pop(); L.append(x)``), unless
        # the program emptied it first.
        node.struct = node.struct or not node.cleared
        kept = {id(v) for v in (now.values() if type(now) is dict else now)}
        snap = node.snapshot
        rel = ATTR if node.kind is Kind.OBJECT or node.kind is Kind.STATIC else ITEM
        for key, val in (snap.items() if type(snap) is dict else enumerate(snap)):
            if id(val) in kept:
                node.struct = True
                self.child(node, rel, key, val)

    def _refs_of(self, node, state):
        refs = {}
        if node.kind in (Kind.LIST, Kind.TUPLE):
            for i, v in enumerate(state):
                n = self.node_of(v)
                if n is not None:
                    refs[(ITEM, i)] = n.id
        elif type(state) is dict:
            for k, v in state.items():
                n = self.node_of(v)
                if n is not None:
                    refs[(ITEM if node.kind is Kind.DICT else ATTR, k)] = n.id
        return refs

    # ------------------------------------------------------------------ Algorithm 1
    def guard_nodes(self, loaded: set[int]) -> list[ShadowNode]:
        """GetGuardNodes: the nodes the guard loads, in load order.  Those the run read from
        its initial state (values, structures, names found missing, second paths to one
        object), those the mock needs (``loaded``: graph inputs, objects it updates or
        refers to), and every ancestor of these, which their paths go through."""
        needed = set(loaded)
        for node in self.nodes[1:]:
            if node.read or node.absent or node.struct or node.present:
                needed.add(node.id)
            for parent, _, _ in node.aliases:
                needed.add(parent.id)
                needed.add(node.id)
        for nid in sorted(needed):
            p = self.nodes[nid].parent
            while p is not None and p.id and p.id not in needed:
                needed.add(p.id)
                p = p.parent
        return [n for n in self.nodes[1:] if n.id in needed]

    def mock_nodes(self) -> list[ShadowNode]:
        """GetMockNodes, part 2: pre-existing nodes updated in place.  (Part 1, new objects
        reachable in the last version, is built by the mock generator as it writes the
        values these updates store and the return value.)  Unlike the paper we also keep
        nodes reached only to snapshot them (an nn.Module's ``_modules``), since native
        code such as ``Module.__setattr__`` writes them without the program reading them."""
        return [n for n in self.nodes[1:] if n.changed]
