"""Decoded code objects and monitored frames.

A :class:`CodeInfo` is built once per code object: the dispatch table and the instructions as
observers see them (``bytecode.decode``), indexed by code-unit (``offset // 2``), the
exception table flattened to one entry per instruction, and the local-slot layout.  A
:class:`Frame` is the monitor's own frame: it owns the fast locals, the value stack and,
when observers are attached, a *shadow* slot beside each of them.  Frames also answer the
frame-introspection attributes user code reads through ``sys._getframe()`` (``f_back``,
``f_code``, ``f_locals``, ``f_lineno`` ...).
"""
import collections.abc
import dis
import sys
import types
import weakref
from inspect import CO_OPTIMIZED, CO_VARARGS, CO_VARKEYWORDS

from magpy.capture.monitor import bytecode
from magpy.capture.monitor.protocols import NULL, cell_value


class CodeInfo:
    """Everything the monitor derives from one code object, computed once."""

    __slots__ = ("code", "instructions", "ops", "observed_ops", "handlers", "localsplus",
                 "nlocalsplus", "nlocals_and_cells", "argcount", "nparams", "simple_args",
                 "binder_code", "lines", "__weakref__")

    def __init__(self, code: types.CodeType):
        self.code = code
        cellvars = [c for c in code.co_cellvars if c not in code.co_varnames]
        self.localsplus = code.co_varnames + tuple(cellvars) + code.co_freevars
        self.nlocalsplus = len(self.localsplus)
        # Slots below this index are locals or cells (unbound -> UnboundLocalError); above, free vars.
        self.nlocals_and_cells = len(code.co_varnames) + len(cellvars)
        flags = code.co_flags
        self.argcount = code.co_argcount
        self.nparams = (code.co_argcount + code.co_kwonlyargcount
                        + bool(flags & CO_VARARGS) + bool(flags & CO_VARKEYWORDS))
        self.simple_args = self.nparams == code.co_argcount
        self.binder_code = None
        self.lines = None
        n = len(code.co_code) // 2
        self.ops, self.instructions = bytecode.decode(code, list(dis.get_instructions(code)), n)
        self.observed_ops = None
        handlers = [None] * n
        for entry in dis._parse_exception_table(code):
            target = (entry.target // 2, entry.depth, entry.lasti)
            for i in range(entry.start // 2, entry.end // 2):
                handlers[i] = target
        self.handlers = handlers

    def lineno(self, index: int):
        """Source line of the instruction at code-unit ``index`` (None if it has none)."""
        if self.lines is None:
            lines = [None] * len(self.instructions)
            for start, end, line in self.code.co_lines():
                for i in range(start // 2, end // 2):
                    lines[i] = line
            self.lines = lines
        if 0 <= index < len(self.lines):
            return self.lines[index]
        return self.code.co_firstlineno

    def line(self, index: int) -> int:
        """The line magpy reports for the instruction at ``index`` (a graph break, a failed
        check, a traceback entry): its own, or for one that has none (3.11's exception
        bookkeeping: ``PUSH_EXC_INFO``, the cleanup after an ``except``), the nearest line
        before it.  Never None: reports format it, ``linecache`` and ``warnings`` take it."""
        lineno = self.lineno(index)
        while lineno is None and index > 0:
            index -= 1
            lineno = self.lineno(index)
        return self.code.co_firstlineno if lineno is None else lineno

    def binder(self, fn: types.FunctionType) -> types.FunctionType:
        """A function with ``fn``'s signature whose body returns its bound parameters.

        Calling it natively makes CPython itself bind arguments to parameters, so defaults,
        keyword-only parameters, ``*args``/``**kwargs`` and every binding error message are
        exactly CPython's.
        """
        if self.binder_code is None:
            self.binder_code = bytecode.binder_code(self.code, self.nparams)
        b = types.FunctionType(self.binder_code, _BINDER_GLOBALS, fn.__name__, fn.__defaults__)
        b.__kwdefaults__ = fn.__kwdefaults__
        b.__qualname__ = fn.__qualname__
        return b


_BINDER_GLOBALS = {"__builtins__": __builtins__}
_infos = {}


def code_info(code: types.CodeType) -> CodeInfo:
    """The (cached) :class:`CodeInfo` of ``code``."""
    entry = _infos.get(id(code))
    if entry is not None and entry[0]() is code:
        return entry[1]
    info = CodeInfo(code)
    key = id(code)
    _infos[key] = (weakref.ref(code, lambda _r, key=key, infos=_infos: infos.pop(key, None)), info)
    return info


class Frame:
    """A monitored frame: code, fast locals, value stack and their shadows.

    ``pc`` is the code-unit index of the next instruction, ``lasti`` of the one executing.
    ``ns`` is the namespace mapping of class bodies and exec'd code (``None`` in functions).
    ``shadow_locals``/``shadow_stack`` exist only while observers are attached; observers
    set them to hang provenance on values independently of ``id()``.
    """

    __slots__ = ("code", "info", "ops", "globals", "builtins", "locals", "stack",
                 "shadow_locals", "shadow_stack", "pc", "lasti", "back", "fn", "ns",
                 "kwnames", "retval", "yielded", "ret_shadow", "monitor", "locals_dict",
                 "exc_item", "ins_base", "ins_inputs", "ins_shadows", "__weakref__")

    def __init__(self, code, globals, builtins=None, fn=None, ns=None, locals=None,
                 stack=None, offset=0, monitor=None):
        info = code_info(code)
        self.code = code
        self.info = info
        self.ops = None
        self.globals = globals
        self.builtins = builtins if builtins is not None else _builtins_of(globals)
        self.fn = fn
        self.ns = ns
        if locals is None:
            locals = [NULL] * info.nlocalsplus
        self.locals = locals
        self.stack = stack if stack is not None else []
        self.shadow_locals = None
        self.shadow_stack = None
        self.pc = offset // 2
        self.lasti = self.pc
        self.back = None
        self.kwnames = ()
        self.retval = None
        self.yielded = False
        self.ret_shadow = None
        self.monitor = monitor
        # While observed: the stack depth below the executing instruction's inputs, and those
        # inputs (the frame's state before the instruction, to resume it from there).
        self.ins_base = 0
        self.ins_inputs = ()
        self.ins_shadows = ()
        self.locals_dict = None
        self.exc_item = None

    # -- frame introspection, as CPython's frame objects answer it ------------------
    @property
    def __class__(self):
        # isinstance(frame, types.FrameType) -- and so inspect.isframe/stack -- hold.
        return types.FrameType

    @property
    def f_code(self):
        return self.code

    @property
    def f_globals(self):
        return self.globals

    @property
    def f_builtins(self):
        return self.builtins

    @property
    def f_back(self):
        return self.back

    @property
    def f_lasti(self):
        return self.lasti * 2

    @property
    def f_lineno(self):
        return self.info.lineno(self.lasti)   # (None where the instruction has no line, as in CPython)

    @property
    def line(self) -> int:
        """The line magpy reports for this frame (``CodeInfo.line``)."""
        return self.info.line(self.lasti)

    @property
    def f_trace(self):
        return None

    @property
    def f_locals(self):
        if self.ns is None and bytecode.LOCALS_PROXY:
            return FrameLocals(self)
        return self.locals_snapshot()

    def clear(self):
        """Frames of running code cannot be cleared (as in CPython)."""
        raise RuntimeError("cannot clear an executing frame")

    def locals_snapshot(self):
        """``locals()`` of this frame: the namespace, or a dict of the fast locals.

        Like CPython up to 3.12, a function frame returns the same dict object each time,
        refreshed; from 3.13 (PEP 667) a new snapshot, with the names written through
        ``f_locals`` that are not locals.
        """
        if self.ns is not None:
            return self.ns
        if bytecode.LOCALS_PROXY:
            d = {name: v for name, v in self.fast_locals() if v is not NULL}
            d.update(self.locals_dict or {})
            return d
        d = self.locals_dict
        if d is None:
            d = self.locals_dict = {}
        for name, v in self.fast_locals():
            if v is NULL:
                d.pop(name, None)
            else:
                d[name] = v
        return d

    def fast_locals(self):
        """``(name, value)`` of each fast local ``locals()`` shows (NULL: unbound), with cells read."""
        info = self.info
        # Free variables count only in functions (class bodies see their own names).
        end = info.nlocalsplus if self.code.co_flags & CO_OPTIMIZED else info.nlocals_and_cells
        for i in range(end):
            yield info.localsplus[i], self.local_value(i)

    def local_slot(self, name):
        """The slot of fast local ``name`` as ``locals()`` shows it, or None."""
        info = self.info
        if name not in info.localsplus:
            return None
        i = info.localsplus.index(name)
        return i if i < info.nlocals_and_cells or self.code.co_flags & CO_OPTIMIZED else None

    def holds_cell(self, i) -> bool:
        """Does fast local ``i`` hold a cell (a cell variable once made, or a free variable)?"""
        return type(self.locals[i]) is types.CellType and (
            i >= self.info.nlocals_and_cells or self.info.localsplus[i] in self.code.co_cellvars)

    def local_value(self, i):
        """The value of fast local ``i``, a cell's contents for a cell (NULL: unbound)."""
        v = self.locals[i]
        return cell_value(v) if self.holds_cell(i) else v

    def copy(self, back=None):
        """An independent frame with the same state (locals, stack, position, shadows).

        Values are shared, containers of slots are not: resuming the copy later does not
        disturb this frame.  ``back`` is the copy's caller (for a copied call chain).
        """
        new = Frame(self.code, self.globals, self.builtins, self.fn, self.ns, list(self.locals),
                    list(self.stack), self.pc * 2, self.monitor)
        new.lasti = self.lasti
        new.kwnames = self.kwnames
        new.back = back
        if self.shadow_stack is not None:
            new.shadow_locals = list(self.shadow_locals)
            new.shadow_stack = list(self.shadow_stack)
        return new

    def __repr__(self):
        return (f"<monitored frame of {self.code.co_qualname} at "
                f"{self.code.co_filename}:{self.f_lineno}>")


def _builtins_of(globals):
    b = globals.get("__builtins__", None) if isinstance(globals, dict) else None
    if b is None:
        import builtins
        return builtins.__dict__
    if isinstance(b, types.ModuleType):
        return b.__dict__
    return b


def unsupported_python_message() -> str:
    versions = " or ".join("%d.%d" % v for v in bytecode.VERSIONS)
    return (f"magpy's monitor executes CPython {versions} bytecode, but this is "
            f"{sys.implementation.name} {sys.version.split()[0]}; run magpy on CPython {versions}")


class FrameLocals(collections.abc.MutableMapping):
    """``frame.f_locals`` of a monitored function frame on 3.13 (PEP 667): a write-through view
    of its fast locals, and beside them the names written here that are not locals."""

    __slots__ = ("_frame",)

    def __init__(self, frame: Frame):
        self._frame = frame

    def _extra(self) -> dict:
        f = self._frame
        if f.locals_dict is None:
            f.locals_dict = {}
        return f.locals_dict

    def __getitem__(self, name):
        f = self._frame
        i = f.local_slot(name)
        if i is None:
            return self._extra()[name]
        v = f.local_value(i)
        if v is NULL:
            raise KeyError(name)
        return v

    def __setitem__(self, name, value):
        f = self._frame
        i = f.local_slot(name)
        if i is None:
            self._extra()[name] = value
            return
        if f.holds_cell(i):
            f.locals[i].cell_contents = value
        else:
            f.locals[i] = value
        if f.shadow_locals is not None:
            f.shadow_locals[i] = None   # a value the monitor did not see arrive

    def __delitem__(self, name):
        if self._frame.local_slot(name) is not None:
            raise ValueError("cannot remove local variables from FrameLocalsProxy")
        del self._extra()[name]

    def __iter__(self):
        yield from (name for name, v in self._frame.fast_locals() if v is not NULL)
        yield from list(self._extra())

    def __len__(self):
        return sum(1 for _ in self)

    def __repr__(self):
        return f"FrameLocalsProxy({dict(self)!r})"
