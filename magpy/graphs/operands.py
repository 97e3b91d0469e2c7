"""An operation's arguments as its graph node's: the tensors as the nodes that hold them,
Python values as constants of the record, and numbers that change from call to call as
graph inputs.

A number is a constant where nothing else is known of it: the guard checks it (a lifted
one, by value), or the record checks it (one an eager step computed).  Where float tensor
arithmetic takes it as an operand or a number keyword (``p.mul_(1 - lr * wd)``,
``p.add_(g, alpha=-lr)``), it is a 0-d tensor input instead, with which torch computes
exactly as with the number: a call with another learning rate is the same record.  What the
mock gives such an input is its source (:class:`ScalarInput`, :class:`IntFloatInput`,
:class:`InputSource`).  An argument a graph cannot hold is :class:`Unsupported`, the
recorder's refusal wherever it meets one.
"""
from __future__ import annotations

import dataclasses
import math
import operator
import typing

import torch
import torch.fx as fx
from torch.utils import _pytree as pytree

from magpy.capture import annotations as ann
from magpy.capture.refgraph.graph import is_immutable
from magpy.graphs.dynamic import IntFloat, Scalar, specialise


class Unsupported(Exception):
    """An operation, or an argument of one, that a graph cannot hold: the recording takes an
    eager step there, or stops (the message says why)."""


class LoopIndex:
    """An operation argument standing for the index of a ``for i in range(n)`` loop recorded
    as a ``while_loop`` (magpy.graphs.controlflow): the body graph's step count.  The one instance,
    ``LOOP_INDEX``, is also that index's shadow in the forks recording the body."""

    __slots__ = ()


LOOP_INDEX = LoopIndex()


class ScalarInput:
    """A lifted float or int (its RefGraph node): a graph input, a float as a 0-d tensor;
    for a float, ``source`` is what the mock computes from it (``dynamic.Scalar``)."""

    __slots__ = ("node", "source")

    def __init__(self, node, source: str = "{x}"):
        self.node, self.source = node, source

    def __hash__(self):
        return hash(("scalar", self.node.id, self.source))

    def __eq__(self, other):
        return type(other) is ScalarInput and other.node is self.node and other.source == self.source


class IntFloatInput:
    """A float computed from lifted ints (``dynamic.IntFloat``) as a graph input: a 0-d
    tensor the mock computes from the call's ints (one per shadow)."""

    __slots__ = ("shadow",)

    def __init__(self, shadow):
        self.shadow = shadow


@dataclasses.dataclass(frozen=True)
class InputSource:
    """Where the mock finds a piece's input that is not read from outside: an expression
    over earlier pieces' outputs (``out0[3]``) or eager steps' results (``e2``)."""

    expr: str


def scalar_tensor(value: float) -> torch.Tensor:
    """A float as the 0-d tensor a graph takes it as."""
    return torch.tensor(value, dtype=torch.float64)


def int_tensor(value: int) -> torch.Tensor:
    """An int as the 0-d tensor a graph takes it as."""
    return torch.tensor(value, dtype=torch.int64)


