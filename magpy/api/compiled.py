"""The public API of a compiled callable: ``compile``, ``CompiledModule``, ``stats``, ``reset``,
``synchronize``."""
from __future__ import annotations

import functools
import types
from typing import Callable

import torch

from magpy.backends import background, registry
from magpy.capture.callees import numpy_arrays
from magpy.capture.monitor import bytecode
from magpy.capture.monitor.frame import unsupported_python_message
from magpy.capture.monitor.interpreter import UnsupportedPythonError
from magpy.graphs import controlflow
from magpy.records.cache import RecordCache, reset_all
from magpy.records.report import Stats


class CompiledModule(torch.nn.Module):
    """Stands in for a compiled ``nn.Module``: calling it runs the compiled ``module(...)``.

    It shares the original module's state (its ``__dict__``: parameters, submodules,
    ``training``, hooks), so ``state_dict()``, ``train()``/``eval()``, ``to()`` and attribute
    access act on the original; other methods of the original's class are forwarded.

    Each compiled module is an instance of a subclass made for its original's class
    (:func:`compiled_module`): of this class first, then of the original's, so that
    ``isinstance`` and the original's methods (``save_pretrained``, ``generate``) see the module
    they were given (methods run on the compiled module, so their ``self(...)`` is compiled),
    and its ``forward`` has the original ``forward``'s name, docstring and signature, which
    libraries inspect (transformers' Trainer keeps only the dataset columns and labels its
    parameters name).
    """

    __slots__ = ("_orig_mod", "_magpy_cache")

    def __init__(self, module: torch.nn.Module, cache: RecordCache):  # noqa: D107
        object.__setattr__(self, "_orig_mod", module)
        object.__setattr__(self, "_magpy_cache", cache)
        object.__setattr__(self, "__dict__", module.__dict__)

    def __getattr__(self, name):
        return getattr(object.__getattribute__(self, "_orig_mod"), name)

    def __call__(self, *args, **kwargs):
        return self._magpy_cache(args, kwargs)

    def forward(self, *args, **kwargs):
        return self._magpy_cache(args, kwargs)

    def __repr__(self):
        return f"CompiledModule({self._orig_mod!r})"


def compiled_module(module: torch.nn.Module, cache: RecordCache) -> CompiledModule:
    """``module`` compiled: a :class:`CompiledModule` of a subclass named after its class."""
    cls = type(module)
    if type(cls) is not type(CompiledModule):
        # A class of another metaclass: TorchScript's modules keep their state and methods in
        # C++, and their Python class is not one to extend (nor its forward to wrap).
        return CompiledModule(module, cache)

    @functools.wraps(cls.forward)
    def forward(self, *args, **kwargs):
        return self._magpy_cache(args, kwargs)

    # A class per call, not cached per original class: a cache would keep every class
    # (a test's local one too) alive through its forward's __wrapped__.
    namespace = {"__slots__": (), "forward": forward, "__module__": __name__,
                 "__doc__": CompiledModule.__doc__}
    name = f"Compiled{cls.__name__}"
    try:
        sub = type(name, (CompiledModule, cls), namespace)
    except TypeError:   # a layout the two bases cannot share (__slots__)
        sub = type(name, (CompiledModule,), namespace)
    # (made past the module class's own __new__: FSDP2's builds an instance of the class it
    # wraps from the arguments)
    compiled = object.__new__(sub)
    CompiledModule.__init__(compiled, module, cache)
    return compiled


def compile(fn: Callable | None = None, *, backend: str | Callable = "inductor", fullgraph: bool = False):
    """Compile a function, method or ``nn.Module`` with magpy; usable as a decorator.

    The first call runs the program under the monitor and records a guard, a mock and an
    operator graph compiled by ``backend`` ("eager", "inductor", or a callable
    ``(gm, example_inputs) -> callable``); later calls whose guard passes run the mock.
    A call that meets a dynamic operation runs eagerly, or, with ``fullgraph=True``,
    raises :class:`magpy.GraphBreakError` naming the operation and the source line.
    """
    if fn is None:
        return functools.partial(compile, backend=backend, fullgraph=fullgraph)
    if not callable(fn):
        raise TypeError("magpy.compile needs a callable (function, method or nn.Module), "
                        f"got {type(fn).__name__}")
    if not bytecode.SUPPORTED:
        raise UnsupportedPythonError(unsupported_python_message())
    resolved = registry.resolve(backend)
    if isinstance(fn, CompiledModule) or hasattr(fn, "_magpy_cache"):
        fn = original_of(fn)
    if isinstance(fn, torch.nn.Module):
        return compiled_module(fn, RecordCache(fn, resolved, fullgraph, roots=roots_of(fn)))
    if type(fn) is functools.partial:
        return _compile_partial(fn, backend, fullgraph)
    cache = RecordCache(fn, resolved, fullgraph, roots=roots_of(fn))

    @functools.wraps(fn)
    def compiled(*args, **kwargs):
        return cache(args, kwargs)

    compiled._magpy_cache = cache
    return compiled


def _compile_partial(p: functools.partial, backend, fullgraph: bool):
    """A ``functools.partial`` compiled as its function, the partial's arguments given to it on
    each call: they are arguments the guard checks (a module as ``p.func`` is a root, its state
    guarded; ``p.keywords`` can change between calls)."""
    inner = compile(p.func, backend=backend, fullgraph=fullgraph)

    @functools.wraps(p)
    def compiled(*args, **kwargs):
        return inner(*p.args, *args, **{**p.keywords, **kwargs})

    compiled._magpy_cache = inner._magpy_cache
    return compiled


def original_of(compiled):
    """The function or module a compiled callable was made from (itself if it is not one)."""
    if isinstance(compiled, CompiledModule):
        return object.__getattribute__(compiled, "_orig_mod")
    cache = getattr(compiled, "_magpy_cache", None)
    # functools.wraps keeps what was compiled (a partial's cache holds its function)
    return getattr(compiled, "__wrapped__", cache.fn) if cache is not None else compiled


def roots_of(fn) -> tuple:
    """Objects the compiled callable itself holds: reads from them are reads of SN #0."""
    if isinstance(fn, types.MethodType):
        return (fn.__self__,)
    return (fn,)   # a function, an nn.Module, an object with __call__


def stats(compiled) -> Stats:
    """Counters of a compiled callable: monitor runs, mock runs, eager runs, graphs, records."""
    return cache_of(compiled, "magpy.stats").stats


def cache_of(compiled, who: str) -> RecordCache:
    """The records of ``compiled``, a callable ``magpy.compile`` returned; ``who`` (the API
    asking) names it in the TypeError raised for any other object."""
    cache = getattr(compiled, "_magpy_cache", None)
    if cache is None:
        raise TypeError(f"{who} needs a callable returned by magpy.compile")
    return cache


def synchronize(timeout: float | None = None) -> bool:
    """Wait until every graph compile running or queued in the background has finished
    (``magpy.config.background_compile``): each compiled graph then takes over at its
    record's next call.  False if ``timeout`` seconds passed first."""
    return background.synchronize(timeout)


def reset() -> None:
    """Drop every record of every compiled callable (the next calls record again, as the
    first did: which ifs, loops and ``.numpy()`` sites could not be recorded is forgotten)."""
    reset_all()
    background.cancel_queued()
    controlflow.forget_refusals()
    numpy_arrays.forget_refusals()
