"""numpy on tensors recorded as the equivalent torch operations.

``t.numpy()`` reads tensor data into Python: without this, a graph break whose array, and
everything numpy computes from it, are eager steps.  Here the recording run lets
``.numpy()`` happen and *follows* the array it gives (by identity, kept alive): the array
holds what the graph tensor ``t`` holds.  A numpy function, array method, attribute or
operator applied to followed arrays (and Python numbers) runs natively, as eager, and its
``torch._numpy`` equivalent (magpy.capture.callees.numpy_equivalents) is recorded on their
tensors; it is kept only if it gives what numpy gave, dtype and shape alike, and reads no
tensor data into Python; its results are followed in turn, and so are lists and tuples
built of followed values.  A numpy function given tensors themselves (``np.sin(t)``, whose
``Tensor.__array__`` and ``__array_wrap__`` run inside numpy) is recorded the same way.
``torch.from_numpy``, ``torch.as_tensor`` and ``torch.tensor`` of a followed array give the
program a tensor that the graph computes (an alias of the graph tensor, or a copy, as
eager's shares memory or not).  The values are torch's, within rounding of numpy's.

Any other use of a followed value (stored, returned from the call, printed, iterated,
converted to a Python number, given to another function, an in-place update, a dtype or
shape numpy and torch disagree on) ends the recording, and from the next recording on that
``.numpy()`` (or numpy call) is a break as before: an eager step, numpy's computations
further steps.
"""
from __future__ import annotations

import contextlib
import dataclasses
import sys

import numpy as np
import torch

from magpy.capture import annotations as ann
from magpy.capture.callees import numpy_equivalents as npq
from magpy.capture.monitor import Observer, bytecode
from magpy.capture.monitor.observer import CALLS, RETURNS, returns_to_caller

