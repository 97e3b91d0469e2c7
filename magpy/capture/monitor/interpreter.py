"""The monitor: a concrete interpreter for CPython bytecode.

``Monitor.execute`` runs a :class:`~magpy.capture.monitor.frame.Frame` instruction by instruction;
each instruction is carried out by its handler with CPython's own operation on the real
values.  Calls go through ``Monitor.call``, the call policy: Python functions are *entered*
(run as new monitored frames), native callees run natively, intrinsics handle builtins
that look at their caller's frame or call back into Python.  Attribute reads and iteration,
which may enter Python code too, are the monitor's protocol steps (``protocol_steps``).
"""
import functools
import sys
import types
from inspect import CO_VARARGS, CO_VARKEYWORDS

from magpy.capture.monitor import bytecode, tracebacks
from magpy.capture.monitor.frame import Frame, code_info, unsupported_python_message
from magpy.capture.monitor.intrinsics import default_policy
from magpy.capture.monitor.observer import Entries, Items, observed_ops
from magpy.capture.monitor.policy import CallPolicy
from magpy.capture.monitor.protocol_steps import ProtocolSteps
from magpy.capture.monitor.protocols import NULL, lookup_special, py_method, set_context, tp_name, type_lookup
from magpy.capture.process_state import RECURSION_HEADROOM

FunctionType = types.FunctionType
_TYPE_CALL = type.__dict__["__call__"]
_default_policy = []


class UnsupportedPythonError(RuntimeError):
    """The running interpreter is not one whose bytecode the monitor executes."""