class Operands:
    """The graph arguments of the operations a recorder records into its current piece
    (``recorder``: a :class:`magpy.graphs.opgraph.OpRecorder`)."""

    def __init__(self, recorder):
        self.recorder = recorder
        # Whether the operation being recorded takes Python numbers as 0-d tensor inputs: False,
        # or the dtype to cast them to (None: as they are), see _scalar_operands.
        self.cast = False

    def steps(self, name: str, args: tuple, kwargs: dict) -> tuple[bool, tuple, tuple]:
        """``(factory, steps, keyword)`` of operation ``name`` about to be recorded: whether it
        makes a tensor of one number the graph takes as an input (:data:`_NUMBER_FACTORIES`),
        the mock's variables of the numbers eager steps computed that it takes as inputs (per
        positional argument, else None) and its number keyword's (:meth:`_keyword_step`).  The
        values it takes as constants are fixed here, before any of its nodes is made."""
        # A number an eager step computed, or a lifted float argument, becomes an input where
        # it is an operand of floating tensor arithmetic.
        self.cast = _scalar_operands(name, args, kwargs)
        factory = name in _NUMBER_FACTORIES and self.cast is None
        lifted = self.recorder.lifted
        steps = lifted(args, kwargs) if self.cast is not False and lifted is not None else ()
        steps = self._scalar_list_step(name, args, steps)
        keyword = self._keyword_step(name, args, kwargs)
        self._fix_constants(args, {k: v for k, v in kwargs.items() if k != keyword[0]}, steps)
        return factory, steps, keyword

    def graph_arguments(self, name: str, args: tuple, kwargs: dict, steps: tuple,
                        keyword: tuple) -> tuple[tuple, dict]:
        """The graph's positional and keyword arguments of operation ``name`` (``steps`` and
        ``keyword``: :meth:`steps`')."""
        fargs = tuple(self._positional(name, a) if var is None else self._scalar_input(a, var)
                      if type(var) is not _ScalarList else self._scalar_list_input(a, var)
                      for a, var in zip(args, steps or (None,) * len(args)))
        self.cast = False
        return fargs, {k: self._keyword(name, args, k, v, keyword) for k, v in kwargs.items()}

    def reads_loop_index(self, args: tuple, kwargs: dict) -> bool:
        """Does the operation read the index of the range loop whose body is being recorded?"""
        # (Only a range loop's body that read its index has a count: the check stays off the
        # recording's common path.)
        return getattr(self.recorder.piece, "count", None) is not None and any(
            a is LOOP_INDEX for a in pytree.tree_leaves((args, kwargs)))

    def row(self, name: str, args: tuple, kwargs: dict, fargs: tuple) -> fx.Node:
        """``x[i]`` or ``x[:, i]`` with ``i`` a range loop's index: that row of ``x`` by the
        body's step count, an ``index_select`` (graph compilers trace it without reading the
        count into Python, which ``x[count]`` would)."""
        key = args[1] if name == "__getitem__" and len(args) == 2 and not kwargs else None
        keys = key if type(key) is tuple else (key,)
        dim = next((d for d, k in enumerate(keys) if k is LOOP_INDEX), None)
        whole = [type(k) is slice and k == slice(None) for k in keys]
        if dim is None or sum(whole) != len(keys) - 1:
            raise Unsupported("a loop's index used other than as x[i] or x[:, i]")
        piece = self.recorder.piece
        at = piece.graph.call_method("reshape", (piece.count_node(), (1,)))
        row = piece.graph.call_function(torch.index_select, (fargs[0], dim, at))
        return piece.graph.call_method("squeeze", (row, dim))

    def _fix_constants(self, args: tuple, kwargs: dict, steps: tuple) -> None:
        """The Python values the operation takes as constants are fixed before any of its
        nodes is made: fixing one may end the piece (a check of a value computed eagerly)."""
        recorder = self.recorder
        if recorder.fixed is None:
            return
        constants = tuple(a for a, var in zip(args, steps or (None,) * len(args)) if var is None)
        for a in pytree.tree_leaves((constants, kwargs)):
            if not isinstance(a, (torch.Tensor, torch.SymInt, Scalar, IntFloat)) and a is not LOOP_INDEX:
                recorder.fixed(a)

    def _positional(self, name: str, a):
        """The graph argument of positional argument ``a`` of operation ``name``."""
        out = pytree.tree_map(self.arg, a)
        if type(a) is torch.Size and name in _SIZE_TYPED:
            return self.recorder.graph.call_function(torch.Size, (list(out),))
        return out

    def arg(self, a):
        """The graph argument of ``a``, a leaf of an operation's arguments."""
        recorder = self.recorder
        if isinstance(a, torch.Tensor):
            return recorder.tensor_node(a)
        if a is LOOP_INDEX:
            return recorder.piece.count_node()
        if type(a) is torch.SymInt:
            return recorder.shapes.size_node(a, recorder)
        if type(a) is Scalar:
            return self._scalar_arg(a)
        if type(a) is IntFloat:
            return self._int_float_arg(a)
        if type(a) is slice and torch.SymInt in (type(a.start), type(a.stop), type(a.step)):
            return slice(self.arg(a.start), self.arg(a.stop), self.arg(a.step))
        if recorder.fixed is not None:
            recorder.fixed(a)
        if _literal(a):
            return a
        if is_immutable(a):
            # numpy scalars, enums, complex infinities ...: np.float64(2.0) is not 2.0 to torch.
            return recorder.graph.call_function(_constant(a), ())
        raise Unsupported(f"tensor operation argument of type {type(a).__qualname__}")

    def _keyword(self, name: str, args: tuple, key: str, value, step: tuple = (None, None)):
        """The graph argument of keyword argument ``key``.  A lifted float that float tensor
        arithmetic reads as a Python number (:data:`_NUMBER_KEYWORDS`: an optimizer's
        ``param.add_(grad, alpha=-lr)``, ``torch._foreach_add_(params, grads, alpha=-lr)``,
        ``torch._foreach_addcdiv_(params, grads, avg, value=-lr)``, ``torch._fused_adamw_(...,
        lr=lr)``) is an input: a 0-d float64 tensor, which torch reads back as the very float
        (a Scalar or float parameter takes a 0-d tensor through ``.item()``; a fused
        optimizer's tensor-lr overload reads ``lr.item<double>()``), and so is one an eager
        step computed (``step``: the keyword and its variable, :meth:`_keyword_step`).  Where
        :func:`_operand_dtype` would not take a number operand as a tensor, it stays a value
        (compiling backends rewrite ``alpha`` into tensor arithmetic: ``training.tensor_alphas``)."""
        if key == step[0] or type(value) in (Scalar, IntFloat) and _NUMBER_KEYWORDS.get(name) == key:
            self.cast = None if _operand_dtype(args) is not False else False
            try:
                return self._scalar_input(value, step[1]) if key == step[0] else self.arg(value)
            finally:
                self.cast = False
        return pytree.tree_map(self.arg, value)

    def _scalar_list_step(self, name: str, args: tuple, steps: tuple) -> tuple:
        """``steps`` (the recorder's ``lifted``), with the variables of the scalar list of a
        foreach operation that takes one as a tensor too (:data:`_SCALAR_LIST_AT`) where eager
        steps computed every item (Adamax's step sizes ``[lr / bc * -1 for bc in
        bias_corrections]``, ``bc`` from the step counts' ``.item()``): the graph takes them as
        one input."""
        lifted = self.recorder.lifted
        at, each = _SCALAR_LIST_AT.get(name, (None, False))
        if at is None or len(args) <= at or type(args[at]) not in (list, tuple) or lifted is None:
            return steps
        values = args[at]
        if not values or not all(type(v) is float for v in values) or any(map(ann.is_dtensor, args[0])):
            return steps   # (FSDP2's DTensor lists take no plain tensor of scalars)
        dtypes = None
        if each:   # (0-d tensors of the list's tensors' dtypes, float32 or float64 only)
            dtypes = tuple(getattr(t, "dtype", None) for t in args[0])
            if len(dtypes) != len(values) or not set(dtypes) <= {torch.float32, torch.float64}:
                return steps
        names = lifted(tuple(values), {})
        if not all(type(n) is str for n in names):
            return steps
        steps = list(steps or (None,) * len(args))
        steps[at] = _ScalarList(names, dtypes)
        return tuple(steps)

    def _scalar_list_input(self, values, scalars: _ScalarList):
        """Floats eager steps computed (their variables ``scalars.names``) as one 1-D float64
        tensor input, which the operation's ``.Tensor`` overload reads back as the same floats;
        or (``scalars.dtypes``) that input's items as 0-d tensors of the list's tensors' dtypes,
        with which the operation's ``.List`` overload computes as with the numbers."""
        source = InputSource(f"SCALAR(({', '.join(scalars.names)},))")
        piece = self.recorder.piece
        node = piece.input(source, source, scalar_tensor(list(values)))
        if scalars.dtypes is None:
            return node
        graph = piece.graph
        items = graph.call_method("unbind", (node,))
        return [graph.call_method("to", (graph.call_function(operator.getitem, (items, i)), dtype))
                for i, dtype in enumerate(scalars.dtypes)]

    def _keyword_step(self, name: str, args: tuple, kwargs: dict) -> tuple:
        """``(keyword, variable)`` of the number keyword of operation ``name`` whose float an
        eager step computed (NAdam's ``param.addcdiv_(grad, denom, value=-lr * (1 - mu) / (1 -
        mu_product))``, ``mu`` from the step count's ``.item()``): a graph input, not a value
        the mock checks; else ``(None, None)``."""
        key = _NUMBER_KEYWORDS.get(name)
        value = kwargs.get(key) if key is not None else None
        lifted = self.recorder.lifted
        if type(value) is not float or lifted is None or _operand_dtype(args) is False:
            return None, None
        (var,) = lifted((value,), {})
        return (key, var) if type(var) is str else (None, None)

    def _scalar_arg(self, a: Scalar):
        """A lifted float argument: a graph input where it is an operand of float tensor
        arithmetic, else its value (which the guard then checks)."""
        if self.cast is False:
            specialise(a)
            return a.value
        return self._scalar_input(a.value, ScalarInput(a.node, a.source))

    def _int_float_arg(self, a: IntFloat):
        """A float computed from lifted ints: a graph input where it is an operand of float
        tensor arithmetic, else its value (its ints then guarded by value)."""
        if self.cast is False:
            specialise(a)
            return a.value
        return self._scalar_input(a.value, IntFloatInput(a))

    def _scalar_input(self, value: float | int, source) -> fx.Node:
        """A number as a 0-d tensor (a float as float64, an int as int64): an input the mock
        has in a variable (``source`` its name), a lifted argument (a :class:`ScalarInput`),
        or the graph's own tensor (``source`` a tensor: a float read from graph data, see
        the recorder's ``record_number``); cast to the operation's dtype where
        :func:`_scalar_operands` says."""
        recorder = self.recorder
        if isinstance(source, torch.Tensor):
            node = recorder.tensor_node(source)
        else:
            real = type(value) is float
            if type(source) is str:
                source = InputSource(f"{'SCALAR' if real else 'INT_SCALAR'}({source})")
            node = recorder.piece.input(source, source, scalar_tensor(value) if real else int_tensor(value))
        cast = self.cast
        return node if cast is None else recorder.graph.call_method("to", (node, cast))


