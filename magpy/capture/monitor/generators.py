"""Generators, coroutines and async generators whose frames run under the monitor.

Calling a generator function inside monitored code executes its prologue up to
RETURN_GENERATOR, which hands back one of these objects wrapping the monitored frame.
Whoever iterates it -- monitored code, or native code such as ``list()`` or an asyncio
Task -- resumes that frame under the monitor, so the body is monitored exactly when the
program runs it.  The objects follow CPython's generator protocol (``send``/``throw``/
``close``, ``yield from`` delegation, PEP 479, async-generator ``asend``/``athrow``/
``aclose``) with CPython's error messages.  Their ``__class__`` is the native type, so
``isinstance(g, types.GeneratorType)`` and ``inspect.isgenerator`` hold; ``type(g)`` is ours.

One that escapes a call before it started (``return self.parameters()``, ``return (x for x
in xs)``) has run nothing but the binding of its parameters, so a native twin made by calling
its function natively with the same arguments is indistinguishable from it: see
:func:`native_call`.
"""
import sys
import types
from inspect import CO_ASYNC_GENERATOR, CO_COROUTINE, CO_ITERABLE_COROUTINE, CO_VARARGS, CO_VARKEYWORDS

from magpy.capture.monitor import bytecode
from magpy.capture.monitor.protocols import NULL, lookup_special, tp_name, type_lookup


def stop_iteration(value):
    """The StopIteration CPython raises for a generator returning ``value``."""
    return StopIteration() if value is None else StopIteration(value)


class _Suspendable:
    """A monitored frame that can be resumed: the common core of the three kinds."""

    __slots__ = ("_frame", "_monitor", "_running", "_done", "_started", "_exc_item", "_code",
                 "__weakref__")
    kind = "generator"

    def __init__(self, frame):
        self._frame = frame
        self._monitor = frame.monitor
        self._code = frame.code
        self._running = False
        self._done = False
        self._started = False
        self._exc_item = [None]

    def __repr__(self):
        return f"<{self.kind} object {self._code.co_qualname} at {id(self):#x}>"

    def __getattr__(self, name):
        # Instances have no __dict__; generator objects answer these from their code.
        if name == "__name__":
            return self._code.co_name
        if name == "__qualname__":
            return self._code.co_qualname
        raise AttributeError(f"'{type(self).__name__}' object has no attribute '{name}'")

    def _suspended(self):
        return self._started and not self._done and not self._running

    def _yieldfrom(self):
        """The sub-iterator this frame is suspended in (``yield from``/``await``), or None."""
        f = self._frame
        if not self._started or self._done or self._running:
            return None
        ins = f.info.instructions[f.pc]
        # RESUME's low two bits say where it resumes, 2 and 3 after yield from and await (3.13
        # adds a flag above them).
        if ins is not None and ins.opname == "RESUME" and ins.arg & 3 >= 2:
            return f.stack[-1]
        return None

    def _step(self, value, exc=None):
        """Resume with ``value`` sent (or ``exc`` thrown): ``(yielded?, value)``."""
        if self._running:
            raise ValueError(f"{self.kind} already executing")
        if self._done:
            if exc is not None:
                raise exc
            if self.kind == "coroutine":
                raise RuntimeError("cannot reuse already awaited coroutine")
            return False, None
        f = self._frame
        if not self._started and exc is None and value is not None:
            raise TypeError(f"can't send non-None value to a just-started {self.kind}")
        self._started = True
        # Like gen_send_ex, push the value even when throwing: a handler's stack depth counts it
        # (3.12's CLEANUP_THROW finds it below the exception).
        f.stack.append(value)
        if f.shadow_stack is not None:
            f.shadow_stack.append(None)
        self._running = True
        try:
            result = self._monitor.resume_suspended(f, self._exc_item, exc)
        except StopIteration as e:
            self._finish()
            raise RuntimeError(f"{self.kind} raised StopIteration") from e
        except StopAsyncIteration as e:
            self._finish()
            if self.kind != "async generator":
                raise
            raise RuntimeError("async generator raised StopAsyncIteration") from e
        except BaseException:
            self._finish()
            raise
        finally:
            self._running = False
        if f.yielded:
            f.yielded = False
            return True, result
        self._finish()
        return False, result

    def _finish(self):
        self._done = True

    def _send(self, value):
        yielded, result = self._step(value)
        if yielded:
            return result
        raise stop_iteration(result)

    def _throw(self, exc):
        """``_gen_throw``: delegate to a ``yield from`` sub-iterator first, as CPython does."""
        yf = self._yieldfrom()
        if yf is not None:
            if isinstance(exc, GeneratorExit):
                self._running = True
                try:
                    close_iter(yf)
                except BaseException as e:  # the close error replaces GeneratorExit
                    exc = e
                finally:
                    self._running = False
                return self._step(None, exc)
            self._running = True
            delegated = True
            try:
                if isinstance(yf, (_Suspendable, types.GeneratorType, types.CoroutineType)):
                    ret = yf.throw(exc)
                else:
                    meth = getattr(yf, "throw", None)
                    if meth is None:
                        delegated = False
                    else:
                        ret = meth(type(exc), exc, exc.__traceback__)
            except BaseException as e:
                inner = e
            else:
                inner = None
            finally:
                self._running = False
            if delegated:
                if inner is None:
                    return True, ret
                if not bytecode.THROW_LEAVES_YIELD_FROM:
                    return self._step(None, inner)
                self._leave_yield_from()
                if isinstance(inner, StopIteration):
                    return self._step(inner.value)
                return self._step(None, inner)
        return self._step(None, exc)

    def _leave_yield_from(self):
        """Pop the sub-iterator and continue after the SEND loop (CPython's jump in gen_throw)."""
        f = self._frame
        f.stack.pop()
        if f.shadow_stack is not None:
            f.shadow_stack.pop()
        send_index = f.lasti - 1
        target = f.ops[send_index][1]
        f.pc = target
        f.lasti = target - 1

    def throw(self, typ, val=None, tb=None):
        """Raise an exception at the suspension point (CPython's ``gen.throw``)."""
        yielded, result = self._throw(normalize_throw(typ, val, tb))
        if yielded:
            return result
        raise stop_iteration(result)

    def close(self):
        """Raise GeneratorExit inside the frame; it must not yield again.  Returns what the
        frame returned instead, where the version does (``bytecode.CLOSE_RETURNS_VALUE``)."""
        if self._done:
            return None
        if not self._started:
            self._done = True
            return None
        try:
            yielded, result = self._throw(GeneratorExit())
        except (GeneratorExit, StopIteration):
            return None
        if yielded:
            raise RuntimeError(f"{self.kind} ignored GeneratorExit")
        return result if bytecode.CLOSE_RETURNS_VALUE else None

    def __del__(self):
        if self._started and not self._done and not self._running:
            try:
                self.close()
            except BaseException as e:  # noqa: BLE001 - finalizers report, never raise
                sys.unraisablehook(_Unraisable(e, self))


