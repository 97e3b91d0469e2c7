"""numpy on a tensor's ``.numpy()`` recorded as the equivalent torch operations.

``t.numpy()`` reads tensor data into Python: without this, a graph break whose array, and
everything numpy computes from it, are eager steps.  Here the recording run lets
``.numpy()`` happen and *follows* the array it gives (by identity, kept alive): the array
holds what the graph tensor ``t`` holds.  A numpy function, array method or operator from
the tables below applied to followed arrays (and Python numbers) runs natively, as eager,
and its torch equivalent is recorded on their tensors; it is kept only if it gives what
numpy gave, dtype and shape alike (numpy's rules, float64 results of integer arrays
included, are checked, not assumed), and its result is followed in turn.  ``torch.from_numpy``,
``torch.as_tensor`` and ``torch.tensor`` of a followed array give the program a tensor that
the graph computes (an alias of the graph tensor, or a copy, as eager's shares memory or
not).  The values are torch's, within rounding of numpy's.

Any other use of a followed array or numpy scalar (stored, put in a container, returned from
the call, printed, indexed, converted to a Python number, given to another function or
operator, an in-place update, a dtype or shape numpy and torch disagree on) ends the
recording, and from the next recording on that ``.numpy()`` is a break as before (an eager
step, numpy's computations further steps).
"""
from __future__ import annotations

import dataclasses
import operator
import sys

import numpy as np
import torch

from magpy.capture import annotations as ann
from magpy.capture.monitor import Observer, bytecode
from magpy.capture.monitor.observer import CALLS, RETURNS, returns_to_caller

# numpy function -> torch function taking the same positional arguments.
FUNCTIONS = {
    np.sqrt: torch.sqrt, np.abs: torch.abs, np.absolute: torch.abs, np.exp: torch.exp, np.log: torch.log,
    np.tanh: torch.tanh, np.sin: torch.sin, np.cos: torch.cos, np.negative: torch.neg,
    np.square: torch.square, np.add: torch.add, np.subtract: torch.sub, np.multiply: torch.mul,
    np.maximum: torch.maximum, np.minimum: torch.minimum, np.sum: torch.sum, np.mean: torch.mean,
    np.max: torch.amax, np.amax: torch.amax, np.min: torch.amin, np.amin: torch.amin, np.prod: torch.prod,
    np.log1p: torch.log1p, np.expm1: torch.expm1, np.floor: torch.floor, np.ceil: torch.ceil,
    np.round: torch.round, np.sign: torch.sign, np.power: torch.pow, np.divide: torch.div,
    np.true_divide: torch.div, np.matmul: torch.matmul, np.clip: torch.clamp, np.where: torch.where,
    np.all: torch.all, np.any: torch.any, np.argmax: torch.argmax, np.argmin: torch.argmin,
    np.reshape: torch.reshape, np.transpose: lambda t, axes=None: _transpose(t, axes),
    np.std: lambda t, **kw: torch.std(t, correction=0, **kw),      # numpy's ddof=0
    np.var: lambda t, **kw: torch.var(t, correction=0, **kw),
    np.asarray: lambda t: t,      # the array itself
    np.array: torch.clone,        # a copy
    np.linalg.norm: lambda t, **kw: torch.linalg.vector_norm(t, **kw),   # 2-norm (Frobenius) of all
    np.fft.fft: torch.fft.fft, np.fft.ifft: torch.fft.ifft, np.fft.rfft: torch.fft.rfft,
    # (numpy's default indexing, and copies: numpy's copy=True)
    np.meshgrid: lambda *ts: tuple(g.contiguous() for g in torch.meshgrid(*ts, indexing="xy")),
}
# ndarray method -> torch function of the array's tensor and the same arguments.
METHODS = {"sum": torch.sum, "mean": torch.mean, "max": torch.amax, "min": torch.amin, "prod": torch.prod,
           "copy": torch.clone, "reshape": torch.Tensor.reshape,
           "transpose": lambda t, *axes: _transpose(t, axes),
           "all": torch.all, "any": torch.any, "argmax": torch.argmax, "argmin": torch.argmin,
           "clip": torch.clamp, "flatten": lambda t: torch.flatten(t).clone(), "ravel": torch.ravel,
           "squeeze": torch.squeeze, "std": FUNCTIONS[np.std], "var": FUNCTIONS[np.var],
           "astype": lambda t, dtype: t.to(DTYPES[np.dtype(dtype)], copy=True)}   # (numpy's copies)
