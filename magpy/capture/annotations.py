"""Operation properties (paper §5.2): what magpy may assume about a native callee.

Every entry is data.  For a native (C-implemented, or kept-native library) callee:

- ``pure`` (PureClosure): same result for the same arguments, no effect outside them.
- ``reads`` (ValueRead): how much of each argument's value the callee looks at —
  ``NONE`` (keeps a reference only), ``TYPE`` (only its type), ``STRUCT`` (a container's
  length and elements, one level), ``DEEP`` (everything reachable), ``ALL`` (everything
  reachable through objects' attributes too: copying), ``OPERAND`` (an
  operator's operand: containers everything reachable; an object's Python special methods
  were entered by the monitor, which saw their reads).
- ``inplace`` (InPlace): argument positions the callee may modify.
- ``relation`` (Relation): how the result relates to the arguments, when it is not a new
  value: ``"attr"`` (``getattr(obj, name)``), ``"hasattr"``, ``"element"`` (one of the
  first argument's elements: ``dict.get``, ``list.pop``, ``min``), ``"frame"`` (a frame of
  the call: ``sys._getframe``; one outside it is not the record's to know), ``"deref"`` (the
  referent of the weak reference called: RNN modules check their weights through these).
- ``external`` (impure callees): its effects are outside the program's Python objects
  (output, a native object's hidden state, other processes, the data of tensors it is
  given), so it changes none of the objects it is given and an eager step of it may take
  mutable ones (``print``; torch.distributed's natives).

Bound methods are looked up by ``(type of self, method name)``, self being position 0.
Tensor operations are not here: every call reaching torch's ``__torch_function__`` is
classified by :data:`TORCH_METADATA`/:data:`TORCH_DYNAMIC` (AsOpNode: anything else that
returns tensors becomes a graph node).  ``annotate()`` adds a user's own entry.
"""
from __future__ import annotations

import collections
import contextvars
import copy
import dataclasses
import enum
import functools
import inspect
import itertools
import logging
import math
import operator
import sys
import types
import warnings
import weakref
from typing import Callable

import torch
import torch.utils._pytree as pytree
from torch.optim import optimizer as _optimizer

from magpy.capture.monitor import operators
from magpy.capture.monitor.frame import Frame
from magpy.capture.monitor.protocols import type_lookup

NONE, TYPE, STRUCT, DEEP, ALL, OPERAND = "none", "type", "struct", "deep", "all", "operand"


@dataclasses.dataclass(frozen=True)
class Annotation:
    """The properties of one native callee (see the module docstring)."""

    pure: bool = True
    reads: str | tuple = DEEP         # one kind for every argument, or one per position
    inplace: tuple = ()
    relation: str | None = None
    external: bool = False
    steady: bool = False

    def read_kind(self, position: int) -> str:
        r = self.reads
        if type(r) is str:
            return r
        return r[position] if position < len(r) else r[-1]


PURE = Annotation()
IMPURE = Annotation(pure=False)
EXTERNAL = Annotation(pure=False, external=True)
TYPE_ONLY = Annotation(reads=TYPE)
STRUCT_READ = Annotation(reads=STRUCT)
ELEMENT = Annotation(reads=(NONE, DEEP), relation="element")


def _inplace(*reads, relation=None):
    return Annotation(reads=reads or (NONE,), inplace=(0,), relation=relation)


# --------------------------------------------------------------------------- functions by identity
# Natives that look at their arguments' types only (an optimizer's ``torch.is_tensor(group["lr"])``).
TYPE_READERS = (isinstance, issubclass, callable, type, torch.is_tensor)
# Functions that give a number argument back as it is (an optimizer's ``_get_value(lr)``, which
# reads a tensor's value and passes anything else through; ``_stack_if_compiling`` of floats):
# a lifted float stays lifted, a list of floats eager steps computed is moved.
_NUMBER_PASS_THROUGH = tuple(f for f in (_optimizer._get_value,
                                         getattr(_optimizer, "_stack_if_compiling", None)) if f is not None)


def passes_through(callee, args: tuple, result) -> bool:
    """Did ``callee(*args)`` give its one argument back, as a number pass-through does?"""
    return len(args) == 1 and result is args[0] and any(callee is f for f in _NUMBER_PASS_THROUGH)
