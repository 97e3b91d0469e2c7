"""One recording's fake twins and the symbols of its lifted sizes and ints (``magpy.graphs.dynamic``):
torch's ``FakeTensorMode`` over a ``ShapeEnv`` runs each recorded operation again on the twins,
so the sizes of its results are expressions in the symbols; each symbol keeps where its value
comes from, for the graph, the mock and the shape check to load it there."""
from __future__ import annotations

import contextlib
import logging
import operator

import sympy
import torch
from torch._dispatch.python import enable_python_dispatcher
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode
from torch.fx.experimental.symbolic_shapes import DimDynamic, ShapeEnv, StatelessSymbolicContext
from torch.utils import _pytree as pytree
from torch.utils._sympy.functions import CleanDiv, FloorDiv, Max, Min, Mod, PythonMod
from torch.utils._sympy.numbers import int_oo
from torch.utils._sympy.printers import PythonPrinter

from magpy import logs
from magpy.graphs.dynamic.lifted_shadows import IntFloat, Scalar, SymInt, specialise
from magpy.graphs.dynamic.lifting import Lifting


class Origin:
    """Where a symbol's value comes from: ``what`` ("size" or "stride") of dimension ``dim``
    of the input tensor ``holder``, or (``what`` None) the int whose RefGraph node is
    ``holder``.  ``value``: its SymInt.  (torch makes stride symbols of its own for the
    twins of non-contiguous inputs.)"""

    __slots__ = ("holder", "dim", "value", "what")

    def __init__(self, holder, dim, value, what="size"):
        self.holder, self.dim, self.value, self.what = holder, dim, value, what

    def load(self, name: str) -> str:
        """Source loading the value from the holder's variable ``name``."""
        return name if self.what is None else f"{name}.{self.what}({self.dim})"