class _Unraisable:
    def __init__(self, exc, obj):
        self.exc_type, self.exc_value, self.exc_traceback = type(exc), exc, exc.__traceback__
        self.err_msg, self.object = None, obj


class MonitoredGenerator(_Suspendable):
    """A generator whose frame runs under the monitor."""

    __slots__ = ()
    __class__ = property(lambda self: types.GeneratorType)

    def __iter__(self):
        return self

    def __next__(self):
        return self._send(None)

    def send(self, value):
        return self._send(value)

    @property
    def gi_frame(self):
        return None if self._done else self._frame

    @property
    def gi_running(self):
        return self._running

    @property
    def gi_code(self):
        return self._code

    @property
    def gi_yieldfrom(self):
        return self._yieldfrom()

    @property
    def gi_suspended(self):
        return self._suspended()


class MonitoredCoroutine(_Suspendable):
    """A coroutine whose frame runs under the monitor."""

    __slots__ = ()
    __class__ = property(lambda self: types.CoroutineType)
    kind = "coroutine"

    def send(self, value):
        return self._send(value)

    def __await__(self):
        return _CoroutineWrapper(self)

    @property
    def cr_frame(self):
        return None if self._done else self._frame

    @property
    def cr_running(self):
        return self._running

    @property
    def cr_code(self):
        return self._code

    @property
    def cr_await(self):
        return self._yieldfrom()

    @property
    def cr_suspended(self):
        return self._suspended()


class _CoroutineWrapper:
    """What ``coroutine.__await__()`` returns: an iterator driving the coroutine."""

    __slots__ = ("_coro",)

    def __init__(self, coro):
        self._coro = coro

    def __iter__(self):
        return self

    def __next__(self):
        return self._coro.send(None)

    def send(self, value):
        return self._coro.send(value)

    def throw(self, typ, val=None, tb=None):
        return self._coro.throw(typ, val, tb)

    def close(self):
        return self._coro.close()