FUNCTIONS: dict[Callable, Annotation] = {
    **{f: TYPE_ONLY for f in TYPE_READERS},
    **{f: STRUCT_READ for f in (len, iter, enumerate, zip, reversed, list, tuple, set, frozenset, dict,
                                 collections.OrderedDict, collections.defaultdict, collections.deque,
                                 itertools.chain, itertools.islice, itertools.product, itertools.repeat,
                                 itertools.accumulate, itertools.starmap, itertools.zip_longest,
                                 itertools.count, itertools.combinations, itertools.permutations,
                                 map, filter)},
    **{f: PURE for f in (all, any, ascii, bin, bytes, chr, complex, divmod, float, format, hex, int, oct, ord,
                         pow, range, repr, round, slice,
                         sorted, str, sum, object, super, property, staticmethod, classmethod,
                         functools.partial, functools.reduce, functools.cmp_to_key, math.prod,
                         math.fsum, math.isclose)},
    types.MappingProxyType: Annotation(reads=DEEP),
    getattr: Annotation(reads=(NONE, DEEP, NONE), relation="attr"),
    hasattr: Annotation(reads=(NONE, DEEP), relation="hasattr"),
    next: Annotation(reads=NONE),   # (an iterator from outside moving on: magpy.capture.refgraph.unseen)
    max: ELEMENT, min: ELEMENT,
    setattr: Annotation(reads=(NONE, DEEP, NONE), inplace=(0,)),
    delattr: Annotation(reads=(NONE, DEEP), inplace=(0,)),
    # id() is used for identity memos (inspect.unwrap); its value is assumed not to leak.
    id: Annotation(reads=NONE),
    vars: IMPURE, print: EXTERNAL, input: IMPURE, open: IMPURE, globals: IMPURE,
    dir: Annotation(reads=TYPE),
    # collections.namedtuple() makes its class from these.
    sys.getrecursionlimit: PURE, sys.intern: PURE, collections._tuplegetter: PURE,
    # namedtuple() also finds its module: sys._getframe(1).f_globals['__name__'].  What a
    # frame of the call holds is the record's; f_locals is not here (values without shadows).
    sys._getframe: Annotation(reads=NONE, relation="frame"),
    Frame.f_back.fget: Annotation(reads=NONE, relation="frame"),
    **{prop.fget: Annotation(reads=NONE) for prop in (Frame.f_code, Frame.f_globals, Frame.f_builtins,
                                                        Frame.f_lineno)},
    operator.setitem: _inplace(NONE, DEEP, NONE), operator.delitem: _inplace(NONE, DEEP),
    operator.getitem: Annotation(reads=(NONE, DEEP), relation="element"),
    operator.attrgetter: PURE, operator.itemgetter: PURE, operator.methodcaller: PURE,
    operator.iconcat: _inplace(STRUCT, STRUCT),
    # Copying is pure: the copy is a new object built from everything the original holds.
    copy.deepcopy: Annotation(reads=(ALL, NONE)), copy.copy: Annotation(reads=ALL),
    # Operators the monitor dispatches itself (magpy.capture.monitor.operators).
    **{f: Annotation(reads=OPERAND) for f in (bool, abs, hash, operator.abs, operator.contains,
                                               operator.truth, operator.not_, *operators.UNARY.values(),
                                               *operators.COMPARE_OPS, *(b[3] for b in operators.BINARY))},
    **{f: Annotation(reads=OPERAND, inplace=(0,)) for f in operators.INPLACE},
}
if hasattr(sys, "_getframemodulename"):
    # 3.12's namedtuple() finds its module with it: the __module__ of a function running
    # in the call (the monitor's intrinsic reads the monitored frames).
    FUNCTIONS[sys._getframemodulename] = Annotation(reads=NONE)

# Whole modules of pure functions of their arguments' values (math.sqrt, operator.add ...).
PURE_MODULES = frozenset({"math", "cmath", "_operator", "operator", "itertools", "_functools",
                          "functools", "string", "_string", "keyword", "numbers", "copyreg", "inspect"})

# Module functions that are not pure although their module is.
IMPURE_IN_PURE_MODULES = frozenset({"setitem", "delitem", "iadd", "iconcat", "iand", "ior", "ixor",
                                    "isub", "imul", "imatmul", "itruediv", "ifloordiv", "imod",
                                    "ipow", "ilshift", "irshift", "currentframe", "stack", "trace",
                                    "getouterframes", "getinnerframes", "getframeinfo"})

