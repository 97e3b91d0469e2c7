"""Python stand-ins for builtins whose native run would hide what they do with tensors.

A recording run enters these instead of the builtin (``CallPolicy.reroute``) when the call's
arguments are ones the stand-in handles, so the monitor sees every step.  ``max(a, b)`` of
0-d tensors is CPython's ``min_max``: keep the first item, and replace it by each later item
that compares greater (``b > a``).  Monitored, that comparison is a tensor ``if`` whose arms
both leave tensors from before it, so it becomes a ``torch.cond`` and the mock gives the
program ``a`` or ``b`` itself (magpy.graphs.controlflow), as eager does: ``max(a, b) is a`` unless
``b > a``, NaN included.  Where the ``if`` cannot be a cond (the items mix tensors and
Python numbers, control flow is off) it is an eager step whose truth is checked.

Each stand-in does what the C code does, in its order, and is chosen only for arguments
with which it cannot raise (real 0-d tensors and real numbers), so no traceback shows it.

``collections.Counter(iterable)`` tallies through the C helper ``_count_elements``, which
iterates the program's generator natively (a dynamic operation); its stand-in is the Python
version ``collections`` itself falls back to, so the iteration is monitored.  It can raise
only what the program's own iterable or keys raise.

Legacy tensor constructors (``torch.FloatTensor([0.5])``, ``torch.Tensor(2, 3)``) make their
tensor in C, out of the operation recorder's sight (a tensor of unknown origin); given sizes
or Python numbers, their stand-in makes it with ``torch.empty``/``torch.tensor``, which are
recorded (raising, for ragged data, what the constructor raises).
"""
from __future__ import annotations

import collections
import functools
import types

import torch

_NUMBERS = (int, float, bool)


def max_(*args):
    """``max(*args)``: the first greatest item (CPython: ``item > maxitem`` replaces it)."""
    items = iter(args[0] if len(args) == 1 else args)
    best = next(items)
    for x in items:
        if x > best:
            best = x
    return best


def min_(*args):
    """``min(*args)``: the first least item (CPython: ``item < minitem`` replaces it)."""
    items = iter(args[0] if len(args) == 1 else args)
    best = next(items)
    for x in items:
        if x < best:
            best = x
    return best


def count_elements(mapping, iterable):
    """``_collections._count_elements``: tally the iterable's items into ``mapping``."""
    mapping_get = mapping.get
    for elem in iterable:
        mapping[elem] = mapping_get(elem, 0) + 1


def always(stand_in):
    """The ``choose`` of ``CallPolicy.reroute`` for a stand-in fit for any arguments (or a
    Python function the monitor is to enter as it is)."""
    def choose(caller, args, kwargs):
        return stand_in
    choose.stand_in = stand_in   # (CallPolicy.enters: a resume point's frames)
    return choose


def _comparable(x) -> bool:
    """Compared with ``<``/``>`` against the others, does ``x`` give a value whose truth is
    known to be readable (a real 0-d tensor, or a real Python number)?"""
    if type(x) in _NUMBERS:
        return True
    return isinstance(x, torch.Tensor) and x.dim() == 0 and not x.is_complex()


def extremum(stand_in):
    """The ``choose`` of ``CallPolicy.reroute`` for ``max``/``min``: ``stand_in`` (as
    :func:`at_site`) for two or more positional items, or one list or tuple of them, without
    ``key``/``default``, of which one at least is a tensor and all are :func:`_comparable`."""
    def choose(caller, args, kwargs):
        if kwargs or not args:
            return None
        items = args
        if len(args) == 1:
            if type(args[0]) not in (list, tuple) or not args[0]:
                return None
            items = args[0]
        if any(isinstance(x, torch.Tensor) for x in items) and all(map(_comparable, items)):
            return at_site(stand_in, caller)
        return None
    return choose


_SITES: dict[tuple, types.FunctionType] = {}


def at_site(stand_in, caller):
    """``stand_in`` as a function of its own for the program's call at ``caller`` (a monitored
    frame; None: shared), named after that call (``max at model.py:12``).  Control flow
    decisions are made per code location (an ``if`` that once could not be a cond is a break
    from then on, magpy.graphs.controlflow): one program's ``max`` must not decide another's."""
    code = getattr(caller, "code", None)
    if code is None:
        return stand_in
    key = (stand_in, code, caller.lasti)
    fn = _SITES.get(key)
    if fn is None:
        name = f"{stand_in.__name__.rstrip('_')} at {code.co_filename}:{caller.f_lineno}"
        fn = _SITES[key] = types.FunctionType(stand_in.__code__.replace(co_qualname=name),
                                              stand_in.__globals__, stand_in.__name__)
    return fn


@functools.cache   # (one stand-in per dtype and device, whichever constructor chose it)
def _legacy_standin(dtype: torch.dtype, device: str):
    """What ``torch.FloatTensor(...)`` (a legacy constructor of ``dtype`` on ``device``) does
    with sizes or with Python data, as the factories torch records."""
    def legacy_constructor(*args):
        if len(args) == 1 and type(args[0]) in (list, tuple):
            return torch.tensor(args[0], dtype=dtype, device=device)
        return torch.empty(args[0] if len(args) == 1 else args, dtype=dtype, device=device)
    legacy_constructor.__qualname__ = f"legacy {dtype} constructor"
    return legacy_constructor