# ndarray attribute computed from the values -> torch function of the array's tensor.
ATTRIBUTES = {"T": lambda t: _transpose(t, ()), "real": torch.real, "imag": torch.imag}
# numpy keyword -> torch keyword (``axis=None`` is torch's default: left out).
KEYWORDS = {"axis": "dim", "keepdims": "keepdim"}
# Operators on followed arrays (the instruction) -> the torch operation.
OPERATORS = {"+": operator.add, "-": operator.sub, "*": operator.mul, "/": operator.truediv,
             "**": operator.pow}
# torch functions giving a tensor of an array's values: True when it shares the array's memory.
CONSUMERS = {torch.from_numpy: True, torch.as_tensor: True, torch.tensor: False}
# Array attributes that are metadata (the guard fixes the tensor's dtype and shape).
METADATA = frozenset({"shape", "dtype", "ndim", "size", "itemsize", "nbytes"})

DTYPES = {np.dtype(n): t for n, t in (
    ("float16", torch.float16), ("float32", torch.float32), ("float64", torch.float64),
    ("int8", torch.int8), ("int16", torch.int16), ("int32", torch.int32), ("int64", torch.int64),
    ("uint8", torch.uint8), ("bool", torch.bool), ("complex64", torch.complex64),
    ("complex128", torch.complex128))}

_MOVES = bytecode.FAST_MOVES | {"COPY", "SWAP", "POP_TOP", "PRECALL", "KW_NAMES"}
# References to a followed value that are the tracker's own: its Followed, and
# sys.getrefcount's argument.
_OWN_REFERENCES = 2
# ``.numpy()`` calls whose arrays escaped a recording: (file, first line, function, offset).
_REFUSED: set[tuple] = set()


def forget_refusals() -> None:
    """Forget which ``.numpy()`` sites recordings found cannot be followed (``magpy.reset``)."""
    _REFUSED.clear()


@dataclasses.dataclass
class Followed:
    """A numpy array or scalar the run follows: the graph tensor holding its values, and the
    ``.numpy()`` call it comes from."""

    value: object
    tensor: torch.Tensor
    site: tuple
    shared: int = 0   # tensors made from it that share its memory (each holds a reference)