# --------------------------------------------------------------------------- methods by (type, name)
_DICT_METHODS = {
    "get": ELEMENT, "keys": STRUCT_READ, "values": STRUCT_READ, "items": STRUCT_READ,
    "copy": STRUCT_READ, "__contains__": STRUCT_READ, "__len__": STRUCT_READ,
    "__getitem__": ELEMENT, "__iter__": STRUCT_READ,
    "update": _inplace(NONE, STRUCT), "__setitem__": _inplace(NONE, DEEP, NONE),
    "__delitem__": _inplace(NONE, DEEP), "setdefault": _inplace(NONE, DEEP, NONE, relation="element"),
    "pop": _inplace(NONE, DEEP, NONE, relation="element"), "popitem": _inplace(STRUCT),
    "clear": _inplace(NONE), "move_to_end": _inplace(STRUCT, DEEP, DEEP),
    "fromkeys": STRUCT_READ,
}
_LIST_METHODS = {
    "append": _inplace(NONE, NONE), "extend": _inplace(NONE, STRUCT),
    "insert": _inplace(STRUCT, DEEP, NONE), "pop": _inplace(STRUCT, DEEP, relation="element"),
    "remove": _inplace(DEEP, DEEP), "clear": _inplace(NONE), "reverse": _inplace(STRUCT),
    "sort": _inplace(DEEP), "copy": STRUCT_READ, "index": PURE, "count": PURE,
    "__getitem__": ELEMENT, "__len__": STRUCT_READ, "__contains__": PURE, "__iter__": STRUCT_READ,
    "__setitem__": _inplace(NONE, DEEP, NONE), "__delitem__": _inplace(NONE, DEEP),
    "__iadd__": _inplace(NONE, STRUCT),
}
_SET_METHODS = {
    **{m: PURE for m in ("union", "intersection", "difference", "symmetric_difference", "issubset",
                         "issuperset", "isdisjoint", "copy", "__contains__", "__len__")},
    **{m: _inplace(NONE, STRUCT) for m in ("add", "discard", "remove", "update",
                                          "intersection_update", "difference_update",
                                          "symmetric_difference_update")},
    "pop": _inplace(STRUCT), "clear": _inplace(NONE),
}
_DEQUE_METHODS = {
    **{m: _inplace(NONE, NONE) for m in ("append", "appendleft")},
    **{m: _inplace(NONE, STRUCT) for m in ("extend", "extendleft")},
    **{m: _inplace(STRUCT) for m in ("pop", "popleft", "rotate", "clear")},
    # as a list's: a deque is a sequence (insert, remove, index, count, indexing, iteration)
    **{m: _LIST_METHODS[m] for m in ("insert", "remove", "reverse", "index", "count", "copy", "__getitem__",
                                     "__len__", "__contains__", "__iter__", "__setitem__", "__delitem__",
                                     "__iadd__")},
}

METHODS: dict[tuple[type, str], Annotation] = {
    **{(dict, m): a for m, a in _DICT_METHODS.items()},
    **{(list, m): a for m, a in _LIST_METHODS.items()},
    **{(set, m): a for m, a in _SET_METHODS.items()},
    **{(frozenset, m): PURE for m in _SET_METHODS if _SET_METHODS[m].pure and not _SET_METHODS[m].inplace},
    **{(collections.deque, m): a for m, a in _DEQUE_METHODS.items()},
    (tuple, "index"): PURE, (tuple, "count"): PURE, (tuple, "__getitem__"): ELEMENT,
    # A read-only view of a mapping (``inspect.Signature.parameters``): its reads are the
    # mapping's.  (A view from outside, a class's ``__dict__``, is live: an eager step,
    # refgraph.unseen's mutable opaque objects; one made in the call read its mapping whole.)
    **{(types.MappingProxyType, m): _DICT_METHODS[m] for m in (
        "get", "keys", "values", "items", "copy", "__contains__", "__len__", "__getitem__", "__iter__")},
    # A storage's address and size (``a.untyped_storage().data_ptr()``, as libraries test
    # aliasing): reads of the storage object, whose eager steps run again on every call.
    **{(torch._C.StorageBase, m): PURE for m in ("data_ptr", "nbytes", "size")},
    # itertools.chain.from_iterable(lists): the outer iterable and each inner one are read.
    (itertools.chain, "from_iterable"): Annotation(reads=DEEP),
    (object, "__setattr__"): Annotation(reads=(NONE, DEEP, NONE), inplace=(0,)),
    (object, "__getattribute__"): Annotation(reads=(NONE, DEEP), relation="attr"),
    (object, "__init__"): Annotation(reads=NONE),
    (object, "__new__"): Annotation(reads=TYPE),
    (object, "__init_subclass__"): Annotation(reads=NONE),
    (type, "mro"): PURE, (type, "__subclasses__"): IMPURE,
    # func.__get__(obj, cls) binds a method (an LR scheduler's wrapper of optimizer.step).
    (types.FunctionType, "__get__"): Annotation(reads=NONE),
    (contextvars.ContextVar, "get"): Annotation(reads=NONE, relation="contextvar"),
    (contextvars.ContextVar, "set"): _inplace(NONE, NONE),
    (contextvars.ContextVar, "reset"): _inplace(NONE, NONE),
}

# Natives whose result does not depend on the iteration order of a set argument (a set of
# objects iterates in an order that follows their ids: magpy.capture.refgraph.reads.Reads.set_order).  Every
# other native that reads a set (list, tuple, sorted, sum, enumerate, str, set.pop ...) sees it.
SET_ORDER_FREE = frozenset({len, bool, hash, id, isinstance, issubclass, callable, type, set, frozenset,
                            operator.contains, operator.eq, operator.ne, operator.sub, operator.and_,
                            operator.or_, operator.xor, operator.le, operator.lt, operator.ge, operator.gt})
SET_ORDER_FREE_METHODS = frozenset(m for m in _SET_METHODS if m != "pop") | {"__eq__", "__ne__"}