def _scalar_operands(name: str, args: tuple, kwargs: dict):
    """May operation ``name`` take its Python number operands as 0-d tensors, and cast to
    what?  False: no; else see :func:`_operand_dtype`.  A tensor made of one float
    (:data:`_NUMBER_FACTORIES`, given its dtype and device at most) takes it as it is: the
    graph casts it as the factory would."""
    if name in _NUMBER_FACTORIES:
        one = len(args) == 1 and type(args[0]) in (float, Scalar, IntFloat)
        return None if one and kwargs.keys() <= {"dtype", "device"} else False
    return _operand_dtype(args) if name in _LIFTABLE else False


def _operand_dtype(args: tuple):
    """How the arithmetic of ``args`` takes a Python number as a 0-d tensor: False, it may
    not; None, as it is; a dtype, cast to it first.

    Floating tensor arithmetic with a tensor that has dimensions computes with a 0-d float64
    or int64 tensor exactly as with the number (the same dtype and values): None.  Between
    0-d tensors the float64 one would decide the result dtype, so the number is cast to the
    tensor's float32 or float64 first (the precision the operation computes in with a
    number); half precision computes in float32, not cast.

    A foreach operation's (``torch._foreach_mul_(params, 1 - lr * wd)``: tensor lists) is
    the dtype of all its tensors, float32 or float64, else False.  Its ``.Tensor`` overload
    runs per tensor as ``t.mul_(other)`` (CPU's kernels always take that path), and a 0-d
    tensor of ``t``'s own dtype gives what the number gives, whatever ``t``'s dimensions
    (the number is rounded to that dtype either way); an operation that reads it back as a
    number (``_foreach_add_``'s Scalar overload: ``.item()``) gets the same float.  In half
    precision the ``.Tensor`` overload multiplies by the number rounded to half first, where
    the number's own overload does not: False (tests/training/test_optimizers.py checks
    these bit for bit)."""
    if args and type(args[0]) in (list, tuple):   # (a foreach operation)
        dtypes = {t.dtype for t in pytree.tree_leaves(args) if isinstance(t, torch.Tensor)}
        dtype = dtypes.pop() if len(dtypes) == 1 else None
        return dtype if dtype in (torch.float32, torch.float64) else False
    tensors = [t for t in args if isinstance(t, torch.Tensor)]
    if not tensors or not all(t.is_floating_point() for t in tensors):
        return False
    if any(t.dim() for t in tensors):
        return None
    dtype = tensors[0].dtype
    return dtype if dtype in (torch.float32, torch.float64) else False