class Arrays(Observer):
    """Follows the arrays ``.numpy()`` gives in one recording run (module docstring)."""

    def __init__(self, recorder, breaker):
        self.recorder, self.breaker = recorder, breaker
        self.monitor = None
        self.live: dict[int, Followed] = {}
        self._expect = None   # (tensor, site) of the .numpy() ``follows`` allowed, until it returns
        self._levels: dict[int, int] = {}   # id(frame) -> intrinsics under way when it was entered

    def follows(self, t) -> bool:
        """Is ``t.numpy()`` about to run where its array can be followed?  Then it is no break
        (the array is followed once the call returns it)."""
        mon, rec = self.monitor, self.recorder
        f = mon.current if mon is not None else None
        if f is None or not hasattr(f, "info") or _site(f) in _REFUSED or self.breaker.sandbox is not None:
            return False
        if rec.shapes is not None and rec.shapes.active:
            return False
        if rec.produced(t) is None and rec.refgraph.node_of(t) is None:
            return False
        self._expect = (t, _site(f))
        return True

    def holding(self) -> bool:
        """Does the program still hold a followed array or scalar (anywhere but here)?  While
        it does, a tensor ``if`` is no cond (its arms run where this does not follow them) and
        the frames are no resume point (their arrays would be baked into it)."""
        for key, followed in list(self.live.items()):
            if sys.getrefcount(followed.value) <= _OWN_REFERENCES + followed.shared:
                del self.live[key]   # nobody can reach it any more
        return bool(self.live)

    @property
    def unresumable(self) -> str | None:
        """Why the frames cannot be taken as a resume point now, or None."""
        return "a numpy array of a tensor is live" if self.holding() else None

    # ------------------------------------------------------------------ events
    def on_enter(self, frame):
        self._levels[id(frame)] = self.monitor.in_intrinsic

    # Observer events run inside the monitored program: magpy's own failure here stops
    # recording (the call runs eagerly), never reaching the program.
    def on_call(self, frame, callee, args, kwargs, result, entered):
        if self.breaker.brk is None:
            try:
                self._called(frame, callee, args, kwargs, result, entered)
            except Exception as e:  # noqa: BLE001
                self.breaker.fail(e)

    def on_instruction(self, frame, ins, inputs, outputs):
        if self.live and self.breaker.brk is None:
            try:
                self._instruction(frame, ins, inputs, outputs)
            except Exception as e:  # noqa: BLE001
                self.breaker.fail(e)

    def _called(self, frame, callee, args, kwargs, result, entered):
        expected, self._expect = self._expect, None
        if expected is not None:   # the .numpy() ``follows`` allowed has returned
            t, site = expected
            if isinstance(result, np.ndarray) and (getattr(callee, "__self__", None) is t
                                                   or len(args) == 1 and args[0] is t):
                self._follow(result, t, site)
                return
            # (called where this does not see its array: inside a native, map(Tensor.numpy, ...))
            self._escape(Followed(result, t, site), "made where magpy cannot follow it")
            return
        if entered or not self.live:
            return
        owner = getattr(callee, "__self__", None)
        held = [self.live[id(v)] for v in (owner, *args, *(kwargs or {}).values()) if id(v) in self.live]
        if not held:
            return
        try:
            self._call(callee, owner, args, kwargs or {}, result, held[0])
        except Escaped as e:
            self._escape(e.followed, str(e))

    def _instruction(self, frame, ins, inputs, outputs):
        name = ins.opname
        held = [self.live[id(v)] for v in inputs if id(v) in self.live]
        if not held or name in _MOVES or name in CALLS:
            return   # (calls: on_call judges them)
        if name in ("LOAD_ATTR", "LOAD_METHOD") and (ins.argval in METADATA or (
                name == "LOAD_METHOD" and ins.argval in METHODS)):
            return
        if name in RETURNS and returns_to_caller(frame, self._levels):
            return
        try:
            if name == "BINARY_OP" and ins.argrepr in OPERATORS:
                self._translate(OPERATORS[ins.argrepr], inputs, {}, outputs[0], held[0])
            elif name == "LOAD_ATTR" and ins.argval in ATTRIBUTES:
                self._translate(ATTRIBUTES[ins.argval], inputs[:1], {}, outputs[-1], held[0])
            elif name == "UNARY_NEGATIVE":
                self._translate(operator.neg, inputs, {}, outputs[0], held[0])
            else:
                raise Escaped(held[0], f"{name} {ins.argrepr}".strip())
        except Escaped as e:
            self._escape(e.followed, str(e))

    # ------------------------------------------------------------------ uses
    def _call(self, callee, owner, args, kwargs, result, first: Followed) -> None:
        fn = FUNCTIONS.get(callee) if not isinstance(owner, np.ndarray) else None
        if fn is not None:
            self._translate(fn, args, kwargs, result, first)
            return
        if isinstance(owner, np.ndarray) and id(owner) in self.live and callee.__name__ in METHODS:
            self._translate(METHODS[callee.__name__], (owner, *args), kwargs, result, first)
            return
        shares = CONSUMERS.get(callee)
        if shares is not None and len(args) == 1 and not kwargs and id(args[0]) in self.live:
            self._consume(args[0], result, shares and isinstance(args[0], np.ndarray), first)
            return
        a, _ = ann.lookup(callee)
        if a is not None and all(a.read_kind(i) == ann.TYPE for i in range(len(args))):
            return   # isinstance(a, np.ndarray), type(a)
        raise Escaped(first, f"given to {getattr(callee, '__qualname__', callee)!s}")

    def _translate(self, fn, args, kwargs, result, first: Followed) -> None:
        """``result`` is what numpy gave for ``args``: record ``fn`` on their tensors."""
        tensors = []
        for a in args:
            if isinstance(a, (np.ndarray, np.generic)):
                if id(a) not in self.live:
                    raise Escaped(first, "used with a numpy value from elsewhere")
                a = self.live[id(a)].tensor
            tensors.append(a)
        if any(k not in KEYWORDS for k in kwargs):
            raise Escaped(first, f"with keywords {sorted(kwargs)}")
        tkwargs = {KEYWORDS[k]: v for k, v in kwargs.items() if not (k == "axis" and v is None)}
        try:
            out = fn(*tensors, **tkwargs)
        except Exception as e:  # noqa: BLE001 - torch refuses what numpy accepted
            raise Escaped(first, f"has no torch equivalent here ({type(e).__name__})") from None
        results, outs = (result, out) if isinstance(result, (tuple, list)) else ((result,), (out,))
        if not isinstance(outs, (tuple, list)) or len(outs) != len(results):
            raise Escaped(first, f"gives {len(results)} values in numpy, not in torch")
        for r, o in zip(results, outs):   # (each array of a tuple numpy gives is followed)
            if not _same_kind(o, r):
                raise Escaped(first, f"gives {_kind(r)} in numpy, {_kind(o)} in torch")
            self._follow(r, o, first.site)

    def _consume(self, array, result, shares: bool, first: Followed) -> None:
        """``result = torch.from_numpy(array)`` (or ``as_tensor``, ``tensor``): a tensor of the
        graph, an alias of the array's tensor where eager's shares the array's memory."""
        t = self.live[id(array)].tensor
        if not (isinstance(result, torch.Tensor) and _same_kind(t, array) and result.dtype == t.dtype):
            raise Escaped(first, "made into a tensor of another kind")
        made = t.detach() if shares else t.clone()
        self.recorder.stands_for(result, made)
        if shares:
            self.live[id(array)].shared += 1

    def _follow(self, value, tensor, site) -> None:
        self.live[id(value)] = Followed(value, tensor, site)

    def _escape(self, followed: Followed, how: str) -> None:
        """End the recording (to be made again) and make the ``.numpy()`` at the site a break."""
        _REFUSED.add(followed.site)
        self.live.clear()
        brk = self.breaker.where(f"a numpy array of a tensor is {how}; that .numpy() is a break from "
                                 "the next recording on")
        self.breaker.stop(dataclasses.replace(brk, retry=True))


class Escaped(Exception):
    """A followed value is used where its torch equivalent is not known."""

    def __init__(self, followed: Followed, how: str):
        super().__init__(how)
        self.followed = followed


def _transpose(t, axes):
    """numpy's transpose: the axes reversed, or permuted as given (one tuple or several ints)."""
    if not axes:
        return t.permute(*reversed(range(t.dim())))
    return t.permute(*(axes[0] if len(axes) == 1 and isinstance(axes[0], (tuple, list)) else axes))


def _same_kind(t, v) -> bool:
    """Does tensor ``t`` hold what numpy value ``v`` holds: its dtype and shape?"""
    if not isinstance(t, torch.Tensor) or not isinstance(v, (np.ndarray, np.generic)):
        return False
    return DTYPES.get(v.dtype) is t.dtype and tuple(v.shape) == tuple(t.shape)


def _kind(v) -> str:
    if isinstance(v, torch.Tensor):
        return f"{v.dtype} {list(v.shape)}"
    dtype = getattr(v, "dtype", None)
    return f"{dtype} {list(np.shape(v))}" if dtype is not None else type(v).__name__


def _site(frame) -> tuple:
    code = frame.code
    return code.co_filename, code.co_firstlineno, code.co_qualname, frame.lasti