# Natives that hash values into a dict or set, comparing them with ``==`` to members of equal
# hash: there a Python ``__hash__``/``__eq__`` runs natively, unseen by the monitor
# (magpy.capture.refgraph.unseen.Unseen.hashes).  ``("key", i)``: argument ``i`` is one key
# looked up in, stored into or removed from position 0 (the dict or set); ``("elements", i)``:
# the elements of every argument from ``i`` on are hashed (a new set, or into position 0).
HASHING_FUNCTIONS: dict[Callable, tuple[str, int]] = {
    set: ("elements", 0), frozenset: ("elements", 0),
    operator.contains: ("key", 1), operator.getitem: ("key", 1),
}
HASHING_METHODS: dict[tuple[type, str], tuple[str, int]] = {
    **{(dict, m): ("key", 1) for m in ("get", "__contains__", "__getitem__", "pop", "setdefault",
                                       "__setitem__", "__delitem__")},
    (dict, "fromkeys"): ("elements", 0),
    **{(t, "__contains__"): ("key", 1) for t in (set, frozenset)},
    **{(set, m): ("key", 1) for m in ("add", "discard", "remove")},
    **{(t, m): ("elements", 1) for t in (set, frozenset)
       for m in ("union", "intersection", "difference", "symmetric_difference", "issubset", "issuperset",
                 "isdisjoint")},
    **{(set, m): ("elements", 1) for m in ("update", "intersection_update", "difference_update",
                                          "symmetric_difference_update")},
}
# Python ``__hash__`` methods that read nothing that changes: an Enum member hashes its
# ``_name_``; a tensor (and so a Parameter) its ``id``.
STABLE_HASHES = frozenset({type_lookup(enum.Enum, "__hash__"), type_lookup(torch.Tensor, "__hash__")})


def hashing(callee) -> tuple[str, int] | None:
    """How native ``callee`` hashes its arguments (:data:`HASHING_METHODS`), or None."""
    try:
        found = HASHING_FUNCTIONS.get(callee)
    except TypeError:  # unhashable callee
        return None
    if found is not None:
        return found
    owner = getattr(callee, "__self__", None)
    owner = getattr(callee, "__objclass__", None) if owner is None else owner
    owner_type = owner if isinstance(owner, type) else type(owner)
    name = getattr(callee, "__name__", "")
    for klass in owner_type.__mro__:
        found = HASHING_METHODS.get((klass, name))
        if found is not None:
            return found
    return None


# The warnings machinery: calls a recording run records itself (magpy.capture.callees.warnings_logging), as
# effect
# steps the mock makes again in program order without ending the graph.  They are neither
# pure calls nor graph breaks; in a tensor ``if``'s arm they stop the fork (no annotation).
WARNINGS_EFFECTS = (warnings.warn, warnings.simplefilter, warnings.filterwarnings, warnings.resetwarnings,
                    warnings.catch_warnings, warnings.catch_warnings.__enter__,
                    warnings.catch_warnings.__exit__)


# The logging machinery, the same way: a ``Logger`` method's record goes to the logger's
# handlers, changing none of the program's objects.  Method -> its level (None: ``log``'s
# first argument).  ``exception`` (it reads the exception being handled) is not one.
LOGGING_EFFECTS = {logging.Logger.debug: logging.DEBUG, logging.Logger.info: logging.INFO,
                   logging.Logger.warning: logging.WARNING, logging.Logger.error: logging.ERROR,
                   logging.Logger.critical: logging.CRITICAL, logging.Logger.log: None}
# Methods libraries add to Logger that log once per message (transformers' ``warning_once``,
# a functools.lru_cache): the mock calls them again, and they log nothing after the first.
_ONCE = ("warning_once", "info_once")


def once_logging_methods() -> list:
    """The log-once methods on ``logging.Logger`` now (a library may add them at any time)."""
    return [m for m in (getattr(logging.Logger, name, None) for name in _ONCE) if m is not None]


def records_itself(callee) -> bool:
    """Is ``callee`` one of :data:`WARNINGS_EFFECTS`, :data:`LOGGING_EFFECTS` or the
    log-once methods?"""
    return any(callee is f for f in (*WARNINGS_EFFECTS, *LOGGING_EFFECTS, *once_logging_methods()))


# Natives that read the program's frames (their locals), where shadow slots cannot follow.
FRAME_READERS = (locals, vars, eval, exec, dir, sys._getframe, inspect.currentframe, inspect.stack)


def set_order_free(callee) -> bool:
    try:
        if callee in SET_ORDER_FREE:
            return True
    except TypeError:  # unhashable callee
        return False
    owner = getattr(callee, "__self__", None)
    owner = getattr(callee, "__objclass__", None) if owner is None else owner
    owner_type = owner if isinstance(owner, type) else type(owner)
    name = getattr(callee, "__name__", "")
    return issubclass(owner_type, (set, frozenset)) and name in SET_ORDER_FREE_METHODS


