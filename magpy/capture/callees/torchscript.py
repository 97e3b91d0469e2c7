"""TorchScript in a recording run: scripted code runs its original Python under the monitor.

TorchScript executes in C++, where the monitor cannot see its tensor operations, so a call of
scripted code would be an eager step.  Where torch kept the Python it compiled, the recording
run calls that instead (as torch.compile does for scripted functions), and the operations join
the graph:

- a ``torch.jit.script``ed function keeps it as ``_torchdynamo_inline``;
- a scripted module's methods (``torch.jit.script(module)``, and ``ScriptModule`` subclasses
  with ``@torch.jit.script_method``) are ``ScriptMethod``\\ s wrapped by ``functools.wraps``:
  ``__wrapped__`` is the original function (bound to the module that was scripted, or plain).
  It is bound to the *script* module, whose state (parameters, attributes, submodules) lives in
  its C++ module: the original module's attributes are copies from the time of scripting.

A scripted module's attributes are read through its ``__getattr__`` (torch's Python, run
natively), which looks them up in the C++ module; the RefGraph records those reads as
``getattr`` steps the guard repeats (:data:`NATIVE_GETATTRS`).  Modules loaded by
``torch.jit.load`` have no Python, and a scripted ``nn.Sequential`` iterates its original
Python container (not the C++ module's submodules): both stay eager steps.

Scripted code asks ``torch.jit.is_scripting()`` to choose TorchScript's path, and eager gets
True there.  So the original Python is entered as a copy of its function, one per original
(:func:`as_scripted`), and :func:`is_scripting` is True in that copy's frame and in what it
calls, up to a ``@torch.jit.ignore``d function (TorchScript runs those as Python).  The same
function called as plain Python is the original, for which it stays False.  (torch.compile
gives False in scripted functions too: their TorchScript path is never taken.)
"""
from __future__ import annotations

import types

import torch

# Natively run __getattr__s whose result depends only on the object and the name, with no
# effect the program could see: the guard may call getattr(obj, name) again to check it.
NATIVE_GETATTRS = frozenset({torch.jit.ScriptModule.__getattr__, torch.jit.RecursiveScriptModule.__getattr__})

# Their __setattr__s write into the C++ module, out of the RefGraph's sight: a write to a
# scripted module ends the recording (the call runs eagerly).
NATIVE_SETATTRS = frozenset({torch.jit.ScriptModule.__setattr__, torch.jit.RecursiveScriptModule.__setattr__})

_CALL_IMPL = torch.nn.Module._call_impl.__code__


def original_function(script_function, caller):
    """The Python a ``torch.jit.script``ed function was compiled from (None: loaded, not
    scripted in this process)."""
    fn = getattr(script_function, "_torchdynamo_inline", None)
    return None if fn is None else as_scripted(fn)


def original_method(script_method, caller):
    """A scripted module's method runs its original Python bound to the module, when called as
    its ``forward`` by ``nn.Module``'s call machinery (``_call_impl``, so hooks and their reads
    are the program's as for any module) or from its own scripted methods (``self.helper(x)``).
    Only such a caller's ``self`` tells which Python module owns the method (its ``owner`` is
    the C++ module); any other call of a ``ScriptMethod`` stays native (None)."""
    if caller is None or not (caller.code is _CALL_IMPL or id(caller.fn) in _COPY_IDS):
        return None
    module = caller.locals[0]   # self: a cell in _call_impl (its closures use it)
    if type(module) is types.CellType:
        module = module.cell_contents
    if not _owns(module, script_method):
        return None
    fn = _python_of(module, script_method)
    return None if fn is None else types.MethodType(as_scripted(fn), module)


def _python_of(module, script_method):
    """The function ``script_method`` was compiled from: its ``__wrapped__`` (a forward, and
    every ``@torch.jit.script_method``), else the same name on the class of the module that
    was scripted (forward's ``__wrapped__`` is bound to it: ``torch.jit.script(module)``
    wraps only the forward); None if neither."""
    fn = getattr(script_method, "__wrapped__", None)
    if fn is None:
        forward = getattr(module.__dict__.get("forward"), "__wrapped__", None)
        fn = getattr(type(getattr(forward, "__self__", None)), script_method.name, None)
    fn = getattr(fn, "__func__", fn)
    return fn if type(fn) is types.FunctionType else None


def _owns(module, script_method) -> bool:
    """Is ``script_method`` the forward of ``module``'s C++ module, with no scripted hooks (which
    only TorchScript's own call would run), and not a scripted container's?"""
    c = getattr(module, "_c", None)
    return (isinstance(c, torch._C.ScriptModule) and script_method.owner == c
            and not c._get_forward_hooks() and not c._get_forward_pre_hooks()
            and not any(name in module.__dict__ for name in _CONTAINER_SHIMS))


# A scripted Sequential/ModuleList/ModuleDict iterates and indexes the *original* container
# (these shims are bound methods of it), whose submodules are not the C++ module's: its
# forward in Python would run on copies of the state TorchScript runs on.
_CONTAINER_SHIMS = ("__iter__", "__getitem__", "__len__", "__contains__")


_COPIES: dict[int, tuple] = {}   # id(original function) -> (original, its copy run as TorchScript)
_COPY_IDS: set[int] = set()


def as_scripted(fn: types.FunctionType) -> types.FunctionType:
    """The copy of ``fn`` that runs where TorchScript would (made once, so guards on it hold):
    its frames tell :func:`is_scripting` that eager would be running TorchScript there."""
    entry = _COPIES.get(id(fn))
    if entry is None:
        copy = types.FunctionType(fn.__code__, fn.__globals__, fn.__name__, fn.__defaults__, fn.__closure__)
        copy.__kwdefaults__, copy.__qualname__ = fn.__kwdefaults__, fn.__qualname__
        copy.__dict__.update(fn.__dict__)
        entry = _COPIES[id(fn)] = (fn, copy)
        _COPY_IDS.add(id(copy))
    return entry[1]


def is_scripting(monitor, args, kwargs) -> bool:
    """``torch.jit.is_scripting()`` in a recording run: True inside scripted code run as its
    Python (a frame of an :func:`as_scripted` copy, or one it called), False from a
    ``@torch.jit.ignore``d function outward, as in TorchScript."""
    frame = monitor.current
    while frame is not None:
        fn = getattr(frame, "fn", None)
        if id(fn) in _COPY_IDS:
            return True
        if fn is not None and torch._jit_internal.is_ignored_fn(fn):
            return False
        frame = getattr(frame, "back", None)   # None past the monitored frames
    return False
