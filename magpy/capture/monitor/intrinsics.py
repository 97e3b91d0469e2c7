"""Intrinsics: builtins the monitor must not simply run natively.

Two kinds, both table entries of the default :class:`CallPolicy`:

- *frame-sensitive* builtins look at their caller's frame (zero-argument ``super()``,
  ``locals()``, ``globals()``, ``sys._getframe`` ...); run natively they would see the
  monitor's own frame, so they are answered from the monitored frame instead;
- *higher-order* builtins call Python callables (``map``, ``sorted(key=...)``, ...);
  their callable arguments are wrapped so those calls come back into the monitor.
"""
import __future__

import builtins
import functools
import itertools
import logging
import operator
import sys
import types
import warnings

from magpy.capture.monitor import operators
from magpy.capture.monitor.frame import Frame
from magpy.capture.monitor.policy import CallPolicy
from magpy.capture.monitor.protocols import NULL, cell_value, py_method
from magpy.capture.monitor.tracebacks import MAGPY_DIR

_FUTURE_FLAGS = 0
for _feature in __future__.all_feature_names:
    _FUTURE_FLAGS |= getattr(__future__, _feature).compiler_flag


# --------------------------------------------------------------------------- frame-sensitive
def _super(mon, args, kwargs):
    if args or kwargs:
        return super(*args, **(kwargs or {}))
    f = mon.current
    code = f.code
    if code.co_argcount == 0:
        raise RuntimeError("super(): no arguments")
    first = f.locals[0]
    if code.co_varnames[0] in code.co_cellvars and type(first) is types.CellType:
        first = cell_value(first)
    if first is NULL:
        raise RuntimeError("super(): arg[0] deleted")
    if "__class__" not in code.co_freevars:
        raise RuntimeError("super(): __class__ cell not found")
    cell = f.locals[f.info.nlocals_and_cells + code.co_freevars.index("__class__")]
    if type(cell) is not types.CellType:
        raise RuntimeError("super(): bad __class__ cell")
    cls = cell_value(cell)
    if cls is NULL:
        raise RuntimeError("super(): empty __class__ cell")
    if not isinstance(cls, type):
        raise RuntimeError(f"super(): __class__ is not a type ({type(cls).__name__})")
    return super(cls, first)


def _bare(fn, answer):
    """An intrinsic for a builtin that reads its caller's frame only when called bare."""

    def intrinsic(mon, args, kwargs):
        if args or kwargs:
            return fn(*args, **(kwargs or {}))
        return answer(mon.current)

    return intrinsic


def _getframe(mon, args, kwargs):
    if kwargs or len(args) > 1:
        return sys._getframe(*args, **(kwargs or {}))  # native argument errors
    depth = args[0].__index__() if args else 0
    f = mon.current
    while depth > 0 and f is not None:
        f = f.f_back
        depth -= 1
    if f is None:
        raise ValueError("call stack is not deep enough")
    return f


def _frame_depth(depth=0):
    return depth.__index__()


def _getframemodulename(mon, args, kwargs):
    """``sys._getframemodulename`` (3.12): the module of the function running ``depth`` frames up."""
    try:
        depth = _frame_depth(*args, **(kwargs or {}))
    except TypeError:
        return sys._getframemodulename(*args, **(kwargs or {}))  # native argument errors
    f = mon.current
    while depth > 0 and f is not None:
        f = f.f_back
        depth -= 1
    if f is None:
        return None
    fn = getattr(f, "fn", None)
    # (A class body or exec'd code runs a function CPython makes for it, of the globals' module.)
    return fn.__module__ if fn is not None else f.f_globals.get("__name__")


def _exc_info(mon, args, kwargs):
    if args or kwargs:
        return sys.exc_info(*args, **(kwargs or {}))
    e = mon.handled_exception()
    return (None, None, None) if e is None else (type(e), e, e.__traceback__)


def _exception(mon, args, kwargs):
    if args or kwargs:
        return sys.exception(*args, **(kwargs or {}))
    return mon.handled_exception()


_NOOP_CODE = {"exec": compile("", "<string>", "exec"), "eval": compile("None", "<string>", "eval")}