# Types whose methods are all pure functions of immutable values (str.join, int.bit_length).
IMMUTABLE_METHOD_OWNERS = (str, bytes, int, float, complex, bool, tuple, frozenset, range, slice,
                           torch.dtype, torch.device, torch.Size, torch.finfo, torch.iinfo)

# --------------------------------------------------------------------------- torch
# Functions of torch kept native that are not tensor operations but are known impure.
TORCH_IMPURE = frozenset({"manual_seed", "seed", "initial_seed", "get_rng_state", "set_rng_state",
                          "save", "load", "set_default_dtype", "set_default_device", "set_printoptions",
                          "synchronize", "set_num_threads", "use_deterministic_algorithms",
                          "checkpoint", "register_hook"})

# torch.distributed communicates with other processes: nothing in it is pure (a collective
# must run exactly once per call, in program order).  Its natives (process groups, DDP's
# reducer and logger) and its collectives change native state and the data of the tensors
# they are given, never Python objects: EXTERNAL; the collectives of Python objects fill the
# lists they are given: IMPURE.
TORCH_DISTRIBUTED = ("torch.distributed", "torch._C._distributed")
TORCH_DISTRIBUTED_OBJECTS = frozenset({"broadcast_object_list", "all_gather_object", "gather_object",
                                       "scatter_object_list", "send_object_list", "recv_object_list"})


def is_dtensor(t) -> bool:
    """Is ``t`` a DTensor (FSDP2's sharded parameters and their optimizer state)?  Its
    operations take no plain tensor beside it ("mixed torch.Tensor and DTensor"): a float
    magpy would give them as a tensor stays a float."""
    return isinstance(t, torch.Tensor) and type(t).__module__.startswith(TORCH_DISTRIBUTED)


# Grad-mode switches (``no_grad``, ``enable_grad``, ``set_grad_enabled`` as context managers and
# decorators) that reach ``__torch_function__``: graph state, recorded into the graph as grad-mode
# nodes before the next operation, not dynamic operations.
TORCH_GRAD_MODE = frozenset({"_set_grad_enabled"})

# Tensor methods/attributes whose result comes from metadata only (no data read, no node).
TORCH_METADATA = frozenset({
    "size", "dim", "ndimension", "numel", "nelement", "stride", "storage_offset", "is_contiguous",
    "is_floating_point", "is_complex", "is_signed", "element_size", "get_device", "__len__",
    "is_same_size", "is_sparse", "is_quantized", "is_meta", "is_cuda", "is_cpu", "has_names",
    "shape", "dtype", "device", "ndim", "requires_grad", "is_leaf", "layout", "is_mkldnn",
    "is_nested", "names", "itemsize", "nbytes", "is_inference", "is_conj", "is_neg",
    "__torch_function__", "_is_view", "is_set_to", "dim_order", "is_xpu", "is_mps", "is_vulkan",
})

# Operations whose result's shape follows the data of a tensor argument, not only the shapes
# of the arguments (torch's dynamic_output_shape operators; sizes given as tensors), by name:
# None (always), or whether these arguments make it so.  Reading the size of such a result, or
# of a tensor computed from one, reads tensor data (magpy.graphs.opgraph): a size baked into a record
# would be wrong for other data.
def _tensor_repeats(args, kwargs) -> bool:
    repeats = kwargs.get("repeats", args[1] if len(args) > 1 else None)
    return isinstance(repeats, torch.Tensor) and repeats.numel() > 1


def _mask_or_tensor_bounds(args, kwargs) -> bool:
    keys = args[1] if len(args) > 1 and type(args[1]) is tuple else args[1:2]
    return any(isinstance(k, torch.Tensor) and k.dtype in (torch.bool, torch.uint8)
               or type(k) is slice and any(isinstance(b, torch.Tensor) for b in (k.start, k.stop, k.step))
               for k in keys)


def _integer_tensor_size(args, kwargs) -> bool:
    """A 0-d integer tensor where the operation takes sizes (``torch.zeros((2, n))``)."""
    given = args[1:] if args and isinstance(args[0], torch.Tensor) else args
    return any(isinstance(a, torch.Tensor) and a.dim() == 0 and not a.is_floating_point()
               for a in pytree.tree_leaves((given, kwargs)))


TORCH_DATA_SHAPED: dict[str, Callable | None] = {
    "nonzero": None, "argwhere": None, "masked_select": None, "unique": None, "_unique": None,
    "_unique2": None, "unique_consecutive": None, "bincount": None,
    "where": lambda args, kwargs: len(args) + len(kwargs) == 1,
    "repeat_interleave": _tensor_repeats, "__getitem__": _mask_or_tensor_bounds,
    **dict.fromkeys(("zeros", "ones", "empty", "full", "rand", "randn", "randint", "arange",
                     "linspace", "logspace", "eye", "new_zeros", "new_ones", "new_empty", "new_full",
                     "expand", "view", "reshape", "repeat", "narrow", "tile", "broadcast_to",
                     "unflatten", "topk", "kthvalue", "pad"), _integer_tensor_size),
}