def _data(v) -> bool:
    return type(v) in _NUMBERS or (type(v) in (list, tuple) and all(map(_data, v)))


def _legacy(kind):
    """The ``choose`` of a legacy constructor (``torch.FloatTensor``, ``torch.Tensor``): its
    stand-in for sizes (ints, one ``torch.Size``) or one list or tuple of Python numbers;
    natively (a tensor of unknown origin, a graph break) for anything else (a tensor, a
    storage, ``device=``)."""
    def choose(caller, args, kwargs):
        sizes = (all(type(a) is int and a >= 0 for a in args)
                 or (len(args) == 1 and type(args[0]) is torch.Size))
        if kwargs or not (sizes or (len(args) == 1 and type(args[0]) in (list, tuple) and _data(args[0]))):
            return None
        # torch.Tensor makes the default dtype (read now: the record keeps it, as torch.tensor's)
        if kind is torch.Tensor:
            return _legacy_standin(torch.get_default_dtype(), "cpu")
        return _legacy_standin(kind.dtype, "cuda" if kind.is_cuda else "cpu")
    return choose


_LEGACY_NAMES = ("FloatTensor", "DoubleTensor", "HalfTensor", "BFloat16Tensor", "LongTensor", "IntTensor",
                 "ShortTensor", "CharTensor", "ByteTensor", "BoolTensor")
_LEGACY_CONSTRUCTORS = (torch.Tensor, *(getattr(module, name) for module in (torch, torch.cuda)
                                         for name in _LEGACY_NAMES))


@functools.cache   # (one stand-in per legacy type)
def _cast_standin(kind):
    """What ``t.type(kind)`` does for a legacy tensor type ``kind``: a cast to its dtype and
    device (``t`` itself where it has them), as ``Tensor.to`` makes it."""
    dtype, device = kind.dtype, "cuda" if kind.is_cuda else "cpu"

    def tensor_type(t, kind=None):
        return t.to(device=device, dtype=dtype)
    tensor_type.__qualname__ = f"Tensor.type({kind.__module__}.{kind.__name__})"
    return tensor_type


_TENSORTYPE = type(torch.FloatTensor)   # (torch.tensortype, not a name torch exports)
_LEGACY_BY_NAME = {f"{kind.__module__}.{kind.__name__}": kind for kind in _LEGACY_CONSTRUCTORS[1:]}


def reversed_modules(seq):
    """``reversed(seq)`` of a module container without ``__reversed__`` (``nn.ModuleList``,
    ``nn.Sequential``): CPython's sequence protocol, ``seq[i]`` from ``len(seq) - 1`` down,
    monitored (run natively, its items are modules of unknown origin to the recording).  (No
    comprehension: it would be a native frame of magpy's own module.)"""
    items = []
    for i in range(len(seq) - 1, -1, -1):
        items.append(seq[i])
    return iter(items)


def _reversed(caller, args, kwargs):
    """The ``choose`` of ``reversed``: :func:`reversed_modules` for one module container."""
    if kwargs or len(args) != 1 or not isinstance(args[0], torch.nn.Module):
        return None
    kind = type(args[0])
    sequence = getattr(kind, "__reversed__", None) is None and hasattr(kind, "__getitem__")
    return reversed_modules if sequence else None


def _tensor_type(caller, args, kwargs):
    """The ``choose`` of ``Tensor.type``: a cast to a legacy tensor type (``torch.FloatTensor``,
    or its name) is a ``Tensor.to``, which the recorder sees; anything else (no type: a read of
    the type's name; a dtype; ``non_blocking=``) natively."""
    if kwargs or len(args) != 2 or not isinstance(args[0], torch.Tensor):
        return None
    kind = _LEGACY_BY_NAME.get(args[1]) if type(args[1]) is str else args[1]
    return _cast_standin(kind) if type(kind) is _TENSORTYPE else None


def is_initialized():
    """``torch.distributed.is_initialized()``: is the default process group up?  Read from
    the attribute the property behind ``GroupMember.WORLD`` returns, which the guard reads
    again on each call (a record made before ``init_process_group`` misses after it)."""
    return _WORLD._default_pg is not None


def _process_group_query(caller, args, kwargs):
    return None if args or kwargs else is_initialized


def _distributed_reroutes() -> tuple:
    """``is_initialized``'s stand-in where this torch has distributed support and keeps the
    default group where the stand-in reads it."""
    if not torch.distributed.is_available():
        return ()
    global _WORLD
    from torch.distributed import distributed_c10d
    # (held here: what torch's own modules hold is taken as constant, unguarded)
    _WORLD = getattr(distributed_c10d, "_world", None)
    if "_default_pg" not in vars(_WORLD or object()):
        return ()
    return ((distributed_c10d.is_initialized, _process_group_query),)


# (builtin, choose) for magpy.records.record's call policy.
REROUTES = ((max, extremum(max_)), (min, extremum(min_)),
            (collections._count_elements, always(count_elements)),
            *((kind, _legacy(kind)) for kind in _LEGACY_CONSTRUCTORS),
            (torch.Tensor.type, _tensor_type), (reversed, _reversed), *_distributed_reroutes())
# (owner, builtin method name, choose), for the method bound to an instance
METHOD_REROUTES = ((torch.Tensor, "type", _tensor_type),)
FILE = __file__