def _source_runner(mode, native):
    """``exec``/``eval``: the caller's namespaces by default, the code itself monitored."""

    def intrinsic(mon, args, kwargs):
        if kwargs or not 1 <= len(args) <= 3:
            return native(*args, **(kwargs or {}))
        source = args[0]
        g = args[1] if len(args) > 1 else None
        ns = args[2] if len(args) > 2 else None
        f = mon.current
        if g is None:
            g = f.globals
            if ns is None:
                ns = f.locals_snapshot()
        elif ns is None:
            ns = g
        native(_NOOP_CODE[mode], g, ns)  # CPython's own argument checks; adds __builtins__
        if isinstance(source, (str, bytes, bytearray)):
            if mode == "eval":
                source = source.lstrip(" \t") if isinstance(source, str) else source.lstrip(b" \t")
            code = compile(source, "<string>", mode, f.code.co_flags & _FUTURE_FLAGS, True)
        elif isinstance(source, types.CodeType) and not source.co_freevars:
            code = source
        else:
            return native(source, g, ns)
        result = mon.run_code(code, g, ns)
        return result if mode == "eval" else None

    return intrinsic


def _compile(mon, args, kwargs):
    # compile() inherits the *caller's* __future__ flags unless told otherwise.
    bound = _compile_signature(*args, **(kwargs or {}))
    if not bound["dont_inherit"]:
        bound["flags"] |= mon.current.code.co_flags & _FUTURE_FLAGS
    return compile(**bound)


def _compile_signature(source, filename, mode, flags=0, dont_inherit=False, optimize=-1, *,
                       _feature_version=-1):
    return {"source": source, "filename": filename, "mode": mode, "flags": flags,
            "dont_inherit": dont_inherit, "optimize": optimize,
            "_feature_version": _feature_version}


def _warn(mon, args, kwargs):
    emit_warning(*warning_site(mon, args, kwargs)[:-1])


def warning_site(mon, args, kwargs) -> tuple:
    """What ``warnings.warn(*args, **kwargs)`` called from the monitored frame would hand to
    ``warnings.warn_explicit``: ``(message, category, filename, lineno, module, module
    globals, source, frame)``, where ``frame`` is the frame ``stacklevel`` names (None: past
    the outermost one).  Raises as ``warnings.warn`` does for a bad category."""
    message, category, stacklevel, source = _warn_signature(*args, **(kwargs or {}))
    if isinstance(message, Warning):
        category = type(message)
    elif category is None:
        category = UserWarning
    elif not (isinstance(category, type) and issubclass(category, Warning)):
        raise TypeError(f"category must be a Warning subclass, not '{type(category).__name__}'")
    f = mon.current
    internal = _is_internal_frame(f)
    while stacklevel > 1 and f is not None:
        f = _past_magpy(f.f_back)
        while not internal and f is not None and _is_internal_frame(f):
            f = _past_magpy(f.f_back)
        stacklevel -= 1
    if f is None:
        g, filename, lineno = sys.__dict__, "sys", 1
    else:
        g, filename, lineno = f.f_globals, f.f_code.co_filename, f.f_lineno
    module = g.get("__name__")
    if not (module is None or isinstance(module, str)):
        module = "<string>"
    return message, category, filename, lineno, module, g, source, f


def log_site(mon, stacklevel: int) -> tuple | None:
    """Where a ``logging.Logger`` call from the monitored frame is made, as
    ``Logger.findCaller`` works it out (the ``stacklevel``-th frame up that is not logging's
    own): ``(filename, lineno, function name)``, or None past the monitored call."""
    f = mon.current
    while type(f) is Frame:
        if f.f_code.co_filename != logging.__file__:
            stacklevel -= 1
            if stacklevel <= 0:
                return f.f_code.co_filename, f.f_lineno, f.f_code.co_name
        f = f.f_back
    return None


def emit_warning(message, category, filename, lineno, module, module_globals, source) -> None:
    """``warnings.warn_explicit`` with the registry of ``module_globals`` (made if missing),
    as ``warnings.warn`` does for the frame whose globals these are."""
    registry = module_globals.get("__warningregistry__")
    if registry is None:
        registry = module_globals["__warningregistry__"] = {}
    warnings.warn_explicit(message, category, filename, lineno, module, registry, None, source)


def _warn_signature(message, category=None, stacklevel=1, source=None):
    return message, category, stacklevel, source