# Metadata reads that depend on a tensor's sizes, and operations whose number of results does.
TORCH_SIZE_READS = frozenset({"size", "shape", "numel", "nelement", "__len__", "stride",
                              "is_contiguous", "is_same_size", "nbytes"})
TORCH_SIZED_RESULTS = frozenset({"unbind", "split", "chunk", "tensor_split", "split_with_sizes",
                                 "unsafe_split", "unsafe_chunk", "hsplit", "vsplit", "dsplit"})


# Operations whose result has the shape of their first argument whatever the others hold (an
# index of data-dependent length writes into a tensor of fixed shape).
TORCH_SHAPE_OF_FIRST = frozenset({"index_add", "index_copy", "index_fill", "index_put", "scatter",
                                  "scatter_add", "scatter_reduce", "masked_fill", "masked_scatter",
                                  "put"})


def shaped_by_data(name: str, args: tuple, kwargs: dict) -> bool:
    """Does operation ``name`` on these arguments give a result whose shape follows tensor data?"""
    if name not in TORCH_DATA_SHAPED:
        return False
    given = TORCH_DATA_SHAPED[name]
    return given is None or given(args, kwargs)


# Tensor attributes that hold another tensor: state of the tensor, like an object's attribute
# (the RefGraph tracks reads and writes of a leaf's ``.grad``, magpy.training.train_steps), not a data read.
TORCH_REFERENCES = frozenset({"grad"})

# Operations whose non-tensor result is computed from metadata only (dtype, device, layout,
# whether a tensor is 0-d), all fixed by the guard: that result is a constant of the record.
# ``t.type()`` is a string; ``t.type(dtype_or_name)`` converts, an ordinary recorded operation.
TORCH_METADATA_RESULTS = frozenset({"type", "result_type", "promote_types", "can_cast"})

# The truth of a tensor: a data read, except as the condition of an ``assert`` (or of
# ``if not c: raise AssertionError(msg)``, as ``torch._assert`` does), recorded as an assertion
# operation of the graph instead.
TORCH_TRUTH = frozenset({"__bool__"})

# torch's Python functions run natively, except these, which the monitor enters: the truth
# ``torch._assert`` reads is seen as an assertion (``if not c: raise AssertionError``), and
# ``torch.distributed.is_available()`` reads a constant of the build, not an eager step
# (``is_initialized`` has a stand-in: magpy.capture.callees.builtin_standins).
MONITORED_TORCH_FUNCTIONS = (torch._assert, torch.distributed.is_available)

# Tensor operations that read tensor data into Python ...
TORCH_DATA_READS = frozenset({
    "item", "tolist", "__bool__", "__int__", "__float__", "__complex__", "__index__", "numpy",
    "__array__", "__format__", "__repr__", "__str__", "equal", "allclose", "is_nonzero",
    "__contains__", "__array_wrap__",
})

# ... and those that read no tensor data but reach outside the graph, with what they do, as
# their break reasons say.
TORCH_DYNAMIC_EFFECTS = {
    **dict.fromkeys(("backward", "register_hook", "retain_grad", "requires_grad_", "grad_fn"),
                    "reaches autograd outside the graph"),
    **dict.fromkeys(("data_ptr", "untyped_storage", "storage", "_version", "_base", "share_memory_",
                     "pin_memory", "__dlpack__"), "reaches the tensor's storage outside the graph"),
    **dict.fromkeys(("__hash__", "__reduce_ex__", "__deepcopy__", "__setstate__"),
                    "uses the tensor object itself outside the graph"),
}

# The dynamic tensor operations: never graph operations.
TORCH_DYNAMIC = TORCH_DATA_READS | TORCH_DYNAMIC_EFFECTS.keys()


def dynamic_reason(name: str) -> str:
    """Why the dynamic operation ``name`` is not a graph operation, in words for its break."""
    return TORCH_DYNAMIC_EFFECTS.get(name, "reads tensor data into Python")


def is_tensor_method(func) -> bool:
    """A Tensor method: bound to a tensor, a C ``TensorBase`` descriptor, or a Python
    ``torch.Tensor`` function."""
    if isinstance(getattr(func, "__self__", None), torch.Tensor):
        return True
    owner = getattr(func, "__objclass__", None)
    if isinstance(owner, type) and issubclass(owner, torch._C.TensorBase):
        return True
    qual = getattr(func, "__qualname__", "")
    name = getattr(func, "__name__", "")
    return qual.startswith(("TensorBase.", "Tensor.")) and hasattr(torch.Tensor, name)


def torch_name(func) -> str:
    """The name an override-dispatched torch callable is classified by."""
    owner = getattr(func, "__self__", None)
    if type(owner) is types.GetSetDescriptorType or type(owner) is types.MemberDescriptorType:
        return owner.__name__
    return getattr(func, "__name__", "")