class Twins:
    """The fake twins of one recording's tensors, and the symbols of the lifted sizes of its
    inputs and of its lifted ints, each with its :class:`Origin`."""

    def __init__(self, lifting: Lifting, mode: bool | None, refgraph):
        self.lifting, self.mode, self.refgraph = lifting, mode, refgraph
        self.env = ShapeEnv(duck_shape=False)
        self.fake_mode = FakeTensorMode(shape_env=self.env)
        self.fakes: dict[int, FakeTensor] = {}
        self._keep: list = []
        self.symbols: dict[sympy.Symbol, Origin] = {}
        self.inputs: dict[int, tuple] = {}       # id(input tensor) -> (node, lifted dims, twin)
        self.ints: dict[int, object] = {}        # node id -> node of a lifted int

    def int_symbol(self, sn) -> SymInt | None:
        """A lifted int (an argument, or a counter read from program state: a scheduler's
        ``last_epoch``, a step count): a symbol backed by its value.  0 stays a constant (as
        torch specialises sizes); a value above 1 gets a size's symbol, from 2 up, and a
        negative one a symbol of the negative ints: a record serves the ints of one sign (the
        guard checks the range), where torch's reasoning about sizes holds for the positive.
        1 gets a symbol of the ints from 1 up: an int that counts (a loop index passed to a
        compiled step, a counter) has 1 for its second value, and the record it makes there
        serves every later step; where torch needs 1 told apart (broadcasting a size) it
        guards the symbol's value."""
        one = sn.value == 1
        if sn.value == 0:
            return None
        source = _source(f"int{len(self.symbols)}")
        negative = sn.value < 0
        sym = self.env.create_symbol(sn.value, source, dynamic_dim=DimDynamic.DYNAMIC,
                                     positive=None if negative or one else True,
                                     do_not_specialize_zero_one=one)
        if negative or one:
            self.env.constrain_symbol_range(sym, -int_oo if negative else 1, -1 if negative else int_oo)
        value = self.env.create_symintnode(sym, hint=sn.value, source=source)
        self.symbols[sym] = Origin(sn, None, value, None)
        self.ints[sn.id] = sn
        return value

    def lint(self) -> None:
        """Check what the guard, the mock and the graph rely on to load a symbol: the holder of
        a size's or stride's symbol is an input with its twin, an int's is a lifted int."""
        for sym, o in self.symbols.items():
            if o.what is None:
                held = self.ints.get(o.holder.id) is o.holder
            else:
                entry = self.inputs.get(id(o.holder))
                held = entry is not None and entry[2] is not None
            if not held:
                raise AssertionError(f"symbol {sym}: its holder is not a lifted input")

    def consider(self, t: torch.Tensor) -> None:
        """A tensor the recorder meets: an input whose dimensions are lifted gets its twin now."""
        if id(t) in self.fakes or id(t) in self.inputs:
            return
        sn = self.refgraph.node_of(t)
        if sn is None:
            return
        dims = self.lifting.dims(self.mode, sn, t)
        dims = frozenset(d for d in dims if t.shape[d] > 1)   # 0 and 1 stay specialised
        if not dims:
            self.inputs[id(t)] = (sn, dims, None)
            return
        ctx = StatelessSymbolicContext(dynamic_sizes=[DimDynamic.DYNAMIC if d in dims else DimDynamic.STATIC
                                                      for d in range(t.dim())])
        source = _source(f"in{len(self.inputs)}")
        fake = self.fake_mode.from_tensor(t, symbolic_context=ctx, source=source)
        for d in dims:
            self.symbols[fake.size(d).node.expr] = Origin(t, d, fake.size(d))
        for d, s in enumerate(fake.stride()):
            if type(s) is SymInt and s.node.expr.is_Symbol and s.node.expr not in self.symbols:
                self.symbols[s.node.expr] = Origin(t, d, s, "stride")
        self.inputs[id(t)] = (sn, dims, fake)
        self._bind(t, fake)

    def fake(self, t: torch.Tensor) -> FakeTensor:
        """``t``'s twin (a static one for a tensor made before any dimension was lifted)."""
        f = self.fakes.get(id(t))
        if f is None:
            self.consider(t)
            f = self.fakes.get(id(t))
        if f is None:
            f = self.fake_mode.from_tensor(t, static_shapes=True)
            self._bind(t, f)
        return f

    def _bind(self, t, fake) -> None:
        self.fakes[id(t)] = fake
        self._keep.append(t)

    def propagate(self, func, args, kwargs, out) -> None:
        """Run the operation on the twins: its results' twins."""
        def twin(a):
            if type(a) is Scalar or type(a) is IntFloat:
                return a.value
            return self.fake(a) if isinstance(a, torch.Tensor) else a
        fargs, fkwargs = pytree.tree_map(twin, (tuple(args), dict(kwargs)))
        try:
            # The Python dispatcher runs the decompositions that keep sizes symbolic (as under
            # torch.compile); some C++ kernels would read concrete sizes (F.pad, baddbmm).
            # The twins' run is magpy's own work: no torch function mode sees it (the
            # recorder's is active where magpy records an operation it ran itself, the
            # backward of ``magpy.training.backward``).
            with torch._C.DisableTorchFunction(), self.fake_mode, enable_python_dispatcher(), _quiet_fakes():
                r = func(*fargs, **fkwargs)
        except Exception as e:  # noqa: BLE001 - sizes torch cannot say symbolically (data-dependent)
            logs.logger("dynamic").info("every lifted size specialised: %s failed on symbolic sizes (%s: %s)",
                                        getattr(func, "__name__", func), type(e).__name__, str(e)[:200])
            self.specialise_all()
            r = None
        outs = pytree.tree_leaves(out)
        twins = pytree.tree_leaves(r) if r is not None else []
        for i, t in enumerate(outs):
            if not isinstance(t, torch.Tensor) or id(t) in self.inputs:
                continue
            f = twins[i] if len(twins) == len(outs) else None
            if not isinstance(f, FakeTensor) or f.dim() != t.dim() or f.dtype != t.dtype:
                self.fakes.pop(id(t), None)
                f = self.fake(t)
            self._bind(t, f)

    def row_twin(self, t: torch.Tensor, x: torch.Tensor) -> None:
        """``t`` is a row of ``x`` (a step of a loop over it, sliced where no operation was
        recorded): its twin is a row of ``x``'s twin."""
        with self.fake_mode:
            fake = self.fake(x)[0]
        self._bind(t, fake)

    def twin_like(self, t: torch.Tensor, like: torch.Tensor) -> None:
        """``t`` (a control flow operator's output, made where no operation was recorded) is of
        ``like``'s kind: its twin gets the sizes and strides of ``like``'s."""
        f = self.fake(like)
        with self.fake_mode:
            fake = torch.empty_strided(f.shape, f.stride(), dtype=f.dtype, device=f.device)
        self._bind(t, fake)

    def stacked(self, t: torch.Tensor, over) -> None:
        """``t`` holds one row per step of a loop over the first dimension of tensor ``over``,
        or over ``range(over)``: its twin's first size is that of ``over``'s twin, or ``over``."""
        n = self.fake(over).shape[0] if isinstance(over, torch.Tensor) else over
        with self.fake_mode:
            fake = torch.empty((n, *t.shape[1:]), dtype=t.dtype, device=t.device)
        self._bind(t, fake)

    def specialise_all(self) -> None:
        for origin in list(self.symbols.values()):
            specialise(origin.value)

    def expression(self, s: SymInt) -> tuple[list[tuple], str]:
        """``s`` as Python source over its symbols, and the symbols' origins ``(name, origin)``
        (the mock loads each from its holder before using the source)."""
        expr = self.env.replace(s.node.expr)
        origins = [(str(sym), self.symbols[sym]) for sym in sorted(expr.free_symbols, key=str)]
        return origins, PythonPrinter().doprint(expr)

    def holder_node(self, origin: Origin):
        """The RefGraph node of a symbol's holder (an input tensor's, or the int's own)."""
        return origin.holder if origin.what is None else self.inputs[id(origin.holder)][0]

    def size_node(self, s: SymInt, recorder):
        """An argument of the recorder's graph computing SymInt ``s`` from the input tensors'
        sizes and the lifted int arguments; a plain int, guarded, where the expression has no
        fx form."""
        graph = recorder.graph

        def leaf(sym):
            o = self.symbols[sym]
            if o.what is None:
                return recorder.int_input(o.holder, o.value)
            return graph.call_method(o.what, (recorder.tensor_node(o.holder), o.dim))
        node = sym_fx(self.env.replace(s.node.expr), leaf, graph.call_function)
        return int(s) if node is None else node

    def sizes_and_strides(self, t: torch.Tensor) -> tuple[list, list]:
        """What the tensor guard fixes of input ``t``: sizes and strides, None where symbolic."""
        entry = self.inputs.get(id(t))
        if entry is None or entry[2] is None:
            return list(t.size()), list(t.stride())
        fake = entry[2]
        return ([None if self._free(s) else int(t.size(d)) for d, s in enumerate(fake.size())],
                [None if self._free(s) else int(t.stride(d)) for d, s in enumerate(fake.stride())])

    def size_words(self, t: torch.Tensor) -> list:
        """``t``'s sizes for people: a lifted one by its symbol (``[s0, 16]``)."""
        entry = self.inputs.get(id(t))
        if entry is None or entry[2] is None:
            return list(t.shape)
        return [str(self.env.replace(s.node.expr)) if self._free(s) else int(t.size(d))
                for d, s in enumerate(entry[2].size())]

    def lifted_sizes(self, t: torch.Tensor) -> bool:
        """Has tensor ``t`` a symbolic size: an input's lifted dimension, or a result's made from
        one (by its twin)?"""
        f = self.fakes.get(id(t))
        return f is not None and any(map(self._free, f.shape))

    def _free(self, s) -> bool:
        return type(s) is SymInt and bool(self.env.replace(s.node.expr).free_symbols)

    def describe(self, words) -> list[str]:
        """The lifted dimensions and ints and whether each stayed dynamic, in words (explain);
        ``words(node)`` names an input."""
        out = []
        for sym, o in self.symbols.items():
            expr = self.env.replace(sym)
            state = f"dynamic, {sym}" if expr.free_symbols else f"specialised to {expr}"
            if o.what is None:
                where = f"{words(o.holder)} (int)"
            else:
                where = f"{words(self.inputs[id(o.holder)][0])}.{o.what}({o.dim})"
            out.append(f"{where}: {state}")
        return out