def _past_magpy(f):
    """``f``, or past it the first frame that is not magpy's own machinery (the monitor run's
    host frames): a warning's ``stacklevel`` reaching past the monitored call names the
    program's frame that called it, as natively."""
    while f is not None and type(f) is not Frame and f.f_code.co_filename.startswith(MAGPY_DIR):
        f = f.f_back
    return f



def _is_internal_frame(f):
    if f is None:
        return False
    filename = f.f_code.co_filename
    return "importlib" in filename and "_bootstrap" in filename


def _build_class(mon, args, kwargs):
    """``__build_class__``: the class body runs as a monitored frame."""
    if len(args) < 2:
        raise TypeError("__build_class__: not enough arguments")
    func, name, *orig = args
    if type(func) is not types.FunctionType:
        raise TypeError("__build_class__: func must be a function")
    if not isinstance(name, str):
        raise TypeError("__build_class__: name is not a string")
    orig_bases = tuple(orig)
    bases = mon.call(types.resolve_bases, (orig_bases,), None)
    meta, ns, kwds = mon.call(types.prepare_class, (name, bases, dict(kwargs or {})), None)
    if not hasattr(type(ns), "__getitem__") or not hasattr(type(ns), "keys"):
        meta_name = meta.__name__ if isinstance(meta, type) else "<metaclass>"
        raise TypeError(f"{meta_name}.__prepare__() must return a mapping, not {type(ns).__name__}")
    cell = mon.run_code(func.__code__, func.__globals__, ns, func)
    if bases is not orig_bases:
        ns["__orig_bases__"] = orig_bases
    cls = mon.call(meta, (name, bases, ns), kwds or None)
    if isinstance(cls, type) and type(cell) is types.CellType:
        cell_cls = cell_value(cell)
        if cell_cls is not cls:
            if cell_cls is NULL:
                raise RuntimeError(f"__class__ not set defining {name!r} as {cls!r}. Was "
                                   "__classcell__ propagated to type.__new__?")
            raise TypeError(f"__class__ set to {cell_cls!r} defining {name!r} as {cls!r}")
    return cls


def _getattr(mon, args, kwargs):
    if kwargs or not 2 <= len(args) <= 3 or type(args[1]) is not str:
        return getattr(*args, **(kwargs or {}))
    if len(args) == 2:
        return mon.load_attr(args[0], args[1])
    failed = False
    try:
        return mon.load_attr(args[0], args[1])
    except AttributeError:
        failed = True
        mon.propagating = None
    if failed:
        return args[2]


_ABSENT = object()


def _hasattr(mon, args, kwargs):
    """``hasattr(obj, name)`` as ``getattr(obj, name, absent)``: a Python ``__getattr__`` (a
    config object that reads its items) is entered, so what it read is seen."""
    if kwargs or len(args) != 2 or type(args[1]) is not str:
        return hasattr(*args, **(kwargs or {}))
    return _getattr(mon, (*args, _ABSENT), None) is not _ABSENT


# --------------------------------------------------------------------------- higher-order
class Callback:
    """A Python callable handed to native code; calling it comes back into the monitor."""

    __slots__ = ("monitor", "fn", "__weakref__")

    def __init__(self, monitor, fn):
        self.monitor, self.fn = monitor, fn

    def __call__(self, *args, **kwargs):
        return self.monitor.call(self.fn, args, kwargs or None)


_NATIVE_CALLABLES = (types.BuiltinFunctionType, types.BuiltinMethodType, types.MethodDescriptorType,
                     types.WrapperDescriptorType, types.MethodWrapperType, type, Callback)


def _wrap(mon, fn):
    # Native callables run natively, unless the monitor handles them (operator.add, len ...).
    if fn is None or (isinstance(fn, _NATIVE_CALLABLES) and id(fn) not in mon.policy.intrinsics):
        return fn
    return Callback(mon, fn)


def _iterate(mon, obj):
    # A Python __iter__ run by native code would escape the monitor: run it here instead.
    fn = py_method(type(obj), "__iter__")
    return obj if fn is None or mon.policy.runs_natively(fn) else mon.get_iter(obj)


