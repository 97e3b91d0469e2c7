"""numpy's API on torch tensors: what a numpy call, method, attribute or operator records.

``torch._numpy`` is torch's own implementation of numpy's API on tensors (what torch.compile
traces numpy code with): its functions, ``ndarray`` methods and operators take numpy's
arguments and follow numpy's dtype rules, computing with torch operations that a recorder
sees.  Rather than a table of our own, a numpy callable is looked up there by name (``np``,
``np.linalg``, ``np.fft``; never ``np.random``, whose draws are not the array's data), and run
on ``torch._numpy`` arrays wrapping the graph tensors that hold the numpy values' data.  The
caller keeps a translation only where it gives what numpy gave (dtype and shape): where the
two disagree (numpy's float64 from integer division, say), nothing is assumed.
"""
from __future__ import annotations

import operator

import numpy as np
import torch
import torch._numpy as tnp

# numpy callable -> its torch._numpy namesake.
FUNCTIONS = {
    f: g
    for np_module, t_module in ((np, tnp), (np.linalg, tnp.linalg), (np.fft, tnp.fft))
    for name in dir(t_module) if not name.startswith("_")
    for f, g in [(getattr(np_module, name, None), getattr(t_module, name))]
    if callable(f) and callable(g) and not isinstance(f, type) and not isinstance(g, type)
}


def _fft(torch_fft):
    """numpy 2's one-dimensional FFTs keep single precision, where torch._numpy's compute in
    double: torch's own FFT of the array's tensor."""
    def fft(a, n=None, axis=-1, norm=None):
        return tnp.ndarray(torch_fft(a.tensor, n=n, dim=axis, norm=norm))
    return fft


FUNCTIONS.update({getattr(np.fft, name): _fft(getattr(torch.fft, name))
                  for name in ("fft", "ifft", "rfft", "irfft", "hfft", "ihfft")})
# Binary operators of the bytecode (``BINARY_OP``'s and ``COMPARE_OP``'s argrepr) -> the
# operator; in-place forms are left out: they write the array's memory, which it may share
# with a tensor of the program.
OPERATORS = {
    "+": operator.add, "-": operator.sub, "*": operator.mul, "/": operator.truediv,
    "//": operator.floordiv, "%": operator.mod, "**": operator.pow, "@": operator.matmul,
    "&": operator.and_, "|": operator.or_, "^": operator.xor, "<<": operator.lshift,
    ">>": operator.rshift, "<": operator.lt, "<=": operator.le, "==": operator.eq,
    "!=": operator.ne, ">": operator.gt, ">=": operator.ge,
}
UNARY = {"UNARY_NEGATIVE": operator.neg, "UNARY_INVERT": operator.invert, "UNARY_POSITIVE": operator.pos}
# Builtins numpy answers through the array's protocol, with values (not metadata) as result.
BUILTINS = {abs: operator.abs}
# Array attributes that are metadata (the guard fixes the tensor's dtype and shape).
METADATA = frozenset({"shape", "dtype", "ndim", "size", "itemsize", "nbytes"})

DTYPES = {np.dtype(n): t for n, t in (
    ("float16", torch.float16), ("float32", torch.float32), ("float64", torch.float64),
    ("int8", torch.int8), ("int16", torch.int16), ("int32", torch.int32), ("int64", torch.int64),
    ("uint8", torch.uint8), ("bool", torch.bool), ("complex64", torch.complex64),
    ("complex128", torch.complex128))}


def has_method(name: str) -> bool:
    """Is ``name`` a method of numpy arrays that ``torch._numpy`` implements?"""
    return callable(getattr(tnp.ndarray, name, None)) and not name.startswith("__")


def has_attribute(name: str) -> bool:
    """Is ``name`` an attribute of numpy arrays computed from their values (``.T``, ``.real``)?"""
    return isinstance(getattr(tnp.ndarray, name, None), property) and name not in METADATA


def method(name: str):
    """The function running ndarray method ``name`` with the array first."""
    return lambda a, *args, **kwargs: getattr(a, name)(*args, **kwargs)


def attribute(name: str):
    """The function reading ndarray attribute ``name``."""
    return operator.attrgetter(name)


def compare_op(argrepr: str) -> str:
    """A ``COMPARE_OP``'s operator: 3.13 writes ``bool(<)`` where the result is made a bool."""
    return argrepr[5:-1] if argrepr.startswith("bool(") else argrepr


def wrap(value, tensor_of):
    """``value`` as ``torch._numpy`` takes it: each numpy value or tensor that ``tensor_of``
    gives a graph tensor for as an array of that tensor, in lists and tuples too."""
    t = tensor_of(value)
    if t is not None:
        return tnp.ndarray(t)
    if isinstance(value, np.dtype) or isinstance(value, type) and issubclass(value, np.generic):
        return tnp.dtype(np.dtype(value).name)   # (np.float32, np.dtype("int64"))
    if isinstance(value, (list, tuple)):
        return type(value)(wrap(v, tensor_of) for v in value)
    return value


def unwrap(value):
    """``torch._numpy``'s result with its arrays as their tensors."""
    if isinstance(value, tnp.ndarray):
        return value.tensor
    if isinstance(value, (list, tuple)):
        return type(value)(unwrap(v) for v in value)
    return value


def same_kind(t, v) -> bool:
    """Does tensor ``t`` hold what numpy value ``v`` holds: its dtype and shape?"""
    if not isinstance(t, torch.Tensor) or not isinstance(v, (np.ndarray, np.generic)):
        return False
    return DTYPES.get(v.dtype) is t.dtype and tuple(v.shape) == tuple(t.shape)


def agrees(out, value) -> bool:
    """Does torch's ``out`` give what numpy gave: a tensor of the array's dtype and shape, or
    the same plain value (an int, a tuple of them)?"""
    if isinstance(out, torch.Tensor) or isinstance(value, (np.ndarray, np.generic)):
        return same_kind(out, value)
    return type(out) is type(value) and out == value


def kind(v) -> str:
    """How a numpy value or tensor is described where the two disagree."""
    if isinstance(v, torch.Tensor):
        return f"{v.dtype} {list(v.shape)}"
    dtype = getattr(v, "dtype", None)
    return f"{dtype} {list(np.shape(v))}" if dtype is not None else type(v).__name__