class Monitor(ProtocolSteps):
    """Executes functions under monitoring and reports execution states to observers."""

    def __init__(self, observers=(), policy: CallPolicy | None = None):
        self.observers = list(observers)
        self.policy = policy if policy is not None else shared_default_policy()
        self.current = None          # the innermost executing monitored frame
        self.exc_stack = [[None]]    # CPython's chain of handled-exception items
        self.propagating = None      # an exception already chained, now unwinding
        self.rethrown = None         # re-raised where it was caught: no new traceback entry
        self.ret_shadow = None       # shadow of the value the last entered call returned
        self.host_frame = None       # the real frame that called run()
        self.host_exc = None
        self.in_intrinsic = 0        # intrinsics under way (frames they enter are callbacks)
        self.sandbox = None          # magpy.graphs.controlflow.sandbox.Sandbox of a fork under way
        self.on_fault = None         # takes an observer's exception (magpy's, not the program's)
        self._depth = 0

    # ------------------------------------------------------------------ entry points
    def run(self, fn, /, *args, **kwargs):
        """Run ``fn(*args, **kwargs)`` under the monitor and return its result."""
        return self._run(sys._getframe(1), fn, args, kwargs, None)

    def run_shadowed(self, fn, args: tuple, kwargs: dict, shadows):
        """``run``, with shadows for the arguments (``(positional, keywords)``, or None)."""
        return self._run(sys._getframe(1), fn, args, kwargs, shadows)

    def _run(self, host, fn, args, kwargs, shadows):
        with self._session(host):
            return self.call(fn, args, kwargs or None, shadows)

    def resume(self, frames, throw=None):
        """Continue the frames of a suspended call chain, innermost first.

        ``frames[0]`` resumes at its ``pc`` (with ``throw``: handles that exception at its
        ``lasti`` first); each later frame is waiting on the call at its ``lasti`` and
        receives the previous frame's result on its stack.  Exceptions unwind through the
        chain as they would have natively.  Returns the outermost result.
        """
        with self._session(sys._getframe(1)):
            result, exc = NULL, throw
            host = self.current if self.current is not None else self.host_frame
            # The frames waiting on a frame's result are its callers, as they were natively
            # (frame introspection, and a resume point taken in it takes them too).
            for inner, caller in zip(frames, [*frames[1:], host]):
                inner.back = caller
            for i, f in enumerate(frames):
                f.monitor = self
                f.ops = None  # this monitor's dispatch table (observed or not)
                if self.observers and f.shadow_stack is None:
                    f.shadow_locals = [None] * f.info.nlocalsplus
                    f.shadow_stack = [None] * len(f.stack)
                if result is not NULL:
                    f.stack.append(result)
                    if f.shadow_stack is not None:
                        f.shadow_stack.append(self.ret_shadow)
                saved, self.current = self.current, f.back if i + 1 < len(frames) else self.current
                try:
                    result = self.execute(f, exc)
                    exc = None
                    self.ret_shadow = f.ret_shadow   # (for its caller, as enter() hands it on)
                except BaseException as e:
                    result, exc = NULL, e
                    self.ret_shadow = None
                    self.propagating = e
                finally:
                    self.current = saved
            if exc is not None:
                raise exc
            return result

    def _session(self, host_frame):
        return _Session(self, host_frame)

    # ------------------------------------------------------------------ the loop
    def execute(self, f, throw=None):
        """Run frame ``f`` from ``f.pc`` until it returns or yields; return that value.

        With ``throw``, the frame first handles that exception at ``f.lasti`` (as a
        generator does when an exception is thrown into it).
        """
        ops = f.ops
        if ops is None:
            ops = f.ops = self.ops_for(f.info)
        prev = self.current
        f.back = prev if prev is not None else self.host_frame
        self.current = f
        exc = throw
        try:
            while True:
                if exc is not None:
                    self._unwind(f, exc)
                    exc = None
                try:
                    while True:
                        i = f.pc
                        h, arg, f.pc = ops[i]
                        f.lasti = i
                        if h(f, arg):
                            return f.retval
                except BaseException as e:  # noqa: BLE001 - the program's exception
                    exc = e
        finally:
            self.current = prev

    def ops_for(self, info):
        """The dispatch table frames of ``info`` run with now (observed, sandboxed)."""
        ops = info.ops
        if self.observers:
            if info.observed_ops is None:
                info.observed_ops = observed_ops(info)
            ops = info.observed_ops
        return ops if self.sandbox is None else self.sandbox.ops(info, ops)

    def _unwind(self, f, exc):
        """Find ``exc``'s handler in ``f``'s exception table, or let it propagate."""
        if exc is self.propagating:
            self.propagating = None
        elif exc.__context__ is self.host_exc:
            # Raised by a native operation: chain it to the exception the *program* is
            # handling, which the host interpreter does not know about.
            handled = self.handled_exception()
            if handled is not self.host_exc:
                set_context(exc, handled)
        # The traceback the program sees: its own frames, as if the monitor were not there.
        tb = tracebacks.program_entries(exc.__traceback__)
        if exc is self.rethrown:
            self.rethrown = None
        else:
            tb = tracebacks.with_entry(tb, f.code, f.line)
        exc.__traceback__ = tb
        try:
            for ob in self.observers:
                ob.on_exception(f, exc)
        except Exception as e:  # noqa: BLE001 - magpy's bookkeeping failed, not the program
            self.observer_failed(e)
        handler = f.info.handlers[f.lasti]
        if handler is None:
            self.propagating = exc
            raise exc
        target, depth, push_lasti = handler
        s = f.stack
        del s[depth:]
        if push_lasti:
            s.append(f.lasti)
        s.append(exc)
        ss = f.shadow_stack
        if ss is not None:
            del ss[depth:]
            ss.extend([None] * (len(s) - depth))
        f.pc = target

    def handled_exception(self):
        """What ``sys.exception()`` returns inside the monitored program."""
        for item in reversed(self.exc_stack):
            if item[0] is not None:
                return item[0]
        return None

    def reraise(self, exc, same_frame: bool = False):
        """Raise ``exc`` without chaining it again.  ``same_frame``: re-raised in the frame that
        caught it (RERAISE, bare ``raise``), which natively adds no traceback entry."""
        self.propagating = exc
        if same_frame:
            self.rethrown = exc
        raise exc

    def resume_suspended(self, f, exc_item, throw):
        """Resume a generator-like frame with its own handled-exception item."""
        self.exc_stack.append(exc_item)
        try:
            if throw is not None:
                self.propagating = throw
            return self.execute(f, throw)
        finally:
            self.exc_stack.pop()

    def run_code(self, code, globals, ns, fn=None):
        """Execute a code object with namespace ``ns`` (class bodies, exec/eval)."""
        f = Frame(code, globals, None, fn, ns, monitor=self)
        if self.observers:
            f.shadow_locals = [None] * f.info.nlocalsplus
            f.shadow_stack = []
        return self.execute(f)

    # ------------------------------------------------------------------ calls
    def call(self, callee, args, kwargs, shadows=None):
        """Call ``callee(*args, **kwargs)`` from monitored code, following the call policy.

        ``shadows`` is ``(positional shadows, keyword shadows)`` for entered frames.
        """
        t = type(callee)
        if self.policy.reroutes:
            choose = self.policy.reroutes.get(id(callee))
            target = choose(self.current, args, kwargs) if choose is not None else None
            if target is not None:
                return self.enter(target, args, kwargs, shadows)
        intrinsic = self.policy.intrinsics.get(id(callee))
        if intrinsic is not None:
            return self._intrinsic(callee, intrinsic, args, kwargs)
        if t is FunctionType:
            target = self.policy.aliases.get(id(callee))
            if target is not None:
                return self.call(target, args, kwargs, shadows)
            if self.policy.runs_natively(callee):
                return self.call_native(callee, args, kwargs)
            return self.enter(callee, args, kwargs, shadows)
        dispatch = _DISPATCH.get(t)
        if dispatch is not None:
            return dispatch(self, callee, args, kwargs, shadows)
        substitute = self.policy.substitutes.get(t)
        if substitute is not None:
            target = substitute(callee, self.current)
            if target is not None:
                return self.call(target, args, kwargs, shadows)
        if isinstance(callee, type):
            return self._call_class(callee, args, kwargs, shadows)
        fn = py_method(t, "__call__")
        if fn is not None and not self.policy.runs_natively(fn):
            return self.enter(fn, (callee,) + args, kwargs, _shift(shadows))
        return self.call_native(callee, args, kwargs)

    def call_native(self, callee, args, kwargs):
        """Run a callee natively (its body is not monitored) and report it."""
        if self.sandbox is not None:
            self.sandbox.check_call(callee, args)
        result = callee(*args, **kwargs) if kwargs else callee(*args)
        if self.sandbox is not None:
            self.sandbox.returned(callee, args, result)
        self.ret_shadow = None
        if self.observers:
            self._called(callee, args, kwargs, result, False)
        return result

    def _called(self, callee, args, kwargs, result, entered: bool) -> None:
        """Report a finished call to the observers."""
        try:
            for ob in self.observers:
                ob.on_call(self.current, callee, args, kwargs, result, entered)
        except Exception as e:  # noqa: BLE001 - magpy's bookkeeping failed, not the program
            self.observer_failed(e)

    def _unwrapped(self, callee, reads) -> None:
        """Report what the monitor read of ``callee`` to call it to the observers."""
        try:
            for ob in self.observers:
                ob.on_unwrap(self.current, callee, reads)
        except Exception as e:  # noqa: BLE001 - magpy's bookkeeping failed, not the program
            self.observer_failed(e)

    def observer_failed(self, exc: Exception) -> None:
        """An observer (magpy's bookkeeping) raised ``exc`` after the program's operation
        completed: not the program's exception.  The recording's ``on_fault`` takes it and the
        program runs on; a monitor without one lets it propagate."""
        if self.on_fault is None:
            raise exc
        self.on_fault(exc)

    def _intrinsic(self, callee, handler, args, kwargs):
        if self.sandbox is not None:
            self.sandbox.check_call(callee, args)
        self.in_intrinsic += 1
        try:
            result = handler(self, args, kwargs)
        finally:
            self.in_intrinsic -= 1
        if self.sandbox is not None:
            self.sandbox.returned(callee, args, result)
        self.ret_shadow = None
        if self.observers:
            self._called(callee, args, kwargs, result, False)
        return result

    def enter(self, fn, args, kwargs, shadows=None):
        """Call a Python function as a new monitored frame."""
        code = fn.__code__
        info = code_info(code)
        if kwargs is None and info.simple_args and len(args) == info.argcount:
            local = list(args)
        else:
            binder = info.binder(fn)
            local = list(binder(*args, **kwargs) if kwargs else binder(*args))
        local.extend([NULL] * (info.nlocalsplus - len(local)))
        f = Frame(code, fn.__globals__, fn.__builtins__, fn, None, local, monitor=self)
        if not self.observers:
            return self.execute(f)
        f.shadow_locals = _param_shadows(info, code, shadows)
        f.shadow_stack = []
        try:
            for ob in self.observers:
                ob.on_enter(f)
        except Exception as e:  # noqa: BLE001 - magpy's bookkeeping failed, not the program
            self.observer_failed(e)
        result = self.execute(f)
        self._called(fn, args, kwargs, result, True)
        self.ret_shadow = f.ret_shadow
        return result

    def _call_method(self, m, args, kwargs, shadows):
        return self.call(m.__func__, (m.__self__,) + args, kwargs, _shift(shadows))

    def _call_partial(self, p, args, kwargs, shadows):
        if self.observers:
            self._unwrapped(p, (("func", p.func), ("args", p.args), ("keywords", p.keywords)))
        kw = {**p.keywords, **kwargs} if kwargs else (p.keywords or None)
        return self.call(p.func, p.args + args, kw, _shift(shadows, len(p.args)))

    def _call_builtin(self, b, args, kwargs, shadows):
        owner = b.__self__
        if owner is not None and type(owner) is not types.ModuleType:
            reroute = self.policy.method_reroutes.get(b.__name__)
            if reroute is not None and isinstance(owner, reroute[0]):
                target = reroute[1](self.current, (owner,) + args, kwargs)
                if target is not None:
                    return self.enter(target, (owner,) + args, kwargs, _shift(shadows))
            entry = self.policy.method_intrinsics.get(b.__name__)
            if entry is not None and isinstance(owner, entry[0]):
                return self._intrinsic(b, entry[1], (owner,) + args, kwargs)
        return self.call_native(b, args, kwargs)

    def _call_class(self, cls, args, kwargs, shadows):
        """``type.__call__``: ``__new__`` then ``__init__``, entering the Python ones."""
        meta = type(cls)
        if meta is not type:
            mcall = py_method(meta, "__call__")
            if mcall is not None and not self.policy.runs_natively(mcall):
                return self.enter(mcall, (cls,) + args, kwargs)
            if type_lookup(meta, "__call__") is not _TYPE_CALL:
                return self.call_native(cls, args, kwargs)
        if cls is type:
            return self.call_native(cls, args, kwargs)
        raw_new = type_lookup(cls, "__new__")
        new = raw_new.__func__ if type(raw_new) is staticmethod else raw_new
        py_new = type(new) is FunctionType
        init = py_method(cls, "__init__")
        if not py_new and init is None:
            return self.call_native(cls, args, kwargs)
        if py_new:
            obj = self.call(new, (cls,) + args, kwargs)
        else:
            obj = self.call_native(cls.__new__, (cls,) + args, kwargs)
        tp = type(obj)
        if cls not in tp.__mro__:
            return obj
        init = py_method(tp, "__init__")
        if init is not None:
            res = self.call(init, (obj,) + args, kwargs)
        else:
            res = self.call_native(lookup_special(obj, "__init__"), args, kwargs)
        if res is not None:
            raise TypeError(f"__init__() should return None, not '{tp_name(type(res))}'")
        return obj