# Operations that read a torch.Size argument as a shape but a tuple as data (fx writes a
# torch.Size constant as a tuple): ``x.new(x.size())``.
_SIZE_TYPED = frozenset({"new"})
# Keyword arguments that operations read as a Python number and that may be a 0-d tensor
# (see Operands._keyword): ``self + alpha * other`` (``-`` for sub) and ``self + value *
# t1 / t2`` (``* t2`` for addcmul), per tensor of the lists of a foreach operation; a fused
# optimizer's learning rate.
_NUMBER_KEYWORDS = {
    **dict.fromkeys(("add", "add_", "sub", "sub_", "_foreach_add", "_foreach_add_", "_foreach_sub",
                     "_foreach_sub_"), "alpha"),
    **dict.fromkeys(("addcdiv", "addcdiv_", "addcmul", "addcmul_", "_foreach_addcdiv", "_foreach_addcdiv_",
                     "_foreach_addcmul", "_foreach_addcmul_"), "value"),
    **dict.fromkeys(("_fused_adam_", "_fused_adamw_", "_fused_sgd_", "_fused_adagrad_"), "lr")}


class _ScalarList(typing.NamedTuple):
    """A foreach operation's scalar list that eager steps computed: their variables, and the
    dtypes of its 0-d tensors (None: one 1-D float64 tensor)."""

    names: tuple
    dtypes: tuple | None