class AsyncGenWrapped:
    """ASYNC_GEN_WRAP's marker: a value the async generator yields to its consumer."""

    __slots__ = ("value",)

    def __init__(self, value):
        self.value = value


class MonitoredAsyncGenerator(_Suspendable):
    """An async generator whose frame runs under the monitor."""

    __slots__ = ("_running_async", "_closed", "_hooks_done", "_finalizer")
    __class__ = property(lambda self: types.AsyncGeneratorType)
    kind = "async generator"

    def __init__(self, frame):
        super().__init__(frame)
        self._running_async = False
        self._closed = False
        self._hooks_done = False
        self._finalizer = None

    def _init_hooks(self):
        if self._hooks_done:
            return
        self._hooks_done = True
        hooks = sys.get_asyncgen_hooks()
        self._finalizer = hooks.finalizer
        if hooks.firstiter is not None:
            hooks.firstiter(self)

    def __aiter__(self):
        return self

    def __anext__(self):
        self._init_hooks()
        return _ASend(self, None)

    def asend(self, value):
        self._init_hooks()
        return _ASend(self, value)

    def athrow(self, typ, val=None, tb=None):
        self._init_hooks()
        return _AThrow(self, (typ, val, tb))

    def aclose(self):
        self._init_hooks()
        return _AThrow(self, None)

    def _unwrap(self, step):
        """Run ``step``; a wrapped yield ends the awaitable with StopIteration(value)."""
        try:
            yielded, value = step()
        except (StopAsyncIteration, GeneratorExit):
            self._closed = True
            self._running_async = False
            raise
        except BaseException:
            self._running_async = False
            raise
        if not yielded:
            self._closed = True
            self._running_async = False
            raise StopAsyncIteration()
        if type(value) is AsyncGenWrapped:
            self._running_async = False
            raise stop_iteration(value.value)
        return value

    def __del__(self):
        if self._started and not self._done and self._finalizer is not None:
            self._finalizer(self)
        else:
            super().__del__()

    @property
    def ag_frame(self):
        return None if self._done else self._frame

    @property
    def ag_running(self):
        return self._running_async

    @property
    def ag_code(self):
        return self._code

    @property
    def ag_await(self):
        return self._yieldfrom()

    @property
    def ag_suspended(self):
        return self._suspended()


_INIT, _ITER, _CLOSED = 0, 1, 2


class _AwaitableStep:
    __slots__ = ("_gen", "_state", "_arg")

    def __init__(self, gen, arg):
        self._gen, self._state, self._arg = gen, _INIT, arg

    def __await__(self):
        return self

    def __iter__(self):
        return self

    def __next__(self):
        return self.send(None)

    def close(self):
        self._state = _CLOSED


class _ASend(_AwaitableStep):
    """The awaitable of ``__anext__()``/``asend()``."""

    __slots__ = ()

    def send(self, value):
        gen = self._gen
        if self._state == _CLOSED:
            raise RuntimeError("cannot reuse already awaited __anext__()/asend()")
        if self._state == _INIT:
            if gen._running_async:
                raise RuntimeError("anext(): asynchronous generator is already running")
            if value is None:
                value = self._arg
            self._state = _ITER
        gen._running_async = True
        try:
            return gen._unwrap(lambda: gen._step(value))
        except BaseException:
            self._state = _CLOSED
            raise

    def throw(self, typ, val=None, tb=None):
        if self._state == _CLOSED:
            raise RuntimeError("cannot reuse already awaited __anext__()/asend()")
        gen = self._gen
        try:
            return gen._unwrap(lambda: gen._throw(normalize_throw(typ, val, tb)))
        except BaseException:
            self._state = _CLOSED
            raise