def shared_default_policy() -> CallPolicy:
    """The default call policy, built on first use (once all monitor modules are loaded)."""
    if not _default_policy:
        _default_policy.append(default_policy())
    return _default_policy[0]


class _Session:
    """The outermost run: record the host frame/exception, give recursion headroom (a
    process-wide change, held while any thread's session runs: ``magpy.capture.process_state``)."""

    __slots__ = ("monitor", "host_frame", "headroom")

    def __init__(self, monitor, host_frame):
        self.monitor, self.host_frame, self.headroom = monitor, host_frame, None

    def __enter__(self):
        if not bytecode.SUPPORTED:
            raise UnsupportedPythonError(unsupported_python_message())
        m = self.monitor
        m._depth += 1
        if m._depth == 1:
            m.host_frame = self.host_frame
            m.host_exc = sys.exception()
            m.exc_stack = [[m.host_exc]]
            self.headroom = RECURSION_HEADROOM.__enter__()
        return self

    def __exit__(self, *exc):
        self.monitor._depth -= 1
        if self.headroom is not None:
            self.headroom.__exit__(*exc)
        return False


def _shift(shadows, n: int = 1):
    """Shadows after prepending ``n`` arguments with no shadow (a bound ``self``, a partial's
    own arguments)."""
    if shadows is None:
        return None
    return ((None,) * n + shadows[0], shadows[1])


def _param_shadows(info, code, shadows):
    sl = [None] * info.nlocalsplus
    if shadows is None:
        return sl
    positional, keywords = shadows
    n = min(len(positional), code.co_argcount)
    sl[:n] = positional[:n]
    nkw = code.co_kwonlyargcount
    if code.co_flags & CO_VARARGS and any(sh is not None for sh in positional[n:]):
        sl[code.co_argcount + nkw] = Items(positional[n:])
    if keywords:
        names = code.co_varnames[code.co_posonlyargcount:code.co_argcount + nkw]
        rest = {}
        for name, sh in keywords.items():
            if name in names:
                sl[code.co_varnames.index(name)] = sh
            elif sh is not None:
                rest[name] = sh
        if rest and code.co_flags & CO_VARKEYWORDS:
            sl[code.co_argcount + nkw + bool(code.co_flags & CO_VARARGS)] = Entries(rest)
    return sl


_DISPATCH = {
    types.MethodType: Monitor._call_method,
    functools.partial: Monitor._call_partial,
    type: Monitor._call_class,
    types.BuiltinFunctionType: Monitor._call_builtin,
}