# Foreach operations whose list of numbers at that position may be tensors (see
# Operands._scalar_list_step): one 1-D tensor (``.Tensor``, read back into doubles), or
# (True) one 0-d tensor per tensor of the first list (``.List``: NAdam's ``_foreach_mul_(
# mu_products, mus)``).
_SCALAR_LIST_AT = {
    **dict.fromkeys(("_foreach_addcdiv_", "_foreach_addcdiv", "_foreach_addcmul_", "_foreach_addcmul"),
                    (3, False)),
    **dict.fromkeys(("_foreach_mul_", "_foreach_mul", "_foreach_div_", "_foreach_div", "_foreach_add_",
                     "_foreach_add", "_foreach_sub_", "_foreach_sub"), (1, True))}
# Tensors made of one float (keywords: see Operands.steps): a float an eager step computed
# or a lifted one is a graph input, rounded to the result's dtype in the graph.
_NUMBER_FACTORIES = frozenset({"as_tensor", "tensor", "scalar_tensor"})
# Operations whose Python number operands may be 0-d tensors (see _scalar_operands); the
# foreach ones have a ``.Tensor`` overload taking it (``torch._foreach_mul_(params, t)``).
_LIFTABLE = frozenset({"__add__", "__radd__", "__iadd__", "__sub__", "__rsub__", "__isub__", "__mul__",
                       "__rmul__", "__imul__", "__truediv__", "__rdiv__", "__rtruediv__", "__itruediv__",
                       "add", "sub", "mul", "div", "true_divide", "add_", "sub_", "mul_", "div_",
                       "_foreach_add", "_foreach_add_", "_foreach_mul", "_foreach_mul_", "_foreach_div",
                       "_foreach_div_",
                       # (Adam's ``exp_avg.lerp_(grad, 1 - beta1)`` and ``beta1 ** step``)
                       "lerp", "lerp_", "__rpow__"})
# Constants fx writes into the graph's code as their repr, which gives them back exactly (fx
# itself names inf, nan, torch and device); others are embedded by reference (_constant).
_LITERALS = frozenset({int, float, bool, str, bytes, type(None), type(Ellipsis), torch.dtype, torch.device,
                       torch.layout, torch.memory_format})


def _literal(v) -> bool:
    """Does fx's code for the constant ``v`` give back ``v`` itself, of its own type?"""
    t = type(v)
    if t in _LITERALS:
        return True
    if t is complex:   # repr(complex(inf, nan)) == "(inf+nanj)": "nanj" is no name
        return math.isfinite(v.real) and math.isfinite(v.imag)
    if t is tuple or t is list:   # torch.Size is written as a tuple: it is not a literal
        return all(_literal(x) for x in v)
    if t is slice:
        return _literal(v.start) and _literal(v.stop) and _literal(v.step)
    return False


def _constant(value):
    """A graph node's target returning ``value``: fx names it a global of the graph's code,
    so the value is the object itself, not its repr (backends trace through the call)."""
    def constant():
        return value
    return constant