# --------------------------------------------------------------------------- numpy
# numpy computes new values from its arguments' values (arrays made inside the call, from
# guarded Python values, as BigBird's attention plan), except numpy.random (hidden state)
# and the array methods that write in place.
NUMPY_INPLACE_METHODS = frozenset({"fill", "sort", "resize", "put", "itemset", "setfield", "setflags",
                                   "partition", "__setitem__", "__delitem__", "__iadd__", "__isub__",
                                   "__imul__", "__itruediv__", "__ifloordiv__", "__imod__", "__ipow__",
                                   "__iand__", "__ior__", "__ixor__", "__ilshift__", "__irshift__",
                                   "__imatmul__"})


def is_global_random_state(v) -> bool:
    """Is ``v`` the process's hidden random generator of a library (numpy's global
    ``RandomState``, behind ``np.random.rand`` and friends)?  Programs change it only by
    drawing from it: a step given it acts on that very object in every replay."""
    np_random = sys.modules.get("numpy.random.mtrand")
    return np_random is not None and v is getattr(np_random, "_rand", None)


def is_numpy_module(mod: str | None) -> bool:
    return bool(mod) and (mod == "numpy" or mod.startswith("numpy."))


def _numpy(callee) -> Annotation | None:
    owner = getattr(callee, "__self__", None)
    if (owner is not None and not isinstance(owner, types.ModuleType)
            and is_numpy_module(type(owner).__module__)):
        if type(owner).__module__.startswith("numpy.random"):
            return IMPURE   # np.random.rand is a method of the global RandomState
        return _inplace(NONE) if getattr(callee, "__name__", "") in NUMPY_INPLACE_METHODS else PURE
    mod = getattr(callee, "__module__", None)
    if not isinstance(mod, str):
        mod = type(callee).__module__   # a ufunc
    if not is_numpy_module(mod):
        return None
    return IMPURE if mod.startswith("numpy.random") else PURE


def _torch_op(callee) -> Annotation | None:
    """``torch.ops.ns.op`` (a packet or one overload, custom ops included): a tensor operation,
    recorded by ``__torch_function__``; it writes the arguments its schema marks as written."""
    if isinstance(callee, torch._ops.OpOverloadPacket):
        schemas = [getattr(callee, name)._schema for name in callee.overloads()]
    elif isinstance(callee, torch._ops.OpOverload):
        schemas = [callee._schema]
    else:
        return None
    written = {i for schema in schemas for i, arg in enumerate(schema.arguments)
               if arg.alias_info is not None and arg.alias_info.is_write}
    return Annotation(inplace=tuple(sorted(written))) if written else PURE


# --------------------------------------------------------------------------- lookup
_USER: dict[int, tuple[Callable, Annotation]] = {}


def annotate(fn: Callable | None = None, *, pure: bool = True, reads: str | tuple = DEEP,
             inplace: tuple = (), relation: str | None = None):
    """Annotate a function of your own so magpy runs it natively under these properties.

    Use it for helpers magpy should not look into, or native functions it does not know:
    ``magpy.annotate(my_c_function, pure=True)``.  Returns ``fn`` (usable as a decorator).
    A callee annotated ``pure=False`` runs eagerly on each call (see :func:`disable`).
    """
    def register(f):
        if not callable(f):
            raise TypeError(f"magpy.annotate needs a callable, got {type(f).__name__}")
        _USER[id(f)] = (f, Annotation(pure=pure, reads=reads, inplace=inplace, relation=relation))
        return f

    return register if fn is None else register(fn)


def disable(fn: Callable | None = None):
    """Run ``fn`` as it is, unmonitored, inside compiled calls (a decorator).

    Each call of it is an eager step between graphs, made again on every call: its result is
    a value computed eagerly (``magpy.records.segments``).  Given a mutable object (a list, a module)
    or returning tensors, it makes the calling call run eagerly instead.  Returns ``fn``.

    ``with magpy.disable():`` inside a compiled function makes each call that enters the
    block run eagerly (outside compiled code it does nothing).
    """
    if fn is None:
        return _DisabledBlock()
    return annotate(fn, pure=False)


class _DisabledBlock:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def ends_recording(callee) -> bool:
    """Does calling ``callee`` make the call run eagerly (entering ``magpy.disable()``)?"""
    return getattr(callee, "__func__", callee) is _DisabledBlock.__enter__


def native_functions() -> list[Callable]:
    """Python functions that run natively under their annotation (the record policy keeps
    the monitor out of them): the users' (:func:`annotate`) and the table's own."""
    return [f for f, _ in _USER.values()] + [f for f in FUNCTIONS if type(f) is types.FunctionType]


def _owner_entry(owner_type, name):
    for klass in owner_type.__mro__:
        ann = METHODS.get((klass, name))
        if ann is not None:
            return ann
    if issubclass(owner_type, IMMUTABLE_METHOD_OWNERS):
        return PURE
    return None


