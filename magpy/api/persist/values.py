"""Plain values as data a saved file can hold and ``torch.load(weights_only=True)`` reads back.

A saved program holds the values its records were made with: the literals of its graphs'
operations (dtypes, devices, slices, tuples of sizes), the constants of its guards that are
values, not objects (``(16,)``, ``float('nan')``).  Each is written as a tagged list (the tag
first: ``["dtype", "float32"]``, ``["tuple", 1, 2]``) of the types the weights-only
unpickler allows, so reading a file builds no object but these.  What is not a plain value
raises :class:`Unsaveable`, naming it; objects the program holds are references instead
(magpy.api.persist.refs).
"""
from __future__ import annotations

import torch

Data = object   # what encode gives: None, bool, int, float, str, a tensor, or a tagged list


class Unsaveable(Exception):
    """A value or object a saved program cannot hold (the message says which, and why)."""


_SCALARS = (type(None), bool, int, float, str)
_ENUMS = {torch.dtype: "dtype", torch.layout: "layout", torch.memory_format: "memory_format"}
_BY_NAME = {tag: {str(v).rsplit(".", 1)[-1]: v for v in vars(torch).values() if type(v) is cls}
            for cls, tag in _ENUMS.items()}


def is_plain(v) -> bool:
    """Can :func:`encode` write ``v`` (all the way down)?"""
    try:
        encode(v)
        return True
    except Unsaveable:
        return False


def encode(v) -> Data:
    """``v`` as data (module docstring); :class:`Unsaveable` if it is not a plain value."""
    t = type(v)
    if t in _SCALARS:
        return v
    if t is tuple or t is list or t is frozenset or t is torch.Size:
        tag = {tuple: "tuple", list: "list", frozenset: "frozenset", torch.Size: "size"}[t]
        return [tag, *map(encode, v)]
    if t is dict:
        return ["dict", *([encode(k), encode(x)] for k, x in v.items())]
    if t in _ENUMS:
        return [_ENUMS[t], str(v).rsplit(".", 1)[-1]]
    if t is torch.device:
        return ["device", str(v)]
    if t is slice:
        return ["slice", encode(v.start), encode(v.stop), encode(v.step)]
    if v is Ellipsis:
        return ["ellipsis"]
    if t is complex:
        return ["complex", v.real, v.imag]
    if t is bytes:
        return ["bytes", torch.tensor(list(v), dtype=torch.uint8)]
    if t is torch.Tensor:
        return ["tensor", v.detach().clone()]
    raise Unsaveable(f"a {t.__module__}.{t.__qualname__} is not a value a saved program can hold")


def decode(d: Data):
    """The value :func:`encode` wrote as ``d``."""
    if type(d) is not list:
        return d
    tag, rest = d[0], d[1:]
    if tag in _DECODERS:
        return _DECODERS[tag](rest)
    raise ValueError(f"not a value magpy wrote: tag {tag!r}")


_DECODERS = {
    "tuple": lambda r: tuple(map(decode, r)),
    "list": lambda r: list(map(decode, r)),
    "frozenset": lambda r: frozenset(map(decode, r)),
    "size": lambda r: torch.Size(map(decode, r)),
    "dict": lambda r: {decode(k): decode(v) for k, v in r},
    "device": lambda r: torch.device(r[0]),
    "slice": lambda r: slice(*map(decode, r)),
    "ellipsis": lambda r: Ellipsis,
    "complex": lambda r: complex(r[0], r[1]),
    "bytes": lambda r: r[0].numpy().tobytes(),
    "tensor": lambda r: r[0],
    **{tag: (lambda r, tag=tag: _BY_NAME[tag][r[0]]) for tag in _ENUMS.values()},
}