# torch functions giving a tensor of an array's values: True when it shares the array's memory.
CONSUMERS = {torch.from_numpy: True, torch.as_tensor: True, torch.tensor: False}
# Tensor methods numpy calls on a tensor it is given, inside the numpy call.
INSIDE_NUMPY = frozenset({"__array__", "__array_wrap__"})
_BUILDS = frozenset({"BUILD_LIST", "BUILD_TUPLE"})

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
    ``.numpy()`` call it comes from; or a list or tuple of followed values (``tensor`` None)."""

    value: object
    tensor: torch.Tensor | None
    site: tuple
    shared: int = 0   # tensors made from it that share its memory (each holds a reference)


class Arrays(Observer):
    """Follows the arrays ``.numpy()`` gives in one recording run (module docstring)."""

    def __init__(self, recorder, breaker):
        self.recorder, self.breaker = recorder, breaker
        self.monitor = None
        self.live: dict[int, Followed] = {}
        self._expect = None   # (tensor, site) of the .numpy() ``follows`` allowed, until it returns
        self._inside = None   # site of the numpy call running on tensors ``follows`` allowed
        self._levels: dict[int, int] = {}   # id(frame) -> intrinsics under way when it was entered

    def follows(self, t, name: str = "numpy") -> bool:
        """Is ``t.numpy()`` about to run where its array can be followed (or numpy's
        ``t.__array__()`` / ``__array_wrap__`` inside a numpy call from the program)?  Then
        it is no break: the array is followed once the call returns."""
        mon, rec = self.monitor, self.recorder
        f = mon.current if mon is not None else None
        if f is None or not hasattr(f, "info") or _site(f) in _REFUSED or self.breaker.sandbox is not None:
            return False
        if rec.shapes is not None and rec.shapes.active:
            return False
        if rec.produced(t) is None and rec.refgraph.node_of(t) is None:
            return False
        if name in INSIDE_NUMPY:
            self._inside = _site(f)
        else:
            self._expect = (t, _site(f))
        return True

    def holding(self) -> bool:
        """Does the program still hold a followed value (anywhere but here)?  While it does, a
        tensor ``if`` is no cond (its arms run where this does not follow them) and the frames
        are no resume point (their arrays would be baked into it)."""
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
                self._called(frame, callee, args, kwargs or {}, result, entered)
            except Escaped as e:
                self._escape(e.site, str(e))
            except Exception as e:  # noqa: BLE001
                self.breaker.fail(e)

    def on_instruction(self, frame, ins, inputs, outputs):
        if self.live and self.breaker.brk is None:
            try:
                self._instruction(frame, ins, inputs, outputs)
            except Escaped as e:
                self._escape(e.site, str(e))
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
            raise Escaped(site, "made where magpy cannot follow it")
        inside, self._inside = self._inside, None
        if inside is not None:   # numpy ran on tensors: record it all, or nothing can be
            if entered or _site(frame) != inside:
                raise Escaped(inside, "made inside a call magpy cannot follow")
            self._on_tensors(callee, args, kwargs, result, inside)
            return
        if entered or not self.live:
            return
        owner = getattr(callee, "__self__", None)
        held = [f for v in (owner, *args, *kwargs.values()) if (f := self.live.get(id(v))) is not None]
        if held:
            self._call(callee, owner, args, kwargs, result, held[0].site)

    def _instruction(self, frame, ins, inputs, outputs):
        name = ins.opname
        held = [f for v in inputs if (f := self.live.get(id(v))) is not None]
        if not held or name in _MOVES or name in CALLS:
            return   # (calls: on_call judges them)
        site = held[0].site
        if name in RETURNS and returns_to_caller(frame, self._levels):
            return
        if name in _BUILDS:
            self.live[id(outputs[0])] = Followed(outputs[0], None, site)
            return
        if any(f.tensor is None for f in held):
            raise Escaped(site, f"in a {type(held[0].value).__name__} that is {name} {ins.argrepr}".strip())
        if name in ("LOAD_ATTR", "LOAD_METHOD"):
            attr = ins.argval
            if attr in npq.METADATA or npq.has_method(attr):
                return   # metadata the guard fixes, or a method: on_call records its call
            if npq.has_attribute(attr):
                self._translate(npq.attribute(attr), inputs[:1], {}, outputs[-1], site)
                return
        elif name == "BINARY_OP" and ins.argrepr in npq.OPERATORS:
            self._translate(npq.OPERATORS[ins.argrepr], inputs, {}, outputs[0], site)
            return
        elif name == "COMPARE_OP" and npq.compare_op(ins.argrepr) in npq.OPERATORS:
            self._translate(npq.OPERATORS[npq.compare_op(ins.argrepr)], inputs, {}, outputs[0], site)
            return
        elif name in npq.UNARY:
            self._translate(npq.UNARY[name], inputs, {}, outputs[0], site)
            return
        elif name == "BINARY_SUBSCR":
            self._translate(_getitem, inputs, {}, outputs[0], site)
            return
        elif name == "BINARY_SLICE":
            self._translate(_getslice, inputs, {}, outputs[0], site)
            return
        raise Escaped(site, f"{name} {ins.argrepr}".strip())

    # ------------------------------------------------------------------ uses
    def _call(self, callee, owner, args, kwargs, result, site) -> None:
        if isinstance(owner, np.ndarray) and id(owner) in self.live and npq.has_method(callee.__name__):
            self._translate(npq.method(callee.__name__), (owner, *args), kwargs, result, site)
            return
        fn = npq.FUNCTIONS.get(callee) or npq.BUILTINS.get(callee)
        if fn is not None:
            self._translate(fn, args, kwargs, result, site)
            return
        shares = CONSUMERS.get(callee)
        if shares is not None and len(args) == 1 and not kwargs and id(args[0]) in self.live:
            self._consume(args[0], result, shares and isinstance(args[0], np.ndarray), site)
            return
        a, _ = ann.lookup(callee)
        if a is not None and all(a.read_kind(i) == ann.TYPE for i in range(len(args))):
            return   # isinstance(a, np.ndarray), type(a)
        if callee is len and len(args) == 1:
            return   # (a length is the shape's, which the guard fixes)
        raise Escaped(site, f"given to {getattr(callee, '__qualname__', callee)!s}")

    def _on_tensors(self, callee, args, kwargs, result, site) -> None:
        """numpy's ``callee`` took tensors of the graph (through ``__array__``): its equivalent
        on them, its result a tensor (numpy's ``__array_wrap__``) or an array to follow."""
        fn = npq.FUNCTIONS.get(callee)
        if fn is None:
            raise Escaped(site, f"a tensor's data given to {getattr(callee, '__qualname__', callee)!s}")
        if not isinstance(result, torch.Tensor):
            self._translate(fn, args, kwargs, result, site, tensors=True)
            return
        with self._trial(site):
            out = self._run(fn, args, kwargs, site, tensors=True)
            if isinstance(out, torch.Tensor) and out.dtype == torch.bool and result.dtype == torch.uint8:
                out = out.to(torch.uint8)   # (Tensor.__array_wrap__ gives numpy's bools as uint8)
            if not (isinstance(out, torch.Tensor) and (out.dtype, out.shape) == (result.dtype, result.shape)):
                raise Escaped(site, f"gives {npq.kind(result)} in numpy, {npq.kind(out)} in torch")
        self.recorder.stands_for(result, out)

    def _translate(self, fn, args, kwargs, result, site, tensors: bool = False) -> None:
        """``result`` is what numpy gave for ``args``: record ``fn`` on their tensors and
        follow what it gives."""
        with self._trial(site):
            out = self._run(fn, args, kwargs, site, tensors)
            results, outs = (result, out) if isinstance(result, (tuple, list)) else ((result,), (out,))
            if not isinstance(outs, (tuple, list)) or len(outs) != len(results):
                raise Escaped(site, f"gives {len(results)} values in numpy, not in torch")
            for r, o in zip(results, outs):
                if not npq.agrees(o, r):
                    raise Escaped(site, f"gives {npq.kind(r)} in numpy, {npq.kind(o)} in torch")
        for r, o in zip(results, outs):   # (each array of a tuple numpy gives is followed)
            if isinstance(o, torch.Tensor):
                self._follow(r, o, site)

    def _run(self, fn, args, kwargs, site, tensors: bool):
        """``fn`` recorded on the tensors of ``args``' followed values (and of its tensors
        themselves where ``tensors``), with torch._numpy's arrays unwrapped in its result."""
        def tensor_of(v):
            f = self.live.get(id(v))
            if f is not None:
                return f.tensor
            if tensors and isinstance(v, torch.Tensor) and self.recorder.knows(v):
                return v
            if isinstance(v, (np.ndarray, np.generic)):
                raise Escaped(site, "used with a numpy value from elsewhere")
            return None
        wargs = npq.wrap(tuple(args), tensor_of)
        wkwargs = {k: npq.wrap(v, tensor_of) for k, v in kwargs.items()}
        try:
            return npq.unwrap(fn(*wargs, **wkwargs))
        except Exception as e:  # noqa: BLE001 - torch refuses what numpy accepted
            raise Escaped(site, f"has no torch equivalent here ({type(e).__name__}: {e})") from None

    @contextlib.contextmanager
    def _trial(self, site):
        """Recording torch's equivalent and comparing it with numpy's value: a read of tensor
        data there (a size that follows the data, ``.item()``) is no step of the program's
        but a reason this cannot be followed."""
        with self.breaker.refusing() as reads:
            yield
        if reads:
            raise Escaped(site, f"read in torch's equivalent ({reads[0]})")

    def _consume(self, array, result, shares: bool, site) -> None:
        """``result = torch.from_numpy(array)`` (or ``as_tensor``, ``tensor``): a tensor of the
        graph, an alias of the array's tensor where eager's shares the array's memory."""
        t = self.live[id(array)].tensor
        with self._trial(site):
            if not (isinstance(result, torch.Tensor) and npq.same_kind(t, array) and result.dtype == t.dtype):
                raise Escaped(site, "made into a tensor of another kind")
            made = t.detach() if shares else t.clone()
        self.recorder.stands_for(result, made)
        if shares:
            self.live[id(array)].shared += 1

    def _follow(self, value, tensor, site) -> None:
        self.live[id(value)] = Followed(value, tensor, site)

    def _escape(self, site, how: str) -> None:
        """End the recording (to be made again) and make the ``.numpy()`` at the site a break."""
        _REFUSED.add(site)
        self.live.clear()
        brk = self.breaker.where(f"a numpy array of a tensor is {how}; that .numpy() is a break from "
                                 "the next recording on")
        self.breaker.stop(dataclasses.replace(brk, retry=True))


class Escaped(Exception):
    """A followed value is used where its torch equivalent is not known."""

    def __init__(self, site: tuple, how: str):
        super().__init__(how)
        self.site = site


def _getitem(a, key):
    return a[key]


def _getslice(a, start, stop):
    return a[start:stop]


def _site(frame) -> tuple:
    code = frame.code
    return code.co_filename, code.co_firstlineno, code.co_qualname, frame.lasti
