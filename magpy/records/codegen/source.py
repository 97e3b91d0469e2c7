"""What generated code is made of: named constants, literals, and compiling the source.

Values are written into generated source as literals only when ``repr`` gives back the same
value of the same type (ints, strs, bytes, finite floats); everything else (numpy scalars,
enums, NaN, tuples of those ...) is referenced as a named constant of the namespace.
"""
from __future__ import annotations

import linecache
import math
import numbers

import numpy as np
import torch

_LITERAL = (int, str, bool, type(None), bytes, float)
_MAX_LITERAL_BITS = 4096   # repr() refuses ints of more than 4300 digits (sys.set_int_max_str_digits)


# The namespace entry holding, by constant name, how to make each of magpy's own checking
# objects again in another process (a saved program, magpy.api.persist): ``(kind, *data)``, which
# ``MAKERS[kind](*data)`` turns into the object.
RECIPES = "__magpy_recipes__"
MAKERS: dict = {}


class Names:
    """Constants referenced by generated code, named K0, K1 ... (identity-unique)."""

    def __init__(self, ns):
        self.ns = ns
        self._ids = {}   # the namespace keeps each constant alive, so ids stay unique

    def const(self, value, hint="K", recipe: tuple | None = None) -> str:
        """The name of ``value`` in the namespace; ``recipe``: how to make it again
        (:data:`RECIPES`), for an object of magpy's own that is no reference to the program's."""
        name = self._ids.get(id(value))
        if name is None:
            name = f"{hint}{len(self._ids)}"
            self._ids[id(value)] = name
            self.ns[name] = value
            if recipe is not None:
                self.ns.setdefault(RECIPES, {})[name] = recipe
        return name


def tensor_meta(t: torch.Tensor) -> list:
    """What a tensor is, not what it holds, as plain data: the kind :func:`empty_like_meta`
    makes again (what a tensor guard checks)."""
    return [list(t.shape), list(t.stride()), str(t.dtype).rsplit(".", 1)[-1], str(t.device),
            bool(t.requires_grad), type(t) is torch.nn.Parameter, bool(t.is_inference())]


def empty_like_meta(meta: list) -> torch.Tensor:
    """An uninitialised tensor of the metadata :func:`tensor_meta` wrote (a Parameter where
    the original was one, an inference tensor where it was one)."""
    shape, stride, dtype, device, requires_grad, parameter, inference = meta
    with torch.inference_mode(inference):
        t = torch.empty_strided(shape, stride, dtype=getattr(torch, dtype), device=device)
    if parameter:
        return torch.nn.Parameter(t, requires_grad=requires_grad)
    return t.requires_grad_(requires_grad) if requires_grad else t



def compile_source(src: str, ns: dict, name: str, tag: str):
    """Define the function ``name`` from generated ``src`` (kept in linecache for tracebacks)."""
    filename = f"<magpy {tag}>"
    linecache.cache[filename] = (len(src), None, src.splitlines(True), filename)
    exec(compile(src, filename, "exec"), ns)
    return ns[name]


def var(sn) -> str:
    return f"v{sn.id}"



def value_checks(names: Names, v: str, value) -> list[str]:
    """Conditions that hold when variable ``v`` is ``value``: same type, same value."""
    t = type(value)
    if value is None or t is bool or value is Ellipsis:
        return [f"{v} is {value!r}"]
    if t is float and math.isnan(value):
        return [f"type({v}) is float", f"{v} != {v}"]
    if is_literal(value) and not (t is float and value == 0):   # -0.0 == 0.0: SAME tells them apart
        return [f"type({v}) is {t.__name__}", f"{v} == {value!r}"]
    if t is torch.device:
        return [f"{v} == {names.const(value)}"]
    if t in (torch.dtype, torch.layout, torch.memory_format):
        return [f"{v} is {names.const(value)}"]
    c = names.const(value)
    return [f"({v} is {c} or SAME({v}, {c}))"]   # the same tuple object is the common case


def is_literal(v) -> bool:
    """Is ``repr(v)`` Python source giving back ``v``, of its own type?  (Not for NaN,
    infinities, numpy scalars, enums: those are named constants of the namespace.)"""
    t = type(v)
    if t is float:
        return math.isfinite(v)
    if t is int:
        return v.bit_length() <= _MAX_LITERAL_BITS
    return t in _LITERAL



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
    if t is np.ndarray:   # (an array an eager step computed, that a graph took as a constant)
        return a.dtype == b.dtype and a.shape == b.shape and bool(
            np.array_equal(a, b, equal_nan=a.dtype.kind in "fc"))
    if isinstance(a, numbers.Complex) and not isinstance(a, numbers.Integral):
        # floats, complex numbers and numpy's: compare the parts, signs of zeros included
        ca, cb = complex(a), complex(b)
        return _same_float(ca.real, cb.real) and _same_float(ca.imag, cb.imag) and bool(a == b or a != a)
    return a == b


def _same_float(x: float, y: float) -> bool:
    if x != x:
        return y != y
    return x == y and math.copysign(1.0, x) == math.copysign(1.0, y)


