"""torch.fx's tracing patches, kept out of the program's threads while magpy's worker compiles.

fx's ``Tracer.trace`` patches ``nn.Module.__call__`` and ``__getattr__``, and the functions
registered with ``torch.fx.wrap`` in their modules' globals, for the whole process while it
traces (torch 2.13).  AOTAutograd traces every graph that has a backward that way
(``make_fx(..., record_module_stack=True)``: a ``_ModuleStackTracer``), so while the worker
(magpy.backends.background) compiled such a graph, a module the program called in its own
thread went through that tracer: eager code of the program raised ``NameError: module is
not installed as a submodule`` (the eager twin of the DDP zero_grad table on 4 ranks under
Inductor, now and then), and a recording met the tracer's wrappers
(magpy.capture.callees.fx_tracing).  In the worker these traces make no patches.  They
trace GraphModules through make_fx, whose tracers take a module's call and its attributes
as they are (``PythonKeyTracer.call_module`` calls ``forward``, its ``getattr`` returns the
value), so the patches change nothing but the module stack recorded as metadata of the
graph's nodes (magpy's graphs call no submodules) and ``torch.fx.wrap``'d functions, which
make nodes only of fx proxies (make_fx hands the traced code tensors).
"""
from __future__ import annotations

import contextlib
import functools
import threading
from typing import Callable, Iterator

from torch.fx import _symbolic_trace

_here = threading.local()
_install_once = threading.Lock()


@contextlib.contextmanager
def kept_to_this_thread() -> Iterator[None]:
    """While inside, fx traces in this thread patch nothing the process shares."""
    _install()
    _here.kept = True
    try:
        yield
    finally:
        _here.kept = False


def _install() -> None:
    with _install_once:
        patcher = _symbolic_trace._Patcher
        for name in ("patch", "patch_method"):
            method = patcher.__dict__[name]
            if not getattr(method, "_magpy_kept", False):
                setattr(patcher, name, _unless_kept(method))


def _unless_kept(patch: Callable) -> Callable:
    @functools.wraps(patch)
    def patch_unless_kept(self, *args, **kwargs) -> None:
        if not getattr(_here, "kept", False):
            patch(self, *args, **kwargs)

    patch_unless_kept._magpy_kept = True
    return patch_unless_kept