def callback_intrinsic(native, positions=(), keywords=(), min_args=0, iterables=()):
    """An intrinsic calling ``native`` with the callables at ``positions``/``keywords`` wrapped
    and the iterables at ``iterables`` (``"*"``: every positional) iterated by the monitor."""

    def intrinsic(mon, args, kwargs):
        if iterables:
            args = tuple(_iterate(mon, a) if iterables == "*" or i in iterables else a
                         for i, a in enumerate(args))
        if len(args) >= min_args:
            args = tuple(_wrap(mon, a) if i in positions else a for i, a in enumerate(args))
            if native in _TRUTH_FILTERS and args and args[0] is None:
                # filter(None, ...) tests each item's truth, which may run Python __bool__.
                args = (Callback(mon, bool),) + args[1:]
        if kwargs:
            kwargs = {k: _wrap(mon, v) if k in keywords else v for k, v in kwargs.items()}
            return native(*args, **kwargs)
        return native(*args)

    return intrinsic


_TRUTH_FILTERS = (filter, itertools.filterfalse)


def _list_sort(mon, args, kwargs):
    lst, *rest = args
    if kwargs and "key" in kwargs:
        kwargs = dict(kwargs, key=_wrap(mon, kwargs["key"]))
    return lst.sort(*rest, **(kwargs or {}))


# Higher-order builtins and where their callables go: (callee, positions, keywords, min args).
CALLBACKS = [
    (map, (0,), (), 0, "*"),
    (filter, (0,), (), 0, (1,)),
    (sorted, (), ("key",), 0, (0,)),
    (min, (), ("key",), 0, (0,)),
    (max, (), ("key",), 0, (0,)),
    (functools.reduce, (0,), (), 0, (1,)),
    (functools.cmp_to_key, (0,), ("mycmp",), 0, ()),
    (iter, (0,), (), 2, ()),
    (itertools.starmap, (0,), (), 0, (1,)),
    (itertools.filterfalse, (0,), (), 0, (1,)),
    (itertools.takewhile, (0,), (), 0, (1,)),
    (itertools.dropwhile, (0,), (), 0, (1,)),
    (itertools.groupby, (1,), ("key",), 0, (0,)),
    (itertools.accumulate, (1,), ("func",), 0, (0,)),
    # Consumers of iterables only: their argument's Python __iter__ must be monitored.
    *((f, (), (), 0, "*") for f in (enumerate, zip, list, tuple, set, frozenset,
                                     itertools.chain, itertools.islice, itertools.zip_longest,
                                     itertools.product)),
]


def _operator(native, dispatch):
    """An intrinsic for a builtin that invokes special methods (``len``, ``operator.add``):
    the monitor's dispatch enters the Python ones."""
    nargs = dispatch.__code__.co_argcount - 1

    def intrinsic(mon, args, kwargs):
        if kwargs or len(args) != nargs:
            return native(*args, **(kwargs or {}))  # CPython's own argument errors
        return dispatch(mon, *args)

    return intrinsic


def _binary_dispatch(index, dispatch):
    return lambda mon, v, w: dispatch(mon, v, w, index)


def _unary_dispatch(name):
    return lambda mon, v: operators.unary(mon, v, name)


_ADD, _POW = ([row[1] for row in operators.BINARY].index(name) for name in ("__add__", "__pow__"))


def _sum(mon, args, kwargs):
    if not 1 <= len(args) + len(kwargs or ()) <= 2 or (
            kwargs and (len(args) != 1 or set(kwargs) != {"start"})):
        return sum(*args, **(kwargs or {}))  # CPython's own argument errors
    start = args[1] if len(args) == 2 else (kwargs or {}).get("start", 0)
    result = sum((), start)   # rejects str/bytes starts with CPython's message
    it = mon.get_iter(args[0])
    fast = True   # CPython's float path, until a term leaves it
    while (x := mon.iter_next(it)) is not NULL:
        if fast and type(result) is float:
            # A run of float terms is summed natively: its rounding is the interpreter's own
            # (compensated summation since 3.12).
            run = []
            while x is not NULL and _float_term(x):
                run.append(x)
                x = mon.iter_next(it)
            result = sum(run, result)
            if x is NULL:
                break
            fast = False
        result = operators.binary(mon, result, x, _ADD)
    return result


_LONG = 1 << 63


def _float_term(x):
    """Does sum's float path take ``x`` itself (a float, or an int that fits a C long)?"""
    t = type(x)
    return t is float or ((t is int or t is bool) and -_LONG <= x < _LONG)