class _AThrow(_AwaitableStep):
    """The awaitable of ``athrow()`` (``_arg`` = its arguments) or ``aclose()`` (``None``)."""

    __slots__ = ()

    def send(self, value):
        gen = self._gen
        closing = self._arg is None
        if self._state == _CLOSED:
            raise RuntimeError("cannot reuse already awaited aclose()/athrow()")
        if gen._done:
            self._state = _CLOSED
            raise StopIteration()
        if self._state == _INIT:
            if gen._running_async:
                self._state = _CLOSED
                what = "aclose" if closing else "athrow"
                raise RuntimeError(f"{what}(): asynchronous generator is already running")
            if gen._closed:
                self._state = _CLOSED
                raise StopAsyncIteration()
            if value is not None:
                raise RuntimeError("can't send non-None value to a just-started coroutine")
            self._state = _ITER
            gen._running_async = True
            if closing:
                gen._closed = True
                return self._closing(lambda: gen._throw(GeneratorExit()))
            return self._throwing(lambda: gen._throw(normalize_throw(*self._arg)))
        if closing:
            return self._closing(lambda: gen._step(value))
        return self._throwing(lambda: gen._step(value))

    def _throwing(self, step):
        try:
            return self._gen._unwrap(step)
        except BaseException:
            self._state = _CLOSED
            raise

    def _closing(self, step):
        gen = self._gen
        try:
            yielded, value = step()
            if not yielded:
                raise StopAsyncIteration()
        except (StopAsyncIteration, GeneratorExit):
            gen._running_async = False
            self._state = _CLOSED
            failed = True
        except BaseException:
            gen._running_async = False
            self._state = _CLOSED
            raise
        else:
            failed = False
        if failed:
            raise StopIteration()
        if type(value) is AsyncGenWrapped:
            gen._running_async = False
            self._state = _CLOSED
            raise RuntimeError("async generator ignored GeneratorExit")
        return value

    def throw(self, typ, val=None, tb=None):
        if self._state == _CLOSED:
            raise RuntimeError("cannot reuse already awaited aclose()/athrow()")
        exc = normalize_throw(typ, val, tb)

        def step():
            return self._gen._throw(exc)
        return self._closing(step) if self._arg is None else self._throwing(step)


def normalize_throw(typ, val=None, tb=None):
    """The exception instance ``gen.throw(typ, val, tb)`` raises, with CPython's checks."""
    if tb is not None and not isinstance(tb, types.TracebackType):
        raise TypeError("throw() third argument must be a traceback object")
    if isinstance(typ, type) and issubclass(typ, BaseException):
        if isinstance(val, typ):
            exc = val
        elif val is None:
            exc = typ()
        elif isinstance(val, tuple):
            exc = typ(*val)
        else:
            exc = typ(val)
    elif isinstance(typ, BaseException):
        if val is not None:
            raise TypeError("instance exception may not have a separate value")
        exc = typ
    else:
        raise TypeError("exceptions must be classes or instances deriving from "
                        f"BaseException, not {tp_name(type(typ))}")
    if tb is not None:
        exc = exc.with_traceback(tb)
    return exc


def close_iter(it):
    """``gen_close_iter``: close a ``yield from`` sub-iterator."""
    if isinstance(it, (_Suspendable, types.GeneratorType, types.CoroutineType)):
        it.close()
        return
    meth = getattr(it, "close", None)
    if meth is not None:
        meth()


# Present them under CPython's type names (type(g).__name__, reprs); their __class__ is the
# native type, so isinstance(g, types.GeneratorType) -- hence inspect.isgenerator -- holds.
for _cls in (MonitoredGenerator, MonitoredCoroutine, MonitoredAsyncGenerator):
    _cls.__name__ = _cls.__qualname__ = vars(_cls)["__class__"].fget(None).__name__

_KINDS = ((CO_COROUTINE, MonitoredCoroutine), (CO_ASYNC_GENERATOR, MonitoredAsyncGenerator))


def make(frame):
    """RETURN_GENERATOR: the generator-like object owning ``frame``."""
    flags = frame.code.co_flags
    for flag, cls in _KINDS:
        if flags & flag:
            return cls(frame)
    return MonitoredGenerator(frame)


def is_monitored(x) -> bool:
    """Is ``x`` a generator, coroutine or async generator whose frame the monitor runs?"""
    return issubclass(type(x), _Suspendable)


def native_call(gen):
    """``(fn, args, kwargs)`` such that ``fn(*args, **kwargs)``, called natively, makes a native
    twin of the monitored ``gen``; None once ``gen`` has started (or was closed): a frame in
    the middle of its code cannot be recreated natively.

    Before its first ``send`` a generator's frame holds its bound parameters and nothing else
    (the prologue up to RETURN_GENERATOR only binds them and makes their cells), so calling
    its function again with those values gives an equal generator.
    """
    f = gen._frame
    if gen._started or gen._done or f.fn is None:
        return None
    code = f.code
    values = [_parameter(code, f.locals, i) for i in range(f.info.nparams)]
    n, nkw = code.co_argcount, code.co_kwonlyargcount
    args = values[:n]
    kwargs = dict(zip(code.co_varnames[n:n + nkw], values[n:n + nkw]))
    rest = values[n + nkw:]
    if code.co_flags & CO_VARARGS:
        args += rest.pop(0)
    if code.co_flags & CO_VARKEYWORDS:
        kwargs.update(rest.pop(0))
    return f.fn, tuple(args), kwargs