def sym_fx(expr, leaf, call):
    """fx arguments computing sympy ``expr`` (None where it has no fx form): ``leaf(symbol)``
    gives a symbol's node, ``call(op, args)`` adds an operation."""
    if expr.is_Integer:
        return int(expr)
    if expr.is_Symbol:
        return leaf(expr)
    op = _SYMPY_OPS.get(type(expr))
    if op is None or type(expr) is sympy.Pow and not (expr.exp.is_Integer and expr.exp > 0):
        return None
    args = [sym_fx(a, leaf, call) for a in expr.args]
    if any(a is None for a in args):
        return None
    node = args[0]
    for a in args[1:]:
        node = call(op, (node, a))
    return node


_SYMPY_OPS = {sympy.Add: operator.add, sympy.Mul: operator.mul, FloorDiv: operator.floordiv,
              CleanDiv: operator.floordiv, Mod: operator.mod, PythonMod: operator.mod,
              sympy.Pow: operator.pow, Max: torch.sym_max, Min: torch.sym_min}


def _source(name: str):
    """A symbol's source for the ShapeEnv (it names the symbol's origin in torch's messages)."""
    from torch._dynamo.source import ConstantSource  # (importing torch._dynamo takes a second)
    return ConstantSource(name)


@contextlib.contextmanager
def _quiet_fakes():
    # FakeTensor logs a meta function's failure with its traceback at ERROR level; here that
    # failure is expected (magpy specialises the sizes instead), not the user's concern.
    logger = logging.getLogger("torch._subclasses.fake_tensor")
    saved = logger.level
    logger.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        logger.setLevel(saved)