def _any_all(stop_on: bool):
    def dispatch(mon, iterable):
        it = mon.get_iter(iterable)
        while (x := mon.iter_next(it)) is not NULL:
            if operators.truth(mon, x) is stop_on:
                return stop_on
        return not stop_on
    return dispatch


def _pow(mon, args, kwargs):
    if kwargs or len(args) != 2:
        return pow(*args, **(kwargs or {}))   # three-argument pow, argument errors
    return operators.binary(mon, args[0], args[1], _POW)


OPERATORS = [
    *((row[3], _binary_dispatch(i, operators.binary)) for i, row in enumerate(operators.BINARY)),
    *((native, _binary_dispatch(i, operators.inplace)) for i, native in enumerate(operators.INPLACE)),
    *((native, _binary_dispatch(i, operators.compare)) for i, native in enumerate(operators.COMPARE_OPS)),
    *((native, _unary_dispatch(name)) for name, native in operators.UNARY.items()),
    (operator.abs, _unary_dispatch("__abs__")), (operator.inv, _unary_dispatch("__invert__")),
    (operator.index, operators.index),
    (operator.contains, operators.contains),
    (operator.truth, operators.truth), (bool, operators.truth),
    (operator.not_, lambda mon, v: not operators.truth(mon, v)),
    (len, operators.length), (hash, operators.hash_of),
    (any, _any_all(True)), (all, _any_all(False)),
    (divmod, lambda mon, v, w: operators.binary_row(mon, v, w, operators.DIVMOD)),
]

FRAME_SENSITIVE = [
    (super, _super),
    (builtins.locals, _bare(builtins.locals, Frame.locals_snapshot)),
    (builtins.vars, _bare(builtins.vars, Frame.locals_snapshot)),
    (builtins.globals, _bare(builtins.globals, lambda f: f.globals)),
    (builtins.dir, _bare(builtins.dir, lambda f: sorted(f.locals_snapshot().keys()))),
    (sys._getframe, _getframe),
    (sys.exc_info, _exc_info), (sys.exception, _exception),
    (builtins.exec, _source_runner("exec", builtins.exec)),
    (builtins.eval, _source_runner("eval", builtins.eval)),
    (builtins.compile, _compile), (warnings.warn, _warn),
    (builtins.__build_class__, _build_class), (builtins.getattr, _getattr),
    (builtins.hasattr, _hasattr),
]
if hasattr(sys, "_getframemodulename"):
    FRAME_SENSITIVE.append((sys._getframemodulename, _getframemodulename))


def default_policy() -> CallPolicy:
    """The monitor's default call policy: intrinsics above; monitor internals run natively."""
    policy = CallPolicy()
    for callee, handler in FRAME_SENSITIVE:
        policy.add_intrinsic(callee, handler)
    for callee, positions, keywords, min_args, iterables in CALLBACKS:
        policy.add_intrinsic(callee, callback_intrinsic(callee, positions, keywords, min_args, iterables))
    for callee, dispatch in OPERATORS:
        policy.add_intrinsic(callee, _operator(callee, dispatch))
    policy.add_intrinsic(sum, _sum)
    policy.add_intrinsic(pow, _pow)
    policy.add_method_intrinsic(list, "sort", _list_sort)
    for fn in _monitor_functions():
        policy.run_natively(fn)
    return policy


def _monitor_functions():
    """Every Python function of the monitor itself: it never monitors its own machinery."""
    seen = set()
    for name, module in list(sys.modules.items()):
        if not name.startswith("magpy.capture.monitor"):
            continue
        stack = list(vars(module).values())
        while stack:
            value = stack.pop()
            if isinstance(value, property):
                stack.extend(f for f in (value.fget, value.fset, value.fdel) if f is not None)
            elif isinstance(value, (staticmethod, classmethod)):
                stack.append(value.__func__)
            elif isinstance(value, types.FunctionType) and \
                    value.__module__.startswith("magpy.capture.monitor"):
                if id(value) not in seen:
                    seen.add(id(value))
                    yield value
            elif (isinstance(value, type) and value.__module__.startswith("magpy.capture.monitor")
                  and id(value) not in seen):
                seen.add(id(value))
                stack.extend(vars(value).values())