def _parameter(code, local, i):
    # A parameter a closure captures sits in its cell (MAKE_CELL ran before RETURN_GENERATOR).
    value = local[i]
    if code.co_varnames[i] in code.co_cellvars and type(value) is types.CellType:
        return value.cell_contents
    return value


def is_coroutine(x):
    """PyCoro_CheckExact, or a generator marked by ``types.coroutine``."""
    tp = type(x)
    if tp is types.CoroutineType or tp is MonitoredCoroutine:
        return True
    if tp is types.GeneratorType:
        return bool(x.gi_code.co_flags & CO_ITERABLE_COROUTINE)
    if tp is MonitoredGenerator:
        return bool(x._code.co_flags & CO_ITERABLE_COROUTINE)
    return False


def is_generator(x):
    return type(x) is types.GeneratorType or type(x) is MonitoredGenerator


def is_iterator(x):
    nxt = type_lookup(type(x), "__next__")
    return nxt is not NULL and nxt is not None


def send(monitor, receiver, value):
    """SEND: ``(True, return value)`` when the sub-iterator finished, else ``(False, yielded)``."""
    try:
        if value is None and type(receiver) is not types.CoroutineType and (
                type(receiver) is not MonitoredCoroutine and is_iterator(receiver)):
            result = monitor.call_next(receiver)
        else:
            result = monitor.call(monitor.load_attr(receiver, "send"), (value,), None, None)
    except StopIteration as e:
        return True, e.value
    return False, result


def _awaitable_iter(monitor, obj):
    """``_PyCoro_GetAwaitableIter``; None when ``obj`` has no ``__await__`` at all."""
    if is_coroutine(obj):
        return obj
    if type_lookup(type(obj), "__await__") is NULL:
        return None
    res = monitor.call(lookup_special(obj, "__await__"), (), None, None)
    if is_coroutine(res):
        raise TypeError("__await__() returned a coroutine")
    if not is_iterator(res):
        raise TypeError(f"__await__() returned non-iterator of type '{tp_name(type(res))}'")
    return res


def get_awaitable(monitor, obj, where):
    """GET_AWAITABLE."""
    it = _awaitable_iter(monitor, obj)
    if it is None:
        name = tp_name(type(obj))
        if where in (1, 2):
            method = "__aenter__" if where == 1 else "__aexit__"
            raise TypeError(f"'async with' received an object from {method} that does not "
                            f"implement __await__: {name}")
        raise TypeError(f"object {name} can't be used in 'await' expression")
    if is_coroutine(it) and _awaiting(it) is not None:
        raise RuntimeError("coroutine is being awaited already")
    return it


def _awaiting(coro):
    """What a coroutine (or ``types.coroutine`` generator) is suspended awaiting."""
    if isinstance(coro, _Suspendable):
        return coro._yieldfrom()
    return coro.cr_await if type(coro) is types.CoroutineType else coro.gi_yieldfrom


def get_aiter(monitor, obj):
    """GET_AITER."""
    if type_lookup(type(obj), "__aiter__") is NULL:
        raise TypeError(f"'async for' requires an object with __aiter__ method, got "
                        f"{tp_name(type(obj))}")
    it = monitor.call(lookup_special(obj, "__aiter__"), (), None, None)
    if type_lookup(type(it), "__anext__") is NULL:
        raise TypeError("'async for' received an object from __aiter__ that does not "
                        f"implement __anext__: {tp_name(type(it))}")
    return it


def get_anext(monitor, aiter):
    """GET_ANEXT."""
    if type(aiter) is MonitoredAsyncGenerator or type(aiter) is types.AsyncGeneratorType:
        return aiter.__anext__()
    if type_lookup(type(aiter), "__anext__") is NULL:
        raise TypeError("'async for' requires an iterator with __anext__ method, got "
                        f"{tp_name(type(aiter))}")
    nxt = monitor.call(lookup_special(aiter, "__anext__"), (), None, None)
    try:
        it = _awaitable_iter(monitor, nxt)
        if it is None:
            raise TypeError(f"object {tp_name(type(nxt))} can't be used in 'await' expression")
    except BaseException as e:
        raise TypeError("'async for' received an invalid object from __anext__: "
                        f"{tp_name(type(nxt))}") from e
    return it