def lookup(callee) -> tuple[Annotation | None, bool]:
    """``(annotation or None, bound)``: ``bound`` means position 0 is the bound ``self``."""
    user = _USER.get(id(callee))
    if user is not None and user[0] is callee:
        return user[1], False
    try:
        ann = FUNCTIONS.get(callee)
    except TypeError:  # unhashable callee
        ann = None
    if ann is not None:
        return ann, False
    t = type(callee)
    ann = _numpy(callee) or _torch_op(callee)
    if ann is not None:
        return ann, False
    if t is types.BuiltinFunctionType or t is types.MethodWrapperType:
        owner = callee.__self__
        if owner is None or type(owner) is types.ModuleType or is_pybind(owner):
            return _module_function(callee), False
        if isinstance(owner, type) and t is types.BuiltinFunctionType:
            return _owner_entry(owner, callee.__name__), False
        return _owner_entry(type(owner), callee.__name__), True
    if t in (types.MethodDescriptorType, types.WrapperDescriptorType, types.ClassMethodDescriptorType):
        return _owner_entry(callee.__objclass__, callee.__name__), False
    if t is functools.partial or t is operator.itemgetter or t is operator.attrgetter:
        return PURE, False
    if t is weakref.ReferenceType:
        return Annotation(reads=NONE, relation="deref"), False
    if t is _LRU_CACHE_WRAPPER:
        return PURE, False   # an lru_cache'd function: its result is a function of its arguments
    if isinstance(callee, type):
        # A C class called natively: constructing is pure unless it is a known effectful type.
        if _is_library(callee.__module__):
            return PURE, False
        if not callee.__flags__ & _HEAPTYPE:
            return None, False   # a C class of another library
        base = _builtin_constructor(callee)
        return (None if base is None else lookup(base)[0]), False
    if t is types.FunctionType and _is_library(callee.__module__) and callee not in MONITORED_TORCH_FUNCTIONS:
        return torch_library_annotation(callee), False
    return None, False


_LRU_CACHE_WRAPPER = type(functools.lru_cache(maxsize=None)(len))
_HEAPTYPE = 1 << 9   # Py_TPFLAGS_HEAPTYPE: a class defined in Python
_TYPE_CALL = type.__dict__["__call__"]


def _builtin_constructor(cls) -> type | None:
    """The builtin class whose construction a class of the program's is, when calling it runs
    no Python code: its ``__new__`` and ``__init__`` (and its metaclass's ``__call__``) are
    inherited from C (``class Config(dict): ...``, ``class Empty: pass``); else None (the
    monitor enters Python ones, so a native call here means they run natively unseen)."""
    if type_lookup(type(cls), "__call__") is not _TYPE_CALL:
        return None
    for name in ("__new__", "__init__"):
        owner = next(k for k in cls.__mro__ if name in k.__dict__)
        if owner.__flags__ & _HEAPTYPE:
            return None
    return next(k for k in cls.__mro__ if not k.__flags__ & _HEAPTYPE)



def is_pybind(owner) -> bool:
    # pybind11 functions (torch._C._get_tracing_state) are bound to a capsule, not a module.
    return type(owner).__name__ == "PyCapsule" or type(owner).__name__.startswith("pybind11")


def _module_function(fn) -> Annotation | None:
    mod = getattr(fn, "__module__", None) or ""
    if mod in PURE_MODULES:
        return IMPURE if fn.__name__ in IMPURE_IN_PURE_MODULES else PURE
    if _is_library(mod):
        return torch_library_annotation(fn)
    return None


def _is_library(mod: str | None) -> bool:
    return bool(mod) and (mod == "torch" or mod.startswith("torch.") or mod in ("builtins", "collections")
                          or mod in PURE_MODULES)


def torch_library_annotation(fn) -> Annotation:
    """A torch function reached natively that is not a tensor operation (the tensor ones
    go through ``__torch_function__``): a configuration query such as
    ``torch.is_grad_enabled()``, pure unless listed in :data:`TORCH_IMPURE` or part of
    torch.distributed (:data:`TORCH_DISTRIBUTED`)."""
    name = getattr(fn, "__name__", "")
    if (getattr(fn, "__module__", None) or "").startswith(TORCH_DISTRIBUTED):
        return IMPURE if name in TORCH_DISTRIBUTED_OBJECTS else EXTERNAL
    return IMPURE if name in TORCH_IMPURE else PURE


def is_builtin_module_attr(module: types.ModuleType) -> bool:
    """Attributes of torch and standard-library modules are assumed not to be monkeypatched
    between calls, so reading ``torch.relu`` or ``math.pi`` needs no guard."""
    name = getattr(module, "__name__", "")
    return name == "torch" or name.startswith("torch.") or name in PURE_MODULES or name in (
        "builtins", "collections", "typing", "warnings", "inspect", "dataclasses", "enum", "copy")

